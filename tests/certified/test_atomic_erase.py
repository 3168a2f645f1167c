"""Erasure is part of the removal (issue 35): a Dask model whose Zarr store fails while the removed rows are zeroed
(a full disk) does not commit the removal — the rows are written back, the model is as before and a retry works —
and a store that cannot even be written back makes the model refuse every call until ``resync()`` succeeds."""

from __future__ import annotations

import errno

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
zarr = pytest.importorskip("zarr")
dask = pytest.importorskip("dask")

from lethe.certified.dask_backend import zarr_source  # noqa: E402
from lethe.certified.estimators import CertifiedLogisticRegression  # noqa: E402
from lethe.certified.transaction import ResyncRequiredError  # noqa: E402


def _model(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.1
    y = np.where(X @ rng.normal(size=4) > 0, 1, 0)
    path = str(tmp_path / "x.zarr")
    da.from_array(X, chunks=(16, 4)).to_zarr(path)
    A = da.from_zarr(path, chunks=(32, 4))
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="anchor", random_state=0).fit(A, y)
    est.remove([2])  # the cache primed
    return est, X, y


def _state(est):
    st = est.states_[0]
    return (st.w.tobytes(), st.residual_bound, st.n, est.active_.tobytes(), est.Y_.tobytes(),
            np.asarray(est.X_.compute()).tobytes(), est.n_removed_)


class _DiskFull:
    """``zarr.Array.set_orthogonal_selection`` that writes part of the first row, then fails ``times`` times."""

    def __init__(self, real, times: int) -> None:
        self.real, self.times, self.calls = real, times, 0

    def method(self):
        def set_orthogonal_selection(arr, selection, value, *args, **kwargs):
            return self(arr, selection, value, *args, **kwargs)

        return set_orthogonal_selection

    def __call__(self, arr, selection, value, *args, **kwargs):
        self.calls += 1
        if self.times > 0:
            self.times -= 1
            rows = np.atleast_1d(selection[0])
            self.real(arr, (rows[:1], slice(0, 2)), 0.0)  # a partial write before the failure
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real(arr, selection, value, *args, **kwargs)


@pytest.fixture(autouse=True)
def _synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def test_a_failed_store_erase_fails_the_removal_and_a_retry_works(tmp_path, monkeypatch):
    est, X, y = _model(tmp_path)
    ref, _, _ = _model(tmp_path / "ref")
    store = zarr_source(est.X_)
    before = _state(est)
    fail = _DiskFull(type(store).set_orthogonal_selection, times=1)
    monkeypatch.setattr(type(store), "set_orthogonal_selection", fail.method())
    with pytest.raises(OSError, match="No space left"):
        est.remove([9])
    assert fail.calls == 2  # the erase, then the write-back of the saved row
    assert _state(est) == before  # nothing committed; the partly zeroed row written back
    np.testing.assert_array_equal(np.asarray(store[9]), X[9])
    cert = est.remove([9])  # the retry works (the row is not "already removed")
    assert cert.to_dict() | {"seconds": 0} == ref.remove([9]).to_dict() | {"seconds": 0}  # as if never failed
    assert not np.any(np.asarray(store[9]))  # erased in the store


def test_a_store_that_cannot_be_restored_refuses_every_call_until_resync(tmp_path, monkeypatch):
    est, X, y = _model(tmp_path)
    ref, _, _ = _model(tmp_path / "ref")
    store = zarr_source(est.X_)
    before_state = est.states_[0]
    fail = _DiskFull(type(store).set_orthogonal_selection, times=2)  # the erase AND its write-back fail
    monkeypatch.setattr(type(store), "set_orthogonal_selection", fail.method())
    with pytest.raises(ResyncRequiredError, match=r"resync\(\)"):
        est.remove([9])
    assert est.states_[0] is before_state and est.active_[9]  # nothing committed
    fail.times = 10  # the storage still fails: every call refuses, saying how to resync
    for call in (lambda: est.remove([11]), lambda: est.remove([9]), est.resync,
                 lambda: est.add(X[:1], y[:1])):
        with pytest.raises(ResyncRequiredError, match="free disk space"):
            call()
    fail.times = 0  # the storage works again
    est.resync()
    np.testing.assert_array_equal(np.asarray(store[9]), X[9])  # written back
    cert = est.remove([9])
    assert cert.to_dict() | {"seconds": 0} == ref.remove([9]).to_dict() | {"seconds": 0}
    assert not np.any(np.asarray(store[9]))


def test_a_model_fitted_again_drops_its_pending_record_after_writing_the_store_back(tmp_path, monkeypatch):
    est, X, y = _model(tmp_path)
    store = zarr_source(est.X_)
    fail = _DiskFull(type(store).set_orthogonal_selection, times=2)
    monkeypatch.setattr(type(store), "set_orthogonal_selection", fail.method())
    with pytest.raises(ResyncRequiredError):
        est.remove([9])
    est.fit(X, y)  # a new model (its own data): the old record must not roll anything of it back
    est.remove([5])  # the failed store's rows were written back first
    np.testing.assert_array_equal(np.asarray(store[9]), X[9])
    assert not est.active_[5] and est.active_[9]

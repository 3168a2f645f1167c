"""State handed between methods explicitly, not through module-level tables keyed by ``id()`` (issue 34, "Hidden
state"): the rows ``remove`` validated reach ``remove_rows`` as its argument."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import lethe.certified.estimators_logistic as logistic_mod
from lethe.certified.estimators import CertifiedLogisticRegression


def _unit_rows(n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, (X[:, 0] > 0).astype(int)


def test_no_module_table_holds_the_model_during_a_removal():
    """Inside the certified call no dict of the module has an entry under the model's id (mutation check: the old
    ``_CHECKED_ROWS``, a module dict id(model) → rows, fails it)."""
    X, y = _unit_rows(40, 3, seed=0)
    found: list[str] = []

    class Probe(CertifiedLogisticRegression):
        def remove_rows(self, idx: np.ndarray, *, random_state: Any = None) -> Any:
            found.extend(name for name, value in vars(logistic_mod).items()
                         if isinstance(value, dict) and id(self) in value)
            return super().remove_rows(idx, random_state=random_state)

    Probe(lam=1e-2, sigma=1.0, random_state=0).fit(X, y).remove([1])
    assert found == []


def test_remove_validates_once_and_the_hook_gets_the_rows(monkeypatch):
    X, y = _unit_rows(60, 3, seed=1)
    seen: list[list[int]] = []

    class Hooked(CertifiedLogisticRegression):
        def remove_rows(self, idx: np.ndarray, *, random_state: Any = None) -> Any:
            seen.append([int(i) for i in idx])
            return super().remove_rows(idx, random_state=random_state)

    model = Hooked(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    calls = []
    orig = logistic_mod.removal_rows  # the one validation of removal rows (lethe.estimator_data), counted
    monkeypatch.setattr(logistic_mod, "removal_rows", lambda *a, **k: calls.append(a) or orig(*a, **k))
    cert = model.remove([4, 2])
    assert seen == [[4, 2]] and len(calls) == 1 and cert.removed_indices == (4, 2)
    assert type(model.remove_rows(np.array([7]))).__name__ == "Certificate" and len(calls) == 2  # direct: checked


def test_rows_validated_before_the_model_changed_are_validated_again():
    """An override that removes the same row itself before handing the validated rows on: the rows were checked
    against a state that no longer holds, so they are checked again and refused (never removed twice)."""
    X, y = _unit_rows(60, 3, seed=2)

    class Eager(CertifiedLogisticRegression):
        def remove_rows(self, idx: np.ndarray, *, random_state: Any = None) -> Any:
            if not self.inner_:
                self.inner_ = True
                self.remove([int(idx[0])])
            return super().remove_rows(idx, random_state=random_state)

    model = Eager(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    model.inner_ = False
    with pytest.raises(ValueError, match="removed"):
        model.remove([3])
    assert model.n_removed_ == 1


def test_rows_kept_from_an_earlier_call_are_validated_again():
    X, y = _unit_rows(60, 3, seed=3)

    class Keeper(CertifiedLogisticRegression):
        def remove_rows(self, idx: np.ndarray, *, random_state: Any = None) -> Any:
            self.kept_.append(idx)
            return super().remove_rows(idx, random_state=random_state)

    model = Keeper(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    model.kept_ = []
    model.remove([5])
    with pytest.raises(ValueError, match="removed"):
        CertifiedLogisticRegression.remove_rows(model, model.kept_[0])
    assert model.n_removed_ == 1


def test_the_matrix_free_threshold_is_one_plain_setting_every_backend_reads(monkeypatch):
    """One module constant (``lethe.certified._limits.MATRIX_FREE_MIN_FEATURES``), read at each call by the sparse and
    the Dask backends; ``lethe.certified.data.MATRIX_FREE_MIN_FEATURES`` reads and sets the same value. Mutation
    check: the old callback registry (the value owned by ``data`` and only read through ``_limits``) fails it."""
    import scipy.sparse as sp

    import lethe.certified._limits as limits_mod
    import lethe.certified.data as data_mod
    from lethe.certified.data import backend_of

    A = sp.csr_matrix(np.ones((3, 5)))
    assert data_mod.MATRIX_FREE_MIN_FEATURES == limits_mod.MATRIX_FREE_MIN_FEATURES == 2048
    assert not backend_of(A).matrix_free(A)
    monkeypatch.setattr(limits_mod, "MATRIX_FREE_MIN_FEATURES", 4)
    assert data_mod.MATRIX_FREE_MIN_FEATURES == 4 and backend_of(A).matrix_free(A)
    monkeypatch.setattr(data_mod, "MATRIX_FREE_MIN_FEATURES", 5)  # the documented name sets the one setting
    assert limits_mod.MATRIX_FREE_MIN_FEATURES == 5 and not backend_of(A).matrix_free(A)
    da = pytest.importorskip("dask.array")
    D = da.from_array(np.ones((3, 5)), chunks=(2, 5))
    assert not backend_of(D).matrix_free(D)
    monkeypatch.setattr(data_mod, "MATRIX_FREE_MIN_FEATURES", 4)
    assert backend_of(D).matrix_free(D) and backend_of(A).matrix_free(A)


def test_solvers_key_the_cache_through_its_public_advance():
    """``NewtonCache.advance`` is the public call the solvers make after a step (mutation check: the old private
    ``_advance`` fails it); the source of no solver module reaches for the private name."""
    from pathlib import Path

    import lethe.certified as certified_pkg

    from .test_alg2_owner import _fitted_cache

    _mech, cache, state, X, _y = _fitted_cache()
    n = X.shape[0]
    active = np.ones(n, dtype=bool)
    cache.advance(X, state.w, active)
    assert cache.synced_count(X, state.w, active) == n
    keep = active.copy()
    keep[[1, 5]] = False
    cache.advance(X, state.w, keep, removed=np.array([1, 5]))
    assert cache.synced_count(X, state.w, keep) == n - 2 and cache.synced_count(X, state.w, active) is None
    callers = [p.name for p in Path(certified_pkg.__file__).parent.glob("*.py") if "._advance(" in p.read_text()]
    assert callers == []


def test_no_module_calls_a_private_method_of_the_cache():
    """The solvers mark the cache stale and fold rows into its matrix through public methods (``invalidate``,
    ``fold_rows``), as they key it through ``advance`` (mutation check: the old private calls ``_mark_dirty()`` in
    onepass, exact and anchor and ``_fold_rows`` in anchor_system fail it)."""
    import re
    from pathlib import Path

    import lethe

    root = Path(lethe.__file__).parent
    pokes = [f"{p.relative_to(root)}: {m.group(0)}" for p in sorted(root.rglob("*.py")) if p.name != "cache.py"
             for m in re.finditer(r"\bcache\._[a-z]\w*", p.read_text())]
    assert pokes == []


class _Thing:
    pass


class _FakeClient:
    """Stands in for a ``distributed.Client``: counts the scatters."""

    def __init__(self) -> None:
        self.scatters = 0

    def scatter(self, parts):
        self.scatters += 1
        return [("future", self.scatters, k) for k in range(len(parts))]


def test_scattered_labels_follow_the_client_object_not_its_address(monkeypatch):
    """Labels scattered to a cluster are reused for the same client object only: a client created where a dead one
    lived (same ``id``) scatters again instead of being handed the dead client's futures (mutation check: the old
    dict keyed by ``id(client)`` serves them)."""
    pytest.importorskip("distributed")
    import distributed

    from lethe.certified.dask_backend import _vector_parts as vector_parts  # the unit under test

    current: list[_FakeClient] = []
    monkeypatch.setattr(distributed, "get_client", lambda: current[0])
    y, chunks = np.arange(6, dtype=np.float64), (3, 3)
    keep = []
    for _ in range(1000):  # CPython hands a freed block to the next object of the same size, usually at once
        current.append(_FakeClient())
        first = vector_parts(y, chunks)
        assert vector_parts(y, chunks) is first and current[0].scatters == 1  # reused while the client lives
        old = id(current[0])
        current.clear()  # the client dies here (its futures with it)
        current.append(_FakeClient())
        if id(current[0]) == old:
            break
        keep.append(current.pop())  # not at the old address: kept alive, try again
    assert id(current[0]) == old  # the case under test did occur
    assert current[0].scatters == 0
    vector_parts(y, chunks)
    assert current[0].scatters == 1  # scattered to the new client, not served the dead one's futures


def test_a_new_object_at_a_recycled_address_is_not_served_the_old_ones_memo():
    """The Dask backend's per-array memo (stats pass, last Newton pass) serves an entry only to the very object it
    was kept for: an object created where a dead one lived (same ``id``) gets nothing, and a dead object's entry is
    dropped with it. (The old id()-keyed dicts checked the weak reference the same way; this pins the contract.)"""
    pytest.importorskip("dask.array")
    from lethe.certified.dask_backend import _ArrayMemo

    memo = _ArrayMemo()
    a = _Thing()
    memo.put(a, "stats of a")
    assert memo.get(a) == "stats of a" and memo.get(_Thing()) is None
    keep = []
    for _ in range(1000):  # CPython hands a freed block to the next object of the same size, usually at once
        a = _Thing()
        memo.put(a, "stats of a")
        old = id(a)
        del a  # no cycle: freed here, its entry dropped by its reference's callback
        assert len(memo) == 0
        b = _Thing()
        if id(b) == old:
            break
        keep.append(b)
    assert id(b) == old  # the case under test did occur
    assert memo.get(b) is None
    memo.put(b, "stats of b")
    assert memo.get(b) == "stats of b"


def test_dask_stats_follow_the_array_object_not_its_address():
    da = pytest.importorskip("dask.array")
    import gc

    import dask

    from lethe.certified.dask_backend import DASK

    with dask.config.set(scheduler="synchronous"):
        for k in range(1, 6):
            X = np.full((6, 2), float(k))
            A = da.from_array(X, chunks=(3, 2))
            assert DASK.stats(A)["frobenius_sq"] == pytest.approx(float(np.sum(X * X)))
            del A
            gc.collect()

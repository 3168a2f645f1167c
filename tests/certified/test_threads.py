"""The BLAS thread choice of lethe.certified._threads: applied inside lethe's calls, restored afterwards."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from lethe.certified import _threads
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache


def _blas_threads() -> list[int]:
    return [m["num_threads"] for m in threadpool_info() if m["user_api"] == "blas"]


def test_threads_are_set_inside_and_restored(monkeypatch):
    monkeypatch.setenv("LETHE_BLAS_THREADS", "1")
    with threadpool_limits(2, user_api="blas"):
        outer = _blas_threads()
        with _threads.blas_threads():
            assert set(_blas_threads()) == {1}
        assert _blas_threads() == outer


def test_inherit_leaves_the_threads_alone(monkeypatch):
    monkeypatch.setenv("LETHE_BLAS_THREADS", "inherit")
    with threadpool_limits(2, user_api="blas"):
        outer = _blas_threads()
        with _threads.blas_threads():
            assert _blas_threads() == outer


@pytest.mark.parametrize("bad", ["0", "-1", "two", ""])
def test_a_malformed_setting_is_refused_by_name(monkeypatch, bad):
    monkeypatch.setenv("LETHE_BLAS_THREADS", bad)
    with pytest.raises(ValueError, match="LETHE_BLAS_THREADS"):
        _threads.blas_thread_count()


def test_train_and_remove_run_with_the_configured_threads(monkeypatch):
    seen: list[list[int]] = []
    from lethe.certified import mechanism

    real = mechanism.compute_step

    def spy(*args, **kwargs):
        seen.append(_blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setenv("LETHE_BLAS_THREADS", "1")
    monkeypatch.setattr(mechanism, "compute_step", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver="pcg", bound="tight", calibration="analytic")
    cache = NewtonCache()
    with threadpool_limits(2, user_api="blas"):
        state, _ = mech.train(X, y, random_state=0, cache=cache)
        mech.remove(state, X, y, [3], cache=cache)
        assert seen and all(set(s) == {1} for s in seen)

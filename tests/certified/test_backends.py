"""The data interface (lethe.certified.data): every backend computes the same quantities as a dense reference, its
‖X‖₂ bound is an upper bound, and the mechanisms' certificates hold on every backend (bound ≥ exact residual,
computed independently in long double by ``exact_logistic_residual`` of test_soundness)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from lethe.certified import data as data_mod
from lethe.certified.data import SPARSE, backend_of, check_data_matrix, collatz_wielandt_bound, frobenius_bound
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache

from .test_soundness import exact_logistic_residual

BACKENDS = ["dense", "sparse"]


def as_backend(X: np.ndarray, kind: str):
    if kind == "dense":
        return np.array(X)
    return sp.csr_matrix(X)


def sparse_problem(seed: int, n: int, d: int, density: float, nonneg: bool):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (rng.uniform(size=(n, d)) < density)
    if nonneg:
        X = np.abs(X)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    X = X / np.maximum(norms, 1.0) / rng.uniform(1.0, 2.0, size=(n, 1))
    w_true = rng.normal(size=d) * 3.0
    y = np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-X @ w_true)), 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("kind", BACKENDS)
def test_backend_operations_agree_with_dense_reference(kind):
    rng = np.random.default_rng(0)
    X, _ = sparse_problem(1, 40, 15, 0.3, nonneg=False)
    A = as_backend(X, kind)
    B = backend_of(A)
    assert B.name == kind
    v, g, s = rng.normal(size=15), rng.normal(size=40), rng.uniform(size=40)
    np.testing.assert_allclose(B.matvec(A, v), X @ v, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(B.rmatvec(A, g), X.T @ g, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(np.triu(B.gram(A, s)), np.triu(X.T @ (s[:, None] * X)), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.triu(B.gram(A)), np.triu(X.T @ X), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(B.diag_gram(A, s), np.einsum("ij,ij,i->j", X, X, s), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(B.row_sq_norms(A), np.sum(X * X, axis=1), rtol=1e-13, atol=1e-15)
    assert B.frobenius_sq(A) == pytest.approx(float(np.sum(X * X)), rel=1e-13)
    rows = np.array([3, 0, 17])
    np.testing.assert_array_equal(B.take(A, rows), X[rows])
    mask = rng.uniform(size=40) < 0.5
    sub = B.subset(A, mask)
    assert backend_of(sub).name == kind
    np.testing.assert_array_equal(np.asarray(sub.toarray() if sp.issparse(sub) else sub), X[mask])
    assert 1 <= B.dot_terms(A) <= 15
    B.zero_rows(A, rows)
    dense_after = A.toarray() if sp.issparse(A) else A
    assert not np.any(dense_after[rows]) and np.array_equal(dense_after[[1, 2]], X[[1, 2]])


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 50), d=st.integers(1, 50),
       density=st.floats(0.0, 1.0), nonneg=st.booleans(), rank_one=st.booleans())
@settings(max_examples=150, deadline=None)
def test_matrix_free_spectral_bounds_are_upper_bounds(seed, n, d, density, nonneg, rank_one):
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-150, 150)
    X = rng.normal(size=(n, d)) * (rng.uniform(size=(n, d)) < density)
    if rank_one:
        X = np.outer(rng.normal(size=n), rng.normal(size=d)) * (rng.uniform(size=(n, d)) < density)
    if nonneg:
        X = np.abs(X)
    X *= scale
    exact = float(np.linalg.svd(X, compute_uv=False)[0]) if X.any() else 0.0
    exact *= 1.0 - 4 * (n + d) * 2.0**-53  # the reference is LAPACK's σ_max, itself accurate to ~ (n + d) u
    A = sp.csr_matrix(X)
    assert collatz_wielandt_bound(A, SPARSE) >= exact
    assert frobenius_bound(A, SPARSE) >= exact
    assert SPARSE.spectral_norm_bound(A) >= exact
    assert collatz_wielandt_bound(X, backend_of(X)) >= exact


def test_collatz_wielandt_bound_is_tight_for_nonnegative_data_and_a_lower_estimate_is_not_a_bound():
    """For X ≥ 0 (TF-IDF) the bound converges to ‖X‖₂. Mutation check: the Rayleigh-quotient estimate that power
    iteration gives (what a careless implementation would return) falls below ‖X‖₂ on signed data, so the property
    test above would fail on it."""
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(size=(300, 80))) * (rng.uniform(size=(300, 80)) < 0.1)
    exact = float(np.linalg.norm(X, 2))
    bound = collatz_wielandt_bound(sp.csr_matrix(X), SPARSE)
    assert exact <= bound <= exact * (1 + 1e-6)
    failures = 0
    for seed in range(20):
        r = np.random.default_rng(seed)
        Y = r.normal(size=(30, 20))
        u = r.normal(size=20)
        for _ in range(3):
            u = Y.T @ (Y @ u)
            u /= np.linalg.norm(u)
        rayleigh = float(np.linalg.norm(Y @ u))
        failures += rayleigh < np.linalg.norm(Y, 2)
    assert failures > 0


def test_check_data_matrix_accepts_sparse_and_names_a_non_finite_entry():
    X = sp.csr_matrix(np.array([[0.0, 1.0], [2.0, 0.0]], dtype=np.float32))
    A = check_data_matrix("X", X)
    assert sp.isspmatrix_csr(A) and A.dtype == np.float64
    bad = sp.csr_matrix(np.array([[0.0, 1.0], [np.nan, 0.0]]))
    with pytest.raises(ValueError, match=r"X must contain only finite values. Found nan at index \(1, 0\)"):
        check_data_matrix("X", bad)
    with pytest.raises(TypeError, match="X must be a NumPy array, a SciPy sparse matrix"):
        backend_of([[1.0]])


def _removal_run(mech, X, y, A, seed, batches, cache):
    n = X.shape[0]
    state, _ = mech.train(A, y, random_state=seed, cache=cache)
    assert exact_logistic_residual(state.w, state.b, X, y, mech.lam) <= state.residual_bound
    rng = np.random.default_rng(seed + 1)
    active = np.ones(n, dtype=bool)
    for m in batches:
        alive = np.flatnonzero(active)
        if alive.size - m < 2:
            break
        idx = rng.choice(alive, size=m, replace=False)
        state, cert = mech.remove(state, A, y, idx, active=active, cache=cache, random_state=rng)
        active[idx] = False
        truth = exact_logistic_residual(state.w, state.b, X[active], y[active], mech.lam)
        assert truth <= state.residual_bound, (truth, state.residual_bound, cert)
        assert state.residual_bound <= mech.budget
    return state


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(20, 100), d=st.integers(1, 30),
       density=st.floats(0.05, 1.0), lam=st.floats(1e-4, 1.0), sigma=st.floats(1e-2, 50.0),
       batches=st.lists(st.integers(1, 5), min_size=1, max_size=6),
       solver=st.sampled_from(["cholesky", "refine", "pcg", "anchor"]),
       bound=st.sampled_from(["paper", "tight"]), kind=st.sampled_from(BACKENDS))
@settings(max_examples=60, deadline=None)
def test_certificates_hold_on_every_backend(seed, n, d, density, lam, sigma, batches, solver, bound, kind):
    X, y = sparse_problem(seed, n, d, density, nonneg=bool(seed % 2))
    mech = CertifiedRemoval(lam=lam, sigma=sigma, solver=solver, bound=bound, calibration="analytic")
    _removal_run(mech, X, y, as_backend(X, kind), seed, batches, NewtonCache() if seed % 3 else None)


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(20, 100), d=st.integers(2, 40),
       density=st.floats(0.05, 1.0), lam=st.floats(1e-4, 1.0), sigma=st.floats(1e-2, 50.0),
       batches=st.lists(st.integers(1, 5), min_size=1, max_size=6),
       solver=st.sampled_from(["refine", "pcg"]), bound=st.sampled_from(["paper", "tight"]),
       cached=st.booleans())
@settings(max_examples=60, deadline=None)
def test_matrix_free_certificates_hold(seed, n, d, density, lam, sigma, batches, solver, bound, cached):
    """The matrix-free path (Jacobi preconditioner, no d × d matrix) that sparse data with many features takes,
    forced on small problems by lowering the threshold."""
    X, y = sparse_problem(seed, n, d, density, nonneg=bool(seed % 2))
    old = data_mod.MATRIX_FREE_MIN_FEATURES
    data_mod.MATRIX_FREE_MIN_FEATURES = 1
    try:
        A = sp.csr_matrix(X)
        assert backend_of(A).matrix_free(A)
        mech = CertifiedRemoval(lam=lam, sigma=sigma, solver=solver, bound=bound, calibration="analytic")
        cache = NewtonCache() if cached else None
        _removal_run(mech, X, y, A, seed, batches, cache)
        if cache is not None:
            assert cache.M is None and (cache.factor is None or cache.factor[0].ndim == 1)  # no d × d matrix
    finally:
        data_mod.MATRIX_FREE_MIN_FEATURES = old


def test_solvers_that_need_dense_matrices_refuse_clearly():
    X, y = sparse_problem(0, 40, 6, 0.5, nonneg=True)
    A = sp.csr_matrix(X)
    with pytest.raises(ValueError, match="solver='onepass' needs a dense NumPy data matrix"):
        CertifiedRemoval(lam=1e-2, solver="onepass").train(A, y, random_state=0, cache=NewtonCache())
    old = data_mod.MATRIX_FREE_MIN_FEATURES
    data_mod.MATRIX_FREE_MIN_FEATURES = 1
    try:
        for solver in ("anchor", "cholesky"):
            mech = CertifiedRemoval(lam=1e-2, solver=solver)
            state, _ = mech.train(A, y, random_state=0)
            with pytest.raises(ValueError, match=f"solver='{solver}' keeps d x d matrices"):
                mech.remove(state, A, y, [0])
    finally:
        data_mod.MATRIX_FREE_MIN_FEATURES = old


def test_sparse_and_dense_give_the_same_model():
    X, y = sparse_problem(5, 200, 30, 0.2, nonneg=True)
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver="pcg", bound="tight", calibration="analytic")
    s_dense, _ = mech.train(X, y, random_state=0)
    s_sparse, _ = mech.train(sp.csr_matrix(X), y, random_state=0)
    # the optimiser's paths differ (dense data: blocked evaluations and the preconditioned L-BFGS): both are within
    # their certified residuals of the one minimiser of the λn-strongly convex L_b (the same b: same random_state)
    np.testing.assert_array_equal(s_sparse.b, s_dense.b)
    gap = np.linalg.norm(s_sparse.w - s_dense.w)
    assert gap <= (s_sparse.residual_bound + s_dense.residual_bound) / (mech.lam * X.shape[0])
    assert s_sparse.x_norm_bound >= np.linalg.norm(X, 2)
    assert math.isclose(s_sparse.x_norm_bound, np.linalg.norm(X, 2), rel_tol=1e-6)  # X ≥ 0: Collatz is tight

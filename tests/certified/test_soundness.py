"""Soundness: every certified bound is >= the exact quantity, computed independently here, over random cases.

The exact gradient residual ‖∇L_b(w; D′)‖ is computed in this file from first principles (no lethe kernels), in
extended precision where cheap (np.longdouble), for random data, λ, σ, removal sequences and batch sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lethe.certified.bounds import spectral_norm_upper_bound
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache


def exact_logistic_residual(w, b, X, y, lam):
    """‖Σ ∇ℓ(wᵀxᵢ, yᵢ) + λ n w + b‖ for logistic loss, in long double, written independently of lethe."""
    Xl, yl, wl, bl = (np.asarray(a, dtype=np.longdouble) for a in (X, y, w, b))
    z = Xl @ wl
    d1 = -yl / (1 + np.exp(yl * z))  # ℓ'(z, y) = −y σ(−y z)
    g = Xl.T @ d1 + lam * Xl.shape[0] * wl + bl
    return float(np.sqrt(np.sum(g * g)))


def random_problem(seed, n, d, sep):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) * rng.uniform(1.0, 3.0, size=(n, 1))
    w_true = rng.normal(size=d) * sep
    y = np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-X @ w_true)), 1.0, -1.0)
    return X, y


@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(20, 120),
    d=st.integers(1, 12),
    lam=st.floats(1e-4, 1.0),
    sigma=st.floats(1e-2, 50.0),
    sep=st.floats(0.0, 20.0),
    batches=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    solver=st.sampled_from(["cholesky", "refine"]),
    noise=st.sampled_from(["gaussian", "laplace"]),
)
def test_accumulated_bound_dominates_exact_residual(seed, n, d, lam, sigma, sep, batches, solver, noise):
    X, y = random_problem(seed, n, d, sep)
    mech = CertifiedRemoval(loss="logistic", lam=lam, sigma=sigma, epsilon=1.0, delta=1e-4, noise=noise,
                            solver=solver)
    state, cert = mech.train(X, y, random_state=seed)
    assert exact_logistic_residual(state.w, state.b, X, y, lam) <= state.residual_bound
    rng = np.random.default_rng(seed + 1)
    active = np.ones(n, dtype=bool)
    cache = NewtonCache() if solver == "refine" else None
    Xw = X.copy()
    for m in batches:
        alive = np.flatnonzero(active)
        if alive.size - m < 2:
            break
        idx = rng.choice(alive, size=m, replace=False)
        state, cert = mech.remove(state, Xw, y, idx, active=active, cache=cache, random_state=rng)
        active[idx] = False
        Xw[idx] = 0.0  # as the estimators do: removed rows are zeroed; the mask must make them irrelevant
        truth = exact_logistic_residual(state.w, state.b, X[active], y[active], lam)
        assert truth <= state.residual_bound, (truth, state.residual_bound, cert)
        assert state.residual_bound <= mech.budget  # never leaves a model over budget
        assert cert.residual_bound == state.residual_bound
        assert state.n == active.sum()


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 60), d=st.integers(1, 40))
def test_spectral_norm_bound_is_an_upper_bound(seed, n, d):
    rng = np.random.default_rng(seed)
    scale = rng.uniform(1e-3, 1e3)
    X = rng.normal(size=(n, d)) * scale
    if rng.uniform() < 0.3:  # nearly rank-one matrices stress the eigensolver
        X = np.outer(rng.normal(size=n), rng.normal(size=d)) * scale + 1e-9 * X
    exact = np.linalg.svd(X.astype(np.longdouble).astype(np.float64), compute_uv=False)[0]
    assert spectral_norm_upper_bound(X) >= exact
    assert spectral_norm_upper_bound(X) <= exact * (1 + 1e-6) + 1e-12


def test_removing_rows_never_increases_the_spectral_norm():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 7))
    full = np.linalg.norm(X, 2)
    for _ in range(20):
        keep = rng.uniform(size=50) < 0.7
        assert np.linalg.norm(X[keep], 2) <= full + 1e-12


def test_budget_exhaustion_triggers_retraining_and_resets_the_bound():
    X, y = random_problem(3, 200, 5, 5.0)
    mech = CertifiedRemoval(loss="logistic", lam=1e-3, sigma=0.02, epsilon=1.0, delta=1e-4)
    state, _ = mech.train(X, y, random_state=0)
    active = np.ones(200, dtype=bool)
    rng = np.random.default_rng(0)
    saw_retrain = False
    for _ in range(60):
        i = int(rng.choice(np.flatnonzero(active)))
        old_b = state.b
        state, cert = mech.remove(state, X, y, [i], active=active, random_state=rng)
        active[i] = False
        assert state.residual_bound <= mech.budget
        if cert.retrained:
            saw_retrain = True
            assert cert.operation == "retrain"
            assert not np.array_equal(state.b, old_b)  # fresh perturbation
            assert state.removals_since_training == 0
            assert cert.step_bound > 0 and state.residual_bound < cert.step_bound + old_b.size * 0 + mech.budget
        assert exact_logistic_residual(state.w, state.b, X[active], y[active], mech.lam) <= state.residual_bound
    assert saw_retrain


@pytest.mark.parametrize("solver", ["cholesky", "refine"])
def test_least_squares_removal_equals_retraining(solver):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 10))
    y = X @ rng.normal(size=10) + 0.1 * rng.normal(size=300)
    mech = CertifiedRemoval(loss="squared", lam=1e-2, noise="none", solver=solver)
    state, _ = mech.train(X, y)
    active = np.ones(300, dtype=bool)
    cache = NewtonCache()
    for m in [1, 1, 5, 20, 1]:
        idx = rng.choice(np.flatnonzero(active), size=m, replace=False)
        state, cert = mech.remove(state, X, y, idx, active=active, cache=cache)
        active[idx] = False
        assert cert.epsilon == 0.0 and not cert.retrained
        Xa, ya = X[active], y[active]
        w_exact = np.linalg.solve(2 * Xa.T @ Xa + 1e-2 * Xa.shape[0] * np.eye(10), 2 * Xa.T @ ya)
        np.testing.assert_allclose(state.w, w_exact, rtol=1e-8, atol=1e-10)


def test_worst_case_bound_is_reported_but_not_used():
    X, y = random_problem(1, 100, 4, 2.0)
    mech = CertifiedRemoval(loss="logistic", lam=1e-2, sigma=5.0)
    state, _ = mech.train(X, y, random_state=0)
    _, cert = mech.remove(state, X, y, [0])
    # Thm 1: 4 γ C² / (λ² (n − 1)) with γ = 1/4, C = 1
    assert cert.worst_case_bound == pytest.approx(4 * 0.25 / (1e-4 * 99))
    assert cert.step_bound < cert.worst_case_bound


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 300), d=st.integers(1, 40),
       exp=st.integers(-60, 60), block=st.sampled_from([1, 7, 64, 1024]))
def test_single_precision_spectral_norm_bound_is_an_upper_bound(seed, n, d, exp, block):
    """The single-precision Gram bound dominates ‖X‖₂ (the SVD of the same float64 matrix, with a 1e-12 margin
    for the SVD's own error) for scales far from 1, nearly rank-one, tiny-entried and non-negative matrices and any
    block size; it stays within 1e-3 of it. Mutation-checked: without the Gram allowance A, or without the
    float32 conversion term, it fails."""
    from lethe.certified.bounds import _spectral_single_parts, spectral_norm_upper_bound_single

    d = min(d, n)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * 2.0**exp
    kind = rng.uniform()
    if kind < 0.3:
        X = np.outer(rng.normal(size=n), rng.normal(size=d)) * 2.0**exp + 1e-9 * X
    elif kind < 0.4:
        X[rng.uniform(size=X.shape) < 0.5] *= 1e-30  # entries far below the rest (float32 underflow)
    elif kind < 0.7:
        X = np.abs(X)  # non-negative (pixels): the rounding errors of the Gram matrix do not cancel
    exact = float(np.linalg.svd(X, compute_uv=False)[0])  # backward stable: relative error ~1e-15
    gram_bound, fro_bound = _spectral_single_parts(X, block)
    assert gram_bound >= exact * (1 + 1e-12)  # its allowance is >= u32 relative: far above the SVD's error
    fro_exact = float(np.sqrt(np.sum(X.astype(np.longdouble) ** 2)))  # >= ||X||_2, in long double
    assert fro_bound >= fro_exact
    bound = spectral_norm_upper_bound_single(X, block=block)
    assert bound == min(gram_bound, fro_bound)
    assert bound <= exact * (1 + 1e-3) + 1e-300

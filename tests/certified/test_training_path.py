"""Training (Alg. 1) by the blocked evaluation and the preconditioned L-BFGS: the certified β₀ still dominates the
exact training residual, computed independently in long double (``exact_logistic_residual`` of test_soundness).

The blocked evaluation sums each gradient entry Σᵢ x_ij ℓ'(zᵢ) block by block (another summation order than one
BLAS product); the L-BFGS preconditioner changes only the optimiser's path. Block sizes from 1 row to all rows and
both preconditioners (full R, scalar) are drawn here, so that the certified quantity is checked on every path.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lethe.certified.mechanism as mechanism
import lethe.certified.training as training
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache
from lethe.certified.training import Evaluation
from lethe.losses import get_loss

from .test_soundness import exact_logistic_residual, random_problem


@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(20, 150),
    d=st.integers(1, 12),
    lam=st.floats(1e-4, 1.0),
    sigma=st.floats(1e-2, 50.0),
    sep=st.floats(0.0, 20.0),
    block=st.integers(1, 160),
    spread=st.sampled_from([0.0, 2.0, np.inf]),
    rows=st.integers(1, 200),
    noise=st.sampled_from(["gaussian", "laplace"]),
    scale=st.floats(1.0, 1e6),
)
def test_training_residual_dominates_the_exact_one(seed, n, d, lam, sigma, sep, block, spread, rows, noise, scale):
    X, y = random_problem(seed, n, d, sep)
    mech = CertifiedRemoval(loss="logistic", lam=lam, sigma=sigma, epsilon=1.0, delta=1e-4, noise=noise,
                            solver="pcg")
    # a tolerance far below the default makes the rounding allowance the part that matters
    mech = CertifiedRemoval(loss="logistic", lam=lam, sigma=sigma, epsilon=1.0, delta=1e-4, noise=noise,
                            solver="pcg", tol=mech.budget / scale)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "_EVAL_BLOCK_MIN_ROWS", block)
        mp.setattr(training, "_EVAL_BLOCK_BYTES", 8)
        mp.setattr(training, "_PRECOND_SPREAD", spread)
        mp.setattr(training, "_PRECOND_ROWS", rows)
        try:
            state, cert = mech.train(X, y, random_state=seed, cache=NewtonCache(), defer_setup=True)
        except RuntimeError as exc:  # the tolerance was not reachable in float64: refused, nothing certified
            assert "tolerance" in str(exc) or "exceeds" in str(exc)
            return
    truth = exact_logistic_residual(state.w, state.b, X, y, lam)
    assert truth <= state.residual_bound, (truth, state.residual_bound)
    assert cert.residual_bound == state.residual_bound


@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_blocked_evaluation_matches_the_unblocked_products(block, monkeypatch):
    """The blocked pass returns the value, gradient and ‖ℓ'‖ of the two-product evaluation (to rounding)."""
    rng = np.random.default_rng(block)
    X = rng.normal(size=(150, 9)) / 4.0
    y = np.where(rng.uniform(size=150) < 0.5, 1.0, -1.0)
    b = rng.normal(size=9)
    w = rng.normal(size=9)
    loss = get_loss("logistic")
    monkeypatch.setattr(training, "_EVAL_BLOCK_MIN_ROWS", block)
    monkeypatch.setattr(training, "_EVAL_BLOCK_BYTES", 8)
    ev = Evaluation(X, y, loss, 0.1, b)
    assert ev.blocked and ev.rows == block
    val, g = ev(w)
    z = X @ w
    d1 = loss.d1(z, y)
    np.testing.assert_allclose(g, X.T @ d1 + 0.1 * 150 * w + b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(val, np.sum(loss.value(z, y)) + 0.05 * 150 * w @ w + b @ w, rtol=1e-12)
    np.testing.assert_allclose(ev.d1_norm, np.linalg.norm(d1), rtol=1e-12)
    assert ev.at(w) and not ev.at(w + 1.0)


def test_preconditioner_is_chosen_by_the_spread_of_the_subsampled_hessian():
    """Ill-conditioned data get a full triangular factor of the subsampled Hessian, nearly isotropic data a scalar
    one; both factor that Hessian exactly where they are full."""
    rng = np.random.default_rng(0)
    loss = get_loss("logistic")
    n, d = 4000, 20
    iso = rng.normal(size=(n, d))
    iso /= np.linalg.norm(iso, axis=1, keepdims=True)
    skew = iso * np.geomspace(1.0, 1e-3, d)
    y = np.where(rng.uniform(size=n) < 0.5, 1.0, -1.0)
    R = training._lbfgs_preconditioner(skew, y, loss, 1e-3)
    assert R is not None and np.count_nonzero(np.triu(R, 1)) > 0
    k = n // training._PRECOND_ROWS
    Xs = skew[0:k * training._PRECOND_ROWS:k]
    H = 0.25 * (n / Xs.shape[0]) * Xs.T @ Xs + 1e-3 * n * np.eye(d)
    np.testing.assert_allclose(R.T @ R, H, rtol=1e-10, atol=1e-10)
    R_iso = training._lbfgs_preconditioner(iso, y, loss, 1e-3)
    assert R_iso is not None and np.count_nonzero(R_iso - np.diag(np.diag(R_iso))) == 0
    assert training._lbfgs_preconditioner(iso[:5], y[:5], loss, 1e-3) is None  # d² > 64 n


@pytest.mark.parametrize("d", [3, 17])
def test_first_anchor_removal_forms_one_gram_for_the_spectral_bound_and_the_anchor(d, monkeypatch):
    """The first removal after a deferred fit forms fl(XᵀX) once: the ‖X‖₂ bound (an upper bound on the exact
    largest singular value, computed here in long double by the power method on XᵀX to convergence, plus the
    float64 SVD) and the anchor's Gram matrix come from it; no single-precision Gram matrix is formed."""
    from lethe.certified import data as data_module

    rng = np.random.default_rng(d)
    X, y = random_problem(d, 300, d, 3.0)
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver="anchor", bound="tight", calibration="analytic")
    cache = NewtonCache()
    state, _ = mech.train(X, y, random_state=0, cache=cache, defer_setup=True)
    calls = []
    original_gram = data_module.DenseBackend.gram

    def counting_gram(self, X, s=None):
        calls.append(s is None)
        return original_gram(self, X, s)

    monkeypatch.setattr(data_module.DenseBackend, "gram", counting_gram)
    monkeypatch.setattr(mechanism, "spectral_norm_upper_bound_single",
                        lambda X: pytest.fail("a second (single-precision) Gram matrix was formed"))
    active = np.ones(X.shape[0], dtype=bool)
    state, _ = mech.remove(state, X, y, [int(rng.integers(300))], active=active, cache=cache, check_input=False)
    assert calls.count(True) == 1  # one unweighted Gram matrix (the weighted one is the anchor Hessian)
    G = np.asarray(X, dtype=np.longdouble).T @ np.asarray(X, dtype=np.longdouble)
    v = np.ones(d, dtype=np.longdouble)
    for _ in range(2000):
        v = G @ v
        v /= np.sqrt(np.sum(v * v))
    sigma_max = float(np.sqrt(v @ G @ v))
    assert sigma_max <= state.x_norm_bound
    assert np.linalg.norm(X, 2) <= state.x_norm_bound
    assert state.x_norm_bound <= np.linalg.norm(X, 2) * (1 + 1e-8)  # and it is tight

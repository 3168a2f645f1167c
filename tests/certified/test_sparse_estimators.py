"""The estimators accept a SciPy CSR matrix in fit (issue 14): same model as dense input, removals certified
(bound ≥ exact residual on the remaining rows), removed rows destroyed in the kept copy, save/load round trip."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from lethe.certified import data as data_mod
from lethe.estimators import CertifiedLinearRegression, CertifiedLogisticRegression

from .test_soundness import exact_logistic_residual


def text_like(seed: int, n: int, d: int):
    rng = np.random.default_rng(seed)
    X = np.abs(rng.normal(size=(n, d))) * (rng.uniform(size=(n, d)) < 0.08)
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    w = rng.normal(size=d) * 4
    y = np.where(X @ w + 0.3 * rng.normal(size=n) > 0, 1, 0)
    return X, y


@pytest.mark.parametrize("matrix_free", [False, True])
def test_logistic_regression_fits_and_removes_on_csr(matrix_free, tmp_path, monkeypatch):
    if matrix_free:
        monkeypatch.setattr(data_mod, "MATRIX_FREE_MIN_FEATURES", 1)
    X, y = text_like(0, 300, 60)
    A = sp.csr_matrix(X)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="pcg", random_state=0).fit(A, y)
    ref = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="pcg", random_state=0).fit(X, y)
    if not matrix_free:  # the same algorithm (L-BFGS, then chord steps preconditioned by the cache's anchor system)
        np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-9)
    else:
        # matrix-free data forms no d x d anchor system, so training is L-BFGS alone and stops at another point
        # below the gradient tolerance: both minimise the same λn-strongly convex L_b (same b), hence
        # ‖w_a − w_b‖ ≤ (‖∇L_b(w_a)‖ + ‖∇L_b(w_b)‖) / (λ n), with the gradients computed independently
        ys = np.where(y == 1, 1.0, -1.0)
        sa, sb = est.states_[0], ref.states_[0]
        np.testing.assert_array_equal(sa.b, sb.b)
        slack = (exact_logistic_residual(sa.w, sa.b, X, ys, est.lam)
                 + exact_logistic_residual(sb.w, sb.b, X, ys, est.lam)) / (est.lam * X.shape[0])
        assert np.linalg.norm(sa.w - sb.w) <= slack * (1 + 1e-9) + 1e-12
    assert sp.issparse(est.X_) and est.X_.nnz == A.nnz  # O(nnz) copy, never densified
    np.testing.assert_array_equal(est.predict(A), est.predict(X))
    rng = np.random.default_rng(1)
    for _ in range(15):
        i = int(rng.choice(np.flatnonzero(est.active_)))
        cert = est.remove([i])
        assert not np.any(est.X_[i].toarray())  # the removed record is destroyed in the kept copy
    st, act = est.states_[0], est.active_
    truth = exact_logistic_residual(st.w, st.b, X[act], np.where(y[act] == 1, 1.0, -1.0), est.lam)
    assert truth <= st.residual_bound == cert.residual_bound
    path = est.save(tmp_path / "m.npz")
    loaded = CertifiedLogisticRegression.load(path)
    assert sp.issparse(loaded.X_)
    np.testing.assert_array_equal(loaded.predict(A), est.predict(A))
    loaded.remove([int(np.flatnonzero(loaded.active_)[0])])


def test_linear_regression_exact_removal_on_csr():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 8)) * (rng.uniform(size=(120, 8)) < 0.5)
    y = X @ rng.normal(size=8) + 0.1 * rng.normal(size=120)
    est = CertifiedLinearRegression(lam=1e-2, solver="cholesky").fit(sp.csr_matrix(X), y)
    est.remove([3, 7])
    keep = np.ones(120, dtype=bool)
    keep[[3, 7]] = False
    Xa, ya = X[keep], y[keep]
    w = np.linalg.solve(2 * Xa.T @ Xa + 1e-2 * Xa.shape[0] * np.eye(8), 2 * Xa.T @ ya)
    np.testing.assert_allclose(est.coef_, w, rtol=1e-8, atol=1e-10)


def test_onepass_on_sparse_input_refuses_clearly():
    X, y = text_like(0, 50, 10)
    with pytest.raises(ValueError, match="solver='onepass' needs a dense NumPy data matrix"):
        CertifiedLogisticRegression(lam=1e-2, solver="onepass", random_state=0).fit(sp.csr_matrix(X), y)

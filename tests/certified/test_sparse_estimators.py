"""The estimators accept a SciPy CSR matrix in fit (issue 14): same model as dense input, removals certified
(bound ≥ exact residual on the remaining rows), removed rows destroyed in the kept copy, save/load round trip."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from lethe.certified import data as data_mod
from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression

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


# -- CSR data through the estimators' one validation entry point (merge of issue 14 with the API fixes) ------------
def _csr_rows(seed: int, n: int, d: int) -> np.ndarray:
    """Sparse-looking rows: norms spread around 1 (inside, just above by float32 rounding, far outside, huge, zero)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (rng.uniform(size=(n, d)) < 0.4)
    X *= rng.choice([0.5, 1.0, 3.0, 1e200], size=(n, 1), p=[0.4, 0.3, 0.2, 0.1])
    X[0] = 0.0
    return X


@pytest.mark.parametrize("seed", range(20))
def test_row_rules_on_csr_match_the_dense_rule(seed):
    from lethe.preprocessing import check_unit_rows, normalize_rows, row_norms

    X = _csr_rows(seed, 40, 7)
    A = sp.csr_matrix(X)
    # same rule; the sums may run in another order (a few ulp)
    np.testing.assert_allclose(row_norms(A), row_norms(X), rtol=1e-14, atol=0)
    N = normalize_rows(A)
    assert sp.issparse(N) and N.nnz <= A.nnz
    np.testing.assert_allclose(N.toarray(), normalize_rows(X), rtol=0, atol=1e-15)
    assert np.all(row_norms(N) <= 1 + 1e-12)
    np.testing.assert_allclose(check_unit_rows(A.copy(), normalize=True).toarray(), normalize_rows(X), atol=1e-15)
    # normalize=False: the same refusal, naming the same first row
    if np.any(row_norms(X) > 1 + 1e-9):
        with pytest.raises(ValueError) as dense_err:
            check_unit_rows(X.copy())
        with pytest.raises(ValueError) as sparse_err:
            check_unit_rows(A.copy())
        assert str(sparse_err.value) == str(dense_err.value)
    # float32 rounding slack: rows normalised in float32 are scaled onto the sphere, not refused (as dense)
    F = (normalize_rows(X)).astype(np.float32)
    dense = check_unit_rows(F.astype(np.float64), source_dtype=np.float32)
    csr = check_unit_rows(sp.csr_matrix(F.astype(np.float64)), source_dtype=np.float32)
    np.testing.assert_allclose(csr.toarray(), dense, rtol=0, atol=1e-15)
    assert np.all(row_norms(csr) <= 1 + 1e-9)


def test_csr_with_intercept_and_normalisation_matches_dense_and_certifies(tmp_path):
    X, y = text_like(3, 250, 30)
    X = X * np.random.default_rng(3).uniform(0.2, 2.5, size=(250, 1))  # some rows outside the ball
    A = sp.csr_matrix(X)
    kw = dict(lam=1e-2, sigma=1.0, normalize_rows=True, fit_intercept=True, random_state=0)
    est = CertifiedLogisticRegression(**kw).fit(A, y, sample_ids=np.arange(250) + 1000)
    ref = CertifiedLogisticRegression(**kw).fit(X, y)
    assert sp.issparse(est.X_) and est.X_.shape == (250, 31)
    np.testing.assert_allclose(est.X_.toarray(), ref.X_, rtol=0, atol=1e-15)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(est.decision_function(A), ref.decision_function(X), rtol=1e-6, atol=1e-9)
    for key in (1003, 1010, 1100):
        cert = est.remove(keys=[key])
        row = key - 1000
        assert not np.any(est.X_[row].toarray()) and est.keys_[row] == 0
        assert est.X_.indptr[row + 1] == est.X_.indptr[row]  # not even which features the record had remains
    st, act = est.states_[0], est.active_
    truth = exact_logistic_residual(st.w, st.b, est.X_.toarray()[act], np.where(y[act] == 1, 1.0, -1.0), est.lam)
    assert truth <= st.residual_bound == cert.residual_bound
    est.set_params(lam=0.5)
    with pytest.raises(ValueError, match="parameters changed since fit"):
        est.save(tmp_path / "refused.npz")
    est.set_params(lam=1e-2)
    loaded = CertifiedLogisticRegression.load(est.save(tmp_path / "m.npz"))
    assert all(loaded.X_.indptr[r + 1] == loaded.X_.indptr[r] for r in (3, 10, 100))  # nor in the file
    assert sp.issparse(loaded.X_) and loaded.trained_params_ == est.trained_params_
    np.testing.assert_array_equal(loaded.predict(A), est.predict(A))
    loaded.remove(keys=[1020])


def test_add_to_a_csr_model_matches_dense():
    X, y = text_like(4, 200, 20)
    kw = dict(lam=1e-2, sigma=1.0, random_state=0)
    est = CertifiedLogisticRegression(**kw).fit(sp.csr_matrix(X[:150]), y[:150])
    ref = CertifiedLogisticRegression(**kw).fit(X[:150], y[:150])
    c1 = est.add(sp.csr_matrix(X[150:]), y[150:])
    c2 = ref.add(X[150:], y[150:])
    assert sp.issparse(est.X_) and est.X_.shape == (200, 20)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-9)
    assert c1.residual_bound == pytest.approx(c2.residual_bound, rel=1e-6)
    st = est.states_[0]
    truth = exact_logistic_residual(st.w, st.b, X, np.where(y == 1, 1.0, -1.0), est.lam)
    assert truth <= st.residual_bound


def test_linear_regression_with_intercept_on_csr():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(100, 6)) * (rng.uniform(size=(100, 6)) < 0.5)
    y = 2.0 + X @ rng.normal(size=6)
    est = CertifiedLinearRegression(lam=1e-4, fit_intercept=True).fit(sp.csr_matrix(X), y)
    ref = CertifiedLinearRegression(lam=1e-4, fit_intercept=True).fit(X, y)
    assert sp.issparse(est.X_)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-8, atol=1e-10)
    assert est.intercept_ == pytest.approx(ref.intercept_, rel=1e-8)
    est.remove([5, 6])
    ref.remove([5, 6])
    np.testing.assert_allclose(est.predict(sp.csr_matrix(X)), ref.predict(X), rtol=1e-8, atol=1e-10)


def test_add_to_a_matrix_free_csr_model_refuses_clearly(monkeypatch):
    monkeypatch.setattr(data_mod, "MATRIX_FREE_MIN_FEATURES", 10)
    X, y = text_like(5, 120, 20)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(sp.csr_matrix(X[:100]), y[:100])
    before = est.coef_.copy()
    with pytest.raises(ValueError, match="add forms the d x d Hessian"):
        est.add(sp.csr_matrix(X[100:]), y[100:])
    assert est.X_.shape == (100, 20) and np.array_equal(est.coef_, before)

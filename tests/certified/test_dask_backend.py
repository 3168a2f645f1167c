"""The Dask backend on a LocalCluster with 2 worker processes (127.0.0.1): the same operations as the dense
reference, certificates that hold (bound ≥ exact residual, computed independently), removals that gather only the
removed rows (``anchor``: no pass over the data)."""

from __future__ import annotations

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from lethe.certified.dask_backend import DASK  # noqa: E402
from lethe.certified.data import backend_of, check_data_matrix  # noqa: E402
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache  # noqa: E402

from .test_soundness import exact_logistic_residual, random_problem  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address="127.0.0.1:0", memory_limit="1GiB")
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def test_dask_operations_agree_with_dense_reference(client):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(103, 7))
    A = da.from_array(X, chunks=(25, 4))
    A = check_data_matrix("X", A).persist()
    assert len(A.chunks[1]) == 1  # rows only
    B = backend_of(A)
    assert B is DASK
    v, g, s = rng.normal(size=7), rng.normal(size=103), rng.uniform(size=103)
    np.testing.assert_allclose(B.matvec(A, v), X @ v, rtol=1e-13)
    np.testing.assert_allclose(B.rmatvec(A, g), X.T @ g, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.triu(B.gram(A, s)), np.triu(X.T @ (s[:, None] * X)), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(B.diag_gram(A, s), np.einsum("ij,ij,i->j", X, X, s), rtol=1e-12)
    np.testing.assert_allclose(B.row_sq_norms(A), np.sum(X * X, axis=1), rtol=1e-13)
    assert B.frobenius_sq(A) == pytest.approx(float(np.sum(X * X)), rel=1e-13)
    rows = np.array([80, 3, 51])
    np.testing.assert_array_equal(B.take(A, rows), X[rows])
    mask = rng.uniform(size=103) < 0.5
    np.testing.assert_array_equal(B.subset(A, mask).compute(), X[mask])
    exact = float(np.linalg.norm(X, 2))
    assert exact <= B.spectral_norm_bound(A) <= exact * (1 + 1e-9)
    with pytest.raises(ValueError, match="X must contain only finite values"):
        check_data_matrix("X", da.from_array(np.array([[1.0, np.inf], [0.0, 1.0]]), chunks=1))


def test_fused_passes_agree_with_dense_reference_and_memos_match_bit_for_bit(client):
    """The stats pass and the one-pass Newton kernel (value, gradient, Hessian, Σℓ'²) against dense NumPy; the
    memoised results are returned only for exactly the same w / s (another s makes a pass of its own)."""
    from lethe.losses import get_loss

    rng = np.random.default_rng(3)
    X = rng.normal(size=(211, 6)) / 4
    y = np.where(rng.uniform(size=211) < 0.5, 1.0, -1.0)
    A = check_data_matrix("X", da.from_array(X, chunks=(40, 6)))
    st = DASK.stats(A)
    assert st["finite"]
    np.testing.assert_allclose(st["row_sq_norms"], np.sum(X * X, axis=1), rtol=1e-13)
    np.testing.assert_allclose(st["gram"], X.T @ X, rtol=1e-12, atol=1e-13)
    assert DASK.frobenius_sq(A) == pytest.approx(float(np.sum(X * X)), rel=1e-13)
    loss = get_loss("logistic")
    w = rng.normal(size=6)
    lsum, grad, H, d1sq = DASK.newton_pass(A, y, w, loss)
    z = X @ w
    assert lsum == pytest.approx(float(np.sum(loss.value(z, y))), rel=1e-12)
    np.testing.assert_allclose(grad, X.T @ loss.d1(z, y), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(H, X.T @ (loss.d2(z, y)[:, None] * X), rtol=1e-12, atol=1e-13)
    assert d1sq == pytest.approx(float(np.sum(loss.d1(z, y) ** 2)), rel=1e-12)
    np.testing.assert_array_equal(DASK.matvec(A, w), DASK.matvec(A.persist(), w))  # memo = a fresh pass
    s = loss.d2(DASK.matvec(A, w), y)
    np.testing.assert_allclose(np.triu(DASK.gram(A, s)), np.triu(X.T @ (s[:, None] * X)), rtol=1e-12, atol=1e-13)
    s2 = s.copy()
    s2[7] = 0.0  # another weight vector: not the memo
    np.testing.assert_allclose(np.triu(DASK.gram(A, s2)), np.triu(X.T @ (s2[:, None] * X)), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("seed", range(4))
def test_training_residual_from_the_fused_pass_is_an_upper_bound(client, seed):
    """β₀ reuses the gradient and ‖ℓ'‖ of the last Newton pass (Dask): it bounds the exact residual (long double,
    independent code) and is within rounding of it — a gradient from another point, or without b, fails this."""
    rs = np.random.default_rng(seed)
    n, d = int(rs.integers(60, 300)), int(rs.integers(2, 9))
    X, y = random_problem(100 + seed, n, d, float(rs.uniform(0.5, 6.0)))
    A = da.from_array(X, chunks=(int(rs.integers(7, 80)), d))
    mech = CertifiedRemoval(lam=float(10 ** rs.uniform(-3, -1)), sigma=float(rs.uniform(0.1, 3.0)), solver="anchor",
                            bound="tight", calibration="analytic")
    state, _ = mech.train(A, y, random_state=seed)
    exact = exact_logistic_residual(state.w, state.b, X, y, mech.lam)
    assert exact <= state.residual_bound <= exact + 1e-9 * (1.0 + mech.lam * n)


@pytest.mark.parametrize("solver,bound", [
    ("pcg", "tight"), ("anchor", "tight"),
    # every distributed pass costs ~0.1-0.3 s on the 2-core CI machine: the other solvers run in the slow profile
    pytest.param("refine", "paper", marks=pytest.mark.slow), pytest.param("cholesky", "paper", marks=pytest.mark.slow),
])
def test_certificates_hold_on_a_dask_cluster(client, solver, bound):
    X, y = random_problem(7, 240, 6, 5.0)
    A = da.from_array(X, chunks=(50, 6)).persist()  # on the workers, as a Zarr store would be
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver=solver, bound=bound, calibration="analytic")
    cache = NewtonCache()
    state, _ = mech.train(A, y, random_state=0, cache=cache)
    ref, _ = mech.train(X, y, random_state=0)
    # Dask trains by Newton steps from one fused pass each, the dense path by L-BFGS: both to the same tolerance
    np.testing.assert_allclose(state.w, ref.w, rtol=1e-4, atol=1e-6)
    assert exact_logistic_residual(state.w, state.b, X, y, mech.lam) <= state.residual_bound  # β₀ (fused gradient)
    rng = np.random.default_rng(1)
    active = np.ones(240, dtype=bool)
    for m in (1, 3):
        idx = rng.choice(np.flatnonzero(active), size=m, replace=False)
        state, cert = mech.remove(state, A, y, idx, active=active, cache=cache, random_state=rng)
        active[idx] = False
        truth = exact_logistic_residual(state.w, state.b, X[active], y[active], mech.lam)
        assert truth <= state.residual_bound, (truth, state.residual_bound, cert)


def test_anchor_removal_reads_only_the_removed_rows(client, monkeypatch):
    X, y = random_problem(3, 200, 5, 3.0)
    A = da.from_array(X, chunks=(40, 5)).persist()
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver="anchor", bound="tight", refresh="never")
    cache = NewtonCache()
    state, _ = mech.train(A, y, random_state=0, cache=cache)
    calls: list[str] = []
    for name in ("matvec", "rmatvec", "gram", "diag_gram", "row_sq_norms", "frobenius_sq", "loss_pass"):
        orig = getattr(DASK, name)

        def spy(*args, _name=name, _orig=orig, **kw):
            calls.append(_name)
            return _orig(*args, **kw)

        monkeypatch.setattr(DASK, name, spy)
    active = np.ones(200, dtype=bool)
    for i in (4, 77, 150):
        state, cert = mech.remove(state, A, y, [i], active=active, cache=cache, check_input=False)
        active[i] = False
        assert not cert.retrained
    assert calls == []  # no pass over the data: only DASK.take of the removed rows
    truth = exact_logistic_residual(state.w, state.b, X[active], y[active], mech.lam)
    assert truth <= state.residual_bound


def test_zarr_backed_data_is_read_from_the_store(client, tmp_path):
    pytest.importorskip("zarr")
    from lethe.certified.dask_backend import zarr_source

    X, y = random_problem(11, 150, 4, 3.0)
    path = str(tmp_path / "x.zarr")
    da.from_array(X, chunks=(16, 4)).to_zarr(path)
    A = da.from_zarr(path, chunks=(64, 4))
    assert zarr_source(A) is not None and zarr_source(A * 1.0) is None and zarr_source(A[:10]) is None
    rows = np.array([149, 0, 77])
    np.testing.assert_array_equal(DASK.take(A, rows), X[rows])
    np.testing.assert_array_equal(DASK.take(A * 2.0, rows), 2.0 * X[rows])  # derived arrays: through Dask
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver="anchor", bound="tight", calibration="analytic")
    cache = NewtonCache()
    state, _ = mech.train(A, y, random_state=0, cache=cache)
    active = np.ones(150, dtype=bool)
    for i in (3, 90):
        state, _ = mech.remove(state, A, y, [i], active=active, cache=cache)
        active[i] = False
    assert exact_logistic_residual(state.w, state.b, X[active], y[active], mech.lam) <= state.residual_bound


def test_estimator_fits_on_a_zarr_backed_dask_array_and_erases_removed_rows(client, tmp_path):
    pytest.importorskip("zarr")
    from lethe.certified.estimators import CertifiedLogisticRegression

    X, y = random_problem(5, 160, 4, 3.0)
    path = str(tmp_path / "x.zarr")
    da.from_array(X, chunks=(32, 4)).to_zarr(path)
    A = da.from_zarr(path, chunks=(64, 4))
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="anchor", random_state=0).fit(A, y)
    ref = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="anchor", random_state=0).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-4, atol=1e-6)  # Newton (Dask) vs L-BFGS (dense)
    np.testing.assert_array_equal(est.predict(A), est.predict(X))
    cert = est.remove([7, 100])
    assert not np.any(da.from_zarr(path)[[7, 100]].compute())  # erased in the store
    act = est.active_
    st = est.states_[0]
    assert exact_logistic_residual(st.w, st.b, X[act], y[act], est.lam) <= st.residual_bound == cert.residual_bound
    with pytest.raises(TypeError, match="cannot be saved with its data"):
        est.save(tmp_path / "m.npz")
    # any other Dask array is copied once into a Zarr store of the estimator's own, whose rows removal erases
    other = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="anchor", random_state=0).fit(A * 1.0, y)
    assert backend_of(other.X_) is DASK and other.X_ is not A
    other.remove([3])
    assert not np.any(other.X_[3].compute()) and np.array_equal(A[3].compute(), X[3])  # the source is untouched


def test_estimator_on_a_dask_dataframe_never_converts_it_to_numpy(client, monkeypatch):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    from lethe.certified.estimators import CertifiedLogisticRegression

    X, y = random_problem(11, 150, 4, 3.0)
    frame = dd.from_pandas(pd.DataFrame(X, columns=list("abcd"), index=np.arange(1000, 1150)), npartitions=3)

    def refuse(*_a, **_k):
        raise AssertionError("the Dask DataFrame was converted to NumPy")

    monkeypatch.setattr(type(frame), "__array__", refuse)
    monkeypatch.setattr(type(frame), "compute", refuse)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="anchor", random_state=0).fit(frame, y)
    ref = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="anchor", random_state=0).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-4, atol=1e-6)
    assert backend_of(est.X_) is DASK
    np.testing.assert_array_equal(est.predict(frame), ref.predict(X))
    cert = est.remove(keys=[1007])  # the frame's index names the records
    assert not np.any(est.X_[7].compute())
    st = est.states_[0]
    act = est.active_
    assert exact_logistic_residual(st.w, st.b, X[act], y[act], est.lam) <= st.residual_bound == cert.residual_bound


def test_parquet_through_a_dask_dataframe(client, tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    dd = pytest.importorskip("dask.dataframe")
    from lethe.certified.dask_backend import from_dataframe

    X, y = random_problem(13, 120, 3, 3.0)
    dd.from_pandas(pd.DataFrame(X, columns=["a", "b", "c"]), npartitions=3).to_parquet(str(tmp_path / "p"))
    A = from_dataframe(dd.read_parquet(str(tmp_path / "p")))
    assert backend_of(check_data_matrix("X", dd.read_parquet(str(tmp_path / "p")))) is DASK
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver="anchor", bound="tight", calibration="analytic")
    cache = NewtonCache()
    state, _ = mech.train(A, y, random_state=0, cache=cache)
    active = np.ones(120, dtype=bool)
    state, _ = mech.remove(state, A, y, [5, 60], active=active, cache=cache)
    active[[5, 60]] = False
    assert exact_logistic_residual(state.w, state.b, X[active], y[active], mech.lam) <= state.residual_bound

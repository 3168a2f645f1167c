"""Issue 15: ``solver="auto"``, the estimators' default — ``anchor`` where a d × d matrix may be kept, ``pcg``
elsewhere — resolved once per model from the data's backend and width, named in every certificate, saved with the
model and kept by the curator's versions."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from lethe.certified.adapter import CertifiedRemovalAdapter
from lethe.certified.data import MATRIX_FREE_MIN_FEATURES
from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache
from lethe.certified.newton import AUTO_ANCHOR_MAX_FEATURES, SOLVERS, resolve_solver
from lethe.io import load_npz, save_npz

from .._certified import exact_residual
from ._exact import grad_ld, norm_ld


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 2.0, size=(n, 1))
    y = np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _sparse_unit_rows(rng: np.random.Generator, n: int, d: int) -> sp.csr_matrix:
    X = sp.random(n, d, density=min(1.0, 8.0 / d), random_state=np.random.RandomState(int(rng.integers(2**31))),
                  format="csr")
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sp.csr_matrix(sp.diags(1.0 / norms) @ X)


def test_the_rule_reads_only_the_backend_and_the_width() -> None:
    wide = AUTO_ANCHOR_MAX_FEATURES
    assert resolve_solver("auto", np.zeros((3, 5))) == "anchor"
    assert resolve_solver("auto", np.zeros((2, wide))) == "anchor"  # d > n still anchor: the rule never reads n
    assert resolve_solver("auto", np.zeros((2, wide + 1))) == "pcg"
    assert resolve_solver("auto", sp.csr_matrix((4, MATRIX_FREE_MIN_FEATURES))) == "anchor"
    assert resolve_solver("auto", sp.csr_matrix((4, MATRIX_FREE_MIN_FEATURES + 1))) == "pcg"
    narrow = da.zeros((40, 8), chunks=(10, 8))
    assert resolve_solver("auto", narrow) == "anchor"
    wide_dask = da.zeros((4, MATRIX_FREE_MIN_FEATURES + 1), chunks=(2, -1))
    assert resolve_solver("auto", wide_dask) == "pcg"
    for s in SOLVERS:  # an explicit choice is kept as is
        assert resolve_solver(s, np.zeros((3, 5))) == s


@pytest.mark.parametrize("seed", range(6))
def test_auto_takes_exactly_the_steps_of_the_solver_it_resolves_to(seed: int) -> None:
    """Same data and seed: ``auto`` trains and removes bit for bit as the concrete solver as long as that solver
    certifies its steps within the budget (its certificates name it, never "auto"); every certified bound holds
    against the exact residual ‖∇L_b(w; D′)‖."""
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(150, 300)), int(rng.integers(2, 12))
    X, y = _unit_rows(rng, n, d)
    data = sp.csr_matrix(X) if seed % 2 == 1 else X
    kw = dict(lam=10 ** rng.uniform(-2, -1), sigma=1.0, bound="tight", calibration="analytic")
    auto, anchor = CertifiedRemoval(**kw, solver="auto"), CertifiedRemoval(**kw, solver="anchor")
    assert auto.resolved(data).solver == "anchor" and auto.resolved(data) is auto.resolved(data)
    ca, cb = NewtonCache(), NewtonCache()
    sa, _ = auto.train(data, y, random_state=seed, cache=ca)
    sb, _ = anchor.train(data, y, random_state=seed, cache=cb)
    np.testing.assert_array_equal(sa.w, sb.w)
    active = np.ones(n, dtype=bool)
    for _ in range(8):
        idx = rng.choice(np.flatnonzero(active), size=int(rng.integers(1, 4)), replace=False)
        sa, cert_a = auto.remove(sa, data, y, idx, active=active, cache=ca, random_state=seed)
        sb, cert_b = anchor.remove(sb, data, y, idx, active=active, cache=cb, random_state=seed)
        active[idx] = False
        assert cert_b.solver == "anchor" and not cert_b.retrained  # the setting keeps anchor within its budget
        assert cert_a.solver == "anchor" and "anchor mismatch" in cert_a.bound
        assert cert_a.residual_bound == cert_b.residual_bound and cert_a.retrained == cert_b.retrained
        np.testing.assert_array_equal(sa.w, sb.w)
        exact = exact_residual(auto, sa, X[active], y[active])
        assert exact <= sa.residual_bound, (exact, sa.residual_bound)


def _noise_dominated(seed: int, n: int = 300, d: int = 6) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Few rows, tiny λn and a large σ: ‖w‖ is large, so anchor's bounded remainder (global curvature, ‖X‖₂) is
    far looser than pcg's measured per-sample one and passes the budget at the first removal."""
    rng = np.random.default_rng(seed)
    X = np.abs(rng.normal(size=(n, d)))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > X[:, 1], 1.0, -1.0)
    return X, y, dict(lam=1e-3, sigma=1000.0, epsilon=0.2, delta=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_auto_falls_back_to_pcg_before_retraining(seed: int) -> None:
    """Where anchor's bounded step passes the budget, ``auto`` takes the step with pcg from the same state
    (its accounting restarted from the measured residual) instead of retraining, names pcg, stays on pcg until a
    retraining, and every bound holds against the exact residual."""
    X, y, kw = _noise_dominated(seed)
    rows = np.random.default_rng(seed + 10).choice(X.shape[0], size=12, replace=False)
    explicit = CertifiedLogisticRegression(**kw, solver="anchor", random_state=seed).fit(X, y)
    assert explicit.remove([int(rows[0])]).retrained  # anchor alone retrains here
    auto = CertifiedLogisticRegression(**kw, random_state=seed).fit(X, y)
    assert auto.solver_ == "anchor"
    keep = np.ones(X.shape[0], dtype=bool)
    for i in rows:
        cert = auto.remove([int(i)])
        keep[i] = False
        assert not cert.retrained and cert.solver == "pcg", (cert.solver, cert.retrained)
        assert auto.caches_[0].kind == "exact"
        exact = exact_residual(auto.mechanism_, auto.states_[0], X[keep], y[keep])
        assert exact <= cert.residual_bound <= cert.budget, (exact, cert.residual_bound)
    # a retraining returns the model to anchor (its cache is primed for the mechanism's own solver)
    mech = auto.mechanism_
    mech.retrain(auto.states_[0], auto.X_, auto.Y_[0], keep, np.random.default_rng(0), auto.caches_[0])
    assert auto.caches_[0].kind == "anchor"


def fallback_property(seed: int, n: int, d: int, lam: float, sigma: float, batches: list[int]) -> None:
    """``auto`` on data where anchor's bounded terms may or may not pass the budget (λn from 0.02 to 30, σ from 0.5
    to 3000): after every removal, whichever solver took it, the certified bound (β) is at least the exact residual
    ‖∇L_b(w; D′)‖ computed in long double, and a step over budget is a retraining, never a certificate above ε′."""
    rng = np.random.default_rng(seed)
    X = np.abs(rng.normal(size=(n, d))) if seed % 2 else rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 1.5, size=(n, 1))
    y = np.where(X @ rng.normal(size=d) + 0.2 * rng.normal(size=n) > 0, 1.0, -1.0)
    mech = CertifiedRemoval(lam=lam, sigma=sigma, bound="tight", calibration="analytic", solver="auto")
    cache = NewtonCache()
    state, _ = mech.train(X, y, random_state=seed, cache=cache)
    active = np.ones(n, dtype=bool)
    for m in batches:
        if active.sum() <= m + 2:
            break
        idx = rng.choice(np.flatnonzero(active), size=m, replace=False)
        state, cert = mech.remove(state, X, y, idx, active=active, cache=cache, random_state=seed)
        active[idx] = False
        assert cert.solver in ("anchor", "pcg") and cert.residual_bound <= cert.budget
        exact = norm_ld(grad_ld(state.w, state.b, X[active], y[active], lam))
        assert exact <= state.residual_bound, (exact, state.residual_bound, cert.solver)


FALLBACK_ARGS = dict(seed=st.integers(0, 2**31 - 1), n=st.integers(20, 150), d=st.integers(1, 8),
                     lam=st.floats(1e-3, 2e-1), sigma=st.floats(0.5, 3000.0),
                     batches=st.lists(st.integers(1, 3), min_size=3, max_size=12))
test_fallback_steps_stay_sound = settings(max_examples=40, deadline=None)(given(**FALLBACK_ARGS)(fallback_property))
test_fallback_steps_stay_sound_slow = pytest.mark.slow(
    settings(max_examples=2000, deadline=None)(given(**FALLBACK_ARGS)(fallback_property)))


def test_the_property_takes_the_fallback() -> None:
    """The strategy reaches the fallback: in the noise-dominated corner a pcg step is certified."""
    X, y, kw = _noise_dominated(1)
    mech = CertifiedRemoval(**kw, bound="tight", calibration="analytic", solver="auto")
    cache = NewtonCache()
    state, _ = mech.train(X, y, random_state=1, cache=cache)
    state, cert = mech.remove(state, X, y, [4], cache=cache, random_state=1)
    assert cert.solver == "pcg" and not cert.retrained


def test_fallback_in_one_vs_all_uses_each_class_s_share_of_the_joint_budget() -> None:
    rng = np.random.default_rng(0)
    F = np.abs(rng.normal(size=(300, 6)))
    F /= np.linalg.norm(F, axis=1, keepdims=True)
    y = np.argmax(F[:, :3], axis=1)
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=1000.0, epsilon=0.2, delta=1e-5, negative_subsample=1.0,
                                      random_state=0).fit(F, y)
    for i in rng.choice(300, size=10, replace=False):
        cert = clf.remove([int(i)])
        assert cert.retrained_classes == () and cert.residual_bound <= cert.budget
        assert {c.solver for c in cert.per_class if c is not None} <= {"anchor", "pcg"}


def test_estimators_default_to_auto_and_record_the_choice(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    X, y = _unit_rows(rng, 300, 6)
    assert CertifiedLogisticRegression().solver == "auto" and CertifiedLinearRegression().solver == "auto"
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    assert clf.solver_ == "anchor" and clf.trained_params_["solver"] == "auto"
    assert clf.remove([5]).solver == "anchor"
    reg = CertifiedLinearRegression(lam=1e-2).fit(X, y)
    assert reg.solver_ == "anchor" and reg.remove([0]).solver == "anchor"
    Xs = _sparse_unit_rows(rng, 200, MATRIX_FREE_MIN_FEATURES + 50)
    ys = np.where(rng.random(200) > 0.5, 1.0, -1.0)
    wide = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(Xs, ys)
    assert wide.solver_ == "pcg" and wide.remove([1]).solver == "pcg"
    # saved and loaded with its concrete solver (its anchor is formed again at the loaded w: a bound of its own,
    # which holds against the exact residual)
    path = clf.save(tmp_path / "m.npz")
    loaded = CertifiedLogisticRegression.load(path)
    assert loaded.solver == "auto" and loaded.solver_ == "anchor"
    cert = loaded.remove([9])
    assert cert.solver == "anchor"
    state, keep = loaded.states_[0], loaded.active_
    assert exact_residual(loaded.mechanism_, state, X[keep], loaded.Y_[0][keep]) <= cert.residual_bound


def _rewrite_meta(path: Path, out: Path, edit: dict[str, object], drop: tuple[str, ...] = ()) -> Path:
    """A copy of a saved model with its metadata edited."""
    arrays, meta = load_npz(path)
    meta.update(edit)
    for k in drop:
        meta.pop(k, None)
    return save_npz(out, arrays, meta)


def test_a_saved_solver_that_contradicts_the_parameters_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    X, y = _unit_rows(rng, 200, 5)
    pinned = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="pcg", random_state=0).fit(X, y)
    path = pinned.save(tmp_path / "p.npz")
    with pytest.raises(ValueError, match="solver"):
        CertifiedLogisticRegression.load(_rewrite_meta(path, tmp_path / "e.npz", {"solver": "anchor"}),
                                         trust_unauthenticated=True)
    # a file from before solver="auto" (no recorded solver) keeps the solver of its parameters
    old = CertifiedLogisticRegression.load(_rewrite_meta(path, tmp_path / "o.npz", {}, drop=("solver",)),
                                           trust_unauthenticated=True)
    assert old.solver_ == "pcg"
    auto = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    apath = auto.save(tmp_path / "a.npz")
    # "auto" accepts the recorded concrete solver even where the rule would choose another (a later release's rule)
    kept = CertifiedLogisticRegression.load(_rewrite_meta(apath, tmp_path / "k.npz", {"solver": "pcg"}),
                                            trust_unauthenticated=True)
    assert kept.solver_ == "pcg"
    with pytest.raises(ValueError, match="solver"):
        CertifiedLogisticRegression.load(_rewrite_meta(apath, tmp_path / "b.npz", {"solver": "fastest"}),
                                         trust_unauthenticated=True)


def test_set_params_after_fit_does_not_change_the_solver_silently() -> None:
    rng = np.random.default_rng(5)
    X, y = _unit_rows(rng, 200, 5)
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    clf.set_params(solver="pcg")
    with pytest.raises(ValueError, match="solver"):
        clf.remove([0])
    clf.set_params(solver="auto")
    assert clf.remove([0]).solver == "anchor"


def test_the_curator_keeps_the_version_s_concrete_solver() -> None:
    rng = np.random.default_rng(6)
    X, y = _unit_rows(rng, 150, 4)
    adapter = CertifiedRemovalAdapter({"lam": 1e-2, "sigma": 1.0})
    assert adapter.params["solver"] == "auto"
    artifact, cert = adapter.train(X, y, np.random.default_rng(0))
    assert artifact.meta["solver"] == "anchor" and cert["solver"] == "anchor"
    assert adapter.summary(artifact)["solver"] == "anchor"
    warm = adapter.restore(artifact, X.copy(), y, np.ones(150, dtype=bool))
    assert warm.estimator.solver_ == "anchor"
    # a version computed with pcg (e.g. under another release's rule) is continued with pcg
    artifact.meta["solver"] = "pcg"
    warm = adapter.restore(artifact, X.copy(), y, np.ones(150, dtype=bool))
    assert warm.estimator.solver_ == "pcg"
    _, cert = adapter.remove_warm(warm, np.array([3]), np.random.default_rng(1))
    assert cert["solver"] == "pcg"
    artifact.meta["solver"] = "no-such-solver"
    with pytest.raises(ValueError, match="solver"):
        adapter.restore(artifact, X.copy(), y, np.ones(150, dtype=bool))

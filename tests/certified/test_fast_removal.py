"""Property tests of the tighter bounds, the fast solvers and the analytic calibration (docs/tighter_bounds.md).

The truth is computed in this file from first principles and independently of lethe's kernels:

* per removal, the exact increment ∇L_b(w⁻; D′) − ∇L_b(w; D) of the gradient residual, in long double — every
  certified step bound must dominate its norm — and the exact accumulated residual ‖∇L_b(w; D′)‖;
* for each bound formula of :mod:`lethe.certified.bounds`, the exact vector it bounds, in 40-digit mpmath, checked
  against *every* candidate (not only their minimum);
* the exact δ(ε) of the Gaussian mechanism (Balle & Wang 2018, Thm 8), in mpmath.

Each property runs in the CI profile (60 examples) and, marked ``slow``, with ≥ 2000 examples (``make test-slow``).
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lethe.certified.bounds import anchor_bounds, remainder_bound_paper, remainder_bound_tight
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache
from lethe.certified.noise import epsilon_spent, residual_budget
from lethe.losses import LogisticLoss

from ._exact import assert_maintained_product

SLOW = 2000
LOGISTIC = LogisticLoss()


# -- independent truth ----------------------------------------------------------------------------------------------


def grad_ld(w, b, X, y, lam, loss):
    """∇L_b(w; D) = Σ ℓ'(wᵀxᵢ, yᵢ) xᵢ + λ n w + b in long double, written independently of lethe."""
    Xl, yl, wl, bl = (np.asarray(a, dtype=np.longdouble) for a in (X, y, w, b))
    z = Xl @ wl
    with np.errstate(over="ignore"):
        d1 = -yl / (1 + np.exp(yl * z)) if loss == "logistic" else 2 * (z - yl)
    return Xl.T @ d1 + np.longdouble(lam) * Xl.shape[0] * wl + bl


def norm_ld(g):
    return float(np.sqrt(np.sum(g * g)))


@st.composite
def problems(draw, max_n=100, max_d=10, loss="logistic"):
    seed = draw(st.integers(0, 2**31 - 1))
    n = draw(st.integers(12, max_n))
    d = draw(st.integers(1, max_d))
    kind = draw(st.sampled_from(["gauss", "unit", "duplicates", "samecols", "lowrank", "sparse", "tiny"]))
    sep = draw(st.floats(0.0, 30.0))
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if kind == "duplicates":
        X[n // 2:] = X[: n - n // 2]
    elif kind == "samecols":  # identical columns (merged in onepass's float32 copy)
        X[:, d // 2:] = X[:, :1]
    elif kind == "lowrank":
        X = np.outer(rng.normal(size=n), rng.normal(size=d)) + 1e-6 * X
    elif kind == "sparse":
        X *= rng.uniform(size=X.shape) < 0.3
    elif kind == "tiny":
        X *= 1e-3
    norms = np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300)
    if kind == "unit":
        X = X / norms
    elif loss == "logistic":
        X = X / np.maximum(norms, 1.0) / rng.uniform(1.0, 3.0, size=(n, 1))
    w_true = rng.normal(size=d) * sep
    if loss == "logistic":
        y = np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-np.clip(X @ w_true, -500, 500))), 1.0, -1.0)
    else:
        y = X @ w_true + rng.normal(size=n) * rng.uniform(0, 2)
    return seed, X, y


# -- 1. every step bound dominates the exact increment; the accumulated bound the exact residual ------------------


def _run_removals(mech, seed, X, y, batches, *, prime, zero_removed, loss="logistic", flush_every=16,
                  margins_every=4, fold_every=32):
    n = X.shape[0]
    cache = NewtonCache(flush_every=flush_every, margins_every=margins_every, fold_every=fold_every)
    state, _ = mech.train(X, y, random_state=seed, cache=cache if prime else None)
    assert norm_ld(grad_ld(state.w, state.b, X, y, mech.lam, loss)) <= state.residual_bound
    rng = np.random.default_rng(seed + 1)
    active = np.ones(n, dtype=bool)
    Xw = X.copy()
    for m in batches:
        alive = np.flatnonzero(active)
        if alive.size - m < 2:
            break
        idx = rng.choice(alive, size=m, replace=False)
        before = grad_ld(state.w, state.b, X[active], y[active], mech.lam, loss)
        new, cert = mech.remove(state, Xw, y, idx, active=active, cache=cache, random_state=rng)
        active[idx] = False
        if zero_removed:
            Xw[idx] = 0.0  # as the estimators do: removed rows are zeroed; the mask must make them irrelevant
        after = grad_ld(new.w, new.b, X[active], y[active], mech.lam, loss)
        if not cert.retrained:
            increment = norm_ld(after - before)
            assert increment <= cert.step_bound, ("step", increment, cert)
            parts = cert.solve_error + cert.error_allowance + cert.remainder_bound + cert.mismatch_bound
            assert cert.step_bound <= parts * (1 + 1e-12) + 1e-300
        truth = norm_ld(after)
        assert truth <= new.residual_bound, ("accumulated", truth, new.residual_bound, cert)
        if mech.noise != "none":
            assert new.residual_bound <= mech.budget  # never leaves a model over budget
        assert new.n == active.sum()
        state = new
    return state


STEP_ARGS = dict(
    problem=problems(),
    lam=st.floats(1e-4, 1.0),
    sigma=st.floats(1e-2, 100.0),
    batches=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    bound=st.sampled_from(["paper", "tight"]),
    solver=st.sampled_from(["cholesky", "refine", "pcg", "anchor", "onepass"]),
    calibration=st.sampled_from(["paper", "analytic"]),
    noise=st.sampled_from(["gaussian", "laplace"]),
    refresh=st.sampled_from(["auto", "never", 1, 3]),
    prime=st.booleans(),
    zero_removed=st.booleans(),
    flush_every=st.sampled_from([1, 2, 16]),
    margins_every=st.sampled_from([1, 2, 4]),
    fold_every=st.sampled_from([1, 3, 32]),
)


def step_property(problem, lam, sigma, batches, bound, solver, calibration, noise, refresh, prime, zero_removed,
                  flush_every, margins_every, fold_every):
    seed, X, y = problem
    mech = CertifiedRemoval(loss="logistic", lam=lam, sigma=sigma, epsilon=1.0, delta=1e-4, noise=noise,
                            solver=solver, bound=bound, calibration=calibration, refresh=refresh)
    _run_removals(mech, seed, X, y, batches, prime=prime, zero_removed=zero_removed, flush_every=flush_every,
                  margins_every=margins_every, fold_every=fold_every)


test_step_bounds_dominate_exact_increments = given(**STEP_ARGS)(step_property)


@pytest.mark.slow
@pytest.mark.parametrize("bound", ["paper", "tight"])
@pytest.mark.parametrize("solver", ["cholesky", "refine", "pcg", "anchor", "onepass"])
@settings(max_examples=SLOW)
@given(**{k: v for k, v in STEP_ARGS.items() if k not in ("bound", "solver")})
def test_step_bounds_dominate_exact_increments_slow(bound, solver, problem, lam, sigma, batches, calibration, noise,
                                                    refresh, prime, zero_removed, flush_every, margins_every,
                                                    fold_every):
    """≥ 2000 examples for each (bound mode, solver) pair."""
    step_property(problem, lam, sigma, batches, bound, solver, calibration, noise, refresh, prime, zero_removed,
                  flush_every, margins_every, fold_every)


SQUARED_ARGS = dict(
    problem=problems(loss="squared"),
    lam=st.floats(1e-4, 1.0),
    batches=st.lists(st.integers(1, 6), min_size=1, max_size=6),
    solver=st.sampled_from(["cholesky", "refine", "pcg", "anchor", "onepass"]),
    noise=st.sampled_from(["none", "gaussian"]),
    prime=st.booleans(),
)


def squared_property(problem, lam, batches, solver, noise, prime):
    """Least squares (γ = 0): the certificate is the measured solve error plus rounding allowances only."""
    seed, X, y = problem
    mech = CertifiedRemoval(loss="squared", lam=lam, sigma=1.0, noise=noise, solver=solver, bound="tight",
                            calibration="analytic")
    _run_removals(mech, seed, X, y, batches, prime=prime, zero_removed=True, loss="squared")


test_squared_loss_bounds = given(**SQUARED_ARGS)(squared_property)
test_squared_loss_bounds_slow = pytest.mark.slow(settings(max_examples=SLOW)(given(**SQUARED_ARGS)(squared_property)))


# -- 2. each bound formula against the exact vector it bounds (mpmath) ----------------------------------------------

mp.mp.dps = 40


def _mp_logistic_d1(z, y):
    return -y / (1 + mp.exp(y * z))


def _mp_logistic_d2(z):
    s = 1 / (1 + mp.exp(-z))
    return s * (1 - s)


def _rows(rng, n, d):
    X = rng.normal(size=(n, d))
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) / rng.uniform(1.0, 2.0, size=(n, 1))


def _up(x: mp.mpf) -> float:
    """A float64 ≥ the mpmath number (round up)."""
    f = float(x)
    return float(np.nextafter(f, np.inf)) if mp.mpf(f) < x else f


FORMULA_ARGS = dict(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 25),
    d=st.integers(1, 6),
    w_scale=st.floats(0.0, 40.0),
    v_log=st.floats(-7.0, 1.0),
    dw_log=st.floats(-7.0, 1.0),
    tau_log=st.floats(-16.0, -2.0),
)


def formula_property(seed, n, d, w_scale, v_log, dw_log, tau_log):
    rng = np.random.default_rng(seed)
    X = _rows(rng, n, d)
    y = np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0)
    w = rng.normal(size=d) * w_scale / math.sqrt(d)
    v = rng.normal(size=d) * 10.0**v_log
    w_a = w - rng.normal(size=d) * 10.0**dw_log
    Xm = [[mp.mpf(float(x)) for x in row] for row in X]
    dot = lambda row, u: mp.fsum(r * mp.mpf(float(c)) for r, c in zip(row, u, strict=True))  # noqa: E731
    z = [dot(row, w) for row in Xm]
    a = [dot(row, v) for row in Xm]
    c = [dot(row, w - w_a) for row in Xm]
    za = [dot(row, w_a) for row in Xm]
    tau = 10.0**tau_log
    s_hat = [_mp_logistic_d2(t) + mp.mpf(tau) * (1 if rng.uniform() < 0.5 else -1) for t in za]

    def vec(coef):  # Σᵢ coefᵢ xᵢ and its norm
        out = [mp.fsum(coef[i] * Xm[i][j] for i in range(n)) for j in range(d)]
        return mp.sqrt(mp.fsum(o * o for o in out))

    # remainder r = Σ [ℓ'(z + a) − ℓ'(z) − ℓ''(z) a] xᵢ and anchor mismatch Σ [ℓ''(z) − ŝ] a xᵢ
    r_coef = [_mp_logistic_d1(z[i] + a[i], y[i]) - _mp_logistic_d1(z[i], y[i]) - _mp_logistic_d2(z[i]) * a[i]
              for i in range(n)]
    mis_coef = [(_mp_logistic_d2(z[i]) - s_hat[i]) * a[i] for i in range(n)]
    r_true, mis_true = vec(r_coef), vec(mis_coef)

    x_norm = float(np.linalg.norm(X, 2)) * (1 + 1e-12)
    rho = float(np.max(np.linalg.norm(X, axis=1))) * (1 + 1e-15)
    a_abs = np.array([_up(abs(t)) for t in a])
    v_norm = float(np.linalg.norm(v)) * (1 + 1e-15)
    a_norm = _up(mp.sqrt(mp.fsum(t * t for t in a)))
    c_norm = _up(mp.sqrt(mp.fsum(t * t for t in c)))
    dw_norm = float(np.linalg.norm(w - w_a)) * (1 + 1e-15)
    gamma = LOGISTIC.gamma_exact

    # tight remainder: local curvature on the exact segments, and the global exact γ
    lo = np.array([float(min(z[i], z[i] + a[i])) for i in range(n)]) - 1e-12
    hi = np.array([float(max(z[i], z[i] + a[i])) for i in range(n)]) + 1e-12
    for lip in (LOGISTIC.d2_lipschitz_on(lo, hi), gamma):
        _, cands = remainder_bound_tight(a_abs, lip, x_norm, rho)
        for name, b in cands.items():
            assert r_true <= b, ("remainder", name, r_true, b)
    assert r_true <= remainder_bound_paper(LOGISTIC.gamma, x_norm, rho, v_norm, a_norm)
    # tight ≤ ½ paper at the same γ, and the local form ≤ the global one
    tight_global, _ = remainder_bound_tight(a_abs, gamma, x_norm, rho)
    assert tight_global <= 0.5 * remainder_bound_paper(gamma, x_norm, rho, v_norm, a_norm) * (1 + 1e-9) + 1e-300

    # anchor: every candidate of each group
    for mode, g in (("tight", gamma), ("paper", LOGISTIC.gamma)):
        _, _, cands = anchor_bounds(gamma=g, tau=tau, x_norm=x_norm, row_norm=rho, n_rows=n, v_norm=v_norm,
                                    a_norm=a_norm, dw_norm=dw_norm, c_norm=c_norm, mode=mode)
        for name, b in cands.items():
            truth = mis_true if name.startswith("mismatch/") else r_true
            assert truth <= b, (mode, name, truth, b)


test_bound_formulas_dominate_exact_vectors = given(**FORMULA_ARGS)(formula_property)
test_bound_formulas_dominate_exact_vectors_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**FORMULA_ARGS)(formula_property)))


def _mp_d3_abs(x):
    """|ℓ'''(x)| = σ(x)σ(−x)|1 − 2σ(x)| in mpmath, without cancellation: σ(x)σ(−x) = 1/(2 + 2 cosh x) and
    1 − 2σ(x) = −tanh(x/2). (The naive s(1 − s)(1 − 2s) loses all digits near 0 at any fixed precision.)"""
    x = mp.mpf(x)
    return abs(mp.tanh(x / 2)) / (2 + 2 * mp.cosh(x))


LIP_ARGS = dict(lo=st.floats(-60.0, 60.0), width=st.floats(0.0, 20.0))


def local_lipschitz_property(lo, width):
    hi = lo + width
    bound = float(LOGISTIC.d2_lipschitz_on(np.array([lo]), np.array([hi]))[0])
    grid = [lo + (hi - lo) * k / 64 for k in range(65)]
    grid += [t for t in (LOGISTIC.xi_star, -LOGISTIC.xi_star) if lo <= t <= hi]
    assert max(_mp_d3_abs(t) for t in grid) <= bound
    assert bound <= LOGISTIC.gamma_exact * (1 + 1e-9)


test_local_lipschitz_bound = given(**LIP_ARGS)(local_lipschitz_property)
test_local_lipschitz_bound_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**LIP_ARGS)(local_lipschitz_property)))


def test_exact_lipschitz_constant_of_logistic_curvature():
    """sup |ℓ'''| = 1/(6√3), attained at ±log(2 + √3) (docs/tighter_bounds.md §1)."""
    assert float(_mp_d3_abs(LOGISTIC.xi_star)) == pytest.approx(1 / (6 * math.sqrt(3)), rel=1e-15)
    xs = np.linspace(-30, 30, 60001)
    assert max(float(_mp_d3_abs(x)) for x in xs[::7]) <= LOGISTIC.gamma_exact * (1 + 1e-15)
    assert float(mp.diff(_mp_d3_abs, LOGISTIC.xi_star)) == pytest.approx(0.0, abs=1e-12)
    assert LOGISTIC.gamma_exact < LOGISTIC.gamma


# -- 3. analytic Gaussian calibration ---------------------------------------------------------------------------------


def exact_delta(eps, sigma, sens):
    """δ(ε) of N(0, σ²) at L2 sensitivity Δ (Balle & Wang 2018, Thm 8), in 50-digit mpmath."""
    with mp.workdps(50):
        e, s, d = mp.mpf(eps), mp.mpf(sigma), mp.mpf(sens)
        return mp.ncdf(d / (2 * s) - e * s / d) - mp.exp(e) * mp.ncdf(-d / (2 * s) - e * s / d)


CAL_ARGS = dict(eps=st.floats(0.01, 20.0), log_delta=st.floats(-12.0, -0.5), sigma=st.floats(1e-2, 1e3),
                frac=st.floats(0.0, 1.0))


def calibration_property(eps, log_delta, sigma, frac):
    delta = 10.0**log_delta
    budget = residual_budget(sigma, eps, delta, calibration="analytic")
    assert exact_delta(eps, sigma, budget) <= delta * (1 + 1e-9)
    assert exact_delta(eps, sigma, budget * (1 + 1e-6)) > delta  # exact: no room left
    paper_ok = exact_delta(eps, sigma, sigma * eps / math.sqrt(2 * math.log(1.5 / delta))) <= delta
    if paper_ok:
        assert budget >= residual_budget(sigma, eps, delta, calibration="paper") * (1 - 1e-9)
    else:
        with pytest.raises(ValueError, match="analytic"):
            residual_budget(sigma, eps, delta, calibration="paper")
    beta = frac * budget
    spent = epsilon_spent(beta, sigma, delta, "gaussian", calibration="analytic")
    assert spent <= eps * (1 + 1e-9)
    if beta > 0:
        assert exact_delta(spent, sigma, beta) <= delta * (1 + 1e-9)


test_analytic_calibration = given(**CAL_ARGS)(calibration_property)
test_analytic_calibration_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**CAL_ARGS)(calibration_property)))


def test_analytic_budget_values():
    # ε = 1, δ = 1e-4, σ = 10: paper 2.2803, analytic 3.1390 (1.38x)
    assert residual_budget(10.0, 1.0, 1e-4) == pytest.approx(2.28030, rel=1e-5)
    assert residual_budget(10.0, 1.0, 1e-4, calibration="analytic") == pytest.approx(3.13902, rel=1e-5)
    # ε = 10 is outside the paper's domain: its budget 2.28 would give δ = 2.3e-4 > 1e-4 (so it is refused); the
    # exact budget is smaller than the paper's claim
    with pytest.raises(ValueError, match="analytic"):
        residual_budget(1.0, 10.0, 1e-4)
    exact = residual_budget(1.0, 10.0, 1e-4, calibration="analytic")
    assert exact < 10.0 / math.sqrt(2 * math.log(1.5e4))
    assert exact_delta(10.0, 1.0, exact) <= 1e-4


# -- 4. mechanism behaviour -------------------------------------------------------------------------------------------


def _data(seed=0, n=300, d=8):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("solver", ["refine", "pcg", "anchor", "onepass"])
def test_same_seed_same_weights_bit_for_bit(solver):
    X, y = _data()
    runs = []
    for _ in range(2):
        mech = CertifiedRemoval(lam=1e-3, sigma=0.05, bound="tight", calibration="analytic", solver=solver)
        cache = NewtonCache()
        state, _ = mech.train(X, y, random_state=3, cache=cache)
        active = np.ones(300, dtype=bool)
        ws, bounds = [], []
        for i in np.random.default_rng(0).permutation(300)[:40]:
            state, cert = mech.remove(state, X, y, [int(i)], active=active, cache=cache, random_state=5)
            active[i] = False
            ws.append(state.w.copy())
            bounds.append(state.residual_bound)
        runs.append((np.array(ws), bounds))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]


@pytest.mark.parametrize("solver", ["refine", "pcg", "anchor", "onepass"])
def test_one_cache_shared_by_two_models_stays_sound(solver):
    """Misuse: a cache advanced by one model is passed with another; it must rebuild, not certify wrongly."""
    X, y = _data(1)
    mech = CertifiedRemoval(lam=1e-3, sigma=1.0, bound="tight", calibration="analytic", solver=solver)
    cache = NewtonCache()
    sa, _ = mech.train(X, y, random_state=0, cache=cache)
    sb, _ = mech.train(X, y, random_state=1)
    act_a, act_b = np.ones(300, dtype=bool), np.ones(300, dtype=bool)
    rng = np.random.default_rng(0)
    for k in range(20):
        if k % 2:
            i = int(rng.choice(np.flatnonzero(act_a)))
            sa, _ = mech.remove(sa, X, y, [i], active=act_a, cache=cache)
            act_a[i] = False
            assert norm_ld(grad_ld(sa.w, sa.b, X[act_a], y[act_a], mech.lam, "logistic")) <= sa.residual_bound
        else:
            i = int(rng.choice(np.flatnonzero(act_b)))
            sb, _ = mech.remove(sb, X, y, [i], active=act_b, cache=cache)
            act_b[i] = False
            assert norm_ld(grad_ld(sb.w, sb.b, X[act_b], y[act_b], mech.lam, "logistic")) <= sb.residual_bound


def test_tight_step_never_looser_than_paper_on_the_same_step():
    X, y = _data(2)
    keep = np.ones(300, dtype=bool)
    keep[[4, 9]] = False
    paper = CertifiedRemoval(lam=1e-3, sigma=1.0, bound="paper", solver="cholesky")
    tight = CertifiedRemoval(lam=1e-3, sigma=1.0, bound="tight", solver="cholesky")
    state, _ = paper.train(X, y, random_state=0)
    rp = paper.step(state, X, y, keep, np.array([4, 9]))
    rt = tight.step(state, X, y, keep, np.array([4, 9]))
    np.testing.assert_array_equal(rp.w_new, rt.w_new)
    assert rt.remainder_bound <= 0.5 * rp.remainder_bound * tight.loss_.gamma_exact / tight.loss_.gamma * (1 + 1e-9)
    assert rt.step_bound < rp.step_bound


def test_anchor_makes_no_data_pass_between_refreshes():
    """The anchor solver reads only the rows it removes: every other row of the (same) array is NaN at removal."""
    X, y = _data(3)
    mech = CertifiedRemoval(lam=1e-3, sigma=1.0, bound="tight", calibration="analytic", solver="anchor",
                            refresh="never")
    cache = NewtonCache()
    P = X.copy()
    state, _ = mech.train(P, y, random_state=0, cache=cache)  # the cache is keyed to the array object P
    active = np.ones(300, dtype=bool)
    for i in [5, 17, 33, 101]:
        P[:] = np.nan
        P[i] = X[i]
        state, cert = mech.remove(state, P, y, [i], active=active, cache=cache, check_input=False)
        active[i] = False
        assert np.all(np.isfinite(state.w)) and not cert.retrained and cert.refreshed in ("", "factor")
        truth = norm_ld(grad_ld(state.w, state.b, X[active], y[active], mech.lam, "logistic"))
        assert truth <= state.residual_bound


def test_least_squares_anchor_removal_equals_retraining():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 10))
    y = X @ rng.normal(size=10) + 0.1 * rng.normal(size=300)
    mech = CertifiedRemoval(loss="squared", lam=1e-2, noise="none", solver="anchor", bound="tight")
    cache = NewtonCache()
    state, _ = mech.train(X, y, cache=cache)
    active = np.ones(300, dtype=bool)
    for m in [1, 1, 5, 20, 1]:
        idx = rng.choice(np.flatnonzero(active), size=m, replace=False)
        state, cert = mech.remove(state, X, y, idx, active=active, cache=cache)
        active[idx] = False
        assert cert.epsilon == 0.0 and not cert.retrained and cert.refreshed in ("", "factor")
        Xa, ya = X[active], y[active]
        w_exact = np.linalg.solve(2 * Xa.T @ Xa + 1e-2 * Xa.shape[0] * np.eye(10), 2 * Xa.T @ ya)
        np.testing.assert_allclose(state.w, w_exact, rtol=1e-8, atol=1e-10)


def test_parameters_are_validated():
    for kw, word in [({"bound": "loose"}, "bound"), ({"calibration": "magic"}, "calibration"),
                     ({"solver": "qr"}, "solver"), ({"refresh": 0}, "refresh"), ({"refresh": "sometimes"}, "refresh"),
                     ({"refresh": True}, "refresh")]:
        with pytest.raises(ValueError, match=word):
            CertifiedRemoval(**kw)
    mech = CertifiedRemoval()
    assert (mech.bound, mech.calibration, mech.solver) == ("paper", "paper", "cholesky")  # the paper, by default


def test_certificate_reports_configuration_and_terms():
    X, y = _data(4)
    mech = CertifiedRemoval(lam=1e-3, sigma=1.0, bound="tight", calibration="analytic", solver="pcg")
    cache = NewtonCache()
    state, _ = mech.train(X, y, random_state=0, cache=cache)
    _, cert = mech.remove(state, X, y, [0, 1, 2], cache=cache)
    d = cert.to_dict()
    assert (d["bound_mode"], d["calibration"], d["solver"]) == ("tight", "analytic", "pcg")
    total = d["solve_error"] + d["error_allowance"] + d["remainder_bound"] + d["mismatch_bound"]
    assert d["step_bound"] == pytest.approx(total, rel=1e-12)
    assert d["epsilon_spent"] <= 1.0


def test_vector_accounting_is_used_and_sound_over_many_removals():
    """Tight mode: β grows by less than the triangle-inequality sum of step bounds (the measured error is carried
    and corrected, docs/tighter_bounds.md §4), and still dominates the exact residual after every removal."""
    X, y = _data(5, n=400, d=10)
    mech = CertifiedRemoval(lam=1e-3, sigma=5.0, bound="tight", calibration="analytic", solver="pcg")
    cache = NewtonCache()
    state, _ = mech.train(X, y, random_state=0, cache=cache)
    beta0, steps = state.residual_bound, 0.0
    active = np.ones(400, dtype=bool)
    for i in np.random.default_rng(0).permutation(400)[:120]:
        state, cert = mech.remove(state, X, y, [int(i)], active=active, cache=cache)
        active[i] = False
        assert not cert.retrained
        steps += cert.step_bound
        assert norm_ld(grad_ld(state.w, state.b, X[active], y[active], mech.lam, "logistic")) <= state.residual_bound
        assert cert.carried_error <= cache.carry_share * mech.budget * (1 + 1e-9) or cert.iterations > 0
    assert state.residual_bound < beta0 + steps


@pytest.mark.parametrize("solver", ["pcg", "anchor", "onepass"])
def test_cache_given_another_data_array_rebuilds(solver):
    """The cache is tied to the data array object: with another array (other rows) it must rebuild, not reuse."""
    X, y = _data(6)
    mech = CertifiedRemoval(lam=1e-3, sigma=1.0, bound="tight", calibration="analytic", solver=solver)
    cache = NewtonCache()
    state, _ = mech.train(X, y, random_state=0, cache=cache)
    X2 = X.copy()
    X2[:150] = np.roll(X2[:150], 1, axis=1)  # same shape and norms, other data
    state2, _ = mech.train(X2, y, random_state=0)
    state3, cert = mech.remove(state2, X2, y, [7], cache=cache)
    active = np.ones(300, dtype=bool)
    active[7] = False
    assert cert.refreshed in ("anchor", "hessian", "") and not cert.retrained
    assert norm_ld(grad_ld(state3.w, state3.b, X2[active], y[active], mech.lam, "logistic")) <= state3.residual_bound


# -- the single-precision pass of the onepass solver ----------------------------------------------------------------


def _with_duplicate_columns(rng, X, dup):
    """X with some columns replaced by copies of others (when ``dup``), and its column groups."""
    from lethe.certified.newton import column_groups

    if dup and X.shape[1] > 1:
        src = rng.integers(0, X.shape[1], size=X.shape[1])
        take = rng.uniform(size=X.shape[1]) < 0.5
        X = X.copy()
        X[:, take] = X[:, src[take]]
    return X, column_groups(X)


def _float32_copy(X, groups):
    """The float32 copy the onepass cache holds: one column per group of identical columns."""
    from lethe.certified.newton import _representatives

    return (X if groups is None else X[:, _representatives(groups)]).astype(np.float32)


def single_pass_property(seed, n, d, v_scale, spread, sparse, dup):
    """ζ of :func:`single_pass_margins` bounds |ãᵢ − xᵢᵀv| (exact value in long double) for rows with ‖xᵢ‖ ≤ 1,
    also with identical columns merged."""
    from lethe.certified.newton import single_pass_margins

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.exp(rng.uniform(-spread, 0.0, size=(n, d)))
    if sparse:
        X *= rng.uniform(size=X.shape) < 0.3
    X, groups = _with_duplicate_columns(rng, X, dup)
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)  # rows scaled: identical columns stay identical
    X32 = _float32_copy(X, groups)
    v = rng.normal(size=d) * np.exp(rng.uniform(-spread, 0.0, size=d)) * v_scale
    a, zeta = single_pass_margins(X32, v, 1.0, groups=groups)
    exact = np.asarray(X, dtype=np.longdouble) @ np.asarray(v, dtype=np.longdouble)
    err = float(np.max(np.abs(np.asarray(a, dtype=np.longdouble) - exact), initial=0.0))
    assert err <= zeta, (err, zeta)


SINGLE_ARGS = dict(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 60), d=st.integers(1, 800),
                   v_scale=st.sampled_from([1e-300, 1e-40, 1e-12, 1e-3, 1.0, 1e6, 1e300]),
                   spread=st.floats(0.0, 60.0), sparse=st.booleans(), dup=st.booleans())
test_single_pass_margin_error_bound = given(**SINGLE_ARGS)(single_pass_property)
test_single_pass_margin_error_bound_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**SINGLE_ARGS)(single_pass_property)))


def single_transpose_property(seed, n, d, p_scale, spread, sparse, block, dup):
    """The bound of :func:`single_pass_transpose` dominates ‖q̃ − Xᵀp‖₂ (exact value in long double), also with
    identical columns merged."""
    from lethe.certified.newton import single_pass_transpose

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.exp(rng.uniform(-spread, 0.0, size=(n, d)))
    if sparse:
        X *= rng.uniform(size=X.shape) < 0.3
    X, groups = _with_duplicate_columns(rng, X, dup)
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    X32 = _float32_copy(X, groups)
    p = rng.normal(size=n) * np.exp(rng.uniform(-spread, 0.0, size=n)) * p_scale
    q, err_bound = single_pass_transpose(X32, p, 1.0, block=block, groups=groups)
    exact = np.asarray(X, dtype=np.longdouble).T @ np.asarray(p, dtype=np.longdouble)
    err = float(np.sqrt(np.sum((np.asarray(q, dtype=np.longdouble) - exact) ** 2)))
    assert err <= err_bound, (err, err_bound)


TRANSPOSE_ARGS = dict(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 300), d=st.integers(1, 60),
                      p_scale=st.sampled_from([1e-300, 1e-40, 1e-12, 1e-3, 1.0, 1e6, 1e300]),
                      spread=st.floats(0.0, 60.0), sparse=st.booleans(), block=st.sampled_from([1, 7, 64, 2048]),
                      dup=st.booleans())
test_single_pass_transpose_error_bound = given(**TRANSPOSE_ARGS)(single_transpose_property)
test_single_pass_transpose_error_bound_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**TRANSPOSE_ARGS)(single_transpose_property)))


def test_column_groups_merge_exactly_identical_columns():
    """Identical columns (bit for bit) share a group, all others are apart; -0.0 and 0.0 differ in bits and are kept
    apart (a lost merge, never a wrong one)."""
    from lethe.certified.newton import _representatives, column_groups

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 6))
    X[:, 3] = X[:, 1]
    X[:, 5] = X[:, 1]
    X[:, 4] = X[:, 0] + 1e-300 * 0  # same values: merged
    X[:, 2] = np.nextafter(X[:, 0], np.inf)  # one ulp apart in every row: not merged
    g = column_groups(X)
    assert g is not None and list(g) == [0, 1, 2, 1, 0, 1]
    assert list(_representatives(g)) == [0, 1, 2]
    Z = np.zeros((4, 2))
    Z[:, 1] = -0.0
    assert column_groups(Z) is None
    assert column_groups(rng.normal(size=(5, 4))) is None


@given(z=st.floats(-800.0, 800.0))
def test_logistic_curvature_is_accurate(z):
    """ℓ''(z) = σ(z)σ(−z) from one exponential: relative error ≤ 1e-14 against mpmath (also where σ(z) ≈ 1, which
    the textbook s(1 − s) gets wrong), and within the 8u absolute error the bounds assume."""
    exact = float(mp.exp(-abs(mp.mpf(z))) / (1 + mp.exp(-abs(mp.mpf(z)))) ** 2)
    got = float(LOGISTIC.d2(np.array([z]), np.array([1.0]))[0])
    assert abs(got - exact) <= 1e-14 * exact + 1e-320
    assert abs(got - exact) <= 8 * 2.0**-53 * (1.0 + exact)


def test_onepass_forgets_removed_rows_and_flushes():
    """The float32 copy held by the cache has removed rows zeroed at once; the pending vector is applied to the
    data (flushed) every ``flush_every`` removals, and the bound stays sound throughout."""
    X, y = _data(7)
    mech = CertifiedRemoval(lam=1e-3, sigma=1.0, bound="tight", calibration="analytic", solver="onepass")
    cache = NewtonCache(flush_every=4)
    state, _ = mech.train(X, y, random_state=0, cache=cache)
    active = np.ones(300, dtype=bool)
    for i in [3, 50, 7, 9, 120, 200, 201, 5, 77]:
        state, cert = mech.remove(state, X, y, [i], active=active, cache=cache)
        active[i] = False
        assert not cert.retrained and cert.solver == "onepass"
        assert cache.X32 is not None and not np.any(cache.X32[~active]) and np.any(cache.X32[active])
        assert cache.P is not None and not np.any(cache.P[~active])
        assert norm_ld(grad_ld(state.w, state.b, X[active], y[active], mech.lam, "logistic")) <= state.residual_bound
    assert cache.flushes >= 2 and cache.since_flush < 4  # every 4 removals, or earlier on the charge threshold


@given(exp=st.integers(-320, 300), n=st.integers(1, 50), seed=st.integers(0, 2**31 - 1))
def test_vnorm_neither_underflows_nor_overflows(exp, n, seed):
    """vnorm agrees with the long-double norm to 1e-13 at every scale, incl. entries whose squares underflow."""
    from lethe.certified.bounds import vnorm

    x = np.random.default_rng(seed).normal(size=n) * 10.0**exp
    exact = float(np.sqrt(np.sum(np.asarray(x, dtype=np.longdouble) ** 2)))
    if exact == 0.0 or not np.all(np.isfinite(x)):
        return
    got = vnorm(x)
    assert abs(got - exact) <= 1e-13 * exact + 1e-323


def test_shared_float32_copy_is_used_only_when_its_zeroed_rows_are_right():
    """A shared copy may be used for a step only if exactly the inactive rows are zeroed, apart from rows that the
    step removes anyway; lookups for priming need an exact match."""
    from lethe.certified.newton import SharedFloat32Data

    X = np.arange(1.0, 41.0).reshape(10, 4)
    active = np.ones(10, dtype=bool)
    shared = SharedFloat32Data()
    assert shared.lookup(X, active) is None
    X32 = X.astype(np.float32)
    shared.store(X, X32, None, active)
    assert shared.lookup(X, active)[0] is X32 and shared.lookup(X.copy(), active) is None
    shared.zero(np.array([3]))  # another model took its step first
    assert shared.usable_for_step(X32, active, np.array([3]))
    assert not shared.usable_for_step(X32, active, np.array([5]))  # row 3 is zeroed but stays active
    assert not shared.usable_for_step(X32.copy(), active, np.array([3]))  # not this copy
    before = active.copy()
    before[7] = False  # inactive but not zeroed
    assert not shared.usable_for_step(X32, before, np.array([3]))
    assert shared.lookup(X, active) is None and shared.lookup(X, active & (np.arange(10) != 3))[0] is X32
    assert shared.lookup(X, active, removing=np.array([3]))[0] is X32  # priming for the step that removes row 3


def maintained_anchor_property(seed, n, d, fold_every, k, m):
    """Between steps of the ``anchor`` solver, checked against long double: (1) the product with the maintained M
    (stored matrix minus the queued rows, :func:`_mv_maintained`) is within the caller's γ_{d+2}‖M̃‖_F‖v‖ + ε_M‖v‖
    plus its own bound of the exact X′ᵀdiag(ŝ)X′v + λn′v; (2) the carried h̃ is within h_err of G̃(w − w_a).
    Removals come in batches of ``m`` rows (a batch of ≥ ``fold_every`` rows is folded by one rank-m update)."""

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = np.where(rng.uniform(size=n) < 0.5, 1.0, -1.0)
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, bound="tight", calibration="analytic", solver="anchor",
                            refresh="never")
    cache = NewtonCache(fold_every=fold_every)
    state, _ = mech.train(X, y, random_state=seed, cache=cache)
    active = np.ones(n, dtype=bool)
    order = rng.permutation(n)[: min(k * m, n - 2)]
    for j in range(0, order.size, m):
        i = order[j:j + m]
        state, cert = mech.remove(state, X, y, i, active=active, cache=cache, random_state=seed)
        active[i] = False
        if cert.retrained:
            return
        assert_maintained_product(cache, X, active, mech.lam, rng)
        dw = np.asarray(state.w, dtype=np.longdouble) - np.asarray(cache.w_anchor, dtype=np.longdouble)
        G = np.triu(cache.G) + np.triu(cache.G, 1).T
        h_exact = np.asarray(G, dtype=np.longdouble) @ dw
        assert norm_ld(np.asarray(cache.h_G, dtype=np.longdouble) - h_exact) <= cache.h_err


MAINTAINED_ARGS = dict(seed=st.integers(0, 2**31 - 1), n=st.integers(20, 80), d=st.integers(1, 12),
                       fold_every=st.sampled_from([1, 2, 5, 32]), k=st.integers(1, 12), m=st.integers(1, 8))
test_maintained_anchor_products_within_their_bounds = given(**MAINTAINED_ARGS)(maintained_anchor_property)
test_maintained_anchor_products_within_their_bounds_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**MAINTAINED_ARGS)(maintained_anchor_property)))


@pytest.mark.parametrize("solver", ["anchor", "onepass"])
def test_restart_after_refactorisation_without_iterations_is_certified(solver):
    """With ``max_sweeps=0`` a stale preconditioner is refactorised and the solve restarts from a new v with no
    PCG iteration: the certificate must then describe that v (it once described the discarded one)."""
    for seed in range(12):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(60, 5))
        X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
        y = np.where(X @ rng.normal(size=5) * 3 + rng.normal(size=60) > 0, 1.0, -1.0)
        mech = CertifiedRemoval(lam=1e-3, sigma=1.0, bound="tight", calibration="analytic", solver=solver,
                                refresh="never")
        cache = NewtonCache(max_sweeps=0, fold_every=4)
        state, _ = mech.train(X, y, random_state=seed, cache=cache)
        active = np.ones(60, dtype=bool)
        for i in rng.permutation(60)[:25]:
            before = grad_ld(state.w, state.b, X[active], y[active], mech.lam, "logistic")
            new, cert = mech.remove(state, X, y, [int(i)], active=active, cache=cache, random_state=seed)
            active[i] = False
            after = grad_ld(new.w, new.b, X[active], y[active], mech.lam, "logistic")
            if not cert.retrained:
                assert norm_ld(after - before) <= cert.step_bound
            assert norm_ld(after) <= new.residual_bound
            state = new


def test_changing_the_fold_interval_keeps_the_queued_rows():
    """Rows queued for the downdate of M are folded in, not dropped, when the queue is resized."""
    from lethe.certified.newton import _downdate, _mv_maintained

    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 4))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = np.where(rng.uniform(size=50) < 0.5, 1.0, -1.0)
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver="anchor", refresh="never")
    cache = NewtonCache(fold_every=4)
    mech.train(X, y, random_state=0, cache=cache)
    active = np.ones(50, dtype=bool)
    for i in (1, 2, 3):
        _downdate(cache, X, np.array([i]), mech.lam, track=True)
        active[i] = False
    assert cache.pend_k == 3
    cache.fold_every = 32
    _downdate(cache, X, np.array([4]), mech.lam, track=True)
    active[4] = False
    v = rng.normal(size=4)
    exact = X[active].T @ (cache.s_hat[active] * (X[active] @ v)) + mech.lam * active.sum() * v
    np.testing.assert_allclose(_mv_maintained(cache, v)[0], exact, rtol=1e-10, atol=1e-12)


def test_logistic_curvature_functions_take_scalars():
    assert LOGISTIC.d2(0.5, 1.0) == pytest.approx(float(LOGISTIC.d2(np.array([0.5]), np.array([1.0]))[0]))
    assert LOGISTIC.d3_abs(2.0) == pytest.approx(float(LOGISTIC.d3_abs(np.array([2.0]))[0]))
    assert LOGISTIC.d2_lipschitz_on(1.0, 3.0) == pytest.approx(LOGISTIC.gamma_exact, rel=1e-11)


def test_a_loss_with_only_the_interval_lipschitz_hook_gets_local_constants():
    """A loss that provides ``d2_lipschitz_on`` but not ``d2_lipschitz_abs`` (the hook the loss docs named first)
    still gets local constants, and the certificate still bounds the exact residual."""
    from lethe.losses import LogisticLoss

    class OnlyOn(LogisticLoss):
        d2_lipschitz_abs = None  # type: ignore[assignment]

        def d2_lipschitz_on(self, lo, hi):
            return LogisticLoss().d2_lipschitz_on(lo, hi)

    X, y = _data(11)
    for loss in (OnlyOn(), LogisticLoss()):
        mech = CertifiedRemoval(loss=loss, lam=1e-3, sigma=1.0, bound="tight", calibration="analytic", solver="pcg")
        cache = NewtonCache()
        state, _ = mech.train(X, y, random_state=0, cache=cache)
        active = np.ones(X.shape[0], dtype=bool)
        rems = []
        for i in (3, 9, 27):
            state, cert = mech.remove(state, X, y, [i], active=active, cache=cache)
            active[i] = False
            rems.append(cert.remainder_bound)
            exact = norm_ld(grad_ld(state.w, state.b, X[active], y[active], mech.lam, "logistic"))
            assert exact <= state.residual_bound
        if isinstance(loss, OnlyOn):
            rems_on = rems
    np.testing.assert_allclose(rems_on, rems, rtol=1e-9)  # the same local constants either way


@pytest.mark.parametrize("seed", range(4))
def test_training_with_the_pcg_preconditioner_is_certified_and_primes_at_w(seed):
    """With a ``pcg`` cache, training hands over from L-BFGS to chord-Newton steps preconditioned by the cache's
    anchor system at an earlier point w_c; the certified training residual dominates the exact one (long double), is
    within the tolerance plus its rounding allowance, and the removals' anchor system is formed again at the final w
    (so the cache equals one primed after loading the model: a service reproduces the estimator's bounds)."""
    rng = np.random.default_rng(seed)
    n, d = 400, 12
    X = rng.normal(size=(n, d)) + rng.normal(size=d)  # a common direction: an ill-conditioned Hessian
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X @ rng.normal(size=d) * 4 + rng.normal(size=n) > 0, 1.0, -1.0)
    mech = CertifiedRemoval(lam=1e-3, sigma=1.0, bound="tight", calibration="analytic", solver="pcg")
    cache = NewtonCache()
    state, _ = mech.train(X, y, random_state=seed, cache=cache)
    exact = norm_ld(grad_ld(state.w, state.b, X, y, mech.lam, "logistic"))
    assert exact <= state.residual_bound <= mech.train_tolerance(n) * (1 + 1e-6)
    assert cache.refreshes == 2 and cache.w_anchor is not None  # at w_c for the chord steps, then at w
    np.testing.assert_array_equal(cache.w_anchor, state.w)
    fresh = NewtonCache()
    mech.prime(fresh, state, X, y)
    assert fresh.M is not None and cache.M is not None
    np.testing.assert_array_equal(fresh.M, cache.M)
    active = np.ones(n, dtype=bool)
    for i in rng.permutation(n)[:5]:
        before = grad_ld(state.w, state.b, X[active], y[active], mech.lam, "logistic")
        state, cert = mech.remove(state, X, y, [int(i)], active=active, cache=cache)
        active[i] = False
        after = grad_ld(state.w, state.b, X[active], y[active], mech.lam, "logistic")
        assert norm_ld(after - before) <= cert.step_bound
        assert norm_ld(after) <= state.residual_bound

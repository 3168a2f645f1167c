"""The ``anchor`` solver's re-anchor with a measured residual (docs/tighter_bounds.md §5c), checked against long
double.

* :func:`lethe.certified.common.measured_residual` — g̃ ≈ ∇L_b(w; D) on the active rows and its rounding allowance:
  ‖g̃ − ∇L_b(w; D)‖ ≤ allowance, the exact gradient computed independently (long double, active rows only);
* removals whose anchor is re-formed and whose accounting restarts from the measured residual at (almost) every
  step (``remeasure_share=0``): every step bound dominates the exact increment and every accumulated bound the
  exact residual;
* mutation checks: a measured residual that forgets the mask (removed rows counted) or the allowance fails.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lethe.certified.anchor as anchor_module
from lethe.certified.common import measured_residual
from lethe.certified.mechanism import CertifiedRemoval, NewtonCache

from ._exact import grad_ld, norm_ld

SLOW = 2000


def _problem(seed, n, d, w_scale, keep_share):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) * rng.uniform(1.0, 2.0, size=(n, 1))
    y = np.where(rng.uniform(size=n) < 0.5, 1.0, -1.0)
    w = rng.normal(size=d) * w_scale
    b = rng.normal(size=d) * rng.uniform(0.0, 10.0)
    active = rng.uniform(size=n) < keep_share
    active[0] = True
    return X, y, w, b, active


def measured_property(seed, n, d, w_scale, keep_share, lam):
    X, y, w, b, active = _problem(seed, n, d, w_scale, keep_share)
    cfg = CertifiedRemoval(lam=lam, sigma=1.0, bound="tight", calibration="analytic", solver="anchor")
    g, err = measured_residual(cfg, w, b, X, y, active)
    exact = grad_ld(w, b, X[active], y[active], lam)
    assert norm_ld(np.asarray(g, dtype=np.longdouble) - exact) <= err


MEASURED_ARGS = dict(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 200), d=st.integers(1, 30),
                     w_scale=st.floats(1e-3, 1e3), keep_share=st.floats(0.0, 1.0), lam=st.floats(1e-6, 10.0))
test_measured_residual_within_its_allowance = given(**MEASURED_ARGS)(measured_property)
test_measured_residual_within_its_allowance_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**MEASURED_ARGS)(measured_property)))


def _anchor_walk(seed, n, d, lam, sigma, slope, cache, batches, zero_removed, *, within_budget=False):
    """Train an ``anchor`` model on random unit-ball rows, remove ``batches`` with ``cache``'s policy and check
    every step bound and accumulated bound against the exact quantity (long double); ``within_budget``: the
    accumulated bound also stays within the budget (no step is accepted over it)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-slope * X[:, 0])), 1.0, -1.0)
    mech = CertifiedRemoval(lam=lam, sigma=sigma, bound="tight", calibration="analytic", solver="anchor")
    state, _ = mech.train(X, y, random_state=seed, cache=cache)
    active = np.ones(n, dtype=bool)
    Xw = X.copy()
    for m in batches:
        alive = np.flatnonzero(active)
        if alive.size - m < 2:
            break
        idx = rng.choice(alive, size=m, replace=False)
        before = grad_ld(state.w, state.b, X[active], y[active], mech.lam)
        new, cert = mech.remove(state, Xw, y, idx, active=active, cache=cache, random_state=rng)
        active[idx] = False
        if zero_removed:
            Xw[idx] = 0.0
        after = grad_ld(new.w, new.b, X[active], y[active], mech.lam)
        if not cert.retrained:
            assert norm_ld(after - before) <= cert.step_bound
        assert norm_ld(after) <= new.residual_bound
        if within_budget:
            assert new.residual_bound <= mech.budget
        state = new
    return cache


def _remeasured_run(seed, n, d, lam, batches, zero_removed):
    """Re-anchor and measure before every step (share 0): the bounds stay upper bounds of the exact quantities."""
    return _anchor_walk(seed, n, d, lam, 1.0, 3, NewtonCache(remeasure_share=0.0), batches, zero_removed)


def remeasure_property(seed, n, d, lam, batches, zero_removed):
    _remeasured_run(seed, n, d, lam, batches, zero_removed)


REMEASURE_ARGS = dict(seed=st.integers(0, 2**31 - 1), n=st.integers(12, 80), d=st.integers(1, 10),
                      lam=st.floats(1e-4, 1.0), batches=st.lists(st.integers(1, 5), min_size=2, max_size=8),
                      zero_removed=st.booleans())
test_remeasured_anchor_steps_stay_sound = given(**REMEASURE_ARGS)(remeasure_property)
test_remeasured_anchor_steps_stay_sound_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**REMEASURE_ARGS)(remeasure_property)))


def test_remeasure_happens_and_restarts_the_accounting():
    cache = _remeasured_run(3, 60, 5, 1e-2, [1, 1, 1, 2], False)
    assert cache.remeasures >= 3


# -- mutation checks: a wrong measured residual must be caught ----------------------------------------------------


def _unmasked(cfg, w, b, X, y, active):
    """Wrong: the removed rows' gradients are kept (no mask)."""
    return measured_residual(cfg, w, b, X, y, np.ones_like(active))


def _no_allowance(cfg, w, b, X, y, active):
    g, _ = measured_residual(cfg, w, b, X, y, active)
    return g, 0.0


def test_mutation_unmasked_residual_fails_the_property():
    with pytest.raises(AssertionError):
        for seed in range(20):
            X, y, w, b, active = _problem(seed, 50, 4, 1.0, 0.5)
            cfg = CertifiedRemoval(lam=1e-2, sigma=1.0, bound="tight", calibration="analytic", solver="anchor")
            g, err = _unmasked(cfg, w, b, X, y, active)
            assert norm_ld(np.asarray(g, dtype=np.longdouble) - grad_ld(w, b, X[active], y[active], 1e-2)) <= err


def test_mutation_without_allowance_fails_the_property():
    with pytest.raises(AssertionError):
        for seed in range(200):
            X, y, w, b, active = _problem(seed, 200, 30, 100.0, 0.9)
            cfg = CertifiedRemoval(lam=1e-2, sigma=1.0, bound="tight", calibration="analytic", solver="anchor")
            g, err = _no_allowance(cfg, w, b, X, y, active)
            assert norm_ld(np.asarray(g, dtype=np.longdouble) - grad_ld(w, b, X[active], y[active], 1e-2)) <= err


def test_mutation_unmasked_residual_in_the_solver_breaks_a_certificate(monkeypatch):
    """The solver itself with the wrong measurement: some accumulated bound falls below the exact residual."""
    monkeypatch.setattr(anchor_module, "measured_residual", _unmasked)
    with pytest.raises(AssertionError):
        for seed in range(10):
            remeasure_property(seed, 40, 4, 1e-1, [3, 3, 3, 3], True)


# -- §5d: a step over budget from a stale anchor is taken again from a fresh one before retraining ----------------


def _retry_run(seed, n, d, lam, sigma, batches, zero_removed):
    """Default policy (measure at 70 % of the budget, rent-or-buy re-anchors) with a small budget, so that steps from
    stale anchors go over it and are retried from a fresh anchor: every step bound and accumulated bound stays above
    the exact quantity (long double)."""
    return _anchor_walk(seed, n, d, lam, sigma, 4, NewtonCache(), batches, zero_removed, within_budget=True)


def retry_property(seed, n, d, lam, sigma, batches, zero_removed):
    _retry_run(seed, n, d, lam, sigma, batches, zero_removed)


RETRY_ARGS = dict(seed=st.integers(0, 2**31 - 1), n=st.integers(20, 80), d=st.integers(1, 8),
                  lam=st.floats(1e-3, 1e-1), sigma=st.floats(0.05, 2.0),
                  batches=st.lists(st.integers(1, 3), min_size=4, max_size=30), zero_removed=st.booleans())
test_retried_anchor_steps_stay_sound = given(**RETRY_ARGS)(retry_property)
test_retried_anchor_steps_stay_sound_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**RETRY_ARGS)(retry_property)))


def test_retry_happens_instead_of_a_retraining():
    retries = sum(_retry_run(seed, 60, 4, 1e-2, 0.3, [1] * 40, True).reanchor_retries for seed in range(6))
    assert retries > 0


def test_mutation_retry_without_a_fresh_anchor_breaks_a_certificate(monkeypatch):
    """A retry that moves the anchor point to w without forming M̃ there (the mismatch of the stale M̃ is then not
    bounded, and the first attempt's downdate of the rows is applied a second time): some bound falls below the
    exact quantity."""
    original_step, original_build = anchor_module.anchor_step, anchor_module.build_anchor
    in_retry = []

    def step(*args, _reanchor=False, **kw):
        in_retry.append(_reanchor)
        try:
            return original_step(*args, _reanchor=_reanchor, **kw)
        finally:
            in_retry.pop()

    def build(cfg, w, X, y, active, cache, **kw):
        if in_retry and in_retry[-1]:  # claims an anchor at w (no drift left) but keeps the stale M̃
            cache.w_anchor = np.array(w, copy=True)
            cache.h_G, cache.h_err = np.zeros_like(w), 0.0
            return None
        return original_build(cfg, w, X, y, active, cache, **kw)

    monkeypatch.setattr(anchor_module, "anchor_step", step)
    monkeypatch.setattr(anchor_module, "build_anchor", build)
    with pytest.raises(AssertionError):
        for seed in range(40):
            _retry_run(seed, 60, 4, 1e-2, 0.3, [1] * 40, True)

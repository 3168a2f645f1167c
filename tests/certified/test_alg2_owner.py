"""Alg. 2's decisions in one place (issue 25): the mechanism's budget decision and its one-vs-all form, the joint
residual against an independent computation, the service's batch cap from Cor. 2's m² growth, and the solver
cache's own row mask (the hot path compares it once per removal, counts nothing, and is never fooled)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import lethe.certified.cache as cache_module
from lethe.certified.cache import NewtonCache, same_mask
from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.certified.mechanism import CertifiedRemoval, ModelState
from lethe.certified.one_vs_all import OneVsAllRemoval, joint_residual, next_batch_cap


def _independent_joint(betas: list[float], noise: str) -> float:
    """√Σβ² (Gaussian) or Σβ (Laplace) with exactly rounded sums (math.fsum), independently of NumPy."""
    return math.fsum(betas) if noise == "laplace" else math.sqrt(math.fsum(b * b for b in betas))


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_joint_bound_and_decision_match_an_independent_computation(noise: str) -> None:
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, epsilon=1.0, delta=1e-5, noise=noise, calibration="analytic")
    ova = OneVsAllRemoval(mech)
    rng = np.random.default_rng(0)
    for _ in range(500):
        k = int(rng.integers(1, 12))
        betas = list(rng.uniform(0, 1.2, size=k) * mech.budget / (k if noise == "laplace" else math.sqrt(k)))
        exact = _independent_joint(betas, noise)
        joint = ova.joint(betas)
        assert joint == pytest.approx(exact, rel=1e-14, abs=0)
        assert joint_residual(betas, noise) == joint
        states = [ModelState(w=np.zeros(2), b=np.zeros(2), n=3, residual_bound=b, x_norm_bound=1.0) for b in betas]
        assert ova.joint(states) == joint
        # the decision is the mechanism's, on the joint bound (away from the rounding of the boundary)
        if abs(exact - mech.budget) > 1e-12 * mech.budget:
            assert ova.within_budget(betas) is (exact <= mech.budget)
            assert mech.within_budget(joint) is (exact <= mech.budget)
        if not ova.within_budget(betas):
            with pytest.raises(ValueError, match="exceeds the budget"):
                ova.check_stored(betas)
        else:
            ova.check_stored(betas)
        # the share keeps the joint bound within the budget when every class is within it
        share = ova.share(k)
        assert _independent_joint([share] * k, noise) <= mech.budget * (1 + 1e-15)


def test_mutation_a_joint_bound_that_drops_a_class_is_caught() -> None:
    """Mutation check: the joint bound of the largest class alone (a plausible wrong 'max' rule) is below the
    exact joint bound for two equal classes, so the test above would fail with it."""
    betas = [0.6, 0.6]
    assert max(betas) < _independent_joint(betas, "gaussian")


def test_settle_retrains_in_order_until_the_joint_bound_fits_and_refuses_otherwise() -> None:
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, epsilon=1.0, delta=1e-5, calibration="analytic")
    ova = OneVsAllRemoval(mech)
    eps = mech.budget

    def st(beta: float) -> ModelState:
        return ModelState(w=np.zeros(2), b=np.zeros(2), n=3, residual_bound=beta, x_norm_bound=1.0)

    proposed = [st(0.8 * eps), st(0.7 * eps), st(0.1 * eps)]
    calls: list[int] = []

    def retrain(k: int) -> ModelState:
        calls.append(k)
        return st(0.01 * eps)

    states, retrained, beta = ova.settle(proposed, [0, 1, 2], retrain, "removed")
    assert calls == [0] and retrained == [0]  # after class 0: √(0.01² + 0.7² + 0.1²) ε′ ≤ ε′
    assert beta == ova.joint(states) and beta <= eps
    with pytest.raises(RuntimeError, match="Nothing was removed"):
        ova.settle(proposed, [0, 1, 2], lambda k: st(0.9 * eps), "removed")


def test_next_batch_cap_is_the_largest_batch_within_the_share() -> None:
    """cap = max(1, ⌊√(share · left · m² / remainder)⌋): the next batch's extrapolated remainder
    remainder · (cap/m)² stays within share · left, and one more row would pass it (checked exactly in integers of
    the squared quantities, away from rounding at the boundary)."""
    rng = np.random.default_rng(1)
    for _ in range(2000):
        m = int(rng.integers(1, 200))
        rem = float(rng.uniform(1e-8, 1e-2))
        left = float(rng.uniform(0, 1.0))
        share = float(rng.uniform(1e-3, 0.5))
        cap = next_batch_cap(rem, m, left, share)
        limit = share * left
        assert cap >= 1
        if cap > 1:
            assert rem * (cap / m) ** 2 <= limit * (1 + 1e-12)
        assert rem * ((cap + 1) / m) ** 2 > limit * (1 - 1e-12)


# -- the solver cache's row mask ------------------------------------------------------------------------------------


@pytest.mark.parametrize("memcmp", ["libc", "numpy"])
def test_same_mask_agrees_with_array_equal(memcmp: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways of comparing (the C library's memcmp, and NumPy where it is not available) agree with
    ``np.array_equal`` on random masks, one flipped row anywhere (including the tail after the last full word)."""
    if memcmp == "libc":
        assert cache_module._MEMCMP is not None, "memcmp is available on this platform"
    else:
        monkeypatch.setattr(cache_module, "_MEMCMP", None)
    rng = np.random.default_rng(2)
    for _ in range(300):
        n = int(rng.integers(0, 70))
        a = rng.random(n) < 0.6
        b = a.copy()
        if n and rng.random() < 0.6:
            b[int(rng.integers(0, n))] ^= True
        assert same_mask(a, b) is bool(np.array_equal(a, b))
        assert same_mask(a[::-1], b[::-1]) is bool(np.array_equal(a, b))  # non-contiguous views
    big = np.ones(1_000_003, dtype=bool)
    for flip in (0, 500_000, 1_000_002):
        other = big.copy()
        other[flip] = False
        assert not same_mask(big, other)
    assert same_mask(big, big.copy())
    assert not same_mask(np.ones(8, dtype=bool), np.ones(9, dtype=bool))
    assert not same_mask(np.ones(8, dtype=bool), np.ones(8, dtype=np.uint8))


def _fitted_cache(n: int = 60, d: int = 4, seed: int = 3) -> tuple[CertifiedRemoval, NewtonCache, ModelState,
                                                                   np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    mech = CertifiedRemoval(lam=1e-2, sigma=1.0, bound="tight", calibration="analytic", solver="anchor")
    cache = NewtonCache()
    state, _ = mech.train(X, y, random_state=0, cache=cache)
    return mech, cache, state, X, y


def test_matches_removal_is_matches_of_the_rows_before() -> None:
    """For random (keep, idx), the cache's O(m) + one-comparison check equals :meth:`matches` on keep ∪ idx, and the
    count it returns is the number of rows of keep."""
    mech, cache, state, X, y = _fitted_cache()
    n = X.shape[0]
    rng = np.random.default_rng(4)
    active = np.ones(n, dtype=bool)
    for _ in range(300):
        keep = active.copy() if rng.random() < 0.5 else rng.random(n) < 0.9
        idx = rng.choice(n, size=int(rng.integers(1, 4)), replace=False).astype(np.int64)
        if rng.random() < 0.7:
            keep[idx] = False
        before = keep.copy()
        before[idx] = True
        got = cache.matches_removal(X, state.w, keep, idx, "anchor")
        want = cache.matches(X, state.w, before, "anchor") and not np.any(keep[idx])
        assert (got is not None) is want
        if got is not None:
            assert got == int(np.count_nonzero(keep))
        assert cache.synced_count(X, state.w, active) == n  # the check leaves the cache's mask as it was
    assert cache.matches_removal(X, state.w + 1e-12, active & (np.arange(n) != 0), np.array([0]), "anchor") is None


def test_a_synced_removal_compares_the_mask_once_and_counts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot path: a removal from a synced anchor cache reads the O(n) mask once (one comparison), and the next
    removal is synced again (the mask advanced in O(m)); its certificate is the one without the shortcut."""
    mech, cache, state, X, y = _fitted_cache(n=80)
    active = np.ones(X.shape[0], dtype=bool)
    ref_cache, ref_state, ref_active = NewtonCache(), state, active.copy()
    mech.prime(ref_cache, state, X, y)
    ref_cache.vouch_removal = lambda keep, idx, n_keep: None  # type: ignore[method-assign]  # never vouches
    calls = {"same_mask": 0, "count": 0}
    real_same, real_count = cache_module.same_mask, np.count_nonzero

    def counting_same(a: np.ndarray, b: np.ndarray) -> bool:
        calls["same_mask"] += 1
        return real_same(a, b)

    for step, row in enumerate((5, 11, 40, 2)):
        monkeypatch.setattr(cache_module, "same_mask", counting_same)
        calls["same_mask"] = 0
        state, cert = mech.remove(state, X, y, [row], active=active, cache=cache, check_input=False)
        monkeypatch.setattr(cache_module, "same_mask", real_same)
        assert calls["same_mask"] == 1, f"removal {step}: {calls['same_mask']} mask comparisons"
        active[row] = False
        # the reference: the same removal with the check done the long way (a cache that never vouches)
        ref_state, ref_cert = mech.remove(ref_state, X, y, [row], active=ref_active, cache=ref_cache,
                                          check_input=False)
        ref_active[row] = False
        assert cert.residual_bound == ref_cert.residual_bound and np.array_equal(state.w, ref_state.w)
        assert cache.synced_count(X, state.w, active) == real_count(active)


def test_a_vouch_is_honoured_only_for_the_very_objects() -> None:
    mech, cache, state, X, y = _fitted_cache()
    n = X.shape[0]
    keep = np.ones(n, dtype=bool)
    keep[7] = False
    idx = np.array([7])
    wrong = np.ones(n, dtype=bool)
    wrong[[7, 8]] = False  # not keep ∪ idx = all rows
    cache.vouch_removal(keep, idx, n - 1)
    assert cache.matches_removal(X, state.w, wrong, idx, "anchor") is None  # another keep: compared, refused
    cache.vouch_removal(keep, idx, 12345)
    assert cache.matches_removal(X, state.w, keep, idx, "anchor") == 12345  # the very objects: taken on trust
    assert cache.matches_removal(X, state.w, keep, idx, "anchor") == n - 1  # consumed: compared again


def test_the_estimator_default_removal_is_unchanged_by_the_cache_shortcuts() -> None:
    """End to end: 30 single removals of the estimator's default path give the certificates of the same removals
    with a cache whose mask is compared in full every time (vouching disabled)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 6))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] + 0.2 * rng.normal(size=300) > 0, 1, -1)
    a = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    b = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    b.caches_[0].vouch_removal = lambda *args: None  # type: ignore[method-assign]
    for row in rng.permutation(300)[:30]:
        ca, cb = a.remove([int(row)]), b.remove([int(row)])
        assert ca.residual_bound == cb.residual_bound and ca.step_bound == cb.step_bound
        assert np.array_equal(a.coef_, b.coef_)


def test_advancing_the_mask_twice_for_one_removal_counts_it_once() -> None:
    """The anchor's retry from a fresh anchor (docs/tighter_bounds.md §5d) advances the cache twice for one removal:
    the O(m) update must be idempotent, so the cache's count stays that of its mask (and n′ of later steps true)."""
    mech, cache, state, X, y = _fitted_cache()
    n = X.shape[0]
    rng = np.random.default_rng(6)
    active = np.ones(n, dtype=bool)
    for _ in range(20):
        idx = rng.choice(np.flatnonzero(active), size=int(rng.integers(1, 4)), replace=False).astype(np.int64)
        keep = active.copy()
        keep[idx] = False
        assert cache.matches_removal(X, state.w, keep, idx, "anchor") is not None
        for _ in range(int(rng.integers(1, 3))):
            cache.advance(X, state.w, keep, removed=idx)
        active = keep
        assert cache.synced_count(X, state.w, active) == int(np.count_nonzero(active))

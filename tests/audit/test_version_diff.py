"""The version-diff attacks of issue 26 (lethe.audit.version_diff) and the identification rate a guarantee allows.

(a) On CertifiedLogisticRegression's consecutive versions the single-deletion attack names the deleted record in
almost every trial (the leak the issue reports), the batch attack recovers most rows of small batches, and the
averaging attacker beats fresh noise that hides single differences. (b) On ReleasedLogisticRegression's published
sequence the identification rate is not significantly above the rate its certificate allows; the same assertion on
the unprotected sequence fails (the test that fails on today's code and passes on the new).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lethe.audit.version_diff import (
    allowed_identification_rate,
    allowed_identification_rate_gdp,
    averaged_difference,
    batch_deletion_guess,
    delete_vs_keep_from_presence,
    diff_geometry,
    identification_rate,
    lethe_coordinates,
    lethe_weights,
    single_deletion_guess,
    single_deletion_scores,
)
from lethe.certified.estimators import CertifiedLogisticRegression

LAM = 1e-2


def _data(n: int = 2000, d: int = 50, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows in the unit ball (norms in (2/3, 1]), labels from a logistic model."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 1.5, size=(n, 1))
    w = 12.0 * rng.normal(size=d) / math.sqrt(d)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-X @ w)), 1.0, -1.0)
    return X, y


def _unprotected_single_hits(X: np.ndarray, y: np.ndarray, trials: int, seed: int = 1,
                             fit_intercept: bool = False) -> tuple[int, int]:
    """Hits of the single-deletion attack on consecutive coef_ of today's estimator, one random row per removal;
    returns (hits, removals that were Newton steps)."""
    rng = np.random.default_rng(seed)
    m = CertifiedLogisticRegression(lam=LAM, sigma=1.0, random_state=seed, fit_intercept=fit_intercept).fit(X, y)
    Z = lethe_coordinates(X, fit_intercept)
    active = np.ones(X.shape[0], dtype=bool)
    hits = steps = 0
    for r in rng.permutation(X.shape[0])[:trials]:
        w_old = lethe_weights(m.coef_[0], m.intercept_ if fit_intercept else None)
        geom = diff_geometry(Z, y, w_old, LAM, n=int(active.sum()))
        cert = m.remove([int(r)])
        active[r] = False
        if cert.retrained:  # a retraining draws a fresh b: that difference is not a removal step
            continue
        steps += 1
        w_new = lethe_weights(m.coef_[0], m.intercept_ if fit_intercept else None)
        hits += single_deletion_guess(geom, w_old, w_new) == r
    return hits, steps


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_single_deletion_attack_identifies_removals_of_todays_estimator(fit_intercept: bool) -> None:
    X, y = _data()
    hits, steps = _unprotected_single_hits(X, y, 30, fit_intercept=fit_intercept)
    assert steps >= 25
    assert hits / steps >= 0.8, (hits, steps)
    rate = identification_rate(hits, steps, allowed_identification_rate(1.0, 1e-5, X.shape[0]))
    assert rate.exceeds  # the unprotected sequence gives deleted records away far beyond (1, 1e-5)


def test_batch_attack_recovers_most_rows_of_small_batches() -> None:
    X, y = _data(seed=2)
    rng = np.random.default_rng(3)
    m = CertifiedLogisticRegression(lam=LAM, sigma=1.0, random_state=3).fit(X, y)
    active = np.ones(X.shape[0], dtype=bool)
    found = found_screened = total = 0
    for _ in range(8):
        rows = rng.choice(np.flatnonzero(active), 5, replace=False)
        w_old = m.coef_[0].copy()
        geom = diff_geometry(X, y, w_old, LAM, n=int(active.sum()))
        cert = m.remove(rows.tolist())
        active[rows] = False
        if cert.retrained:
            continue
        guess = batch_deletion_guess(geom, w_old, m.coef_[0], 5)
        assert guess.size <= 5
        found += len(set(guess.tolist()) & set(rows.tolist()))
        total += 5
        # OMP screened to the 200 candidates of the highest single-deletion score (the large-N path)
        screened = batch_deletion_guess(geom, w_old, m.coef_[0], 5, max_columns=200)
        found_screened += len(set(screened.tolist()) & set(rows.tolist()))
    assert total >= 30
    assert found / total >= 0.7, (found, total)  # random guessing: 5/2000
    assert found_screened / total >= 0.7, (found_screened, total)


def test_averaging_cancels_fresh_noise_that_hides_single_differences() -> None:
    """Releases w_t + fresh N(0, s²I) noise: one difference rarely names the deleted row, the mean of 200 releases
    before and 200 after almost always does (the noise of the difference shrinks by √200)."""
    X, y = _data(n=1500, d=40, seed=4)
    rng = np.random.default_rng(5)
    m = CertifiedLogisticRegression(lam=LAM, sigma=1.0, random_state=5).fit(X, y)
    single = avg = trials = 0
    for r in rng.permutation(X.shape[0])[:20]:
        w_old = m.coef_[0].copy()
        geom = diff_geometry(X, y, w_old, LAM, n=int(m.active_.sum()))
        if m.remove([int(r)]).retrained:
            continue
        w_new = m.coef_[0].copy()
        s = 0.5 * np.linalg.norm(w_new - w_old)  # noise per coordinate: the difference's norm is ≈ 0.7√d × signal
        before = w_old + s * rng.normal(size=(200, X.shape[1]))
        after = w_new + s * rng.normal(size=(200, X.shape[1]))
        single += single_deletion_guess(geom, before[-1], after[0]) == r
        avg += single_deletion_guess(geom, *averaged_difference(before, after)) == r
        trials += 1
    assert trials >= 15
    assert avg / trials >= 0.8, (avg, trials)
    assert single / trials <= 0.3, (single, trials)


def test_scores_are_cosines_and_invariant_to_the_gradient_scale() -> None:
    """Independent computation: |cos(Δ′, H⁻¹∇ℓᵢ)| from an explicit Hessian and ∇ℓᵢ = ℓ′ᵢ xᵢ."""
    X, y = _data(n=300, d=8, seed=6)
    rng = np.random.default_rng(7)
    w_old, w_new = rng.normal(size=8), rng.normal(size=8)
    geom = diff_geometry(X, y, w_old, LAM)
    s = single_deletion_scores(geom, w_old, w_new)
    z = X @ w_old
    p = 1.0 / (1.0 + np.exp(-y * z))
    H = (X * (p * (1 - p))[:, None]).T @ X + LAM * X.shape[0] * np.eye(8)
    dp = (w_new - w_old) - LAM * np.linalg.solve(H, w_old)
    G = (X * ((p - 1) * y)[:, None]).T  # columns ∇ℓᵢ
    C = np.linalg.solve(H, G)
    cos = np.abs(dp @ C) / (np.linalg.norm(dp) * np.linalg.norm(C, axis=0))
    np.testing.assert_allclose(s, cos, rtol=1e-10, atol=1e-12)
    assert single_deletion_guess(geom, w_old, w_new) == int(np.argmax(cos))
    assert np.all(single_deletion_scores(geom, np.zeros(8), np.zeros(8)) == 0.0)  # no difference: no guess


def _randomised_response_rate(eps: float, delta: float, n: int) -> float:
    """Exact identification rate of the most revealing (ε, δ) mechanism between "r deleted" and "r kept" (Q:
    uniform output over the n candidates): with probability δ it outputs r, else it outputs r with probability
    p = min((e^ε − 1)/(n − 1), 1 − e^{−ε}) and a uniform candidate otherwise. The attacker guesses the output."""
    p = min((math.exp(eps) - 1.0) / (n - 1), 1.0 - math.exp(-eps))
    return delta + (1.0 - delta) * (p + (1.0 - p) / n)


def test_allowed_rate_is_an_upper_bound_and_tight_for_randomised_response() -> None:
    rng = np.random.default_rng(8)
    for _ in range(500):
        eps, delta, n = float(rng.uniform(0, 5)), float(10 ** rng.uniform(-8, -1)), int(rng.integers(2, 10**6))
        exact = _randomised_response_rate(eps, delta, n)
        # the mechanism is (ε, δ) both ways: the hockey-stick divergences E_{e^ε}(A‖Q), E_{e^ε}(Q‖A) are ≤ δ
        p = min((math.exp(eps) - 1.0) / (n - 1), 1.0 - math.exp(-eps))
        a_r, a_j, q = exact, (1.0 - delta) * (1.0 - p) / n, 1.0 / n
        e = math.exp(eps)
        assert max(0.0, a_r - e * q) + (n - 1) * max(0.0, a_j - e * q) <= delta * (1 + 1e-9) + 1e-15
        assert max(0.0, q - e * a_r) + (n - 1) * max(0.0, q - e * a_j) <= delta * (1 + 1e-9) + 1e-15
        bound = allowed_identification_rate(eps, delta, n)
        assert exact <= bound * (1 + 1e-12)
        assert bound <= math.exp(eps) / n + delta + 1e-15  # never looser than the brief's form
        # mutation check: a bound that forgets e^ε (the random-guess rate plus δ) is exceeded by this mechanism
        if eps > 0.1 and n > 10:
            assert exact > 1.0 / n + delta
    # tight where the first line binds
    assert allowed_identification_rate(1.0, 0.0, 1000) == pytest.approx(_randomised_response_rate(1.0, 0.0, 1000),
                                                                        rel=1e-9)
    # batches: k deleted, g guesses: α = g/(N − k + 1); capped at 1
    assert allowed_identification_rate(0.0, 0.0, 100, guesses=10, deleted=10) == pytest.approx(10 / 91)
    assert allowed_identification_rate(5.0, 0.5, 3, guesses=3) == 1.0
    e2, d2 = delete_vs_keep_from_presence(1.0, 1e-5)
    assert e2 == 2.0 and d2 == pytest.approx((1 + math.e) * 1e-5)


def _gaussian_argmax_rate(mu: float, n: int) -> float:
    """Exact P(argmax Y = r) for Y = μ e_r + N(0, I_n) — the "deleted" world of a μ-GDP pair whose "kept" world is
    N(0, I_n) — by quadrature of ∫ φ(z) Φ(z + μ)^{n−1} dz."""
    from scipy.integrate import quad
    from scipy.stats import norm

    val, _ = quad(lambda z: norm.pdf(z - mu) * norm.cdf(z) ** (n - 1), -12.0 + mu, 12.0 + mu, limit=400,
                  epsabs=1e-13)
    return float(val)


def test_gdp_allowed_rate_bounds_the_gaussian_argmax_and_is_tighter_than_the_epsilon_delta_form() -> None:
    from lethe.privacy.gaussian import analytic_gaussian_epsilon

    rng = np.random.default_rng(11)
    halved = 0
    for _ in range(60):
        mu, n = float(rng.uniform(0.05, 3.0)), int(rng.integers(2, 5000))
        exact = _gaussian_argmax_rate(mu, n)
        bound = allowed_identification_rate_gdp(mu, n)
        assert exact <= bound * (1 + 1e-9) + 1e-12, (mu, n, exact, bound)
        # mutation check: the random-guess rate 1/n (a "bound" that forgets μ) is exceeded
        assert exact > 1.0 / n
        halved += exact > allowed_identification_rate_gdp(mu / 2, n)  # mutation: a calibration off by 2 in μ
        eps = analytic_gaussian_epsilon(1e-5, 1.0 / mu)  # the (ε, 1e-5) of the same μ-GDP mechanism
        assert bound <= allowed_identification_rate(eps, 1e-5, n) * (1 + 1e-9)
    assert halved == 60  # ... is exceeded in every case
    assert allowed_identification_rate_gdp(0.0, 50) == pytest.approx(1 / 50)


@pytest.mark.parametrize(("args", "match"), [
    ((-1.0, 1e-5, 10), "epsilon"), ((1.0, 1.0, 10), "delta"), ((1.0, 1e-5, 0), "n_candidates"),
])
def test_allowed_rate_rejects_invalid_arguments(args: tuple[float, float, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        allowed_identification_rate(*args)


def test_identification_rate_interval_and_verdict() -> None:
    r = identification_rate(0, 30, 0.01)
    assert r.low == 0.0 and 0.1 < r.high < 0.13 and not r.exceeds
    assert identification_rate(29, 30, 0.01).exceeds
    assert r.to_dict()["trials"] == 30
    with pytest.raises(ValueError, match="allowed"):
        identification_rate(1, 30, 1.5)


def _assert_not_above_allowed(hits: int, trials: int, allowed: float) -> None:
    """The guarantee holds for this attack at level 0.05: the Clopper–Pearson interval reaches the allowed rate."""
    rate = identification_rate(hits, trials, allowed)
    assert not rate.exceeds, f"{hits}/{trials} identified, interval [{rate.low:.4f}, {rate.high:.4f}] > {allowed:.4g}"


def _released_sequence_hits(X: np.ndarray, y: np.ndarray, trials: int,
                            seed: int) -> tuple[int, int, int, float, float]:
    """Hits of the single-deletion attack on consecutive releases of ReleasedLogisticRegression (one random row per
    removal, a release after each), and — the mutation check — on its secret unperturbed centres (the same
    mechanism with the release noise taken out). Returns (hits on releases, hits on centres, trials, allowed by the
    certificate's (ε, δ), allowed by its μ-GDP with μ = √releases Δ/σ)."""
    from lethe.release import ReleasedLogisticRegression

    rng = np.random.default_rng(seed)
    m = ReleasedLogisticRegression(lam=LAM, epsilon=1.0, delta=1e-5, horizon=trials + 1,
                                   random_state=seed).fit(X, y)
    N = X.shape[0]
    hits = raw_hits = 0
    for r in rng.permutation(N)[:trials]:
        old, centre_old = m.release_.coef.copy(), m.state_.w.copy()
        cert = m.remove([int(r)])
        assert cert.published and cert.version == len(m.releases_) - 1
        new, centre_new = m.release_.coef, m.state_.w
        n_old = N - len(m.releases_) + 2
        hits += single_deletion_guess(diff_geometry(X, y, old, LAM, n=n_old), old, new) == r
        raw_hits += single_deletion_guess(diff_geometry(X, y, centre_old, LAM, n=n_old), centre_old, centre_new) == r
    cert = m.release_.certificate
    assert cert.observer == "every published release" and cert.epsilon <= 1.0 + 1e-9
    # r is uniform over the rows outside every other deletion of the run: N − trials + 1 candidates
    mu = math.sqrt(cert.releases) / cert.noise_multiplier
    return (hits, raw_hits, trials, allowed_identification_rate(cert.epsilon, cert.delta, N - trials + 1),
            allowed_identification_rate_gdp(mu, N - trials + 1))


def test_released_sequence_keeps_the_attack_within_the_certificate_and_the_raw_sequence_does_not() -> None:
    X, y = _data(seed=9)
    hits, raw_hits, trials, allowed, allowed_gdp = _released_sequence_hits(X, y, 30, seed=10)
    assert allowed_gdp <= allowed
    _assert_not_above_allowed(hits, trials, allowed)  # passes on the released sequence (the new code)
    _assert_not_above_allowed(hits, trials, allowed_gdp)  # ... also against the tighter μ-GDP rate
    # mutation check: the same attack and assertion on the unperturbed sequence (today's leak) fail
    assert raw_hits / trials >= 0.8, raw_hits
    with pytest.raises(AssertionError, match="identified"):
        _assert_not_above_allowed(raw_hits, trials, allowed)


def test_attack_inputs_are_checked() -> None:
    X, y = _data(n=50, d=4, seed=12)
    geom = diff_geometry(X, y, np.zeros(4), LAM)
    with pytest.raises(ValueError, match="k must be <= min"):
        batch_deletion_guess(geom, np.zeros(4), np.ones(4), 5)
    with pytest.raises(ValueError, match="w_new must be a finite vector of length 4"):
        single_deletion_scores(geom, np.zeros(4), np.ones(3))
    with pytest.raises(ValueError, match="before and after"):
        averaged_difference(np.zeros((2, 4)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="y must have one label per candidate"):
        diff_geometry(X, y[:-1], np.zeros(4), LAM)
    assert batch_deletion_guess(geom, np.zeros(4), np.zeros(4), 2).size == 0  # no difference: nobody named

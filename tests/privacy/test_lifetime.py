"""lethe.privacy.lifetime (issue 36): the lifetime ε of several release streams, composed in μ-GDP, against Google's
dp_accounting PLD accountant composing every Gaussian release of every stream (independent code); forgetting one
stream, or composing the streams' ε instead of their μ², is caught."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from lethe.privacy.lifetime import gdp_epsilon, gdp_mu, lifetime_mu, stream_release_mu
from lethe.privacy.release import release_epsilon_spent, release_sigma


def _pld_epsilon(delta: float, streams: list[tuple[float, float, int]]) -> float:
    """dp_accounting: ε(δ) of every release of every stream (σ, Δ, k): k Gaussians of noise multiplier σ/Δ."""
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    for sigma, sens, k in streams:
        if k:
            acc.compose(dp_event.GaussianDpEvent(sigma / sens), count=k)
    return float(acc.get_epsilon(delta))


def _random_streams(seed: int) -> tuple[float, list[tuple[float, float, int, float, int]]]:
    rng = np.random.default_rng(seed)
    delta = float(10.0 ** rng.uniform(-7, -4))
    out = []
    for _ in range(int(rng.integers(1, 6))):
        eps = float(rng.uniform(0.2, 2.0))
        T = int(rng.integers(1, 200))
        k = int(rng.integers(1, T + 1))
        sens = float(10.0 ** rng.uniform(-4, 0))
        out.append((eps, sens, T, delta, k))
    return delta, out


@pytest.mark.parametrize("seed", range(12))
def test_lifetime_epsilon_against_dp_accounting(seed: int) -> None:
    delta, spec = _random_streams(seed)
    streams = [(release_sigma(eps, d, T, sens), sens, k) for eps, sens, T, d, k in spec]
    mus = [(stream_release_mu(eps, d, T), k) for eps, _s, T, d, k in spec]
    for (sigma, sens, _k), (mu1, _) in zip(streams, mus, strict=True):
        assert mu1 == pytest.approx(sens / sigma, rel=1e-12)  # μ₁ from the public parameters = Δ/σ
    ours = gdp_epsilon(lifetime_mu(mus), delta)
    ref = _pld_epsilon(delta, streams)
    # the reference is pessimistic by its discretisation (≤ 1e-4 in ε): agreement to that precision
    assert ours == pytest.approx(ref, rel=2e-3, abs=3e-4)
    # one stream alone: the stream's own accountant
    (sigma, sens, k), (mu1, _) = streams[0], mus[0]
    assert gdp_epsilon(lifetime_mu([(mu1, k)]), delta) == pytest.approx(release_epsilon_spent(k, sigma, sens, delta),
                                                                        rel=1e-9)
    if len(streams) > 1:  # mutation: forgetting one stream is caught whenever it is not negligible
        dropped = gdp_epsilon(lifetime_mu(mus[1:]), delta)
        if mus[0][1] * mus[0][0] ** 2 > 0.01 * lifetime_mu(mus) ** 2:
            assert dropped < ref - 1e-3
        # mutation: adding the streams' ε (basic composition) is not what the ledger reports (it is looser)
        basic = sum(gdp_epsilon(lifetime_mu([m]), delta) for m in mus)
        assert ours <= basic + 1e-9


def test_gdp_mu_inverts_gdp_epsilon() -> None:
    for eps, delta in [(0.5, 1e-5), (1.0, 1e-5), (3.0, 1e-6), (8.0, 1e-3)]:
        mu = gdp_mu(eps, delta)
        assert gdp_epsilon(mu, delta) == pytest.approx(eps, rel=1e-9)
        assert gdp_epsilon(mu * (1 + 1e-6), delta) > eps
    assert gdp_epsilon(0.0, 1e-5) == 0.0 and lifetime_mu([]) == 0.0
    assert math.isclose(lifetime_mu([(0.3, 4), (0.4, 1)]), math.sqrt(4 * 0.09 + 0.16))
    with pytest.raises(ValueError, match="releases"):
        lifetime_mu([(0.3, -1)])

"""Mechanisms: noise law, reproducibility, secure mode, and seeded empirical privacy audits.

Statistical tolerances. Seeded tests are deterministic; their tolerances are chosen so that a correct
implementation fails with probability < 1e-6 over seeds (Hoeffding for [0, 1]-valued averages:
t = √(ln(1/β)/(2N)), β = 1e-6). Tests of ``secure=True`` draw from the OS and cannot be seeded; they use
the same β, so each fails spuriously with probability < 1e-6.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lethe.privacy import (
    GaussianMechanism,
    LaplaceMechanism,
    OSRandomSource,
    analytic_gaussian_delta,
    gaussian_mechanism,
    laplace_mechanism,
)

BETA = 1e-6


def hoeffding(n: int, beta: float = BETA) -> float:
    return math.sqrt(math.log(1.0 / beta) / (2.0 * n))


def ks_critical(n: int, beta: float = BETA) -> float:
    # Dvoretzky–Kiefer–Wolfowitz (Massart): P(sup |F_n − F| > t) ≤ 2 e^{−2 n t²}
    return math.sqrt(math.log(2.0 / beta) / (2.0 * n))


# ---------------------------------------------------------------------------------------------- noise law
def test_gaussian_noise_has_calibrated_law():
    mech = GaussianMechanism(epsilon=0.8, delta=1e-6, sensitivity=2.0)
    out = mech.randomize(np.zeros(200_000), random_state=1)
    z = out / mech.sigma
    assert stats.kstest(z, "norm").statistic < ks_critical(z.size)


def test_laplace_noise_has_calibrated_law():
    mech = LaplaceMechanism(epsilon=0.25, sensitivity=3.0)
    assert mech.scale == 12.0
    out = mech.randomize(np.full((400, 500), 5.0), random_state=2)
    assert out.shape == (400, 500)
    assert stats.kstest(((out - 5.0) / 12.0).ravel(), "laplace").statistic < ks_critical(out.size)


@pytest.mark.parametrize("kind", ["normal", "laplace"])
def test_os_random_source_has_the_right_law(kind):
    src = OSRandomSource()
    n = 100_000
    if kind == "normal":
        z = src.standard_normal((n,))
        assert stats.kstest(z, "norm").statistic < ks_critical(n)
    else:
        z = src.standard_laplace((n,))
        assert stats.kstest(z, "laplace").statistic < ks_critical(n)
    assert np.all(np.isfinite(z))
    # fresh randomness each call (collision probability ~ 2^-100)
    assert not np.array_equal(src.standard_normal((4,)), src.standard_normal((4,)))


def test_secure_mode_refuses_seeds_and_generators():
    for seed in [0, np.random.default_rng(0), np.random.SeedSequence(1)]:
        with pytest.raises(ValueError, match=r"random_state must be None when secure=True.*Found"):
            gaussian_mechanism(1.0, 1.0, 1e-5, random_state=seed, secure=True)
        with pytest.raises(ValueError, match=r"random_state must be None when secure=True"):
            laplace_mechanism(1.0, 1.0, random_state=seed, secure=True)
    with pytest.raises(TypeError, match="secure must be a bool. Found 'yes'"):
        laplace_mechanism(1.0, 1.0, secure="yes")  # type: ignore[arg-type]


def test_secure_mode_releases_noisy_values_of_the_right_shape():
    out = gaussian_mechanism(np.ones((3, 2)), 1.0, 1e-5, secure=True)
    assert out.shape == (3, 2) and not np.allclose(out, 1.0)
    assert isinstance(laplace_mechanism(2.0, 1.0, secure=True), float)


def test_seeded_runs_are_reproducible_bit_for_bit():
    a = gaussian_mechanism([1.0, 2.0, 3.0], 0.5, 1e-5, random_state=7)
    b = gaussian_mechanism([1.0, 2.0, 3.0], 0.5, 1e-5, random_state=7)
    assert np.array_equal(a, b)
    g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
    assert laplace_mechanism(0.0, 1.0, random_state=g1) == laplace_mechanism(0.0, 1.0, random_state=g2)
    a8 = gaussian_mechanism([0.0], 1.0, 1e-5, random_state=8)
    assert a8[0] != gaussian_mechanism([0.0], 1.0, 1e-5, random_state=9)[0]


def test_scalar_in_scalar_out_and_global_state_untouched():
    np.random.seed(123)  # noqa: NPY002 - checking that the legacy global state is left alone
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    assert isinstance(gaussian_mechanism(1.0, 1.0, 1e-5, random_state=0), float)
    assert isinstance(laplace_mechanism(1.0, 1.0, random_state=0), float)
    assert np.array_equal(np.random.get_state()[1], before)  # noqa: NPY002


def test_mechanism_objects_are_frozen_and_serializable():
    import dataclasses
    import json

    m = GaussianMechanism(0.5, 1e-5, 2.0, "classical")
    assert GaussianMechanism(**json.loads(json.dumps(m.to_dict()))) == m
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.sigma = 0.0  # type: ignore[misc]
    assert m.rdp(2.0) == pytest.approx(2.0 * 4.0 / (2 * m.sigma**2))
    assert m.delta_at(0.5) <= 1e-5
    assert m.epsilon_at(1e-5) <= 0.5


# ----------------------------------------------------------------------------- empirical privacy audits
def _gaussian_losses(sigma, centre, neighbour, outputs):
    # ln p_D(o) − ln p_D'(o), computed with scipy densities (independent of lethe.privacy.plrv)
    return np.sum(stats.norm.logpdf(outputs, centre, sigma) - stats.norm.logpdf(outputs, neighbour, sigma), axis=1)


def _audit_gaussian(mech, distance, n, seed, eps):
    """Estimate sup_Ω P(M(D) ∈ Ω) − e^ε P(M(D') ∈ Ω) for a pair at L2 distance ``distance``, two ways."""
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(3)
    direction /= np.linalg.norm(direction)
    centre = np.array([1.0, -2.0, 0.5])
    neighbour = centre + distance * direction
    out_d = mech.randomize(np.tile(centre, (n, 1)), random_state=rng)  # n runs of M(D)
    out_n = mech.randomize(np.tile(neighbour, (n, 1)), random_state=rng)  # n runs of M(D')
    loss_d = _gaussian_losses(mech.sigma, centre, neighbour, out_d)
    loss_n = _gaussian_losses(mech.sigma, centre, neighbour, out_n)
    # (1) the optimal rejection set Ω = {L > ε}, estimated from both sides
    set_gap = np.mean(loss_d > eps) - math.exp(eps) * np.mean(loss_n > eps)
    # (2) the hockey-stick identity δ = E_{M(D)}[(1 − e^{ε − L})₊]
    hockey = float(np.mean(-np.expm1(np.minimum(eps - loss_d, 0.0))))
    return set_gap, hockey


@pytest.mark.parametrize("calibration", ["analytic", "classical"])
def test_gaussian_mechanism_empirical_privacy_within_claim(calibration):
    eps, delta, n = 0.5, 0.05, 200_000
    mech = GaussianMechanism(eps, delta, sensitivity=1.5, calibration=calibration)
    set_gap, hockey = _audit_gaussian(mech, 1.5, n, seed=11, eps=eps)
    tol = hoeffding(n)
    assert set_gap <= delta + tol * (1 + math.exp(eps))
    assert hockey <= delta + tol
    if calibration == "analytic":  # tight calibration: the audit also finds (almost) all of δ
        assert hockey >= delta - tol


def test_empirical_audit_catches_undercalibrated_noise():
    # negative control: 30% less noise than calibrated must be detected by the same audit
    eps, delta, n = 0.5, 0.05, 200_000
    honest = GaussianMechanism(eps, delta, sensitivity=1.5)
    weak = GaussianMechanism(eps, delta, sensitivity=1.05)  # σ only 70% of what Δ₂ = 1.5 needs
    assert weak.sigma == pytest.approx(0.7 * honest.sigma)
    assert analytic_gaussian_delta(eps, weak.sigma, 1.5) > delta + 3 * hoeffding(n)
    _, hockey = _audit_gaussian(weak, 1.5, n, seed=11, eps=eps)
    assert hockey > delta + hoeffding(n)


def test_laplace_mechanism_empirical_privacy_is_pure():
    eps, n = 0.7, 200_000
    mech = LaplaceMechanism(eps, sensitivity=2.0)
    rng = np.random.default_rng(5)
    centre = np.array([0.0, 3.0])
    neighbour = centre + np.array([1.2, -0.8])  # ‖·‖₁ = 2 = Δ₁
    out_d = mech.randomize(np.tile(centre, (n, 1)), random_state=rng)
    loss = np.sum(
        stats.laplace.logpdf(out_d, centre, mech.scale) - stats.laplace.logpdf(out_d, neighbour, mech.scale), axis=1
    )
    assert loss.max() <= eps + 1e-12  # privacy loss bounded by ε surely: δ = 0
    assert np.mean(loss > eps - 1e-9) > 0.2  # and ε is attained (atom at the maximum), so the bound is tight
    hockey_below = float(np.mean(-np.expm1(np.minimum(0.5 * eps - loss, 0.0))))
    assert hockey_below > 3 * hoeffding(n)  # negative control: at ε/2 the same audit sees a positive δ


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: LaplaceMechanism(0.0), ValueError, r"epsilon must be > 0. Found 0.0"),
        (lambda: LaplaceMechanism(1.0, -1.0), ValueError, r"sensitivity must be > 0. Found -1.0"),
        (lambda: GaussianMechanism(1.0, 1e-5, calibration="classical"), ValueError,
         r"epsilon must be in the open interval \(0, 1\). Found 1.0"),
        (lambda: GaussianMechanism(0.5, 1e-5, calibration="exact"), ValueError,  # type: ignore[arg-type]
         r"calibration must be one of \('analytic', 'classical'\). Found 'exact'"),
        (lambda: GaussianMechanism(0.5, 2.0), ValueError, r"delta must be in the open interval \(0, 1\). Found 2.0"),
        (lambda: gaussian_mechanism([1.0, np.nan], 1.0, 1e-5), ValueError, r"value must contain only finite numbers"),
        (lambda: laplace_mechanism("abc", 1.0), TypeError, r"value must be a real number or a numeric array"),
    ],
)
def test_bad_parameters_name_parameter_rule_and_value(call, exc, message):
    with pytest.raises(exc, match=message):
        call()

"""The perturbation b and the budget (Guo et al. 2020, Thm 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lethe.certified.noise import epsilon_spent, gaussian_c, residual_budget, sample_perturbation


def test_gaussian_c_solves_delta_equation():
    for delta in [1e-2, 1e-4, 1e-8]:
        c = gaussian_c(delta)
        assert 1.5 * math.exp(-c * c / 2) == pytest.approx(delta, rel=1e-12)


def test_budget_formulas_and_inverse():
    assert residual_budget(10.0, 1.0, 1e-4) == pytest.approx(10.0 / gaussian_c(1e-4))
    assert residual_budget(3.0, 0.5, None, "laplace") == pytest.approx(1.5)
    b = residual_budget(10.0, 0.7, 1e-5)
    assert epsilon_spent(b, 10.0, 1e-5, "gaussian") == pytest.approx(0.7)


def test_paper_calibration_refused_where_it_does_not_hold():
    # exact delta of the Gaussian mechanism at large epsilon exceeds the target under c = sqrt(2 log(1.5/delta))
    with pytest.raises(ValueError, match="exact delta"):
        residual_budget(1.0, 20.0, 0.4)


def test_gaussian_sample_moments():
    rng = np.random.default_rng(0)
    b = np.concatenate([sample_perturbation(50, 2.5, "gaussian", rng) for _ in range(400)])
    assert stats.kstest(b / 2.5, "norm").pvalue > 1e-3


def test_laplace_type_sample_has_gamma_norm_and_uniform_direction():
    rng = np.random.default_rng(1)
    d, sigma = 7, 0.8
    B = np.array([sample_perturbation(d, sigma, "laplace", rng) for _ in range(4000)])
    norms = np.linalg.norm(B, axis=1)
    assert stats.kstest(norms, stats.gamma(a=d, scale=sigma).cdf).pvalue > 1e-3
    mean_dir = (B / norms[:, None]).mean(axis=0)
    assert np.linalg.norm(mean_dir) < 4 / math.sqrt(4000)  # tolerance: ~4 standard errors of a unit vector mean


def test_bad_parameters():
    for kwargs, word in [({"sigma": 0}, "sigma"), ({"epsilon": -1}, "epsilon"), ({"delta": 1.5}, "delta"),
                         ({"noise": "x"}, "noise")]:
        args = {"sigma": 1.0, "epsilon": 1.0, "delta": 1e-4, "noise": "gaussian", **kwargs}
        with pytest.raises(ValueError, match=word):
            residual_budget(**args)

"""CertifiedLinearRegression refuses features too large for its float64 solve (issue 37)."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.certified.estimators import CertifiedLinearRegression


def _timestamps(mag: float, n: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = mag * (1 + rng.uniform(0, 1e-3, size=n))
    X = np.c_[t, rng.normal(size=n)]
    return X, (t / mag - 1) * 1000 + X[:, 1] + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("mag", [1e11, 1e12, 1e80])
def test_features_of_timestamp_magnitude_are_refused_clearly(mag):
    X, y = _timestamps(mag)
    # before: R² ≈ −0.25 (w ≈ 0) with ε = 0 certificates over β ≈ 1e13 (NaN at 1e80)
    with pytest.raises(ValueError, match="too large for a float64"):
        CertifiedLinearRegression(fit_intercept=True).fit(X, y)


@pytest.mark.parametrize("mag", [1.0, 1e3, 1e6])
def test_ordinary_magnitudes_still_fit(mag):
    X, y = _timestamps(mag)
    reg = CertifiedLinearRegression(fit_intercept=True).fit(X, y)
    assert reg.score(X, y) > 0.8


def test_targets_orthogonal_to_the_features_fit_w_zero():
    X = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    reg = CertifiedLinearRegression().fit(X, np.zeros(4))
    assert np.allclose(reg.predict(X), 0.0)

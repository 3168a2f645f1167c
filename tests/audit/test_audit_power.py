"""Issue 38: an audit that can fail — it states its power, says "inconclusive" when its interval is wider than the
bound (or crosses it), and answers "failed" on a model whose removal was faked (weights not updated)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from lethe.audit import audit_model
from lethe.audit.model import verdict_of
from lethe.audit.stats import dp_advantage_bound
from lethe.certified.estimators import CertifiedLogisticRegression


def _data(n: int = 400, d: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)  # labels that can only be memorised
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.choice([-1.0, 1.0], size=n)
    return X[: n // 2], y[: n // 2], X[n // 2:], y[n // 2:]


def test_the_issue_s_interval_is_inconclusive_not_passed() -> None:
    bound = dp_advantage_bound(1.0, 1e-4)  # 0.462
    assert verdict_of(-0.24, 0.24, bound) == "inconclusive"  # "PASSED for ±0.24 against 0.46" (issue 38)
    assert verdict_of(-0.20, 0.20, bound) == "passed"
    assert verdict_of(0.30, 0.60, bound) == "inconclusive"  # crosses the bound
    assert verdict_of(0.50, 0.70, bound) == "failed"
    assert verdict_of(-0.1, 0.1, None) == "no guarantee claimed"


def test_faked_removal_fails_and_a_real_one_passes_with_its_power_stated() -> None:
    X, y, Xh, yh = _data()
    n_del = 100
    # a model that memorises (negligible noise and regularisation); its removal is FAKED: the version published
    # "after" the removal is the version before it, weights not updated, while the (ε, δ) = (1, 1e-5) certificate is
    # claimed
    before = CertifiedLogisticRegression(lam=1e-5, noise="laplace", sigma=1e-9, epsilon=1e12, random_state=0).fit(X, y)
    faked_after = before.coef_.ravel().copy()
    # the real removal: exact unlearning, retrained from scratch on the records left
    real_after = LogisticRegression(C=1e6, fit_intercept=False, max_iter=5000).fit(X[n_del:], y[n_del:])
    audit = audit_model([faked_after, real_after], X[:n_del], y[:n_del], Xh, yh, epsilon=1.0, delta=1e-5,
                        names=["faked", "real"])
    faked, real = audit.versions
    bound = dp_advantage_bound(1.0, 1e-5)
    assert faked.verdict == "failed" and faked.low > bound, faked
    assert real.verdict == "passed" and real.high <= bound and real.high - real.low <= bound, real
    assert audit.verdict == "failed" and audit.failed and not audit.passed
    for v in (faked, real):  # the power: what it could tell from zero, and above which it fails
        assert 0 < v.detectable < 0.25 and v.fails_above == pytest.approx(bound + v.detectable)
    text = str(audit)
    assert "failed: EXCEEDS the bound" in text and "passed: within the bound" in text and "Power:" in text
    assert text.endswith("FAILED: a version's advantage exceeds the bound its guarantee implies.")


def test_too_few_records_make_the_audit_inconclusive_never_passed() -> None:
    X, y, Xh, yh = _data()
    real_after = LogisticRegression(C=1e6, fit_intercept=False, max_iter=5000).fit(X[20:], y[20:])
    audit = audit_model([real_after], X[:20], y[:20], Xh[:40], yh[:40], epsilon=1.0, delta=1e-5)
    (v,) = audit.versions
    assert v.high - v.low > v.bound and v.verdict == "inconclusive" and v.detectable > 0.25
    assert audit.verdict == "inconclusive" and not audit.passed and not audit.failed
    assert "INCONCLUSIVE" in str(audit) and "PASSED" not in str(audit)

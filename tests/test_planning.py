"""σ planning: the planned σ supports the removals asked for, grows with them, and reports its accuracy cost."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.estimators import CertifiedLogisticRegression
from lethe.planning import plan_sigma


def _data(n=600, d=8, seed=0, classes=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] + 0.3 * X[:, 1] > 0, 1, -1) if classes == 2 else np.argmax(X[:, :classes], axis=1)
    return X, y


@pytest.mark.parametrize("classes", [2, 3])
def test_planned_sigma_supports_the_removals_without_retraining(classes):
    X, y = _data(classes=classes)
    est = CertifiedLogisticRegression(lam=1e-3)
    plan = plan_sigma(X, y, n_removals=40, estimator=est, random_state=0)
    assert plan.residual_after_removals <= plan.budget
    assert 0.0 <= plan.accuracy <= 1.0 and abs(plan.accuracy_cost) < 0.2
    # a fresh model at that σ, removing other random rows, does not retrain within the planned removals
    clf = CertifiedLogisticRegression(lam=1e-3, sigma=plan.sigma, random_state=5).fit(X, y)
    rows = np.random.default_rng(7).choice(X.shape[0], size=40, replace=False)
    assert not any(clf.remove([int(i)]).retrained for i in rows)
    # half the planned σ runs out of budget within those removals (the plan is not wastefully large)
    half = CertifiedLogisticRegression(lam=1e-3, sigma=plan.sigma / 2.5, random_state=5).fit(X, y)
    assert any(half.remove([int(i)]).retrained for i in rows)


def test_more_removals_need_more_noise():
    X, y = _data()
    small = plan_sigma(X, y, n_removals=5, random_state=0)
    large = plan_sigma(X, y, n_removals=80, random_state=0)
    assert large.sigma > 3 * small.sigma
    assert large.epsilon == 1.0 and large.n_removals == 80


def test_bad_plans_are_refused():
    X, y = _data(n=100)
    with pytest.raises(ValueError, match="n_removals"):
        plan_sigma(X, y, n_removals=0)
    with pytest.raises(ValueError, match="n_removals must be below"):
        plan_sigma(X, y, n_removals=90)
    with pytest.raises(ValueError, match="margin"):
        plan_sigma(X, y, n_removals=5, margin=0.5)

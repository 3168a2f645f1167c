"""scikit-learn contract and edit/removal behaviour of the Noisy-GD estimators."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from lethe.noisygd.estimators import NoisyGDLogisticRegression, NoisyGDMLPClassifier


@parametrize_with_checks([NoisyGDLogisticRegression(random_state=0), NoisyGDMLPClassifier(random_state=0)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)

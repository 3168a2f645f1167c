"""The advisor (lethe.planning.advise, issue 37): compares the families on the user's table, never leaves a model
below the majority class unsaid."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer

from lethe.planning import advise


def test_it_measures_the_families_and_recommends_exact_retraining_with_its_code():
    X, y = load_breast_cancer(return_X_y=True)
    advice = advise(X, y, families=["retrain", "sharded"], random_state=0)
    assert advice.recommended.family == "exact retraining" and advice.recommended.epsilon == 0.0
    assert advice.recommended.accuracy > advice.majority + 0.2 and not advice.warning
    assert advice.result("majority class").accuracy == advice.majority
    text = str(advice)
    assert "recommended: exact retraining" in text and "RetrainingClassifier(" in text
    assert "sharded: not tried" in text  # 455 rows / 8 shards
    assert "expected_deletions: 22 (default: 5 % of the 455 training rows" in text


def test_a_table_with_text_columns_is_encoded_and_the_command_names_the_dataset():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=300), "colour": rng.choice(["red", "blue"], size=300)})
    y = np.where((frame["colour"] == "red") ^ (frame["a"] > 0.5), "good", "bad")
    advice = advise(frame, y, families=["retrain", "certified"], expected_deletions=10, dataset="credit",
                    random_state=0)
    assert {r.family for r in advice.results} == {"majority class", "exact retraining", "certified removal"}
    cert = advice.result("certified removal")
    assert cert.epsilon == 1.0 and "planned for 10 removals" in cert.model
    assert advice.recommended.code.startswith("lethe train credit MODEL")
    model = cert.estimator.fit(frame, y)  # the model measured, ready to fit on rows like the ones given
    assert model.score(frame, y) > 0.5 and model.remove([0]).epsilon == 1.0


def test_a_model_no_better_than_the_majority_class_is_never_left_unsaid():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 5))
    y = np.where(rng.random(300) < 0.85, 1, 0)  # labels unrelated to X: nothing beats guessing the majority
    advice = advise(X, y, families=["retrain"], random_state=0)
    assert advice.recommended.accuracy <= advice.majority
    assert "no better than always predicting the majority class" in advice.warning
    assert "WARNING:" in str(advice)


def test_an_observer_of_every_release_is_not_offered_a_one_version_guarantee():
    X, y = load_breast_cancer(return_X_y=True)
    advice = advise(X, y, families=["retrain"], observer="every release", random_state=0)
    assert advice.recommended.family == "majority class"
    assert "Publish only the current version (then exact retraining applies)" in advice.warning
    assert not advice.result("exact retraining").covers


def test_bad_requests_are_refused():
    X, y = load_breast_cancer(return_X_y=True)
    with pytest.raises(ValueError, match="observer must be one of"):
        advise(X, y, observer="everyone")
    with pytest.raises(ValueError, match="families must be a non-empty subset"):
        advise(X, y, families=["magic"])
    with pytest.raises(ValueError, match="expected_deletions must be >= 1"):
        advise(X, y, families=["retrain"], expected_deletions=0)

"""lethe.audit.prediction_diff: scores, the random tie-breaking guess and the expected rank, against direct
computations."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.audit.prediction_diff import guess, label_flip_scores, loss_increase_scores, rank_of


def test_loss_increase_is_the_log_loss_difference_of_the_true_class() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        n, k = rng.integers(1, 30), rng.integers(2, 6)
        p0, p1 = rng.dirichlet(np.ones(k), size=n), rng.dirichlet(np.ones(k), size=n)
        yi = rng.integers(0, k, size=n)
        expected = [-np.log(p1[i, yi[i]]) + np.log(p0[i, yi[i]]) for i in range(n)]
        assert np.allclose(loss_increase_scores(p0, p1, yi), expected, rtol=1e-12, atol=0)
    # a probability of 0 is floored, not infinite
    assert np.isfinite(loss_increase_scores([[1.0, 0.0]], [[0.0, 1.0]], np.array([0]))).all()


def test_label_flips() -> None:
    assert label_flip_scores(["a", "b", "a"], ["b", "a", "a"], ["a", "a", "b"]).tolist() == [1.0, -1.0, 0.0]


def test_rank_counts_ties_as_their_expected_position_and_guess_breaks_them_uniformly() -> None:
    s = np.array([3.0, 5.0, 5.0, 5.0, 1.0])
    assert rank_of(s, 1) == 2.0  # one of three tied at the top: expected rank 1 + 0 + 2/2
    assert rank_of(s, 0) == 4.0 and rank_of(s, 4) == 5.0
    ex = np.array([False, True, False, False, False])
    assert rank_of(s, 2, exclude=ex) == 1.5
    rng = np.random.default_rng(0)
    picks = np.bincount([guess(s, rng) for _ in range(3000)], minlength=5)
    assert picks[0] == picks[4] == 0
    assert np.all(np.abs(picks[1:4] / 3000 - 1 / 3) < 0.04)  # 3 σ ≈ 0.026 at n = 3000
    assert guess(s, rng, exclude=np.array([False, True, True, True, False])) == 0


def test_refusals() -> None:
    with pytest.raises(ValueError, match="one shape"):
        loss_increase_scores(np.ones((2, 2)) / 2, np.ones((3, 2)) / 2, np.array([0, 1]))
    with pytest.raises(ValueError, match="y_index"):
        loss_increase_scores(np.ones((2, 2)) / 2, np.ones((2, 2)) / 2, np.array([0, 2]))
    with pytest.raises(ValueError, match="at least one candidate"):
        guess([1.0, 2.0], np.random.default_rng(0), exclude=[True, True])
    with pytest.raises(ValueError, match="target"):
        rank_of([1.0, 2.0], 1, exclude=[False, True])
    with pytest.raises(ValueError, match="target"):
        rank_of([1.0, 2.0], 5)

"""What consecutive versions of a sharded model reveal (issue 29, item 3): which shard changed, and the deleted
record — by a prediction-diff attack (lethe.audit.prediction_diff) well above a random guess, and with certainty by an
observer who holds the hash key and the other records (exactness: the retrained shard is a known function of them)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression

from lethe.audit import clopper_pearson
from lethe.audit.prediction_diff import guess, loss_increase_scores, rank_of
from lethe.sharded import ShardedClassifier, shard_assignment

KEY = b"consecutive-versions-key"
N, S = 200, 4


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, 5))
    y = (X[:, 0] + 0.8 * rng.normal(size=N) > 0).astype(np.int64)
    return X, y


def test_only_the_deleted_records_shard_changes() -> None:
    X, y = _data()
    ids = np.arange(N)
    m = ShardedClassifier(LogisticRegression(), n_shards=S, key=KEY, random_state=0).fit(X, y, sample_ids=ids)
    for v in (3, 77, 150):
        before = [e.predict_proba(X) for e in m.estimators_]
        held_in = int(m.shard_of_[v])  # read before: the removal erases it
        m.remove(keys=[v])
        changed = [s for s in range(S) if not np.array_equal(before[s], m.estimators_[s].predict_proba(X))]
        # the observer of the shards learns the record's shard: the keyed hash of its key, nothing else without it
        assert changed == [held_in]
        shard, _ = shard_assignment([v], KEY, S)
        assert changed == [int(shard[0])]


def test_prediction_diff_attack_identifies_deleted_records_far_above_a_random_guess() -> None:
    X, y = _data()
    ids = np.arange(N)
    m = ShardedClassifier(HistGradientBoostingClassifier(max_iter=20, min_samples_leaf=2), n_shards=S,
                          aggregation="mean_proba", key=KEY, random_state=0).fit(X, y, sample_ids=ids)
    rng = np.random.default_rng(1)
    victims = rng.choice(N, size=40, replace=False)
    gone = np.zeros(N, dtype=bool)
    hits = 0
    ranks = []
    for v in victims:
        p0 = m.predict_proba(X)
        m.remove(keys=[v])
        p1 = m.predict_proba(X)
        scores = loss_increase_scores(p0, p1, np.searchsorted(m.classes_, y))
        hits += guess(scores, rng, exclude=gone) == v
        ranks.append(rank_of(scores, int(v), exclude=gone))
        gone[v] = True
    # random guessing names the deleted record with probability 1/(N - removed) ≤ 1/161; the attack's 95 %
    # Clopper-Pearson interval lies far above it: consecutive versions of a sharded model are not private
    low, _high = clopper_pearson(int(hits), victims.size, 0.05)
    assert low > 10 / (N - victims.size + 1), (hits, ranks)
    assert np.median(ranks) < N / 4  # a random guess ranks it N/2 in the median


@pytest.mark.parametrize("wrong_key", [False, True])
def test_an_observer_with_the_key_and_the_other_records_identifies_every_deleted_record(wrong_key: bool) -> None:
    """Exactness cuts both ways: the new version equals bit for bit the fit without the deleted record, so an observer
    who holds the hash key, the seeds and the other records refits the changed shard without each of its candidates
    and finds the one that matches. With a wrong key (the key is the secret) the candidates are the wrong rows."""
    X, y = _data(2)
    ids = np.arange(N)
    est = LogisticRegression(C=10.0)
    m = ShardedClassifier(est, n_shards=S, key=KEY, random_state=0).fit(X, y, sample_ids=ids)
    probe = np.random.default_rng(3).normal(size=(50, 5))
    observer_key = b"not-the-secret-key!!" if wrong_key else KEY
    shard_of, _ = shard_assignment(ids, observer_key, S)
    present = np.ones(N, dtype=bool)
    found = 0
    victims = np.random.default_rng(4).choice(N, size=6, replace=False)
    for v in victims:
        before = [e.predict_proba(probe) for e in m.estimators_]
        m.remove(keys=[v])
        present[v] = False
        (s,) = [s for s in range(S) if not np.array_equal(before[s], m.estimators_[s].predict_proba(probe))]
        released = m.estimators_[s].predict_proba(probe)
        members = np.flatnonzero((shard_of == s) & (present | (ids == v)))
        matches = []
        for c in members:
            keep = (shard_of == s) & (present | (ids == v)) & (ids != c)
            refit = LogisticRegression(C=10.0, random_state=int(m.seeds_[s])).fit(X[keep], y[keep])
            if np.array_equal(refit.predict_proba(probe), released):
                matches.append(int(c))
        found += matches == [int(v)]
    if wrong_key:
        assert found == 0
    else:
        assert found == victims.size

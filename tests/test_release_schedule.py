"""The library's data-independent release schedule (docs/release_privacy.md §3): ``release()`` on a clock, with a
``cadence`` no removal reaches, publishes the same number of releases at the same ticks whether or not a request
found a record; ``cadence=1`` (a release per removal) does not — the count of releases tells an observer who knows
every other request whether the target's record was held. Past the horizon ``release()`` refuses and changes
nothing."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.exceptions import BudgetExceededError
from lethe.release import ReleasedLogisticRegression


def _data(seed: int = 0, n: int = 400, d: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = (X @ rng.normal(size=d) > 0).astype(int)
    return X, y, np.array([f"k{i}" for i in range(n)])


def _observed(held: bool, cadence: int, clock: bool) -> list[int]:
    """Releases an observer has seen after each tick; the target (k7) requests deletion at the second tick."""
    X, y, keys = _data()
    keep = np.ones(len(keys), bool) if held else keys != "k7"
    m = ReleasedLogisticRegression(lam=0.05, horizon=20, cadence=cadence, n_floor=300, random_state=0)
    m.fit(X[keep], y[keep], sample_ids=keys[keep])
    held_keys = set(keys[keep].tolist())
    seen = []
    for key in ["k1", "k7", "k2", "k3"]:  # the same request stream in both worlds
        if key in held_keys:  # a request whose record is not held removes nothing
            m.remove(keys=[key])
        if clock:
            m.release()  # the tick: whatever happened
        seen.append(len(m.releases_))
    return seen


def test_clock_releases_do_not_depend_on_whether_the_target_was_held() -> None:
    assert _observed(True, 10**6, clock=True) == _observed(False, 10**6, clock=True) == [2, 3, 4, 5]


def test_a_release_per_removal_tells_whether_the_target_was_held() -> None:
    assert _observed(True, 1, clock=False) != _observed(False, 1, clock=False)


def test_release_publishes_the_current_centre_and_counts_once() -> None:
    X, y, keys = _data(1)
    m = ReleasedLogisticRegression(lam=0.05, horizon=3, cadence=10**6, n_floor=300, random_state=0)
    m.fit(X, y, sample_ids=keys)
    assert m.remove(keys=["k3"]).published is False  # no removal publishes under this cadence
    before = m.privacy_spent()
    rel = m.release()
    assert m.privacy_spent()["releases"] == before["releases"] + 1 == 2
    assert m.privacy_spent()["epsilon"] > before["epsilon"]
    # the release is the centre after the removal plus N(0, σ²): its distance to the centre is σ√d-sized
    sigma = m.accountant_.sigma
    dev = np.append(rel.coef, rel.intercept)[: m.state_.w.shape[0]] - m.state_.w
    assert np.linalg.norm(dev) < 10 * sigma * np.sqrt(dev.size)
    m.release()  # the third and last of the horizon
    n_rel, acc = len(m.releases_), m.accountant_
    with pytest.raises(BudgetExceededError, match="horizon of 3 releases is spent"):
        m.release()
    assert len(m.releases_) == n_rel and m.accountant_ == acc  # nothing changed

"""Release noise (issue 36): from the operating system's CSPRNG by default; a seeded stream is reproducible and says
plainly that it is NOT private; ``fit`` refuses n = n_floor (outside the sensitivity theorem's premise); the library's
certificate states what its schedule reveals and the guarantee carries that condition."""

from __future__ import annotations

import numpy as np
import pytest

import lethe.release.estimator as release_mod
from lethe.privacy.mechanisms import OSRandomSource
from lethe.release import SEEDED_GUARANTEE, ReleasedLogisticRegression


def _data(n=1200, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1, 0)
    return X, y


def test_unseeded_noise_comes_from_the_os_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, ...]] = []

    class Spy(OSRandomSource):
        def standard_normal(self, size):
            calls.append(tuple(size))
            return super().standard_normal(size)

    monkeypatch.setattr(release_mod, "OSRandomSource", Spy)
    X, y = _data()
    m = ReleasedLogisticRegression(lam=1e-2, horizon=5, cadence=1).fit(X, y)
    m.remove([0])
    m.release()
    assert calls == [(5,)] * 3  # every release, and only from the CSPRNG
    for rel in m.releases_:
        c = rel.certificate
        assert c.private is True and c.noise_source == "os-csprng"
        assert not c.guarantee.startswith("NOT PRIVATE")
    # two unseeded trainings on the same data publish different weights
    m2 = ReleasedLogisticRegression(lam=1e-2, horizon=5, cadence=1).fit(X, y)
    assert not np.array_equal(m.releases_[0].coef, m2.releases_[0].coef)


def test_a_seeded_stream_says_it_is_not_private() -> None:
    X, y = _data()
    a = ReleasedLogisticRegression(lam=1e-2, horizon=5, random_state=3).fit(X, y)
    b = ReleasedLogisticRegression(lam=1e-2, horizon=5, random_state=3).fit(X, y)
    # reproducible — which is exactly why it is not private: the noise can be regenerated and subtracted
    assert np.array_equal(a.releases_[0].coef, b.releases_[0].coef)
    noise = np.random.default_rng(3).normal(0.0, 1.0, size=5) * a.sigma_
    assert np.allclose(a.releases_[0].coef - noise, a.state_.w, atol=1e-12)
    a.remove([1])
    for rel in a.releases_:
        c = rel.certificate
        assert c.private is False and c.noise_source == "seeded" and c.guarantee == SEEDED_GUARANTEE
        assert c.to_dict()["guarantee"].startswith("NOT PRIVATE")


def test_a_loaded_seeded_stream_stays_marked_not_private(tmp_path) -> None:
    X, y = _data()
    a = ReleasedLogisticRegression(lam=1e-2, horizon=5, random_state=3).fit(X, y)
    path = a.save(tmp_path / "m.npz", key=b"k" * 32)
    b = ReleasedLogisticRegression.load(path, key=b"k" * 32)
    b.remove([2])
    assert b.releases_[-1].certificate.private is False  # its earlier releases can be un-noised


def test_fit_refuses_n_equal_to_n_floor() -> None:
    X, y = _data(n=400)
    with pytest.raises(ValueError, match=r"fewer than n_floor \+ 1 = 401.*must exceed n_floor"):
        ReleasedLogisticRegression(lam=1e-2, horizon=5, n_floor=400).fit(X, y)
    m = ReleasedLogisticRegression(lam=1e-2, horizon=5, n_floor=399).fit(X, y)
    assert m.n_floor_ == 399


def test_the_guarantee_carries_the_schedule_condition() -> None:
    X, y = _data()
    m = ReleasedLogisticRegression(lam=1e-2, horizon=5).fit(X, y)
    c = m.releases_[0].certificate
    assert "given the release schedule" in c.guarantee and "schedule_reveals" in c.guarantee
    assert "how many and when" in c.schedule_reveals
    assert c.to_dict()["schedule_reveals"] == c.schedule_reveals

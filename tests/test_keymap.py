"""Removal by record key through a key → row map kept per model (lethe.keymap, issue 37)."""

from __future__ import annotations

import numpy as np
import pytest

from lethe import keymap
from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.release import ReleasedLogisticRegression


def _data(n: int = 60, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= 2 * np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.where(X[:, 0] > 0, 1, 0)


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the maps built from scratch (KeyMap.__init__)."""
    built: list[int] = []
    real = keymap.KeyMap.__init__

    def init(self: keymap.KeyMap, record_keys: np.ndarray, active: np.ndarray) -> None:
        built.append(int(record_keys.shape[0]))
        real(self, record_keys, active)

    monkeypatch.setattr(keymap.KeyMap, "__init__", init)
    return built


@pytest.mark.parametrize("string_keys", [False, True])
def test_the_map_is_built_once_and_kept_through_removals(monkeypatch: pytest.MonkeyPatch, string_keys: bool) -> None:
    X, y = _data()
    ids = np.array([f"r{i}" for i in range(60)]) if string_keys else np.arange(1000, 1060)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y, sample_ids=ids)
    built = _counting(monkeypatch)
    for j in (3, 7, 11, 20):
        est.remove(keys=[ids[j]])
        assert not est.active_[j]
    assert built == [60]  # one map for four removals (before: a map of every key on each call)


def test_unknown_and_removed_keys_are_answered_alike_and_change_nothing() -> None:
    X, y = _data()
    ids = np.arange(1000, 1060)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y, sample_ids=ids)
    est.remove(keys=[1005])
    active = est.active_.copy()
    msgs = []
    for k in (1005, 99):
        with pytest.raises(ValueError, match="not a record of this model") as e:
            est.remove(keys=[1010, k])
        msgs.append(str(e.value).replace(str(k), "K"))
    assert msgs[0] == msgs[1]
    assert np.array_equal(est.active_, active)  # 1010 was not removed either


def test_rows_added_after_a_removal_are_found_by_key_and_may_reuse_a_removed_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(80)
    ids = np.arange(80)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X[:60], y[:60], sample_ids=ids[:60])
    built = _counting(monkeypatch)
    est.remove(keys=[5])
    est.add(X[60:70], y[60:70], sample_ids=np.array([5, *range(61, 70)]))  # 5 again: a new record, row 60
    est.remove(keys=[5])
    assert not est.active_[60] and est.active_[61]
    est.remove(keys=[65])
    assert not est.active_[65]
    assert built == [60]  # extended by the added rows, not rebuilt


def test_a_loaded_model_rebuilds_its_map(tmp_path: pytest.TempPathFactory) -> None:
    X, y = _data()
    ids = np.array([f"r{i}" for i in range(60)])
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y, sample_ids=ids)
    est.remove(keys=["r1"])
    path = tmp_path / "m.npz"  # type: ignore[operator]
    est.save(path)
    back = CertifiedLogisticRegression.load(path)
    with pytest.raises(ValueError, match="not a record"):
        back.remove(keys=["r1"])
    back.remove(keys=["r2"])
    assert not back.active_[2]


def test_a_stale_entry_never_names_a_wrong_row() -> None:
    keys = np.array(["a", "b", "c"])
    active = np.ones(3, dtype=bool)

    class Owner:
        pass

    o = Owner()
    rows, missing = keymap.key_rows(o, ["b"], keys, active)
    assert rows.tolist() == [1] and missing is None
    keys[1] = ""  # the owner blanks a removed row's key in place
    active[1] = False
    rows, missing = keymap.key_rows(o, ["b"], keys, active)
    assert missing is not None and missing.key == "b"
    active[1] = True  # a replaced record holds the position with a blank key (Noisy-GD's edit)
    assert keymap.key_rows(o, ["b"], keys, active)[1] is not None


def test_the_released_model_removes_by_key_through_the_map(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data()
    ids = np.array([f"r{i}" for i in range(60)])
    est = ReleasedLogisticRegression(lam=1e-2, epsilon=1.0, random_state=0).fit(X, y, sample_ids=ids)
    built = _counting(monkeypatch)
    est.remove(keys=["r3"])
    est.remove(keys=["r4"])
    with pytest.raises(ValueError, match="not a record"):
        est.remove(keys=["r3"])
    assert built == [60]

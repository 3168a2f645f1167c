"""The service and the library take the same decisions by the same code (issue 34 item 2): the ``released-logistic``
adapter restores the library's estimator (:meth:`ReleasedLogisticRegression.restore`) and removes and releases
through its ``remove`` and ``release``. A sweep over removals compares every decision (n_floor, the horizon, the
cadence, the published flag, the counts) with the library's, error messages included; a fault injected into the
estimator's own code surfaces in the service's calls."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lethe.curator.adapters import get_adapter
from lethe.exceptions import BudgetExceededError
from lethe.release import ReleasedLogisticRegression

N = 120


def _data(n: int = N, d: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1, 0)
    return X, y


def _outcome(call: Any) -> tuple[str, str]:
    try:
        call()
    except ValueError as exc:  # BudgetExceededError included
        return type(exc).__name__, str(exc)
    return "ok", ""


@pytest.mark.parametrize(("horizon", "cadence", "n_floor"), [(3, 1, 110), (3, 2, 112), (2, 3, 100), (2, 2, 115)])
def test_the_service_and_the_library_decide_alike_at_the_horizon_and_at_n_floor(horizon: int, cadence: int,
                                                                                 n_floor: int) -> None:
    params = {"lam": 1e-2, "horizon": horizon, "cadence": cadence, "n_floor": n_floor}
    X, y = _data()
    adapter = get_adapter("released-logistic", params)
    art, _ = adapter.train(X, y, np.random.default_rng(0))
    lib = ReleasedLogisticRegression(**params).fit(X, y)  # the service's other defaults are the library's
    keep = np.ones(N, dtype=bool)
    seen = set()
    for step in range(N - n_floor + 2):  # past n_floor: the last removals are refused by both
        before = lib.accountant_.remaining
        try:
            new, cert = adapter.remove(art, X[keep], y[keep], np.array([0]), np.random.default_rng(step))
            s = ("ok", "")
        except ValueError as exc:
            s = (type(exc).__name__, str(exc))
        if before == 0:  # the library's default refuses; the service passes "withhold" (a documented option)
            assert _outcome(lambda: lib.remove([step]))[0] == "BudgetExceededError"  # noqa: B023 - called at once
            mine = _outcome(lambda: lib.remove([step], at_horizon="withhold"))  # noqa: B023
        else:
            mine = _outcome(lambda: lib.remove([step]))  # noqa: B023
        assert mine == s  # the same outcome, the same words: n_floor's refusal is the estimator's
        seen.add(s[0] if before or s[0] != "ok" else "withheld")
        if s[0] != "ok":
            continue
        art = new
        keep[np.flatnonzero(keep)[0]] = False
        m = art.meta
        assert (m["release_version"] + 1, m["pending"], m["horizon_spent"], m["state"]["n"]) == (
            lib.accountant_.releases, lib.stream_state()["pending"], lib.horizon_spent_, int(keep.sum()))
        assert cert["published"] is lib.certificate_.published
    assert seen == {"ok", "ValueError", "withheld"}  # the sweep reached the horizon and n_floor


def test_a_fault_in_the_estimators_removal_fails_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: the service's removal and release are the estimator's public ``remove`` and ``release`` (a
    fault injected there surfaces in the service's call)."""
    X, y = _data()
    adapter = get_adapter("released-logistic", {"lam": 1e-2, "horizon": 5, "cadence": 2, "n_floor": 100})
    art, _ = adapter.train(X, y, np.random.default_rng(0))
    art1, cert = adapter.remove(art, X, y, np.array([0]), np.random.default_rng(0))
    assert cert["published"] is False and art1.meta["pending"] == 1

    class Sentinel(Exception):
        pass

    def boom(*_a: Any, **_k: Any) -> Any:
        raise Sentinel

    for method, call in (("remove", lambda: adapter.remove(art, X, y, np.array([0]), np.random.default_rng(0))),
                         ("release", lambda: adapter.release(art1, np.random.default_rng(0)))):
        with monkeypatch.context() as mp:
            mp.setattr(ReleasedLogisticRegression, method, boom)
            with pytest.raises(Sentinel):
                call()
    art2, cert2 = adapter.release(art1, np.random.default_rng(0))
    assert cert2["published"] and art2.meta["release_version"] == 1 and art2.meta["pending"] == 0


def test_the_restored_stream_is_the_version() -> None:
    """restore ∘ stream_state keeps the state; the restore checks the state as a loaded file is checked."""
    X, y = _data()
    params = {"lam": 1e-2, "horizon": 4, "cadence": 2, "n_floor": 100}
    lib = ReleasedLogisticRegression(**params).fit(X, y)
    lib.remove([5])
    st = lib.stream_state()
    keep = np.arange(N) != 5
    back = ReleasedLogisticRegression.restore(params, st, X[keep], y[keep], classes=lib.classes_)
    st2 = back.stream_state()
    for k, v in st.items():
        if k == "release":
            assert np.array_equal(v["coef"], st2[k]["coef"]) and v["version"] == st2[k]["version"]
        elif k == "centre":
            assert np.array_equal(v, st2[k])
        else:
            assert v == st2[k], k
    assert back.certificate_ == lib.releases_[-1].certificate
    moved = {**st, "centre": st["centre"] * 1.05}
    with pytest.raises(ValueError, match="re-measured"):
        ReleasedLogisticRegression.restore(params, moved, X[keep], y[keep], classes=lib.classes_)
    with pytest.raises(ValueError, match="random_state must be None"):
        ReleasedLogisticRegression.restore({**params, "random_state": 0}, st, X[keep], y[keep], classes=lib.classes_)
    publish_only = ReleasedLogisticRegression.restore(params, st, classes=lib.classes_)
    with pytest.raises(ValueError, match="restored without its records"):
        publish_only.remove([0])
    assert publish_only.release().version == 1


def test_a_restored_stream_holding_only_its_last_release_is_not_saved(tmp_path: Any) -> None:
    X, y = _data()
    params = {"lam": 1e-2, "horizon": 4, "cadence": 1, "n_floor": 100}
    lib = ReleasedLogisticRegression(**params).fit(X, y)
    lib.remove([5])
    back = ReleasedLogisticRegression.restore(params, lib.stream_state(), classes=lib.classes_)
    with pytest.raises(ValueError, match="holds 1 of its 2 releases"):
        back.save(tmp_path / "m.npz")
    assert not list(tmp_path.iterdir())


def test_the_removal_options_are_checked(tmp_path: Any) -> None:
    X, y = _data()
    lib = ReleasedLogisticRegression(lam=1e-2, horizon=2, n_floor=100).fit(X, y)
    with pytest.raises(ValueError, match="at_horizon must be 'refuse' or 'withhold'"):
        lib.remove([0], at_horizon="ignore")
    with pytest.raises(TypeError, match="publish must be None, True or False"):
        lib.remove([0], publish=1)  # type: ignore[arg-type]
    assert lib.remove([0], publish=False).published is False  # cadence 1, but the caller's schedule defers it
    assert lib.remove([1]).published is True and lib.accountant_.remaining == 0
    with pytest.raises(BudgetExceededError):
        lib.remove([2])
    assert lib.horizon_spent_ is False
    cert = lib.remove([2], at_horizon="withhold")
    assert cert.published is False and lib.horizon_spent_ is True and lib.n_removed_ == 3
    assert ReleasedLogisticRegression.load(lib.save(tmp_path / "m.npz")).horizon_spent_ is True  # kept in the file

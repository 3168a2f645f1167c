"""The artifact rule of ``released-logistic`` (lethe.curator.artifacts.check_invariants →
lethe.release.check_release_state) and the adapter's re-measure of the centre's residual: a valid artifact passes,
every edit a release's privacy rests on is refused with a message naming the rule."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lethe.certified.bounds import release_sensitivity
from lethe.curator.adapters import get_adapter
from lethe.curator.artifacts import Artifact, ArtifactError, check_invariants
from lethe.privacy.release import release_sigma

PARAMS = {"lam": 1e-2, "epsilon": 1.0, "delta": 1e-5, "horizon": 50, "cadence": 2, "residual_cap": 0.01,
          "n_floor": "auto"}


def _data(n: int = 400, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1, 0)
    return X, y


@pytest.fixture(scope="module")
def trained() -> tuple[Any, Artifact, dict[str, Any], np.ndarray, np.ndarray]:
    X, y = _data()
    adapter = get_adapter("released-logistic", PARAMS)
    art, _ = adapter.train(X, y, np.random.default_rng(1))
    binding = {"model": "m", "mechanism": "released-logistic", "params": dict(adapter.params),
               "n_features": X.shape[1]}
    return adapter, art, binding, X, y


def _edited(art: Artifact, edit: Callable[[dict[str, np.ndarray], dict[str, Any]], None]) -> Artifact:
    arrays = {k: np.array(v, copy=True) for k, v in art.arrays.items()}
    meta = copy.deepcopy(art.meta)
    edit(arrays, meta)
    return Artifact(arrays=arrays, meta=meta)


def test_a_valid_release_artifact_passes_and_after_removals_too(trained: Any) -> None:
    adapter, art, binding, X, y = trained
    check_invariants(art, binding)  # release 0
    keep = np.ones(X.shape[0], dtype=bool)
    for step, row in enumerate((3, 17, 41)):  # cadence 2: a release, then a pending removal, then a release
        art, cert = adapter.remove(art, X[keep], y[keep], np.array([row - step]), np.random.default_rng(step))
        keep[np.flatnonzero(keep)[row - step]] = False
        check_invariants(art, binding)
        assert cert["residual_bound"] <= PARAMS["residual_cap"]


def _acc(key: str, factor: float) -> Callable[[dict[str, np.ndarray], dict[str, Any]], None]:
    def edit(a: dict[str, np.ndarray], m: dict[str, Any]) -> None:
        m["accountant"][key] = type(m["accountant"][key])(m["accountant"][key] * factor)
    return edit


def _state(key: str, value: Any) -> Callable[[dict[str, np.ndarray], dict[str, Any]], None]:
    def edit(a: dict[str, np.ndarray], m: dict[str, Any]) -> None:
        m["state"][key] = value
    return edit


EDITS: dict[str, tuple[Callable[[dict[str, np.ndarray], dict[str, Any]], None], str]] = {
    # σ lowered (the accountant's own δ check or the calibrated-σ rule refuses it)
    "sigma lowered": (_acc("sigma", 0.9), "sigma"),
    # Δ lowered with σ scaled alike: self-consistent for the accountant, not for the parameters
    "sensitivity and sigma lowered": (lambda a, m: (_acc("sensitivity", 0.5)(a, m), _acc("sigma", 0.5)(a, m)),
                                      "sensitivity"),
    "horizon raised": (_acc("horizon", 2), "horizon"),
    "epsilon raised": (_acc("epsilon", 2.0), "epsilon"),
    "beta above the cap": (_state("residual_bound", 0.02), "residual_cap"),
    "beta negative": (_state("residual_bound", -1e-9), "residual_cap"),
    "n differs from the state": (lambda a, m: m.__setitem__("n", m["n"] + 1), "recorded n"),
    # n_floor enters Δ: raising it past n is caught by the recomputed sensitivity or by the count rule
    "n below n_floor": (lambda a, m: (m.__setitem__("n_floor", m["n"] + 1)), "sensitivity|n_floor"),
    "releases do not match": (lambda a, m: m.__setitem__("release_version", m["release_version"] + 1), "releases"),
    "pending at cadence": (lambda a, m: m.__setitem__("pending", PARAMS["cadence"]), "cadence"),
    "centre widened": (lambda a, m: a.__setitem__("centre", np.append(a["centre"], 0.0)), "shape"),
    "release not finite": (lambda a, m: a["w"].__setitem__(0, np.nan), "non-finite"),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_an_edited_release_artifact_is_refused(trained: Any, name: str) -> None:
    _, art, binding, _, _ = trained
    edit, word = EDITS[name]
    with pytest.raises(ArtifactError, match=word):
        check_invariants(_edited(art, edit), binding)


def test_sigma_at_the_calibration_passes_and_just_below_is_refused(trained: Any) -> None:
    """The rule is σ ≥ the calibrated σ for the horizon, recomputed here from the parameters independently."""
    _, art, binding, _, _ = trained
    n_floor = art.meta["n_floor"]
    delta_sens = release_sensitivity(PARAMS["lam"], n_floor, PARAMS["residual_cap"], 1.0,
                                     loss_at_zero=np.log(2.0) * (1.0 + 1e-15))
    sigma = release_sigma(PARAMS["epsilon"], PARAMS["delta"], PARAMS["horizon"], delta_sens)
    assert art.meta["accountant"]["sigma"] == sigma
    check_invariants(_edited(art, lambda a, m: m["accountant"].__setitem__("sigma", sigma * (1 + 1e-9))), binding)
    with pytest.raises(ArtifactError, match="sigma"):
        check_invariants(_edited(art, lambda a, m: m["accountant"].__setitem__("sigma", sigma * (1 - 1e-12))),
                         binding)


def test_the_adapter_re_measures_the_centre_before_a_removal(trained: Any) -> None:
    """A centre moved away from the minimiser, its recorded β unchanged (within the cap, so the artifact's own
    invariants pass), is refused by the removal's re-measure; the genuine centre is not."""
    adapter, art, binding, X, y = trained
    moved = _edited(art, lambda a, m: a.__setitem__("centre", a["centre"] * 1.05))
    check_invariants(moved, binding)  # nothing in the file alone shows it
    with pytest.raises(ArtifactError, match="re-measured"):
        adapter.remove(moved, X, y, np.array([0]), np.random.default_rng(0))
    adapter.remove(art, X, y, np.array([0]), np.random.default_rng(0))

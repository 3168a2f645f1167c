"""Mechanism adapters: the small interface through which the curator drives an unlearning mechanism.

The curator holds no math. It hands an adapter the *current* data of a dataset (the rows still present, in a stable
order) and gets back an :class:`~lethe.curator.artifacts.Artifact` (arrays + JSON metadata, saved without pickle)
and a JSON-serialisable certificate dict, which it stores verbatim.

An adapter must provide::

    train(X, y, rng)                           -> (Artifact, certificate dict)
    remove(artifact, X, y, indices, rng)       -> (Artifact, certificate dict)   # X, y: data the artifact is for
    predict(artifact, X)                       -> predictions (in the dataset's label space)
    summary(artifact)                          -> public facts (budget spent / left, n); never a secret array
    check_features(n_features)                 -> raise ValueError if the dataset cannot be used

and declare which arrays are secret (``secret_arrays``), so the service never returns them. New mechanisms register
with :func:`register_adapter`; :func:`get_adapter` builds one from its name and JSON parameters.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from lethe.certified.mechanism import CertifiedRemoval, ModelState
from lethe.certified.noise import epsilon_spent
from lethe.curator.artifacts import Artifact


class MechanismAdapter(ABC):
    """Base class of mechanism adapters (see the module docstring for the contract)."""

    name: ClassVar[str]
    secret_arrays: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        self.params = self.check_params(dict(params or {}))

    @classmethod
    @abstractmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Validate and complete the JSON parameters; raise ``ValueError``/``TypeError`` naming the bad one."""

    @abstractmethod
    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        """Train on (X, y)."""

    @abstractmethod
    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        """Remove rows ``indices`` of (X, y), the data ``artifact`` was trained on, as one batch."""

    @abstractmethod
    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        """Predictions for the rows of X."""

    @abstractmethod
    def summary(self, artifact: Artifact) -> dict[str, Any]:
        """Public, JSON-serialisable facts about a version (budget, n). Must not contain secret arrays."""

    def check_features(self, n_features: int) -> None:  # noqa: B027 - optional hook
        """Refuse datasets the mechanism cannot use (default: accept)."""


_ADAPTERS: dict[str, type[MechanismAdapter]] = {}


def register_adapter(cls: type[MechanismAdapter]) -> type[MechanismAdapter]:
    """Class decorator: make a mechanism available to the curator under ``cls.name``."""
    if cls.name in _ADAPTERS and _ADAPTERS[cls.name] is not cls:
        raise ValueError(f"A mechanism named {cls.name!r} is already registered.")
    _ADAPTERS[cls.name] = cls
    return cls


def available_mechanisms() -> tuple[str, ...]:
    """Names of the registered mechanisms."""
    return tuple(sorted(_ADAPTERS))


def get_adapter(name: str, params: dict[str, Any] | None = None) -> MechanismAdapter:
    """Build the adapter of mechanism ``name`` with JSON ``params`` (validated)."""
    if name not in _ADAPTERS:
        raise ValueError(f"mechanism must be one of {available_mechanisms()}. Found {name!r}.")
    return _ADAPTERS[name](params)


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@register_adapter
class CertifiedRemovalAdapter(MechanismAdapter):
    """Certified removal for linear models (Guo et al. 2020) via :class:`lethe.certified.mechanism.CertifiedRemoval`.

    Parameters (JSON): ``loss`` ("logistic" or "squared"), ``lam``, ``sigma``, ``epsilon``, ``delta``, ``noise``,
    ``tol``, ``solver`` — as in :class:`~lethe.certified.mechanism.CertifiedRemoval`. For the logistic loss the
    dataset must have exactly two label values; the smaller is mapped to −1, the larger to +1, and predictions are
    returned in the original values.

    Artifact arrays: ``w`` (public) and ``b`` (SECRET: the objective perturbation).
    """

    name = "certified-removal"
    secret_arrays = ("b",)
    _KEYS = ("loss", "lam", "sigma", "epsilon", "delta", "noise", "tol", "solver")

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - set(cls._KEYS))
        if unknown:
            raise ValueError(f"Unknown parameter(s) for mechanism {cls.name!r}: {unknown}. Allowed: {list(cls._KEYS)}.")
        defaults = CertifiedRemoval()
        full = {k: params.get(k, getattr(defaults, k)) for k in cls._KEYS}
        if full["loss"] not in ("logistic", "squared"):
            raise ValueError(f"loss must be 'logistic' or 'squared'. Found {full['loss']!r}.")
        cls._mechanism(full)  # validates every value (errors say name, rule and value)
        return full

    @staticmethod
    def _mechanism(params: dict[str, Any]) -> CertifiedRemoval:
        # the service holds no data in memory between requests, so the exact-Hessian Cholesky solver is used
        return CertifiedRemoval(**params)

    @property
    def mechanism(self) -> CertifiedRemoval:
        """The configured mechanism."""
        mech = self.__dict__.get("_mech")
        if mech is None:
            mech = self.__dict__["_mech"] = self._mechanism(self.params)
        return mech

    # -- labels ---------------------------------------------------------------------------------------------------
    def _encode(self, y: np.ndarray, classes: list[float] | None) -> tuple[np.ndarray, list[float] | None]:
        if self.params["loss"] != "logistic":
            return np.asarray(y, dtype=np.float64), None
        if classes is None:
            values = np.unique(y)
            if values.size != 2:
                raise ValueError(f"The logistic loss needs exactly 2 label values. Found {values.size}: "
                                 f"{values[:5].tolist()}.")
            classes = [float(values[0]), float(values[1])]
        bad = ~np.isin(y, classes)
        if np.any(bad):
            raise ValueError(f"Labels must be one of {classes}. Found {float(y[np.argmax(bad)])}.")
        return np.where(y == classes[1], 1.0, -1.0), classes

    # -- state <-> artifact ---------------------------------------------------------------------------------------
    @staticmethod
    def _artifact(state: ModelState, classes: list[float] | None) -> Artifact:
        meta = {"mechanism": CertifiedRemovalAdapter.name, "n": state.n, "residual_bound": state.residual_bound,
                "x_norm_bound": _finite_or_none(state.x_norm_bound),
                "removals_since_training": state.removals_since_training, "retrainings": state.retrainings,
                "classes": classes}
        return Artifact(arrays={"w": np.array(state.w), "b": np.array(state.b)}, meta=meta)

    @staticmethod
    def _state(artifact: Artifact) -> ModelState:
        m = artifact.meta
        x_norm = m["x_norm_bound"]
        return ModelState(w=artifact.arrays["w"], b=artifact.arrays["b"], n=int(m["n"]),
                          residual_bound=float(m["residual_bound"]),
                          x_norm_bound=math.nan if x_norm is None else float(x_norm),
                          removals_since_training=int(m["removals_since_training"]),
                          retrainings=int(m["retrainings"]))

    # -- operations -----------------------------------------------------------------------------------------------
    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        yy, classes = self._encode(np.asarray(y, dtype=np.float64), None)
        state, cert = self.mechanism.train(X, yy, random_state=rng)
        return self._artifact(state, classes), cert.to_dict()

    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        classes = artifact.meta.get("classes")
        yy, _ = self._encode(np.asarray(y, dtype=np.float64), classes)
        state, cert = self.mechanism.remove(self._state(artifact), X, yy, np.asarray(indices, dtype=np.int64),
                                            random_state=rng)
        return self._artifact(state, classes), cert.to_dict()

    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        w = artifact.arrays["w"]
        if X.ndim != 2 or X.shape[1] != w.shape[0]:
            raise ValueError(f"features must have {w.shape[0]} columns. Found shape {X.shape}.")
        scores = X @ w
        classes = artifact.meta.get("classes")
        if classes is None:
            return scores
        return np.where(scores >= 0.0, classes[1], classes[0])

    def summary(self, artifact: Artifact) -> dict[str, Any]:
        m = artifact.meta
        mech = self.mechanism
        beta = float(m["residual_bound"])
        exact = mech.noise == "none"
        return {
            "mechanism": self.name,
            "guarantee": mech.guarantee,
            "epsilon": 0.0 if exact else float(mech.epsilon),
            "delta": 0.0 if exact or mech.noise == "laplace" else float(mech.delta),
            "n": int(m["n"]),
            "residual_bound": beta,
            "budget": float(mech.budget),
            "budget_left": 0.0 if exact else max(float(mech.budget) - beta, 0.0),
            "epsilon_spent": 0.0 if exact else float(epsilon_spent(beta, mech.sigma, mech.delta, mech.noise)),
            "removals_since_training": int(m["removals_since_training"]),
            "retrainings": int(m["retrainings"]),
        }


__all__ = ["CertifiedRemovalAdapter", "MechanismAdapter", "available_mechanisms", "get_adapter", "register_adapter"]

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




@register_adapter
class NoisyGDAdapter(MechanismAdapter):
    """Noisy-GD learning and unlearning (Chourasia & Shah 2023, Alg. 2, Thm 5.1) via
    :class:`lethe.noisygd.edit_stream.NoisyGDCurator`, for binary logistic regression on rows with ‖x‖ ≤ 1
    (L = 1, β = 1/4).

    Parameters (JSON): ``lam`` (λ), ``q`` (Rényi order), ``epsilon_dp``, ``epsilon_dd`` (targets of Thm 5.1),
    ``r`` (records per edit request), ``p`` (adaptivity of requesters for Thm 4.3: how many published models a
    requester may see before choosing its request; 0 = non-adaptive). The schedule (η, σ², ρ, K_A, K_Ā) is that of
    Thm 5.1 for the dataset size at training. A batch of m deletions is carried out as ⌈m / r⌉ edit requests of at
    most r records.

    Deletions replace a record by the dummy record (all-zero row, label 0; the paper's footnote 1), so the database
    size n stays fixed. The curator service deletes the raw record; the artifact only counts the dummies
    (``n_dummies``), and the database handed to the mechanism is the current records followed by that many dummies
    (Noisy-GD's full-batch mean gradient does not depend on the order of records).

    Secret state: none is kept. The model θ is what is published (f_pub = identity), and each operation draws its
    noise from a fresh generator given by the service, so no generator state is stored.
    """

    name = "noisy-gd"
    secret_arrays = ()
    _DEFAULTS: ClassVar[dict[str, Any]] = {"lam": 0.1, "q": 2.0, "epsilon_dp": 1.0, "epsilon_dd": 0.5, "r": 1, "p": 0}

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        from lethe.noisygd.schedule import convex_schedule

        unknown = sorted(set(params) - set(cls._DEFAULTS))
        if unknown:
            raise ValueError(f"Unknown parameter(s) for mechanism {cls.name!r}: {unknown}. "
                             f"Allowed: {list(cls._DEFAULTS)}.")
        full = {**cls._DEFAULTS, **params}
        # validate every value now (errors say name, rule and value), on a nominal size
        convex_schedule(lipschitz=1.0, smoothness=0.25, lam=full["lam"], n=100, d=2, r=full["r"], q=full["q"],
                        epsilon_dp=full["epsilon_dp"], epsilon_dd=full["epsilon_dd"])
        if isinstance(full["p"], bool) or not isinstance(full["p"], int) or full["p"] < 0:
            raise ValueError(f"p must be an integer >= 0. Found {full['p']!r}.")
        return full

    @staticmethod
    def _encode(y: np.ndarray, classes: list[float] | None) -> tuple[np.ndarray, list[float]]:
        if classes is None:
            values = np.unique(y)
            if values.size != 2:
                raise ValueError(f"Noisy-GD logistic regression needs exactly 2 label values. Found {values.size}.")
            classes = [float(values[0]), float(values[1])]
        bad = ~np.isin(y, classes)
        if np.any(bad):
            raise ValueError(f"Labels must be one of {classes}. Found {float(y[np.argmax(bad)])}.")
        return np.where(y == classes[1], 1.0, -1.0), classes

    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        from lethe.noisygd.edit_stream import CuratorConfig, Database, NoisyGDCurator
        from lethe.noisygd.models import LogisticModel
        from lethe.noisygd.schedule import convex_schedule

        p = self.params
        yy, classes = self._encode(np.asarray(y, dtype=np.float64), None)
        n, d = X.shape
        schedule = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=p["lam"], n=n, d=d, r=p["r"], q=p["q"],
                                   epsilon_dp=p["epsilon_dp"], epsilon_dd=p["epsilon_dd"])
        cur = NoisyGDCurator(LogisticModel(d), CuratorConfig.from_convex_schedule(schedule, row_bound=1.0, p=p["p"]),
                             random_state=rng)
        cert = cur.learn(Database(X, yy)).to_dict()
        return self._artifact(cur, n_dummies=0, classes=classes, last=cert), cert

    @staticmethod
    def _artifact(cur: Any, *, n_dummies: int, classes: list[float], last: dict[str, Any]) -> Artifact:
        meta = {"mechanism": NoisyGDAdapter.name, "model": cur.model.to_dict(), "config": cur.config.to_dict(),
                "step": cur.step, "total_steps": cur._total_steps, "n_dummies": n_dummies, "classes": classes,
                "n": cur.database.n - n_dummies,
                "last": {k: last.get(k) for k in ("operation", "epsilon_dp", "epsilon_dd", "epsilon_dd_adaptive",
                                                  "q", "theorem")}}
        return Artifact(arrays={"theta": cur.theta}, meta=meta)

    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        from lethe.noisygd.edit_stream import CuratorConfig, Database, EditRequest, NoisyGDCurator
        from lethe.noisygd.models import model_from_dict

        m = artifact.meta
        yy, classes = self._encode(np.asarray(y, dtype=np.float64), m["classes"])
        n_dummies = int(m["n_dummies"])
        d = X.shape[1]
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0 or np.unique(idx).size != idx.size or idx.min() < 0 or idx.max() >= X.shape[0]:
            raise ValueError(f"indices must be distinct rows of the {X.shape[0]} current records. "
                             f"Found {idx.tolist()}.")
        model = model_from_dict(m["model"])
        cur = NoisyGDCurator(model, CuratorConfig(**m["config"]), random_state=rng)
        # restore the state exactly as NoisyGDCurator.load does, without writing the records to a file
        cur._database = Database(np.vstack([X, np.zeros((n_dummies, d))]), np.concatenate([yy, np.zeros(n_dummies)]))
        cur._theta = np.array(artifact.arrays["theta"], dtype=np.float64)
        cur._step = int(m["step"])
        cur._total_steps = int(m["total_steps"])
        r = int(self.params["r"])
        certs = [cur.unlearn(EditRequest.deletion(idx[i:i + r].tolist(), n_features=d)).to_dict()
                 for i in range(0, idx.size, r)]
        cert = dict(certs[-1])
        cert["n_removed"] = int(idx.size)
        cert["n_remaining"] = int(X.shape[0] - idx.size)
        cert["edit_requests"] = len(certs)
        if len(certs) > 1:
            cert["edits"] = certs
        return self._artifact(cur, n_dummies=n_dummies + int(idx.size), classes=classes, last=cert), cert

    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        theta = artifact.arrays["theta"]
        if X.ndim != 2 or X.shape[1] != theta.shape[0]:
            raise ValueError(f"features must have {theta.shape[0]} columns. Found shape {X.shape}.")
        classes = artifact.meta["classes"]
        return np.where(X @ theta >= 0.0, classes[1], classes[0])

    def summary(self, artifact: Artifact) -> dict[str, Any]:
        m = artifact.meta
        return {"mechanism": self.name, "guarantee": m["last"].get("theorem"), "q": self.params["q"],
                "epsilon_dp": m["last"].get("epsilon_dp"), "epsilon_dd": m["last"].get("epsilon_dd"),
                "epsilon_dd_adaptive": m["last"].get("epsilon_dd_adaptive"), "n": int(m["n"]),
                "n_dummies": int(m["n_dummies"]), "edits": int(m["step"]),
                "target_epsilon_dp": self.params["epsilon_dp"], "target_epsilon_dd": self.params["epsilon_dd"]}


__all__ = ["CertifiedRemovalAdapter", "MechanismAdapter", "NoisyGDAdapter", "available_mechanisms", "get_adapter",
           "register_adapter"]

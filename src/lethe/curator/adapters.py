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

An adapter may also keep a model *warm* between batches (``supports_warm = True``)::

    restore(artifact, X, y, active)            -> WarmModel   # X, y: every row of the dataset; active: present
    remove_warm(warm, rows, rng)               -> (Artifact, certificate dict)   # advances warm

The worker then holds one :class:`WarmModel` per model (solver caches included) and rebuilds it only when it does
not hold the published version (after a restart, a failed batch, or another process's publication).

and declare which arrays are secret (``secret_arrays``), so the service never returns them. Mechanisms come from
the registry of families (:mod:`lethe.families`; :func:`register_adapter` for one outside it); :func:`get_adapter`
builds one from its name and JSON parameters.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lethe.certified.mechanism import CertifiedRemoval, ModelState
from lethe.certified.model_file import classes_meta
from lethe.certified.noise import epsilon_spent
from lethe.certified.one_vs_all import OneVsAllRemoval
from lethe.curator.artifacts import (
    Artifact,
    ArtifactError,
    certified_removal_states,
    finite_array,
)


class WarmModel:
    """What the worker keeps of one model between batches: the estimator that computes its removals, over the
    dataset's whole row space (removed rows inactive), with its solver caches (factorisation, anchor system,
    single-precision copy, pending vectors), and the id of the published version it is at (set by the service).

    It is derived state only: the published artifact plus the data rebuild it exactly (:meth:`restore`), and the
    certificate of every removal rests on the state's accumulated bound β, never on what a cache remembers.
    """

    def __init__(self, estimator: Any) -> None:
        self.estimator = estimator
        self.version_id: int | None = None


class MechanismAdapter(ABC):
    """Base class of mechanism adapters (see the module docstring for the contract)."""

    name: ClassVar[str]
    secret_arrays: ClassVar[tuple[str, ...]] = ()
    supports_warm: ClassVar[bool] = False
    #: declared capabilities (read by the generic curator, never sniffed; each agrees with the family's
    #: :class:`lethe.families.Capability` set, which the conformance suite checks):
    #: the trainer passes the records' keys to :meth:`train` (``Capability.RECORD_KEYS``);
    uses_record_keys: ClassVar[bool] = False
    #: arrays needed to predict but never published to model-readers;
    unpublished_arrays: ClassVar[tuple[str, ...]] = ()
    #: publications follow a clock (``Capability.RELEASE_SCHEDULE``): :meth:`release_due` may answer True.
    keeps_schedule: ClassVar[bool] = False
    #: a known seed would publish the noise (released models): the trainer refuses ``random_state``.
    refuses_seed: ClassVar[bool] = False
    #: parameters a model of a dataset registered with a schema gets unless told otherwise (e.g. an intercept).
    tabular_defaults: ClassVar[dict[str, Any]] = {}
    #: seconds since the epoch; :class:`Adapters` gives every adapter the curator's clock.
    clock: Callable[[], float] = staticmethod(time.time)

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        self.params = self.check_params(dict(params or {}))

    @classmethod
    @abstractmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Validate and complete the JSON parameters; raise ``ValueError``/``TypeError`` naming the bad one."""

    @classmethod
    def _with_defaults(cls, params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
        """``{**defaults, **params}``; ``ValueError`` naming any key of ``params`` not in ``defaults``."""
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            raise ValueError(f"Unknown parameter(s) for mechanism {cls.name!r}: {unknown}. "
                             f"Allowed: {list(defaults)}.")
        return {**defaults, **params}

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

    @classmethod
    def check_artifact(cls, artifact: Artifact, n_features: int | None, params: dict[str, Any] | None) -> None:
        """The family's invariants of a stored state (called by :func:`lethe.curator.artifacts.check_invariants`
        after the generic checks, for every artifact loaded or saved); raise
        :class:`~lethe.curator.artifacts.ArtifactError` naming the rule and the value.

        The default checks what every state must satisfy: its float arrays finite. A family overrides it with its
        own rules (and the conformance suite requires that it does)."""
        for name, a in artifact.arrays.items():
            arr = np.asarray(a)
            if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
                raise ArtifactError(f"array {name!r} holds a non-finite value.")

    def release_due(self, summary: dict[str, Any], now: float) -> bool:
        """Mechanisms with a release schedule (``keeps_schedule``): True when a release is due at ``now`` without a
        new batch. Default: never."""
        return False

    def check_features(self, n_features: int) -> None:  # noqa: B027 - optional hook
        """Refuse datasets the mechanism cannot use (default: accept)."""

    def restore(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, active: np.ndarray) -> WarmModel:
        """Warm adapters: the in-memory model of a version over the dataset's row space (see the module docstring)."""
        raise NotImplementedError(f"mechanism {self.name!r} does not keep models warm")

    def remove_warm(self, warm: WarmModel, rows: np.ndarray,
                    rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        """Warm adapters: remove ``rows`` from ``warm`` as one batch, advancing it."""
        raise NotImplementedError(f"mechanism {self.name!r} does not keep models warm")


_ADAPTERS: dict[str, type[MechanismAdapter]] = {}


def register_adapter(cls: type[MechanismAdapter]) -> type[MechanismAdapter]:
    """Class decorator: make a mechanism available to the curator under ``cls.name`` without a family record (the
    built-ins and installed families come from :mod:`lethe.families`; prefer a family, which the console can
    describe)."""
    if cls.name in _ADAPTERS and _ADAPTERS[cls.name] is not cls:
        raise ValueError(f"A mechanism named {cls.name!r} is already registered.")
    _ADAPTERS[cls.name] = cls
    return cls


def _family_adapters() -> dict[str, type[MechanismAdapter]]:
    """The adapter of every registered family that runs in the service (:mod:`lethe.families`: built-ins and
    entry-point families), by mechanism name, imported now; an adapter that does not subclass
    :class:`MechanismAdapter`, or whose name is not one of its family's mechanisms, is refused."""
    from lethe.families import families

    out: dict[str, type[MechanismAdapter]] = {}
    for fam in families():
        if fam.adapter is None:
            continue
        cls = fam.adapter_class()
        if not (isinstance(cls, type) and issubclass(cls, MechanismAdapter)):
            raise TypeError(f"Family {fam.name!r}: its adapter {fam.adapter!r} must subclass MechanismAdapter.")
        if cls.name not in fam.mechanisms:
            raise ValueError(f"Family {fam.name!r}: its adapter's name {cls.name!r} must be one of its mechanisms "
                             f"{list(fam.mechanisms)}.")
        out[cls.name] = cls
    return out


def available_mechanisms() -> tuple[str, ...]:
    """Names of the mechanisms the service runs: every family of :mod:`lethe.families` with an adapter, and any
    adapter registered with :func:`register_adapter`."""
    return tuple(sorted({**_ADAPTERS, **_family_adapters()}))


def get_adapter(name: str, params: dict[str, Any] | None = None) -> MechanismAdapter:
    """Build the adapter of mechanism ``name`` with JSON ``params`` (validated)."""
    cls = _ADAPTERS.get(name) or _family_adapters().get(name)
    if cls is None:
        raise ValueError(f"mechanism must be one of {available_mechanisms()}. Found {name!r}.")
    return cls(params)


@dataclass(eq=False)
class Adapters:
    """Builds adapters (:func:`get_adapter`) for the curator's components, giving those that keep a release schedule
    (``release_due``) the curator's clock.

    Parameters
    ----------
    clock : seconds since the epoch (default :func:`time.time`): the time of a ``released-logistic`` model's release 0
        and of its ``cadence_seconds`` rule; tests pass a fake clock.
    """

    clock: Callable[[], float] = time.time

    def get(self, name: str, params: dict[str, Any] | None = None) -> Any:
        """The adapter of mechanism ``name`` with JSON ``params``, on this clock where it keeps a schedule."""
        adapter = get_adapter(name, params)
        adapter.clock = self.clock
        return adapter


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


class CertifiedRemovalAdapter(MechanismAdapter):
    """Certified removal for linear models (Guo et al. 2020) through the library's estimators.

    A removal is computed by :meth:`lethe.certified.estimators.CertifiedLogisticRegression.remove` (or
    :meth:`~lethe.certified.estimators.CertifiedLinearRegression.remove` for ``loss="squared"``) — the same code, with
    the same options and defaults, as in a notebook: the mechanism's Newton step (Eq. 3, 6) with its solver cache, the
    budget
    and retraining (Alg. 2), one-vs-all with a joint budget for more than two classes.

    Parameters (JSON): ``loss`` ("logistic", default, or "squared") and every option of the estimator of that loss
    except ``random_state`` (the service draws fresh entropy for every operation) and ``negative_subsample`` (not
    supported: the subsample of each binary model would have to be kept per record): ``lam``, ``sigma``,
    ``epsilon``, ``delta``, ``noise``, ``tol``, ``max_iter``, ``solver``, ``bound``, ``calibration``, ``refresh``,
    ``fit_intercept`` and (logistic) ``normalize_rows`` — with the estimator's defaults (``bound="tight"``,
    ``calibration="analytic"``, ``solver="auto"``: ``anchor`` where a d × d matrix may be kept, else ``pcg``; the
    version's artifact records the concrete one), except that a model of a dataset registered with a schema gets
    ``fit_intercept=True`` unless told otherwise (``tabular_defaults``). Labels may be numbers or strings; with
    more than two values the model is one-vs-all.

    ``fit_intercept`` and ``normalize_rows`` are applied as the estimator applies them (rows normalised, then the
    logistic loss trains on [xᵢ/√2, 1/√2], the squared loss on [xᵢ, 1]): at training by the estimator itself, at
    :meth:`restore` and :meth:`predict` by :meth:`model_rows`, the same map.

    Artifact arrays: ``w`` (public; shape (d,), or (K, d) one-vs-all; d + 1 with an intercept, the last entry the
    intercept's weight on the constant feature) and ``b`` (SECRET: the perturbations). Metadata: the classes and,
    per binary model, n, β, the ‖X‖₂ bound and the counters of :class:`ModelState`.
    """

    name = "certified-removal"
    secret_arrays = ("b",)
    supports_warm = True
    tabular_defaults: ClassVar[dict[str, Any]] = {"fit_intercept": True}
    _UNSUPPORTED = ("random_state", "negative_subsample")

    @staticmethod
    def _estimator_class(loss: str) -> Any:
        from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression

        return CertifiedLogisticRegression if loss == "logistic" else CertifiedLinearRegression

    @classmethod
    def check_artifact(cls, artifact: Artifact, n_features: int | None, params: dict[str, Any] | None) -> None:
        """``w`` and ``b`` finite float64 vectors of the dataset's dimension; n ≥ 1; counters ≥ 0; the accumulated
        residual bound β finite, ≥ 0 and, unless ``noise="none"``, β ≤ ε′ — the budget the parameters σ, ε, δ give
        (Alg. 2: a state above budget must have been retrained, so such a file certifies nothing), judged by the
        mechanism's own decision (:meth:`lethe.certified.one_vs_all.OneVsAllRemoval.check_stored`)."""
        betas = certified_removal_states(artifact.meta, artifact.arrays, n_features)
        if params is None:
            return
        try:
            # fit_intercept / normalize_rows shape the rows, not the mechanism
            mech = CertifiedRemoval(**{k: v for k, v in params.items() if k not in ("fit_intercept", "normalize_rows")})
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"the bound parameters are invalid: {exc}") from None
        try:  # the mechanism's own budget decision on the (joint) bound (Alg. 2, line 16)
            OneVsAllRemoval(mech).check_stored(betas)
        except ValueError as exc:
            raise ArtifactError(str(exc)) from None

    @classmethod
    def _option_defaults(cls, loss: str) -> dict[str, Any]:
        params = cls._estimator_class(loss)().get_params()
        return {k: v for k, v in params.items() if k not in cls._UNSUPPORTED}

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        loss = params.get("loss", "logistic")
        if loss not in ("logistic", "squared"):
            raise ValueError(f"loss must be 'logistic' or 'squared'. Found {loss!r}.")
        defaults = cls._option_defaults(loss)
        allowed = ["loss", *defaults]
        if "negative_subsample" in params and params["negative_subsample"] is not None:
            raise ValueError("negative_subsample is not supported by the curator service (the subsample of each "
                             f"binary model would have to be kept per record). Found {params['negative_subsample']!r}.")
        unknown = sorted(set(params) - set(allowed) - {"negative_subsample"})
        if unknown:
            raise ValueError(f"Unknown parameter(s) for mechanism {cls.name!r}: {unknown}. Allowed: {allowed}.")
        full = {"loss": loss, **{k: params.get(k, v) for k, v in defaults.items()}}
        if loss == "logistic" and full["noise"] not in ("gaussian", "laplace"):
            raise ValueError(f"noise must be 'gaussian' or 'laplace' for logistic regression. Found {full['noise']!r}.")
        cls._mechanism_of(full)  # validates every value (errors say name, rule and value)
        return full

    #: Options of the estimator that shape the rows, not the mechanism (validated here, applied by the estimator).
    _ROW_OPTIONS = ("fit_intercept", "normalize_rows")

    @classmethod
    def _mechanism_of(cls, params: dict[str, Any]) -> CertifiedRemoval:
        for name in cls._ROW_OPTIONS:
            if name in params and not isinstance(params[name], bool):
                raise TypeError(f"{name} must be a bool (true or false). Found {params[name]!r}.")
        return CertifiedRemoval(**{k: v for k, v in params.items() if k not in cls._ROW_OPTIONS})

    @property
    def mechanism(self) -> CertifiedRemoval:
        """The configured mechanism (as the estimator builds it)."""
        mech = self.__dict__.get("_mech")
        if mech is None:
            mech = self.__dict__["_mech"] = self._mechanism_of(self.params)
        return mech

    def model_rows(self, X: np.ndarray) -> np.ndarray:
        """The rows the weights apply to, as the estimator's ``_validate_X`` forms them: ``normalize_rows`` (logistic)
        then the intercept column. ``X`` itself when neither is set (not copied)."""
        from lethe.certified.estimators import INTERCEPT_SCALE
        from lethe.preprocessing import normalize_rows

        logistic = self.params["loss"] == "logistic"
        if logistic and self.params.get("normalize_rows", False):
            X = normalize_rows(np.asarray(X, dtype=np.float64))
        if self.params.get("fit_intercept", False):
            scale = INTERCEPT_SCALE if logistic else 1.0
            X = np.column_stack([np.asarray(X, dtype=np.float64) * scale, np.full(X.shape[0], scale)])
        return X

    def _estimator(self, random_state: Any) -> Any:
        options = {k: v for k, v in self.params.items() if k != "loss"}
        return self._estimator_class(self.params["loss"])(**options, random_state=random_state)

    # -- state <-> artifact ---------------------------------------------------------------------------------------
    @staticmethod
    def _states(artifact: Artifact) -> list[ModelState]:
        m, a = artifact.meta, artifact.arrays
        if "states" not in m:  # format of lethe <= 0.x: one binary model, its state's fields in the metadata
            x_norm = m["x_norm_bound"]
            return [ModelState(w=a["w"], b=a["b"], n=int(m["n"]), residual_bound=float(m["residual_bound"]),
                               x_norm_bound=math.nan if x_norm is None else float(x_norm),
                               removals_since_training=int(m["removals_since_training"]),
                               retrainings=int(m["retrainings"]))]
        W, B = np.atleast_2d(a["w"]), np.atleast_2d(a["b"])
        out = []
        for k, s in enumerate(m["states"]):
            x_norm = s["x_norm_bound"]
            out.append(ModelState(w=W[k], b=B[k], n=int(s["n"]), residual_bound=float(s["residual_bound"]),
                                  x_norm_bound=math.nan if x_norm is None else float(x_norm),
                                  removals_since_training=int(s["removals_since_training"]),
                                  retrainings=int(s["retrainings"]), train_iterations=int(s["train_iterations"])))
        return out

    def _state(self, artifact: Artifact) -> ModelState:
        """The state of a binary model (the first binary model of a one-vs-all one)."""
        return self._states(artifact)[0]

    def _artifact(self, est: Any, n: int) -> Artifact:
        states = est.states_
        classes = classes_meta(est.classes_) if hasattr(est, "classes_") else None
        meta = {"mechanism": self.name, "format": 2, "n": int(n), "classes": classes,
                "n_removed": int(est.n_removed_), "solver": str(est.mechanism_.solver),
                "states": [{"n": st.n, "residual_bound": st.residual_bound,
                            "x_norm_bound": _finite_or_none(st.x_norm_bound),
                            "removals_since_training": st.removals_since_training, "retrainings": st.retrainings,
                            "train_iterations": st.train_iterations} for st in states]}
        if len(states) == 1:
            arrays = {"w": np.array(states[0].w), "b": np.array(states[0].b)}
        else:
            arrays = {"w": np.vstack([st.w for st in states]), "b": np.vstack([st.b for st in states])}
        return Artifact(arrays=arrays, meta=meta)

    def _joint(self, betas: list[float]) -> float:
        """The one-vs-all model's residual bound (:meth:`lethe.certified.one_vs_all.OneVsAllRemoval.joint`: √Σβ_k² for
        Gaussian b, Σβ_k for Laplace-type b); β for a binary model."""
        return OneVsAllRemoval(self.mechanism).joint(betas)

    # -- operations -----------------------------------------------------------------------------------------------
    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        est = self._estimator(rng).fit(X, y)
        certs = [_public_certificate(c.to_dict()) for c in est.fit_certificates_]
        if len(certs) == 1:
            cert = certs[0]
        else:
            mech = self.mechanism
            beta = self._joint([c["residual_bound"] for c in certs])
            eps, delta = mech.eps_delta()
            cert = {"operation": "train", "guarantee": mech.guarantee + "; one-vs-all, joint budget",
                    "epsilon": eps, "delta": delta, "residual_bound": beta, "budget": float(mech.budget),
                    "budget_left": max(float(mech.budget) - beta, 0.0), "retrained": False,
                    "n_remaining": int(X.shape[0]), "per_class": certs}
        return self._artifact(est, X.shape[0]), cert

    def restore(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, active: np.ndarray) -> WarmModel:
        """Rebuild the estimator of a version over the dataset's whole row space.

        ``X`` (N × d) and ``y`` (N,) hold every row the dataset ever had, in a fixed order; ``active`` marks the
        rows still present (the ones the version is for). ``X`` is used as is (not copied: pass a private view,
        e.g. a copy-on-write memory map — removal zeroes the removed rows in it). The solver caches start empty and
        are primed from the state (one pass over the data, as ``fit`` does); certificates rest on the state's
        accumulated bound β, which the artifact carries.
        """
        states = self._states(artifact)
        classes = artifact.meta.get("classes")
        active = np.asarray(active, dtype=bool)
        n_full = X.shape[0]
        if y.shape != (n_full,) or active.shape != (n_full,):
            raise ValueError(f"X, y and active must describe the same {n_full} rows. Found {y.shape}, {active.shape}.")
        if int(np.count_nonzero(active)) != states[0].n:
            raise ValueError(f"The version is for {states[0].n} records; the data has {int(np.count_nonzero(active))}.")
        n_features = int(X.shape[1])
        X = self.model_rows(X)  # with an intercept or normalize_rows: a private copy (removal zeroes its rows)
        K = len(states)
        Y = np.zeros((K, n_full))
        labels = None
        if self.params["loss"] == "logistic":
            assert classes is not None
            labels = _labels_like(classes, y)
            if K == 1:
                Y[0] = np.where(y == labels[1], 1.0, -1.0)
            else:
                for k in range(K):
                    Y[k] = np.where(y == labels[k], 1.0, -1.0)
        else:
            Y[0] = y
        Y[:, ~active] = 0.0
        # the version's parameters (remove() checks them) and the concrete solver it was computed with (solver="auto"
        # resolves at training; versions written before it existed name their solver in the parameters); the caches
        # are primed as fit leaves them (one data pass now, so that the first removal is as warm as the next ones);
        # the service maps its own keys to rows (no record keys)
        options = {k: v for k, v in self.params.items() if k != "loss"}
        est = self._estimator_class(self.params["loss"]).from_state(
            options, X=X, Y=Y, active=active.copy(), states=states, n_features_in=n_features, classes=labels,
            n_removed=int(artifact.meta.get("n_removed", 0)), solver=artifact.meta.get("solver"), prime=True)
        return WarmModel(est)

    def remove_warm(self, warm: WarmModel, rows: np.ndarray,
                    rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        """Remove ``rows`` (positions in the row space of :meth:`restore`) as one batch (Eq. 6) with the estimator's
        own :meth:`remove`; advances ``warm``. On error the estimator is unchanged (its contract)."""
        est = warm.estimator
        cert = est.remove_rows(np.asarray(rows, dtype=np.int64), random_state=rng)  # fresh entropy for a retraining
        out = _public_certificate(cert.to_dict())
        if "operation" not in out:  # one-vs-all
            out["operation"] = "retrain" if cert.retrained else "remove"
            out["guarantee"] = self.mechanism.guarantee + "; one-vs-all, joint budget"
            out["retrained"] = bool(cert.retrained)
        n = est.n_remaining_
        out["n_remaining"] = int(n)
        return self._artifact(est, n), out

    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        warm = self.restore(artifact, np.array(X, dtype=np.float64, order="C"), np.asarray(y),
                            np.ones(X.shape[0], dtype=bool))
        return self.remove_warm(warm, np.asarray(indices, dtype=np.int64), rng)

    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        W = np.atleast_2d(artifact.arrays["w"])
        d = W.shape[1] - int(bool(self.params.get("fit_intercept", False)))
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"features must have {d} columns. Found shape {X.shape}.")
        scores = self.model_rows(X) @ W.T
        classes = artifact.meta.get("classes")
        if classes is None:
            return scores[:, 0]
        labels = np.asarray(classes)
        if W.shape[0] == 1:
            return labels[(scores[:, 0] > 0).astype(int)]
        return labels[np.argmax(scores, axis=1)]

    def summary(self, artifact: Artifact) -> dict[str, Any]:
        m = artifact.meta
        mech = self.mechanism
        states = self._states(artifact)
        beta = self._joint([st.residual_bound for st in states])
        exact = mech.noise == "none"
        out = {
            "mechanism": self.name,
            "guarantee": mech.guarantee,
            "epsilon": 0.0 if exact else float(mech.epsilon),
            "delta": 0.0 if exact or mech.noise == "laplace" else float(mech.delta),
            "n": int(m["n"]),
            "residual_bound": beta,
            "budget": float(mech.budget),
            "budget_left": 0.0 if exact else max(float(mech.budget) - beta, 0.0),
            "epsilon_spent": 0.0 if exact else float(epsilon_spent(beta, mech.sigma, mech.delta, mech.noise,
                                                                   calibration=mech.calibration)),
            "removals_since_training": max(st.removals_since_training for st in states),
            "retrainings": sum(st.retrainings for st in states),
            "bound": mech.bound, "calibration": mech.calibration, "solver": m.get("solver", mech.solver),
        }
        if len(states) > 1:
            out["binary_models"] = len(states)
        return out


def _public_certificate(cert: dict[str, Any]) -> dict[str, Any]:
    """A certificate as the service stores and shows it: without row positions (they would identify a removed record
    to anyone who knows the data's order)."""
    out = {k: v for k, v in cert.items() if k != "removed_indices"}
    if isinstance(out.get("per_class"), list):
        out["per_class"] = [None if c is None else _public_certificate(c) for c in out["per_class"]]
    return out


def _labels_like(classes: list[Any], y: np.ndarray) -> np.ndarray:
    """The stored class labels as an array comparable with ``y``."""
    if y.dtype.kind in "iufb":
        return np.asarray(classes, dtype=np.float64)
    return np.asarray([str(c) for c in classes])



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
    def check_artifact(cls, artifact: Artifact, n_features: int | None, params: dict[str, Any] | None) -> None:
        """``theta`` finite of the dataset's dimension; the configuration's λ and q equal the parameters."""
        finite_array(artifact.arrays, "theta", n_features)
        config = artifact.meta.get("config")
        if not isinstance(config, dict):
            raise ArtifactError("the Noisy-GD configuration is missing.")
        if params is not None:
            for k in ("lam", "q"):
                if not math.isclose(float(config.get(k, math.nan)), float(params[k]), rel_tol=1e-12):
                    raise ArtifactError(f"the state's {k}={config.get(k)!r} differs from the model's {params[k]!r}.")

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        from lethe.noisygd.schedule import convex_schedule

        full = cls._with_defaults(params, cls._DEFAULTS)
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
        from lethe.noisygd.edit_stream import CuratorConfig, EditRequest, NoisyGDCurator
        from lethe.noisygd.models import model_from_dict

        m = artifact.meta
        yy, classes = self._encode(np.asarray(y, dtype=np.float64), m["classes"])
        n_dummies = int(m["n_dummies"])
        d = X.shape[1]
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0 or np.unique(idx).size != idx.size or idx.min() < 0 or idx.max() >= X.shape[0]:
            raise ValueError(f"indices must be distinct rows of the {X.shape[0]} current records. "
                             f"Found {idx.tolist()}.")
        # the curator's one public constructor for a state held elsewhere (checked as NoisyGDCurator.load checks a
        # file; the certificate history is this service's ledger)
        cur = NoisyGDCurator.resume(model_from_dict(m["model"]), CuratorConfig(**m["config"]),
                                    np.vstack([X, np.zeros((n_dummies, d))]), np.concatenate([yy, np.zeros(n_dummies)]),
                                    np.asarray(artifact.arrays["theta"], dtype=np.float64), step=int(m["step"]),
                                    total_steps=int(m["total_steps"]), random_state=rng, where="the model version")
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


#: Defaults of a model trained on a dataset registered with a schema (``lethe dataset add --schema``), where the
#: parameters do not say otherwise: an intercept (a table's classes are rarely balanced around the origin of the
#: encoded rows). λ keeps the estimator's default; choose it with ``lethe.plan_lambda`` on public data (Adult:
#: λ = 3·10⁻⁵, see docs/tabular.md).
def tabular_defaults(mechanism: str) -> dict[str, Any]:
    """The parameters a model of mechanism ``mechanism`` gets on a schema dataset unless told otherwise (its adapter's
    declared ``tabular_defaults``; none for an unknown mechanism, which training refuses anyway)."""
    cls = _ADAPTERS.get(mechanism) or _family_adapters().get(mechanism)
    return dict(cls.tabular_defaults) if cls is not None else {}


__all__ = ["Adapters", "CertifiedRemovalAdapter", "MechanismAdapter", "NoisyGDAdapter", "WarmModel", "tabular_defaults",
           "available_mechanisms", "get_adapter", "register_adapter"]

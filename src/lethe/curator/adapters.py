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

This module holds the interface and what every adapter shares; each family's adapter lives in its family's package
(the registry's :attr:`lethe.families.Family.adapter`), beside its mechanism and estimator.
"""

from __future__ import annotations

import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lethe.curator.artifacts import Artifact, ArtifactError


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
    clock : seconds since the epoch (default :func:`time.time`): the time of a scheduled family's release 0
        and of its time rule; tests pass a fake clock.
    """

    clock: Callable[[], float] = time.time

    def get(self, name: str, params: dict[str, Any] | None = None) -> Any:
        """The adapter of mechanism ``name`` with JSON ``params``, on this clock where it keeps a schedule."""
        adapter = get_adapter(name, params)
        adapter.clock = self.clock
        return adapter


#: Defaults of a model trained on a dataset registered with a schema (``lethe dataset add --schema``), where the
#: parameters do not say otherwise: an intercept (a table's classes are rarely balanced around the origin of the
#: encoded rows). λ keeps the estimator's default; choose it with ``lethe.plan_lambda`` on public data (Adult:
#: λ = 3·10⁻⁵, see docs/tabular.md).
def tabular_defaults(mechanism: str) -> dict[str, Any]:
    """The parameters a model of mechanism ``mechanism`` gets on a schema dataset unless told otherwise (its adapter's
    declared ``tabular_defaults``; none for an unknown mechanism, which training refuses anyway)."""
    cls = _ADAPTERS.get(mechanism) or _family_adapters().get(mechanism)
    return dict(cls.tabular_defaults) if cls is not None else {}


def dataset_labels(y: Any) -> np.ndarray:
    """A dataset's labels as the service stores classes in artifacts: numbers as float64, any other label (a schema
    dataset's declared strings, e.g. Adult's "<=50K") as strings."""
    y = np.asarray(y)
    return y.astype(np.float64) if y.dtype.kind in "iufb" else y.astype(str)


def label_classes(y: Any) -> list[Any]:
    """The sorted distinct labels of ``y`` as JSON values (floats or strings, as :func:`dataset_labels`)."""
    values = np.unique(dataset_labels(y))
    return [float(v) for v in values] if values.dtype.kind == "f" else [str(v) for v in values]


def label_codes(y: Any, classes: list[Any]) -> np.ndarray:
    """Positions of ``y``'s labels in the sorted ``classes`` (``ValueError`` naming a label outside them)."""
    yy = dataset_labels(y)
    cls = np.asarray(classes, dtype=np.float64) if yy.dtype.kind == "f" else np.asarray([str(c) for c in classes])
    bad = ~np.isin(yy, cls)
    if np.any(bad):
        raise ValueError(f"Labels must be one of the {len(classes)} classes seen at training {list(classes)}. "
                         f"Found {yy[np.argmax(bad)]!r}.")
    return np.searchsorted(cls, yy)


def moved_adapter(module: str, name: str) -> Any:
    """A family's service adapter class asked for by its class name at an old path (``module``, e.g.
    ``lethe.curator.adapters``, where the built-in adapters lived before issue 34 moved each into its family's
    package): found through the registry (:attr:`lethe.families.Family.adapter`), imported, and returned with a
    :class:`DeprecationWarning` naming its package. Old paths keep working for one release.

    Raises :class:`AttributeError` (what ``module.__getattr__`` must raise) for a name no family's adapter has."""
    from lethe.families import families

    for fam in families():
        if fam.adapter is not None and fam.adapter.rpartition(":")[2] == name:
            path = fam.adapter.partition(":")[0]
            warnings.warn(f"{module}.{name} moved to {path}.{name} (the {fam.name!r} family's package); the old "
                          "path will be removed in the next release.", DeprecationWarning, stacklevel=3)
            return fam.adapter_class()
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def __getattr__(name: str) -> Any:
    return moved_adapter(__name__, name)


__all__ = ["Adapters", "MechanismAdapter", "WarmModel", "tabular_defaults", "available_mechanisms", "get_adapter",
           "dataset_labels", "label_classes", "label_codes", "moved_adapter", "register_adapter"]

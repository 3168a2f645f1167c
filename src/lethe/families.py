"""The registry of unlearning families: one record per family, with its declared capabilities and its words.

A *family* is one way of unlearning — certified removal (Guo et al. 2020), private releases, sharded exact
unlearning (SISA), Noisy-GD (Chourasia & Shah 2023), noisy fine-tuning of networks — with everything a front end
needs to drive and describe it: the service mechanism names it answers to, its library estimators, its service
adapter, the capabilities it declares, and the sentences the console and the CLI use to tell a data subject what
happened to the model. The generic code (the curator, its API, the console, the conformance suite) asks this
registry; it never names a mechanism and never sniffs an object with ``hasattr``.

This module is foundation: it imports nothing of lethe. Estimators and adapters are named by dotted paths
(``"package.module:Name"``) and imported only when :meth:`Family.estimator_classes` or :meth:`Family.adapter_class`
is called, so the registry costs nothing to import and creates no import edge between layers.

Third-party families register through the entry point group ``lethe.families``: each entry point resolves to a
:class:`Family` (or a callable returning one). Built-ins are listed in :data:`BUILTIN_FAMILIES`, and a third-party
family may not take a built-in's name or one of its mechanism names.

>>> fam = family_of_mechanism("sharded")
>>> fam.name, Capability.EXACT in fam.capabilities, Capability.NEWTON_STEP in fam.capabilities
('sharded', True, False)
>>> "Newton" in fam.words.updated_in_place
False
"""

from __future__ import annotations

import enum
import importlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

__all__ = ["BUILTIN_FAMILIES", "DEFAULT_MECHANISM", "ENTRY_POINT_GROUP", "Capability", "Family", "FamilyWords",
           "families", "family_names", "family_of_mechanism", "resolve"]

#: The entry point group through which installed packages add families.
ENTRY_POINT_GROUP = "lethe.families"


class Capability(enum.Enum):
    """What a family declares it does (the generic code branches on these, never on a name)."""

    #: ``add(X, y)`` adds records with a certificate.
    ADD = "add"
    #: the service gives its adapter the records' keys at training (shard assignment by a keyed hash).
    RECORD_KEYS = "record_keys"
    #: the service keeps a model warm between batches (``restore``/``remove_warm``).
    WARM = "warm"
    #: publications follow a release schedule with a clock (``release_due``); releases may be withheld.
    RELEASE_SCHEDULE = "release_schedule"
    #: every published version is private (observer "every published release"), so model-readers may be served.
    PRIVATE_RELEASES = "private_releases"
    #: removal is exact (ε = 0 for one published version): the model equals one trained without the records.
    EXACT = "exact"
    #: a removal that fits the budget updates the model in place by a certified Newton step (Guo et al. Eq. 3).
    NEWTON_STEP = "newton_step"
    #: a removal may retrain the whole model from scratch (budget exhausted).
    RETRAINS = "retrains"
    #: published weights are a function of the features' names and encoding, so a schema is required for them.
    PUBLISHES_WEIGHTS = "publishes_weights"


@dataclass(frozen=True)
class FamilyWords:
    """The sentences a front end uses for a family: true of every removal of that family.

    Attributes
    ----------
    title : the family's name for people ("Certified removal (Guo et al. 2020)").
    updated_in_place : how a removal changed the model when it did not retrain (the console's "Retraining: No."
        line, the certificate page).
    retrained : the same when it retrained.
    observer : whom the guarantee covers, in plain words.
    not_covered : what the guarantee does not cover, in plain words.
    guarantee : the family's own "Guarantee" sentence, when its certificates state a guarantee that is not an
        (ε, δ) pair (e.g. Rényi deletion privacy): a :meth:`str.format` template over the certificate's fields
        (``"… order q = {q} with ε_dd = {epsilon_dd} …"``). ``None``: the front end states the (ε, δ) of the
        certificate in its generic words. A template naming a field the certificate lacks falls back to those.
    """

    title: str
    updated_in_place: str
    retrained: str
    observer: str
    not_covered: str
    guarantee: str | None = None


@dataclass(frozen=True)
class Family:
    """One unlearning family (see the module docstring).

    Attributes
    ----------
    name : the family's registry name.
    mechanisms : the service mechanism names it answers to (a certificate's ``mechanism``).
    estimators : dotted paths of its library estimators (``"lethe.sharded:ShardedClassifier"``).
    adapter : dotted path of its service adapter class, or None when the service does not run it.
    capabilities : what it declares (:class:`Capability`).
    words : its sentences (:class:`FamilyWords`).
    paper : the result it rests on.
    """

    name: str
    mechanisms: tuple[str, ...]
    estimators: tuple[str, ...]
    adapter: str | None
    capabilities: frozenset[Capability]
    words: FamilyWords
    paper: str
    #: certificate fields its adapter writes that the service deliberately keeps out of what it stores and shows
    #: (diagnostics, or figures that locate a removed record); every other field must be in the curator's allow-list
    #: (:data:`lethe.curator.public.CERTIFICATE_FIELDS`), which the conformance suite checks
    withheld: frozenset[str] = frozenset()
    #: dotted path of its audit (``"package.module:function"``; ``lethe audit --model``), or None when the family
    #: declares none: ``function(curator, request)`` takes a :class:`lethe.curator.audits.AuditRequest` and returns
    #: a result with ``verdict`` (passed / inconclusive / failed), ``passed``, ``to_dict()`` and a printable ``str()``
    #: that states the audit's power. The generic curator picks the attack from here, never from a name.
    audit: str | None = None
    #: the budget a front end charts, as two fields of a version's summary: (spent, total) — the share spent is
    #: spent/total. None: the family spends no budget across removals (the console shows no budget chart).
    budget: tuple[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"A family's name must be a non-empty string. Found {self.name!r}.")
        bad = [c for c in self.capabilities if not isinstance(c, Capability)]
        if bad:
            raise TypeError(f"Family {self.name!r}: capabilities must be Capability members. Found {bad!r}.")
        if Capability.NEWTON_STEP not in self.capabilities and "newton" in self.words.updated_in_place.lower():
            raise ValueError(f"Family {self.name!r} declares no Newton step, but its words say it takes one.")

    def has(self, capability: Capability) -> bool:
        """True when the family declares ``capability``."""
        return capability in self.capabilities

    def estimator_classes(self) -> list[type]:
        """The library estimator classes (imported now)."""
        return [resolve(path) for path in self.estimators]

    def adapter_class(self) -> type | None:
        """The service adapter class (imported now), or None."""
        return resolve(self.adapter) if self.adapter is not None else None


_RESOLVED: dict[str, Any] = {}


def resolve(path: str) -> Any:
    """The object named by ``"package.module:Name"`` (``ValueError`` naming the path when it is malformed),
    imported once and then kept: the service resolves an adapter on every request."""
    found = _RESOLVED.get(path)
    if found is not None:
        return found
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"A dotted path must read 'package.module:Name'. Found {path!r}.")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    _RESOLVED[path] = obj
    return obj


_ONE_VERSION = ("Anyone who sees one published version of the model, even knowing every other record, cannot tell "
                "whether it was trained with or without the record, beyond the stated ε and δ.")
_EVERY_RELEASE = ("Anyone who sees every release the service publishes, even knowing every other record, cannot tell "
                  "whether the record was ever used, beyond the stated ε and δ of the whole sequence.")
_VERSIONS_DIFF = ("Someone who kept an earlier version and compares it with the new one sees their difference, which "
                  "can point at the removed record: the guarantee covers one version, not the sequence.")

#: The built-in families, in the order the console lists them.
BUILTIN_FAMILIES: tuple[Family, ...] = (
    Family(
        name="certified-removal",
        mechanisms=("certified-removal",),
        estimators=("lethe.certified.estimators:CertifiedLogisticRegression",
                    "lethe.certified.estimators:CertifiedLinearRegression"),
        adapter="lethe.certified.adapter:CertifiedRemovalAdapter",
        capabilities=frozenset({Capability.ADD, Capability.WARM, Capability.NEWTON_STEP, Capability.RETRAINS,
                                Capability.PUBLISHES_WEIGHTS}),
        words=FamilyWords(
            title="Certified removal (Guo et al. 2020)",
            updated_in_place="No. The model was updated in place (a certified Newton step) within its removal "
                             "budget.",
            retrained="Yes. The budget would have been exceeded, so the model was trained again from scratch on "
                      "the remaining records, with fresh secret noise.",
            observer=_ONE_VERSION, not_covered=_VERSIONS_DIFF),
        paper="Guo et al. (2020), Certified Data Removal, Thm 3 and Alg. 2",
        audit="lethe.certified.audit:audit_certified",  # loss-threshold membership vs the (ε, δ) bound
        budget=("residual_bound", "budget"),  # the accumulated residual bound β against ε′
        # the solver's diagnostics: timings and error terms summed in step_bound (shown), not guarantees
        withheld=frozenset({"carried_error", "error_allowance", "iterations", "mismatch_bound", "refreshed",
                            "remainder_bound", "seconds", "solve_error", "removed_indices"})),
    Family(
        name="released-logistic",
        mechanisms=("released-logistic",),
        estimators=("lethe.release:ReleasedLogisticRegression",),
        adapter="lethe.release.adapter:ReleasedLogisticAdapter",
        capabilities=frozenset({Capability.RELEASE_SCHEDULE, Capability.PRIVATE_RELEASES,
                                Capability.PUBLISHES_WEIGHTS}),
        words=FamilyWords(
            title="Private releases (Gaussian releases over a horizon)",
            updated_in_place="No. The service's private copy of the model was updated to forget the record; what "
                             "readers see is a release of it with Gaussian noise (fresh per release, or aggregated "
                             "over a tree: the certificate's noise mechanism), published on the release schedule.",
            retrained="Yes. The model was trained again on the remaining records; its releases carry new noise.",
            observer=_EVERY_RELEASE,
            not_covered="The release schedule itself may reveal that a deletion happened and when (see the "
                        "certificate's schedule); releases after the horizon are not published."),
        paper="docs/release_privacy.md (Gaussian mechanism over a horizon of releases, Balle & Wang 2018)",
        audit="lethe.release.audit:audit_released"),  # version diff vs the rate the sequence's ε allows
    Family(
        name="sharded",
        mechanisms=("sharded",),
        estimators=("lethe.sharded:ShardedClassifier", "lethe.sharded:ShardedRegressor"),
        adapter="lethe.sharded.adapter:ShardedAdapter",
        capabilities=frozenset({Capability.RECORD_KEYS, Capability.EXACT, Capability.ADD}),
        words=FamilyWords(
            title="Sharded exact unlearning (SISA, Bourtoule et al. 2021)",
            updated_in_place="No full retraining: only the shard that held the record was trained again without "
                             "it, so the model is exactly the one training without the record would have produced.",
            retrained="The shards that held the removed records were trained again without them (all shards when "
                      "a class disappeared); the model is exactly one trained without the records.",
            observer=_ONE_VERSION,
            not_covered="Someone who compares consecutive versions sees which shard changed."),
        paper="Bourtoule et al. (2021), Machine Unlearning (SISA)",
        audit="lethe.sharded.audit:audit_sharded",  # prediction diff against the retrained twin
        # which shards (and how many) were retrained locates the removed record's shard: operators' own files only
        withheld=frozenset({"n_shards_retrained", "retrained_shards", "restart_slices", "rows_replayed",
                            "seconds"})),
    Family(
        name="noisy-gd",
        mechanisms=("noisy-gd",),
        estimators=("lethe.noisygd.estimators:NoisyGDLogisticRegression",
                    "lethe.noisygd.estimators:NoisyGDMLPClassifier",
                    "lethe.noisygd.estimators:NoisyGDBoundedMLPClassifier",
                    "lethe.noisygd.pnsgd:PNSGDLogisticRegression"),
        adapter="lethe.noisygd.adapter:NoisyGDAdapter",
        capabilities=frozenset(),
        words=FamilyWords(
            title="Noisy gradient descent (Chourasia & Shah 2023)",
            updated_in_place="No. The model was updated by noisy gradient steps on the remaining records (Noisy-GD "
                             "unlearning).",
            retrained="The model was trained again by noisy gradient descent on the remaining records.",
            observer="Anyone who sees the model after the deletion, including requesters who saw earlier "
                     "releases as stated in the certificate, cannot tell whether the record was used, beyond the "
                     "stated Rényi ε.",
            not_covered="Guarantees are Rényi: convert to (ε, δ) for the δ you choose.",
            guarantee="Deletion privacy of Rényi order q = {q} with ε_dd = {epsilon_dd}: the published model is "
                      "statistically close to one trained without the record, as if it had never been collected."),
        paper="Chourasia & Shah (2023), Forget Unlearning, Thm 4.3 and 5.1",
        withheld=frozenset({"gradient_evaluations"}),  # a cost figure, not a guarantee
        budget=("epsilon_dd", "target_epsilon_dd")),  # deletion privacy spent against its target
    Family(
        name="noisy-finetune",
        mechanisms=("noisy-finetune",),
        estimators=("lethe.nn.estimators:NoisyFineTuneClassifier",),
        adapter="lethe.nn.adapter:NoisyFineTuneAdapter",
        capabilities=frozenset(),
        words=FamilyWords(
            title="Noisy fine-tuning of networks",
            updated_in_place="No. The network was fine-tuned with clipped, noisy gradient steps on the remaining "
                             "records.",
            retrained="The network was trained again on the remaining records.",
            observer=_ONE_VERSION, not_covered=_VERSIONS_DIFF),
        paper="Koloskova et al. (2025), noisy fine-tuning; lethe.nn.accounting",
        withheld=frozenset({"gradient_evaluations", "note"})),  # a cost figure; free text
)


#: The mechanism the service trains when none is named (``lethe train`` without ``--mechanism``).
DEFAULT_MECHANISM = BUILTIN_FAMILIES[0].mechanisms[0]


def _entry_point_families() -> list[Family]:
    out = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        obj = ep.load()
        fam = obj() if callable(obj) and not isinstance(obj, Family) else obj
        if not isinstance(fam, Family):
            raise TypeError(f"Entry point {ep.name!r} of group {ENTRY_POINT_GROUP!r} must give a lethe Family. "
                            f"Found {type(fam).__name__}.")
        out.append(fam)
    return out


def _check_unique(fams: Iterable[Family]) -> tuple[Family, ...]:
    seen: dict[str, str] = {}
    out = []
    for fam in fams:
        for name in (fam.name, *fam.mechanisms):
            if name in seen and seen[name] != fam.name:
                raise ValueError(f"Family {fam.name!r} takes the name {name!r}, already used by {seen[name]!r}.")
        if fam.name in seen:
            raise ValueError(f"Two families are named {fam.name!r}.")
        seen[fam.name] = fam.name
        for m in fam.mechanisms:
            seen[m] = fam.name
        out.append(fam)
    return tuple(out)


_SCANNED: dict[tuple[str, ...], tuple[Family, ...]] = {}


def families(*, entry_points: bool = True) -> tuple[Family, ...]:
    """Every registered family: the built-ins, then those of installed packages (entry point group
    :data:`ENTRY_POINT_GROUP`). Names and mechanism names are unique (``ValueError`` otherwise).

    The entry points are read once per import path (``sys.path``; a scan costs milliseconds and the service asks on
    every request): a package installed into a running process is found after a restart, or once ``sys.path``
    changes."""
    if not entry_points:
        return _check_unique(BUILTIN_FAMILIES)
    where = tuple(sys.path)
    found = _SCANNED.get(where)
    if found is None:
        found = _check_unique([*BUILTIN_FAMILIES, *_entry_point_families()])
        if len(_SCANNED) > 16:
            _SCANNED.clear()
        _SCANNED[where] = found
    return found


def family_names() -> tuple[str, ...]:
    """The registered families' names."""
    return tuple(f.name for f in families())


def family_of_mechanism(mechanism: str) -> Family:
    """The family that answers to service mechanism ``mechanism`` (``ValueError`` naming the known ones)."""
    for fam in families():
        if mechanism in fam.mechanisms:
            return fam
    known = sorted(m for f in families() for m in f.mechanisms)
    raise ValueError(f"mechanism must be one of {known}. Found {mechanism!r}.")

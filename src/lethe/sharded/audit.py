"""The audit of a sharded model (exact unlearning, SISA; the family's :attr:`lethe.families.Family.audit`): a
prediction diff between the published version and its *retrained twin*.

What exactness promises. A sharded removal retrains the shards that held the removed records, so the published
version must equal — probability for probability, on every input — the model trained from scratch on the remaining
records with the version's secret hash key and seeds (docs/sharded.md). For a version with that property every test
between it and its twin, membership inference included, has advantage exactly 0: the guarantee allows 0.

The attack that fits. The curator still holds the remaining records (the deleted ones are erased), so it trains the
twin (:meth:`lethe.sharded.adapter.ShardedAdapter.retrained_twin`) and compares the two models' class
probabilities on probe records: every current record, the deleted records of the operator's file (``--deleted``,
optional here; each must have been removed from the model by the curator, as for every audit) and the public held-out
rows when the model has them. A probe *differs* when one probability differs (bit for bit: the twin is computed by
the same code from the same data, so an exact removal leaves none). The statistic is the rate of differing probes,
with its Clopper–Pearson interval:

* ``failed`` — at least one probe differs (the interval's lower end is above 0, the rate exactness allows);
* ``passed`` — none differs, and the audit's power is stated and sufficient: a model differing from its twin on a
  fraction ``detectable`` = 1 − (α/2)^(1/N) of records like the N probes would have shown a difference with
  confidence 1 − α/2, and ``detectable`` is at most :data:`POWER_TARGET`;
* ``inconclusive`` — none differs but the probes are too few for that power.

A removal that was faked (the shards not retrained, the deleted record still in one) changes one shard's estimator,
so the aggregate's probabilities move on nearly every probe: it fails at once. What this audit does not cover: an
observer of consecutive versions sees which shard changed (the family's ``not_covered`` words); the twin shares the
version's hash key, so a partition that itself depended on the deleted records is out of scope (the key is drawn from
the operating system at training).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import select

from lethe.curator.adapters import get_adapter
from lethe.curator.artifacts import ArtifactError
from lethe.curator.audits import AuditRequest, model_info, public_rows, read_records, removal_versions
from lethe.curator.errors import InvalidInputError
from lethe.curator.serving import Serving
from lethe.curator.store import Record
from lethe.sharded.adapter import ShardedAdapter

if TYPE_CHECKING:
    from lethe.curator.service import Curator

__all__ = ["POWER_TARGET", "TwinAudit", "audit_sharded"]

#: "passed" needs a power this good: a model differing from its twin on this fraction of records would be caught.
POWER_TARGET = 0.05


@dataclass(frozen=True)
class TwinAudit:
    """The prediction diff of a sharded model's published version against its retrained twin; ``str()`` prints it.

    ``n_differ`` of ``n_probes`` probe records got another probability from the version than from its twin
    (``n_deleted_differ`` of the ``n_deleted`` deleted records among them); ``low``/``high`` the (1 − α)
    Clopper–Pearson interval of the rate; ``detectable`` the smallest rate the audit would have caught;
    ``max_difference`` the largest probability difference seen. ``version`` is None when no version could be
    audited (``not_audited`` says why)."""

    model: str
    dataset: str
    version: str | None
    n_probes: int = 0
    n_current: int = 0
    n_deleted: int = 0
    n_heldout: int = 0
    n_differ: int = 0
    n_deleted_differ: int = 0
    low: float = 0.0
    high: float = 1.0
    detectable: float = 1.0
    max_difference: float = 0.0
    alpha: float = 0.05
    not_audited: tuple[tuple[str, str], ...] = field(default=())

    @property
    def rate(self) -> float:
        """The fraction of probes that differ."""
        return self.n_differ / self.n_probes if self.n_probes else 0.0

    @property
    def verdict(self) -> str:
        """``failed`` (a probe differs), ``passed`` (none differs, with the power of :data:`POWER_TARGET`), else
        ``inconclusive`` (too few probes, or no version audited)."""
        if self.version is None:
            return "inconclusive"
        if self.n_differ > 0:
            return "failed"
        return "passed" if self.detectable <= POWER_TARGET else "inconclusive"

    @property
    def passed(self) -> bool:
        """True only when the audit could have failed and did not."""
        return self.verdict == "passed"

    def to_dict(self) -> dict[str, Any]:
        """The audit as JSON-ready numbers: aggregate, no key and no value."""
        return {"model": self.model, "dataset": self.dataset, "attack": "prediction diff against the retrained twin",
                "version": self.version, "n_probes": self.n_probes, "n_current": self.n_current,
                "n_deleted": self.n_deleted, "n_heldout": self.n_heldout, "n_differ": self.n_differ,
                "n_deleted_differ": self.n_deleted_differ, "rate": self.rate, "low": self.low, "high": self.high,
                "allowed": 0.0, "detectable": self.detectable, "power_target": POWER_TARGET,
                "max_difference": self.max_difference, "alpha": self.alpha,
                "not_audited": [list(x) for x in self.not_audited], "passed": self.passed, "verdict": self.verdict}

    def __str__(self) -> str:
        level = f"{100 * (1 - self.alpha):g} %"
        lines = [f"Audit of model {self.model!r} (dataset {self.dataset!r}): exact unlearning, prediction diff of "
                 "the published version against its retrained twin (trained from scratch on the remaining records "
                 "with the version's hash key and seeds)"]
        for name, why in self.not_audited:
            lines.append(f"{name:<12} not audited: {why}")
        if self.version is None:
            lines.append("No version could be audited: INCONCLUSIVE.")
            return "\n".join(lines)
        lines.append(f"{self.version}: {self.n_probes} probe records ({self.n_current} current, {self.n_deleted} "
                     f"deleted (from the file given), {self.n_heldout} held-out); differing: {self.n_differ} "
                     f"(deleted: {self.n_deleted_differ}); largest probability difference {self.max_difference:.3g}")
        lines.append(f"difference rate {self.rate:.3f}, {level} CI [{self.low:.3f}, {self.high:.3f}]; exact "
                     "unlearning allows 0")
        lines.append(f"Power: a model differing from its twin on {100 * self.detectable:.2g} % of records like these "
                     f"would have shown a difference ({level} confidence); passing needs "
                     f"{100 * POWER_TARGET:g} % or better.")
        lines.append({"failed": "FAILED: the published version is not the model retrained without the records.",
                      "inconclusive": "INCONCLUSIVE: no probe differs, but the probes are too few for the power "
                                      "stated; audit with more records (--deleted, --heldout).",
                      "passed": "PASSED: the published version equals its retrained twin on every probe."
                      }[self.verdict])
        return "\n".join(lines)


def _differing(p_served: np.ndarray, p_twin: np.ndarray) -> tuple[np.ndarray, float]:
    """Per probe: does any probability differ (bit for bit); and the largest difference."""
    if p_served.shape != p_twin.shape:
        return np.ones(p_served.shape[0], dtype=bool), 1.0
    diff = np.abs(p_served - p_twin)
    return np.any(p_served != p_twin, axis=1), float(diff.max()) if diff.size else 0.0


def audit_sharded(c: Curator, req: AuditRequest) -> TwinAudit:
    """The prediction diff of the published version of a sharded model against its retrained twin (module
    docstring). ``req.deleted`` and ``req.heldout`` add probes (optional); ``req.epsilon``/``req.delta`` and
    ``req.releases`` do not apply (refused). Changes nothing."""
    from lethe.audit.stats import clopper_pearson

    if req.epsilon is not None or req.delta is not None:
        raise InvalidInputError("epsilon/delta (--epsilon, --delta) do not apply to an exact model: exactness allows "
                                "no difference at all. Found a claim given.")
    if req.releases:
        raise InvalidInputError("releases (--releases) apply to models that publish releases; a sharded model "
                                "publishes none. Found files given.")
    info = model_info(c, req.model)
    ds = info.dataset
    adapter = get_adapter(info.mechanism, info.params)
    if not isinstance(adapter, ShardedAdapter):
        raise InvalidInputError(f"model (--model) must be a sharded model for this audit. Found mechanism "
                                f"{info.mechanism!r}.")
    not_audited = [(f"v{number}", f"{status}: only the published version is trained on the current records")
                   for _vid, number, status, *_ in info.versions if status != "published"]
    published = [v for v in info.versions if v[2] == "published"]
    empty = TwinAudit(model=req.model, dataset=ds.name, version=None, alpha=req.alpha)
    if not published:
        return replace(empty, not_audited=tuple(not_audited))
    _vid, number, _status, relpath, sha, _n = published[-1]
    try:
        art = c.artifacts.load(relpath, sha, Serving.binding(req.model, info.mechanism, info.params, ds.n_features))
    except ArtifactError:
        not_audited.append((f"v{number}", "its artifact is missing or fails verification (see lethe status)"))
        return replace(empty, not_audited=tuple(not_audited))
    with c.store.read() as s:
        ids, X, y = c.datasets.current_data(s, ds.id, ds.n_features)
        key_of = dict(s.execute(select(Record.id, Record.key).where(Record.dataset_id == ds.id)).all())
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
    keys = [key_of[int(i)] for i in ids]
    probes, n_del, n_held = [X], 0, 0
    if req.deleted is not None:
        del_keys, X_del, _y_del = read_records(ds, req.deleted, file_format=req.file_format)
        removal_versions(c, ds, info.model_id, del_keys, info.number_of)  # refuses keys still held or never removed
        probes.append(np.asarray(X_del, dtype=np.float64))
        n_del = int(X_del.shape[0])
    try:
        held = public_rows(c, ds.name, req.heldout, model_ids=[info.model_id])
        probes.append(np.asarray(held.X, dtype=np.float64))
        n_held = int(held.X.shape[0])
    except InvalidInputError:
        if req.heldout is not None:
            raise  # asked for and unusable; without --heldout and none assigned, the audit probes without them
    try:
        twin = adapter.retrained_twin(art, X, y, keys)
    except ValueError as exc:
        raise InvalidInputError(f"The retrained twin could not be trained on the current records: {exc}") from None
    P = np.vstack(probes)
    p_served = adapter.predict_proba(art, P)
    p_twin = np.asarray(twin.predict_proba(P))
    if not np.array_equal(np.asarray(twin.classes_), np.asarray(art.meta.get("classes") or [])):
        p_twin = np.full((P.shape[0], p_served.shape[1] + 1), np.nan)  # another set of classes: every probe differs
    differ, largest = _differing(p_served, p_twin)
    n = int(P.shape[0])
    k = int(differ.sum())
    low, high = clopper_pearson(k, n, req.alpha)
    return TwinAudit(model=req.model, dataset=ds.name, version=f"v{number}", n_probes=n, n_current=int(X.shape[0]),
                     n_deleted=n_del, n_heldout=n_held, n_differ=k,
                     n_deleted_differ=int(differ[X.shape[0]:X.shape[0] + n_del].sum()), low=low, high=high,
                     detectable=float(1.0 - (req.alpha / 2.0) ** (1.0 / n)), max_difference=largest,
                     alpha=float(req.alpha), not_audited=tuple(not_audited))

"""The audit of a registered model (``lethe audit --model NAME``, issues 27 and 38) and the public rows that audits
and plans score on.

**The attack comes from the family.** Each family names its audit in the registry
(:attr:`lethe.families.Family.audit`, a dotted path); :func:`audit_registered_model` resolves it and passes an
:class:`AuditRequest`. This module names no mechanism: the audits themselves live beside their families' adapters
(each family's ``audit`` entry in :data:`lethe.families.BUILTIN_FAMILIES` says which test it runs and against
what bound). Every one answers passed, inconclusive or failed and states its power; a family that declares
no audit is refused by name.

**What an audit needs, and why the curator cannot supply half of it.** An audit asks whether what was published
tells the records deleted from it from records it never saw. It needs (1) the deleted records themselves and (2) the
versions. The curator keeps neither for long, by design: a deletion request's record is erased when its batch is
published (the same transaction), its bytes overwritten and the database purged; a superseded version's artifact is
destroyed with it (its secret state included). So audits take

* the deleted records from the operator (``--deleted FILE``: the records of people who asked for deletion, kept for
  the audit with their consent before the requests were submitted — the same columns as the dataset's file, its key
  column included). Every record of the file must have been removed from the model by the curator: each key's keyed
  digest is matched to its done request and to the removal certificate of this model, which says which version
  removed it (:func:`removal_versions`); a key still held, or never removed from this model, is refused (counted,
  never named);
* the held-out records from a registered public dataset (``--heldout NAME``; default: the held-out set the model was
  trained with, ``lethe train --heldout``) or a file encoded by the dataset's schema (:func:`public_rows`);
* the versions whose artifact still exists, or the published sequence as an observer kept it (``--releases``).

The output is aggregate (counts, rates, intervals, the bound the guarantee implies): it names no key and no row, and
errors about the files name columns and rules, never values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import select

from lethe.curator.errors import InvalidInputError, NotFoundError
from lethe.curator.serving import Serving
from lethe.curator.store import CertificateRow, Dataset, DeletionRequest, LedgerEvent, Model, ModelVersion, Record
from lethe.curator.tables import encode_with_schema, normalize_rows, read_schema_frame, read_table
from lethe.curator.training import HOLDOUT_SET

if TYPE_CHECKING:
    from lethe.audit.model import ModelAudit
    from lethe.curator.service import Curator


@dataclass(frozen=True, eq=False)
class PublicRows:
    """Rows scored by an audit or a plan: encoded features, labels (the dataset's label values) and what they are.

    ``source`` says where they came from (printed: a registered dataset's name or a file's name, never a value)."""

    X: np.ndarray
    y: np.ndarray
    source: str
    dataset: str | None = None  # the registered dataset's name (None: a file)


def _without_values(message: str) -> str:
    """An error about a file's rows without the key or value it found (the messages of
    :mod:`lethe.curator.tables` end with "in the row with key ..." or "Found ...")."""
    for marker in (" in the row with key", "; found another value in the row with key", " Found "):
        message = message.split(marker, 1)[0]
    return message.rstrip(" .;:") + "."


def _label_values(y: np.ndarray, classes: list[Any] | None) -> np.ndarray:
    """Labels as the dataset's values: positions in ``classes`` mapped back, numbers kept."""
    return np.asarray(classes, dtype=object)[y.astype(np.int64)] if classes is not None else y


def read_records(ds: Dataset, path: str | Path, *, file_format: str | None = None) -> tuple[list[str], np.ndarray,
                                                                                             np.ndarray]:
    """(keys, X, y) of a file with the dataset's columns, encoded as the dataset was at registration (its schema,
    or its feature columns; rows normalised if the dataset's are). Errors name the column and the rule only."""
    from lethe.schema import load_schema

    declared = ds.feature_names.get("schema")
    try:
        if declared is not None:
            schema = load_schema(declared)
            table = encode_with_schema(read_schema_frame(path, schema, file_format=file_format), schema,
                                       source=Path(path).name)
        else:
            names = list(ds.feature_names.get("names", []))
            if ds.feature_names.get("categories"):
                raise InvalidInputError(f"dataset {ds.name!r} one-hot encodes categories learned from its rows "
                                        "(--categorical): a file cannot be encoded the same way. Register the table "
                                        "with a schema (--schema).")
            table = read_table(path, key=ds.key_column, label=ds.label_column, features=names,
                               file_format=file_format)
    except FileNotFoundError:
        raise
    except InvalidInputError:
        raise
    except (ValueError, KeyError) as exc:
        raise InvalidInputError(f"{Path(path).name}: {_without_values(str(exc))}") from None
    if table.X.shape[1] != ds.n_features:
        raise InvalidInputError(f"{Path(path).name} encodes to {table.X.shape[1]} features; dataset {ds.name!r} has "
                                f"{ds.n_features}. Found another table.")
    X = normalize_rows(table.X) if ds.normalize == "rows" else table.X
    return table.keys, X, _label_values(table.y, table.label_classes)


def _dataset_rows(c: Curator, s: Any, name: str, like: Dataset) -> PublicRows:
    other = c.datasets.find(s, name)
    if other.id == like.id:
        raise InvalidInputError(f"heldout (--heldout) must be another dataset than the training data. Found {name!r}.")
    if (list(other.feature_names.get("names", [])) != list(like.feature_names.get("names", []))
            or other.normalize != like.normalize):
        raise InvalidInputError(f"heldout (--heldout) must have the features and normalisation of dataset "
                                f"{like.name!r} (register it with the same schema). Found dataset {name!r} with "
                                f"{other.n_features} features.")
    _ids, X, y = c.datasets.current_data(s, other.id, other.n_features)
    return PublicRows(np.asarray(X, dtype=np.float64), np.asarray(y), f"registered dataset {name!r}", name)


def assigned_heldout(s: Any, model_ids: list[int]) -> str | None:
    """The held-out dataset most recently assigned to one of ``model_ids`` (``lethe train --heldout``), or None."""
    if not model_ids:
        return None
    ev = s.scalars(select(LedgerEvent).where(LedgerEvent.kind == HOLDOUT_SET, LedgerEvent.model_id.in_(model_ids))
                   .order_by(LedgerEvent.id.desc())).first()
    return None if ev is None else str(ev.payload.get("dataset"))


def public_rows(c: Curator, dataset: str, heldout: str | None, *, model_ids: list[int] | None = None) -> PublicRows:
    """The public held-out rows for ``dataset``: a registered dataset named ``heldout``, a file ``heldout`` (CSV or
    Parquet with the dataset's columns, encoded by its schema), or — ``heldout`` None — the held-out dataset last
    assigned to one of ``model_ids`` (or to any model of ``dataset``)."""
    with c.store.read() as s:
        ds = c.datasets.find(s, dataset)
        if heldout is None:
            ids = model_ids if model_ids is not None else list(s.scalars(select(Model.id).where(
                Model.dataset_id == ds.id)))
            heldout = assigned_heldout(s, ids)
            if heldout is None:
                raise InvalidInputError(
                    f"heldout (--heldout) is required: no model of dataset {dataset!r} was trained with a held-out "
                    "set. Give a registered public dataset with the same schema (lethe dataset add NAME FILE "
                    "--schema ...) or a CSV/Parquet file of public records. Found none.")
            try:
                return _dataset_rows(c, s, heldout, ds)
            except NotFoundError:
                raise InvalidInputError(f"The held-out dataset {heldout!r} assigned at training no longer exists; "
                                        "give --heldout.") from None
        try:
            return _dataset_rows(c, s, heldout, ds)
        except NotFoundError:
            pass
    if not Path(heldout).is_file():
        raise InvalidInputError(f"heldout (--heldout) must name a registered dataset or an existing file. Found "
                                f"{heldout!r}.")
    _keys, X, y = read_records(ds, heldout)
    return PublicRows(X, y, f"file {Path(heldout).name!r}")


@dataclass(frozen=True)
class RegisteredAudit:
    """The audit of a registered model: the audited versions (``audit``; None if none could be) and, for every
    other version, why not. ``str()`` prints the report."""

    model: str
    dataset: str
    audit: ModelAudit | None
    not_audited: tuple[tuple[str, str], ...]
    n_deleted: int
    heldout: str
    n_heldout: int
    notes: tuple[str, ...] = field(default=())

    @property
    def verdict(self) -> str:
        """The audit's verdict (:attr:`lethe.audit.model.ModelAudit.verdict`); ``inconclusive`` when no version could
        be audited."""
        return "inconclusive" if self.audit is None else self.audit.verdict

    @property
    def passed(self) -> bool:
        """True only when the audit could have failed and did not (see :attr:`verdict`)."""
        return self.audit is not None and self.audit.passed

    def __str__(self) -> str:
        lines = [f"Audit of model {self.model!r} (dataset {self.dataset!r}): {self.n_deleted} deleted records "
                 f"(from the file given) vs {self.n_heldout} held-out records ({self.heldout})"]
        if self.audit is not None:
            lines.append(str(self.audit))
        else:
            lines.append("No version could be audited: INCONCLUSIVE.")
        groups: list[tuple[str, str, str]] = []  # (first, last, reason): consecutive versions of one reason
        for name, why in self.not_audited:
            if groups and groups[-1][2] == why and int(name[1:]) == int(groups[-1][1][1:]) + 1:
                groups[-1] = (groups[-1][0], name, why)
            else:
                groups.append((name, name, why))
        for first, last, why in groups:
            label = first if first == last else f"{first}-{last}"
            lines.append(f"{label:<12} not audited: {why}")
        lines.extend(self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The audit as JSON-ready numbers (``lethe audit --out``): aggregate, no key and no value."""
        return {"model": self.model, "dataset": self.dataset, "attack": "loss-threshold membership",
                "audit": None if self.audit is None else self.audit.to_dict(),
                "not_audited": [list(x) for x in self.not_audited], "n_deleted": self.n_deleted,
                "n_heldout": self.n_heldout, "heldout": self.heldout, "passed": self.passed, "verdict": self.verdict}


@dataclass(frozen=True)
class AuditRequest:
    """What ``lethe audit --model NAME`` asks of a family's audit (:attr:`lethe.families.Family.audit`).

    ``deleted``: the operator's file of deleted records (see the module docstring); ``heldout``: public held-out
    rows (a registered dataset or a file; default the one the model was trained with); ``epsilon``/``delta``: another
    claim to check than the model's own; ``alpha``: the intervals have confidence 1 − α; ``releases``: files of the
    published sequence an observer kept (``GET /v1/models/NAME`` with an operator's token, one per published
    version), for families whose audit compares published versions. A family's audit uses what its attack needs."""

    model: str
    deleted: str | Path | None
    heldout: str | None = None
    epsilon: float | None = None
    delta: float | None = None
    alpha: float = 0.05
    random_state: Any = 0
    file_format: str | None = None
    releases: tuple[str | Path, ...] = ()


@dataclass(frozen=True, eq=False)
class ModelInfo:
    """A registered model as an audit reads it: its mechanism, parameters, dataset and versions (id, number, status,
    artifact, sha256, n_records), oldest first."""

    name: str
    mechanism: str
    params: dict[str, Any]
    model_id: int
    dataset: Dataset
    versions: tuple[tuple[int, int, str, str, str, int], ...]

    @property
    def number_of(self) -> dict[int, int]:
        """Version id → version number."""
        return {v[0]: v[1] for v in self.versions}


def require_deleted(deleted: str | Path | None) -> str | Path:
    """The file of deleted records, or the refusal that says why the curator cannot audit without it."""
    if deleted is None:
        raise InvalidInputError(
            "deleted (--deleted FILE) is required: the curator erases a deleted record when its request is "
            "processed (its values are overwritten and the database purged), so it cannot audit with them. Keep the "
            "records of the people who ask for deletion (with their consent, before submitting their requests), in "
            "the columns of the dataset's file with its key column, and pass them with --deleted FILE.")
    return deleted


def model_info(c: Curator, model: str) -> ModelInfo:
    """The registered model ``model`` (:class:`NotFoundError` naming it when there is none)."""
    with c.store.read() as s:
        m = Serving.find_model(s, model)
        ds = s.get(Dataset, m.dataset_id)
        assert ds is not None
        versions = tuple((v.id, v.number, v.status, v.artifact, v.sha256, v.n_records) for v in s.scalars(
            select(ModelVersion).where(ModelVersion.model_id == m.id).order_by(ModelVersion.number)))
        return ModelInfo(name=model, mechanism=m.mechanism, params=dict(m.params), model_id=m.id, dataset=ds,
                         versions=versions)


def audit_registered_model(c: Curator, model: str, deleted: str | Path | None, *, heldout: str | None = None,
                           epsilon: float | None = None, delta: float | None = None, alpha: float = 0.05,
                           random_state: Any = 0, file_format: str | None = None, releases: Any = ()) -> Any:
    """Audit a registered model with the attack its family declares (:attr:`lethe.families.Family.audit`); each
    answers ``passed``, ``inconclusive`` or ``failed`` with its power stated (docs/audit.md). The options are
    :class:`AuditRequest`'s. Refused (:class:`InvalidInputError`, changing nothing) for a family that declares no
    audit, without the deleted records' file, or with a key the model still holds or never removed."""
    from lethe.families import family_of_mechanism, resolve

    info = model_info(c, model)
    fam = family_of_mechanism(info.mechanism)
    if fam.audit is None:
        raise InvalidInputError(f"model (--model) must belong to a family that declares an audit; family "
                                f"{fam.name!r} declares none. Found model {model!r}.")
    request = AuditRequest(model=model, deleted=deleted, heldout=heldout, epsilon=epsilon, delta=delta, alpha=alpha,
                           random_state=random_state, file_format=file_format, releases=tuple(releases or ()))
    return resolve(fam.audit)(c, request)


def removal_versions(c: Curator, ds: Dataset, model_id: int, keys: list[str], number_of: dict[int, int]
                      ) -> np.ndarray:
    """For each key, the number of the version of model ``model_id`` that removed its record (by the removal
    certificate of its done request). Refuses (counts only) keys still held or never removed from this model."""
    digests = [c.key_digest(ds.id, k) for k in keys]
    with c.store.read() as s:
        held = set(s.scalars(select(Record.key).where(Record.dataset_id == ds.id)))
        is_held = [c.datasets.record_key(ds, k, d) in held for k, d in zip(keys, digests, strict=True)]
        rows = s.execute(select(DeletionRequest.key_digest, CertificateRow.new_version_id)
                         .join(CertificateRow, CertificateRow.request_id == DeletionRequest.id)
                         .where(DeletionRequest.dataset_id == ds.id, DeletionRequest.status == "done",
                                CertificateRow.kind == "removal", CertificateRow.model_id == model_id)).all()
    first: dict[str, int] = {}
    for digest, vid in rows:
        if vid in number_of:
            first[digest] = min(first.get(digest, 1 << 30), number_of[vid])
    still = sum(is_held)
    never = sum(1 for d, h in zip(digests, is_held, strict=True) if not h and d not in first)
    if still or never:
        raise InvalidInputError(
            f"deleted (--deleted) must hold only records removed from this model by the curator: {still} of its "
            f"{len(keys)} records are still held by dataset {ds.name!r} (members, not deleted) and {never} were "
            "never removed from this model. Submit their requests and process them first, or leave them out.")
    return np.array([first[d] for d in digests], dtype=np.int64)


__all__ = ["AuditRequest", "ModelInfo", "PublicRows", "RegisteredAudit", "assigned_heldout",
           "audit_registered_model", "model_info", "public_rows", "read_records", "removal_versions",
           "require_deleted"]

"""Serving and integrity: predictions and public parameters of a model's published version, its budget, and the
verification of every published artifact (checksum, HMAC, binding, invariants), cached per file stamp."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import func, select

from lethe.curator import lifetime
from lethe.curator.adapters import get_adapter
from lethe.curator.artifacts import Artifact, ArtifactError, ArtifactStore
from lethe.curator.declared import declared_classes, served_classes
from lethe.curator.errors import BusyError, InvalidInputError, NotFoundError, ServiceFaultError, UnreleasedModelError
from lethe.curator.public import OBSERVER_RELEASES
from lethe.curator.store import Dataset, Model, ModelVersion, Store, iso
from lethe.curator.tables import normalize_rows

if TYPE_CHECKING:
    from lethe.curator.publisher import NewVersion

log = logging.getLogger("lethe.curator")

#: The plain warning shown wherever a model served by the operator's opt-in appears (console, CLI, ledger, docs).
UNRELEASED_WARNING = "an observer of consecutive versions can identify deleted records"


def covers_releases(summary: dict[str, Any]) -> bool:
    """Whether a version's guarantee covers an observer of every published release (its mechanism says so in the
    version's summary: ``observer``, :data:`lethe.curator.public.OBSERVER_RELEASES`)"""
    return summary.get("observer") == OBSERVER_RELEASES


def served_to(summary: dict[str, Any], serve_unreleased: bool) -> str:
    """Who is served a model's predictions and weights: ``"releases"`` (model-readers: private releases),
    ``"opt-in"`` (model-readers, by the operator's opt-in: :data:`UNRELEASED_WARNING`) or ``"operators"`` (admins
    only)."""
    if covers_releases(summary):
        return "releases"
    return "opt-in" if serve_unreleased else "operators"


def _reader_version(summary: dict[str, Any], number: int) -> int:
    """The version number a model-reader sees. For a released model, its release number: the service's version
    number also counts batches that published no release, and so would show a model-reader when removal steps
    happened (docs/release_privacy.md §3, the schedule)."""
    if covers_releases(summary) and summary.get("release_version") is not None:
        return int(summary["release_version"])
    return number


class WithdrawnModelError(UnreleasedModelError):
    """A released model whose horizon is spent while a removal is unpublished (or, under the clock schedule, whose
    horizon is spent): its last release was computed with a record deleted since, so it is not served to
    model-readers (issue 36)."""


class LearnedFromRowsError(UnreleasedModelError):
    """A model of a dataset whose feature space was learned from its rows (``--categorical`` without a schema): its
    feature names and per-category weights would name a record, deleted or not, to model-readers (issue 36)."""


def withdrawn_refusal(model: str) -> WithdrawnModelError:
    """The refusal a model-reader gets for a withdrawn released model."""
    return WithdrawnModelError(
        f"Model {model!r} is withdrawn: its horizon of private releases is spent, and its last release was computed "
        f"before a deletion it can no longer publish (docs/release_privacy.md §3). An operator must retrain it "
        f"(lethe model retrain {model}) to serve it again.")


def unreleased_refusal(model: str, mechanism: str) -> UnreleasedModelError:
    """The refusal a model-reader gets for a model whose certificates cover one published version."""
    from lethe.families import Capability, families

    private = [m for f in families() if Capability.PRIVATE_RELEASES in f.capabilities for m in f.mechanisms]
    return UnreleasedModelError(
        f"Model {model!r} is not served to model-readers: its mechanism {mechanism!r} certifies one published "
        f"version, and {UNRELEASED_WARNING} (docs/release_privacy.md). Two ways out: train the model with "
        f"--mechanism {' or '.join(private) or '(none installed)'} (private releases, for the whole sequence), or have "
        f"an operator opt in "
        f"explicitly at training (lethe train ... --serve-unreleased, or lethe model retrain {model} "
        f"--serve-unreleased).")


@dataclass(eq=False)
class Serving:
    """Answers from published versions, and their verification.

    Parameters
    ----------
    store, artifacts : the store and the artifact files.
    data_dir : the data directory (artifacts' paths are relative to it).
    """

    store: Store
    artifacts: ArtifactStore
    data_dir: Path
    _public_cache: dict[int, Artifact] = field(default_factory=dict, init=False, repr=False)
    # model id -> (version id, checksum, file stamp) of its published artifact's last successful verification:
    # one entry per model, replaced when a new version is published (keyed by version, it grew by one entry per
    # batch for the life of the process)
    _verified: dict[int, tuple[Any, ...]] = field(default_factory=dict, init=False, repr=False)

    @staticmethod
    def find_model(s: Any, name: str) -> Model:
        """The model named ``name`` (:class:`NotFoundError` if none)."""
        m = s.scalar(select(Model).where(Model.name == name)) if isinstance(name, str) else None
        if m is None:
            raise NotFoundError(f"Unknown model {name!r}.")
        return m

    @staticmethod
    def binding(model: str, mechanism: str, params: dict[str, Any], n_features: int) -> dict[str, Any]:
        """What an artifact is for, covered by its HMAC (:mod:`lethe.curator.artifacts`)."""
        return {"model": model, "mechanism": mechanism, "params": dict(params), "n_features": int(n_features)}

    # -- caches --------------------------------------------------------------------------------------------------------
    def forget(self, version_id: int | None = None) -> None:
        """Drop the cached public arrays of one version (destroyed), or every cache (a model dropped; a file changed
        behind the service's back)."""
        if version_id is not None:
            self._public_cache.pop(version_id, None)
            return
        self._public_cache.clear()
        self._verified.clear()

    def verified_models(self) -> int:
        """The number of models whose published artifact's verification is cached (at most one entry each)."""
        return len(self._verified)

    def seed_verified(self, published: list[NewVersion], new_ids: dict[int, int]) -> None:
        """Record the artifacts this process has just written and published as verified (:meth:`verify_models`).

        The next batch then does not read, hash and authenticate again a file whose bytes this process wrote and
        hashed itself (its checksum is the one recorded in the version row). The record is the file's stamp
        (version, checksum, mtime, size, inode): a file changed afterwards — edited, replaced, truncated — no
        longer matches it and is verified in full before the next batch, as before.
        """
        for item in published:
            vid = new_ids.get(item.model_id)
            if vid is None:
                continue
            try:
                st = os.stat(self.data_dir / item.artifact)
            except OSError:
                self._verified.pop(item.model_id, None)
                continue
            self._verified[item.model_id] = (vid, item.sha256, st.st_mtime_ns, st.st_size, st.st_ino)

    # -- answers -------------------------------------------------------------------------------------------------------
    def load_published(self, model: str) -> tuple[Artifact, dict[str, Any]]:
        """The published version's public arrays (secret arrays dropped), authenticated, with facts about it.

        A version may be superseded (and its file destroyed) between reading its id and its file: then read again.
        A file that fails verification while its version is still the published one is a fault: logged for the
        operator, answered with a generic :class:`ServiceFaultError` (no path, no checksum).
        """
        for _ in range(5):
            with self.store.read() as s:
                m = self.find_model(s, model)
                ds = s.get(Dataset, m.dataset_id)
                v = s.get(ModelVersion, m.current_version_id)
                assert ds is not None and v is not None
                info: dict[str, Any] = {"model": m.name, "mechanism": m.mechanism, "params": dict(m.params),
                                        "version": v.number, "serve_unreleased": bool(m.serve_unreleased),
                                        "covers_releases": covers_releases(dict(v.summary or {})),
                                        "withdrawn": bool((v.summary or {}).get("withdrawn")),
                                        "learned": _learned(ds),
                                        # what a model-reader is told: a released model's release number (it
                                        # changes only when a release is published), else the version number
                                        "reader_version": _reader_version(dict(v.summary or {}), v.number),
                        "version_id": v.id, "n_features": ds.n_features, "normalize": ds.normalize,
                        "feature_names": list(ds.feature_names.get("names", [])), "n_records": v.n_records,
                        "schema": ds.feature_names.get("schema"),
                        "declared_classes": declared_classes(ds.feature_names)}
                relpath, sha = v.artifact, v.sha256
            art = self._public_cache.get(info["version_id"])
            if art is not None:
                return art, info
            adapter = get_adapter(info["mechanism"], info["params"])
            try:
                full = self.artifacts.load(relpath, sha, self.binding(info["model"], info["mechanism"],
                                                                      info["params"], info["n_features"]))
            except ArtifactError as exc:
                with self.store.read() as s:
                    still = s.scalar(select(Model.current_version_id).where(Model.name == model))
                if still != info["version_id"]:
                    continue  # republished meanwhile: read the new version
                log.error("model %s version %d: artifact fault: %s", model, info["version"], exc)
                raise ServiceFaultError(f"Model {model!r} is unavailable: its stored state failed verification. "
                                        "The operator has been notified.") from None
            art = Artifact(arrays={k: a for k, a in full.arrays.items() if k not in adapter.secret_arrays},
                           meta=full.meta)
            if len(self._public_cache) > 32:
                self._public_cache.clear()
            self._public_cache[info["version_id"]] = art
            return art, info
        raise BusyError(f"Model {model!r} is being republished; try again.")


    @staticmethod
    def check_served(info: dict[str, Any], *, operator: bool) -> None:
        """Predictions and weights are served from released models only (issue 26): a version whose guarantee does
        not cover an observer of every published release is refused (:class:`UnreleasedModelError`) unless the
        caller is an operator (admin scope, the CLI: they hold the data) or an operator opted in at training."""
        if operator:
            return
        if info.get("learned"):
            raise LearnedFromRowsError(
                f"Model {info['model']!r} is not served to model-readers: its dataset's {info['learned']} were "
                "learned from the rows (--categorical without a schema), and its feature names and weights would "
                "reveal a record that held a rare category, deleted or not. Register the data with a declared schema "
                "(lethe dataset add --schema) and train the model on it.")
        if info.get("withdrawn"):
            raise withdrawn_refusal(info["model"])
        if info["covers_releases"] or info["serve_unreleased"]:
            return
        raise unreleased_refusal(info["model"], info["mechanism"])

    def public_model(self, model: str, *, operator: bool = True) -> dict[str, Any]:
        """The published version's public parameters (the weights; never a secret array such as Guo et al.'s
        perturbation b), with what a user needs to apply them: feature names, normalisation, label classes.
        ``operator=False`` (a model-reader): refused for a model that is not served (:meth:`check_served`)."""
        art, info = self.load_published(model)
        self.check_served(info, operator=operator)
        # arrays a mechanism needs to predict but does not publish (the adapter's ``unpublished_arrays``)
        unpublished = get_adapter(info["mechanism"], info["params"]).unpublished_arrays
        return {"model": info["model"], "version": info["version" if operator else "reader_version"],
                "mechanism": info["mechanism"],
                "feature_names": info["feature_names"], "normalize": info["normalize"],
                # a model-reader is told the DECLARED classes (never values learned from the rows; issue 36)
                "classes": art.meta.get("classes") if operator else served_classes(info.get("declared_classes"),
                                                                                   art.meta.get("classes")),
                "schema": info.get("schema"),
                "arrays": {k: np.asarray(a).tolist() for k, a in art.arrays.items() if k not in unpublished}}


    def predict(self, model: str, features: Any = None, *, records: Any = None, texts: Any = None,
                operator: bool = True) -> dict[str, Any]:
        """Predictions of the published version of ``model`` for rows ``features`` (n × d numbers) or, for a model
        of a dataset registered with a schema, raw ``records`` (JSON objects with the schema's columns; extra
        fields such as the label are ignored), encoded by that schema. Errors name the column and the rule, never
        a value sent. For a model of a text dataset (:mod:`lethe.curator.text`): raw ``texts``, embedded by the
        dataset's recorded embedder after its model files are verified. ``operator=False`` (a model-reader):
        refused for a model that is not served (:meth:`check_served`), before the input is looked at."""
        with self.store.read() as s:
            m = self.find_model(s, model)
            ds = s.get(Dataset, m.dataset_id)
            v = s.get(ModelVersion, m.current_version_id)
            assert ds is not None
            d = ds.n_features
            declared, ds_name = ds.feature_names.get("schema"), ds.name
            self.check_served({"model": m.name, "mechanism": m.mechanism, "serve_unreleased": bool(m.serve_unreleased),
                               "covers_releases": v is not None and covers_releases(dict(v.summary or {})),
                               "withdrawn": v is not None and bool((v.summary or {}).get("withdrawn")),
                               "learned": _learned(ds)},
                              operator=operator)
            text_meta = ds.feature_names.get("text")
        given = sum(v is not None for v in (features, records, texts))
        if given != 1:
            raise InvalidInputError("Give exactly one of features (rows of numbers), records (objects with the "
                                    "schema's columns) and texts (for a text dataset). Found "
                                    f"{'none' if given == 0 else given}.")
        if texts is not None:
            X = self._embed_texts(texts, text_meta, ds_name, model)
        elif records is not None:
            X = self._encode_records(records, declared, ds_name)
        else:
            try:
                X = np.asarray(features, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"features must be a list of rows of numbers: {exc}") from exc
        if X.ndim != 2 or X.shape[1] != d or X.shape[0] < 1:
            raise InvalidInputError(f"features must be a non-empty list of rows with {d} numbers each. "
                                    f"Found shape {X.shape}.")
        if not np.all(np.isfinite(X)):
            raise InvalidInputError("features must be finite numbers.")
        art, info = self.load_published(model)
        self.check_served(info, operator=operator)  # the version read may be newer than the one checked above
        if not operator:  # predictions are class labels: the declared ones (issue 36)
            served_classes(info.get("declared_classes"), art.meta.get("classes"))
        adapter = get_adapter(info["mechanism"], info["params"])
        Xp = normalize_rows(X) if info["normalize"] == "rows" else X
        pred = adapter.predict(art, Xp)
        return {"model": model, "version": info["version" if operator else "reader_version"],
                "predictions": [p if isinstance(p, str) else float(p) for p in pred.tolist()]}

    @staticmethod
    def _encode_records(records: Any, declared: Any, dataset: str) -> np.ndarray:
        """Raw records encoded by the dataset's schema; :class:`InvalidInputError` naming the column and the rule
        (the library's message without its ``Found ...`` part: a value sent to predict is never echoed)."""
        from lethe.preprocessing import SchemaEncoder
        from lethe.schema import Schema

        if declared is None:
            raise InvalidInputError(f"records are accepted for models of datasets registered with a schema (lethe "
                                    f"dataset add --schema); dataset {dataset!r} has none: send features.")
        if not isinstance(records, list) or not records or not all(isinstance(r, dict) for r in records):
            raise InvalidInputError("records must be a non-empty list of JSON objects (one per record).")
        schema = Schema.from_dict(declared)
        try:
            return np.asarray(SchemaEncoder(schema).transform(records), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"records do not follow the schema of dataset {dataset!r}: "
                                    f"{_without_value(str(exc))}") from None

    @staticmethod
    def _embed_texts(texts: Any, text_meta: Any, dataset: str, model: str) -> np.ndarray:
        """Raw texts embedded by the text dataset's recorded embedder (:func:`lethe.curator.text.embed`); a text is
        never echoed. Other installed model files: a fault for the operator (logged), a generic refusal."""
        from lethe.curator import text as T

        if text_meta is None:
            raise InvalidInputError(f"texts are accepted for models of text datasets (lethe dataset add "
                                    f"--text-column); dataset {dataset!r} is not one: send features.")
        try:
            return T.embed(T.check_texts(texts), text_meta["embedder"])
        except T.EmbedderMismatchError as exc:
            log.error("model %s: %s", model, exc)
            raise ServiceFaultError(f"Model {model!r} cannot embed texts: the installed embedder is not the one its "
                                    "dataset was embedded with. The operator has been notified.") from None
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(_without_value(str(exc))) from None

    def verify_models(self) -> list[dict[str, Any]]:
        """Check every published version's artifact (checksum, HMAC, binding, invariants, record count); return
        the faults for operators: ``[{model, version, dataset, error}]`` (empty when all is well). Results for an
        unchanged file are cached."""
        with self.store.read() as s:
            rows = [(m.id, m.name, m.mechanism, dict(m.params), v.number, v.id, v.artifact, v.sha256, v.n_records,
                     ds.name, ds.n_features)
                    for m in s.scalars(select(Model).order_by(Model.id))
                    for v in [s.get(ModelVersion, m.current_version_id)]
                    for ds in [s.get(Dataset, m.dataset_id)] if v is not None and ds is not None]
            faults = release_faults(s, withdrawn=False)
        for model_id, name, mech, params, number, vid, relpath, sha, n_records, ds_name, d in rows:
            path = self.data_dir / relpath
            try:
                st = os.stat(path)
                stamp: Any = (vid, sha, st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                stamp = None
            if stamp is not None and self._verified.get(model_id) == stamp:
                continue
            try:
                art = self.artifacts.load(relpath, sha, self.binding(name, mech, params, d))
                n_meta = art.meta.get("n")
                if n_meta != n_records:  # every family's state counts the records its version holds
                    raise ArtifactError(f"Artifact {relpath} is for {n_meta!r} records; the version has "
                                        f"{n_records}.")
            except ArtifactError as exc:
                self._verified.pop(model_id, None)
                faults.append({"model": name, "version": number, "dataset": ds_name, "error": str(exc),
                               "repair": f"lethe model retrain {name}"})
                continue
            if stamp is not None:
                self._verified[model_id] = stamp
        return faults

    def withdrawn_faults(self) -> list[dict[str, Any]]:
        """Released models withdrawn from model-readers (:func:`release_faults`), for operators: a fault to show
        (status, health page), which does not stop deletions."""
        with self.store.read() as s:
            return release_faults(s, behind=False)

    def budget(self, model: str) -> dict[str, Any]:
        """Budget status of a model's published version (public numbers only)."""
        with self.store.read() as s:
            m = self.find_model(s, model)
            v = s.get(ModelVersion, m.current_version_id)
            ds = s.get(Dataset, m.dataset_id)
            assert v is not None and ds is not None
            n_versions = s.scalar(select(func.count()).select_from(ModelVersion)
                                  .where(ModelVersion.model_id == m.id))
            return {"model": m.name, "dataset": ds.name, "mechanism": m.mechanism, "params": m.params,
                    "version": v.number, "version_id": v.id, "published_at": iso(v.created_at),
                    "n_records": v.n_records, "versions_total": int(n_versions or 0), **v.summary,
                    "served": served_to(dict(v.summary or {}), bool(m.serve_unreleased)),
                    "serve_unreleased": bool(m.serve_unreleased),
                    # the dataset's privacy ledger: every release of every model on its records (issue 36)
                    **lifetime.summary_fields(s, ds.id), "lifetime": lifetime.dataset_ledger(s, ds.id)}



def learned_from_rows(ds: Dataset) -> str | None:
    """What a dataset's published feature space holds that was learned from its rows (None: nothing): the categories
    of ``--categorical`` columns of a dataset registered without a schema (feature names ``col=value``, one per
    value seen). A category held by one record names it in every model that publishes the feature names or one
    weight per category, even after the record's deletion (issue 36)."""
    fn = ds.feature_names or {}
    if fn.get("schema") is None and fn.get("categories"):
        n = sum(len(v) for v in dict(fn["categories"]).values()) if isinstance(fn["categories"], dict) else 0
        return f"{n} categories" if n else "categories"
    return None



def _learned(ds: Any) -> str | None:
    return learned_from_rows(ds) if ds is not None else None


def release_faults(s: Any, *, withdrawn: bool = True, behind: bool = True) -> list[dict[str, Any]]:
    """Faults of released models for operators (``lethe status``, the health page; issue 36), read from the store:

    * ``withdrawn``: the published version's horizon is spent with a removal it can no longer publish (under the
      clock schedule: its horizon is spent) — model-readers are refused it; repair: retrain;
    * ``release count behind``: the version's artifact records fewer releases than the service has published of its
      stream (a rolled-back artifact) — the next publication from it is refused; repair: retrain.

    :meth:`Serving.verify_models` reports the second kind (it stops the dataset's batches, like any artifact fault);
    a withdrawn model's removals go on (the records leave the secret centre and the data), so the first kind is
    reported beside it (:meth:`Serving.withdrawn_faults`, in ``lethe status``, /v1/status, the health page).
    """
    out: list[dict[str, Any]] = []
    for m in s.scalars(select(Model).order_by(Model.id)):
        v = s.get(ModelVersion, m.current_version_id) if m.current_version_id is not None else None
        if v is None or not covers_releases(dict(v.summary or {})):
            continue
        ds = s.get(Dataset, m.dataset_id)
        base = {"model": m.name, "version": v.number, "dataset": ds.name if ds is not None else None,
                "repair": f"lethe model retrain {m.name}"}
        if withdrawn and (v.summary or {}).get("withdrawn"):
            out.append({**base, "fault": "withdrawn",
                        "error": "withdrawn: the horizon of private releases is spent and the last release was "
                                 "computed before a deletion it cannot publish; model-readers are refused it"})
        stored = lifetime.open_releases(s, m.id)
        k = (v.summary or {}).get("releases")
        if behind and stored is not None and isinstance(k, int) and k < stored:
            out.append({**base, "fault": "release count behind",
                        "error": f"the published artifact records {k} releases; the service has published {stored} "
                                 "of this stream (rolled back); publication from it is refused"})
    return out


def _without_value(message: str) -> str:
    """A schema error's column and rule, without the value it found (the schema's messages end in ``Found ...``)."""
    head = message.split(" Found ", 1)[0].rstrip()
    return head if head.endswith(".") else head + "."


__all__ = ["UNRELEASED_WARNING", "LearnedFromRowsError", "Serving", "WithdrawnModelError", "covers_releases",
           "learned_from_rows", "release_faults", "served_to", "unreleased_refusal", "withdrawn_refusal"]

"""Models: trained on a dataset's current records (version 1), retrained (the next version, a fresh secret
perturbation), and dropped (their artifacts destroyed). Publication goes through :class:`VersionPublisher`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, select

from lethe._rng import RandomState, check_random_state
from lethe.curator import dask_plane, lifetime
from lethe.curator.adapters import Adapters, tabular_defaults
from lethe.curator.artifacts import ArtifactStore
from lethe.curator.dataplane import DataPlane
from lethe.curator.datasets import DatasetCatalog
from lethe.curator.declared import check_model_classes, declared_classes, undeclared_refusal
from lethe.curator.errors import ConflictError, InvalidInputError, NotFoundError
from lethe.curator.locking import ProcessingLock
from lethe.curator.logs import progress_bar
from lethe.curator.publisher import VersionPublisher
from lethe.curator.retention import Retention
from lethe.curator.serving import UNRELEASED_WARNING, Serving, covers_releases, learned_from_rows, served_to
from lethe.curator.store import Dataset, Model, ModelVersion, Record, Store, add_event, utcnow
from lethe.curator.validation import check_new_name, cli_hint
from lethe.families import DEFAULT_MECHANISM

log = logging.getLogger("lethe.curator")

#: Ledger events of held-out evaluation (the kinds the console reads: lethe.curator.console.queries).
HOLDOUT_SET = "holdout_assigned"
HOLDOUT_ACCURACY = "holdout_accuracy"


@dataclass(eq=False)
class ModelTrainer:
    """Training, retraining and dropping of models; each takes the processing lock and recovers first.

    Parameters
    ----------
    store, artifacts, lock : the store, the artifact files and the processing lock.
    adapters : builds the mechanisms' adapters (on the curator's clock).
    datasets : the row spaces trained on.
    publisher : publishes the versions and writes their certificates.
    retention : recovery, and the destruction of superseded versions.
    serving : its caches are dropped with a model.
    """

    store: Store
    adapters: Adapters
    artifacts: ArtifactStore
    lock: ProcessingLock
    datasets: DatasetCatalog
    publisher: VersionPublisher
    retention: Retention
    serving: Serving

    def train(self, dataset: str, model: str, *, mechanism: str = DEFAULT_MECHANISM,
              params: dict[str, Any] | None = None, random_state: RandomState = None,
              progress: bool = False, heldout: str | None = None, serve_unreleased: bool = False) -> dict[str, Any]:
        """Train model ``model`` on the current records of ``dataset`` and publish its version 1 (see
        :meth:`lethe.curator.service.Curator.train`)."""
        check_new_name("model name", model)  # as a dataset's (issue 35: no path, quote or space in a name)
        _check_serve_unreleased(serve_unreleased, optional=False)
        with self.store.read() as s:
            ds0 = self.datasets.find(s, dataset)
            tabular = ds0.feature_names.get("schema") is not None
            names = list(ds0.feature_names.get("names", []))
            if heldout is not None:
                self._check_heldout(s, ds0, heldout, names)
            plane = s.get(DataPlane, ds0.id)
            zarr = plane is not None and dask_plane.is_zarr(plane.features_path)
            learned = learned_from_rows(ds0)
            declared = declared_classes(ds0.feature_names)
        defaults = tabular_defaults(mechanism) if tabular else {}
        if zarr:  # a read-only Zarr store: no option that rewrites rows (the tabular intercept is not applied)
            try:
                params = dask_plane.row_options(defaults, params or {})
            except ValueError as exc:
                raise InvalidInputError(str(exc)) from None
        elif tabular:  # a schema dataset: the tabular defaults where the parameters do not say otherwise
            params = {**defaults, **(params or {})}
        try:
            adapter = self.adapters.get(mechanism, params)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(str(exc)) from exc
        _check_seed(adapter, mechanism, random_state)
        if learned is not None and (_publishes_releases(adapter) or serve_unreleased):
            raise InvalidInputError(
                f"dataset {dataset!r} has {learned} learned from its rows (--categorical without a schema): a model "
                f"served to model-readers would publish them, and a category held by one record reveals that record "
                f"even after its deletion. Register the data with a declared schema (lethe dataset add --schema: "
                f"categories, bounds and names declared, not learned) to train {mechanism!r}"
                f"{' with --serve-unreleased' if serve_unreleased else ''} on it. Found {learned} learned from rows.")
        if declared is None and _publishes_releases(adapter):  # a released model always publishes its classes
            raise undeclared_refusal(dataset, mechanism, serve_unreleased)
        if _publishes_releases(adapter):
            with self.store.read() as s:
                lifetime.check_stream(s, ds0.id, None, adapter.params, what=f"Training {model!r}")
        rng = check_random_state(random_state)
        with self.lock.hold(), progress_bar(progress, total=3, desc=f"train {model}") as bar:
            self.retention.recover_locked()
            with self.store.read() as s:
                ds = self.datasets.find(s, dataset)
                if s.scalar(select(Model).where(Model.name == model)) is not None:
                    raise ConflictError(f"A model named {model!r} already exists.")
                ds_id, ds_name = ds.id, ds.name
                ids, X, y = self.datasets.current_data(s, ds.id, ds.n_features)
                keys = _record_keys(s, ds.id, ids) if adapter.uses_record_keys else None
            adapter.check_features(X.shape[1])
            bar.update(1)
            try:
                artifact, cert = _train(adapter, X, y, rng, keys)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"Training {model!r} on {dataset!r} failed: {cli_hint(str(exc))}") from exc
            _check_served_classes(artifact, declared, dataset, mechanism, _publishes_releases(adapter) or
                                  serve_unreleased, f"Training {model!r}", serve_unreleased)
            bar.update(1)
            summary, binding = _summary_and_binding(adapter, artifact, model, mechanism, X.shape[1], serve_unreleased)
            with self.publisher.new_artifact(artifact, binding) as (relpath, sha):
                with self.store.write() as s, s.begin():
                    n_now = s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds_id))
                    if n_now != ids.size:
                        raise ConflictError(f"Dataset {dataset!r} changed during training; try again.")
                    if s.scalar(select(Model).where(Model.name == model)) is not None:
                        raise ConflictError(f"A model named {model!r} already exists.")
                    now = utcnow()
                    m = Model(name=model, dataset_id=ds_id, mechanism=mechanism, params=adapter.params,
                              created_at=now, serve_unreleased=bool(serve_unreleased))
                    s.add(m)
                    s.flush()
                    v = self.publisher.publish_version(s, m, None, artifact=relpath, sha256=sha,
                                                       n_records=int(ids.size), summary=summary, now=now,
                                                       announce=None)
                    add_event(s, "train", {"dataset": ds_name, "mechanism": mechanism, "params": adapter.params,
                                           **summary, **_serving_payload(summary, serve_unreleased)},
                              model_id=m.id, version_id=v.id)
                    cert = _open_stream(s, m, summary, cert, what=f"Training {model!r}")
                    self.publisher.train_certificate(s, m, v, None, cert, now)
                    model_id, version_id = m.id, v.id
            bar.update(1)
        log.info("trained model %s (mechanism %s) on dataset %s: version 1, n=%d", model, mechanism, ds_name,
                 ids.size)
        out = self.serving.budget(model)
        if heldout is not None:
            out["heldout"] = self._evaluate_heldout(adapter, artifact, model, model_id, version_id, heldout)
        return out

    def _check_heldout(self, s: Any, ds: Dataset, heldout: str, names: list[str]) -> None:
        """A held-out set is another registered dataset with the same features (same schema or same columns)."""
        try:
            other = self.datasets.find(s, heldout)
        except NotFoundError:
            raise InvalidInputError(f"heldout (--heldout) must name a registered dataset (register the test file "
                                    f"with the same --schema first). Found {heldout!r}.") from None
        if other.id == ds.id:
            raise InvalidInputError(f"heldout (--heldout) must be another dataset than the training data. "
                                    f"Found {heldout!r}.")
        if list(other.feature_names.get("names", [])) != names or other.normalize != ds.normalize:
            raise InvalidInputError(f"heldout (--heldout) must have the training dataset's features and "
                                    f"normalisation (register it with the same schema). Found dataset {heldout!r} "
                                    f"with {other.n_features} features and normalize={other.normalize!r}.")
        mine, theirs = (d.feature_names.get("text", {}).get("embedder") for d in (ds, other))
        if mine != theirs:  # text datasets: the same embedder, the same model files (lethe.curator.text)
            raise InvalidInputError(f"heldout (--heldout) must be embedded by the training dataset's embedder (the "
                                    f"same model files). Found dataset {heldout!r} embedded by "
                                    f"{None if theirs is None else theirs.get('name')!r}, with other model files "
                                    f"or none.")

    def _evaluate_heldout(self, adapter: Any, artifact: Any, model: str, model_id: int, version_id: int,
                          heldout: str) -> dict[str, Any]:
        """Accuracy of version 1 on the held-out dataset, recorded in the ledger with the held-out assignment (the
        console's evaluator then records every later version's, and plots them)."""
        with self.store.read() as s:
            ds = self.datasets.find(s, heldout)
            _ids, X, y = self.datasets.current_data(s, ds.id, ds.n_features)
        out: dict[str, Any] = {"dataset": heldout, "n": int(X.shape[0]), "accuracy": None}
        if artifact.meta.get("classes") is not None and X.shape[0] > 0:
            pred = adapter.predict(artifact, np.asarray(X, dtype=np.float64))
            out["accuracy"] = float(np.mean(pred == y))
        with self.store.write() as s, s.begin():
            add_event(s, HOLDOUT_SET, {"model": model, "dataset": heldout}, model_id=model_id)
            if out["accuracy"] is not None:
                add_event(s, HOLDOUT_ACCURACY, {"model": model, "version": 1, "accuracy": out["accuracy"],
                                                "n": out["n"], "dataset": heldout},
                          model_id=model_id, version_id=version_id)
        return out

    def retrain(self, model: str, *, random_state: RandomState = None,
                serve_unreleased: bool | None = None) -> dict[str, Any]:
        """Train ``model`` again on its dataset's current records and publish the next version (see
        :meth:`lethe.curator.service.Curator.retrain`)."""
        _check_serve_unreleased(serve_unreleased, optional=True)
        rng = check_random_state(random_state)
        with self.lock.hold():
            self.retention.recover_locked()
            with self.store.read() as s:
                m = Serving.find_model(s, model)
                ds = s.get(Dataset, m.dataset_id)
                assert ds is not None
                model_id, mech, params, ds_id = m.id, m.mechanism, dict(m.params), ds.id
                serve = bool(m.serve_unreleased) if serve_unreleased is None else bool(serve_unreleased)
                old_vid = m.current_version_id
                ids, X, y = self.datasets.current_data(s, ds.id, ds.n_features)
                adapter = self.adapters.get(mech, params)
                keys = _record_keys(s, ds.id, ids) if adapter.uses_record_keys else None
                _check_seed(adapter, mech, random_state)
                learned = learned_from_rows(ds)
                declared, declared_in = declared_classes(ds.feature_names), ds.name
                if declared is None and _publishes_releases(adapter):
                    raise undeclared_refusal(ds.name, mech, serve)
                if learned is not None and (serve or _publishes_releases(adapter)):
                    raise InvalidInputError(f"dataset {ds.name!r} has {learned} learned from its rows (--categorical "
                                            "without a schema): a model served to model-readers would publish them. "
                                            "Retrain without --serve-unreleased (a mechanism that publishes "
                                            "no release), or register the data with a declared schema. "
                                            f"Found mechanism={mech!r}, serve_unreleased={serve}.")
                if _publishes_releases(adapter):
                    lifetime.check_stream(s, ds.id, model_id, params, what=f"Retraining {model!r}")
            try:
                artifact, cert = _train(adapter, X, y, rng, keys)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"Retraining {model!r} failed: {exc}") from exc
            _check_served_classes(artifact, declared, declared_in, mech, serve or _publishes_releases(adapter),
                                  f"Retraining {model!r}", serve)
            summary, binding = _summary_and_binding(adapter, artifact, model, mech, X.shape[1], serve_unreleased)
            with self.publisher.new_artifact(artifact, binding) as (rel, sha):
                with self.store.write() as s, s.begin():
                    m2 = s.get(Model, model_id)
                    old = s.get(ModelVersion, old_vid) if old_vid is not None else None
                    n_now = s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds_id))
                    if m2 is None or m2.current_version_id != old_vid or n_now != ids.size:
                        raise ConflictError(f"Model {model!r} or its dataset changed during retraining; try again.")
                    now = utcnow()
                    add_event(s, "retrain", {"reason": "operator", "n": int(ids.size), **summary,
                                             **_serving_payload(summary, serve)},
                              model_id=model_id, version_id=old_vid)
                    m2.serve_unreleased = serve
                    v = self.publisher.publish_version(s, m2, old, artifact=rel, sha256=sha,
                                                       n_records=int(ids.size), summary=summary, now=now,
                                                       announce={})
                    number = v.number
                    cert = _open_stream(s, m2, summary, cert, what=f"Retraining {model!r}")
                    self.publisher.train_certificate(s, m2, v, old, cert, now)
            self.retention.destroy_superseded()
        log.info("retrained model %s: version %d, n=%d", model, number, ids.size)
        return self.serving.budget(model)

    def drop(self, model: str) -> dict[str, Any]:
        """Remove a model and destroy its artifacts (see :meth:`lethe.curator.service.Curator.drop_model`)."""
        with self.lock.hold():
            self.retention.recover_locked()
            with self.store.write() as s, s.begin():
                m = Serving.find_model(s, model)
                versions = s.scalars(select(ModelVersion).where(ModelVersion.model_id == m.id)).all()
                files = [v.artifact for v in versions if v.status != "destroyed"]
                model_id = m.id
                lifetime.close_stream(s, model_id)  # its releases stay in the dataset's ledger
                m.current_version_id = None
                s.flush()
                for v in versions:
                    s.delete(v)
                s.flush()
                s.delete(m)
                add_event(s, "model_dropped", {"model": model, "versions": len(versions)}, model_id=model_id)
            for rel in files:
                self.artifacts.destroy(rel)
            self.serving.forget()
        log.info("dropped model %s (%d version(s))", model, len(versions))
        return {"model": model, "dropped": True, "versions": len(versions), "artifacts_destroyed": len(files)}


def _publishes_releases(adapter: Any) -> bool:
    """Whether the mechanism publishes private releases to model-readers (its family declares
    ``Capability.PRIVATE_RELEASES``); its streams enter the dataset's privacy ledger."""
    from lethe.families import Capability, family_of_mechanism

    return family_of_mechanism(adapter.name).has(Capability.PRIVATE_RELEASES)


def _check_served_classes(artifact: Any, declared: list[Any] | None, dataset: str, mechanism: str, served: bool,
                          what: str, opt_in: bool) -> None:
    """A model served to model-readers whose artifact has label classes: they must be declared, and be exactly the
    declared ones (:mod:`lethe.curator.declared`; issue 36). Operators-only models are not checked."""
    classes = artifact.meta.get("classes") if served else None
    if classes is None:
        return
    if declared is None:
        raise undeclared_refusal(dataset, mechanism, opt_in)
    check_model_classes(declared, classes, what)


def _check_seed(adapter: Any, mechanism: str, random_state: Any) -> None:
    """Refuse a seed for a mechanism whose noise is the privacy of what it publishes (``refuses_seed``)."""
    if random_state is not None and adapter.refuses_seed:
        raise InvalidInputError(
            f"random_state (--seed) is refused for {mechanism!r}: its release noise is what makes the published "
            "weights private, and anyone who knows a seed regenerates and subtracts it. The service draws it from "
            f"the operating system's CSPRNG; omit the seed. Found random_state={random_state!r}.")


def _open_stream(s: Any, model: Model, summary: dict[str, Any], cert: dict[str, Any], *,
                 what: str) -> dict[str, Any]:
    """Within the write transaction: a released model's new stream in its dataset's privacy ledger (refused past the
    lifetime budget, :func:`lethe.curator.lifetime.open_stream`), and the certificate with the lifetime ε beside the
    stream's. Other mechanisms: the model's open stream, if any, is closed."""
    if not covers_releases(summary):
        lifetime.close_stream(s, model.id)
        return cert
    lifetime.open_stream(s, model, summary, what=what)
    return {**cert, **lifetime.summary_fields(s, model.dataset_id)}


def _train(adapter: Any, X: np.ndarray, y: np.ndarray, rng: Any, keys: list[str] | None) -> tuple[Any, Any]:
    """The adapter's (artifact, certificate) on the records; their keys are passed to adapters that use them."""
    return adapter.train(X, y, rng) if keys is None else adapter.train(X, y, rng, keys=keys)


def _summary_and_binding(adapter: Any, artifact: Any, model: str, mechanism: str, n_features: int,
                         serve_unreleased: bool | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The new version's summary and serving binding; refuses the serving opt-in for a mechanism that publishes
    private releases (its certificates do not cover one published version)."""
    summary = adapter.summary(artifact)
    if serve_unreleased and covers_releases(summary):
        raise InvalidInputError(f"serve_unreleased (--serve-unreleased) is for mechanisms whose "
                                f"certificates cover one published version; {mechanism!r} publishes "
                                f"private releases, served without it. Found serve_unreleased=True.")
    return summary, Serving.binding(model, mechanism, adapter.params, n_features)


def _check_serve_unreleased(value: Any, *, optional: bool) -> None:
    if optional and value is None:
        return
    if not isinstance(value, bool):
        raise TypeError(f"serve_unreleased must be a bool{' or None' if optional else ''}. "
                        f"Found {type(value).__name__}.")


def _serving_payload(summary: dict[str, Any], serve_unreleased: bool) -> dict[str, Any]:
    """What the ledger records of who may read the model: ``served`` ("releases": private releases; "opt-in": the
    operator's explicit opt-in, with its warning; "operators": admins only)."""
    served = served_to(summary, serve_unreleased)
    out: dict[str, Any] = {"served": served, "serve_unreleased": served == "opt-in"}
    if served == "opt-in":
        out["warning"] = UNRELEASED_WARNING
    return out


def _record_keys(s: Any, dataset_id: int, ids: Any) -> list[str]:
    """The record keys (the keyed digests the records table holds) of records ``ids``, in that order: for mechanisms
    that partition by record key (:attr:`~lethe.families.Capability.RECORD_KEYS`). Read in the snapshot ``ids`` came
    from."""
    by_id = dict(s.execute(select(Record.id, Record.key).where(Record.dataset_id == dataset_id)).all())
    return [by_id[int(i)] for i in ids]


__all__ = ["ModelTrainer"]

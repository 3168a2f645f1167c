"""Faults operators see, confirmed before they are reported: no false fault while versions are being published.

A check reads a model's published version, then opens its artifact. A batch may publish the next version in between
and destroy the one just read (superseded versions are destroyed at once: their secret state must not outlive
them): the check then finds "Artifact … is missing" for a version that is no longer published — a false fault,
whose advice (``lethe model retrain``) would reset a healthy model. :func:`model_faults` reports a model's fault
only if the version found faulty is still the model's published version after the check; otherwise it checks again
(the new version), a bounded number of times.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from lethe.curator.store import Model, ModelVersion, Store


def _current(store: Store) -> dict[str, int | None]:
    """Model name → the number of its published version (read now)."""
    with store.read() as s:
        return dict(s.execute(select(Model.name, ModelVersion.number)
                              .join(ModelVersion, ModelVersion.id == Model.current_version_id)).all())


def model_faults(serving: Any, store: Store, *, attempts: int = 5) -> list[dict[str, Any]]:
    """:meth:`lethe.curator.serving.Serving.verify_models`, keeping only the faults of versions still published
    once the check is over (a version superseded meanwhile was checked while it was being destroyed: the check is
    repeated on its successor, up to ``attempts`` times). A fault of the published version is always reported."""
    faults = serving.verify_models()
    for _ in range(attempts):
        if not faults:
            return faults
        current = _current(store)
        settled = [f for f in faults if current.get(f["model"]) == f["version"]]
        if len(settled) == len(faults):
            return faults
        faults = serving.verify_models()
    current = _current(store)
    return [f for f in faults if current.get(f["model"]) == f["version"]]


def version_published(store: Store, version_id: int) -> bool:
    """Whether a version is (still) published: a check that failed on one that is not reports nothing."""
    with store.read() as s:
        return s.scalar(select(ModelVersion.status).where(ModelVersion.id == version_id)) == "published"


def service_faults(serving: Any, store: Store, retention: Any) -> list[dict[str, Any]]:
    """Every fault the service is in, each with its remedy — the one list ``lethe status``, ``/v1/status``,
    ``/healthz``, ``/metrics`` and the console's health page count: the published models' (:func:`model_faults`),
    released models withdrawn from model-readers (their horizon spent after a deletion), the datasets' files, and
    requests that cannot reach an end."""
    return (model_faults(serving, store) + serving.withdrawn_faults() + retention.verify_datasets()
            + retention.verify_requests())


__all__ = ["model_faults", "service_faults", "version_published"]

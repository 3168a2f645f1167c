"""The audit of a certified-removal model (Guo et al. 2020): the loss-threshold membership attack (Yeom et al. 2018)
on the records deleted from each version vs public held-out records, against the bound its (ε, δ) implies
(:mod:`lethe.audit.model`; the family's :attr:`lethe.families.Family.audit`).

A version is audited on the records removed by it or before it (the removal certificates say which version removed
each key); a destroyed version is listed with the reason it cannot be audited. Each version states its power (the
smallest advantage the attack could tell from zero with these records) and answers passed, inconclusive or failed
(:func:`lethe.audit.model.verdict_of`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from lethe.certified.adapter import CertifiedRemovalAdapter
from lethe.curator.adapters import get_adapter
from lethe.curator.artifacts import ArtifactError
from lethe.curator.audits import (
    AuditRequest,
    RegisteredAudit,
    model_info,
    public_rows,
    read_records,
    removal_versions,
    require_deleted,
)
from lethe.curator.errors import InvalidInputError
from lethe.curator.serving import Serving

if TYPE_CHECKING:
    from lethe.curator.service import Curator

__all__ = ["audit_certified"]


def _weights(W: np.ndarray) -> np.ndarray:
    """A version's weights as :func:`lethe.audit.model.margins` takes them: (d,) binary, (K, d) one-vs-all."""
    return W[0] if W.ndim == 2 and W.shape[0] == 1 else W


def audit_certified(c: Curator, req: AuditRequest) -> RegisteredAudit:
    """Audit every version of a certified-removal logistic model whose artifact exists (module docstring). Each
    version is checked against the (ε, δ) of the model's parameters (``req.epsilon``/``req.delta``: another claim).
    Refused (:class:`InvalidInputError`, changing nothing) without the file, with a key the model still holds or
    never removed, with fewer than 2 records of either kind, or for a loss other than the logistic."""
    from lethe.audit.model import ModelAudit, audit_model

    deleted = require_deleted(req.deleted)
    info = model_info(c, req.model)
    ds, mech, params = info.dataset, info.mechanism, info.params
    if params.get("loss", "logistic") != "logistic":
        raise InvalidInputError(f"model (--model) must be a logistic model to be audited (the attack scores the "
                                f"logistic loss). Found loss {params.get('loss')!r}.")
    keys, X_del, y_del = read_records(ds, deleted, file_format=req.file_format)
    removed_at = removal_versions(c, ds, info.model_id, keys, info.number_of)
    held = public_rows(c, ds.name, req.heldout, model_ids=[info.model_id])
    adapter = get_adapter(mech, params)
    if not isinstance(adapter, CertifiedRemovalAdapter):
        raise InvalidInputError(f"model (--model) must be a certified-removal model for this audit. Found mechanism "
                                f"{mech!r}.")
    audited, names, not_audited = [], [], []
    classes = None
    for vid, number, status, relpath, sha, _n in info.versions:
        name = f"v{number}"
        if status == "destroyed":
            not_audited.append((name, "its artifact was destroyed when it was superseded (the curator keeps no "
                                      "superseded weights)"))
            continue
        use = removed_at <= number
        if int(use.sum()) < 2:
            not_audited.append((name, f"{int(use.sum())} of the records given were removed by this version or "
                                      "before (at least 2 are needed)"))
            continue
        try:
            art = c.artifacts.load(relpath, sha, Serving.binding(req.model, mech, params, ds.n_features))
        except ArtifactError:
            not_audited.append((name, "its artifact is missing or fails verification (see lethe status)"))
            continue
        audited.append((vid, np.asarray(art.arrays["w"], dtype=np.float64), use))
        names.append(name)
        classes = art.meta.get("classes")
    if not audited:
        return RegisteredAudit(model=req.model, dataset=ds.name, audit=None, not_audited=tuple(not_audited),
                               n_deleted=len(keys), heldout=held.source, n_heldout=int(held.X.shape[0]))
    if req.epsilon is not None or req.delta is not None:
        eps, dlt = req.epsilon, req.delta
    else:
        eps, dlt = adapter.mechanism.eps_delta()
    Zh = adapter.model_rows(held.X)
    Zd = adapter.model_rows(X_del)
    results = []
    for (_vid, W, use), name in zip(audited, names, strict=True):
        a = audit_model([_weights(W)], Zd[use], y_del[use], Zh, held.y, epsilon=eps, delta=dlt, classes=classes,
                        alpha=req.alpha, names=[name], random_state=req.random_state)
        results.append(a.versions[0])
    audit = ModelAudit(versions=tuple(replace(v, version=i) for i, v in enumerate(results)), alpha=float(req.alpha))
    return RegisteredAudit(model=req.model, dataset=ds.name, audit=audit, not_audited=tuple(not_audited),
                           n_deleted=len(keys), heldout=held.source, n_heldout=int(held.X.shape[0]),
                           notes=("The papers' experiment (certified removal and Noisy-GD on MNIST, loss-threshold "
                                  "and LiRA attacks): lethe audit --experiment mnist.",))

"""The erasure log: a repair never resurrects anyone.

Every deletion request keeps its key only as a keyed digest (HMAC-SHA256 under the data directory's secret pepper,
:meth:`lethe.curator.datadir.DataDirectory.key_digest`, keyed by the dataset's id); the requests of a live dataset
are its erasure log. When a dataset is dropped (the documented repair of a damaged data file is to drop it and
register it again from its source), the digests its requests named are copied to the ``erasures`` table with the
dataset's name and source file name: the log survives the drop. Registering a dataset checks the log of every
dataset — dropped or live — with the same name or the same source file name, and leaves out every row whose key
one of them erased, saying how many (``not_reingested``). No plain key is written anywhere: the log holds only
digests, which the requests held anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import insert, or_, select

from lethe.curator.settings import DROPPED_PREFIX
from lethe.curator.store import Dataset, DeletionRequest, Erasure, utcnow

#: request states whose key counts as erased (a failed request removed nothing; its record stays)
ERASED = ("done", "pending", "waiting")


def log_dataset(s: Any, ds: Dataset, name: str) -> int:
    """Within ``s``: copy the digests the requests of ``ds`` named to the erasure log under ``name`` (before the
    dataset is dropped). Returns the number of new entries."""
    have = set(s.scalars(select(Erasure.digest).where(Erasure.dataset_id == ds.id)))
    digests = sorted(set(s.scalars(select(DeletionRequest.key_digest).where(
        DeletionRequest.dataset_id == ds.id, DeletionRequest.status.in_(ERASED)))) - have)
    if digests:
        now = utcnow()
        table: Any = Erasure.__table__
        s.execute(insert(table), [{"dataset_id": ds.id, "dataset_name": name, "source": ds.source, "digest": d,
                                   "erased_at": now} for d in digests])
    return len(digests)


def erased_keys(s: Any, digest: Callable[[int, str], str], name: str, source: str,
                keys: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Which of ``keys`` (a table about to be registered as ``name`` from the file ``source``) were erased on
    request from a dataset of the same name or source: (boolean mask over ``keys``, names of the datasets whose log
    matched). ``digest(dataset_id, key)`` is the data directory's keyed digest."""
    logs: dict[int, set[str]] = {}
    names: dict[int, str] = {}
    for ds_id, ds_name, dg in s.execute(select(Erasure.dataset_id, Erasure.dataset_name, Erasure.digest).where(
            or_(Erasure.dataset_name == name, Erasure.source == source))):
        logs.setdefault(int(ds_id), set()).add(dg)
        names[int(ds_id)] = ds_name
    for ds_id, ds_name in s.execute(select(Dataset.id, Dataset.name).where(
            Dataset.name.not_like(f"{DROPPED_PREFIX}%"), or_(Dataset.name == name, Dataset.source == source))):
        logs.setdefault(int(ds_id), set()).update(s.scalars(select(DeletionRequest.key_digest).where(
            DeletionRequest.dataset_id == ds_id, DeletionRequest.status.in_(ERASED))))
        names[int(ds_id)] = ds_name
    mask = np.zeros(len(keys), dtype=bool)
    matched: set[int] = set()
    for ds_id, log in logs.items():
        if not log:
            continue
        for i, k in enumerate(keys):
            if not mask[i] and digest(ds_id, str(k)) in log:
                mask[i] = True
                matched.add(ds_id)
    return mask, sorted(names[i] for i in matched)


__all__ = ["ERASED", "erased_keys", "log_dataset"]

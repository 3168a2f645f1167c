"""The certificate of a removal from a sharded model: :class:`ExactCertificate` (ε = 0, δ = 0)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from lethe.io import JsonRecord

__all__ = ["ExactCertificate"]


@dataclass(frozen=True)
class ExactCertificate(JsonRecord):
    """Certificate of a removal from a sharded model: exact (ε = 0, δ = 0).

    The promise: training is a deterministic function of each shard's rows (input order), the recorded partition
    (keyed hash of the record keys) and the recorded seeds; a record's shard and slice depend on its key only. The
    retrained shards are rebuilt from a checkpoint that never saw the removed records (or from scratch), so the model
    after the removal equals, bit for bit, the model fitted from scratch on the remaining records with the same
    ``key`` and ``random_state``.

    Fields in :attr:`OPERATOR_ONLY` are for the operator only: the retrained shard indices (with the secret key or a
    record's later history they place the removed record), the slice each shard was replayed from, the rows replayed
    and the seconds (both grow with the replayed slices, so they leak the slice). :meth:`public_dict` omits them.

    Attributes
    ----------
    guarantee : str
        ``"exact"``.
    epsilon, delta : float
        0.0 and 0.0.
    n_removed : int
        Records removed by this call.
    n_remaining : int
        Records the model is trained on after it.
    n_shards : int
        S.
    n_shards_retrained : int
        Shards retrained (those that held a removed record; all S when the set of classes changed).
    retrained_shards : tuple of int
        Their indices (operator only).
    restart_slices : tuple of int
        For each retrained shard, the slice its replay started from (operator only).
    rows_replayed : int
        Rows processed by the replays, Σ over replayed stages of the stage's cumulative rows (operator only).
    seconds : float
        Wall time of the removal (operator only).
    """

    guarantee: str
    epsilon: float
    delta: float
    n_removed: int
    n_remaining: int
    n_shards: int
    n_shards_retrained: int
    retrained_shards: tuple[int, ...]
    restart_slices: tuple[int, ...]
    rows_replayed: int
    seconds: float

    OPERATOR_ONLY: ClassVar[frozenset[str]] = frozenset({"retrained_shards", "restart_slices", "rows_replayed",
                                                         "seconds"})

    @property
    def observer(self) -> str:
        """Whom the guarantee covers (:class:`lethe.protocols.Certificate`): one published version. The version
        equals the model retrained without the records; an observer of consecutive versions also sees which shard
        changed and how (docs/sharded.md, "What consecutive releases reveal"), which this certificate does not
        cover."""
        return "one published version"

    def to_dict(self) -> dict[str, Any]:
        """Every field (operators only), JSON-serialisable, with ``observer``."""
        d = super().to_dict()
        d["observer"] = self.observer
        d["retrained_shards"] = list(self.retrained_shards)
        d["restart_slices"] = list(self.restart_slices)
        return d

    def public_dict(self) -> dict[str, Any]:
        """The fields that may be shown to the requester or published: none that locates the removed record."""
        return {k: v for k, v in self.to_dict().items() if k not in self.OPERATOR_ONLY}

    @classmethod
    def from_dict(cls, d: Any) -> ExactCertificate:
        """The certificate of :meth:`to_dict` (a saved model's last one). ValueError when a field is missing or
        unknown, or when it does not say exact (ε = 0, δ = 0, this observer): an edited file is refused."""
        names = [f.name for f in fields(cls)]
        if not isinstance(d, dict) or set(d) != {*names, "observer"}:
            found = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"an exact certificate has the fields {sorted({*names, 'observer'})}. Found {found}.")
        try:
            kw: dict[str, Any] = {k: tuple(int(v) for v in d[k]) if k in ("retrained_shards", "restart_slices")
                                  else d[k] for k in names}
            cert = cls(**kw)
        except (TypeError, ValueError) as e:
            raise ValueError(f"the exact certificate's shard lists are not integers: {e}") from None
        if (cert.guarantee, cert.epsilon, cert.delta, d["observer"]) != ("exact", 0.0, 0.0, cert.observer):
            raise ValueError(f"an exact certificate says guarantee 'exact', epsilon 0, delta 0, observer "
                             f"{cert.observer!r}. Found {cert.guarantee!r}, {cert.epsilon!r}, {cert.delta!r}, "
                             f"{d['observer']!r}.")
        return cert

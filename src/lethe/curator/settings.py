"""The curator's settings, its principals and the names of its data directory's parts."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: admin: everything; requester: submit deletions, read its own requests and certificates; model-reader: the
#: published models (weights, predictions) and nothing of any request (issue 26: reading the published sequence is
#: what a version-diff attack needs, so it is granted separately).
SCOPES = ("admin", "requester", "model-reader")
REQUEST_STATUSES = ("pending", "done", "failed")
KEYS_HASHED = "hmac-sha256"  # Dataset.feature_names["keys"]: the records table holds key digests, not keys
DROPPED_PREFIX = "~dropped~"  # a dropped dataset's row keeps this name (requests and certificates refer to it)
NORMALIZE = ("none", "rows")
LOCK_FILE = "processing.lock"
SECRETS_DIR = "secrets"
LOG_DIR = "logs"
TOKEN_STAMP = "tokens.stamp"
TOKEN_CACHE_SECONDS = 5.0  # longest a verified token stays cached without a look at the database


@dataclass(frozen=True)
class Settings:
    """Processing settings.

    batch_size : at most this many requests of one dataset are removed as one batch (one new model version); the
        budget may cap a batch lower (see ``budget_share``).
    max_delay : seconds a pending request may wait for others to fill a batch; 0 processes at once.
    poll_interval : seconds between the worker's looks at the queue.
    max_attempts : a request the mechanism fails on this many times, alone, is marked ``failed`` (a failed batch of
        several requests is split first; see :meth:`lethe.curator.batches.BatchProcessor.process_batch`).
    budget_share : a batch is kept small enough that its extrapolated remainder spends at most this share of the
        budget left (:meth:`lethe.curator.batches.BatchProcessor.budget_cap`); 1 disables the cap.
    publish_within : the latency target, seconds from submission to publication (issue 37: 50 requests on a small
        table became 49 one-request batches, the last published after 10 minutes). Once the oldest pending request
        of a dataset has waited half of it, the next batch takes every pending request up to ``batch_size``, past
        the budget's cap: the cap only spreads the budget to put retrainings off, and a batch that would exceed the
        budget retrains (Alg. 2), so the certificate holds either way; what the override costs is an earlier
        retraining. ``inf`` keeps the cap always.
    """

    batch_size: int = 256
    max_delay: float = 0.0
    poll_interval: float = 0.5
    max_attempts: int = 3
    budget_share: float = 0.02
    publish_within: float = 60.0

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1. Found {self.batch_size!r}.")
        for name in ("max_delay", "poll_interval"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0. Found {v!r}.")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1. Found {self.max_attempts!r}.")
        pw = self.publish_within
        if isinstance(pw, bool) or not isinstance(pw, int | float) or math.isnan(pw) or pw <= 0:
            raise ValueError(f"publish_within must be a number of seconds > 0 (inf: no target). Found {pw!r}.")
        if not isinstance(self.budget_share, int | float) or not 0 < self.budget_share <= 1:
            raise ValueError(f"budget_share must be a number in (0, 1]. Found {self.budget_share!r}.")


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's name and scope (the CLI acts as ``Principal("cli", "admin")``)."""

    name: str
    scope: str

    @property
    def is_admin(self) -> bool:
        return self.scope == "admin"

    @property
    def can_request(self) -> bool:
        """May submit deletions and read its own requests (admin, requester)."""
        return self.scope in ("admin", "requester")

    @property
    def can_read_models(self) -> bool:
        """May read published models: weights, predictions (admin, model-reader)."""
        return self.scope in ("admin", "model-reader")


CLI_PRINCIPAL = Principal("cli", "admin")



__all__ = [
    "CLI_PRINCIPAL", "DROPPED_PREFIX", "KEYS_HASHED", "LOCK_FILE", "LOG_DIR", "NORMALIZE", "REQUEST_STATUSES", "SCOPES",
    "SECRETS_DIR", "TOKEN_CACHE_SECONDS", "TOKEN_STAMP", "Principal", "Settings",
]

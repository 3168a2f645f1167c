"""What the curator may publish: allow-lists for certificates, errors and ledger payloads.

The rule (``docs/curator.md``, "What is published"): nothing the curator publishes — API answers, CLI output,
certificates, ledger events, logs — identifies a deleted record. No row position, no raw value (feature, label),
no key to anyone but its own requester (and the curator never stores the key in plain text, so it returns it to
nobody). A requester sees nothing of another requester's request: not its id, its key, its batch or its size.

The mechanisms' certificates (e.g. :class:`lethe.certified.mechanism.Certificate`) are written for a library user who
owns the data and carry diagnostics such as ``removed_indices`` (the row positions of the batch), timings and solver
residuals. The curator therefore keeps **only** the fields named in :data:`CERTIFICATE_FIELDS` — an allow-list, so a
field a mechanism adds later is withheld until someone audits it — when it stores a certificate, and again when it
shows one (rows written by older versions may still hold the old fields).

Two views exist:

* the operator's (admin scope, CLI): the allow-listed certificate, with the batch's data-dependent bounds
  (``residual_bound``, ``step_bound``, ``budget_left``, ``epsilon_spent``) and counts (``n_removed``,
  ``n_remaining``);
* the requester's: only what does not depend on the other records of the batch nor on any record's values —
  the guarantee, the theorem, the mechanism's parameters (ε, δ, noise, budget ε′, bound mode, calibration, solver,
  Rényi order and targets) and whether the model was retrained. See :data:`REQUESTER_CERTIFICATE_FIELDS`.
"""

from __future__ import annotations

import logging
import math
import re
import traceback
from typing import Any

#: Certificate fields kept in storage and shown to operators (admin). Scalars only (lists of strings for
#: ``assumptions``). Every other field of a mechanism's certificate is dropped before it is stored.
CERTIFICATE_FIELDS: frozenset[str] = frozenset({
    # what is guaranteed, by which result
    "operation", "guarantee", "theorem", "noise", "bound", "bound_mode", "calibration", "solver", "assumptions",
    # the guarantee's parameters (data-independent)
    "epsilon", "delta", "budget", "q", "p", "r", "epsilon_dp", "epsilon_dd", "epsilon_dd_adaptive",
    # noisy fine-tuning (lethe.nn): its calibration, data-independent
    "epsilon_certified", "rdp_slope", "sigma", "lr", "grad_clip", "model_radius", "weight_decay", "clipping",
    "batch_size", "post_steps", "post_radius", "post_momentum",
    # aggregate, data-dependent numbers of the batch (operators only)
    "residual_bound", "step_bound", "budget_left", "epsilon_spent", "worst_case_bound",
    # lifecycle and counts
    "retrained", "n_removed", "n_remaining", "n_retained", "n", "step", "steps", "edit_requests",
    # who the guarantee covers (issue 26), and released models' stream (data-independent but for the counts)
    "observer", "horizon", "cadence", "releases", "published", "horizon_spent", "cadence_seconds", "schedule",
    "schedule_reveals", "withdrawn", "noise_source",
    # private releases with tree-aggregated noise (issue 39): public parameters and the accountant's figures
    "noise_mechanism", "mu", "mu_spent", "sigma_first", "sigma_node", "worst_release_std", "gram_cap",
    "rows_per_release",
    # a partition's size (a public parameter)
    "n_shards",
    # the dataset's privacy ledger (issue 36): every release of every model on its records, composed
    "lifetime_epsilon", "lifetime_epsilon_committed", "lifetime_delta", "lifetime_budget",
})

#: The subset a requester sees on its own certificates: nothing that depends on other records of its batch.
REQUESTER_CERTIFICATE_FIELDS: frozenset[str] = frozenset({
    "operation", "guarantee", "theorem", "noise", "bound", "bound_mode", "calibration", "solver", "assumptions",
    "epsilon", "delta", "budget", "q", "p", "r", "epsilon_dp", "epsilon_dd", "epsilon_dd_adaptive", "retrained",
    "epsilon_certified", "rdp_slope", "sigma", "lr", "grad_clip", "model_radius", "weight_decay", "clipping",
    "observer", "horizon", "cadence", "cadence_seconds", "schedule", "schedule_reveals",
    # whether the removal is in the published model yet (issue 36: the data subject's text follows it); under the
    # clock schedule they are the same whether or not the record was held
    "published", "horizon_spent", "withdrawn", "noise_source",
    "noise_mechanism", "mu", "mu_spent", "sigma_first", "sigma_node", "worst_release_std", "gram_cap",
    "rows_per_release",
    "lifetime_epsilon", "lifetime_epsilon_committed", "lifetime_delta", "lifetime_budget",
})

#: Who a certificate's guarantee covers (issue 26): the certificates of the mechanisms that bound what ONE version
#: reveals (a diff of consecutive versions can identify the removed records) say "one published version"; models
#: with private releases (:attr:`lethe.families.Capability.PRIVATE_RELEASES`) say "every published release".
OBSERVER_ONE_VERSION = "one published version"
OBSERVER_RELEASES = "every published release"

#: Ledger payload keys that are never accepted (they would carry positions, raw values or keys).
FORBIDDEN_PAYLOAD_KEYS: frozenset[str] = frozenset({
    "indices", "removed_indices", "index", "rows", "positions", "key", "keys", "features", "feature", "label",
    "labels", "x", "X", "y", "record", "records_removed", "record_ids", "record_id", "replacements",
})


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, bool | int | str) or (isinstance(v, float))


def _clean_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def public_certificate(cert: Any, *, requester: bool = False) -> dict[str, Any]:
    """The publishable part of a mechanism's certificate (see the module docstring).

    Keeps the allow-listed fields whose value is a scalar (``assumptions``: a list of strings); non-finite floats
    become ``None``. ``requester=True`` keeps only :data:`REQUESTER_CERTIFICATE_FIELDS`.
    """
    if not isinstance(cert, dict):
        return {}
    allowed = REQUESTER_CERTIFICATE_FIELDS if requester else CERTIFICATE_FIELDS
    out: dict[str, Any] = {}
    if "guarantee" in cert and "observer" not in cert:  # a mechanism that does not say: one version (the default)
        out["observer"] = OBSERVER_ONE_VERSION
    for k, v in cert.items():
        if k not in allowed:
            continue
        if k == "assumptions":
            if isinstance(v, list | tuple) and all(isinstance(a, str) for a in v):
                out[k] = list(v)
            continue
        if _scalar(v):
            out[k] = _clean_value(v)
    return out


_EXC_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(: |$)")

#: What an operator or requester reads when the mechanism (or an artifact) failed: exception messages of the
#: mechanisms can name row positions ("indices must be distinct. Found 17 ...") and artifact errors name paths and
#: checksums, so only the exception's type is kept.
WITHHELD = "processing failed; details withheld (they may name rows or files); the operator sees faults in " \
           "`lethe status`"


def public_error(error: str | None) -> str | None:
    """A stored request error as it may be shown: service-written messages as they are; an exception's message
    (``"TypeName: message"``, as the worker records mechanism failures) reduced to its type name."""
    if error is None:
        return None
    m = _EXC_PREFIX.match(error)
    if m and (m.group(1).endswith(("Error", "Exception")) or "." in m.group(1)):
        return f"{m.group(1).rsplit('.', 1)[-1]}: {WITHHELD}"
    return error


def requester_error(error: str | None) -> str | None:
    """What a requester reads: never a path, checksum or row; a generic text for anything but the service's own
    refusals."""
    if error is None:
        return None
    pub = public_error(error)
    if pub is not None and pub.endswith(WITHHELD):
        return "processing failed; the operator has been notified"
    return pub


def log_failure(logger: logging.Logger, what: str, exc: BaseException, *, level: int = logging.ERROR) -> None:
    """Log that ``what`` failed with ``exc``, naming the exception's type and its traceback's frames but never its
    message (nor its chained exceptions' messages).

    ``logger.exception`` would hand every handler — an application's own logging set-up included — the message,
    which a mechanism may have written with row positions ("indices must be distinct. Found 17 ...") and a database
    error with its statement's values; the curator's own log file scrubs it (``_ScrubbingFormatter``), other
    handlers would not. This formats the record itself, so every handler receives the scrubbed text.
    """
    frames = "".join(traceback.format_tb(exc.__traceback__)) if exc.__traceback__ is not None else ""
    logger.log(level, "%s (%s; message withheld: it may name records)\nTraceback (most recent call last):\n%s",
               what, type(exc).__name__, frames.rstrip("\n"))


#: Stored request statuses shown as another: a request that follows another requester's pending request of the same
#: key (``waiting``, :mod:`lethe.curator.intake`) is shown as ``pending``, like any request that holds a record.
SHOWN_STATUS: dict[str, str] = {"waiting": "pending"}
#: What a done request's ``outcome`` is: "removed" (it has a certificate or receipt) or "no record held" (its key
#: was never held or was already deleted — one answer for both, see :func:`lethe.curator.intake.decide`).
OUTCOME_REMOVED, OUTCOME_NO_RECORD = "removed", "no record held"


def shown_status(status: str) -> str:
    """The status a request is shown with (see :data:`SHOWN_STATUS`)."""
    return SHOWN_STATUS.get(status, status)


def request_outcome(status: str, n_certificates: int) -> str | None:
    """A request's outcome: None until it is done (or when it failed); then whether a record was removed."""
    if status != "done":
        return None
    return OUTCOME_REMOVED if n_certificates else OUTCOME_NO_RECORD


def check_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Refuse ledger payloads with keys that would carry positions, raw values or keys; scrub ``error`` texts.

    Raises
    ------
    ValueError
        A forbidden key at any depth (names the key).
    """

    def walk(obj: Any, path: str) -> Any:
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                if k in FORBIDDEN_PAYLOAD_KEYS:
                    raise ValueError(f"ledger payload key {path + str(k)!r} may identify a record and is refused. "
                                     f"Found it in an event payload.")
                out[k] = public_error(v) if k == "error" and isinstance(v, str) else walk(v, f"{path}{k}.")
            return out
        if isinstance(obj, list | tuple):
            return [walk(v, path) for v in obj]
        return obj

    return walk(payload, "")


__all__ = ["CERTIFICATE_FIELDS", "FORBIDDEN_PAYLOAD_KEYS", "REQUESTER_CERTIFICATE_FIELDS", "WITHHELD",
           "check_payload", "log_failure", "public_certificate", "public_error", "requester_error"]

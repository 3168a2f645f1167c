"""The audit of a model published only through private releases (the family's :attr:`lethe.families.Family.audit`):
a version diff on the published sequence against the identification rate the certificate's (ε, δ) allows, and the
check that the published version's secret centre forgot the deleted records.

What the certificate promises. Every release is the secret centre (the regularised minimiser on the records, kept by
certified Newton removals) plus fresh Gaussian noise, and the whole sequence of releases is (ε, δ)-DP for every
record against an observer of every release (docs/release_privacy.md). So an observer who compares the release
before a deletion with the release after it, knowing every other record, names the deleted record with probability
at most :func:`lethe.audit.version_diff.allowed_identification_rate` (e^ε α + δ, α = guesses / candidates).

1. **Version diff** (:mod:`lethe.audit.version_diff`). The sequence is what an observer kept: the files of
   ``--releases`` (``GET /v1/models/NAME`` with an operator's token, one per published version; the published
   version is added from the store). For each pair of consecutive releases that differ, the records of the
   operator's ``--deleted`` file removed between them are the targets (a pair with records removed by others than
   the file's, or none, is listed as not audited); the candidates are every record present before the pair (the
   current records and the file's records removed after it). The attack ranks candidates by the single-deletion
   score (Newton-step geometry, the attacker's Hessian from the public table) and names the k top (k deleted in the
   pair; batches by orthogonal matching pursuit). Hits over all pairs, with their Clopper–Pearson interval, against
   the allowed rate: ``failed`` when the interval's lower end is above it, ``passed`` when its upper end is at or
   below it, else ``inconclusive``. The power is stated as the hit rate that would fail it (``fails above``).
   Releases with the noise the certificate promises keep the attack near chance (1/N); releases without it (a faked
   noise, or a release that reuses the last draw) name the deleted record at once.
2. **Centre check** (operator-side, exact up to rounding). The published version's centre, re-measured on the
   current records, must have a residual within the bound it records (``‖∇L(w̃)‖ − a ≤ β``, the check every removal
   makes before publishing): a centre that did not forget a deleted record (a faked removal, a release computed with
   the record) fails it by far. Deterministic: it states no interval.

The verdict is the worse of the two (failed > inconclusive > passed). Read the version diff with the caveat of
:mod:`lethe.audit.model`: the rate is allowed for a deleted record drawn like the candidates; requesters unlike the
other records (outliers) may be easier to name without any fault of the releases.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lethe.curator.adapters import get_adapter
from lethe.curator.artifacts import ArtifactError
from lethe.curator.audits import AuditRequest, model_info, read_records, removal_versions, require_deleted
from lethe.curator.errors import InvalidInputError
from lethe.curator.serving import Serving
from lethe.release.adapter import ReleasedLogisticAdapter

if TYPE_CHECKING:
    from lethe.curator.service import Curator

__all__ = ["ReleaseAudit", "audit_released", "read_releases"]


@dataclass(frozen=True)
class ReleaseAudit:
    """The audit of a released model; ``str()`` prints it.

    Version diff: ``hits`` of ``trials`` deleted records named by the attack over ``pairs`` pairs of releases, with
    the (1 − α) Clopper–Pearson interval ``low``/``high``, against ``allowed_low``..``allowed_high`` (the allowed rate
    of the pairs; one value when they share their candidate count); ``fails_above`` the smallest hit rate that would
    fail (None: no number of hits could). Centre check: ``residual``, ``allowance`` and ``residual_bound`` of the
    published version (None when it could not be loaded)."""

    model: str
    dataset: str
    epsilon: float
    delta: float
    version: str | None
    pairs: int = 0
    hits: int = 0
    trials: int = 0
    low: float = 0.0
    high: float = 1.0
    allowed_low: float = 0.0
    allowed_high: float = 0.0
    fails_above: float | None = None
    residual: float | None = None
    allowance: float | None = None
    residual_bound: float | None = None
    alpha: float = 0.05
    not_audited: tuple[tuple[str, str], ...] = field(default=())

    @property
    def centre_verdict(self) -> str:
        """``failed`` (the centre's residual certainly exceeds its bound), ``passed``, or ``inconclusive`` (no
        version loaded)."""
        if self.residual is None or self.allowance is None or self.residual_bound is None:
            return "inconclusive"
        return "failed" if self.residual - self.allowance > self.residual_bound else "passed"

    @property
    def diff_verdict(self) -> str:
        """The version diff's verdict: ``failed`` (low > the allowed rate), ``passed`` (high <= it), else
        ``inconclusive`` (no trial, or the interval crosses it)."""
        if self.trials == 0:
            return "inconclusive"
        if self.low > self.allowed_high:
            return "failed"
        return "passed" if self.high <= self.allowed_low else "inconclusive"

    @property
    def verdict(self) -> str:
        """The worse of :attr:`centre_verdict` and :attr:`diff_verdict`."""
        found = {self.centre_verdict, self.diff_verdict}
        return next(v for v in ("failed", "inconclusive", "passed") if v in found)

    @property
    def passed(self) -> bool:
        """True only when both parts could have failed and did not."""
        return self.verdict == "passed"

    @property
    def rate(self) -> float:
        """The attack's identification rate (hits / trials; 0 without trials)."""
        return self.hits / self.trials if self.trials else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The audit as JSON-ready numbers: aggregate, no key and no value."""
        return {"model": self.model, "dataset": self.dataset, "attack": "version diff on the published sequence",
                "epsilon": self.epsilon, "delta": self.delta, "version": self.version, "pairs": self.pairs,
                "hits": self.hits, "trials": self.trials, "rate": self.rate, "low": self.low, "high": self.high,
                "allowed_low": self.allowed_low, "allowed_high": self.allowed_high, "fails_above": self.fails_above,
                "residual": self.residual, "allowance": self.allowance, "residual_bound": self.residual_bound,
                "alpha": self.alpha, "diff_verdict": self.diff_verdict, "centre_verdict": self.centre_verdict,
                "not_audited": [list(x) for x in self.not_audited], "passed": self.passed, "verdict": self.verdict}

    def __str__(self) -> str:
        level = f"{100 * (1 - self.alpha):g} %"
        allowed = (f"{self.allowed_high:.4f}" if math.isclose(self.allowed_low, self.allowed_high) else
                   f"{self.allowed_low:.4f}..{self.allowed_high:.4f}")
        lines = [f"Audit of model {self.model!r} (dataset {self.dataset!r}): private releases, (ε, δ) = "
                 f"({self.epsilon:g}, {self.delta:g}) over the whole sequence"]
        for name, why in self.not_audited:
            lines.append(f"{name:<12} not audited: {why}")
        if self.trials:
            fails = "never" if self.fails_above is None else f"{self.fails_above:.3f}"
            lines.append(f"Version diff: {self.pairs} pairs of releases, the attack named {self.hits} of {self.trials} "
                         f"deleted records: rate {self.rate:.3f}, {level} CI [{self.low:.3f}, {self.high:.3f}]; the "
                         f"certificate allows {allowed}; fails above {fails}  -> {self.diff_verdict}")
        else:
            lines.append("Version diff: no pair of releases with a deletion from the file given (give the sequence "
                         "with --releases)  -> inconclusive")
        if self.residual is not None:
            lines.append(f"Centre check ({self.version}): residual on the current records {self.residual:.3g} "
                         f"(± {self.allowance:.2g}) vs its recorded bound {self.residual_bound:.3g}  -> "
                         f"{self.centre_verdict}")
        lines.append("Power: the version diff fails only above 'fails above' (never: too few deleted records to "
                     "fail); the centre check is exact up to rounding.")
        lines.append({"failed": "FAILED: " + ("the published centre has not forgotten the deleted records."
                                              if self.centre_verdict == "failed" else
                                              "the attack names deleted records more often than the certificate "
                                              "allows."),
                      "inconclusive": "INCONCLUSIVE: the version diff's interval crosses the allowed rate or is "
                                      "missing: audit more deletions of the sequence (--deleted, --releases).",
                      "passed": "PASSED: the centre forgot the records and the attack stays within the allowed rate."
                      }[self.verdict])
        return "\n".join(lines)


def read_releases(paths: Any, model: str, d: int) -> dict[int, np.ndarray]:
    """Version number → public weights (d,) of the release files (``GET /v1/models/NAME`` with an operator's token).
    Errors name the file and the rule; two files of one version must hold the same weights."""
    out: dict[int, np.ndarray] = {}
    for path in paths:
        name = Path(path).name
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
            version = doc["version"]
            w = np.asarray(doc["arrays"]["w"], dtype=np.float64).ravel()
        except FileNotFoundError:
            raise InvalidInputError(f"releases (--releases) must be existing files. Found {name!r} missing.") from None
        except (ValueError, KeyError, TypeError):
            raise InvalidInputError(f"releases (--releases): {name} must be the JSON of GET /v1/models/NAME (with "
                                    "'version' and arrays 'w'). Found another document.") from None
        if doc.get("model") != model:
            raise InvalidInputError(f"releases (--releases): {name} must be a release of model {model!r}. Found "
                                    f"model {doc.get('model')!r}.")
        if isinstance(version, bool) or not isinstance(version, int) or w.shape != (d,) or not np.isfinite(w).all():
            raise InvalidInputError(f"releases (--releases): {name} must hold an integer version and {d} finite "
                                    f"weights. Found version {version!r} and {w.size} weights.")
        if version in out and not np.array_equal(out[version], w):
            raise InvalidInputError(f"releases (--releases): two files of version {version} differ ({name}).")
        out[version] = w
    return out


def _fails_above(trials: int, allowed: float, alpha: float) -> float | None:
    """The smallest hit rate h/trials whose interval's lower end is above ``allowed`` (None: none is)."""
    from lethe.audit.stats import clopper_pearson

    for h in range(trials + 1):
        if clopper_pearson(h, trials, alpha)[0] > allowed:
            return h / trials
    return None


def _guesses(geom: Any, w_old: np.ndarray, w_new: np.ndarray, k: int) -> np.ndarray:
    """The k candidates the attack names (single-deletion top score; a batch by orthogonal matching pursuit when k
    is at most the dimension, else the k top scores)."""
    from lethe.audit.version_diff import batch_deletion_guess, single_deletion_scores

    if 1 < k <= min(geom.X.shape):
        return np.asarray(batch_deletion_guess(geom, w_old, w_new, k))
    scores = single_deletion_scores(geom, w_old, w_new, k)
    return np.argsort(-scores, kind="stable")[:k]


def audit_released(c: Curator, req: AuditRequest) -> ReleaseAudit:
    """The version diff on the published sequence and the centre check of a released model (module docstring).
    Refused (:class:`InvalidInputError`, changing nothing) without the deleted records' file, with a key the model
    still holds or never removed, or with release files that are not this model's."""
    from lethe.audit.stats import clopper_pearson
    from lethe.audit.version_diff import allowed_identification_rate, diff_geometry

    deleted = require_deleted(req.deleted)
    info = model_info(c, req.model)
    ds = info.dataset
    adapter = get_adapter(info.mechanism, info.params)
    if not isinstance(adapter, ReleasedLogisticAdapter):
        raise InvalidInputError(f"model (--model) must publish private releases for this audit. Found mechanism "
                                f"{info.mechanism!r}.")
    published = [v for v in info.versions if v[2] == "published"]
    if not published:
        raise InvalidInputError(f"model (--model) must have a published version. Found none for {req.model!r}.")
    _vid, number, _status, relpath, sha, _n = published[-1]
    not_audited: list[tuple[str, str]] = []
    try:
        art = c.artifacts.load(relpath, sha, Serving.binding(req.model, info.mechanism, info.params, ds.n_features))
    except ArtifactError:
        art = None
        not_audited.append((f"v{number}", "its artifact is missing or fails verification (see lethe status)"))
    eps = float(info.params["epsilon"]) if req.epsilon is None else float(req.epsilon)
    dlt = float(info.params["delta"]) if req.delta is None else float(req.delta)
    keys, X_del, y_del = read_records(ds, deleted, file_format=req.file_format)
    removed_at = removal_versions(c, ds, info.model_id, keys, info.number_of)
    with c.store.read() as s:
        _ids, X_cur, y_cur = c.datasets.current_data(s, ds.id, ds.n_features)
    X_cur, X_del = np.asarray(X_cur, dtype=np.float64), np.asarray(X_del, dtype=np.float64)
    classes = None if art is None else art.meta.get("classes")
    residual = allowance = bound = None
    if art is not None:
        residual, allowance, bound = adapter.centre_residual(art, X_cur, np.asarray(y_cur))
    releases = read_releases(req.releases, req.model, X_cur.shape[1])
    if art is not None:
        releases.setdefault(number, np.asarray(art.arrays["w"], dtype=np.float64).ravel())
    if classes is None or len(classes) != 2:
        raise InvalidInputError(f"model (--model) must be a binary model with its classes recorded. Found classes "
                                f"{classes!r}.")
    n_records = {num: n for _v, num, _s, _a, _h, n in info.versions}
    hits = trials = pairs = 0
    allowed: list[float] = []
    order = sorted(releases)
    for a, b in zip(order, order[1:], strict=False):
        label = f"v{a}-v{b}"
        if np.array_equal(releases[a], releases[b]):
            continue  # no release between them: the same public weights
        targets = np.flatnonzero((removed_at > a) & (removed_at <= b))
        removed = n_records.get(a, 0) - n_records.get(b, 0)
        if targets.size == 0:
            not_audited.append((label, "no record of the file given was removed between them"))
            continue
        if targets.size != removed:
            not_audited.append((label, f"{removed - targets.size} of the {removed} records removed between them are "
                                       "not in the file given (their candidates would be incomplete)"))
            continue
        later = np.flatnonzero(removed_at > a)
        Xc = np.vstack([X_cur, X_del[later]])
        yc = np.concatenate([np.asarray(y_cur), np.asarray(y_del)[later]])
        cls = np.asarray(classes, dtype=yc.dtype if yc.dtype.kind not in "iufb" else np.float64)
        if not np.isin(yc, cls).all():
            raise InvalidInputError("deleted (--deleted) must hold labels among the model's 2 classes. Found another "
                                    "label.")
        Yc = np.where(yc == cls[1], 1.0, -1.0)
        target_rows = X_cur.shape[0] + np.searchsorted(later, targets)
        geom = diff_geometry(Xc, Yc, releases[a], float(info.params["lam"]), n=max(int(n_records.get(a, 0)), 1))
        named = set(_guesses(geom, releases[a], releases[b], int(targets.size)).tolist())
        hits += sum(int(t) in named for t in target_rows)
        trials += int(targets.size)
        pairs += 1
        allowed.append(allowed_identification_rate(eps, dlt, Xc.shape[0], guesses=int(targets.size),
                                                   deleted=int(targets.size)))
    low, high = clopper_pearson(hits, trials, req.alpha) if trials else (0.0, 1.0)
    return ReleaseAudit(model=req.model, dataset=ds.name, epsilon=eps, delta=dlt,
                        version=None if art is None else f"v{number}", pairs=pairs, hits=hits, trials=trials,
                        low=low, high=high, allowed_low=min(allowed, default=0.0),
                        allowed_high=max(allowed, default=0.0),
                        fails_above=_fails_above(trials, max(allowed), req.alpha) if trials else None,
                        residual=residual, allowance=allowance, residual_bound=bound, alpha=float(req.alpha),
                        not_audited=tuple(not_audited))

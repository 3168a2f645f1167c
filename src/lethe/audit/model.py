"""Membership-inference audit of a user's own model: can the published versions tell the deleted records from
records they never saw?

For every published version of a model (a weight vector, a matrix of one-vs-all weights, a callable returning
margins, or a fitted estimator with ``decision_function``), the loss-threshold attack (Yeom et al. 2018) scores
each deleted record and each held-out record by the model's margin towards its true label,

    φ(x, y) = s_y · z(x)                       (binary: s_y = +1 for the positive class, −1 for the negative),
    φ(x, y) = z_y(x) − max_{k ≠ y} z_k(x)     (K one-vs-all margins),

which ranks records as the logistic loss log(1 + e^{−φ}) does (it is decreasing in φ): a record with a low loss is
called "still in the model". The statistics are :mod:`lethe.audit.stats`'s: the advantage TPR − FPR at a
cross-fitted threshold with a (1 − α) Clopper–Pearson interval, the ROC AUC, and the bound an (ε, δ) guarantee
implies for the game "deleted, or never in the training set?", δ + (1 − δ) tanh(ε/2) (Kairouz et al. 2015,
Thm 2.1). Guo et al.'s (ε, δ)-certified removal makes the deleted-then-unlearned model (ε, δ)-indistinguishable
from one retrained without the record, in which the record is a never-seen record like the held-out ones: any test
between the two then has advantage at most that bound.

A version EXCEEDS its bound when the interval's lower end is above it (the attack's advantage is, with confidence
1 − α, larger than the guarantee allows): the audit fails. It is ``within`` otherwise, and ``confidently within``
when the whole interval is at or below the bound. An audit lower-bounds leakage: an advantage near zero is
consistent with the guarantee but does not prove it.

**Power and verdicts (issue 38).** Each version states the audit's power at its sample sizes: ``detectable``, the
smallest advantage it could tell from zero (the interval's half-width below the measured advantage), and
``fails_above`` = bound + detectable, the smallest measured advantage that would fail it. Its ``verdict`` is

* ``failed`` — the interval's lower end is above the bound;
* ``passed`` — the whole interval is at or below the bound AND narrower than the bound (the audit could have
  failed a version leaking twice the bound);
* ``inconclusive`` — otherwise: the interval crosses the bound, or is wider than it (too few records: an audit that
  cannot fail says so rather than "PASSED");
* ``no guarantee claimed`` — no bound to check.

Read the result with two caveats. (1) Held-out records must be drawn like the deleted ones, and never trained on:
if the people who asked for deletion differ from the held-out people (another age group, another country), the
attack measures that difference, not membership, and may show an advantage even for a model retrained from scratch.
(2) The audit needs the deleted records themselves, so it is run by whoever still holds them (before they are
discarded, or on a sample kept for the purpose with the people's consent); its output is aggregate (counts,
rates, intervals) and names no record.

The functions take plain arrays (and duck-typed models) so that a service can call them on its own versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lethe._rng import RandomState
from lethe._validation import check_open_unit
from lethe.audit.stats import advantage, dp_advantage_bound
from lethe.io import JsonRecord


@dataclass(frozen=True)
class VersionAudit(JsonRecord):
    """The audit of one published version (deleted records vs held-out records).

    Attributes
    ----------
    version : int
        Position of the version in the sequence audited (0 = the first).
    name : str
        The version's label (``names``), default ``"v<version>"``.
    advantage, low, high : float
        Measured advantage TPR − FPR and its (1 − α) Clopper–Pearson interval.
    tpr, fpr, auc : float
        True and false positive rates at the cross-fitted threshold; ROC AUC of the scores.
    n_deleted, n_heldout : int
        Records of each kind scored.
    epsilon, delta : float or None
        The guarantee the version claims (None: no guarantee, no bound).
    bound : float or None
        δ + (1 − δ) tanh(ε/2), the largest advantage the guarantee allows.
    within_bound : bool or None
        ``low <= bound``: no evidence at level α that the advantage exceeds the bound (None without a bound).
    confidently_within : bool or None
        ``high <= bound``: the whole interval is within the bound.
    """

    version: int
    name: str
    advantage: float
    low: float
    high: float
    tpr: float
    fpr: float
    auc: float
    n_deleted: int
    n_heldout: int
    epsilon: float | None
    delta: float | None
    bound: float | None
    within_bound: bool | None
    confidently_within: bool | None
    detectable: float = float("nan")
    fails_above: float | None = None
    verdict: str = ""


#: the verdicts of a version, strongest first (a model's verdict is its versions' strongest)
VERDICTS = ("failed", "inconclusive", "passed", "no guarantee claimed")


def verdict_of(low: float, high: float, bound: float | None) -> str:
    """``failed`` (low > bound), ``passed`` (high <= bound and high − low <= bound), else ``inconclusive``;
    ``no guarantee claimed`` without a bound."""
    if bound is None:
        return "no guarantee claimed"
    if low > bound:
        return "failed"
    if high <= bound and high - low <= bound:
        return "passed"
    return "inconclusive"


@dataclass(frozen=True)
class ModelAudit(JsonRecord):
    """The audit of every published version; ``str()`` prints the table.

    Attributes
    ----------
    versions : tuple of VersionAudit
    alpha : float
        1 − the intervals' confidence level.
    attack : str
        The attack used (``"loss-threshold"``).
    """

    versions: tuple[VersionAudit, ...]
    alpha: float
    attack: str = "loss-threshold"

    @property
    def verdict(self) -> str:
        """``failed`` if a version failed, else ``inconclusive`` if one is, else ``passed`` if one is, else ``no
        guarantee claimed``."""
        found = {v.verdict or verdict_of(v.low, v.high, v.bound) for v in self.versions}
        return next((x for x in VERDICTS if x in found), "no guarantee claimed")

    @property
    def failed(self) -> bool:
        """True when a version's advantage exceeds its bound (the interval's lower end above it)."""
        return self.verdict == "failed"

    @property
    def passed(self) -> bool:
        """True only when the audit could have failed and did not: no version failed or was inconclusive (each
        bounded version's interval within its bound and narrower than it)."""
        return self.verdict in ("passed", "no guarantee claimed")

    def __str__(self) -> str:
        level = f"{100 * (1 - self.alpha):g} %"
        lines = [f"Membership-inference audit ({self.attack} attack): deleted records vs held-out records",
                 f"{'version':<12} {'advantage':>9} {level + ' CI':>18} {'AUC':>6} {'deleted':>8} {'held-out':>8} "
                 f"{'bound':>7} {'detects':>8} {'fails >':>8}  verdict"]
        for v in self.versions:
            verdict = v.verdict or verdict_of(v.low, v.high, v.bound)
            if v.bound is None:
                bound, fails = "—", "—"
            else:
                bound = f"{v.bound:.3f}"
                fails = f"{v.fails_above:.3f}" if v.fails_above is not None and v.fails_above <= 1 else "never"
                verdict = {"failed": "failed: EXCEEDS the bound",
                           "passed": "passed: within the bound",
                           "inconclusive": ("inconclusive: the interval is wider than the bound"
                                            if v.high - v.low > v.bound else
                                            "inconclusive: the interval crosses the bound")}[verdict]
            ci = f"[{v.low:+.3f}, {v.high:+.3f}]"
            lines.append(f"{v.name:<12} {v.advantage:>+9.3f} {ci:>18} {v.auc:>6.3f} {v.n_deleted:>8} "
                         f"{v.n_heldout:>8} {bound:>7} {v.detectable:>8.3f} {fails:>8}  {verdict}")
        lines.append("Power: 'detects' is the smallest advantage the attack could tell from zero with these records;")
        lines.append("a version fails only if its measured advantage is above 'fails >' (never: it cannot fail).")
        lines.append({"failed": "FAILED: a version's advantage exceeds the bound its guarantee implies.",
                      "inconclusive": "INCONCLUSIVE: an interval is wider than the bound or crosses it: these "
                                      "records are too few to tell a version within its bound from one beyond it; "
                                      "audit more deleted and held-out records.",
                      "passed": "PASSED: no version's advantage exceeds its bound, and each interval is narrower "
                                "than the bound (the audit could have failed).",
                      "no guarantee claimed": "NO GUARANTEE CLAIMED: nothing to check; give --epsilon and --delta."
                      }[self.verdict])
        return "\n".join(lines)


def margins(model: Any, X: Any) -> np.ndarray:
    """The margins z(x) of a version on rows X: shape (n,) (binary) or (n, K) (one-vs-all).

    ``model`` is an object with ``decision_function``, a callable X ↦ margins, a weight vector w of shape (d,)
    (z = Xw) or a matrix W of shape (K, d) (z = X Wᵀ). A model with an intercept is passed as the estimator or a
    callable.
    """
    if hasattr(model, "decision_function"):
        z = model.decision_function(X)
    elif callable(model):
        z = model(X)
    else:
        W = np.asarray(model, dtype=np.float64)
        Xa = np.asarray(X, dtype=np.float64)
        if W.ndim not in (1, 2) or W.shape[-1] != Xa.shape[1]:
            raise ValueError(f"A version given as weights must have shape (d,) or (K, d) with d = {Xa.shape[1]} "
                             f"features. Found {W.shape}.")
        z = Xa @ W if W.ndim == 1 else Xa @ W.T
    z = np.asarray(z, dtype=np.float64)
    n = len(X) if not hasattr(X, "shape") else X.shape[0]
    if z.ndim not in (1, 2) or z.shape[0] != n:
        raise ValueError(f"A version's margins must have shape (n,) or (n, K) with n = {n} rows. Found {z.shape}.")
    return z


def confidence_scores(z: np.ndarray, y: Any, classes: Any) -> np.ndarray:
    """φ, the margin towards the true label (higher = lower loss = "member"), for margins ``z`` and labels ``y``
    among ``classes`` (binary: (negative, positive); K one-vs-all margins: the K classes in column order)."""
    cls = np.asarray(classes)
    y = np.asarray(y)
    idx = {c: i for i, c in enumerate(cls.tolist())}
    missing = [v for v in y.tolist() if v not in idx]
    if missing:
        raise ValueError(f"Labels must be among the classes {cls.tolist()}. Found {missing[0]!r}.")
    pos = np.array([idx[v] for v in y.tolist()], dtype=np.int64)
    if pos.size != z.shape[0]:
        raise ValueError(f"y must have one label per row ({z.shape[0]}). Found {pos.size}.")
    if z.ndim == 1:
        if cls.size != 2:
            raise ValueError(f"Binary margins need 2 classes (negative, positive). Found {cls.tolist()}.")
        return np.where(pos == 1, 1.0, -1.0) * z
    if z.shape[1] != cls.size:
        raise ValueError(f"Margins of shape (n, {z.shape[1]}) need {z.shape[1]} classes. Found {cls.tolist()}.")
    rows = np.arange(z.shape[0])
    own = z[rows, pos]
    others = z.copy()
    others[rows, pos] = -np.inf
    return own - others.max(axis=1)


def _classes(model: Any, classes: Any, y_del: np.ndarray, y_held: np.ndarray) -> np.ndarray:
    if classes is not None:
        return np.asarray(classes)
    if getattr(model, "classes_", None) is not None:
        return np.asarray(model.classes_)
    return np.unique(np.concatenate([y_del, y_held]))


def _guarantee(model: Any, epsilon: float | None, delta: float | None) -> tuple[float | None, float | None]:
    """(ε, δ) given, or claimed by the model's parameters (an estimator with noise), or (None, None)."""
    if epsilon is not None or delta is not None:
        if epsilon is None or delta is None:
            raise ValueError(f"epsilon and delta must be given together. Found epsilon={epsilon}, delta={delta}.")
        if not epsilon >= 0:
            raise ValueError(f"epsilon must be >= 0. Found {epsilon}.")
        if not 0 <= delta < 1:
            raise ValueError(f"delta must be in [0, 1). Found {delta}.")
        return float(epsilon), float(delta)
    get = getattr(model, "get_params", None)
    if get is None:
        return None, None
    p = get()
    if "epsilon" in p and "delta" in p and p.get("noise", "gaussian") != "none":
        return float(p["epsilon"]), float(p["delta"])
    return None, None


def audit_version(model: Any, X_deleted: Any, y_deleted: Any, X_heldout: Any, y_heldout: Any, *,
                  epsilon: float | None = None, delta: float | None = None, classes: Any = None,
                  alpha: float = 0.05, version: int = 0, name: str | None = None,
                  random_state: RandomState = 0) -> VersionAudit:
    """Audit one version: the loss-threshold attack's advantage at telling deleted from held-out records.

    Parameters
    ----------
    model : estimator with ``decision_function``, callable, or weights (d,) / (K, d)
        The published version (see :func:`margins`).
    X_deleted, y_deleted : array-like
        Records deleted from the model (at least 2), with their labels.
    X_heldout, y_heldout : array-like
        Records of the same kind that the model never trained on (at least 2).
    epsilon, delta : float, optional
        The guarantee to check against; default: the model's own ``epsilon``/``delta`` parameters if it is an
        estimator with noise, else no bound.
    classes : sequence, optional
        The labels in the order of the margins (binary: negative, positive); default: the model's ``classes_``,
        else the sorted labels seen.
    alpha : float, default=0.05
        The intervals have confidence 1 − α.
    version, name :
        Position and label of the version in the report.
    random_state : int or Generator, default=0
        Splits the records into the two folds of the cross-fitted threshold.

    Returns
    -------
    VersionAudit
    """
    alpha = check_open_unit("alpha", alpha)
    y_del, y_held = np.asarray(y_deleted), np.asarray(y_heldout)
    cls = _classes(model, classes, y_del, y_held)
    pos = confidence_scores(margins(model, X_deleted), y_del, cls)
    neg = confidence_scores(margins(model, X_heldout), y_held, cls)
    adv = advantage(pos, neg, alpha=alpha, random_state=random_state)
    eps, dlt = _guarantee(model, epsilon, delta)
    bound = None if eps is None or dlt is None else dp_advantage_bound(eps, dlt)
    detectable = float(adv.advantage - adv.low)  # the interval's lower half-width: the power at these sizes
    return VersionAudit(version=int(version), name=name if name is not None else f"v{version}",
                        advantage=adv.advantage, low=adv.low, high=adv.high, tpr=adv.tpr, fpr=adv.fpr, auc=adv.auc,
                        n_deleted=adv.n_pos, n_heldout=adv.n_neg, epsilon=eps, delta=dlt, bound=bound,
                        within_bound=None if bound is None else bool(adv.low <= bound),
                        confidently_within=None if bound is None else bool(adv.high <= bound),
                        detectable=detectable, fails_above=None if bound is None else float(bound + detectable),
                        verdict=verdict_of(adv.low, adv.high, bound))


def audit_model(versions: Sequence[Any], X_deleted: Any, y_deleted: Any, X_heldout: Any, y_heldout: Any, *,
                epsilon: float | Sequence[float | None] | None = None,
                delta: float | Sequence[float | None] | None = None, classes: Any = None, alpha: float = 0.05,
                names: Sequence[str] | None = None, random_state: RandomState = 0) -> ModelAudit:
    """Audit EVERY published version of a model on the same deleted and held-out records.

    Parameters
    ----------
    versions : sequence
        The published versions, oldest first (each as in :func:`audit_version`). Pass the versions published
        after the records were deleted: a version that still trained on them is not covered by a removal
        guarantee (its advantage shows what the deletion had to remove, and is reported against the bound all
        the same).
    X_deleted, y_deleted, X_heldout, y_heldout, classes, alpha, random_state :
        As in :func:`audit_version`.
    epsilon, delta : float or sequence (one per version), optional
        The guarantee of each version; default: each model's own parameters (estimators), else no bound.
    names : sequence of str, optional
        Labels of the versions in the report.

    Returns
    -------
    ModelAudit
        ``print(audit)`` shows one line per version; ``audit.passed`` is False when a version's advantage
        exceeds its bound (the interval's lower end above it).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> w = rng.normal(size=5)
    >>> X_del, X_held = rng.normal(size=(200, 5)), rng.normal(size=(200, 5))
    >>> y_del, y_held = np.sign(X_del @ w), np.sign(X_held @ w)
    >>> audit = audit_model([w, 0.5 * w], X_del, y_del, X_held, y_held, epsilon=1.0, delta=1e-5)
    >>> audit.passed, [v.low < 0 < v.high for v in audit.versions]
    (True, [True, True])
    """
    versions = list(versions)
    if not versions:
        raise ValueError("versions must hold at least one version. Found 0.")
    k = len(versions)

    def per_version(name: str, v: Any) -> list[Any]:
        if v is None or isinstance(v, int | float | np.floating | np.integer):
            return [v] * k
        out = list(v)
        if len(out) != k:
            raise ValueError(f"{name} must be one value or one per version ({k}). Found {len(out)}.")
        return out

    eps, dlt = per_version("epsilon", epsilon), per_version("delta", delta)
    if names is not None and len(names) != k:
        raise ValueError(f"names must have one label per version ({k}). Found {len(names)}.")
    out = tuple(audit_version(m, X_deleted, y_deleted, X_heldout, y_heldout, epsilon=eps[i], delta=dlt[i],
                              classes=classes, alpha=alpha, version=i, name=None if names is None else str(names[i]),
                              random_state=random_state) for i, m in enumerate(versions))
    return ModelAudit(versions=out, alpha=float(alpha))

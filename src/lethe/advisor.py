"""Which unlearning family fits the user's table (issue 37): :func:`lethe.planning.advise` (its body, :func:`advise`,
is here; the planners it uses are passed in, so this module does not import :mod:`lethe.planning`) and
``lethe plan --advise``.

A newcomer with a 1,000-row credit table who follows the README's defaults gets a certified model at 61–64 % held-out
accuracy where always answering "good" scores 70 % and scikit-learn 75 %; nothing told them that a refit of that
table costs 83 ms, so that exact retraining (ε = 0 for one published version, no accuracy lost) serves them better.
:func:`advise` measures, on a held-out share of the given rows (or on public rows), every family that fits:

* **exact retraining** (:class:`lethe.retrain.RetrainingClassifier`: drop the rows and refit, a logistic regression
  and a gradient-boosted model, the refit timed) — ε = 0 for one published version;
* **sharded** (:class:`lethe.sharded.ShardedClassifier`, SISA, 8 shards; only where a shard keeps ≥ 500 rows) —
  exact, a removal refits one shard;
* **certified removal** (:class:`lethe.certified.estimators.CertifiedLogisticRegression`, λ from :func:`lethe.planning.
  plan_lambda` and σ from :func:`lethe.planning.plan_sigma` for the expected deletions) — (ε, δ) for one version;
* **released** (:class:`lethe.release.ReleasedLogisticRegression`) — (ε, δ) over EVERY release, the only family
  here whose guarantee covers an observer of consecutive versions;
* the **majority class**, the floor every model is compared with.

It reports held-out accuracy, the predicted deletion latency (measured removals) and cost, and the guarantee with
whom it covers, recommends one family and prints the code (or ``lethe train`` command) to use. It never recommends a
model below the majority class without saying so and what to do instead.

The rows given are the user's: the accuracy measured on them and the family chosen depend on them (as
:func:`lethe.planning.plan_lambda` with ``data="private"`` says); pass ``X_public``/``y_public`` (public rows of the
same kind) to measure there instead. The encoder of a table with text columns (one-hot + scaling) is fitted on the
public rows when given, else on the training share: a certified or released model needs an encoder that learns
nothing from private rows (a schema, :class:`lethe.preprocessing.SchemaEncoder`, or one fitted on public rows).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import clone

from lethe._rng import check_random_state

__all__ = ["Advice", "FamilyResult", "advise"]

OBSERVERS = ("one version", "every release")
FAMILIES = ("retrain", "sharded", "certified", "released")
#: Rows per shard below which sharding is not tried (SISA's shards then lose accuracy; a refit is cheap anyway).
MIN_SHARD_ROWS = 500


@dataclass(frozen=True)
class FamilyResult:
    """One family measured by :func:`advise`.

    Attributes
    ----------
    family : str
    model : str
        What was trained (estimator and parameters).
    accuracy : float
        Held-out accuracy.
    deletion_seconds : float
        Predicted latency of one deletion: the median of measured removals (NaN for the majority class).
    cost : str
        What deletions cost (refits, retrainings, budget).
    epsilon : float or None
        ε of the guarantee (0: exact; None: none).
    observer : str
        Whom the guarantee covers.
    covers : bool
        Whether that includes the observer :func:`advise` was asked about.
    code : str
        Python code (or ``lethe train`` command) that builds this model.
    note : str
    estimator : unfitted estimator or None
        The model measured, ready for ``fit(X, y)`` on rows like the ones given (for the certified and released
        families an :class:`lethe.pipeline.UnlearningPipeline` whose encoder was fitted in :func:`advise`, frozen).
    """

    family: str
    model: str
    accuracy: float
    deletion_seconds: float
    cost: str
    epsilon: float | None
    observer: str
    covers: bool
    code: str
    note: str = ""
    estimator: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Advice:
    """What :func:`advise` measured and recommends; ``str()`` prints the table, the choice and the code."""

    results: tuple[FamilyResult, ...]
    recommended: FamilyResult
    reason: str
    majority: float
    warning: str
    n_train: int
    n_heldout: int
    scored_on: str
    expected_deletions: int
    observer: str
    notes: tuple[str, ...] = field(default=())

    def result(self, family: str) -> FamilyResult:
        """The result of ``family`` (KeyError if it was not measured)."""
        for r in self.results:
            if r.family == family:
                return r
        raise KeyError(family)

    def __str__(self) -> str:
        lines = [f"Advice for {self.n_train} training rows, accuracy on {self.n_heldout} held-out rows "
                 f"({self.scored_on}); {self.expected_deletions} deletions expected; observer: {self.observer}",
                 f"{'family':<20} {'accuracy':>8} {'deletion':>10} {'epsilon':>8}  covers  model / cost"]
        for r in self.results:
            lat = "-" if math.isnan(r.deletion_seconds) else _secs(r.deletion_seconds)
            eps = "-" if r.epsilon is None else f"{r.epsilon:g}"
            lines.append(f"{r.family:<20} {r.accuracy:>8.4f} {lat:>10} {eps:>8}  {'yes' if r.covers else 'no ':<6}  "
                         f"{r.model}; {r.cost}")
        lines += [f"  note: {n}" for n in self.notes]
        lines.append(f"recommended: {self.recommended.family} — {self.reason}")
        if self.warning:
            lines.append(f"WARNING: {self.warning}")
        lines.append("use:")
        lines += ["  " + line for line in self.recommended.code.splitlines()]
        return "\n".join(lines)


def _secs(s: float) -> str:
    return f"{1e3 * s:.1f} ms" if s < 1 else f"{s:.2f} s"


def _encoder(X: Any) -> tuple[Any, str]:
    """(a scikit-learn transformer for X, its code): one-hot for text/category columns and scaling for numbers of a
    DataFrame; scaling alone for a numeric array."""
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    if hasattr(X, "columns"):
        kinds = {c: getattr(X[c].dtype, "kind", "O") for c in X.columns}
        num = [c for c, k in kinds.items() if k in "iufb"]
        cat = [c for c in X.columns if c not in num]
        if cat:
            enc = ColumnTransformer([("num", StandardScaler(), num),
                                     ("cat", OneHotEncoder(handle_unknown="ignore", sparse_output=False), cat)])
            code = (f"ColumnTransformer([('num', StandardScaler(), {num!r}),\n"
                    f"                   ('cat', OneHotEncoder(handle_unknown='ignore', sparse_output=False), "
                    f"{cat!r})])")
            return enc, code
    return StandardScaler(), "StandardScaler()"


def _removal_seconds(model: Any, n_train: int, k: int, rng: np.random.Generator) -> float:
    """Median wall time of ``k`` removals of random rows, one at a time, by ``model.remove`` (on the model itself:
    it is the advisor's own)."""
    rows = rng.choice(n_train, size=min(k, max(1, n_train // 10)), replace=False)
    times = []
    for i in rows:
        t0 = time.perf_counter()
        model.remove([int(i)])
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def advise(X: Any, y: Any, *, planners: tuple[Any, Any], expected_deletions: int | None = None,
           observer: str = "one version", X_public: Any = None, y_public: Any = None, epsilon: float = 1.0,
           delta: float = 1e-4, latency_target: float = 60.0, families: Any = FAMILIES,
           validation_fraction: float = 0.2, timed_removals: int = 5, dataset: str | None = None,
           random_state: Any = 0) -> Advice:
    """Compare the unlearning families on (X, y) and recommend one (see the module's text). Called as
    :func:`lethe.planning.advise`, which passes ``planners`` = (plan_lambda, plan_sigma).

    Parameters
    ----------
    X, y : array-like or DataFrame, labels
        The user's table (a DataFrame may have text columns: they are one-hot encoded).
    expected_deletions : int, optional
        Deletions expected over the model's life (or between retrainings). Default: 5 % of the training rows
        (at least 1), stated in the advice.
    observer : {"one version", "every release"}
        Who observes what: only the current published version, or every version published (then only a family
        whose guarantee covers every release is recommended).
    X_public, y_public : optional
        Public rows of the same kind: the models train on the given rows and are scored there (and the
        encoder and λ are chosen there), instead of on a held-out share of X.
    epsilon, delta : float
        The guarantee of the certified and released families.
    latency_target : float, default=60
        Seconds within which a deletion must take effect; families slower than this are not recommended.
    families : sequence of {"retrain", "sharded", "certified", "released"}
    validation_fraction : float, default=0.2
        Held-out share of X (without public rows).
    timed_removals : int, default=5
        Removals timed per family for the latency.
    dataset : str, optional
        A registered dataset's name: the code printed is the ``lethe train`` command for it.
    random_state : int, None or Generator

    Returns
    -------
    Advice
        ``print(advice)`` shows the comparison, the recommendation and the code; ``advice.recommended``.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from lethe.planning import advise
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> advice = advise(X, y, families=["retrain"], random_state=0)
    >>> advice.recommended.family, advice.recommended.epsilon
    ('exact retraining', 0.0)
    """
    if observer not in OBSERVERS:
        raise ValueError(f"observer must be one of {OBSERVERS}. Found {observer!r}.")
    fams = list(families)
    bad = [f for f in fams if f not in FAMILIES]
    if bad or not fams:
        raise ValueError(f"families must be a non-empty subset of {FAMILIES}. Found {fams!r}.")
    if not (isinstance(latency_target, int | float) and latency_target > 0):
        raise ValueError(f"latency_target must be a number of seconds > 0. Found {latency_target!r}.")
    rng = check_random_state(random_state)
    y = np.asarray(y)
    n = X.shape[0]
    if y.shape != (n,):
        raise ValueError(f"y must be 1-D with one label per row of X ({n}). Found shape {y.shape}.")
    if X_public is not None:
        if y_public is None:
            raise ValueError("y_public must be given with X_public. Found y_public=None.")
        Xtr, ytr, Xte, yte = X, y, X_public, np.asarray(y_public)
        scored_on = "public rows"
    else:
        if not 0.0 < validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in (0, 1). Found {validation_fraction!r}.")
        perm = rng.permutation(n)
        n_val = max(1, int(round(validation_fraction * n)))
        take = (lambda A, r: A.iloc[r]) if hasattr(X, "iloc") else (lambda A, r: A[r])
        Xtr, ytr, Xte, yte = take(X, perm[n_val:]), y[perm[n_val:]], take(X, perm[:n_val]), y[perm[:n_val]]
        scored_on = f"a held-out {validation_fraction:.0%} of the given rows"
    n_tr = int(Xtr.shape[0])
    notes: list[str] = []
    if expected_deletions is None:
        R = max(1, n_tr // 20)
        notes.append(f"expected_deletions: {R} (default: 5 % of the {n_tr} training rows; say how many you expect)")
    else:
        R = int(expected_deletions)
        if R < 1:
            raise ValueError(f"expected_deletions must be >= 1. Found {expected_deletions!r}.")
    classes, counts = np.unique(ytr, return_counts=True)
    major = classes[int(np.argmax(counts))]
    major = major.item() if isinstance(major, np.generic) else major  # printed as 'good', not np.str_('good')
    majority = float(np.mean(yte == major))
    results = [FamilyResult("majority class", f"always {major!r}", majority, math.nan,
                            "none (depends on the label counts only)", None, "-", True,
                            f"predict {major!r} for every row")]
    encoder, enc_code = _encoder(Xtr)
    every = observer == "every release"
    one_version = "one published version"

    if "retrain" in fams:
        from sklearn.ensemble import HistGradientBoostingClassifier
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline

        from lethe.retrain import RetrainingClassifier

        for name, est, est_code in (
                ("logistic", LogisticRegression(max_iter=2000), "LogisticRegression(max_iter=2000)"),
                ("gradient boosting", HistGradientBoostingClassifier(random_state=0),
                 "HistGradientBoostingClassifier(random_state=0)")):
            model = RetrainingClassifier(make_pipeline(clone(encoder), est)).fit(Xtr, ytr)
            acc = float(model.score(Xte, yte))
            lat = _removal_seconds(model, n_tr, timed_removals, rng)
            code = (f"from lethe.retrain import RetrainingClassifier\n"
                    f"model = RetrainingClassifier(make_pipeline({enc_code},\n    {est_code})).fit(X, y)\n"
                    "cert = model.remove(keys=[...])   # drops the rows and refits; cert.epsilon == 0")
            if dataset is not None:
                sharded_est = "logistic-regression" if name == "logistic" else "hist-gradient-boosting"
                code = (f"lethe train {dataset} MODEL --mechanism sharded --param n_shards=1 "
                        f"--param 'estimator=\"{sharded_est}\"'   # one shard: every deletion refits the model")
            results.append(FamilyResult(
                "exact retraining", f"{name}, refit per deletion", acc, lat,
                f"a refit per deletion ({_secs(lat)}; {R} deletions: {_secs(R * lat)} of CPU)", 0.0, one_version,
                not every, code, "consecutive versions reveal what the removed rows changed",
                estimator=clone(model)))

    S = 8
    sharded = "sharded" in fams and n_tr // S >= MIN_SHARD_ROWS
    if sharded or "certified" in fams or "released" in fams:  # the families that need numeric rows
        Xn_tr, Xn_te, scale, enc_note, frozen = _numeric_rows(encoder, Xtr, Xte, X_public is not None)
        notes.append(enc_note)
    if "sharded" in fams:
        if not sharded:
            notes.append(f"sharded: not tried ({n_tr} rows / {S} shards < {MIN_SHARD_ROWS} rows per shard: the shards "
                         "lose accuracy, and a refit of the whole table is cheap at this size)")
        else:
            from sklearn.ensemble import HistGradientBoostingClassifier
            from sklearn.pipeline import make_pipeline
            from sklearn.preprocessing import FunctionTransformer

            from lethe.sharded import ShardedClassifier

            # the shards take numeric rows: the encoder runs before them, fitted once (on public rows when given)
            model = ShardedClassifier(HistGradientBoostingClassifier(random_state=0), n_shards=S, random_state=0)
            model.fit(Xn_tr, ytr, sample_ids=np.arange(n_tr))
            acc = float(model.score(Xn_te, yte))
            lat = _removal_seconds(model, n_tr, timed_removals, rng)
            code = (f"from lethe.sharded import ShardedClassifier\nmodel = make_pipeline(FrozenEstimator({enc_code}"
                    f".fit(X_public)),\n    ShardedClassifier(HistGradientBoostingClassifier(), n_shards={S})"
                    ").fit(X, y)")
            if dataset is not None:
                code = f"lethe train {dataset} MODEL --mechanism sharded --param n_shards={S}"
            results.append(FamilyResult("sharded", f"{S} shards of gradient boosting", acc, lat,
                                        f"one shard refitted per deletion ({_secs(lat)})", 0.0, one_version,
                                        not every, code, "consecutive versions reveal which shard changed",
                                        estimator=make_pipeline(frozen, FunctionTransformer(
                                            _divide, kw_args={"scale": scale}), clone(model))))
    if "certified" in fams:
        results.append(_certified(Xn_tr, ytr, Xn_te, yte, R, epsilon, delta, every, rng, timed_removals, scale,
                                  enc_code, dataset, public=X_public is not None, planners=planners, frozen=frozen))
    if "released" in fams:
        results.append(_released(Xn_tr, ytr, Xn_te, yte, R, epsilon, every, rng, timed_removals, scale, enc_code,
                                 dataset, frozen))

    rec, reason, warning = _choose(results, majority, latency_target, every, int(Xte.shape[0]))
    return Advice(results=tuple(results), recommended=rec, reason=reason, majority=majority, warning=warning,
                  n_train=n_tr, n_heldout=int(Xte.shape[0]), scored_on=scored_on, expected_deletions=R,
                  observer=observer, notes=tuple(notes))


def _numeric_rows(encoder: Any, Xtr: Any, Xte: Any, public: bool) -> tuple[np.ndarray, np.ndarray, float, str, Any]:
    """Rows for the certified families: encoded, then scaled by one constant so the training rows lie in the unit
    ball (rows outside it are normalised by the estimator's ``normalize_rows``); and the fitted encoder (frozen)."""
    from sklearn.frozen import FrozenEstimator

    enc = clone(encoder)
    if public:
        enc.fit(Xte)
        A, B = np.asarray(enc.transform(Xtr), dtype=np.float64), np.asarray(enc.transform(Xte), dtype=np.float64)
        scale = float(np.max(np.linalg.norm(B, axis=1))) or 1.0
        note = ("sharded/certified/released: encoder and row scale fitted on the public rows (nothing private in "
                "them)")
    else:
        A = np.asarray(enc.fit_transform(Xtr), dtype=np.float64)
        B = np.asarray(enc.transform(Xte), dtype=np.float64)
        scale = float(np.max(np.linalg.norm(A, axis=1))) or 1.0
        note = ("sharded/certified/released: the encoder and the row scale were fitted on the training rows here; "
                "for the certificates to cover them fit them on public rows (X_public) or use a schema "
                "(lethe.preprocessing.SchemaEncoder), which learns nothing from the rows")
    return A / scale, B / scale, scale, note, FrozenEstimator(enc)


def _frozen_pipeline(frozen: Any, scale: float, model: Any) -> Any:
    """encoder (fitted, frozen) → rows / scale → ``model``: an :class:`lethe.pipeline.UnlearningPipeline`."""
    from sklearn.preprocessing import FunctionTransformer

    from lethe.pipeline import make_unlearning_pipeline

    return make_unlearning_pipeline(frozen, FunctionTransformer(_divide, kw_args={"scale": scale}), model)


def _divide(X: Any, scale: float) -> np.ndarray:
    """``X / scale`` (the row scale of :func:`_numeric_rows`; stateless)."""
    return np.asarray(X, dtype=np.float64) / scale


def _certified(Xtr: np.ndarray, ytr: np.ndarray, Xte: np.ndarray, yte: np.ndarray, R: int, epsilon: float,
               delta: float, every: bool, rng: np.random.Generator, k: int, scale: float, enc_code: str,
               dataset: str | None, public: bool, planners: tuple[Any, Any], frozen: Any) -> FamilyResult:
    from lethe.certified.estimators import CertifiedLogisticRegression

    plan_lambda, plan_sigma = planners

    base = CertifiedLogisticRegression(fit_intercept=True, normalize_rows=True)
    n_tr = Xtr.shape[0]
    R_plan = max(1, min(R, (n_tr * 4) // 5 - 1, 1000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the cost of planning on the given rows is in the notes
        table = plan_lambda(Xtr, ytr, data="public" if public else "private", lams=(1e-2, 1e-3, 1e-4),
                            sigmas=(0.1, 1.0), estimator=base, epsilon=epsilon, delta=delta,
                            max_removals=min(R_plan, (n_tr * 4) // 5 - 1), random_state=int(rng.integers(2**31)))
        lam = max(table.points, key=lambda p: (min(p.removals_supported, R_plan), p.accuracy)).lam
        plan = plan_sigma(Xtr, ytr, n_removals=R_plan, epsilon=epsilon, delta=delta,
                          estimator=base.set_params(lam=lam), random_state=int(rng.integers(2**31)))
    model = CertifiedLogisticRegression(fit_intercept=True, normalize_rows=True, lam=lam, sigma=plan.sigma,
                                        epsilon=epsilon, delta=delta, random_state=int(rng.integers(2**31)))
    t0 = time.perf_counter()
    model.fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    acc = float(model.score(Xte, yte))
    lat = _removal_seconds(model, n_tr, k, rng)
    code = ("from lethe.certified.estimators import CertifiedLogisticRegression\n"
            f"model = make_unlearning_pipeline(FrozenEstimator({enc_code}.fit(X_public)),\n"
            f"    FunctionTransformer(lambda A: A / {scale:.4g}),\n"
            f"    CertifiedLogisticRegression(lam={lam:g}, sigma={plan.sigma:.4g}, epsilon={epsilon:g}, "
            f"delta={delta:g}, fit_intercept=True, normalize_rows=True)).fit(X, y)")
    if dataset is not None:
        code = f"lethe train {dataset} MODEL --lam {lam:g} --sigma {plan.sigma:.4g} --epsilon {epsilon:g}"
    return FamilyResult("certified removal", f"λ = {lam:g}, σ = {plan.sigma:.3g} (planned for {R_plan} removals)",
                        acc, lat, f"a Newton step per deletion; retrains (a fit, {_secs(fit_s)}) when the budget is "
                        f"spent, planned after {R_plan} (measured rate {plan.retraining_rate:.2f})", float(epsilon),
                        "one published version", not every, code,
                        "consecutive versions are not covered; an (ε, δ) guarantee, not exact",
                        estimator=_frozen_pipeline(frozen, scale, clone(model).set_params(random_state=None)))


def _released(Xtr: np.ndarray, ytr: np.ndarray, Xte: np.ndarray, yte: np.ndarray, R: int, epsilon: float,
              every: bool, rng: np.random.Generator, k: int, scale: float, enc_code: str,
              dataset: str | None, frozen: Any) -> FamilyResult:
    from lethe.release import ReleasedLogisticRegression

    if np.unique(ytr).size != 2:
        return FamilyResult("released", "binary labels only", math.nan, math.nan, "-", float(epsilon),
                            "every release", every, "-", "not available: ReleasedLogisticRegression is binary")
    from lethe.privacy.release import auto_n_floor
    from lethe.release.tree_stream import row_count_gram_cap

    horizon = R + 1
    # the noise: tree aggregation (issue 39) where its accountant gives less noise than fresh noise, judged from
    # public parameters only ("auto") with the Gram cap every data set of this n_floor satisfies
    gram_cap = row_count_gram_cap(auto_n_floor(Xtr.shape[0]))
    model = ReleasedLogisticRegression(epsilon=epsilon, horizon=horizon, fit_intercept=True, normalize_rows=True,
                                       random_state=int(rng.integers(2**31)), noise_mechanism="auto",
                                       gram_cap=gram_cap).fit(Xtr, ytr)
    tree = model.noise_mechanism_ == "tree"
    acc = float(model.score(Xte, yte))
    lat = _removal_seconds(model, Xtr.shape[0], k, rng)
    extra = f", noise_mechanism='tree', gram_cap={gram_cap!r}" if tree else ""
    code = ("from lethe.release import ReleasedLogisticRegression\n"
            f"model = ReleasedLogisticRegression(epsilon={epsilon:g}, horizon={horizon}, fit_intercept=True, "
            f"normalize_rows=True{extra})   # rows: {enc_code} fitted on public rows, / {scale:.4g}")
    if dataset is not None:
        code = (f"lethe train {dataset} MODEL --mechanism released-logistic --param horizon={horizon} "
                f"--epsilon {epsilon:g}" + (f" --param noise_mechanism=tree --param gram_cap={gram_cap!r}"
                                            if tree else ""))
    return FamilyResult("released", f"λ = 1e-3, horizon {horizon} releases" + (", tree noise" if tree else ""),
                        acc, lat,
                        f"a private release per deletion ({_secs(lat)}); the budget covers {horizon} releases",
                        float(epsilon), "every release", True, code, "covers an observer of every version",
                        estimator=_frozen_pipeline(frozen, scale, clone(model).set_params(random_state=None)))


def _choose(results: list[FamilyResult], majority: float, latency_target: float,
            every: bool, m: int) -> tuple[FamilyResult, str, str]:
    """(the recommended family, why, a warning or ""): among the families whose guarantee covers the observer and
    whose deletions take effect within the latency target, the most accurate; an exact one (ε = 0: the stronger
    guarantee, no accuracy given up by design) is preferred unless another is more accurate by more than the
    held-out measurement can tell apart — max(1 pp, two standard errors √(a(1 − a)/m) on the ``m`` held-out rows;
    on 200 rows at 75 % that is 6 pp, and on the German credit table a certified model once won by chance)."""
    models = [r for r in results if r.family != "majority class" and not math.isnan(r.accuracy)]
    ok = [r for r in models if r.covers and r.deletion_seconds <= latency_target]
    floor = results[0]
    if not ok:
        why = ("no family measured covers an observer of every release within the latency target" if every else
               "no family measured deletes within the latency target")
        return floor, why, (f"{why}: the only safe answer is the majority class ({majority:.1%}). Publish only the "
                            "current version (then exact retraining applies), raise latency_target, or add rows.")
    best = max(r.accuracy for r in ok)
    tol = max(0.01, 2.0 * math.sqrt(max(best * (1.0 - best), 1e-12) / max(m, 1)))
    exact = [r for r in ok if r.epsilon == 0.0 and r.accuracy >= best - tol and r.accuracy > majority]
    rec = max(exact or ok, key=lambda r: (r.accuracy, -r.deletion_seconds))
    reason = (f"held-out accuracy {rec.accuracy:.1%} (majority class {majority:.1%}), a deletion in "
              f"{_secs(rec.deletion_seconds)}, guarantee ε = {rec.epsilon:g} for {rec.observer}")
    if rec.epsilon == 0.0 and any(r.epsilon and r.accuracy > rec.accuracy for r in ok):
        reason += f" (exact; the more accurate ones are within {tol:.1%}, what {m} held-out rows can tell apart)"
    warning = ""
    if rec.accuracy <= majority:
        alt = [r for r in models if r.accuracy > majority]
        warning = (f"the recommended model ({rec.accuracy:.1%}) is no better than always predicting the majority "
                   f"class ({majority:.1%}) on the {m} held-out rows (differences under {tol:.1%} are within what "
                   "they can tell apart): do not deploy it as a classifier before checking on more rows. ")
        if alt and every:
            warning += (f"{alt[0].family} ({alt[0].accuracy:.1%}) beats it if you publish only the current version "
                        "(its guarantee covers one published version).")
        elif rec.epsilon == 0.0:
            warning += ("Measure on more rows (public rows: X_public), add features, or serve the majority class.")
        else:
            warning += "Add rows or features, or raise ε; otherwise serve the majority class."
    return rec, reason, warning

"""The membership-inference audit of lethe's unlearning (``lethe audit``).

Set-up (per trial, pooled over trials). From MNIST 3 vs 8 (train and test pooled, 784 pixels, rows
L2-normalised) draw a candidate set C of 2n points; a random half is the training set D, the other half U is never
seen. In D, a random set R of m points is removed after training and T = D ∖ R stays. Few training points relative
to the dimension (n = 50 ≪ d = 784 by default) is the regime where a non-private linear model memorises, so the
positive control has something to find. The same data, removal set and attacks serve every target:

* ``plain`` — non-private logistic regression with a tiny λ (fits D exactly: the positive control), nothing
  removed: its "removed" points are in fact still trained on, so an attack must tell them from U;
* ``plain-lam-cr`` — the same non-private model at the certified model's λ (no noise, nothing removed): how much of
  the certified model's protection comes from its regularisation alone;
* ``plain-retrained`` — the plain model retrained from scratch on D ∖ R (exact unlearning);
* ``certified`` — :class:`lethe.certified.estimators.CertifiedLogisticRegression` (Guo et al.) after removing R one
  row at a time (Alg. 2 with |B| = 1, Newton steps; retrainings forced by the budget are counted and reported);
* ``noisygd`` — :class:`lethe.noisygd.estimators.NoisyGDLogisticRegression` (Chourasia & Shah) after deleting R
  one record per edit.

Attacks (:mod:`lethe.audit.attacks`): loss threshold; offline and online LiRA with, per target and trial, shadow
models trained by the target's own training procedure on random subsets of C of the size of the target's final
training set (n for the plain controls, n − m after removal), so each candidate is "in" about half of them.
Reported: advantage of "removed vs never seen" and "retained vs never seen" with Clopper–Pearson intervals
(:mod:`lethe.audit.stats`), beside the bound of the guarantee.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lethe._validation import check_positive_int
from lethe.audit.attacks import lira_offline_scores, lira_online_scores, logit_confidence
from lethe.audit.stats import advantage, dp_advantage_bound, eq12_advantage_bound

DEFAULTS: dict[str, int] = {"n_train": 50, "n_removed": 10, "trials": 100, "shadows": 64}
PLAIN_LAM = 1e-6  # effectively unregularised: fits the n < d training points exactly
# Certified removal: λ and σ chosen (on pilot trials, other seeds) so that removing m = 10 of n = 50 rows one at a
# time is done by Newton steps within the budget, i.e. the audit exercises the certified removal, not retraining.
CR: dict[str, Any] = {"lam": 1e-2, "sigma": 0.5, "epsilon": 1.0, "delta": 1e-4}
NGD: dict[str, Any] = {"lam": 0.01, "q": 10.0, "epsilon_dp": 4.0, "epsilon_dd": 0.5}
ATTACKS = ("loss", "lira-offline", "lira-online")
POSITIVE_CONTROL_FLOOR = 0.1  # the positive control must have an advantage interval entirely above this


class _Plain:
    """Plain L2-regularised logistic regression without intercept (sklearn's lbfgs), with ``decision_function``."""

    def __init__(self, lam: float) -> None:
        self.lam = lam

    def fit(self, X: np.ndarray, y: np.ndarray) -> _Plain:
        from sklearn.linear_model import LogisticRegression

        C = 1.0 / (self.lam * X.shape[0])  # objective Σ ℓ + λ n/2 ‖w‖² = C Σ ℓ + ½‖w‖² up to scale
        self.clf_ = LogisticRegression(C=C, fit_intercept=False, max_iter=5000, tol=1e-8).fit(X, y)
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.clf_.decision_function(X))


def _factories(seed_rng: np.random.Generator) -> dict[str, Callable[[], Any]]:
    from lethe.certified.estimators import CertifiedLogisticRegression

    out: dict[str, Callable[[], Any]] = {
        "plain": lambda: _Plain(PLAIN_LAM),
        "plain-lam-cr": lambda: _Plain(CR["lam"]),
        "plain-retrained": lambda: _Plain(PLAIN_LAM),
        "certified": lambda: CertifiedLogisticRegression(**CR, random_state=int(seed_rng.integers(2**31))),
    }
    try:
        from lethe.noisygd.estimators import NoisyGDLogisticRegression
    except ImportError:  # pragma: no cover - Noisy-GD is part of lethe, but keep the audit usable without it
        return out
    out["noisygd"] = lambda: NoisyGDLogisticRegression(**NGD, random_state=int(seed_rng.integers(2**31)))
    return out


def load_population(data_dir: str | None = None, pool: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """MNIST 3 vs 8, train and test pooled, optionally average-pooled by ``pool``, rows L2-normalised; labels ±1."""
    from lethe.datasets import load_mnist_binary
    from lethe.experiments._common import pool_images

    X, y, Xt, yt = load_mnist_binary(3, 8, data_dir=data_dir)
    Xall = np.vstack([X, Xt])
    return (pool_images(Xall, pool) if pool > 1 else Xall), np.concatenate([y, yt])


def check_config(config: dict[str, Any] | None, population_size: int | None = None) -> dict[str, int]:
    """The audit configuration (defaults filled in), validated: unknown keys and impossible sizes raise."""
    cfg: dict[str, Any] = {**DEFAULTS, **(config or {})}
    unknown = set(cfg) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"Unknown audit settings {sorted(unknown)}; known: {sorted(DEFAULTS)}.")
    for key in DEFAULTS:
        check_positive_int(f"Audit setting {key}", cfg[key])
    if not 1 <= cfg["n_removed"] < cfg["n_train"] - 1:
        raise ValueError(f"n_removed must be in [1, n_train - 1) so that points are retained. Found "
                         f"n_removed = {cfg['n_removed']}, n_train = {cfg['n_train']}.")
    if cfg["shadows"] < 4:
        raise ValueError(f"shadows must be >= 4 (LiRA fits a Gaussian per point and side). Found {cfg['shadows']}.")
    if population_size is not None and 2 * cfg["n_train"] > population_size:
        raise ValueError(f"The population has {population_size} points; 2 n_train = {2 * cfg['n_train']} are needed.")
    return {k: int(cfg[k]) for k in DEFAULTS}


def _shadow_masks(rng: np.random.Generator, k: int, n_cand: int, size: int) -> np.ndarray:
    """k random subsets of the candidates of the given size, as a (k, n_cand) mask, each point in ≥ 1 and out of
    ≥ 1 of them (redrawn otherwise; certain for the sizes used here)."""
    for _ in range(1000):
        M = np.zeros((k, n_cand), dtype=bool)
        for i in range(k):
            M[i, rng.choice(n_cand, size=size, replace=False)] = True
        if M.any(axis=0).all() and (~M).any(axis=0).all():
            return M
    raise RuntimeError(f"Could not draw {k} shadow sets of size {size} of {n_cand} covering both sides; add shadows.")


def run_audit(config: dict[str, Any] | None = None, *, data_dir: str | None = None, seed: int = 0,
              show_progress: bool = True, population: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """Run the audit; returns per-target, per-attack advantages with intervals and bounds, and a Markdown table."""
    from lethe.experiments._common import progress

    t_start = time.perf_counter()
    Xp, yp = population if population is not None else load_population(data_dir)
    cfg = check_config(config, Xp.shape[0])
    n, m, trials, k_sh = cfg["n_train"], cfg["n_removed"], cfg["trials"], cfg["shadows"]
    rng = np.random.default_rng(seed)
    facts = _factories(rng)
    scores: dict[str, dict[str, dict[str, list[np.ndarray]]]] = {
        t: {a: {"removed": [], "retained": [], "unseen": []} for a in ATTACKS} for t in facts}
    certs: dict[str, list[float]] = {"certified_retrainings": [], "certified_budget_used": [],
                                     "noisygd_epsilon_dd": [], "noisygd_epsilon_dp": [], "train_acc_plain": []}
    unseen_acc: dict[str, list[float]] = {t: [] for t in facts}
    jobs = [(trial, t) for trial in range(trials) for t in facts]
    for trial, target in progress(jobs, desc="audit (trial, target)", enabled=show_progress):
        trng = np.random.default_rng([seed, trial])
        C = trng.permutation(Xp.shape[0])[:2 * n]  # candidates: D = C[:n] (R = C[:m], T = C[m:n]), U = C[n:]
        D = C[:n]
        removes = target in ("certified", "noisygd", "plain-retrained")
        model = facts[target]()
        if target == "plain-retrained":
            model.fit(Xp[D[m:]], yp[D[m:]])
        else:
            model.fit(Xp[D], yp[D])
        if target == "plain":
            certs["train_acc_plain"].append(float(np.mean(np.sign(model.decision_function(Xp[D])) == yp[D])))
        if target == "certified":
            cs = [model.remove([i]) for i in range(m)]  # R = D[:m] are rows 0..m-1 of the training set
            certs["certified_retrainings"].append(float(sum(c.retrained for c in cs)))
            certs["certified_budget_used"].append(float(cs[-1].residual_bound / cs[-1].budget))
        elif target == "noisygd":
            cs = [model.remove([i]) for i in range(m)]
            certs["noisygd_epsilon_dd"].append(float(max(c.epsilon_dd for c in cs)))
            certs["noisygd_epsilon_dp"].append(float(max(c.epsilon_dp for c in cs)))
        XC, yC = Xp[C], yp[C]
        phi = logit_confidence(model, XC, yC)
        unseen_acc[target].append(float(np.mean(phi[n:] > 0)))
        size = n - m if removes else n
        M = _shadow_masks(trng, k_sh, 2 * n, size)
        S = np.empty((k_sh, 2 * n))
        for i in range(k_sh):
            S[i] = logit_confidence(facts[target]().fit(XC[M[i]], yC[M[i]]), XC, yC)
        sc = {"loss": -np.logaddexp(0.0, -phi),  # loss_scores(model, XC, yC) without recomputing φ
              "lira-offline": lira_offline_scores(phi, S, shadow_out=~M),
              "lira-online": lira_online_scores(phi, S, M)}
        for attack, s in sc.items():
            scores[target][attack]["removed"].append(s[:m])
            scores[target][attack]["retained"].append(s[m:n])
            scores[target][attack]["unseen"].append(s[n:])

    eps_dd = max(certs["noisygd_epsilon_dd"]) if certs["noisygd_epsilon_dd"] else math.nan
    eps_dp = max(certs["noisygd_epsilon_dp"]) if certs["noisygd_epsilon_dp"] else math.nan
    bounds = {
        ("certified", "removed"): (dp_advantage_bound(CR["epsilon"], CR["delta"]),
                                   f"(ε, δ) = ({CR['epsilon']:g}, {CR['delta']:g})-certified removal: "
                                   "δ + (1−δ) tanh(ε/2)"),
        ("noisygd", "removed"): (eq12_advantage_bound(NGD["q"], eps_dd) if not math.isnan(eps_dd) else math.nan,
                                 f"Thm 4.1 Eq. (12), q = {NGD['q']:g}, certified ε_dd = {eps_dd:.3g}"),
        ("noisygd", "retained"): (eq12_advantage_bound(NGD["q"], eps_dp) if not math.isnan(eps_dp) else math.nan,
                                  f"Eq. (12) form with the (q, ε_dp = {eps_dp:.3g})-RDP of present records"),
        ("plain-retrained", "removed"): (0.0, "exact retraining: removed points are never-seen points"),
    }
    rows = []
    for target in facts:
        for attack in ATTACKS:
            sc_all = {k: np.concatenate(v) for k, v in scores[target][attack].items()}
            for which in ("removed", "retained"):
                adv = advantage(sc_all[which], sc_all["unseen"], random_state=seed)
                b, why = bounds.get((target, which), (math.nan, "no guarantee"))
                rows.append({"target": target, "attack": attack, "question": f"{which} vs never seen",
                             **adv.to_dict(), "bound": b, "bound_source": why,
                             "exceeds_bound": bool(adv.low > b) if not math.isnan(b) else None})
    pc = [r for r in rows if r["target"] == "plain" and r["question"] == "retained vs never seen"]
    positive_control_ok = any(r["low"] > POSITIVE_CONTROL_FLOOR for r in pc)
    devs = []
    if not positive_control_ok:
        devs.append("The audit's positive control (plain model) did not show an advantage clearly above zero: the "
                    "attacks are too weak here to say anything about the private models.")
    if any(r["exceeds_bound"] for r in rows):
        devs.append("An attack's advantage interval lies entirely above a guarantee's bound: investigate.")
    if certs["certified_retrainings"] and sum(certs["certified_retrainings"]) > 0:
        devs.append(f"Audit: the certified model retrained {int(sum(certs['certified_retrainings']))} times in "
                    f"{m * trials} removals (budget exhausted); those removals were exact retraining, not Newton "
                    "steps.")
    res = {"config": cfg, "rows": rows, "positive_control_ok": positive_control_ok, "certificates": certs,
           "unseen_accuracy": {t: float(np.mean(v)) for t, v in unseen_acc.items()},
           "settings": {"plain_lam": PLAIN_LAM, "certified": CR, "noisygd": NGD}, "deviations": devs,
           "seconds": time.perf_counter() - t_start, "seed": seed}
    res["markdown"] = render_markdown(res)
    return res


def _best(res: dict[str, Any], target: str, which: str) -> dict[str, Any] | None:
    rows = [r for r in res["rows"] if r["target"] == target and r["question"] == f"{which} vs never seen"]
    return max(rows, key=lambda r: r["advantage"]) if rows else None


def render_markdown(res: dict[str, Any]) -> str:
    """The audit's set-up, table and reading as Markdown; every number from ``res``."""
    cfg, c = res["config"], res["certificates"]
    n, m, trials = cfg["n_train"], cfg["n_removed"], cfg["trials"]
    acc = res["unseen_accuracy"]
    retr = int(sum(c["certified_retrainings"]))
    used = max(c["certified_budget_used"]) if c["certified_budget_used"] else math.nan
    lines = [f"Per trial: 2n = {2 * n} candidates from MNIST 3 vs 8 (784 pixels, rows L2-normalised); a random half "
             f"is the training set D (n = {n}), the other half is never seen (U); m = {m} points of D are removed "
             f"after training (R), {n - m} are retained (T). {trials} trials pooled: {m * trials} removed, "
             f"{(n - m) * trials} retained and {n * trials} never-seen points per target. Shadow models: "
             f"{cfg['shadows']} per target and trial, trained by the target's own procedure on random subsets of "
             "the candidates (n points for the controls without removal, n − m after removal), so each candidate "
             "is in some and out of others; online LiRA uses both sides, offline LiRA only the out side. "
             "Advantage = TPR − FPR at a cross-fitted threshold, with a 95 % Clopper–Pearson interval "
             "(Bonferroni over TPR and FPR; points of one trial share a model, so the intervals treat pooled "
             "points as independent).", "",
             "| target | set-up | accuracy on never-seen points |", "|---|---|---|",
             f"| plain | λ = {PLAIN_LAM:g}, no noise, nothing removed (positive control; training accuracy "
             f"{100 * np.mean(c['train_acc_plain']):.1f} %) | {100 * acc.get('plain', math.nan):.1f} % |",
             f"| plain-lam-cr | λ = {CR['lam']:g} (the certified model's), no noise, nothing removed | "
             f"{100 * acc.get('plain-lam-cr', math.nan):.1f} % |",
             f"| plain-retrained | λ = {PLAIN_LAM:g}, retrained from scratch on D ∖ R | "
             f"{100 * acc.get('plain-retrained', math.nan):.1f} % |",
             f"| certified | Guo et al.: λ = {CR['lam']:g}, σ = {CR['sigma']:g}, ε = {CR['epsilon']:g}, δ = "
             f"{CR['delta']:g} (tight bound, analytic calibration); R removed one row at a time: {retr} "
             f"retrainings in {m * trials} removals, at most {100 * used:.0f} % of the budget used | "
             f"{100 * acc.get('certified', math.nan):.1f} % |"]
    if "noisygd" in acc:
        lines.append(f"| noisygd | Chourasia & Shah: λ = {NGD['lam']:g}, q = {NGD['q']:g}, ε_dp = "
                     f"{NGD['epsilon_dp']:g}, ε_dd = {NGD['epsilon_dd']:g} (Eq. 19 schedule); R deleted one record "
                     f"per edit | {100 * acc['noisygd']:.1f} % |")
    lines += ["", "| target | attack | question | advantage | 95 % CI | AUC | bound | bound from |",
              "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        b = "—" if math.isnan(r["bound"]) else f"{r['bound']:.3f}"
        lines.append(f"| {r['target']} | {r['attack']} | {r['question']} | {r['advantage']:+.3f} | "
                     f"[{r['low']:+.3f}, {r['high']:+.3f}] | {r['auc']:.3f} | {b} | {r['bound_source']} |")
    pc = _best(res, "plain", "retained")
    lines += ["", f"Positive control (plain model, retained vs never seen; needs an interval above "
              f"{POSITIVE_CONTROL_FLOOR:g}): "
              + ("clearly non-zero advantage — the attacks have power." if res["positive_control_ok"]
                 else "NOT clearly non-zero — the attacks are too weak to support conclusions."), ""]
    # the reading, from the numbers
    text = []
    if pc is not None:
        text.append(f"The strongest attack on the positive control ({pc['attack']}) reaches an advantage of "
                    f"{pc['advantage']:.2f} [{pc['low']:.2f}, {pc['high']:.2f}] on retained points.")
    for target, name in (("certified", "certified removal"), ("noisygd", "Noisy-GD unlearning"),
                         ("plain-retrained", "exact retraining")):
        best = _best(res, target, "removed")
        if best is None:
            continue
        inside = best["low"] <= 0.0 <= best["high"]
        text.append(f"After {name}, the largest measured advantage on removed points is {best['advantage']:+.3f} "
                    f"({best['attack']}, interval [{best['low']:+.3f}, {best['high']:+.3f}]"
                    + (", containing 0" if inside else ", not containing 0")
                    + (f"; bound {best['bound']:.3f})." if not math.isnan(best["bound"]) else ")."))
    lc, cr = _best(res, "plain-lam-cr", "retained"), _best(res, "certified", "retained")
    if lc is not None and cr is not None:
        text.append(f"On retained points the non-private model at the certified λ gives up to {lc['advantage']:+.3f} "
                    f"[{lc['low']:+.3f}, {lc['high']:+.3f}], the certified model up to {cr['advantage']:+.3f} "
                    f"[{cr['low']:+.3f}, {cr['high']:+.3f}]"
                    + (": the regularisation alone does not explain the certified model's lower leakage; the "
                       "objective perturbation b hides more (Guo et al.'s certificate makes no claim about retained "
                       "points)." if lc["low"] > cr["high"] else
                       ": within the intervals, the regularisation alone explains the certified model's leakage on "
                       "retained points (Guo et al.'s certificate makes no claim about them)."))
    text.append("An audit only lower-bounds leakage: advantages near zero are consistent with the guarantees but do "
                "not prove them, and the bounds hold for every attack, not just these.")
    return "\n".join(lines + [" ".join(text)])


INTRO = """# Membership-inference audit of lethe's unlearning

Regenerate with `lethe audit --out docs/audit.md` (or `python -m lethe.experiments.audit --out docs/audit.md`);
`--quick` runs a small version in seconds. Everything below up to "Auditing your own model", text included, is the
output of one full run (seed {seed}, {seconds:.0f} s on this machine); nothing was edited by hand. The numbers
are also in `docs/audit.json`.

What it measures: can an attacker who sees only the model *after* unlearning tell the removed training points
from points the model never saw (and, separately, retained training points from never-seen ones)? Three attacks:
the loss threshold (Yeom et al. 2018) and LiRA (Carlini et al. 2022) in its offline form (Gaussian fit of the
logit-scaled confidence under shadow models trained without the point) and its online form (likelihood ratio of
Gaussians fitted with and without the point). The bound column is what the guarantee allows: Chourasia & Shah
2023, Thm 4.1, Eq. (12) for Noisy-GD (with the ε_dd its certificates state), and the hypothesis-testing limit
δ + (1 − δ) tanh(ε/2) of an (ε, δ) guarantee for Guo et al.'s certified removal.

"""


# Hand-written (not the experiment's output): appended by render_document so that regenerating docs/audit.md keeps it.
OWN_MODEL_SECTION = r"""## Auditing your own model

The experiment above audits lethe's mechanisms on MNIST. To audit **your** model — the versions you published
after erasure requests — give the audit the records that were deleted and records of the same kind that the model
never trained on. For every version, the loss-threshold attack (Yeom et al. 2018; its score is the model's margin
towards the true label, which ranks records as the logistic loss does) tries to tell the deleted records from the
held-out ones; the audit reports the advantage TPR − FPR at a cross-fitted threshold with a 95 % Clopper–Pearson
interval, the ROC AUC, and the bound δ + (1 − δ) tanh(ε/2) that the version's (ε, δ) implies. A version **exceeds**
its bound when the interval's lower end is above it: the audit then fails (`audit.verdict` is `"failed"`; the
command exits with status 1). It **passes** only when it could have failed: the whole interval within the bound and
narrower than it. Otherwise — an interval wider than the bound, or crossing it — it is **inconclusive** (status 3):
too few records to tell. Each version states the audit's power: `detects`, the smallest advantage the attack could
tell from zero with these records, and `fails >`, the smallest measured advantage that would fail it.

Library (`lethe.audit.audit_model`; `audit_version` audits one version). A version is a fitted estimator (its
`decision_function`, its `classes_` and, unless given, its own `epsilon`/`delta`), a callable returning margins, or
weights (d,) / (K, d); the records are plain arrays:

```python
import numpy as np
from sklearn.linear_model import LogisticRegression
from lethe.audit import audit_model
from lethe.certified.estimators import CertifiedLogisticRegression

rng = np.random.default_rng(0)                       # 400 records, 400 features, labels that can only be memorised
X = rng.normal(size=(400, 400)); X /= np.linalg.norm(X, axis=1, keepdims=True)
y = rng.choice([-1.0, 1.0], size=400)
X_train, y_train, X_held, y_held = X[:200], y[:200], X[200:], y[200:]
X_del, y_del = X_train[:100], y_train[:100]         # the 100 records that asked to be deleted

after = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, epsilon=1.0, delta=1e-5, random_state=0).fit(X_train, y_train)
for i in range(100):
    after.remove([i])                                 # one erasure request at a time (Newton steps)
kept = LogisticRegression(C=1e6, fit_intercept=False, max_iter=5000).fit(X_train, y_train)  # never deleted

audit = audit_model([after, kept], X_del, y_del, X_held, y_held,
                    epsilon=[None, 0.5], delta=[None, 1e-5],   # None: the model's own (ε, δ)
                    names=["after", "kept"])
print(audit)
```

prints

```text
Membership-inference audit (loss-threshold attack): deleted records vs held-out records
version      advantage            95 % CI    AUC  deleted held-out   bound  detects  fails >  verdict
after           -0.055   [-0.250, +0.141]  0.498      100      200   0.462    0.195    0.657  passed: within the bound
kept            +0.785   [+0.655, +0.862]  0.879      100      200   0.245    0.130    0.374  failed: EXCEEDS the bound
Power: 'detects' is the smallest advantage the attack could tell from zero with these records;
a version fails only if its measured advantage is above 'fails >' (never: it cannot fail).
FAILED: a version's advantage exceeds the bound its guarantee implies.
```

The certified model after the 100 removals cannot tell the deleted records from never-seen ones (the interval
contains 0, far below its bound 0.462); the memorising model that kept them (the positive control, checked against
a claimed ε = 0.5) is caught. `audit.to_json()` gives the numbers.

Command line, for models saved by `CertifiedLogisticRegression.save` (one `--model-file` per published version,
oldest first), the records as CSV files with their labels:

```bash
lethe audit --model-file v1.npz --model-file v2.npz --deleted deleted.csv --heldout heldout.csv \
            --schema schema.yaml          # encode the CSVs as the model was trained (lethe.schema)
lethe audit --model-file v1.npz --deleted deleted.csv --heldout heldout.csv --label y   # numeric CSVs
```

Each version is checked against the (ε, δ) its file states (`--epsilon`/`--delta` check another claim); `--out
audit.txt` also writes the table and `audit.json`. The exit status is 0 when the audit passed, 1 when a version
exceeds its bound, 3 when it is inconclusive, 2 on bad input. `lethe audit` without `--model-file` (or
`--experiment mnist`) runs the experiment above.

A model of the curator service: `lethe audit --model NAME --deleted deleted.csv [--heldout DATASET|FILE]` audits
every version whose weights still exist (the curator destroys superseded ones), the deleted records coming from
the file (the curator erases them when their requests are processed) and each matched to the removal certificate of
the version that removed it; the held-out records default to the dataset the model was trained with
(docs/tabular.md, "Auditing the registered model"). The attack is the one the model's family declares
(`lethe.families.Family.audit`): this loss-threshold audit for certified removal, a prediction diff against the
retrained twin for a sharded model (exactness allows no difference), and a version diff on the published sequence
(`--releases`) against the rate the certificate's ε allows for a model published through private releases; each
answers passed / inconclusive / failed with its power stated.

Read the result with care:

- **An audit lower-bounds leakage.** An advantage near 0 is consistent with the guarantee but does not prove it; the
  bound holds for every attack, and this is one simple attack (the experiment above adds LiRA with shadow models).
- **Audit the versions published after the deletions.** A version that still trained on the records is not covered
  by any removal guarantee; the bound printed beside it is the claim being tested, not a promise.
- **Held-out records must be drawn like the deleted ones.** If the people who asked for deletion differ from the
  held-out people (another age group, another country), the attack measures that difference, not membership, and
  may show an advantage even for a model retrained from scratch.
- **Intervals need records.** With 100 deleted and 200 held-out records the 95 % interval is about ±0.2 wide; with
  fewer, an audit can only catch gross leakage.
- **Who may run it.** The audit needs the deleted records themselves, so only whoever still holds them can run it
  (before they are discarded, or on records kept for the purpose with consent). Its output is aggregate (counts,
  rates, intervals) and names no record.
"""


def render_document(res: dict[str, Any]) -> str:
    """The stand-alone audit report (docs/audit.md): the experiment's output, then the hand-written section
    "Auditing your own model" (:data:`OWN_MODEL_SECTION`, so that regenerating keeps it)."""
    return INTRO.format(seed=res["seed"], seconds=res["seconds"]) + res["markdown"] + "\n\n" + OWN_MODEL_SECTION


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Options of ``lethe audit``: the papers' experiment (default), or the audit of the user's own model."""
    p = parser or argparse.ArgumentParser(prog="lethe audit", description=__doc__.split("\n\n")[0])
    p.add_argument("--experiment", choices=["mnist"], default=None,
                   help="run the papers' MNIST experiment (the default when no --model-file is given)")
    own = p.add_argument_group("audit of your own model (docs/audit.md, 'Auditing your own model')")
    own.add_argument("--model-file", action="append", default=None, metavar="PATH",
                     help="a model saved by CertifiedLogisticRegression.save; repeat for every published version, "
                          "oldest first")
    own.add_argument("--model", default=None, metavar="NAME",
                     help="a model registered with the curator (lethe train): audit every version whose artifact "
                          "exists on the records deleted from it (--deleted FILE, with the dataset's key column) vs "
                          "public held-out records (--heldout DATASET|FILE; default the one it was trained with); "
                          "--data-dir and --database-url then name the curator's store (default $LETHE_DATA_DIR or "
                          "./lethe-data)")
    own.add_argument("--database-url", default=None, help="with --model: the curator's database (default "
                                                          "$LETHE_DATABASE_URL or SQLite in the data directory)")
    own.add_argument("--deleted", default=None, metavar="CSV", help="the records that were deleted, with labels")
    own.add_argument("--heldout", default=None, metavar="CSV",
                     help="records of the same kind never trained on, with labels (with --model: a registered "
                          "dataset's name or a file)")
    own.add_argument("--schema", default=None, metavar="YAML",
                     help="encode the CSVs by this schema (lethe.schema; its label column) as the model was trained")
    own.add_argument("--label", default="label", help="label column of the CSVs without --schema")
    own.add_argument("--epsilon", type=float, default=None,
                     help="check against this ε instead of the one each model file states (with --delta)")
    own.add_argument("--delta", type=float, default=None)
    own.add_argument("--alpha", type=float, default=0.05, help="the intervals have confidence 1 - alpha")
    own.add_argument("--releases", action="append", default=None, metavar="JSON",
                     help="with --model of a family that publishes releases: a published version as an observer kept "
                          "it (GET /v1/models/NAME with an operator's token); repeat for the sequence (version diff)")
    exp = p.add_argument_group("the MNIST experiment")
    exp.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    exp.add_argument("--out", default=None, help="write the Markdown report here, the numbers beside it as .json "
                                                 "(default: print it); with --model-file: the table and its .json")
    exp.add_argument("--data-dir", default=None)
    exp.add_argument("--seed", type=int, default=0)
    exp.add_argument("--trials", type=int, default=None)
    exp.add_argument("--shadows", type=int, default=None)
    exp.add_argument("--no-progress", action="store_true")
    return p


def _read_records(path: str, schema: Any, label: str) -> tuple[Any, np.ndarray]:
    """(encoded rows, labels) of a CSV: by the schema (its label column, :class:`~lethe.preprocessing.SchemaEncoder`),
    or its numeric columns with the label in column ``label``."""
    import pandas as pd

    frame = pd.read_csv(path)
    if schema is not None:
        from lethe.preprocessing import SchemaEncoder

        X, y = schema.split(frame)
        return SchemaEncoder(schema).transform(X), y
    if label not in frame.columns:
        raise ValueError(f"{path}: the label column {label!r} is missing (give --label or --schema). Found columns "
                         f"{[str(c) for c in frame.columns][:20]}.")
    y = frame.pop(label).to_numpy()
    try:
        X = frame.to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: every column but the label must be numeric without --schema.") from None
    return X, y


def _write_outputs(out: str | None, text: str, payload: dict[str, Any]) -> None:
    """With ``--out PATH``: the Markdown ``text`` at PATH and ``payload`` as JSON beside it (PATH with ``.json``)."""
    from lethe.experiments._common import write_json

    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        write_json(path.with_suffix(".json"), payload)


def run_model_audit(args: argparse.Namespace) -> int:
    """``lethe audit --model-file ...``: audit every version; exit 0 if it passed (it could have failed and did not),
    1 if a version exceeds its bound, 3 if inconclusive (an interval wider than the bound, or crossing it)."""
    from lethe.audit.model import audit_model
    from lethe.certified.estimators import CertifiedLogisticRegression

    if args.deleted is None or args.heldout is None:
        print("lethe audit: --model-file needs --deleted CSV and --heldout CSV.", file=sys.stderr)
        return 2
    try:
        schema = None
        if args.schema is not None:
            from lethe.schema import load_schema

            schema = load_schema(args.schema)
        versions = [CertifiedLogisticRegression.load(path) for path in args.model_file]
        X_del, y_del = _read_records(args.deleted, schema, args.label)
        X_held, y_held = _read_records(args.heldout, schema, args.label)
        for path, m in zip(args.model_file, versions, strict=True):
            if X_del.shape[1] != m.n_features_in_ or X_held.shape[1] != m.n_features_in_:
                raise ValueError(f"{path} was trained on {m.n_features_in_} features; the records encode to "
                                 f"{X_del.shape[1]} (deleted) and {X_held.shape[1]} (held-out). Give the --schema "
                                 "it was trained with.")
        audit = audit_model(versions, X_del, y_del, X_held, y_held, epsilon=args.epsilon, delta=args.delta,
                            alpha=args.alpha, names=[Path(p).name for p in args.model_file], random_state=args.seed)
    except (ValueError, OSError, KeyError) as exc:
        print(f"lethe audit: {exc}", file=sys.stderr)
        return 2
    text = str(audit)
    _write_outputs(args.out, text + "\n", {**audit.to_dict(), "passed": audit.passed, "verdict": audit.verdict})
    print(text)
    return _exit_code(audit.verdict)


def _exit_code(verdict: str) -> int:
    """0 passed (or nothing claimed), 1 failed, 3 inconclusive (2 is bad input)."""
    return {"failed": 1, "inconclusive": 3}.get(verdict, 0)


def run_registered_audit(args: argparse.Namespace) -> int:
    """``lethe audit --model NAME``: the audit of a curator model with the attack its family declares
    (:mod:`lethe.curator.audits`); exit 0 if it passed, 1 if it failed, 3 if inconclusive, 2 on bad input."""
    import os

    from lethe.curator.audits import audit_registered_model
    from lethe.curator.errors import CuratorError
    from lethe.curator.service import Curator
    from lethe.experiments._common import write_json

    data_dir = args.data_dir or os.environ.get("LETHE_DATA_DIR", "./lethe-data")
    if not Path(data_dir).is_dir():
        print(f"lethe audit: --data-dir must be the curator's data directory. Found {data_dir!r} (no such "
              "directory).", file=sys.stderr)
        return 2
    c = Curator(data_dir, database_url=args.database_url or os.environ.get("LETHE_DATABASE_URL"))
    try:
        result = audit_registered_model(c, args.model, args.deleted, heldout=args.heldout, epsilon=args.epsilon,
                                        delta=args.delta, alpha=args.alpha, random_state=args.seed,
                                        releases=tuple(args.releases or ()))
    except (CuratorError, ValueError, OSError) as exc:
        print(f"lethe audit: {exc}", file=sys.stderr)
        return 2
    finally:
        c.close()
    text = str(result)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")
        write_json(out.with_suffix(".json"), result.to_dict())
    print(text)
    return _exit_code(result.verdict)


def run_from_args(args: argparse.Namespace) -> int:
    """Run with parsed options (shared with the CLI subcommand)."""
    from lethe.experiments._common import QUICK

    if getattr(args, "model", None):
        if getattr(args, "experiment", None) is not None or getattr(args, "model_file", None):
            print("lethe audit: give one of --model, --model-file and --experiment.", file=sys.stderr)
            return 2
        return run_registered_audit(args)
    if getattr(args, "model_file", None):
        if getattr(args, "experiment", None) is not None:
            print("lethe audit: give either --experiment or --model-file, not both.", file=sys.stderr)
            return 2
        return run_model_audit(args)
    cfg = dict(QUICK.audit) if args.quick else dict(DEFAULTS)
    for key in ("trials", "shadows"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    try:
        res = run_audit(cfg, data_dir=args.data_dir, seed=args.seed, show_progress=not args.no_progress)
    except ValueError as exc:
        print(f"lethe audit: {exc}", file=sys.stderr)
        return 2
    text = render_document(res)
    if args.out:
        _write_outputs(args.out, text, {k: v for k, v in res.items() if k != "markdown"})
    else:
        print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``lethe audit`` / ``python -m lethe.experiments.audit``."""
    return run_from_args(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

"""The membership-inference audit of lethe's unlearning (``lethe audit``).

Set-up (per trial, pooled over trials). From MNIST 3 vs 8 (train and test pooled, 784 pixels, rows
L2-normalised) draw a training set D; in it, a set R of points that will be removed and a set T that stays;
outside it, a set U of never-seen points. R, T and U have the same size and are random, so "removed", "retained" and
"never seen" are exchangeable apart from what the model did with them. Targets:

* ``plain`` — non-private logistic regression with a tiny λ (memorises: the positive control), nothing removed: its
  "removed" points are in fact still trained on, so an attack must tell them from U;
* ``plain-retrained`` — the same model retrained from scratch on D ∖ R (exact unlearning);
* ``certified`` — :class:`lethe.estimators.CertifiedLogisticRegression` (Guo et al.) after ``remove(R)``;
* ``noisygd`` — :class:`lethe.noisygd.estimators.NoisyGDLogisticRegression` (Chourasia & Shah) after ``remove(R)``.

Attacks (:mod:`lethe.audit.attacks`): loss threshold, and offline LiRA with shadow models trained by the same
procedure on data disjoint from R, T and U. Reported: advantage of "removed vs never seen" and "retained vs never
seen" with Clopper–Pearson intervals (:mod:`lethe.audit.stats`), beside the bound of the guarantee.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lethe.audit.attacks import lira_offline_scores, logit_confidence
from lethe.audit.stats import advantage, dp_advantage_bound, eq12_advantage_bound

DEFAULTS = {"n_train": 400, "n_candidates": 150, "trials": 4, "shadows": 16}
PLAIN_LAM = 1e-6  # effectively unregularised: memorises at n ≈ d
CR: dict[str, Any] = {"lam": 1e-2, "sigma": 10.0, "epsilon": 1.0, "delta": 1e-4}
NGD: dict[str, Any] = {"lam": 0.01, "q": 10.0, "epsilon_dp": 1.0, "epsilon_dd": 0.5}


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
    from lethe.estimators import CertifiedLogisticRegression

    out: dict[str, Callable[[], Any]] = {
        "plain": lambda: _Plain(PLAIN_LAM),
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
    from lethe.experiments.reproduce import pool_images

    X, y, Xt, yt = load_mnist_binary(3, 8, data_dir=data_dir)
    Xall = np.vstack([X, Xt])
    return (pool_images(Xall, pool) if pool > 1 else Xall), np.concatenate([y, yt])


def run_audit(config: dict[str, Any] | None = None, *, data_dir: str | None = None, seed: int = 0,
              show_progress: bool = True, population: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """Run the audit; returns per-target, per-attack advantages with intervals and bounds, and a Markdown table."""
    from lethe.experiments._common import progress

    cfg = {**DEFAULTS, **(config or {})}
    n, m, trials, k_sh = int(cfg["n_train"]), int(cfg["n_candidates"]), int(cfg["trials"]), int(cfg["shadows"])
    Xp, yp = population if population is not None else load_population(data_dir)
    rng = np.random.default_rng(seed)
    facts = _factories(rng)
    scores: dict[str, dict[str, dict[str, list[np.ndarray]]]] = {
        t: {a: {"removed": [], "retained": [], "unseen": []} for a in ("loss", "lira")} for t in facts}
    certs: dict[str, list[float]] = {"certified_retrained": [], "noisygd_epsilon_dd": [], "noisygd_epsilon_dp": [],
                                     "train_acc_plain": []}
    jobs = [(trial, t) for trial in range(trials) for t in facts]
    for trial, target in progress(jobs, desc="audit (trial, target)", enabled=show_progress):
        trng = np.random.default_rng([seed, trial])
        perm = trng.permutation(Xp.shape[0])
        D, U, shadow_pool = perm[:n], perm[n:n + m], perm[n + m:]
        R, T = D[:m], D[m:2 * m]
        cand = np.concatenate([R, T, U])
        model = facts[target]()
        if target == "plain-retrained":
            model.fit(Xp[D[m:]], yp[D[m:]])
        else:
            model.fit(Xp[D], yp[D])
        if target == "plain":
            certs["train_acc_plain"].append(float(np.mean(np.sign(model.decision_function(Xp[D])) == yp[D])))
        if target in ("certified", "noisygd"):
            cert = model.remove(np.arange(m))  # R = D[:m] are rows 0..m-1 of the training set
            if target == "certified":
                certs["certified_retrained"].append(float(cert.retrained))
            else:
                certs["noisygd_epsilon_dd"].append(float(cert.epsilon_dd))
                certs["noisygd_epsilon_dp"].append(float(cert.epsilon_dp))
        phi = logit_confidence(model, Xp[cand], yp[cand])
        shadow_phis = []
        for _ in range(k_sh):
            S = trng.choice(shadow_pool, size=n - m if target != "plain" else n, replace=False)
            sh = facts[target]().fit(Xp[S], yp[S])
            shadow_phis.append(logit_confidence(sh, Xp[cand], yp[cand]))
        lira = lira_offline_scores(phi, shadow_phis)
        loss = -np.logaddexp(0.0, -phi)
        for attack, s in (("loss", loss), ("lira", lira)):
            scores[target][attack]["removed"].append(s[:m])
            scores[target][attack]["retained"].append(s[m:2 * m])
            scores[target][attack]["unseen"].append(s[2 * m:])

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
        for attack in ("loss", "lira"):
            sc = {k: np.concatenate(v) for k, v in scores[target][attack].items()}
            for which in ("removed", "retained"):
                adv = advantage(sc[which], sc["unseen"], random_state=seed)
                b, why = bounds.get((target, which), (math.nan, "no guarantee"))
                rows.append({"target": target, "attack": attack, "question": f"{which} vs never seen",
                             **adv.to_dict(), "bound": b, "bound_source": why,
                             "exceeds_bound": bool(adv.low > b) if not math.isnan(b) else None})
    pc = [r for r in rows if r["target"] == "plain" and r["question"] == "retained vs never seen"]
    positive_control_ok = any(r["low"] > 0.05 for r in pc)
    devs = []
    if not positive_control_ok:
        devs.append("The audit's positive control (plain model) did not show an advantage clearly above zero: the "
                    "attacks are too weak here to say anything about the private models.")
    if any(r["exceeds_bound"] for r in rows):
        devs.append("An attack's advantage interval lies entirely above a guarantee's bound: investigate.")
    res = {"config": cfg, "rows": rows, "positive_control_ok": positive_control_ok, "certificates": certs,
           "deviations": devs}
    res["markdown"] = render_markdown(res)
    return res


def render_markdown(res: dict[str, Any]) -> str:
    """The audit table as Markdown."""
    cfg = res["config"]
    acc = res["certificates"]["train_acc_plain"]
    lines = [f"Per trial: |D| = {cfg['n_train']} training points, {cfg['n_candidates']} removed, "
             f"{cfg['n_candidates']} retained and {cfg['n_candidates']} never-seen candidates; {cfg['trials']} trials "
             f"pooled; offline LiRA with {cfg['shadows']} shadow models per target and trial. Advantage = TPR − FPR "
             "at a cross-fitted threshold, with a 95 % Clopper–Pearson interval (Bonferroni over TPR and FPR). "
             f"Plain model: λ = {PLAIN_LAM:g} (training accuracy {100 * np.mean(acc):.1f} %). Certified: λ = "
             f"{CR['lam']:g}, σ = {CR['sigma']:g}, ε = {CR['epsilon']:g}, δ = {CR['delta']:g} (retrained at removal "
             f"in {int(sum(res['certificates']['certified_retrained']))} of {cfg['trials']} trials). Noisy-GD: "
             f"λ = {NGD['lam']:g}, q = {NGD['q']:g}, ε_dp = {NGD['epsilon_dp']:g}, Eq. 19 schedule.", "",
             "| target | attack | question | advantage | 95 % CI | AUC | bound | bound from |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        b = "—" if math.isnan(r["bound"]) else f"{r['bound']:.3f}"
        lines.append(f"| {r['target']} | {r['attack']} | {r['question']} | {r['advantage']:+.3f} | "
                     f"[{r['low']:+.3f}, {r['high']:+.3f}] | {r['auc']:.3f} | {b} | {r['bound_source']} |")
    lines += ["", "Positive control (plain model, retained vs never seen): "
              + ("clearly non-zero advantage — the attacks have power." if res["positive_control_ok"]
                 else "NOT clearly non-zero — the attacks are too weak to support conclusions.")]
    return "\n".join(lines)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Options of ``lethe audit``."""
    p = parser or argparse.ArgumentParser(prog="lethe audit", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    p.add_argument("--out", default=None, help="write the Markdown report here (default: print it)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trials", type=int, default=None)
    p.add_argument("--shadows", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    return p


def run_from_args(args: argparse.Namespace) -> int:
    """Run with parsed options (shared with the CLI subcommand)."""
    from lethe.experiments._common import QUICK, write_json

    cfg = dict(QUICK.audit) if args.quick else dict(DEFAULTS)
    for key in ("trials", "shadows"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    res = run_audit(cfg, data_dir=args.data_dir, seed=args.seed, show_progress=not args.no_progress)
    text = "# Membership-inference audit\n\n" + res["markdown"] + "\n"
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        write_json(out.with_suffix(".json"), {k: v for k, v in res.items() if k != "markdown"})
    else:
        print(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``lethe audit`` / ``python -m lethe.audit.experiment``."""
    return run_from_args(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

"""Guo et al. 2020, §4.1 on MNIST 3 vs 8: Fig. 1 (λ, σ, ε, supported removals), Fig. 2 (gradient-residual bounds
vs removals), Fig. 3 (digits with the largest / smallest ‖H⁻¹Δ‖) and Table 1 (removal vs training time).

Everything is measured in the run: accuracies, the certified step bounds of Cor. 1/2 (as computed by
:meth:`lethe.certified.mechanism.CertifiedRemoval.newton_step`), the worst-case bounds of Thm 1/4, the exact gradient
residual ‖∇L_b(w; D′)‖, and wall-clock times. Nothing here holds math of its own: the harness calls the mechanism.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from lethe.certified import objective as obj
from lethe.certified.influence import influence_norms
from lethe.certified.mechanism import CertifiedRemoval, ModelState, NewtonCache
from lethe.certified.noise import gaussian_c
from lethe.experiments._common import Profile, Timer, integer_ticks, progress, pyplot

DELTA = 1e-4  # Guo et al. 2020, §4.1: "Removal is performed using Algorithm 2 with δ = 1e-4"
REF_LAM, REF_SIGMA = 1e-3, 10.0  # the paper's reference setting (≈ 95 % test accuracy)


def accuracy(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """Fraction of rows with sign(wᵀx) = y (y ∈ {−1, +1})."""
    return float(np.mean(np.where(X @ w > 0, 1.0, -1.0) == y))


def newton_trace(mech: CertifiedRemoval, state: ModelState, X: np.ndarray, y: np.ndarray,
                 batches: list[np.ndarray], *, exact: bool = False, show_progress: bool = True,
                 desc: str = "removing") -> dict[str, Any]:
    """Apply the Newton removal step (Eq. 3 / Eq. 6) for each batch *without* the budget check of Alg. 2.

    This is a measurement harness (Fig. 2 and the step probes of Fig. 1): it records, per batch, the certified
    step bound (Cor. 1/2, or the tight bounds of docs/tighter_bounds.md if ``mech.bound == "tight"``), the
    accumulated certified residual bound β after the step (as :meth:`CertifiedRemoval.remove` would publish it:
    β + step bound, or the smaller vector-accounting bound of the tight mode), the worst-case bound (Thm 1/4), the
    time of the step and, if ``exact``, the exact gradient residual ‖∇L_b(w; D′)‖₂ after the step. Returns lists
    plus the final state.
    """
    active = np.ones(X.shape[0], dtype=bool)
    cache = NewtonCache()
    steps, bounds, worst, secs, resid = [], [], [], [], []
    for batch in progress(batches, desc=desc, enabled=show_progress):
        keep = active.copy()
        keep[batch] = False
        with Timer() as t:
            r = mech.step(state, X, y, keep, batch, cache)
        beta = state.residual_bound + r.step_bound  # Guo et al.'s induction over the steps
        if r.accumulated_bound is not None:  # tight mode: the vector accounting (docs/tighter_bounds.md §4)
            beta = min(beta, r.accumulated_bound)
        state = dataclasses.replace(state, w=r.w_new, n=int(keep.sum()), residual_bound=beta,
                                    removals_since_training=state.removals_since_training + batch.size)
        active = keep
        steps.append(r.step_bound)
        bounds.append(beta)
        worst.append(r.worst_case)
        secs.append(t.seconds)
        if exact:
            g = obj.objective_grad(state.w, X, y, mech.loss_, mech.lam, state.b, mask=active)
            resid.append(float(np.linalg.norm(g)))
    return {"steps": np.array(steps), "bounds": np.array(bounds), "worst": np.array(worst),
            "seconds": np.array(secs), "exact": np.array(resid), "state": state, "active": active}


def _within(curve: np.ndarray, budget: float, per_step: int) -> int:
    """Removals done before the accumulated bound first exceeds the budget (Alg. 2 would retrain there)."""
    over = np.flatnonzero(curve > budget)
    return per_step * int(over[0] if over.size else curve.size)


def _single_batches(order: np.ndarray, k: int) -> list[np.ndarray]:
    return [order[i:i + 1] for i in range(k)]


def sigma_for_removals(rows: list[dict[str, Any]], epsilon: float, removals: int, c: float,
                       margin: float = 1.25) -> float | None:
    """Smallest σ with σε/c ≥ β₀ + margin · removals · s̄(σ), s̄ interpolated log-log over the probed σ grid.

    ``rows`` are Fig. 1 grid rows of one λ (keys sigma, mean_step, train_residual). Returns None if no σ in the
    probed range qualifies (σ is not extrapolated).
    """
    rows = sorted(rows, key=lambda r: r["sigma"])
    ls = np.log([r["sigma"] for r in rows])
    lstep = np.log([r["mean_step"] for r in rows])
    beta0 = max(r["train_residual"] for r in rows)
    for lsig in np.linspace(ls[0], ls[-1], 400):
        sig = float(np.exp(lsig))
        need = beta0 + margin * removals * float(np.exp(np.interp(lsig, ls, lstep)))
        if sig * epsilon / c >= need:
            return sig
    return None


# -- Fig. 1 -------------------------------------------------------------------------------------------------------
def run_fig1(data: tuple[np.ndarray, ...], profile: Profile, outdir: Path, seed: int = 0,
             show_progress: bool = True) -> dict[str, Any]:
    """Fig. 1: accuracy vs (λ, σ); accuracy vs ε at a fixed number of removals; accuracy vs supported removals."""
    X, y, Xt, yt = data
    rng = np.random.default_rng(seed)
    grid = []
    cells = [(lam, sig) for lam in profile.lambdas for sig in profile.sigmas]
    for lam, sig in progress(cells, desc="Fig. 1 grid (lambda, sigma)", enabled=show_progress):
        mech = CertifiedRemoval(loss="logistic", lam=lam, sigma=sig, epsilon=1.0, delta=DELTA, solver="refine")
        with Timer() as t:
            state, cert = mech.train(X, y, random_state=rng)
        order = rng.permutation(X.shape[0])
        tr = newton_trace(mech, state, X, y, _single_batches(order, profile.probe_removals), show_progress=False)
        mean_step = float(np.mean(tr["steps"]))
        free = mech.budget - state.residual_bound
        grid.append({"lam": lam, "sigma": sig, "accuracy": accuracy(state.w, Xt, yt), "train_seconds": t.seconds,
                     "budget": mech.budget, "train_residual": state.residual_bound, "mean_step": mean_step,
                     "max_step": float(np.max(tr["steps"])),
                     "supported_removals": int(max(free, 0.0) // mean_step) if mean_step > 0 else None})

    # middle: the smallest σ whose budget ε′ = σε/c (Alg. 2, line 16) fits `fig1_removals` mean probed steps at
    # each ε, interpolating log(mean step) in log σ over the probed grid; then trained and checked by removing
    c = gaussian_c(DELTA)
    R = profile.fig1_removals
    eps_rows = []
    cells2 = [(lam, eps) for lam in profile.fig1_lambdas for eps in profile.fig1_epsilons]
    for lam, eps in progress(cells2, desc=f"Fig. 1 accuracy vs epsilon at {R} removals", enabled=show_progress):
        sigma = sigma_for_removals([g for g in grid if g["lam"] == lam], eps, R, c)
        row: dict[str, Any] = {"lam": lam, "epsilon": eps, "sigma": sigma, "removals": R}
        if sigma is None:  # no σ in the probed range supports R removals at this ε
            eps_rows.append(row | {"accuracy_before": math.nan, "accuracy_after": math.nan, "retrainings": None,
                                   "budget_used": math.nan})
            continue
        mech = CertifiedRemoval(loss="logistic", lam=lam, sigma=sigma, epsilon=eps, delta=DELTA, solver="refine")
        state, _ = mech.train(X, y, random_state=rng)
        acc0 = accuracy(state.w, Xt, yt)
        active = np.ones(X.shape[0], dtype=bool)
        cache = NewtonCache()
        retrained = 0
        for i in rng.permutation(X.shape[0])[:R]:
            state, cert = mech.remove(state, X, y, [int(i)], active=active, cache=cache, random_state=rng,
                                      check_input=False)
            active[i] = False
            retrained += int(cert.retrained)
        eps_rows.append(row | {"accuracy_before": acc0, "accuracy_after": accuracy(state.w, Xt, yt),
                               "retrainings": retrained, "budget_used": state.residual_bound / mech.budget})

    path = plot_fig1(grid, eps_rows, profile, X.shape[0], outdir)
    return {"grid": grid, "epsilon": eps_rows, "png": path.name}


def plot_fig1(grid: list[dict[str, Any]], eps_rows: list[dict[str, Any]], profile: Profile, n_train: int,
              outdir: Path) -> Path:
    """Draw Fig. 1 from its measurements (``results.json``'s ``fig1``); returns the PNG's path."""
    R = profile.fig1_removals
    plt = pyplot()
    from matplotlib.lines import Line2D

    # σ is a marker shape in every panel and a shade of viridis in the left one; λ is a colour in the middle and
    # right panels. Two legends below the panels, no text on the data (labels overlapped at the full profile)
    markers = dict(zip(profile.sigmas, "osD^vPX*h", strict=False))
    cmap = plt.get_cmap("viridis")
    sig_colors = {sig: cmap(k / max(len(profile.sigmas) - 1, 1) * 0.9) for k, sig in enumerate(profile.sigmas)}
    lam_colors = {lam: f"C{k}" for k, lam in enumerate(sorted(set(profile.lambdas) | set(profile.fig1_lambdas)))}
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.4))
    ax = axes[0]
    for sig in profile.sigmas:
        rows = [g for g in grid if g["sigma"] == sig]
        ax.plot([g["lam"] for g in rows], [g["accuracy"] for g in rows], "-", marker=markers.get(sig, "o"),
                color=sig_colors[sig])
    ax.set(xscale="log", xlabel="λ", ylabel="test accuracy", title="accuracy vs λ and σ")
    ax = axes[1]
    for lam in profile.fig1_lambdas:
        rows = [r for r in eps_rows if r["lam"] == lam]
        ax.plot([r["epsilon"] for r in rows], [r["accuracy_after"] for r in rows], "o-", color=lam_colors[lam])
    ax.set(xscale="log", xlabel="ε", ylabel="test accuracy", title=f"accuracy vs ε, {R} removals supported")
    ax = axes[2]
    for lam in profile.lambdas:
        rows = [g for g in grid if g["lam"] == lam and g["supported_removals"]]
        ax.plot([g["supported_removals"] for g in rows], [g["accuracy"] for g in rows], "-", color=lam_colors[lam])
        for g in rows:
            ax.plot(g["supported_removals"], g["accuracy"], ls="none", marker=markers.get(g["sigma"], "o"),
                    color=lam_colors[lam], markersize=7)
    ax.set(xscale="log", xlabel="expected supported removals (ε = 1)", ylabel="test accuracy",
           title="accuracy vs supported removals")
    sig_handles = [Line2D([], [], marker=markers.get(sig, "o"), color=sig_colors[sig], label=f"σ = {sig:g}")
                   for sig in profile.sigmas]
    lam_handles = [Line2D([], [], color=lam_colors[lam], lw=2, label=f"λ = {lam:g}") for lam in lam_colors]
    fig.legend(handles=sig_handles, title="σ: marker (all panels), colour (left)", loc="lower center",
               bbox_to_anchor=(0.33, 0.0), ncol=min(len(sig_handles), 7), fontsize=10, title_fontsize=10,
               frameon=False)
    fig.legend(handles=lam_handles, title="λ: colour (middle, right)", loc="lower center",
               bbox_to_anchor=(0.80, 0.0), ncol=min(len(lam_handles), 4), fontsize=10, title_fontsize=10,
               frameon=False)
    fig.suptitle(f"Guo et al. Fig. 1 — MNIST 3 vs 8, n = {n_train} ({profile.name} profile)")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    path = outdir / "fig1_lambda_sigma_epsilon.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# -- Fig. 2 and Fig. 3 ------------------------------------------------------------------------------------------
def plot_fig2(curves: dict[str, np.ndarray], n_single: np.ndarray, n_batch: np.ndarray, budget: float,
              budget_analytic: float, n_train: int, outdir: Path) -> Path:
    """Draw Fig. 2 from its traces (accumulated bounds and true residuals per removal); returns the PNG's path."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    # colour = which quantity, line style = single removals (solid) or batches of 10 (dashed): 7 legend entries
    # for 10 curves, the budgets labelled on the plot
    fig, ax = plt.subplots(figsize=(8.0, 6.4))
    kinds = [("worst", "tab:blue", "worst case (Thm 1 / Thm 4)"),
             ("data", "tab:green", "data-dependent (Cor. 1 / Cor. 2)"),
             ("tight", "tab:orange", "tight data-dependent (this library)"),
             ("exact", "black", "true residual ‖∇L_b(w; D′)‖"),
             ("tight_exact", "tab:grey", "true residual of the tight-mode run")]
    for key, color, _ in kinds:
        lw = 1.0 if key == "tight_exact" else 1.6
        ax.plot(n_single, curves[f"single_{key}"], "-", color=color, lw=lw)
        ax.plot(n_batch, curves[f"batch_{key}"], "--", color=color, lw=lw)
    ax.axhline(budget, color="red", lw=1.0)
    ax.axhline(budget_analytic, color="red", lw=1.0, ls=":")
    # the analytic calibration's budget is never below the paper's (Balle & Wang): its label above, the other below
    for y_budget, text, va in ((budget, f"budget ε′ = σε/c (σ = {REF_SIGMA:g}, ε = 1)", "top"),
                               (budget_analytic, "budget ε′, analytic calibration (dotted)", "bottom")):
        ax.annotate(text, (0.03, y_budget), xycoords=("axes fraction", "data"), color="red", fontsize=9, ha="left",
                    va=va, xytext=(0, -2 if va == "top" else 2), textcoords="offset points",
                    bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.6})
    handles = [Line2D([], [], color=c, lw=1.6, label=lab) for _, c, lab in kinds]
    handles += [Line2D([], [], color="dimgrey", ls="-", label="single removals"),
                Line2D([], [], color="dimgrey", ls="--", label="batches of 10")]
    ax.set(yscale="log", xlabel="number of removed points", ylabel="gradient residual norm (accumulated bound)",
           title=f"Guo et al. Fig. 2 — λ = {REF_LAM:g}, n = {n_train}")
    integer_ticks(ax.xaxis)
    ax.legend(handles=handles, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=2, frameon=False)
    fig.tight_layout()
    path = outdir / "fig2_residual_bounds.png"
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return path


def run_fig2_fig3(data: tuple[np.ndarray, ...], profile: Profile, outdir: Path, seed: int = 0,
                  show_progress: bool = True) -> dict[str, Any]:
    """Fig. 2: cumulative gradient-residual bounds vs number of removals; Fig. 3: extreme ‖H⁻¹Δ‖ digits."""
    X, y, Xt, yt = data
    rng = np.random.default_rng(seed + 1)
    mech = CertifiedRemoval(loss="logistic", lam=REF_LAM, sigma=REF_SIGMA, epsilon=1.0, delta=DELTA, solver="refine")
    state, _ = mech.train(X, y, random_state=rng)
    k = profile.fig2_removals
    order = rng.permutation(X.shape[0])[:k]
    single = newton_trace(mech, state, X, y, _single_batches(order, k), exact=True, show_progress=show_progress,
                          desc="Fig. 2 single removals")
    batches = [order[i:i + 10] for i in range(0, k - k % 10, 10)]
    batch = newton_trace(mech, state, X, y, batches, exact=True, show_progress=show_progress,
                         desc="Fig. 2 batches of 10")
    # the tighter bounds of the fast-removal work, on the same trained model, removal sequence and solver; the tight
    # mode also carries each step's measured solve error into the next (docs/tighter_bounds.md §4), so its weights
    # differ slightly and its true residual is traced separately; analytic calibration changes the budget only
    tight = dataclasses.replace(mech, bound="tight", calibration="analytic")
    single_t = newton_trace(tight, state, X, y, _single_batches(order, k), exact=True, show_progress=show_progress,
                            desc="Fig. 2 single removals (tight bound)")
    batch_t = newton_trace(tight, state, X, y, batches, exact=True, show_progress=show_progress,
                           desc="Fig. 2 batches of 10 (tight bound)")
    beta0 = state.residual_bound
    n_single = np.arange(1, k + 1)
    n_batch = 10 * np.arange(1, len(batches) + 1)
    curves = {
        "single_worst": np.cumsum(single["worst"]), "single_data": beta0 + np.cumsum(single["steps"]),
        "batch_worst": np.cumsum(batch["worst"]), "batch_data": beta0 + np.cumsum(batch["steps"]),
        "single_exact": single["exact"], "batch_exact": batch["exact"],
        "single_tight": single_t["bounds"], "batch_tight": batch_t["bounds"],
        "single_tight_exact": single_t["exact"], "batch_tight_exact": batch_t["exact"],
    }
    p2 = plot_fig2(curves, n_single, n_batch, mech.budget, tight.budget, X.shape[0], outdir)
    plt = pyplot()

    # Fig. 3 on the trained (pre-removal) model
    infl = influence_norms(mech, state, X, y)
    top = np.argsort(infl)[::-1][:10]
    bottom = np.argsort(infl)[:10]
    side = int(round(math.sqrt(X.shape[1])))
    fig, axes = plt.subplots(2, 10, figsize=(10, 2.6))
    for row, idx, name in ((0, top, "largest"), (1, bottom, "smallest")):
        for j, i in enumerate(idx):
            a = axes[row, j]
            a.imshow(X[i].reshape(side, side), cmap="gray")
            a.set_xticks([])
            a.set_yticks([])
            a.set_title(f"{infl[i]:.2g}", fontsize=7)
        axes[row, 0].set_ylabel(name, fontsize=8)
    fig.suptitle("Guo et al. Fig. 3 — training digits with the largest (top) and smallest (bottom) ‖H⁻¹Δ‖")
    fig.tight_layout()
    p3 = outdir / "fig3_influence_digits.png"
    fig.savefig(p3, dpi=90)
    plt.close(fig)

    last = {key: float(v[-1]) for key, v in curves.items()}
    return {"n_removed": k, "budget": mech.budget, "budget_analytic": tight.budget, "train_residual": beta0,
            "final": last, "tighter": True, "tight_config": {"bound": tight.bound, "calibration": tight.calibration,
                                                             "solver": tight.solver},
            "ratio_worst_to_data_single": last["single_worst"] / last["single_data"],
            "ratio_data_to_exact_single": last["single_data"] / max(last["single_exact"], 1e-300),
            "ratio_data_to_exact_batch": last["batch_data"] / max(last["batch_exact"], 1e-300),
            "ratio_tight_to_exact_single": last["single_tight"] / max(last["single_tight_exact"], 1e-300),
            "ratio_tight_to_exact_batch": last["batch_tight"] / max(last["batch_tight_exact"], 1e-300),
            "ratio_data_to_tight_single": last["single_data"] / last["single_tight"],
            "ratio_data_to_tight_batch": last["batch_data"] / last["batch_tight"],
            # along the whole traces (every step), not only at the end: soundness and the gain of the tight bound
            "min_ratio_data_to_exact": float(min(np.min(curves["single_data"] / curves["single_exact"]),
                                                 np.min(curves["batch_data"] / curves["batch_exact"]))),
            "min_ratio_tight_to_exact": float(min(np.min(curves["single_tight"] / curves["single_tight_exact"]),
                                                  np.min(curves["batch_tight"] / curves["batch_tight_exact"]))),
            "max_ratio_tight_to_data": float(max(np.max(curves["single_tight"] / curves["single_data"]),
                                                 np.max(curves["batch_tight"] / curves["batch_data"]))),
            "removals_within_budget": {
                "single_data": _within(curves["single_data"], mech.budget, 1),
                "single_tight": _within(curves["single_tight"], tight.budget, 1),
                "batch_data": _within(curves["batch_data"], mech.budget, 10),
                "batch_tight": _within(curves["batch_tight"], tight.budget, 10)},
            "mean_step_single": float(np.mean(single["steps"])), "mean_step_batch": float(np.mean(batch["steps"])),
            "influence": {"largest": [float(infl[i]) for i in top], "smallest": [float(infl[i]) for i in bottom],
                          "largest_labels": [int(y[i]) for i in top], "smallest_labels": [int(y[i]) for i in bottom],
                          "median": float(np.median(infl))},
            "accuracy": accuracy(state.w, Xt, yt), "accuracy_after_single": accuracy(single["state"].w, Xt, yt),
            "png_fig2": p2.name, "png_fig3": p3.name}


# -- Table 1 ------------------------------------------------------------------------------------------------------
TABLE1_MODES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("refine", dict(bound="paper", calibration="paper", solver="refine")),
    ("cholesky", dict(bound="paper", calibration="paper", solver="cholesky")),
    ("pcg", dict(bound="tight", calibration="analytic", solver="pcg")),
    ("onepass", dict(bound="tight", calibration="analytic", solver="onepass")),
    ("anchor", dict(bound="tight", calibration="analytic", solver="anchor", refresh="never")),
)


def run_table1(data: tuple[np.ndarray, ...], profile: Profile, seed: int = 0,
               show_progress: bool = True) -> dict[str, Any]:
    """Table 1 (MNIST column): time of one certified removal (Alg. 2 incl. the budget) against retraining, per
    solver. Timed with one BLAS thread for both sides (robust to other load on a shared machine). Two retraining
    times: Alg. 2's retraining on the remaining rows (L-BFGS with a fresh b, the ‖X‖₂ bound reused — the smaller,
    conservative denominator of ``speedup``) and a fit from scratch (incl. the ‖X‖₂ bound)."""
    from threadpoolctl import threadpool_limits

    X, y, Xt, yt = data
    rng = np.random.default_rng(seed + 2)
    out: dict[str, Any] = {}
    with threadpool_limits(1):
        for solver, kw in TABLE1_MODES:
            k = profile.table1_cholesky_removals if solver == "cholesky" else profile.table1_removals
            mech = CertifiedRemoval(loss="logistic", lam=REF_LAM, sigma=REF_SIGMA, epsilon=1.0, delta=DELTA, **kw)
            cache = None if solver == "cholesky" else NewtonCache()
            with Timer() as t:
                state, _ = mech.train(X, y, random_state=rng, cache=cache)
            active = np.ones(X.shape[0], dtype=bool)
            times, retrained = [], 0
            for i in progress(rng.permutation(X.shape[0])[:k], desc=f"Table 1 removals ({solver})", total=k,
                              enabled=show_progress):
                state, cert = mech.remove(state, X, y, [int(i)], active=active, cache=cache, random_state=rng,
                                          check_input=False)
                active[i] = False
                times.append(cert.seconds)
                retrained += int(cert.retrained)
            with Timer() as t_re:
                mech.retrain(state, X, y, active, rng, cache=None)
            with Timer() as t_fit:
                mech.train(X[active], y[active], random_state=rng)
            med = float(np.median(times))
            out[solver] = {"bound": kw["bound"], "train_seconds": t.seconds, "retrain_seconds": t_re.seconds,
                           "fit_seconds": t_fit.seconds, "removal_median_seconds": med,
                           "removal_mean_seconds": float(np.mean(times)), "removals": k, "retrainings": retrained,
                           "speedup": t_re.seconds / med, "speedup_fit": t_fit.seconds / med,
                           "accuracy": accuracy(state.w, Xt, yt)}
    return out


def deviations(results: dict[str, Any]) -> list[str]:
    """Plain statements of where this run's set-up or numbers differ from the paper's, computed from the results."""
    out = ["Fig. 1 'supported removals' is the *expected* count (budget minus training residual, divided by the mean "
           "certified step of a few probed random removals), as in the paper; Fig. 1 middle chooses σ per ε from "
           "those probes (25 % margin) and then performs the removals, reporting any retraining.",
           "Fig. 2 traces the Newton steps without Alg. 2's budget check so that the bounds can be followed past "
           "the budget; the plotted data-dependent curve includes the training residual.",
           "Timing (Table 1): `cholesky` is the paper's method (rebuild and factorise the Hessian per removal); "
           "`refine` (paper bound) and `pcg` (tight bound, the estimators' default) solve with a cached "
           "factorisation and measure the solve error; `onepass` and `anchor` are lethe's faster solvers "
           "(docs/tighter_bounds.md §5, §5b). The paper measured on a GPU with PyTorch, we on 2 CPU cores, one BLAS "
           "thread."]
    ref = [r for r in results["fig1"]["grid"] if r["lam"] == 1e-3 and r["sigma"] == 10.0]
    if ref and ref[0]["accuracy"] < 0.93:
        out.append(f"Accuracy at λ = 1e-3, σ = 10 is {100 * ref[0]['accuracy']:.1f} %, below the paper's ≈ 95 %: "
                   f"with n = {results['data']['n_train']} the regulariser λn and the data term are smaller "
                   "relative to b (‖w‖ grows like σ√d / (λn)).")
    t1 = results["table1"]
    slow = {k: r["speedup"] for k, r in t1.items() if k != "cholesky" and r["speedup"] < 100}
    if slow:
        out.append("Removal vs Alg. 2's retraining (the conservative ratio; a fit from scratch also recomputes the "
                   "‖X‖₂ bound): " + ", ".join(f"`{k}` {v:.0f}×" for k, v in slow.items()) + " — below two orders "
                   "of magnitude. A removal with the exact Hessian costs one Hessian-vector product, two passes over "
                   "the data, while L-BFGS retraining here needs only some 30–40 gradient evaluations; `onepass` "
                   "reads the data once in single precision and `anchor` not at all. Timed with one BLAS thread on "
                   "a 2-core machine shared with other jobs; the paper timed a GPU implementation.")
    fin = results["fig2"]["final"]
    if fin["single_worst"] / fin["single_data"] < 100:
        out.append("The worst-case bound is less than two orders of magnitude above the data-dependent one here.")
    return out

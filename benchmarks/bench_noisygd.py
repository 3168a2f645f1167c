"""Benchmark: Noisy-GD unlearning (Ā) vs retraining with A on MNIST 3 vs 8 (Chourasia & Shah 2023, Thm 5.1).

Logistic loss on L2-normalised rows (‖x‖ ≤ 1, no intercept), so L = 1 and β = 1/4; λ = 1e-2 (κ = 26), q = 10,
ε_dp = 1, ε_dd ∈ {0.1, 0.5}. For r ∈ {1, 10}, a fixed (non-adaptive) sequence of 20 edit requests deletes r
random training records each (replacement by the dummy zero record). At every step the published model Θ̂_i = Ā(…)
is compared with a model retrained from scratch with A on D_i.

The published model is random (that is the point of Noisy-GD), so one unlearned model against one retrained model
measures mostly noise. The accuracy comparison therefore runs R independent chains (``--chains``, default 16) of
each: R unlearning chains per schedule (all starting from R independent runs of A on D₀) and R fresh runs of A on
D_i at every step i. The R chains run together as one matrix Θ (d × R) through
:func:`lethe.noisygd.algorithm.noisy_gd_chains`, so a full-batch gradient is one GEMM. Per step the benchmark
reports the mean test accuracy of each, the gap of means with a 95 % Welch t confidence interval, and, as before,
the single-chain comparison (chain 0 vs retraining chain 0) and the single-chain noise floor (retraining chain 1
vs retraining chain 0: two independent retrainings with A). The target "within 0.5 pp of retraining at every
step" is checked on the gap of means: on the point estimate, and on the confidence interval (CI inside ±0.5 pp).

Gradient evaluations are counted per chain (n·K). Speed-up is timed on *single* chains (``noisy_gd`` on one θ,
the code path the curator runs) at a few steps (``--timed-steps``): Ā from the current unlearned model and A from
ρ on the same D_i, interleaved so both see the same machine load; wall and process CPU time, next to Thm 5.1's
predicted ratio K_A/K_Ā. The multi-chain blocks' times are printed too, for information only.

Figures are printed; nothing is asserted (benchmarks are not tests). ``--quick`` runs 5 edits instead of 20.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_noisygd.py [--quick] [--chains R] [--r 1 10]``.
"""

from __future__ import annotations

import argparse
import math
import time
from functools import partial

import numpy as np
from scipy import stats

from lethe.datasets import load_mnist_binary
from lethe.noisygd.algorithm import noisy_gd, noisy_gd_chains
from lethe.noisygd.models import LogisticModel
from lethe.noisygd.schedule import convex_deletion_epsilon, convex_schedule

LAM, Q, EPS_DP = 1e-2, 10.0, 1.0
TARGET_PP = 0.5


def accuracies(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Test accuracy of every column of θ (d, R), shape (R,)."""
    return np.mean(np.where(X @ theta > 0, 1.0, -1.0) == y[:, None], axis=0)


class _Timer:
    """Wall and process CPU time of a ``with`` block."""

    def __enter__(self) -> _Timer:
        self._w0, self._c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self._w0, time.process_time() - self._c0


def welch_ci(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> tuple[float, float, float, float]:
    """mean(a) − mean(b), its standard error and the Welch t interval (independent samples)."""
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    diff, se = float(a.mean() - b.mean()), math.sqrt(va + vb)
    if se == 0.0:
        return diff, 0.0, diff, diff
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    h = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return diff, se, diff - h, diff + h


def run(n_edits: int, seed: int, n_chains: int, n_timed: int, rs: tuple[int, ...] = (1, 10)) -> None:
    X, y, X_te, y_te = load_mnist_binary(3, 8)
    X = X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))  # guard the last ulp: ‖x‖ ≤ 1 exactly
    n, d = X.shape
    model = LogisticModel(d)
    R = n_chains
    timed = sorted({int(round(t)) for t in np.linspace(1, n_edits, min(n_timed, n_edits))}) if n_timed else []
    print(f"MNIST 3 vs 8: n = {n}, d = {d}, test = {X_te.shape[0]}; L = 1, beta = 1/4, lambda = {LAM}, q = {Q}, "
          f"eps_dp = {EPS_DP}; {n_edits} edits per run; R = {R} independent chains per algorithm")
    print(f"Single-chain timing (Abar right before A on the same D_i, interleaved) at steps {timed}.")
    for r in rs:
        rng = np.random.default_rng(seed + r)
        order = rng.permutation(n)[: r * n_edits]
        deleted = [order[i * r : (i + 1) * r] for i in range(n_edits)]
        # Unique unlearning schedules: Thm 5.1 in full (Eq. 18 + 19; the same K_Abar for both eps_dd here) and
        # deletion only (Eq. 18) for each eps_dd. Retraining (A, K_A of Eq. 19) does not depend on eps_dd.
        schedules = {}
        for eps_dd in (0.1, 0.5):
            s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=LAM, n=n, d=d, r=r, q=Q, epsilon_dp=EPS_DP,
                                epsilon_dd=eps_dd, utility=True)
            schedules[(eps_dd, "Thm 5.1 (Eq. 18+19)")] = s.k_unlearn
            schedules[(eps_dd, "deletion only (Eq. 18)")] = s.k_unlearn_deletion
        base = s
        eta, sigma2, k_a = base.eta, base.sigma2, base.k_learn
        init_std = math.sqrt(base.init_variance)
        hyper = {"eta": eta, "sigma2": sigma2, "lam": LAM, "n_records": n}
        ks = sorted(set(schedules.values()), reverse=True)

        def learn_chains(Xi, yi, stream, k_a=k_a, hyper=hyper, init_std=init_std):
            theta0 = init_std * stream.standard_normal((d, R))
            return noisy_gd_chains(partial(model.mean_gradient_chains, X=Xi, y=yi), theta0, k_a,
                                   random_state=stream, **hyper)

        # A on D₀: R chains, the common start of every unlearning schedule.
        start = learn_chains(X, y, np.random.default_rng([seed, r, 0]))
        theta = {k: start.theta.copy() for k in ks}
        streams = {k: np.random.default_rng([seed, r, 1, k]) for k in ks}
        retrain_stream = np.random.default_rng([seed, r, 2])
        timing_stream = np.random.default_rng([seed, r, 3])
        acc_u = {k: [accuracies(start.theta, X_te, y_te)] for k in ks}
        acc_a = [accuracies(learn_chains(X, y, retrain_stream).theta, X_te, y_te)]
        evals: dict[int, set[int]] = {k: set() for k in ks}
        t_single: dict = {k: ([], []) for k in ks}
        t_single_a: tuple[list[float], list[float]] = ([], [])
        t_block: dict = {k: [] for k in ks}
        t_block_a: list[float] = []
        Xi, yi = X.copy(), y.copy()
        for i in range(1, n_edits + 1):
            Xi[deleted[i - 1]] = 0.0  # dummy record (footnote 1): D_i = D_{i-1} ∘ u_i
            yi[deleted[i - 1]] = 0.0
            Xc, yc = Xi.copy(), yi.copy()
            if i in timed:
                grad1 = partial(model.mean_gradient, X=Xc, y=yc)
                for k in ks:
                    with _Timer() as tm:
                        noisy_gd(grad1, theta[k][:, 0], k, random_state=timing_stream, **hyper)
                    t_single[k][0].append(tm.wall)
                    t_single[k][1].append(tm.cpu)
                with _Timer() as tm:
                    noisy_gd(grad1, init_std * timing_stream.standard_normal(d), k_a, random_state=timing_stream,
                             **hyper)
                t_single_a[0].append(tm.wall)
                t_single_a[1].append(tm.cpu)
            grad = partial(model.mean_gradient_chains, X=Xc, y=yc)
            for k in ks:
                with _Timer() as tm:
                    res = noisy_gd_chains(grad, theta[k], k, random_state=streams[k], **hyper)
                theta[k] = res.theta
                evals[k].add(res.gradient_evaluations)
                t_block[k].append(tm.wall)
                acc_u[k].append(accuracies(res.theta, X_te, y_te))
            with _Timer() as tm:
                res = learn_chains(Xc, yc, retrain_stream)
            t_block_a.append(tm.wall)
            acc_a.append(accuracies(res.theta, X_te, y_te))

        A = 100 * np.array(acc_a)  # (steps + 1, R), percent
        U = {k: 100 * np.array(acc_u[k]) for k in ks}
        print(f"\n=== r = {r}: retraining with A: K_A = {k_a} (Eq. 19), {n * k_a} gradient evaluations per chain; "
              f"eta = {eta:.4g}, sigma2 = {sigma2:.4g}")
        print(" step | A: mean (sd) of R chains | per K_Abar: Abar mean, gap of means [95% CI] (pp)")
        for i in range(n_edits + 1):
            row = f" {i:>4} | {A[i].mean():6.2f}% ({A[i].std(ddof=1):.2f})"
            for k in ks:
                g, _, lo, hi = welch_ci(U[k][i], A[i])
                row += f" | K={k:<4d} {U[k][i].mean():6.2f}% {g:+5.2f} [{lo:+5.2f},{hi:+5.2f}]"
            print(row)

        steps = slice(1, n_edits + 1)
        floor = np.abs(A[steps, 1] - A[steps, 0])
        sd_chain = float(np.sqrt(np.mean(A[steps].var(axis=1, ddof=1))))
        tA_wall = float(np.mean(t_single_a[0])) if timed else math.nan
        tA_cpu = float(np.mean(t_single_a[1])) if timed else math.nan
        print(f"\n single-chain noise floor (retraining chain 1 vs chain 0, two independent runs of A): "
              f"max|diff| {floor.max():.2f} pp, mean|diff| {floor.mean():.2f} pp over steps 1..{n_edits}; "
              f"sd of one chain's accuracy {sd_chain:.2f} pp")
        print(f" single-chain A: {tA_wall:.2f} s wall / {tA_cpu:.2f} s CPU; multi-chain A block (R = {R}): "
              f"{np.mean(t_block_a):.2f} s wall")
        print(f"\n {'eps_dd':>6}  {'schedule':<24} {'K_Abar':>6}  {'cert.eps_dd':>11}  {'max|gap|':>8}  "
              f"{'max|CI|':>7}  {'mean|gap|':>9}  {'target pt/CI':>12}  {'1-chain max/mean':>16}  "
              f"{'evals/edit/chain':>16}  {'prescribed':>10}  {'speed-up CPU (wall)':>19}  {'pred.':>6}  "
              f"{'CPU/pred':>8}")
        for (eps_dd, label), k in schedules.items():
            gaps = [welch_ci(U[k][i], A[i]) for i in range(1, n_edits + 1)]
            g = np.array([abs(t[0]) for t in gaps])
            ci = np.array([max(abs(t[2]), abs(t[3])) for t in gaps])
            single = np.abs(U[k][steps, 0] - A[steps, 0])
            cert = convex_deletion_epsilon(k, q=Q, lipschitz=1.0, smoothness=0.25, lam=LAM, sigma2=sigma2, eta=eta,
                                           n=n)
            su_cpu = tA_cpu / float(np.mean(t_single[k][1])) if timed else math.nan
            su_wall = tA_wall / float(np.mean(t_single[k][0])) if timed else math.nan
            pred = k_a / k
            ok = f"{'yes' if g.max() <= TARGET_PP else 'NO'}/{'yes' if ci.max() <= TARGET_PP else 'NO'}"
            print(f" {eps_dd:>6}  {label:<24} {k:>6}  {cert:>11.4f}  {g.max():>7.2f}p  {ci.max():>6.2f}p  "
                  f"{g.mean():>8.2f}p  {ok:>12}  {single.max():>7.2f}/{single.mean():.2f}p  "
                  f"{','.join(str(e) for e in sorted(evals[k])):>16}  {n * k:>10}  "
                  f"{su_cpu:>8.2f} ({su_wall:.2f})  {pred:>6.2f}  {su_cpu / pred:>8.2f}")
        print(f" {'-':>6}  {'noise floor: 2nd A chain':<24} {k_a:>6}  {'-':>11}  {'-':>8}  {'-':>7}  {'-':>9}  "
              f"{'-':>12}  {floor.max():>7.2f}/{floor.mean():.2f}p  {n * k_a:>16}")
        blocks = ", ".join(f"K_Abar={k}: {np.mean(t_block[k]):.2f} s" for k in ks)
        print(f" multi-chain block wall time per edit (R = {R} chains together): A {np.mean(t_block_a):.2f} s, "
              f"{blocks}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 edit requests instead of 20")
    parser.add_argument("--edits", type=int, default=None, help="number of edit requests (overrides --quick)")
    parser.add_argument("--r", type=int, nargs="+", default=[1, 10], choices=[1, 10],
                        help="edit sizes to run (default both; one per process runs them in parallel)")
    parser.add_argument("--chains", type=int, default=16, help="R, independent chains per algorithm (>= 2)")
    parser.add_argument("--timed-steps", type=int, default=3, help="steps at which single chains are timed")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.chains < 2:
        parser.error("--chains must be >= 2 (a confidence interval needs at least two chains)")
    n_edits = args.edits if args.edits is not None else (5 if args.quick else 20)
    if n_edits < 1:
        parser.error("--edits must be >= 1")
    run(n_edits, args.seed, args.chains, max(0, args.timed_steps), tuple(args.r))


if __name__ == "__main__":
    main()

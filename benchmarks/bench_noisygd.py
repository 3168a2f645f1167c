"""Benchmark: Noisy-GD unlearning (Ā) vs retraining with A on MNIST 3 vs 8 (Chourasia & Shah 2023, Thm 5.1).

Logistic loss on L2-normalised rows (‖x‖ ≤ 1, no intercept), so L = 1 and β = 1/4; λ = 1e-2 (κ = 26), q = 10,
ε_dp = 1, ε_dd ∈ {0.1, 0.5}. For r ∈ {1, 10}, a fixed (non-adaptive) sequence of 20 edit requests deletes r
random training records each (replacement by the dummy zero record). At every step the published model Θ̂_i = Ā(…)
is compared with a model retrained from scratch with A on D_i: test accuracy, gradient evaluations, wall time.

Two unlearning schedules are run: Thm 5.1 in full (K_Ā = max(Eq. 18, Eq. 19), deletion and utility) and
deletion only (K_Ā = Eq. 18). Retraining always uses K_A of Eq. (19). Figures are printed side by side; nothing is
asserted (benchmarks are not tests). ``--quick`` runs 5 edits instead of 20. A second, independent retraining chain
gives the noise floor: how far two models from A on the same data differ in test accuracy.

Run: ``python benchmarks/bench_noisygd.py [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lethe.datasets import load_mnist_binary
from lethe.noisygd.curator import CuratorConfig, Database, EditRequest, NoisyGDCurator
from lethe.noisygd.models import LogisticModel
from lethe.noisygd.schedule import convex_schedule

LAM, Q, EPS_DP = 1e-2, 10.0, 1.0


def accuracy(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.where(X @ theta > 0, 1.0, -1.0) == y))


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def run(n_edits: int, seed: int = 0) -> None:
    X, y, X_te, y_te = load_mnist_binary(3, 8)
    X = X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))  # guard the last ulp: ‖x‖ ≤ 1 exactly
    n, d = X.shape
    model = LogisticModel(d)
    print(f"MNIST 3 vs 8: n = {n}, d = {d}, test = {X_te.shape[0]}; L = 1, beta = 1/4, lambda = {LAM}, q = {Q}, "
          f"eps_dp = {EPS_DP}; {n_edits} edits per run")
    print("Timing: each unlearning step is timed right before the retraining of the same step (interleaved), so both\n"
          "see the same machine load; wall time and process CPU time are both reported.")
    for r in (1, 10):
        rng = np.random.default_rng(seed + r)
        order = rng.permutation(n)[: r * n_edits]
        requests = [EditRequest.deletion(order[i * r : (i + 1) * r].tolist(), d) for i in range(n_edits)]
        # Unique unlearning schedules: Thm 5.1 in full (Eq. 18 + 19; the same K_Abar for both eps_dd here) and
        # deletion only (Eq. 18) for each eps_dd. Retraining (A, K_A of Eq. 19) does not depend on eps_dd.
        schedules = {}
        for eps_dd in (0.1, 0.5):
            s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=LAM, n=n, d=d, r=r, q=Q, epsilon_dp=EPS_DP,
                                epsilon_dd=eps_dd, utility=True)
            schedules[(eps_dd, "Thm 5.1 (Eq. 18+19)")] = (s, s.k_unlearn)
            schedules[(eps_dd, "deletion only (Eq. 18)")] = (s, s.k_unlearn_deletion)
        base = next(iter(schedules.values()))[0]
        retrain_cfg = CuratorConfig.from_convex_schedule(base)
        ks = sorted({k for _, k in schedules.values()}, reverse=True)
        curators = {}
        for k in ks:
            cfg = CuratorConfig(**{**retrain_cfg.to_dict(), "k_unlearn": k})
            curators[k] = NoisyGDCurator(model, cfg, random_state=np.random.default_rng([seed, r, 0, 2]))
            curators[k].learn(Database(X, y))
        acc = {k: [accuracy(curators[k].theta, X_te, y_te)] for k in ks}
        times: dict = {k: ([], []) for k in ks}
        certs: dict = {k: [] for k in ks}
        D = Database(X, y)
        cur0 = NoisyGDCurator(model, retrain_cfg, random_state=np.random.default_rng([seed, r, 0, 1]))
        cur0.learn(D)
        acc_retrain, t_retrain = [accuracy(cur0.theta, X_te, y_te)], ([], [])
        # Noise floor: a second, independent retraining chain (A with other seeds) compared with the first.
        ref0 = NoisyGDCurator(model, retrain_cfg, random_state=np.random.default_rng([seed, r, 0, 3]))
        ref0.learn(D)
        acc_ref = [accuracy(ref0.theta, X_te, y_te)]
        for i, u in enumerate(requests, start=1):
            for k in ks:
                cert, wall, cpu = _timed(lambda c=curators[k], u=u: c.unlearn(u))
                certs[k].append(cert)
                times[k][0].append(wall)
                times[k][1].append(cpu)
                acc[k].append(accuracy(curators[k].theta, X_te, y_te))
            D = D.apply(u)
            cur = NoisyGDCurator(model, retrain_cfg, random_state=np.random.default_rng([seed, r, i, 1]))
            _, wall, cpu = _timed(lambda cur=cur, D=D: cur.learn(D))
            t_retrain[0].append(wall)
            t_retrain[1].append(cpu)
            acc_retrain.append(accuracy(cur.theta, X_te, y_te))
            ref = NoisyGDCurator(model, retrain_cfg, random_state=np.random.default_rng([seed, r, i, 3]))
            ref.learn(D)
            acc_ref.append(accuracy(ref.theta, X_te, y_te))
        tA_wall, tA_cpu = float(np.mean(t_retrain[0])), float(np.mean(t_retrain[1]))
        print(f"\n=== r = {r}: retraining with A: K_A = {base.k_learn} (Eq. 19), {n * base.k_learn} gradient "
              f"evaluations, mean time {tA_wall:.2f} s wall / {tA_cpu:.2f} s CPU")
        header = " step  retrain  retrain#2(diff pp) " + "".join(f"  K_Abar={k:<4d}(diff pp) " for k in ks)
        print(header)
        for i in range(n_edits + 1):
            ref_d = 100 * (acc_ref[i] - acc_retrain[i])
            row = f" {i:>4}  {100 * acc_retrain[i]:6.2f}%  {100 * acc_ref[i]:6.2f}% ({ref_d:+5.2f})"
            for k in ks:
                row += f"  {100 * acc[k][i]:6.2f}% ({100 * (acc[k][i] - acc_retrain[i]):+5.2f})    "
            print(row)
        ref_diff = 100 * np.abs(np.array(acc_ref[1:]) - np.array(acc_retrain[1:]))
        print(f"\n noise floor, retraining vs independent retraining: max|diff| {ref_diff.max():.2f} pp, "
              f"mean|diff| {ref_diff.mean():.2f} pp over steps 1..{n_edits}")
        print(f"\n {'eps_dd':>6}  {'schedule':<24} {'K_Abar':>6}  {'cert. eps_dd':>12}  {'max|diff|':>9}  "
              f"{'mean|diff|':>10}  "
              f"{'grad evals/edit':>15}  {'prescribed':>10}  {'speed-up wall':>13}  {'speed-up CPU':>12}  "
              f"{'predicted':>9}  {'CPU/pred':>8}")
        for (eps_dd, label), (_s, k) in schedules.items():
            evals = sorted({c.gradient_evaluations for c in certs[k]})
            absdiff = 100 * np.abs(np.array(acc[k][1:]) - np.array(acc_retrain[1:]))
            maxdiff, meandiff = float(absdiff.max()), float(absdiff.mean())
            su_wall = tA_wall / float(np.mean(times[k][0]))
            su_cpu = tA_cpu / float(np.mean(times[k][1]))
            pred = base.k_learn / k
            evals_s = ",".join(str(e) for e in evals)
            print(f" {eps_dd:>6}  {label:<24} {k:>6}  {certs[k][-1].epsilon_dd:>12.4f}  {maxdiff:>8.2f}p  "
                  f"{meandiff:>9.2f}p  "
                  f"{evals_s:>15}  {n * k:>10}  {su_wall:>13.2f}  {su_cpu:>12.2f}  {pred:>9.2f}  "
                  f"{su_cpu / pred:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 edit requests instead of 20")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run(5 if args.quick else 20, args.seed)


if __name__ == "__main__":
    main()

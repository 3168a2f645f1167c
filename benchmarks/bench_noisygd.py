"""Benchmark: Noisy-GD unlearning (Ā) vs retraining with A on MNIST 3 vs 8 (Chourasia & Shah 2023, Thm 5.1).

Logistic loss on L2-normalised rows (‖x‖ ≤ 1, no intercept), so L = 1 and β = 1/4; λ = 1e-2 (κ = 26), q = 10,
ε_dp = 1, ε_dd ∈ {0.1, 0.5}. For r ∈ {1, 10}, a fixed (non-adaptive) sequence of 20 edit requests deletes r
random training records each (replacement by the dummy zero record). At every step the published model Θ̂_i = Ā(…)
is compared with a model retrained from scratch with A on D_i: test accuracy, gradient evaluations, wall time.

Two unlearning schedules are run: Thm 5.1 in full (K_Ā = max(Eq. 18, Eq. 19), deletion and utility) and
deletion only (K_Ā = Eq. 18). Retraining always uses K_A of Eq. (19). Figures are printed side by side; nothing is
asserted (benchmarks are not tests). ``--quick`` runs 5 edits instead of 20.

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


def run(n_edits: int, seed: int = 0) -> None:
    X, y, X_te, y_te = load_mnist_binary(3, 8)
    X = X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))  # guard the last ulp: ‖x‖ ≤ 1 exactly
    n, d = X.shape
    model = LogisticModel(d)
    print(f"MNIST 3 vs 8: n = {n}, d = {d}, test = {X_te.shape[0]}; L = 1, beta = 1/4, lambda = {LAM}, q = {Q}, "
          f"eps_dp = {EPS_DP}")
    for r in (1, 10):
        rng = np.random.default_rng(seed + r)
        order = rng.permutation(n)[: r * n_edits]
        requests = [EditRequest.deletion(order[i * r : (i + 1) * r].tolist(), d) for i in range(n_edits)]
        # Retraining baseline: A on D_i from scratch at each step (independent of eps_dd).
        base = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=LAM, n=n, d=d, r=r, q=Q, epsilon_dp=EPS_DP,
                               epsilon_dd=0.1)
        retrain_cfg = CuratorConfig.from_convex_schedule(base)
        D = Database(X, y)
        retrain_acc, retrain_time = [], []
        for i in range(n_edits + 1):
            if i > 0:
                D = D.apply(requests[i - 1])
            cur = NoisyGDCurator(model, retrain_cfg, random_state=np.random.default_rng([seed, r, i, 1]))
            t0 = time.perf_counter()
            cur.learn(D)
            retrain_time.append(time.perf_counter() - t0)
            retrain_acc.append(accuracy(cur.theta, X_te, y_te))
        t_A = float(np.mean(retrain_time))
        print(f"\n=== r = {r}: K_A = {base.k_learn} (Eq. 19), n*K_A = {n * base.k_learn} gradient evaluations, "
              f"mean retraining time {t_A:.2f} s")
        for eps_dd in (0.1, 0.5):
            for utility in (True, False):
                s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=LAM, n=n, d=d, r=r, q=Q, epsilon_dp=EPS_DP,
                                    epsilon_dd=eps_dd, utility=True)
                cfg = CuratorConfig.from_convex_schedule(s)
                if not utility:
                    cfg = CuratorConfig(**{**cfg.to_dict(), "k_unlearn": s.k_unlearn_deletion})
                cur = NoisyGDCurator(model, cfg, random_state=np.random.default_rng([seed, r, 0, 2]))
                cur.learn(Database(X, y))
                accs, times, certs = [accuracy(cur.theta, X_te, y_te)], [], []
                for u in requests:
                    t0 = time.perf_counter()
                    certs.append(cur.unlearn(u))
                    times.append(time.perf_counter() - t0)
                    accs.append(accuracy(cur.theta, X_te, y_te))
                t_U = float(np.mean(times))
                diffs = 100 * (np.array(accs) - np.array(retrain_acc))
                label = "Thm 5.1 (Eq. 18+19)" if utility else "deletion only (Eq. 18)"
                print(f"\n--- eps_dd = {eps_dd}, K_Abar = {cfg.k_unlearn} [{label}]; certified eps_dd = "
                      f"{certs[-1].epsilon_dd:.4f}, eps_dp = {certs[-1].epsilon_dp:.4f}")
                print(" step  acc(unlearn)  acc(retrain)  diff(pp)")
                for i, (a, b, dd) in enumerate(zip(accs, retrain_acc, diffs, strict=True)):
                    print(f" {i:>4}  {100 * a:11.2f}%  {100 * b:11.2f}%  {dd:+8.2f}")
                evals = {c.gradient_evaluations for c in certs}
                print(f" max |diff| over steps 1..{n_edits}: {np.max(np.abs(diffs[1:])):.2f} pp; "
                      f"gradient evaluations per edit {sorted(evals)} (prescribed n*K_Abar = {n * cfg.k_unlearn})")
                print(f" wall time: unlearn {t_U:.3f} s vs retrain {t_A:.3f} s -> measured speed-up {t_A / t_U:.2f}, "
                      f"predicted K_A/K_Abar = {base.k_learn / cfg.k_unlearn:.2f} "
                      f"(ratio measured/predicted {t_A / t_U / (base.k_learn / cfg.k_unlearn):.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 edit requests instead of 20")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run(5 if args.quick else 20, args.seed)


if __name__ == "__main__":
    main()

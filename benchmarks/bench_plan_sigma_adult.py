"""plan_sigma on Adult: wall time, simulated models and the plan (issue 27 item 4).

The set-up of the figure in plan_sigma's docstring: 26,048 training rows of the UCI Adult file (the plan holds out
20 % of the 32,561 to score), R = 1,000 removals, λ = 3e-5, with an intercept, (ε, δ) = (1, 1e-4), the default
10 simulations and confidence 0.9. Prints the wall and CPU time (read the CPU time on a shared machine), the
models simulated, σ, the retraining rate measured on fresh
draws and the accuracy cost. Run from the repository root:

    OMP_NUM_THREADS=1 python benchmarks/bench_plan_sigma_adult.py [--removals 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import lethe.planning as planning
from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.datasets import load_adult
from lethe.preprocessing import SchemaEncoder
from lethe.schema import load_schema


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--removals", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    train, _test = load_adult()
    schema = load_schema(Path(__file__).resolve().parents[1] / "examples" / "adult_schema.yaml")
    X, y = schema.split(train)
    Xe = SchemaEncoder(schema).transform(X)
    counts = {"simulated models": 0}
    for name in ("_simulate", "_removes_without_retraining"):
        original = getattr(planning, name)

        def counted(*a, _original=original, **k):
            counts["simulated models"] += 1
            return _original(*a, **k)

        setattr(planning, name, counted)
    t0, c0 = time.perf_counter(), time.process_time()
    plan = planning.plan_sigma(Xe, y, n_removals=args.removals, random_state=args.seed,
                               estimator=CertifiedLogisticRegression(lam=3e-5, fit_intercept=True))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"plan_sigma on Adult ({Xe.shape[0]} rows, {Xe.shape[1]} features; R = {args.removals}, λ = 3e-5, "
          f"intercept, seed {args.seed}): {seconds / 60:.1f} min wall, {cpu / 60:.1f} min CPU, "
          f"{counts['simulated models']} simulated models "
          f"(fits with their removal sequences)")
    print(f"sigma {plan.sigma:.4g}; retraining rate on {plan.n_simulations} fresh draws {plan.retraining_rate:.2f} "
          f"(95 % upper {plan.retraining_rate_upper:.2f}); accuracy {plan.accuracy:.4f}, without noise "
          f"{plan.accuracy_without_noise:.4f} (cost {100 * plan.accuracy_cost:.2f} pp)")


if __name__ == "__main__":
    main()

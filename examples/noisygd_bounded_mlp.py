"""Theorem 5.2 (non-convex Noisy-GD unlearning) on a network it applies to, and what it costs.

:class:`lethe.noisygd.models.BoundedMLPModel` is a one-hidden-layer network whose loss is bounded, Lipschitz and
smooth over all θ (tanh-reparametrised weights, tanh units, a logit bounded by c), so Thm 5.2's hypotheses hold
with proven constants. This script

1. prints Thm 5.2's schedule (B matched to the loss, η, σ², K_A, K_Ā) for growing databases, with the time those
   step counts would take at the measured cost per step;
2. with ``--run``, runs the theorem's schedule in full on the smallest case (n = 4 records, 2 features):
   learning with A, one deletion with Ā, and prints the certificates (ε_dd ≤ the requested 0.5).

Run: ``python examples/noisygd_bounded_mlp.py [--run]``.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from lethe.noisygd.algorithm import noisy_gd
from lethe.noisygd.estimators import NoisyGDBoundedMLPClassifier
from lethe.noisygd.models import BoundedMLPModel
from lethe.noisygd.schedule import nonconvex_schedule_for_loss

R_INTERCEPT = math.sqrt(2.0)  # unit-ball rows plus a constant feature 1


def schedule_for(n: int, p: int, m: int, *, lam: float, q: float, c: float = 4.0, eps_dp: float = 1.0,
                 eps_dd: float = 0.5):
    model = BoundedMLPModel(p, m, c)
    s = nonconvex_schedule_for_loss(loss_half_range=model.loss_half_range(), lipschitz=model.lipschitz(R_INTERCEPT),
                                    smoothness=model.smoothness(R_INTERCEPT), lam=lam, n=n, d=model.n_params, r=1,
                                    q=q, epsilon_dp=eps_dp, epsilon_dd=eps_dd)
    return model, s


def seconds_per_step(model: BoundedMLPModel, n: int, steps: int = 2000) -> float:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, model.n_features))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    t = time.process_time()
    noisy_gd(lambda th: model.mean_gradient(th, X, y), np.zeros(model.n_params), steps, eta=1e-6, sigma2=1e-3,
             lam=1.0, n_records=n, random_state=0)
    return (time.process_time() - t) / steps


def table() -> None:
    print("Thm 5.2 for BoundedMLPModel (c = 4, r = 1, eps_dp = 1, eps_dd = 0.5), B chosen so that the loss is "
          "sigma2 log(B)/4-bounded")
    print(f" {'n':>6} {'p':>4} {'m':>3} {'d':>6} {'lam':>5} {'q':>4} {'B':>9} {'eta':>9} {'sigma2':>8} {'K_A':>10} "
          f"{'K_Abar':>10} {'K_A/K_Abar':>10} {'s/step':>9} {'time for K_A + K_Abar':>22}")
    cases = [(4, 3, 2, 1.0, 2.0), (8, 3, 2, 1.0, 2.0), (16, 3, 2, 1.0, 2.0), (32, 3, 2, 1.0, 2.0),
             (100, 3, 8, 1.0, 2.0), (1000, 3, 8, 1.0, 2.0), (11982, 785, 16, 0.01, 10.0)]
    for n, p, m, lam, q in cases:
        model, s = schedule_for(n, p, m, lam=lam, q=q)
        sps = seconds_per_step(model, n, steps=2000 if n < 1000 else 50)
        total = sps * (s.k_learn + s.k_unlearn)
        years = total / (365.25 * 86400)
        when = f"{total:.3g} s" if total < 86400 else f"{years:.3g} years"
        print(f" {n:>6} {p:>4} {m:>3} {model.n_params:>6} {lam:>5g} {q:>4g} {s.B:>9.4g} {s.eta:>9.3g} "
              f"{s.sigma2:>8.3g} {s.k_learn:>10.3g} {s.k_unlearn:>10.3g} {s.predicted_speedup:>10.3g} "
              f"{sps:>9.2g} {when:>22}")


def full_run() -> None:
    X = np.array([[1.0, 0.2], [0.9, -0.1], [-1.0, 0.1], [-0.8, -0.3]])
    y = np.array([1, 1, 0, 0])
    clf = NoisyGDBoundedMLPClassifier(n_hidden=2, lam=1.0, max_steps=10**8, random_state=0)
    t0 = time.process_time()
    clf.fit(X, y)
    t1 = time.process_time()
    cert = clf.remove([0])
    t2 = time.process_time()
    s = clf.schedule_
    print(f"\nFull Thm 5.2 run, n = 4, d = {clf.curator_.model.n_params}: B = {s.B:.4g}, eta = {s.eta:.3g}, "
          f"sigma2 = {s.sigma2:.3g}, K_A = {s.k_learn}, K_Abar = {s.k_unlearn}")
    print(f" learn: {t1 - t0:.1f} s CPU, eps_dp = {clf.curator_.certificates[0].epsilon_dp:.4f}")
    print(f" remove record 0: {t2 - t1:.1f} s CPU, {cert.gradient_evaluations} gradient evaluations, "
          f"certified eps_dd = {cert.epsilon_dd:.4f} (requested {s.epsilon_dd}), eps_dp = {cert.epsilon_dp:.4f}")
    print(f" training accuracy of the published model: {clf.score(X, y):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--run", action="store_true", help="run Thm 5.2's schedule in full on n = 4 (minutes)")
    args = parser.parse_args()
    table()
    if args.run:
        full_run()


if __name__ == "__main__":
    main()

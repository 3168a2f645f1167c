"""Paper mode (bound="paper", calibration="paper") means the paper's solver too (issue 37)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from lethe.certified.estimators import CertifiedLogisticRegression


def _data(n=400, d=10, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.where(X[:, 0] + 0.2 * rng.normal(size=n) > 0, 1, 0)


def _removals_before_retraining(est, rows):
    for j, i in enumerate(rows):
        if est.remove([int(i)]).retrained:
            return j
    return len(rows)


def test_paper_mode_with_the_default_solver_removes_as_the_paper_s_solver_does():
    X, y = _data()
    paper = {"bound": "paper", "calibration": "paper", "lam": 1e-2, "sigma": 1.0, "random_state": 3}
    auto = CertifiedLogisticRegression(**paper).fit(X, y)
    chol = CertifiedLogisticRegression(solver="cholesky", **paper).fit(X, y)
    assert auto.solver_ == "cholesky"  # was "anchor": 70 removals on MNIST before retraining, where cholesky took 294
    rows = np.random.default_rng(1).permutation(400)[:200]
    assert _removals_before_retraining(auto, rows) == _removals_before_retraining(chol, rows)
    # outside paper mode, and on data that must stay matrix-free, auto keeps its rule
    assert CertifiedLogisticRegression(bound="paper", lam=1e-2).fit(X, y).solver_ == "anchor"
    wide = sp.random(50, 20000, density=0.001, random_state=0, format="csr")
    wide = sp.csr_matrix(wide / max(1.0, float(sp.linalg.norm(wide, axis=1).max())))
    yw = np.arange(50) % 2
    assert CertifiedLogisticRegression(**paper).fit(wide, yw).solver_ == "pcg"

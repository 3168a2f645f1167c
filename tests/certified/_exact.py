"""Exact references shared by the certified tests, written independently of lethe: the logistic gradient ∇L_b in
long double, its norm, and the check of a maintained anchor matrix's product against the exact one."""

from __future__ import annotations

import numpy as np

from lethe.certified.bounds import gamma_k
from lethe.certified.cache import NewtonCache
from lethe.certified.newton import _mv_maintained


def grad_ld(w, b, X, y, lam):
    """∇L_b(w; D) = Σ ℓ'(wᵀxᵢ, yᵢ) xᵢ + λ n w + b for the logistic loss, in long double."""
    Xl, yl, wl, bl = (np.asarray(a, dtype=np.longdouble) for a in (X, y, w, b))
    with np.errstate(over="ignore"):
        d1 = -yl / (1 + np.exp(yl * (Xl @ wl)))
    return Xl.T @ d1 + np.longdouble(lam) * Xl.shape[0] * wl + bl


def norm_ld(g):
    return float(np.sqrt(np.sum(np.asarray(g, dtype=np.longdouble) ** 2)))


def assert_maintained_product(cache: NewtonCache, X: np.ndarray, active: np.ndarray, lam: float,
                              rng: np.random.Generator) -> None:
    """fl(M̃v) minus the queued rows (:func:`_mv_maintained`) is within γ_{d+2}‖M̃‖_F‖v‖ + ε_M‖v‖ + its own
    correction bound of the exact X′ᵀ diag(ŝ) X′ v + λ n′ v, computed in long double over the active rows."""
    d = X.shape[1]
    Xa = np.asarray(X[active], dtype=np.longdouble)
    v = rng.normal(size=d) * 10.0 ** rng.uniform(-3, 1)
    exact = Xa.T @ (np.asarray(cache.s_hat[active], dtype=np.longdouble) * (Xa @ v)) + (
        np.longdouble(lam) * active.sum() * v)
    q, err_q = _mv_maintained(cache, v)
    fro_M = cache.fro_M + 2.0 * cache.eps_M
    allowed = (gamma_k(d + 2) * fro_M + cache.eps_M) * norm_ld(v) + err_q
    assert norm_ld(np.asarray(q, dtype=np.longdouble) - exact) <= allowed

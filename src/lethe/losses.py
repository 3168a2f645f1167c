"""Twice-differentiable convex losses of a linear model, with the constants the certificates need.

A loss is written as a function of the margin ``z = wᵀx`` and the target ``y``: ℓ(z, y). For a linear model the
gradient and Hessian of Σᵢ ℓ(wᵀxᵢ, yᵢ) are ``Xᵀ ℓ'(z)`` and ``Xᵀ diag(ℓ''(z)) X`` (Guo et al. 2020, §3.2), so a loss
only has to provide ℓ, ℓ' and ℓ'' elementwise, plus:

``gamma`` (γ)
    a Lipschitz constant of z ↦ ℓ''(z, y): |ℓ''(z₁, y) − ℓ''(z₂, y)| ≤ γ |z₁ − z₂| for every y in the target set.
    Guo et al. 2020, Thm 1 and Cor. 1–2 need it.
``grad_bound`` (C)
    sup_z |ℓ'(z, y)|, so that ‖∇ℓ(wᵀx, y)‖₂ ≤ C whenever ‖x‖₂ ≤ 1 (Thm 1), or ``None`` when unbounded.

Optional attributes, used by the tighter certificates (``bound="tight"``, docs/tighter_bounds.md) when present:

``gamma_exact``
    the smallest Lipschitz constant of ℓ'' (sup |ℓ'''|); ``gamma`` is used when absent.
``d2_lipschitz_abs(lo_abs, hi_abs, out=None, tmp=None)``
    elementwise upper bounds on sup of |ℓ'''| over the ξ with |ξ| in [max(Aᵢ, 0), Bᵢ]: a *local* Lipschitz
    constant of ℓ'' (for a loss whose |ℓ'''| depends on |ξ| only); the tight remainder uses it when present;
``d2_lipschitz_on(lo, hi)``
    the same over [loᵢ, hiᵢ], used when ``d2_lipschitz_abs`` is absent.
``d2_sup``
    sup_z ℓ''(z, y), a Lipschitz constant of ℓ' (used by rounding allowances).

To add a loss, implement the :class:`Loss` protocol in one class and register it in :data:`LOSSES`.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np
from scipy.special import expit


@runtime_checkable
class Loss(Protocol):
    """Protocol of a margin loss ℓ(z, y) (see module docstring)."""

    name: str
    gamma: float
    grad_bound: float | None

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """ℓ(z, y), elementwise."""
        ...

    def d1(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """∂ℓ/∂z, elementwise."""
        ...

    def d2(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """∂²ℓ/∂z², elementwise."""
        ...

    def check_targets(self, y: np.ndarray) -> np.ndarray:
        """Return ``y`` as float64 or raise ``ValueError`` naming the first invalid target."""
        ...


class LogisticLoss:
    """Logistic loss ℓ(z, y) = −log σ(y z) = log(1 + e^{−y z}) with y ∈ {−1, +1} (Guo et al. 2020, §3.2).

    ℓ'(z, y) = (σ(y z) − 1) y, ℓ''(z, y) = σ(y z)(1 − σ(y z)).

    Constants: C = sup |ℓ'| = 1. γ = 1/4 is the paper's Lipschitz constant of ℓ'' (valid, since the exact one,
    sup |ℓ'''| = sup |σ(1−σ)(1−2σ)| = 1/(6√3) ≈ 0.0962, is smaller). ``gamma_exact`` holds the exact value;
    the tight bounds use it (proof: docs/tighter_bounds.md §1).
    """

    name = "logistic"
    gamma = 0.25
    gamma_exact = 1.0 / (6.0 * math.sqrt(3.0))
    grad_bound: float | None = 1.0
    d2_sup = 0.25
    #: ξ* = log(2 + √3): |ℓ'''| peaks at ±ξ* (s = σ(ξ) solves 6s² − 6s + 1 = 0 there).
    xi_star = math.log(2.0 + math.sqrt(3.0))

    @staticmethod
    def d3_abs(z: np.ndarray, out: np.ndarray | None = None, tmp: np.ndarray | None = None) -> np.ndarray:
        """|ℓ'''(z)| = σ(z) σ(−z) tanh(|z|/2), evaluated without cancellation (relative error ≤ 12 u).

        With e = e^{−|z|} and 1 − e = −expm1(−|z|) (each to ~1 u, no cancellation): σ(z)σ(−z) = e/(1+e)² and
        tanh(|z|/2) = (1 − e)/(1 + e), so |ℓ'''(z)| = e (1 − e) / (1 + e)³. ``out`` (may alias z) and ``tmp``
        (float64, shape of z) avoid temporaries on the per-removal path.
        """
        z = np.asarray(z, dtype=np.float64)
        p = np.abs(z, out=np.empty_like(z) if out is None else out)  # an array even for 0-d z
        np.negative(p, out=p)
        e = np.exp(p, out=np.empty_like(p) if tmp is None else tmp)
        np.expm1(p, out=p)  # −(1 − e)
        p *= e
        np.negative(p, out=p)  # e (1 − e)
        e += 1.0
        p /= e
        p /= e
        p /= e
        return p if p.ndim else p[()]

    def d2_lipschitz_abs(self, lo_abs: np.ndarray, hi_abs: np.ndarray, out: np.ndarray | None = None,
                         tmp: np.ndarray | None = None) -> np.ndarray:
        """Upper bounds on sup |ℓ'''(ξ)| over the ξ with |ξ| in [max(Aᵢ, 0), Bᵢ] (Aᵢ ≤ Bᵢ), elementwise.

        g(ξ) = |ℓ'''(ξ)| is even, increasing on [0, ξ*] and decreasing on [ξ*, ∞) (docs/tighter_bounds.md §1),
        and a function unimodal on [0, ∞) with its peak at ξ* attains its sup over [A, B] at the point of [A, B]
        nearest ξ*, clip(ξ*, A, B): g(ξ*) = γ if ξ* ∈ [A, B], else g at one endpoint. That value is padded by a
        relative 2e-12 (its evaluation error is ≤ 12 u; g'(ξ*) = 0 makes the rounding of ξ* a second-order effect;
        checked against mpmath in the tests) and by 1e-300 (underflow beyond |ξ| ≈ 745), and capped by
        γ(1 + 1e-12). ``out`` (may alias either input) and ``tmp`` avoid temporaries.
        """
        if out is None:
            out = np.empty(np.broadcast(np.asarray(lo_abs), np.asarray(hi_abs)).shape)
        pick = np.maximum(lo_abs, self.xi_star, out=out)
        np.minimum(pick, hi_abs, out=pick)
        self.d3_abs(pick, out=pick, tmp=tmp)  # in place: pick now holds the value (an array even if 0-d)
        val = pick
        val *= 1.0 + 2e-12
        val += 1e-300
        val = np.minimum(val, self.gamma_exact * (1.0 + 1e-12), out=val)
        return val if val.ndim else val[()]

    def d2_lipschitz_on(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Upper bounds on the sup over ξ in [loᵢ, hiᵢ] of |ℓ'''(ξ)|, elementwise: local Lipschitz constants of ℓ''.

        On [lo, hi] the values |ξ| fill [A, B] with A = max(lo, −hi, 0) and B = max(−lo, hi) (exact in floating
        point); the sup is then :meth:`d2_lipschitz_abs` (A, B).

        >>> loss = LogisticLoss()
        >>> b = loss.d2_lipschitz_on(np.array([5.0, -1.0]), np.array([6.0, 2.0]))
        >>> bool(b[0] < 0.01), bool(b[1] == loss.gamma_exact * (1 + 1e-12))
        (True, True)
        """
        lo = np.asarray(lo, dtype=np.float64)
        hi = np.asarray(hi, dtype=np.float64)
        lo_abs = np.maximum(np.maximum(lo, -hi), 0.0)
        return self.d2_lipschitz_abs(lo_abs, np.maximum(-lo, hi))

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.logaddexp(0.0, -y * z)

    def d1(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return -y * expit(-y * z)

    def d2(self, z: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """σ(z)σ(−z) = e/(1+e)² with e = e^{−|z|} ≤ 1: one exponential, relative error ≤ 5 u (no 1 − σ
        cancellation). ``out`` (float64, shape of z, not aliasing z) receives the result (one temporary remains)."""
        z = np.asarray(z, dtype=np.float64)
        e = np.abs(z, out=np.empty_like(z) if out is None else out)  # an array even for 0-d z
        np.negative(e, out=e)
        np.exp(e, out=e)
        q = 1.0 + e
        q *= q
        e /= q
        return e if e.ndim else e[()]

    def check_targets(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        bad = np.flatnonzero((y != 1.0) & (y != -1.0))
        if bad.size:
            raise ValueError(f"Logistic-loss targets must be -1 or +1. Found {y[bad[0]]} at row {bad[0]}.")
        return y


class SquaredLoss:
    """Least-squares loss ℓ(z, y) = (z − y)² (Guo et al. 2020, §3.2).

    ℓ' = 2(z − y), ℓ'' = 2 (constant), so γ = 0: the Newton update is exact (Guo et al. 2020, §3.2) and removal is
    0-certified up to the solver's own residual. ℓ' is unbounded, so C is ``None``.
    """

    name = "squared"
    gamma = 0.0
    gamma_exact = 0.0
    grad_bound: float | None = None
    d2_sup = 2.0

    def d2_lipschitz_on(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """ℓ''' = 0: zeros."""
        return np.zeros(np.broadcast(np.asarray(lo), np.asarray(hi)).shape)

    def d2_lipschitz_abs(self, lo_abs: np.ndarray, hi_abs: np.ndarray, out: np.ndarray | None = None,
                         tmp: np.ndarray | None = None) -> np.ndarray:
        """ℓ''' = 0: zeros."""
        res = np.zeros(np.broadcast(np.asarray(lo_abs), np.asarray(hi_abs)).shape) if out is None else out
        res[...] = 0.0
        return res

    def value(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (z - y) ** 2

    def d1(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return 2.0 * (z - y)

    def d2(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.full_like(np.asarray(z, dtype=np.float64), 2.0)

    def check_targets(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(y))
        if bad.size:
            raise ValueError(f"Least-squares targets must be finite. Found {y[bad[0]]} at row {bad[0]}.")
        return y


LOSSES: dict[str, Loss] = {"logistic": LogisticLoss(), "squared": SquaredLoss()}


def get_loss(loss: str | Loss) -> Loss:
    """Return a loss object from its name (``"logistic"``, ``"squared"``) or pass a :class:`Loss` through."""
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {tuple(LOSSES)}. Found {loss!r}.")
        return LOSSES[loss]
    if isinstance(loss, Loss):
        return loss
    raise TypeError(f"loss must be a loss name or implement lethe.losses.Loss. Found {type(loss).__name__}.")

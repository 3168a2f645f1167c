"""Noisy gradient descent (Chourasia & Shah 2023, Algorithm 2) and the loss kernels it runs on.

Pure functions, no state, no I/O. The data-touching kernels are few and small (``X @ w``, ``X.T @ g``) so that
another array backend can slot in under them.

Symbols → arguments
-------------------
=====================  ===========================  ==========================================================
paper                  argument                     meaning
=====================  ===========================  ==========================================================
Θ₀                     ``theta0``                   start model (ρ-sample for A, previous model for Ā)
K                      ``n_steps``                  number of Noisy-GD iterations
η                      ``eta``                      step size
σ²                     ``sigma2``                   noise variance; each step adds √(2η)·N(0, σ² I)
λ                      ``lam``                      L2 constant, r(θ) = λ‖θ‖²/2, ∇r(θ) = λθ
L                      ``clip``                     per-example gradient clipping norm (Remark 5.3, App. F.1)
(1/n)Σ∇ℓ(θ; x)         ``mean_grad(theta)``         full-batch mean loss gradient (regulariser excluded)
=====================  ===========================  ==========================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
from scipy.special import expit, log_expit, logsumexp, softmax

from lethe._rng import RandomState, check_random_state
from lethe._validation import check_nonnegative, check_positive

__all__ = [
    "NoisyGDChainsResult",
    "NoisyGDResult",
    "clip_rows",
    "logistic_loss",
    "logistic_mean_gradient",
    "multinomial_loss",
    "multinomial_mean_gradient",
    "noisy_gd",
    "noisy_gd_chains",
    "regularized_objective",
]

MeanGradient = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class NoisyGDResult:
    """Output of :func:`noisy_gd`: the last iterate Θ_{ηK} and what it cost.

    Attributes
    ----------
    theta : numpy.ndarray
        Θ_{ηK}.
    n_steps : int
        K, the iterations run.
    gradient_evaluations : int
        Per-example gradient evaluations, ``n_records * K`` (full batch every step).
    """

    theta: np.ndarray
    n_steps: int
    gradient_evaluations: int


def noisy_gd(
    mean_grad: MeanGradient,
    theta0: np.ndarray,
    n_steps: int,
    *,
    eta: float,
    sigma2: float,
    lam: float,
    n_records: int,
    random_state: RandomState = None,
) -> NoisyGDResult:
    r"""Noisy-GD, Algorithm 2 of Chourasia & Shah (2023), exactly as written.

    For k = 0, …, K−1:

    .. math::
        Θ_{η(k+1)} = Θ_{ηk} − η\,\bigl(\tfrac1n \textstyle\sum_{x∈D} ∇ℓ(Θ_{ηk}; x) + λ Θ_{ηk}\bigr)
                     + \sqrt{2η}\,\mathcal N(0, σ^2 I_d).

    Parameters
    ----------
    mean_grad : callable
        θ ↦ (1/n) Σ_x ∇ℓ(θ; x) (clipped per example if the caller clips). Must return an array of θ's shape.
        The regulariser gradient λθ is added here, not by ``mean_grad``.
    theta0 : array_like
        Θ₀. Any shape (several independent chains can be run at once as extra axes if ``mean_grad`` allows).
    n_steps : int
        K ≥ 0.
    eta : float
        η > 0.
    sigma2 : float
        σ² ≥ 0 (σ² = 0 is plain gradient descent, useful in tests; it certifies nothing).
    lam : float
        λ ≥ 0.
    n_records : int
        n, only used to count gradient evaluations (n per step).
    random_state : None, int or numpy.random.Generator
        Source of the Gaussian noise.

    Returns
    -------
    NoisyGDResult

    Examples
    --------
    On ℓ(θ; x) = ½‖θ − x‖² without noise, Noisy-GD is gradient descent towards the mean:

    >>> import numpy as np
    >>> X = np.array([[1.0, 0.0], [3.0, 2.0]])
    >>> res = noisy_gd(lambda t: t - X.mean(axis=0), np.zeros(2), 200, eta=0.5, sigma2=0.0, lam=0.0,
    ...                n_records=2)
    >>> np.round(res.theta, 6).tolist(), res.gradient_evaluations
    ([2.0, 1.0], 400)
    """
    k, eta, lam, noise_scale = _check_run(n_steps, eta, sigma2, lam)
    rng = check_random_state(random_state)
    theta = np.array(theta0, dtype=np.float64, copy=True)
    theta = _iterate(mean_grad, theta, k, eta, lam, noise_scale, rng.standard_normal)
    return NoisyGDResult(theta=theta, n_steps=k, gradient_evaluations=int(n_records) * k)


def _check_run(n_steps: object, eta: object, sigma2: object, lam: object) -> tuple[int, float, float, float]:
    """Validate K, η, σ², λ of a Noisy-GD run; return (K, η, λ, √(2ησ²))."""
    if isinstance(n_steps, bool) or not isinstance(n_steps, int | np.integer) or int(n_steps) < 0:
        raise ValueError(f"n_steps must be an integer >= 0. Found {n_steps!r}.")
    eta = check_positive("eta", eta)
    sigma2 = check_nonnegative("sigma2", sigma2)
    lam = check_nonnegative("lam", lam)
    return int(n_steps), eta, lam, math.sqrt(2.0 * eta * sigma2)


def _iterate(
    mean_grad: MeanGradient,
    theta: np.ndarray,
    n_steps: int,
    eta: float,
    lam: float,
    noise_scale: float,
    draw: Callable[[tuple[int, ...]], np.ndarray],
    check_shape: bool = False,
) -> np.ndarray:
    """The K updates of Algorithm 2, shared by :func:`noisy_gd` and :func:`noisy_gd_chains`.

    ``draw(shape)`` returns one standard-normal block of θ's shape (called only when ``noise_scale`` > 0).
    """
    for k in range(n_steps):
        g = mean_grad(theta)
        if check_shape and k == 0:
            g = np.asarray(g)
            if g.shape != theta.shape:
                raise ValueError(f"mean_grad must return an array of shape {theta.shape} (d, R). Found {g.shape}.")
        theta = theta - eta * (g + lam * theta)
        if noise_scale > 0.0:
            theta = theta + noise_scale * draw(theta.shape)
    return theta


@dataclass(frozen=True)
class NoisyGDChainsResult:
    """Output of :func:`noisy_gd_chains`: the last iterates of R independent chains and what each cost.

    Attributes
    ----------
    theta : numpy.ndarray
        Θ_{ηK} of every chain, shape (d, R) (column j is chain j).
    n_steps : int
        K, the iterations run by every chain.
    n_chains : int
        R.
    gradient_evaluations : int
        Per-example gradient evaluations *per chain*, ``n_records * K`` (as for one :func:`noisy_gd` run).
    """

    theta: np.ndarray
    n_steps: int
    n_chains: int
    gradient_evaluations: int

    @property
    def total_gradient_evaluations(self) -> int:
        """Over all chains: R · n · K."""
        return self.n_chains * self.gradient_evaluations


def noisy_gd_chains(
    mean_grad: MeanGradient,
    theta0: np.ndarray,
    n_steps: int,
    *,
    eta: float,
    sigma2: float,
    lam: float,
    n_records: int,
    random_state: RandomState | Sequence[RandomState] = None,
) -> NoisyGDChainsResult:
    r"""R independent Noisy-GD chains (Algorithm 2) run together as one matrix Θ ∈ R^{d×R}.

    Column j follows exactly the update of :func:`noisy_gd`,

    .. math::
        Θ^{(j)}_{η(k+1)} = Θ^{(j)}_{ηk} − η\bigl(g(Θ^{(j)}_{ηk}) + λΘ^{(j)}_{ηk}\bigr) + \sqrt{2η}\,Z^{(j)}_k,
        \qquad Z^{(j)}_k \sim \mathcal N(0, σ^2 I_d)\ \text{independent over } j, k,

    with g the (clipped, if the kernel clips) mean loss gradient of the column. The point is cost: a full-batch
    gradient of all chains is one matrix product ``X @ Θ`` (and ``X.T @ G``) instead of R matrix-vector products.

    Parameters
    ----------
    mean_grad : callable
        Θ (d, R) ↦ (d, R) whose column j is (1/n) Σ_x Clip_L(∇ℓ(Θ[:, j]; x)) (per example *and* per chain, e.g.
        :func:`logistic_mean_gradient` with a 2-D θ, or ``model.mean_gradient_chains``).
    theta0 : array_like, shape (d, R)
        Θ₀ of every chain.
    n_steps : int
        K ≥ 0, the same for every chain.
    eta, sigma2, lam : float
        η > 0, σ² ≥ 0, λ ≥ 0.
    n_records : int
        n, only for counting gradient evaluations (n·K per chain).
    random_state : None, int, Generator, or a list/tuple of R of these
        One stream: each step draws the (d, R) noise block from it. A list or tuple of R streams: column j draws
        its noise from stream j, d numbers per step, exactly as ``noisy_gd(..., random_state=streams[j])`` does,
        so column j equals that single-chain run up to floating-point rounding of the matrix products.

    Returns
    -------
    NoisyGDChainsResult

    Examples
    --------
    Without noise every column is gradient descent on ℓ(θ; x) = ½‖θ − x‖²:

    >>> X = np.array([[1.0, 0.0], [3.0, 2.0]])
    >>> res = noisy_gd_chains(lambda T: T - X.mean(axis=0)[:, None], np.zeros((2, 3)), 200, eta=0.5,
    ...                       sigma2=0.0, lam=0.0, n_records=2)
    >>> np.round(res.theta, 6).tolist(), res.gradient_evaluations, res.total_gradient_evaluations
    ([[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]], 400, 1200)
    """
    k, eta, lam, noise_scale = _check_run(n_steps, eta, sigma2, lam)
    theta = np.array(theta0, dtype=np.float64, copy=True)
    if theta.ndim != 2 or theta.shape[1] < 1 or theta.shape[0] < 1:
        raise ValueError(f"theta0 must have shape (d, R) with d, R >= 1 (one column per chain). Found {theta.shape}.")
    d, n_chains = theta.shape
    draw: Callable[[tuple[int, ...]], np.ndarray]
    if isinstance(random_state, list | tuple):
        if len(random_state) != n_chains:
            raise ValueError(
                f"random_state must be one stream or a list of R = {n_chains} streams. Found {len(random_state)}."
            )
        per_chain = [check_random_state(s) for s in random_state]

        def draw(shape: tuple[int, ...]) -> np.ndarray:
            return np.stack([r.standard_normal(d) for r in per_chain], axis=1)

    else:
        draw = check_random_state(cast(RandomState, random_state)).standard_normal  # one (d, R) block per step

    theta = _iterate(mean_grad, theta, k, eta, lam, noise_scale, draw, check_shape=True)
    return NoisyGDChainsResult(theta=theta, n_steps=k, n_chains=n_chains, gradient_evaluations=int(n_records) * k)


def clip_rows(G: np.ndarray, clip: float) -> np.ndarray:
    r"""Clip_L of every row: v / max(1, ‖v‖₂ / L) (Chourasia & Shah 2023, App. F.1).

    >>> clip_rows(np.array([[3.0, 4.0], [0.3, 0.4]]), 1.0).tolist()
    [[0.6, 0.8], [0.3, 0.4]]
    """
    clip = check_positive("clip", clip)
    norms = np.linalg.norm(G, axis=1)
    return G / np.maximum(1.0, norms / clip)[:, None]


def clip_factors(sq_norms: np.ndarray, clip: float | None) -> np.ndarray:
    """min(1, L/‖g_i‖) from squared norms (1 where no clipping)."""
    if clip is None:
        return np.ones_like(sq_norms)
    return 1.0 / np.maximum(1.0, np.sqrt(sq_norms) / clip)


def logistic_loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-example logistic loss ℓ(θ; x, y) = log(1 + exp(−y θᵀx)), y ∈ {−1, +1}."""
    return -log_expit(y * (X @ theta))


def logistic_mean_gradient(theta: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None = None) -> np.ndarray:
    r"""(1/n) Σᵢ Clip_L(∇ℓ(θ; xᵢ, yᵢ)) for the logistic loss.

    ∇ℓ(θ; x, y) = −y σ(−y θᵀx) x. With ‖x‖ ≤ R the loss is R-Lipschitz and R²/4-smooth, so L = 1, β = 1/4 on
    unit-norm rows.

    ``theta`` may be one model (shape (d,)) or R chains (shape (d, R)); with chains the result is (d, R), column
    j the (clipped) mean gradient at column j (clipping is per example *and* per chain).
    """
    if np.ndim(theta) == 1:
        coef = -y * expit(-y * (X @ theta))  # ℓ'(z) per example
        if clip is not None:
            coef = coef * clip_factors(coef**2 * np.einsum("ij,ij->i", X, X), clip)
        return X.T @ coef / X.shape[0]
    # Chains: (θᵀXᵀ)ᵀ and (CᵀX)ᵀ are the same products as X θ and Xᵀ C, written so that OpenBLAS runs them as
    # one GEMM over the row-major X (about 2x faster than X @ θ for a few columns).
    Z = (theta.T @ X.T).T
    coef = -y[:, None] * expit(-y[:, None] * Z)  # ℓ'(z) per example and chain
    if clip is not None:
        coef = coef * clip_factors(coef**2 * np.einsum("ij,ij->i", X, X)[:, None], clip)
    return (coef.T @ X).T / X.shape[0]


def multinomial_loss(W: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-example multinomial logistic (softmax cross-entropy) loss, W of shape (p, K), y class indices."""
    Z = X @ W
    return logsumexp(Z, axis=1) - Z[np.arange(X.shape[0]), y.astype(np.intp)]


def multinomial_mean_gradient(W: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None = None) -> np.ndarray:
    r"""(1/n) Σᵢ Clip_L(∇_W ℓ(W; xᵢ, yᵢ)) = (1/n) Σᵢ cᵢ xᵢ (pᵢ − e_{yᵢ})ᵀ for softmax cross-entropy.

    ‖xᵢ(pᵢ − e_y)ᵀ‖_F = ‖xᵢ‖ ‖pᵢ − e_y‖ ≤ √2 R, and the Hessian is (diag p − ppᵀ) ⊗ xxᵀ ⪯ (R²/2) I, so
    L = √2 R and β = R²/2.
    """
    P = softmax(X @ W, axis=1)
    P[np.arange(X.shape[0]), y.astype(np.intp)] -= 1.0
    if clip is not None:
        c = clip_factors(np.einsum("ij,ij->i", X, X) * np.einsum("ij,ij->i", P, P), clip)
        P = P * c[:, None]
    return X.T @ P / X.shape[0]


def regularized_objective(per_example_loss: np.ndarray, theta: np.ndarray, lam: float) -> float:
    """𝓛_D(θ) = (1/n) Σ ℓ(θ; x) + λ‖θ‖²/2 (Eq. 14)."""
    return float(np.mean(per_example_loss) + 0.5 * lam * float(np.sum(np.asarray(theta) ** 2)))

r"""Projected noisy mini-batch SGD learning and unlearning for convex losses (Chien, Wang, Chen & Li, NeurIPS 2024).

Algorithm (PNSGD, Chien et al. "Certified Machine Unlearning via Noisy Stochastic Gradient Descent"): each epoch draws
a random permutation of the n records (independent of the data) and visits E = ⌊n/b⌋ disjoint batches B of size b:

.. math:: θ ← Π_R\Bigl(θ - η\bigl(\tfrac1b \textstyle\sum_{i∈B} ∇ℓ(θ; x_i) + λθ\bigr) + \mathcal N(0, σ^2 I_d)\Bigr),

with Π_R the projection onto ‖θ‖ ≤ R. Learning runs K_A epochs from θ₀ = 0; a deletion replaces the removed records by
the dummy record (zero row, label 0; so n and the batch layout stay fixed, as in :class:`NoisyGDAdapter`) and runs K
epochs on the edited data from the current model.

Bound (derived in ``docs/nn_unlearning.md`` §Convex; our derivation of Chien et al.'s Thm 3.2/Cor. 3.5 argument):
for ℓ convex, β-smooth, with ‖∇ℓ‖ ≤ L, F_B is λ-strongly convex and (β+λ)-smooth, so for η ≤ 2/(β+2λ) the step is a
c-contraction with c = 1 − ηλ. Synchronous coupling (same permutations and noise) of a run on D and on D′ that differ
in r records gives sup_t ‖θ_t − θ′_t‖ ≤ r·Z_B with

.. math:: Z_B = \frac{2ηL/b}{1 - c^{E}}

(each differing record shifts one step per epoch by ≤ 2ηL/b, then contracts). After request k the reference model is
learning on D_k′ followed by the same unlearning phases on D_k′; its distance to our chain at the start of phase k is
Δ_k = min(2R, Σ_j c^{T_j}… ) computed by :func:`pnsgd_start_distance`; the T = K·E steps of phase k on the same data
then give, by privacy amplification by iteration (shifted Rényi divergence, shift-reduction with noise σ²),

.. math:: D_α ≤ α\,\frac{c^{2T} Δ_k^2}{2σ^2 \sum_{j<T} c^{2j}} \quad(\text{every } α > 1),

converted to (ε, δ) by :func:`lethe.privacy.rdp.linear_rdp_epsilon`. Chien et al.'s published code uses 2ησ² for the
noise variance and a constant twice ours; the bound here is their bound with the Gaussian shift-reduction cost
α a²/(2σ²) evaluated exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lethe._rng import RandomState, check_random_state
from lethe._validation import check_nonnegative, check_open_unit, check_positive, check_positive_int
from lethe.io import JsonRecord
from lethe.privacy.calibration import bisect_boundary
from lethe.privacy.rdp import linear_rdp_epsilon

__all__ = [
    "ConvexUnlearningPlan",
    "PNSGDSchedule",
    "plan_convex_unlearning",
    "pnsgd_contraction",
    "pnsgd_learning_shift",
    "pnsgd_logistic",
    "pnsgd_schedule",
    "pnsgd_start_distance",
    "pnsgd_unlearning_epochs",
    "pnsgd_unlearning_epsilon",
    "pnsgd_unlearning_rdp_slope",
]

THEOREM = ("Chien, Wang, Chen & Li 2024 (NeurIPS), projected noisy SGD unlearning: synchronous-coupling W_inf bound "
           "Z_B and privacy amplification by iteration for c = 1 - eta*lam contractions; RDP->(eps, delta) by "
           "Canonne-Kamath-Steinke 2020 Prop. 12")


def pnsgd_contraction(*, eta: float, lam: float, smoothness: float) -> float:
    """c = 1 − ηλ, the Lipschitz constant of θ ↦ θ − η∇F_B(θ) for λ-strongly convex, (β+λ)-smooth F_B.

    Requires λ > 0 and η ≤ 2/(β + 2λ) (then max(|1 − ηλ|, |1 − η(β+λ)|) = 1 − ηλ).
    """
    e = check_positive("eta", eta)
    lam_ = check_positive("lam", lam)
    beta = check_nonnegative("smoothness", smoothness)
    if e > 2.0 / (beta + 2.0 * lam_) * (1 + 1e-12):
        raise ValueError(f"eta must be <= 2/(smoothness + 2 lam) = {2.0 / (beta + 2.0 * lam_)!r}. Found {e!r}.")
    c = 1.0 - e * lam_
    if not 0.0 < c < 1.0:
        raise ValueError(f"eta * lam must be in (0, 1). Found {e * lam_!r}.")
    return c


def _steps_per_epoch(n: int, batch_size: int) -> int:
    n_ = check_positive_int("n", n)
    b = check_positive_int("batch_size", batch_size)
    if b > n_:
        raise ValueError(f"batch_size must be <= n = {n_}. Found {b}.")
    return n_ // b


def pnsgd_learning_shift(*, eta: float, lipschitz: float, batch_size: int, n: int, c: float) -> float:
    r"""Z_B = (2ηL/b)/(1 − c^E), E = ⌊n/b⌋: the synchronous-coupling distance per differing record."""
    e = check_positive("eta", eta)
    lip = check_positive("lipschitz", lipschitz)
    E = _steps_per_epoch(n, batch_size)
    return 2.0 * e * lip / batch_size / -math.expm1(E * math.log(c))


def pnsgd_start_distance(*, removed: Sequence[int], phase_steps: Sequence[int], z_b: float, c: float,
                         radius: float) -> float:
    """Δ_k: W∞ bound between our chain and the reference at the start of the k-th unlearning phase.

    ``removed[j]`` records were replaced by request j (j = 0..k−1 are earlier requests, ``removed[-1]`` is request
    k), ``phase_steps[j]`` steps were run for request j < k. Learning differs in Σ_j removed[j] records; phase j < k
    in Σ_{i>j} removed[i] records. Capped at 2R (both chains lie in the ball).
    """
    rs = [int(check_nonnegative(f"removed[{i}]", r)) for i, r in enumerate(removed)]
    if len(phase_steps) != len(rs) - 1:
        raise ValueError(f"phase_steps must have len(removed) - 1 = {len(rs) - 1} entries. Found {len(phase_steps)}.")
    d = sum(rs) * z_b
    for j, t in enumerate(phase_steps):
        d = c ** int(t) * d + sum(rs[j + 1:]) * z_b
    return min(d, 2.0 * check_positive("radius", radius))


def pnsgd_unlearning_rdp_slope(*, distance: float, c: float, sigma: float, steps: int) -> float:
    r"""ε₀ = c^{2T}Δ²/(2σ² Σ_{j<T} c^{2j}) with D_α ≤ α ε₀ after T contractive noisy steps on the same data."""
    d = check_nonnegative("distance", distance)
    s = check_positive("sigma", sigma)
    t = int(check_nonnegative("steps", steps))
    if t == 0:
        return math.inf if d > 0 else 0.0
    log_c = math.log(c)
    s2 = -math.expm1(2.0 * t * log_c) / -math.expm1(2.0 * log_c)
    return math.exp(2.0 * t * log_c) * d * d / (2.0 * s * s * s2)


def pnsgd_unlearning_epsilon(*, distance: float, c: float, sigma: float, steps: int, delta: float) -> float:
    """(ε at δ) of :func:`pnsgd_unlearning_rdp_slope` (inf when no step was run and the distance is positive)."""
    slope = pnsgd_unlearning_rdp_slope(distance=distance, c=c, sigma=sigma, steps=steps)
    return math.inf if math.isinf(slope) else linear_rdp_epsilon(slope, delta)


def pnsgd_unlearning_epochs(epsilon: float, delta: float, *, distance: float, c: float, sigma: float,
                            steps_per_epoch: int, max_epochs: int = 10**7) -> int:
    """Fewest epochs K ≥ 0 with ε(K·E steps) ≤ ε (ε decreases in T; exponential then binary search)."""
    e = check_positive("epsilon", epsilon)
    dl = check_open_unit("delta", delta)
    E = check_positive_int("steps_per_epoch", steps_per_epoch)

    def ok(k: int) -> bool:
        return pnsgd_unlearning_epsilon(distance=distance, c=c, sigma=sigma, steps=k * E, delta=dl) <= e

    if ok(0):
        return 0
    hi = 1
    while not ok(hi):
        hi *= 2
        if hi > max_epochs:
            raise ValueError(f"no number of epochs <= max_epochs={max_epochs} reaches epsilon={e!r}.")
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class PNSGDSchedule(JsonRecord):
    """Hyperparameters of PNSGD learning/unlearning and the per-request guarantee. Frozen; JSON via :meth:`to_dict`.

    Attributes
    ----------
    epsilon, delta : float
        Target of every deletion request.
    n, batch_size, steps_per_epoch, r : int
        n, b, E = ⌊n/b⌋, records per request.
    eta, lam, sigma, radius, lipschitz, smoothness, c, z_b : float
        η, λ, σ (per-step noise std), R, L, β, c = 1 − ηλ, Z_B.
    epochs_first_request : int
        K of the first request of r records (later requests: :func:`pnsgd_start_distance`).
    steps_first_request, gradient_evaluations_first_request : int
        K·E and K·E·b.
    theorem : str
    """

    epsilon: float
    delta: float
    n: int
    batch_size: int
    steps_per_epoch: int
    r: int
    eta: float
    lam: float
    sigma: float
    radius: float
    lipschitz: float
    smoothness: float
    c: float
    z_b: float
    epochs_first_request: int
    steps_first_request: int
    gradient_evaluations_first_request: int
    theorem: str


def pnsgd_schedule(epsilon: float, delta: float, *, n: int, lam: float, sigma: float, eta: float,
                   batch_size: int, radius: float, r: int = 1, lipschitz: float = 1.0,
                   smoothness: float = 0.25) -> PNSGDSchedule:
    """The PNSGD schedule for a target (ε, δ) per deletion request (defaults: logistic loss on rows ‖x‖ ≤ 1).

    Examples
    --------
    >>> s = pnsgd_schedule(1.0, 1e-5, n=10000, lam=1e-3, sigma=0.01, eta=1.0, batch_size=100, radius=10.0)
    >>> s.steps_per_epoch, s.epochs_first_request
    (100, 14)
    """
    e = check_positive("epsilon", epsilon)
    dl = check_open_unit("delta", delta)
    c = pnsgd_contraction(eta=eta, lam=lam, smoothness=smoothness)
    E = _steps_per_epoch(n, batch_size)
    rr = check_positive_int("r", r)
    zb = pnsgd_learning_shift(eta=eta, lipschitz=lipschitz, batch_size=batch_size, n=n, c=c)
    dist = pnsgd_start_distance(removed=[rr], phase_steps=[], z_b=zb, c=c, radius=radius)
    k = pnsgd_unlearning_epochs(e, dl, distance=dist, c=c, sigma=check_positive("sigma", sigma), steps_per_epoch=E)
    return PNSGDSchedule(epsilon=e, delta=dl, n=int(n), batch_size=int(batch_size), steps_per_epoch=E, r=rr,
                         eta=float(eta), lam=float(lam), sigma=float(sigma), radius=float(radius),
                         lipschitz=float(lipschitz), smoothness=float(smoothness), c=c, z_b=zb,
                         epochs_first_request=k, steps_first_request=k * E,
                         gradient_evaluations_first_request=k * E * int(batch_size), theorem=THEOREM)


def pnsgd_logistic(X: np.ndarray, y: np.ndarray, theta0: np.ndarray, *, epochs: int, eta: float, lam: float,
                   sigma: float, batch_size: int, radius: float, random_state: RandomState = None) -> np.ndarray:
    """Run PNSGD on the binary logistic loss log(1 + exp(−y xᵀθ)) (labels ±1; 0 for dummy rows) from θ₀.

    Rows must satisfy ‖x‖ ≤ 1 (then L = 1, β = 1/4); this is checked.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be 2-D and y of length X.shape[0]. Found {X.shape} and {y.shape}.")
    if np.any(np.einsum("ij,ij->i", X, X) > 1.0 + 1e-12):
        raise ValueError("rows of X must have norm <= 1 (the Lipschitz constant L = 1 relies on it).")
    k = int(check_nonnegative("epochs", epochs))
    e, lam_, s = check_positive("eta", eta), check_nonnegative("lam", lam), check_nonnegative("sigma", sigma)
    R = check_positive("radius", radius)
    n = X.shape[0]
    E = _steps_per_epoch(n, batch_size)
    rng = check_random_state(random_state)
    theta = np.array(theta0, dtype=np.float64, copy=True)
    for _ in range(k):
        perm = rng.permutation(n)
        for j in range(E):
            idx = perm[j * batch_size:(j + 1) * batch_size]
            m = y[idx] * (X[idx] @ theta)
            coef = -y[idx] * 0.5 * (1.0 - np.tanh(0.5 * m))  # −y σ(−m), stable
            g = X[idx].T @ coef / batch_size + lam_ * theta
            theta = theta - e * g + s * rng.standard_normal(theta.shape)
            nrm = float(np.linalg.norm(theta))
            if nrm > R:
                theta *= R / nrm
    return theta


# ---------------------------------------------------------------------------------------------------------------
# Planner: Chien et al. (PNSGD, default) vs Chourasia & Shah Thm 5.1 at the same (ε, δ), n, loss, η and noise.
# ---------------------------------------------------------------------------------------------------------------

PLAN_THEOREMS = ("pnsgd", "thm5.1")


@dataclass(frozen=True)
class ConvexUnlearningPlan(JsonRecord):
    """Both schedules for one (ε, δ) per request of r records, and the one chosen. Frozen; JSON via :meth:`to_dict`.

    Attributes
    ----------
    theorem : str
        ``"pnsgd"`` (default) or ``"thm5.1"``: the schedule to run.
    eta, noise_std : float
        Step size η = 1/(2(λ+β)) and per-step noise std √(2ησ²) with σ² of Thm 5.1 at ``epsilon_dp`` — shared.
    thm51_q, thm51_epsilon_dd : float
        Thm 5.1's Rényi order q and ε_dd, the (q, ε_dd) with the fewest steps among the grid whose conversion
        (Canonne et al. Prop. 12) is ≤ ε at δ.
    thm51_steps, thm51_gradient_evaluations : int
        Full-batch steps per request and n × steps.
    pnsgd : PNSGDSchedule
        The mini-batch PNSGD schedule at the same η and noise.
    pnsgd_steps, pnsgd_gradient_evaluations : int
        Its steps and per-example gradients for the first request.
    """

    theorem: str
    epsilon: float
    delta: float
    n: int
    r: int
    lam: float
    eta: float
    noise_std: float
    thm51_q: float
    thm51_epsilon_dd: float
    thm51_steps: int
    thm51_gradient_evaluations: int
    pnsgd: PNSGDSchedule
    pnsgd_steps: int
    pnsgd_gradient_evaluations: int


def plan_convex_unlearning(epsilon: float, delta: float, *, n: int, d: int, lam: float, r: int = 1,
                           batch_size: int = 128, radius: float | None = None, epsilon_dp: float = 1.0,
                           lipschitz: float = 1.0, smoothness: float = 0.25,
                           theorem: str = "pnsgd") -> ConvexUnlearningPlan:
    """Per-request schedules of Chien et al.'s PNSGD (the default) and of Chourasia & Shah's Thm 5.1, side by side.

    Both use η = 1/(2(λ+β)) and the per-step noise std √(2ησ²) with σ² = 4qL²/(λ ε_dp n²) of Thm 5.1, so they differ
    only in the bound (and PNSGD in its batches). Measured on MNIST 3 vs 8 (``docs/nn_unlearning.md`` §5): at
    (1, 1e-5), r = 10, PNSGD with b = 128 needs 6× fewer per-example gradients per request than Thm 5.1 at the same
    test accuracy (3 seeds), hence the default. ``theorem="thm5.1"`` selects Chourasia & Shah's schedule (run by
    :class:`~lethe.noisygd.estimators.NoisyGDLogisticRegression`; PNSGD by
    :class:`~lethe.noisygd.pnsgd.PNSGDLogisticRegression`).

    Examples
    --------
    >>> p = plan_convex_unlearning(1.0, 1e-5, n=11982, d=784, lam=0.01, r=10)
    >>> p.theorem, p.pnsgd_gradient_evaluations < p.thm51_gradient_evaluations
    ('pnsgd', True)
    """
    from lethe.noisygd.schedule import convex_schedule
    from lethe.privacy.rdp import rdp_to_dp_tight

    e = check_positive("epsilon", epsilon)
    dl = check_open_unit("delta", delta)
    if theorem not in PLAN_THEOREMS:
        raise ValueError(f"theorem must be one of {PLAN_THEOREMS}. Found {theorem!r}.")
    lam_ = check_positive("lam", lam)
    rr = check_positive_int("r", r)
    best = None
    for q in (2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0):
        # largest ε_dd ≤ ε_dp = 1 whose (q, ε_dd) → (ε, δ) conversion is ≤ ε (60 halvings of [0, 1])
        def meets(eps_dd: float, q: float = q) -> bool:
            return rdp_to_dp_tight(q, eps_dd, dl) <= e

        lo = bisect_boundary(meets, 0.0, 1.0, feasible_side="lo", max_iter=60)[0]
        if not 0.0 < lo < min(1.0, epsilon_dp):
            continue
        sch = convex_schedule(lipschitz=lipschitz, smoothness=smoothness, lam=lam_, n=n, d=d, r=rr, q=q,
                              epsilon_dp=epsilon_dp, epsilon_dd=lo, utility=False)
        if best is None or sch.k_unlearn < best[1].k_unlearn:
            best = (q, sch)
    if best is None:
        raise ValueError(f"no Renyi order in the grid gives Thm 5.1 a schedule for (epsilon, delta) = ({e}, {dl}) "
                         f"with epsilon_dp = {epsilon_dp}.")
    q, sch = best
    noise = math.sqrt(2.0 * sch.eta * sch.sigma2)
    ps = pnsgd_schedule(e, dl, n=n, lam=lam_, sigma=noise, eta=sch.eta, batch_size=batch_size,
                        radius=1.0 / lam_ if radius is None else radius, r=rr, lipschitz=lipschitz,
                        smoothness=smoothness)
    return ConvexUnlearningPlan(theorem=theorem, epsilon=e, delta=dl, n=int(n), r=rr, lam=lam_, eta=sch.eta,
                                noise_std=noise, thm51_q=q, thm51_epsilon_dd=sch.epsilon_dd,
                                thm51_steps=sch.k_unlearn, thm51_gradient_evaluations=sch.k_unlearn * int(n),
                                pnsgd=ps, pnsgd_steps=ps.steps_first_request,
                                pnsgd_gradient_evaluations=ps.gradient_evaluations_first_request)

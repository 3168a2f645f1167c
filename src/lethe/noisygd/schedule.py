"""Schedules of Noisy-GD learning A (Eq. 16) and unlearning Ā (Eq. 17): Chourasia & Shah (2023), §5.

Pure formulas. Each function names the theorem and equation it implements; ``docs/noisygd.md`` derives them and
lists where the paper is inconsistent and which (conservative) reading is used here.

Symbols → arguments
-------------------
=============  ====================  ================================================================
paper          argument              meaning
=============  ====================  ================================================================
L              ``lipschitz``         ℓ(·; x) is L-Lipschitz (or per-example gradients clipped to L)
β              ``smoothness``        ℓ(·; x) is β-smooth
λ              ``lam``               L2 constant of r(θ) = λ‖θ‖²/2
B              ``B``                 ℓ is σ² log(B)/4-bounded (Thm 5.2 only), B > 1
n              ``n``                 database size
d              ``d``                 model dimension
r              ``r``                 records edited per request
q              ``q``                 Rényi order, q > 1
ε_dp           ``epsilon_dp``        (q, ε_dp)-Rényi DP of A and Ā
ε_dd           ``epsilon_dd``        (q, ε_dd)-deletion privacy under non-adaptive r-requesters
η, σ²          ``eta``, ``sigma2``   step size, noise variance
K_A, K_Ā       ``k_learn``,          Noisy-GD iterations of A and Ā
               ``k_unlearn``
ρ              ``init_variance``     ρ = N(0, init_variance · I_d)
κ              ``kappa``             (λ + β)/λ
=============  ====================  ================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lethe._validation import (
    check_nonnegative,
    check_nonnegative_int,
    check_positive,
    check_positive_int,
    check_renyi_order,
)
from lethe.io import JsonRecord
from lethe.noisygd.guarantees import check_convex_run

__all__ = [
    "ConvexSchedule",
    "NonConvexSchedule",
    "convex_deletion_epsilon",
    "convex_excess_risk_bound",
    "convex_schedule",
    "convex_unlearning_steps",
    "nonconvex_deletion_epsilon",
    "nonconvex_excess_risk_bound",
    "nonconvex_schedule",
    "nonconvex_schedule_for_loss",
]


def _ceil_steps(x: float) -> int:
    """Smallest integer K ≥ max(x, 0), forgiving an absolute rounding error of 1e-9 in ``x``.

    (So that a bound like 8·log(e) = 8.000000000000002 gives 8.) Certificates never rely on this: they report
    the ε that the K actually run certifies.
    """
    return max(0, math.ceil(x - 1e-9))


def convex_deletion_epsilon(
    k_unlearn: int,
    *,
    q: float,
    lipschitz: float,
    smoothness: float,
    lam: float,
    sigma2: float,
    eta: float,
    n: int,
) -> float:
    r"""ε_dd that K_Ā unlearning iterations certify for a convex loss: Thm G.15, Eq. (114) solved for ε_dd.

    Eq. (114) says (A, Ā) is (q, ε_dd)-deletion-private under all non-adaptive r-requesters if
    K_Ā ≥ (2/(ηλ)) log(4qL²/(λ ε_dd σ² n²)). The smallest ε_dd that a given K_Ā satisfies is

    .. math:: ε_{dd}(K_Ā) = \frac{4 q L^2}{λ σ^2 n^2}\, e^{-ηλK_Ā/2}.

    Conditions (the caller's promise): ℓ convex, β-smooth, L-Lipschitz (or clipped to L); r(θ) = λ‖θ‖²/2;
    η < 1/(λ + β); initialisation ρ = N(0, σ²/(λ(1 − ηλ/2)) I_d). The bound holds for any K_A ≥ 0 and any r.

    Parameters
    ----------
    k_unlearn : int
        K_Ā ≥ 0.
    q, lipschitz, smoothness, lam, sigma2, eta, n
        q > 1, L, β, λ, σ², η, n as in the module table.

    Returns
    -------
    float

    Examples
    --------
    With Thm 5.1's η and σ² the bound is ε_dp·exp(−K_Ā/(4κ)): here κ = 2, ε_dp = 1.

    >>> lam, beta, q, n = 1.0, 1.0, 2.0, 10
    >>> s2 = 4 * q / (lam * 1.0 * n**2)
    >>> round(convex_deletion_epsilon(8, q=q, lipschitz=1.0, smoothness=beta, lam=lam, sigma2=s2,
    ...                               eta=0.25, n=n), 12) == round(math.exp(-1.0), 12)
    True
    """
    k = check_nonnegative_int("k_unlearn", k_unlearn)
    q, lipschitz, smoothness, lam, sigma2, eta, n = check_convex_run(q, lipschitz, smoothness, lam, sigma2, eta, n)
    return 4.0 * q * lipschitz**2 / (lam * sigma2 * n**2) * math.exp(-eta * lam * k / 2.0)


def convex_unlearning_steps(
    epsilon_dd: float,
    *,
    q: float,
    lipschitz: float,
    smoothness: float,
    lam: float,
    sigma2: float,
    eta: float,
    n: int,
) -> int:
    r"""Smallest integer K_Ā satisfying Thm G.15, Eq. (114): K_Ā ≥ (2/(ηλ)) log(4qL²/(λ ε_dd σ² n²)).

    Same conditions as :func:`convex_deletion_epsilon`; 0 when the logarithm is ≤ 0.

    >>> convex_unlearning_steps(math.exp(-1.0), q=2.0, lipschitz=1.0, smoothness=1.0, lam=1.0,
    ...                         sigma2=0.08, eta=0.25, n=10)
    8
    """
    epsilon_dd = check_positive("epsilon_dd", epsilon_dd)
    q, lipschitz, smoothness, lam, sigma2, eta, n = check_convex_run(q, lipschitz, smoothness, lam, sigma2, eta, n)
    bound = 2.0 / (eta * lam) * math.log(4.0 * q * lipschitz**2 / (lam * epsilon_dd * sigma2 * n**2))
    return _certified_steps(_ceil_steps(bound), epsilon_dd, q=q, lipschitz=lipschitz, smoothness=smoothness, lam=lam,
                            sigma2=sigma2, eta=eta, n=n)


def _certified_steps(k: int, epsilon_dd: float, **run: Any) -> int:
    """The smallest K ≥ k with :func:`convex_deletion_epsilon` (K, ``**run``) ≤ ε_dd: the K returned must certify
    ε_dd as that function computes it (what certificates report), whatever the rounding of the closed form."""
    while convex_deletion_epsilon(k, **run) > epsilon_dd:
        k += 1
    return k


def convex_excess_risk_bound(*, q: float, lipschitz: float, smoothness: float, lam: float, epsilon_dp: float,
                             n: int, d: int) -> float:
    r"""Thm 5.1 (3), made explicit in its proof (App. G.4): err(Θ̂_i; D_i) ≤ 10 κ q d L² / (λ ε_dp n²).

    Holds for every i ≥ 0 when η, σ², ρ are Thm 5.1's and K_A, K_Ā satisfy Eq. (19).

    >>> convex_excess_risk_bound(q=2.0, lipschitz=1.0, smoothness=1.0, lam=1.0, epsilon_dp=1.0, n=10, d=3)
    1.2
    """
    q = check_renyi_order("q", q)
    lipschitz = check_positive("lipschitz", lipschitz)
    smoothness = check_positive("smoothness", smoothness)
    lam = check_positive("lam", lam)
    epsilon_dp = check_positive("epsilon_dp", epsilon_dp)
    n = check_positive_int("n", n)
    d = check_positive_int("d", d)
    kappa = (lam + smoothness) / lam
    return 10.0 * kappa * q * d * lipschitz**2 / (lam * epsilon_dp * n**2)


@dataclass(frozen=True)
class ConvexSchedule(JsonRecord):
    """Hyperparameters of (A, Ā) from Thm 5.1 and the guarantees they imply. Frozen; JSON via :meth:`to_dict`.

    Attributes
    ----------
    eta, sigma2, init_variance : float
        η = 1/(2(λ+β)), σ² = 4qL²/(λ ε_dp n²), ρ = N(0, σ²/(λ(1 − ηλ/2)) I_d).
    k_learn : int
        K_A: Eq. (19) (utility) when ``utility`` else 0 (privacy and deletion hold for any K_A ≥ 0).
    k_unlearn : int
        K_Ā = max(k_unlearn_deletion, k_unlearn_utility).
    k_unlearn_deletion : int
        ⌈4κ log(ε_dp/ε_dd)⌉, Eq. (18).
    k_unlearn_utility : int
        ⌈4κ log max{5κ, 8 ε_dp r²/(q d)}⌉, Eq. (19), or 0 when ``utility`` is False.
    epsilon_dp : float
        (q, ε_dp)-Rényi DP of A and Ā for any K (Thm 5.1 (1), via Thm G.9).
    epsilon_dd : float
        ε_dd certified by k_unlearn (Eq. 114); ≤ the requested ε_dd.
    excess_risk_bound : float or None
        10κqdL²/(λ ε_dp n²) when ``utility`` (Thm 5.1 (3)), else None.
    predicted_speedup : float
        K_A / K_Ā, the gradient-evaluation ratio of retraining over unlearning (inf if K_Ā = 0).
    """

    theorem: str
    q: float
    lipschitz: float
    smoothness: float
    lam: float
    n: int
    d: int
    r: int
    kappa: float
    eta: float
    sigma2: float
    init_variance: float
    k_learn: int
    k_unlearn: int
    k_unlearn_deletion: int
    k_unlearn_utility: int
    epsilon_dp: float
    epsilon_dd: float
    excess_risk_bound: float | None
    predicted_speedup: float


def convex_schedule(
    *,
    lipschitz: float,
    smoothness: float,
    lam: float,
    n: int,
    d: int,
    r: int,
    q: float,
    epsilon_dp: float,
    epsilon_dd: float,
    utility: bool = True,
) -> ConvexSchedule:
    r"""η, σ², ρ, K_A and K_Ā of Theorem 5.1 (convex, L-Lipschitz, β-smooth loss; Eq. 18–19).

    .. math::
        κ = \frac{λ+β}{λ},\quad η = \frac{1}{2(λ+β)},\quad σ^2 = \frac{4qL^2}{λ ε_{dp} n^2},\quad
        ρ = \mathcal N\Bigl(0, \frac{σ^2}{λ(1-ηλ/2)} I_d\Bigr),

        K_Ā ≥ 4κ \log\frac{ε_{dp}}{ε_{dd}}\ (18),\qquad
        K_A ≥ 4κ\log\frac{ε_{dp} n^2}{4qd},\quad K_Ā ≥ 4κ \log\max\Bigl\{5κ, \frac{8ε_{dp} r^2}{qd}\Bigr\}\ (19).

    Parameters
    ----------
    lipschitz, smoothness, lam : float
        L, β, λ > 0.
    n, d, r : int
        Database size, model dimension, records per edit request (1 ≤ r ≤ n).
    q : float
        Rényi order q > 1.
    epsilon_dp, epsilon_dd : float
        ε_dp ≥ ε_dd > 0.
    utility : bool, default True
        Also impose Eq. (19), so every model has excess risk ≤ 10κqdL²/(λ ε_dp n²).

    Returns
    -------
    ConvexSchedule

    Examples
    --------
    Logistic loss on unit-norm rows (L = 1, β = 1/4), λ = 0.01 so κ = 26:

    >>> s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=0.01, n=1000, d=10, r=1, q=10.0,
    ...                     epsilon_dp=1.0, epsilon_dd=0.1, utility=False)
    >>> s.kappa, s.eta, s.k_unlearn, s.k_unlearn == math.ceil(4 * 26 * math.log(10))
    (26.0, 1.923076923076923, 240, True)
    """
    lipschitz, smoothness, lam, n, d, r, q, epsilon_dp, epsilon_dd = _check_schedule_inputs(
        lipschitz, smoothness, lam, n, d, r, q, epsilon_dp, epsilon_dd, theorem="5.1")

    kappa = (lam + smoothness) / lam
    eta = 1.0 / (2.0 * (lam + smoothness))
    sigma2 = 4.0 * q * lipschitz**2 / (lam * epsilon_dp * n**2)
    init_variance = sigma2 / (lam * (1.0 - eta * lam / 2.0))

    k_del = _ceil_steps(4.0 * kappa * math.log(epsilon_dp / epsilon_dd))
    if utility:
        k_learn = _ceil_steps(4.0 * kappa * math.log(epsilon_dp * n**2 / (4.0 * q * d)))
        k_util = _ceil_steps(4.0 * kappa * math.log(max(5.0 * kappa, 8.0 * epsilon_dp * r**2 / (q * d))))
        risk: float | None = convex_excess_risk_bound(
            q=q, lipschitz=lipschitz, smoothness=smoothness, lam=lam, epsilon_dp=epsilon_dp, n=n, d=d
        )
    else:
        k_learn, k_util, risk = 0, 0, None
    k_del = _certified_steps(k_del, epsilon_dd, q=q, lipschitz=lipschitz, smoothness=smoothness, lam=lam,
                             sigma2=sigma2, eta=eta, n=n)
    k_unlearn = max(k_del, k_util)
    eps_dd = convex_deletion_epsilon(
        k_unlearn, q=q, lipschitz=lipschitz, smoothness=smoothness, lam=lam, sigma2=sigma2, eta=eta, n=n
    )
    return ConvexSchedule(
        theorem="Chourasia & Shah 2023, Thm 5.1 (Eq. 18-19); deletion via Thm G.15 Eq. 114; DP via Thm G.9",
        q=q,
        lipschitz=lipschitz,
        smoothness=smoothness,
        lam=lam,
        n=n,
        d=d,
        r=r,
        kappa=kappa,
        eta=eta,
        sigma2=sigma2,
        init_variance=init_variance,
        k_learn=k_learn,
        k_unlearn=k_unlearn,
        k_unlearn_deletion=k_del,
        k_unlearn_utility=k_util,
        epsilon_dp=epsilon_dp,
        epsilon_dd=eps_dd,
        excess_risk_bound=risk,
        predicted_speedup=(k_learn / k_unlearn) if k_unlearn > 0 else math.inf,
    )


def nonconvex_excess_risk_bound(
    *, lipschitz: float, smoothness: float, lam: float, B: float, sigma2: float, epsilon_dd: float, d: int
) -> float:
    r"""Thm 5.2 (3), Eq. (165): err ≤ Lσ√(2ε_dd B/λ) + ε_dd B σ²(2λ+β)/λ + (dσ²/2)(log((β+λ)/λ) + 2√B).

    >>> round(nonconvex_excess_risk_bound(lipschitz=1.0, smoothness=1.0, lam=1.0, B=4.0, sigma2=1.0,
    ...                                   epsilon_dd=0.5, d=2), 10) == round(2 + 6 + math.log(2) + 4, 10)
    True
    """
    lipschitz = check_positive("lipschitz", lipschitz)
    smoothness = check_nonnegative("smoothness", smoothness)
    lam = check_positive("lam", lam)
    B = _check_B(B)
    sigma2 = check_positive("sigma2", sigma2)
    epsilon_dd = check_positive("epsilon_dd", epsilon_dd)
    d = check_positive_int("d", d)
    sigma = math.sqrt(sigma2)
    return (
        lipschitz * sigma * math.sqrt(2.0 * epsilon_dd * B / lam)
        + epsilon_dd * B * sigma2 * (2.0 * lam + smoothness) / lam
        + d * sigma2 / 2.0 * (math.log((smoothness + lam) / lam) + 2.0 * math.sqrt(B))
    )


def _check_sizes(n: Any, d: Any, r: Any) -> tuple[int, int, int]:
    """Database size n, model dimension d and records per edit r: integers ≥ 1 with r ≤ n."""
    n = check_positive_int("n", n)
    d = check_positive_int("d", d)
    r = check_positive_int("r", r)
    if r > n:
        raise ValueError(f"r must be <= n = {n}. Found {r}.")
    return n, d, r


def _check_schedule_inputs(lipschitz: Any, smoothness: Any, lam: Any, n: Any, d: Any, r: Any, q: Any,
                           epsilon_dp: Any, epsilon_dd: Any, *,
                           theorem: str) -> tuple[float, float, float, int, int, int, float, float, float]:
    """The checks shared by the schedules of Theorems 5.1 and 5.2 (constants > 0, 1 <= r <= n, q > 1,
    0 < ε_dd <= ε_dp)."""
    lipschitz = check_positive("lipschitz", lipschitz)
    smoothness = check_positive("smoothness", smoothness)
    lam = check_positive("lam", lam)
    n, d, r = _check_sizes(n, d, r)
    q = check_renyi_order("q", q)
    epsilon_dp = check_positive("epsilon_dp", epsilon_dp)
    epsilon_dd = check_positive("epsilon_dd", epsilon_dd)
    if epsilon_dd > epsilon_dp:
        raise ValueError(f"epsilon_dd must be <= epsilon_dp = {epsilon_dp} (Thm {theorem}). Found {epsilon_dd}.")
    return lipschitz, smoothness, lam, n, d, r, q, epsilon_dp, epsilon_dd


def nonconvex_eta_max(*, lam: float, B: float, q: float, smoothness: float) -> float:
    """λ/(64Bq²(β+λ)²): the largest step size Thm G.22 (invoked by Thm 5.2's proof) allows."""
    return lam / (64.0 * B * q**2 * (smoothness + lam) ** 2)


def _check_B(B: Any) -> float:
    B = check_positive("B", B)
    if B <= 1.0:
        raise ValueError(f"B must be > 1 (Thm 5.2). Found {B}.")
    return B


@dataclass(frozen=True)
class NonConvexSchedule(JsonRecord):
    """Hyperparameters of (A, Ā) from Thm 5.2 (bounded, smooth, possibly non-convex loss). Frozen.

    Attributes
    ----------
    eta : float
        min{λ ε_dd/(64 d q B (β+λ)²), λ/(64 B q² (β+λ)²)}: Thm 5.2 (2) and the step-size condition of Thm G.22,
        which its proof invokes (see docs/noisygd.md).
    k_learn, k_unlearn : int
        Smallest integers satisfying Eq. (21), K_Ā computed from the returned K_A.
    sigma2 : float
        qL²η max{K_A, K_Ā}/(ε_dp n²), Eq. (20) with equality.
    init_variance : float
        σ²/λ, ρ = N(0, σ²/λ I_d).
    required_loss_bound : float
        σ² log(B)/4: the schedule's guarantees need |ℓ(θ; x) − c| ≤ this for all θ, x and some constant c.
    epsilon_dp, epsilon_dd : float
        The Rényi DP and deletion-privacy levels the theorem then certifies.
    excess_risk_bound : float
        Eq. (165).
    predicted_speedup : float
        K_A / K_Ā.
    """

    theorem: str
    q: float
    lipschitz: float
    smoothness: float
    lam: float
    B: float
    n: int
    d: int
    r: int
    eta: float
    sigma2: float
    init_variance: float
    k_learn: int
    k_unlearn: int
    required_loss_bound: float
    epsilon_dp: float
    epsilon_dd: float
    excess_risk_bound: float
    predicted_speedup: float

    def check_loss_bound(self, loss_half_range: float) -> None:
        """Raise ``ValueError`` unless sup|ℓ − c| = ``loss_half_range`` ≤ σ² log(B)/4 (Thm 5.2's assumption)."""
        loss_half_range = check_nonnegative("loss_half_range", loss_half_range)
        if loss_half_range > self.required_loss_bound:
            raise ValueError(
                "Thm 5.2 needs the loss to be sigma2*log(B)/4-bounded: loss_half_range must be <= "
                f"{self.required_loss_bound!r}. Found {loss_half_range!r}."
            )


def nonconvex_schedule(
    *,
    lipschitz: float,
    smoothness: float,
    lam: float,
    B: float,
    n: int,
    d: int,
    r: int,
    q: float,
    epsilon_dp: float,
    epsilon_dd: float,
) -> NonConvexSchedule:
    r"""η, σ², ρ, K_A and K_Ā of Theorem 5.2 (non-convex; Eq. 20–21).

    .. math::
        η ≤ \frac{λ ε_{dd}}{64 d q B (β+λ)^2},\qquad
        K_A ≥ \frac{2B}{λη}\log\frac{q\log B}{ε_{dd}},\qquad
        K_Ā ≥ K_A − \frac{2B}{λη}\log\frac{\log B}{2(ε_{dd} + \frac rn \log B)},

        σ^2 ≥ \frac{q L^2}{ε_{dp} n^2}\, η \max\{K_A, K_Ā\},\qquad ρ = \mathcal N(0, σ^2/λ\, I_d).

    The loss must be σ² log(B)/4-bounded, L-Lipschitz (or clipped) and β-smooth; ``required_loss_bound`` is
    that bound for the returned σ² (check it with :meth:`NonConvexSchedule.check_loss_bound`). Requires
    d > ε_dp ≥ ε_dd > 0, q > 1, B > 1.

    Examples
    --------
    >>> s = nonconvex_schedule(lipschitz=1.0, smoothness=1.0, lam=1.0, B=math.e, n=100, d=2, r=1, q=2.0,
    ...                        epsilon_dp=1.0, epsilon_dd=0.5)
    >>> s.eta == 1.0 * 0.5 / (64 * 2 * 2.0 * math.e * 4)
    True
    >>> s.k_learn == math.ceil(2 * math.e / s.eta * math.log(2.0 / 0.5))
    True
    """
    B = _check_B(B)
    lipschitz, smoothness, lam, n, d, r, q, epsilon_dp, epsilon_dd = _check_schedule_inputs(
        lipschitz, smoothness, lam, n, d, r, q, epsilon_dp, epsilon_dd, theorem="5.2")
    if not d > epsilon_dp:
        raise ValueError(f"d must be > epsilon_dp = {epsilon_dp} (Thm 5.2). Found {d}.")

    bl = (smoothness + lam) ** 2
    eta = min(lam * epsilon_dd / (64.0 * d * q * B * bl), nonconvex_eta_max(lam=lam, B=B, q=q, smoothness=smoothness))
    scale = 2.0 * B / (lam * eta)
    log_b = math.log(B)
    k_learn = _ceil_steps(scale * math.log(q * log_b / epsilon_dd))
    k_unlearn = _ceil_steps(k_learn - scale * math.log(log_b / (2.0 * (epsilon_dd + r / n * log_b))))
    sigma2 = q * lipschitz**2 * eta * max(k_learn, k_unlearn) / (epsilon_dp * n**2)
    if sigma2 <= 0.0:
        raise ValueError(
            "Thm 5.2 gives K_A = K_Ā = 0 here (q log(B) <= epsilon_dd), so sigma2 = 0: the theorem's "
            f"sigma2 > 0 cannot be met. Found q={q}, B={B}, epsilon_dd={epsilon_dd}."
        )
    risk = nonconvex_excess_risk_bound(
        lipschitz=lipschitz, smoothness=smoothness, lam=lam, B=B, sigma2=sigma2, epsilon_dd=epsilon_dd, d=d
    )
    return NonConvexSchedule(
        theorem="Chourasia & Shah 2023, Thm 5.2 (Eq. 20-21); convergence Thm G.22; DP via Thm G.7",
        q=q,
        lipschitz=lipschitz,
        smoothness=smoothness,
        lam=lam,
        B=B,
        n=n,
        d=d,
        r=r,
        eta=eta,
        sigma2=sigma2,
        init_variance=sigma2 / lam,
        k_learn=k_learn,
        k_unlearn=k_unlearn,
        required_loss_bound=sigma2 * log_b / 4.0,
        epsilon_dp=epsilon_dp,
        epsilon_dd=epsilon_dd,
        excess_risk_bound=risk,
        predicted_speedup=(k_learn / k_unlearn) if k_unlearn > 0 else math.inf,
    )


def nonconvex_deletion_epsilon(
    k_learn: int,
    k_unlearn: int,
    *,
    q: float,
    B: float,
    eta: float,
    lam: float,
    smoothness: float,
    d: int,
    r: int,
    n: int,
) -> float:
    r"""The ε_dd that Thm 5.2's proof certifies for K_A, K_Ā actually run (inverse direction of Eq. 21).

    Hypotheses (the caller must ensure the loss ones): ℓ is σ² log(B)/4-bounded and β-smooth, ρ = N(0, σ²/λ I),
    η ≤ λ/(64Bq²(β+λ)²) (Thm G.22, checked), every edit replaces at most r of the n records. With
    a = 32dηqB(β+λ)²/λ (the floor of Eq. 142) and ρ_Ā = q e^{−ληK_Ā/(2B)}, the proof's base step gives
    R_q(μ̂₀‖π(D₀)) ≤ E₀ = q e^{−ληK_A/(2B)} log(B)/2 + a (Eq. 156 + G.22), and its induction step
    (Eq. 157–158 + G.22) gives R_q(μ̂_i‖π(D_i)) ≤ ρ_Ā (E_{i−1} + r log(B)/n) + a. If ρ_Ā < 1 this affine map
    keeps every E ≥ E* = (ρ_Ā r log(B)/n + a)/(1 − ρ_Ā) at or below E, so

    .. math::
        ε_{dd} = \max\{E_0, E^*\}

    holds for every step i ≥ 0 (returned; ``inf`` if ρ_Ā ≥ 1, i.e. Ā does not contract). With the K_A, K_Ā of
    :func:`nonconvex_schedule` this is ≤ the requested ε_dd (the theorem's proof, tested).

    >>> e = nonconvex_deletion_epsilon(4 * 10**5, 10**5, q=2.0, B=4.0, eta=1e-4, lam=1.0, smoothness=0.0, d=1,
    ...                                r=1, n=100)
    >>> a, rho = 32 * 1e-4 * 2 * 4 / 1.0, 2 * math.exp(-1e-4 * 1e5 / 8)
    >>> e0, e_star = 2 * math.exp(-1e-4 * 4e5 / 8) * math.log(4) / 2 + a, (rho * math.log(4) / 100 + a) / (1 - rho)
    >>> math.isclose(e, max(e0, e_star)), e_star > e0
    (True, True)
    """
    k_learn = check_nonnegative_int("k_learn", k_learn)
    k_unlearn = check_nonnegative_int("k_unlearn", k_unlearn)
    q = check_renyi_order("q", q)
    B = _check_B(B)
    eta = check_positive("eta", eta)
    lam = check_positive("lam", lam)
    smoothness = check_nonnegative("smoothness", smoothness)
    n, d, r = _check_sizes(n, d, r)
    eta_max = nonconvex_eta_max(lam=lam, B=B, q=q, smoothness=smoothness)
    if eta > eta_max * (1.0 + 1e-12):
        raise ValueError(f"eta must be <= lam/(64 B q^2 (beta+lam)^2) = {eta_max!r} (Thm G.22). Found {eta!r}.")
    log_b = math.log(B)
    floor = 32.0 * d * eta * q * B * (smoothness + lam) ** 2 / lam
    e0 = q * math.exp(-lam * eta * k_learn / (2.0 * B)) * log_b / 2.0 + floor
    contraction = q * math.exp(-lam * eta * k_unlearn / (2.0 * B))
    if contraction >= 1.0:
        return math.inf
    e_star = (contraction * r * log_b / n + floor) / (1.0 - contraction)
    return max(e0, e_star)


def nonconvex_schedule_for_loss(
    *,
    loss_half_range: float,
    lipschitz: float,
    smoothness: float,
    lam: float,
    n: int,
    d: int,
    r: int,
    q: float,
    epsilon_dp: float,
    epsilon_dd: float,
    rel_tol: float = 1e-6,
) -> NonConvexSchedule:
    r"""Thm 5.2's schedule with B chosen so that a loss with sup|ℓ − c| ≤ ``loss_half_range`` meets the theorem.

    Thm 5.2 needs ℓ to be σ² log(B)/4-bounded, and its σ² (Eq. 20) depends on B through η and K_A, so B cannot
    be picked independently of the loss. σ²(B) log(B) grows with B (ηK_A ≈ (2B/λ) log(q log B/ε_dd)), so B is
    found by bracketing and bisection on B, keeping the upper end always valid; the returned schedule satisfies
    ``required_loss_bound >= loss_half_range`` (checked). Its B is within a factor (1 + ``rel_tol``) of the
    smallest valid B found on the bracket (the ceilings in K make the condition not exactly monotone).

    >>> s = nonconvex_schedule_for_loss(loss_half_range=0.5, lipschitz=1.0, smoothness=1.0, lam=1.0, n=4, d=2,
    ...                                 r=1, q=2.0, epsilon_dp=1.0, epsilon_dd=0.5)
    >>> s.required_loss_bound >= 0.5
    True
    """
    loss_half_range = check_nonnegative("loss_half_range", loss_half_range)
    rel_tol = check_positive("rel_tol", rel_tol)
    q_checked = check_renyi_order("q", q)
    eps_dd_checked = check_positive("epsilon_dd", epsilon_dd)

    def sched(B: float) -> NonConvexSchedule | None:
        try:
            return nonconvex_schedule(lipschitz=lipschitz, smoothness=smoothness, lam=lam, B=B, n=n, d=d, r=r, q=q,
                                      epsilon_dp=epsilon_dp, epsilon_dd=epsilon_dd)
        except ValueError as exc:
            if "sigma2 = 0" in str(exc):  # q log B <= ε_dd: B too small for any K
                return None
            raise

    def ok(s: NonConvexSchedule | None) -> bool:
        return s is not None and s.required_loss_bound >= loss_half_range

    lo = max(1.0 + 1e-12, math.exp(eps_dd_checked / q_checked))
    hi = 2.0 * lo
    s_hi = sched(hi)
    while not ok(s_hi):
        lo, hi = hi, 2.0 * hi
        if hi > 1e300:
            raise ValueError(f"no B <= 1e300 makes the loss bound hold (loss_half_range = {loss_half_range!r}).")
        s_hi = sched(hi)
    while hi / lo - 1.0 > rel_tol:
        mid = math.sqrt(lo * hi)
        s_mid = sched(mid)
        if ok(s_mid):
            hi, s_hi = mid, s_mid
        else:
            lo = mid
    assert s_hi is not None
    s_hi.check_loss_bound(loss_half_range)
    return s_hi

"""Guarantees of Noisy-GD learning and unlearning as code (Chourasia & Shah 2023, §4, App. D, G.3).

Pure formulas; the Rényi → (ε, δ) conversions come from the DP toolkit :mod:`lethe.privacy.rdp`.

=====================  =======================  =========================================================
paper                  function                 statement
=====================  =======================  =========================================================
Thm G.7                :func:`noisy_gd_rdp`     (q, qL²ηK/(σ²n²))-RDP, any loss with ‖∇ℓ‖ ≤ L
Thm G.9                :func:`noisy_gd_rdp_     (q, 4qL²/(λσ²n²)(1 − e^{−ληK/2}))-RDP, convex + smooth,
                       convex`                  η < 1/(λ+β)
Thm 4.3                :func:`adaptive_         ε_dd + p ε_dp under p-adaptive requesters
                       deletion_epsilon`
Thm 4.1, Eq. (12)      :func:`membership_       advantage of any attacker on post-deletion models
                       advantage_bound`
Thm B.1 (+ toolkit)    :func:`deletion_         one-sided (ε, δ) from a Rényi bound
                       privacy_to_dp`
Thm G.7 + data         :func:`exposure_         deletion privacy with no convexity: the divergence of the
processing             deletion_epsilon`        steps that saw the record; later steps are post-processing
=====================  =======================  =========================================================
"""

from __future__ import annotations

import math
from typing import Any

from lethe._validation import (
    check_each,
    check_nonnegative,
    check_nonnegative_int,
    check_open_unit,
    check_positive,
    check_positive_int,
    check_renyi_order,
)
from lethe.privacy.rdp import gaussian_rdp, rdp_to_dp, rdp_to_dp_tight

__all__ = [
    "adaptive_deletion_epsilon",
    "deletion_privacy_to_dp",
    "exposure_deletion_epsilon",
    "membership_advantage_bound",
    "noisy_gd_rdp",
    "noisy_gd_rdp_convex",
]


def check_convex_run(q: Any, lipschitz: Any, smoothness: Any, lam: Any, sigma2: Any, eta: Any, n: Any,
                     ) -> tuple[float, float, float, float, float, float, int]:
    """The inputs of a convex Noisy-GD run (Thm G.9, G.15), checked: q > 1; L, λ, σ², η > 0; β ≥ 0; n ≥ 1;
    η < 1/(β + λ). Returns (q, L, β, λ, σ², η, n)."""
    q = check_renyi_order("q", q)
    lipschitz = check_positive("lipschitz", lipschitz)
    smoothness = check_nonnegative("smoothness", smoothness)
    lam, sigma2, eta = check_each(check_positive, lam=lam, sigma2=sigma2, eta=eta)
    n = check_positive_int("n", n)
    if not eta < 1.0 / (lam + smoothness):
        raise ValueError(
            f"eta must be < 1/(lam + smoothness) = {1.0 / (lam + smoothness)!r} (Thm G.15, G.9). Found {eta!r}.")
    return q, lipschitz, smoothness, lam, sigma2, eta, n


def noisy_gd_rdp(q: float, *, lipschitz: float, sigma2: float, eta: float, n: int, n_steps: int) -> float:
    r"""Thm G.7: K steps of Noisy-GD are (q, ε)-Rényi DP with ε = q L² η K / (σ² n²).

    Each step releases Θ_{η(k+1)} given Θ_{ηk}: a Gaussian mechanism on the mean gradient, whose L2
    sensitivity (one record replaced) is η·2L/n, with noise std √(2η)σ; so each step costs
    ``gaussian_rdp(q, 2ηL/n, √(2η)σ)`` = qηL²/(σ²n²) (Eq. 97) and K steps compose (Thm B.3).
    Needs only ‖∇ℓ(θ; x)‖ ≤ L (Lipschitz, or clipping to L); no convexity, any step size, any Θ₀.

    >>> noisy_gd_rdp(2.0, lipschitz=1.0, sigma2=0.5, eta=0.1, n=10, n_steps=50)
    0.2
    """
    q = check_renyi_order("q", q)
    lipschitz, sigma2, eta = check_each(check_positive, lipschitz=lipschitz, sigma2=sigma2, eta=eta)
    n = check_positive_int("n", n)
    k = check_nonnegative_int("n_steps", n_steps)
    per_step = gaussian_rdp(q, sensitivity=2.0 * eta * lipschitz / n, sigma=math.sqrt(2.0 * eta * sigma2))
    return k * per_step  # Rényi composition of K identical steps (Thm B.3)


def noisy_gd_rdp_convex(
    q: float, *, lipschitz: float, smoothness: float, lam: float, sigma2: float, eta: float, n: int, n_steps: int
) -> float:
    r"""Thm G.9 (Chourasia, Ye & Shokri 2021): ε = 4qL²/(λσ²n²) · (1 − e^{−ληK/2}).

    For convex, L-Lipschitz, β-smooth ℓ, r(θ) = λ‖θ‖²/2 and η < 1/(β + λ). The paper's statement prints
    ``σ²η²`` in the denominator; its own proof of Thm 5.1 (1) and the source use σ²n², which is what is
    implemented (docs/noisygd.md, "Inconsistencies").

    >>> round(noisy_gd_rdp_convex(2.0, lipschitz=1.0, smoothness=1.0, lam=1.0, sigma2=1.0, eta=0.25, n=2,
    ...                           n_steps=10**6), 12)
    2.0
    """
    q, lipschitz, smoothness, lam, sigma2, eta, n = check_convex_run(q, lipschitz, smoothness, lam, sigma2, eta, n)
    k = check_nonnegative_int("n_steps", n_steps)
    return 4.0 * q * lipschitz**2 / (lam * sigma2 * n**2) * -math.expm1(-lam * eta * k / 2.0)


def exposure_deletion_epsilon(
    q: float, *, lipschitz: float, sigma2: float, eta: float, n: int, exposed_steps: int
) -> float:
    r"""Deletion privacy without convexity: Thm G.7 over the steps that saw the deleted record.

    Under a non-adaptive requester, take π_i^Q(D₀∘⟨ind, y⟩) to be the same curator run on D₀∘⟨ind, y⟩
    (as in App. G.4). The two runs see databases differing only in record ``ind`` during the ``exposed_steps``
    iterations before the edit that replaces it (at most K_A + (i−1)K_Ā for a record present from the
    start), and identical databases afterwards. Releasing the whole trajectory is (q, qL²η·steps/(σ²n²))-RDP
    (Thm G.7, Eq. 97 + Thm B.3); the unlearned model is a post-processing of it. Unlike Thm G.15 nothing
    contracts, so this bound grows with every edit: it is what lethe certifies for non-convex models whose
    loss does not meet Thm 5.2's assumptions (global smoothness and boundedness).

    >>> exposure_deletion_epsilon(2.0, lipschitz=1.0, sigma2=0.5, eta=0.1, n=10, exposed_steps=50)
    0.2
    """
    return noisy_gd_rdp(q, lipschitz=lipschitz, sigma2=sigma2, eta=eta, n=n, n_steps=exposed_steps)


def adaptive_deletion_epsilon(epsilon_dd: float, epsilon_dp: float, p: int) -> float:
    """Thm 4.3: (q, ε_dd) non-adaptive deletion privacy + (q, ε_dp)-RDP ⇒ (q, ε_dd + p ε_dp) under p-adaptive.

    p is the number of published models the requester may see (Def. 2.5); p = 0 is non-adaptive.

    >>> adaptive_deletion_epsilon(0.1, 1.0, 2)
    2.1
    """
    epsilon_dd = check_nonnegative("epsilon_dd", epsilon_dd)
    epsilon_dp = check_nonnegative("epsilon_dp", epsilon_dp)
    if isinstance(p, bool) or not hasattr(p, "__index__") or int(p) < 0:
        raise ValueError(f"p must be an integer >= 0. Found {p!r}.")
    return epsilon_dd + int(p) * epsilon_dp


def membership_advantage_bound(q: float, epsilon: float) -> float:
    r"""Thm 4.1, Eq. (12): Adv(MI) ≤ min{√(2ε), q e^{ε(q−1)/q} [2(q−1)]^{1/q} / (q−1) − 1}.

    Bounds the advantage of any attacker that sees only the models published after a record's deletion, for a
    pair (A, Ā) that is (q, ε)-deletion-private (use :func:`adaptive_deletion_epsilon` for adaptive
    requesters). The second term is min over δ of e^{ε + log(1/δ)/(q−1)} − 1 + 2δ (Thm B.1). Values ≥ 1 are
    vacuous (an advantage never exceeds 1); the formula is returned as is.

    >>> round(membership_advantage_bound(2.0, 0.02), 6)
    0.2
    >>> b = membership_advantage_bound(1000.0, 0.1)  # large q, small ε: the conversion term wins
    >>> b == 1000 / 999 * math.exp(0.1 * 999 / 1000) * 1998 ** (1 / 1000) - 1, round(b, 4)
    (True, 0.1146)
    """
    q = check_renyi_order("q", q)
    epsilon = check_nonnegative("epsilon", epsilon)
    pinsker = math.sqrt(2.0 * epsilon)
    conversion = q / (q - 1.0) * math.exp(epsilon * (q - 1.0) / q) * (2.0 * (q - 1.0)) ** (1.0 / q) - 1.0
    return min(pinsker, conversion)


def deletion_privacy_to_dp(q: float, epsilon: float, delta: float, *, tight: bool = False) -> float:
    r"""One-sided (ε', δ) indistinguishability implied by a (q, ε) Rényi bound (Thm B.1 / toolkit).

    For deletion privacy the bound R_q(Ā(…) ‖ π(…)) ≤ ε gives P[Ā ∈ O] ≤ e^{ε'} P[π ∈ O] + δ (footnote 4):
    one direction only. ``tight=False`` is Thm B.1, ε' = ε + log(1/δ)/(q − 1); ``tight=True`` is the
    improved conversion of :func:`lethe.privacy.rdp.rdp_to_dp_tight` (also a statement about one ordered pair
    of distributions, so equally valid here).

    >>> round(deletion_privacy_to_dp(11.0, 0.5, 1e-5), 6)
    1.651293
    """
    q = check_renyi_order("q", q)
    epsilon = check_nonnegative("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    return rdp_to_dp_tight(q, epsilon, delta) if tight else rdp_to_dp(q, epsilon, delta)

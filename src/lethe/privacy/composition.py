"""Properties of (ε, δ)-DP as functions: group privacy, basic and advanced composition (lecture 9).

Symbols and argument names:

=========  ====================  ===================================================================
symbol     argument              meaning
=========  ====================  ===================================================================
ε, δ       ``epsilon``, ``delta``  per-mechanism guarantee
k          ``group_size``        number of records in which two datasets differ (group privacy)
T          ``steps``             number of composed mechanisms
δ'         ``delta_prime``       the extra failure probability of advanced composition
ε'         ``target_epsilon``    target total ε of the corollary
=========  ====================  ===================================================================

All compositions are adaptive: the i-th mechanism may be chosen from the outputs of the earlier ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from lethe._validation import check_nonnegative, check_open_unit, check_positive, check_positive_int

__all__ = [
    "advanced_composition",
    "advanced_composition_epsilon",
    "basic_composition",
    "group_privacy",
]


def _check_delta(name: str, value: float) -> float:
    d = check_nonnegative(name, value)
    if d > 1.0:
        raise ValueError(f"{name} must be in [0, 1]. Found {value}.")
    return d


def group_privacy(epsilon: float, delta: float, group_size: int) -> tuple[float, float]:
    """Group privacy: an (ε, δ)-DP mechanism is (kε, δ (e^{kε} − 1)/(e^ε − 1))-DP for datasets differing in k records.

    Lecture 9, "Group Privacy". Proof: chain D = D₀, D₁, …, D_k = D' of neighbours;
    P(M(D₀) ∈ Ω) ≤ e^ε P(M(D₁) ∈ Ω) + δ ≤ … ≤ e^{kε} P(M(D_k) ∈ Ω) + δ Σ_{j<k} e^{jε}, and
    Σ_{j=0}^{k−1} e^{jε} = (e^{kε} − 1)/(e^ε − 1) (= k when ε = 0). Computed as δ·expm1(kε)/expm1(ε). The
    returned δ may exceed 1 (a true but vacuous statement).

    Parameters
    ----------
    epsilon : float
        ε ≥ 0.
    delta : float
        δ in [0, 1].
    group_size : int
        k ≥ 1.

    Returns
    -------
    (float, float)
        (kε, δ (e^{kε} − 1)/(e^ε − 1)).

    Examples
    --------
    >>> group_privacy(0.5, 0.0, 3)
    (1.5, 0.0)
    >>> eps, delta = group_privacy(1.0, 1e-6, 2)   # δ (e² − 1)/(e − 1) = δ (e + 1)
    >>> eps, round(delta / 1e-6, 6)
    (2.0, 3.718282)
    """
    e = check_nonnegative("epsilon", epsilon)
    d = _check_delta("delta", delta)
    k = check_positive_int("group_size", group_size)
    factor = float(k) if e == 0.0 else math.expm1(k * e) / math.expm1(e)
    return k * e, d * factor


def basic_composition(epsilons: Sequence[float], deltas: Sequence[float]) -> tuple[float, float]:
    """Basic adaptive composition: (ε_i, δ_i)-DP mechanisms compose to (Σ ε_i, Σ δ_i)-DP (lecture 9).

    Parameters
    ----------
    epsilons : sequence of float
        ε_i ≥ 0.
    deltas : sequence of float
        δ_i in [0, 1], same length.

    Returns
    -------
    (float, float)
        (Σ ε_i, Σ δ_i), summed with ``math.fsum``.

    Examples
    --------
    >>> basic_composition([0.1] * 10, [1e-6] * 10)   # fsum: exact sums of the float inputs
    (1.0, 9.999999999999999e-06)
    """
    eps = [check_nonnegative(f"epsilons[{i}]", e) for i, e in enumerate(epsilons)]
    dls = [_check_delta(f"deltas[{i}]", d) for i, d in enumerate(deltas)]
    if len(eps) != len(dls):
        raise ValueError(f"epsilons and deltas must have the same length. Found {len(eps)} and {len(dls)}.")
    return math.fsum(eps), math.fsum(dls)


def advanced_composition(
    epsilon: float,
    delta: float,
    steps: int,
    delta_prime: float,
    form: Literal["lecture", "dwork_roth"] = "lecture",
) -> tuple[float, float]:
    """Advanced composition: T adaptively chosen (ε, δ)-DP mechanisms are (ε', Tδ + δ')-DP.

    Lecture 9 ("Remarks on composition"), with the drift bound E[L] ≤ ε (e^ε − 1)/(e^ε + 1) = ε tanh(ε/2):

    .. math:: ε' = ε \\sqrt{2T \\ln(1/δ')} + T ε \\frac{e^ε − 1}{e^ε + 1}

    Proof (lecture): the total loss is drift + martingale fluctuations; each conditional mean is at most
    ε tanh(ε/2) (the KL bound of an ε-DP pair, maximised by two-point distributions), each increment lies
    in an interval of width 2ε, so Hoeffding + Chernoff give P(fluctuations > ε√(2T ln(1/δ'))) ≤ δ'.
    ``form="dwork_roth"`` uses the looser drift Tε(e^ε − 1) (Dwork & Roth 2014, Thm 3.20), also on the
    lecture's slide. Both hold simultaneously with basic composition; take the minimum if you like.

    Parameters
    ----------
    epsilon : float
        ε ≥ 0 of each mechanism.
    delta : float
        δ in [0, 1] of each mechanism.
    steps : int
        T ≥ 1.
    delta_prime : float
        δ' in (0, 1).
    form : {"lecture", "dwork_roth"}, default="lecture"

    Returns
    -------
    (float, float)
        (ε', Tδ + δ').

    Examples
    --------
    >>> eps, delta = advanced_composition(0.01, 0.0, 1000, 1e-6)
    >>> round(eps, 4), delta
    (1.7123, 1e-06)
    """
    e = check_nonnegative("epsilon", epsilon)
    d = _check_delta("delta", delta)
    t = check_positive_int("steps", steps)
    dp = check_open_unit("delta_prime", delta_prime)
    if form == "lecture":
        drift = t * e * math.tanh(e / 2.0)
    elif form == "dwork_roth":
        drift = t * e * math.expm1(e)
    else:
        raise ValueError(f"form must be one of ('lecture', 'dwork_roth'). Found {form!r}.")
    return e * math.sqrt(2.0 * t * math.log(1.0 / dp)) + drift, t * d + dp


def advanced_composition_epsilon(target_epsilon: float, steps: int, delta_prime: float) -> float:
    """Per-step ε for a target ε' < 1 under advanced composition: ε = ε' / √(8T ln(1/δ')) (lecture 9, Cor.).

    Then T (ε, δ)-DP mechanisms are (ε', Tδ + δ')-DP. Check (lecture form): the fluctuation term is
    ε√(2T ln(1/δ')) = ε'/2, and the drift Tε tanh(ε/2) ≤ Tε²/2 = ε'² / (16 ln(1/δ')) ≤ ε'/2 provided
    ε' ≤ 8 ln(1/δ'), i.e. δ' ≤ e^{−ε'/8}. The lecture leaves this side condition implicit (it holds for
    every δ' ≤ e^{−1/8} ≈ 0.88 when ε' < 1); it is enforced here.

    Parameters
    ----------
    target_epsilon : float
        ε' in (0, 1).
    steps : int
        T ≥ 1.
    delta_prime : float
        δ' in (0, e^{−ε'/8}].

    Returns
    -------
    float
        ε.

    Examples
    --------
    >>> eps = advanced_composition_epsilon(0.5, 100, 1e-5)
    >>> round(eps, 6)
    0.00521
    >>> advanced_composition(eps, 0.0, 100, 1e-5)[0] <= 0.5
    True
    """
    target = check_open_unit("target_epsilon", target_epsilon)
    t = check_positive_int("steps", steps)
    dp = check_open_unit("delta_prime", delta_prime)
    if dp > math.exp(-target / 8.0):
        raise ValueError(
            f"delta_prime must be <= exp(-target_epsilon/8) = {math.exp(-target / 8.0)} for the corollary to hold. "
            f"Found {delta_prime}."
        )
    return check_positive("epsilon", target / math.sqrt(8.0 * t * math.log(1.0 / dp)))

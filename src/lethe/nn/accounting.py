r"""Privacy amplification by iteration for noisy clipped fine-tuning (Koloskova et al. 2025) — pure math, no torch.

The unlearning algorithm (Koloskova, Allouah, Jha, Guerraoui & Koyejo, "Certified Unlearning for Neural Networks",
ICML 2025, the "gradient clipping" variant) starts from any model, projects it onto the ball
:math:`\mathcal K = \{θ : ‖θ‖_2 ≤ C_0\}` and runs T steps on the *retained* data only

.. math:: θ_{t+1} = (1 - ηλ)\,θ_t - η\,\mathrm{clip}_C(g_t(θ_t)) + Z_t,\qquad Z_t \sim \mathcal N(0, σ^2 I_d),

where :math:`g_t` is any (mini-batch, per-sample-clipped or not) gradient of the retained loss and
:math:`‖\mathrm{clip}_C(\cdot)‖ ≤ C`. Two runs of this map on the same retained data, started from *any* two points of
:math:`\mathcal K` (the unlearned model and the model retrained without the removed records), satisfy the
"bounded shift" property :math:`‖φ_t(x) - φ_t(x')‖ ≤ ρ‖x - x'‖ + s` with :math:`ρ = 1 - ηλ`, :math:`s = 2ηC`, and
start at distance ≤ D = 2C₀. The shifted-Rényi argument of Feldman, Mironov, Talwar & Thakurta (2018) gives, for
every α > 1 (derivation in ``docs/nn_unlearning.md``),

.. math::
    D_α(θ_T \,‖\, θ'_T) ≤ α\,ε_0,\qquad
    ε_0 = \frac{R^2}{2σ^2 S_2},\quad R = ρ^T D + s\,S_1,\quad S_1 = \sum_{k<T} ρ^k,\quad S_2 = \sum_{k<T} ρ^{2k}.

An RDP curve α ↦ α ε₀ converts to (ε, δ) by the conversion of Canonne, Kamath & Steinke (2020, Prop. 12) /
Balle et al. (2020, Thm 21), minimised over α (:func:`lethe.privacy.rdp.linear_rdp_epsilon`, re-exported here).
:func:`calibrate_finetune` inverts the chain: target (ε, δ), C₀, C, η, λ → (σ, T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lethe._validation import check_each, check_nonnegative, check_open_unit, check_positive, check_positive_int
from lethe.io import JsonRecord
from lethe.privacy.calibration import bisect_boundary
from lethe.privacy.gaussian import log_gaussian_delta
from lethe.privacy.rdp import linear_rdp_epsilon, linear_rdp_max_slope

__all__ = [
    "FineTuneSchedule",
    "ModelClipSchedule",
    "calibrate_finetune",
    "calibrate_model_clip",
    "linear_rdp_epsilon",
    "linear_rdp_max_slope",
    "model_clip_contraction",
    "model_clip_delta",
    "model_clip_steps",
    "pabi_epsilon",
    "pabi_rdp_slope",
]

THEOREM = ("Koloskova et al. 2025 (ICML), gradient-clipping unlearning via privacy amplification by iteration "
           "(Feldman et al. 2018, shifted Renyi divergence); RDP->(eps, delta) by Canonne-Kamath-Steinke 2020 Prop. 12")


def _geometric_sums(rho: float, steps: int) -> tuple[float, float]:
    """S₁ = Σ_{k<T} ρ^k and S₂ = Σ_{k<T} ρ^{2k} for 0 < ρ ≤ 1 (closed forms, log-space for accuracy)."""
    if rho == 1.0:
        return float(steps), float(steps)
    log_rho = math.log(rho)
    s1 = -math.expm1(steps * log_rho) / -math.expm1(log_rho)
    s2 = -math.expm1(2.0 * steps * log_rho) / -math.expm1(2.0 * log_rho)
    return s1, s2


def _contraction(lr: float, weight_decay: float) -> float:
    rho = 1.0 - lr * weight_decay
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"lr * weight_decay must be in [0, 1) so that rho = 1 - lr * weight_decay is in (0, 1]. "
                         f"Found lr={lr!r}, weight_decay={weight_decay!r}.")
    return rho


def _check_step(lr: float, grad_clip: float, model_radius: float,
                weight_decay: float) -> tuple[float, float, float, float, float]:
    """Validated (η, C, C₀, λ) and the contraction ρ = 1 − ηλ of one noisy clipped step."""
    eta = check_positive("lr", lr)
    c = check_positive("grad_clip", grad_clip)
    c0 = check_positive("model_radius", model_radius)
    lam = check_nonnegative("weight_decay", weight_decay)
    return eta, c, c0, lam, _contraction(eta, lam)


def _shift_radius(rho: float, steps: int, model_radius: float, lr: float, grad_clip: float) -> tuple[float, float]:
    """R = ρ^T·2C₀ + 2ηC·S₁ and S₂ (the two quantities ε₀ = R²/(2σ²S₂) is made of)."""
    s1, s2 = _geometric_sums(rho, steps)
    return rho**steps * 2.0 * model_radius + 2.0 * lr * grad_clip * s1, s2


def pabi_rdp_slope(*, steps: int, sigma: float, lr: float, grad_clip: float, model_radius: float,
                   weight_decay: float = 0.0) -> float:
    r"""ε₀ of the bound :math:`D_α ≤ α ε_0` (all α > 1) after T noisy clipped steps from the ball of radius C₀.

    .. math:: ε_0 = \frac{(ρ^T\,2C_0 + 2ηC\,S_1)^2}{2σ^2 S_2},\quad ρ = 1 - ηλ.

    Parameters
    ----------
    steps : int
        T ≥ 1.
    sigma : float
        σ > 0, standard deviation of the Gaussian noise added to every coordinate at every step.
    lr : float
        η > 0.
    grad_clip : float
        C > 0, bound on the norm of the (clipped) gradient used in a step.
    model_radius : float
        C₀ > 0, the model is projected onto ‖θ‖ ≤ C₀ before the first step.
    weight_decay : float, default 0
        λ ≥ 0 (with ηλ < 1); the step uses (1 − ηλ)θ.

    Returns
    -------
    float
        ε₀.

    Examples
    --------
    >>> round(pabi_rdp_slope(steps=10, sigma=1.0, lr=0.1, grad_clip=1.0, model_radius=1.0), 12)
    0.8
    """
    t = check_positive_int("steps", steps)
    s = check_positive("sigma", sigma)
    eta, c, c0, _, rho = _check_step(lr, grad_clip, model_radius, weight_decay)
    r, s2 = _shift_radius(rho, t, c0, eta, c)
    return r * r / (2.0 * s * s * s2)


def pabi_epsilon(*, steps: int, sigma: float, lr: float, grad_clip: float, model_radius: float, delta: float,
                 weight_decay: float = 0.0) -> float:
    """ε at δ certified by T noisy clipped steps (:func:`pabi_rdp_slope` then :func:`linear_rdp_epsilon`).

    Examples
    --------
    >>> round(pabi_epsilon(steps=100, sigma=20.0, lr=0.1, grad_clip=1.0, model_radius=10.0, delta=1e-5), 3)
    0.794
    """
    return linear_rdp_epsilon(pabi_rdp_slope(steps=steps, sigma=sigma, lr=lr, grad_clip=grad_clip,
                                             model_radius=model_radius, weight_decay=weight_decay), delta)


@dataclass(frozen=True)
class FineTuneSchedule(JsonRecord):
    """A calibrated noisy clipped fine-tuning schedule and the (ε, δ) it certifies. Frozen; JSON via :meth:`to_dict`.

    Attributes
    ----------
    epsilon, delta : float
        Target (ε, δ).
    epsilon_certified : float
        ε the schedule certifies at δ (≤ ``epsilon``).
    rdp_slope : float
        ε₀ with D_α ≤ α ε₀ for every α > 1.
    sigma : float
        Noise standard deviation per coordinate per step.
    steps : int
        T.
    lr, grad_clip, model_radius, weight_decay : float
        η, C, C₀, λ.
    theorem : str
        What the numbers rest on.
    """

    epsilon: float
    delta: float
    epsilon_certified: float
    rdp_slope: float
    sigma: float
    steps: int
    lr: float
    grad_clip: float
    model_radius: float
    weight_decay: float
    theorem: str


def calibrate_finetune(epsilon: float, delta: float, *, model_radius: float, grad_clip: float, lr: float,
                       weight_decay: float = 0.0, steps: int | None = None,
                       max_steps: int = 100_000) -> FineTuneSchedule:
    r"""Noise σ and steps T of noisy clipped fine-tuning for a target (ε, δ) (Koloskova et al. 2025).

    With ε₀* = :func:`linear_rdp_max_slope` (ε, δ), the bound of :func:`pabi_rdp_slope` equals ε₀* when

    .. math:: σ(T) = \frac{ρ^T\,2C_0 + 2ηC\,S_1(T)}{\sqrt{2 S_2(T)\,ε_0^*}}.

    Given ``steps`` that T is used; otherwise T minimises σ(T) over 1 ≤ T ≤ ``max_steps`` (for λ = 0 the
    minimiser is T ≈ C₀/(ηC)). σ is then raised by a relative 1e-9 and the certificate recomputed, so that
    rounding cannot put ε above the target.

    Parameters
    ----------
    epsilon : float
        Target ε > 0.
    delta : float
        Target δ in (0, 1).
    model_radius, grad_clip, lr : float
        C₀, C, η > 0.
    weight_decay : float, default 0
        λ ≥ 0 with ηλ < 1.
    steps : int, optional
        Fix T instead of minimising σ.
    max_steps : int, default 100000
        Search range of T.

    Returns
    -------
    FineTuneSchedule

    Examples
    --------
    >>> s = calibrate_finetune(1.0, 1e-5, model_radius=10.0, grad_clip=1.0, lr=0.1)
    >>> s.steps, round(s.sigma, 3), s.epsilon_certified <= 1.0
    (100, 16.181, True)
    """
    e = check_positive("epsilon", epsilon)
    d = check_open_unit("delta", delta)
    eta, c, c0, lam, rho = _check_step(lr, grad_clip, model_radius, weight_decay)
    tmax = check_positive_int("max_steps", max_steps)
    slope = linear_rdp_max_slope(e, d)

    def sigma_of(t: int) -> float:
        r, s2 = _shift_radius(rho, t, c0, eta, c)
        return r / math.sqrt(2.0 * s2 * slope)

    if steps is not None:
        t_best = check_positive_int("steps", steps)
    else:
        # σ(T)² ∝ R(T)²/S₂(T) is unimodal in T for constant ρ; a scan of a geometric grid then a local walk
        grid = sorted({max(1, round(1.5**k)) for k in range(0, 200) if 1.5**k <= tmax} | {tmax})
        t_best = min(grid, key=sigma_of)
        for direction in (1, -1):
            t = t_best
            while 1 <= t + direction <= tmax and sigma_of(t + direction) <= sigma_of(t):
                t += direction
            if sigma_of(t) < sigma_of(t_best):
                t_best = t
    sigma = sigma_of(t_best) * (1.0 + 1e-9)
    rdp = pabi_rdp_slope(steps=t_best, sigma=sigma, lr=eta, grad_clip=c, model_radius=c0, weight_decay=lam)
    eps_cert = linear_rdp_epsilon(rdp, d)
    if eps_cert > e:  # pragma: no cover - guarded by the 1e-9 margin; refuse rather than over-promise
        raise RuntimeError(f"calibration failed: certified epsilon {eps_cert!r} exceeds the target {e!r}.")
    return FineTuneSchedule(epsilon=e, delta=d, epsilon_certified=eps_cert, rdp_slope=rdp, sigma=sigma,
                            steps=t_best, lr=eta, grad_clip=c, model_radius=c0, weight_decay=lam, theorem=THEOREM)


# ---------------------------------------------------------------------------------------------------------------
# Model clipping (Koloskova et al. 2025, second variant): θ_{t+1} = Π_{C₂}((1 − ηλ)θ_t − η g_t(θ_t)) + Z_t.
# ---------------------------------------------------------------------------------------------------------------

MODEL_CLIP_THEOREM = ("Koloskova et al. 2025 (ICML), model-clipping unlearning: hockey-stick (E_gamma) contraction of "
                      "the projected Gaussian kernel (Asoodeh, Diaz & Calmon 2020, Thm 2: eta_gamma(K) = sup_x,x' "
                      "E_gamma(K(x)||K(x'))) with gamma' = 1 + (gamma - 1)/delta_t per step; Gaussian E_gamma exact "
                      "(Balle & Wang 2018, Thm 8)")

_MODEL_CLIP_MARGIN = 1e-9  # relative, per step: float rounding of the product cannot push δ below the true bound


def _model_clip_log_step(epsilon: float, log_d: float, sigma: float, model_clip: float) -> float:
    """log δ_{t+1} from log δ_t (log space: δ_t falls far below the smallest float within a few steps)."""
    log_em1 = math.log(math.expm1(epsilon))
    x = log_em1 - log_d
    eps_t = x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))  # log(1 + (e^ε − 1)/δ_t)
    return log_d + log_gaussian_delta(eps_t, 2.0 * model_clip / sigma) + math.log1p(_MODEL_CLIP_MARGIN)


def _delta_from_log(log_d: float) -> float:
    """δ = e^{log δ}, never rounded below the bound: values under 1e-300 are reported as 1e-300."""
    return min(1.0, max(math.exp(log_d), 1e-300))


def model_clip_contraction(epsilon: float, *, sigma: float, model_clip: float) -> float:
    r"""θ_ε(2C₂/σ): the E_{e^ε}-contraction coefficient of one model-clipping step (Asoodeh et al. 2020, Thm 2).

    The step is the Markov kernel K(x) = N(f(x), σ² I) with f(x) = Π_{C₂}(…) in the ball of radius C₂, so
    η_γ(K) = sup_{x,x'} E_γ(K(x)‖K(x')) = sup_{‖a−b‖ ≤ 2C₂} E_γ(N(a, σ²I)‖N(b, σ²I)) = δ_Gauss(ε; μ = 2C₂/σ)
    (the exact Gaussian profile, :func:`lethe.privacy.gaussian.analytic_gaussian_delta`; increasing in μ).
    Values below 1e-300 are reported as 1e-300 (never below the bound).
    """
    e = check_nonnegative("epsilon", epsilon)
    s = check_positive("sigma", sigma)
    c2 = check_positive("model_clip", model_clip)
    return _delta_from_log(log_gaussian_delta(e, 2.0 * c2 / s))


def model_clip_delta(epsilon: float, *, sigma: float, model_clip: float, steps: int,
                     init_delta: float = 1.0) -> float:
    r"""δ certified at ε after T model-clipping steps (derivation: ``docs/nn_unlearning.md`` §2b).

    δ₀ = ``init_delta`` (1: nothing is assumed about the two starting models) and, for t < T,

    .. math:: \tilde ε_t = \log\Bigl(1 + \frac{e^ε - 1}{δ_t}\Bigr),\qquad
              δ_{t+1} = δ_t\,θ_{\tilde ε_t}(2C_2/σ)\,(1 + 10^{-9}),

    where θ_ε(μ) is the Gaussian hockey-stick divergence (:func:`model_clip_contraction`). Each step's bound
    E_γ(μK‖νK) ≤ E_γ(μ‖ν)·η_{γ'}(K), γ' = 1 + (γ − 1)/E_γ(μ‖ν), is proved in the docs; it is nondecreasing in
    E_γ(μ‖ν), so any upper bound δ_t may be used in its place.

    Examples
    --------
    >>> model_clip_delta(1.0, sigma=1.0, model_clip=0.5, steps=0)
    1.0
    >>> model_clip_delta(1.0, sigma=1.0, model_clip=0.5, steps=10) < 1e-5
    True
    """
    e = check_positive("epsilon", epsilon)
    s = check_positive("sigma", sigma)
    c2 = check_positive("model_clip", model_clip)
    t_max = int(check_nonnegative("steps", steps))
    if t_max != steps:
        raise ValueError(f"steps must be an integer >= 0. Found {steps!r}.")
    d = float(init_delta)
    if not 0.0 < d <= 1.0:
        raise ValueError(f"init_delta must be in (0, 1]. Found {init_delta!r}.")
    log_d = math.log(d)
    for _ in range(t_max):
        log_d = _model_clip_log_step(e, log_d, s, c2)
        if log_d < -1e4:  # δ < e^-10000: reported as 1e-300 (an upper bound); stop before the numbers overflow
            break
    return _delta_from_log(log_d)


def model_clip_steps(epsilon: float, delta: float, *, sigma: float, model_clip: float,
                     max_steps: int = 1_000_000) -> int:
    """Fewest steps T with :func:`model_clip_delta` ≤ δ; ``ValueError`` if more than ``max_steps`` are needed."""
    e = check_positive("epsilon", epsilon)
    target = check_open_unit("delta", delta)
    s = check_positive("sigma", sigma)
    c2 = check_positive("model_clip", model_clip)
    tmax = check_positive_int("max_steps", max_steps)
    log_d, log_target = 0.0, math.log(target)
    for t in range(1, tmax + 1):
        log_d = _model_clip_log_step(e, log_d, s, c2)
        if log_d <= log_target:
            return t
    raise ValueError(f"model clipping with sigma={sigma!r}, model_clip={model_clip!r} does not reach delta={delta!r} "
                     f"at epsilon={epsilon!r} within max_steps={max_steps!r}; lower model_clip/sigma.")


@dataclass(frozen=True)
class ModelClipSchedule(JsonRecord):
    """A calibrated model-clipping schedule (Koloskova et al. 2025) and the (ε, δ) it certifies.

    Attributes
    ----------
    epsilon, delta : float
        Target (ε, δ).
    delta_certified : float
        δ the schedule certifies at ε (≤ ``delta``).
    sigma : float
        Noise standard deviation per coordinate per step.
    steps : int
        T.
    model_clip : float
        C₂: every step projects the model onto ‖θ‖ ≤ C₂ before the noise is added.
    lr, weight_decay : float
        η, λ of the step (they do not enter the bound; any values are certified).
    theorem : str
        What the numbers rest on.
    """

    epsilon: float
    delta: float
    delta_certified: float
    sigma: float
    steps: int
    model_clip: float
    lr: float
    weight_decay: float
    theorem: str


def calibrate_model_clip(epsilon: float, delta: float, *, model_clip: float, lr: float, weight_decay: float = 0.0,
                         sigma: float | None = None, steps: int | None = None) -> ModelClipSchedule:
    r"""σ and T of model-clipping unlearning for a target (ε, δ).

    Exactly one of ``sigma`` (then T = :func:`model_clip_steps`) and ``steps`` (then σ is the smallest value, by
    bisection to a relative 1e-9 and rounded up, with :func:`model_clip_delta` ≤ δ; δ_T decreases as σ grows)
    must be given. The certificate is recomputed for the returned (σ, T).

    Examples
    --------
    >>> s = calibrate_model_clip(1.0, 1e-5, model_clip=1.0, lr=0.1, steps=20)
    >>> s.delta_certified <= 1e-5
    True
    """
    e = check_positive("epsilon", epsilon)
    d = check_open_unit("delta", delta)
    c2, eta = check_each(check_positive, model_clip=model_clip, lr=lr)
    lam = check_nonnegative("weight_decay", weight_decay)
    _contraction(eta, lam)
    if (sigma is None) == (steps is None):
        raise ValueError("give exactly one of sigma and steps.")
    if sigma is not None:
        s = check_positive("sigma", sigma)
        t = model_clip_steps(e, d, sigma=s, model_clip=c2)
    else:
        t = check_positive_int("steps", steps)
        lo, hi = 1e-300, 2.0 * c2
        while model_clip_delta(e, sigma=hi, model_clip=c2, steps=t) > d:
            lo, hi = hi, 2.0 * hi
            if hi > 1e300:  # pragma: no cover - δ_T → 0 as σ → ∞ for every T ≥ 1
                raise ValueError("no sigma reaches the target.")
        s = bisect_boundary(lambda v: model_clip_delta(e, sigma=v, model_clip=c2, steps=t) <= d, lo, hi,
                            feasible_side="hi", rel_tol=1e-9)[1]
    cert = model_clip_delta(e, sigma=s, model_clip=c2, steps=t)
    if cert > d:  # pragma: no cover - by construction
        raise RuntimeError(f"calibration failed: certified delta {cert!r} exceeds the target {d!r}.")
    return ModelClipSchedule(epsilon=e, delta=d, delta_certified=cert, sigma=s, steps=t, model_clip=c2, lr=eta,
                             weight_decay=lam, theorem=MODEL_CLIP_THEOREM)

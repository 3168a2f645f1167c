"""Noise-adding mechanisms: Laplace and Gaussian, scalar or vector-valued, seeded or from the OS.

Symbols (lecture 9) and argument names:

========  =================  ==============================================================================
symbol    argument           meaning
========  =================  ==============================================================================
f(D)      ``value``          the exact, non-private answer (a number or an array of any shape)
Δ₁, Δ₂    ``sensitivity``    L1 sensitivity (Laplace) or L2 sensitivity (Gaussian) of f
ε, δ      ``epsilon``,       privacy parameters
          ``delta``
b         ``scale``          Laplace scale, b = Δ₁/ε
σ         ``sigma``          Gaussian standard deviation
========  =================  ==============================================================================

Randomness. Every sampler takes ``random_state`` (``lethe._rng.check_random_state``: ``None``, an int,
a ``SeedSequence`` or a ``numpy.random.Generator``); a seeded run is reproducible bit for bit. With
``secure=True`` the noise is built from bits read from the operating system's CSPRNG (``os.urandom``)
for every draw; secure mode refuses any ``random_state`` (a seed would make the noise predictable).

What secure mode does *not* do: the noise is still a float64, so the textbook floating-point Laplace and
Gaussian mechanisms remain exposed to Mironov's (CCS 2012) attack on the low-order bits of noisy
outputs; use a snapping or discrete mechanism where that threat matters. Uniforms in secure mode are
drawn on (0, 1/2] with 105 random bits, so the noise tails stop at |z| ≈ 11.9 standard deviations
(Gaussian) and 73 scales (Laplace). Setting the floating-point caveat aside (i.e. treating the uniforms as
continuous), that truncation removes probability η = 2⁻¹⁰⁶ ≈ 1.2e-32 per coordinate, which adds at most
(1 + e^ε)·k·η to the δ of a k-coordinate release.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import special

from lethe._rng import check_random_state
from lethe._validation import check_choice, check_positive
from lethe.privacy.gaussian import (
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
)
from lethe.privacy.rdp import gaussian_rdp, laplace_rdp

__all__ = [
    "GaussianMechanism",
    "LaplaceMechanism",
    "OSRandomSource",
    "gaussian_mechanism",
    "laplace_mechanism",
]

Calibration = Literal["analytic", "classical"]
_CALIBRATIONS = ("analytic", "classical")


class OSRandomSource:
    """Standard normal and Laplace variates built from the operating system's CSPRNG (``os.urandom``).

    Each variate uses a fresh random sign bit and a uniform u ∈ (0, 1/2] made of 105 random bits,
    u = (k₁ + (k₂ + 1/2)·2⁻⁵³)·2⁻⁵³ with k₁ < 2⁵² and k₂ < 2⁵³; then |Z| = −Φ⁻¹(u) (Gaussian) or
    |Z| = −ln(2u) (Laplace, unit scale). There is no state and no seed.

    Examples
    --------
    >>> src = OSRandomSource()
    >>> src.standard_normal((2, 3)).shape
    (2, 3)
    """

    @staticmethod
    def _words(n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy()

    def _half_uniform_and_sign(self, size: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        n = int(np.prod(size, dtype=np.int64))
        w = self._words(2 * n)
        k1 = (w[:n] >> np.uint64(12)).astype(np.float64)  # 52 bits
        sign = np.where((w[:n] & np.uint64(1)) == 1, 1.0, -1.0)
        k2 = (w[n:] >> np.uint64(11)).astype(np.float64)  # 53 bits
        u = (k1 + (k2 + 0.5) * 2.0**-53) * 2.0**-53  # in (0, 1/2]
        return u.reshape(size), sign.reshape(size)

    def standard_normal(self, size: tuple[int, ...]) -> np.ndarray:
        """N(0, 1) variates of the given shape."""
        u, sign = self._half_uniform_and_sign(size)
        return sign * -special.ndtri(u)

    def standard_laplace(self, size: tuple[int, ...]) -> np.ndarray:
        """Laplace(0, 1) variates (density e^{−|x|}/2) of the given shape."""
        u, sign = self._half_uniform_and_sign(size)
        return sign * -np.log(2.0 * u)


def _noise(kind: str, size: tuple[int, ...], random_state: Any, secure: bool) -> np.ndarray:
    if not isinstance(secure, bool | np.bool_):
        raise TypeError(f"secure must be a bool. Found {secure!r}.")
    if secure:
        if random_state is not None:
            raise ValueError(
                "random_state must be None when secure=True: secure mode draws from the operating system's "
                f"randomness and refuses seeds. Found {random_state!r}."
            )
        src = OSRandomSource()
        return src.standard_normal(size) if kind == "gaussian" else src.standard_laplace(size)
    rng = check_random_state(random_state)
    return rng.standard_normal(size) if kind == "gaussian" else rng.laplace(0.0, 1.0, size)


def _check_value(value: Any) -> tuple[np.ndarray, bool]:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"value must be a real number or a numeric array. Could not convert: {exc}") from exc
    if not np.all(np.isfinite(arr)):
        bad = arr[~np.isfinite(arr)].flat[0]
        raise ValueError(f"value must contain only finite numbers. Found {bad}.")
    return arr, arr.ndim == 0


def _release(value: Any, kind: str, scale: float, random_state: Any, secure: bool) -> float | np.ndarray:
    arr, scalar = _check_value(value)
    noisy = arr + scale * _noise(kind, arr.shape, random_state, secure)
    return float(noisy) if scalar else noisy


@dataclass(frozen=True)
class LaplaceMechanism:
    """The Laplace mechanism M(D) = f(D) + (Z₁, …, Z_k), Z_i iid Laplace(0, b), b = Δ₁/ε: ε-DP.

    For neighbouring D, D', ‖f(D) − f(D')‖₁ ≤ Δ₁ and the log density ratio is at most
    Σ_i |f(D)_i − f(D')_i| / b ≤ Δ₁/b = ε everywhere (Dwork & Roth 2014, Thm 3.6).

    Parameters
    ----------
    epsilon : float
        ε > 0.
    sensitivity : float, default=1.0
        Δ₁ > 0, the L1 sensitivity of f.

    Attributes
    ----------
    scale : float
        b = Δ₁/ε.

    Examples
    --------
    >>> m = LaplaceMechanism(epsilon=0.5, sensitivity=2.0)
    >>> m.scale
    4.0
    >>> x = m.randomize([10.0, 20.0], random_state=0)
    >>> x.shape
    (2,)
    >>> LaplaceMechanism(**m.to_dict()) == m
    True
    """

    epsilon: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    @property
    def scale(self) -> float:
        """b = Δ₁/ε."""
        return self.sensitivity / self.epsilon

    def randomize(self, value: Any, *, random_state: Any = None, secure: bool = False) -> float | np.ndarray:
        """Release f(D) + Laplace(0, b) noise (same shape as ``value``; a float for a scalar)."""
        return _release(value, "laplace", self.scale, random_state, secure)

    def rdp(self, alpha: float) -> float:
        """Rényi DP of order α (Mironov 2017, Prop. 6; an upper bound for vector outputs)."""
        return laplace_rdp(alpha, self.sensitivity, self.scale)

    def to_dict(self) -> dict[str, float]:
        """JSON-safe parameters; ``LaplaceMechanism(**d)`` rebuilds the mechanism."""
        return {"epsilon": self.epsilon, "sensitivity": self.sensitivity}


@dataclass(frozen=True)
class GaussianMechanism:
    """The Gaussian mechanism M(D) = f(D) + N(0, σ² I) calibrated to (ε, δ)-DP.

    ``calibration="classical"`` uses the lecture's σ = Δ₂ √(2 ln(1.25/δ)) / ε, a theorem only for
    0 < ε < 1 (enforced); ``calibration="analytic"`` (default) uses the exact smallest σ of Balle & Wang
    (2018), valid for every ε > 0 and never larger than the classical σ.

    Parameters
    ----------
    epsilon : float
        ε > 0 (ε < 1 for ``"classical"``).
    delta : float
        δ in (0, 1).
    sensitivity : float, default=1.0
        Δ₂ > 0, the L2 sensitivity of f.
    calibration : {"analytic", "classical"}, default="analytic"

    Attributes
    ----------
    sigma : float
        The calibrated σ.

    Examples
    --------
    >>> m = GaussianMechanism(epsilon=0.5, delta=1e-5, calibration="classical")
    >>> round(m.sigma, 4)
    9.6896
    >>> m.delta_at(0.5) <= 1e-5
    True
    >>> GaussianMechanism(**m.to_dict()) == m
    True
    """

    epsilon: float
    delta: float
    sensitivity: float = 1.0
    calibration: Calibration = "analytic"
    sigma: float = field(init=False)

    def __post_init__(self) -> None:
        calibration = check_choice("calibration", self.calibration, _CALIBRATIONS)
        if calibration == "classical":
            sigma = classical_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)
        else:
            sigma = analytic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "delta", float(self.delta))
        object.__setattr__(self, "sensitivity", float(self.sensitivity))
        object.__setattr__(self, "sigma", sigma)

    def randomize(self, value: Any, *, random_state: Any = None, secure: bool = False) -> float | np.ndarray:
        """Release f(D) + N(0, σ² I) (same shape as ``value``; a float for a scalar)."""
        return _release(value, "gaussian", self.sigma, random_state, secure)

    def delta_at(self, epsilon: float) -> float:
        """The exact δ(ε) of this mechanism (it is (ε, δ(ε))-DP for every ε ≥ 0 and no better)."""
        return analytic_gaussian_delta(epsilon, self.sigma, self.sensitivity)

    def epsilon_at(self, delta: float) -> float:
        """The exact smallest ε at which this mechanism is (ε, δ)-DP."""
        return analytic_gaussian_epsilon(delta, self.sigma, self.sensitivity)

    def rdp(self, alpha: float) -> float:
        """Rényi DP of order α: α Δ₂² / (2σ²)."""
        return gaussian_rdp(alpha, self.sensitivity, self.sigma)

    def to_dict(self) -> dict[str, float | str]:
        """JSON-safe parameters; ``GaussianMechanism(**d)`` rebuilds the mechanism (σ is recomputed)."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sensitivity": self.sensitivity,
            "calibration": self.calibration,
        }


def laplace_mechanism(
    value: Any, epsilon: float, sensitivity: float = 1.0, *, random_state: Any = None, secure: bool = False
) -> float | np.ndarray:
    """Release ``value`` + Laplace(0, Δ₁/ε) noise: ε-DP if f has L1 sensitivity Δ₁.

    Parameters
    ----------
    value : float or array-like
        f(D); noise is added independently to every entry.
    epsilon : float
        ε > 0.
    sensitivity : float, default=1.0
        Δ₁ > 0 (L1 sensitivity).
    random_state : None, int, SeedSequence or Generator
        Source of randomness (must be ``None`` when ``secure=True``).
    secure : bool, default=False
        Draw the noise from the operating system's randomness (see the module notes).

    Returns
    -------
    float or numpy.ndarray

    Examples
    --------
    >>> a = laplace_mechanism(3.0, epsilon=1.0, random_state=42)
    >>> a == laplace_mechanism(3.0, epsilon=1.0, random_state=42)
    True
    >>> laplace_mechanism([1.0, 2.0], epsilon=1.0, secure=True).shape
    (2,)
    """
    return LaplaceMechanism(epsilon, sensitivity).randomize(value, random_state=random_state, secure=secure)


def gaussian_mechanism(
    value: Any,
    epsilon: float,
    delta: float,
    sensitivity: float = 1.0,
    *,
    calibration: Calibration = "analytic",
    random_state: Any = None,
    secure: bool = False,
) -> float | np.ndarray:
    """Release ``value`` + N(0, σ² I) with σ calibrated to (ε, δ)-DP for L2 sensitivity Δ₂.

    Parameters
    ----------
    value : float or array-like
        f(D).
    epsilon, delta : float
        Target (ε, δ); ε < 1 when ``calibration="classical"``.
    sensitivity : float, default=1.0
        Δ₂ > 0 (L2 sensitivity).
    calibration : {"analytic", "classical"}, default="analytic"
        See :class:`GaussianMechanism`.
    random_state : None, int, SeedSequence or Generator
    secure : bool, default=False

    Returns
    -------
    float or numpy.ndarray

    Examples
    --------
    >>> x = gaussian_mechanism([0.0, 0.0, 0.0], epsilon=1.0, delta=1e-5, random_state=0)
    >>> x.shape
    (3,)
    """
    mech = GaussianMechanism(epsilon, delta, sensitivity, calibration)
    return mech.randomize(value, random_state=random_state, secure=secure)


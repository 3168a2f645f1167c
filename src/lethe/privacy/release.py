"""Privacy of a SEQUENCE of releases: T Gaussian releases with fresh noise, calibrated and accounted exactly.

Symbols (lecture 9 "Gaussian mechanism" and "composition"; Balle & Wang 2018; Guo et al. 2020 for the objective):

====================  ==================  ===============================================================
symbol                argument            meaning
====================  ==================  ===============================================================
ε, δ                  ``epsilon, delta``  the guarantee of the WHOLE sequence of releases
T                     ``horizon``         the number of releases the budget covers (release 0 included)
k                     ``releases``        the number of releases published so far (k ≤ T)
Δ                     ``sensitivity``     L2 sensitivity of one centre (``certified.bounds.release_sensitivity``)
σ                     ``sigma``           std of each coordinate of the fresh noise of every release
z = σ/Δ               —                   the noise multiplier
μ = √k Δ/σ            —                   Gaussian-DP parameter of k releases
====================  ==================  ===============================================================

Why fresh noise. Chourasia & Shah 2023 (§3, Thm 3.2) show that indistinguishability from retraining for ONE
release says nothing about a sequence: a secret that is the same in consecutive versions cancels in their
difference. Here every release t publishes ŵ_t = w̃_t + N(0, σ² I) with noise drawn afresh, and the observer of the
whole sequence is covered by composition.

Composition is exact for Gaussians. Release t is the Gaussian mechanism applied to the centre w̃_t, whose
sensitivity to adding or removing the target is at most Δ whatever happened before (adaptively chosen: the
centre may depend on earlier outputs and hidden state; the bound holds pointwise). The privacy loss random variable
of the Gaussian mechanism with sensitivity Δ and noise σ is dominated by N(η, 2η), η = Δ²/(2σ²) (lecture 9, the
privacy-loss proof of the Gaussian mechanism; Balle & Wang 2018, Lemma 3), and under adaptive composition the
losses add (lecture 9, composition; Dong, Roth & Su 2019 Thm 3.2 for the Gaussian trade-off functions): k releases
are dominated by N(kη, 2kη), i.e. by ONE Gaussian mechanism with sensitivity √k Δ and noise σ (μ = √k Δ/σ). The
smallest δ at ε is then Balle & Wang 2018's Thm 8 with that μ (:func:`lethe.privacy.gaussian.analytic_gaussian_delta`)
— exact, with no slack from a composition theorem. Hence the calibration for a horizon T at (ε, δ) is
σ = √T · σ_BW(ε, δ) · Δ with σ_BW the analytic Gaussian σ at sensitivity 1 (:func:`release_sigma`), and after k ≤ T
releases the spent ε at δ is the analytic Gaussian ε with sensitivity √k Δ (:func:`release_epsilon_spent`).

Everything is tested against an independent computation of the composed privacy-loss distribution
(Google's dp_accounting PLD accountant) in ``tests/privacy/test_release.py``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lethe._validation import (
    check_nonnegative,
    check_nonnegative_int,
    check_open_unit,
    check_positive,
    check_positive_int,
)
from lethe.exceptions import BudgetExceededError
from lethe.privacy.gaussian import analytic_gaussian_delta, analytic_gaussian_epsilon, analytic_gaussian_sigma

__all__ = [
    "ReleaseAccountant",
    "ReleaseCertificate",
    "auto_n_floor",
    "release_delta",
    "release_epsilon_spent",
    "release_noise_multiplier",
    "release_sigma",
]

#: What a release certificate covers (docs/release_privacy.md §1).
RELEASE_OBSERVER = "every published release"
RELEASE_THEOREMS = (
    "sensitivity of the unperturbed regularised minimiser (docs/release_privacy.md §2; Guo et al. 2020 objective "
    "with b = 0; lethe.certified.bounds.release_sensitivity)",
    "Gaussian mechanism (DP lecture 9; Balle & Wang 2018, Thm 8: exact analytic Gaussian)",
    "adaptive composition of Gaussian mechanisms: k releases = one Gaussian with sensitivity sqrt(k) * Delta "
    "(DP lecture 9, composition; Dong, Roth & Su 2019, Thm 3.2)",
    "post-processing (predictions are functions of the releases)",
)


def release_noise_multiplier(epsilon: float, delta: float, horizon: int) -> float:
    """z = σ/Δ such that ``horizon`` Gaussian releases with fresh noise are together (ε, δ)-DP.

    z = √T · σ_BW(ε, δ; Δ = 1), where σ_BW is the smallest σ making one Gaussian mechanism of sensitivity 1
    (ε, δ)-DP (Balle & Wang 2018, Alg. 1; :func:`~lethe.privacy.gaussian.analytic_gaussian_sigma`): T releases
    compose exactly to one Gaussian mechanism of sensitivity √T Δ (module docstring), and σ_BW scales linearly in
    the sensitivity.

    Parameters
    ----------
    epsilon : float
        ε > 0 of the whole sequence.
    delta : float
        δ in (0, 1) of the whole sequence.
    horizon : int
        T ≥ 1 releases.

    Returns
    -------
    float
        z.

    Examples
    --------
    >>> round(release_noise_multiplier(1.0, 1e-5, 1), 4)
    3.7306
    >>> round(release_noise_multiplier(1.0, 1e-5, 100) / release_noise_multiplier(1.0, 1e-5, 1), 6)
    10.0
    """
    eps = check_positive("epsilon", epsilon)
    dl = check_open_unit("delta", delta)
    T = check_positive_int("horizon", horizon)
    return math.sqrt(T) * analytic_gaussian_sigma(eps, dl, 1.0)


def release_sigma(epsilon: float, delta: float, horizon: int, sensitivity: float) -> float:
    """σ = z Δ of every release (:func:`release_noise_multiplier`), for a horizon of T releases at (ε, δ).

    Examples
    --------
    >>> s = release_sigma(1.0, 1e-5, 1000, 2e-3)
    >>> release_delta(1.0, 1000, s, 2e-3) <= 1e-5
    True
    """
    d = check_positive("sensitivity", sensitivity)
    return release_noise_multiplier(epsilon, delta, horizon) * d


def _composed(releases: Any, sigma: Any, sensitivity: Any) -> tuple[float, float] | None:
    """(σ, √k Δ): k = ``releases`` Gaussian releases of sensitivity Δ and noise σ compose exactly into one of
    sensitivity √k Δ (module docstring); None for k = 0 (nothing released, nothing spent)."""
    k = check_nonnegative_int("releases", releases)
    if k == 0:
        return None
    return check_positive("sigma", sigma), math.sqrt(k) * check_positive("sensitivity", sensitivity)


def release_delta(epsilon: float, releases: int, sigma: float, sensitivity: float) -> float:
    """Exact δ(ε) of ``releases`` = k Gaussian releases of sensitivity Δ and noise σ: the analytic Gaussian δ at
    sensitivity √k Δ (Balle & Wang 2018, Thm 8, with the exact composition of the module docstring); 0 for k = 0."""
    eps = check_nonnegative("epsilon", epsilon)
    composed = _composed(releases, sigma, sensitivity)
    return 0.0 if composed is None else analytic_gaussian_delta(eps, *composed)


def release_epsilon_spent(releases: int, sigma: float, sensitivity: float, delta: float) -> float:
    """Smallest ε with δ(ε) ≤ δ after k = ``releases`` Gaussian releases (0 for k = 0), rounded up
    (:func:`~lethe.privacy.gaussian.analytic_gaussian_epsilon` at sensitivity √k Δ).

    Examples
    --------
    >>> s = release_sigma(1.0, 1e-5, 400, 1.0)
    >>> release_epsilon_spent(400, s, 1.0, 1e-5) <= 1.0 + 1e-9
    True
    >>> round(release_epsilon_spent(100, s, 1.0, 1e-5), 2)
    0.47
    """
    dl = check_open_unit("delta", delta)
    composed = _composed(releases, sigma, sensitivity)
    return 0.0 if composed is None else analytic_gaussian_epsilon(dl, *composed)


def auto_n_floor(n_rows: int) -> int:
    """The default public floor on the rows: 15n/16 rounded DOWN to 4 significant binary digits (at least 1).

    It lies in [0.82 n, 0.94 n] (so at least n/16 rows can be removed) and is published (in every certificate,
    through σ): it reveals 4 significant bits of the training set's size, i.e. the default assumes the data set's
    size to within ≈ 12 % is public. The guarantee then covers every record of every history in which the OTHER
    records number at least this floor at every release, except at a rounding boundary: a size n at fit with
    auto_n_floor(n − 1) ≠ auto_n_floor(n) (≈ one size in 2^(bits(n) − 4), e.g. one in 65,536 at n ~ 10⁶), where σ
    itself differs between the two worlds. Pass an explicit, public ``n_floor`` to remove that caveat
    (docs/release_privacy.md §2).

    Examples
    --------
    >>> auto_n_floor(10_000), auto_n_floor(1_000_000), auto_n_floor(3)
    (9216, 917504, 2)
    """
    n = check_positive_int("n_rows", n_rows)
    target = (15 * n) // 16
    if target < 1:
        return 1
    drop = max(0, target.bit_length() - 4)
    return max(1, (target >> drop) << drop)


@dataclass(frozen=True)
class ReleaseCertificate:
    """What the sequence of releases published so far guarantees, for every record (deleted, pending or kept).

    ``observer`` is "every published release": an observer who sees every release (and every prediction, a
    post-processing of them), knows every record but the target's and the request sequence except the target's own,
    cannot tell whether the target was in the data beyond (``epsilon``, ``delta``) — ``epsilon`` is what the
    ``releases`` published so far spent at ``delta``; ``epsilon_budget`` covers the whole ``horizon``. The scope:
    histories in which the records other than the target number at least ``n_floor`` at every release.

    Every field is a public parameter or a count of releases: no data-dependent quantity (in particular not the
    centre's residual bound β, which is a function of the rows and is not covered by the accounting — the
    certificate states the public cap ``residual_cap`` ≥ β instead).
    """

    observer: str
    guarantee: str
    version: int
    releases: int
    horizon: int
    epsilon: float
    delta: float
    epsilon_budget: float
    sigma: float
    sensitivity: float
    noise_multiplier: float
    n_floor: int
    residual_cap: float
    lam: float
    cadence: int
    theorems: tuple[str, ...] = RELEASE_THEOREMS
    #: what the release schedule (times and count of releases, published) reveals: the guarantee is given it
    schedule_reveals: str = ""
    #: where the noise came from: "os-csprng" (the operating system's CSPRNG) or "seeded" (NOT private)
    noise_source: str = "os-csprng"
    #: False for a seeded stream: its noise can be regenerated by whoever knows the seed
    private: bool = True
    #: False on the certificate of a removal that no release has published yet (the cadence is not complete): the
    #: figures are those of the releases so far, and the record is still in what model-readers see until the next one
    published: bool = True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        d = dataclasses.asdict(self)
        d["theorems"] = list(self.theorems)
        return d


class HorizonLedger:
    """What every release ledger of a stream over a horizon does with its counts (fresh noise's
    :class:`ReleaseAccountant`, the tree's :class:`lethe.release.tree_stream.TreeStreamAccountant`): a frozen
    dataclass with ``epsilon``, ``delta``, ``horizon`` and ``releases``."""

    epsilon: float
    delta: float
    horizon: int
    releases: int

    @property
    def remaining(self) -> int:
        """Releases left before the horizon."""
        return self.horizon - self.releases

    def record(self) -> Any:
        """The ledger after one more release; ``BudgetExceededError`` past the horizon (nothing recorded)."""
        if self.releases >= self.horizon:
            raise BudgetExceededError(
                f"releases would exceed the horizon: {self.releases} of {self.horizon} releases were published, and "
                f"one more would spend more than (epsilon, delta) = ({self.epsilon}, {self.delta}). Nothing was "
                "published.")
        return dataclasses.replace(self, releases=self.releases + 1)  # type: ignore[type-var]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe record (public parameters and the count only)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`to_dict`, re-validated by the ledger's constructor (a ledger with too little noise for
        its parameters is refused); unknown fields are refused by name."""
        keys = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - keys
        if unknown:
            raise ValueError(f"Unknown {cls.__name__} fields: {sorted(unknown)}.")
        return cls(**{k: data[k] for k in keys if k in data})


@dataclass(frozen=True)
class ReleaseAccountant(HorizonLedger):
    """The ledger of a release stream: T = ``horizon`` Gaussian releases of sensitivity Δ and noise σ at (ε, δ).

    Immutable: :meth:`record` returns a new accountant with one more release, or raises
    :class:`~lethe.exceptions.BudgetExceededError` (a ``ValueError``) if the horizon is reached — nothing changes.
    ``sigma`` is checked at construction: T releases with it must be (ε, δ)-DP (exact δ of
    :func:`release_delta` ≤ δ), so an accountant cannot be built (or loaded) with too little noise.

    Examples
    --------
    >>> acc = ReleaseAccountant.calibrated(1.0, 1e-5, horizon=3, sensitivity=0.01)
    >>> acc = acc.record().record()
    >>> acc.releases, round(acc.epsilon_spent(), 3) < 1.0
    (2, True)
    >>> ReleaseAccountant.from_dict(acc.to_dict()) == acc
    True
    """

    epsilon: float
    delta: float
    horizon: int
    sensitivity: float
    sigma: float
    releases: int = 0

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_open_unit("delta", self.delta)
        check_positive_int("horizon", self.horizon)
        check_positive("sensitivity", self.sensitivity)
        check_positive("sigma", self.sigma)
        k = check_nonnegative_int("releases", self.releases)
        if k > self.horizon:
            raise ValueError(f"releases must be <= horizon ({self.horizon}). Found {k}.")
        worst = release_delta(self.epsilon, self.horizon, self.sigma, self.sensitivity)
        if worst > self.delta:
            raise ValueError(f"sigma is too small for the horizon: {self.horizon} releases with sigma={self.sigma!r} "
                             f"and sensitivity {self.sensitivity!r} give delta({self.epsilon}) = {worst:.3g} > "
                             f"delta = {self.delta}.")

    @classmethod
    def calibrated(cls, epsilon: float, delta: float, horizon: int, sensitivity: float) -> ReleaseAccountant:
        """A fresh accountant with σ = :func:`release_sigma` (ε, δ, T, Δ)."""
        return cls(float(epsilon), float(delta), int(horizon), float(sensitivity),
                   release_sigma(epsilon, delta, horizon, sensitivity))


    def epsilon_spent(self) -> float:
        """ε spent at ``delta`` by the releases so far (:func:`release_epsilon_spent`)."""
        return release_epsilon_spent(self.releases, self.sigma, self.sensitivity, self.delta)


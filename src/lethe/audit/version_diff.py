"""Version-diff attacks on a published *sequence* of linear models, and the identification rate an (ε, δ)
guarantee allows (issue 26).

Threat model (what every attack here assumes). The attacker

* knows every record (xᵢ, yᵢ) of the source table — the N candidates, one of which (or k of which) is deleted;
* knows the loss ℓ and λ of the training objective L(w) = Σᵢ ℓ(wᵀxᵢ, yᵢ) + (λn/2)‖w‖² (+ bᵀw, Guo et al. 2020,
  Eq. 5; b is secret and cancels in differences when it is reused), and n, the number of training rows;
* sees the published sequence of weight vectors w₀, w₁, … (every version the service or the library publishes),
  in the model's own coordinates (:func:`lethe_coordinates` for lethe's intercept convention).

Why the difference of two versions names the deleted rows. If w_old minimises L_b over D and w_new is the Newton
step of the removal of the rows R (|R| = k) — which is what certified removal publishes (Guo et al., Eq. 3) — then
∇L′_b(w_old) = −Σ_{i∈R} ∇ℓᵢ(w_old) − kλ w_old for the objective L′ of D ∖ R, and

    w_new − w_old = H′⁻¹ (Σ_{i∈R} ∇ℓᵢ(w_old) + kλ w_old),    ∇ℓᵢ(w) = ℓ′(wᵀxᵢ, yᵢ) xᵢ,

with H′ the Hessian of L′ at w_old. The attacker forms H, the Hessian of the objective over all candidates at
w_old (from the public table), subtracts the known term kλ H⁻¹ w_old and is left with Δ′ = H′⁻¹ Σ_R ∇ℓᵢ. Because
H′ = H − Σ_R ℓ″ᵢ xᵢxᵢᵀ − kλI, Woodbury gives H′⁻¹ [xᵢ]_{i∈R} = H⁻¹ [xᵢ]_{i∈R} M for an invertible k × k matrix M
(up to the kλI term, small beside λn), so Δ′ lies (almost exactly) in span{H⁻¹xᵢ : i ∈ R}:

* single deletion (:func:`single_deletion_scores`): rank every candidate by |cos(Δ′, H⁻¹∇ℓᵢ)|; since ∇ℓᵢ =
  ℓ′ᵢ xᵢ with a scalar ℓ′ᵢ ≠ 0 (logistic loss), this is |xᵢᵀ H⁻¹ Δ′| / (‖H⁻¹xᵢ‖ ‖Δ′‖); the top-1 is the guess;
* batch (:func:`batch_deletion_guess`): recover the k rows as the support of a k-sparse regression of Δ′ on the
  unit-norm columns H⁻¹xᵢ by orthogonal matching pursuit (scikit-learn's
  :func:`~sklearn.linear_model.orthogonal_mp`);
* averaging (:func:`averaged_difference`): against releases that carry fresh noise, average m releases before and
  m after the deletion (the noise of the difference shrinks as 1/√m) and rank by the single-deletion score.

The exact minimiser instead of the Newton step changes Δ′ only at second order, so the attacks apply to exact
retraining with the same b too (Chourasia & Shah 2023, §3). Costs: :func:`diff_geometry` is O(N d²) (the Hessian
and the norms ‖H⁻¹xᵢ‖, by chunked Cholesky solves), every score O(N d).

The allowed rate (:func:`allowed_identification_rate`) is derived in its docstring; rates are reported with
Clopper–Pearson intervals (:func:`identification_rate`, :func:`lethe.audit.stats.clopper_pearson`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from sklearn.linear_model import orthogonal_mp

from lethe._validation import check_nonnegative, check_positive, check_positive_int
from lethe.audit.stats import clopper_pearson
from lethe.io import JsonRecord
from lethe.losses import get_loss

#: Scale of lethe's intercept coordinate: the estimators train on rows [x/√2, 1/√2] (docs/estimators.md).
INTERCEPT_SCALE = 1.0 / math.sqrt(2.0)
_CHUNK = 65536


def lethe_coordinates(X: Any, fit_intercept: bool = False) -> np.ndarray:
    """The candidates' rows in the coordinates lethe's estimators train in: X itself, or [X/√2, 1/√2] with an
    intercept (so that ‖row‖ ≤ 1 still holds)."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (candidates × features). Found shape {X.shape}.")
    if not fit_intercept:
        return X
    return np.hstack([X * INTERCEPT_SCALE, np.full((X.shape[0], 1), INTERCEPT_SCALE)])


def lethe_weights(coef: Any, intercept: Any = None) -> np.ndarray:
    """The weight vector in :func:`lethe_coordinates` of a published (coef, intercept): coef, or √2 [coef, b]."""
    w = np.asarray(coef, dtype=np.float64).ravel()
    if intercept is None:
        return w
    return np.append(w, float(np.asarray(intercept, dtype=np.float64).ravel()[0])) / INTERCEPT_SCALE


@dataclass(frozen=True)
class DiffGeometry:
    """What the attacker precomputes from the public table at a reference weight vector w (:func:`diff_geometry`).

    ``X`` (N, d) and ``y`` the candidates, ``lam`` λ and ``n`` the n of the regulariser λn, ``chol`` the Cholesky
    factor of H = Σᵢ ℓ″(wᵀxᵢ, yᵢ) xᵢxᵢᵀ + λn I over the candidates (:func:`scipy.linalg.cho_factor`), and
    ``col_norm`` the norms ‖H⁻¹xᵢ‖ (N,).
    """

    X: np.ndarray
    y: np.ndarray
    w: np.ndarray
    lam: float
    n: int
    chol: tuple[np.ndarray, bool]
    col_norm: np.ndarray

    def solve(self, v: np.ndarray) -> np.ndarray:
        """H⁻¹ v (Cholesky solve)."""
        return np.asarray(cho_solve(self.chol, v))

    def columns(self, rows: np.ndarray) -> np.ndarray:
        """The unit-norm columns H⁻¹xᵢ/‖H⁻¹xᵢ‖ of the given candidates, shape (d, len(rows))."""
        return self.solve(self.X[rows].T) / self.col_norm[rows]


def diff_geometry(X: Any, y: Any, w: Any, lam: float, *, n: int | None = None,
                  loss: str = "logistic") -> DiffGeometry:
    """The attacker's Hessian H = Σᵢ ℓ″(wᵀxᵢ, yᵢ) xᵢxᵢᵀ + λn I of the candidates at w, and ‖H⁻¹xᵢ‖ for each.

    Parameters
    ----------
    X : array of shape (N, d)
        Every candidate record, in the model's coordinates (:func:`lethe_coordinates`).
    y : array of shape (N,)
        Their labels (±1 for the logistic loss).
    w : array of shape (d,)
        The weights to expand around (the published version before the deletion, or a nearby one).
    lam : float
        λ of the objective (regulariser λn/2 ‖w‖²).
    n : int, optional
        The n of the regulariser (the number of training rows of w); default N.
    loss : str
        The loss (:func:`lethe.losses.get_loss`).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"X must be 2-D with at least 2 candidates. Found shape {X.shape}.")
    N, d = X.shape
    lossf = get_loss(loss)
    y = lossf.check_targets(np.asarray(y, dtype=np.float64).ravel())
    if y.shape[0] != N:
        raise ValueError(f"y must have one label per candidate ({N}). Found {y.shape[0]}.")
    w = _check_w("w", w, d)
    lam = check_positive("lam", lam)
    n = N if n is None else check_positive_int("n", n)
    H = np.zeros((d, d))
    for s in range(0, N, _CHUNK):
        Xc = X[s:s + _CHUNK]
        H += Xc.T @ (Xc * lossf.d2(Xc @ w, y[s:s + _CHUNK])[:, None])
    H[np.diag_indices(d)] += lam * n
    chol = cho_factor(H, lower=True)
    col_norm = np.empty(N)
    for s in range(0, N, _CHUNK):
        col_norm[s:s + _CHUNK] = np.linalg.norm(cho_solve(chol, X[s:s + _CHUNK].T), axis=0)
    col_norm = np.maximum(col_norm, np.finfo(float).tiny)  # a zero row is never a guess (score 0)
    return DiffGeometry(X=X, y=y, w=w, lam=lam, n=n, chol=chol, col_norm=col_norm)


def _check_w(name: str, w: Any, d: int) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64).ravel()
    if w.shape[0] != d or not np.all(np.isfinite(w)):
        raise ValueError(f"{name} must be a finite vector of length {d}. Found shape {w.shape}.")
    return w


def deletion_signal(geom: DiffGeometry, w_old: Any, w_new: Any, k: int = 1) -> np.ndarray:
    """Δ′ = (w_new − w_old) − kλ H⁻¹ w_old: the difference with the known regulariser term of k removals taken out
    (what remains is H′⁻¹ Σ_{i∈R} ∇ℓᵢ, see the module docstring)."""
    d = geom.X.shape[1]
    w_old, w_new = _check_w("w_old", w_old, d), _check_w("w_new", w_new, d)
    k = check_positive_int("k", k)
    return (w_new - w_old) - k * geom.lam * geom.solve(w_old)


def single_deletion_scores(geom: DiffGeometry, w_old: Any, w_new: Any, k: int = 1) -> np.ndarray:
    """|cos(Δ′, H⁻¹∇ℓ(w_old; xᵢ, yᵢ))| for every candidate i (N,): the single-deletion attack's ranking.

    Since ∇ℓᵢ = ℓ′ᵢ xᵢ (ℓ′ᵢ a nonzero scalar) the score is |xᵢᵀ H⁻¹Δ′| / (‖H⁻¹xᵢ‖ ‖Δ′‖), in [0, 1]; the
    candidate with the highest score is the guess (:func:`single_deletion_guess`). A zero difference scores 0.
    """
    delta = deletion_signal(geom, w_old, w_new, k)
    nd = float(np.linalg.norm(delta))
    if nd == 0.0:
        return np.zeros(geom.X.shape[0])
    v = geom.solve(delta)
    return np.abs(geom.X @ v) / (geom.col_norm * nd)


def single_deletion_guess(geom: DiffGeometry, w_old: Any, w_new: Any) -> int:
    """The candidate (row of ``geom.X``) the single-deletion attack names: the top of :func:`single_deletion_scores`."""
    return int(np.argmax(single_deletion_scores(geom, w_old, w_new, 1)))


def batch_deletion_guess(geom: DiffGeometry, w_old: Any, w_new: Any, k: int, *,
                         max_columns: int = 20000) -> np.ndarray:
    """The k candidates the batch attack names: the support of the k-sparse orthogonal-matching-pursuit fit of
    Δ′ (k removals) on the unit-norm columns H⁻¹xᵢ (sorted row indices; fewer than k if OMP stops early).

    With more than ``max_columns`` candidates, OMP runs on the ``max_columns`` candidates of the highest single-
    deletion score (every deleted row has a score of order 1/√k, far above a random row's), to keep the column
    matrix at d × ``max_columns``; with fewer, on all of them (plain OMP).
    """
    k = check_positive_int("k", k)
    max_columns = check_positive_int("max_columns", max_columns)
    N, d = geom.X.shape
    if k > min(N, d):
        raise ValueError(f"k must be <= min(candidates, features) = {min(N, d)}. Found {k}.")
    delta = deletion_signal(geom, w_old, w_new, k)
    if N > max_columns:
        scores = single_deletion_scores(geom, w_old, w_new, k)
        rows = np.sort(np.argpartition(-scores, max_columns - 1)[:max_columns])
    else:
        rows = np.arange(N)
    if not np.any(delta):
        return np.empty(0, dtype=np.intp)
    coef = orthogonal_mp(geom.columns(rows), delta, n_nonzero_coefs=k)
    return np.sort(rows[np.flatnonzero(np.asarray(coef).ravel())])


def averaged_difference(before: Sequence[Any] | np.ndarray, after: Sequence[Any] | np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """The averaging attacker's pair (mean of the releases before, mean of the releases after a deletion).

    Fresh noise of variance s² per release leaves s²(1/m_before + 1/m_after) per coordinate in the difference of
    the means; the pair goes into :func:`single_deletion_scores` / :func:`single_deletion_guess` as (w_old, w_new).
    """
    B = np.atleast_2d(np.asarray(before, dtype=np.float64))
    A = np.atleast_2d(np.asarray(after, dtype=np.float64))
    if B.shape[0] < 1 or A.shape[0] < 1 or B.shape[1] != A.shape[1]:
        raise ValueError(f"before and after must be non-empty stacks of weight vectors of one length. Found "
                         f"shapes {B.shape} and {A.shape}.")
    return B.mean(axis=0), A.mean(axis=0)


def _check_epsilon_delta(epsilon: Any, delta: Any) -> tuple[float, float]:
    """An (ε, δ) guarantee: ε ≥ 0, δ in [0, 1)."""
    eps = check_nonnegative("epsilon", epsilon)
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1). Found {delta}.")
    return eps, delta


def _average_false_positive_rate(n_candidates: Any, guesses: Any, deleted: Any) -> float:
    """α = min(1, g/(N − k + 1)): the average false-positive rate of g guesses among N candidates of which k were
    deleted (the derivation in :func:`allowed_identification_rate`)."""
    N = check_positive_int("n_candidates", n_candidates)
    g = check_positive_int("guesses", guesses)
    k = check_positive_int("deleted", deleted)
    if k > N:
        raise ValueError(f"deleted must be <= n_candidates = {N}. Found {k}.")
    return min(1.0, g / (N - k + 1))


def allowed_identification_rate(epsilon: float, delta: float, n_candidates: int, *, guesses: int = 1,
                                deleted: int = 1) -> float:
    """The largest probability with which a deleted row can be among an attacker's ``guesses`` named candidates,
    under an (ε, δ) guarantee, when ``deleted`` of ``n_candidates`` equally likely rows were deleted.

    ``min(1, e^ε α + δ, 1 − e^{−ε}(1 − δ − α))`` with α = guesses / (n_candidates − deleted + 1); for one guess
    and one deletion α = 1/N, i.e. at most e^ε/N + δ.

    Derivation (hypothesis testing on the target's identity). Let (ε, δ) be the guarantee for the pair of worlds
    A_r = "row r is deleted at this step" and Q = "row r is kept" (same history otherwise): for every event E of the
    published sequence, P_{A_r}(E) ≤ e^ε P_Q(E) + δ, and likewise with the roles swapped. Fix the other k − 1 deleted
    rows B′ (k = ``deleted``); Q is then the world in which only B′ is deleted, which does not depend on r. Let
    S be the attacker's set of g = ``guesses`` named rows, a function of the sequence. By Kairouz, Oh & Viswanath
    (2015, Thm 2.1) the pair (FPR, TPR) = (P_Q(r ∈ S), P_{A_r}(r ∈ S)) of the test "r ∈ S" satisfies
    TPR ≤ f(FPR) with f(α) = min(e^ε α + δ, 1 − e^{−ε}(1 − δ − α)) (the second line is the swapped inequality
    applied to the complement event). The deleted row r is uniform over the N − k + 1 rows outside B′, and
    Σ_{r∉B′} P_Q(r ∈ S) ≤ E_Q|S| = g, so the average FPR is ≤ α = g/(N − k + 1). f is concave (a minimum of two
    lines) and increasing, so by Jensen the average TPR — the probability that the deleted row is named — is
    ≤ f(α). For g = k = 1 the first line is the brief's e^ε/N + δ; the second line (tighter only when α is large)
    and the cap at 1 make the form tighter, never looser.

    If a guarantee is stated only for "r present" against "r never present" (Z_r), A_r and Q are both within
    (ε, δ) of Z_r, hence within (2ε, (1 + e^ε)δ) of each other (group privacy); pass those values then
    (:func:`delete_vs_keep_from_presence`).
    """
    eps, delta = _check_epsilon_delta(epsilon, delta)
    alpha = _average_false_positive_rate(n_candidates, guesses, deleted)
    return float(min(1.0, math.exp(eps) * alpha + delta, 1.0 - math.exp(-eps) * (1.0 - delta - alpha)))


def allowed_identification_rate_gdp(mu: float, n_candidates: int, *, guesses: int = 1, deleted: int = 1) -> float:
    """The same limit for a μ-Gaussian-DP guarantee (Dong, Roth & Su 2019): Φ(Φ⁻¹(α) + μ), α as in
    :func:`allowed_identification_rate`. Tighter than the (ε, δ) form of the same mechanism.

    Derivation: as for :func:`allowed_identification_rate`, with the trade-off function of μ-GDP in place of the
    (ε, δ) region: a test with false-positive rate α has true-positive rate ≤ 1 − G_μ(α) = Φ(Φ⁻¹(α) + μ), and
    α ↦ Φ(Φ⁻¹(α) + μ) is concave (one minus a trade-off function, which is convex) and increasing, so Jensen's
    inequality over the uniformly deleted row gives the bound at the mean α. A sequence of k Gaussian releases
    with sensitivity Δ and noise σ each is μ-GDP with μ = √k Δ/σ (:mod:`lethe.privacy.release`), for every pair of
    histories that differ in one record's presence at any of the releases — "deleted at this step" against "kept"
    among them.
    """
    from scipy.stats import norm

    mu = check_nonnegative("mu", mu)
    alpha = _average_false_positive_rate(n_candidates, guesses, deleted)
    return float(min(1.0, norm.cdf(norm.ppf(alpha) + mu)))


def delete_vs_keep_from_presence(epsilon: float, delta: float) -> tuple[float, float]:
    """(2ε, (1 + e^ε)δ): the guarantee between "r deleted" and "r kept" implied by an (ε, δ) guarantee between
    each of them and "r never present" (group privacy for a pair at distance 2)."""
    eps, delta = _check_epsilon_delta(epsilon, delta)
    return 2.0 * eps, (1.0 + math.exp(eps)) * delta


@dataclass(frozen=True)
class IdentificationRate(JsonRecord):
    """An attack's identification rate with its (1 − α) Clopper–Pearson interval, beside the allowed rate.

    ``exceeds``: the interval lies wholly above the allowed rate (the attack beats the guarantee, at level α).
    Trials that share a published sequence are treated as independent by the interval.
    """

    hits: int
    trials: int
    rate: float
    low: float
    high: float
    allowed: float
    exceeds: bool


def identification_rate(hits: int, trials: int, allowed: float, *, alpha: float = 0.05) -> IdentificationRate:
    """``hits`` of ``trials`` identifications, with the Clopper–Pearson interval, against ``allowed``."""
    lo, hi = clopper_pearson(hits, trials, alpha)
    allowed = float(allowed)
    if not 0.0 <= allowed <= 1.0:
        raise ValueError(f"allowed must be a probability in [0, 1]. Found {allowed}.")
    return IdentificationRate(hits=int(hits), trials=int(trials), rate=hits / trials, low=lo, high=hi,
                              allowed=allowed, exceeds=bool(lo > allowed))

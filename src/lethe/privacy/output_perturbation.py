"""Output perturbation for L2-regularised ERM (lecture 9): w_priv = w* + z, z ~ N(0, σ² I).

Symbols (lecture 9) and argument names:

=========  ========================  ===========================================================================
symbol     argument                  meaning
=========  ========================  ===========================================================================
L          ``lipschitz``             Lipschitz constant of ℓ(·, x) (1 for the logistic loss when ‖x‖₂ ≤ 1)
μ          ``strong_convexity``      strong convexity of the regulariser R (μ = λ for R = (λ/2)‖w‖²)
λ          ``lam``                   L2 regularisation strength of the estimator
n          ``n_samples``             number of records (neighbours replace one record)
d          ``n_features``            dimension of w
ε, δ       ``epsilon``, ``delta``    privacy parameters
Δ₂         —                         sensitivity of the minimiser, 2L/(μn)
=========  ========================  ===========================================================================

The objective is F(w) = (1/n) Σ_i ℓ(w, x_i) + R(w). Lecture 9, sensitivity lemma: if ℓ(·, x) is L-Lipschitz
and convex and R is μ-strongly convex, the minimisers on neighbouring datasets satisfy
‖w* − w*'‖₂ ≤ 2L/(μn). Adding Gaussian noise calibrated to this Δ₂ makes w_priv (ε, δ)-DP; the lecture's
σ is 2L√(2 ln(1.25/δ))/(εμn) (ε < 1). Utility: E[L̂(w_priv) − L̂(w*)] ≤ L E‖z‖ ≤ L√d σ
≤ 3L²√(d ln(1.25/δ))/(εμn), L̂ the unregularised empirical loss.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from scipy import linalg, optimize
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from lethe._locking import SerialisedModel, serialised
from lethe._rng import check_random_state
from lethe._validation import (
    check_choice,
    check_each,
    check_open_unit,
    check_positive,
    check_positive_int,
    store_init_args,
)
from lethe.privacy.gaussian import analytic_gaussian_sigma, classical_gaussian_sigma

__all__ = [
    "OutputPerturbationLogisticRegression",
    "erm_sensitivity",
    "excess_risk_bound",
    "excess_risk_bound_from_sigma",
    "output_perturbation_sigma",
]

_CALIBRATIONS = ("analytic", "classical")
_ROW_NORMS = ("clip", "normalize", "error")


def erm_sensitivity(lipschitz: float, strong_convexity: float, n_samples: int) -> float:
    """L2 sensitivity of the regularised ERM minimiser: Δ₂ = 2L/(μn) (lecture 9, sensitivity lemma).

    Neighbouring datasets have the same n and differ in one record (replacement).

    Examples
    --------
    >>> erm_sensitivity(1.0, 0.01, 1000)
    0.2
    """
    L = check_positive("lipschitz", lipschitz)
    mu = check_positive("strong_convexity", strong_convexity)
    n = check_positive_int("n_samples", n_samples)
    return 2.0 * L / (mu * n)


def output_perturbation_sigma(
    epsilon: float,
    delta: float,
    lipschitz: float,
    strong_convexity: float,
    n_samples: int,
    calibration: str = "classical",
) -> float:
    """Noise std for (ε, δ)-DP output perturbation: σ = 2L√(2 ln(1.25/δ))/(εμn) (lecture 9).

    ``calibration="classical"`` is the lecture's formula (0 < ε < 1 enforced); ``"analytic"`` is the exact
    Balle–Wang σ for the same Δ₂ = 2L/(μn), valid for every ε > 0 and never larger.

    Examples
    --------
    >>> round(output_perturbation_sigma(0.5, 1e-5, 1.0, 0.01, 1000), 4)
    1.9379
    >>> output_perturbation_sigma(0.5, 1e-5, 1.0, 0.01, 1000, calibration="analytic") < 1.9379
    True
    """
    cal = check_choice("calibration", calibration, _CALIBRATIONS)
    sens = erm_sensitivity(lipschitz, strong_convexity, n_samples)
    if cal == "classical":
        return classical_gaussian_sigma(epsilon, delta, sens)
    return analytic_gaussian_sigma(epsilon, delta, sens)


def excess_risk_bound(
    epsilon: float, delta: float, lipschitz: float, strong_convexity: float, n_samples: int, n_features: int
) -> float:
    """The lecture's utility bound E[L̂(w_priv) − L̂(w*)] ≤ 3L²√(d ln(1.25/δ))/(εμn).

    Proof (lecture 9): L̂(w_priv) − L̂(w*) ≤ L‖z‖ (L̂ is L-Lipschitz) and E‖z‖ ≤ √(E‖z‖²) = √d σ; with the
    classical σ, L√d σ = 2√2 L²√(d ln(1.25/δ))/(εμn) ≤ 3L²√(d ln(1.25/δ))/(εμn). Stated for the classical
    calibration, hence 0 < ε < 1 (enforced). The analytic σ is smaller, so the bound holds for it too.
    See :func:`excess_risk_bound_from_sigma` for the bound at any σ.

    Examples
    --------
    >>> round(excess_risk_bound(0.5, 1e-5, 1.0, 0.01, 1000, 10), 4)
    6.5
    """
    eps, dl = check_each(check_open_unit, epsilon=epsilon, delta=delta)
    L, mu = check_each(check_positive, lipschitz=lipschitz, strong_convexity=strong_convexity)
    n, d = check_each(check_positive_int, n_samples=n_samples, n_features=n_features)
    return 3.0 * L * L * math.sqrt(d * math.log(1.25 / dl)) / (eps * mu * n)


def excess_risk_bound_from_sigma(lipschitz: float, sigma: float, n_features: int) -> float:
    """E[L̂(w_priv) − L̂(w*)] ≤ L√d σ for w_priv = w* + N(0, σ² I) and L-Lipschitz L̂ (any σ, any ε).

    Examples
    --------
    >>> excess_risk_bound_from_sigma(1.0, 0.5, 16)
    2.0
    """
    L = check_positive("lipschitz", lipschitz)
    s = check_positive("sigma", sigma)
    d = check_positive_int("n_features", n_features)
    return L * math.sqrt(d) * s


def _logistic_objective(w: np.ndarray, X: np.ndarray, ys: np.ndarray, lam: float) -> tuple[float, np.ndarray]:
    """F(w) = mean log(1 + exp(−y xᵀw)) + (λ/2)‖w‖² and its gradient."""
    margins = ys * (X @ w)
    loss = float(np.mean(np.logaddexp(0.0, -margins))) + 0.5 * lam * float(w @ w)
    coef = -ys * expit(-margins)
    grad = X.T @ coef / X.shape[0] + lam * w
    return loss, grad


class OutputPerturbationLogisticRegression(SerialisedModel, ClassifierMixin, BaseEstimator):
    """(ε, δ)-DP binary logistic regression by output perturbation (lecture 9).

    Not a :class:`lethe.protocols.Unlearner` (deliberately: it has no ``remove``). Output perturbation is
    (ε, δ)-DP *training*: the released model hides each record from the start, and removing one would mean
    retraining on the rest with fresh noise — no certificate of this class covers an update. For certified removal
    use :class:`lethe.certified.estimators.CertifiedLogisticRegression` or the Noisy-GD estimators.

    Fits w* = argmin_w (1/n) Σ_i log(1 + exp(−y_i wᵀx̃_i)) + (λ/2)‖w‖² with L-BFGS-B, refines it with
    Newton steps until the gradient norm is at most ``tol``·L/n, and releases only
    w_priv = ŵ + N(0, σ² I). The non-private minimiser is never stored.

    Why this is (ε, δ)-DP (neighbours: same n, one record replaced):

    * every row is mapped to x̃ with ‖x̃‖₂ ≤ 1 by a per-record rule (``row_norm``; with an intercept,
      x̃ = [x, 1]/√2), so the logistic loss is L = 1 Lipschitz and the regulariser is μ = λ strongly convex;
    * exact minimisers satisfy ‖w* − w*'‖ ≤ 2L/(λn) (lecture 9); the computed ŵ satisfies
      ‖ŵ − w*‖ ≤ ‖∇F(ŵ)‖/λ ≤ tol·L/(λn) by strong convexity, so ‖ŵ − ŵ'‖ ≤ Δ₂ = 2L(1 + tol)/(λn);
    * σ is calibrated to Δ₂ (``calibration="analytic"``: exact for any ε; ``"classical"``: the lecture's
      σ = Δ₂√(2 ln(1.25/δ))/ε, ε < 1).

    Parameters
    ----------
    epsilon : float, default=1.0
        ε > 0.
    delta : float, default=1e-5
        δ in (0, 1).
    lam : float, default=1e-2
        λ > 0, the L2 regularisation of the averaged objective (μ = λ).
    calibration : {"analytic", "classical"}, default="analytic"
    fit_intercept : bool, default=True
        Learn a (regularised) intercept through the constant feature of x̃ = [x, 1]/√2.
    row_norm : {"clip", "normalize", "error"}, default="clip"
        How rows are brought into the unit ball: ``"clip"`` scales rows with ‖x‖ > 1 down to norm 1,
        ``"normalize"`` scales every non-zero row to norm 1, ``"error"`` raises if a row has
        ‖x‖ > 1 + 1e-9 (rows within that rounding slack are clipped). The same map is applied in predict.
    tol : float, default=1e-4
        Relative optimisation tolerance: the certified gradient norm at ŵ is at most tol·L/n.
    max_iter : int, default=1000
        L-BFGS-B iteration limit (Newton refinement follows).
    random_state : None, int, SeedSequence or Generator
        Source of the noise.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
    coef_ : ndarray of shape (1, n_features)
        The private weights (scaled back to the original features).
    intercept_ : ndarray of shape (1,)
    n_features_in_ : int
    sensitivity_ : float
        Δ₂ = 2(1 + tol)/(λn).
    sigma_ : float
        The noise std that was added.
    n_iter_ : int
        Optimiser iterations (L-BFGS-B plus Newton refinements).
    guarantee_ : dict
        The (ε, δ) promise and the numbers behind it.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2000, n_features=5, random_state=0)
    >>> clf = OutputPerturbationLogisticRegression(epsilon=1.0, delta=1e-5, lam=0.05, random_state=0).fit(X, y)
    >>> clf.guarantee_["epsilon"], clf.guarantee_["delta"]
    (1.0, 1e-05)
    >>> bool(clf.score(X, y) > 0.75)
    True

    Notes
    -----
    ``fit`` and the predictions run under the instance's lock (:mod:`lethe._locking`), so a concurrent ``fit``
    never lets a prediction mix one fit's ``coef_`` with another's ``intercept_``. Copies are allowed: the model
    keeps no secret (the noise is already in the published ``coef_``; a copy is post-processing).
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-5,
        lam: float = 1e-2,
        *,
        calibration: str = "analytic",
        fit_intercept: bool = True,
        row_norm: str = "clip",
        tol: float = 1e-4,
        max_iter: int = 1000,
        random_state: Any = None,
    ) -> None:
        store_init_args(self, locals())

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    # ------------------------------------------------------------------ helpers
    def _unit_rows(self, X: np.ndarray, *, strict: bool) -> np.ndarray:
        norms = np.linalg.norm(X, axis=1)
        if self.row_norm == "error" and strict and np.any(norms > 1.0 + 1e-9):
            i = int(np.argmax(norms))
            raise ValueError(
                f"row_norm='error' requires every row of X to have L2 norm <= 1. Found norm {norms[i]} at row {i}."
            )
        if self.row_norm == "normalize":
            scale = np.where(norms > 0, norms, 1.0)
        else:
            scale = np.maximum(norms, 1.0)
        Xu = X / scale[:, None]
        if self.fit_intercept:
            Xu = np.hstack([Xu, np.ones((X.shape[0], 1))]) / math.sqrt(2.0)
        # guard against rounding: the certificate needs ‖x̃‖ ≤ 1 exactly
        over = np.linalg.norm(Xu, axis=1)
        return Xu / np.maximum(over, 1.0)[:, None]

    def _validate_params(self) -> tuple[float, float, float, str, float, int]:
        eps = check_positive("epsilon", self.epsilon)
        dl = check_open_unit("delta", self.delta)
        lam = check_positive("lam", self.lam)
        cal = check_choice("calibration", self.calibration, _CALIBRATIONS)
        if cal == "classical":
            check_open_unit("epsilon", eps)
        check_choice("row_norm", self.row_norm, _ROW_NORMS)
        if not isinstance(self.fit_intercept, bool | np.bool_):
            raise TypeError(f"fit_intercept must be a bool. Found {self.fit_intercept!r}.")
        tol = check_positive("tol", self.tol)
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, numbers.Integral):
            raise TypeError(f"max_iter must be an integer. Found {self.max_iter!r}.")
        max_iter = check_positive_int("max_iter", self.max_iter)
        return eps, dl, lam, cal, tol, max_iter

    # ------------------------------------------------------------------ fit / predict
    @serialised
    def fit(self, X: Any, y: Any) -> OutputPerturbationLogisticRegression:
        """Fit the private model on features ``X`` (n, p) and binary labels ``y`` (n,)."""
        eps, dl, lam, cal, tol, max_iter = self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        y_type = type_of_target(y, input_name="y", raise_unknown=True)
        if y_type != "binary":
            raise ValueError(
                f"Only binary classification is supported. The type of the target is {y_type}. "
                f"Found {np.unique(y).size} classes."
            )
        classes = np.unique(y)
        if classes.size != 2:
            raise ValueError(
                f"OutputPerturbationLogisticRegression needs samples of exactly 2 classes. Found {classes.size} "
                f"class(es): {classes.tolist()[:10]}."
            )
        self.classes_ = classes
        Xu = self._unit_rows(X, strict=True)
        ys = np.where(y == classes[1], 1.0, -1.0)
        n, dim = Xu.shape

        res = optimize.minimize(
            _logistic_objective,
            np.zeros(dim),
            args=(Xu, ys, lam),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": max_iter, "gtol": 1e-12, "ftol": 1e-15},
        )
        w = np.asarray(res.x, dtype=np.float64)
        n_iter = int(res.nit)
        target = tol / n  # certified ‖∇F(ŵ)‖ ≤ tol·L/n with L = 1
        grad = _logistic_objective(w, Xu, ys, lam)[1]
        for _ in range(50):
            if float(np.linalg.norm(grad)) <= target:
                break
            p = expit(ys * (Xu @ w))
            weights = p * (1.0 - p) / n
            H = (Xu.T * weights) @ Xu + lam * np.eye(dim)
            w = w - linalg.solve(H, grad, assume_a="pos")
            grad = _logistic_objective(w, Xu, ys, lam)[1]
            n_iter += 1
        grad_norm = float(np.linalg.norm(grad))
        if not grad_norm <= target:
            raise RuntimeError(
                f"the optimiser did not reach the certified gradient norm tol/n = {target:.3g} "
                f"(found {grad_norm:.3g}); the sensitivity bound would not hold, so no model was released."
            )

        sensitivity = 2.0 * (1.0 + tol) / (lam * n)
        if cal == "classical":
            sigma = classical_gaussian_sigma(eps, dl, sensitivity)
        else:
            sigma = analytic_gaussian_sigma(eps, dl, sensitivity)
        rng = check_random_state(self.random_state)
        w_priv = w + sigma * rng.standard_normal(dim)

        scale = 1.0 / math.sqrt(2.0) if self.fit_intercept else 1.0
        p_feat = X.shape[1]
        self.coef_ = (w_priv[:p_feat] * scale).reshape(1, -1)
        self.intercept_ = np.array([w_priv[p_feat] * scale if self.fit_intercept else 0.0])
        self.sensitivity_ = sensitivity
        self.sigma_ = sigma
        self.n_iter_ = n_iter
        self.guarantee_ = {
            "epsilon": eps,
            "delta": dl,
            "sensitivity": sensitivity,
            "sigma": sigma,
            "calibration": cal,
            "n_samples": int(n),
            "lam": lam,
            "source": "Razaviyayn, lecture 9: output perturbation (sensitivity 2L/(mu n), Gaussian mechanism)",
        }
        return self

    def _transform_rows(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        norms = np.linalg.norm(X, axis=1)
        if self.row_norm == "normalize":
            return X / np.where(norms > 0, norms, 1.0)[:, None]
        return X / np.maximum(norms, 1.0)[:, None]

    @serialised
    def decision_function(self, X: Any) -> np.ndarray:
        """Signed score of the positive class ``classes_[1]`` (on the unit-ball rows the model was fit on)."""
        Xu = self._transform_rows(X)
        return Xu @ self.coef_[0] + self.intercept_[0]

    @serialised
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities σ(±score), columns ordered as ``classes_``."""
        s = self.decision_function(X)
        p1 = expit(s)
        return np.column_stack([1.0 - p1, p1])

    @serialised
    def predict(self, X: Any) -> np.ndarray:
        """Predicted class labels."""
        s = self.decision_function(X)
        return self.classes_[(s > 0).astype(int)]

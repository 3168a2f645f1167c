"""Ridge least squares with exact removal (Guo et al. 2020, §3.2) as a scikit-learn estimator:
:class:`CertifiedLinearRegression`, over the shared machinery of
:class:`lethe.certified.estimators_logistic.CertifiedLinearBase`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

from lethe._locking import serialised
from lethe._rng import check_random_state
from lethe._validation import store_init_args
from lethe.certified.estimators_logistic import CertifiedLinearBase
from lethe.certified.mechanism import Certificate, NewtonCache
from lethe.certified.rows import squared_loss_rounding_floor
from lethe.certified.transaction import begin as begin_undo
from lethe.estimator_data import check_sample_weight, margins
from lethe.model_origin import reports_model_origin

#: Largest share of the gradient at w = 0 that the float64 rounding floor of the direct solve may reach
#: (:func:`_check_solvable_scale`).
SOLVABLE_FLOOR_SHARE = 0.1


def _check_solvable_scale(X: Any, y: np.ndarray, lam: float) -> None:
    """Refuse features too large for a float64 ridge solve (issue 37): with timestamps in milliseconds (≈ 1e12) the
    rounding floor of the solve (:func:`lethe.certified.rows.squared_loss_rounding_floor`) exceeds the gradient at
    w = 0, so training stops near w = 0 (R² ≈ 0 where Ridge reaches 0.999) with certificates over a meaningless
    residual (NaN from ≈ 1e80). Refused when the floor reaches :data:`SOLVABLE_FLOOR_SHARE` of ‖∇L(0)‖ = 2‖Xᵀy‖;
    in-memory data only (a Dask array is not read here)."""
    if not (isinstance(X, np.ndarray) or sp.issparse(X)):
        return
    g0 = 2.0 * float(np.linalg.norm(X.T @ y))
    if not (g0 > 0 and math.isfinite(g0)):
        big = float(abs(X).max()) if X.size else 0.0
        if math.isfinite(g0) and math.isfinite(big):
            return  # y ⟂ X: w = 0 is the fit
        raise ValueError(f"X: features too large for a float64 solve (largest magnitude {big:.3g}; Xᵀy overflows). "
                         "Centre and scale the features first, e.g. subtract a public reference and divide by a "
                         "public unit (or a StandardScaler fitted on public rows).")
    floor = squared_loss_rounding_floor(X, y, lam)
    if not floor < SOLVABLE_FLOOR_SHARE * g0:
        big = float(abs(X).max())
        raise ValueError(f"X: features of magnitude up to {big:.3g} are too large for a float64 ridge solve: its "
                         f"rounding floor ({floor:.3g}) is {floor / g0:.3g}× the gradient at w = 0 (at most "
                         f"{SOLVABLE_FLOOR_SHARE:g} allowed), so training would stop near w = 0 and certify a "
                         "meaningless residual. Centre and scale the features first, e.g. subtract a public reference "
                         "(a timestamp's epoch) and divide by a public unit, or a StandardScaler fitted on public "
                         "rows.")


@reports_model_origin
class CertifiedLinearRegression(RegressorMixin, CertifiedLinearBase):
    """Ridge least squares with exact removal (Guo et al. 2020, §3.2): the Newton step equals retraining.

    Minimises Σ (wᵀxᵢ − yᵢ)² + λn/2 ‖w‖² (+ bᵀw if ``noise`` is not ``"none"``). The loss's second derivative is
    constant (γ = 0), so the removal step leaves no residual beyond round-off: ε = 0 with ``noise="none"``.
    The default ``solver="auto"`` resolves to ``"anchor"`` wherever a d × d matrix may be kept: exact *and* no
    pass over the data, since the anchor Hessian 2X′ᵀX′ + λn′I is the Hessian, downdated per removed row in O(d²);
    on matrix-free data (sparse or Dask data with many features, or d > 4096) to ``"pcg"``.

    With ``noise="none"`` and ``tol=None`` training stops at max(10⁻⁹ λn, the float64 rounding floor of the direct
    solve) (d > n or collinear columns with a tiny λ cannot reach 10⁻⁹ λn). ``fit_intercept=True`` appends a
    constant feature 1 (the squared loss has no row-norm condition); the intercept is regularised like the weights.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(50, 3)); y = X @ [1.0, -2.0, 0.5]
    >>> reg = CertifiedLinearRegression(lam=1e-3).fit(X, y)
    >>> cert = reg.remove([0])
    >>> cert.epsilon, cert.retrained
    (0.0, False)
    """

    _loss = "squared"

    def __init__(self, lam: float = 1e-3, noise: str = "none", sigma: float = 1.0, epsilon: float = 1.0,
                 delta: float = 1e-4, tol: float | None = None, max_iter: int = 2000, solver: str = "auto",
                 random_state: Any = None, bound: str = "tight", calibration: str = "analytic",
                 refresh: str | int = "auto", fit_intercept: bool = False) -> None:
        store_init_args(self, locals())

    @serialised
    def fit(self, X: Any, y: Any, sample_ids: Any = None, sample_weight: Any = None) -> CertifiedLinearRegression:
        """Fit by a direct solve (exact up to round-off). ``sample_ids``: record keys for ``remove(keys=...)``
        (default: a DataFrame's index); ``sample_weight`` must be None or all ones."""
        params = self._current_params()
        mech = self._mechanism(params)
        keys = self._keys_from(X, sample_ids)
        X, y = self._validate_X(X, y, reset=True, params=params)
        mech = mech.resolved(X)  # solver="auto": the concrete solver for these data
        check_sample_weight(sample_weight, X.shape[0])
        Y = np.asarray(y, dtype=np.float64)[None, :].copy()
        _check_solvable_scale(X, Y[0], mech.lam)
        if self.tol is None and mech.noise == "none":
            floor = squared_loss_rounding_floor(X, Y[0], mech.lam)
            if floor > mech.train_tolerance(X.shape[0]):
                mech = self._mechanism(params, tol=floor).resolved(X)
        rng = check_random_state(self.random_state)
        cache = NewtonCache()
        state, cert = mech.train(X, Y[0], random_state=rng, cache=cache)
        return self._fitted(X, Y, members=None, keys=keys, states=[state], certs=[cert], mech=mech,
                            caches=[cache], params=params, rng=rng)

    @property
    @serialised
    def coef_(self) -> np.ndarray:
        """Weights, shape (d,)."""
        check_is_fitted(self, "states_")
        w = self.states_[0].w
        return w[:-1] if self._param("fit_intercept") else w

    @property
    @serialised
    def intercept_(self) -> float:
        """The intercept; zero unless ``fit_intercept=True``."""
        check_is_fitted(self, "states_")
        return float(self.states_[0].w[-1]) if self._param("fit_intercept") else 0.0

    @serialised
    def predict(self, X: Any) -> np.ndarray:
        """wᵀx (+ intercept)."""
        check_is_fitted(self, "states_")
        X = self._validate_X(X, reset=False)
        return margins(X, self.states_[0].w)

    def _encode_targets(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y, dtype=np.float64)[None, :]

    def _remove_checked(self, idx: np.ndarray, rng: np.random.Generator) -> Certificate:
        """Remove the validated training rows ``idx`` by the exact Newton step; see :meth:`remove`."""
        undo = begin_undo(self, idx, rng, self.caches_, lazy_rng=True)  # a failed call is rolled back
        undo.mask = self.active_
        try:
            state, cert = self.mechanism_.remove(self.states_[0], self.X_, self.Y_[0], idx, active=self.active_,
                                                 cache=self.caches_[0], random_state=rng, check_input=False)
            return self._commit_removal(idx, undo, [state], cert)
        except BaseException:
            undo.rollback()  # a no-op beyond finishing if the commit happened
            raise


__all__ = ["SOLVABLE_FLOOR_SHARE", "CertifiedLinearRegression"]

"""scikit-learn estimators for certified removal (Guo et al. 2020): thin front ends over
:class:`lethe.certified.mechanism.CertifiedRemoval`; they hold no math.

* :class:`CertifiedLogisticRegression` — binary logistic regression, or one-vs-all for more classes (§4.2) with
  optional negative subsampling and a joint budget over the classes;
* :class:`CertifiedLinearRegression` — ridge least squares with exact (0-certified) removal (§3.2).

Both keep the training rows they need for later removals (``X_``), remove rows by their *original* training index
or by record key (``remove(keys=...)``: a DataFrame's index or ``fit(..., sample_ids=...)``), and zero a removed
row's features, target and key in memory immediately.

What a fitted model promises, and what it refuses:

* The model is trained under the parameters it had at ``fit``; they are kept in ``trained_params_`` and are the only
  ones used afterwards. ``set_params`` after ``fit`` does not change the fitted model: ``remove`` and ``save``
  refuse (naming the changed parameters) until ``fit`` is called again or the parameters are set back, so that no
  certificate or file can describe a state trained under other parameters.
* ``save``/``load`` use :mod:`lethe.io` (no pickle; the file holds the secret perturbation b and the remaining
  training data, and is written with owner-only permissions). With a key (``key=``, ``$LETHE_MODEL_KEY`` or
  ``$LETHE_MODEL_KEY_FILE``) the file is authenticated by an HMAC-SHA256 tag; ``load`` always checks the invariants
  of a certified state and re-measures the residual from the saved rows (:func:`_check_model_file`).
  ``pickle``/``joblib.dump`` of a *fitted* estimator raise ``TypeError`` pointing to ``save``: they would write the
  secret b and the remaining rows with the default file mode, and loading a pickle runs code. ``copy.copy`` and
  ``copy.deepcopy`` of a fitted estimator raise ``TypeError`` too (two live models would share one secret b; use
  ``sklearn.base.clone(model).fit(X, y)``). Unfitted estimators pickle and copy as usual (``clone`` and grid
  searches with ``n_jobs`` work).
* Concurrent calls on one fitted model are serialised by a per-instance lock (:mod:`lethe._locking`): each
  certificate describes the state its own call left.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from lethe._locking import SerialisedModel, serialised
from lethe._rng import check_random_state
from lethe._validation import check_unit_rows, normalize_rows, store_init_args
from lethe.certified.common import measured_residual
from lethe.certified.data import backend_of, check_data_matrix
from lethe.certified.mechanism import Certificate, CertifiedRemoval, ModelState, NewtonCache, check_row_norms
from lethe.certified.newton import SOLVERS, SharedFloat32Data
from lethe.certified.noise import epsilon_spent
from lethe.io import ModelFileError, load_npz, model_key, save_npz

#: Scale of the features and of the constant feature when ``fit_intercept=True`` for the logistic loss: the row
#: [xᵢ/√2, 1/√2] has ‖·‖² = ‖xᵢ‖²/2 + 1/2 ≤ 1 whenever ‖xᵢ‖ ≤ 1, so the augmented data keep Thm 1's assumption.
_INTERCEPT_SCALE = 1.0 / math.sqrt(2.0)
_NO_Y = object()


# -- data backends (issue 14): fit/predict accept a SciPy sparse matrix; the mechanisms read it through
# lethe.certified.data. Only these helpers, ``_validate_X`` and ``add`` know about it.
def _n_rows(X: Any) -> int:
    return int(X.shape[0]) if hasattr(X, "shape") else len(X)


def _is_dask(X: Any) -> bool:
    return type(X).__module__.startswith("dask.") and hasattr(X, "chunks") and hasattr(X, "compute")


def _is_dask_frame(X: Any) -> bool:
    """A Dask DataFrame: turned into a Dask array by ``to_dask_array(lengths=True)`` (never into NumPy)."""
    return type(X).__module__.startswith("dask.") and hasattr(X, "to_dask_array")


def _validate(est: BaseEstimator, X: Any, y: Any = "no_validation", **kw: Any) -> Any:
    """sklearn's ``validate_data`` accepting CSR; a Dask array is validated lazily by the data interface (one
    distributed pass) and never gathered: only ``n_features_in_`` is set (on fit) or checked (on predict)."""
    if not (_is_dask(X) or _is_dask_frame(X)):
        return validate_data(est, X, y, accept_sparse="csr", **kw)
    Xd = check_data_matrix("X", X)
    if kw.get("reset", True):
        est.n_features_in_ = int(Xd.shape[1])
    elif Xd.shape[1] != est.n_features_in_:
        raise ValueError(f"X has {Xd.shape[1]} features, but {type(est).__name__} is expecting "
                         f"{est.n_features_in_} features as input.")
    if isinstance(y, str) and y == "no_validation":
        return Xd
    kw.pop("reset", None)
    yv = validate_data(est, X="no_validation", y=y, reset=False, **kw)
    if yv.shape[0] != Xd.shape[0]:
        raise ValueError(f"X and y must have the same number of rows. Found {Xd.shape[0]} and {yv.shape[0]}.")
    return Xd, yv


def _margins(X: Any, W: np.ndarray) -> np.ndarray:
    """X Wᵀ as a NumPy array (a Dask product is computed on its cluster)."""
    out = X @ W
    return np.asarray(out.compute() if _is_dask(out) else out)


def _own_copy(X: Any) -> Any:
    """Our own float64 copy of validated training data (removal zeroes rows of it): C-ordered dense or CSR. A Dask
    array that is exactly ``da.from_zarr`` of a store is not copied: a writable store has its removed rows erased in
    place; a store opened read-only is its writer's to erase (e.g. the curator's Zarr plane, erased once a removal is
    published). Any other Dask array (a Dask DataFrame's columns, a computed array) is copied once into a Zarr store
    of our own on disk, written chunk by chunk on the cluster (``own_zarr_copy``), whose rows removal then erases."""
    if _is_dask(X):
        from lethe.certified.dask_backend import _zarr_source, own_zarr_copy

        return X if _zarr_source(X) is not None else own_zarr_copy(X)
    if sp.issparse(X):
        return check_data_matrix("X", sp.csr_matrix(X, dtype=np.float64, copy=True))
    return np.array(X, dtype=np.float64, order="C", copy=True)


def _data_arrays(X: Any) -> dict[str, np.ndarray]:
    """The arrays that store training data in a model file: ``X``, or the parts of a CSR matrix."""
    if _is_dask(X):
        raise TypeError("A model trained on a Dask array cannot be saved with its data: the data stay in their "
                        "Zarr store. Found a Dask array in X_.")
    if sp.issparse(X):
        return {"X_data": X.data, "X_indices": X.indices, "X_indptr": X.indptr, "X_shape": np.asarray(X.shape)}
    return {"X": X}


@dataclass(frozen=True)
class MulticlassCertificate:
    """Certificate of one removal from a one-vs-all model.

    The K binary models use independent perturbations b_k ~ N(0, σ² I_d), so the whole model is one Gaussian
    mechanism in R^{Kd} whose gradient residual (u_1, …, u_K) has norm ≤ √(Σ_k β_k²). The (ε, δ) guarantee of
    Guo et al. 2020, Thm 3 therefore holds for the whole model while that joint bound stays within the budget
    ε′ = σ ε / c; ``per_class`` lists each class's own certificate (``None`` if the row was not in its subsample).
    For Laplace-type noise the joint bound is Σ_k β_k (densities multiply: ε adds up).
    """

    epsilon: float
    delta: float
    residual_bound: float
    budget: float
    budget_left: float
    epsilon_spent: float
    retrained_classes: tuple[int, ...]
    per_class: tuple[Certificate | None, ...]
    n_removed: int
    seconds: float
    removed_indices: tuple[int, ...] = field(default=())
    n_added: int = 0

    @property
    def retrained(self) -> bool:
        """Whether any class was retrained."""
        return bool(self.retrained_classes)

    @property
    def guarantee(self) -> str:
        """What is promised, by which theorem (the :class:`lethe.protocols.Certificate` protocol)."""
        if self.epsilon == 0.0 and self.delta == 0.0:
            return "exact removal of the one-vs-all model (Guo et al. 2020, §3.2)"
        return (f"({self.epsilon!r}, {self.delta!r})-certified removal of the whole one-vs-all model: the K "
                "independent perturbations make one mechanism whose joint gradient residual stays within the "
                "budget (Guo et al. 2020, Thm 3, §4.2)")

    @property
    def observer(self) -> str:
        """Whom it covers: one published version, the model after this operation against a model retrained without
        the removed rows (Guo et al. 2020, Thm 3); an observer of two versions is not covered."""
        return "one published version"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (with ``guarantee`` and ``observer``)."""
        return {
            "guarantee": self.guarantee, "observer": self.observer,
            "epsilon": self.epsilon, "delta": self.delta, "residual_bound": self.residual_bound,
            "budget": self.budget, "budget_left": self.budget_left, "epsilon_spent": self.epsilon_spent,
            "retrained_classes": list(self.retrained_classes), "n_removed": self.n_removed, "seconds": self.seconds,
            "removed_indices": list(self.removed_indices), "n_added": self.n_added,
            "per_class": [None if c is None else c.to_dict() for c in self.per_class],
        }


def joint_residual(bounds: Any, noise: str) -> float:
    """The joint residual bound of independent binary models: √(Σ β_k²) for Gaussian b (one Gaussian mechanism in
    R^{Kd}), Σ β_k for Laplace-type b (ε adds up)."""
    r = np.asarray(bounds, dtype=np.float64)
    return float(r.sum()) if noise == "laplace" else float(np.sqrt(np.sum(r * r)))


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(type(a) is type(b) and a == b) or (
            isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool)
            and not isinstance(b, bool) and float(a) == float(b))
    except Exception:  # noqa: BLE001 - incomparable values are different values
        return False


def check_sample_ids(sample_ids: Any, n: int) -> np.ndarray:
    """Record keys for ``fit(..., sample_ids=...)`` of any :class:`lethe.protocols.Unlearner`: 1-D, one per row,
    distinct, integers or strings (saved without pickle). TypeError / ValueError otherwise."""
    return _check_keys(sample_ids, n)


def keys_of(X: Any, sample_ids: Any) -> np.ndarray | None:
    """The record keys of a fit: ``sample_ids`` if given, else a DataFrame's index, else None (no keys)."""
    if sample_ids is not None:
        return _check_keys(sample_ids, _n_rows(X))
    if hasattr(X, "columns") and hasattr(X, "index") and not _is_dask_frame(X):
        return _check_keys(np.asarray(X.index), _n_rows(X))
    return None


def removal_rows(indices: Any, keys: Any, *, active: np.ndarray, record_keys: np.ndarray | None) -> np.ndarray:
    """The ONE meaning of ``remove(indices=None, *, keys=None)`` for every :class:`lethe.protocols.Unlearner`:
    distinct ORIGINAL row positions of the fit's X (rows added later get the next positions) that are still
    active, given either as ``indices`` or as record ``keys`` (``record_keys``: one per original row, removed
    ones blanked). Exactly one of the two. Returns int64 positions; raises ValueError/TypeError naming the rule."""
    if (indices is None) == (keys is None):
        raise ValueError("Give exactly one of indices (training-row positions) and keys (record keys). "
                         f"Found indices={indices!r}, keys={'None' if keys is None else '...'}.")
    if keys is not None:
        if record_keys is None:
            raise ValueError("keys: this model was fitted without record keys; pass sample_ids= to fit (or fit on "
                             "a DataFrame, whose index names the records), or remove by row index.")
        ks = np.asarray(keys)
        if ks.ndim == 0:
            ks = ks.reshape(1)
        if ks.ndim != 1 or ks.size == 0:
            raise ValueError(f"keys must be a non-empty 1-D sequence of record keys. Found shape {ks.shape}.")
        lookup = {k: i for i, k in enumerate(record_keys.tolist()) if active[i]}
        rows = []
        for k in ks.tolist():
            if k not in lookup:
                raise ValueError(f"Key {k!r} is not a record of this model (unknown, or already removed).")
            rows.append(lookup[k])
        idx = np.asarray(rows, dtype=np.int64)
    else:
        idx = np.asarray(indices)
    if idx.ndim == 0:
        idx = idx.reshape(1)
    if idx.ndim != 1 or idx.size == 0:
        raise ValueError(f"indices must be a non-empty 1-D sequence of training-row indices. Found {indices!r}.")
    if not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"indices must be integers. Found dtype {idx.dtype}.")
    n = active.shape[0]
    bad = np.flatnonzero((idx < 0) | (idx >= n))
    if bad.size:
        raise ValueError(f"indices must be training-row indices in [0, {n}). Found {int(idx[bad[0]])}.")
    uniq, counts = np.unique(idx, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"indices must be distinct. Found {int(uniq[counts > 1][0])} more than once.")
    gone = np.flatnonzero(~active[idx])
    if gone.size:
        raise ValueError(f"Training row {int(idx[gone[0]])} was already removed.")
    return idx.astype(np.int64)


def _check_keys(sample_ids: Any, n: int) -> np.ndarray:
    """Record keys: 1-D, one per row, distinct, integers or strings (saved without pickle)."""
    keys = np.asarray(sample_ids)
    if keys.ndim != 1 or keys.shape[0] != n:
        raise ValueError(f"sample_ids must be a 1-D sequence with one key per row ({n}). Found shape {keys.shape}.")
    if keys.dtype == object:
        if all(isinstance(k, str) for k in keys):
            keys = keys.astype(str)
        elif all(isinstance(k, int | np.integer) and not isinstance(k, bool) for k in keys):
            keys = keys.astype(np.int64)
    if keys.dtype.kind not in "iuU":
        raise TypeError(f"sample_ids must be integers or strings. Found dtype {keys.dtype}.")
    uniq, counts = np.unique(keys, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"sample_ids must be distinct. Found {uniq[counts > 1][0]!r} more than once.")
    return keys.copy()


_PARAM_NAMES: dict[type, list[str]] = {}


class _CertifiedLinearBase(SerialisedModel, BaseEstimator):
    """Shared machinery: the mechanism, the training rows kept for removal, removal by row index or key.

    Every method that reads or changes the fitted state runs under the instance's lock (:mod:`lethe._locking`):
    concurrent calls on one model are serialised, so each certificate describes the state it leaves."""

    _loss = "logistic"
    _fitted_attribute = "states_"
    #: The :class:`lethe.protocols.Unlearner` protocol: ``add`` certifies new records (a certified Newton step).
    #: It still refuses, with a ValueError naming why, a one-vs-all model with ``negative_subsample`` and a
    #: matrix-free sparse model.
    supports_add: ClassVar[bool] = True
    # learned attributes (set by fit / load)
    X_: Any  # ndarray or CSR matrix (issue 14)
    Y_: np.ndarray
    active_: np.ndarray
    keys_: Any  # ndarray or None
    members_: Any  # ndarray or None
    states_: list[ModelState]
    caches_: list[NewtonCache]
    mechanism_: CertifiedRemoval
    trained_params_: dict[str, Any]
    n_removed_: int

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # fit/predict accept SciPy sparse matrices (issue 14)
        return tags

    # -- parameters the model was trained under -------------------------------------------------------------
    @classmethod
    def _get_param_names(cls) -> list[str]:
        """scikit-learn's parameter names (the constructor's arguments), introspected once per class: every
        ``remove`` checks the parameters against ``trained_params_``, and ``inspect.signature`` each time cost
        ≈ 0.1 ms — a sixth of a removal at n = 10⁶ (a class's constructor does not change at run time)."""
        names = _PARAM_NAMES.get(cls)
        if names is None:
            names = _PARAM_NAMES[cls] = list(BaseEstimator._get_param_names.__func__(cls))  # type: ignore[attr-defined]
        return list(names)

    def _current_params(self) -> dict[str, Any]:
        params = self.get_params(deep=False)
        params.pop("random_state", None)
        return params

    def _mechanism(self, params: dict[str, Any] | None = None, tol: float | None = None) -> CertifiedRemoval:
        """The mechanism for ``params`` (default: the current ones), before ``solver="auto"`` is resolved."""
        p = self._current_params() if params is None else params
        return CertifiedRemoval(loss=self._loss, lam=p["lam"], sigma=p["sigma"], epsilon=p["epsilon"],
                                delta=p["delta"], noise=p["noise"], tol=p["tol"] if tol is None else tol,
                                max_iter=p["max_iter"], solver=p["solver"], bound=p["bound"],
                                calibration=p["calibration"], refresh=p["refresh"])

    @property
    def solver_(self) -> str:
        """The solver the fitted model removes with: the ``solver`` parameter, or for ``solver="auto"`` the one it
        resolved to at ``fit`` for the data's backend and width (``"anchor"`` or ``"pcg"``,
        :func:`lethe.certified.newton.resolve_solver`); saved with the model and kept by the curator's versions.
        ``auto``'s ``anchor`` takes a step it cannot certify within the budget with ``pcg`` instead (and stays on
        ``pcg`` until the next retraining, :meth:`lethe.certified.mechanism.CertifiedRemoval.resolved`); each
        certificate names the solver of its step."""
        check_is_fitted(self, "states_")
        return str(self.mechanism_.solver)

    def _param(self, name: str) -> Any:
        """A parameter as it was at ``fit`` (the fitted model's), else the current one."""
        trained = getattr(self, "trained_params_", None)
        if trained is not None and name in trained:
            return trained[name]
        return getattr(self, name, None)

    def _check_params_unchanged(self, action: str) -> None:
        """Refuse ``action`` when parameters changed since ``fit``: the state was trained (and its budget computed)
        under ``trained_params_``; a certificate or a file must not describe it under other ones."""
        check_is_fitted(self, "states_")
        now = self._current_params()
        changed = [f"{k}: {v!r} at fit, {now.get(k)!r} now" for k, v in self.trained_params_.items()
                   if not _same(v, now.get(k))]
        if changed:
            raise ValueError(
                f"Cannot {action}: parameters changed since fit ({'; '.join(changed)}). The fitted model, its secret "
                "perturbation and its budget belong to the parameters it was trained under; call fit() again to train "
                "under the new ones, or set_params() back.")

    # -- input ------------------------------------------------------------------------------------------------
    def _validate_X(self, X: Any, y: Any = _NO_Y, *, reset: bool, params: dict[str, Any] | None = None) -> Any:
        """The one entry point for X (fit and predict): scikit-learn validation, a float64 copy of our own (removal
        zeroes rows of it), for training rows (``y`` given) the unit-ball rule of the loss
        (:func:`lethe._validation.check_unit_rows`; rows to predict are only normalised if ``normalize_rows``) and the
        intercept column, under ``params`` (default: the parameters the model was trained under). Returns X, or
        (X, y) when ``y`` is given."""
        p = params if params is not None else getattr(self, "trained_params_", None) or self._current_params()
        if _is_dask(X) or _is_dask_frame(X):
            return self._validate_dask(X, y, reset=reset, params=p)
        if y is not _NO_Y:
            X, y = validate_data(self, X, y, reset=reset, y_numeric=self._loss == "squared", accept_sparse="csr")
        else:
            X = validate_data(self, X, reset=reset, accept_sparse="csr")
        source_dtype = X.dtype
        X = _own_copy(X)  # dense C-ordered float64, or canonical float64 CSR (never densified)
        normalize = bool(p.get("normalize_rows", False))
        if self._loss == "logistic" and y is not _NO_Y:  # training rows (fit, add): the unit-ball rule
            X = check_unit_rows(X, normalize=normalize, source_dtype=source_dtype)
        elif self._loss == "logistic" and normalize:  # rows to predict: the same map, no certificate needed
            X = normalize_rows(X)
        if p.get("fit_intercept", False):
            scale, const = (_INTERCEPT_SCALE, _INTERCEPT_SCALE) if self._loss == "logistic" else (1.0, 1.0)
            if sp.issparse(X):
                X = check_data_matrix("X", sp.hstack([X * scale if scale != 1.0 else X,
                                                      sp.csr_matrix(np.full((X.shape[0], 1), const))], format="csr"))
            else:
                X = np.column_stack([X * scale if scale != 1.0 else X, np.full(X.shape[0], const)])
        return X if y is _NO_Y else (X, y)

    def _validate_dask(self, X: Any, y: Any, *, reset: bool, params: dict[str, Any]) -> Any:
        """A Dask array (``da.from_zarr`` of a writable store): validated lazily by the data interface, never
        gathered or copied (removal erases rows in the store); the unit-ball rule is checked, not applied."""
        if params.get("normalize_rows", False) or params.get("fit_intercept", False):
            raise ValueError("normalize_rows=True and fit_intercept=True cannot rewrite a Dask array's store: "
                             "normalise the rows (and add a constant column) before writing it. Found "
                             f"normalize_rows={params.get('normalize_rows')!r}, "
                             f"fit_intercept={params.get('fit_intercept')!r} with a Dask array.")
        if y is _NO_Y:
            return _validate(self, X, reset=reset)
        Xd, yv = _validate(self, X, y, reset=reset, y_numeric=self._loss == "squared")
        Xd = _own_copy(Xd)
        if self._loss == "logistic":
            check_row_norms(Xd)
        return Xd, yv

    def _keys_from(self, X: Any, sample_ids: Any) -> np.ndarray | None:
        if sample_ids is not None:
            return _check_keys(sample_ids, _n_rows(X))
        if _is_dask_frame(X):  # a Dask DataFrame: its index (computed: n keys, not the data) names the records
            index = np.asarray(X.index.compute())
            return _check_keys(index, index.shape[0])
        if hasattr(X, "columns") and hasattr(X, "index"):  # a DataFrame: its index names the records
            return _check_keys(np.asarray(X.index), _n_rows(X))
        return None

    @staticmethod
    def _check_sample_weight(sample_weight: Any, n: int) -> None:
        if sample_weight is None:
            return
        sw = np.asarray(sample_weight, dtype=np.float64)
        if sw.shape != (n,) or not np.all(sw == 1.0):
            raise ValueError(
                "sample_weight is not supported except all ones: the certified removal of Guo et al. 2020 "
                "(and lethe's solvers and bounds) use the unweighted loss Σ ℓ(wᵀxᵢ, yᵢ). Repeat or drop rows instead. "
                f"Found weights of shape {sw.shape} with values in [{sw.min() if sw.size else 0:g}, "
                f"{sw.max() if sw.size else 0:g}].")

    # -- removal ------------------------------------------------------------------------------------------------
    def _check_remove_indices(self, indices: Any = None, keys: Any = None) -> np.ndarray:
        check_is_fitted(self, "states_")
        if (indices is None) == (keys is None):
            raise ValueError("Give exactly one of indices (training-row positions) and keys (record keys). "
                             f"Found indices={indices!r}, keys={'None' if keys is None else '...'}.")
        self._check_params_unchanged("remove")
        return removal_rows(indices, keys, active=self.active_, record_keys=getattr(self, "keys_", None))

    def _forget_rows(self, idx: np.ndarray) -> None:
        """Clear the removed rows from memory: features, targets, and keys (a removed record's key must not stay
        in the model or its file)."""
        self.active_[idx] = False
        backend_of(self.X_).zero_rows(self.X_, idx)
        if sp.issparse(self.X_):
            # the zeroed entries still record WHICH features the removed rows had (e.g. the words of a document):
            # drop them, in place (same matrix object, so the caches keyed to it stay valid; values are unchanged)
            self.X_.eliminate_zeros()
        self.Y_[:, idx] = 0.0
        if getattr(self, "keys_", None) is not None:
            self.keys_[idx] = "" if self.keys_.dtype.kind == "U" else 0
        self.n_removed_ += idx.size

    @serialised
    def remove(self, indices: Any = None, *, keys: Any = None) -> Any:
        """Remove training rows as one batch and certify it: by their positions in ``fit``'s X (``indices``) or by
        record key (``keys``: ``sample_ids`` given to ``fit``, or the index of the DataFrame it was fitted on).

        Returns the immutable certificate. On error nothing changes. Raises ``ValueError`` if the parameters
        changed since ``fit``, for an unknown or already removed key (the two are not told apart: the model keeps
        no trace of removed keys), and for a row removed before. To remove rows one at a time (Guo et al. 2020,
        Alg. 2 with |B_j| = 1), call it once per row.
        """
        cert = self.remove_rows(self._check_remove_indices(indices, keys))
        self._certificate = cert
        return cert

    @property
    def certificate_(self) -> Any:
        """The certificate of the last ``remove`` or ``add`` (None before the first; ``fit``'s are in
        ``fit_certificates_``): the :class:`lethe.protocols.Unlearner` protocol's latest certificate."""
        return self.__dict__.get("_certificate")

    def remove_rows(self, idx: np.ndarray) -> Any:
        """Remove the training rows ``idx`` (validated positions, see :meth:`remove`) and return the certificate.

        The removal path other front ends call (e.g. a service that maps its own keys to rows)."""
        raise NotImplementedError

    # -- adding records ---------------------------------------------------------------------------------------------
    def _encode_targets(self, y: np.ndarray) -> np.ndarray:
        """Targets of new rows as the (K, m) matrix of the binary models."""
        raise NotImplementedError

    @serialised
    def add(self, X: Any, y: Any, sample_ids: Any = None) -> Any:
        """Add training records with one certified Newton step towards the model trained on D ∪ A
        (:mod:`lethe.certified.addition`; the proof is in its docstring and docs/estimators.md).

        The step is certified by its measured gradient residual on D ∪ A plus a rounding allowance, like training;
        if that exceeds the budget ε′ the model is retrained on D ∪ A with a fresh b (for one-vs-all: classes in
        order of their residual until the joint bound fits). The new rows pass the same validation as ``fit``'s
        (unit ball, intercept column); a model fitted with record keys needs ``sample_ids`` for them. Returns the
        certificate; on error nothing changes. Not available with ``negative_subsample``.
        """
        from lethe.certified.addition import add_rows, add_step, certificate

        self._check_params_unchanged("add")
        if getattr(self, "members_", None) is not None:
            raise ValueError("add is not supported for a one-vs-all model with negative_subsample: the new rows' "
                             "membership in the binary models would need a new subsample. Refit instead.")
        if not isinstance(self.X_, np.ndarray) and backend_of(self.X_).matrix_free(self.X_):
            raise ValueError(f"add forms the d x d Hessian, which a sparse model with {self.X_.shape[1]} features "
                             "(matrix-free above lethe.certified.data.MATRIX_FREE_MIN_FEATURES) must not form. "
                             "Refit on the new data instead.")
        Xn, yn = self._validate_X(X, y, reset=False)
        m = Xn.shape[0]
        keys = None
        if getattr(self, "keys_", None) is not None:
            if sample_ids is None and not (hasattr(X, "columns") and hasattr(X, "index")):
                raise ValueError("sample_ids: this model has record keys; give the keys of the new rows.")
            keys = self._keys_from(X, sample_ids)
            assert keys is not None
            taken = set(self.keys_[self.active_].tolist())
            clash = [k for k in keys.tolist() if k in taken]
            if clash:
                raise ValueError(f"sample_ids must be new keys. Found {clash[0]!r}, a record of this model.")
        elif sample_ids is not None:
            raise ValueError("sample_ids: this model was fitted without record keys.")
        Yn = self._encode_targets(np.asarray(yn))
        n0 = self.X_.shape[0]
        if sp.issparse(self.X_):  # a model trained on CSR data keeps CSR data
            X_all = check_data_matrix("X", sp.vstack([self.X_, sp.csr_matrix(Xn)], format="csr"))
        else:
            X_all = np.vstack([self.X_, Xn.toarray() if sp.issparse(Xn) else Xn])
        Y_all = np.hstack([self.Y_, Yn])
        active = np.concatenate([self.active_, np.zeros(m, dtype=bool)])
        new = np.arange(n0, n0 + m)
        mech: CertifiedRemoval = self.mechanism_
        t0 = time.perf_counter()
        if len(self.states_) == 1:
            state, cert = add_rows(mech, self.states_[0], X_all, Y_all[0], active, new, random_state=self._rng)
            states: list[ModelState] = [state]
            result: Any = cert
        else:
            K = len(self.states_)
            states = [add_step(mech, st, X_all, Y_all[k], active, new) for k, st in enumerate(self.states_)]
            keep = active.copy()
            keep[new] = True
            retrained: list[int] = []
            for k in sorted(range(K), key=lambda k: -states[k].residual_bound):
                if joint_residual([s.residual_bound for s in states], mech.noise) <= mech.budget:
                    break
                states[k] = mech.retrain(states[k], X_all, Y_all[k], keep, self._rng)
                retrained.append(k)
            beta = joint_residual([s.residual_bound for s in states], mech.noise)
            if beta > mech.budget:
                raise RuntimeError(f"The joint residual bound {beta:.6g} exceeds the budget ε′ = {mech.budget:.6g} "
                                   "even after retraining every class; lower tol. Nothing was added.")
            seconds = time.perf_counter() - t0
            eps, delta = mech._eps_delta()
            result = MulticlassCertificate(
                epsilon=eps, delta=delta, residual_bound=beta, budget=mech.budget,
                budget_left=max(mech.budget - beta, 0.0),
                epsilon_spent=epsilon_spent(beta, mech.sigma, mech.delta, mech.noise, calibration=mech.calibration),
                retrained_classes=tuple(retrained),
                per_class=tuple(certificate(mech, st, retrained=k in retrained, n_added=m, seconds=seconds)
                                for k, st in enumerate(states)),
                n_removed=0, seconds=seconds, n_added=m)
        self.X_, self.Y_ = X_all, Y_all
        self.active_ = np.concatenate([self.active_, np.ones(m, dtype=bool)])
        if keys is not None:
            self.keys_ = np.concatenate([self.keys_, keys])
        self.states_ = states
        self.caches_ = _new_caches(len(states), self.mechanism_.solver, None)  # the data array changed
        self._certificate = result
        return result

    @property
    @serialised
    def n_iter_(self) -> np.ndarray:
        """Optimiser iterations of the last (re)training of each binary model."""
        check_is_fitted(self, "states_")
        return np.array([st.train_iterations for st in self.states_])

    @serialised
    def budget_status(self) -> dict[str, Any]:
        """Where the model stands in its privacy budget, in ε: the guarantee (``epsilon``, ``delta``), the ε that the
        current accumulated residual bound certifies (``epsilon_spent`` ≤ ``epsilon``; for one-vs-all, of the joint
        bound), the share of the budget used (β/ε′), and β and ε′ in residual units. ε = 0 for exact removal."""
        check_is_fitted(self, "states_")
        mech = self.mechanism_
        beta = joint_residual([s.residual_bound for s in self.states_], mech.noise)
        eps, delta = mech._eps_delta()
        exact = mech.noise == "none"
        return {
            "epsilon": eps, "delta": delta,
            "epsilon_spent": 0.0 if exact else float(epsilon_spent(beta, mech.sigma, mech.delta, mech.noise,
                                                                   calibration=mech.calibration)),
            "budget_used": 0.0 if exact else beta / mech.budget,
            "residual_bound": beta, "budget": mech.budget,
            "retrainings": int(sum(s.retrainings for s in self.states_)),
            "removals_since_training": int(max(s.removals_since_training for s in self.states_)),
        }

    @property
    @serialised
    def n_remaining_(self) -> int:
        """Training rows still in the model."""
        return int(np.count_nonzero(self.active_))

    # -- no pickle for a fitted model -----------------------------------------------------------------------------
    def __getstate__(self) -> Any:
        if "states_" in self.__dict__:
            raise TypeError(
                f"A fitted {type(self).__name__} cannot be pickled: it holds the SECRET perturbation b and the "
                "remaining training rows, which pickle (and joblib.dump) would write with the default file mode, and "
                f"loading a pickle runs code. Use model.save(path) and {type(self).__name__}.load(path) (no pickle, "
                "owner-only file). Unfitted estimators pickle normally.")
        return super().__getstate__()

    # -- persistence ----------------------------------------------------------------------------------------------
    @serialised
    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        """Save the fitted model (weights, the SECRET perturbation b, remaining training rows) without pickle.

        The file is written atomically with owner-only permissions (0600): whoever holds b can unmask the
        gradient residual and learn about removed rows; whoever holds the file holds the remaining data. It records
        the parameters the model was trained under (``trained_params_``); ``save`` refuses if they were changed
        with ``set_params`` since ``fit``. A ``random_state`` that is not an int (None, a Generator) is saved as
        None: the loaded model draws fresh randomness for later retrainings.

        With a key — ``key`` (bytes or hexadecimal str), else ``$LETHE_MODEL_KEY`` (hexadecimal), else the file
        named by ``$LETHE_MODEL_KEY_FILE`` (:func:`lethe.io.model_key`) — the file carries an HMAC-SHA256 tag of
        all its arrays and metadata, which :meth:`load` checks (docs/estimators.md, "Model files").
        """
        self._check_params_unchanged("save")
        secret_key = model_key(key)
        arrays: dict[str, np.ndarray] = {**_data_arrays(self.X_), "Y": self.Y_, "active": self.active_}
        states = []
        for k, st in enumerate(self.states_):
            arrays[f"w_{k}"] = st.w
            arrays[f"b_{k}"] = st.b
            states.append({"n": st.n, "residual_bound": st.residual_bound, "x_norm_bound": st.x_norm_bound,
                           "removals_since_training": st.removals_since_training, "retrainings": st.retrainings,
                           "train_iterations": st.train_iterations})
        if getattr(self, "members_", None) is not None:
            arrays["members"] = self.members_
        if getattr(self, "keys_", None) is not None:
            arrays["keys"] = self.keys_
        rs = self.random_state
        params = dict(self.trained_params_)
        params["random_state"] = int(rs) if isinstance(rs, int | np.integer) and not isinstance(rs, bool) else None
        meta = {"class": type(self).__name__, "params": params, "states": states,
                "n_removed": self.n_removed_, "n_features_in": self.n_features_in_,
                "mechanism_tol": self.mechanism_.tol, "solver": self.mechanism_.solver}
        if hasattr(self, "feature_names_in_"):
            meta["feature_names_in"] = [str(c) for c in self.feature_names_in_]
        if hasattr(self, "classes_"):
            classes = self.classes_
            if classes.dtype.kind in "iub":
                meta["classes"] = [int(c) for c in classes]
            elif classes.dtype.kind == "f":
                meta["classes"] = [float(c) for c in classes]
            else:
                meta["classes"] = [str(c) for c in classes]
        return save_npz(path, arrays, meta, secret=True, key=secret_key)

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None) -> Any:
        """Load a model written by :meth:`save` (never unpickles), after checking it.

        Authentication (:func:`lethe.io.load_npz` with the key of :func:`lethe.io.model_key`): a tagged file needs
        the key and a matching tag; with a key configured an untagged file is refused. Then, always, the invariants
        of a certified state (:func:`_check_model_file`): array names, shapes, dtypes and finiteness, the
        parameters, n = the active rows, removed rows erased, β ≤ the budget, ‖b‖ consistent with σ, and the
        gradient residual re-measured from the saved rows, which must not exceed β. Any failure raises
        :class:`lethe.io.ModelFileError` (a ``ValueError``) naming what is wrong; nothing is loaded.
        """
        arrays, meta = load_npz(path, key=model_key(key), authenticate=True)
        if meta.get("class") != cls.__name__:
            raise ModelFileError(f"{path} holds a {meta.get('class')!r}, not a {cls.__name__}.")
        for name, kind in (("params", dict), ("states", list), ("n_removed", int), ("n_features_in", int)):
            if not isinstance(meta.get(name), kind):
                raise ModelFileError(f"{path}: the metadata entry {name!r} must be a {kind.__name__}. "
                                     f"Found {type(meta.get(name)).__name__}.")
        params = dict(meta["params"])
        if isinstance(params.get("random_state"), dict):
            params["random_state"] = None
        # files written before the tight bounds existed were certified in the paper's mode: keep it
        params.setdefault("bound", "paper")
        params.setdefault("calibration", "paper")
        try:
            est = cls(**params)
            est.trained_params_ = est._current_params()
            mech = est._mechanism(est.trained_params_, tol=meta.get("mechanism_tol"))
        except (TypeError, ValueError) as e:
            raise ModelFileError(f"{path}: its parameters are not valid: {e}") from None
        checked = _check_model_file(est, mech, arrays, meta, str(path))
        est.X_, est.Y_, est.active_ = checked["X"], checked["Y"], checked["active"]
        est.states_ = checked["states"]
        est.members_ = checked["members"]
        est.keys_ = checked["keys"]
        est.n_removed_ = int(meta["n_removed"])
        est.n_features_in_ = int(meta["n_features_in"])
        if "feature_names_in" in meta:
            est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        if "classes" in meta:
            est.classes_ = np.asarray(meta["classes"])
        # the concrete solver the model was saved with (files from before solver="auto" name it in the parameters)
        est.mechanism_ = mech.resolved(est.X_, solver=_saved_solver(meta.get("solver"), params["solver"]))
        est.caches_ = _new_caches(len(est.states_), est.mechanism_.solver, est.members_)  # built at the first removal
        est._rng = check_random_state(None)  # never the fit's seed again: a retraining needs a fresh b
        return est


#: A saved b whose norm is this improbable under the file's σ is refused (two-sided tail probability).
NOISE_TAIL_PROBABILITY = 1e-12


def noise_norm_tail(b: np.ndarray, sigma: float, noise: str) -> float:
    """The two-sided tail probability of ‖b‖ under the law b was drawn from (Guo et al. 2020, Thm 3):
    Gaussian b ~ N(0, σ² I_d): ‖b‖²/σ² ~ χ²_d; Laplace-type b (density ∝ exp(−‖b‖/σ)): ‖b‖ ~ Γ(shape d, scale σ)
    (:func:`lethe.certified.noise.sample_perturbation`). 2 min(F, 1 − F) of the observed norm; 1 for ``"none"``."""
    from scipy.stats import chi2, gamma

    d = b.shape[0]
    if noise == "gaussian":
        x = float(b @ b) / (sigma * sigma)
        lo, hi = float(chi2.cdf(x, d)), float(chi2.sf(x, d))
    elif noise == "laplace":
        r = float(np.linalg.norm(b))
        lo, hi = float(gamma.cdf(r, d, scale=sigma)), float(gamma.sf(r, d, scale=sigma))
    else:
        return 1.0
    return min(1.0, 2.0 * min(lo, hi))


def _check_model_file(est: _CertifiedLinearBase, mech: CertifiedRemoval, arrays: dict[str, np.ndarray],
                      meta: dict[str, Any], where: str) -> dict[str, Any]:
    """The invariants of a certified state, checked on a model file's contents before anything is built from it.

    Structure: the expected arrays and no others, dtypes, shapes (Y (K, n), active (n,), w_k and b_k (D,), members
    (K, n), keys (n,)), finite values, n_features_in = D − intercept column, the classes. State: for each binary
    model k, n_k = its active rows; removed rows are erased (zero features, targets and blank keys); the kept
    keys distinct; targets of the loss (±1, one positive class per row for one-vs-all); rows in the unit ball
    (logistic loss) and the intercept column constant. Privacy: β_k finite ≥ 0 and the (joint) β ≤ ε′; b = 0 for
    ``noise="none"``, else ‖b‖ not astronomically improbable under σ (:func:`noise_norm_tail` ≥
    :data:`NOISE_TAIL_PROBABILITY`). Residual: ‖∇L_b(w; D_k)‖ re-measured from the saved rows
    (:func:`lethe.certified.common.measured_residual`, one pass, with its rounding allowance a: the exact norm lies
    in [‖g̃‖ − a, ‖g̃‖ + a]); the file is refused when ‖g̃‖ − a > β_k (its β is certainly not an upper bound), and
    the loaded β_k is max(β_k, ‖g̃‖ + a), an upper bound either way. The file's ‖X‖₂ bound is not trusted: it is
    formed again from the rows at the first removal (NaN, as after ``fit``). Returns the checked pieces."""

    def fail(msg: str) -> ModelFileError:
        return ModelFileError(f"{where}: {msg} The file was edited or corrupted; it is refused.")

    states_meta = meta["states"]
    K = len(states_meta)
    if K == 0:
        raise fail("the metadata lists no model state.")
    sparse_names = {"X_data", "X_indices", "X_indptr", "X_shape"}
    data_names = sparse_names if "X_data" in arrays else {"X"}
    expected = data_names | {"Y", "active"} | {f"w_{k}" for k in range(K)} | {f"b_{k}" for k in range(K)}
    optional = {"members", "keys"}
    missing = sorted(expected - set(arrays))
    extra = sorted(set(arrays) - expected - optional)
    if missing or extra:
        raise fail(f"its arrays do not match its {K} model state(s): missing {missing}, unexpected {extra}.")

    def typed(name: str, kinds: str, ndim: int) -> np.ndarray:
        a = arrays[name]
        if a.dtype.kind not in kinds or a.ndim != ndim:
            raise fail(f"array {name!r} must be {ndim}-D of kind {kinds!r}. Found dtype {a.dtype}, shape {a.shape}.")
        return a

    if data_names == {"X"}:
        X: Any = typed("X", "f", 2).astype(np.float64, copy=True)
        if not np.all(np.isfinite(X)):
            raise fail("X holds non-finite values.")
    else:
        shape = typed("X_shape", "iu", 1)
        if shape.shape != (2,) or np.any(shape < 0):
            raise fail(f"X_shape must be two non-negative integers. Found {shape.tolist()}.")
        try:
            X = sp.csr_matrix((typed("X_data", "f", 1).astype(np.float64), typed("X_indices", "iu", 1),
                               typed("X_indptr", "iu", 1)), shape=tuple(int(v) for v in shape))
            X.check_format(full_check=True)
            X = check_data_matrix("X", X)
        except (TypeError, ValueError) as e:
            raise fail(f"the sparse X is malformed: {e}.") from None
        if not np.all(np.isfinite(X.data)):
            raise fail("X holds non-finite values.")
    n, D = X.shape
    Y = typed("Y", "f", 2).astype(np.float64, copy=True)
    if Y.shape != (K, n) or not np.all(np.isfinite(Y)):
        raise fail(f"Y must be finite with shape ({K}, {n}). Found shape {Y.shape}.")
    active = typed("active", "b", 1).copy()
    if active.shape != (n,):
        raise fail(f"active must have shape ({n},). Found {active.shape}.")
    members = None
    if "members" in arrays:
        members = typed("members", "b", 2).copy()
        if members.shape != (K, n) or K == 1:
            raise fail(f"members must have shape ({K}, {n}) and exist only for one-vs-all. Found {members.shape}.")
    keys = None
    if "keys" in arrays:
        keys = typed("keys", "iuU", 1).copy()
        if keys.shape != (n,):
            raise fail(f"keys must have shape ({n},). Found {keys.shape}.")
    ws, bs = [], []
    for k in range(K):
        w, b = typed(f"w_{k}", "f", 1), typed(f"b_{k}", "f", 1)
        if w.shape != (D,) or b.shape != (D,):
            raise fail(f"w_{k} and b_{k} must have shape ({D},). Found {w.shape} and {b.shape}.")
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
            raise fail(f"w_{k} or b_{k} holds non-finite values.")
        ws.append(w.astype(np.float64))
        bs.append(b.astype(np.float64))
    intercept = bool(est.trained_params_.get("fit_intercept", False))
    if int(meta["n_features_in"]) != D - int(intercept):
        raise fail(f"n_features_in ({meta['n_features_in']}) must be the {D} columns of X"
                   f"{' minus the intercept column' if intercept else ''}.")
    logistic = est._loss == "logistic"
    if logistic:
        classes = meta.get("classes")
        if not isinstance(classes, list) or len(set(map(str, classes))) != len(classes) or (
                len(classes) != (2 if K == 1 else K)):
            raise fail(f"classes must be {2 if K == 1 else K} distinct labels for {K} binary model(s). "
                       f"Found {classes!r}.")
    elif K != 1 or members is not None:
        raise fail(f"a regression model has one state and no members. Found {K} state(s).")
    # removed rows are erased, counts agree
    gone = ~active
    n_gone = int(np.count_nonzero(gone))
    if int(meta["n_removed"]) != n_gone:
        raise fail(f"n_removed ({meta['n_removed']}) must be the {n_gone} inactive rows.")
    if n_gone:
        erased = (X[gone].count_nonzero() == 0) if sp.issparse(X) else not np.any(X[gone])
        if not erased or np.any(Y[:, gone]):
            raise fail(f"the {n_gone} removed rows must have zero features and targets.")
        if keys is not None and np.any(keys[gone] != ("" if keys.dtype.kind == "U" else 0)):
            raise fail("the keys of removed rows must be blank.")
    if keys is not None and np.unique(keys[active]).size != int(np.count_nonzero(active)):
        raise fail("the keys of the rows kept must be distinct.")
    if logistic:
        Ya = Y[:, active]
        if not np.all(np.abs(Ya) == 1.0):
            raise fail("the targets of the rows kept must be -1 or +1.")
        if K > 1 and not np.all(np.sum(Ya > 0, axis=0) == 1):
            raise fail("each row kept must be a positive of exactly one class.")
        if members is not None and np.any((Y > 0) & active[None, :] & ~members):
            raise fail("each row kept must be a member of its own class's binary model.")
        try:
            check_row_norms(X)
        except ValueError as e:
            raise fail(str(e)) from None
    if intercept:
        const = _INTERCEPT_SCALE if logistic else 1.0
        col = X[:, D - 1]
        col = np.asarray(col.toarray()).ravel() if sp.issparse(col) else col
        if not np.all(col[active] == const):
            raise fail(f"the intercept column of the rows kept must be {const!r}.")
    # the states: counts, β, b
    states = []
    for k, sm in enumerate(states_meta):
        if not isinstance(sm, dict):
            raise fail(f"state {k} must be a mapping. Found {type(sm).__name__}.")
        rows = active if members is None else active & members[k]
        n_k = int(np.count_nonzero(rows))
        raw = {f: sm.get(f) for f in ("n", "removals_since_training", "retrainings", "train_iterations")}
        bad = [f for f, v in raw.items() if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0)]
        if bad:
            raise fail(f"state {k}: {bad[0]} must be a non-negative integer. Found {raw[bad[0]]!r}.")
        ints = {f: int(v) for f, v in raw.items()}  # type: ignore[arg-type]  # checked above
        if ints["n"] != n_k or n_k == 0:
            raise fail(f"state {k}: n = {ints['n']} but the file has {n_k} active rows for it.")
        beta = sm.get("residual_bound")
        if not (isinstance(beta, int | float) and not isinstance(beta, bool) and math.isfinite(beta) and beta >= 0):
            raise fail(f"state {k}: residual_bound must be a finite number >= 0. Found {beta!r}.")
        if mech.noise == "none":
            if np.any(bs[k]):
                raise fail(f"state {k}: b must be zero for noise='none'. Found ||b|| = {np.linalg.norm(bs[k]):.6g}.")
        else:
            tail = noise_norm_tail(bs[k], mech.sigma, mech.noise)
            if tail < NOISE_TAIL_PROBABILITY:
                raise fail(f"state {k}: ||b|| = {np.linalg.norm(bs[k]):.6g} is not a plausible draw of the "
                           f"{mech.noise} perturbation with sigma = {mech.sigma!r} in {D} dimensions (two-sided tail "
                           f"probability {tail:.3g} < {NOISE_TAIL_PROBABILITY:g}): b or sigma was changed.")
        g, allowance = measured_residual(mech, ws[k], bs[k], X, Y[k], rows)
        g_norm = float(np.linalg.norm(g))
        if g_norm - allowance > float(beta):
            raise fail(f"state {k}: the gradient residual re-measured from the saved rows, {g_norm:.6g} "
                       f"(± {allowance:.3g}), exceeds the file's bound beta = {float(beta):.6g}: w, b or the rows do "
                       "not belong to the state the certificates describe.")
        states.append(ModelState(w=ws[k], b=bs[k], n=n_k, residual_bound=max(float(beta), g_norm + allowance),
                                 x_norm_bound=math.nan, removals_since_training=ints["removals_since_training"],
                                 retrainings=ints["retrainings"], train_iterations=ints["train_iterations"]))
    if mech.noise != "none":
        joint = joint_residual([st.residual_bound for st in states], mech.noise)
        if joint > mech.budget:
            raise fail(f"the residual bound {joint:.6g} exceeds the budget eps' = {mech.budget:.6g} of its "
                       "parameters.")
    return {"X": X, "Y": Y, "active": active, "members": members, "keys": keys, "states": states}


def _saved_solver(saved: Any, param: str) -> str | None:
    """The concrete solver recorded in a saved model's metadata, checked against its ``solver`` parameter: the
    same solver, or any concrete one for ``"auto"``; None (resolve again) when none is recorded."""
    if saved is None:
        return None
    if saved not in SOLVERS or (param != "auto" and saved != param):
        raise ValueError(f"The saved model's solver {saved!r} does not fit its solver parameter {param!r} (one of "
                         f"{list(SOLVERS)}, equal to the parameter unless it is 'auto'): the file was edited.")
    return str(saved)


def _new_caches(k: int, solver: str, members: np.ndarray | None) -> list[NewtonCache]:
    """One cache per binary model; with ``solver="onepass"`` and all models on the same rows, one shared float32
    copy of the data for all of them (K copies would take K × 4nd bytes)."""
    shared = SharedFloat32Data() if solver == "onepass" and members is None and k > 1 else None
    return [NewtonCache(shared=shared) for _ in range(k)]


class CertifiedLogisticRegression(ClassifierMixin, _CertifiedLinearBase):
    """Logistic regression that can forget training rows with (ε, δ)-certified removal (Guo et al. 2020).

    Trains by objective perturbation (Alg. 1): minimise Σ ℓ(wᵀxᵢ, yᵢ) + λn/2 ‖w‖² + bᵀw with secret random b;
    removes rows with the Newton update (Eq. 3, 6), certified by a proven bound on the gradient residual, and
    retrains with a fresh b when the budget ε′ is spent (Alg. 2). With more than two classes it trains one-vs-all.

    Defaults are the tightest sound options (docs/tighter_bounds.md): ``bound="tight"`` (the smallest of the proven
    remainder bounds: exact γ = 1/(6√3) and per-sample local curvature, integral form, ‖X′v‖₄²/triangle forms),
    ``calibration="analytic"`` (exact Gaussian calibration, Balle & Wang 2018) and ``solver="auto"``: ``"anchor"``
    (no pass over the data per removal, O(d²) per row, its residual re-measured when the bounded mismatch grows;
    the lowest amortised cost, hundreds to thousands of times below a scikit-learn refit) wherever a d × d matrix
    may be kept (dense data with d ≤ 4096, sparse or Dask data with few features), else ``"pcg"`` (cached
    factorisation, measured solve error, O(nd) per removal; matrix-free). The choice is ``solver_`` after ``fit``.
    ``bound="paper", calibration="paper"`` reproduces Guo et al. 2020; ``solver="onepass"`` reads the data once in
    single precision per removal.

    λ = 1e-3 and σ = 10 suit MNIST-sized data (n ~ 10⁴); smaller data sets need a smaller σ (or a larger λ) for
    useful accuracy. Choose σ for the number of removals you must support with :func:`lethe.planning.plan_sigma`
    (docs/estimators.md).

    Parameters
    ----------
    lam : float, default=1e-3
        λ, L2 regularisation (objective uses λ n / 2 ‖w‖²).
    sigma : float, default=10.0
        σ, scale of the perturbation b. Larger σ: more removals before retraining, lower accuracy.
    epsilon : float, default=1.0
        ε of the removal guarantee.
    delta : float, default=1e-4
        δ of the removal guarantee (Gaussian noise).
    noise : {"gaussian", "laplace"}, default="gaussian"
        Distribution of b (Thm 3 ii / Thm 3 i).
    tol : float or None, default=None
        Gradient-norm tolerance of training (charged to the budget); default 0.1 % of the budget. With K > 2
        classes the K training residuals share one budget (√Σβ_k² ≤ ε′), so ``tol`` must be ≤ ε′/√K (ε′/K for
        Laplace noise).
    max_iter : int, default=2000
        L-BFGS iterations.
    solver : {"auto", "anchor", "pcg", "onepass", "refine", "cholesky"}, default="auto"
        How the Newton system is solved at removal (see :class:`~lethe.certified.mechanism.CertifiedRemoval`);
        ``"auto"`` resolves at ``fit`` (attribute ``solver_``).
    bound : {"tight", "paper"}, default="tight"
        Which proven residual bound certifies each removal.
    calibration : {"analytic", "paper"}, default="analytic"
        How the budget ε′ follows from (σ, ε, δ) for Gaussian noise.
    refresh : "auto", "never" or int, default="auto"
        When the cached factorisation / anchor is rebuilt from the data.
    normalize_rows : bool, default=False
        The guarantee needs ‖xᵢ‖₂ ≤ 1. If False a violating row raises ``ValueError`` (rows above 1 only by the
        rounding of their own precision, e.g. float32 data normalised in float32, are scaled onto the sphere); if
        True rows outside the unit ball are scaled onto it (at fit and at prediction;
        :func:`lethe.preprocessing.normalize_rows`).
    fit_intercept : bool, default=False
        Learn an intercept. The model is trained on the rows [xᵢ/√2, 1/√2], whose norm is ≤ 1 whenever ‖xᵢ‖ ≤ 1
        (‖·‖² = ‖xᵢ‖²/2 + 1/2), so every certificate still applies; the intercept is regularised like the weights.
    negative_subsample : float or None, default=None
        One-vs-all only: keep at most this many negatives per positive in each binary problem (§4.2); a row is then
        removed only from the binary models it was sampled into.
    random_state : None, int or numpy Generator
        Seeds b, the subsampling and the fresh b of retraining.

    Attributes
    ----------
    classes_ : ndarray
    coef_ : ndarray of shape (1, d) or (K, d)
    intercept_ : ndarray of shape (1,) or (K,)
    states_ : list of ModelState
        One per binary model (contains the secret b).
    active_ : ndarray of bool
        Training rows still in the model.
    keys_ : ndarray or None
        Record keys of the training rows (removed rows' keys are blanked).
    trained_params_ : dict
        The parameters the model was trained under (every later removal and ``save`` use these).
    solver_ : str
        The solver removals use (the concrete choice of ``solver="auto"``).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 5)); X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> y = np.where(X[:, 0] > 0, 1, -1)
    >>> clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    >>> cert = clf.remove([3, 17])
    >>> cert.residual_bound <= cert.budget
    True
    """

    _loss = "logistic"

    def __init__(self, lam: float = 1e-3, sigma: float = 10.0, epsilon: float = 1.0, delta: float = 1e-4,
                 noise: str = "gaussian", tol: float | None = None, max_iter: int = 2000, solver: str = "auto",
                 normalize_rows: bool = False, negative_subsample: float | None = None,
                 random_state: Any = None, bound: str = "tight", calibration: str = "analytic",
                 refresh: str | int = "auto", fit_intercept: bool = False) -> None:
        store_init_args(self, locals())

    @serialised
    def fit(self, X: Any, y: Any, sample_ids: Any = None, sample_weight: Any = None) -> CertifiedLogisticRegression:
        """Train (Alg. 1). Returns self; the training certificate(s) are in ``fit_certificates_``.

        ``sample_ids`` names the records (keys for ``remove(keys=...)``); by default the index of a DataFrame X.
        ``sample_weight`` must be None or all ones (weighted losses are not supported).
        """
        if self.noise not in ("gaussian", "laplace"):
            raise ValueError(f"noise must be 'gaussian' or 'laplace' for logistic regression. Found {self.noise!r}.")
        params = self._current_params()
        mech = self._mechanism(params)
        keys = self._keys_from(X, sample_ids)
        X, y = self._validate_X(X, y, reset=True, params=params)
        mech = mech.resolved(X)  # solver="auto": the concrete solver for these data, kept for the model's life
        self._check_sample_weight(sample_weight, X.shape[0])
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(f"Classifier needs samples of at least 2 classes in the data. Found {classes.size} class.")
        if self.negative_subsample is not None and not (
                isinstance(self.negative_subsample, int | float) and self.negative_subsample > 0):
            raise ValueError(f"negative_subsample must be > 0 or None. Found {self.negative_subsample!r}.")
        K = 1 if classes.size == 2 else classes.size
        if K > 1 and self.tol is not None:
            share = mech.budget / K if mech.noise == "laplace" else mech.budget / math.sqrt(K)
            if self.tol > share:
                raise ValueError(
                    f"tol must be <= the per-class share of the budget for one-vs-all with {K} classes "
                    f"({'ε′/K' if mech.noise == 'laplace' else 'ε′/√K'} = {share:.6g}): the {K} training residuals "
                    f"share one budget ε′ = {mech.budget:.6g} (joint bound √Σβ_k²), also after every retraining. "
                    f"Found tol={self.tol!r}.")
        rng = check_random_state(self.random_state)
        Y = np.empty((K, X.shape[0]))
        if K == 1:
            Y[0] = np.where(codes == 1, 1.0, -1.0)
        else:
            for k in range(K):
                Y[k] = np.where(codes == k, 1.0, -1.0)
        members = None
        if K > 1 and self.negative_subsample is not None:
            members = np.zeros((K, X.shape[0]), dtype=bool)
            for k in range(K):
                pos = np.flatnonzero(codes == k)
                neg = np.flatnonzero(codes != k)
                take = min(neg.size, int(math.ceil(self.negative_subsample * pos.size)))
                members[k, pos] = True
                members[k, rng.choice(neg, size=take, replace=False)] = True
        states, certs = [], []
        caches = _new_caches(K, mech.solver, members)
        for k in range(K):
            cache = caches[k]
            if members is None:  # train on X itself so that the cache is keyed to the array kept in X_
                # the removal machinery (‖X‖₂ bound, the cache's anchor system) is formed by the first removal
                # (X was validated by _validate_X by the same rules; with an intercept column the mechanism checks)
                st, cert = mech.train(X, Y[k], random_state=rng, cache=cache, defer_setup=True,
                                      check_input=bool(params.get("fit_intercept", False)))
            else:
                st, cert = mech.train(X[members[k]], Y[k][members[k]], random_state=rng)
                mech.prime(cache, st, X, Y[k], members[k])
            states.append(st)
            certs.append(cert)
        if K > 1:
            joint = joint_residual([s.residual_bound for s in states], mech.noise)
            if joint > mech.budget:
                raise RuntimeError(f"The joint training residual of the {K} one-vs-all models, {joint:.6g}, exceeds "
                                   f"the budget ε′ = {mech.budget:.6g}; lower tol.")
        self.classes_ = classes
        self.X_, self.Y_ = X, Y
        self.active_ = np.ones(X.shape[0], dtype=bool)
        self.members_ = members
        self.keys_ = keys
        self.states_ = states
        self._certificate = None
        self.fit_certificates_ = certs
        self.n_removed_ = 0
        self.mechanism_ = mech
        self.caches_ = caches
        self.trained_params_ = params
        self._rng = rng
        return self

    @property
    @serialised
    def coef_(self) -> np.ndarray:
        """Weights, shape (1, d) for binary, (K, d) for one-vs-all."""
        check_is_fitted(self, "states_")
        W = np.vstack([st.w for st in self.states_])
        return W[:, :-1] * _INTERCEPT_SCALE if self._param("fit_intercept") else W

    @property
    @serialised
    def intercept_(self) -> np.ndarray:
        """Intercepts, shape (1,) or (K,); zero unless ``fit_intercept=True``."""
        check_is_fitted(self, "states_")
        if self._param("fit_intercept"):
            return np.array([st.w[-1] * _INTERCEPT_SCALE for st in self.states_])
        return np.zeros(len(self.states_))

    @property
    @serialised
    def classes_present_(self) -> np.ndarray:
        """Mask over ``classes_``: classes that still have a training row. A class whose every row was removed is
        never predicted (as by a model trained from scratch on the remaining data, which would not know it)."""
        check_is_fitted(self, "states_")
        if len(self.states_) == 1:
            return np.array([bool(np.any(self.Y_[0] < 0)), bool(np.any(self.Y_[0] > 0))])
        return np.any(self.Y_ > 0, axis=1)

    @serialised
    def decision_function(self, X: Any) -> np.ndarray:
        """Margins wᵀx (+ intercept) (binary: shape (n,); one-vs-all: (n, K)); an absent class scores −∞."""
        check_is_fitted(self, "states_")
        X = self._validate_X(X, reset=False)
        scores = _margins(X, np.vstack([st.w for st in self.states_]).T)
        present = self.classes_present_
        if scores.shape[1] == 1:
            if not present.all():
                return np.full(X.shape[0], np.inf if present[1] else -np.inf)
            return scores[:, 0]
        scores[:, ~present] = -np.inf
        return scores

    @serialised
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities: σ(wᵀx) for binary; normalised one-vs-all sigmoids otherwise."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1.0 - p, p])
        p = expit(scores)
        return p / p.sum(axis=1, keepdims=True)

    @serialised
    def predict(self, X: Any) -> np.ndarray:
        """Predicted class labels."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]

    def _encode_targets(self, y: np.ndarray) -> np.ndarray:
        check_classification_targets(y)
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            raise ValueError(f"y holds a class the model was not fitted with: {y[np.flatnonzero(unknown)[0]]!r}. "
                             f"Known classes: {self.classes_.tolist()}; refit to add a class.")
        codes = np.searchsorted(self.classes_, y)
        K = len(self.states_)
        if K == 1:
            return np.where(codes == 1, 1.0, -1.0)[None, :]
        return np.vstack([np.where(codes == k, 1.0, -1.0) for k in range(K)])

    def _class_rows(self, k: int) -> np.ndarray:
        return self.active_ if self.members_ is None else self.active_ & self.members_[k]

    @serialised
    def remove_rows(self, idx: np.ndarray) -> Certificate | MulticlassCertificate:
        """Remove the validated training rows ``idx`` as one batch; see :meth:`remove`. Returns a
        :class:`~lethe.certified.mechanism.Certificate` (binary) or a :class:`MulticlassCertificate` (one-vs-all)."""
        idx = self._check_remove_indices(idx)  # again under the lock: the caller may have checked before it
        mech: CertifiedRemoval = self.mechanism_
        if len(self.states_) == 1:
            state, cert = mech.remove(self.states_[0], self.X_, self.Y_[0], idx, active=self.active_,
                                      cache=self.caches_[0], random_state=self._rng, check_input=False)
            self.states_[0] = state
            self._forget_rows(idx)
            return cert
        return self._remove_one_vs_all(idx, mech)

    def _remove_one_vs_all(self, idx: np.ndarray, mech: CertifiedRemoval) -> MulticlassCertificate:
        t0 = time.perf_counter()
        K = len(self.states_)
        proposals: list[tuple[ModelState, Certificate] | None] = []
        for k in range(K):
            rows = self._class_rows(k)
            mine = idx[rows[idx]]
            if mine.size == 0:
                proposals.append(None)
                continue
            if mine.size >= np.count_nonzero(rows):
                raise ValueError(f"Removing these rows would empty the binary model of class {self.classes_[k]!r}.")
            # the per-class Newton step (no budget decision here: the joint budget decides below)
            keep = rows.copy()
            keep[mine] = False
            # auto's anchor falls back to pcg for a class whose step passes its share of the joint budget
            share = mech.budget / K if mech.noise == "laplace" else mech.budget / math.sqrt(K)
            new, r = mech._propose(self.states_[k], self.X_, self.Y_[k], keep, mine, self.caches_[k], limit=share)
            cert = mech._certificate("remove", new, step=r.step_bound, retrained=False,
                                     removed=tuple(int(i) for i in mine), worst=r.worst_case,
                                     solve_error=r.solve_error, seconds=0.0, result=r)
            proposals.append((new, cert))
        new_states = [p[0] if p is not None else self.states_[k] for k, p in enumerate(proposals)]
        retrained: list[int] = []

        def joint(states: list[ModelState]) -> float:
            return joint_residual([s.residual_bound for s in states], mech.noise)

        touched = [k for k, p in enumerate(proposals) if p is not None]
        order = sorted(touched, key=lambda k: -new_states[k].residual_bound)
        order += sorted((k for k in range(K) if k not in touched), key=lambda k: -new_states[k].residual_bound)
        keep_all = self.active_.copy()
        keep_all[idx] = False
        for k in order:
            if joint(new_states) <= mech.budget:
                break
            rows = keep_all if self.members_ is None else keep_all & self.members_[k]
            new_states[k] = mech.retrain(self.states_[k], self.X_, self.Y_[k], rows, self._rng, self.caches_[k])
            retrained.append(k)
        beta = joint(new_states)
        if beta > mech.budget:  # every class retrained and still above: refuse (the caches rebuild themselves)
            raise RuntimeError(f"The joint residual bound {beta:.6g} exceeds the budget ε′ = {mech.budget:.6g} even "
                               "after retraining every class; lower tol. Nothing was removed.")
        per_class: list[Certificate | None] = []
        for k, p in enumerate(proposals):
            if p is None:
                per_class.append(None)
            elif k in retrained:
                per_class.append(mech._certificate("retrain", new_states[k], step=p[1].step_bound, retrained=True,
                                                   removed=p[1].removed_indices, worst=p[1].worst_case_bound,
                                                   solve_error=p[1].solve_error, seconds=0.0))
            else:
                per_class.append(p[1])
        self.states_ = new_states
        self._forget_rows(idx)
        eps, delta = mech._eps_delta()
        return MulticlassCertificate(
            epsilon=eps, delta=delta, residual_bound=beta, budget=mech.budget,
            budget_left=max(mech.budget - beta, 0.0),
            epsilon_spent=epsilon_spent(beta, mech.sigma, mech.delta, mech.noise, calibration=mech.calibration),
            retrained_classes=tuple(retrained), per_class=tuple(per_class), n_removed=idx.size,
            seconds=time.perf_counter() - t0, removed_indices=tuple(int(i) for i in idx))


def _squared_loss_rounding_floor(X: Any, y: np.ndarray, lam: float) -> float:
    """A tolerance the direct solve of ridge least squares can reach in float64, where 1e-9 λn may not be.

    The minimiser of Σ(wᵀxᵢ − yᵢ)² + λn/2‖w‖² has λn/2‖w‖² ≤ ‖y‖² (compare with w = 0), so ‖w‖ ≤ W = ‖y‖√(2/(λn)).
    A backward-stable solve of Hw = 2Xᵀy with H = 2XᵀX + λnI, H and Xᵀy formed in float64, leaves a gradient of
    norm about (n + d) u ((2‖X‖_F² + λn) W + 2‖X‖_F ‖y‖) (u = 2⁻⁵³; Higham, Thm 10.4 and §3.5); we allow 8× that.
    This only sets where training stops: the certificate charges the residual actually measured.
    """
    n, d = X.shape
    u = float(np.finfo(np.float64).eps) / 2
    fro = float(np.linalg.norm(X)) if isinstance(X, np.ndarray) else math.sqrt(backend_of(X).frobenius_sq(X))
    ny = float(np.linalg.norm(y))
    W = ny * math.sqrt(2.0 / (lam * n))
    return 8.0 * (n + d) * u * ((2 * fro * fro + lam * n) * W + 2 * fro * ny)


class CertifiedLinearRegression(RegressorMixin, _CertifiedLinearBase):
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
        self._check_sample_weight(sample_weight, X.shape[0])
        Y = np.asarray(y, dtype=np.float64)[None, :].copy()
        if self.tol is None and mech.noise == "none":
            floor = _squared_loss_rounding_floor(X, Y[0], mech.lam)
            if floor > mech.train_tolerance(X.shape[0]):
                mech = self._mechanism(params, tol=floor).resolved(X)
        rng = check_random_state(self.random_state)
        cache = NewtonCache()
        state, cert = mech.train(X, Y[0], random_state=rng, cache=cache)
        self.X_, self.Y_ = X, Y
        self.active_ = np.ones(X.shape[0], dtype=bool)
        self.members_ = None
        self.keys_ = keys
        self.states_ = [state]
        self._certificate = None
        self.fit_certificates_ = [cert]
        self.n_removed_ = 0
        self.mechanism_ = mech
        self.caches_ = [cache]
        self.trained_params_ = params
        self._rng = rng
        return self

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
        return _margins(X, self.states_[0].w)

    def _encode_targets(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y, dtype=np.float64)[None, :]

    @serialised
    def remove_rows(self, idx: np.ndarray) -> Certificate:
        """Remove the validated training rows ``idx`` by the exact Newton step; see :meth:`remove`."""
        idx = self._check_remove_indices(idx)  # again under the lock: the caller may have checked before it
        state, cert = self.mechanism_.remove(self.states_[0], self.X_, self.Y_[0], idx, active=self.active_,
                                             cache=self.caches_[0], random_state=self._rng, check_input=False)
        self.states_[0] = state
        self._forget_rows(idx)
        return cert


__all__ = ["CertifiedLinearRegression", "CertifiedLogisticRegression", "MulticlassCertificate", "joint_residual"]

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
  training data, and is written with owner-only permissions). The file is always authenticated by an HMAC-SHA256
  tag (``key=``, ``$LETHE_MODEL_KEY``, or the key file created on the first save); ``load`` refuses a file without
  a valid tag unless ``trust_unauthenticated=True`` (the certificates then say so), and always checks the
  invariants of a certified state and re-measures the residual from the saved rows
  (:func:`lethe.certified.model_file.check_model_file`).
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
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from lethe._locking import SerialisedModel, instance_lock, serialised
from lethe._rng import check_random_state
from lethe._validation import check_unit_rows, normalize_rows, store_init_args
from lethe.certified.data import check_data_matrix
from lethe.certified.estimators_add import CertifiedAddition
from lethe.certified.estimators_files import CertifiedModelFiles
from lethe.certified.mechanism import Certificate, CertifiedRemoval, ModelState, NewtonCache, check_row_norms
from lethe.certified.newton import SOLVERS, new_caches, resolve_solver
from lethe.certified.noise import epsilon_spent
from lethe.certified.one_vs_all import MulticlassCertificate, OneVsAllRemoval
from lethe.certified.rows import INTERCEPT_SCALE, owned_mask, set_rows
from lethe.certified.solvers import PAPER_SOLVER
from lethe.certified.transaction import Undo, resume
from lethe.certified.transaction import begin as begin_undo
from lethe.estimator_data import (
    check_keys,
    check_sample_weight,
    is_dask,
    is_dask_frame,
    margins,
    n_rows,
    own_copy,
    removal_rows,
    same_value,
    validate_input,
)
from lethe.model_origin import reports_model_origin

_NO_Y = object()
_PARAM_NAMES: dict[type, list[str]] = {}


class _CheckedRows(np.ndarray):
    """The rows :meth:`CertifiedLinearBase.remove` validated, handed to :meth:`~CertifiedLinearBase.remove_rows` (a
    hook subclasses override with the signature ``remove_rows(idx)``) as the argument itself: a view whose
    ``model`` is the model they were validated for, set only for the duration of that ``remove`` call, and whose
    ``states`` is the fitted state (``states_``, a new list at every fit, removal and addition) they were validated
    against. Any other array — derived from it (views do not inherit either), kept for a later call, given by
    another caller, or given back after the model changed (an override that removes rows itself) — is validated
    again."""

    model: Any = None
    states: Any = None


@reports_model_origin
class CertifiedLinearBase(CertifiedModelFiles, CertifiedAddition, SerialisedModel, BaseEstimator):
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

    def _check_params_unchanged(self, action: str, *, fitted: bool = False) -> None:
        """Refuse ``action`` when parameters changed since ``fit``: the state was trained (and its budget computed)
        under ``trained_params_``; a certificate or a file must not describe it under other ones. ``fitted``: the
        caller has just checked that the model is fitted."""
        if not fitted:
            check_is_fitted(self, "states_")
        trained = self.trained_params_
        if all(getattr(self, k, _NO_Y) is v for k, v in trained.items()):
            return  # every parameter is the very object it was at fit (same_value(v, v) holds): nothing changed
        now = self._current_params()
        changed = [f"{k}: {v!r} at fit, {now.get(k)!r} now" for k, v in self.trained_params_.items()
                   if not same_value(v, now.get(k))]
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
        if is_dask(X) or is_dask_frame(X):
            return self._validate_dask(X, y, reset=reset, params=p)
        if y is not _NO_Y:
            X, y = validate_data(self, X, y, reset=reset, y_numeric=self._loss == "squared", accept_sparse="csr")
        else:
            X = validate_data(self, X, reset=reset, accept_sparse="csr")
        source_dtype = X.dtype
        X = own_copy(X)  # dense C-ordered float64, or canonical float64 CSR (never densified)
        normalize = bool(p.get("normalize_rows", False))
        if self._loss == "logistic" and y is not _NO_Y:  # training rows (fit, add): the unit-ball rule
            X = check_unit_rows(X, normalize=normalize, source_dtype=source_dtype)
        elif self._loss == "logistic" and normalize:  # rows to predict: the same map, no certificate needed
            X = normalize_rows(X)
        if p.get("fit_intercept", False):
            scale, const = (INTERCEPT_SCALE, INTERCEPT_SCALE) if self._loss == "logistic" else (1.0, 1.0)
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
            return validate_input(self, X, reset=reset)
        Xd, yv = validate_input(self, X, y, reset=reset, y_numeric=self._loss == "squared")
        Xd = own_copy(Xd)
        if self._loss == "logistic":
            check_row_norms(Xd)
        return Xd, yv

    def _keys_from(self, X: Any, sample_ids: Any) -> np.ndarray | None:
        if sample_ids is not None:
            return check_keys(sample_ids, n_rows(X))
        if is_dask_frame(X):  # a Dask DataFrame: its index (computed: n keys, not the data) names the records
            index = np.asarray(X.index.compute())
            return check_keys(index, index.shape[0])
        if hasattr(X, "columns") and hasattr(X, "index"):  # a DataFrame: its index names the records
            return check_keys(np.asarray(X.index), n_rows(X))
        return None

    # -- removal ------------------------------------------------------------------------------------------------
    def _check_remove_indices(self, indices: Any = None, keys: Any = None) -> np.ndarray:
        check_is_fitted(self, "states_")
        if (indices is None) == (keys is None):
            raise ValueError("Give exactly one of indices (training-row positions) and keys (record keys). "
                             f"Found indices={indices!r}, keys={'None' if keys is None else '...'}.")
        self._check_params_unchanged("remove", fitted=True)
        return removal_rows(indices, keys, active=self.active_, record_keys=getattr(self, "keys_", None),
                            owner=self)

    def _fitted(self, X: Any, Y: np.ndarray, *, members: Any, keys: Any, states: list[ModelState], certs: list[Any],
                mech: CertifiedRemoval, caches: list[NewtonCache], params: dict[str, Any],
                rng: np.random.Generator) -> Any:
        """Adopt what ``fit`` trained (all rows active; the mask read-only, :func:`_owned_mask`) and return self."""
        self.X_, self.Y_ = X, Y
        self.active_ = owned_mask(np.ones(X.shape[0], dtype=bool))
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

    def _commit_removal(self, idx: np.ndarray, undo: Undo, states: list[ModelState], cert: Any, *,
                        cleared: bool = False) -> Any:
        """Erase the removed rows (features, targets, keys; a Dask model's store) with ``undo`` saving them, then
        commit the removal in one statement (:mod:`lethe.certified.transaction`): the model never holds a removal
        whose rows are not erased, nor erased rows it still counts. ``cleared``: ``active_[idx]`` is already
        cleared (the mechanism's ``clear_active``). Returns ``cert``."""
        if not cleared:
            set_rows(self.active_, idx, False)
        owned_mask(self.active_)  # read-only between calls (a mask made writable from outside is the model's again)
        undo.erase(self.X_, self.Y_, getattr(self, "keys_", None), idx)
        self.states_, self._certificate, self.n_removed_, undo.done = states, cert, self.n_removed_ + idx.size, True
        undo.finish()  # after the commit: a CSR matrix's explicit zeros dropped, the record forgotten
        return cert

    @serialised
    def resync(self) -> Any:
        """Complete what a failed or interrupted ``remove``/``add`` left unfinished: write back the rows of a Dask
        model's store that a failed removal had erased (:class:`lethe.certified.transaction.ResyncRequiredError`
        until the storage works again). Every ``remove``/``add`` does this first; returns self."""
        resume(self)
        return self

    @serialised
    def remove(self, indices: Any = None, *, keys: Any = None) -> Any:
        """Remove training rows as one batch and certify it: by their positions in ``fit``'s X (``indices``) or by
        record key (``keys``: ``sample_ids`` given to ``fit``, or the index of the DataFrame it was fitted on).

        Returns the immutable certificate. On error nothing changes: an exception raised anywhere in the call (an
        error, ``KeyboardInterrupt``, a signal handler's exception, a full disk while a Dask store's rows are erased)
        leaves the model as it was — mask, state, caches, data, random generator — or, if it arrives once the
        removal is committed, completed in full (:mod:`lethe.certified.transaction`). Raises ``ValueError`` if the
        parameters changed since ``fit``, for an unknown or already removed key (the two are not told apart: the
        model keeps no trace of removed keys), and for a row removed before. To remove rows one at a time (Guo et
        al. 2020, Alg. 2 with |B_j| = 1), call it once per row.
        """
        resume(self)  # an interrupted call's rollback completed first (under the lock: remove is serialised)
        # remove_rows (under this call's lock) does not validate them again: they are passed as a _CheckedRows view
        # bound to this model for this call (nothing is parked in the instance's __dict__: readers that take no
        # lock, scikit-learn's check_is_fitted in predict, iterate vars(model) and must never see it change size)
        checked = self._check_remove_indices(indices, keys).view(_CheckedRows)
        checked.model, checked.states = self, self.states_
        try:
            cert = self.remove_rows(checked)
        finally:
            checked.model = checked.states = None
        self._certificate = cert
        return cert

    @property
    def certificate_(self) -> Any:
        """The certificate of the last ``remove`` or ``add`` (None before the first; ``fit``'s are in
        ``fit_certificates_``): the :class:`lethe.protocols.Unlearner` protocol's latest certificate."""
        return self.__dict__.get("_certificate")

    def remove_rows(self, idx: np.ndarray, *, random_state: Any = None) -> Any:
        """Remove the training rows ``idx`` (positions, validated here as :meth:`remove` validates them) and return
        the certificate. ``random_state``: the randomness of a retraining's fresh b for this call (default: the
        model's own generator).

        The removal path other front ends call (e.g. a service that maps its own keys to rows and draws fresh
        entropy for every operation). Under the model's lock, taken on one line (as :func:`serialised` does: a
        ``with`` block ending on a later line reports a line event after the removal returned, where an exception
        skipped the lock's release), without a decorator's frame on the deletion's path. Atomic as :meth:`remove`
        is: an exception anywhere in the call leaves the model as it was, or — once committed — with the removal
        done in full."""
        with instance_lock(self): return self._remove_checked(*self._removal_args(idx, random_state))  # noqa: E701

    def _removal_args(self, idx: np.ndarray, random_state: Any) -> tuple[np.ndarray, np.random.Generator]:
        """Under the lock, before the removal: an interrupted call's rollback completed first (nothing else is
        trusted before it), the call's generator, and the rows validated (or taken as validated, see
        :class:`_CheckedRows`)."""
        resume(self)
        rng = self._rng if random_state is None else check_random_state(random_state)
        if isinstance(idx, _CheckedRows) and idx.model is self and idx.states is self.states_:  # see the class
            return idx.view(np.ndarray), rng
        return self._check_remove_indices(idx), rng

    def _remove_checked(self, idx: np.ndarray, rng: np.random.Generator) -> Any:
        """Remove the validated rows ``idx`` (under the lock) and return the certificate."""
        raise NotImplementedError

    # -- adding records ---------------------------------------------------------------------------------------------
    def _encode_targets(self, y: np.ndarray) -> np.ndarray:
        """Targets of new rows as the (K, m) matrix of the binary models."""
        raise NotImplementedError

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
        beta = OneVsAllRemoval(mech).joint(self.states_)
        eps, delta = mech.eps_delta()
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



def _paper_solver(params: dict[str, Any], X: Any) -> str | None:
    """The concrete solver of ``solver="auto"`` in paper mode (``bound="paper", calibration="paper"``): the paper's
    Cholesky solve of the Newton system (Guo et al. 2020, Alg. 1), so the model removes as many rows before retraining
    as the paper's code does; None (the usual rule) otherwise, or where ``auto`` would not keep a d × d matrix."""
    paper = params.get("bound") == "paper" and params.get("calibration") == "paper"
    if params.get("solver") != "auto" or not paper or not SOLVERS[resolve_solver("auto", X)].keeps_dense_matrices:
        return None
    return PAPER_SOLVER


@reports_model_origin
class CertifiedLogisticRegression(ClassifierMixin, CertifiedLinearBase):
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
    ``bound="paper", calibration="paper"`` reproduces Guo et al. 2020, with the paper's solver (``"cholesky"``) when
    ``solver="auto"`` (and the data may keep a d × d matrix): it keeps the paper's removal count (294 on MNIST 3 vs 8,
    where ``anchor`` retrained after 70); ``solver="onepass"`` reads the data once in single precision per removal.

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
        mech = mech.resolved(X, _paper_solver(params, X))  # solver="auto": the concrete solver, kept for life
        check_sample_weight(sample_weight, X.shape[0])
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(f"Classifier needs samples of at least 2 classes in the data. Found {classes.size} class.")
        if self.negative_subsample is not None and not (
                isinstance(self.negative_subsample, int | float) and self.negative_subsample > 0):
            raise ValueError(f"negative_subsample must be > 0 or None. Found {self.negative_subsample!r}.")
        K = 1 if classes.size == 2 else classes.size
        if K > 1 and self.tol is not None:
            share = OneVsAllRemoval(mech).share(K)  # each class's share of the joint budget
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
        caches = new_caches(K, mech.solver, members)
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
        OneVsAllRemoval(mech).check_training(states)
        self.classes_ = classes
        return self._fitted(X, Y, members=members, keys=keys, states=states, certs=certs, mech=mech,
                            caches=caches, params=params, rng=rng)

    @property
    @serialised
    def coef_(self) -> np.ndarray:
        """Weights, shape (1, d) for binary, (K, d) for one-vs-all."""
        check_is_fitted(self, "states_")
        W = np.vstack([st.w for st in self.states_])
        return W[:, :-1] * INTERCEPT_SCALE if self._param("fit_intercept") else W

    @property
    @serialised
    def intercept_(self) -> np.ndarray:
        """Intercepts, shape (1,) or (K,); zero unless ``fit_intercept=True``."""
        check_is_fitted(self, "states_")
        if self._param("fit_intercept"):
            return np.array([st.w[-1] * INTERCEPT_SCALE for st in self.states_])
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
        scores = margins(X, np.vstack([st.w for st in self.states_]).T)
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

    def _remove_checked(self, idx: np.ndarray, rng: np.random.Generator) -> Certificate | MulticlassCertificate:
        """Remove the validated training rows ``idx`` as one batch: the mechanism's Alg. 2 for a binary model, the
        one-vs-all form (:class:`lethe.certified.one_vs_all.OneVsAllRemoval`, joint budget) for more classes.
        Returns a :class:`~lethe.certified.mechanism.Certificate` or a :class:`MulticlassCertificate`."""
        mech: CertifiedRemoval = self.mechanism_
        # a failed call is rolled back (transaction module); a binary model's retraining saves the generator itself
        undo = begin_undo(self, idx, rng, self.caches_, lazy_rng=len(self.states_) == 1)
        undo.mask = self.active_
        try:
            if len(self.states_) == 1:
                state, cert = mech.remove(self.states_[0], self.X_, self.Y_[0], idx, active=self.active_,
                                          cache=self.caches_[0], random_state=rng, check_input=False,
                                          clear_active=True)  # active_[idx] cleared in place (undone on error)
                return self._commit_removal(idx, undo, [state], cert, cleared=True)
            states, mcert = OneVsAllRemoval(mech).remove(self.states_, self.X_, self.Y_, self.active_,
                                                         self.members_, idx, self.caches_, rng, self.classes_)
            return self._commit_removal(idx, undo, states, mcert)
        except BaseException:
            undo.rollback()  # a no-op beyond finishing if the commit happened
            raise


__all__ = ["CertifiedLinearBase", "CertifiedLogisticRegression"]

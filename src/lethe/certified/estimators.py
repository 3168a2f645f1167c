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
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from lethe._locking import SerialisedModel, instance_lock, serialised
from lethe._rng import check_random_state
from lethe._validation import check_unit_rows, normalize_rows, store_init_args
from lethe.certified.common import measured_residual
from lethe.certified.data import backend_of, check_data_matrix
from lethe.certified.mechanism import Certificate, CertifiedRemoval, ModelState, NewtonCache, check_row_norms
from lethe.certified.model_file import (
    NOISE_TAIL_PROBABILITY,
    check_meta_entries,
    check_model_file,
    classes_meta,
    noise_norm_tail,
    saved_solver,
    state_meta,
)
from lethe.certified.newton import new_caches, resolve_solver
from lethe.certified.noise import epsilon_spent
from lethe.certified.one_vs_all import MulticlassCertificate, OneVsAllRemoval, joint_residual
from lethe.certified.rows import INTERCEPT_SCALE, owned_mask, set_rows, squared_loss_rounding_floor
from lethe.certified.transaction import Undo, resume
from lethe.certified.transaction import begin as begin_undo
from lethe.estimator_data import (
    check_keys,
    check_sample_ids,
    check_sample_weight,
    data_arrays,
    is_dask,
    is_dask_frame,
    keys_of,
    margins,
    n_rows,
    own_copy,
    removal_rows,
    same_value,
    validate_input,
)
from lethe.io import ModelFileError, open_model_file, save_model_file
from lethe.model_origin import reports_model_origin, set_origin

_NO_Y = object()
_PARAM_NAMES: dict[type, list[str]] = {}
#: id(model) -> the index array its running ``remove`` validated (set and cleared under the model's lock).
_CHECKED_ROWS: dict[int, np.ndarray] = {}


@reports_model_origin
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

    def resync(self) -> Any:
        """Complete what a failed or interrupted ``remove``/``add`` left unfinished: write back the rows of a Dask
        model's store that a failed removal had erased (:class:`lethe.certified.transaction.ResyncRequiredError`
        until the storage works again). Every ``remove``/``add`` does this first; returns self."""
        with instance_lock(self):
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
        idx = self._check_remove_indices(indices, keys)
        # remove_rows (under this call's lock) does not validate them again. Kept outside the instance's __dict__:
        # readers that take no lock (scikit-learn's check_is_fitted iterates vars(model) in predict) must never
        # see it change size mid-iteration
        _CHECKED_ROWS[id(self)] = idx
        try:
            cert = self.remove_rows(idx)
        finally:
            _CHECKED_ROWS.pop(id(self), None)
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
        entropy for every operation). Under the model's lock, taken here rather than by :func:`serialised` (the
        same lock; one call less on the path of every deletion). Atomic as :meth:`remove` is: an exception anywhere
        in the call leaves the model as it was, or — once committed — with the removal done in full."""
        with instance_lock(self):
            resume(self)  # an interrupted call's rollback completed first (nothing else is trusted before it)
            rng = self._rng if random_state is None else check_random_state(random_state)
            if idx is not _CHECKED_ROWS.get(id(self)):  # the very array :meth:`remove` validated, or validate
                idx = self._check_remove_indices(idx)
            return self._remove_checked(idx, rng)

    def _remove_checked(self, idx: np.ndarray, rng: np.random.Generator) -> Any:
        """Remove the validated rows ``idx`` (under the lock) and return the certificate."""
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
        certificate; on error nothing changes (an exception anywhere in the call, ``KeyboardInterrupt`` included,
        leaves the model as it was, or — once committed — with the rows added in full:
        :mod:`lethe.certified.transaction`). Not available with ``negative_subsample``.
        """
        from lethe.certified.addition import add_rows, add_step, certificate

        resume(self)  # an interrupted call's rollback completed first
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
        # everything is formed aside (new arrays, states, caches) and committed in one statement; only the random
        # generator of a retraining is shared, and restored if the call fails (lethe.certified.transaction)
        undo = begin_undo(self, None, self._rng)
        try:
            if len(self.states_) == 1:
                state, cert = add_rows(mech, self.states_[0], X_all, Y_all[0], active, new, random_state=self._rng)
                states: list[ModelState] = [state]
                result: Any = cert
            else:
                K = len(self.states_)
                ova = OneVsAllRemoval(mech)
                proposed = [add_step(mech, st, X_all, Y_all[k], active, new) for k, st in enumerate(self.states_)]
                keep = active.copy()
                keep[new] = True
                order = sorted(range(K), key=lambda k: -proposed[k].residual_bound)
                states, retrained, beta = ova.settle(
                    proposed, order, lambda k: mech.retrain(proposed[k], X_all, Y_all[k], keep, self._rng), "added")
                seconds = time.perf_counter() - t0
                result = ova.certificate(beta, retrained, [certificate(mech, st, retrained=k in retrained,
                                                                       n_added=m, seconds=seconds)
                                                           for k, st in enumerate(states)],
                                         n_removed=0, seconds=seconds, n_added=m)
            mask = owned_mask(np.concatenate([self.active_, np.ones(m, dtype=bool)]))
            all_keys = np.concatenate([self.keys_, keys]) if keys is not None else getattr(self, "keys_", None)
            caches = new_caches(len(states), self.mechanism_.solver, None)  # the data array changed
            (self.X_, self.Y_, self.active_, self.keys_, self.states_, self.caches_, self._certificate,
             undo.done) = X_all, Y_all, mask, all_keys, states, caches, result, True
            undo.finish()
        except BaseException:
            undo.rollback()  # the generator's state back (nothing else was changed); a no-op after the commit
            raise
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

        The file carries an HMAC-SHA256 tag of all its arrays and metadata, which :meth:`load` checks, under the
        key ``key`` (bytes or hexadecimal str), else ``$LETHE_MODEL_KEY`` (hexadecimal), else the key file
        (``$LETHE_MODEL_KEY_FILE``, else ``~/.config/lethe/model.key``), created with a random key on the first save
        where none exists (:func:`lethe.io.save_model_file`; docs/estimators.md, "Model files").
        """
        self._check_params_unchanged("save")
        resume(self)  # an interrupted call's rollback completed first: never a half-restored state in a file
        arrays: dict[str, np.ndarray] = {**data_arrays(self.X_), "Y": self.Y_, "active": self.active_}
        for k, st in enumerate(self.states_):
            arrays[f"w_{k}"], arrays[f"b_{k}"] = st.w, st.b
        if getattr(self, "members_", None) is not None:
            arrays["members"] = self.members_
        if getattr(self, "keys_", None) is not None:
            arrays["keys"] = self.keys_
        rs = self.random_state
        params = dict(self.trained_params_)
        params["random_state"] = int(rs) if isinstance(rs, int | np.integer) and not isinstance(rs, bool) else None
        meta = {"class": type(self).__name__, "params": params, "states": [state_meta(st) for st in self.states_],
                "n_removed": self.n_removed_, "n_features_in": self.n_features_in_,
                "mechanism_tol": self.mechanism_.tol, "solver": self.mechanism_.solver}
        if hasattr(self, "feature_names_in_"):
            meta["feature_names_in"] = [str(c) for c in self.feature_names_in_]
        if hasattr(self, "classes_"):
            meta["classes"] = classes_meta(self.classes_)
        cert = self.__dict__.get("_certificate")
        if cert is not None:  # the last certificate (lethe.protocols.Unlearner): kept through save and load
            kind = "multiclass" if isinstance(cert, MulticlassCertificate) else "binary"
            meta["certificate"] = {"kind": kind, "fields": cert.to_dict()}
        return save_model_file(path, arrays, meta, key=key, model=self)

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None, trust_unauthenticated: bool = False) -> Any:
        """Load a model written by :meth:`save` (never unpickles), after checking it.

        Authentication (:func:`lethe.io.open_model_file` with the key of :func:`lethe.io.model_key`): the file
        loads only with a tag that matches under the key; a file without one (stripped, or never keyed), or under
        another key, is refused unless ``trust_unauthenticated=True`` — then the model's ``model_file_`` and every
        later certificate say it was not authenticated (:mod:`lethe.model_origin`). Then, always, the invariants
        of a certified state (:func:`lethe.certified.model_file.check_model_file`): array names, shapes, dtypes and
        finiteness, the parameters, n = the active rows, removed rows erased, β ≤ the budget, ‖b‖ consistent with
        σ, and the gradient residual re-measured from the saved rows, which must not exceed β. Any failure raises
        :class:`lethe.io.ModelFileError` (a ``ValueError``) naming what is wrong; nothing is loaded.
        """
        opened = open_model_file(path, key=key, trust_unauthenticated=trust_unauthenticated)
        arrays, meta = opened.arrays, opened.meta
        check_meta_entries(meta, cls.__name__, str(path))
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
        checked = check_model_file(est._loss, bool(est.trained_params_.get("fit_intercept", False)), mech, arrays,
                                   meta, str(path), measure=measured_residual,
                                   tail_probability=NOISE_TAIL_PROBABILITY)
        # the concrete solver the model was saved with (files from before solver="auto" name it in the parameters);
        # the caches are built at the first removal; never the fit's seed again: a retraining needs a fresh b
        est = cls.from_state(params, X=checked["X"], Y=checked["Y"], active=checked["active"],
                             states=checked["states"], n_features_in=int(meta["n_features_in"]),
                             classes=np.asarray(meta["classes"]) if "classes" in meta else None,
                             members=checked["members"], keys=checked["keys"], n_removed=int(meta["n_removed"]),
                             solver=meta.get("solver"), mechanism_tol=meta.get("mechanism_tol"))
        if "feature_names_in" in meta:
            est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        saved = meta.get("certificate")
        if saved is not None:
            try:
                kind = saved["kind"]
                est._certificate = (MulticlassCertificate if kind == "multiclass" else Certificate).from_dict(
                    saved["fields"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ModelFileError(f"{path}: its last certificate is malformed: {exc}") from None
        return set_origin(est, opened.origin)

    @classmethod
    def from_state(cls, params: dict[str, Any], *, X: Any, Y: np.ndarray, active: np.ndarray,
                   states: list[ModelState], n_features_in: int, classes: np.ndarray | None = None,
                   members: np.ndarray | None = None, keys: np.ndarray | None = None, n_removed: int = 0,
                   solver: str | None = None, mechanism_tol: float | None = None, prime: bool = False,
                   random_state: Any = None) -> Any:
        """A fitted estimator at a certified state: the ONE way a front end other than :meth:`fit` builds one
        (:meth:`load` after checking a file; the curator's adapter from an authenticated artifact). Nothing here
        certifies: the caller has checked the state (β ≤ the budget, the residual re-measured, counts). ``params``:
        the constructor's parameters the state was trained under (they become ``trained_params_``); ``X`` (n × D),
        ``Y`` (K, n) and ``active`` (n,): the model's rows as :meth:`fit` keeps them (intercept column and
        normalisation applied, removed rows zeroed), used as they are (X and Y not copied; the mask is); ``states``: one
        :class:`~lethe.certified.state.ModelState` per binary model; ``solver``: the concrete solver the state was
        computed with (None: resolved again); ``mechanism_tol``: the training tolerance the mechanism used;
        ``prime``: prepare the solver caches now (one data pass, as ``fit`` leaves them) instead of at the first
        removal; ``random_state``: the randomness of later retrainings (default: fresh entropy)."""
        est = cls(**params)
        est.trained_params_ = est._current_params()
        mech = est._mechanism(est.trained_params_, tol=mechanism_tol)
        est.X_, est.Y_, est.active_ = X, Y, owned_mask(np.array(active, dtype=bool))  # its own copy (n bytes)
        est.states_ = list(states)
        est.members_, est.keys_ = members, keys
        est.n_removed_ = int(n_removed)
        est.n_features_in_ = int(n_features_in)
        if classes is not None:
            est.classes_ = classes
        est.mechanism_ = mech.resolved(X, solver=saved_solver(solver, est.trained_params_["solver"]))
        est.caches_ = new_caches(len(est.states_), est.mechanism_.solver, members)
        if prime:
            for k, st in enumerate(est.states_):
                est.mechanism_.prime(est.caches_[k], st, X, Y[k], active)
        est._rng = check_random_state(random_state)
        return est


def _paper_solver(params: dict[str, Any], X: Any) -> str | None:
    """The concrete solver of ``solver="auto"`` in paper mode (``bound="paper", calibration="paper"``): the paper's
    Cholesky solve of the Newton system (Guo et al. 2020, Alg. 1), so the model removes as many rows before retraining
    as the paper's code does; None (the usual rule) otherwise, or where ``auto`` would not keep a d × d matrix."""
    paper = params.get("bound") == "paper" and params.get("calibration") == "paper"
    if params.get("solver") != "auto" or not paper or resolve_solver("auto", X) != "anchor":
        return None
    return "cholesky"


@reports_model_origin
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


__all__ = ["INTERCEPT_SCALE", "NOISE_TAIL_PROBABILITY", "CertifiedLinearRegression", "CertifiedLogisticRegression",
           "MulticlassCertificate", "check_sample_ids", "joint_residual", "keys_of", "noise_norm_tail", "removal_rows"]

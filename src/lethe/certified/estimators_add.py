"""Certified addition of records for the certified-removal estimators (:meth:`CertifiedAddition.add`): the
estimators' front end of :mod:`lethe.certified.addition` (one certified Newton step towards the model trained on
D ∪ A, or a retraining). A mixin of :class:`lethe.certified.estimators_logistic.CertifiedLinearBase`, which holds the
state it reads and writes (its methods take ``self: Any``: the attributes are the base's)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from lethe._locking import serialised
from lethe.certified.data import backend_of, check_data_matrix
from lethe.certified.mechanism import CertifiedRemoval, ModelState
from lethe.certified.newton import new_caches
from lethe.certified.one_vs_all import OneVsAllRemoval
from lethe.certified.rows import owned_mask
from lethe.certified.transaction import begin as begin_undo
from lethe.certified.transaction import resume
from lethe.estimator_data import check_new_keys
from lethe.model_origin import reports_model_origin


@reports_model_origin
class CertifiedAddition:
    """``add`` of the certified estimators (a mixin of
    :class:`~lethe.certified.estimators_logistic.CertifiedLinearBase`)."""

    @serialised
    def add(self: Any, X: Any, y: Any, sample_ids: Any = None) -> Any:
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
            check_new_keys(keys, self.keys_, self.active_)
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


__all__ = ["CertifiedAddition"]

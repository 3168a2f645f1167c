"""The model files of the certified-removal estimators: ``save``, ``load`` (after checking the file,
:func:`lethe.certified.model_file.check_model_file`), ``from_state`` (the one constructor besides ``fit``) and the
refusal to pickle a fitted model. A mixin of :class:`lethe.certified.estimators_logistic.CertifiedLinearBase`, which
holds the state it saves and restores (its methods take ``self: Any``/``cls: Any``: the attributes are the base's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lethe._locking import serialised
from lethe._rng import check_random_state
from lethe.certified.common import measured_residual
from lethe.certified.mechanism import Certificate, ModelState
from lethe.certified.model_file import (
    NOISE_TAIL_PROBABILITY,
    check_meta_entries,
    check_model_file,
    classes_meta,
    saved_solver,
    state_meta,
)
from lethe.certified.newton import new_caches
from lethe.certified.one_vs_all import MulticlassCertificate
from lethe.certified.rows import owned_mask
from lethe.certified.transaction import resume
from lethe.estimator_data import data_arrays
from lethe.io import ModelFileError, open_model_file, save_model_file
from lethe.model_origin import set_origin


class CertifiedModelFiles:
    """``save``, ``load``, ``from_state`` and no pickle of the certified estimators (a mixin of
    :class:`~lethe.certified.estimators_logistic.CertifiedLinearBase`)."""

    # -- no pickle for a fitted model -----------------------------------------------------------------------------
    def __getstate__(self: Any) -> Any:
        if "states_" in self.__dict__:
            raise TypeError(
                f"A fitted {type(self).__name__} cannot be pickled: it holds the SECRET perturbation b and the "
                "remaining training rows, which pickle (and joblib.dump) would write with the default file mode, and "
                f"loading a pickle runs code. Use model.save(path) and {type(self).__name__}.load(path) (no pickle, "
                "owner-only file). Unfitted estimators pickle normally.")
        return super().__getstate__()

    # -- persistence ----------------------------------------------------------------------------------------------
    @serialised
    def save(self: Any, path: str | Path, *, key: bytes | str | None = None) -> Path:
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
    def load(cls: Any, path: str | Path, *, key: bytes | str | None = None, trust_unauthenticated: bool = False) -> Any:
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
    def from_state(cls: Any, params: dict[str, Any], *, X: Any, Y: np.ndarray, active: np.ndarray,
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


__all__ = ["CertifiedModelFiles"]

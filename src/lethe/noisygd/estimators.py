"""scikit-learn estimators that learn with Noisy-GD and unlearn with Ā (Chourasia & Shah 2023). Front-end layer.

Both estimators keep a :class:`~lethe.noisygd.edit_stream.NoisyGDCurator` (``curator_``) holding the current database
and model; :meth:`edit` and :meth:`remove` run Ā on it and return an immutable
:class:`~lethe.noisygd.certificate.NoisyGDCertificate`.

Rows must have ‖x‖ ≤ 1 for the Lipschitz constant to be known a priori: ``row_norm`` either clips every row to
the unit ball (``"clip"``, default), scales every non-zero row to unit norm (``"normalize"``) or rejects larger
rows (``"error"``). These are per-record maps, so they do not affect the privacy analysis. With
``fit_intercept`` a constant feature 1 is appended, so R = √2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from lethe._locking import SerialisedModel, serialised
from lethe._rng import check_random_state, copy_generator
from lethe._validation import store_init_args
from lethe.estimator_data import keys_of, removal_rows
from lethe.io import ModelFileError, open_model_file, save_model_file
from lethe.model_origin import ModelFileOrigin, reports_model_origin, set_origin
from lethe.noisygd.certificate import NoisyGDCertificate
from lethe.noisygd.edit_stream import CuratorConfig, Database, EditRequest, NoisyGDCurator
from lethe.noisygd.models import BoundedMLPModel, LogisticModel, MLPModel
from lethe.noisygd.noisy_sgd import (
    plan_convex_unlearning,
    pnsgd_learning_shift,
    pnsgd_logistic,
    pnsgd_start_distance,
    pnsgd_unlearning_epochs,
    pnsgd_unlearning_epsilon,
)
from lethe.noisygd.schedule import ConvexSchedule, NonConvexSchedule, convex_schedule, nonconvex_schedule_for_loss

__all__ = ["NoisyGDBoundedMLPClassifier", "NoisyGDLogisticRegression", "NoisyGDMLPClassifier", "PNSGDCertificate",
           "PNSGDLogisticRegression"]

AnyModel = LogisticModel | MLPModel | BoundedMLPModel


def _rows_to_unit_ball(X: np.ndarray, how: str) -> np.ndarray:
    norms = np.linalg.norm(X, axis=1)
    if how == "clip":
        return X / np.maximum(1.0, norms)[:, None]
    if how == "normalize":
        return X / np.where(norms > 0, norms, 1.0)[:, None]
    bad = np.flatnonzero(norms > 1.0 + 1e-12)
    if bad.size:
        raise ValueError(
            f"row_norm='error': every row must have L2 norm <= 1. Found {norms[bad[0]]!r} at row {bad[0]}."
        )
    return X


def _file_meta(est: Any) -> dict[str, Any]:
    """What every Noisy-GD model file records about its estimator: class, parameters (an integer seed or None:
    a generator is not saved), classes, ``n_features_in_`` and the feature names if any."""
    params = est.get_params(deep=False)
    rs = params["random_state"]
    params["random_state"] = int(rs) if isinstance(rs, int | np.integer) and not isinstance(rs, bool) else None
    kind = est.classes_.dtype.kind
    classes = [int(c) if kind in "iub" else float(c) if kind == "f" else str(c) for c in est.classes_]
    meta = {"class": type(est).__name__, "params": params, "classes": classes,
            "n_features_in": int(est.n_features_in_)}
    if hasattr(est, "feature_names_in_"):
        meta["feature_names_in"] = [str(c) for c in est.feature_names_in_]
    return meta


def _open_file(cls: type, path: str | Path, key: bytes | str | None, trust_unauthenticated: bool = False,
               ) -> tuple[dict[str, np.ndarray], dict[str, Any], Callable[[str], ModelFileError], ModelFileOrigin]:
    """(arrays, metadata, fail, origin) of an authenticated model file of class ``cls``
    (:func:`lethe.io.open_model_file`'s policy: refused without a valid tag unless ``trust_unauthenticated``);
    ``fail(msg)`` is the :class:`~lethe.io.ModelFileError` that refuses it."""
    opened = open_model_file(path, key=key, trust_unauthenticated=trust_unauthenticated)
    arrays, meta = opened.arrays, opened.meta
    where = str(path)

    def fail(msg: str) -> ModelFileError:
        return ModelFileError(f"{where}: {msg} The file was edited or corrupted; it is refused.")

    if meta.get("class") != cls.__name__:
        raise ModelFileError(f"{where} holds a {meta.get('class')!r}, not a {cls.__name__}.")
    return arrays, meta, fail, opened.origin


def _check_file_keys(keys: np.ndarray | None, gone: np.ndarray, fail: Callable[[str], ModelFileError]) -> None:
    """Record keys of a model file: one per row, distinct for the rows kept, blank for the rows removed."""
    if keys is None:
        return
    blank = "" if keys.dtype.kind == "U" else 0
    if keys.shape != gone.shape or keys.dtype.kind not in "iuU" or np.any(keys[gone] != blank) or \
            np.unique(keys[~gone]).size != int((~gone).sum()):
        raise fail("keys must be one per row, distinct for the rows kept and blank for the rows removed.")


@reports_model_origin
class _NoisyGDClassifierBase(SerialisedModel, ClassifierMixin, BaseEstimator):
    """Shared fit/predict/edit logic; subclasses define the model, the schedule and the curator config.

    ``fit``, ``edit``, ``remove`` and the predictions run under the instance's lock (:mod:`lethe._locking`):
    concurrent calls on one model are serialised. A fitted model refuses ``copy.copy``/``copy.deepcopy`` (the copy
    would share the curator's noise stream); ``sklearn.base.clone(model).fit(X, y)`` makes a second model.

    Parameters are checked in ``fit`` by scikit-learn's parameter validation (``_parameter_constraints``, so the
    errors read as scikit-learn's); the checks of the theory (ε_dp ≥ ε_dd, Thm 5.1/5.2's hypotheses) stay with the
    schedules and :class:`~lethe.noisygd.edit_stream.CuratorConfig`, which say which theorem fails.
    """

    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "fit_intercept": ["boolean"],
        "row_norm": [StrOptions({"clip", "normalize", "error"})],
        "adaptivity": [Interval(Integral, 0, None, closed="left")],
        "random_state": "no_validation",  # lethe._rng.check_random_state (accepts a numpy Generator)
    }
    _fitted_attribute = "curator_"
    _secret_state = ("its curator's SECRET generator state (whoever knows it knows every later noise draw) and the "
                     "database")
    #: The :class:`lethe.protocols.Unlearner` protocol: no certified addition (``add`` raises NotImplementedError).
    supports_add: ClassVar[bool] = False

    def _augment(self, X: np.ndarray) -> np.ndarray:
        Xu = _rows_to_unit_ball(np.asarray(X, dtype=np.float64), self.row_norm)
        if self.fit_intercept:
            Xu = np.hstack([Xu, np.ones((Xu.shape[0], 1))])
        return Xu

    @property
    def _row_bound(self) -> float:
        return math.sqrt(2.0) if self.fit_intercept else 1.0

    def _encode(self, y: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(self.classes_, y)
        idx = np.clip(idx, 0, len(self.classes_) - 1)
        unknown = self.classes_[idx] != y
        if np.any(unknown):
            raise ValueError(f"labels must be among classes_ {self.classes_.tolist()}. Found {y[unknown][0]!r}.")
        if len(self.classes_) == 2:
            return np.where(idx == 1, 1.0, -1.0)
        return idx.astype(np.float64)

    def _build(self, n: int, model: AnyModel) -> CuratorConfig:  # pragma: no cover - abstract
        raise NotImplementedError

    def _make_model(self, p: int, n_classes: int) -> AnyModel:  # pragma: no cover - abstract
        raise NotImplementedError

    @serialised
    def fit(self, X: Any, y: Any, sample_ids: Any = None) -> Any:
        """Learn with A (Eq. 16) on (X, y); the data become the curator's database D₀. ``sample_ids`` (or a
        DataFrame's index) name the records for ``remove(keys=...)``."""
        self._validate_params()
        keys = keys_of(X, sample_ids)
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data. Found 1 class: "
                f"{self.classes_[0]!r}."
            )
        Xa = self._augment(X)
        model = self._make_model(Xa.shape[1], len(self.classes_))
        config = self._build(Xa.shape[0], model)
        curator = NoisyGDCurator(model, config, random_state=self.random_state)
        self._certificate = curator.learn(Database(Xa, self._encode(y)))
        self.curator_ = curator
        self.active_ = np.ones(Xa.shape[0], dtype=bool)
        self.keys_ = keys
        self._sync()
        return self

    @property
    def certificate_(self) -> NoisyGDCertificate | None:
        """The certificate of the last operation (learning, an edit or a removal); None before ``fit``."""
        return self.__dict__.get("_certificate")

    def _sync(self) -> None:
        self.__dict__.update(self._derived(self.curator_.theta))

    def _derived(self, theta: np.ndarray) -> dict[str, Any]:
        """Attributes computed from the published θ (none here; ``coef_``/``intercept_`` for the linear model)."""
        return {}

    def _theta(self) -> np.ndarray:
        check_is_fitted(self, "curator_")
        return self.curator_.theta

    @serialised
    def decision_function(self, X: Any) -> np.ndarray:
        """Logit (binary, shape (n,)) or logits (n, K) of the published model."""
        check_is_fitted(self, "curator_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self.curator_.model.decision(self.curator_.theta, self._augment(X))

    @serialised
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (sigmoid / softmax of the logits)."""
        z = self.decision_function(X)
        if z.ndim == 1:
            p1 = 1.0 / (1.0 + np.exp(-np.clip(z, -500, 500)))
            return np.column_stack([1.0 - p1, p1])
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    @serialised
    def predict(self, X: Any) -> np.ndarray:
        """Most likely class."""
        z = self.decision_function(X)
        idx = (z > 0).astype(np.intp) if z.ndim == 1 else np.argmax(z, axis=1)
        return self.classes_[idx]

    @serialised
    def edit(self, indices: Any, X_new: Any, y_new: Any) -> NoisyGDCertificate:
        """Replace records ``indices`` by (X_new, y_new) and unlearn with Ā (Eq. 17). Returns the certificate.

        On any error (repeated or out-of-range indices, wrong shapes, unknown labels) nothing changes.
        """
        check_is_fitted(self, "curator_")
        X_new = validate_data(self, X_new, dtype=np.float64, reset=False)
        y_arr = np.asarray(y_new)
        if y_arr.ndim != 1 or y_arr.shape[0] != X_new.shape[0]:
            raise ValueError(f"y_new must be 1-D with {X_new.shape[0]} labels. Found shape {y_arr.shape}.")
        idx = list(np.asarray(indices).ravel())
        request = EditRequest.from_arrays(idx, self._augment(X_new), self._encode(y_arr))
        # a new record holds the position (removable by index, it has no key); the replaced keys must not name it
        return self._adopt(request, np.asarray(idx, dtype=np.int64), active=True)

    @serialised
    def remove(self, indices: Any = None, *, keys: Any = None) -> NoisyGDCertificate:
        """Delete records (replace them by the dummy zero record, footnote 1) and unlearn with Ā: by ORIGINAL row
        positions of ``fit``'s X (``indices``; positions never shift, a deleted row stays as the dummy record) or by
        record key (``keys``). Exactly one of the two; a row already removed is refused. On error nothing changes.
        """
        check_is_fitted(self, "curator_")
        idx = removal_rows(indices, keys, active=self.active_, record_keys=self.keys_, owner=self)
        request = EditRequest.deletion(idx.tolist(), self.curator_.database.n_features)
        return self._adopt(request, idx, active=False)  # a removed record's key must not stay in the model or file

    def _adopt(self, request: EditRequest, rows: np.ndarray, *, active: bool) -> NoisyGDCertificate:
        """Ā on a copy of the curator (:meth:`NoisyGDCurator.unlearned`), then the new curator, certificate, row mask,
        keys and published weights adopted in one statement: an exception anywhere (``KeyboardInterrupt``
        included) leaves the model as it was, or with the edit done in full — never a curator that ran Ā beside a
        mask or step count that did not follow (tests/conformance/test_exceptions_families.py)."""
        curator, cert = self.curator_.unlearned(request, p=self.adaptivity)  # validates the request first
        new_active = self.active_.copy()
        new_active[rows] = active
        new_keys = None
        if self.keys_ is not None:
            new_keys = self.keys_.copy()
            new_keys[rows] = "" if new_keys.dtype.kind == "U" else 0
        derived = self._derived(curator.theta)
        self.__dict__.update(curator_=curator, _certificate=cert, active_=new_active, keys_=new_keys, **derived)
        return cert

    def add(self, X: Any, y: Any, *args: Any, **kwargs: Any) -> NoisyGDCertificate:
        """Not supported (``supports_add = False``): the curator's database has a fixed size n (Chourasia & Shah's
        edits replace records; Thm 5.1/5.2's schedules are calibrated for n). Use :meth:`edit` to replace a
        removed record by a new one, or refit. Raises NotImplementedError."""
        self._refuse_add("Noisy-GD's database has a fixed size n that the schedule is calibrated for. Use "
                         "edit(indices, X_new, y_new) to replace records, or refit.")

    # -- persistence ----------------------------------------------------------------------------------------------
    @serialised
    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        """Save the fitted model without pickle: the curator's state (:meth:`NoisyGDCurator.save`'s arrays and
        metadata: database, model, generator state, certificates) plus the estimator's parameters, classes,
        which rows are still in and the record keys. Owner-only and atomic; with a key (``key``,
        ``$LETHE_MODEL_KEY``, the key file, created on the first save where none exists) authenticated by an
        HMAC-SHA256 tag (:func:`lethe.io.save_model_file`)."""
        check_is_fitted(self, "curator_")
        arrays = {**self.curator_.state_arrays(), "active": self.active_}
        if self.keys_ is not None:
            arrays["keys"] = self.keys_
        meta = {**_file_meta(self), "curator": self.curator_.state_meta()}
        return save_model_file(path, arrays, meta, key=key, model=self)

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None, trust_unauthenticated: bool = False) -> Any:
        """Load a model written by :meth:`save`: authentication (:func:`lethe.io.open_model_file`'s policy: refused
        without a valid tag unless ``trust_unauthenticated=True``, which every later certificate states), then the
        curator's invariant checks (:meth:`NoisyGDCurator.from_state`: shapes, finiteness, rows and labels, step
        counters, every certificate recomputed), then the estimator's: the configuration is the one its parameters
        build for n records (same schedule), the model has the classes' shape, the rows marked removed are the
        dummy zero record, keys blank for them and distinct otherwise. :class:`lethe.io.ModelFileError` on any
        failure; nothing is loaded."""
        arrays, meta, fail, origin = _open_file(cls, path, key, trust_unauthenticated)
        where = str(path)
        active, keys = arrays.pop("active", None), arrays.pop("keys", None)
        if not isinstance(meta.get("curator"), dict):
            raise fail("it holds no curator state.")
        curator = NoisyGDCurator.from_state(arrays, meta["curator"], where=where)
        try:
            est = cls(**meta["params"])
            est._validate_params()
            est.classes_ = np.asarray(meta["classes"])
            if est.classes_.ndim != 1 or est.classes_.size < 2 or np.unique(est.classes_).size != est.classes_.size:
                raise ValueError(f"classes must be at least 2 distinct labels. Found {meta['classes']!r}")
            est.n_features_in_ = int(meta["n_features_in"])
            model = est._make_model(est.n_features_in_ + int(est.fit_intercept), len(est.classes_))
            config = est._build(curator.database.n, model)
        except (TypeError, ValueError, KeyError) as e:
            raise fail(f"its parameters are not valid: {e}") from None
        if model.to_dict() != curator.model.to_dict() or config != curator.config:
            raise fail("the curator's model or configuration is not the one the estimator's parameters build.")
        n = curator.database.n
        if active is None or active.dtype != np.bool_ or active.shape != (n,):
            found = None if active is None else (active.dtype, active.shape)
            raise fail(f"active must be {n} booleans. Found {found}.")
        gone = ~active
        if np.any(curator.database.X[gone] != 0.0) or np.any(curator.database.y[gone] != 0.0):
            raise fail("a row marked removed is not the dummy zero record.")
        if len(est.classes_) == 2 and np.any((curator.database.y == 0.0) != gone):
            raise fail("the rows marked removed must be exactly the dummy records (label 0).")
        if int(gone.sum()) > sum(c.r for c in curator.certificates):
            raise fail(f"{int(gone.sum())} rows are marked removed but the edits replaced "
                       f"{sum(c.r for c in curator.certificates)}.")
        _check_file_keys(keys, gone, fail)
        if "feature_names_in" in meta:
            est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        est.curator_ = curator
        est.active_ = active.copy()
        est.keys_ = None if keys is None else keys.copy()
        est._certificate = curator.certificates[-1]
        est._sync()
        return set_origin(est, origin)


class NoisyGDLogisticRegression(_NoisyGDClassifierBase):
    r"""Logistic regression learned with Noisy-GD and unlearned with Ā, scheduled by Theorem 5.1 (convex).

    Binary targets use ℓ = log(1 + e^{−y θᵀx}) (L = R, β = R²/4); more classes use the multinomial loss
    (L = √2R, β = R²/2), R = 1 (or √2 with an intercept). η, σ², ρ, K_A, K_Ā come from
    :func:`~lethe.noisygd.schedule.convex_schedule`; every edit certifies (q, ε_dd)-deletion privacy (Thm G.15)
    and (q, ε_dd + p ε_dp) under p-adaptive requesters (Thm 4.3, p = ``adaptivity``).

    Parameters
    ----------
    lam : float, default 0.01
        λ.
    q : float, default 10.0
        Rényi order.
    epsilon_dp, epsilon_dd : float, default 1.0, 0.5
        ε_dp ≥ ε_dd > 0.
    max_edit_size : int, default 1
        r, records per edit (utility schedule, Eq. 19).
    utility : bool, default True
        Impose Eq. (19) on K_A, K_Ā.
    fit_intercept : bool, default True
    row_norm : {"clip", "normalize", "error"}, default "clip"
    adaptivity : int, default 0
        p for Thm 4.3.
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    classes_, coef_, intercept_, n_features_in_ :
        As in scikit-learn.
    schedule_ : ConvexSchedule
    curator_ : NoisyGDCurator
    certificate_ : NoisyGDCertificate
        Of the last operation.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2000, n_features=5, random_state=0)
    >>> clf = NoisyGDLogisticRegression(random_state=0).fit(X, y)
    >>> cert = clf.remove([0, 1][:1])
    >>> cert.steps == clf.schedule_.k_unlearn, cert.epsilon_dd <= 0.5, clf.score(X, y) > 0.95
    (True, True, True)
    """

    _parameter_constraints: ClassVar[dict[str, Any]] = {
        **_NoisyGDClassifierBase._parameter_constraints,
        # λ, q, ε_dp, ε_dd, r are checked by the schedule (Thm 5.1 / G.15), which names the theorem
    }

    def __init__(
        self,
        lam: float = 0.01,
        q: float = 10.0,
        epsilon_dp: float = 1.0,
        epsilon_dd: float = 0.5,
        max_edit_size: int = 1,
        utility: bool = True,
        fit_intercept: bool = True,
        row_norm: str = "clip",
        adaptivity: int = 0,
        random_state: Any = None,
    ) -> None:
        store_init_args(self, locals())

    def _make_model(self, p: int, n_classes: int) -> LogisticModel:
        return LogisticModel(p, n_classes)

    def _build(self, n: int, model: AnyModel) -> CuratorConfig:
        assert isinstance(model, LogisticModel)
        R = self._row_bound
        self.schedule_: ConvexSchedule = convex_schedule(
            lipschitz=model.lipschitz(R), smoothness=model.smoothness(R), lam=self.lam, n=n, d=model.n_params,
            r=min(self.max_edit_size, n), q=self.q, epsilon_dp=self.epsilon_dp, epsilon_dd=self.epsilon_dd,
            utility=self.utility,
        )
        return CuratorConfig.from_convex_schedule(self.schedule_, p=self.adaptivity, row_bound=R)

    def _derived(self, theta: np.ndarray) -> dict[str, Any]:
        W = theta[:, None] if len(self.classes_) == 2 else theta.reshape(-1, len(self.classes_))
        if self.fit_intercept:
            return {"coef_": W[:-1].T.copy(), "intercept_": W[-1].copy()}
        return {"coef_": W.T.copy(), "intercept_": np.zeros(W.shape[1])}


class NoisyGDMLPClassifier(_NoisyGDClassifierBase):
    r"""One-hidden-layer tanh network learned with Noisy-GD on clipped per-example gradients (non-convex).

    σ² = q L² η max{K_A, K_Ā} / (ε_dp n²) (Thm 5.2 (1), Eq. 20, i.e. Thm G.7): A and Ā are each
    (q, ε_dp)-Rényi DP as mechanisms of their input database; the certificates report the privacy of the
    published model over the whole run (G.7 over all steps so far), which grows with every edit.
    The loss of a network is neither globally smooth nor bounded in θ, so Theorem 5.2's
    deletion guarantee is *not* claimed; each edit certifies the deletion privacy of Thm G.7 over the steps the
    record was exposed to (:func:`~lethe.noisygd.guarantees.exposure_deletion_epsilon`), which does not shrink
    with K_Ā. Θ₀ ~ N(0, init_scale²/p · I) (any data-independent start is allowed by Thm G.7).

    Parameters
    ----------
    n_hidden : int, default 16
    lam : float, default 1e-3
    eta : float, default 0.5
    n_iter, n_iter_unlearn : int, default 300, 60
        K_A, K_Ā.
    clip : float, default 1.0
        L.
    q, epsilon_dp : float, default 10.0, 1.0
    init_scale : float, default 1.0
    fit_intercept, row_norm, adaptivity, random_state
        As in :class:`NoisyGDLogisticRegression`.

    Examples
    --------
    >>> from sklearn.datasets import make_moons
    >>> X, y = make_moons(n_samples=400, noise=0.1, random_state=0)
    >>> clf = NoisyGDMLPClassifier(random_state=0, epsilon_dp=5.0).fit(X, y)
    >>> cert = clf.remove([3])
    >>> cert.gradient_evaluations == 400 * 60, round(cert.epsilon_dp, 6)  # G.7 over K_A + K_Ā = 360 steps
    (True, 6.0)
    """

    _parameter_constraints: ClassVar[dict[str, Any]] = {
        **_NoisyGDClassifierBase._parameter_constraints,
        # n_hidden, λ, η, clip and init_scale are checked by MLPModel and CuratorConfig
        "n_iter": [Interval(Integral, 1, None, closed="left")],
        "n_iter_unlearn": [Interval(Integral, 1, None, closed="left")],
        "q": [Interval(Real, 1, None, closed="neither")],
        "epsilon_dp": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        n_hidden: int = 16,
        lam: float = 1e-3,
        eta: float = 0.5,
        n_iter: int = 300,
        n_iter_unlearn: int = 60,
        clip: float = 1.0,
        q: float = 10.0,
        epsilon_dp: float = 1.0,
        init_scale: float = 1.0,
        fit_intercept: bool = True,
        row_norm: str = "clip",
        adaptivity: int = 0,
        random_state: Any = None,
    ) -> None:
        store_init_args(self, locals())

    def _make_model(self, p: int, n_classes: int) -> MLPModel:
        return MLPModel(p, int(self.n_hidden), n_classes)

    def _build(self, n: int, model: AnyModel) -> CuratorConfig:
        sigma2 = self.q * self.clip**2 * self.eta * max(self.n_iter, self.n_iter_unlearn) / (self.epsilon_dp * n**2)
        self.sigma2_ = sigma2
        return CuratorConfig(
            eta=float(self.eta), sigma2=sigma2, lam=float(self.lam), k_learn=int(self.n_iter),
            k_unlearn=int(self.n_iter_unlearn), init_std=float(self.init_scale) / math.sqrt(model.n_features),
            q=float(self.q), lipschitz=float(self.clip), row_bound=self._row_bound, guarantee="lipschitz", clip=True,
            p=int(self.adaptivity),
        )


class NoisyGDBoundedMLPClassifier(_NoisyGDClassifierBase):
    r"""A non-convex network with Theorem 5.2's deletion guarantee: Noisy-GD on a loss bounded, Lipschitz and smooth
    over all θ (binary classification).

    The model is :class:`~lethe.noisygd.models.BoundedMLPModel`: logit z = (c/m) Σ_k tanh(v_k) tanh(xᵀ tanh(W_k)),
    logistic loss, rows in the unit ball (R = √2 with the intercept feature). Its constants L, β and the loss
    half-range c/2 are proven bounds for every θ, so Thm 5.2 applies: η, σ², ρ = N(0, σ²/λ I), K_A, K_Ā come from
    :func:`~lethe.noisygd.schedule.nonconvex_schedule_for_loss` (Eq. 20–21, with B chosen so that the loss is
    σ² log(B)/4-bounded). A and Ā are (q, ε_dp)-Rényi DP (G.7) and every edit certifies (q, ε_dd)-deletion privacy
    under non-adaptive requesters of at most ``max_edit_size`` records (Thm 5.2 (2), via
    :func:`~lethe.noisygd.schedule.nonconvex_deletion_epsilon` for the steps actually run), ε_dd + p·ε_dp under
    p-adaptive ones (Thm 4.3).

    **Cost.** Thm 5.2's step counts are astronomically large except for tiny databases (K_A ≈ 10⁹ already for
    n = 30; see docs/noisygd.md), so ``fit`` refuses to run more than ``max_steps`` steps and says how many the
    theorem asks for. ``n_iter`` / ``n_iter_unlearn`` run fewer steps with the theorem's η, σ², ρ; the certificates
    then report the (weaker, possibly infinite) ε_dd those steps certify, never the requested one. With the
    theorem's σ² the Gibbs law is close to the prior, so accuracy is low (the ``poor_score`` tag says so).

    Parameters
    ----------
    n_hidden : int, default 8
        m.
    logit_bound : float, default 4.0
        c: |z| < c, the loss lies in an interval of length c.
    lam : float, default 0.1
    q : float, default 2.0
    epsilon_dp, epsilon_dd : float, default 1.0, 0.5
        d > ε_dp ≥ ε_dd > 0.
    max_edit_size : int, default 1
        r.
    n_iter, n_iter_unlearn : int or None, default None
        K_A, K_Ā; None = Thm 5.2's (Eq. 21).
    max_steps : int, default 10_000_000
        Refuse to fit if K_A or K_Ā exceeds this.
    fit_intercept, row_norm, adaptivity, random_state
        As in :class:`NoisyGDLogisticRegression`.

    Attributes
    ----------
    schedule_ : NonConvexSchedule
    curator_, certificate_, classes_, n_features_in_

    Examples
    --------
    Thm 5.2 on four records already asks for millions of steps; run 200 (σ², η, ρ stay the theorem's) and the
    certificate says what those certify — here nothing, as Ā's 50 steps do not contract (ε_dd = inf):

    >>> X = np.array([[1.0, 0.2], [0.9, -0.1], [-1.0, 0.1], [-0.8, -0.3]])
    >>> clf = NoisyGDBoundedMLPClassifier(n_hidden=2, lam=1.0, n_iter=200, n_iter_unlearn=50, random_state=0)
    >>> clf = clf.fit(X, [1, 1, 0, 0])
    >>> clf.schedule_.k_learn, clf.schedule_.k_unlearn, clf.schedule_.epsilon_dd
    (2400626, 4192505, 0.5)
    >>> cert = clf.remove([0])
    >>> cert.steps, cert.epsilon_dd, cert.epsilon_dp < 1.0
    (50, inf, True)
    """

    _parameter_constraints: ClassVar[dict[str, Any]] = {
        **_NoisyGDClassifierBase._parameter_constraints,
        # BoundedMLPModel checks n_hidden and logit_bound; the schedule checks λ, q, ε_dp, ε_dd, r against Thm 5.2
        "n_iter": [None, Interval(Integral, 0, None, closed="left")],
        "n_iter_unlearn": [None, Interval(Integral, 0, None, closed="left")],
        "max_steps": [Interval(Integral, 0, None, closed="left")],
    }

    def __init__(
        self,
        n_hidden: int = 8,
        logit_bound: float = 4.0,
        lam: float = 0.1,
        q: float = 2.0,
        epsilon_dp: float = 1.0,
        epsilon_dd: float = 0.5,
        max_edit_size: int = 1,
        n_iter: int | None = None,
        n_iter_unlearn: int | None = None,
        max_steps: int = 10_000_000,
        fit_intercept: bool = True,
        row_norm: str = "clip",
        adaptivity: int = 0,
        random_state: Any = None,
    ) -> None:
        store_init_args(self, locals())

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        tags.classifier_tags.poor_score = True
        return tags

    def _make_model(self, p: int, n_classes: int) -> BoundedMLPModel:
        if n_classes != 2:
            raise ValueError(
                f"Only binary classification is supported. The type of the target is multiclass ({n_classes} "
                f"classes; {type(self).__name__}'s Thm 5.2 constants are derived for the binary logistic loss)."
            )
        return BoundedMLPModel(p, int(self.n_hidden), float(self.logit_bound))

    def _build(self, n: int, model: AnyModel) -> CuratorConfig:
        assert isinstance(model, BoundedMLPModel)
        R = self._row_bound
        self.schedule_: NonConvexSchedule = nonconvex_schedule_for_loss(
            loss_half_range=model.loss_half_range(), lipschitz=model.lipschitz(R), smoothness=model.smoothness(R),
            lam=self.lam, n=n, d=model.n_params, r=min(self.max_edit_size, n), q=self.q,
            epsilon_dp=self.epsilon_dp, epsilon_dd=self.epsilon_dd,
        )
        s = self.schedule_
        k_learn = s.k_learn if self.n_iter is None else int(self.n_iter)
        k_unlearn = s.k_unlearn if self.n_iter_unlearn is None else int(self.n_iter_unlearn)
        if max(k_learn, k_unlearn) > self.max_steps:
            raise ValueError(
                f"Thm 5.2 asks for K_A = {s.k_learn} and K_Abar = {s.k_unlearn} Noisy-GD steps here (n = {n}, "
                f"d = {model.n_params}, B = {s.B:.4g}, eta = {s.eta:.3g}); running {max(k_learn, k_unlearn)} "
                f"exceeds max_steps = {self.max_steps}. Thm 5.2 is impractical beyond tiny databases (see "
                "docs/noisygd.md). Pass n_iter / n_iter_unlearn to run fewer steps (the certificates then report "
                "the epsilon_dd those steps certify) or raise max_steps."
            )
        return CuratorConfig.from_nonconvex_schedule(s, p=int(self.adaptivity), row_bound=R, k_learn=k_learn,
                                                     k_unlearn=k_unlearn)


@dataclass(frozen=True)
class PNSGDCertificate:
    """What one PNSGD deletion request guarantees (Chien et al. 2024), by which theorem, and its cost.

    ``epsilon``/``delta``: the published model is (ε, δ)-indistinguishable from the model learned on the data
    retained after this request and passed through the same unlearning phases (sequential requests accounted for by
    :func:`~lethe.noisygd.noisy_sgd.pnsgd_start_distance`). ``epsilon_certified`` ≤ ε is what the epochs run
    certify; ``distance`` is Δ_k; ``request`` counts from 1.
    """

    operation: str
    theorem: str
    epsilon: float
    delta: float
    epsilon_certified: float
    request: int
    n_removed: int
    distance: float
    epochs: int
    steps: int
    gradient_evaluations: int

    @property
    def guarantee(self) -> str:
        """What is promised, by which theorem (the :class:`lethe.protocols.Certificate` protocol)."""
        return (f"({self.epsilon!r}, {self.delta!r})-unlearning of the {self.n_removed} record(s) of request "
                f"{self.request}: the published model is indistinguishable from the model learned on the retained "
                f"data and unlearned the same way; {self.theorem}")

    @property
    def observer(self) -> str:
        """Whom it covers: one published version, the model after this request (Chien et al. compare the law of
        that one model; an observer who also kept an earlier version, trained with the records, is not covered)."""
        return "one published version"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict: the fields plus ``guarantee`` and ``observer``."""
        return {**asdict(self), "guarantee": self.guarantee, "observer": self.observer}


@reports_model_origin
class PNSGDLogisticRegression(SerialisedModel, ClassifierMixin, BaseEstimator):
    r"""Binary logistic regression learned and unlearned by projected noisy mini-batch SGD (Chien et al. 2024).

    The default convex schedule (:func:`~lethe.noisygd.noisy_sgd.plan_convex_unlearning`): at the same (ε, δ), n,
    loss, step size and noise it needs fewer per-example gradients per request than Chourasia & Shah's Thm 5.1
    (:class:`NoisyGDLogisticRegression`, still available). Rows are mapped to ‖x‖ ≤ 1 (``row_norm``), so L = 1,
    β = 1/4; no intercept (append a constant column scaled into the ball if one is wanted). Learning runs
    ``learn_epochs`` epochs from θ = 0; :meth:`remove` replaces the records by the dummy zero record and runs the
    fewest epochs that certify (ε, δ) for this request given all earlier ones.

    Parameters
    ----------
    epsilon, delta : float, default 1, 1e-5
        Per-request target.
    lam : float, default 0.01
        λ (L2 regularisation).
    batch_size : int, default 128
        b; n must be ≥ b.
    learn_epochs : int, default 30
    noise_std : float, optional
        Per-step noise std; default √(2ησ²) with σ² of Thm 5.1 at ε_dp = 1 (the planner's shared noise).
    radius : float, optional
        Projection radius R (default 1/λ).
    row_norm : {"clip", "normalize", "error"}, default "clip"
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    plan_ : ConvexUnlearningPlan
    theta_ : ndarray
    certificate_ : PNSGDCertificate or None

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(2000, 5)); y = (X[:, 0] > 0).astype(int)
    >>> clf = PNSGDLogisticRegression(batch_size=64, random_state=0).fit(X, y)
    >>> cert = clf.remove([0, 1, 2])
    >>> cert.epsilon_certified <= 1.0, clf.score(X, y) > 0.9
    (True, True)
    """

    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "lam": [Interval(Real, 0, None, closed="neither")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "learn_epochs": [Interval(Integral, 0, None, closed="left")],
        "noise_std": [None, Interval(Real, 0, None, closed="neither")],
        "radius": [None, Interval(Real, 0, None, closed="neither")],
        "row_norm": [StrOptions({"clip", "normalize", "error"})],
        "random_state": "no_validation",
    }
    _fitted_attribute = "theta_"  # serialised calls and no copy of a fitted model, as the Noisy-GD estimators
    _secret_state = "the SECRET generator state of its later noise and the training rows"
    supports_add: ClassVar[bool] = False  # the lethe.protocols.Unlearner protocol: removals only

    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-5, lam: float = 0.01, batch_size: int = 128,
                 learn_epochs: int = 30, noise_std: float | None = None, radius: float | None = None,
                 row_norm: str = "clip", random_state: Any = None) -> None:
        store_init_args(self, locals())

    @serialised
    def fit(self, X: Any, y: Any, sample_ids: Any = None) -> PNSGDLogisticRegression:
        """Learn by PNSGD on (X, y) (labels of two classes); ``sample_ids`` (or a DataFrame's index) name the
        records for ``remove(keys=...)``."""
        self._validate_params()
        keys = keys_of(X, sample_ids)
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2:
            raise ValueError(f"{type(self).__name__} is binary: y must have 2 classes. Found {len(self.classes_)}.")
        n, p = X.shape
        if n < self.batch_size:
            raise ValueError(f"batch_size must be <= the number of rows {n}. Found {self.batch_size}.")
        self.plan_ = plan_convex_unlearning(self.epsilon, self.delta, n=n, d=p, lam=self.lam,
                                            batch_size=self.batch_size, radius=self.radius)
        noise = self.plan_.noise_std if self.noise_std is None else float(self.noise_std)
        self._noise = noise
        self._radius = 1.0 / self.lam if self.radius is None else float(self.radius)
        self._rng = check_random_state(self.random_state)
        self._X = _rows_to_unit_ball(X, self.row_norm)
        self._y = np.where(y == self.classes_[1], 1.0, -1.0)
        self._removed: list[int] = []
        self._phase_steps: list[int] = []
        self._gone = np.zeros(n, dtype=bool)
        self.theta_ = pnsgd_logistic(self._X, self._y, np.zeros(p), epochs=self.learn_epochs, eta=self.plan_.eta,
                                     lam=self.lam, sigma=noise, batch_size=self.batch_size, radius=self._radius,
                                     random_state=self._rng)
        self._certificate: PNSGDCertificate | None = None
        self.keys_ = keys
        return self

    @serialised
    def decision_function(self, X: Any) -> np.ndarray:
        """xᵀθ of the published model (rows mapped into the unit ball as in fit)."""
        check_is_fitted(self, "theta_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return _rows_to_unit_ball(X, self.row_norm) @ self.theta_

    @serialised
    def predict(self, X: Any) -> np.ndarray:
        """Most likely class."""
        return self.classes_[(self.decision_function(X) > 0).astype(np.intp)]

    @property
    def certificate_(self) -> PNSGDCertificate | None:
        """The certificate of the last removal; None before the first (learning is not certified by itself)."""
        return self.__dict__.get("_certificate")

    def _certify(self, removed: list[int], phase_steps: list[int], n: int) -> tuple[float, int, float]:
        """(Δ_k, epochs K, ε certified) for the k-th request, k = len(removed), given the sizes of all requests so
        far and the steps of the earlier phases (Chien et al. 2024; :mod:`lethe.noisygd.noisy_sgd`)."""
        c = self.plan_.pnsgd.c
        E = self.plan_.pnsgd.steps_per_epoch
        zb = pnsgd_learning_shift(eta=self.plan_.eta, lipschitz=1.0, batch_size=self.batch_size, n=n, c=c)
        dist = pnsgd_start_distance(removed=removed, phase_steps=phase_steps, z_b=zb, c=c, radius=self._radius)
        k = pnsgd_unlearning_epochs(self.epsilon, self.delta, distance=dist, c=c, sigma=self._noise,
                                    steps_per_epoch=E)
        eps_cert = pnsgd_unlearning_epsilon(distance=dist, c=c, sigma=self._noise, steps=k * E, delta=self.delta)
        return dist, k, eps_cert

    def _certificate_for(self, j: int, removed: list[int], phase_steps: list[int], n: int) -> PNSGDCertificate:
        """The certificate of request j (from 1), whose phase ran ``phase_steps[j-1]`` steps if already run."""
        dist, k, eps_cert = self._certify(removed[:j], phase_steps[:j - 1], n)
        E = self.plan_.pnsgd.steps_per_epoch
        return PNSGDCertificate(
            operation="remove", theorem=self.plan_.pnsgd.theorem, epsilon=float(self.epsilon),
            delta=float(self.delta), epsilon_certified=eps_cert, request=j, n_removed=int(removed[j - 1]),
            distance=dist, epochs=k, steps=k * E, gradient_evaluations=k * E * int(self.batch_size))

    @serialised
    def remove(self, indices: Any = None, *, keys: Any = None) -> PNSGDCertificate:
        """Delete records (replaced by the dummy zero record) and unlearn; returns the certificate. Records are
        named by ORIGINAL row positions of ``fit``'s X (``indices``) or by record key (``keys``), exactly one.

        Repeated, already removed, unknown or out-of-range rows raise ``ValueError`` and change nothing.
        """
        check_is_fitted(self, "theta_")
        idx = removal_rows(indices, keys, active=~self._gone, record_keys=self.keys_, owner=self)
        n = self._X.shape[0]
        removed = [*self._removed, int(idx.size)]
        cert = self._certificate_for(len(removed), removed, self._phase_steps, n)
        X2, y2 = self._X.copy(), self._y.copy()
        X2[idx], y2[idx] = 0.0, 0.0
        rng = copy_generator(self._rng)  # adopted with the rest: an exception leaves the noise stream as it was
        theta = pnsgd_logistic(X2, y2, self.theta_, epochs=cert.epochs, eta=self.plan_.eta, lam=self.lam,
                               sigma=self._noise, batch_size=self.batch_size, radius=self._radius,
                               random_state=rng)
        gone = self._gone.copy()
        gone[idx] = True
        keys = None
        if self.keys_ is not None:  # a removed record's key must not stay in the model or its file
            keys = self.keys_.copy()
            keys[idx] = "" if keys.dtype.kind == "U" else 0
        # one statement: an interrupt leaves the model as it was or with the removal done in full
        self.__dict__.update(_X=X2, _y=y2, theta_=theta, _gone=gone, keys_=keys, _removed=removed, _rng=rng,
                             _phase_steps=[*self._phase_steps, cert.steps], _certificate=cert)
        return cert

    def add(self, X: Any, y: Any, *args: Any, **kwargs: Any) -> PNSGDCertificate:
        """Not supported (``supports_add = False``): Chien et al.'s sequential accounting covers deletions from a
        database of fixed size n. Raises NotImplementedError."""
        self._refuse_add("its unlearning certificates account for deletions from a fixed database of n rows. Refit "
                         "on the enlarged data instead.")

    @serialised
    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        """Save the fitted model without pickle (owner-only, atomic; HMAC-tagged under a key, as every lethe model
        file): θ, the rows (removed ones zeroed) and labels, which rows are gone, keys, the request history and the
        certificates. The generator state is not saved (secret): the loaded model draws fresh noise."""
        check_is_fitted(self, "theta_")
        arrays = {"X": self._X, "y": self._y, "gone": self._gone, "theta": self.theta_}
        if self.keys_ is not None:
            arrays["keys"] = self.keys_
        meta = {**_file_meta(self), "removed": list(self._removed), "phase_steps": list(self._phase_steps),
                "certificates": [] if self._certificate is None else [asdict(self._certificate)]}
        return save_model_file(path, arrays, meta, key=key, model=self)

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None,
             trust_unauthenticated: bool = False) -> PNSGDLogisticRegression:
        """Load a model written by :meth:`save` after authenticating it and checking it: the plan recomputed from
        the parameters and (n, d); rows finite in the unit ball, labels ±1, removed rows and labels zero and as many
        as the requests removed; θ finite within the projection radius; the request history's steps and the last
        certificate recomputed. :class:`lethe.io.ModelFileError` on any failure; nothing is loaded. A file without a
        valid tag is refused unless ``trust_unauthenticated=True`` (:func:`lethe.io.open_model_file`)."""
        arrays, meta, fail, origin = _open_file(cls, path, key, trust_unauthenticated)
        expected = {"X", "y", "gone", "theta"} | ({"keys"} if "keys" in arrays else set())
        if set(arrays) != expected:
            raise fail(f"expected arrays {sorted(expected)}. Found {sorted(arrays)}.")
        X, y, gone, theta = arrays["X"], arrays["y"], arrays["gone"], arrays["theta"]
        if X.dtype != np.float64 or X.ndim != 2 or not np.all(np.isfinite(X)):
            raise fail(f"X must be a finite float64 matrix. Found {X.dtype} {X.shape}.")
        n, d = X.shape
        try:
            est = cls(**meta["params"])
            est._validate_params()
            if n < est.batch_size:
                raise ValueError(f"batch_size must be <= the number of rows {n}. Found {est.batch_size}")
            est.plan_ = plan_convex_unlearning(est.epsilon, est.delta, n=n, d=d, lam=est.lam,
                                               batch_size=est.batch_size, radius=est.radius)
            est.classes_ = np.asarray(meta["classes"])
            if est.classes_.shape != (2,) or est.classes_[0] == est.classes_[1]:
                raise ValueError(f"classes must be 2 distinct labels. Found {meta['classes']!r}")
            removed, phase = list(meta["removed"]), list(meta["phase_steps"])
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in removed + phase) or \
                    len(removed) != len(phase) or any(v < 1 for v in removed):
                raise ValueError("removed and phase_steps must be equally long lists of integers (removed >= 1)")
        except (TypeError, ValueError, KeyError) as e:
            raise fail(f"its parameters are not valid: {e}.") from None
        if int(meta.get("n_features_in", -1)) != d:
            raise fail(f"n_features_in must be {d}. Found {meta.get('n_features_in')!r}.")
        est._noise = est.plan_.noise_std if est.noise_std is None else float(est.noise_std)
        est._radius = 1.0 / est.lam if est.radius is None else float(est.radius)
        if gone.dtype != np.bool_ or gone.shape != (n,) or int(gone.sum()) != sum(removed):
            raise fail(f"gone must mark the {sum(removed)} rows the requests removed. Found {gone.dtype} "
                       f"{gone.shape} with {int(gone.sum()) if gone.dtype == np.bool_ else '?'} marked.")
        if y.dtype != np.float64 or y.shape != (n,) or np.any(np.abs(y[~gone]) != 1.0) or np.any(y[gone] != 0.0):
            raise fail("y must be +1/-1 for the rows kept and 0 for the rows removed.")
        if np.any(X[gone] != 0.0) or np.any(np.linalg.norm(X, axis=1) > 1.0 + 1e-12):
            raise fail("rows must lie in the unit ball and the removed rows be zero.")
        if theta.dtype != np.float64 or theta.shape != (d,) or not np.all(np.isfinite(theta)) or \
                np.linalg.norm(theta) > est._radius * (1.0 + 1e-9):
            raise fail(f"theta must be {d} finite values within the projection radius {est._radius!r}.")
        keys = arrays.get("keys")
        _check_file_keys(keys, gone, fail)
        certs = [est._certificate_for(j, removed, phase, n) for j in range(1, len(removed) + 1)]
        if any(c.steps != s for c, s in zip(certs, phase, strict=True)):
            raise fail("the steps of the unlearning phases are not those the certificates call for.")
        saved = meta.get("certificates")
        if saved != ([asdict(certs[-1])] if certs else []):
            raise fail("the last certificate is not the one the request history certifies.")
        est.n_features_in_ = d
        if "feature_names_in" in meta:
            est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        est._X, est._y, est._gone, est.theta_ = X.copy(), y.copy(), gone.copy(), theta.copy()
        est.keys_ = None if keys is None else keys.copy()
        est._removed, est._phase_steps = removed, phase
        est._rng = check_random_state(None)  # fresh noise: the saved seed's stream is never reused
        est._certificate = certs[-1] if certs else None
        return set_origin(est, origin)

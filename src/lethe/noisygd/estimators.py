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
from numbers import Integral, Real
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from lethe._locking import SerialisedModel, serialised
from lethe._validation import store_init_args
from lethe.estimator_data import keys_of, removal_rows
from lethe.io import save_model_file
from lethe.model_origin import reports_model_origin, set_origin
from lethe.noisygd.certificate import NoisyGDCertificate
from lethe.noisygd.edit_stream import CuratorConfig, Database, EditRequest, NoisyGDCurator
from lethe.noisygd.estimator_io import check_file_keys as _check_file_keys
from lethe.noisygd.estimator_io import file_meta as _file_meta
from lethe.noisygd.estimator_io import open_file as _open_file
from lethe.noisygd.estimator_io import rows_to_unit_ball as _rows_to_unit_ball
from lethe.noisygd.models import BoundedMLPModel, LogisticModel, MLPModel
from lethe.noisygd.pnsgd import PNSGDCertificate, PNSGDLogisticRegression
from lethe.noisygd.schedule import ConvexSchedule, NonConvexSchedule, convex_schedule, nonconvex_schedule_for_loss

__all__ = ["NoisyGDBoundedMLPClassifier", "NoisyGDLogisticRegression", "NoisyGDMLPClassifier", "PNSGDCertificate",
           "PNSGDLogisticRegression"]

AnyModel = LogisticModel | MLPModel | BoundedMLPModel



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

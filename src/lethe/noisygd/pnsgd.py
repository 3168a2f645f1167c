"""Projected noisy mini-batch SGD learning and unlearning (Chien et al. 2024) as a scikit-learn classifier:
:class:`PNSGDLogisticRegression` and its :class:`PNSGDCertificate`. Front-end layer; rows are mapped to ‖x‖ ≤ 1 as in
:mod:`lethe.noisygd.estimators`."""

from __future__ import annotations

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
from lethe.io import save_model_file
from lethe.model_origin import reports_model_origin, set_origin
from lethe.noisygd.estimator_io import check_file_keys as _check_file_keys
from lethe.noisygd.estimator_io import file_meta as _file_meta
from lethe.noisygd.estimator_io import open_file as _open_file
from lethe.noisygd.estimator_io import rows_to_unit_ball as _rows_to_unit_ball
from lethe.noisygd.noisy_sgd import (
    plan_convex_unlearning,
    pnsgd_learning_shift,
    pnsgd_logistic,
    pnsgd_start_distance,
    pnsgd_unlearning_epochs,
    pnsgd_unlearning_epsilon,
)

__all__ = ["PNSGDCertificate", "PNSGDLogisticRegression"]


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

"""A scikit-learn classifier whose training records can be removed by noisy clipped fine-tuning (Koloskova et al.)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from lethe._locking import SerialisedModel, serialised
from lethe._rng import RandomState, check_random_state, copy_generator
from lethe._validation import store_init_args
from lethe.estimator_data import keys_of, removal_rows
from lethe.io import ModelFileError, open_model_file, save_model_file
from lethe.model_origin import reports_model_origin, set_origin
from lethe.nn.accounting import FineTuneSchedule, calibrate_finetune
from lethe.nn.models import build_module, check_spec
from lethe.nn.unlearning import NNUnlearningCertificate, flat_parameters, load_flat_parameters, train, unlearn

__all__ = ["NoisyFineTuneClassifier"]


@reports_model_origin
class NoisyFineTuneClassifier(SerialisedModel, ClassifierMixin, BaseEstimator):
    """Neural classifier with certified removal by noisy clipped fine-tuning (Koloskova et al., ICML 2025).

    ``fit`` trains the module of ``module`` (a JSON spec, :mod:`lethe.nn.models`) by plain SGD; ``remove(indices)``
    drops training rows and runs :func:`lethe.nn.unlearning.unlearn` on the rows kept, with (σ, T) from
    :func:`lethe.nn.accounting.calibrate_finetune` for (``epsilon``, ``delta``). The training rows are kept
    (``X_``, ``y_``): fine-tuning needs the retained data.

    Parameters
    ----------
    module : dict, optional
        Module spec; default ``{"kind": "mlp", "hidden": [32]}``.
    epsilon, delta : float
        Per-removal target (ε, δ).
    model_radius, grad_clip, lr, weight_decay : float
        C₀, C, η, λ of the noisy phase.
    unlearn_steps : int, optional
        Fix T (default: T minimising σ).
    batch_size : int
        Rows per step (training and unlearning).
    clipping : {"per_sample", "batch"}
    train_epochs, train_lr : int, float
        Plain SGD training.
    post_steps : int, post_lr : float or None, post_radius : float or None
        Plain SGD steps on the retained data after the noisy phase (post-processing), and the radius the model is
        projected onto before them.
    random_state : None, int or numpy.random.Generator

    A :class:`lethe.protocols.Unlearner`: ``remove(indices)`` takes ORIGINAL row positions of ``fit``'s X (as every
    lethe estimator; ``active_`` marks the rows still in, ``X_``/``y_`` hold only those, in original order) or
    ``remove(keys=...)`` record keys; ``add`` is not supported; ``certificate_`` is the last removal's certificate;
    ``save``/``load`` write and check a :mod:`lethe.io` file.

    ``fit``, ``remove`` and the predictions run under the instance's lock (:mod:`lethe._locking`): concurrent calls
    on one model are serialised. A fitted model refuses ``copy.copy``/``copy.deepcopy`` and pickle: the copy would
    share the secret noise stream (``rng_``) of later removals; ``sklearn.base.clone(model).fit(X, y)`` makes a
    second model, ``save``/``load`` persists one (with a fresh noise stream).
    """

    _fitted_attribute = "model_"
    _secret_state = ("the SECRET random state of its later removals' noise (rng_; whoever knows it can subtract the "
                     "noise; a loaded model draws a fresh stream) and the retained training rows")
    #: The :class:`lethe.protocols.Unlearner` protocol: removals only (``add`` raises NotImplementedError).
    supports_add: ClassVar[bool] = False

    def __init__(self, module: dict[str, Any] | None = None, *, epsilon: float = 1.0, delta: float = 1e-5,
                 model_radius: float = 5.0, grad_clip: float = 1.0, lr: float = 0.05, weight_decay: float = 0.0,
                 unlearn_steps: int | None = None, batch_size: int = 64, clipping: str = "per_sample",
                 train_epochs: int = 5, train_lr: float = 0.1, post_steps: int = 100, post_lr: float | None = None,
                 post_radius: float | None = 5.0, random_state: RandomState = None) -> None:
        store_init_args(self, locals())

    def _schedule(self) -> FineTuneSchedule:
        return calibrate_finetune(self.epsilon, self.delta, model_radius=self.model_radius,
                                  grad_clip=self.grad_clip, lr=self.lr, weight_decay=self.weight_decay,
                                  steps=self.unlearn_steps)

    @serialised
    def fit(self, X: Any, y: Any, sample_ids: Any = None) -> NoisyFineTuneClassifier:
        """Train on (X, y). ``sample_ids`` (or a DataFrame's index) name the records for ``remove(keys=...)``."""
        keys = keys_of(X, sample_ids)
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        classes, codes = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(f"y must contain at least 2 classes; got 1 class. Found {classes.size}.")
        schedule = self._schedule()  # validates the privacy parameters before any work
        spec = check_spec(self.module if self.module is not None else {"kind": "mlp", "hidden": [32]})
        rng = check_random_state(self.random_state)
        model = build_module(spec, X.shape[1], classes.size, random_state=rng)
        Xt = torch.tensor(X, dtype=torch.float32)
        yt = torch.as_tensor(codes, dtype=torch.int64)
        train(model, Xt, yt, epochs=self.train_epochs, lr=self.train_lr, batch_size=self.batch_size,
              random_state=rng)
        self.classes_ = classes
        self.model_ = model
        self.schedule_ = schedule
        self.X_, self.y_ = Xt, yt
        self.active_ = np.ones(X.shape[0], dtype=bool)
        self.keys_ = keys
        self.rng_ = rng
        self.certificates_: list[NNUnlearningCertificate] = []
        return self

    @property
    def certificate_(self) -> NNUnlearningCertificate | None:
        """The certificate of the last removal (None before the first): the :class:`lethe.protocols.Unlearner`
        protocol's latest certificate (all of them are in ``certificates_``)."""
        certs = self.__dict__.get("certificates_")
        return certs[-1] if certs else None

    @serialised
    def remove(self, indices: Any = None, *, keys: Any = None) -> NNUnlearningCertificate:
        """Remove training records as one request and return the certificate: by their ORIGINAL positions in
        ``fit``'s X (``indices``; a row keeps its position after others are removed) or by record key (``keys``:
        ``sample_ids`` given to ``fit``, or the index of the DataFrame it was fitted on). Exactly one of the two.

        On any error (unknown, repeated or already removed rows; no row left) the estimator is unchanged.
        """
        check_is_fitted(self, "model_")
        idx = removal_rows(indices, keys, active=self.active_, record_keys=self.keys_, owner=self)
        current = np.cumsum(self.active_)[idx] - 1  # positions of those rows in X_ (the retained rows)
        n = self.X_.shape[0]
        if n - idx.size < 1:
            raise ValueError(f"at least one row must remain. Found {n} rows and {idx.size} removals.")
        keep = torch.from_numpy(np.setdiff1d(np.arange(n), current))
        Xr, yr = self.X_[keep], self.y_[keep]
        # the run trains a copy of the module from a copy of the noise stream; both are adopted with the rest in
        # one statement, so an exception anywhere (KeyboardInterrupt included) leaves the model as it was or done
        model, rng = copy.deepcopy(self.model_), copy_generator(self.rng_)
        cert = unlearn(model, Xr, yr, schedule=self.schedule_, batch_size=self.batch_size,
                       clipping=self.clipping, post_steps=self.post_steps, post_lr=self.post_lr,
                       post_radius=self.post_radius, n_removed=int(idx.size), random_state=rng)
        active = self.active_.copy()
        active[idx] = False
        keys = None
        if self.keys_ is not None:  # a removed record's key must not stay in the model or its file
            keys = self.keys_.copy()
            keys[idx] = "" if keys.dtype.kind == "U" else 0
        self.__dict__.update(model_=model, rng_=rng, X_=Xr, y_=yr, active_=active, keys_=keys,
                             certificates_=[*self.certificates_, cert])
        return cert

    def add(self, X: Any, y: Any, *args: Any, **kwargs: Any) -> NNUnlearningCertificate:
        """Not supported (``supports_add = False``): noisy fine-tuning certifies removals only; adding records
        means training on them, which no certificate of Koloskova et al. covers. Raises NotImplementedError."""
        self._refuse_add("noisy clipped fine-tuning certifies removals only. Refit on the enlarged data instead.")

    # -- persistence ------------------------------------------------------------------------------------------------
    @serialised
    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        """Save the fitted model without pickle (:mod:`lethe.io`, owner-only, atomic): the module's parameters θ,
        the retained rows and their labels, which original rows are still in, record keys, the certificates.

        The noise stream (``rng_``) is NOT saved: it is secret (knowing it reveals the noise of later removals);
        the loaded model draws a fresh one. The file carries an HMAC-SHA256 tag that :meth:`load` checks, under the
        key ``key``, ``$LETHE_MODEL_KEY`` or the key file (``$LETHE_MODEL_KEY_FILE``, else
        ``~/.config/lethe/model.key``, created on the first save where none exists;
        :func:`lethe.io.save_model_file`)."""
        check_is_fitted(self, "model_")
        params = self.get_params(deep=False)
        rs = params["random_state"]
        params["random_state"] = int(rs) if isinstance(rs, int | np.integer) and not isinstance(rs, bool) else None
        arrays = {"theta": flat_parameters(self.model_), "X": self.X_.numpy(), "y": self.y_.numpy(),
                  "active": self.active_}
        if self.keys_ is not None:
            arrays["keys"] = self.keys_
        kind = self.classes_.dtype.kind
        classes = [int(c) if kind in "iub" else float(c) if kind == "f" else str(c) for c in self.classes_]
        meta = {"class": type(self).__name__, "params": params, "classes": classes,
                "n_features_in": int(self.n_features_in_), "schedule": self.schedule_.to_dict(),
                "certificates": [c.to_dict() for c in self.certificates_]}
        if hasattr(self, "feature_names_in_"):
            meta["feature_names_in"] = [str(c) for c in self.feature_names_in_]
        return save_model_file(path, arrays, meta, key=key, model=self)

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None,
             trust_unauthenticated: bool = False) -> NoisyFineTuneClassifier:
        """Load a model written by :meth:`save` after authenticating it (:func:`lethe.io.open_model_file`'s policy:
        refused without a valid tag unless ``trust_unauthenticated=True``, which every later certificate states) and
        checking it: the parameters valid and the schedule the one they calibrate, θ finite with the module's
        parameter count, the retained rows finite with one label of a known class each, as many as the original
        rows still in, removed keys blanked and kept ones distinct, and the certificates those of this schedule,
        removing exactly the rows marked out. Any failure raises :class:`lethe.io.ModelFileError`; nothing is
        loaded. The noise stream is fresh."""
        opened = open_model_file(path, key=key, trust_unauthenticated=trust_unauthenticated)
        arrays, meta = opened.arrays, opened.meta

        def fail(msg: str) -> ModelFileError:
            return ModelFileError(f"{path}: {msg} The file was edited or corrupted; it is refused.")

        if meta.get("class") != cls.__name__:
            raise ModelFileError(f"{path} holds a {meta.get('class')!r}, not a {cls.__name__}.")
        expected = {"theta", "X", "y", "active"} | ({"keys"} if "keys" in arrays else set())
        if set(arrays) != expected:
            raise fail(f"expected arrays {sorted(expected)}. Found {sorted(arrays)}.")
        try:
            est = cls(**meta["params"])
            schedule = est._schedule()
            spec = check_spec(est.module if est.module is not None else {"kind": "mlp", "hidden": [32]})
            classes = np.asarray(meta["classes"])
            d = int(meta["n_features_in"])
            if classes.ndim != 1 or classes.size < 2 or np.unique(classes).size != classes.size:
                raise ValueError(f"classes must be at least 2 distinct labels. Found {meta['classes']!r}")
            module = build_module(spec, d, classes.size, random_state=np.random.default_rng(0))
        except (TypeError, ValueError, KeyError) as e:
            raise fail(f"its parameters are not valid: {e}.") from None
        if meta.get("schedule") != schedule.to_dict():
            raise fail("its schedule is not the one its parameters calibrate.")
        theta, X, y, active = arrays["theta"], arrays["X"], arrays["y"], arrays["active"]
        n_params = sum(p.numel() for p in module.parameters())
        if theta.dtype != np.float64 or theta.shape != (n_params,) or not np.all(np.isfinite(theta)):
            raise fail(f"theta must be {n_params} finite float64 values. Found {theta.dtype} {theta.shape}.")
        if active.dtype != np.bool_ or active.ndim != 1:
            raise fail(f"active must be a 1-D boolean array. Found {active.dtype} {active.shape}.")
        m = int(np.count_nonzero(active))
        if X.dtype != np.float32 or X.shape != (m, d) or not np.all(np.isfinite(X)) or m < 1:
            raise fail(f"X must hold the {m} retained rows of {d} finite float32 features. Found {X.dtype} "
                       f"{X.shape}.")
        if y.dtype != np.int64 or y.shape != (m,) or (m and (y.min() < 0 or y.max() >= classes.size)):
            raise fail(f"y must hold {m} class codes in [0, {classes.size}). Found {y.dtype} {y.shape}.")
        keys = arrays.get("keys")
        if keys is not None:
            blank = "" if keys.dtype.kind == "U" else 0
            if keys.shape != active.shape or keys.dtype.kind not in "iuU" or np.any(keys[~active] != blank) or \
                    np.unique(keys[active]).size != m:
                raise fail("keys must be one per original row, distinct for the rows kept and blank for the rows "
                           "removed.")
        try:
            certs = [NNUnlearningCertificate.from_dict(c) for c in meta["certificates"]]
        except (TypeError, ValueError, KeyError) as e:
            raise fail(f"a certificate is not valid: {e}.") from None
        sched = schedule.to_dict()
        if any({k: getattr(c, k) for k in sched} != sched for c in certs):
            raise fail("a certificate was not issued under this model's schedule.")
        if sum(c.n_removed for c in certs) != active.size - m or (certs and certs[-1].n_retained != m):
            raise fail(f"the certificates remove {sum(c.n_removed for c in certs)} rows and leave "
                       f"{certs[-1].n_retained if certs else active.size}, but {active.size - m} of the "
                       f"{active.size} rows are marked removed.")
        load_flat_parameters(module, theta)
        module.eval()
        est.model_ = module
        est.classes_ = classes
        est.schedule_ = schedule
        est.n_features_in_ = d
        if "feature_names_in" in meta:
            est.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        est.X_, est.y_ = torch.from_numpy(X.copy()), torch.from_numpy(y.copy())
        est.active_ = active.copy()
        est.keys_ = None if keys is None else keys.copy()
        est.rng_ = check_random_state(None)  # never the saved seed's stream again: later noise must be fresh
        est.certificates_ = certs
        return set_origin(est, opened.origin)

    @serialised
    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities (softmax of the module's outputs)."""
        check_is_fitted(self, "model_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        with torch.no_grad():
            out = torch.softmax(self.model_(torch.as_tensor(X, dtype=torch.float32)), dim=1)
        return out.double().numpy()

    @serialised
    def predict(self, X: Any) -> np.ndarray:
        """Most probable class."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

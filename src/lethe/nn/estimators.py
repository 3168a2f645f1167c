"""A scikit-learn classifier whose training records can be removed by noisy clipped fine-tuning (Koloskova et al.)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from lethe._locking import SerialisedModel, serialised
from lethe._rng import RandomState, check_random_state
from lethe._validation import store_init_args
from lethe.nn.accounting import FineTuneSchedule, calibrate_finetune
from lethe.nn.models import build_module, check_spec
from lethe.nn.unlearning import NNUnlearningCertificate, train, unlearn

__all__ = ["NoisyFineTuneClassifier"]


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

    ``fit``, ``remove`` and the predictions run under the instance's lock (:mod:`lethe._locking`): concurrent calls
    on one model are serialised (indices of ``remove`` refer to ``X_`` as the call finds it). A fitted model
    refuses ``copy.copy``/``copy.deepcopy``: the copy would share the noise stream (``rng_``) of later removals;
    ``sklearn.base.clone(model).fit(X, y)`` makes a second model.
    """

    _fitted_attribute = "model_"

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
    def fit(self, X: Any, y: Any) -> NoisyFineTuneClassifier:
        """Train on (X, y)."""
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
        self.rng_ = rng
        self.certificates_: list[NNUnlearningCertificate] = []
        return self

    @serialised
    def remove(self, indices: Any) -> NNUnlearningCertificate:
        """Remove training rows ``indices`` (positions in the current ``X_``) as one request; return the certificate.

        On any error the estimator is unchanged.
        """
        check_is_fitted(self, "model_")
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = self.X_.shape[0]
        if idx.size == 0 or np.unique(idx).size != idx.size or idx.min() < 0 or idx.max() >= n:
            raise ValueError(f"indices must be distinct positions among the {n} current rows. Found {idx.size} "
                             "indices with duplicates or out of range.")
        if n - idx.size < 1:
            raise ValueError(f"at least one row must remain. Found {n} rows and {idx.size} removals.")
        keep = torch.from_numpy(np.setdiff1d(np.arange(n), idx))
        Xr, yr = self.X_[keep], self.y_[keep]
        cert = unlearn(self.model_, Xr, yr, schedule=self.schedule_, batch_size=self.batch_size,
                       clipping=self.clipping, post_steps=self.post_steps, post_lr=self.post_lr,
                       post_radius=self.post_radius, n_removed=int(idx.size), random_state=self.rng_)
        self.X_, self.y_ = Xr, yr
        self.certificates_.append(cert)
        return cert

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

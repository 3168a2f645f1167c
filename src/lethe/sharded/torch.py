"""A small torch module as a deterministic scikit-learn classifier with ``partial_fit``: the torch member of
:class:`lethe.sharded.ShardedClassifier` (exact sharded unlearning, SISA; Bourtoule et al., IEEE S&P 2021).

Imported from :mod:`lethe.sharded` as ``lethe.sharded.TorchShardClassifier`` (its public path); torch is imported only
inside the methods that use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted

from lethe._validation import store_init_args

__all__ = ["TorchShardClassifier", "shift_images"]


def shift_images(rows: Any, shifts: np.ndarray, chw: tuple[int, int, int], max_shift: int) -> Any:
    """Rows (a torch tensor of shape (B, C·H·W), images in C order) translated by ``shifts[b] = (dy, dx)``, each in
    [-``max_shift``, ``max_shift``], zero filled: out[b, c, i, j] = img[b, c, i + dy, j + dx] where that pixel exists,
    else 0."""
    import torch

    c, h, w = chw
    m = max_shift
    b = rows.shape[0]
    padded = torch.nn.functional.pad(rows.reshape(b, c, h, w), (m, m, m, m))
    sh = torch.from_numpy(np.asarray(shifts, dtype=np.int64) + m)
    r = (sh[:, 0, None] + torch.arange(h))[:, None, :, None]
    col = (sh[:, 1, None] + torch.arange(w))[:, None, None, :]
    out = padded[torch.arange(b)[:, None, None, None], torch.arange(c)[None, :, None, None], r, col]
    return out.reshape(b, c * h * w)


# -- a torch module as a partial_fit classifier -----------------------------------------------------------------------
class TorchShardClassifier(ClassifierMixin, BaseEstimator):
    """A small torch module trained by plain SGD (no momentum, no optimizer state), as a scikit-learn classifier with
    ``partial_fit`` — the torch member of a :class:`ShardedClassifier`.

    Deterministic: the module is initialised from ``random_state`` (an int is required at ``fit``; the sharded model
    sets it per shard) and each ``partial_fit`` call k shuffles its rows with a generator seeded by
    (``random_state``, k). Its state — the parameters (``state_dict``), the call count and the classes — is the
    checkpoint; float64 throughout.

    Parameters
    ----------
    module : dict or callable
        A JSON module spec of :mod:`lethe.nn.models` (``{"kind": "mlp", "hidden": [32]}``; saved in the file, so a
        saved model loads alone), or a factory ``module(n_features, n_classes) -> torch.nn.Module`` without buffers
        (a saved model then loads only with ``load(path, estimator=...)`` giving the factory again).
    epochs : int
        Passes over the rows per ``partial_fit`` call.
    batch_size : int
    lr : float
        SGD step size η.
    random_state : int
    augment : dict, optional
        Data augmentation of image rows during training (never at prediction):
        ``{"kind": "shift", "image_shape": [H, W] or [C, H, W], "max_shift": m}`` translates each row of every
        minibatch, read as an image of ``image_shape`` (C order), by (dy, dx) drawn uniformly from {-m, ..., m}²,
        filling with zeros: pixel (i, j) of the shifted image is pixel (i + dy, j + dx) of the original. The shifts
        are drawn from the call's generator (seeded by (``random_state``, call)), so training stays a deterministic
        function of the rows, their order and the seed: exactness is kept. A JSON spec (saved with the model).
    lr_schedule : {"constant", "linear"}
        The step size of step t of a ``partial_fit`` call of T steps (T = ``epochs`` × ⌈rows / ``batch_size``⌉):
        η (constant, the default) or η·(1 − t/T) (linear decay to 0 over the call; each call, i.e. each slice stage,
        starts again from η).
    """

    def __init__(self, module: dict[str, Any] | Callable[[int, int], Any] | None = None, *, epochs: int = 1,
                 batch_size: int = 64, lr: float = 0.1, random_state: int | None = None,
                 augment: dict[str, Any] | None = None, lr_schedule: str = "constant") -> None:
        store_init_args(self, locals())

    def _build(self, n_features: int, n_classes: int) -> Any:
        import torch

        from lethe.nn.models import build_module

        seed = self._seed()
        spec = {"kind": "mlp", "hidden": [32]} if self.module is None else self.module
        if isinstance(spec, dict):
            module = build_module(spec, n_features, n_classes, random_state=np.random.default_rng(seed))
        elif callable(spec):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                module = spec(n_features, n_classes)
        else:
            raise TypeError(f"module must be a spec dict or a factory. Found {type(spec).__name__}.")
        if len(list(module.buffers())):
            raise ValueError("module must have no buffers (e.g. no BatchNorm): its state must be its parameters.")
        return module.double()

    def _seed(self) -> int:
        rs = self.random_state
        if isinstance(rs, bool) or not isinstance(rs, int | np.integer) or int(rs) < 0:
            raise TypeError(f"TorchShardClassifier needs an int random_state >= 0 (set per shard). Found {rs!r}.")
        return int(rs)

    def _augment_spec(self, n_features: int) -> tuple[tuple[int, int, int], int] | None:
        """((C, H, W), m) of a valid ``augment`` spec for rows of ``n_features``; None without augmentation."""
        spec = self.augment
        if spec is None:
            return None
        if not isinstance(spec, dict):
            raise TypeError(f"augment must be a dict spec or None. Found {type(spec).__name__}.")
        unknown = sorted(set(spec) - {"kind", "image_shape", "max_shift"})
        if spec.get("kind") != "shift" or unknown:
            raise ValueError(f"augment must be {{'kind': 'shift', 'image_shape': [...], 'max_shift': m}}. "
                             f"Found kind {spec.get('kind')!r}, unknown keys {unknown}.")
        shape, m = spec.get("image_shape"), spec.get("max_shift")
        if (not isinstance(shape, list | tuple) or len(shape) not in (2, 3)
                or not all(isinstance(v, int | np.integer) and not isinstance(v, bool) and v >= 1 for v in shape)):
            raise ValueError(f"augment['image_shape'] must be 2 or 3 positive integers. Found {shape!r}.")
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 0:
            raise ValueError(f"augment['max_shift'] must be an integer >= 0. Found {m!r}.")
        chw = (1, *shape) if len(shape) == 2 else tuple(shape)
        c, h, w = (int(v) for v in chw)
        if c * h * w != n_features:
            raise ValueError(f"augment['image_shape'] {list(shape)} holds {c * h * w} values; the rows have "
                             f"{n_features} features.")
        return (c, h, w), int(m)

    def _check_schedule(self) -> None:
        if self.lr_schedule not in ("constant", "linear"):
            raise ValueError(f"lr_schedule must be 'constant' or 'linear'. Found {self.lr_schedule!r}.")

    def partial_fit(self, X: Any, y: Any, classes: Any = None) -> TorchShardClassifier:
        """One call: ``epochs`` passes of minibatch SGD over (X, y) in an order drawn from (random_state, call)."""
        import torch

        X = check_array(X, dtype=np.float64)
        y = np.asarray(y)
        check_classification_targets(y)
        aug = self._augment_spec(X.shape[1])  # before any state changes: a bad spec changes nothing
        self._check_schedule()
        if not hasattr(self, "module_"):
            if classes is None:
                raise ValueError("classes must be given at the first partial_fit call.")
            self.classes_ = np.unique(np.asarray(classes))
            self.n_features_in_ = X.shape[1]
            self.module_ = self._build(X.shape[1], len(self.classes_))
            self.n_calls_ = 0
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features; this model was fitted with {self.n_features_in_}.")
        yi = np.searchsorted(self.classes_, y)
        if np.any(yi >= len(self.classes_)) or np.any(self.classes_[np.minimum(yi, len(self.classes_) - 1)] != y):
            raise ValueError("y holds a label not in classes.")
        gen = np.random.default_rng(np.random.SeedSequence([self._seed(), self.n_calls_]))
        Xt, yt = torch.from_numpy(X), torch.from_numpy(yi.astype(np.int64))
        opt = torch.optim.SGD(self.module_.parameters(), lr=self.lr)
        self.module_.train()
        n_steps, step = self.epochs * -(-X.shape[0] // self.batch_size), 0
        for _ in range(self.epochs):
            order = torch.from_numpy(gen.permutation(X.shape[0]))
            for start in range(0, X.shape[0], self.batch_size):
                idx = order[start:start + self.batch_size]
                xb = Xt[idx]
                if aug is not None and aug[1] > 0:
                    xb = shift_images(xb, gen.integers(-aug[1], aug[1] + 1, size=(len(idx), 2)), *aug)
                if self.lr_schedule == "linear":
                    opt.param_groups[0]["lr"] = self.lr * (1.0 - step / n_steps)
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(self.module_(xb), yt[idx])
                loss.backward()
                opt.step()
                step += 1
        self.module_.eval()
        self.n_calls_ += 1
        return self

    def fit(self, X: Any, y: Any) -> TorchShardClassifier:
        """A fresh module, then one :meth:`partial_fit` call on all rows."""
        self._augment_spec(check_array(X, dtype=np.float64).shape[1])  # a bad spec leaves a fitted model as it was
        self._check_schedule()
        for attr in ("module_", "classes_", "n_calls_", "n_features_in_"):
            self.__dict__.pop(attr, None)
        return self.partial_fit(X, y, classes=np.unique(np.asarray(y)))

    def predict_proba(self, X: Any) -> np.ndarray:
        import torch

        check_is_fitted(self, "module_")
        X = check_array(X, dtype=np.float64)
        with torch.no_grad():
            return torch.softmax(self.module_(torch.from_numpy(X)), dim=1).numpy()

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]

    # persistence (used by the sharded model's save/load): parameters as float64 arrays, the rest as JSON
    def _state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        arrays = {k: v.detach().cpu().numpy().copy() for k, v in self.module_.state_dict().items()}
        return arrays, {"n_calls": int(self.n_calls_), "classes": self.classes_.tolist(),
                        "n_features_in": int(self.n_features_in_)}

    def _set_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        import torch

        self.classes_ = np.asarray(meta["classes"])
        self.n_features_in_ = int(meta["n_features_in"])
        self.module_ = self._build(self.n_features_in_, len(self.classes_))
        expected = set(self.module_.state_dict())
        if set(arrays) != expected:
            raise ValueError(f"The saved module's parameters {sorted(arrays)} differ from the module's "
                             f"{sorted(expected)}: the file was not written for this module.")
        self.module_.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float64)) for k, v in arrays.items()})
        self.module_.eval()
        self.n_calls_ = int(meta["n_calls"])

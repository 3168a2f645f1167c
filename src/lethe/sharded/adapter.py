"""Curator adapter ``sharded``: exact unlearning by sharding (SISA) for scikit-learn classifiers (:mod:`lethe.sharded`).

Listed in the registry of families (:mod:`lethe.families`), which imports it when the mechanism is used. A model is
a :class:`lethe.sharded.ShardedClassifier` over one estimator from a small allow-list (:data:`ESTIMATORS`),
partitioned by a keyed hash of the dataset's record keys: the curator's keyed digests of the keys (the records table
holds those, never a plain key), handed to :meth:`ShardedAdapter.train` by the trainer (``uses_record_keys``). A
batch of deletions retrains only the shards that held the records; the certificate is exact (ε = 0, δ = 0): the new
version equals, prediction for prediction, the model trained from scratch on the remaining records with the same
hash key and seeds (``docs/sharded.md``, the claim and its proof; ``tests/curator/test_sharded_service.py`` checks
it through the service).

What is kept, and where. The artifact holds the fitted shards and checkpoints (skops bytes, packed in one array),
the SECRET hash key of the partition, the record keys (digests) of the records it is trained on, their shards, the
seeds, and a SHA-256 of the training data — every array is secret (:attr:`ShardedAdapter.secret_arrays`): publishing
the shards would publish, version after version, which shard changed and how (docs/sharded.md, "What consecutive
releases reveal"); the service serves predictions only. The training rows are *not* in the artifact (they are the
curator's current data, handed back at each removal and checked against the digest): a version after a deletion
holds neither the deleted record's values nor its key digest (the state is compacted to the remaining records).
The file is authenticated by the curator's artifact store (HMAC over arrays, metadata and binding).

Certificates: ``{"operation", "guarantee": "exact", "epsilon": 0.0, "delta": 0.0, "retrained", "n_removed",
"n_remaining", "n_shards", "n_shards_retrained"}``; the curator's allow-list (:mod:`lethe.curator.public`) keeps the
guarantee, ε, δ and the counts, and drops the shard fields for everyone: the index of the retrained shard is never
stored (with the hash key it places the deleted record; operators have the artifact if they need it).
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, ClassVar

import numpy as np

from lethe.curator.adapters import MechanismAdapter
from lethe.curator.artifacts import Artifact, ArtifactError

__all__ = ["ESTIMATORS", "ShardedAdapter"]

#: The estimators a sharded model may use, by name: (scikit-learn class path, defaults the service sets).
#: HistGradientBoosting's early stopping is off by default (its validation split would depend on the shard's size;
#: exactness holds either way, accuracy comparisons are cleaner without).
ESTIMATORS: dict[str, tuple[str, dict[str, Any]]] = {
    "hist-gradient-boosting": ("sklearn.ensemble.HistGradientBoostingClassifier", {"early_stopping": False}),
    "logistic-regression": ("sklearn.linear_model.LogisticRegression", {}),
    "mlp": ("sklearn.neural_network.MLPClassifier", {}),
}
_MAX_SHARDS = 1024
_CACHE_LOCK = threading.Lock()
_CACHE: dict[str, Any] = {}  # digest of a version's shards -> its loaded model (prediction only)


def _estimator_class(name: str) -> type:
    import importlib

    module, _, cls = ESTIMATORS[name][0].rpartition(".")
    return getattr(importlib.import_module(module), cls)  # type: ignore[no-any-return]


def _data_digest(X: np.ndarray, y: np.ndarray) -> str:
    """SHA-256 of the training data (features as float64 bytes, labels as JSON): the data a version is for."""
    h = hashlib.sha256(b"lethe-sharded-data-v1\x00")
    X = np.ascontiguousarray(X, dtype=np.float64)
    h.update(json.dumps(list(X.shape)).encode())
    h.update(X.tobytes())
    h.update(json.dumps(np.asarray(y).tolist()).encode())
    return h.hexdigest()


class ShardedAdapter(MechanismAdapter):
    """Exact sharded unlearning (SISA; Bourtoule et al. 2021) through :class:`lethe.sharded.ShardedClassifier`.

    Parameters (JSON): ``estimator`` (one of :data:`ESTIMATORS`, default ``"hist-gradient-boosting"``),
    ``n_shards`` (S, default 8), ``aggregation`` (``"mean_proba"``, default, or ``"vote"``), and any parameter of the
    chosen estimator except ``random_state`` (the service draws the seeds), e.g. ``max_iter``, ``learning_rate``,
    ``C``, ``hidden_layer_sizes`` — validated by scikit-learn's own parameter checks.
    """

    name = "sharded"
    uses_record_keys: ClassVar[bool] = True
    secret_arrays = ("hash_key", "keys", "active", "shard_of", "slice_of", "seeds")
    #: needed to predict (so not stripped by :attr:`secret_arrays`), never published (``public_model``)
    unpublished_arrays: ClassVar[tuple[str, ...]] = ("models",)
    _OWN: ClassVar[dict[str, Any]] = {"estimator": "hist-gradient-boosting", "n_shards": 8,
                                      "aggregation": "mean_proba"}

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        from lethe.sharded import ShardedClassifier

        name = params.get("estimator", cls._OWN["estimator"])
        if not isinstance(name, str) or name not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {sorted(ESTIMATORS)}. Found {name!r}.")
        S = params.get("n_shards", cls._OWN["n_shards"])
        if isinstance(S, bool) or not isinstance(S, int):
            raise TypeError(f"n_shards must be an integer. Found {type(S).__name__}.")
        if not 1 <= S <= _MAX_SHARDS:
            raise ValueError(f"n_shards must be in [1, {_MAX_SHARDS}]. Found {S}.")
        agg = params.get("aggregation", cls._OWN["aggregation"])
        if agg not in ShardedClassifier.aggregations:
            raise ValueError(f"aggregation must be one of {list(ShardedClassifier.aggregations)}. Found {agg!r}.")
        est_params = {k: v for k, v in params.items() if k not in cls._OWN}
        proto = _estimator_class(name)()
        allowed = sorted(set(proto.get_params(deep=False)) - {"random_state"})
        unknown = sorted(set(est_params) - set(allowed))
        if unknown:
            raise ValueError(f"Unknown parameter(s) for mechanism {cls.name!r} with estimator {name!r}: {unknown}. "
                             f"Allowed: {['estimator', 'n_shards', 'aggregation', *allowed]}.")
        proto.set_params(**{**ESTIMATORS[name][1], **est_params})
        try:
            proto._validate_params()  # scikit-learn's own checks: name, rule and value
        except Exception as exc:  # InvalidParameterError is a ValueError and a TypeError
            raise ValueError(str(exc)) from None
        return {"estimator": name, "n_shards": int(S), "aggregation": agg, **est_params}

    def _prototype(self) -> Any:
        name = self.params["estimator"]
        est_params = {k: v for k, v in self.params.items() if k not in self._OWN}
        if "hidden_layer_sizes" in est_params and isinstance(est_params["hidden_layer_sizes"], list):
            est_params["hidden_layer_sizes"] = tuple(est_params["hidden_layer_sizes"])
        return _estimator_class(name)(**{**ESTIMATORS[name][1], **est_params})

    # -- model <-> artifact ---------------------------------------------------------------------------------------
    def _artifact(self, model: Any, X: np.ndarray, y: np.ndarray, random_state: int) -> Artifact:
        """The artifact of ``model`` whose remaining rows are (X, y): compacted to those rows, without the rows."""
        small = model.compacted()
        arrays, meta = small.state()
        arrays = {k: v for k, v in arrays.items() if k not in ("X", "y")}
        meta.pop("certificate", None)  # names the retrained shards: the service keeps its public fields only
        blobs, packed, offset = [], [], 0
        for k in sorted(arrays):
            a = arrays[k]
            if k == "prototype" or (k.startswith("shard") and "_stage" in k):
                if a.dtype != np.uint8:
                    raise TypeError(f"shard state {k!r} must be skops bytes. Found dtype {a.dtype}.")
                blobs.append([k, offset, int(a.size)])
                packed.append(a)
                offset += int(a.size)
                del arrays[k]
        arrays["models"] = np.concatenate(packed) if packed else np.zeros(0, dtype=np.uint8)
        arrays["hash_key"] = np.frombuffer(bytes.fromhex(meta.pop("key_hex")), dtype=np.uint8)
        n = int(small.keys_.shape[0])
        return Artifact(arrays=arrays, meta={
            "mechanism": self.name, "n": n, "classes": meta.get("classes"), "estimator": self.params["estimator"],
            "state": meta, "blobs": blobs, "data_sha256": _data_digest(X, y), "random_state": int(random_state)})

    @classmethod
    def check_artifact(cls, artifact: Artifact, n_features: int | None, params: dict[str, Any] | None) -> None:
        """The sharded state's structure, without the rows (the shards themselves are rebuilt, type-checked and
        checked against the data's digest when a removal or a prediction uses them): every secret and packed array
        present; the hash key ≥ 16 bytes; the packed shard entries inside ``models``; one key per record; the
        partition's S, the aggregation and the estimator the model's parameters; the features the dataset's."""
        a, m = artifact.arrays, artifact.meta
        for k in (*cls.secret_arrays, *cls.unpublished_arrays):
            if k not in a:
                raise ArtifactError(f"the sharded state has no array {k!r}.")
        if a["hash_key"].dtype != np.uint8 or a["hash_key"].size < 16 or a["models"].dtype != np.uint8:
            raise ArtifactError("the sharded state's hash key (>= 16 bytes) and packed shards must be bytes.")
        state = m.get("state")
        if not isinstance(state, dict) or not isinstance(m.get("blobs"), list):
            raise ArtifactError("the sharded state's partition or packed entries are missing.")
        try:
            cls._blobs(artifact)
        except (ValueError, TypeError) as exc:
            raise ArtifactError(str(exc)) from None
        if a["keys"].shape[0] != int(m["n"]):
            raise ArtifactError(f"the sharded state holds {a['keys'].shape[0]} keys for n = {m['n']} records.")
        d = state.get("n_features_in")
        if n_features is not None and d != n_features:
            raise ArtifactError(f"the sharded state is for {d!r} features; the dataset has {n_features}.")
        if params is not None:
            for mine, theirs in (("n_shards", state.get("n_shards")), ("aggregation", state.get("aggregation")),
                                 ("estimator", m.get("estimator"))):
                if params.get(mine) != theirs:
                    raise ArtifactError(f"the sharded state's {mine}={theirs!r} differs from the model's "
                                        f"{params.get(mine)!r}.")

    @staticmethod
    def _blobs(artifact: Artifact) -> dict[str, np.ndarray]:
        """The packed entries (prototype, shards' stages) of ``artifact``'s ``models`` array, by name."""
        models, out = artifact.arrays["models"], {}
        for name, offset, length in artifact.meta["blobs"]:
            if not (0 <= int(offset) and int(offset) + int(length) <= models.size):
                raise ValueError(f"the sharded state's entry {name!r} lies outside its packed shards.")
            out[name] = models[int(offset):int(offset) + int(length)]
        return out

    @staticmethod
    def _unpack(artifact: Artifact) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        a, m = artifact.arrays, artifact.meta
        for k in (*ShardedAdapter.secret_arrays, *ShardedAdapter.unpublished_arrays):
            if k not in a:
                raise ValueError(f"the sharded state has no array {k!r}.")
        arrays = {k: v for k, v in a.items() if k not in ("models", "hash_key")}
        arrays.update(ShardedAdapter._blobs(artifact))
        meta = {**m["state"], "key_hex": bytes(a["hash_key"]).hex()}
        return arrays, meta

    def model(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, *, lazy: bool = False) -> Any:
        """The sharded model of a version, over its training data (X, y) — checked to be the data it was trained
        on — with the invariant checks of :meth:`lethe.sharded.ShardedClassifier.load`. ``lazy``: the shards stay
        bytes (a removal rebuilds only the shards it retrains and carries the others over byte for byte)."""
        from lethe.sharded import ShardedClassifier

        if artifact.meta.get("data_sha256") != _data_digest(X, y):
            raise ValueError("the data handed to the sharded model differ from the data its version was trained on "
                             "(rows, order or values): removal would not be exact.")
        arrays, meta = self._unpack(artifact)
        arrays["X"], arrays["y"] = np.asarray(X, dtype=np.float64), np.asarray(y)
        return ShardedClassifier.from_state(arrays, meta, source="the sharded artifact", lazy=lazy)

    # -- the mechanism ----------------------------------------------------------------------------------------------
    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator, *,
              keys: Any = None) -> tuple[Artifact, dict[str, Any]]:
        """Fit S shards on (X, y), partitioned by the keyed hash of ``keys`` (the records' key digests, one per
        row; the trainer passes them). The hash key is drawn from the operating system; the seeds from ``rng``."""
        from lethe.sharded import ShardedClassifier

        if keys is None:
            raise ValueError("mechanism 'sharded' needs the record keys of the rows (the curator passes them).")
        keys = np.asarray([str(k) for k in keys])
        if keys.shape != (X.shape[0],):
            n_keys = keys.size
            raise ValueError(f"keys must hold one key per row ({X.shape[0]}). Found {n_keys} key(s).")
        y = np.asarray(y)
        if np.unique(y).size < 2:
            raise ValueError(f"mechanism 'sharded' needs at least 2 label values. Found {np.unique(y).size}.")
        random_state = int(rng.integers(0, 2**63 - 1))
        model = ShardedClassifier(self._prototype(), n_shards=self.params["n_shards"],
                                  aggregation=self.params["aggregation"], random_state=random_state)
        model.fit(np.asarray(X, dtype=np.float64), y, sample_ids=keys)
        cert = {"operation": "train", "guarantee": "exact", "epsilon": 0.0, "delta": 0.0, "retrained": False,
                "n": int(X.shape[0])}
        return self._artifact(model, X, y, random_state), cert

    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        """Remove rows ``indices`` of (X, y) — the data of ``artifact`` — retraining only the shards that held them.
        ``rng`` is not used: an exact removal draws nothing (the seeds are the version's)."""
        model = self.model(artifact, X, y, lazy=True)
        idx = np.asarray(indices, dtype=np.int64)
        cert = model.remove(indices=idx)
        keep = np.ones(X.shape[0], dtype=bool)
        keep[idx] = False
        out = {"operation": "remove", **cert.public_dict(),
               "retrained": bool(cert.n_shards_retrained == cert.n_shards)}
        return self._artifact(model, np.asarray(X)[keep], np.asarray(y)[keep],
                              int(artifact.meta["random_state"])), out

    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        """Predictions of the shards' aggregate. Reads the packed shards only (the serving path strips the secret
        arrays); each entry is rebuilt by skops from trusted types only (:data:`lethe.sharded.SKOPS_TRUSTED`)."""
        state = artifact.meta["state"]
        d = int(state["n_features_in"])
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"features must have {d} columns. Found shape {X.shape}.")
        models = artifact.arrays["models"]
        tag = hashlib.sha256(models.tobytes()).hexdigest() + json.dumps(artifact.meta["blobs"])
        with _CACHE_LOCK:
            model = _CACHE.get(tag)
        if model is None:
            model = self._predictor(artifact)
            with _CACHE_LOCK:
                if len(_CACHE) >= 8:
                    _CACHE.clear()
                _CACHE[tag] = model
        return np.asarray(model.predict(np.asarray(X, dtype=np.float64)))

    @staticmethod
    def _predictor(artifact: Artifact) -> Any:
        """A prediction-only :class:`~lethe.sharded.ShardedClassifier` (``from_state(..., predict_only=True)``): the
        shards' final estimators, the classes and the aggregation (no rows, keys or checkpoints); skops rebuilds
        trusted types only (:data:`lethe.sharded.SKOPS_TRUSTED`)."""
        from lethe.sharded import ShardedClassifier

        return ShardedClassifier.from_state(ShardedAdapter._blobs(artifact), artifact.meta["state"],
                                            source="the sharded state", predict_only=True)

    def summary(self, artifact: Artifact) -> dict[str, Any]:
        m = artifact.meta
        return {"mechanism": self.name, "guarantee": "exact", "epsilon": 0.0, "delta": 0.0, "n": int(m["n"]),
                "estimator": self.params["estimator"], "n_shards": int(self.params["n_shards"])}

    # -- the audit (lethe.sharded.audit) ------------------------------------------------------------------
    def predict_proba(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        """Class probabilities of the shards' aggregate (columns: the version's classes), from the packed shards
        only, as :meth:`predict` reads them: what the audit compares with the retrained twin's."""
        return np.asarray(self._predictor(artifact).predict_proba(np.asarray(X, dtype=np.float64)))

    def retrained_twin(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, keys: Any) -> Any:
        """The model trained FROM SCRATCH on (X, y) with record keys ``keys``, the version's secret hash key, its
        seeds and the model's estimator: what the version must equal, prediction for prediction, if its removals
        were exact (docs/sharded.md). Nothing of the version but its key and random state is used."""
        from lethe.sharded import ShardedClassifier

        return ShardedClassifier(self._prototype(), n_shards=self.params["n_shards"],
                                 aggregation=self.params["aggregation"], key=bytes(artifact.arrays["hash_key"]),
                                 random_state=int(artifact.meta["random_state"])).fit(
            np.asarray(X, dtype=np.float64), np.asarray(y), sample_ids=np.asarray([str(k) for k in keys]))

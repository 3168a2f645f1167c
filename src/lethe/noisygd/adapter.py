"""Curator adapter ``noisy-gd``: the service adapter of Noisy-GD (Chourasia & Shah 2023), moved from
:mod:`lethe.curator.adapters` into its family's package (issue 34).

Listed in the registry of families (:mod:`lethe.families`), which imports it when the mechanism is used. The
interface it implements is :class:`lethe.curator.adapters.MechanismAdapter`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from lethe.curator.adapters import MechanismAdapter, label_classes, label_codes
from lethe.curator.artifacts import Artifact, ArtifactError, finite_array

__all__ = ["NoisyGDAdapter"]


class NoisyGDAdapter(MechanismAdapter):
    """Noisy-GD learning and unlearning (Chourasia & Shah 2023, Alg. 2, Thm 5.1) via
    :class:`lethe.noisygd.edit_stream.NoisyGDCurator`, for binary logistic regression on rows with ‖x‖ ≤ 1
    (L = 1, β = 1/4).

    Parameters (JSON): ``lam`` (λ), ``q`` (Rényi order), ``epsilon_dp``, ``epsilon_dd`` (targets of Thm 5.1),
    ``r`` (records per edit request), ``p`` (adaptivity of requesters for Thm 4.3: how many published models a
    requester may see before choosing its request; 0 = non-adaptive). The schedule (η, σ², ρ, K_A, K_Ā) is that of
    Thm 5.1 for the dataset size at training. A batch of m deletions is carried out as ⌈m / r⌉ edit requests of at
    most r records.

    Deletions replace a record by the dummy record (all-zero row, label 0; the paper's footnote 1), so the database
    size n stays fixed. The curator service deletes the raw record; the artifact only counts the dummies
    (``n_dummies``), and the database handed to the mechanism is the current records followed by that many dummies
    (Noisy-GD's full-batch mean gradient does not depend on the order of records).

    Secret state: none is kept. The model θ is what is published (f_pub = identity), and each operation draws its
    noise from a fresh generator given by the service, so no generator state is stored.
    """

    name = "noisy-gd"
    secret_arrays = ()
    _DEFAULTS: ClassVar[dict[str, Any]] = {"lam": 0.1, "q": 2.0, "epsilon_dp": 1.0, "epsilon_dd": 0.5, "r": 1, "p": 0}

    @classmethod
    def check_artifact(cls, artifact: Artifact, n_features: int | None, params: dict[str, Any] | None) -> None:
        """``theta`` finite of the dataset's dimension; the configuration's λ and q equal the parameters."""
        finite_array(artifact.arrays, "theta", n_features)
        config = artifact.meta.get("config")
        if not isinstance(config, dict):
            raise ArtifactError("the Noisy-GD configuration is missing.")
        if params is not None:
            for k in ("lam", "q"):
                if not math.isclose(float(config.get(k, math.nan)), float(params[k]), rel_tol=1e-12):
                    raise ArtifactError(f"the state's {k}={config.get(k)!r} differs from the model's {params[k]!r}.")

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        from lethe.noisygd.schedule import convex_schedule

        full = cls._with_defaults(params, cls._DEFAULTS)
        # validate every value now (errors say name, rule and value), on a nominal size
        convex_schedule(lipschitz=1.0, smoothness=0.25, lam=full["lam"], n=100, d=2, r=full["r"], q=full["q"],
                        epsilon_dp=full["epsilon_dp"], epsilon_dd=full["epsilon_dd"])
        if isinstance(full["p"], bool) or not isinstance(full["p"], int) or full["p"] < 0:
            raise ValueError(f"p must be an integer >= 0. Found {full['p']!r}.")
        return full

    @staticmethod
    def _encode(y: np.ndarray, classes: list[Any] | None) -> tuple[np.ndarray, list[Any]]:
        """Labels as ±1 and the two classes as JSON values (:func:`lethe.curator.adapters.label_classes`: a schema
        dataset's declared strings included)."""
        if classes is None:
            classes = label_classes(y)
            if len(classes) != 2:
                raise ValueError(f"Noisy-GD logistic regression needs exactly 2 label values. Found {len(classes)}.")
        return np.where(label_codes(y, classes) == 1, 1.0, -1.0), list(classes)

    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        from lethe.noisygd.edit_stream import CuratorConfig, Database, NoisyGDCurator
        from lethe.noisygd.models import LogisticModel
        from lethe.noisygd.schedule import convex_schedule

        p = self.params
        yy, classes = self._encode(y, None)
        n, d = X.shape
        schedule = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=p["lam"], n=n, d=d, r=p["r"], q=p["q"],
                                   epsilon_dp=p["epsilon_dp"], epsilon_dd=p["epsilon_dd"])
        cur = NoisyGDCurator(LogisticModel(d), CuratorConfig.from_convex_schedule(schedule, row_bound=1.0, p=p["p"]),
                             random_state=rng)
        cert = cur.learn(Database(X, yy)).to_dict()
        return self._artifact(cur, n_dummies=0, classes=classes, last=cert), cert

    @staticmethod
    def _artifact(cur: Any, *, n_dummies: int, classes: list[Any], last: dict[str, Any]) -> Artifact:
        meta = {"mechanism": NoisyGDAdapter.name, "model": cur.model.to_dict(), "config": cur.config.to_dict(),
                "step": cur.step, "total_steps": cur._total_steps, "n_dummies": n_dummies, "classes": classes,
                "n": cur.database.n - n_dummies,
                "last": {k: last.get(k) for k in ("operation", "epsilon_dp", "epsilon_dd", "epsilon_dd_adaptive",
                                                  "q", "theorem")}}
        return Artifact(arrays={"theta": cur.theta}, meta=meta)

    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        from lethe.noisygd.edit_stream import CuratorConfig, EditRequest, NoisyGDCurator
        from lethe.noisygd.models import model_from_dict

        m = artifact.meta
        yy, classes = self._encode(y, m["classes"])
        n_dummies = int(m["n_dummies"])
        d = X.shape[1]
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0 or np.unique(idx).size != idx.size or idx.min() < 0 or idx.max() >= X.shape[0]:
            raise ValueError(f"indices must be distinct rows of the {X.shape[0]} current records. "
                             f"Found {idx.tolist()}.")
        # the curator's one public constructor for a state held elsewhere (checked as NoisyGDCurator.load checks a
        # file; the certificate history is this service's ledger)
        cur = NoisyGDCurator.resume(model_from_dict(m["model"]), CuratorConfig(**m["config"]),
                                    np.vstack([X, np.zeros((n_dummies, d))]), np.concatenate([yy, np.zeros(n_dummies)]),
                                    np.asarray(artifact.arrays["theta"], dtype=np.float64), step=int(m["step"]),
                                    total_steps=int(m["total_steps"]), random_state=rng, where="the model version")
        r = int(self.params["r"])
        certs = [cur.unlearn(EditRequest.deletion(idx[i:i + r].tolist(), n_features=d)).to_dict()
                 for i in range(0, idx.size, r)]
        cert = dict(certs[-1])
        cert["n_removed"] = int(idx.size)
        cert["n_remaining"] = int(X.shape[0] - idx.size)
        cert["edit_requests"] = len(certs)
        if len(certs) > 1:
            cert["edits"] = certs
        return self._artifact(cur, n_dummies=n_dummies + int(idx.size), classes=classes, last=cert), cert

    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        theta = artifact.arrays["theta"]
        if X.ndim != 2 or X.shape[1] != theta.shape[0]:
            raise ValueError(f"features must have {theta.shape[0]} columns. Found shape {X.shape}.")
        classes = artifact.meta["classes"]
        return np.where(X @ theta >= 0.0, classes[1], classes[0])

    def summary(self, artifact: Artifact) -> dict[str, Any]:
        m = artifact.meta
        return {"mechanism": self.name, "guarantee": m["last"].get("theorem"), "q": self.params["q"],
                "epsilon_dp": m["last"].get("epsilon_dp"), "epsilon_dd": m["last"].get("epsilon_dd"),
                "epsilon_dd_adaptive": m["last"].get("epsilon_dd_adaptive"), "n": int(m["n"]),
                "n_dummies": int(m["n_dummies"]), "edits": int(m["step"]),
                "target_epsilon_dp": self.params["epsilon_dp"], "target_epsilon_dd": self.params["epsilon_dd"]}

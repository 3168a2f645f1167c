"""The toy family's service adapter: the curator drives :class:`~lethe_toyfam.estimator.CentroidUnlearner` through it.

The artifact holds only the class means (public) and the classes; the rows stay in the curator's data plane, so a
removal recomputes the means from the rows the curator hands over.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lethe.curator.adapters import MechanismAdapter
from lethe.curator.artifacts import Artifact, ArtifactError
from lethe_toyfam.estimator import CentroidUnlearner, ExactRecomputation


class CentroidAdapter(MechanismAdapter):
    """Mechanism ``toy-centroid``: no parameters."""

    name = "toy-centroid"

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        return cls._with_defaults(params, {})

    def _artifact(self, est: CentroidUnlearner, n: int) -> Artifact:
        meta = {"mechanism": self.name, "classes": est.classes_.tolist(), "n": n}
        return Artifact(arrays={"w": est.means_}, meta=meta)

    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        est = CentroidUnlearner().fit(X, y)
        return self._artifact(est, X.shape[0]), ExactRecomputation("train", 0).to_dict()

    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        est = CentroidUnlearner().fit(X, y)
        cert = est.remove(np.asarray(indices))
        return self._artifact(est, X.shape[0] - int(np.asarray(indices).size)), cert.to_dict()

    @classmethod
    def check_artifact(cls, artifact: Artifact, n_features: int | None, params: dict[str, Any] | None) -> None:
        """One finite mean per class, of the dataset's dimension."""
        means, classes = np.asarray(artifact.arrays.get("w")), artifact.meta.get("classes")
        if not isinstance(classes, list) or means.shape != (len(classes), n_features or means.shape[-1]):
            raise ArtifactError(f"the class means must have shape (classes, features). Found {means.shape}.")
        if not np.all(np.isfinite(means)):
            raise ArtifactError("the class means must be finite.")

    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        means, classes = artifact.arrays["w"], np.asarray(artifact.meta["classes"])
        d = ((np.asarray(X, dtype=np.float64)[:, None, :] - means[None]) ** 2).sum(-1)
        return classes[np.argmin(d, axis=1)]

    def summary(self, artifact: Artifact) -> dict[str, Any]:
        return {"n": int(artifact.meta["n"])}

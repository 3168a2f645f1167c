"""Curator adapter ``noisy-finetune``: neural classifiers unlearned by noisy clipped fine-tuning (Koloskova et al.).

Listed in the registry of families (:mod:`lethe.families`), which imports it when the mechanism is used. torch is
imported only when the adapter is used, so the service runs without the ``deep`` extra as long as nobody asks for
this mechanism.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from lethe.curator.adapters import MechanismAdapter, label_classes, label_codes
from lethe.curator.artifacts import Artifact, ArtifactError, finite_array

__all__ = ["NoisyFineTuneAdapter"]


class NoisyFineTuneAdapter(MechanismAdapter):
    """Noisy clipped fine-tuning (Koloskova et al. 2025, gradient clipping; :mod:`lethe.nn`) for any module spec.

    Parameters (JSON): ``module`` (spec of :mod:`lethe.nn.models`), ``epsilon``, ``delta`` (per batch of removals),
    ``model_radius`` (C₀), ``grad_clip`` (C), ``lr`` (η), ``weight_decay`` (λ), ``unlearn_steps`` (T or null),
    ``batch_size``, ``clipping`` ("per_sample" / "batch"), ``train_epochs``, ``train_lr``, ``post_steps``,
    ``post_lr`` (null = η), ``post_radius`` (projection before the post-processing steps, null = none). Defaults: 100
    post-processing steps after projecting onto ‖θ‖ ≤ 5 (without them the published model is the noise).

    A batch of deletions is one unlearning run on the records that remain; the guarantee holds whatever the model
    before it was, so sequential batches each carry the full (ε, δ). The artifact holds the published parameters
    ``theta`` only (no records, no generator state); each operation draws from the service's fresh generator.
    """

    name = "noisy-finetune"
    secret_arrays = ()
    _DEFAULTS: ClassVar[dict[str, Any]] = {
        "module": {"kind": "mlp", "hidden": [32]}, "epsilon": 1.0, "delta": 1e-5, "model_radius": 5.0,
        "grad_clip": 1.0, "lr": 0.05, "weight_decay": 0.0, "unlearn_steps": None, "batch_size": 64,
        "clipping": "per_sample", "train_epochs": 5, "train_lr": 0.1, "post_steps": 100, "post_lr": None,
        "post_radius": 5.0,
    }

    @classmethod
    def check_artifact(cls, artifact: Artifact, n_features: int | None, params: dict[str, Any] | None) -> None:
        """``theta`` a finite float vector; the state's feature count the dataset's; at least two classes; the
        last operation recorded; with the parameters, ``theta`` has exactly the size of the module they build (an
        edited or swapped vector of another shape cannot be loaded into it)."""
        theta = finite_array(artifact.arrays, "theta", None)
        m = artifact.meta
        d = m.get("n_features")
        if isinstance(d, bool) or not isinstance(d, int) or d < 1 or (n_features is not None and d != n_features):
            raise ArtifactError(f"the state's n_features must be the dataset's {n_features}. Found {d!r}.")
        classes = m.get("classes")
        if not isinstance(classes, list) or len(classes) < 2:
            raise ArtifactError(f"the state's classes must list at least 2 labels. Found {classes!r}.")
        if not isinstance(m.get("last"), dict):
            raise ArtifactError("the state's last operation is missing.")
        if params is not None:
            from lethe.nn.models import build_module

            module = build_module(params["module"], d, len(classes), random_state=np.random.default_rng(0))
            size = sum(int(p.numel()) for p in module.parameters())
            if theta.shape != (size,):
                raise ArtifactError(f"theta must have the module's {size} parameters. Found shape {theta.shape}.")

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        from lethe._validation import check_choice, check_positive, check_positive_int
        from lethe.nn.accounting import calibrate_finetune
        from lethe.nn.models import check_spec

        full = cls._with_defaults(params, cls._DEFAULTS)
        full["module"] = check_spec(full["module"])
        calibrate_finetune(full["epsilon"], full["delta"], model_radius=full["model_radius"],
                           grad_clip=full["grad_clip"], lr=full["lr"], weight_decay=full["weight_decay"],
                           steps=full["unlearn_steps"])
        check_positive_int("batch_size", full["batch_size"])
        check_positive_int("train_epochs", full["train_epochs"])
        check_positive("train_lr", full["train_lr"])
        check_choice("clipping", full["clipping"], ("per_sample", "batch"))
        if isinstance(full["post_steps"], bool) or not isinstance(full["post_steps"], int) or full["post_steps"] < 0:
            raise ValueError(f"post_steps must be an integer >= 0. Found {full['post_steps']!r}.")
        for key in ("post_lr", "post_radius"):
            if full[key] is not None:
                check_positive(key, full[key])
        return full

    def _schedule(self) -> Any:
        from lethe.nn.accounting import calibrate_finetune

        p = self.params
        return calibrate_finetune(p["epsilon"], p["delta"], model_radius=p["model_radius"], grad_clip=p["grad_clip"],
                                  lr=p["lr"], weight_decay=p["weight_decay"], steps=p["unlearn_steps"])

    def _module(self, meta: dict[str, Any], theta: np.ndarray | None, rng: np.random.Generator) -> Any:
        from lethe.nn.models import build_module
        from lethe.nn.unlearning import load_flat_parameters

        module = build_module(self.params["module"], int(meta["n_features"]), len(meta["classes"]), random_state=rng)
        if theta is not None:
            load_flat_parameters(module, theta)
        return module

    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        import torch

        from lethe.nn.unlearning import flat_parameters, train

        p = self.params
        classes = label_classes(y)  # numbers as floats, a schema dataset's declared strings as strings
        if len(classes) < 2:
            raise ValueError(f"noisy-finetune needs at least 2 label values. Found {len(classes)}.")
        meta = {"mechanism": self.name, "n_features": int(X.shape[1]), "classes": classes, "n": int(X.shape[0])}
        module = self._module(meta, None, rng)
        train(module, torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(label_codes(y, classes)),
              epochs=p["train_epochs"], lr=p["train_lr"], batch_size=p["batch_size"], random_state=rng)
        schedule = self._schedule()
        cert = {"operation": "train", "theorem": schedule.theorem, "epsilon": schedule.epsilon,
                "delta": schedule.delta, "note": "plain training; each later removal is certified by noisy "
                                                 "clipped fine-tuning on the retained records", "n": int(X.shape[0])}
        meta["last"] = {"operation": "train", "epsilon": None, "delta": None, "theorem": None}
        return Artifact(arrays={"theta": flat_parameters(module)}, meta=meta), cert

    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        import torch

        from lethe.nn.unlearning import flat_parameters, unlearn

        p, m = self.params, artifact.meta
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0 or np.unique(idx).size != idx.size or idx.min() < 0 or idx.max() >= X.shape[0]:
            raise ValueError(f"indices must be distinct rows of the {X.shape[0]} current records. "
                             f"Found {idx.size} indices with duplicates or out of range.")
        keep = np.setdiff1d(np.arange(X.shape[0]), idx)
        codes = label_codes(np.asarray(y)[keep], m["classes"])
        module = self._module(m, artifact.arrays["theta"], rng)
        cert = unlearn(module, torch.as_tensor(X[keep], dtype=torch.float32), torch.as_tensor(codes),
                       schedule=self._schedule(), batch_size=p["batch_size"], clipping=p["clipping"],
                       post_steps=p["post_steps"], post_lr=p["post_lr"], post_radius=p["post_radius"],
                       n_removed=int(idx.size), random_state=rng).to_dict()
        cert["n_remaining"] = int(keep.size)
        meta = {**m, "n": int(keep.size),
                "last": {k: cert[k] for k in ("operation", "epsilon", "delta", "theorem")}}
        return Artifact(arrays={"theta": flat_parameters(module)}, meta=meta), cert

    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        import torch

        m = artifact.meta
        if X.ndim != 2 or X.shape[1] != int(m["n_features"]):
            raise ValueError(f"features must have {m['n_features']} columns. Found shape {X.shape}.")
        module = self._module(m, artifact.arrays["theta"], np.random.default_rng(0))
        with torch.no_grad():
            codes = module(torch.as_tensor(X, dtype=torch.float32)).argmax(dim=1).numpy()
        return np.asarray(m["classes"])[codes]

    def summary(self, artifact: Artifact) -> dict[str, Any]:
        m = artifact.meta
        return {"mechanism": self.name, "guarantee": m["last"].get("theorem"), "epsilon": m["last"].get("epsilon"),
                "delta": m["last"].get("delta"), "n": int(m["n"]), "target_epsilon": self.params["epsilon"],
                "target_delta": self.params["delta"]}

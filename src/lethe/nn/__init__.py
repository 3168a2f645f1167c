"""Certified unlearning for neural networks: noisy clipped fine-tuning (Koloskova et al., ICML 2025).

* math — :mod:`~lethe.nn.accounting` (privacy amplification by iteration, calibration (ε, δ) → (σ, T); no torch);
* mechanism — :mod:`~lethe.nn.unlearning` (per-sample clipped gradients for any ``torch.nn.Module``, the noisy
  fine-tuning steps, certificates);
* front end — :mod:`~lethe.nn.estimators` (a scikit-learn classifier with ``remove``) and the curator adapter
  ``noisy-finetune`` (:mod:`lethe.curator.adapters_nn`).

The torch-dependent names are imported lazily, so ``lethe.nn.accounting`` works without torch. Derivations:
``docs/nn_unlearning.md``.
"""

from __future__ import annotations

from typing import Any

from lethe.nn.accounting import (
    FineTuneSchedule,
    ModelClipSchedule,
    calibrate_finetune,
    calibrate_model_clip,
    linear_rdp_epsilon,
    linear_rdp_max_slope,
    model_clip_delta,
    model_clip_steps,
    pabi_epsilon,
    pabi_rdp_slope,
)

_LAZY = {
    "NNUnlearningCertificate": "lethe.nn.unlearning",
    "per_sample_gradients": "lethe.nn.unlearning",
    "clipped_gradient": "lethe.nn.unlearning",
    "project_model": "lethe.nn.unlearning",
    "train": "lethe.nn.unlearning",
    "unlearn": "lethe.nn.unlearning",
    "unlearn_model_clip": "lethe.nn.unlearning",
    "ModelClipCertificate": "lethe.nn.unlearning",
    "NoisyFineTuneClassifier": "lethe.nn.estimators",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lethe.nn' has no attribute {name!r}")


__all__ = [
    "FineTuneSchedule",
    "ModelClipCertificate",
    "ModelClipSchedule",
    "NNUnlearningCertificate",
    "NoisyFineTuneClassifier",
    "calibrate_finetune",
    "calibrate_model_clip",
    "clipped_gradient",
    "linear_rdp_epsilon",
    "linear_rdp_max_slope",
    "model_clip_delta",
    "model_clip_steps",
    "pabi_epsilon",
    "pabi_rdp_slope",
    "per_sample_gradients",
    "project_model",
    "train",
    "unlearn",
    "unlearn_model_clip",
]

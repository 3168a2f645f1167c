"""Small buffer-free torch modules described by JSON specs (so a model can be rebuilt from an artifact, no pickle).

``{"kind": "mlp", "hidden": [32]}`` — Linear/ReLU layers on flat rows;
``{"kind": "cnn", "image_shape": [C, H, W], "channels": [8, 16], "kernel": 5}`` — stride-2 convolutions with ReLU
(no padding), then a Linear layer; rows are reshaped to ``image_shape``.

No BatchNorm (its running statistics are buffers, refused by :func:`lethe.nn.unlearning.check_module`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["build_module", "check_spec"]


def _int_list(name: str, value: Any) -> list[int]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                                      for v in value):
        raise ValueError(f"{name} must be a list of positive integers. Found {value!r}.")
    return [int(v) for v in value]


def check_spec(spec: Any) -> dict[str, Any]:
    """Validate a module spec; return it completed with defaults."""
    if not isinstance(spec, dict):
        raise TypeError(f"module spec must be a dict. Found {type(spec).__name__}.")
    kind = spec.get("kind", "mlp")
    if kind == "mlp":
        unknown = sorted(set(spec) - {"kind", "hidden"})
        if unknown:
            raise ValueError(f"Unknown key(s) in an mlp spec: {unknown}. Allowed: ['kind', 'hidden'].")
        return {"kind": "mlp", "hidden": _int_list("hidden", spec.get("hidden", [32]))}
    if kind == "cnn":
        unknown = sorted(set(spec) - {"kind", "image_shape", "channels", "kernel"})
        if unknown:
            raise ValueError(f"Unknown key(s) in a cnn spec: {unknown}. "
                             "Allowed: ['kind', 'image_shape', 'channels', 'kernel'].")
        shape = _int_list("image_shape", spec.get("image_shape"))
        if len(shape) != 3:
            raise ValueError(f"image_shape must be [channels, height, width]. Found {shape!r}.")
        kernel = spec.get("kernel", 5)
        if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 1:
            raise ValueError(f"kernel must be a positive integer. Found {kernel!r}.")
        return {"kind": "cnn", "image_shape": shape, "channels": _int_list("channels", spec.get("channels", [8, 16])),
                "kernel": int(kernel)}
    raise ValueError(f"module kind must be 'mlp' or 'cnn'. Found {kind!r}.")


class _Reshape(nn.Module):
    def __init__(self, shape: list[int]) -> None:
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape((x.shape[0], *self.shape))


def build_module(spec: dict[str, Any], n_features: int, n_classes: int, *,
                 random_state: np.random.Generator) -> nn.Module:
    """Build the module of ``spec`` for rows of ``n_features`` values and ``n_classes`` outputs (float32).

    Initialisation is PyTorch's default, seeded from ``random_state`` (independent of the data).
    """
    s = check_spec(spec)
    seed = int(random_state.integers(0, 2**63 - 1))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = []
        if s["kind"] == "mlp":
            width = n_features
            for h in s["hidden"]:
                layers += [nn.Linear(width, h), nn.ReLU()]
                width = h
            layers.append(nn.Linear(width, n_classes))
        else:
            c, h, w = s["image_shape"]
            if c * h * w != n_features:
                raise ValueError(f"image_shape {s['image_shape']} needs {c * h * w} features. Found {n_features}.")
            layers.append(_Reshape([c, h, w]))
            k = s["kernel"]
            for ch in s["channels"]:
                if h < k or w < k:
                    raise ValueError(f"kernel {k} does not fit a {h}x{w} feature map; use fewer channels layers.")
                layers += [nn.Conv2d(c, ch, k, stride=2), nn.ReLU()]
                c, h, w = ch, (h - k) // 2 + 1, (w - k) // 2 + 1
            layers += [nn.Flatten(), nn.Linear(c * h * w, n_classes)]
        module = nn.Sequential(*layers)
    return module.float().eval()

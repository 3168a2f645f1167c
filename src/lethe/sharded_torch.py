"""Deprecated: moved to :mod:`lethe.sharded.torch` (issue 34). Import ``TorchShardClassifier`` from
:mod:`lethe.sharded` (its public path) and ``shift_images`` from :mod:`lethe.sharded.torch`; this module will be removed
in the next release."""

from __future__ import annotations

import warnings

from lethe.sharded.torch import TorchShardClassifier, shift_images

__all__ = ["TorchShardClassifier", "shift_images"]

warnings.warn("lethe.sharded_torch is deprecated and will be removed in the next release: import "
              "TorchShardClassifier from lethe.sharded and shift_images from lethe.sharded.torch.",
              DeprecationWarning, stacklevel=2)

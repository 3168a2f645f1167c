"""Helpers of the certified-removal tests (imported as ``from ._certified import ...``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lethe.certified import objective as obj


def exact_residual(config: Any, state: Any, X: Any, y: np.ndarray) -> float:
    """‖∇L_b(w; D)‖₂ for the current data: the quantity every certificate bounds (``config``: a
    :class:`lethe.certified.mechanism.CertifiedRemoval`, ``state``: its :class:`~lethe.certified.state.ModelState`)."""
    return float(np.linalg.norm(obj.objective_grad(state.w, X, y, config.loss_, config.lam, state.b)))

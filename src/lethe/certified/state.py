"""The state of one removal-enabled linear model (Guo et al. 2020): weights, the secret perturbation b and the
certified residual bound. A plain immutable record below the solvers and the mechanism (both use it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class ModelState:
    """The state of one removal-enabled linear model. Immutable; every operation returns a new one.

    Attributes
    ----------
    w : ndarray (d,)
        The published weights.
    b : ndarray (d,)
        The secret objective perturbation (Alg. 1). Never publish it.
    n : int
        Number of training rows the state refers to (current data).
    residual_bound : float
        β: certified upper bound on ‖∇L_b(w; D)‖₂ on the current data (training residual + removal steps).
    x_norm_bound : float
        Certified upper bound on ‖X‖₂ of the data at the last (re)training; valid for every later subset.
    removals_since_training : int
        Rows removed since the last (re)training.
    retrainings : int
        How many times the budget forced retraining.
    train_iterations : int
        Optimiser iterations of the last (re)training.
    """

    w: np.ndarray
    b: np.ndarray
    n: int
    residual_bound: float
    x_norm_bound: float
    removals_since_training: int = 0
    retrainings: int = 0
    train_iterations: int = 0

    def __post_init__(self) -> None:
        for name in ("w", "b"):
            arr = np.array(getattr(self, name), dtype=np.float64, copy=True)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)


__all__ = ["ModelState"]

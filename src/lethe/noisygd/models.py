"""Models Noisy-GD trains, as a flat parameter vector θ and a mean-gradient kernel (math layer, no state).

A model knows its parameter count d, how to compute (1/n) Σ Clip_L(∇ℓ(θ; xᵢ, yᵢ)), its per-example loss and its
decision function. ``to_dict`` / :func:`model_from_dict` make it serialisable without pickle.

Rows x are assumed to satisfy ‖x‖ ≤ R (``row_bound``); the Lipschitz and smoothness constants of the convex
models are derived from R:

* binary logistic, ℓ = log(1 + e^{−y θᵀx}), y ∈ {−1, +1}: L = R, β = R²/4;
* multinomial logistic (softmax cross-entropy), Θ ∈ R^{p×K}: L = √2 R, β = R²/2.

The all-zero row is a valid record with zero gradient: it is the *dummy record* deletions replace a record with
(footnote 1 of the paper), for every model here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import expit, log_expit, logsumexp, softmax

from lethe.noisygd.algorithm import (
    _clip_factors,
    logistic_loss,
    logistic_mean_gradient,
    multinomial_loss,
    multinomial_mean_gradient,
)

__all__ = ["LogisticModel", "MLPModel", "model_from_dict"]


def _columnwise(fn: Any, theta: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None) -> np.ndarray:
    """Stack fn(theta[:, j], X, y, clip) over the chains j (fallback for kernels without a chain axis)."""
    theta = np.asarray(theta)
    if theta.ndim != 2:
        raise ValueError(f"theta must have shape (d, R) for chains. Found {theta.shape}.")
    return np.stack([fn(theta[:, j], X, y, clip) for j in range(theta.shape[1])], axis=1)


@dataclass(frozen=True)
class LogisticModel:
    """Linear logistic model on p (augmented) features: binary (n_classes = 2) or multinomial.

    θ has d = p parameters (binary) or d = p·K (multinomial, row-major (p, K)). Labels: ±1 floats (binary) or
    class indices 0..K−1 stored as floats (multinomial).
    """

    n_features: int
    n_classes: int = 2

    convex = True

    @property
    def n_params(self) -> int:
        """d."""
        return self.n_features if self.n_classes == 2 else self.n_features * self.n_classes

    def lipschitz(self, row_bound: float) -> float:
        """L for rows with ‖x‖ ≤ R."""
        return row_bound if self.n_classes == 2 else math.sqrt(2.0) * row_bound

    def smoothness(self, row_bound: float) -> float:
        """β for rows with ‖x‖ ≤ R."""
        return row_bound**2 / 4.0 if self.n_classes == 2 else row_bound**2 / 2.0

    def _shape(self, theta: np.ndarray) -> np.ndarray:
        return theta if self.n_classes == 2 else theta.reshape(self.n_features, self.n_classes)

    def mean_gradient(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None = None) -> np.ndarray:
        """(1/n) Σ Clip_L(∇ℓ(θ; xᵢ, yᵢ)), flat."""
        if self.n_classes == 2:
            return logistic_mean_gradient(theta, X, y, clip)
        return multinomial_mean_gradient(self._shape(theta), X, y, clip).ravel()

    def mean_gradient_chains(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None = None
    ) -> np.ndarray:
        """Column j = ``mean_gradient(theta[:, j], …)`` for θ of shape (d, R) (R chains; one GEMM if binary)."""
        if self.n_classes == 2:
            return logistic_mean_gradient(theta, X, y, clip)
        return _columnwise(self.mean_gradient, theta, X, y, clip)

    def loss(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example loss."""
        if self.n_classes == 2:
            return logistic_loss(theta, X, y)
        return multinomial_loss(self._shape(theta), X, y)

    def decision(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """θᵀx (binary, shape (n,)) or logits (n, K)."""
        return X @ self._shape(theta)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description."""
        return {"kind": "logistic", "n_features": self.n_features, "n_classes": self.n_classes}


@dataclass(frozen=True)
class MLPModel:
    """One-hidden-layer tanh perceptron without output bias: logits = tanh(X W₁) W₂ (non-convex).

    θ = [vec(W₁) (p×m), vec(W₂) (m×K')] with K' = 1 (binary, labels ±1, logistic loss) or K' = K (softmax
    cross-entropy, labels 0..K−1). An intercept enters through an augmented constant feature. Per-example
    gradients are clipped to L without materialising them: ‖∇_{W₁}ℓᵢ‖ = ‖xᵢ‖‖aᵢ‖, ‖∇_{W₂}ℓᵢ‖ = ‖hᵢ‖‖δᵢ‖.
    The loss is neither convex nor globally smooth or bounded in θ, so only Thm G.7 applies (see
    :func:`lethe.noisygd.guarantees.exposure_deletion_epsilon`).
    """

    n_features: int
    n_hidden: int
    n_classes: int = 2

    convex = False

    @property
    def n_outputs(self) -> int:
        """K'."""
        return 1 if self.n_classes == 2 else self.n_classes

    @property
    def n_params(self) -> int:
        """d = p·m + m·K'."""
        return self.n_features * self.n_hidden + self.n_hidden * self.n_outputs

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(W₁, W₂) views of θ."""
        k = self.n_features * self.n_hidden
        return theta[:k].reshape(self.n_features, self.n_hidden), theta[k:].reshape(self.n_hidden, self.n_outputs)

    def _forward(self, theta: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        W1, W2 = self.unpack(theta)
        H = np.tanh(X @ W1)
        return W2, H, H @ W2

    def mean_gradient(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None = None) -> np.ndarray:
        """(1/n) Σ Clip_L(∇ℓ(θ; xᵢ, yᵢ)), flat."""
        W2, H, Z = self._forward(theta, X)
        if self.n_classes == 2:
            delta = (-y * expit(-y * Z[:, 0]))[:, None]
        else:
            delta = softmax(Z, axis=1)
            delta[np.arange(X.shape[0]), y.astype(np.intp)] -= 1.0
        A = (delta @ W2.T) * (1.0 - H**2)
        if clip is not None:
            sq = np.einsum("ij,ij->i", X, X) * np.einsum("ij,ij->i", A, A) + np.einsum(
                "ij,ij->i", H, H
            ) * np.einsum("ij,ij->i", delta, delta)
            c = _clip_factors(sq, clip)[:, None]
            A, delta = A * c, delta * c
        n = X.shape[0]
        return np.concatenate([(X.T @ A).ravel() / n, (H.T @ delta).ravel() / n])

    def mean_gradient_chains(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None = None
    ) -> np.ndarray:
        """Column j = ``mean_gradient(theta[:, j], …)`` for θ of shape (d, R)."""
        return _columnwise(self.mean_gradient, theta, X, y, clip)

    def loss(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example loss."""
        _, _, Z = self._forward(theta, X)
        if self.n_classes == 2:
            return -log_expit(y * Z[:, 0])
        return logsumexp(Z, axis=1) - Z[np.arange(X.shape[0]), y.astype(np.intp)]

    def decision(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Logit (binary, shape (n,)) or logits (n, K)."""
        _, _, Z = self._forward(theta, X)
        return Z[:, 0] if self.n_classes == 2 else Z

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description."""
        return {"kind": "mlp", "n_features": self.n_features, "n_hidden": self.n_hidden, "n_classes": self.n_classes}


def model_from_dict(d: dict[str, Any]) -> LogisticModel | MLPModel:
    """Inverse of ``to_dict``."""
    kind = d.get("kind")
    if kind == "logistic":
        return LogisticModel(int(d["n_features"]), int(d["n_classes"]))
    if kind == "mlp":
        return MLPModel(int(d["n_features"]), int(d["n_hidden"]), int(d["n_classes"]))
    raise ValueError(f"model kind must be 'logistic' or 'mlp'. Found {kind!r}.")

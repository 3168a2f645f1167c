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
    clip_factors,
    logistic_loss,
    logistic_mean_gradient,
    multinomial_loss,
    multinomial_mean_gradient,
)

__all__ = ["BoundedMLPModel", "LogisticModel", "MLPModel", "model_from_dict"]


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
            c = clip_factors(sq, clip)[:, None]
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


_TANH2_MAX = 4.0 / (3.0 * math.sqrt(3.0))  # max_t |tanh''(t)| = max 2|tanh|(1 − tanh²), at tanh² = 1/3


@dataclass(frozen=True)
class BoundedMLPModel:
    r"""One-hidden-layer network whose loss is bounded, Lipschitz and smooth over *all* θ (Thm 5.2's assumptions).

    θ = [vec(W) (p×m), v (m)], binary labels y ∈ {−1, +1} (0 for the dummy record). Weights enter through the
    bounded smooth reparametrisation tanh, the activation is tanh, the logit is an average scaled by c:

    .. math::
        a_k = \sum_i x_i \tanh(W_{ik}),\quad h_k = \tanh(a_k),\quad
        z = \frac{c}{m}\sum_{k=1}^m \tanh(v_k)\, h_k \in (−c, c),\quad ℓ = \log(1 + e^{−y z}).

    For rows with ‖x‖ ≤ R these constants are proven upper bounds for every θ ∈ R^d (docs/noisygd.md derives
    them; tests check them against exact gradients and Hessians):

    * loss range: ℓ ∈ [log(1 + e^{−c}), log(1 + e^{c})], an interval of length exactly c, so |ℓ − ℓ_mid| ≤ c/2
      (``loss_half_range``);
    * L = σ(c) · c · max(1, R)/√m (``lipschitz``);
    * β = c² max(1, R²)/(4m) + σ(c) · (c/m) · (max(γ(R² + R), γ) + R), γ = 4/(3√3) = max|tanh''|
      (``smoothness``).

    The all-zero row has z = 0 and zero gradient for every θ (dummy record), and so does label 0.
    """

    n_features: int
    n_hidden: int
    logit_bound: float = 4.0
    n_classes: int = 2

    convex = False

    def __post_init__(self) -> None:
        for name in ("n_features", "n_hidden"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1. Found {v!r}.")
        if not (isinstance(self.logit_bound, int | float | np.floating) and math.isfinite(self.logit_bound)
                and self.logit_bound > 0):
            raise ValueError(f"logit_bound must be a finite number > 0. Found {self.logit_bound!r}.")
        if self.n_classes != 2:
            raise ValueError(f"BoundedMLPModel is binary: n_classes must be 2. Found {self.n_classes!r}.")

    @property
    def n_params(self) -> int:
        """d = p·m + m."""
        return self.n_features * self.n_hidden + self.n_hidden

    def unpack(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(W (p×m), v (m)) views of θ."""
        k = self.n_features * self.n_hidden
        return theta[:k].reshape(self.n_features, self.n_hidden), theta[k:]

    # ----------------------------------------------------------------- constants (proven upper bounds)
    def loss_half_range(self) -> float:
        """c/2: ℓ(θ; x) − (log(1+e^{−c}) + log(1+e^{c}))/2 ∈ [−c/2, c/2] for every θ and every record."""
        return self.logit_bound / 2.0

    def lipschitz(self, row_bound: float) -> float:
        """L = σ(c) c max(1, R)/√m ≥ ‖∇ℓ(θ; x)‖ for all θ and ‖x‖ ≤ R."""
        c = self.logit_bound
        return float(expit(c)) * c * max(1.0, row_bound) / math.sqrt(self.n_hidden)

    def smoothness(self, row_bound: float) -> float:
        """β ≥ ‖∇²ℓ(θ; x)‖₂ for all θ and ‖x‖ ≤ R (see the class docstring)."""
        c, m, R, g = self.logit_bound, self.n_hidden, row_bound, _TANH2_MAX
        block = max(g * (R * R + R), g) + R
        return c * c * max(1.0, R * R) / (4.0 * m) + float(expit(c)) * c / m * block

    # ----------------------------------------------------------------- kernels
    def _forward(self, theta: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        W, v = self.unpack(theta)
        S, T = np.tanh(W), np.tanh(v)
        H = np.tanh(X @ S)
        z = (self.logit_bound / self.n_hidden) * (H @ T)
        return S, T, H, z

    def mean_gradient(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None = None) -> np.ndarray:
        """(1/n) Σ Clip_L(∇ℓ(θ; xᵢ, yᵢ)), flat (clipping is the identity when ``clip`` ≥ ``lipschitz(R)``)."""
        S, T, H, z = self._forward(theta, X)
        s = self.logit_bound / self.n_hidden
        delta = -y * expit(-y * z)  # ℓ'(z) per example (0 for label 0)
        dH = 1.0 - H**2
        Gv = delta[:, None] * H  # ∂z/∂v_k / (s T'_k), per example
        Ga = (delta[:, None] * dH) * T[None, :]  # ∂ℓ/∂a_k / s, per example
        if clip is not None:
            # ‖∇_v ℓᵢ‖² = s² Σ_k (δᵢ h_ik T'_k)²; ‖∇_W ℓᵢ‖² = s² Σ_k (Ga_ik)² Σ_j x_ij² S'_jk².
            Tp2 = (1.0 - T**2) ** 2
            Sp2 = (1.0 - S**2) ** 2
            sq = s * s * ((Gv**2) @ Tp2 + np.einsum("ik,ik->i", Ga**2, (X**2) @ Sp2))
            c = clip_factors(sq, clip)[:, None]
            Gv, Ga = Gv * c, Ga * c
        n = X.shape[0]
        gW = s * (1.0 - S**2) * (X.T @ Ga) / n
        gv = s * (1.0 - T**2) * Gv.sum(axis=0) / n
        return np.concatenate([gW.ravel(), gv])

    def mean_gradient_chains(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float | None = None
    ) -> np.ndarray:
        """Column j = ``mean_gradient(theta[:, j], …)`` for θ of shape (d, R)."""
        return _columnwise(self.mean_gradient, theta, X, y, clip)

    def loss(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example loss log(1 + e^{−y z})."""
        return -log_expit(y * self._forward(theta, X)[3])

    def decision(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Logit z ∈ (−c, c), shape (n,)."""
        return self._forward(theta, X)[3]

    def hessian(self, theta: np.ndarray, x: np.ndarray, y: float) -> np.ndarray:
        """Exact Hessian ∇²ℓ(θ; x, y) of one example (d × d, closed form; for testing the bound β)."""
        W, v = self.unpack(np.asarray(theta, dtype=np.float64))
        x = np.asarray(x, dtype=np.float64)
        p, m, s = self.n_features, self.n_hidden, self.logit_bound / self.n_hidden
        S, T = np.tanh(W), np.tanh(v)
        Sp, Spp = 1.0 - S**2, -2.0 * S * (1.0 - S**2)
        Tp, Tpp = 1.0 - T**2, -2.0 * T * (1.0 - T**2)
        h = np.tanh(x @ S)
        hp, hpp = 1.0 - h**2, -2.0 * h * (1.0 - h**2)
        z = s * float(h @ T)
        g1 = -y * float(expit(-y * z))  # ℓ'(z)
        g2 = y * y * float(expit(z) * expit(-z))  # ℓ''(z)
        grad_z = np.zeros(self.n_params)
        hess_z = np.zeros((self.n_params, self.n_params))
        for k in range(m):
            gk = x * Sp[:, k]
            iw = np.arange(p) * m + k  # positions of W[:, k] in θ
            iv = p * m + k
            grad_z[iw] = s * T[k] * hp[k] * gk
            grad_z[iv] = s * Tp[k] * h[k]
            hess_z[np.ix_(iw, iw)] = s * T[k] * (hpp[k] * np.outer(gk, gk) + hp[k] * np.diag(x * Spp[:, k]))
            hess_z[iw, iv] = hess_z[iv, iw] = s * Tp[k] * hp[k] * gk
            hess_z[iv, iv] = s * Tpp[k] * h[k]
        return g2 * np.outer(grad_z, grad_z) + g1 * hess_z

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description."""
        return {"kind": "bounded_mlp", "n_features": self.n_features, "n_hidden": self.n_hidden,
                "logit_bound": self.logit_bound, "n_classes": self.n_classes}


def model_from_dict(d: dict[str, Any]) -> LogisticModel | MLPModel | BoundedMLPModel:
    """Inverse of ``to_dict``."""
    kind = d.get("kind")
    if kind == "bounded_mlp":
        return BoundedMLPModel(int(d["n_features"]), int(d["n_hidden"]), float(d["logit_bound"]),
                               int(d["n_classes"]))
    if kind == "logistic":
        return LogisticModel(int(d["n_features"]), int(d["n_classes"]))
    if kind == "mlp":
        return MLPModel(int(d["n_features"]), int(d["n_hidden"]), int(d["n_classes"]))
    raise ValueError(f"model kind must be 'logistic', 'mlp' or 'bounded_mlp'. Found {kind!r}.")

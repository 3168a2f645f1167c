"""A small CNN trained with DP-SGD (Opacus) as a differentially private feature extractor (Guo et al. 2020, §4.3).

Guo et al. use "a simple CNN with two convolutional layers with 64 filters of size 3 × 3 and 2 × 2 max-pooling"
trained with DP-SGD (Abadi et al. 2016), and feed its penultimate activations to certified linear heads (Thm 5).
:func:`build_cnn` is that network (the number of filters is a parameter): conv(3×3) → ReLU → max-pool(2) → conv(3×3)
→ ReLU → max-pool(2) → linear → ReLU (the *features*) → linear (the logits).

:func:`train_dp_cnn` trains it with Opacus' ``PrivacyEngine.make_private_with_epsilon`` (Poisson sampling, per-sample
clipping at ``max_grad_norm``, Gaussian noise calibrated by Opacus' accountant to ``(target_epsilon, target_delta)``
per example) and reports the ε that the accountant certifies for the steps actually taken. ``target_epsilon=None``
trains the same network without privacy (the paper's non-private reference).

torch and opacus are imported inside the functions (optional ``deep`` extra).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # the customary public constants, not computed from the private data
# RDP orders: Opacus' defaults (up to 63) put a floor of about log(1/δ)/62 under the ε it can certify, which is above
# the small per-example ε of Guo et al. §4.3 (ε_DP/10 with δ ≈ 1e-8); larger orders remove that floor.
RDP_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [80, 100, 128, 160, 200, 256, 384,
                                                                                   512, 768, 1024, 2048])


@dataclass
class DPTrainResult:
    """A trained CNN and what its training guaranteed (per example, i.e. for neighbouring data sets)."""

    model: Any
    epsilon: float | None  # ε certified by the accountant after training (None: not private)
    delta: float | None
    target_epsilon: float | None
    noise_multiplier: float
    max_grad_norm: float
    epochs: int
    steps: int
    batch_size: int
    sample_rate: float
    accountant: str
    seconds: float
    train_accuracy: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (without the model)."""
        return {k: v for k, v in self.__dict__.items() if k != "model"}


def build_cnn(channels: int = 64, feature_dim: int = 128, n_classes: int = 10) -> Any:
    """The two-convolution CNN of Guo et al. 2020, footnote 3 (28 × 28 single-channel input)."""
    from torch import nn

    class SmallCNN(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(),
            )
            self.fc = nn.Linear(channels * 7 * 7, feature_dim)
            self.act = nn.ReLU()
            self.head = nn.Linear(feature_dim, n_classes)

        def features(self, x: Any) -> Any:
            return self.act(self.fc(self.conv(x)))

        def forward(self, x: Any) -> Any:
            return self.head(self.features(x))

    return SmallCNN()


def to_tensor(images: np.ndarray) -> Any:
    """uint8 images (n, 28, 28) → float32 tensor (n, 1, 28, 28), scaled to [0, 1] and standardised."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32) / 255.0)
    return ((x - MNIST_MEAN) / MNIST_STD).unsqueeze(1)


def _unwrap(model: Any) -> Any:
    return model._module if hasattr(model, "_module") else model


def train_dp_cnn(images: np.ndarray, labels: np.ndarray, *, target_epsilon: float | None, target_delta: float,
                 epochs: int = 3, batch_size: int = 512, lr: float = 1e-3, max_grad_norm: float = 1.0,
                 channels: int = 64, feature_dim: int = 128, accountant: str = "rdp", seed: int = 0,
                 show_progress: bool = False) -> DPTrainResult:
    """Train :func:`build_cnn` with DP-SGD (Adam update on the privatised gradients) to (ε, δ) per example.

    Parameters
    ----------
    images, labels : uint8 (n, 28, 28), int (n,)
    target_epsilon : float or None
        ε_DP per example; None trains without privacy (same network, optimiser and schedule).
    target_delta : float
        δ per example (Opacus' accountant converts its RDP/PRV guarantee at this δ).
    accountant : {"rdp", "prv", "gdp"}
        Opacus accountant used both to calibrate the noise and to report the final ε.
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    if target_epsilon is not None and not target_epsilon > 0:
        raise ValueError(f"target_epsilon must be > 0 or None. Found {target_epsilon}.")
    if not 0 < target_delta < 1:
        raise ValueError(f"target_delta must be in (0, 1). Found {target_delta}.")
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    x = to_tensor(images)
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True, generator=gen)
    n_batches = len(loader)
    kw: dict[str, Any] = {}
    model = build_cnn(channels, feature_dim, int(y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    engine = None
    noise = 0.0
    if target_epsilon is not None:
        from opacus import PrivacyEngine
        from opacus.accountants.utils import get_noise_multiplier

        kw = {"alphas": list(RDP_ORDERS)} if accountant == "rdp" else {}
        noise = float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=target_delta,
                                           sample_rate=1.0 / len(loader), epochs=epochs, accountant=accountant,
                                           epsilon_tolerance=0.005 * target_epsilon, **kw))
        engine = PrivacyEngine(accountant=accountant)
        model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                                 noise_multiplier=noise, max_grad_norm=max_grad_norm)
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    steps = 0
    model.train()
    for ep in range(epochs):
        it = loader
        if show_progress:
            try:
                from tqdm import tqdm

                it = tqdm(loader, desc=f"DP-SGD epoch {ep + 1}/{epochs}", leave=False)
            except ImportError:  # pragma: no cover
                pass
        for xb, yb in it:
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
            steps += 1
    seconds = time.perf_counter() - t0
    eps = float(engine.accountant.get_epsilon(delta=target_delta, **kw)) if engine is not None else None
    net = _unwrap(model)
    net.eval()
    acc = float(np.mean(predict(net, images) == np.asarray(labels)))
    return DPTrainResult(model=net, epsilon=eps, delta=target_delta if engine is not None else None,
                         target_epsilon=target_epsilon, noise_multiplier=noise, max_grad_norm=max_grad_norm,
                         epochs=epochs, steps=steps, batch_size=batch_size,
                         sample_rate=1.0 / n_batches, accountant=accountant if engine else "none",
                         seconds=seconds, train_accuracy=acc)


def _batched(model: Any, images: np.ndarray, fn: str, batch_size: int = 2048) -> np.ndarray:
    import torch

    out = []
    model.eval()
    with torch.inference_mode():
        for i in range(0, images.shape[0], batch_size):
            xb = to_tensor(images[i:i + batch_size])
            out.append((model.features(xb) if fn == "features" else model(xb)).numpy())
    return np.concatenate(out).astype(np.float64)


def cnn_features(model: Any, images: np.ndarray) -> np.ndarray:
    """Penultimate activations (n, feature_dim), float64. Post-processing of the DP model: no extra privacy cost."""
    return _batched(_unwrap(model), images, "features")


def predict(model: Any, images: np.ndarray) -> np.ndarray:
    """Predicted digits of the CNN's own (softmax) head."""
    return np.argmax(_batched(_unwrap(model), images, "logits"), axis=1)


def unit_rows(F: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero): ‖x‖ ≤ 1 as the certified head requires."""
    n = np.linalg.norm(F, axis=1, keepdims=True)
    return F / np.where(n > 0, n, 1.0)




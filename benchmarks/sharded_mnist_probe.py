"""Tuning probe for ``bench_sharded.py --task mnist``: validation accuracy of an MLP 784-128-10 trained on all of a
training split (S = 1) and of the mean-probability ensemble of S MLPs each trained on 1/S of it (S = 8), fast.

A float32 replica of :class:`lethe.sharded.TorchShardClassifier`'s training, NOT the estimator itself: the S networks
are trained side by side as one batched matmul (``torch.baddbmm``), which makes a 30-epoch probe of the 8 shards cost
what one network's does. Same model and training otherwise: weights and biases uniform in ±1/√fan_in (torch's
``nn.Linear`` default), plain SGD (``--momentum 0``), batch 64, cross-entropy, a fresh order every epoch, the step
size constant, or decayed linearly or by a cosine to 0 over the run (``--schedule``), random image shifts of up to
``--augment`` pixels with zero fill (bilinear resampling at whole-pixel offsets: the exact shift). Shards are a
random partition of the split (the estimator's is a keyed hash: also uniform). It chose the settings of the benchmark
run quoted in docs/sharded.md; ``bench_sharded.py --task mnist-tune`` re-checks them with the real estimator in
float64.

Train: the first 50,000 MNIST training images; validation: the last 10,000 (the test set is never used).

Run: ``OMP_NUM_THREADS=1 python benchmarks/sharded_mnist_probe.py --shards 8 --lr 0.8 --epochs 30 --schedule linear
--augment 2 [--every 5]``; prints the ensemble's (and a single member's) validation accuracy every ``--every`` epochs.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from lethe.datasets import load_mnist


def _shift(x: torch.Tensor, gen: torch.Generator, m: int) -> torch.Tensor:
    n = x.shape[0] * x.shape[1]
    t = torch.randint(-m, m + 1, (n, 2), generator=gen).float() * 2 / 28
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = 1
    theta[:, :, 2] = t
    img = x.reshape(n, 1, 28, 28)
    grid = torch.nn.functional.affine_grid(theta, list(img.shape), align_corners=False)
    return torch.nn.functional.grid_sample(img, grid, align_corners=False).reshape(x.shape)


def probe(S: int, lr: float, epochs: int, schedule: str, augment: int, momentum: float, every: int,
          seed: int = 0) -> list[tuple[int, float, float]]:
    Xtr8, ytr8, _, _ = load_mnist()
    X = torch.from_numpy((Xtr8.reshape(len(Xtr8), -1) / 255.0).astype(np.float32))
    y = torch.from_numpy(ytr8.astype(np.int64))
    Xt, yt, Xv, yv = X[:50000], y[:50000], X[50000:], y[50000:]
    gen = torch.Generator().manual_seed(seed)
    n_s = 50000 // S
    shards = torch.randperm(50000, generator=gen)[: n_s * S].view(S, n_s)

    def layer(i: int, o: int) -> list[torch.Tensor]:
        b = 1 / math.sqrt(i)
        return [((torch.rand(S, *shape, generator=gen) * 2 - 1) * b).requires_grad_() for shape in ((i, o), (1, o))]

    W1, b1 = layer(784, 128)
    W2, b2 = layer(128, 10)

    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(b2, torch.relu(torch.baddbmm(b1, x, W1)), W2)

    opt = torch.optim.SGD([W1, b1, W2, b2], lr=lr, momentum=momentum)
    total, k, out = epochs * math.ceil(n_s / 64), 0, []
    for e in range(epochs):
        orders = torch.stack([torch.randperm(n_s, generator=gen) for _ in range(S)])
        for start in range(0, n_s, 64):
            idx = shards.gather(1, orders[:, start:start + 64])
            xb = _shift(Xt[idx], gen, augment) if augment else Xt[idx]
            if schedule == "linear":
                opt.param_groups[0]["lr"] = lr * (1 - k / total)
            elif schedule == "cosine":  # probe only (not an estimator option)
                opt.param_groups[0]["lr"] = lr * 0.5 * (1 + math.cos(math.pi * k / total))
            opt.zero_grad()
            # the sum over members of each member's mean loss: every member gets its own gradient
            loss = torch.nn.functional.cross_entropy(forward(xb).reshape(-1, 10), yt[idx].reshape(-1),
                                                     reduction="sum") / idx.shape[1]
            loss.backward()
            opt.step()
            k += 1
        if (e + 1) % every == 0 or e + 1 == epochs:
            with torch.no_grad():
                p = torch.softmax(forward(Xv.expand(S, -1, -1)), -1)
            out.append((e + 1, float((p.mean(0).argmax(1) == yv).float().mean()),
                        float((p[0].argmax(1) == yv).float().mean())))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--schedule", choices=["constant", "linear", "cosine"], default="constant")
    ap.add_argument("--augment", type=int, default=0)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--every", type=int, default=None, help="evaluate every this many epochs (default: at the end)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    c0 = time.process_time()
    res = probe(args.shards, args.lr, args.epochs, args.schedule, args.augment, args.momentum,
                args.every or args.epochs)
    print(f"S = {args.shards}, η = {args.lr:g} ({args.schedule}), {args.epochs} epochs, shifts ±{args.augment} px, "
          f"momentum {args.momentum:g}: validation accuracy (ensemble / one member)")
    for e, ens, one in res:
        print(f"  epoch {e:3d}: {ens:.4f} / {one:.4f}")
    print(f"  ({time.process_time() - c0:.0f} s CPU)")


if __name__ == "__main__":
    main()

"""Run Koloskova et al.'s own trainer (ICML 2025, ``stair-lab/certified-unlearning-neural-networks-icml-2025``, JAX) on
the benchmark's MNIST-10 data and CNN, for one deletion request of 10 records, at 1/10 of retraining's compute.

This file is ours; it imports their ``src.training.trainer.Trainer`` unchanged from a checkout of their repository
and runs under a separate virtual environment with jax, flax, optax, wandb (disabled) and dp-accounting, because
lethe does not depend on JAX. Their data modules (torchvision downloads) and their ``torch`` import (type hints only)
are replaced: the data are handed over as numpy batches by a minimal loader, ``torch`` by a stub module.
Checkpoint writing is switched off. Nothing of theirs is copied into lethe.

Setup (see docs/nn_unlearning.md §4, "Anchors"):

    git --git-dir=<mirror> --work-tree=/work/scratch/i17/kolo checkout -f HEAD -- .
    python3 -m venv venv && venv/bin/pip install "jax[cpu]" flax optax wandb dp-accounting pyyaml scipy
    # data: the same 10,000 training / 5,000 test images and the same 10 removed records as
    # bench_nn_unlearning.py --part cnn (seed 0), dumped to an .npz by the main environment
    WANDB_MODE=disabled venv/bin/python benchmarks/anchor_koloskova.py --repo kolo --data mnist10k.npz

Printed: for each configuration, their noise σ and steps, our accounting's ε at δ = 1e-5 for the noisy phase they
ran (lethe.nn.accounting, recomputed here from the printed numbers by the caller), test accuracy and wall time.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import types

import numpy as np


def _stub_torch() -> None:
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch.utils")
    data = types.ModuleType("torch.utils.data")
    data.DataLoader = object  # their trainer imports it for type hints only
    torch.Tensor = type("Tensor", (), {})  # scipy's array-API helpers look for torch.Tensor
    torch.utils = utils
    utils.data = data
    sys.modules.update({"torch": torch, "torch.utils": utils, "torch.utils.data": data})


class _Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


class Loader:
    """What their trainer uses of a DataLoader: iteration over (images, labels), len(), .dataset."""

    def __init__(self, X: np.ndarray, y: np.ndarray, batch: int, shuffle: bool, seed: int) -> None:
        self.X, self.y, self.batch, self.shuffle = X, y, batch, shuffle
        self.rng = np.random.default_rng(seed)
        self.dataset = _Sized(X.shape[0])

    def __len__(self) -> int:
        return -(-self.X.shape[0] // self.batch)

    def __iter__(self):  # type: ignore[no-untyped-def]
        order = self.rng.permutation(self.X.shape[0]) if self.shuffle else np.arange(self.X.shape[0])
        for i in range(0, order.size, self.batch):
            j = order[i:i + self.batch]
            yield self.X[j], self.y[j]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repo", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--train-epochs", type=int, default=10)
    p.add_argument("--unlearn-epochs", type=int, default=1)
    p.add_argument("--only", default="")
    p.add_argument("--seed", type=int, default=0, help="offsets every PRNG key and loader seed")
    a = p.parse_args()
    _stub_torch()
    sys.path.insert(0, a.repo)
    import flax.linen as nn
    import jax
    import wandb
    from src.training.trainer import Trainer  # theirs, unchanged

    wandb.init(mode="disabled")
    Trainer.save_checkpoint = lambda self, state, epoch: None  # no checkpoint files

    class CNN(nn.Module):  # the benchmark's CNN: conv 1→8 k5 s2, ReLU, conv 8→16 k5 s2, ReLU, linear 256→10
        num_classes: int = 10

        @nn.compact
        def __call__(self, x, train: bool = True, mutable=None):  # type: ignore[no-untyped-def]
            x = nn.relu(nn.Conv(8, (5, 5), strides=(2, 2), padding="VALID")(x))
            x = nn.relu(nn.Conv(16, (5, 5), strides=(2, 2), padding="VALID")(x))
            return nn.Dense(self.num_classes)(x.reshape((x.shape[0], -1)))

    d = np.load(a.data)
    X, y, Xt, yt, forget = d["X"], d["y"], d["Xt"], d["yt"], d["forget"]
    keep = np.setdiff1d(np.arange(X.shape[0]), forget)
    batch = 128
    base = {
        "dataset": {"input_shape": [28, 28, 1], "batch_size": batch},
        "model": {"n_classes": 10},
        # their MNIST training recipe (budget_curve_runs/*-mnist): SGD, one-cycle max lr 0.06, wd 5e-4
        "training": {"epochs": a.train_epochs, "optim": "SGD", "max_lr": 0.06, "momentum": 0, "weight_decay": 5e-4,
                     "lr_schedule": "onecycle", "pretrained": False},
        "post_unlearning": {"optim": "SGD", "momentum": 0, "weight_decay": 5e-4, "lr_schedule": "onecycle",
                            "max_lr": 0.1, "post_unlearn_clip": False},
        "secure_rng": False, "save_every": 1, "global_seed": 1234, "checkpoint_path": "/nonexistent",
    }
    unl_common = {"epochs": a.unlearn_epochs, "optim": "SGD", "momentum": 0, "lr_schedule": "constant",
                  "noise_schedule": "constant", "init_model_clip_type": "clip", "init_sigma": 0, "delta": 1e-5}
    configs = {
        # their pabi-mnist config (gradient clipping): C0 = 0.01, lambda = 750, eta = 1e-4, C = 10, "eps_renyi" 1
        "pabi (their config, eps_renyi_target 1)": {
            **unl_common, "weight_decay": 750, "max_lr": 1e-4, "init_model_clip": 0.01, "algorithm": "iteration",
            "iteration": {"epsilon_renyi_target": 1.0, "grad_clip": 10.0, "calc_intermediate_eps_renyi": False}},
        # the same with eps_renyi_target = our slope for (1, 1e-5): their sigma then equals ours
        "pabi (eps_renyi_target 0.030557 = our slope at (1, 1e-5))": {
            **unl_common, "weight_decay": 750, "max_lr": 1e-4, "init_model_clip": 0.01, "algorithm": "iteration",
            "iteration": {"epsilon_renyi_target": 0.030557, "grad_clip": 10.0, "calc_intermediate_eps_renyi": False}},
        # their cc-mnist config (model clipping): C0 = 7, lambda = 0.01, eta = 0.01, sigma = 0.01, C2 = 0.001
        "model clipping (their config, eps 1)": {
            **unl_common, "weight_decay": 0.01, "max_lr": 0.01, "init_model_clip": 7,
            "algorithm": "contractive_coefficients",
            "contractive_coefficients": {"epsilon_target": 1, "sigma": 0.01, "model_clip": 0.001, "grad_clip": False,
                                         "noise_addition_after_projection": True,
                                         "noise_addition_before_projection": False}},
        "retrain from scratch (unlearn-epochs of their recipe)": {
            **unl_common, "weight_decay": 5e-4, "max_lr": 0.06, "init_model_clip": 20, "algorithm": "retrain",
            "retrain": {}},
    }
    model = CNN()
    trainer_kw = dict(model=model, val_dataloader=Loader(Xt, yt, 1000, False, 0),
                      test_dataloader=Loader(Xt, yt, 1000, False, 0))

    def make(cfg: dict, seed: int) -> Trainer:
        return Trainer(config=cfg, key=jax.random.PRNGKey(seed), train_dataloader=Loader(X, y, batch, True, seed),
                       forget_dataloader=Loader(X[forget], y[forget], batch, True, seed),
                       retain_dataloader=Loader(X[keep], y[keep], batch, True, seed + 1), use_pretrained=False,
                       run_dir="/tmp", **trainer_kw)

    def acc(tr: Trainer, state) -> float:  # type: ignore[no-untyped-def]
        return float(tr.evaluate(state, tr.test_dataloader, "t")["t_accuracy"])

    cfg0 = copy.deepcopy(base)
    cfg0["unlearning"] = configs["retrain from scratch (unlearn-epochs of their recipe)"]
    tr0 = make(cfg0, 10 * a.seed)
    t = time.perf_counter()
    trained = tr0.fit()
    t_train = time.perf_counter() - t
    d_params = sum(x.size for x in jax.tree_util.tree_leaves(trained.params))
    print(f"their trainer, our CNN (d = {d_params}): trained {a.train_epochs} epochs on {X.shape[0]} images "
          f"({a.train_epochs * len(tr0.train_dataloader)} steps of {batch}) in {t_train:.1f} s; test accuracy "
          f"{acc(tr0, trained):.4f}", flush=True)
    for name, ucfg in configs.items():
        if a.only and a.only not in name:
            continue
        cfg = copy.deepcopy(base)
        cfg["unlearning"] = ucfg
        tr = make(cfg, 10 * a.seed + 1)
        tr.model_dimension = d_params
        t = time.perf_counter()
        state = tr.unlearn(copy.deepcopy(trained))
        el = time.perf_counter() - t
        extra = ""
        if ucfg["algorithm"] == "iteration":
            extra = (f"T = {int(tr.pabi_steps)} noisy steps, sigma = {float(tr.unlearn_sigma_t(0)):.6g}, "
                     f"C0 = {ucfg['init_model_clip']}, C = {ucfg['iteration']['grad_clip']}, "
                     f"lr = {ucfg['max_lr']}, lambda = {ucfg['weight_decay']}; ")
        elif ucfg["algorithm"] == "contractive_coefficients":
            extra = (f"their delta after the noisy phase {float(tr.unlearn_current_delta):.3g}, sigma = "
                     f"{ucfg['contractive_coefficients']['sigma']}, C2 = "
                     f"{ucfg['contractive_coefficients']['model_clip']}; ")
        print(f"{name}: {extra}{a.unlearn_epochs * len(tr.retain_dataloader)} steps of {batch} on the "
              f"{keep.size} retained records ({a.unlearn_epochs}/{a.train_epochs} of training); test accuracy "
              f"{acc(tr, state):.4f}; {el:.1f} s", flush=True)


if __name__ == "__main__":
    main()

"""Benchmark: certified unlearning for a small CNN on MNIST-10 (Koloskova et al. 2025, :mod:`lethe.nn`), and the
convex schedules of Chien et al. 2024 (PNSGD) vs Chourasia & Shah Thm 5.1 on MNIST 3 vs 8.

Part A (``--part cnn``). A CNN (conv 1→8 k5 s2, ReLU, conv 8→16 k5 s2, ReLU, linear 256→10; 5,994 parameters, no
buffers) is trained by plain SGD on ``--n-train`` MNIST training images (pixels / 255). Then ``--requests``
sequential deletion requests of ``--per-request`` random training records each are served by noisy clipped
fine-tuning at (ε, δ) = (1, 1e-5): projection onto ‖θ‖ ≤ C₀, T noisy clipped steps (σ, T from
:func:`lethe.nn.accounting.calibrate_finetune`), projection onto ‖θ‖ ≤ ``--post-radius`` and ``--post-steps`` plain
SGD steps on the retained records (post-processing). The post-processing budget is set so that the whole removal
costs ``--budget`` × the retraining's per-example gradient evaluations. Every ``--retrain-every`` requests a model is
retrained from scratch (same recipe as the original) on the retained records. Printed per request: test accuracy of
the unlearned model (and after the noisy phase alone, for the first request), of the retrained model when there is
one, and wall time of each; at the end the means, the compute ratios (gradient evaluations and wall time), and the
loss-threshold membership advantage (:func:`lethe.audit.stats.advantage`, cross-fitted, 95 % Clopper–Pearson) of the
removed records against never-seen test records, for the final unlearned model, a retrained model, the original
model, and a positive control (the same CNN trained to overfit 500 records for 60 epochs, attacked on those records).

Beside this gradient-clipping run ([GC]) the same requests are served on a second copy by model clipping ([MC],
:func:`lethe.nn.unlearning.unlearn_model_clip`, same budget); at every retraining the GC unlearning is also applied
to an untrained model ([U0]) and a model is trained from scratch by the training recipe stopped at the unlearning
budget ([S]); at the end, training from scratch is measured against the budget (0.1–1.0 × retraining, 3 seeds).
Why these are compared: ``docs/nn_unlearning.md`` §4.

Part B (``--part convex``). Logistic regression on MNIST 3 vs 8 (rows ‖x‖ = 1, L = 1, β = 1/4, λ = 1e-2). For the same
(ε, δ) = (1, 1e-5), n, λ, step size η = 1/(2(λ+β)) and per-step noise std √(2ησ²) of Thm 5.1 (ε_dp = 1), the steps per
deletion request of 10 records under Thm 5.1 (best Rényi order q; (q, ε_dd) converted to (ε, δ) by Canonne et al.
Prop. 12) and under our PNSGD bound (:mod:`lethe.noisygd.noisy_sgd`) for batch sizes n, 1024 and 128 are printed side
by side with the test accuracy of a model learned and then unlearned under each.

Part C (``--part anchors``) runs Chien et al.'s own code (from a local git mirror) on the same MNIST 3 vs 8 arrays
beside ours; Koloskova et al.'s JAX code is run by ``benchmarks/anchor_koloskova.py`` in its own environment.

Figures are printed; nothing is asserted. Run:
``OMP_NUM_THREADS=1 python benchmarks/bench_nn_unlearning.py [--part cnn|convex|anchors|all] [--requests 100]
[--quick]``.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import time

import numpy as np
import torch
from torch import nn

from lethe.audit.stats import advantage
from lethe.datasets.mnist import load_mnist, load_mnist_binary
from lethe.nn.accounting import calibrate_finetune, calibrate_model_clip
from lethe.nn.models import build_module
from lethe.nn.unlearning import train, unlearn, unlearn_model_clip
from lethe.noisygd.noisy_sgd import pnsgd_logistic, pnsgd_schedule
from lethe.noisygd.schedule import convex_schedule
from lethe.privacy.rdp import rdp_to_dp_tight

CNN = {"kind": "cnn", "image_shape": [1, 28, 28], "channels": [8, 16], "kernel": 5}


def _acc(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(X).argmax(1) == y).float().mean())


def _losses(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return nn.functional.cross_entropy(model(X), y, reduction="none").double().numpy()


def _mia(model: nn.Module, X_in: torch.Tensor, y_in: torch.Tensor, X_out: torch.Tensor, y_out: torch.Tensor) -> str:
    a = advantage(-_losses(model, X_in, y_in), -_losses(model, X_out, y_out), random_state=0)
    return f"adv {a.advantage:+.3f} [{a.low:+.3f}, {a.high:+.3f}] auc {a.auc:.3f} (n_in {a.n_pos}, n_out {a.n_neg})"


def _sgd_steps(model: nn.Module, X: torch.Tensor, y: torch.Tensor, *, steps: int, lr: float, batch_size: int,
               momentum: float, seed: int) -> nn.Module:
    """The training recipe (SGD with momentum, batches without replacement) stopped after ``steps`` steps."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    g = np.random.default_rng(seed)
    n, done = X.shape[0], 0
    model.train()
    while done < steps:
        perm = torch.from_numpy(g.permutation(n))
        for i in range(0, n - batch_size + 1, batch_size):
            if done == steps:
                break
            idx = perm[i:i + batch_size]
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
            opt.step()
            done += 1
    model.eval()
    return model


def part_cnn(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    Xtr, ytr, Xte, yte = load_mnist()
    rng = np.random.default_rng(args.seed)
    pick = rng.choice(Xtr.shape[0], size=args.n_train, replace=False)
    X = torch.tensor(Xtr[pick].reshape(args.n_train, -1) / 255.0, dtype=torch.float32)
    y = torch.tensor(ytr[pick].astype(np.int64))
    te = rng.choice(Xte.shape[0], size=args.n_test, replace=False)
    Xt = torch.tensor(Xte[te].reshape(args.n_test, -1) / 255.0, dtype=torch.float32)
    yt = torch.tensor(yte[te].astype(np.int64))
    b, epochs, train_lr = args.batch_size, args.train_epochs, args.train_lr

    def fresh_model(seed: int) -> nn.Module:
        return build_module(CNN, 784, 10, random_state=np.random.default_rng(seed))

    def retrain(Xr: torch.Tensor, yr: torch.Tensor, seed: int) -> tuple[nn.Module, float]:
        t = time.perf_counter()
        m = train(fresh_model(seed), Xr, yr, epochs=epochs, lr=train_lr, batch_size=b, momentum=0.9,
                  random_state=seed)
        return m, time.perf_counter() - t

    d = sum(p.numel() for p in fresh_model(0).parameters())
    original, t_train = retrain(X, y, args.seed)
    retrain_evals = epochs * args.n_train
    s = calibrate_finetune(1.0, 1e-5, model_radius=args.model_radius, grad_clip=args.grad_clip, lr=args.lr)
    mc = calibrate_model_clip(1.0, 1e-5, model_clip=args.mc_clip, lr=args.lr, steps=args.mc_steps)
    budget_steps = int(args.budget * retrain_evals / b)
    post_steps = max(0, budget_steps - s.steps)
    mc_post = max(0, budget_steps - mc.steps)
    post = {"post_lr": args.post_lr, "post_radius": args.post_radius, "post_momentum": args.post_momentum}
    print(f"MNIST-10 CNN: d = {d} parameters, n_train = {args.n_train}, n_test = {args.n_test}; training: {epochs} "
          f"epochs of SGD (lr {train_lr}, momentum 0.9, batch {b}) = {retrain_evals} per-example gradients, "
          f"{t_train:.1f} s; test accuracy {_acc(original, Xt, yt):.4f}")
    print(f"[GC] gradient clipping, per request (eps, delta) = (1, 1e-5): C0 = {s.model_radius}, C = {s.grad_clip} "
          f"(per-sample clipping), lr = {s.lr}, T = {s.steps} noisy steps, sigma = {s.sigma:.4f} per coordinate "
          f"(noise norm per step ~ {s.sigma * math.sqrt(d):.1f}), certified eps = {s.epsilon_certified:.6f}; "
          f"then projection onto ||theta|| <= {args.post_radius} and {post_steps} SGD steps (lr "
          f"{args.post_lr}, momentum {args.post_momentum}) = {(s.steps + post_steps) * b} per-example gradients "
          f"(budget {args.budget} x retraining)")
    print(f"[MC] model clipping, per request (eps, delta) = (1, 1e-5): C2 = {mc.model_clip}, lr = {mc.lr}, "
          f"T = {mc.steps} noisy steps, sigma = {mc.sigma:.4f} per coordinate (noise norm per step ~ "
          f"{mc.sigma * math.sqrt(d):.1f}), certified delta at eps 1 = {mc.delta_certified:.3g}; then the same "
          f"post-processing with {mc_post} SGD steps = {(mc.steps + mc_post) * b} per-example gradients")
    print(f"[U0] = [GC] applied to an untrained model (fresh initialisation) instead of the trained one; "
          f"[S] = training from scratch by the training recipe stopped after {budget_steps} steps "
          f"({budget_steps * b} per-example gradients, the unlearning budget)")
    model = copy.deepcopy(original)
    model_mc = copy.deepcopy(original)
    alive = np.arange(args.n_train)
    removed_all: list[int] = []
    acc_u: list[float] = []
    acc_mc: list[float] = []
    acc_r: list[float] = []
    paired: list[tuple[float, float, float, float, float]] = []
    t_u: list[float] = []
    t_r: list[float] = []
    last_retrained = original
    for k in range(1, args.requests + 1):
        gone = rng.choice(alive.size, size=args.per_request, replace=False)
        removed_all += alive[gone].tolist()
        alive = np.delete(alive, gone)
        Xr, yr = X[alive], y[alive]
        noisy_acc = ""
        if k == 1:
            probe = copy.deepcopy(model)
            unlearn(probe, Xr, yr, schedule=s, batch_size=b, random_state=rng)
            probe_mc = copy.deepcopy(model_mc)
            unlearn_model_clip(probe_mc, Xr, yr, schedule=mc, batch_size=b, random_state=rng)
            noisy_acc = (f"  (noisy phase alone: GC {_acc(probe, Xt, yt):.4f}, MC {_acc(probe_mc, Xt, yt):.4f})")
        t = time.perf_counter()
        cert = unlearn(model, Xr, yr, schedule=s, batch_size=b, post_steps=post_steps, n_removed=args.per_request,
                       random_state=rng, **post)
        t_u.append(time.perf_counter() - t)
        acc_u.append(_acc(model, Xt, yt))
        cert_mc = unlearn_model_clip(model_mc, Xr, yr, schedule=mc, batch_size=b, post_steps=mc_post,
                                     n_removed=args.per_request, random_state=rng, **post)
        acc_mc.append(_acc(model_mc, Xt, yt))
        line = (f"request {k:3d}: n = {alive.size}, unlearned acc GC {acc_u[-1]:.4f} ({t_u[-1]:.2f} s), "
                f"MC {acc_mc[-1]:.4f}{noisy_acc}")
        if k % args.retrain_every == 0 or k == args.requests:
            last_retrained, tr = retrain(Xr, yr, args.seed + k)
            t_r.append(tr)
            acc_r.append(_acc(last_retrained, Xt, yt))
            u0 = fresh_model(10_000 + k)
            unlearn(u0, Xr, yr, schedule=s, batch_size=b, post_steps=post_steps, random_state=rng, **post)
            scratch = _sgd_steps(fresh_model(20_000 + k), Xr, yr, steps=budget_steps, lr=train_lr, batch_size=b,
                                 momentum=0.9, seed=k)
            paired.append((acc_u[-1], acc_mc[-1], acc_r[-1], _acc(u0, Xt, yt), _acc(scratch, Xt, yt)))
            line += (f", retrained acc {acc_r[-1]:.4f} ({tr:.2f} s), U0 {paired[-1][3]:.4f}, "
                     f"S {paired[-1][4]:.4f}")
        print(line, flush=True)
    print(f"\nper-request certificates: GC eps {cert.epsilon}, delta {cert.delta}, sigma {cert.sigma:.4f}, "
          f"T {cert.steps}, C {cert.grad_clip}, C0 {cert.model_radius}, post_steps {cert.post_steps}, gradient "
          f"evaluations {cert.gradient_evaluations}; MC delta {cert_mc.delta_certified:.3g} at eps {cert_mc.epsilon}, "
          f"sigma {cert_mc.sigma:.4f}, T {cert_mc.steps}, C2 {cert_mc.model_clip}, post_steps {cert_mc.post_steps}, "
          f"gradient evaluations {cert_mc.gradient_evaluations}")
    mr = statistics.fmean(acc_r)
    cols = [statistics.fmean(p[i] for p in paired) for i in range(5)]
    print(f"mean test accuracy over {len(acc_u)} requests: GC {statistics.fmean(acc_u):.4f}, MC "
          f"{statistics.fmean(acc_mc):.4f}; retrained {mr:.4f} over {len(acc_r)} retrainings")
    print(f"on the {len(paired)} requests with a retraining: GC {cols[0]:.4f} (gap {100 * (cols[0] - mr):+.2f} pp), "
          f"MC {cols[1]:.4f} (gap {100 * (cols[1] - mr):+.2f} pp), U0 (GC from an untrained model) {cols[3]:.4f}, "
          f"S (scratch at the same budget) {cols[4]:.4f} (gap {100 * (cols[4] - mr):+.2f} pp)")
    print(f"compute per request: gradient evaluations {cert.gradient_evaluations} vs retraining {retrain_evals} "
          f"(ratio {cert.gradient_evaluations / retrain_evals:.3f}); median wall time GC "
          f"{statistics.median(t_u):.2f} s "
          f"vs {statistics.median(t_r):.2f} s (ratio {statistics.median(t_u) / statistics.median(t_r):.3f})")
    Xg, yg = X[removed_all], y[removed_all]
    out = torch.arange(Xt.shape[0])[: max(len(removed_all), 200)]
    print(f"\nmembership advantage (loss threshold) on the {len(removed_all)} removed records vs "
          f"{out.numel()} test records:")
    print(f"  final unlearned model GC : {_mia(model, Xg, yg, Xt[out], yt[out])}")
    print(f"  final unlearned model MC : {_mia(model_mc, Xg, yg, Xt[out], yt[out])}")
    print(f"  last retrained model     : {_mia(last_retrained, Xg, yg, Xt[out], yt[out])}")
    print(f"  original model           : {_mia(original, Xg, yg, Xt[out], yt[out])}")
    small = torch.from_numpy(rng.choice(args.n_train, size=500, replace=False))
    overfit = train(fresh_model(7), X[small], y[small], epochs=60, lr=train_lr, batch_size=b, momentum=0.9,
                    random_state=7)
    print(f"  positive control (500 records, 60 epochs; members vs test): "
          f"{_mia(overfit, X[small], y[small], Xt[out], yt[out])}")
    if args.budget_curve:
        print("\ntraining from scratch (the training recipe stopped early) on the final retained data, vs budget:")
        for frac in (0.1, 0.2, 0.3, 0.5, 0.7, 1.0):
            st = int(frac * retrain_evals / b)
            accs = [_acc(_sgd_steps(fresh_model(30_000 + j), Xr, yr, steps=st, lr=train_lr, batch_size=b,
                                    momentum=0.9, seed=j), Xt, yt) for j in range(3)]
            print(f"  budget {frac:.1f} x retraining ({st} steps): test accuracy "
                  f"{statistics.fmean(accs):.4f} (3 seeds: {', '.join(f'{a:.4f}' for a in accs)}); gap to the "
                  f"retrained mean {100 * (statistics.fmean(accs) - mr):+.2f} pp", flush=True)


def part_convex(args: argparse.Namespace) -> None:
    Xtr, ytr, Xte, yte = load_mnist_binary()
    n, d = Xtr.shape
    lam, eps, delta, r = 1e-2, 1.0, 1e-5, 10
    best = None
    for q in [2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0]:
        # largest eps_dd with the (q, eps_dd) -> (eps, delta) conversion <= eps
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if rdp_to_dp_tight(q, mid, delta) <= eps else (lo, mid)
        if lo <= 0.0 or lo >= 1.0:
            continue
        sch = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=lam, n=n, d=d, r=r, q=q, epsilon_dp=1.0,
                              epsilon_dd=lo, utility=False)
        if best is None or sch.k_unlearn < best[1].k_unlearn:
            best = (q, sch)
    assert best is not None
    q, sch = best
    eta, noise = sch.eta, math.sqrt(2.0 * sch.eta * sch.sigma2)
    radius = 1.0 / lam
    print(f"MNIST 3 vs 8 logistic regression: n = {n}, d = {d}, lambda = {lam}, (eps, delta) = ({eps}, {delta}) per "
          f"request of r = {r} records; eta = {eta:.4f}, per-step noise std {noise:.5f} (Thm 5.1 with eps_dp = 1)")
    rows = [(f"Chourasia & Shah Thm 5.1 (full batch, q = {q:g}, eps_dd = {sch.epsilon_dd:.3f})", sch.k_unlearn,
             sch.k_unlearn * n, n, None)]
    for b in (n, 1024, 128):
        ps = pnsgd_schedule(eps, delta, n=n, lam=lam, sigma=noise, eta=eta, batch_size=b, radius=radius, r=r)
        rows.append((f"Chien et al. PNSGD (ours), batch {b}", ps.steps_first_request,
                     ps.gradient_evaluations_first_request, b, ps))
    learn_epochs = 30
    seeds = list(range(args.convex_seeds))
    head = f"test acc ({len(seeds)} seeds)"
    print(f"{'schedule':62s} {'steps/request':>14s} {'grad evals':>12s} {head:>22s}")
    for name, steps, evals, b, ps in rows:
        accs = []
        for k in seeds:
            rng = np.random.default_rng(args.seed + k)
            gone = rng.choice(n, size=r, replace=False)
            X2, y2 = Xtr.copy(), ytr.copy()
            X2[gone], y2[gone] = 0.0, 0.0
            s1, s2 = 1 + 10 * k, 2 + 10 * k
            if ps is None:  # Noisy-GD = PNSGD with b = n, no projection needed; run it with the same kernel
                theta = pnsgd_logistic(Xtr, ytr, np.zeros(d), epochs=learn_epochs * 10, eta=eta, lam=lam,
                                       sigma=noise, batch_size=n, radius=1e12, random_state=s1)
                theta = pnsgd_logistic(X2, y2, theta, epochs=steps, eta=eta, lam=lam, sigma=noise, batch_size=n,
                                       radius=1e12, random_state=s2)
            else:
                ep = learn_epochs * 10 if b == n else learn_epochs
                theta = pnsgd_logistic(Xtr, ytr, np.zeros(d), epochs=ep, eta=eta, lam=lam, sigma=noise,
                                       batch_size=b, radius=radius, random_state=s1)
                theta = pnsgd_logistic(X2, y2, theta, epochs=ps.epochs_first_request, eta=eta, lam=lam,
                                       sigma=noise, batch_size=b, radius=radius, random_state=s2)
            accs.append(float(np.mean(np.sign(Xte @ theta) == yte)))
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        print(f"{name:62s} {steps:14d} {evals:12d} {statistics.fmean(accs):10.4f} +- {sd:.4f} "
              f"[{', '.join(f'{a:.4f}' for a in accs)}]", flush=True)


def part_anchor_chien(args: argparse.Namespace) -> None:
    """Run Chien et al.'s own PNSGD code (``Graph-COM/SGD_unlearning``: ``main_sgd.Runner`` and ``sgd.py``, taken from a
    local git mirror, never vendored) on our MNIST 3 vs 8 arrays, beside ours with the same hyper-parameters.

    Their ``utils.py`` (torchvision/HF datasets/nltk/transformers loaders) is replaced by a stub that hands over our
    arrays; their δ is fixed by the script to 1/n, so both sides use (ε, δ) = (1, 1/n) here.
    """
    import subprocess
    import sys
    import tempfile
    import types
    from pathlib import Path

    from scipy.optimize import minimize_scalar

    from lethe.noisygd.noisy_sgd import pnsgd_learning_shift, pnsgd_unlearning_epochs, pnsgd_unlearning_epsilon

    git_dir = Path(args.chien_git_dir)
    if not git_dir.exists():
        print(f"Chien et al.'s code not run: no git mirror at {git_dir} (pass --chien-git-dir).")
        return
    tmp = Path(tempfile.mkdtemp(prefix="chien-"))
    for name in ("main_sgd.py", "sgd.py"):
        (tmp / name).write_bytes(subprocess.run(["git", "--git-dir", str(git_dir), "show", f"HEAD:{name}"],
                                                check=True, capture_output=True).stdout)
    Xtr, ytr, Xte, yte = load_mnist_binary()
    stub = types.ModuleType("utils")
    stub.load_features = lambda _a: (torch.tensor(Xtr, dtype=torch.float32), torch.tensor(Xte, dtype=torch.float32),
                                     torch.tensor(ytr, dtype=torch.float32), None,
                                     torch.tensor(yte, dtype=torch.float32))
    stub.create_nested_folder = lambda _p: None
    sys.modules["utils"] = stub
    sys.path.insert(0, str(tmp))
    import main_sgd  # their module

    ns = argparse.Namespace(dataset="MNIST", lam=1e-6, M=1.0, projection=100.0, batch_size=128, gpu=0, sigma=0.03,
                            burn_in=args.anchor_epochs, data_dir=".", extractor="raw_feature")
    r = main_sgd.Runner(ns)
    r.get_metadata()
    n, b, sigma = r.n, ns.batch_size, ns.sigma
    k_theirs, _ = r.compute_k_loose(sigma, 1.0, b)
    c, step_noise = 1 - r.eta * r.m, math.sqrt(2 * r.eta * sigma**2)
    zb = pnsgd_learning_shift(eta=r.eta, lipschitz=1.0, batch_size=b, n=n, c=c)
    k_ours = pnsgd_unlearning_epochs(1.0, 1.0 / n, distance=zb, c=c, sigma=step_noise, steps_per_epoch=n // b)
    e_theirs = minimize_scalar(lambda a: r.epsilon_alpha_loose(sigma, a, 1, b) + np.log(n) / (a - 1), bounds=(2, 1e5),
                               method="bounded").fun
    e_ours = pnsgd_unlearning_epsilon(distance=zb, c=c, sigma=step_noise, steps=n // b, delta=1.0 / n)
    print(f"Chien et al.'s code, MNIST 3 vs 8 (their first n = {n} rows), b = {b}, lambda*n = {r.m:.4g}, eta = "
          f"{r.eta:.4f}, step noise {step_noise:.4f}, projection {ns.projection}, (eps, delta) = (1, 1/n): epochs per "
          f"removal: theirs {k_theirs}, ours {k_ours}; eps after one epoch: theirs {e_theirs:.4g}, ours {e_ours:.4g}")
    trials = 2
    t = time.perf_counter()
    acc_learn, _, w_list = r.get_mean_performance(r.X_train, r.y_train, args.anchor_epochs, sigma, None,
                                                  ns.projection, b, r.batch_idx, return_w=True, num_trial=trials)
    t_learn = (time.perf_counter() - t) / trials
    X_rem, y_rem = r.get_removed_data(1)
    t = time.perf_counter()
    acc_unl, _ = r.get_mean_performance(X_rem, y_rem, k_theirs, sigma, w_list, ns.projection, b, r.batch_idx,
                                        num_trial=trials)
    t_unl = (time.perf_counter() - t) / trials
    X = r.X_train.numpy().astype(np.float64)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True)) * (1 + 1e-12)
    y = r.y_train.numpy().astype(np.float64)
    accs, t = [], time.perf_counter()
    for trial in range(trials):
        th = pnsgd_logistic(X, y, np.zeros(X.shape[1]), epochs=args.anchor_epochs, eta=r.eta, lam=r.m,
                            sigma=step_noise, batch_size=b, radius=ns.projection, random_state=trial)
        X2, y2 = X.copy(), y.copy()
        X2[-1], y2[-1] = 0.0, 0.0
        th = pnsgd_logistic(X2, y2, th, epochs=k_ours, eta=r.eta, lam=r.m, sigma=step_noise, batch_size=b,
                            radius=ns.projection, random_state=100 + trial)
        accs.append(float(np.mean(np.sign(Xte @ th) == yte)))
    print(f"  their code: learning {args.anchor_epochs} epochs, test acc {np.mean([float(a) for a in acc_learn]):.4f} "
          f"({t_learn:.1f} s/run); after unlearning {k_theirs} epoch(s): {np.mean([float(a) for a in acc_unl]):.4f} "
          f"({t_unl:.1f} s/run), mean of {trials} runs")
    print(f"  ours      : learning {args.anchor_epochs} epochs + unlearning {k_ours} epoch(s): test acc "
          f"{np.mean(accs):.4f} ({(time.perf_counter() - t) / trials:.1f} s/run), mean of {trials} runs")
    print("Koloskova et al.'s code (JAX) runs in its own virtual environment: benchmarks/anchor_koloskova.py "
          "(docs/nn_unlearning.md §5, Anchors).")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=["cnn", "convex", "anchors", "all"], default="all")
    p.add_argument("--chien-git-dir", default="/work/.mirror/Graph-COM+SGD_unlearning/repo")
    p.add_argument("--anchor-epochs", type=int, default=30)
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--per-request", type=int, default=10)
    p.add_argument("--retrain-every", type=int, default=10)
    p.add_argument("--n-train", type=int, default=10000)
    p.add_argument("--n-test", type=int, default=5000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--train-epochs", type=int, default=3)
    p.add_argument("--train-lr", type=float, default=0.05)
    p.add_argument("--model-radius", type=float, default=1.0)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--post-radius", type=float, default=10.0)
    p.add_argument("--post-lr", type=float, default=0.05)
    p.add_argument("--post-momentum", type=float, default=0.9)
    p.add_argument("--mc-clip", type=float, default=1.0, help="model clipping: C2")
    p.add_argument("--mc-steps", type=int, default=6, help="model clipping: T (sigma calibrated)")
    p.add_argument("--budget-curve", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--budget", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--convex-seeds", type=int, default=3, help="repeats (removed set, learning and unlearning noise)")
    p.add_argument("--quick", action="store_true", help="5 requests, 2000 training images")
    args = p.parse_args()
    if args.quick:
        args.requests, args.n_train, args.retrain_every, args.n_test = 5, 2000, 5, 2000
    torch.manual_seed(args.seed)
    if args.part in ("convex", "all"):
        part_convex(args)
        print()
    if args.part in ("anchors", "all"):
        part_anchor_chien(args)
        print()
    if args.part in ("cnn", "all"):
        part_cnn(args)


if __name__ == "__main__":
    main()

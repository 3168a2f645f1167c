"""Fresh noise against tree aggregation over the removal stream (issue 39; docs/release_drift.md).

For each data set: fit, then R single removals of random rows, a release every ``cadence`` removals (T = 1 + R/cadence
releases, (ε, δ) for the whole sequence). The centres are the same for every mechanism — Newton's minimiser of the
held rows, to a gradient residual ≤ β (checked) — and each mechanism adds its noise:

* ``fresh``: N(0, σ²I) per release, σ = √T σ_BW(ε, δ) Δ (``ReleasedLogisticRegression``'s calibration, here with
  the residual β of these centres instead of the estimator's ``residual_cap``);
* ``tree``: :class:`lethe.privacy.tree.TreeRelease` with the proven drift bound (:mod:`lethe.privacy.drift`);
* ``ideal tree``: the same tree if the drift were 0 (NOT proven; the issue's "idealised scheme"), for reference;
* ``planner``: whichever of fresh and tree has the smaller worst-release noise by the accountants' figures.

Reported: test accuracy of the exact centre (final data), of the median release and of the worst release.
The noise is seeded (reproducible, NOT private): this measures accuracy, not privacy. ``--streams`` noise streams
run over the same centres (a tree's releases share their upper nodes' noise, so one stream's median varies more).
``gram_cap`` is the held rows' λ_max(XᵀX) at fit + 1, taken as public (like ``n_floor``).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_release_frontier.py`` (``--quick``: 2·10⁴ synthetic rows).

``--estimator``: the same frontier through the library's estimator with its defaults but λ and n_floor
(``ReleasedLogisticRegression(noise_mechanism="fresh" | "tree" | "auto")``, ``residual_cap`` = 0.01, certified Newton
removals, ``rows_per_release`` = ``cadence``, ``gram_cap`` = λ_max(XᵀX) + 1 at fit) — each mechanism its own model
and ``--streams`` seeded noise streams; the exact row is the estimator's secret centres (the same for every stream).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from lethe.certified.bounds import release_sensitivity
from lethe.privacy.drift import gram_lambda_max
from lethe.privacy.gaussian import analytic_gaussian_sigma
from lethe.privacy.tree import TreeRelease, TreeReleaseAccountant

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_sklearn import synthetic  # noqa: E402


def newton(X: np.ndarray, y: np.ndarray, lam: float, w: np.ndarray, beta: float) -> np.ndarray:
    """Newton on Σ log(1 + e^{−y wᵀx}) + (λn/2)‖w‖² from w until the gradient's norm is ≤ β/2 (checked)."""
    n, d = X.shape
    for _ in range(50):
        z = y * (X @ w)
        s = 0.5 * (1.0 - np.tanh(0.5 * z))  # σ(−z), stable
        g = -(X.T @ (y * s)) + lam * n * w
        if np.linalg.norm(g) <= beta / 2:
            return w
        H = (X.T * (s * (1.0 - s))) @ X
        H[np.diag_indices(d)] += lam * n
        w = w - np.linalg.solve(H, g)
    raise RuntimeError("Newton did not reach the residual")


def centres(X: np.ndarray, y: np.ndarray, lam: float, removals: int, cadence: int, beta: float,
            seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    order = rng.choice(X.shape[0], size=removals, replace=False)
    keep = np.ones(X.shape[0], dtype=bool)
    w = newton(X, y, lam, np.zeros(X.shape[1]), beta)
    out = [w]
    for start in range(0, removals, cadence):
        keep[order[start:start + cadence]] = False
        w = newton(X[keep], y[keep], lam, w, beta)
        out.append(w)
    return out


def accuracy(W: np.ndarray, Xt: np.ndarray, yt: np.ndarray) -> np.ndarray:
    return np.mean(np.sign(Xt @ W.T) == yt[:, None], axis=0)


def run(name: str, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray, lam: float, removals: int,
        cadence: int, n_floor: int, epsilon: float, delta: float, beta: float, seed: int, streams: int) -> None:
    t0 = time.time()
    C = np.vstack(centres(X, y, lam, removals, cadence, beta, seed))
    T = C.shape[0]
    gram_cap = gram_lambda_max(X) + 1.0
    dlt = release_sensitivity(lam, n_floor, beta, loss_at_zero=math.log(2.0))
    fresh_sigma = math.sqrt(T) * analytic_gaussian_sigma(epsilon, delta, dlt)
    tree = TreeReleaseAccountant(epsilon, delta, T, cadence, lam, n_floor, gram_cap, beta)
    ideal = TreeReleaseAccountant(epsilon, delta, T, 0, lam, n_floor, 1e-300, beta)
    exact = accuracy(C, Xt, yt)
    rows: dict[str, list[np.ndarray]] = {"exact centres": [exact], "fresh": [],
                                         "tree (proven drift)": [], "ideal tree (drift 0, not proven)": []}
    for stream in range(streams):
        rng = np.random.default_rng(1000 * seed + stream)
        rows["fresh"].append(accuracy(C + fresh_sigma * rng.standard_normal(C.shape), Xt, yt))
        for label, acc in (("tree (proven drift)", tree), ("ideal tree (drift 0, not proven)", ideal)):
            mech = TreeRelease(acc, random_state=1000 * seed + stream + 500)
            rows[label].append(accuracy(np.vstack([mech.publish(c) for c in C]), Xt, yt))
    planner = "tree (proven drift)" if tree.release_stds().max() < fresh_sigma else "fresh"
    print(f"\n{name}: {X.shape[0]} x {X.shape[1]}, λ = {lam}, n_floor = {n_floor}, {removals} removals, a release "
          f"per {cadence} (T = {T}), (ε, δ) = ({epsilon}, {delta}), β = {beta}, Λ = {gram_cap:.4g} "
          f"({time.time() - t0:.0f} s)")
    print(f"  Δ = {dlt:.4g}; noise std per coordinate: fresh {fresh_sigma:.4g}; tree worst "
          f"{tree.release_stds().max():.4g} / median {np.median(tree.release_stds()):.4g} "
          f"(node σ {tree.sigma:.4g}, Σs²/Δ² = {tree.squared_sensitivity / dlt**2:.1f}); ideal tree worst "
          f"{ideal.release_stds().max():.4g}; planner: {planner}")
    print(f"| mechanism | exact (final data) | median release ({streams} noise streams: median [range]) | worst "
          "release (worst stream) |")
    print("|---|---|---|---|")
    for label, shown in [(k, k) for k in rows] + [(planner, f"planner: {planner}")]:
        meds = [100 * float(np.median(acc_t)) for acc_t in rows[label]]
        worst = min(100 * float(acc_t.min()) for acc_t in rows[label])
        print(f"| {shown} | {100 * exact[-1]:.2f} % | {np.median(meds):.2f} % [{min(meds):.2f}, {max(meds):.2f}] | "
              f"{worst:.2f} % |")


def run_estimator(name: str, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray, lam: float,
                  removals: int, cadence: int, n_floor: int, epsilon: float, delta: float, seed: int,
                  streams: int) -> None:
    """The frontier through ``ReleasedLogisticRegression`` (module docstring, ``--estimator``)."""
    from lethe.release import ReleasedLogisticRegression

    t0 = time.time()
    gram_cap = gram_lambda_max(X) + 1.0
    T = 1 + removals // cadence
    order = np.random.default_rng(seed).choice(X.shape[0], size=removals, replace=False)
    rows: dict[str, list[np.ndarray]] = {}
    exact: np.ndarray | None = None
    std: dict[str, float] = {}
    chosen = ""
    for mech in ("fresh", "tree", "auto"):
        for stream in range(streams):
            m = ReleasedLogisticRegression(lam=lam, epsilon=epsilon, delta=delta, horizon=T, cadence=cadence,
                                           n_floor=n_floor, noise_mechanism=mech, gram_cap=gram_cap,
                                           rows_per_release=cadence, random_state=1000 * seed + stream).fit(X, y)
            centres = [m.state_.w.copy()]
            for i in order:
                if m.remove([int(i)]).published:
                    centres.append(m.state_.w.copy())
            label = f"auto (chose {m.noise_mechanism_})" if mech == "auto" else mech
            chosen = m.noise_mechanism_ if mech == "auto" else chosen
            rows.setdefault(label, []).append(accuracy(np.vstack([r.coef for r in m.releases_]), Xt, yt))
            std[label] = float(m.sigma_)
            if exact is None:
                exact = accuracy(np.vstack(centres), Xt, yt)
    assert exact is not None
    print(f"\n{name} (estimator): {X.shape[0]} x {X.shape[1]}, λ = {lam}, n_floor = {n_floor}, {removals} removals, "
          f"a release per {cadence} (T = {T}), (ε, δ) = ({epsilon}, {delta}), residual_cap = 0.01, "
          f"gram_cap = {gram_cap:.4g}; auto chose {chosen} ({time.time() - t0:.0f} s)")
    print(f"| mechanism (worst-release noise std) | exact centre (final) | median release ({streams} streams: median "
          "[range]) | worst release (worst stream) | median − exact (pp) | worst − exact (pp) |")
    print("|---|---|---|---|---|---|")
    ex_med = 100 * float(np.median(exact))
    for label, accs in rows.items():
        meds = [100 * float(np.median(a)) for a in accs]
        worst = min(100 * float(a.min()) for a in accs)
        print(f"| {label} ({std[label]:.4g}) | {100 * exact[-1]:.2f} % | {np.median(meds):.2f} % "
              f"[{min(meds):.2f}, {max(meds):.2f}] | {worst:.2f} % | {np.median(meds) - ex_med:+.2f} | "
              f"{worst - 100 * float(exact.min()):+.2f} |")


def noise_ratios(epsilon: float, delta: float) -> None:
    print(f"\nNoise std per coordinate at T = 1,000 releases, (ε, δ) = ({epsilon}, {delta}), β = 1e-6, one release "
          "per k rows (the accountants' own figures):")
    print("| setting | fresh σ | tree worst | tree median | fresh / tree worst | fresh / tree median |")
    print("|---|---|---|---|---|---|")
    for label, n, d, lam, k in (("10^5 x 100 isotropic", 100_000, 100, 1e-2, 1),
                                ("10^5 x 100 isotropic", 100_000, 100, 1e-2, 10),
                                ("10^6 x 100 isotropic", 1_000_000, 100, 1e-3, 1),
                                ("10^6 x 100 isotropic", 1_000_000, 100, 1e-2, 1)):
        m = int(0.99 * n)
        acc = TreeReleaseAccountant(epsilon, delta, 1000, k, lam, m, 1.1 * n / d + 1.0, 1e-6)
        st = acc.release_stds()
        f = acc.fresh_sigma()
        print(f"| {label}, λ = {lam}, k = {k} | {f:.4g} | {st.max():.4g} | {np.median(st):.4g} | "
              f"{f / st.max():.2f} | {f / np.median(st):.2f} |")


def load_adult() -> tuple[np.ndarray, ...]:
    from bench_release_accuracy import load_adult as _load

    return _load()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2·10^4 synthetic rows, no Adult")
    ap.add_argument("--removals", type=int, default=1000)
    ap.add_argument("--cadence", type=int, default=10)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--beta", type=float, default=1e-6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--streams", type=int, default=5, help="noise streams over the same centres")
    ap.add_argument("--mnist", action="store_true", help="also MNIST 3 vs 8 (slow: 784² Hessians)")
    ap.add_argument("--skip", default="", help="comma-separated: synthetic, adult")
    ap.add_argument("--estimator", action="store_true", help="through ReleasedLogisticRegression (docstring)")
    ap.add_argument("--rows", type=int, default=None, help="synthetic rows (default 10^5; 2·10^4 with --quick)")
    ap.add_argument("--lam", type=float, default=1e-2, help="λ of the synthetic run")
    ap.add_argument("--mnist-lam", type=float, default=1e-2, help="λ of the MNIST run")
    args = ap.parse_args()
    kw = dict(epsilon=args.epsilon, delta=args.delta, beta=args.beta, seed=args.seed, streams=args.streams)
    if args.estimator:
        estimator_main(args)
        return
    noise_ratios(args.epsilon, args.delta)
    skip = set(args.skip.split(","))
    n = args.rows or (20_000 if args.quick else 100_000)
    if "synthetic" not in skip:
        X, y = synthetic(n + 10_000, 100)
        run(f"synthetic {n} x 100", X[:n], y[:n], X[n:], y[n:], args.lam, args.removals, args.cadence,
            int(0.99 * n), **kw)
    if not args.quick and "adult" not in skip:
        Xa, ya, Xat, yat = load_adult()
        run("Adult", Xa, ya, Xat, yat, 1e-2, args.removals, args.cadence, int(0.9 * Xa.shape[0]), **kw)
    if args.mnist:
        from bench_release_accuracy import load_mnist38

        Xm, ym, Xmt, ymt = load_mnist38()
        run("MNIST 3 vs 8", Xm, ym, Xmt, ymt, args.mnist_lam, args.removals, args.cadence, int(0.9 * Xm.shape[0]),
            **kw)


def estimator_main(args: argparse.Namespace) -> None:
    kw = dict(epsilon=args.epsilon, delta=args.delta, seed=args.seed, streams=args.streams)
    skip = set(args.skip.split(","))
    n = 20_000 if args.quick else 100_000
    if "synthetic" not in skip:
        X, y = synthetic(n + 10_000, 100)
        run_estimator(f"synthetic {n} x 100", X[:n], y[:n], X[n:], y[n:], 1e-2, args.removals, args.cadence,
                      int(0.99 * n), **kw)
    if not args.quick and "adult" not in skip:
        Xa, ya, Xat, yat = load_adult()
        run_estimator("Adult", Xa, ya, Xat, yat, 1e-2, args.removals, args.cadence, int(0.9 * Xa.shape[0]), **kw)
    if args.mnist:
        from bench_release_accuracy import load_mnist38

        Xm, ym, Xmt, ymt = load_mnist38()
        run_estimator("MNIST 3 vs 8", Xm, ym, Xmt, ymt, 1e-2, args.removals, args.cadence, int(0.9 * Xm.shape[0]),
                      **kw)


if __name__ == "__main__":
    main()

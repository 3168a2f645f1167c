"""Real tables in the library (issue 27): Adult accuracy beside scikit-learn, and ingest + train time on 10⁶ rows.

1. UCI Adult (32,561 training / 16,281 test rows; ``lethe.datasets.load_adult``), the shipped public schema
   (examples/adult_schema.yaml) and 3 lines of user code between reading the CSV and ``fit``
   (examples/adult_unlearning.py). Beside it what a user would do instead: scikit-learn's ColumnTransformer
   (OneHotEncoder fitted on the rows + StandardScaler) + LogisticRegression, on the same split. Test accuracy before
   and after 1,000 removals (random training records, one request at a time, each with a certificate; scikit-learn
   refits without them), the retrainings, and the time per removal vs a refit. Medians over ``--repeats`` seeds.
2. A generated table of ``--rows`` rows (default 10⁶) with 4 categorical columns (20 categories) and 6 numeric ones:
   ingest (encode) + train, lethe (SchemaEncoder(sparse_output=True) + CertifiedLogisticRegression) vs
   scikit-learn (ColumnTransformer + LogisticRegression fit); the ratio of medians.

    OMP_NUM_THREADS=1 python benchmarks/bench_tabular.py [--repeats 3] [--rows 1000000] [--skip-large]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.datasets import load_adult
from lethe.pipeline import make_unlearning_pipeline
from lethe.preprocessing import SchemaEncoder
from lethe.schema import CategoricalColumn, NumericColumn, Schema, load_schema

SCHEMA = Path(__file__).resolve().parents[1] / "examples" / "adult_schema.yaml"
LAM, SIGMA = 3e-5, 1.0


def _sklearn(cats: list[str], nums: list[str]) -> object:
    return make_pipeline(ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), cats),
                                            ("num", StandardScaler(), nums)]), LogisticRegression(max_iter=2000))


def adult(repeats: int, n_removals: int) -> None:
    train, test = load_adult()
    schema = load_schema(SCHEMA)
    X, y = schema.split(train)
    Xt, yt = schema.split(test)
    cats = [c.name for c in schema.columns if isinstance(c, CategoricalColumn)]
    nums = [c.name for c in schema.columns if isinstance(c, NumericColumn)]
    rows: dict[str, list[float]] = {k: [] for k in ("sk_before", "sk_after", "sk_fit", "le_before", "le_after",
                                                    "le_fit", "le_remove", "retrain", "max_ratio")}
    for seed in range(repeats):
        requests = np.random.default_rng(seed).choice(X.index.to_numpy(), size=n_removals, replace=False)
        t = time.perf_counter()
        sk = _sklearn(cats, nums).fit(X, y)
        rows["sk_fit"].append(time.perf_counter() - t)
        rows["sk_before"].append(sk.score(Xt, yt))
        keep = ~X.index.isin(requests)
        rows["sk_after"].append(_sklearn(cats, nums).fit(X[keep], y[keep]).score(Xt, yt))
        t = time.perf_counter()
        model = make_unlearning_pipeline(SchemaEncoder(schema), CertifiedLogisticRegression(
            lam=LAM, sigma=SIGMA, fit_intercept=True, random_state=seed)).fit(X, y)
        rows["le_fit"].append(time.perf_counter() - t)
        rows["le_before"].append(model.score(Xt, yt))
        t = time.perf_counter()
        certs = [model.remove(keys=[k]) for k in requests]
        rows["le_remove"].append((time.perf_counter() - t) / n_removals)
        assert all(c.residual_bound <= c.budget for c in certs)
        rows["retrain"].append(sum(c.retrained for c in certs))
        rows["max_ratio"].append(max(c.residual_bound / c.budget for c in certs))
        rows["le_after"].append(model.score(Xt, yt))
    m = {k: float(np.median(v)) for k, v in rows.items()}
    print(f"Adult (UCI): {len(X)} training / {len(Xt)} test rows, {schema.n_features} declared features; "
          f"medians of {repeats} seeds; lethe λ = {LAM:g}, σ = {SIGMA:g}, (ε, δ) = (1, 1e-4)")
    print(f"{'':34}{'scikit-learn':>14}{'lethe':>10}{'diff (pp)':>11}")
    for label, a, b in (("test accuracy before removals", "sk_before", "le_before"),
                        (f"test accuracy after {n_removals} removals", "sk_after", "le_after")):
        print(f"{label:34}{m[a]:>14.4f}{m[b]:>10.4f}{100 * (m[b] - m[a]):>+11.2f}")
    print(f"{'fit (s)':34}{m['sk_fit']:>14.2f}{m['le_fit']:>10.2f}")
    print(f"{'per removal (ms)':34}{1e3 * m['sk_fit']:>14.1f}{1e3 * m['le_remove']:>10.2f}   (scikit-learn: a refit)")
    print(f"retrainings in {n_removals} removals: {m['retrain']:.0f}; largest residual bound / budget "
          f"{m['max_ratio']:.3f}; user lines between reading the CSV and fit: 3 (examples/adult_unlearning.py)")


def _generated(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray, Schema]:
    rng = np.random.default_rng(seed)
    k, n_cat, n_num = 20, 4, 6
    cats = [f"v{i}" for i in range(k)]
    frame = pd.DataFrame({**{f"c{j}": rng.choice(cats, n) for j in range(n_cat)},
                          **{f"x{j}": rng.normal(size=n) for j in range(n_num)}})
    effect = rng.normal(size=(n_cat, k))
    logit = sum(effect[j][frame[f"c{j}"].str.slice(1).astype(int).to_numpy()] for j in range(n_cat))
    logit = logit + frame[[f"x{j}" for j in range(n_num)]].to_numpy() @ rng.normal(size=n_num)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(int)
    schema = Schema(columns=tuple([CategoricalColumn(f"c{j}", tuple(cats)) for j in range(n_cat)]
                                  + [NumericColumn(f"x{j}", lower=-4, upper=4) for j in range(n_num)]))
    return frame, y, schema


def large(rows: int, repeats: int) -> None:
    frame, y, schema = _generated(rows, 0)
    cats = [c.name for c in schema.columns if isinstance(c, CategoricalColumn)]
    nums = [c.name for c in schema.columns if isinstance(c, NumericColumn)]
    times: dict[str, list[float]] = {"sk": [], "le": [], "le_enc": []}
    acc: dict[str, float] = {}
    for seed in range(repeats):
        t = time.perf_counter()
        sk = _sklearn(cats, nums).fit(frame, y)
        times["sk"].append(time.perf_counter() - t)
        t = time.perf_counter()
        Z = SchemaEncoder(schema, sparse_output=True).transform(frame)
        times["le_enc"].append(time.perf_counter() - t)
        clf = CertifiedLogisticRegression(lam=1e-6, sigma=1.0, fit_intercept=True, random_state=seed).fit(Z, y)
        times["le"].append(time.perf_counter() - t)
        del Z
    acc["sk"] = float(sk.score(frame[:100_000], y[:100_000]))
    acc["le"] = float(clf.score(SchemaEncoder(schema).transform(frame[:100_000]), y[:100_000]))
    m = {k: float(np.median(v)) for k, v in times.items()}
    print(f"\nGenerated table: {rows:,} rows, 4 categorical (20 categories) + 6 numeric columns, "
          f"{schema.n_features} features; medians of {repeats}")
    print(f"  scikit-learn ColumnTransformer + LogisticRegression fit: {m['sk']:.2f} s "
          f"(train accuracy {acc['sk']:.4f})")
    print(f"  lethe SchemaEncoder + CertifiedLogisticRegression fit:   {m['le']:.2f} s (of which encoding "
          f"{m['le_enc']:.2f} s; train accuracy {acc['le']:.4f})")
    print(f"  ratio lethe / scikit-learn: {m['le'] / m['sk']:.2f} (target <= 2)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--removals", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--skip-adult", action="store_true")
    args = ap.parse_args()
    if not args.skip_adult:
        adult(args.repeats, args.removals)
    if not args.skip_large:
        large(args.rows, args.repeats)


if __name__ == "__main__":
    main()

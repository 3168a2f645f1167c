"""Adult through the service (issue 27): CSV + declared schema → train → 1,000 deletions over HTTP, accuracy beside
scikit-learn's on the same split.

What a user does, with the real CLI and server on 127.0.0.1:

1. ``lethe dataset add adult train.csv --schema examples/adult_schema.yaml --key id`` (the UCI training file with a
   record key column added; the schema's categories and bounds are public, nothing is learned from the rows), and the
   same for the test file (``adult-test``), the held-out set;
2. ``lethe train adult model --lam 3e-5 --sigma 1 --heldout adult-test --serve-unreleased`` (the tabular default
   ``fit_intercept=true``; the opt-in lets a model-reader token read predictions of a certified-removal model);
3. ``lethe serve``; 1,000 deletion requests for random training keys over HTTP (``POST /v1/deletions``), one at a
   time, processed by the server's worker in batches; wait until all are published;
4. the test accuracy of the published model before and after, from ``POST /v1/models/model/predict`` with the test
   file's **raw records** (JSON objects; encoded by the dataset's schema in the service).

Beside it, what a user would do instead: scikit-learn's ColumnTransformer (OneHotEncoder fitted on the rows +
StandardScaler) + LogisticRegression on the same split, fitted on all training rows (before) and refitted without
the deleted ones (after). Target: lethe within 0.5 pp of scikit-learn, before and after.

    OMP_NUM_THREADS=1 python benchmarks/bench_service_tabular.py [--requests 1000] [--seed 0]

Benchmarks are not tests: figures are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import delete_and_wait, lethe, start_server, stop  # noqa: E402
from bench_tabular import _sklearn  # noqa: E402

from lethe.datasets import load_adult  # noqa: E402
from lethe.schema import CategoricalColumn, NumericColumn, load_schema  # noqa: E402

SCHEMA = Path(__file__).resolve().parents[1] / "examples" / "adult_schema.yaml"
LAM, SIGMA = 3e-5, 1.0


def predict_accuracy(client: httpx.Client, records: list[dict[str, Any]], labels: np.ndarray,
                     chunk: int = 2000) -> tuple[float, int]:
    """Accuracy of the published model on raw records, predicted over HTTP; returns (accuracy, version)."""
    preds: list[Any] = []
    version = -1
    for i in range(0, len(records), chunk):
        r = client.post("/v1/models/model/predict", json={"records": records[i:i + chunk]})
        r.raise_for_status()
        preds += r.json()["predictions"]
        version = r.json()["version"]
    return float(np.mean(np.asarray(preds) == labels)), version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000, help="deletion requests over HTTP")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=64, help="lethe serve --batch-size")
    args = ap.parse_args()

    train, test = load_adult()
    schema = load_schema(SCHEMA)
    train = train.assign(id=[f"a{i}" for i in range(len(train))])
    test = test.assign(id=[f"t{i}" for i in range(len(test))])
    label = schema.label.name if schema.label is not None else "income"
    cols = schema.feature_columns
    requests = np.random.default_rng(args.seed).choice(train["id"].to_numpy(), size=args.requests, replace=False)

    # scikit-learn on the same split, before and after (a refit without the deleted rows)
    cats = [c.name for c in schema.columns if isinstance(c, CategoricalColumn)]
    nums = [c.name for c in schema.columns if isinstance(c, NumericColumn)]
    t = time.perf_counter()
    sk_before = _sklearn(cats, nums).fit(train[cols], train[label]).score(test[cols], test[label])
    sk_fit = time.perf_counter() - t
    keep = ~train["id"].isin(requests)
    sk_after = _sklearn(cats, nums).fit(train.loc[keep, cols], train.loc[keep, label]).score(test[cols], test[label])

    with tempfile.TemporaryDirectory(prefix="lethe-bench-tab-") as tmp:
        root = Path(tmp)
        data_dir = root / "lethe-data"
        train.to_csv(root / "train.csv", index=False)
        test.to_csv(root / "test.csv", index=False)
        t = time.perf_counter()
        lethe(data_dir, None, "dataset", "add", "adult", str(root / "train.csv"), "--schema", str(SCHEMA),
              "--key", "id")
        ingest = time.perf_counter() - t
        lethe(data_dir, None, "dataset", "add", "adult-test", str(root / "test.csv"), "--schema", str(SCHEMA),
              "--key", "id")
        t = time.perf_counter()
        # certified removal certifies one published version: served to a model-reader only by the operator's
        # explicit opt-in (issue 26; --mechanism released-logistic is the mechanism whose releases are served)
        trained = json.loads(lethe(data_dir, None, "train", "adult", "model", "--lam", str(LAM), "--sigma",
                                   str(SIGMA), "--heldout", "adult-test", "--serve-unreleased"))
        train_s = time.perf_counter() - t
        app = lethe(data_dir, None, "token", "create", "app", "--scope", "requester").strip()
        admin = lethe(data_dir, None, "token", "create", "ops", "--scope", "admin").strip()
        reader = lethe(data_dir, None, "token", "create", "shop", "--scope", "model-reader").strip()
        records = test[cols].to_dict("records")
        labels = test[label].to_numpy()
        url, proc = start_server(data_dir, None, args.batch_size)
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {app}"}, timeout=120) as client:
                reads = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {reader}"}, timeout=120)
                le_before, v_before = predict_accuracy(reads, records, labels)
                submitted, done, budget = delete_and_wait(client, "adult", requests, app, admin,
                                                          len(train) - args.requests)
                le_after, v_after = predict_accuracy(reads, records, labels)
                reads.close()
        finally:
            stop(proc)

    print(f"Adult (UCI) through the service: {len(train)} training / {len(test)} test rows, "
          f"{len(schema.feature_names())} declared features (examples/adult_schema.yaml); λ = {LAM:g}, σ = {SIGMA:g}, "
          f"fit_intercept = {trained['params'].get('fit_intercept')}; {args.requests} deletions over HTTP; "
          f"seed {args.seed}")
    print(f"{'':38s}{'scikit-learn':>14s}{'lethe service':>15s}{'diff (pp)':>11s}")
    print(f"{'test accuracy before deletions':38s}{sk_before:14.4f}{le_before:15.4f}"
          f"{100 * (le_before - sk_before):11.2f}")
    print(f"{'test accuracy after deletions':38s}{sk_after:14.4f}{le_after:15.4f}"
          f"{100 * (le_after - sk_after):11.2f}")
    print(f"held-out accuracy reported by `lethe train --heldout`: {trained['heldout']['accuracy']:.4f} "
          f"(the same model's, from the encoded held-out dataset)")
    ratio = budget.get("residual_bound", 0) / budget["budget"]
    print(f"versions: {v_before} -> {v_after}; records {budget.get('n_records')}; retrainings "
          f"{budget.get('retrainings')}; residual bound / budget {ratio:.3f}")
    print(f"ingest (lethe dataset add --schema) {ingest:.1f} s; train {train_s:.1f} s (scikit-learn fit "
          f"{sk_fit:.1f} s); {args.requests} submissions {submitted:.1f} s; all published after {done:.1f} s")


if __name__ == "__main__":
    main()

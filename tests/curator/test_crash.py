"""Crash safety: SIGKILL the processing worker at random points, then check the invariants of item 6.

Each trial copies a trained template store, acknowledges K deletion requests, starts a worker process (forked from
the test process so that imports are warm and a trial is fast; one more test runs the real ``lethe worker`` command),
waits until it reports ready (recovery done), sleeps a random time within the measured length of a full run, and
kills it with SIGKILL. Then, on the store as the crash left it:

* exactly one version of the model is published, its artifact exists and matches its checksum;
* no acknowledged request is lost: each is pending (its record still present) or done (its record gone, with a
  certificate whose new version exists) — never anything in between;
* the published version is for exactly the records present: its n equals the record count and its certified
  residual bound is >= the true gradient residual ‖∇L_b(w; D′)‖ on the current data (the model is not partial).

Then a restarted worker resumes: every request ends done, only the published artifact remains on disk, nothing is
left to purge, and the bound still holds.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select as sql_select

from lethe.certified.adapter import CertifiedRemovalAdapter
from lethe.curator import Curator, Settings, get_adapter, run_worker
from lethe.curator.store import CertificateRow, DeletionRequest, Model, ModelVersion, Record

from .._certified import exact_residual
from .conftest import PARAMS, lethe_cmd, make_data, subprocess_env

TRIALS = 24
K = 6  # requests per trial, processed in batches of 2 -> 3 publications per full run


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("crash")
    data = make_data(root / "data.csv")
    c = Curator(root / "template")
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=PARAMS, random_state=0)
    c.close()
    del data
    return root / "template"


def _trial_store(template: Path, dest: Path, rng: random.Random) -> list[str]:
    shutil.copytree(template, dest)
    c = Curator(dest)
    keys = rng.sample([f"user-{i:04d}" for i in range(200)], K)
    ids = [c.submit_deletion("people", k)[0]["id"] for k in keys]  # acknowledged == committed
    c.close()
    return ids


def _child(data_dir: str, ready: Any) -> None:
    try:
        c = Curator(data_dir, settings=Settings(batch_size=2))
        run_worker(c, once=True, drain=True, on_ready=ready.set)
    finally:
        os._exit(0)


def _fork_worker(data_dir: Path, kill_after: float | None) -> tuple[int | None, float]:
    """Fork a worker process (imports already warm), kill it ``kill_after`` s after it is ready.

    Returns (exit code, seconds from ready to exit).
    """
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_child, args=(str(data_dir), ready))
    proc.start()
    assert ready.wait(60), "the worker did not start"
    t0 = time.perf_counter()
    if kill_after is not None:
        time.sleep(kill_after)
        if proc.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
    proc.join(60)
    return proc.exitcode, time.perf_counter() - t0


def _cli_worker(data_dir: Path, kill_after: float | None) -> int:
    """Run ``lethe worker --once --drain`` as a fresh interpreter; kill it ``kill_after`` s after 'ready'."""
    proc = subprocess.Popen(lethe_cmd("worker", "--once", "--drain", "--batch-size", "2", "--data-dir", str(data_dir)),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=subprocess_env())
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60.0)
    assert ready, "the worker did not start"
    line = proc.stdout.readline()
    assert line.strip() == b"ready", line
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    rc = proc.wait(timeout=60)
    proc.stdout.close()
    return rc


def _check_invariants(c: Curator, acknowledged: list[str]) -> tuple[int, int]:
    """Assert the invariants on the store as it is; return (#done, #pending)."""
    with c.store.read() as s:
        model = s.scalar(sql_select(Model).where(Model.name == "clf"))
        assert model is not None
        pub = s.scalars(sql_select(ModelVersion).where(ModelVersion.model_id == model.id,
                                                       ModelVersion.status == "published")).all()
        assert len(pub) == 1 and pub[0].id == model.current_version_id
        version = pub[0]
        all_versions = {v.id: v for v in s.scalars(sql_select(ModelVersion))}
        assert sorted(v.number for v in all_versions.values()) == list(range(1, len(all_versions) + 1))
        record_ids = set(s.scalars(sql_select(Record.id)))
        done = pending = 0
        for rid in acknowledged:
            req = s.get(DeletionRequest, rid)
            assert req is not None, f"acknowledged request {rid} was lost"
            assert req.status in ("pending", "done"), req.status
            certs = s.scalars(sql_select(CertificateRow).where(CertificateRow.request_id == rid)).all()
            if req.status == "pending":
                pending += 1
                assert req.record_id in record_ids and certs == []
            else:
                done += 1
                assert req.record_id is None and req.processed_at is not None
                assert len(certs) == 1 and certs[0].new_version_id in all_versions
        assert version.n_records == len(record_ids)
    art = c.artifacts.load(version.artifact, version.sha256)  # exists and matches its checksum
    assert art.meta["n"] == len(record_ids)
    with c.store.read() as s:
        ids, X, y = c.datasets.current_data(s, 1, 10)
    adapter = get_adapter("certified-removal", PARAMS)
    assert isinstance(adapter, CertifiedRemovalAdapter)
    state = adapter.states(art)[0]
    true_residual = exact_residual(adapter.mechanism, state, X, np.where(y == 1.0, 1.0, -1.0))
    assert true_residual <= state.residual_bound, (true_residual, state.residual_bound)
    return done, pending


def test_sigkill_at_random_points_keeps_invariants(template: Path, tmp_path: Path) -> None:
    rng = random.Random(20231)
    # calibrate: how long does a full run take after 'ready'?
    calib = tmp_path / "calib"
    _trial_store(template, calib, rng)
    rc, full = _fork_worker(calib, None)
    assert rc == 0
    c = Curator(calib)
    with c.store.read() as s:
        all_ids = list(s.scalars(sql_select(DeletionRequest.id)))
    assert _check_invariants(c, all_ids) == (K, 0)
    c.close()
    partial = 0
    outcomes = []
    for trial in range(TRIALS):
        d = tmp_path / f"t{trial}"
        acknowledged = _trial_store(template, d, rng)
        delay = rng.uniform(0.0, 1.2 * full)
        rc, _ = _fork_worker(d, delay)
        c = Curator(d, settings=Settings(batch_size=2))
        try:
            done, pending = _check_invariants(c, acknowledged)
            outcomes.append((round(delay, 4), rc, done))
            partial += 0 < done < K
            # restart: resume pending work
            run_worker(c, once=True, drain=True)
            assert _check_invariants(c, acknowledged) == (K, 0)
            with c.store.read() as s:
                live = s.scalars(sql_select(ModelVersion.artifact).where(ModelVersion.status == "published")).all()
                assert s.scalars(sql_select(ModelVersion).where(ModelVersion.status == "superseded")).all() == []
            assert c.artifacts.all_files() == sorted(live)
            assert not c.purge_pending()
        finally:
            c.close()
        shutil.rmtree(d)
    print("trials (delay s, returncode, done before resume):", outcomes)
    # the kills must land inside the processing window, not only before or after it
    assert partial >= 1, outcomes
    assert any(rc == -signal.SIGKILL for _, rc, _ in outcomes)


def test_cli_worker_killed_then_resumed(template: Path, tmp_path: Path) -> None:
    """The real ``lethe worker`` process: SIGKILL it mid-run, restart it, and everything completes."""
    rng = random.Random(7)
    d = tmp_path / "cli"
    acknowledged = _trial_store(template, d, rng)
    assert _cli_worker(d, 0.05) in (0, -signal.SIGKILL)
    c = Curator(d)
    try:
        _check_invariants(c, acknowledged)
    finally:
        c.close()
    assert _cli_worker(d, None) == 0
    c = Curator(d)
    try:
        assert _check_invariants(c, acknowledged) == (K, 0)
        assert len(c.artifacts.all_files()) == 1
    finally:
        c.close()


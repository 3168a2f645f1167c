"""A live ``lethe serve`` for the service tests (curator and console): a free loopback port, bounded start and stop."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lethe_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "lethe.cli", *args]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    return env


def start_server(data_dir: Path, *extra: str, log_name: str = "server.log") -> tuple[str, subprocess.Popen[bytes]]:
    """``lethe serve`` on a free loopback port (3 attempts); waits (bounded, 20 s) until /healthz answers.

    The server's output goes to ``<data_dir>/logs/<log_name>``.
    """
    for _attempt in range(3):
        port = free_port()
        log = open(data_dir / "logs" / log_name, "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(lethe_cmd("serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir",
                                          str(data_dir), "--poll-interval", "0.05", "--log-level", "warning", *extra),
                                stdout=log, stderr=subprocess.STDOUT, env=subprocess_env())
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
    """SIGTERM, then (after 20 s) SIGKILL; returns once the process has exited."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

"""Purge: after a deletion is processed, no byte under the data directory reveals the deleted record.

End to end against a live server: the record is deleted through the HTTP API, the server's worker processes it,
then every file under the data directory — database, WAL, shared memory, artifacts, secrets, logs — is searched for
the record's key and for each of its feature values (float64 bytes in both byte orders, and as decimal text).
The same search must find a record that was NOT deleted (the search can fail), and must find the target before
processing.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from pathlib import Path

import httpx

from .conftest import Data, Server, stop_server


def patterns(key: str, x: list[float]) -> dict[str, bytes]:
    pats = {"key": key.encode()}
    for j, v in enumerate(x):
        import struct

        pats[f"f{j}<"] = struct.pack("<d", v)
        pats[f"f{j}>"] = struct.pack(">d", v)
        pats[f"f{j}text"] = repr(v)[:14].encode()  # 12+ significant digits as text (e.g. in a log line)
    return pats


def scan(root: Path, pats: dict[str, bytes]) -> dict[str, list[str]]:
    """Which patterns occur in which files under ``root`` (every regular file, whatever its name; a worker's
    wake-up socket holds no bytes and cannot be read)."""
    found: dict[str, list[str]] = {}
    files = [Path(d) / f for d, _, fs in os.walk(root) for f in fs if (Path(d) / f).is_file()]
    assert files
    for path in files:
        try:
            blob = path.read_bytes()
        except FileNotFoundError:  # a transient file of the running server (its free-space probe) removed meanwhile
            continue
        for name, pat in pats.items():
            if pat in blob:
                found.setdefault(name, []).append(str(path.relative_to(root)))
    return found


def wait_done(client: httpx.Client, request_id: str) -> dict[str, object]:
    for _ in range(400):
        body = client.get(f"/v1/deletions/{request_id}").json()
        if body["status"] != "pending":
            return body
        time.sleep(0.05)
    raise AssertionError("the request was not processed")


def key_digest(data_dir: Path, dataset_id: int, key: str) -> bytes:
    """The keyed digest the store holds for a key (HMAC-SHA256 under the data directory's pepper)."""
    pepper = (data_dir / "secrets" / "key_pepper").read_bytes()
    return hmac.new(pepper, f"{dataset_id}\x00{key}".encode(), hashlib.sha256).hexdigest().encode()


def test_no_byte_of_a_deleted_record_remains(server: Server, data: Data) -> None:
    target, control = 17, 18
    tpats = patterns(data.keys[target], data.X[target].tolist())
    cpats = patterns(data.keys[control], data.X[control].tolist())
    # before: the search finds both records' values (data plane) and their key digests (records table); no plain
    # key is ever written (the records table holds digests)
    found = scan(server.data_dir, {**tpats, "digest": key_digest(server.data_dir, 1, data.keys[target])})
    assert set(found) >= {"digest", "f0<"} and "key" not in found, found
    headers = {"Authorization": f"Bearer {server.alice}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        r = client.post("/v1/deletions", json={"dataset": "people", "key": data.keys[target], "request_id": "gdpr-1"})
        assert r.status_code == 202, r.text
        body = wait_done(client, r.json()["id"])
        assert body["status"] == "done"
        assert len(body["certificates"]) == 1
        # a prediction after processing must not resurrect anything either
        assert client.post("/v1/models/clf/predict", json={"features": [data.X[target].tolist()]},
                           headers={"Authorization": f"Bearer {server.reader}"}).status_code == 200
    for running in (True, False):
        found = scan(server.data_dir, tpats)
        assert found == {}, f"deleted record's bytes found (server running={running}): {found}"
        still = scan(server.data_dir, cpats)
        assert "f0<" in still and "f3<" in still, still  # the search itself works
        assert scan(server.data_dir, {"digest": key_digest(server.data_dir, 1, data.keys[control])})
        stop_server(server.proc)
    logs = list((server.data_dir / "logs").iterdir())
    assert any(p.stat().st_size > 0 for p in logs), "the logs were empty: nothing was searched there"

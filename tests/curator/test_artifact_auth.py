"""A model file edited on disk never certifies: HMAC + binding + invariants on load, faults shown to operators only,
and ``retrain`` repairs (docs/curator.md, "Artifacts are authenticated")."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from lethe.curator import Curator
from lethe.curator.artifacts import BINDING_FIELD, MAC_FIELD, META_KEY, ArtifactError, _sha256, canonical_bytes
from lethe.curator.errors import ServiceFaultError
from lethe.curator.service import Principal
from lethe.curator.store import CertificateRow, Model, ModelVersion

ALICE = Principal("alice", "requester")


def published(c: Curator) -> ModelVersion:
    with c.store.read() as s:
        m = s.scalar(select(Model).where(Model.name == "clf"))
        assert m is not None
        v = s.get(ModelVersion, m.current_version_id)
        assert v is not None
        return v


def rewrite(c: Curator, edit: Callable[[dict[str, np.ndarray], dict[str, Any]], None], *, forge_mac: bool = False
            ) -> None:
    """Edit the published artifact's arrays/meta in place, then update the database's SHA-256 to match (the attacker
    controls the disk and the database); with ``forge_mac`` re-sign it with the real key (an attacker who stole the
    key: only the invariants can catch that)."""
    v = published(c)
    path = c.data_dir / v.artifact
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z[META_KEY]).decode())
        arrays = {k: z[k] for k in z.files if k != META_KEY}
    edit(arrays, meta)
    if forge_mac:
        meta.pop(MAC_FIELD, None)
        # forged with the store's key: HMAC-SHA256 of the canonical bytes (docs: what a holder of the key can do)
        meta[MAC_FIELD] = hmac.new(c.artifacts.key, canonical_bytes(arrays, meta), hashlib.sha256).hexdigest()
    meta_arr = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **{META_KEY: meta_arr}, **arrays)
    with c.store.write() as s, s.begin():
        row = s.get(ModelVersion, v.id)
        assert row is not None
        row.sha256 = _sha256(path)
    c.serving.forget()


def set_beta(m: dict[str, Any], value: float) -> None:
    """Set the stored residual bound β of every binary model (format 1: the metadata; format 2: each state)."""
    if "states" in m:
        for st in m["states"]:
            st["residual_bound"] = value
    else:
        m["residual_bound"] = value


def beta_zero(a: dict[str, np.ndarray], m: dict[str, Any]) -> None:
    set_beta(m, 0.0)


def rows_scaled(a: dict[str, np.ndarray], m: dict[str, Any]) -> None:
    a["w"] = a["w"] * 3.0


def b_zero(a: dict[str, np.ndarray], m: dict[str, Any]) -> None:
    a["b"] = np.zeros_like(a["b"])


def sigma_raised(a: dict[str, np.ndarray], m: dict[str, Any]) -> None:
    m[BINDING_FIELD]["params"]["sigma"] = 100.0


def mac_stripped(a: dict[str, np.ndarray], m: dict[str, Any]) -> None:
    m.pop(MAC_FIELD)


TAMPERS = {"beta set to 0": beta_zero, "weights scaled": rows_scaled, "b zeroed": b_zero,
           "sigma raised in the file": sigma_raised, "HMAC stripped": mac_stripped}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_tampered_artifact_never_certifies(curator: Curator, name: str) -> None:
    view, _ = curator.submit_deletion("people", "user-0003", principal=ALICE)
    rewrite(curator, TAMPERS[name])
    v = published(curator)
    with pytest.raises(ArtifactError, match="HMAC|not authenticated"):
        curator.artifacts.load(v.artifact, v.sha256)
    results = curator.process_pending(force=True)
    assert results == []  # the dataset's batch is held back, not failed
    with curator.store.read() as s:
        assert s.scalars(select(CertificateRow).where(CertificateRow.kind == "removal")).all() == []
    assert curator.request_status(view["id"], principal=ALICE)["status"] == "pending"
    # the operator sees the fault, with the repair command
    status = curator.status()
    assert not status["healthy"] and status["faults"][0]["model"] == "clf"
    assert "lethe model retrain clf" == status["faults"][0]["repair"]
    # the requester gets a generic error: no path, no checksum
    with pytest.raises(ServiceFaultError) as err:
        curator.predict("clf", [[0.0] * 10])
    assert "artifacts" not in str(err.value) and v.sha256[:8] not in str(err.value) and ".npz" not in str(err.value)
    # repair: retrain from the current data; the pending request then goes through
    curator.retrain("clf", random_state=1)
    assert curator.status()["healthy"]
    curator.process_pending(force=True)
    done = curator.request_status(view["id"], principal=ALICE)
    assert done["status"] == "done" and len(done["certificates"]) == 1
    assert [h["kind"] for h in curator.model_versions("clf")] == ["train", "train", "removal"]


def test_forged_hmac_is_still_checked_against_the_budget_and_the_database(curator: Curator) -> None:
    budget = curator.budget("clf")["budget"]

    def over_budget(a: dict[str, np.ndarray], m: dict[str, Any]) -> None:
        set_beta(m, 2.0 * budget)

    rewrite(curator, over_budget, forge_mac=True)
    v = published(curator)
    with pytest.raises(ArtifactError, match="exceeds the budget"):
        curator.artifacts.load(v.artifact, v.sha256)
    curator.retrain("clf", random_state=1)
    # the database's parameters edited (sigma raised): the file's authenticated binding disagrees
    with curator.store.write() as s, s.begin():
        m = s.scalar(select(Model).where(Model.name == "clf"))
        assert m is not None
        m.params = {**m.params, "sigma": 50.0}
    faults = curator.verify_models()
    assert faults and "parameters were changed" in faults[0]["error"]

    def wrong_shape(a: dict[str, np.ndarray], m: dict[str, Any]) -> None:
        a["w"] = a["w"][:-1]

    with curator.store.write() as s, s.begin():
        m = s.scalar(select(Model).where(Model.name == "clf"))
        assert m is not None
        m.params = {**m.params, "sigma": 1.0}
    assert curator.verify_models() == []
    rewrite(curator, wrong_shape, forge_mac=True)
    faults = curator.verify_models()
    assert faults and "shape" in faults[0]["error"]


def test_missing_artifact_is_a_fault_and_the_request_error_is_generic(curator: Curator, tmp_path: Path) -> None:
    view, _ = curator.submit_deletion("people", "user-0004", principal=ALICE)
    v = published(curator)
    (curator.data_dir / v.artifact).unlink()
    assert curator.process_pending(force=True) == []
    assert curator.status()["faults"][0]["error"].endswith("is missing.")
    assert curator.request_status(view["id"], principal=ALICE)["error"] is None
    with pytest.raises(ServiceFaultError, match="operator"):
        curator.public_model("clf")
    curator.retrain("clf", random_state=2)
    curator.process_pending(force=True)
    assert curator.request_status(view["id"])["status"] == "done"


def test_canonical_bytes_cover_names_dtypes_shapes_and_meta() -> None:
    a = {"w": np.arange(4.0)}
    base = canonical_bytes(a, {"n": 1})
    assert canonical_bytes({"w": np.arange(4.0).reshape(2, 2)}, {"n": 1}) != base
    assert canonical_bytes({"v": np.arange(4.0)}, {"n": 1}) != base
    assert canonical_bytes({"w": np.arange(4.0).astype(np.float32)}, {"n": 1}) != base
    assert canonical_bytes(a, {"n": 2}) != base

"""A family defined outside lethe works end to end — library, service, console — through the registry alone
(issue 34's target: a toy family in its own package, registered through the entry point ``lethe.families``, touching
no file of the curator or the console).

The toy lives in ``tests/conformance/_toy/lethe_toyfam`` (three files: the family record, the estimator, the
adapter). The test installs it the way pip would for the registry: a ``*.dist-info`` directory with an
``entry_points.txt`` on ``sys.path``. docs/architecture.md, "How to add a family", walks through the same files.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lethe.families import ENTRY_POINT_GROUP, Capability, families, family_of_mechanism
from lethe.protocols import Certificate, Unlearner

TOY = Path(__file__).parent / "_toy"


@pytest.fixture
def toy_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    site = tmp_path / "site"
    info = site / "lethe_toyfam-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lethe-toyfam\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ntoy-centroid = lethe_toyfam:FAMILY\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(TOY))
    importlib.invalidate_caches()
    yield
    for mod in [m for m in sys.modules if m.startswith("lethe_toyfam")]:
        del sys.modules[mod]


def test_without_the_entry_point_the_toy_is_unknown():
    assert "toy-centroid" not in [f.name for f in families()]


def test_the_toy_family_is_found_and_keeps_the_library_protocols(toy_installed, tmp_path):
    fam = family_of_mechanism("toy-centroid")
    assert fam.has(Capability.EXACT) and not fam.has(Capability.NEWTON_STEP)
    (cls,) = fam.estimator_classes()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int)
    est = cls().fit(X, y, sample_ids=[f"r{i}" for i in range(60)])
    assert isinstance(est, Unlearner)
    cert = est.remove(keys=["r4"])
    assert isinstance(cert, Certificate) and est.certificate_ is cert
    est.remove([9])
    saved = est.save(tmp_path / "toy.npz")
    again = cls.load(saved)
    np.testing.assert_array_equal(again.predict(X), est.predict(X))
    assert again.certificate_ == est.certificate_


def test_the_toy_family_runs_in_the_service_and_the_console(toy_installed, tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from lethe.curator import Curator, Settings, available_mechanisms
    from lethe.curator.api import create_app

    from ..console.conftest import write_data
    from ..console.test_console import sign_in, submit

    assert "toy-centroid" in available_mechanisms()
    keys = write_data(tmp_path / "people.csv", 80)
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1))
    try:
        c.register_dataset("people", tmp_path / "people.csv", key="user_id", label="label", label_classes=[0, 1])
        c.train("people", "toy", mechanism="toy-centroid", serve_unreleased=True)
        alice = c.create_token("alice", "requester")
        with TestClient(create_app(c, run_worker=False), base_url="http://127.0.0.1") as cl:
            csrf = sign_in(cl, alice)
            loc = submit(cl, csrf, keys[3]).headers["location"]
            c.process_pending(force=True)
            page = cl.get(loc).text
        assert "done" in page
        words = family_of_mechanism("toy-centroid").words
        assert words.updated_in_place.split(":")[0] in page  # the toy's own words, not another family's
        assert "Newton" not in page
        status = c.status()
        assert any(m.get("mechanism") == "toy-centroid" for m in _models(status))
    finally:
        c.close()


def _models(status: dict) -> list[dict]:
    out: list[dict] = []
    for v in status.values():
        if isinstance(v, list):
            out.extend(x for x in v if isinstance(x, dict))
        elif isinstance(v, dict):
            out.extend(_models(v))
    return out

"""The ``lethe`` command line: registry of command modules and the curator subcommands, run in-process."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import lethe.cli as cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def csv(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    df = pd.DataFrame(X, columns=[f"x{j}" for j in range(5)])
    df.insert(0, "uid", [f"id{i}" for i in range(120)])
    df["y"] = np.where(X[:, 0] > 0, "1", "-1")
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    return path


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("dataset", "train", "forget", "status", "budget", "certificate", "serve", "worker", "token"):
        assert cmd in out
    assert cli.main([]) == 2


def test_registry_accepts_new_modules(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    mod = types.ModuleType("lethe_test_cmds")

    def register(sub: object) -> None:
        p = sub.add_parser("hello", help="say hello")  # type: ignore[attr-defined]
        p.add_argument("--name", default="world")
        p.set_defaults(func=lambda args: print(f"hello {args.name}") or 0)

    mod.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lethe_test_cmds", mod)
    monkeypatch.setattr(cli, "COMMAND_MODULES", list(cli.COMMAND_MODULES))
    cli.register_module("lethe_test_cmds")
    cli.register_module("lethe_test_cmds")
    assert cli.COMMAND_MODULES.count("lethe_test_cmds") == 1
    rc, out, _ = run(capsys, "hello", "--name", "lethe")
    assert rc == 0 and out.strip() == "hello lethe"


def test_curator_commands_end_to_end(tmp_path: Path, csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dd = ["--data-dir", str(tmp_path / "data")]
    rc, out, _ = run(capsys, "dataset", "add", "people", str(csv), "--key", "uid", "--label", "y", "--json", *dd)
    assert rc == 0 and json.loads(out)["n_records"] == 120
    rc, out, _ = run(capsys, "dataset", "list", *dd)
    assert json.loads(out) == [{"name": "people", "n_records": 120, "n_features": 5}]
    rc, out, _ = run(capsys, "train", "people", "clf", "--lam", "0.01", "--param", "solver=\"cholesky\"",
                     "--seed", "0", *dd)
    assert rc == 0
    trained = json.loads(out)
    assert trained["version"] == 1 and trained["params"]["lam"] == 0.01 and trained["budget_left"] > 0
    rc, out, _ = run(capsys, "forget", "people", "id3", "id4", "missing", *dd)
    assert rc == 0  # an unknown key is answered like a deleted one: done at once, no record held (issue 26)
    items = json.loads(out)
    assert [(i["status"], i["outcome"]) for i in items] == [("pending", None), ("pending", None),
                                                             ("done", "no record held")]
    assert "missing" not in out
    rc, out, _ = run(capsys, "status", *dd)
    assert json.loads(out)["requests"]["pending"] == 2
    rc, out, _ = run(capsys, "process", "--all", *dd)
    assert rc == 0 and json.loads(out)[0]["new_versions"] == {"clf": 2}
    rc, out, _ = run(capsys, "request", items[0]["id"], *dd)
    req = json.loads(out)
    assert req["status"] == "done" and len(req["certificates"]) == 1
    rc, out, _ = run(capsys, "certificate", items[0]["id"], *dd)  # by request id: a list
    (cert,) = json.loads(out)
    assert cert["certificate"]["n_removed"] == 2 and cert["new_version"] == 2
    rc, out, _ = run(capsys, "certificate", cert["id"], *dd)  # by certificate id
    assert json.loads(out)["id"] == cert["id"]
    rc, out, _ = run(capsys, "certificate", cert["id"], "--reference", "DPO-2026-0042", *dd)  # issue 37
    assert rc == 0 and json.loads(out)["reference"] == "DPO-2026-0042" and json.loads(out)["id"] == cert["id"]
    rc, out, _ = run(capsys, "certificate", items[0]["id"], "--reference", "DPO-2026-0042", *dd)
    assert [c["reference"] for c in json.loads(out)] == ["DPO-2026-0042"]
    rc, _, err = run(capsys, "certificate", cert["id"], "--reference", "a\nb", *dd)
    assert rc == 1 and "--reference must be one line" in err
    rc, out, _ = run(capsys, "forget", "people", "id5", "--now", "--request-id", "r5", *dd)
    assert rc == 0 and json.loads(out)[0]["status"] == "done"
    rc, out, _ = run(capsys, "budget", "clf", *dd)
    b = json.loads(out)
    assert b["version"] == 3 and b["n_records"] == 117 and b["removals_since_training"] == 3
    rc, out, _ = run(capsys, "ledger", "--limit", "500", *dd)
    kinds = [e["kind"] for e in json.loads(out)]
    assert kinds.count("remove") == 2 and "purge" in kinds and "train" in kinds
    rc, out, err = run(capsys, "token", "create", "ops", "--scope", "admin", *dd)
    assert rc == 0 and out.startswith("lethe_") and "shown once" in err
    rc, out, _ = run(capsys, "token", "list", *dd)
    assert json.loads(out) == [{"name": "ops", "scope": "admin", "revoked": False,
                                "created_at": json.loads(out)[0]["created_at"]}]
    assert out.count("lethe_") == 0  # the token itself is never listed
    rc, _, _ = run(capsys, "token", "revoke", "ops", *dd)
    assert rc == 0


def test_errors_exit_1_with_a_message(tmp_path: Path, csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dd = ["--data-dir", str(tmp_path / "data")]
    rc, _, err = run(capsys, "dataset", "add", "p", str(tmp_path / "nope.csv"), "--key", "uid", "--label", "y", *dd)
    assert rc == 1 and err.startswith("lethe: error:") and "does not exist" in err
    run(capsys, "dataset", "add", "p", str(csv), "--key", "uid", "--label", "y", *dd)
    rc, _, err = run(capsys, "train", "p", "m", "--lam", "-1", *dd)
    assert rc == 1 and "lam must be > 0" in err
    rc, _, err = run(capsys, "budget", "m", *dd)
    assert rc == 1 and "Unknown model 'm'" in err
    rc, _, err = run(capsys, "certificate", "xyz", *dd)
    assert rc == 1 and "neither a certificate id nor a request id" in err
    rc, _, err = run(capsys, "forget", "p", "id1", "id2", "--request-id", "r", *dd)
    assert rc == 1 and "exactly one key" in err
    rc, _, err = run(capsys, "train", "p", "m", "--param", "lam", *dd)
    assert rc == 1 and "name=value" in err


def test_worker_once(tmp_path: Path, csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dd = ["--data-dir", str(tmp_path / "data")]
    run(capsys, "dataset", "add", "p", str(csv), "--key", "uid", "--label", "y", *dd)
    run(capsys, "train", "p", "m", "--lam", "0.01", *dd)
    run(capsys, "forget", "p", "id1", "id2", "id3", *dd)
    rc, out, _ = run(capsys, "worker", "--once", "--batch-size", "2", *dd)
    assert rc == 0 and out.splitlines() == ["ready", "processed 2 batch(es)"]
    rc, out, _ = run(capsys, "status", *dd)
    assert json.loads(out)["requests"] == {"pending": 0, "done": 3, "failed": 0}
    log = (tmp_path / "data" / "logs" / "worker.log").read_text()
    assert "processed" in log and "id1" not in log


def test_train_serve_unreleased_flag(tmp_path: Path, csv: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--serve-unreleased`` (issue 26): stored with the model, shown in the budget, warned about on stderr; without
    it the operator is told the model is served to admins only; ``model retrain`` sets or withdraws it."""
    from lethe.curator import Curator
    from lethe.curator.errors import UnreleasedModelError
    from lethe.curator.serving import UNRELEASED_WARNING
    from lethe.curator.settings import Principal

    dd = ["--data-dir", str(tmp_path / "data")]
    assert run(capsys, "dataset", "add", "people", str(csv), "--key", "uid", "--label", "y", "--label-classes=-1,1",
               *dd)[0] == 0
    rc, out, err = run(capsys, "train", "people", "plain", "--lam", "0.01", "--seed", "0", *dd)
    assert rc == 0 and json.loads(out)["served"] == "operators" and "admins only" in err
    rc, out, err = run(capsys, "train", "people", "opted", "--lam", "0.01", "--seed", "0", "--serve-unreleased", *dd)
    assert rc == 0 and json.loads(out)["served"] == "opt-in" and UNRELEASED_WARNING in err
    rc, out, err = run(capsys, "train", "people", "rel", "--mechanism", "released-logistic", "--param", "lam=0.05",
                       "--param", "horizon=5", "--seed", "0", *dd)
    assert rc == 1 and "random_state (--seed) is refused for 'released-logistic'" in err  # issue 36
    rc, out, err = run(capsys, "train", "people", "rel", "--mechanism", "released-logistic", "--param", "lam=0.05",
                       "--param", "horizon=5", *dd)
    assert rc == 0 and json.loads(out)["served"] == "releases" and err == ""
    rc, out, _ = run(capsys, "budget", "--dataset", "people", *dd)  # the dataset's privacy ledger
    ledger = json.loads(out)
    assert rc == 0 and ledger["lifetime_budget"] == 3.0 and [s["model"] for s in ledger["streams"]] == ["rel"]
    assert 0 < ledger["lifetime_epsilon"] <= ledger["lifetime_epsilon_committed"] <= 1.0 + 1e-9
    rc, out, _ = run(capsys, "budget", "--dataset", "people", "--set-epsilon", "2.5", *dd)
    assert rc == 0 and json.loads(out)["lifetime_budget"] == 2.5
    rc, out, _ = run(capsys, "budget", "rel", *dd)
    assert rc == 0 and json.loads(out)["lifetime_budget"] == 2.5
    rc, _, err = run(capsys, "train", "people", "rel2", "--mechanism", "released-logistic", "--param", "lam=0.05",
                     "--serve-unreleased", *dd)
    assert rc == 1 and "publishes private releases" in err
    rc, out, err = run(capsys, "model", "retrain", "opted", "--no-serve-unreleased", "--seed", "1", *dd)
    assert rc == 0 and json.loads(out)["served"] == "operators"
    rc, out, _ = run(capsys, "model", "export", "opted", *dd)  # the operator's export keeps working
    assert rc == 0 and json.loads(out)["arrays"]["w"]
    c = Curator(tmp_path / "data")
    try:
        reader = Principal("viewer", "model-reader")
        with pytest.raises(UnreleasedModelError):
            c.public_model("opted", principal=reader)
        assert c.public_model("rel", principal=reader)["model"] == "rel"
    finally:
        c.close()

"""docs/architecture.md names the deletion's path file by file (`path.py` — **`function`** or **`Class.method`**):
every name it gives must exist in the file it names, so that the page cannot drift from the code unnoticed."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
SECTION = "## A deletion request, from the HTTP API to the Newton step"
TOKEN = re.compile(r"`(?P<path>src/lethe/[\w/]+\.py)`|\*\*`(?P<name>[\w.<>]+)`\*\*")


def deletion_path(text: str) -> list[tuple[str, str]]:
    """The (file, name) pairs of the deletion's path: every bold name belongs to the last file named before it."""
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end != -1 else None]
    pairs: list[tuple[str, str]] = []
    current: str | None = None
    for m in TOKEN.finditer(section):
        if m.group("path"):
            current = m.group("path")
        else:
            assert current is not None, f"{m.group('name')!r} is named before any file"
            pairs.append((current, m.group("name")))
    return pairs


@cache
def _tree(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text(encoding="utf-8"))


def _defined(node: ast.AST, name: str, *, top: bool) -> ast.AST | None:
    """The definition of ``name`` directly in ``node``'s module scope (``top``) or anywhere inside ``node`` (nested
    functions, methods)."""
    nodes = ast.iter_child_nodes(node) if top else ast.walk(node)
    for child in nodes:
        if child is node:
            continue
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and child.name == name:
            return child
        if top and isinstance(child, ast.Assign | ast.AnnAssign):
            targets = child.targets if isinstance(child, ast.Assign) else [child.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return child
    return None


def resolves(path: str, dotted: str) -> bool:
    """Whether file ``path`` exists and defines ``dotted`` (``f``, ``Class.method``, ``f.<locals>.g``)."""
    if not (ROOT / path).is_file():
        return False
    node: ast.AST | None = _tree(path)
    parts = [p for p in dotted.split(".") if p != "<locals>"]
    for i, part in enumerate(parts):
        assert node is not None
        node = _defined(node, part, top=i == 0)
        if node is None:
            return False
    return True


PAIRS = deletion_path(DOC.read_text(encoding="utf-8"))


def test_the_path_runs_from_the_api_to_the_solver() -> None:
    files = [f for f, _ in PAIRS]
    for must in ("src/lethe/curator/api.py", "src/lethe/curator/service.py", "src/lethe/curator/intake.py",
                 "src/lethe/curator/worker.py", "src/lethe/curator/batches.py", "src/lethe/certified/adapter.py",
                 "src/lethe/certified/mechanism.py", "src/lethe/certified/anchor.py",
                 "src/lethe/curator/publisher.py"):
        assert must in files, f"the deletion path names no function of {must}"
    assert files[0] == "src/lethe/curator/api.py" and len(PAIRS) >= 20


@pytest.mark.parametrize(("path", "name"), PAIRS, ids=[f"{p}:{n}" for p, n in PAIRS])
def test_every_named_function_exists(path: str, name: str) -> None:
    assert resolves(path, name), f"docs/architecture.md names {name} in {path}, which does not define it"


def test_a_wrong_name_or_file_is_caught() -> None:
    """The mutation check: a renamed method, a nested name under the wrong parent, or a wrong file fail."""
    assert resolves("src/lethe/curator/service.py", "Curator.submit_deletions")
    assert not resolves("src/lethe/curator/service.py", "Curator.submit_deletion_group")
    assert not resolves("src/lethe/curator/service.py", "Curator._submit_group_in")
    assert resolves("src/lethe/curator/api.py", "create_app.<locals>.submit_deletion")
    assert not resolves("src/lethe/curator/api.py", "SubmissionIntake.submit_deletion")
    assert not resolves("src/lethe/curator/intake.py", "compute_step")
    assert not resolves("src/lethe/curator/no_such_module.py", "decide")
    text = DOC.read_text(encoding="utf-8").replace("**`DeletionIntake.answer_in`**", "**`DeletionIntake.submit_in`**")
    assert any(not resolves(p, n) for p, n in deletion_path(text))

"""An exception at any executed line of ``save`` leaves the target file as it was (its previous content, or absent)
or written in full, the model unchanged, and the key and release counters beside the key usable: the old file still
loads when it was kept, the next save succeeds and its file loads (issue 35, every family of the registry).

Two starting points per family: the first save on this machine (no target, no key file: ``save`` creates the key,
:mod:`lethe.model_keys`) and a save over an older file of the same model (saved before its last removal; for a
release stream, with counters recorded behind the model's). The injection points are those of
``test_exceptions_families.py`` (every distinct line transition, plus an even sample); ``pytest -s`` prints the
counts and outcomes per family.
"""

from __future__ import annotations

import linecache
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import lethe.model_keys as model_keys

from ._factories import FACTORIES
from .test_exceptions_families import EXTRA, Fault, _run, _state

# every registered estimator, the release included: its counters' file lock is held by an open file bound to no
# name, so a fault at any line (even one raised as the lock's block ends, which skips ``__exit__``) releases it as
# the exception leaves the frame, while the fault's traceback is still referenced (test_lock_faults.py)
PATHS = sorted(FACTORIES)
# the lines that remove a temporary after a failure: a fault raised AT one of them skips that removal (no cleanup
# survives a fault inside itself), leaving an owner-only temporary beside the target — counted apart, allowed only
# there (lethe.io.write_bytes_atomic, lethe.model_keys)
CLEANUP = {"except BaseException:", "if tmp is not None and os.path.exists(tmp):", "os.unlink(tmp)",
           "if tmp is not None:"}


def _points(lines: list[tuple[str, int]]) -> list[int]:
    first: dict[tuple[tuple[str, int] | None, tuple[str, int]], int] = {}
    for k, line in enumerate(lines, start=1):
        first.setdefault((lines[k - 2] if k > 1 else None, line), k)
    return sorted(set(first.values()) | set(np.linspace(1, len(lines), EXTRA, dtype=int).tolist()))


def _files(*dirs: Path) -> set[str]:
    return {str(p.relative_to(d.parent)) for d in dirs if d.exists() for p in d.iterdir()}


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("start", ["first save", "over an older file"])
@pytest.mark.parametrize("path", PATHS, ids=[p.rpartition(":")[2] for p in PATHS])
def test_an_exception_at_any_line_of_save_leaves_the_file_as_it_was_or_written(path, start, tmp_path, monkeypatch):
    make, data = FACTORIES[path]
    X, y = data()
    keys_dir, out_dir = tmp_path / "keys", tmp_path / "out"
    monkeypatch.setenv("LETHE_MODEL_KEY_FILE", str(keys_dir / "model.key"))
    monkeypatch.setattr(model_keys, "COUNTS_LOCK_WAIT", 0.5)  # a lock left held fails the next save fast
    target = out_dir / "model.npz"
    m = make().fit(X, y)
    cls = type(m)
    m.remove([1])
    old: bytes | None = None
    if start == "over an older file":
        m.save(target)
        old = target.read_bytes()
        m.remove([2])  # the model moves on: the old file is behind it (and, for a release stream, its counters)
    m.save(tmp_path / "warm" / "model.npz")  # lazily computed values (a certificate's ε spent) cached before the state
    if start == "first save":
        shutil.rmtree(keys_dir)
    keys_before = {p.name: p.read_bytes() for p in keys_dir.iterdir()} if keys_dir.exists() else {}
    files_before = _files(keys_dir, out_dir)
    state = _state(m)
    probe = X[:7]
    expected = m.predict(probe)

    def reset() -> None:  # the directory as it was before the save
        if keys_dir.exists():
            shutil.rmtree(keys_dir)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        if keys_before:
            keys_dir.mkdir(mode=0o700)
            for name, content in keys_before.items():
                (keys_dir / name).write_bytes(content)
                os.chmod(keys_dir / name, 0o600)
        if old is not None:
            out_dir.mkdir()
            target.write_bytes(old)

    def loads(p: Path) -> bool:
        try:
            cls.load(p)
        except Exception:  # noqa: BLE001 - a release file behind its stream's counters is refused by design
            return False
        return True

    reset()
    # whether the old file loads before the save (a release stream's file behind its recorded counters does not)
    old_loads = loads(target) if old is not None else None
    reset()
    err, lines = _run(lambda: m.save(target), None)
    assert err is None and lines and target.exists()
    outcomes = {"as it was": 0, "written": 0, "temporary left (fault inside its cleanup)": 0}
    points = _points(lines)
    for at in points:
        reset()
        err, _ = _run(lambda: m.save(target), at)
        assert isinstance(err, Fault), at
        # the fault is kept, with its traceback and the frames it references, until the next save below has run (as
        # a caller that logs or stores it does): nothing the save holds (the counters' lock) may depend on it
        where = lines[at - 1]
        assert _state(m) == state, f"{path}: a fault at {where} changed the model"
        now = target.read_bytes() if target.exists() else None
        if now == old:
            outcomes["as it was"] += 1
            if old is not None:  # the old file loads as it did before the save (its counters not raised past it)
                assert loads(target) == old_loads, f"{path}: a fault at {where} changed whether the old file loads"
        else:
            outcomes["written"] += 1
            assert now is not None
            assert np.array_equal(cls.load(target).predict(probe), expected), f"{path}: fault at {where}"
        stray = _files(keys_dir, out_dir) - files_before - {"out/model.npz", "keys/model.key", "keys/model.key.counts",
                                                           "keys/model.key.counts.lock"}
        if stray and linecache.getline(*where).strip() in CLEANUP:
            outcomes["temporary left (fault inside its cleanup)"] += 1
            for name in stray:
                assert os.stat(tmp_path / name).st_mode & 0o077 == 0  # owner-only, as the target
        else:
            assert not stray, f"{path}: a fault at {where} left {sorted(stray)}"
        m.save(target)  # the next save succeeds (key and counters usable) and its file loads
        assert np.array_equal(cls.load(target).predict(probe), expected)
        assert err.__traceback__ is not None
        del err
    assert outcomes["as it was"] > 0 and outcomes["written"] > 0
    print(path, start, len(lines), "lines executed;", len(points), "faults:", outcomes)

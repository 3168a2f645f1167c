"""The solver table (:mod:`lethe.certified.solvers`, issue 34): every solver trains and removes bit for bit as it did
before the table and the per-solver state types replaced string comparisons and the one 45-field cache.

``solver_parity.json`` was recorded from the code before that change (``python tests/certified/test_solver_table.py
--record``): weights, β, predictions and every certificate field (but the wall-clock ``seconds``) of each solver ×
{dense, CSR, matrix-free CSR where the solver runs on it} × {intercept on, off} × {tight, paper} (and a one-vs-all
model, a budget small enough to retrain, a saved-and-loaded model). On the platform it was recorded on (the same
NumPy/BLAS build, one BLAS thread) the comparison is exact; on another one the floats may round differently, and
are compared to 1e-9 relatively.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from lethe.certified import data as data_module
from lethe.certified.estimators import CertifiedLogisticRegression

GOLDEN = Path(__file__).with_name("solver_parity.json")

SOLVER_NAMES = ("cholesky", "refine", "pcg", "anchor", "onepass", "auto")
#: (solver, data kind) pairs that run: onepass needs dense rows, cholesky and anchor keep d × d matrices
RUNS = [(s, kind) for s in SOLVER_NAMES for kind in ("dense", "csr", "csr-matrix-free")
        if not (s == "onepass" and kind != "dense") and not (s in ("cholesky", "anchor") and kind == "csr-matrix-free")]
CASES = [(s, kind, icpt, bound, classes, sigma) for s, kind in RUNS for icpt in (False, True)
         for bound in ("tight", "paper") for classes, sigma in ((2, 5.0), (3, 5.0), (2, 0.3))
         if kind == "dense" or (classes, sigma) == (2, 5.0)]


def _case_id(case: tuple[Any, ...]) -> str:
    s, kind, icpt, bound, classes, sigma = case
    return f"{s}-{kind}-{'icpt' if icpt else 'noicpt'}-{bound}-k{classes}-s{sigma}"


def _platform() -> str:
    return f"{platform.machine()} numpy {np.__version__} python {sys.version_info[:2]}"


def _data(kind: str, classes: int) -> tuple[Any, np.ndarray]:
    rng = np.random.default_rng(7)
    n, d = 90, 6
    X = rng.normal(size=(n, d))
    X[rng.random(size=(n, d)) < 0.4] = 0.0
    X[:, 0] += 0.5
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 1.5, size=(n, 1))
    score = X @ rng.normal(size=d) + 0.3 * rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3])) if classes == 3 else (score > 0).astype(int)
    return (X if kind == "dense" else sp.csr_matrix(X)), y


def _floats(a: Any) -> list[str]:
    return [float(v).hex() for v in np.asarray(a, dtype=np.float64).ravel()]


def _cert(cert: Any) -> dict[str, Any]:
    d = cert.to_dict()
    d.pop("seconds", None)
    for k, v in d.items():
        if isinstance(v, float):
            d[k] = float(v).hex()
        elif isinstance(v, list) and v and isinstance(v[0], dict):  # a one-vs-all certificate's per-class list
            d[k] = [_cert_dict(x) for x in v]
    return d


def _cert_dict(d: dict[str, Any]) -> dict[str, Any]:
    d = dict(d)
    d.pop("seconds", None)
    return {k: (float(v).hex() if isinstance(v, float) else v) for k, v in d.items()}


def _snapshot(est: CertifiedLogisticRegression, X: Any) -> dict[str, Any]:
    return {"coef": _floats(est.coef_), "intercept": _floats(est.intercept_),
            "proba": hashlib.sha256(np.ascontiguousarray(est.predict_proba(X)).tobytes()).hexdigest(),
            "beta": [float(s.residual_bound).hex() for s in est.states_],
            "retrainings": [int(s.retrainings) for s in est.states_]}


def run_case(case: tuple[Any, ...], tmp: Path) -> dict[str, Any]:
    """Fit, remove one row at a time, a batch, then save, load and remove again; every state recorded."""
    solver, kind, icpt, bound, classes, sigma = case
    X, y = _data(kind, classes)
    old = data_module.MATRIX_FREE_MIN_FEATURES
    if kind == "csr-matrix-free":
        data_module.MATRIX_FREE_MIN_FEATURES = 4  # the 6 (7 with the intercept) columns are then "many"
    try:
        est = CertifiedLogisticRegression(lam=2e-2, sigma=sigma, solver=solver, bound=bound,
                                          calibration="analytic" if bound == "tight" else "paper",
                                          fit_intercept=icpt, random_state=3)
        est.fit(X, y)
        out: dict[str, Any] = {"solver_": est.solver_, "fit": _snapshot(est, X), "steps": []}
        for i in (4, 11, 17, 23, 30, 41):
            cert = est.remove([i])
            out["steps"].append({"cert": _cert(cert), **_snapshot(est, X)})
        cert = est.remove([50, 52, 55, 58, 61])
        out["steps"].append({"cert": _cert(cert), **_snapshot(est, X)})
        loaded = CertifiedLogisticRegression.load(est.save(tmp / "m.npz"))
        for i in (70, 75):  # a loaded model's own generator is fresh entropy: a seeded one for its retrainings
            cert = loaded.remove_rows(np.array([i]), random_state=i)
            out["steps"].append({"cert": _cert(cert), **_snapshot(loaded, X)})
        return out
    finally:
        data_module.MATRIX_FREE_MIN_FEATURES = old


def digest(record: dict[str, Any]) -> dict[str, Any]:
    """What the golden file keeps of a case: a hash of the full record (every float's hex, every certificate field,
    the predictions) and, to locate a difference and to compare on other platforms, β after fit and after each
    step and the final weights."""
    text = json.dumps(record, sort_keys=True)
    last = record["steps"][-1]
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "solver_": record["solver_"],
            "beta": [record["fit"]["beta"]] + [s["beta"] for s in record["steps"]],
            "coef": last["coef"], "intercept": last["intercept"]}


def _close(a: Any, b: Any, path: str) -> None:
    """``a`` equals ``b`` up to 1e-9 relatively in every float (hex strings), exactly elsewhere (other platforms)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, z) in enumerate(zip(a, b, strict=True)):
            _close(x, z, f"{path}[{i}]")
    elif isinstance(a, str) and a.startswith(("0x", "-0x")):
        fa, fb = float.fromhex(a), float.fromhex(b)
        assert fa == fb or abs(fa - fb) <= 1e-9 * max(abs(fa), abs(fb)), path
    else:
        assert a == b, path


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_every_solver_removes_bit_for_bit_as_before_the_table(case: tuple[Any, ...], golden: dict[str, Any],
                                                              tmp_path: Path) -> None:
    got = digest(run_case(case, tmp_path))
    want = golden["cases"][_case_id(case)]
    if golden["platform"] == _platform():
        assert {k: got[k] for k in ("solver_", "beta", "coef", "intercept")} == {
            k: want[k] for k in ("solver_", "beta", "coef", "intercept")}  # bit for bit (hex)
        assert got == want  # and every certificate field, every prediction (the hash of the full record)
    else:
        _close({k: v for k, v in got.items() if k != "sha256"}, {k: v for k, v in want.items() if k != "sha256"},
               _case_id(case))


def test_the_cases_cover_every_solver_and_data_kind() -> None:
    assert {c[0] for c in CASES} == set(SOLVER_NAMES)
    assert {(c[0], c[1]) for c in CASES} == set(RUNS)
    assert {"csr", "csr-matrix-free"} <= {c[1] for c in CASES if c[0] == "pcg"}


if __name__ == "__main__" and "--record" in sys.argv:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        cases = {_case_id(c): digest(run_case(c, Path(tmp))) for c in CASES}
    GOLDEN.write_text(json.dumps({"platform": _platform(), "cases": cases}, sort_keys=True) + "\n",
                      encoding="utf-8")
    print(f"recorded {len(cases)} cases in {GOLDEN}")


# -- the table is the only place that names solvers; each state type is written by its own modules ---------------------

SRC = Path(__file__).resolve().parents[2] / "src" / "lethe"
#: solver names and the state kinds (``cache.kind``) that code used to compare
NAMES = {"cholesky", "refine", "pcg", "anchor", "onepass", "exact"}


def name_comparisons(paths: list[Path]) -> list[str]:
    """Every comparison (==, !=, in, not in) of an expression with a solver name or state kind given as a string
    literal (alone or in a tuple, list or set), as ``file:line: source``. The certificate's ``refreshed`` label
    ("anchor": the anchor system was formed again) is a label of the step, not a solver's name."""
    import ast

    out = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            if not all(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
                continue
            if isinstance(node.left, ast.Name) and node.left.id == "refreshed":
                continue
            consts = []
            for expr in [node.left, *node.comparators]:
                elts = expr.elts if isinstance(expr, ast.Tuple | ast.List | ast.Set) else [expr]
                consts += [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if NAMES & set(consts):
                out.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_only_the_solver_table_compares_solver_names() -> None:
    """No module of certified removal (nor the planner) chooses a solver by comparing its name: each asks the table
    (``SOLVERS[name].<capability>``). Checked on the code before the table: it finds the 21 comparisons of the
    issue (and more) there."""
    paths = [p for p in sorted((SRC / "certified").glob("*.py")) if p.name != "solvers.py"] + [SRC / "planning.py"]
    assert name_comparisons(paths) == []


def test_the_name_scanner_finds_comparisons(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text('if cfg.solver == "pcg" or s in ("refine", "anchor") or cache.kind != "exact":\n    pass\n'
                 'if refreshed != "anchor" or mode == "tight":\n    pass\n', encoding="utf-8")
    assert len(name_comparisons([f])) == 3  # the first line's three; not the refresh label, not other strings
    f.write_text('a = x == "pcg"\nb = y in ("refine",)\nc = z != "exact"\nd = "onepass" == w\n', encoding="utf-8")
    assert len(name_comparisons([f])) == 4


def _state_fields() -> dict[str, set[str]]:
    """Field name → the modules of src/lethe/certified allowed to assign it: the module that defines the state type
    holding it, and for the anchor system's fields those that form, downdate and fold it."""
    from lethe.certified.anchor_system import AnchorState
    from lethe.certified.cache import AnchorSystem
    from lethe.certified.exact import FactorState
    from lethe.certified.onepass import OnepassState

    system = set(AnchorSystem().__dict__)
    allowed: dict[str, set[str]] = {f: {"cache.py", "anchor_system.py", "exact.py"} for f in system}
    for cls, modules in ((FactorState, {"exact.py"}), (AnchorState, {"anchor_system.py", "anchor.py"}),
                         (OnepassState, {"onepass.py"})):
        for f in set(cls().__dict__) - system:
            allowed.setdefault(f, set()).update(modules)
    return allowed


def state_writes(paths: list[Path], fields: set[str]) -> dict[str, set[str]]:
    """Field name → the modules that assign an attribute of that name of another object (``x.f = ``, ``x.f += ``,
    tuple targets)."""
    import ast

    out: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
            for t in targets:
                for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    # (``self.f = `` is an object's own method writing its own field: the state types' __init__,
                    # SharedFloat32Data's X32)
                    if (isinstance(e, ast.Attribute) and e.attr in fields
                            and not (isinstance(e.value, ast.Name) and e.value.id == "self")):
                        out.setdefault(e.attr, set()).add(path.name)
    return out


def test_each_solver_state_is_written_only_by_its_own_modules() -> None:
    """``FactorState``'s fields are assigned in exact.py, ``AnchorState``'s in anchor_system.py and anchor.py,
    ``OnepassState``'s in onepass.py, the anchor system they share in anchor_system.py (and its folds in cache.py,
    exact.py's reset of the preconditioning system): no other module of the package writes a solver's state (the
    old dispatcher newton.py wrote the margins and the kind of every solver)."""
    allowed = _state_fields()
    paths = sorted((SRC / "certified").glob("*.py")) + [SRC / "planning.py"]
    writes = state_writes(paths, set(allowed))
    assert {f: sorted(m - allowed[f]) for f, m in writes.items() if m - allowed[f]} == {}


def test_the_table_and_the_cache_say_the_same() -> None:
    """Every name the mechanism accepts is in the table (``auto`` resolved), each entry's state type is the kind its
    step leaves on the cache, and an unknown name is refused naming the table's names."""
    from lethe.certified.mechanism import CertifiedRemoval, NewtonCache
    from lethe.certified.solvers import SOLVERS, get_solver

    assert list(SOLVERS) == ["cholesky", "refine", "pcg", "anchor", "onepass"]
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 4))
    X /= 1.2 * np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    for name, spec in SOLVERS.items():
        mech = CertifiedRemoval(lam=1e-2, sigma=1.0, solver=name)
        assert mech.solver_spec is spec
        cache = NewtonCache()
        state, _ = mech.train(X, y, random_state=0, cache=cache)
        assert isinstance(cache.state, spec.state) and spec.holds(cache) and cache.kind == spec.state.kind
        mech.remove(state, X, y, [2], cache=cache)
        assert isinstance(cache.state, spec.state)
    with pytest.raises(ValueError, match=r"solver must be one of \['cholesky', 'refine', 'pcg', 'anchor', 'onepass'\]"):
        get_solver("newton")
    with pytest.raises(ValueError, match="resolved for the data"):
        _ = CertifiedRemoval(solver="auto").solver_spec


def test_a_copied_cache_has_its_own_solver_state() -> None:
    """A copy (``copy.copy``, pickle) of a cache holds its own state object, so that a field it replaces stays as it
    was in the original (as the cache's own attributes did before the state types; mutation check: without the copy
    of ``state`` in ``__getstate__`` the original's M is cleared)."""
    import copy
    import pickle

    from lethe.certified.mechanism import CertifiedRemoval, NewtonCache

    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 4))
    X /= 1.2 * np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    cache = NewtonCache()
    CertifiedRemoval(lam=1e-2, sigma=1.0, solver="pcg").train(X, y, random_state=0, cache=cache)
    for other in (copy.copy(cache), pickle.loads(pickle.dumps(cache))):
        assert other.kind == cache.kind == "exact" and other.state is not cache.state
        other.M = None  # what an exact step out of sync does to its own state
        assert cache.M is not None

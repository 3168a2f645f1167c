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

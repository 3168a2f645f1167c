"""The fault-injection contract of ``test_exceptions.py`` for a release stream with tree-aggregated noise (issue 39):
an exception at any executed line of a ``remove`` that publishes leaves the model — centre, rows, ledger, releases,
random generator AND the tree's noisy nodes, kept centres and rows since the last release — as it was, or done in
full; the retried call and the next one certify bit-identically to an uninterrupted model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lethe.release import ReleasedLogisticRegression

from .test_exceptions import Fault, _cert, _check_bounds, _data, _positions, _snapshot, _traced

CHAIN = 16


def _snap(m: Any) -> dict[str, Any]:
    out = _snapshot(m)
    v = vars(m)
    arrays, meta = v["_tree"].to_state()
    out["tree"] = (repr(meta), tuple((k, a.tobytes()) for k, a in sorted(arrays.items())))
    out["rows_pending"] = v["_rows_pending"]
    out["ledger"] = m.accountant_
    return out


def _make(X: np.ndarray, y: np.ndarray) -> ReleasedLogisticRegression:
    m = ReleasedLogisticRegression(lam=1e-2, epsilon=1.0, horizon=50, cadence=2, random_state=0, n_floor=40,
                                   noise_mechanism="tree", gram_cap=float(X.shape[0]), rows_per_release=2).fit(X, y)
    for i in (3, 7, 9):
        m.remove([i])
    return m  # one removal pending: the next one publishes a release


@pytest.mark.parametrize("op_rows,then_rows", [([11], [17])])
def test_a_fault_at_any_line_of_a_tree_release_leaves_the_model_as_it_was_or_done(op_rows, then_rows) -> None:
    X, y = _data()
    op = lambda m: m.remove(op_rows)  # noqa: E731
    then = lambda m: m.remove(then_rows)  # noqa: E731
    op(_make(X, y))
    ref = _make(X, y)
    before = _snap(ref)
    out, seen, _ = _traced(lambda: op(ref), None)
    after = _snap(ref)
    assert out.published and before != after and before["tree"] != after["tree"]
    op_cert, then_cert = _cert(out), _cert(then(ref))
    outcomes = {"as before": 0, "done": 0}
    positions = _positions(seen)
    m = None
    for j, k in enumerate(positions):
        if m is None:
            m = _make(X, y)
            assert _snap(m) == before
        with pytest.raises(Fault):
            _traced(lambda m=m: op(m), k)  # noqa: B023
        snap = _snap(m)
        where = seen[k - 1]
        if snap == before:
            outcomes["as before"] += 1
            if j % CHAIN and j != len(positions) - 1:
                continue
            assert _cert(op(m)) == op_cert, f"fault at {where}: the retried call certifies otherwise"
        else:
            assert snap == after, f"fault at {where} left a model neither as before nor done"
            outcomes["done"] += 1
        _check_bounds(m, X, y)
        assert _cert(then(m)) == then_cert, f"fault at {where}: the next call certifies otherwise"
        m = None
    assert outcomes["as before"] > 0

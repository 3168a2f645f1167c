"""The path of one deletion through the code, measured (issue 25's target: from the HTTP handler to the solver in
≤ 12 calls across ≤ 6 files).

Trains a certified-removal model on a small synthetic dataset in a temporary data directory, submits one deletion
through the HTTP API (FastAPI's test client) and processes it in this process (``Curator.process_pending``, what the
worker calls), recording the stack of lethe frames at two points: when the submission's group is answered
(``DeletionIntake.answer_group_in``) and when the mechanism dispatches to the solver (``compute_step``) and the solver
runs (``anchor_step``). Prints each chain (file:function, outermost first, the function entered last) with its number
of calls and files. A decorator's frame would count as a call. The HTTP handler itself (``create_app.<locals>.
submit_deletion``) and ``SubmissionIntake.submit`` run on the event loop and hand the submission to the intake
thread, whose chain is printed: two calls more on the way of a request.

Run: ``OMP_NUM_THREADS=1 python benchmarks/call_path.py``.
"""

from __future__ import annotations

import dataclasses
import inspect
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from fastapi.testclient import TestClient

import lethe.certified.mechanism as mechanism_module
from lethe.certified.solvers import SOLVERS
from lethe.curator import Curator, Settings
from lethe.curator.api import create_app
from lethe.curator.intake import DeletionIntake


def lethe_frames() -> list[str]:
    """The calls on the stack inside src/lethe, outermost first (this module's spies excluded)."""
    out = []
    for f in inspect.stack()[2:]:
        if "/lethe/" in f.filename and "site-packages" not in f.filename.split("/lethe/")[0] + "/":
            out.append(f"{f.filename.split('/lethe/')[-1]}:{f.function}")
    return out[::-1]


def show(name: str, chain: list[str]) -> None:
    files = list(dict.fromkeys(c.split(":")[0] for c in chain))
    print(f"{name}: {len(chain)} calls across {len(files)} files")
    for c in chain:
        print(f"    {c}")


def main() -> None:
    chains: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(300, 8))
        X /= 1.5 * np.linalg.norm(X, axis=1, keepdims=True)
        frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(8)])
        frame.insert(0, "user_id", [f"user-{i:04d}" for i in range(300)])
        frame["label"] = (X[:, 0] > 0).astype(int)
        frame.to_csv(Path(tmp) / "people.csv", index=False)
        c = Curator(Path(tmp) / "lethe", settings=Settings(batch_size=1))
        c.register_dataset("people", Path(tmp) / "people.csv", key="user_id", label="label")
        c.train("people", "clf", params={"lam": 1e-2, "sigma": 1.0}, random_state=0)

        answer = DeletionIntake.answer_group_in
        step, anchor_spec = mechanism_module.compute_step, SOLVERS["anchor"]
        anchor = anchor_spec.step

        def spy_answer(self: DeletionIntake, s: Any, group: Any) -> Any:
            chains.setdefault("the intake thread -> the submission answered",
                              lethe_frames() + ["curator/intake.py:answer_group_in"])
            return answer(self, s, group)

        def spy_step(*args: Any, **kwargs: Any) -> Any:
            chains.setdefault("worker -> the mechanism's solver dispatch",
                              lethe_frames() + ["certified/mechanism.py:compute_step"])
            return step(*args, **kwargs)

        def spy_anchor(*args: Any, **kwargs: Any) -> Any:
            chains.setdefault("worker -> the solver", lethe_frames() + ["certified/anchor.py:anchor_step"])
            return anchor(*args, **kwargs)

        DeletionIntake.answer_group_in = spy_answer  # type: ignore[method-assign]
        mechanism_module.compute_step = spy_step
        # the dispatch's reference: compute_step (mechanism.py) runs the step of the solver table's entry
        SOLVERS["anchor"] = dataclasses.replace(anchor_spec, step=spy_anchor)
        try:
            token = c.create_token("app", scope="requester")
            with TestClient(create_app(c, run_worker="none")) as client:
                r = client.post("/v1/deletions", json={"dataset": "people", "key": "user-0003"},
                                headers={"Authorization": f"Bearer {token}"})
                print(f"POST /v1/deletions: HTTP {r.status_code}")
            c.process_pending(force=True)
        finally:
            DeletionIntake.answer_group_in = answer  # type: ignore[method-assign]
            mechanism_module.compute_step = step
            SOLVERS["anchor"] = anchor_spec
            c.close()
    for name, chain in chains.items():
        show(name, chain)


if __name__ == "__main__":
    main()

"""An exception at any executed line of ``remove`` leaves the model as it was or with the removal done in full — for
the families that ``test_exceptions.py`` (certified, released) and ``test_sharded_faults.py`` (sharded) do not
cover with their own harness: Noisy-GD (Chourasia & Shah 2023) and noisy fine-tuning of networks (issue 35, "in every
family").

The state compared is everything the model holds, walked generically: every array's bytes, every scalar, the random
generators' states, a torch module's parameters, ``certificate_``. A model interrupted before its commit must equal a
freshly fitted twin (as it was); one interrupted after must equal the twin after the same removal (done); and an
interrupted model that was left as it was must then do the removal exactly as the twin does (not stuck, no drift).
The thread's torch grad mode is part of "as it was": a fault must not leave it off (noisy fine-tuning's retry then
failed inside autograd, issue 35).

Injection points: the first time each distinct (previous line, line) transition executes — so both the entry and
the exit of a ``with`` block are hit (Python reports the implicit ``__exit__`` call on the ``with`` line again) —
plus ``EXTRA`` positions spread evenly over the call. ``pytest -s`` prints the count and the outcomes per family.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import lethe

from ._factories import FACTORIES, three

SRC = str(Path(lethe.__file__).parent)
PATHS = ["lethe.noisygd.estimators:NoisyGDLogisticRegression", "lethe.noisygd.pnsgd:PNSGDLogisticRegression",
         "lethe.nn.estimators:NoisyFineTuneClassifier"]


def _small_finetune() -> Any:
    from lethe.nn.estimators import NoisyFineTuneClassifier
    return NoisyFineTuneClassifier({"kind": "mlp", "hidden": [4]}, random_state=0, unlearn_steps=2, batch_size=16,
                                   train_epochs=1, post_steps=2, model_radius=3.0)


# a smaller network and data set than the conformance factory's, to keep the few hundred refits fast (the removal
# still runs every stage: projection, two noisy steps, two post-processing steps)
SMALL = {"lethe.nn.estimators:NoisyFineTuneClassifier": (_small_finetune, lambda: three(n=60))}
EXTRA = 40  # injections beyond one per distinct (file, line), spread over the call


class Fault(BaseException):
    """Injected; a BaseException, as KeyboardInterrupt is."""


def _run(fn: Any, raise_at: int | None) -> tuple[BaseException | None, list[tuple[str, int]]]:
    seen: list[tuple[str, int]] = []

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            seen.append((frame.f_code.co_filename, frame.f_lineno))
            if raise_at is not None and len(seen) == raise_at:
                raise Fault(f"{frame.f_code.co_filename}:{frame.f_lineno}")
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename.startswith(SRC) else None)
    try:
        fn()
        err = None
    except Fault as exc:
        err = exc
    finally:
        sys.settrace(None)
    return err, seen


def _state(obj: Any, seen: set[int] | None = None, depth: int = 0) -> Any:
    """A comparable image of everything ``obj`` holds (arrays by bytes, generators by state, torch by tensors)."""
    seen = set() if seen is None else seen
    if isinstance(obj, np.ndarray):
        return ("nd", obj.dtype.str, obj.shape, obj.tobytes())
    if isinstance(obj, int | float | str | bool | bytes | type(None)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.random.Generator):
        return ("rng", repr(obj.bit_generator.state))
    if id(obj) in seen or depth > 8:  # a cycle (the objects on the path to here), not a shared reference
        return ("cycle",)
    seen = seen | {id(obj)}
    mod = type(obj).__module__
    if mod.startswith("torch"):
        if hasattr(obj, "state_dict"):
            return ("torch", [(k, v.detach().cpu().numpy().tobytes()) for k, v in obj.state_dict().items()])
        if hasattr(obj, "detach"):
            return ("tensor", obj.detach().cpu().numpy().tobytes())
        if hasattr(obj, "get_state"):
            return ("torch-rng", obj.get_state().numpy().tobytes())
        return ("torch", type(obj).__name__)
    if isinstance(obj, dict):
        return {str(k): _state(v, seen, depth + 1) for k, v in obj.items() if "lock" not in str(k)}
    if isinstance(obj, list | tuple):
        return [_state(v, seen, depth + 1) for v in obj]
    if hasattr(obj, "__dict__") and mod.split(".")[0] in ("lethe", "numpy"):
        return (type(obj).__name__, _state({k: v for k, v in vars(obj).items() if "lock" not in k}, seen, depth + 1))
    if hasattr(obj, "to_dict"):
        return _state(obj.to_dict(), seen, depth + 1)
    return ("opaque", type(obj).__name__)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("path", PATHS, ids=[p.rpartition(":")[2] for p in PATHS])
def test_an_exception_at_any_line_of_remove_leaves_the_model_as_it_was_or_done(path):
    make, data = SMALL.get(path, FACTORIES[path])
    X, y = data()

    def fresh() -> Any:
        return make().fit(X, y, sample_ids=[f"r{i}" for i in range(X.shape[0])])

    def removal(m: Any) -> None:
        m.remove(keys=["r5", "r9"])

    before = _state(fresh())
    twin = fresh()
    err, lines = _run(lambda: removal(twin), None)
    assert err is None and lines
    after = _state(twin)
    assert after != before
    distinct: dict[tuple[tuple[str, int] | None, tuple[str, int]], int] = {}
    for k, line in enumerate(lines, start=1):
        distinct.setdefault((lines[k - 2] if k > 1 else None, line), k)
    points = sorted(set(distinct.values()) | set(np.linspace(1, len(lines), EXTRA, dtype=int).tolist()))
    outcomes = {"as it was": 0, "done": 0}
    for at in points:
        m = fresh()
        err, _ = _run(lambda m=m: removal(m), at)
        assert isinstance(err, Fault), at
        assert torch.is_grad_enabled(), f"{path}: a fault at {lines[at - 1]} left the thread's grad mode off"
        now = _state(m)
        if now == before:
            outcomes["as it was"] += 1
            removal(m)  # not stuck: the removal then goes through, to the twin's model exactly
            assert _state(m) == after, f"{path}: after a fault at {lines[at - 1]}, the retried removal differs"
        else:
            assert now == after, f"{path}: a fault at {lines[at - 1]} left the model neither as it was nor done"
            outcomes["done"] += 1
    assert outcomes["as it was"] > 0
    print(path, len(lines), "lines executed;", len(points), "faults:", outcomes)

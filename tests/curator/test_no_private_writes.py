"""The service drives the library's models through their public constructors and methods only (issue 25): no
module of lethe.curator assigns a private attribute of an object other than its own (``self``/``cls``), e.g. a
restored Noisy-GD curator's database or counters (its adapter uses :meth:`NoisyGDCurator.resume`)."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import numpy as np
import pytest

import lethe.curator
from lethe.io import ModelFileError
from lethe.noisygd.edit_stream import CuratorConfig, Database, EditRequest, NoisyGDCurator
from lethe.noisygd.models import LogisticModel
from lethe.noisygd.schedule import convex_schedule


def private_writes(source: str) -> list[str]:
    """Assignments to ``x._name`` where x is not self or cls (dunder names aside)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
        for target in targets:
            for sub in ast.walk(target):
                if (isinstance(sub, ast.Attribute) and sub.attr.startswith("_") and not sub.attr.startswith("__")
                        and not (isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls"))):
                    found.append(f"line {node.lineno}: {ast.unparse(target)}")
    return found


def test_the_scan_finds_a_private_write() -> None:
    assert private_writes("cur._theta = 1\nself._x = 2\n") == ["line 1: cur._theta"]


def test_no_curator_module_writes_another_objects_private_attributes() -> None:
    root = Path(lethe.curator.__file__).parent
    offenders = {str(p.relative_to(root)): w for p in sorted(root.rglob("*.py"))
                 if (w := private_writes(p.read_text(encoding="utf-8")))}
    assert offenders == {}


def _curator(seed: int = 0, random_state: np.random.Generator | None = None,
             ) -> tuple[NoisyGDCurator, CuratorConfig, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(120, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=0.1, n=120, d=3, r=1, q=2.0, epsilon_dp=1.0,
                        epsilon_dd=0.5)
    config = CuratorConfig.from_convex_schedule(s)
    cur = NoisyGDCurator(LogisticModel(3), config, random_state=seed if random_state is None else random_state)
    cur.learn(Database(X, y))
    return cur, config, X, y


def test_resume_continues_the_run_exactly() -> None:
    """A curator resumed from (database, θ, counters) with the same generator takes the same next edit: the same
    θ and the same certificate as the original curator."""
    gen = np.random.default_rng(0)  # the original's generator (a Generator is used as is, shared)
    cur, config, X, y = _curator(random_state=gen)
    cur.unlearn(EditRequest.deletion([4], n_features=3))
    db = cur.database
    resumed = NoisyGDCurator.resume(LogisticModel(3), config, db.X.copy(), db.y.copy(), cur.theta.copy(),
                                    step=cur.step, total_steps=config.k_learn + cur.step * config.k_unlearn,
                                    random_state=copy.deepcopy(gen))  # the generator where the original's is
    a = cur.unlearn(EditRequest.deletion([9], n_features=3))
    b = resumed.unlearn(EditRequest.deletion([9], n_features=3))
    assert np.array_equal(cur.theta, resumed.theta)
    assert a == b
    assert len(resumed.certificates) == 1  # only what happened after resuming


@pytest.mark.parametrize("edit, match", [
    ("total", "total_steps must be K_A"), ("theta_nan", "theta must be finite"), ("row", "row"),
    ("label", "label"), ("step_type", "step and total_steps must be integers"),
])
def test_resume_refuses_a_state_whose_certificates_would_not_hold(edit: str, match: str) -> None:
    cur, config, X, y = _curator(1)
    db = cur.database
    args = dict(X=db.X.copy(), y=db.y.copy(), theta=cur.theta.copy(), step=0, total_steps=config.k_learn)
    if edit == "total":
        args["total_steps"] = config.k_learn + 1
    elif edit == "theta_nan":
        args["theta"][0] = np.nan
    elif edit == "row":
        args["X"][3] *= 2.0
    elif edit == "label":
        args["y"][3] = 0.5
    else:
        args["step"] = 0.0
    with pytest.raises(ModelFileError, match=match):
        NoisyGDCurator.resume(LogisticModel(3), config, args.pop("X"), args.pop("y"), args.pop("theta"), **args)

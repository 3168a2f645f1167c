"""Issue 12: the service computes removals with the estimators' code, keeps each model warm between batches, and
keeps the records' values in a data plane that a batch reads and erases in O(d) per record."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import select

from lethe.certified.adapter import CertifiedRemovalAdapter
from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.curator import Curator, InvalidInputError, Settings
from lethe.curator.dataplane import DataPlane
from lethe.curator.store import Model, ModelVersion

from .._certified import exact_residual
from .conftest import Data

FAST = {"lam": 1e-2, "sigma": 0.05, "epsilon": 1.0, "delta": 1e-4}  # small σ: the budget runs out within ~30


def _published_state(c: Curator, model: str = "clf") -> tuple[CertifiedRemovalAdapter, list, ModelVersion]:
    with c.store.read() as s:
        m = s.scalar(select(Model).where(Model.name == model))
        v = s.get(ModelVersion, m.current_version_id)
        params = dict(m.params)
    adapter = CertifiedRemovalAdapter(params)
    return adapter, adapter.states(c.artifacts.load(v.artifact, v.sha256)), v


def _forget(c: Curator, keys: list[str]) -> list[dict]:
    views = [c.submit_deletion("people", k)[0] for k in keys]
    c.process_pending(force=True)
    return [c.request_certificates(v["id"])[0]["certificate"] for v in views]


@pytest.mark.parametrize("solver", ["pcg", "onepass", "anchor"])
def test_service_supports_as_many_removals_as_the_estimator(tmp_path: Path, data: Data, solver: str) -> None:
    """Same data, parameters and seed: the service retrains at the same removal as the estimator, with the same
    certified bounds before it (the estimators' defaults: tight bound, analytic calibration)."""
    params = {**FAST, "solver": solver}
    c = Curator(tmp_path / "d", settings=Settings(batch_size=1))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=params, random_state=0)
    est = CertifiedLogisticRegression(**params, random_state=0).fit(data.X, data.y)
    order = np.random.default_rng(1).permutation(len(data.keys))[:80]
    first = {"estimator": None, "service": None}
    for j, i in enumerate(order):
        ce = est.remove([int(i)])
        (cs,) = _forget(c, [data.keys[i]])
        if first["estimator"] is None and ce.retrained:
            first["estimator"] = j
        if first["service"] is None and cs["retrained"]:
            first["service"] = j
        if ce.retrained or cs["retrained"]:
            break
        assert cs["residual_bound"] == ce.residual_bound and cs["bound_mode"] == "tight"
        assert cs["calibration"] == "analytic" and cs["solver"] == solver
    if solver == "anchor":
        # a step over budget from a stale anchor is taken again from a fresh one before retraining
        # (docs/tighter_bounds.md §5d): the 80 removals may need no retraining; the loop compared every bound
        assert first["estimator"] is None or first["estimator"] >= 5, first
    else:
        assert first["estimator"] is not None and first["estimator"] >= 10, first
    assert first["service"] == first["estimator"], first
    c.close()


def test_adapter_options_and_defaults_are_the_estimators() -> None:
    adapter = CertifiedRemovalAdapter({})
    est = CertifiedLogisticRegression()
    for k in ("lam", "sigma", "epsilon", "delta", "noise", "tol", "max_iter", "solver", "bound", "calibration",
              "refresh"):
        assert adapter.params[k] == getattr(est, k), k
    assert CertifiedRemovalAdapter({"loss": "squared"}).params["solver"] == "auto"
    for bad, word in (({"bound": "loose"}, "bound"), ({"refresh": 0}, "refresh"), ({"colour": 1}, "colour"),
                      ({"negative_subsample": 2.0}, "negative_subsample")):
        with pytest.raises(ValueError, match=word):
            CertifiedRemovalAdapter(bad)


def test_one_vs_all_with_text_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n, d = 150, 6
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.5
    names = np.array(["bird", "cat", "dog"])
    y = names[np.argmax(X[:, :3], axis=1)]
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(d)])
    df.insert(0, "user_id", [f"u{i}" for i in range(n)])
    df["animal"] = y
    df.to_csv(tmp_path / "pets.csv", index=False, float_format="%.17g")
    c = Curator(tmp_path / "d")
    c.register_dataset("people", tmp_path / "pets.csv", key="user_id", label="animal")
    c.train("people", "clf", params={"lam": 1e-2, "sigma": 1.0}, random_state=0)
    est = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    assert c.predict("clf", X[:20].tolist())["predictions"] == est.predict(X[:20]).tolist()
    certs = _forget(c, ["u3", "u77"])
    ce = est.remove([3, 77])
    assert certs[0]["residual_bound"] == pytest.approx(ce.residual_bound, rel=1e-12)
    # per-class bounds are withheld by the publication allow-list (lethe.curator.public); no row positions either
    assert "per_class" not in certs[0] and "removed_indices" not in certs[0]
    budget = c.budget("clf")
    assert budget["binary_models"] == 3 and budget["residual_bound"] == pytest.approx(ce.residual_bound)
    c.close()


def test_worker_keeps_the_model_warm_and_rebuilds_once_after_restart(tmp_path: Path, data: Data,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = CertifiedRemovalAdapter.restore

    def counting(self, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(self, *a, **k)

    monkeypatch.setattr(CertifiedRemovalAdapter, "restore", counting)
    c = Curator(tmp_path / "d", settings=Settings(batch_size=2))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params={"lam": 1e-2, "sigma": 1.0}, random_state=0)
    for j in range(5):
        _forget(c, [data.keys[2 * j], data.keys[2 * j + 1]])
    assert len(calls) == 1  # built once, then kept between batches
    c.close()
    c2 = Curator(tmp_path / "d", settings=Settings(batch_size=2))  # a restart
    _forget(c2, [data.keys[10]])
    _forget(c2, [data.keys[11]])
    assert len(calls) == 2
    c2.close()


@pytest.mark.parametrize(("params", "identical"), [
    ({"lam": 1e-2, "sigma": 5.0, "bound": "paper", "calibration": "paper", "solver": "cholesky"}, True),
    ({"lam": 1e-2, "sigma": 0.5}, False),
    ({"lam": 1e-2, "sigma": 0.5, "solver": "onepass"}, False),
    ({"lam": 1e-2, "sigma": 0.5, "solver": "anchor"}, False),
])
def test_state_rebuilt_after_a_crash_certifies_the_published_bounds(tmp_path: Path, data: Data,
                                                                    params: dict, identical: bool) -> None:
    """One run keeps its worker warm; a copy of it restarts (a new process's state) before every batch. The rebuilt
    state is exactly the published one (w, b, β, counters), every certificate after a rebuild bounds the true
    residual on the records that remain, and where no solver state enters the certificate (the paper's Cholesky
    step) the two runs certify identical bounds. (With the tight bound the warm run's certificates also use the
    measured error it carries between removals; a rebuilt run restarts that accounting from β — sound, but the bounds
    then differ.)"""
    fixed = Settings(batch_size=3, budget_share=1.0)  # batches of 3 in both runs (no budget-adapted size)
    c = Curator(tmp_path / "warm", settings=fixed)
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params=params, random_state=0)
    c.close()
    shutil.copytree(tmp_path / "warm", tmp_path / "cold")
    warm = Curator(tmp_path / "warm", settings=fixed)
    order = np.random.default_rng(5).permutation(len(data.keys))[:15]
    for j in range(0, 15, 3):
        keys = [data.keys[i] for i in order[j:j + 3]]
        cw = _forget(warm, keys)[0]
        cold = Curator(tmp_path / "cold", settings=fixed)
        adapter, before, _v = _published_state(cold)
        cc = _forget(cold, keys)[0]
        adapter, after, _v = _published_state(cold)
        with cold.store.read() as s:
            _ids, X, y = cold.datasets.current_data(s, 1, data.X.shape[1])
        truth = exact_residual(adapter.mechanism, after[0], np.asarray(X), np.where(y == 1.0, 1.0, -1.0))
        assert truth <= cc["residual_bound"]
        assert cc["residual_bound"] <= before[0].residual_bound + cc["step_bound"] * (1 + 1e-12)
        assert not cw["retrained"] and not cc["retrained"]  # else the runs' fresh secrets differ
        if identical:
            # equal up to the rounding of margins recomputed instead of carried (last digits)
            assert cc["residual_bound"] == pytest.approx(cw["residual_bound"], rel=1e-9)
            assert cc["step_bound"] == pytest.approx(cw["step_bound"], rel=1e-9)
        cold.close()
    # the published states of the warm run are the estimator's states, byte for byte
    adapter, states, _v = _published_state(warm)
    wm = warm.batches.warm.get(1)
    assert wm is not None
    st = wm.estimator.states_[0]
    np.testing.assert_array_equal(states[0].w, st.w)
    np.testing.assert_array_equal(states[0].b, st.b)
    assert states[0].residual_bound == st.residual_bound and states[0].n == st.n
    warm.close()


def test_data_plane_erases_removed_rows_in_place(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params={"lam": 1e-2, "sigma": 1.0}, random_state=0)
    with c.store.read() as s:
        plane = s.get(DataPlane, 1)
    feats = c.matrices.resolve(plane.features_path)
    size = feats.stat().st_size
    assert size == 8 * data.X.size
    gone = [5, 6, 150]
    _forget(c, [data.keys[i] for i in gone])
    M = np.fromfile(feats, dtype="<f8").reshape(data.X.shape)
    labels = np.fromfile(c.matrices.resolve(plane.labels_path), dtype="<f8")
    assert feats.stat().st_size == size  # erased in place, not rewritten
    keep = np.setdiff1d(np.arange(len(data.keys)), gone)
    assert np.all(M[gone] == 0.0) and np.all(labels[gone] == 0.0)
    np.testing.assert_array_equal(M[keep], data.X[keep])
    np.testing.assert_array_equal(labels[keep], data.y[keep])
    c.close()


def test_crash_between_publication_and_erasure_is_repaired(tmp_path: Path, data: Data,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=4))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params={"lam": 1e-2, "sigma": 1.0}, random_state=0)
    with c.store.read() as s:
        plane = s.get(DataPlane, 1)

    def crash(*a: object, **k: object) -> int:
        raise KeyboardInterrupt  # the process dies after the commit, before the erasure

    monkeypatch.setattr(c.matrices, "erase_rows", crash)
    c.submit_deletion("people", data.keys[9])
    with pytest.raises(KeyboardInterrupt):
        c.process_pending()
    M = np.fromfile(c.matrices.resolve(plane.features_path), dtype="<f8").reshape(data.X.shape)
    assert np.all(M[9] == data.X[9])  # the failure was real: the row is still there
    c.close()
    monkeypatch.undo()
    c2 = Curator(tmp_path / "d")
    assert c2.purge_pending()
    c2.recover()
    M = np.fromfile(c2.matrices.resolve(plane.features_path), dtype="<f8").reshape(data.X.shape)
    assert np.all(M[9] == 0.0) and np.all(M[10] == data.X[10])
    assert not c2.purge_pending()
    c2.close()


def test_request_status_reports_time_to_publication(curator: Curator) -> None:
    view, _ = curator.submit_deletion("people", "user-0042")
    assert view["seconds_to_publication"] is None
    curator.process_pending(force=True)
    done = curator.request_status(view["id"])
    assert done["status"] == "done" and 0.0 <= done["seconds_to_publication"] < 3600


def test_batch_size_adapts_to_the_budget(tmp_path: Path, data: Data) -> None:
    c = Curator(tmp_path / "d", settings=Settings(batch_size=64, budget_share=0.02))
    c.register_dataset("people", data.csv, key="user_id", label="label")
    c.train("people", "clf", params={"lam": 1e-2, "sigma": 1.0}, random_state=0)
    for k in data.keys[:40]:
        c.submit_deletion("people", k)
    first = c.process_pending(max_batches=1)
    assert len(first[0].request_ids) == 40  # what arrived together is one batch
    cap = c.batches.batch_cap(1)
    assert 1 <= cap < 40  # a batch of 40 spent more than 2 % of the budget left: the next ones are smaller
    for k in data.keys[40:80]:
        c.submit_deletion("people", k)
    nxt = c.process_pending(max_batches=1)
    assert len(nxt[0].request_ids) == cap
    # the latency target (issue 37): once the oldest request waited half of publish_within, the cap gives way
    hurried = Curator(tmp_path / "h", settings=Settings(batch_size=64, budget_share=0.02, publish_within=1e-9))
    hurried.register_dataset("people", data.csv, key="user_id", label="label")
    hurried.train("people", "clf", params={"lam": 1e-2, "sigma": 1.0}, random_state=0)
    for k in data.keys[:40]:
        hurried.submit_deletion("people", k)
    hurried.process_pending(max_batches=1)
    assert 1 <= hurried.batches.batch_cap(1) < 40  # the budget set the same cap
    for k in data.keys[40:80]:
        hurried.submit_deletion("people", k)
    assert len(hurried.process_pending(max_batches=1)[0].request_ids) == 40  # every pending one, past the cap
    hurried.close()
    with pytest.raises(ValueError, match="budget_share"):
        Settings(budget_share=0.0)
    with pytest.raises(ValueError, match="publish_within"):
        Settings(publish_within=0.0)
    with pytest.raises(InvalidInputError):
        c.train("people", "other", params={"negative_subsample": 1.0})
    c.close()



"""Tree-aggregated release streams in the service and the dataset's privacy ledger (issue 39): the adapter publishes
the library's tree, its certificates and summaries state it, and the ledger composes a tree stream (one μ_T-GDP
mechanism from its first release) with fresh streams — checked against an independent composition of every Gaussian
mechanism the test itself reconstructs, and a mutation of the ledger's rule that fails it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lethe.curator import Curator, Settings, lifetime
from lethe.curator.artifacts import ArtifactError

from ..test_release_tree import _prefix_s2
from .conftest import Data
from .test_lifetime import DELTA, _plrv_delta

FRESH = {"lam": 0.05, "epsilon": 0.5, "delta": DELTA, "horizon": 4, "cadence": 1}
TREE = {"lam": 1.0, "epsilon": 0.7, "delta": DELTA, "horizon": 32, "cadence": 1, "noise_mechanism": "tree",
        "gram_cap": 200.0}  # ‖x‖ ≤ 1: λ_max(XᵀX) ≤ the 200 rows


def _streams(c: Curator, tree_prefix: bool = True) -> list[tuple[float, float, int]]:
    """(σ, Δ, k) of every Gaussian mechanism published so far, from the models' public budgets: the fresh stream's k
    releases, and the tree's release 0 (σ₀, Δ) and its nodes so far (σ, √S_k², S_k² by an independent enumeration;
    ``tree_prefix=False``: all the horizon's nodes)."""
    fa, tb = c.budget("a"), c.budget("b")
    k = int(tb["releases"]) if tree_prefix else int(tb["horizon"])
    s2 = _prefix_s2(k, int(tb["rows_per_release"]), TREE["lam"], int(tb["n_floor"]), TREE["gram_cap"], 0.01)
    out = [(float(fa["sigma"]), float(fa["sensitivity"]), int(fa["releases"])),
           (float(tb["sigma_first"]), float(tb["sensitivity"]), 1)]
    if s2 > 0:
        out.append((float(tb["sigma_node"]), math.sqrt(s2), 1))
    return out


def test_a_tree_stream_in_the_service_and_the_ledger(tmp_path: Path, data: Data,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    c = Curator(tmp_path / "lethe-data", settings=Settings(batch_size=1))
    try:
        c.register_dataset("people", data.csv, key="user_id", label="label", label_classes=[0, 1])
        c.train("people", "a", mechanism="released-logistic", params=FRESH)
        c.train("people", "b", mechanism="released-logistic", params=TREE)
        b = c.budget("b")
        assert b["noise_mechanism"] == "tree" and b["gram_cap"] == 200.0 and b["rows_per_release"] == 1
        assert c.budget("a")["noise_mechanism"] == "fresh"
        led = c.privacy_ledger("people")
        tree_row = next(r for r in led["streams"] if r["model"] == "b")
        assert tree_row["noise_mechanism"] == "tree" and tree_row["mu_stream"] >= b["mu"]
        c.submit_deletion("people", data.keys[0])
        c.process_pending(force=True)
        b = c.budget("b")
        assert b["releases"] == 2 and b["sigma"] <= b["worst_release_std"]
        led = c.privacy_ledger("people")
        eps = led["lifetime_epsilon"]
        # the reported ε covers the exact composition of what was published (δ(ε) ≤ δ) ...
        assert _plrv_delta(eps, _streams(c)) <= DELTA * (1 + 1e-7)
        # ... and of the whole tree (a tree stream counts its horizon's μ from its first release), tightly
        assert _plrv_delta(eps, _streams(c, tree_prefix=False)) <= DELTA * (1 + 1e-7)
        assert _plrv_delta(eps * (1 - 1e-6), _streams(c, tree_prefix=False)) > DELTA
        # committed = every open stream at its horizon: identical for both mechanisms' whole horizons
        mu_comm = math.sqrt(lifetime.gdp_mu(0.5, DELTA) ** 2 + lifetime.gdp_mu(0.7, DELTA) ** 2)
        assert led["lifetime_epsilon_committed"] == pytest.approx(lifetime.gdp_epsilon(mu_comm, DELTA), rel=1e-9)
        # the deleted record: the fresh stream's one release that held it, the tree's whole μ (its later nodes
        # still carry the deletion's increment)
        expo = c.record_exposure("people", data.keys[0])
        mu_a1 = lifetime.stream_mu(FRESH)
        want = lifetime.gdp_epsilon(math.sqrt(mu_a1**2 + lifetime.gdp_mu(0.7, DELTA) ** 2), DELTA)
        assert expo["exposure_epsilon"] == pytest.approx(want, rel=1e-9)

        # mutation: the tree spread as k releases of μ_T/√T (the fresh-noise rule) undercounts the prefix
        def spread(row: Any, releases: int) -> tuple[float, int]:
            if str(row.mechanism).endswith(lifetime.TREE_STREAM):
                return float(row.mu) / math.sqrt(row.horizon), int(releases)
            return float(row.mu), int(releases)

        monkeypatch.setattr(lifetime, "stream_pair", spread)
        wrong = c.privacy_ledger("people")["lifetime_epsilon"]
        assert wrong < eps and _plrv_delta(wrong, _streams(c)) > DELTA
    finally:
        c.close()


def test_the_service_refuses_a_batch_past_rows_per_release_and_a_tree_state_edit(tmp_path: Path,
                                                                                   data: Data) -> None:
    from lethe.release.adapter import ReleasedLogisticAdapter, check_released_logistic

    params = ReleasedLogisticAdapter.check_params({**TREE, "cadence": 2, "rows_per_release": 2})
    ad = ReleasedLogisticAdapter(params)
    X, y = data.X, data.y
    art, cert = ad.train(X, y, np.random.default_rng(0))
    assert cert["noise_mechanism"] == "tree" and cert["sigma"] == cert["sigma_first"]
    check_released_logistic(art.meta, art.arrays, X.shape[1], params)
    keep = np.ones(X.shape[0], dtype=bool)
    with pytest.raises(ValueError, match="rows_per_release = 2"):
        ad.remove(art, X, y, np.arange(3), np.random.default_rng(0))
    art1, c1 = ad.remove(art, X, y, np.arange(1), np.random.default_rng(0))
    assert not c1["published"] and art1.meta["rows_pending"] == 1
    keep[0] = False
    art2, c2 = ad.remove(art1, X[keep], y[keep], np.arange(1), np.random.default_rng(0))
    assert c2["published"] and art2.meta["rows_pending"] == 0 and c2["releases"] == 2
    check_released_logistic(art2.meta, art2.arrays, X.shape[1], params)
    assert c2["sigma"] == ad.summary(art2)["sigma"]
    bad = {**art2.arrays, "tree_nodes": art2.arrays["tree_nodes"] * 0.5}
    with pytest.raises(ArtifactError, match="not the tree's latest release"):
        check_released_logistic(art2.meta, bad, X.shape[1], params)
    with pytest.raises(ArtifactError, match="is not the one its parameters give"):
        check_released_logistic(art2.meta, art2.arrays, X.shape[1], {**params, "gram_cap": 300.0})
    with pytest.raises(ArtifactError):  # a fresh-noise claim for a tree stream's parameters
        fresh = ReleasedLogisticAdapter(ReleasedLogisticAdapter.check_params(FRESH))
        fa, _ = fresh.train(X, y, np.random.default_rng(0))
        check_released_logistic(fa.meta, fa.arrays, X.shape[1], {**params, "epsilon": 0.5, "horizon": 4})


def test_the_service_chooses_as_the_library(data: Data) -> None:
    """``noise_mechanism="auto"`` in the service: the adapter trains through the library's estimator, and its artifact
    check recomputes the same choice from the parameters (a ledger of the other mechanism is refused)."""
    from lethe.release import ReleasedLogisticRegression
    from lethe.release.adapter import ReleasedLogisticAdapter, check_released_logistic

    X, y = data.X, data.y
    chosen = set()
    for lam, horizon in ((1.0, 64), (0.05, 4)):  # the tree wins, then fresh noise does
        params = ReleasedLogisticAdapter.check_params({**TREE, "lam": lam, "horizon": horizon,
                                                      "noise_mechanism": "auto"})
        art, cert = ReleasedLogisticAdapter(params).train(X, y, np.random.default_rng(0))
        lib = ReleasedLogisticRegression(lam=lam, horizon=horizon, epsilon=0.7, noise_mechanism="auto",
                                         gram_cap=200.0).fit(X, y)
        assert ReleasedLogisticAdapter(params).summary(art)["noise_mechanism"] == lib.noise_mechanism_
        check_released_logistic(art.meta, art.arrays, X.shape[1], params)
        with pytest.raises(ArtifactError, match="is not the one its parameters give"):
            other = "fresh" if lib.noise_mechanism_ == "tree" else "tree"
            check_released_logistic(art.meta, art.arrays, X.shape[1], {**params, "noise_mechanism": other})
        chosen.add(lib.noise_mechanism_)
    assert chosen == {"tree", "fresh"}

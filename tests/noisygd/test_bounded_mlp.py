"""Thm 5.2 for a non-convex model: BoundedMLPModel's constants against the exact quantities, the certified ε_dd of
Thm 5.2's proof for the steps run, the schedule with B matched to the loss, the curator's nonconvex mode."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lethe.noisygd.edit_stream import CuratorConfig, Database, EditRequest, EditRequestError, NoisyGDCurator
from lethe.noisygd.estimators import NoisyGDBoundedMLPClassifier
from lethe.noisygd.models import BoundedMLPModel, LogisticModel, model_from_dict
from lethe.noisygd.schedule import (
    nonconvex_deletion_epsilon,
    nonconvex_schedule,
    nonconvex_schedule_for_loss,
)


def _ball(rng: np.random.Generator, p: int, R: float) -> np.ndarray:
    x = rng.normal(size=p)
    return x * (R * rng.uniform(0.0, 1.0) ** (1.0 / p) / np.linalg.norm(x))


def _theta(rng: np.random.Generator, d: int) -> np.ndarray:
    # Scales from the flat middle of tanh to deep saturation, plus sign patterns.
    return rng.normal(size=d) * rng.choice([0.1, 0.5, 1.0, 2.0, 5.0])


def test_exact_hessian_and_gradient_match_finite_differences():
    # The closed-form Hessian (used to test β) and the gradient are checked against central differences first.
    rng = np.random.default_rng(0)
    model = BoundedMLPModel(3, 4, 3.0)
    for _ in range(5):
        theta, x, y = _theta(rng, model.n_params), _ball(rng, 3, math.sqrt(2)), float(rng.choice([-1.0, 1.0]))
        h = 1e-6
        E = np.eye(model.n_params)
        X1, y1 = x[None], np.array([y])

        def f(t, X1=X1, y1=y1):
            return float(model.loss(t, X1, y1)[0])

        def g(t, X1=X1, y1=y1):
            return model.mean_gradient(t, X1, y1)

        num_g = np.array([(f(theta + h * e) - f(theta - h * e)) / (2 * h) for e in E])
        num_h = np.array([(g(theta + h * e) - g(theta - h * e)) / (2 * h) for e in E])
        np.testing.assert_allclose(g(theta), num_g, atol=1e-8)
        np.testing.assert_allclose(model.hessian(theta, x, y), num_h, atol=1e-7)


@pytest.mark.parametrize(("p", "m", "c", "R"), [(2, 1, 1.0, 1.0), (3, 4, 4.0, math.sqrt(2)), (5, 3, 8.0, 0.5),
                                                (2, 2, 0.3, 2.0)])
def test_constants_bound_the_exact_quantities(p, m, c, R):
    # Over many random (θ, x, y) with ‖x‖ ≤ R: ‖∇ℓ‖ ≤ L, ‖∇²ℓ‖₂ ≤ β (exact Hessian), ℓ in [log(1+e^-c), log(1+e^c)].
    rng = np.random.default_rng([p, m])
    model = BoundedMLPModel(p, m, c)
    L, beta = model.lipschitz(R), model.smoothness(R)
    lo, hi = math.log1p(math.exp(-c)), math.log1p(math.exp(c))
    assert hi - lo == pytest.approx(c) and model.loss_half_range() == c / 2
    worst_g = worst_h = 0.0
    for _ in range(400):
        theta, x, y = _theta(rng, model.n_params), _ball(rng, p, R), float(rng.choice([-1.0, 1.0]))
        worst_g = max(worst_g, float(np.linalg.norm(model.mean_gradient(theta, x[None], np.array([y])))))
        worst_h = max(worst_h, float(np.abs(np.linalg.eigvalsh(model.hessian(theta, x, y))).max()))
        ell = float(model.loss(theta, x[None], np.array([y]))[0])
        assert lo <= ell <= hi
    assert worst_g <= L and worst_h <= beta
    assert worst_g > 0.05 * L and worst_h > 0.02 * beta  # the sweep reached non-trivial values


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), c=st.floats(0.1, 10.0), R=st.floats(0.1, 3.0), m=st.integers(1, 4))
def test_constants_property(seed, c, R, m):
    rng = np.random.default_rng(seed)
    model = BoundedMLPModel(3, m, c)
    theta, x, y = _theta(rng, model.n_params), _ball(rng, 3, R), float(rng.choice([-1.0, 1.0]))
    x = x * (R / max(np.linalg.norm(x), 1e-300)) if rng.uniform() < 0.5 else x  # half the cases on the sphere
    assert np.linalg.norm(model.mean_gradient(theta, x[None], np.array([y]))) <= model.lipschitz(R) * (1 + 1e-12)
    assert np.abs(np.linalg.eigvalsh(model.hessian(theta, x, y))).max() <= model.smoothness(R) * (1 + 1e-12)
    assert abs(float(model.loss(theta, x[None], np.array([y]))[0]) - (math.log1p(math.exp(-c)) + math.log1p(
        math.exp(c))) / 2) <= c / 2 + 1e-12


def test_loss_half_range_is_attained_and_dummy_record_is_flat():
    # Saturated weights push z towards ±c, so the range c is (nearly) attained: the bound is tight.
    model = BoundedMLPModel(2, 3, 2.0)
    x = np.array([[0.6, 0.8]])
    theta = np.concatenate([np.full(6, 30.0), np.full(3, 30.0)])
    z = model.decision(theta, x)[0]
    assert z == pytest.approx(2.0 * math.tanh(1.4), rel=1e-9)  # a = 0.6 + 0.8 = 1.4 per unit
    big = model.decision(theta * 1.0, x * 5)[0]  # ‖x‖ = 5: a = 7, z → c
    assert big > 2.0 * 0.9999
    th = np.random.default_rng(1).normal(size=model.n_params)
    np.testing.assert_array_equal(model.mean_gradient(th, np.zeros((1, 2)), np.zeros(1)), np.zeros(9))
    assert model_from_dict(model.to_dict()) == model


@pytest.mark.parametrize(("kw", "match"), [({"n_features": 0}, "n_features"), ({"logit_bound": -1.0}, "logit_bound"),
                                           ({"logit_bound": math.inf}, "logit_bound"), ({"n_classes": 3}, "binary")])
def test_model_rejects_bad_input(kw, match):
    args = {"n_features": 2, "n_hidden": 2, "logit_bound": 1.0, "n_classes": 2, **kw}
    with pytest.raises(ValueError, match=match):
        BoundedMLPModel(**args)


# ---------------------------------------------------------------------------------------------- schedule


def _recursion(k_a, k_u, *, q, B, eta, lam, beta, d, r, n, steps=60):
    """The proof of Thm 5.2 step by step: E₀ from Eq. 156 + G.22, E_i = ρ(E_{i−1} + r log B/n) + a (Eq. 157–158)."""
    a = 32 * d * eta * q * B * (beta + lam) ** 2 / lam
    E = [q * math.exp(-lam * eta * k_a / (2 * B)) * math.log(B) / 2 + a]
    rho = q * math.exp(-lam * eta * k_u / (2 * B))
    for _ in range(steps):
        E.append(rho * (E[-1] + r * math.log(B) / n) + a)
    return E


@settings(max_examples=80, deadline=None)
@given(lam=st.floats(0.01, 2.0), beta=st.floats(0.01, 5.0), B=st.floats(1.1, 1e4), n=st.integers(10, 10**6),
       d=st.integers(2, 10**4), q=st.floats(1.1, 20.0), eps_dd=st.floats(0.01, 1.0), frac_r=st.floats(0.0, 0.1))
def test_certified_epsilon_of_theorem_steps_is_at_most_requested(lam, beta, B, n, d, q, eps_dd, frac_r):
    r = max(1, int(frac_r * n))
    s = nonconvex_schedule(lipschitz=1.0, smoothness=beta, lam=lam, B=B, n=n, d=d, r=r, q=q,
                           epsilon_dp=min(d - 1, 1.5), epsilon_dd=eps_dd)
    kw = {"q": q, "B": B, "eta": s.eta, "lam": lam, "smoothness": beta, "d": d, "r": r, "n": n}
    e = nonconvex_deletion_epsilon(s.k_learn, s.k_unlearn, **kw)
    assert e <= eps_dd * (1 + 1e-9)
    # and it bounds every step of the proof's recursion
    E = _recursion(s.k_learn, s.k_unlearn, q=q, B=B, eta=s.eta, lam=lam, beta=beta, d=d, r=r, n=n)
    assert max(E) <= e * (1 + 1e-12)


def test_certified_epsilon_bounds_recursion_and_is_monotone():
    kw = {"q": 2.0, "B": 5.0, "eta": 3e-4, "lam": 1.0, "smoothness": 0.5, "d": 3, "r": 2, "n": 50}
    rec = {"q": 2.0, "B": 5.0, "eta": 3e-4, "lam": 1.0, "beta": 0.5, "d": 3, "r": 2, "n": 50}
    prev = math.inf
    for k_u in (30_000, 60_000, 120_000, 240_000, 10**6):
        e = nonconvex_deletion_epsilon(400_000, k_u, **kw)
        assert max(_recursion(400_000, k_u, steps=200, **rec)) <= e * (1 + 1e-12)
        assert e < prev
        prev = e
    # the recursion converges to E*, so the bound is attained in the limit when E* ≥ E₀
    e = nonconvex_deletion_epsilon(10**7, 60_000, **kw)
    assert _recursion(10**7, 60_000, steps=2000, **rec)[-1] == pytest.approx(e, rel=1e-9)
    assert nonconvex_deletion_epsilon(400_000, 10, **kw) == math.inf  # q e^{−ληK/(2B)} ≥ 1: no contraction
    with pytest.raises(ValueError, match="G.22"):
        nonconvex_deletion_epsilon(10, 10, **{**kw, "eta": 1.0})
    with pytest.raises(ValueError, match="r must be <= n"):
        nonconvex_deletion_epsilon(10, 10, **{**kw, "r": 51})


@pytest.mark.parametrize("half", [0.05, 0.5, 2.0])
def test_schedule_for_loss_meets_the_bound_with_nearly_minimal_B(half):
    kw = {"lipschitz": 1.0, "smoothness": 0.5, "lam": 0.5, "n": 20, "d": 6, "r": 1, "q": 2.0, "epsilon_dp": 1.0,
          "epsilon_dd": 0.5}
    s = nonconvex_schedule_for_loss(loss_half_range=half, **kw)
    assert s.required_loss_bound >= half
    s.check_loss_bound(half)
    smaller = nonconvex_schedule(B=s.B * (1 - 1e-4), **kw)
    assert smaller.required_loss_bound < half
    with pytest.raises(ValueError, match="loss_half_range"):
        s.check_loss_bound(s.required_loss_bound * 1.01)


# ---------------------------------------------------------------------------------------------- curator


def _tiny():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 2))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    model = BoundedMLPModel(2, 2, 2.0)
    s = nonconvex_schedule_for_loss(loss_half_range=model.loss_half_range(), lipschitz=model.lipschitz(1.0),
                                    smoothness=model.smoothness(1.0), lam=1.0, n=6, d=model.n_params, r=1, q=2.0,
                                    epsilon_dp=1.0, epsilon_dd=0.5)
    return X, y, model, s


def test_curator_nonconvex_mode_certifies_the_steps_run(tmp_path):
    X, y, model, s = _tiny()
    cfg = CuratorConfig.from_nonconvex_schedule(s, k_learn=300, k_unlearn=100)
    cur = NoisyGDCurator(model, cfg, random_state=0)
    c0 = cur.learn(Database(X, y))
    assert c0.steps == 300 and c0.gradient_evaluations == 6 * 300 and "Thm 5.2" in c0.theorem
    c1 = cur.unlearn(EditRequest.deletion([2], 2))
    expected = nonconvex_deletion_epsilon(300, 100, q=2.0, B=s.B, eta=s.eta, lam=1.0, smoothness=s.smoothness,
                                          d=model.n_params, r=1, n=6)
    assert c1.epsilon_dd == expected  # inf here: 100 steps of size 1e-6 do not contract
    assert c1.epsilon_dp <= 1.0
    # the theorem's own counts certify the requested ε_dd (not run: millions of steps)
    assert nonconvex_deletion_epsilon(s.k_learn, s.k_unlearn, q=2.0, B=s.B, eta=s.eta, lam=1.0,
                                      smoothness=s.smoothness, d=model.n_params, r=1, n=6) <= 0.5
    # edits larger than r are refused and change nothing
    theta = cur.theta
    with pytest.raises(EditRequestError, match="max_edit_size = 1"):
        cur.unlearn(EditRequest.deletion([0, 1], 2))
    np.testing.assert_array_equal(cur.theta, theta)
    assert cur.step == 1
    path = cur.save(tmp_path / "c.npz")
    again = NoisyGDCurator.load(path)
    assert again.model == model and again.config == cfg


def test_curator_nonconvex_mode_rejects_violated_assumptions():
    X, y, model, s = _tiny()
    cfg = CuratorConfig.from_nonconvex_schedule(s, k_learn=3, k_unlearn=1)
    with pytest.raises(ValueError, match="BoundedMLPModel"):
        NoisyGDCurator(LogisticModel(2), cfg)
    with pytest.raises(ValueError, match="sigma2\\*log\\(B\\)/4"):
        NoisyGDCurator(BoundedMLPModel(2, 2, 50.0), cfg)  # loss range 50 > σ² log B/2
    with pytest.raises(ValueError, match="lipschitz = .* below the model's L"):
        NoisyGDCurator(BoundedMLPModel(2, 1, 2.0), cfg)  # m = 1: larger L and β than the schedule assumed
    base = cfg.to_dict()
    with pytest.raises(ValueError, match="smoothness = .* below the model's beta"):
        NoisyGDCurator(BoundedMLPModel(2, 1, 2.0), CuratorConfig(**{**base, "lipschitz": 100.0}))
    with pytest.raises(ValueError, match="G.22"):
        CuratorConfig(**{**base, "eta": 1.0})
    with pytest.raises(ValueError, match="sigma2/lam"):
        CuratorConfig(**{**base, "init_std": 1.0})
    with pytest.raises(ValueError, match="B > 1"):
        CuratorConfig(**{**base, "B": 1.0})
    with pytest.raises(ValueError, match="needs smoothness"):
        CuratorConfig(**{**base, "max_edit_size": None})


def test_estimator_reports_theorem_cost_and_refuses_beyond_max_steps():
    X = np.array([[1.0, 0.2], [0.9, -0.1], [-1.0, 0.1], [-0.8, -0.3], [0.7, 0.5], [-0.6, -0.6]])
    y = np.array([1, 1, 0, 0, 1, 0])
    with pytest.raises(ValueError, match=r"Thm 5.2 asks for K_A = \d+ and K_Abar = \d+"):
        NoisyGDBoundedMLPClassifier(n_hidden=2, lam=1.0, max_steps=10_000).fit(X, y)
    clf = NoisyGDBoundedMLPClassifier(n_hidden=2, lam=1.0, n_iter=50, n_iter_unlearn=20, random_state=0).fit(X, y)
    s = clf.schedule_
    assert s.k_learn > 10**6 and clf.certificate_.steps == 50
    cert = clf.remove([1])
    assert cert.steps == 20 and cert.epsilon_dd == math.inf
    with pytest.raises(ValueError, match="Only binary classification"):
        NoisyGDBoundedMLPClassifier(n_iter=1, n_iter_unlearn=1).fit(np.vstack([X, X]), np.arange(12) % 3)
    with pytest.raises(ValueError, match="n_iter.* must be None or an int"):
        NoisyGDBoundedMLPClassifier(n_iter=-1).fit(X, y)


@pytest.mark.parametrize(("p", "m", "c", "R"), [(2, 1, 1.0, 1.0), (2, 2, 4.0, math.sqrt(2)), (3, 1, 8.0, 0.5)])
def test_constants_survive_adversarial_search(p, m, c, R):
    # Random sampling can miss the worst (θ, x); here a local optimiser maximises ‖∇ℓ‖ and ‖∇²ℓ‖₂ (exact Hessian)
    # over θ and x with ‖x‖ ≤ R (x = R·sigmoid(t)·u/‖u‖), from several starts, and must stay below L and β.
    from scipy.optimize import minimize
    from scipy.special import expit

    model = BoundedMLPModel(p, m, c)
    L, beta = model.lipschitz(R), model.smoothness(R)
    d = model.n_params

    def unpack(z):
        u = z[d : d + p]
        x = R * expit(z[-1]) * u / max(np.linalg.norm(u), 1e-12)
        return z[:d], x

    def grad_norm(z, y):
        theta, x = unpack(z)
        return -float(np.linalg.norm(model.mean_gradient(theta, x[None], np.array([y]))))

    def hess_norm(z, y):
        theta, x = unpack(z)
        return -float(np.abs(np.linalg.eigvalsh(model.hessian(theta, x, y))).max())

    rng = np.random.default_rng([p, m, 7])
    worst_g = worst_h = 0.0
    for start in range(6):
        z0 = np.concatenate([_theta(rng, d), rng.normal(size=p), [3.0]])
        y = 1.0 if start % 2 else -1.0
        worst_g = max(worst_g, -minimize(grad_norm, z0, args=(y,), method="Nelder-Mead",
                                         options={"maxiter": 400, "xatol": 1e-6, "fatol": 1e-10}).fun)
        worst_h = max(worst_h, -minimize(hess_norm, z0, args=(y,), method="Nelder-Mead",
                                         options={"maxiter": 400, "xatol": 1e-6, "fatol": 1e-10}).fun)
    assert worst_g <= L * (1 + 1e-12) and worst_h <= beta * (1 + 1e-12)
    # The search climbs to non-trivial values (about 0.5-0.7 L and 0.25-0.3 β here; β is a sum of term-wise bounds).
    assert worst_g > 0.4 * L and worst_h > 0.15 * beta


@settings(max_examples=40, deadline=None)
@given(half=st.floats(0.01, 10.0), lip=st.floats(0.1, 5.0), beta=st.floats(0.01, 5.0), lam=st.floats(0.01, 2.0),
       n=st.integers(2, 10**5), d=st.integers(2, 10**3), q=st.floats(1.1, 20.0), eps_dd=st.floats(0.01, 1.0))
def test_schedule_for_loss_always_meets_the_loss_bound(half, lip, beta, lam, n, d, q, eps_dd):
    # Thm 5.2 needs sup|ℓ − c| ≤ σ² log(B)/4 with the σ² (Eq. 20) the schedule itself picks; σ² is recomputed here
    # from the returned η and step counts, independently of required_loss_bound.
    s = nonconvex_schedule_for_loss(loss_half_range=half, lipschitz=lip, smoothness=beta, lam=lam, n=n, d=d, r=1,
                                    q=q, epsilon_dp=min(d - 1, 1.5), epsilon_dd=eps_dd)
    sigma2 = q * lip**2 * s.eta * max(s.k_learn, s.k_unlearn) / (min(d - 1, 1.5) * n**2)
    assert sigma2 == pytest.approx(s.sigma2, rel=1e-12)
    assert sigma2 * math.log(s.B) / 4 >= half * (1 - 1e-12)
    assert s.eta <= lam / (64 * s.B * q**2 * (beta + lam) ** 2) * (1 + 1e-12)  # Thm G.22's step-size condition

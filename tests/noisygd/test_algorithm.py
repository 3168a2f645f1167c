"""Noisy-GD (Algorithm 2): stationary law on a quadratic loss, gradients, clipping, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.noisygd.algorithm import clip_rows, noisy_gd, noisy_gd_chains
from lethe.noisygd.models import BoundedMLPModel, LogisticModel, MLPModel


def test_stationary_mean_and_covariance_match_gibbs_limit():
    # Quadratic loss ℓ(θ; x) = ½θᵀAθ − xᵀθ: 𝓛_D(θ) = ½θᵀMθ − x̄ᵀθ with M = A + λI. The Gibbs law
    # π(D) ∝ e^{−𝓛_D/σ²} (Eq. 87) is N(M⁻¹x̄, σ²M⁻¹); the discrete chain's stationary covariance is
    # σ² M⁻¹ (I − ηM/2)⁻¹ (solve Σ = (I − ηM)Σ(I − ηM) + 2ησ²I), i.e. the Gibbs one up to O(η).
    rng = np.random.default_rng(12345)
    A = np.array([[1.5, 0.4], [0.4, 0.8]])
    lam, sigma2, eta = 0.2, 0.3, 0.01
    xbar = np.array([0.7, -0.4])
    M = A + lam * np.eye(2)
    chains = 4000
    theta0 = np.zeros((2, chains))
    res = noisy_gd(lambda t: A @ t - xbar[:, None], theta0, 1500, eta=eta, sigma2=sigma2, lam=lam, n_records=1,
                   random_state=rng)
    emp_mean = res.theta.mean(axis=1)
    emp_cov = np.cov(res.theta)
    gibbs_mean = np.linalg.solve(M, xbar)
    gibbs_cov = sigma2 * np.linalg.inv(M)
    chain_cov = np.linalg.solve(np.eye(2) - eta * M / 2, gibbs_cov)
    # Seeded tolerances: mean SE ≈ √(0.3·1.3/4000) ≈ 0.01 → 0.04; covariance entries within 8% of the scale
    # (SE ≈ √(2/4000) ≈ 2.2%); the chain's law differs from Gibbs by ηM/2 ≤ 1.1%.
    np.testing.assert_allclose(emp_mean, gibbs_mean, atol=0.04)
    scale = np.sqrt(np.outer(np.diag(gibbs_cov), np.diag(gibbs_cov)))
    assert np.all(np.abs(emp_cov - gibbs_cov) <= 0.08 * scale)
    assert np.all(np.abs(emp_cov - chain_cov) <= 0.08 * scale)


def test_without_noise_is_gradient_descent_and_counts_gradients():
    X = np.array([[1.0, 0.0], [3.0, 2.0], [2.0, 1.0]])
    res = noisy_gd(lambda t: t - X.mean(axis=0), np.zeros(2), 500, eta=0.3, sigma2=0.0, lam=0.5, n_records=3)
    # Minimiser of ½ mean‖θ − x‖² + ¼‖θ‖²: θ = x̄ / 1.5
    np.testing.assert_allclose(res.theta, X.mean(axis=0) / 1.5, atol=1e-12)
    assert res.n_steps == 500 and res.gradient_evaluations == 1500


def test_update_is_algorithm_2_exactly():
    # One step by hand with the same generator: θ₁ = θ₀ − η(g(θ₀) + λθ₀) + √(2η)σ Z.
    theta0 = np.array([0.3, -0.2])
    g = np.array([0.5, 0.25])
    eta, sigma2, lam = 0.1, 0.04, 0.5
    res = noisy_gd(lambda t: g, theta0, 1, eta=eta, sigma2=sigma2, lam=lam, n_records=1, random_state=7)
    z = np.random.default_rng(7).standard_normal(2)
    np.testing.assert_allclose(res.theta, theta0 - eta * (g + lam * theta0) + np.sqrt(2 * eta * sigma2) * z)


def test_seeded_runs_are_reproducible_and_do_not_touch_global_state():
    state = np.random.get_state()[1].copy()  # noqa: NPY002 - checks global state is untouched
    a = noisy_gd(lambda t: t, np.ones(3), 20, eta=0.1, sigma2=1.0, lam=0.0, n_records=1, random_state=3)
    b = noisy_gd(lambda t: t, np.ones(3), 20, eta=0.1, sigma2=1.0, lam=0.0, n_records=1, random_state=3)
    np.testing.assert_array_equal(a.theta, b.theta)
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # noqa: NPY002


@pytest.mark.parametrize("bad", [{"eta": 0.0}, {"sigma2": -1.0}, {"lam": -0.1}])
def test_rejects_bad_hyperparameters(bad):
    kw = {"eta": 0.1, "sigma2": 1.0, "lam": 0.1, **bad}
    with pytest.raises(ValueError):
        noisy_gd(lambda t: t, np.zeros(2), 3, n_records=1, **kw)


def test_clip_rows():
    G = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    C = clip_rows(G, 1.0)
    np.testing.assert_allclose(C, [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]])


def _numerical_grad(f, theta, h=1e-6):
    g = np.zeros_like(theta)
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        g[j] = (f(theta + e) - f(theta - e)) / (2 * h)
    return g


@pytest.mark.parametrize(
    "model", [LogisticModel(4, 2), LogisticModel(4, 3), MLPModel(4, 5, 2), MLPModel(4, 5, 3),
              BoundedMLPModel(4, 5, 3.0)], ids=str
)
def test_mean_gradient_matches_finite_differences(model):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4)) / 2
    y = rng.choice([-1.0, 1.0], 30) if model.n_classes == 2 else rng.integers(0, 3, 30).astype(float)
    theta = rng.normal(size=model.n_params) * 0.5
    num = _numerical_grad(lambda t: float(np.mean(model.loss(t, X, y))), theta)
    np.testing.assert_allclose(model.mean_gradient(theta, X, y), num, atol=1e-7)


@pytest.mark.parametrize(
    "model", [LogisticModel(4, 2), LogisticModel(4, 3), MLPModel(4, 5, 2), MLPModel(4, 5, 3),
              BoundedMLPModel(4, 5, 3.0)], ids=str
)
def test_clipping_is_per_example_clip_l(model):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(25, 4)) * 2
    y = rng.choice([-1.0, 1.0], 25) if model.n_classes == 2 else rng.integers(0, 3, 25).astype(float)
    theta = rng.normal(size=model.n_params)
    L = 0.3
    per_example = np.array([model.mean_gradient(theta, X[i : i + 1], y[i : i + 1]) for i in range(25)])
    expected = clip_rows(per_example, L).mean(axis=0)
    np.testing.assert_allclose(model.mean_gradient(theta, X, y, clip=L), expected, atol=1e-12)
    assert np.all(np.linalg.norm(clip_rows(per_example, L), axis=1) <= L + 1e-12)


@pytest.mark.parametrize("model", [LogisticModel(3, 2), LogisticModel(3, 4), MLPModel(3, 4, 2), MLPModel(3, 4, 3),
                                   BoundedMLPModel(3, 4)], ids=str)
def test_dummy_record_has_zero_gradient(model):
    theta = np.random.default_rng(2).normal(size=model.n_params)
    g = model.mean_gradient(theta, np.zeros((1, 3)), np.zeros(1))
    np.testing.assert_array_equal(g, np.zeros(model.n_params))


def test_logistic_constants():
    # Binary: ‖∇ℓ‖ = |σ(−yθᵀx)|‖x‖ ≤ R; Hessian σ(1−σ)xxᵀ ⪯ R²/4. Multinomial: √2 R and R²/2.
    assert LogisticModel(3, 2).lipschitz(1.0) == 1.0 and LogisticModel(3, 2).smoothness(2.0) == 1.0
    assert LogisticModel(3, 3).lipschitz(1.0) == pytest.approx(np.sqrt(2))
    assert LogisticModel(3, 3).smoothness(1.0) == 0.5
    rng = np.random.default_rng(3)
    for model in (LogisticModel(3, 2), LogisticModel(3, 4)):
        X = rng.normal(size=(200, 3))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        y = rng.choice([-1.0, 1.0], 200) if model.n_classes == 2 else rng.integers(0, 4, 200).astype(float)
        theta = rng.normal(size=model.n_params) * 3
        norms = [np.linalg.norm(model.mean_gradient(theta, X[i : i + 1], y[i : i + 1])) for i in range(200)]
        assert max(norms) <= model.lipschitz(1.0) + 1e-12


@pytest.mark.parametrize("clip", [None, 0.05])
def test_chains_equal_single_chain_runs_with_the_same_streams(clip):
    # R chains as one matrix Θ (d, R) with per-chain streams = R runs of Algorithm 2, column by column, on the
    # logistic loss with and without per-example clipping (0.05 clips most examples here, per chain).
    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, 4))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X[7] = 0.0  # a dummy record
    y = rng.choice([-1.0, 1.0], 60)
    y[7] = 0.0
    model = LogisticModel(4)
    theta0 = rng.normal(size=(4, 5))
    kw = {"eta": 0.3, "sigma2": 0.01, "lam": 0.1, "n_records": 60}
    multi = noisy_gd_chains(lambda T: model.mean_gradient_chains(T, X, y, clip), theta0, 40,
                            random_state=[np.random.default_rng([9, j]) for j in range(5)], **kw)
    assert multi.theta.shape == (4, 5) and multi.n_chains == 5
    assert multi.gradient_evaluations == 60 * 40 and multi.total_gradient_evaluations == 5 * 60 * 40
    for j in range(5):
        single = noisy_gd(lambda t: model.mean_gradient(t, X, y, clip), theta0[:, j], 40,
                          random_state=np.random.default_rng([9, j]), **kw)
        np.testing.assert_allclose(multi.theta[:, j], single.theta, rtol=0, atol=1e-12)
    # The clipped kernel clipped something (otherwise the clip case would test nothing new).
    if clip is not None:
        assert not np.allclose(model.mean_gradient_chains(theta0, X, y, clip), model.mean_gradient_chains(theta0, X, y))


def test_chains_one_stream_have_independent_gaussian_columns():
    # Pure noise (zero gradient, λ = 0): after K steps each entry is √(2ηK)σ·N(0, 1), independent across chains.
    res = noisy_gd_chains(lambda T: np.zeros_like(T), np.zeros((3, 4000)), 8, eta=0.5, sigma2=0.25, lam=0.0,
                          n_records=1, random_state=11)
    sd = np.sqrt(2 * 0.5 * 8 * 0.25)
    # Seeded tolerances: 12000 draws, SE of the sd estimate ≈ sd/√24000 ≈ 0.0065·sd; correlations SE ≈ 0.016.
    assert abs(res.theta.std() / sd - 1) < 0.03
    corr = np.corrcoef(res.theta[0, :-1], res.theta[0, 1:])[0, 1]
    assert abs(corr) < 0.06


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"theta0": np.zeros(3)}, r"shape \(d, R\)"),
        ({"random_state": [1, 2]}, "list of R = 3"),
        ({"mean_grad": lambda T: T[:, :1]}, r"shape \(2, 3\)"),
        ({"n_steps": -1}, "n_steps"),
    ],
)
def test_chains_reject_bad_input(kw, match):
    args = {"mean_grad": lambda T: T, "theta0": np.zeros((2, 3)), "n_steps": 2, **kw}
    with pytest.raises(ValueError, match=match):
        noisy_gd_chains(args.pop("mean_grad"), args.pop("theta0"), args.pop("n_steps"), eta=0.1, sigma2=1.0,
                        lam=0.0, n_records=1, **args)

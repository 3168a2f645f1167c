"""The convex planner (PNSGD of Chien et al. by default, Thm 5.1 selectable) and the PNSGD estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lethe.noisygd import PNSGDLogisticRegression
from lethe.noisygd.noisy_sgd import (
    plan_convex_unlearning,
    pnsgd_learning_shift,
    pnsgd_schedule,
    pnsgd_start_distance,
    pnsgd_unlearning_epsilon,
)
from lethe.noisygd.schedule import convex_schedule
from lethe.privacy.rdp import rdp_to_dp_tight


def test_plan_defaults_to_pnsgd_and_matches_both_schedules():
    p = plan_convex_unlearning(1.0, 1e-5, n=11982, d=784, lam=0.01, r=10)
    assert p.theorem == "pnsgd"
    # MNIST 3 vs 8 sizes: the figures of docs/nn_unlearning.md §4
    assert (p.thm51_steps, p.thm51_gradient_evaluations) == (12, 143784)
    assert (p.pnsgd_steps, p.pnsgd_gradient_evaluations) == (186, 23808)
    # recomputed from the two schedules directly
    sch = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=0.01, n=11982, d=784, r=10, q=p.thm51_q,
                          epsilon_dp=1.0, epsilon_dd=p.thm51_epsilon_dd, utility=False)
    assert sch.k_unlearn == p.thm51_steps and rdp_to_dp_tight(p.thm51_q, p.thm51_epsilon_dd, 1e-5) <= 1.0
    assert math.isclose(p.noise_std, math.sqrt(2 * sch.eta * sch.sigma2))
    ps = pnsgd_schedule(1.0, 1e-5, n=11982, lam=0.01, sigma=p.noise_std, eta=sch.eta, batch_size=128, radius=100.0,
                        r=10)
    assert ps == p.pnsgd
    assert plan_convex_unlearning(1.0, 1e-5, n=11982, d=784, lam=0.01, r=10, theorem="thm5.1").theorem == "thm5.1"


def test_plan_refuses_bad_input():
    with pytest.raises(ValueError, match="theorem"):
        plan_convex_unlearning(1.0, 1e-5, n=1000, d=5, lam=0.01, theorem="newton")
    with pytest.raises(ValueError, match="lam"):
        plan_convex_unlearning(1.0, 1e-5, n=1000, d=5, lam=0.0)


def _data(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    return X, (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)


def test_estimator_certifies_every_request_with_minimal_epochs():
    X, y = _data()
    clf = PNSGDLogisticRegression(batch_size=50, random_state=0).fit(X, y)
    assert clf.score(X, y) > 0.9
    c, E = clf.plan_.pnsgd.c, clf.plan_.pnsgd.steps_per_epoch
    zb = pnsgd_learning_shift(eta=clf.plan_.eta, lipschitz=1.0, batch_size=50, n=1500, c=c)
    removed, phases = [], []
    for k, idx in enumerate(([0, 1, 2], [10], [20, 21, 22, 23, 24]), start=1):
        cert = clf.remove(idx)
        removed.append(len(idx))
        dist = pnsgd_start_distance(removed=removed, phase_steps=phases, z_b=zb, c=c, radius=100.0)
        assert cert.request == k and math.isclose(cert.distance, dist)
        assert cert.epsilon_certified <= 1.0
        eps_less = pnsgd_unlearning_epsilon(distance=dist, c=c, sigma=clf.plan_.noise_std, steps=(cert.epochs - 1) * E,
                                            delta=1e-5)
        assert cert.epochs == 0 or eps_less > 1.0  # one epoch fewer would not certify
        phases.append(cert.steps)
    assert clf.score(X, y) > 0.85


def test_estimator_refuses_bad_requests_and_changes_nothing():
    X, y = _data(600)
    clf = PNSGDLogisticRegression(batch_size=50, random_state=1).fit(X, y)
    clf.remove([3])
    theta = clf.theta_.copy()
    for bad in ([3], [1, 1], [600], [-1], []):
        with pytest.raises(ValueError):
            clf.remove(bad)
    with pytest.raises(TypeError, match="integers"):  # the one removal_rows rule: a type is a TypeError
        clf.remove([0.5])
    assert np.array_equal(clf.theta_, theta) and clf.certificate_.request == 1
    with pytest.raises(ValueError, match="binary"):
        PNSGDLogisticRegression().fit(X, np.arange(600) % 3)
    with pytest.raises(ValueError, match="batch_size"):
        PNSGDLogisticRegression(batch_size=1000).fit(X, y)

"""The §3 demonstrations (examples/noisygd_*.py): attacks succeed at the paper's rates; Noisy-GD resists."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


adaptive = _load("noisygd_adaptive_requester")
secret = _load("noisygd_secret_state")


def test_eq_8_9_attack_always_succeeds():
    assert adaptive.sum_attack() == 1.0


@pytest.mark.parametrize("i", [5, 8])
def test_theorem_3_1_median_attack_rate(i):
    # Paper: success >= 1 − (1/2)^{i−3}. 3000 seeded trials: binomial SE <= 0.008.
    trials = 3000
    rate = adaptive.median_attack(n=101, i=i, trials=trials, seed=i)
    assert rate >= 1 - 0.5 ** (i - 3) - 3 * (0.25 / trials) ** 0.5


def test_exact_retraining_reveals_identity_but_noisy_gd_stays_within_bound():
    assert adaptive.exact_retraining_attack() == 1.0
    adv, se, bound = adaptive.noisy_gd_attack(trials=600, seed=1)
    assert bound < 1.0  # the bound is not vacuous, and exact retraining (advantage 1) would break it
    assert adv <= bound + 3 * se


def test_theorem_3_2_single_release_is_epsilon_unlearning():
    for shift in (0.0, 0.25, 1.0):
        assert secret.single_release_loss(1.0, shift) <= 1.0 + 1e-12
    secret.check_curators_agree_with_attack_model()


def test_theorem_3_2_max_divergence_grows_without_bound():
    # The proof's quantity Σ_j ε/j (harmonic) exceeds any level given enough releases.
    assert secret.max_divergence(1.0, 1, 10) < secret.max_divergence(1.0, 1, 10_000)
    assert secret.max_divergence(1.0, 1, 10_000) > 9.0


def test_theorem_3_2_paper_construction_does_not_reach_certainty():
    # Bounded KL (Σ 1/j² < ∞): the optimal attacker stays under ½ + ½√(KL/2) < 1 however many releases it sees.
    ceiling = secret.paper_success_bound(1.0, 1)
    assert ceiling < 0.8
    rate = secret.paper_attack(1.0, i=1, m=3000, trials=3000, seed=0)
    assert 0.6 < rate <= ceiling + 3 * (0.25 / 3000) ** 0.5


@pytest.mark.parametrize("i", [1, 2, 3])
def test_repaired_secret_state_reveals_deleted_record(i):
    # Each release is still (1, 0)-unlearning (shift in [0, 1)), but the deleted record is recovered.
    assert secret.binary_attack(1.0, i=i, m=4000, trials=1000, seed=i) >= 0.99

"""The accountant: validate → record → update, budget refusals that record nothing, JSON round trips,
and its totals against dp_accounting and the exact composed Gaussian."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from dp_accounting import dp_event
from dp_accounting import gaussian_mechanism as dpa_gaussian
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
from hypothesis import given
from hypothesis import strategies as st

from lethe.exceptions import BudgetExceededError
from lethe.privacy import (
    DEFAULT_ORDERS,
    ApproxDPEvent,
    GaussianEvent,
    LaplaceEvent,
    PrivacyAccountant,
    event_from_dict,
)


def test_basic_spends_sum_and_refusal_records_nothing():
    acc = PrivacyAccountant(1.0, 1e-5)
    for _ in range(10):
        acc.spend(ApproxDPEvent(0.1, 1e-6))
    assert acc.spent == (1.0, math.fsum([1e-6] * 10))  # exact boundary ε = 1 is allowed (math.fsum)
    before = acc.to_json()
    with pytest.raises(BudgetExceededError, match=r"over the budget .* Nothing was recorded") as info:
        acc.spend(ApproxDPEvent(1e-9, 0.0))
    assert isinstance(info.value, ValueError)
    assert acc.to_json() == before and len(acc.ledger) == 10


def test_delta_budget_is_enforced_too():
    acc = PrivacyAccountant(10.0, 1e-6)
    acc.spend(ApproxDPEvent(0.1, 1e-6))
    with pytest.raises(BudgetExceededError):
        acc.spend(ApproxDPEvent(0.1, 1e-12))
    assert acc.remaining == (pytest.approx(9.9), 0.0)


def test_laplace_events_in_basic_mode():
    acc = PrivacyAccountant(2.0, 0.0)
    assert acc.spend(LaplaceEvent(scale=4.0, sensitivity=2.0, count=3)) == (1.5, 0.0)
    assert not acc.can_spend(LaplaceEvent(scale=1.0))
    assert acc.guarantee_if(LaplaceEvent(scale=4.0)) == (1.75, 0.0)
    assert len(acc.ledger) == 1  # the queries changed nothing


def test_rdp_mode_matches_dp_accounting():
    acc = PrivacyAccountant(50.0, 1e-6, composition="rdp")
    acc.spend(GaussianEvent(sigma=3.0, sensitivity=1.5, count=20))
    acc.spend(GaussianEvent(sigma=5.0, count=7))
    ref = dpa_rdp.RdpAccountant(orders=list(DEFAULT_ORDERS))
    ref.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(noise_multiplier=2.0), 20))
    ref.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(noise_multiplier=5.0), 7))
    assert acc.spent[0] == pytest.approx(ref.get_epsilon(1e-6), rel=1e-10)
    assert acc.spent[1] == 1e-6


@given(sigma=st.floats(0.8, 30.0), count=st.integers(1, 200), delta=st.floats(1e-10, 0.1))
def test_rdp_mode_bounds_the_exact_composed_gaussian(sigma, count, delta):
    acc = PrivacyAccountant(1e6, delta, composition="rdp")
    eps, _ = acc.spend(GaussianEvent(sigma=sigma, count=count))
    exact = dpa_gaussian.get_epsilon_gaussian(sigma / math.sqrt(count), delta)
    assert eps >= exact - 1e-9


def test_rdp_mode_accepts_laplace_and_pure_events_only():
    acc = PrivacyAccountant(5.0, 1e-6, composition="rdp")
    acc.spend(LaplaceEvent(scale=10.0, count=5))
    acc.spend(ApproxDPEvent(0.1))
    with pytest.raises(ValueError, match=r"accepts ApproxDPEvent only with delta == 0.*Found delta=1e-07"):
        acc.spend(ApproxDPEvent(0.1, 1e-7))
    assert len(acc.ledger) == 2
    # independent total: dp_accounting's Laplace RDP (Mironov Prop. 6) + Bun–Steinke's min(ε, αε²/2)
    rdp = [5 * dpa_rdp._laplace_rdp(0.1, a) + min(0.1, a * 0.1**2 / 2) for a in DEFAULT_ORDERS]
    expected, _ = dpa_rdp.compute_epsilon(list(DEFAULT_ORDERS), rdp, 1e-6)
    assert acc.spent[0] == pytest.approx(expected, rel=1e-10)
    basic = PrivacyAccountant(5.0, 0.0)
    basic.spend(LaplaceEvent(scale=10.0, count=5))
    basic.spend(ApproxDPEvent(0.1))
    assert basic.spent == (pytest.approx(0.6), 0.0)


def test_gaussian_event_needs_rdp_mode():
    acc = PrivacyAccountant(1.0, 1e-5)
    with pytest.raises(ValueError, match=r"composition='basic' cannot account a GaussianEvent"):
        acc.spend(GaussianEvent(sigma=1.0))
    with pytest.raises(TypeError, match=r"event must be an ApproxDPEvent, LaplaceEvent or GaussianEvent. Found dict"):
        acc.spend({"kind": "approx_dp", "epsilon": 0.1})  # type: ignore[arg-type]
    assert acc.ledger == ()


def test_events_are_frozen_serializable_and_validated():
    ev = GaussianEvent(sigma=2.0, sensitivity=0.5, count=3, label="step")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.sigma = 1.0  # type: ignore[misc]
    for e in [ev, ApproxDPEvent(0.5, 1e-6, "q"), LaplaceEvent(1.5, 1.0, 2)]:
        assert event_from_dict(json.loads(json.dumps(e.to_dict()))) == e
    with pytest.raises(ValueError, match=r"event kind must be one of .* Found 'poisson'"):
        event_from_dict({"kind": "poisson", "q": 0.1})
    with pytest.raises(ValueError, match=r"event fields for kind 'gaussian' are invalid"):
        event_from_dict({"kind": "gaussian", "sigma": 1.0, "extra": 2})


def test_json_round_trip_replays_and_revalidates():
    acc = PrivacyAccountant(5.0, 1e-5, composition="rdp", orders=[2.0, 4.0, 8.0, 16.0, 32.0])
    acc.spend(GaussianEvent(sigma=4.0, count=10, label="epoch 1"))
    acc.spend(LaplaceEvent(scale=20.0))
    text = acc.to_json()
    again = PrivacyAccountant.from_json(text)
    assert again.spent == acc.spent and again.ledger == acc.ledger and again.orders == acc.orders
    tampered = json.loads(text)
    tampered["epsilon_budget"] = 1.0  # a ledger that no longer fits its budget must not load
    with pytest.raises(BudgetExceededError):
        PrivacyAccountant.from_dict(tampered)


@given(
    spends=st.lists(
        st.tuples(st.floats(0.0, 0.6), st.sampled_from([0.0, 1e-7, 1e-6, 5e-6])), min_size=1, max_size=25
    )
)
def test_ledger_invariants_under_random_spends(spends):
    acc = PrivacyAccountant(2.0, 1e-5)
    accepted = []
    for eps, delta in spends:
        ev = ApproxDPEvent(eps, delta)
        snapshot = acc.to_json()
        try:
            acc.spend(ev)
            accepted.append(ev)
        except BudgetExceededError:
            assert acc.to_json() == snapshot
        assert acc.spent[0] <= 2.0 and acc.spent[1] <= 1e-5
    assert list(acc.ledger) == accepted
    assert acc.spent == (math.fsum(e.epsilon for e in accepted), math.fsum(e.delta for e in accepted))


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda: PrivacyAccountant(0.0, 1e-5), ValueError, r"epsilon_budget must be > 0. Found 0.0"),
        (lambda: PrivacyAccountant(1.0, -1e-5), ValueError, r"delta_budget must be >= 0. Found -1e-05"),
        (lambda: PrivacyAccountant(1.0, 1.0), ValueError, r"delta_budget must be < 1. Found 1.0"),
        (lambda: PrivacyAccountant(1.0, 0.0, composition="rdp"), ValueError,
         r"delta_budget must be in the open interval \(0, 1\) for composition='rdp'. Found 0.0"),
        (lambda: PrivacyAccountant(1.0, 1e-5, composition="zcdp"), ValueError,  # type: ignore[arg-type]
         r"composition must be one of \('basic', 'rdp'\). Found 'zcdp'"),
        (lambda: PrivacyAccountant(1.0, 1e-5, composition="rdp", orders=[0.5]), ValueError,
         r"orders\[0\] .* must be > 1. Found 0.5"),
        (lambda: ApproxDPEvent(-0.1), ValueError, r"epsilon must be >= 0. Found -0.1"),
        (lambda: ApproxDPEvent(0.1, 2.0), ValueError, r"delta must be in \[0, 1\]. Found 2.0"),
        (lambda: GaussianEvent(0.0), ValueError, r"sigma must be > 0. Found 0.0"),
        (lambda: LaplaceEvent(1.0, count=0), ValueError, r"count must be >= 1. Found 0"),
        (lambda: LaplaceEvent(1.0, label=3), TypeError, r"label must be a str. Found 3"),  # type: ignore[arg-type]
    ],
)
def test_bad_parameters_name_parameter_rule_and_value(call, exc, message):
    with pytest.raises(exc, match=message):
        call()

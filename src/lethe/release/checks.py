"""The invariants of a release stream's stored state (:func:`check_release_state`, for the curator's artifacts) and
the re-measure of its centre's residual (:func:`measured_centre_residual`); :data:`LOGISTIC_AT_ZERO`, the loss bound
every release sensitivity is computed with."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from lethe.certified.bounds import release_sensitivity
from lethe.certified.common import measured_residual
from lethe.certified.mechanism import CertifiedRemoval
from lethe.losses import get_loss
from lethe.privacy.release import release_sigma

__all__ = ["LOGISTIC_AT_ZERO", "check_release_state", "measured_centre_residual", "stream_sensitivity"]



#: An upper bound on the logistic loss at margin 0, log 2 (rounded up).
LOGISTIC_AT_ZERO = math.log(2.0) * (1.0 + 1e-15)


def stream_sensitivity(lam: float, n_floor: int, residual_cap: float) -> float:
    """Δ of a release stream's centre from its public parameters (λ, n_floor, β_cap) and the logistic loss
    (:func:`~lethe.certified.bounds.release_sensitivity`): what ``fit`` calibrates with and every check recomputes."""
    loss = get_loss("logistic")
    assert loss.grad_bound is not None
    return release_sensitivity(float(lam), int(n_floor), float(residual_cap), loss.grad_bound,
                               loss_at_zero=LOGISTIC_AT_ZERO)


def check_release_state(params: dict[str, Any], *, accountant: Any, state: Any, n_floor: Any,
                        n: Any, releases: Any = None, pending: Any = None, horizon_spent: Any = None) -> None:
    """The invariants of a release stream's stored state against its public parameters (a curator artifact of
    mechanism ``released-logistic``, whose HMAC-bound parameters ``params`` are trusted); ``ValueError`` naming the
    first that fails. Every number a release's privacy rests on is checked, none is trusted from the state:

    * the accountant (``accountant``: its dict) is for the parameters' (ε, δ, T) and its sensitivity is
      :func:`~lethe.certified.bounds.release_sensitivity` recomputed from (λ, n_floor, β_cap) — so σ cannot have
      been lowered through an edited Δ, ε, δ or horizon — and its σ is at least the calibrated
      :func:`~lethe.privacy.release.release_sigma` (ε, δ, T, Δ) (the accountant itself refuses a σ whose T releases
      exceed δ); its releases ≤ T;
    * the centre's residual bound β (``state["residual_bound"]``) is finite and in [0, β_cap]: the sensitivity bound
      holds for any point within β_cap of the minimiser (docs/release_privacy.md §2). The residual itself is
      re-measured from the data where they are at hand (the adapter's removal, :func:`measured_centre_residual`);
    * counts: the state's n = the recorded n ≥ n_floor ≥ 1 (n_floor "auto" or as the parameters say), counters
      ≥ 0, ``releases`` (the latest release's version + 1) = the accountant's releases, and ``pending`` < cadence
      unless the horizon is spent.
    """
    def count(name: str, v: Any, low: int = 0) -> int:
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < low:
            raise ValueError(f"{name} must be an integer >= {low}. Found {v!r}.")
        return int(v)

    if not isinstance(accountant, dict) or not isinstance(state, dict):
        raise ValueError("the accountant and the state must be objects.")
    from lethe.release.tree_stream import TreeStreamAccountant, accountant_from_dict, stream_accountant

    try:
        acc: Any = accountant_from_dict(accountant)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the accountant is invalid: {exc}") from None
    for name in ("epsilon", "delta", "horizon"):
        if getattr(acc, name) != params[name]:
            raise ValueError(f"the accountant's {name} {getattr(acc, name)!r} differs from the parameter "
                             f"{params[name]!r}.")
    nf = count("n_floor", n_floor, 1)
    if params["n_floor"] != "auto" and nf != int(params["n_floor"]):
        raise ValueError(f"n_floor {nf} differs from the parameter {params['n_floor']!r}.")
    cap = float(params["residual_cap"])
    expected = stream_sensitivity(float(params["lam"]), nf, cap)
    if acc.sensitivity != expected:
        raise ValueError(f"the accountant's sensitivity {acc.sensitivity!r} is not the one the parameters give "
                         f"({expected!r}).")
    noise = params.get("noise_mechanism", "fresh")
    if noise != "fresh" or isinstance(acc, TreeStreamAccountant):  # the mechanism the public parameters choose
        k = params.get("rows_per_release")
        chosen = stream_accountant(noise, epsilon=acc.epsilon, delta=acc.delta, horizon=acc.horizon,
                                   sensitivity=expected, lam=float(params["lam"]), n_floor=nf, residual_cap=cap,
                                   gram_cap=params.get("gram_cap"),
                                   rows_per_release=int(params["cadence"] if k is None else k))
        if type(chosen) is not type(acc) or (isinstance(acc, TreeStreamAccountant)
                                             and dataclasses.replace(chosen, releases=acc.releases) != acc):
            raise ValueError(f"the stream's ledger {accountant!r} is not the one its parameters give "
                             f"({chosen.to_dict()!r}).")
    calibrated = release_sigma(acc.epsilon, acc.delta, acc.horizon, expected)
    if not isinstance(acc, TreeStreamAccountant) and not acc.sigma >= calibrated:
        raise ValueError(f"the accountant's sigma {acc.sigma!r} is below the calibrated {calibrated!r} for "
                         f"{acc.horizon} releases.")
    beta = state.get("residual_bound")
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not (math.isfinite(beta) and 0 <= beta <= cap):
        raise ValueError(f"the centre's residual bound must lie in [0, residual_cap = {cap!r}]. Found {beta!r}.")
    n_state = count("the state's n", state.get("n"), 1)
    if count("n", n, 1) != n_state or n_state < nf:
        raise ValueError(f"the state's n = {n_state} must equal the recorded n = {n!r} and be >= n_floor = {nf}.")
    for name in ("removals_since_training", "retrainings", "train_iterations"):
        count(name, state.get(name))
    if releases is not None and count("releases", releases, 1) != acc.releases:
        raise ValueError(f"{releases} releases were published but the accountant records {acc.releases}.")
    if pending is not None and count("pending", pending) >= int(params["cadence"]) and horizon_spent is not True:
        raise ValueError(f"pending removals {pending} must be < cadence = {params['cadence']} while releases are "
                         "left.")


def measured_centre_residual(mech: CertifiedRemoval, centre: np.ndarray, X: np.ndarray, Y: np.ndarray,
                             active: np.ndarray | None = None) -> tuple[float, float]:
    """(‖g̃‖, a): the centre's residual ‖∇L_0(w̃; D)‖ re-measured on the rows ``active`` of (X, Y) (b = 0), with the
    rounding allowance a of :func:`lethe.certified.common.measured_residual` (the exact norm lies within ±a). A
    stored β with ‖g̃‖ − a > β is certainly not an upper bound."""
    active = np.ones(X.shape[0], dtype=bool) if active is None else active
    g, allowance = measured_residual(mech, centre, np.zeros_like(centre), X, Y, active)
    return float(np.linalg.norm(g)), float(allowance)

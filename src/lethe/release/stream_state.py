"""A release stream's state as the curator service keeps it, and the estimator restored from it (issue 34 item 2).

:meth:`ReleasedLogisticRegression.restore` (:func:`restore_stream`) builds a fitted estimator from the state a
service artifact holds — the secret centre and its certified residual bound, the accountant, the latest release, the
pending removals, the tree's state — and the records it is for; :meth:`ReleasedLogisticRegression.stream_state`
(:func:`stream_state`) gives that state back after a call. The service's adapter
(:class:`lethe.release.adapter.ReleasedLogisticAdapter`) removes and releases through the restored estimator's own
``remove`` and ``release``, so the service and the library take every decision (n_floor, ``rows_per_release``, the
horizon, the cadence, the noise, the tree, the certificate) by the same code; what the service decides alone is
passed as the estimator's documented options (``remove(publish=..., at_horizon="withhold")``).

A restored estimator holds only the latest release in ``releases_`` (the service keeps the earlier ones as published
versions), so it refuses ``save`` (a library file holds every release); nothing here writes a file or the release
counters of :mod:`lethe.model_keys`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from lethe._rng import check_random_state
from lethe.certified.mechanism import CertifiedRemoval, ModelState, NewtonCache
from lethe.release.certificate import Release
from lethe.release.model_file import check_ledger_sensitivity, check_release_file, check_tree_file
from lethe.release.tree_stream import TreeStreamAccountant, accountant_from_dict, restore_tree

__all__ = ["restore_stream", "stream_state"]

_WHERE = "the restored state"


def _count(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
        raise ValueError(f"{name} must be an integer >= 0. Found {v!r}.")
    return int(v)


def restore_stream(cls: Any, params: Mapping[str, Any], state: Mapping[str, Any], X: Any = None, y: Any = None, *,
                   classes: Any) -> Any:
    """The body of :meth:`ReleasedLogisticRegression.restore` (``cls`` is that class)."""
    est = cls(**dict(params))
    est._check_params()
    if est.random_state is not None:
        raise ValueError(f"random_state must be None for a restored stream (its later releases draw the operating "
                         f"system's CSPRNG). Found {est.random_state!r}.")
    if (X is None) != (y is None):
        raise ValueError("Give both X and y (the records the state is for), or neither (a publish-only stream).")
    labels = np.asarray(classes)
    if labels.shape != (2,):
        raise ValueError(f"classes must hold the 2 classes seen at training. Found shape {labels.shape}.")
    est._trained = {"fit_intercept": bool(est.fit_intercept), "normalize_rows": bool(est.normalize_rows)}
    centre = np.array(state["centre"], dtype=np.float64, copy=True)
    if centre.ndim != 1:
        raise ValueError(f"the centre must be a vector. Found shape {centre.shape}.")
    d = centre.shape[0] - int(bool(est.fit_intercept))
    if X is not None:
        X, y = est._validate_rows(X, y, reset=True)  # as fit: a private copy (removal erases rows in it)
        y = np.asarray(y)
        known = np.asarray(labels, dtype=y.dtype if y.dtype.kind not in "iufb" else np.float64)
        if not np.all(np.isin(y, known)):
            raise ValueError("y: labels must be one of the 2 classes seen at training. Found a new label.")
        Y = np.where(y == known[1], 1.0, -1.0)
    else:
        est.n_features_in_ = d
        X, Y = np.zeros((0, centre.shape[0])), np.zeros(0)
    if est.n_features_in_ != d:
        raise ValueError(f"X has {est.n_features_in_} features; the centre is for {d}.")
    est.classes_ = labels
    est.n_floor_ = _count("n_floor", state["n_floor"])
    acc = accountant_from_dict(dict(state["accountant"]))
    est._accountant = acc
    est.noise_mechanism_ = "tree" if isinstance(acc, TreeStreamAccountant) else "fresh"
    est._tree, est._rows_pending = None, _count("rows_pending", state.get("rows_pending", 0))
    if isinstance(acc, TreeStreamAccountant):
        tree = state.get("tree")
        if tree is None:
            raise ValueError("a tree stream's state must hold the tree's state.")
        est._tree = restore_tree(acc, tree[0], tree[1])
        est._rows_pending = _count("rows_pending", state.get("rows_pending"))
    est.sigma_, est.sensitivity_ = acc.sigma, acc.sensitivity
    n = X.shape[0]
    est._X, est._Y, est._active, est._keys = X, Y, np.ones(n, dtype=bool), None
    est._state = ModelState(w=centre, b=np.zeros_like(centre), **dict(state["state"]))
    est._mech = CertifiedRemoval(loss="logistic", lam=float(est.lam), residual_cap=float(est.residual_cap),
                                 tol=est.tol, max_iter=int(est.max_iter), solver=est.solver, bound="tight",
                                 calibration="analytic").resolved(X, solver=str(state["solver"]))
    est._cache, est._rng, est._seeded_rng = NewtonCache(), check_random_state(None), None
    est._pending = _count("pending", state["pending"])
    est.n_removed_ = 0
    est.horizon_spent_ = state.get("horizon_spent", False) is True
    est.n_iter_ = int(est._state.train_iterations)
    rel = state["release"]
    version = _count("the release version", rel["version"])
    if version != acc.releases - 1:
        raise ValueError(f"the latest release is version {version} but the accountant records {acc.releases} "
                         "releases.")
    coef = np.array(rel["coef"], dtype=np.float64, copy=True)
    coef.setflags(write=False)
    est.releases_ = [Release(version=version, coef=coef, intercept=float(rel.get("intercept", 0.0)),
                             certificate=est._release_certificate(acc, version, False))]
    if X.shape[0]:
        check_release_file(est, _WHERE)  # rows, sensitivity, β ≤ β_cap, the centre re-measured from the rows
    else:
        _check_publish_only(est)
    check_tree_file(est, _WHERE)  # the mechanism the parameters choose; the tree's releases recomputed
    return est


def _check_publish_only(est: Any) -> None:
    """Without rows: what :func:`check_release_file` checks of the centre and the ledger alone."""
    st, cap = est._state, float(est.residual_cap)
    if not (np.all(np.isfinite(st.w)) and math.isfinite(st.residual_bound) and 0.0 <= st.residual_bound <= cap):
        raise ValueError(f"{_WHERE}: the centre must be finite and its residual bound in [0, residual_cap = {cap}].")
    check_ledger_sensitivity(est, _WHERE)


def stream_state(est: Any) -> dict[str, Any]:
    """The state :func:`restore_stream` takes (secret: the centre and the tree's state), after the calls so far."""
    st, rel, tree = est._state, est.releases_[-1], est.__dict__.get("_tree")
    return {
        "centre": np.array(st.w, dtype=np.float64),
        "state": {"n": int(st.n), "residual_bound": float(st.residual_bound), "x_norm_bound": float(st.x_norm_bound),
                  "removals_since_training": int(st.removals_since_training), "retrainings": int(st.retrainings),
                  "train_iterations": int(st.train_iterations)},
        "accountant": est._accountant.to_dict(), "n_floor": int(est.n_floor_), "solver": est._mech.solver,
        "pending": int(est._pending), "rows_pending": int(est.__dict__.get("_rows_pending", 0)),
        "horizon_spent": bool(est.__dict__.get("horizon_spent_", False)),
        "release": {"version": int(rel.version), "coef": np.array(rel.coef, dtype=np.float64),
                    "intercept": float(rel.intercept)},
        "tree": None if tree is None else tree.to_state(),
    }

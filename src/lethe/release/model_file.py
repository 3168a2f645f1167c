"""The model file of a release stream: :meth:`ReleasedLogisticRegression.save` / ``load`` and the checks a loaded
stream must pass before anything is built from it (issue 26; moved out of :mod:`lethe.release.estimator`, issue 34).

:func:`save_stream` writes the secret centre, the remaining rows, the accountant, the tree's state and every release
without pickle, owner-only (:func:`lethe.io.save_model_file`); :func:`load_stream` reads them back and refuses a file
that fails :func:`check_release_file` (structure, the sensitivity recomputed from the public parameters, the centre's
residual re-measured from the saved rows) or :func:`check_tree_file` (the noise mechanism the parameters choose, the
tree's releases recomputed from its noisy nodes).
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from lethe._rng import check_random_state
from lethe.certified.common import measured_residual
from lethe.certified.mechanism import CertifiedRemoval, ModelState, NewtonCache
from lethe.certified.rows import INTERCEPT_SCALE
from lethe.certified.transaction import resume
from lethe.io import ModelFileError, open_model_file, save_model_file
from lethe.model_origin import set_origin
from lethe.privacy.tree import TreeRelease
from lethe.release.certificate import Release
from lethe.release.checks import stream_sensitivity
from lethe.release.tree_stream import TreeStreamAccountant, accountant_from_dict, certificate_from_dict

__all__ = ["check_release_file", "check_tree_file", "load_stream", "save_stream"]


def save_stream(est: Any, path: str | Path, *, key: bytes | str | None = None) -> Path:
    """The body of :meth:`ReleasedLogisticRegression.save` (called under the model's lock; ``est`` is one — typed
    ``Any`` as this module is imported by the estimator's)."""
    check_is_fitted(est, "releases_")
    resume(est)  # an interrupted call's rollback completed first: never a half-restored state in a file
    if len(est.releases_) != est._accountant.releases:
        raise ValueError(f"This stream holds {len(est.releases_)} of its {est._accountant.releases} releases (restored "
                         "from a service's state: the service keeps the others); a model file must hold every "
                         "release. Save it through the service.")
    st = est._state
    arrays: dict[str, np.ndarray] = {"X": est._X, "Y": est._Y, "active": est._active, "w": st.w,
                                     "release_coefs": np.vstack([r.coef for r in est.releases_])}
    if est._keys is not None:
        arrays["keys"] = est._keys
    tree = est.__dict__.get("_tree")
    tree_meta = None
    if tree is not None:  # the noisy nodes and the centres later nodes need (secret, as the centre is)
        tree_arrays, tree_meta = tree.to_state()
        arrays.update(tree_arrays)
    params = est.get_params(deep=False)
    rs = params["random_state"]
    params["random_state"] = int(rs) if isinstance(rs, int | np.integer) and not isinstance(rs, bool) else None
    params.update(est._trained)
    classes = est.classes_
    meta = {
        "class": type(est).__name__, "params": params, "solver": est._mech.solver,
        "classes": [c.item() if hasattr(c, "item") else c for c in classes],
        "state": {"n": st.n, "residual_bound": st.residual_bound, "x_norm_bound": st.x_norm_bound,
                  "removals_since_training": st.removals_since_training, "retrainings": st.retrainings,
                  "train_iterations": st.train_iterations},
        "accountant": est._accountant.to_dict(), "pending": est._pending, "n_removed": est.n_removed_,
        "n_floor": est.n_floor_, "n_features_in": est.n_features_in_,
        "releases": [{"version": r.version, "intercept": r.intercept, "certificate": r.certificate.to_dict()}
                     for r in est.releases_],
    }
    if est.__dict__.get("horizon_spent_"):  # written only once set: files of refusing streams are unchanged
        meta["horizon_spent"] = True
    if tree_meta is not None:
        meta["tree"] = tree_meta
        meta["rows_pending"] = int(est._rows_pending)
    stream = est.__dict__.get("_lethe_stream")
    if stream is None or stream[0] is not est.releases_:  # a new stream since fit (or never saved)
        stream = (est.releases_, secrets.token_hex(16))
        est.__dict__["_lethe_stream"] = stream
    counts = {"releases": int(est._accountant.releases), "n_removed": int(est.n_removed_)}
    return save_model_file(path, arrays, meta, key=key, model=est, stream=(stream[1], counts))


def load_stream(cls: Any, path: str | Path, *, key: bytes | str | None = None,
                trust_unauthenticated: bool = False) -> Any:
    """The body of :meth:`ReleasedLogisticRegression.load`: open, build, check (nothing is returned unchecked)."""
    opened = open_model_file(path, key=key, trust_unauthenticated=trust_unauthenticated)
    arrays, meta = opened.arrays, opened.meta
    if meta.get("class") != cls.__name__:
        raise ValueError(f"{path} holds a {meta.get('class')!r}, not a {cls.__name__}.")
    params = dict(meta["params"])
    est = cls(**params)
    est._check_params()
    est._trained = {"fit_intercept": bool(params["fit_intercept"]),
                    "normalize_rows": bool(params["normalize_rows"])}
    est.classes_ = np.asarray(meta["classes"])
    est.n_features_in_ = int(meta["n_features_in"])
    est.n_floor_ = int(meta["n_floor"])
    est._accountant = accountant_from_dict(meta["accountant"])
    est.noise_mechanism_ = "tree" if isinstance(est._accountant, TreeStreamAccountant) else "fresh"
    est._tree = None
    est._rows_pending = 0
    if isinstance(est._accountant, TreeStreamAccountant):  # later releases draw OS randomness, as fresh noise
        if "tree" not in meta:
            raise ValueError(f"{path}: a tree stream's file must hold the tree's state.")
        est._tree = TreeRelease.from_state(est._accountant.tree, arrays, meta["tree"])
        est._rows_pending = int(meta.get("rows_pending", -1))
    est.sigma_ = est._accountant.sigma
    est.sensitivity_ = est._accountant.sensitivity
    est._X = np.ascontiguousarray(arrays["X"], dtype=np.float64)
    est._Y = np.array(arrays["Y"], dtype=np.float64)
    est._active = arrays["active"].astype(bool)
    est._keys = arrays["keys"].copy() if "keys" in arrays else None
    s = meta["state"]
    est._state = ModelState(w=arrays["w"], b=np.zeros_like(arrays["w"]), **s)
    est._mech = CertifiedRemoval(loss="logistic", lam=float(params["lam"]),
                                 residual_cap=float(params["residual_cap"]), tol=params["tol"],
                                 max_iter=int(params["max_iter"]), solver=params["solver"], bound="tight",
                                 calibration="analytic").resolved(est._X, solver=meta["solver"])
    est._cache = NewtonCache()
    est._rng = check_random_state(None)
    est._pending = int(meta["pending"])
    est.n_removed_ = int(meta["n_removed"])
    est.horizon_spent_ = meta.get("horizon_spent", False) is True
    coefs = arrays["release_coefs"]
    releases = []
    for r, coef in zip(meta["releases"], coefs, strict=True):
        coef = np.array(coef, dtype=np.float64, copy=True)
        coef.setflags(write=False)
        releases.append(Release(version=int(r["version"]), coef=coef, intercept=float(r["intercept"]),
                                certificate=certificate_from_dict(r["certificate"])))
    est.releases_ = releases
    if est._accountant.releases != len(releases):
        raise ValueError(f"{path}: the accountant records {est._accountant.releases} releases but the file holds "
                         f"{len(releases)}.")
    check_release_file(est, path)
    check_tree_file(est, path)
    counts = {"releases": int(est._accountant.releases), "n_removed": int(est.n_removed_)}
    if opened.stream is not None:
        est.__dict__["_lethe_stream"] = (est.releases_, opened.stream)
        if opened.counts != counts:
            raise ModelFileError(f"{path}: the stream's recorded counts {opened.counts} differ from the file's "
                                 f"own {counts}: the file was edited.")
    return set_origin(est, opened.origin)


def check_tree_file(est: Any, path: str | Path) -> None:
    """The invariants of a loaded stream's noise mechanism; ``ValueError`` naming the first that fails.

    The mechanism is the one the parameters choose (:meth:`ReleasedLogisticRegression._stream_accountant`, public
    parameters only), so an edited file cannot switch a stream to another mechanism or lower its noise. For a tree:
    its ledger equals the one recomputed from the parameters but for the count; the tree's state is what that many
    releases leave (:meth:`lethe.privacy.tree.TreeRelease.from_state`); every release in the file is recomputed
    from the noisy nodes (the same arithmetic) and must match exactly; the rows removed since the last release are
    within ``rows_per_release``."""
    acc = est._accountant
    expected = est._stream_accountant(int(est.n_floor_), float(acc.sensitivity))
    if type(expected) is not type(acc) or (isinstance(acc, TreeStreamAccountant)
                                           and dataclasses.replace(expected, releases=acc.releases) != acc):
        raise ValueError(f"{path}: the stream's ledger {acc.to_dict()} is not the one its parameters give "
                         f"({expected.to_dict()}): the file was edited.")
    tree = est._tree
    if tree is None:
        return
    if tree.releases != acc.releases:
        raise ValueError(f"{path}: the tree holds {tree.releases} releases, the ledger {acc.releases}.")
    for r in est.releases_:
        w = tree.released(r.version)
        coef, intercept = ((w[:-1] * INTERCEPT_SCALE, float(w[-1] * INTERCEPT_SCALE)) if est._trained["fit_intercept"]
                           else (w, 0.0))
        if not (np.array_equal(coef, r.coef) and intercept == r.intercept):
            raise ValueError(f"{path}: release {r.version} is not the tree's: the file was edited.")
    if not 0 <= est._rows_pending <= int(acc.rows_per_release):  # type: ignore[union-attr]
        raise ValueError(f"{path}: rows removed since the last release must be in [0, rows_per_release]. Found "
                         f"{est._rows_pending}.")


def check_release_file(est: Any, path: str | Path) -> None:
    """The invariants of a loaded release stream; ``ValueError`` naming the first one that fails.

    Structure: X (n, D) and w (D,) finite, Y (n,) in {−1, +1} on active rows, active (n,), keys (n,); removed rows
    erased (zero features and targets); active rows in the unit ball; n of the state = active rows ≥ n_floor.
    Privacy: the accountant's sensitivity equals :func:`release_sensitivity` recomputed from the file's public
    parameters (λ, n_floor, β_cap), so σ cannot have been lowered through an edited sensitivity (the accountant
    itself refuses a σ too small for its sensitivity); the state's β ≤ β_cap; and the centre's residual
    ‖∇L_0(w; D)‖, re-measured from the saved rows with its rounding allowance a
    (:func:`lethe.certified.common.measured_residual`), satisfies ‖g̃‖ − a ≤ β (else the recorded β is certainly
    not an upper bound and the release noise no longer covers the centre's distance from the minimiser)."""
    X, Y, active, st = est._X, est._Y, est._active, est._state
    n, d = X.shape
    if Y.shape != (n,) or active.shape != (n,) or st.w.shape != (d,):
        raise ValueError(f"{path}: inconsistent shapes X {X.shape}, Y {Y.shape}, active {active.shape}, "
                         f"w {st.w.shape}.")
    if est._keys is not None and est._keys.shape != (n,):
        raise ValueError(f"{path}: keys must have shape ({n},). Found {est._keys.shape}.")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(st.w)) and math.isfinite(st.residual_bound)):
        raise ValueError(f"{path}: the rows, the centre and its residual bound must be finite.")
    n_act = int(np.count_nonzero(active))
    if st.n != n_act:
        raise ValueError(f"{path}: the state's n = {st.n} differs from the {n_act} active rows.")
    if n_act < est.n_floor_:
        raise ValueError(f"{path}: {n_act} active rows, fewer than n_floor = {est.n_floor_}.")
    if np.any(X[~active]) or np.any(Y[~active]):
        raise ValueError(f"{path}: removed rows must be erased (zero features and targets).")
    if not np.all(np.isin(Y[active], (-1.0, 1.0))):
        raise ValueError(f"{path}: targets of active rows must be -1 or +1.")
    if n_act and float(np.max(np.einsum("ij,ij->i", X[active], X[active]))) > 1.0 + 1e-9:
        raise ValueError(f"{path}: an active row lies outside the unit ball.")
    cap = float(est.residual_cap)
    if not 0.0 <= st.residual_bound <= cap:
        raise ValueError(f"{path}: the centre's residual bound {st.residual_bound!r} must lie in [0, residual_cap = "
                         f"{cap}].")
    check_ledger_sensitivity(est, str(path), ": the file was edited")
    g, allowance = measured_residual(est._mech, st.w, st.b, X, Y, active)
    if float(np.linalg.norm(g)) - allowance > st.residual_bound:
        raise ValueError(f"{path}: the centre's residual, re-measured from the saved rows, exceeds its recorded bound "
                         "(the weights or the rows were edited).")


def check_ledger_sensitivity(est: Any, where: str, why: str = "") -> None:
    """``ValueError`` unless the stream's accountant has the sensitivity its public parameters give
    (:func:`lethe.release.checks.stream_sensitivity`): an edited file or state, whose σ would not cover Δ."""
    expected = stream_sensitivity(float(est.lam), int(est.n_floor_), float(est.residual_cap))
    if est._accountant.sensitivity != expected:
        raise ValueError(f"{where}: the accountant's sensitivity {est._accountant.sensitivity!r} is not the one its "
                         f"parameters give ({expected!r}){why}.")

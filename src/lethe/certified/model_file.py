"""The invariants of a certified estimator's model file
(:meth:`lethe.certified.estimators.CertifiedLogisticRegression.load`), checked before anything is built from it:
structure, erased rows, the states' counts and bounds, ‖b‖ against σ, the
residual re-measured from the saved rows, and the (joint) bound judged by the mechanism's budget decision."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp

from lethe.certified.common import measured_residual
from lethe.certified.data import check_data_matrix
from lethe.certified.mechanism import CertifiedRemoval
from lethe.certified.newton import SOLVERS
from lethe.certified.one_vs_all import OneVsAllRemoval
from lethe.certified.rows import INTERCEPT_SCALE, check_row_norms
from lethe.certified.state import ModelState
from lethe.io import ModelFileError

#: A saved b whose norm is this improbable under the file's σ is refused (two-sided tail probability).
NOISE_TAIL_PROBABILITY = 1e-12


def noise_norm_tail(b: np.ndarray, sigma: float, noise: str) -> float:
    """The two-sided tail probability of ‖b‖ under the law b was drawn from (Guo et al. 2020, Thm 3):
    Gaussian b ~ N(0, σ² I_d): ‖b‖²/σ² ~ χ²_d; Laplace-type b (density ∝ exp(−‖b‖/σ)): ‖b‖ ~ Γ(shape d, scale σ)
    (:func:`lethe.certified.noise.sample_perturbation`). 2 min(F, 1 − F) of the observed norm; 1 for ``"none"``."""
    from scipy.stats import chi2, gamma

    d = b.shape[0]
    if noise == "gaussian":
        x = float(b @ b) / (sigma * sigma)
        lo, hi = float(chi2.cdf(x, d)), float(chi2.sf(x, d))
    elif noise == "laplace":
        r = float(np.linalg.norm(b))
        lo, hi = float(gamma.cdf(r, d, scale=sigma)), float(gamma.sf(r, d, scale=sigma))
    else:
        return 1.0
    return min(1.0, 2.0 * min(lo, hi))


def check_model_file(loss: str, intercept: bool, mech: CertifiedRemoval, arrays: dict[str, np.ndarray],
                     meta: dict[str, Any], where: str, *, measure: Any = measured_residual,
                     tail_probability: float = NOISE_TAIL_PROBABILITY) -> dict[str, Any]:
    """The invariants of a certified state, checked on a model file's contents before anything is built from it
    (``loss``: "logistic" or "squared"; ``intercept``: the model has a constant last column; ``measure`` and
    ``tail_probability``: the re-measure and the noise rule, which the loading front end passes through so that its
    tests can take either out for a mutation check).

    Structure: the expected arrays and no others, dtypes, shapes (Y (K, n), active (n,), w_k and b_k (D,), members
    (K, n), keys (n,)), finite values, n_features_in = D − intercept column, the classes. State: for each binary
    model k, n_k = its active rows; removed rows are erased (zero features, targets and blank keys); the kept
    keys distinct; targets of the loss (±1, one positive class per row for one-vs-all); rows in the unit ball
    (logistic loss) and the intercept column constant. Privacy: β_k finite ≥ 0 and the (joint) β ≤ ε′; b = 0 for
    ``noise="none"``, else ‖b‖ not astronomically improbable under σ (:func:`noise_norm_tail` ≥
    :data:`NOISE_TAIL_PROBABILITY`). Residual: ‖∇L_b(w; D_k)‖ re-measured from the saved rows
    (:func:`lethe.certified.common.measured_residual`, one pass, with its rounding allowance a: the exact norm lies
    in [‖g̃‖ − a, ‖g̃‖ + a]); the file is refused when ‖g̃‖ − a > β_k (its β is certainly not an upper bound), and
    the loaded β_k is max(β_k, ‖g̃‖ + a), an upper bound either way. The file's ‖X‖₂ bound is not trusted: it is
    formed again from the rows at the first removal (NaN, as after ``fit``). Returns the checked pieces."""

    def fail(msg: str) -> ModelFileError:
        return ModelFileError(f"{where}: {msg} The file was edited or corrupted; it is refused.")

    states_meta = meta["states"]
    K = len(states_meta)
    if K == 0:
        raise fail("the metadata lists no model state.")
    sparse_names = {"X_data", "X_indices", "X_indptr", "X_shape"}
    data_names = sparse_names if "X_data" in arrays else {"X"}
    expected = data_names | {"Y", "active"} | {f"w_{k}" for k in range(K)} | {f"b_{k}" for k in range(K)}
    optional = {"members", "keys"}
    missing = sorted(expected - set(arrays))
    extra = sorted(set(arrays) - expected - optional)
    if missing or extra:
        raise fail(f"its arrays do not match its {K} model state(s): missing {missing}, unexpected {extra}.")

    def typed(name: str, kinds: str, ndim: int) -> np.ndarray:
        a = arrays[name]
        if a.dtype.kind not in kinds or a.ndim != ndim:
            raise fail(f"array {name!r} must be {ndim}-D of kind {kinds!r}. Found dtype {a.dtype}, shape {a.shape}.")
        return a

    if data_names == {"X"}:
        X: Any = typed("X", "f", 2).astype(np.float64, copy=True)
        if not np.all(np.isfinite(X)):
            raise fail("X holds non-finite values.")
    else:
        shape = typed("X_shape", "iu", 1)
        if shape.shape != (2,) or np.any(shape < 0):
            raise fail(f"X_shape must be two non-negative integers. Found {shape.tolist()}.")
        try:
            X = sp.csr_matrix((typed("X_data", "f", 1).astype(np.float64), typed("X_indices", "iu", 1),
                               typed("X_indptr", "iu", 1)), shape=tuple(int(v) for v in shape))
            X.check_format(full_check=True)
            X = check_data_matrix("X", X)
        except (TypeError, ValueError) as e:
            raise fail(f"the sparse X is malformed: {e}.") from None
        if not np.all(np.isfinite(X.data)):
            raise fail("X holds non-finite values.")
    n, D = X.shape
    Y = typed("Y", "f", 2).astype(np.float64, copy=True)
    if Y.shape != (K, n) or not np.all(np.isfinite(Y)):
        raise fail(f"Y must be finite with shape ({K}, {n}). Found shape {Y.shape}.")
    active = typed("active", "b", 1).copy()
    if active.shape != (n,):
        raise fail(f"active must have shape ({n},). Found {active.shape}.")
    members = None
    if "members" in arrays:
        members = typed("members", "b", 2).copy()
        if members.shape != (K, n) or K == 1:
            raise fail(f"members must have shape ({K}, {n}) and exist only for one-vs-all. Found {members.shape}.")
    keys = None
    if "keys" in arrays:
        keys = typed("keys", "iuU", 1).copy()
        if keys.shape != (n,):
            raise fail(f"keys must have shape ({n},). Found {keys.shape}.")
    ws, bs = [], []
    for k in range(K):
        w, b = typed(f"w_{k}", "f", 1), typed(f"b_{k}", "f", 1)
        if w.shape != (D,) or b.shape != (D,):
            raise fail(f"w_{k} and b_{k} must have shape ({D},). Found {w.shape} and {b.shape}.")
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
            raise fail(f"w_{k} or b_{k} holds non-finite values.")
        ws.append(w.astype(np.float64))
        bs.append(b.astype(np.float64))
    if int(meta["n_features_in"]) != D - int(intercept):
        raise fail(f"n_features_in ({meta['n_features_in']}) must be the {D} columns of X"
                   f"{' minus the intercept column' if intercept else ''}.")
    logistic = loss == "logistic"
    if logistic:
        classes = meta.get("classes")
        if not isinstance(classes, list) or len(set(map(str, classes))) != len(classes) or (
                len(classes) != (2 if K == 1 else K)):
            raise fail(f"classes must be {2 if K == 1 else K} distinct labels for {K} binary model(s). "
                       f"Found {classes!r}.")
    elif K != 1 or members is not None:
        raise fail(f"a regression model has one state and no members. Found {K} state(s).")
    # removed rows are erased, counts agree
    gone = ~active
    n_gone = int(np.count_nonzero(gone))
    if int(meta["n_removed"]) != n_gone:
        raise fail(f"n_removed ({meta['n_removed']}) must be the {n_gone} inactive rows.")
    if n_gone:
        erased = (X[gone].count_nonzero() == 0) if sp.issparse(X) else not np.any(X[gone])
        if not erased or np.any(Y[:, gone]):
            raise fail(f"the {n_gone} removed rows must have zero features and targets.")
        if keys is not None and np.any(keys[gone] != ("" if keys.dtype.kind == "U" else 0)):
            raise fail("the keys of removed rows must be blank.")
    if keys is not None and np.unique(keys[active]).size != int(np.count_nonzero(active)):
        raise fail("the keys of the rows kept must be distinct.")
    if logistic:
        Ya = Y[:, active]
        if not np.all(np.abs(Ya) == 1.0):
            raise fail("the targets of the rows kept must be -1 or +1.")
        if K > 1 and not np.all(np.sum(Ya > 0, axis=0) == 1):
            raise fail("each row kept must be a positive of exactly one class.")
        if members is not None and np.any((Y > 0) & active[None, :] & ~members):
            raise fail("each row kept must be a member of its own class's binary model.")
        try:
            check_row_norms(X)
        except ValueError as e:
            raise fail(str(e)) from None
    if intercept:
        const = INTERCEPT_SCALE if logistic else 1.0
        col = X[:, D - 1]
        col = np.asarray(col.toarray()).ravel() if sp.issparse(col) else col
        if not np.all(col[active] == const):
            raise fail(f"the intercept column of the rows kept must be {const!r}.")
    # the states: counts, β, b
    states = []
    for k, sm in enumerate(states_meta):
        if not isinstance(sm, dict):
            raise fail(f"state {k} must be a mapping. Found {type(sm).__name__}.")
        rows = active if members is None else active & members[k]
        n_k = int(np.count_nonzero(rows))
        raw = {f: sm.get(f) for f in ("n", "removals_since_training", "retrainings", "train_iterations")}
        bad = [f for f, v in raw.items() if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0)]
        if bad:
            raise fail(f"state {k}: {bad[0]} must be a non-negative integer. Found {raw[bad[0]]!r}.")
        ints = {f: int(v) for f, v in raw.items()}  # type: ignore[arg-type]  # checked above
        if ints["n"] != n_k or n_k == 0:
            raise fail(f"state {k}: n = {ints['n']} but the file has {n_k} active rows for it.")
        beta = sm.get("residual_bound")
        if not (isinstance(beta, int | float) and not isinstance(beta, bool) and math.isfinite(beta) and beta >= 0):
            raise fail(f"state {k}: residual_bound must be a finite number >= 0. Found {beta!r}.")
        if mech.noise == "none":
            if np.any(bs[k]):
                raise fail(f"state {k}: b must be zero for noise='none'. Found ||b|| = {np.linalg.norm(bs[k]):.6g}.")
        else:
            tail = noise_norm_tail(bs[k], mech.sigma, mech.noise)
            if tail < tail_probability:
                raise fail(f"state {k}: ||b|| = {np.linalg.norm(bs[k]):.6g} is not a plausible draw of the "
                           f"{mech.noise} perturbation with sigma = {mech.sigma!r} in {D} dimensions (two-sided tail "
                           f"probability {tail:.3g} < {tail_probability:g}): b or sigma was changed.")
        g, allowance = measure(mech, ws[k], bs[k], X, Y[k], rows)
        g_norm = float(np.linalg.norm(g))
        if g_norm - allowance > float(beta):
            raise fail(f"state {k}: the gradient residual re-measured from the saved rows, {g_norm:.6g} "
                       f"(± {allowance:.3g}), exceeds the file's bound beta = {float(beta):.6g}: w, b or the rows do "
                       "not belong to the state the certificates describe.")
        states.append(ModelState(w=ws[k], b=bs[k], n=n_k, residual_bound=max(float(beta), g_norm + allowance),
                                 x_norm_bound=math.nan, removals_since_training=ints["removals_since_training"],
                                 retrainings=ints["retrainings"], train_iterations=ints["train_iterations"]))
    ova = OneVsAllRemoval(mech)
    if not ova.within_budget(states):
        raise fail(f"the residual bound {ova.joint(states):.6g} exceeds the budget eps' = {mech.budget:.6g} of its "
                   "parameters.")
    return {"X": X, "Y": Y, "active": active, "members": members, "keys": keys, "states": states}


def state_meta(st: ModelState) -> dict[str, Any]:
    """A state's scalars as a model file's metadata records them (its w and b are arrays of their own)."""
    return {"n": st.n, "residual_bound": st.residual_bound, "x_norm_bound": st.x_norm_bound,
            "removals_since_training": st.removals_since_training, "retrainings": st.retrainings,
            "train_iterations": st.train_iterations}


def classes_meta(classes: np.ndarray) -> list[Any]:
    """A classifier's classes as JSON values of their kind (integers, floats or strings)."""
    if classes.dtype.kind in "iub":
        return [int(c) for c in classes]
    if classes.dtype.kind == "f":
        return [float(c) for c in classes]
    return [str(c) for c in classes]


def check_meta_entries(meta: dict[str, Any], class_name: str, where: str) -> None:
    """The metadata names ``class_name`` and holds its entries with their JSON types; else
    :class:`lethe.io.ModelFileError` naming the first that does not."""
    if meta.get("class") != class_name:
        raise ModelFileError(f"{where} holds a {meta.get('class')!r}, not a {class_name}.")
    for name, kind in (("params", dict), ("states", list), ("n_removed", int), ("n_features_in", int)):
        if not isinstance(meta.get(name), kind):
            raise ModelFileError(f"{where}: the metadata entry {name!r} must be a {kind.__name__}. "
                                 f"Found {type(meta.get(name)).__name__}.")


def saved_solver(saved: Any, param: str) -> str | None:
    """The concrete solver recorded in a saved model's metadata, checked against its ``solver`` parameter: the
    same solver, or any concrete one for ``"auto"``; None (resolve again) when none is recorded."""
    if saved is None:
        return None
    if saved not in SOLVERS or (param != "auto" and saved != param):
        raise ValueError(f"The saved model's solver {saved!r} does not fit its solver parameter {param!r} (one of "
                         f"{list(SOLVERS)}, equal to the parameter unless it is 'auto'): the file was edited.")
    return str(saved)


__all__ = ["NOISE_TAIL_PROBABILITY", "check_meta_entries", "check_model_file", "classes_meta", "noise_norm_tail",
           "saved_solver", "state_meta"]

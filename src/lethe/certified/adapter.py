"""Curator adapter ``certified-removal``: the service adapter of certified removal (Guo et al. 2020), moved from
:mod:`lethe.curator.adapters` into its family's package (issue 34), with its artifact check
(:func:`certified_removal_states`, moved from :mod:`lethe.curator.artifacts`).

Listed in the registry of families (:mod:`lethe.families`), which imports it when the mechanism is used. The
interface it implements is :class:`lethe.curator.adapters.MechanismAdapter`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from lethe.certified.mechanism import CertifiedRemoval, ModelState
from lethe.certified.model_file import classes_meta
from lethe.certified.noise import epsilon_spent
from lethe.certified.one_vs_all import OneVsAllRemoval
from lethe.curator.adapters import MechanismAdapter, WarmModel
from lethe.curator.artifacts import Artifact, ArtifactError, finite_array

__all__ = ["CertifiedRemovalAdapter", "certified_removal_states"]


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


class CertifiedRemovalAdapter(MechanismAdapter):
    """Certified removal for linear models (Guo et al. 2020) through the library's estimators.

    A removal is computed by :meth:`lethe.certified.estimators.CertifiedLogisticRegression.remove` (or
    :meth:`~lethe.certified.estimators.CertifiedLinearRegression.remove` for ``loss="squared"``) — the same code, with
    the same options and defaults, as in a notebook: the mechanism's Newton step (Eq. 3, 6) with its solver cache, the
    budget
    and retraining (Alg. 2), one-vs-all with a joint budget for more than two classes.

    Parameters (JSON): ``loss`` ("logistic", default, or "squared") and every option of the estimator of that loss
    except ``random_state`` (the service draws fresh entropy for every operation) and ``negative_subsample`` (not
    supported: the subsample of each binary model would have to be kept per record): ``lam``, ``sigma``,
    ``epsilon``, ``delta``, ``noise``, ``tol``, ``max_iter``, ``solver``, ``bound``, ``calibration``, ``refresh``,
    ``fit_intercept`` and (logistic) ``normalize_rows`` — with the estimator's defaults (``bound="tight"``,
    ``calibration="analytic"``, ``solver="auto"``: ``anchor`` where a d × d matrix may be kept, else ``pcg``; the
    version's artifact records the concrete one), except that a model of a dataset registered with a schema gets
    ``fit_intercept=True`` unless told otherwise (``tabular_defaults``). Labels may be numbers or strings; with
    more than two values the model is one-vs-all.

    ``fit_intercept`` and ``normalize_rows`` are applied as the estimator applies them (rows normalised, then the
    logistic loss trains on [xᵢ/√2, 1/√2], the squared loss on [xᵢ, 1]): at training by the estimator itself, at
    :meth:`restore` and :meth:`predict` by :meth:`model_rows`, the same map.

    Artifact arrays: ``w`` (public; shape (d,), or (K, d) one-vs-all; d + 1 with an intercept, the last entry the
    intercept's weight on the constant feature) and ``b`` (SECRET: the perturbations). Metadata: the classes and,
    per binary model, n, β, the ‖X‖₂ bound and the counters of :class:`ModelState`.
    """

    name = "certified-removal"
    secret_arrays = ("b",)
    supports_warm = True
    tabular_defaults: ClassVar[dict[str, Any]] = {"fit_intercept": True}
    _UNSUPPORTED = ("random_state", "negative_subsample")

    @staticmethod
    def _estimator_class(loss: str) -> Any:
        from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression

        return CertifiedLogisticRegression if loss == "logistic" else CertifiedLinearRegression

    @classmethod
    def check_artifact(cls, artifact: Artifact, n_features: int | None, params: dict[str, Any] | None) -> None:
        """``w`` and ``b`` finite float64 vectors of the dataset's dimension; n ≥ 1; counters ≥ 0; the accumulated
        residual bound β finite, ≥ 0 and, unless ``noise="none"``, β ≤ ε′ — the budget the parameters σ, ε, δ give
        (Alg. 2: a state above budget must have been retrained, so such a file certifies nothing), judged by the
        mechanism's own decision (:meth:`lethe.certified.one_vs_all.OneVsAllRemoval.check_stored`)."""
        betas = certified_removal_states(artifact.meta, artifact.arrays, n_features)
        if params is None:
            return
        try:
            # fit_intercept / normalize_rows shape the rows, not the mechanism
            mech = CertifiedRemoval(**{k: v for k, v in params.items() if k not in ("fit_intercept", "normalize_rows")})
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"the bound parameters are invalid: {exc}") from None
        try:  # the mechanism's own budget decision on the (joint) bound (Alg. 2, line 16)
            OneVsAllRemoval(mech).check_stored(betas)
        except ValueError as exc:
            raise ArtifactError(str(exc)) from None

    @classmethod
    def _option_defaults(cls, loss: str) -> dict[str, Any]:
        params = cls._estimator_class(loss)().get_params()
        return {k: v for k, v in params.items() if k not in cls._UNSUPPORTED}

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        loss = params.get("loss", "logistic")
        if loss not in ("logistic", "squared"):
            raise ValueError(f"loss must be 'logistic' or 'squared'. Found {loss!r}.")
        defaults = cls._option_defaults(loss)
        allowed = ["loss", *defaults]
        if "negative_subsample" in params and params["negative_subsample"] is not None:
            raise ValueError("negative_subsample is not supported by the curator service (the subsample of each "
                             f"binary model would have to be kept per record). Found {params['negative_subsample']!r}.")
        unknown = sorted(set(params) - set(allowed) - {"negative_subsample"})
        if unknown:
            raise ValueError(f"Unknown parameter(s) for mechanism {cls.name!r}: {unknown}. Allowed: {allowed}.")
        full = {"loss": loss, **{k: params.get(k, v) for k, v in defaults.items()}}
        if loss == "logistic" and full["noise"] not in ("gaussian", "laplace"):
            raise ValueError(f"noise must be 'gaussian' or 'laplace' for logistic regression. Found {full['noise']!r}.")
        cls._mechanism_of(full)  # validates every value (errors say name, rule and value)
        return full

    #: Options of the estimator that shape the rows, not the mechanism (validated here, applied by the estimator).
    _ROW_OPTIONS = ("fit_intercept", "normalize_rows")

    @classmethod
    def _mechanism_of(cls, params: dict[str, Any]) -> CertifiedRemoval:
        for name in cls._ROW_OPTIONS:
            if name in params and not isinstance(params[name], bool):
                raise TypeError(f"{name} must be a bool (true or false). Found {params[name]!r}.")
        return CertifiedRemoval(**{k: v for k, v in params.items() if k not in cls._ROW_OPTIONS})

    @property
    def mechanism(self) -> CertifiedRemoval:
        """The configured mechanism (as the estimator builds it)."""
        mech = self.__dict__.get("_mech")
        if mech is None:
            mech = self.__dict__["_mech"] = self._mechanism_of(self.params)
        return mech

    def model_rows(self, X: np.ndarray) -> np.ndarray:
        """The rows the weights apply to, as the estimator's ``_validate_X`` forms them: ``normalize_rows`` (logistic)
        then the intercept column. ``X`` itself when neither is set (not copied)."""
        from lethe.certified.estimators import INTERCEPT_SCALE
        from lethe.preprocessing import normalize_rows

        logistic = self.params["loss"] == "logistic"
        if logistic and self.params.get("normalize_rows", False):
            X = normalize_rows(np.asarray(X, dtype=np.float64))
        if self.params.get("fit_intercept", False):
            scale = INTERCEPT_SCALE if logistic else 1.0
            X = np.column_stack([np.asarray(X, dtype=np.float64) * scale, np.full(X.shape[0], scale)])
        return X

    def _estimator(self, random_state: Any) -> Any:
        options = {k: v for k, v in self.params.items() if k != "loss"}
        return self._estimator_class(self.params["loss"])(**options, random_state=random_state)

    # -- state <-> artifact ---------------------------------------------------------------------------------------
    @staticmethod
    def states(artifact: Artifact) -> list[ModelState]:
        """The model states a version holds (one per binary model; one-vs-all: one per class), read from its
        artifact (both file formats)."""
        m, a = artifact.meta, artifact.arrays
        if "states" not in m:  # format of lethe <= 0.x: one binary model, its state's fields in the metadata
            x_norm = m["x_norm_bound"]
            return [ModelState(w=a["w"], b=a["b"], n=int(m["n"]), residual_bound=float(m["residual_bound"]),
                               x_norm_bound=math.nan if x_norm is None else float(x_norm),
                               removals_since_training=int(m["removals_since_training"]),
                               retrainings=int(m["retrainings"]))]
        W, B = np.atleast_2d(a["w"]), np.atleast_2d(a["b"])
        out = []
        for k, s in enumerate(m["states"]):
            x_norm = s["x_norm_bound"]
            out.append(ModelState(w=W[k], b=B[k], n=int(s["n"]), residual_bound=float(s["residual_bound"]),
                                  x_norm_bound=math.nan if x_norm is None else float(x_norm),
                                  removals_since_training=int(s["removals_since_training"]),
                                  retrainings=int(s["retrainings"]), train_iterations=int(s["train_iterations"])))
        return out

    def _artifact(self, est: Any, n: int) -> Artifact:
        states = est.states_
        classes = classes_meta(est.classes_) if hasattr(est, "classes_") else None
        meta = {"mechanism": self.name, "format": 2, "n": int(n), "classes": classes,
                "n_removed": int(est.n_removed_), "solver": str(est.mechanism_.solver),
                "states": [{"n": st.n, "residual_bound": st.residual_bound,
                            "x_norm_bound": _finite_or_none(st.x_norm_bound),
                            "removals_since_training": st.removals_since_training, "retrainings": st.retrainings,
                            "train_iterations": st.train_iterations} for st in states]}
        if len(states) == 1:
            arrays = {"w": np.array(states[0].w), "b": np.array(states[0].b)}
        else:
            arrays = {"w": np.vstack([st.w for st in states]), "b": np.vstack([st.b for st in states])}
        return Artifact(arrays=arrays, meta=meta)

    def _joint(self, betas: list[float]) -> float:
        """The one-vs-all model's residual bound (:meth:`lethe.certified.one_vs_all.OneVsAllRemoval.joint`: √Σβ_k² for
        Gaussian b, Σβ_k for Laplace-type b); β for a binary model."""
        return OneVsAllRemoval(self.mechanism).joint(betas)

    # -- operations -----------------------------------------------------------------------------------------------
    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        est = self._estimator(rng).fit(X, y)
        certs = [_public_certificate(c.to_dict()) for c in est.fit_certificates_]
        if len(certs) == 1:
            cert = certs[0]
        else:
            mech = self.mechanism
            beta = self._joint([c["residual_bound"] for c in certs])
            eps, delta = mech.eps_delta()
            cert = {"operation": "train", "guarantee": mech.guarantee + "; one-vs-all, joint budget",
                    "epsilon": eps, "delta": delta, "residual_bound": beta, "budget": float(mech.budget),
                    "budget_left": max(float(mech.budget) - beta, 0.0), "retrained": False,
                    "n_remaining": int(X.shape[0]), "per_class": certs}
        return self._artifact(est, X.shape[0]), cert

    def restore(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, active: np.ndarray) -> WarmModel:
        """Rebuild the estimator of a version over the dataset's whole row space.

        ``X`` (N × d) and ``y`` (N,) hold every row the dataset ever had, in a fixed order; ``active`` marks the
        rows still present (the ones the version is for). ``X`` is used as is (not copied: pass a private view,
        e.g. a copy-on-write memory map — removal zeroes the removed rows in it). The solver caches start empty and
        are primed from the state (one pass over the data, as ``fit`` does); certificates rest on the state's
        accumulated bound β, which the artifact carries.
        """
        states = self.states(artifact)
        classes = artifact.meta.get("classes")
        active = np.asarray(active, dtype=bool)
        n_full = X.shape[0]
        if y.shape != (n_full,) or active.shape != (n_full,):
            raise ValueError(f"X, y and active must describe the same {n_full} rows. Found {y.shape}, {active.shape}.")
        if int(np.count_nonzero(active)) != states[0].n:
            raise ValueError(f"The version is for {states[0].n} records; the data has {int(np.count_nonzero(active))}.")
        n_features = int(X.shape[1])
        X = self.model_rows(X)  # with an intercept or normalize_rows: a private copy (removal zeroes its rows)
        K = len(states)
        Y = np.zeros((K, n_full))
        labels = None
        if self.params["loss"] == "logistic":
            assert classes is not None
            labels = _labels_like(classes, y)
            if K == 1:
                Y[0] = np.where(y == labels[1], 1.0, -1.0)
            else:
                for k in range(K):
                    Y[k] = np.where(y == labels[k], 1.0, -1.0)
        else:
            Y[0] = y
        Y[:, ~active] = 0.0
        # the version's parameters (remove() checks them) and the concrete solver it was computed with (solver="auto"
        # resolves at training; versions written before it existed name their solver in the parameters); the caches
        # are primed as fit leaves them (one data pass now, so that the first removal is as warm as the next ones);
        # the service maps its own keys to rows (no record keys)
        options = {k: v for k, v in self.params.items() if k != "loss"}
        est = self._estimator_class(self.params["loss"]).from_state(
            options, X=X, Y=Y, active=active.copy(), states=states, n_features_in=n_features, classes=labels,
            n_removed=int(artifact.meta.get("n_removed", 0)), solver=artifact.meta.get("solver"), prime=True)
        return WarmModel(est)

    def remove_warm(self, warm: WarmModel, rows: np.ndarray,
                    rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        """Remove ``rows`` (positions in the row space of :meth:`restore`) as one batch (Eq. 6) with the estimator's
        own :meth:`remove`; advances ``warm``. On error the estimator is unchanged (its contract)."""
        est = warm.estimator
        cert = est.remove_rows(np.asarray(rows, dtype=np.int64), random_state=rng)  # fresh entropy for a retraining
        out = _public_certificate(cert.to_dict())
        if "operation" not in out:  # one-vs-all
            out["operation"] = "retrain" if cert.retrained else "remove"
            out["guarantee"] = self.mechanism.guarantee + "; one-vs-all, joint budget"
            out["retrained"] = bool(cert.retrained)
        n = est.n_remaining_
        out["n_remaining"] = int(n)
        return self._artifact(est, n), out

    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        warm = self.restore(artifact, np.array(X, dtype=np.float64, order="C"), np.asarray(y),
                            np.ones(X.shape[0], dtype=bool))
        return self.remove_warm(warm, np.asarray(indices, dtype=np.int64), rng)

    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        W = np.atleast_2d(artifact.arrays["w"])
        d = W.shape[1] - int(bool(self.params.get("fit_intercept", False)))
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"features must have {d} columns. Found shape {X.shape}.")
        scores = self.model_rows(X) @ W.T
        classes = artifact.meta.get("classes")
        if classes is None:
            return scores[:, 0]
        labels = np.asarray(classes)
        if W.shape[0] == 1:
            return labels[(scores[:, 0] > 0).astype(int)]
        return labels[np.argmax(scores, axis=1)]

    def summary(self, artifact: Artifact) -> dict[str, Any]:
        m = artifact.meta
        mech = self.mechanism
        states = self.states(artifact)
        beta = self._joint([st.residual_bound for st in states])
        exact = mech.noise == "none"
        out = {
            "mechanism": self.name,
            "guarantee": mech.guarantee,
            "epsilon": 0.0 if exact else float(mech.epsilon),
            "delta": 0.0 if exact or mech.noise == "laplace" else float(mech.delta),
            "n": int(m["n"]),
            "residual_bound": beta,
            "budget": float(mech.budget),
            "budget_left": 0.0 if exact else max(float(mech.budget) - beta, 0.0),
            "epsilon_spent": 0.0 if exact else float(epsilon_spent(beta, mech.sigma, mech.delta, mech.noise,
                                                                   calibration=mech.calibration)),
            "removals_since_training": max(st.removals_since_training for st in states),
            "retrainings": sum(st.retrainings for st in states),
            "bound": mech.bound, "calibration": mech.calibration, "solver": m.get("solver", mech.solver),
        }
        if len(states) > 1:
            out["binary_models"] = len(states)
        return out


def _public_certificate(cert: dict[str, Any]) -> dict[str, Any]:
    """A certificate as the service stores and shows it: without row positions (they would identify a removed record
    to anyone who knows the data's order)."""
    out = {k: v for k, v in cert.items() if k != "removed_indices"}
    if isinstance(out.get("per_class"), list):
        out["per_class"] = [None if c is None else _public_certificate(c) for c in out["per_class"]]
    return out


def _labels_like(classes: list[Any], y: np.ndarray) -> np.ndarray:
    """The stored class labels as an array comparable with ``y``."""
    if y.dtype.kind in "iufb":
        return np.asarray(classes, dtype=np.float64)
    return np.asarray([str(c) for c in classes])


def _check_count(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ArtifactError(f"{name} must be an integer >= 0. Found {v!r}.")


def _check_beta(beta: Any) -> float:
    if not isinstance(beta, int | float) or isinstance(beta, bool) or not math.isfinite(beta) or beta < 0:
        raise ArtifactError(f"the residual bound must be a finite number >= 0. Found {beta!r}.")
    return float(beta)


def certified_removal_states(meta: dict[str, Any], arrays: dict[str, np.ndarray], d: int | None) -> list[float]:
    """Validate the certified-removal state(s) of an artifact; return the residual bound β_k of each binary model.

    Format 1 (one binary model, its fields in the metadata) and format 2 (``states``: one entry per binary model of
    a one-vs-all model, ``w`` and ``b`` of shape (K, d') or (d',)); d' is the dataset's d, or d + 1 with an intercept
    column."""
    states = meta.get("states")
    if states is None:
        w = finite_array(arrays, "w", d)
        finite_array(arrays, "b", w.shape[0])
        for k in ("removals_since_training", "retrainings"):
            _check_count(k, meta.get(k))
        return [_check_beta(meta.get("residual_bound"))]
    if not isinstance(states, list) or not states:
        raise ArtifactError(f"the state list must be a non-empty list. Found {type(states).__name__}.")
    W, B = arrays.get("w"), arrays.get("b")
    if W is None or B is None:
        raise ArtifactError("arrays 'w' and 'b' are required.")
    K = len(states)
    ok_shape = W.dtype == np.float64 and B.dtype == np.float64 and W.shape == B.shape and (
        (W.ndim == 1 and K == 1) or (W.ndim == 2 and W.shape[0] == K))
    width = W.shape[-1] if W.ndim >= 1 else -1
    if not ok_shape or (d is not None and width not in (d, d + 1)):
        raise ArtifactError(f"arrays 'w' and 'b' must be float64 of equal shape ({K}, {d}) or ({K}, {d}+1). "
                            f"Found {W.dtype} {W.shape} and {B.dtype} {B.shape}.")
    if not (np.all(np.isfinite(W)) and np.all(np.isfinite(B))):
        raise ArtifactError("arrays 'w' and 'b' hold non-finite values.")
    betas = []
    for st in states:
        if not isinstance(st, dict):
            raise ArtifactError("each state must be an object.")
        for k in ("removals_since_training", "retrainings"):
            _check_count(k, st.get(k))
        n_k = st.get("n")
        if isinstance(n_k, bool) or not isinstance(n_k, int) or n_k < 1:
            raise ArtifactError(f"a state's record count n must be an integer >= 1. Found {n_k!r}.")
        betas.append(_check_beta(st.get("residual_bound")))
    return betas

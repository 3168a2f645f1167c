"""Curator adapter ``released-logistic``: published models are private releases (issue 26, part 3).

Listed in the registry of families (:mod:`lethe.families`), which imports it when the mechanism is used. Every
version the service publishes of such a model is a release of :mod:`lethe.release`: the secret, unperturbed centre
w̃ (the regularised minimiser on the current records, maintained by certified Newton removals with ``residual_cap``)
plus FRESH Gaussian noise, calibrated so that the whole sequence of at most ``horizon`` releases is (ε, δ)-DP for
every record — deleted, pending or kept — against an observer of every published release and every prediction
(docs/release_privacy.md). Predictions are served from the release only (the public array ``w``); the centre is a
secret array, never returned.

Cadence: a release is due when ``cadence`` (K) removal steps are pending (a batch of m deletions is one step, as in
:meth:`lethe.release.ReleasedLogisticRegression.remove`), OR — with ``cadence_seconds`` (T) — when T seconds have
passed since the last release and at least one step is pending. A batch whose step makes a release due publishes it;
otherwise it publishes a version whose public weights are the previous release's (no new noise is spent), and its
records are reflected in the next release: the K-th step's batch, or the worker's tick once T seconds have passed
(:meth:`ReleasedLogisticAdapter.release_due`, :meth:`ReleasedLogisticAdapter.release`), even without a new batch.
Each release counts once in the accountant whatever made it due: the horizon bounds the number of releases, not the
clock.

Schedule (``schedule``): ``"steps"`` (the default, the rules above) makes the release times a function of when
removal steps happen, and a removal step happens only when a request finds a record: an observer who knows every
other request can tell from the release times (and version numbers) that a held record was deleted, and when —
which the (ε, δ) of the releases' *contents* does not cover. ``"clock"`` (needs ``cadence_seconds``) releases every
T seconds whatever happened, pending steps or not, and no batch ever makes a release due: the schedule is a
function of the clock alone, and the whole published sequence — contents, times and the release number a
model-reader sees — is covered (docs/release_privacy.md §3). The time rule reads the adapter's ``clock`` (seconds;
the service injects its own, tests a fake one).
The accountant (releases used of the horizon, ε spent at δ) is kept in the artifact's metadata, so it is durable
with the model, and copied into the version's summary (console, ``/metrics``, ``lethe budget``).

Horizon spent (documented alternative to a refusal that would leave the record in the data; the estimator's
``remove(at_horizon="withhold")``): the removal is still carried out on the secret centre, but no release is drawn
and the certificate says ``published: false, horizon_spent: true``. The last release was computed with the removed
record, so the version is **withdrawn** (``withdrawn: true`` in its summary and certificate): model-readers are
refused its weights and predictions
(:meth:`lethe.curator.serving.Serving.check_served`), operators see a fault in ``lethe status`` and the health page
(:meth:`lethe.curator.serving.Serving.verify_models`), and the data subject's text says the published model still
held the record until it was withdrawn. To publish again, retrain: a new stream, composed with the old one's in the
dataset's privacy ledger (:mod:`lethe.curator.lifetime`), refused if it would pass the dataset's lifetime budget.

Noise: every release draws its noise from the operating system's CSPRNG (:func:`release_noise`, the estimator's
own draw: the adapter publishes through the estimator); the service
refuses a seed for this mechanism (issue 36: a seeded stream's noise can be regenerated and subtracted).

Correlated noise (issue 39, opt-in): ``noise_mechanism="tree"`` (or ``"auto"``, chosen from the public parameters
as the library does) publishes through :class:`lethe.privacy.tree.TreeRelease`, whose state (the noisy release 0,
the refined nodes and the few true centres later nodes need) is kept in the artifact's secret arrays
(:data:`lethe.release.tree_stream.TREE_ARRAYS`); the ledger is :class:`lethe.release.tree_stream.TreeStreamAccountant`,
the premises ``gram_cap`` (checked at training by the estimator) and ``rows_per_release`` (a batch that would remove
more rows since the last release is refused, nothing changed: set it to at least ``cadence`` × the batch size).

The decisions are the library's, by the same code: every removal and release restores the version's stream as
:class:`lethe.release.ReleasedLogisticRegression` (:meth:`~lethe.release.ReleasedLogisticRegression.restore`: the
state checked as a loaded file is, the centre re-measured from the records) and calls its ``remove`` (n_floor,
``rows_per_release``, the horizon, the Newton step, the noise, the tree) or ``release``; the service passes only what
its schedule decides (``publish=``: the count rule, the time rule, or never under ``"clock"``) and
``at_horizon="withhold"``. The artifact's layout, certificates and summaries are the service's, read from the
estimator's state (:meth:`~lethe.release.ReleasedLogisticRegression.stream_state`).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from lethe.curator.adapters import MechanismAdapter
from lethe.curator.artifacts import Artifact, ArtifactError, finite_array
from lethe.curator.public import OBSERVER_RELEASES
from lethe.release.estimator import release_noise  # the one noise draw of every release (re-exported here)

__all__ = ["SCHEDULE_REVEALS", "ReleasedLogisticAdapter", "check_released_logistic", "release_noise"]


#: What each schedule's release times (and the release number a model-reader is told) reveal, in plain words, carried
#: by every certificate and summary of a released model (docs/release_privacy.md §3).
SCHEDULE_REVEALS: dict[str, str] = {
    "steps": ("when a held record's deletion was processed (not whose): releases follow removal steps, and a request "
              "makes a step only if its record was held"),
    "clock": "nothing about the records: releases follow the clock alone",
}


class ReleasedLogisticAdapter(MechanismAdapter):
    """Binary logistic regression published only through releases (:class:`lethe.release.ReleasedLogisticRegression`).

    Parameters (JSON): ``lam`` (λ), ``epsilon``, ``delta`` (of the whole sequence), ``horizon`` (T, releases the
    budget covers, release 0 at training included), ``cadence`` (K: a release every K removal steps),
    ``residual_cap`` (β_cap), ``n_floor`` ("auto" or a public lower bound on the rows), ``solver``, ``tol``,
    ``max_iter``, ``noise_mechanism`` ("fresh", "tree" or "auto"), ``gram_cap``, ``rows_per_release`` (the tree's
    premises; :class:`lethe.release.ReleasedLogisticRegression`). Rows must have ‖x‖ ≤ 1 (register the dataset with
    ``--normalize rows``).
    """

    name = "released-logistic"
    keeps_schedule = True

    @classmethod
    def check_artifact(cls, artifact: Artifact, n_features: int | None, params: dict[str, Any] | None) -> None:
        """:func:`check_released_logistic`: the centre and the release finite, the accountant
        consistent with the parameters, the counts coherent."""
        check_released_logistic(artifact.meta, artifact.arrays, n_features, params)
    secret_arrays = ("centre", "tree_first", "tree_nodes", "tree_centres")
    #: the service refuses ``random_state`` (``--seed``) for this mechanism: its noise is the privacy (issue 36)
    refuses_seed = True
    _DEFAULTS: ClassVar[dict[str, Any]] = {
        "lam": 1e-2, "epsilon": 1.0, "delta": 1e-5, "horizon": 1000, "cadence": 1, "residual_cap": 0.01,
        "n_floor": "auto", "solver": "auto", "tol": None, "max_iter": 2000, "cadence_seconds": None,
        "schedule": "steps", "noise_mechanism": "fresh", "gram_cap": None, "rows_per_release": None,
    }
    #: parameters of the service's publication schedule, not of the estimator
    _SCHEDULE: ClassVar[tuple[str, ...]] = ("cadence_seconds", "schedule")

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.clock: Callable[[], float] = time.time  # the time rule's clock (seconds); the service injects its own

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        from lethe.release import ReleasedLogisticRegression

        full = cls._with_defaults(params, cls._DEFAULTS)
        T = full["cadence_seconds"]
        if T is not None and (isinstance(T, bool) or not isinstance(T, int | float)):
            raise TypeError(f"cadence_seconds must be a number of seconds or None. Found {type(T).__name__}.")
        if T is not None and not (math.isfinite(T) and T > 0):
            raise ValueError(f"cadence_seconds must be a finite number > 0 (or None: no time rule). Found {T!r}.")
        if full["schedule"] not in ("steps", "clock"):
            raise ValueError(f"schedule must be 'steps' or 'clock'. Found {full['schedule']!r}.")
        if full["schedule"] == "clock" and T is None:
            raise ValueError("schedule 'clock' releases every cadence_seconds; cadence_seconds must be a number of "
                             "seconds > 0. Found None.")
        ReleasedLogisticRegression(**cls._estimator_params(full))._check_params()
        return full

    @classmethod
    def _estimator_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if k not in cls._SCHEDULE}

    def _due(self, meta: dict[str, Any], pending: int, now: float) -> bool:
        """A release is due: K steps pending, or T seconds since the last release with at least one step pending. Under
        the ``"clock"`` schedule a batch never makes a release due (the tick does: :meth:`release_due`)."""
        if self.params["schedule"] == "clock":
            return False
        if pending >= int(self.params["cadence"]):
            return True
        T = self.params["cadence_seconds"]
        released_at = meta.get("released_at")
        return (T is not None and pending >= 1 and released_at is not None
                and now - float(released_at) >= float(T))

    # -- helpers ----------------------------------------------------------------------------------------------------
    @staticmethod
    def _signs(y: np.ndarray, classes: list[Any]) -> np.ndarray:
        y = np.asarray(y)
        cls = np.asarray(classes, dtype=y.dtype if y.dtype.kind not in "iufb" else np.float64)
        bad = ~np.isin(y, cls)
        if np.any(bad):
            raise ValueError("Labels must be one of the 2 classes seen at training. Found a new label.")
        return np.where(y == cls[1], 1.0, -1.0)

    def _mechanism(self, X: np.ndarray, solver: str | None = None) -> Any:
        from lethe.certified.mechanism import CertifiedRemoval

        p = self.params
        mech = CertifiedRemoval(loss="logistic", lam=float(p["lam"]), residual_cap=float(p["residual_cap"]),
                                tol=p["tol"], max_iter=int(p["max_iter"]), solver=p["solver"], bound="tight",
                                calibration="analytic")
        return mech.resolved(X, solver=solver) if solver is not None else mech.resolved(X)

    @staticmethod
    def _state_meta(st: Any) -> dict[str, Any]:
        return {"n": int(st.n), "residual_bound": float(st.residual_bound), "x_norm_bound": float(st.x_norm_bound),
                "removals_since_training": int(st.removals_since_training), "retrainings": int(st.retrainings),
                "train_iterations": int(st.train_iterations)}

    def _certificate(self, acc: Any, meta: dict[str, Any], *, published: bool, n_removed: int,
                     operation: str) -> dict[str, Any]:
        from lethe.release import GUARANTEE
        from lethe.release.tree_stream import TreeStreamAccountant, tree_certificate_fields

        cert = self._fresh_certificate(acc, meta, published=published, n_removed=n_removed, operation=operation,
                                       guarantee=GUARANTEE)
        if isinstance(acc, TreeStreamAccountant):
            cert.update(tree_certificate_fields(acc, max(int(meta["release_version"]), 0)))
        return cert

    def _fresh_certificate(self, acc: Any, meta: dict[str, Any], *, published: bool, n_removed: int,
                           operation: str, guarantee: str) -> dict[str, Any]:
        return {"operation": operation, "observer": OBSERVER_RELEASES, "guarantee": guarantee,
                "theorem": "docs/release_privacy.md", "noise": "gaussian", "epsilon": acc.epsilon,
                "delta": acc.delta, "horizon": acc.horizon, "cadence": int(self.params["cadence"]),
                "cadence_seconds": self.params["cadence_seconds"], "schedule": self.params["schedule"],
                "schedule_reveals": SCHEDULE_REVEALS[self.params["schedule"]],
                "sigma": acc.sigma, "epsilon_spent": acc.epsilon_spent(), "releases": acc.releases,
                "published": published, "horizon_spent": bool(meta["horizon_spent"]),
                "residual_bound": meta["state"]["residual_bound"], "n_removed": n_removed,
                "n_remaining": meta["state"]["n"], "retrained": False, "noise_source": "os-csprng",
                "withdrawn": _withdrawn(acc, meta, self.params["schedule"])}

    # -- the adapter contract ---------------------------------------------------------------------------------------
    def train(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        from lethe.release import ReleasedLogisticRegression

        # the release noise comes from the OS CSPRNG, never from ``rng`` (a seed would make it subtractable)
        est = ReleasedLogisticRegression(**self._estimator_params(self.params), random_state=None).fit(X, y)
        rel = est.release_
        acc = est.accountant_
        state = est.state_
        meta = {"mechanism": self.name, "classes": [c.item() if hasattr(c, "item") else c for c in est.classes_],
                "accountant": acc.to_dict(), "pending": 0, "release_version": rel.version,
                "released_at": float(self.clock()),
                "n_floor": int(est.n_floor_), "solver": est.mechanism_.solver, "horizon_spent": False,
                "state": self._state_meta(state), "n": int(state.n), "stream": uuid.uuid4().hex}
        arrays = {"centre": np.array(state.w, dtype=np.float64), "w": np.array(rel.coef, dtype=np.float64)}
        tree = est.stream_state()["tree"]
        if tree is not None:  # the tree's state (lethe.release.tree_stream); the release is its vector
            tree_arrays, meta["tree"] = tree
            arrays.update(tree_arrays)
            meta["rows_pending"] = 0
        artifact = Artifact(arrays=arrays, meta=meta)
        return artifact, self._certificate(acc, meta, published=True, n_removed=0, operation="train")

    def stream(self, artifact: Artifact, X: np.ndarray | None = None,
                y: np.ndarray | None = None) -> Any:
        """The version's stream as the library's estimator (:meth:`lethe.release.ReleasedLogisticRegression.restore`),
        over the records (X, y) it is for — or, without them, a stream that can only publish. A state that fails the
        estimator's checks (e.g. a centre whose residual, re-measured from the records, exceeds its recorded bound:
        the version does not belong to these records) is refused with :class:`ArtifactError`."""
        from lethe.release import ReleasedLogisticRegression

        m, a = artifact.meta, artifact.arrays
        state = {"centre": a["centre"], "state": m["state"], "accountant": m["accountant"], "n_floor": m["n_floor"],
                 "solver": m["solver"], "pending": m["pending"], "rows_pending": m.get("rows_pending", 0),
                 "horizon_spent": m["horizon_spent"], "release": {"version": m["release_version"], "coef": a["w"]},
                 "tree": (a, m["tree"]) if "tree" in m else None}
        try:
            return ReleasedLogisticRegression.restore(self._estimator_params(self.params), state, X, y,
                                                      classes=m["classes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"{exc}: the version does not belong to these records; refusing to publish from "
                                "it.") from None

    def _artifact(self, artifact: Artifact, est: Any, now: float) -> Artifact:
        """The version after a call of the estimator: its state (:meth:`ReleasedLogisticRegression.stream_state`)
        in the artifact's layout; the published ``w`` and the tree's state change only with a release."""
        st = est.stream_state()
        m = artifact.meta
        published = st["release"]["version"] != int(m["release_version"])
        meta = {**m, "accountant": st["accountant"], "pending": st["pending"],
                "release_version": st["release"]["version"], "horizon_spent": st["horizon_spent"],
                "state": st["state"], "n": st["state"]["n"],
                "released_at": now if published else m.get("released_at")}
        arrays = {**artifact.arrays, "centre": st["centre"]}
        if published:
            arrays["w"] = st["release"]["coef"]
        if st["tree"] is not None:
            meta["rows_pending"] = st["rows_pending"]
            if published:
                arrays.update(st["tree"][0])
                meta["tree"] = st["tree"][1]
        return Artifact(arrays=arrays, meta=meta)

    def remove(self, artifact: Artifact, X: np.ndarray, y: np.ndarray, indices: np.ndarray,
               rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        """Remove the rows ``indices`` of the current records (X, y) as one removal step, through the library's
        :meth:`~lethe.release.ReleasedLogisticRegression.remove` on the restored stream (:meth:`stream`): n_floor,
        ``rows_per_release``, the horizon, the centre's Newton step, the noise and the tree are the library's.
        The service's schedule decides whether the step publishes (``publish=``: the count rule, the time rule, or
        never under the clock schedule) and, at the horizon, withholds (``at_horizon="withhold"``: module
        docstring)."""
        m = artifact.meta
        X = np.ascontiguousarray(X, dtype=np.float64)
        self._signs(y, m["classes"])  # a new label is the caller's error, before the state is checked
        idx = np.asarray(indices, dtype=np.int64)
        n = X.shape[0]
        if idx.size == 0 or np.unique(idx).size != idx.size or idx.min() < 0 or idx.max() >= n:
            raise ValueError(f"indices must be distinct rows of the {n} current records.")
        if n != int(m["state"]["n"]):
            raise ValueError(f"The model holds {m['state']['n']} records; the data given has {n}.")
        est = self.stream(artifact, X, y)
        now = float(self.clock())
        est.remove(idx, publish=self._due(m, int(m["pending"]) + 1, now), at_horizon="withhold")
        out = self._artifact(artifact, est, now)
        acc = est.accountant_
        return out, self._certificate(acc, out.meta, published=out.meta["release_version"] != m["release_version"],
                                      n_removed=int(idx.size), operation="remove")

    def release_due(self, summary: dict[str, Any], now: float) -> bool:
        """Whether the time rule makes a release due now, read from a published version's summary (public numbers:
        no artifact is opened): ``cadence_seconds`` set, at least one removal step pending, T seconds passed since
        the last release, and a release left in the horizon (past it, pending steps stay unpublished as documented
        in the module docstring; the count rule's batch records ``horizon_spent``)."""
        T = self.params["cadence_seconds"]
        released_at = summary.get("released_at")
        if self.params["schedule"] == "clock":  # every T seconds, whatever happened: a data-independent schedule
            return bool(int(summary.get("releases_left") or 0) > 0 and released_at is not None
                        and now - float(released_at) >= float(T))
        return bool(T is not None and int(summary.get("pending_removals") or 0) >= 1
                    and int(summary.get("releases_left") or 0) > 0 and released_at is not None
                    and now - float(released_at) >= float(T))

    def release(self, artifact: Artifact, rng: np.random.Generator) -> tuple[Artifact, dict[str, Any]]:
        """Publish a release of the pending removal steps now (the time rule; no new removal): the centre plus fresh
        Gaussian noise, counted once in the accountant. Refused (``ValueError``, nothing changes) when no step is
        pending (under the ``"steps"`` schedule; the ``"clock"`` schedule releases with none pending) or the horizon
        is spent."""
        m = artifact.meta
        pending = int(m["pending"])
        if pending < 1 and self.params["schedule"] != "clock":
            raise ValueError(f"A release publishes pending removal steps; pending steps must be >= 1. Found {pending}.")
        est = self.stream(artifact)  # publish-only: a release needs no records
        est.release()  # the library's: BudgetExceededError (a ValueError) past the horizon, nothing changed
        out = self._artifact(artifact, est, float(self.clock()))
        return out, self._certificate(est.accountant_, out.meta, published=True, n_removed=0, operation="release")

    def predict(self, artifact: Artifact, X: np.ndarray) -> np.ndarray:
        w = artifact.arrays["w"]  # the release only; never the centre
        if X.ndim != 2 or X.shape[1] != w.shape[0]:
            raise ValueError(f"features must have {w.shape[0]} columns. Found shape {X.shape}.")
        classes = artifact.meta["classes"]
        return np.where(X @ w > 0.0, classes[1], classes[0])

    def summary(self, artifact: Artifact) -> dict[str, Any]:
        from lethe.release.tree_stream import TreeStreamAccountant, accountant_from_dict, tree_certificate_fields

        m = artifact.meta
        acc = accountant_from_dict(m["accountant"])
        out = self._summary(acc, m)
        out["noise_mechanism"] = "fresh"
        if isinstance(acc, TreeStreamAccountant):  # this release's std, μ, the premises (public numbers)
            tree = tree_certificate_fields(acc, max(int(m["release_version"]), 0))
            tree.pop("guarantee")
            out.update(tree)
        return out

    def _summary(self, acc: Any, m: dict[str, Any]) -> dict[str, Any]:
        return {"mechanism": self.name, "observer": OBSERVER_RELEASES, "epsilon": acc.epsilon, "delta": acc.delta,
                "epsilon_spent": acc.epsilon_spent(), "releases": acc.releases, "horizon": acc.horizon,
                "releases_left": acc.remaining, "cadence": int(self.params["cadence"]),
                "cadence_seconds": self.params["cadence_seconds"], "schedule": self.params["schedule"],
                "schedule_reveals": SCHEDULE_REVEALS[self.params["schedule"]],
                "released_at": m.get("released_at"),
                "pending_removals": int(m["pending"]), "release_version": int(m["release_version"]),
                "horizon_spent": bool(m["horizon_spent"]), "sigma": acc.sigma, "n": int(m["state"]["n"]),
                "n_floor": int(m["n_floor"]), "residual_bound": float(m["state"]["residual_bound"]),
                "retrainings": int(m["state"]["retrainings"]), "sensitivity": acc.sensitivity,
                "stream": m.get("stream"), "withdrawn": _withdrawn(acc, m, self.params["schedule"])}

    def centre_residual(self, artifact: Artifact, X: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
        """(‖g̃‖, a, β): the secret centre's residual re-measured on the records (X, y) it should be the minimiser for
        (:func:`lethe.release.measured_centre_residual`, within ±a), and the bound β the version records. ‖g̃‖ − a > β
        says the centre is not the model of these records (e.g. a removal that did not forget its record): the check
        every removal makes before publishing, exposed for the audit (:mod:`lethe.release.audit`)."""
        from lethe.release import measured_centre_residual

        X = np.ascontiguousarray(X, dtype=np.float64)
        Y = self._signs(y, artifact.meta["classes"])
        centre = np.array(artifact.arrays["centre"], dtype=np.float64)
        g_norm, allowance = measured_centre_residual(self._mechanism(X, solver=artifact.meta["solver"]), centre, X, Y)
        return g_norm, allowance, float(artifact.meta["state"]["residual_bound"])


def _withdrawn(acc: Any, meta: dict[str, Any], schedule: str) -> bool:
    """Whether the version must not be served to model-readers (issue 36; the service withdraws it: model-readers
    are refused, operators see a fault, the requester is told ``published: false``).

    ``"steps"``: the horizon is spent and a removal step is pending — it can never be published, so the last release
    holds a record deleted since. ``"clock"``: the horizon is spent, whatever is pending — withdrawing only when a
    step is pending would tell a model-reader that a held record was deleted, which the clock schedule hides; so a
    clock stream is withdrawn at its last release (its horizon serves T − 1 intervals of cadence_seconds)."""
    if acc.remaining > 0:
        return False
    return schedule == "clock" or int(meta["pending"]) >= 1


def check_released_logistic(meta: dict[str, Any], arrays: dict[str, np.ndarray], d: int | None,
                             params: dict[str, Any] | None) -> None:
    """A ``released-logistic`` state (:class:`ReleasedLogisticAdapter`): the secret centre and the public
    release, finite float64 vectors of one width (d, or d + 1 with an intercept); with the (authenticated)
    parameters, the release stream's invariants of :func:`lethe.release.check_release_state` — accountant for the
    parameters' (ε, δ, T) with the sensitivity recomputed from them and σ ≥ the calibrated σ, β ≤ β_cap, counts."""
    centre = finite_array(arrays, "centre", None)
    width = centre.shape[0]
    if d is not None and width not in (d, d + 1):
        raise ArtifactError(f"array 'centre' must have {d} or {d + 1} entries. Found {width}.")
    finite_array(arrays, "w", width)
    if params is None:
        return
    from lethe.release import check_release_state

    version = meta.get("release_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ArtifactError(f"the release version must be an integer >= 0. Found {version!r}.")
    try:
        check_release_state(params, accountant=meta.get("accountant"), state=meta.get("state"),
                            n_floor=meta.get("n_floor"), n=meta.get("n"), releases=version + 1,
                            # the clock schedule lets steps pend across any number of batches (no count rule)
                            pending=None if params.get("schedule") == "clock" else meta.get("pending"),
                            horizon_spent=meta.get("horizon_spent"))
        _check_tree_state(meta, arrays, version)
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"the release state is invalid: {exc}") from None


def _check_tree_state(meta: dict[str, Any], arrays: dict[str, np.ndarray], version: int) -> None:
    """A tree stream's state (``ValueError``): what the ledger's releases leave
    (:meth:`lethe.privacy.tree.TreeRelease.from_state`), the published ``w`` its latest release recomputed from
    the noisy nodes, and the rows removed since within ``rows_per_release``. Nothing for fresh noise (and a tree
    state beside a fresh ledger is refused)."""
    from lethe.release.tree_stream import TREE_ARRAYS, TreeStreamAccountant, accountant_from_dict, restore_tree

    acc = accountant_from_dict(meta["accountant"])
    if not isinstance(acc, TreeStreamAccountant):
        if "tree" in meta or any(k in arrays for k in TREE_ARRAYS):
            raise ValueError("a fresh-noise stream holds a tree's state.")
        return
    tree = restore_tree(acc, arrays, meta.get("tree"))
    if tree.releases != acc.releases or version != acc.releases - 1:
        raise ValueError(f"the tree holds {tree.releases} releases, the ledger {acc.releases}.")
    if not np.array_equal(arrays["w"], tree.released(version)):
        raise ValueError("the published weights are not the tree's latest release.")
    rows = meta.get("rows_pending")
    if isinstance(rows, bool) or not isinstance(rows, int) or not 0 <= rows <= acc.rows_per_release:
        raise ValueError(f"rows removed since the last release must be an integer in [0, rows_per_release = "
                         f"{acc.rows_per_release}]. Found {rows!r}.")

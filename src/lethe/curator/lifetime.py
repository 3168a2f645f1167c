"""The privacy ledger of each dataset: every release of every model trained on its records, composed exactly
(issue 36).

A record held throughout a deployment meets every release of every private-release stream trained on its
dataset: several models, retrains (each a new stream), horizon renewals. The store keeps one row per stream
(:class:`lethe.curator.store.PrivacyStream`: μ₁ of one release, its horizon, the releases published) and the
dataset's lifetime budget (:class:`lethe.curator.store.PrivacyBudget`). The lifetime ε at the budget's δ is the
exact μ-GDP composition of every release (:mod:`lethe.privacy.lifetime`):

* **spent**: μ = √(Σ_s k_s μ₁,s²) over the releases published so far;
* **committed**: the same with every OPEN stream counted at its whole horizon (T_s releases) — what the dataset's
  records are exposed to if every live model publishes all the releases its certificate allows.

The budget is checked on the committed figure when a stream is opened (a training or retraining of a released
model): a stream that could pass the budget is refused before anything is published, naming the budget and what it
would take; a release within an open stream can then never pass it (its horizon was reserved). Retraining closes
the old stream at the releases it published, so its unused horizon is given back.

What counts, and what does not (docs/release_privacy.md §8):

* every release of a model with private releases (:attr:`lethe.families.Capability.PRIVATE_RELEASES`): training,
  removal steps that publish, the clock or time rule;
* exports (``lethe model export``, ``GET /v1/models/{m}``) and predictions are post-processing of releases: free;
* models whose certificates cover ONE published version (every other family)
  are served to operators only, who hold the data: they publish nothing to model-readers and are not in the
  composition. A model served by the operator's opt-in (``--serve-unreleased``) has no membership guarantee for
  the sequence at all; it is listed as ``uncovered`` beside the lifetime ε, which does not cover it.

**Tree streams** (``noise_mechanism`` "tree", issue 39). A tree stream's releases share noise: its whole horizon is
μ_T-GDP with μ_T = 1/σ_BW(ε, δ) (:class:`lethe.release.tree_stream.TreeStreamAccountant`), for a record held
throughout or deleted at any release (the accountant maximises over the deletion time). The store keeps μ_T in
``mu`` and marks the stream's ``mechanism`` with :data:`TREE_STREAM`; the composition counts it as ONE μ_T-GDP
mechanism from its first release on (:func:`stream_pair`) — spent and committed alike, an upper bound on its exact
prefix μ_k ≤ μ_T (the library's certificates state μ_k). Composing it with the other streams is sound: every
release of every stream is a Gaussian mechanism on the record whose sensitivity bound is fixed by the public
schedule and the pair of worlds, so the interleaved sequence is an adaptive composition of Gaussian mechanisms,
μ-GDP with μ² the sum of their μᵢ² (Dong, Roth & Su 2019, Cor 3.3) ≤ Σ_fresh k_s μ₁,s² + Σ_tree μ_T,s². A fresh
stream's T releases give T μ₁² = 1/σ_BW(ε, δ)² = μ_T²: a stream's whole horizon costs the same under both
mechanisms, so :func:`check_stream` needs no change.

The service's count of releases is the stream's ``releases``: a version whose artifact records fewer (an older
artifact restored, a rolled-back file) is refused for publication (:func:`record_releases`) and shown as a fault.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import select

from lethe.curator.errors import InvalidInputError
from lethe.curator.store import Dataset, Model, PrivacyBudget, PrivacyStream, utcnow

__all__ = ["DEFAULT_LIFETIME_DELTA", "DEFAULT_LIFETIME_EPSILON", "LifetimeBudgetError", "ReleaseCountError",
           "check_stream", "close_stream", "dataset_ledger", "ledger_of", "open_releases", "open_stream",
           "record_releases", "set_budget", "set_dataset_budget", "stream_mu", "stream_pair", "summary_fields"]

#: The default lifetime budget of a dataset: ε = 3 at δ = 1e-5 — three times the released model's default target
#: (ε = 1 per stream at δ = 1e-5): about 7 whole default streams, or many more retrains that stop early.
DEFAULT_LIFETIME_EPSILON = 3.0
DEFAULT_LIFETIME_DELTA = 1e-5


def _math() -> Any:
    """:mod:`lethe.privacy.lifetime`, imported when first needed: importing the ``lethe.privacy`` package loads
    scikit-learn, which a server whose store has no model need not import at start."""
    from lethe.privacy import lifetime as math_

    return math_


def gdp_epsilon(mu: float, delta: float) -> float:
    return float(_math().gdp_epsilon(mu, delta))


def gdp_mu(epsilon: float, delta: float) -> float:
    return float(_math().gdp_mu(epsilon, delta))


def lifetime_mu(streams: Any) -> float:
    return float(_math().lifetime_mu(streams))


#: The suffix of a tree stream's ``mechanism`` in the store (module docstring).
TREE_STREAM = "/tree"


def stream_pair(row: Any, releases: int) -> tuple[float, int]:
    """(μ, k) of a stream's ``releases`` releases for :func:`lifetime_mu`: k releases of μ₁ for fresh noise; a tree
    stream (:data:`TREE_STREAM`) is one μ_T-GDP mechanism from its first release on (module docstring)."""
    if str(row.mechanism).endswith(TREE_STREAM):
        return float(row.mu), 1 if int(releases) > 0 else 0
    return float(row.mu), int(releases)


class LifetimeBudgetError(InvalidInputError):
    """A training, retraining or release would let the lifetime ε of a record held throughout pass its dataset's
    lifetime budget; nothing was changed."""


class ReleaseCountError(RuntimeError):
    """A version's artifact records fewer releases than the service has published of its stream (a rollback)."""


def stream_mu(params: dict[str, Any]) -> float:
    """μ₁ of one release of a private-release stream, bounded from its parameters (ε, δ, T)."""
    return float(_math().stream_release_mu(float(params["epsilon"]), float(params["delta"]), int(params["horizon"])))


def budget(s: Any, dataset_id: int) -> tuple[float, float, bool]:
    """(ε, δ, set by the operator) of a dataset's lifetime budget."""
    row = s.get(PrivacyBudget, dataset_id)
    if row is None:
        return DEFAULT_LIFETIME_EPSILON, DEFAULT_LIFETIME_DELTA, False
    return float(row.epsilon), float(row.delta), True


def _streams(s: Any, dataset_id: int) -> list[PrivacyStream]:
    return list(s.scalars(select(PrivacyStream).where(PrivacyStream.dataset_id == dataset_id)
                          .order_by(PrivacyStream.id)))


def _committed(rows: list[PrivacyStream], *, closing: int | None = None) -> list[tuple[float, int]]:
    """(μ₁, releases) per stream, open streams at their whole horizon (``closing``: a model whose open stream is
    about to close at the releases it published)."""
    return [stream_pair(r, r.horizon if r.open and r.model_id != closing else r.releases) for r in rows]


def dataset_ledger(s: Any, dataset_id: int) -> dict[str, Any]:
    """The ledger of a dataset, public numbers only: the lifetime ε spent and committed at the budget's δ, the
    budget, the streams (model, releases of horizon, open), and the models outside the composition (served by
    opt-in)."""
    eps_b, delta, set_ = budget(s, dataset_id)
    rows = _streams(s, dataset_id)
    mu_spent = lifetime_mu(stream_pair(r, r.releases) for r in rows)
    mu_comm = lifetime_mu(_committed(rows))
    uncovered = sorted(s.scalars(select(Model.name).where(Model.dataset_id == dataset_id,
                                                          Model.serve_unreleased.is_(True))))
    return {"lifetime_epsilon": gdp_epsilon(mu_spent, delta), "lifetime_epsilon_committed": gdp_epsilon(mu_comm, delta),
            "lifetime_delta": delta, "lifetime_budget": eps_b, "lifetime_budget_set": set_,
            "lifetime_mu": mu_spent, "lifetime_releases": int(sum(r.releases for r in rows)),
            "streams": [{"model": r.model, "releases": r.releases, "horizon": r.horizon, "open": bool(r.open),
                         **({"mu_stream": r.mu, "noise_mechanism": "tree"} if str(r.mechanism).endswith(TREE_STREAM)
                            else {"mu_per_release": r.mu})} for r in rows],
            "uncovered": uncovered}


def summary_fields(s: Any, dataset_id: int) -> dict[str, Any]:
    """The ledger's headline numbers, for a model's budget, a certificate and /metrics."""
    led = dataset_ledger(s, dataset_id)
    return {k: led[k] for k in ("lifetime_epsilon", "lifetime_epsilon_committed", "lifetime_delta",
                                "lifetime_budget")}


def _refusal(what: str, ds_name: str, eps_new: float, eps_b: float, delta: float, others: list[tuple[float, int]],
             mu1: float, horizon: int) -> LifetimeBudgetError:
    room = gdp_mu(eps_b, delta) ** 2 - lifetime_mu(others) ** 2
    fits = max(0, math.floor(room / mu1 ** 2)) if mu1 > 0 else horizon
    return LifetimeBudgetError(
        f"{what} would make the lifetime epsilon of a record held throughout dataset {ds_name!r} "
        f"{eps_new:.4g} at delta = {delta:g} (every release of every model trained on it, this stream's whole "
        f"horizon of {horizon} releases counted), above its lifetime budget epsilon = {eps_b:g}. It would take a "
        f"lifetime budget of at least {eps_new:.4g} (lethe budget --dataset {ds_name} --set-epsilon "
        f"{math.ceil(eps_new * 100) / 100:g}), or a stream that fits what is left: a horizon of at most {fits} "
        f"releases at these parameters, or a smaller epsilon per stream. Nothing was changed.")


def check_stream(s: Any, dataset_id: int, model_id: int | None, params: dict[str, Any], *, what: str) -> None:
    """Refuse (:class:`LifetimeBudgetError`) a new stream with ``params`` on dataset ``dataset_id`` (replacing the
    open stream of ``model_id``, if given) if the committed lifetime ε would pass the dataset's budget."""
    ds = s.get(Dataset, dataset_id)
    ds_name = ds.name if ds is not None else str(dataset_id)
    eps_b, delta, _ = budget(s, dataset_id)
    mu1, horizon = stream_mu(params), int(params["horizon"])
    others = _committed(_streams(s, dataset_id), closing=model_id)
    eps_new = gdp_epsilon(lifetime_mu([*others, (mu1, horizon)]), delta)
    if eps_new > eps_b:
        raise _refusal(what, ds_name, eps_new, eps_b, delta, others, mu1, horizon)


def open_stream(s: Any, model: Model, summary: dict[str, Any], *, what: str) -> None:
    """Within the write transaction ``s``: open the stream of ``model``'s new version (a training or retraining of a
    released model; its first release already counted in ``summary["releases"]``), closing the model's open stream
    at the releases it published. Refused (:class:`LifetimeBudgetError`, the transaction rolls back) if the
    committed lifetime ε would pass the dataset's budget (:func:`check_stream`)."""
    check_stream(s, model.dataset_id, model.id, model.params, what=what)
    close_stream(s, model.id)
    mechanism, mu = model.mechanism, stream_mu(model.params)
    if summary.get("noise_mechanism") == "tree":  # one μ_T for the whole stream (module docstring), never below
        mechanism += TREE_STREAM                   # the accountant's own
        mu = max(gdp_mu(float(model.params["epsilon"]), float(model.params["delta"])), float(summary["mu"]))
    s.add(PrivacyStream(dataset_id=model.dataset_id, model_id=model.id, model=model.name, mechanism=mechanism,
                        mu=mu, horizon=int(model.params["horizon"]),
                        releases=int(summary.get("releases") or 1), open=True, started_at=utcnow()))
    s.flush()


def close_stream(s: Any, model_id: int) -> None:
    """Within ``s``: the model's open stream (if any) ends at the releases it published (retrained or dropped)."""
    for r in s.scalars(select(PrivacyStream).where(PrivacyStream.model_id == model_id,
                                                   PrivacyStream.open.is_(True))):
        r.open = False
        r.ended_at = utcnow()


def open_releases(s: Any, model_id: int) -> int | None:
    """The releases the service has published of the model's open stream (None: no stream)."""
    row = s.scalar(select(PrivacyStream).where(PrivacyStream.model_id == model_id, PrivacyStream.open.is_(True)))
    return None if row is None else int(row.releases)


def record_releases(s: Any, model_id: int, summary: dict[str, Any]) -> None:
    """Within the write transaction ``s`` that publishes a released model's new version with ``summary``: the
    store's count of the stream's releases follows the version's. Refused (:class:`ReleaseCountError`, nothing is
    published) if the version's count is behind the store's (an artifact rolled back to an older state) or jumps
    by more than one release."""
    if summary.get("releases") is None:
        return
    row = s.scalar(select(PrivacyStream).where(PrivacyStream.model_id == model_id, PrivacyStream.open.is_(True)))
    if row is None:
        return
    k = int(summary["releases"])
    if k < row.releases:
        raise ReleaseCountError(f"the version records {k} releases of its stream, fewer than the {row.releases} the "
                                "service has published: its artifact was rolled back; refusing to publish from it.")
    if k > row.releases + 1:
        raise ReleaseCountError(f"the version records {k} releases; the service has published {row.releases}: at "
                                "most one release per publication.")
    row.releases = k


def set_budget(s: Any, dataset_id: int, epsilon: float, delta: float) -> None:
    """Within ``s``: set a dataset's lifetime budget; refused (:class:`InvalidInputError`) below what is already
    committed (the live streams were opened under the old budget)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not (math.isfinite(epsilon)
                                                                                 and epsilon > 0):
        raise InvalidInputError(f"epsilon (--set-epsilon) must be a finite number > 0. Found {epsilon!r}.")
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 < delta < 1:
        raise InvalidInputError(f"delta (--set-delta) must be in (0, 1). Found {delta!r}.")
    committed = gdp_epsilon(lifetime_mu(_committed(_streams(s, dataset_id))), float(delta))
    if committed > epsilon:
        raise InvalidInputError(f"epsilon (--set-epsilon) must be at least the lifetime epsilon already committed "
                                f"by the dataset's streams, {committed:.4g} at delta = {delta:g}. Found {epsilon!r}.")
    row = s.get(PrivacyBudget, dataset_id)
    if row is None:
        s.add(PrivacyBudget(dataset_id=dataset_id, epsilon=float(epsilon), delta=float(delta), set_at=utcnow()))
    else:
        row.epsilon, row.delta, row.set_at = float(epsilon), float(delta), utcnow()


def ledger_of(store: Any, datasets: Any, dataset: str) -> dict[str, Any]:
    """The privacy ledger of the dataset named ``dataset`` (``lethe budget --dataset``)."""
    with store.read() as s:
        ds = datasets.find(s, dataset)
        return {"dataset": ds.name, **dataset_ledger(s, ds.id)}


def set_dataset_budget(store: Any, lock: Any, datasets: Any, dataset: str, epsilon: Any,
                       delta: Any = None) -> dict[str, Any]:
    """Set the lifetime budget of ``dataset`` (δ kept if None), under the processing lock (streams are opened under
    it), with a ledger event; refused below what the dataset's streams have already committed."""
    from lethe.curator.store import add_event

    with lock.hold(), store.write() as s, s.begin():
        ds = datasets.find(s, dataset)
        old_eps, old_delta, _ = budget(s, ds.id)
        new_delta = old_delta if delta is None else delta
        set_budget(s, ds.id, epsilon, new_delta)
        add_event(s, "lifetime_budget_set", {"dataset": ds.name, "epsilon": float(epsilon),
                                             "delta": float(new_delta), "was": [old_eps, old_delta]})
    return ledger_of(store, datasets, dataset)

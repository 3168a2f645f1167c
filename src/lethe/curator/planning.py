"""A plan for λ and σ on a registered dataset (``lethe plan --dataset NAME``, issue 27): the trade-off between
held-out accuracy and removals supported over a grid of λ and σ (:func:`lethe.planning.plan_lambda`), and
optionally σ for a number of removals (:func:`lethe.planning.plan_sigma`).

Choosing λ (or σ) from private rows leaks: the choice is a function of every row, deleted ones included, and no
removal certificate covers it (docs/tabular.md, "What choosing λ on private data costs"). So:

* accuracy is always measured on PUBLIC rows: a registered held-out dataset (``--heldout NAME``, by default the one a
  model of the dataset was trained with) or a file of public records encoded by the dataset's schema;
* ``rows="public"`` (the default) also trains the grid's models on those public rows (a held-out share of them
  scores): nothing private is touched, and the choice reveals nothing about the dataset's records. Removals are
  counted for a model of the public set's size; the dataset's model has more rows, and a removal usually costs
  less budget on more rows (Guo et al. 2020's residual bounds shrink with n), so the counts tend to the safe side;
* ``rows="private"`` trains on the dataset's current records (the removal capacity of the real model) and scores on
  the public rows: the output states the cost, as :func:`lethe.planning.plan_lambda` with ``data="private"`` does.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lethe.certified.adapter import CertifiedRemovalAdapter
from lethe.curator import dask_plane
from lethe.curator.audits import public_rows
from lethe.curator.dataplane import DataPlane
from lethe.curator.errors import InvalidInputError

if TYPE_CHECKING:
    from lethe.curator.service import Curator
    from lethe.planning import LambdaPlan, SigmaPlan

ROWS = ("public", "private")
#: Options of the curator's certified-removal models that are not the estimator's (the loss picks the class).
_NOT_ESTIMATOR = ("loss",)


@dataclass(frozen=True)
class DatasetPlan:
    """The plan of :func:`plan_dataset`; ``str()`` prints it (what it used, what it cost, the table)."""

    dataset: str
    n_records: int
    rows: str
    trained_on: str
    scored_on: str
    params: dict[str, Any]
    table: LambdaPlan
    best: Any = None
    min_removals: int | None = None
    sigma_plan: SigmaPlan | None = None
    cost: str | None = None
    heldout: str | None = None

    def __str__(self) -> str:
        lines = [f"Plan for dataset {self.dataset!r} ({self.n_records} records); model parameters "
                 f"{ {k: v for k, v in sorted(self.params.items())} }",
                 f"accuracy measured on: {self.scored_on} (public)",
                 f"models trained on: {self.trained_on}"]
        if self.cost:
            lines.append(f"cost: {self.cost}")
        lines.append(str(self.table))
        if self.min_removals is not None:
            if self.best is None:
                most = max(p.removals_supported for p in self.table.points)
                lines.append(f"no point of the grid supports {self.min_removals} removals (most: {most}); raise σ "
                             "or λ.")
            else:
                lines.append(f"most accurate point supporting {self.min_removals} removals: λ = {self.best.lam:g}, "
                             f"σ = {self.best.sigma:g} (accuracy {self.best.accuracy:.4f})")
        if self.sigma_plan is not None:
            p = self.sigma_plan
            lines.append(f"σ for {p.n_removals} removals at λ = {self.best.lam:g}: {p.sigma:.4g} (retraining rate "
                         f"measured {p.retraining_rate:.2f}, 95 % upper bound {p.retraining_rate_upper:.2f}; accuracy "
                         f"{p.accuracy:.4f}, without noise {p.accuracy_without_noise:.4f}, on a held-out share of the "
                         "rows it trained on)")
        if self.best is not None:
            sigma = self.sigma_plan.sigma if self.sigma_plan is not None else self.best.sigma
            lines.append(f"train with: lethe train {self.dataset} MODEL --lam {self.best.lam:g} --sigma {sigma:.4g}"
                         + (f" --heldout {self.heldout}" if self.heldout is not None else ""))
        return "\n".join(lines)


def plan_dataset(c: Curator, dataset: str, *, heldout: str | None = None, rows: str = "public",
                 lams: Any = (1e-2, 1e-3, 1e-4, 3e-5, 1e-5), sigmas: Any = (0.1, 1.0, 10.0),
                 max_removals: int | None = None, min_removals: int | None = None, plan_sigma: bool = False,
                 params: dict[str, Any] | None = None, epsilon: float = 1.0, delta: float = 1e-4,
                 validation_fraction: float = 0.2, random_state: Any = 0) -> DatasetPlan:
    """The λ/σ trade-off for a model of ``dataset`` (see the module docstring).

    Parameters
    ----------
    heldout : registered dataset name or file, optional
        The public validation rows (default: the held-out dataset a model of ``dataset`` was trained with).
    rows : {"public", "private"}
        What the grid's models train on.
    lams, sigmas, max_removals, epsilon, delta, validation_fraction :
        As in :func:`lethe.planning.plan_lambda` (``validation_fraction`` only with ``rows="public"``); by default
        ``max_removals`` scales with the rows the grid trains on (min(1000, rows // 5)) and the plan says so.
    min_removals : int, optional
        Also report the most accurate point supporting this many removals.
    plan_sigma : bool
        With ``min_removals``: size σ for that many removals at that point's λ (:func:`lethe.planning.plan_sigma`,
        on the same rows; it fits tens of models).
    params : dict, optional
        Other options of :class:`lethe.certified.estimators.CertifiedLogisticRegression`; a schema dataset's tabular
        defaults (an intercept; none for a Zarr dataset) apply where they do not say otherwise.
    """
    from lethe.certified.estimators import CertifiedLogisticRegression
    from lethe.planning import plan_lambda
    from lethe.planning import plan_sigma as _plan_sigma

    if rows not in ROWS:
        raise InvalidInputError(f"rows (--rows) must be one of {ROWS}. Found {rows!r}.")
    if plan_sigma and min_removals is None:
        raise InvalidInputError("plan_sigma (--plan-sigma) needs min_removals (--removals R). Found none.")
    params = dict(params or {})
    if params.get("loss", "logistic") != "logistic":
        raise InvalidInputError(f"loss must be 'logistic' for a plan (accuracy). Found {params.get('loss')!r}.")
    with c.store.read() as s:
        ds = c.datasets.find(s, dataset)
        tabular = ds.feature_names.get("schema") is not None
        plane = s.get(DataPlane, ds.id)
        zarr = plane is not None and dask_plane.is_zarr(plane.features_path)
        defaults = dict(CertifiedRemovalAdapter.tabular_defaults) if tabular else {}  # the family this plans
        try:
            params = dask_plane.row_options(defaults, params) if zarr else {**defaults, **params}
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        n_records = 0
        if rows == "private":
            _ids, X, y = c.datasets.current_data(s, ds.id, ds.n_features)
            X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
            n_records = int(X.shape[0])
        else:
            from sqlalchemy import func, select

            from lethe.curator.store import Record

            n_records = int(s.scalar(select(func.count()).select_from(Record).where(Record.dataset_id == ds.id))
                            or 0)
    pub = public_rows(c, dataset, heldout)
    options = {k: v for k, v in params.items() if k not in _NOT_ESTIMATOR}
    try:
        estimator = CertifiedLogisticRegression(**options)
    except TypeError as exc:
        raise InvalidInputError(f"params: {exc}") from None
    cost = None
    n_val = max(1, round(validation_fraction * pub.X.shape[0])) if rows == "public" else pub.X.shape[0]
    try:
        if rows == "public":
            trained_on = (f"{pub.source}: {pub.X.shape[0] - n_val} of "
                          f"its {pub.X.shape[0]} rows (the others score); nothing private is touched, and a model of "
                          f"the dataset's {n_records} records usually supports more removals than counted here")
            table = plan_lambda(pub.X, pub.y, data="public", lams=lams, sigmas=sigmas, estimator=estimator,
                                epsilon=epsilon, delta=delta, max_removals=max_removals,
                                validation_fraction=validation_fraction, random_state=random_state)
            Xs, ys = pub.X, pub.y
        else:
            trained_on = f"the dataset's {n_records} current (private) records"
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                table = plan_lambda(X, y, data="private", lams=lams, sigmas=sigmas, X_val=pub.X, y_val=pub.y,
                                    estimator=estimator, epsilon=epsilon, delta=delta, max_removals=max_removals,
                                    random_state=random_state)
            cost = " ".join(str(w.message) for w in caught if issubclass(w.category, UserWarning)) or None
            if plan_sigma:
                cost = (cost or "") + (" σ planned on the private rows depends on them in the same way (it sizes "
                                       "the noise from their removals).")
            Xs, ys = X, y
        best = None
        if min_removals is not None:
            ok = [p for p in table.points if p.removals_supported >= min_removals]
            best = table.best(min_removals) if ok else None
        sigma_plan = None
        if plan_sigma and best is not None:
            assert min_removals is not None
            sigma_plan = _plan_sigma(Xs, ys, n_removals=min_removals, epsilon=epsilon, delta=delta,
                                     estimator=estimator.set_params(lam=best.lam, sigma=best.sigma),
                                     random_state=random_state)
    except ValueError as exc:  # the options' names as the command line spells them
        msg = str(exc)
        for name, flag in (("max_removals", "--max-removals"), ("min_removals", "--removals")):
            if msg.startswith(name + " "):
                msg = f"{name} ({flag}){msg[len(name):]}"
        raise InvalidInputError(msg) from None
    return DatasetPlan(dataset=dataset, n_records=n_records, rows=rows, trained_on=trained_on,
                       scored_on=(f"{pub.source}, {n_val} of its {pub.X.shape[0]} rows" if rows == "public"
                                  else f"{pub.source}, {pub.X.shape[0]} rows"), params=params, table=table, best=best,
                       min_removals=min_removals, sigma_plan=sigma_plan, cost=cost,
                       heldout=pub.dataset)


def advise_dataset(c: Curator, dataset: str, *, heldout: str | None = None, expected_deletions: int | None = None,
                   observer: str = "one version", epsilon: float = 1.0, delta: float = 1e-4,
                   latency_target: float = 60.0, random_state: Any = 0) -> Any:
    """``lethe plan --advise`` (issue 37): :func:`lethe.planning.advise` on the dataset's current records (features
    as the dataset encodes them), scored on the public rows ``heldout`` (a registered dataset or a file) when given,
    else on a held-out share of the records; the code it prints is the ``lethe train`` command for ``dataset``.
    The advice depends on the records it reads (as a private plan does): give public rows to measure there."""
    from lethe.planning import advise

    with c.store.read() as s:
        ds = c.datasets.find(s, dataset)
        _ids, X, y = c.datasets.current_data(s, ds.id, ds.n_features)
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
    pub = public_rows(c, dataset, heldout) if heldout is not None else None
    try:
        return advise(X, y, expected_deletions=expected_deletions, observer=observer, epsilon=epsilon, delta=delta,
                      latency_target=latency_target, dataset=dataset, random_state=random_state,
                      X_public=None if pub is None else pub.X, y_public=None if pub is None else pub.y)
    except ValueError as exc:  # the options' names as the command line spells them
        msg = str(exc)
        for name, flag in (("expected_deletions", "--removals"), ("observer", "--observer"),
                           ("latency_target", "--latency-target")):
            if msg.startswith(name + " "):
                msg = f"{name} ({flag}){msg[len(name):]}"
        raise InvalidInputError(msg) from None


__all__ = ["ROWS", "DatasetPlan", "advise_dataset", "plan_dataset"]

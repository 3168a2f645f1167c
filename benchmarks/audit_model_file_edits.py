"""How many edited model files load by default, per family (issue 35 What to build 2; issue 36 What to build 4).

For each family's genuine file, random edits: one number of one array changed (×1.2, or +1 for integer and key
arrays, or two entries swapped), or one number of the JSON metadata scaled by 1.2 or one string changed (e.g. the
noise kind), each written back either with the tag kept (it no longer matches) or with the tag stripped (an
"unkeyed" file); plus, for the release stream, the release count truncated and the file rolled back to an older
authentic save. Prints, per family, the edits accepted by default (the target is 0) and, for information, those the
invariant checks alone would let through when the caller passes ``trust_unauthenticated=True`` (the models loaded
that way give certificates marked ``authenticated: false``).

    python benchmarks/audit_model_file_edits.py [--edits 60] [--seed 0]

Uses a temporary key location ($XDG_CONFIG_HOME), never ~/.config.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from lethe.io import META_KEY, TAG_KEY, write_npz_atomic


def _data(n: int = 300, d: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.where(X[:, 0] + 0.3 * X[:, 1] > 0, 1, 0)


def families() -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression
    from lethe.nn.estimators import NoisyFineTuneClassifier
    from lethe.noisygd.estimators import NoisyGDLogisticRegression
    from lethe.noisygd.pnsgd import PNSGDLogisticRegression
    from lethe.release import ReleasedLogisticRegression
    from lethe.sharded import ShardedClassifier

    X, y = _data()
    ids = np.array([f"u{i}" for i in range(X.shape[0])])
    return {
        "certified-logistic": lambda: CertifiedLogisticRegression(lam=1e-2, sigma=0.5, random_state=0).fit(
            X, y, sample_ids=ids),
        "certified-linear": lambda: CertifiedLinearRegression(lam=1e-2, sigma=0.5, random_state=0).fit(
            X, X[:, 0], sample_ids=ids),
        "released-logistic": lambda: ReleasedLogisticRegression(lam=1e-2, horizon=12, random_state=0).fit(
            X, y, sample_ids=ids),
        "sharded": lambda: ShardedClassifier(LogisticRegression(), n_shards=3, random_state=0).fit(
            X, y, sample_ids=ids),
        "noisygd": lambda: NoisyGDLogisticRegression(random_state=0).fit(X, y, sample_ids=ids),
        "pnsgd": lambda: PNSGDLogisticRegression(batch_size=30, learn_epochs=2, random_state=0).fit(
            X, y, sample_ids=ids),
        "noisy-finetune": lambda: NoisyFineTuneClassifier(random_state=0, unlearn_steps=2, batch_size=16,
                                                          train_epochs=1, post_steps=1, model_radius=3.0).fit(
            X, y, sample_ids=ids),
    }


def _leaves(obj: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(obj, dict):
        return [leaf for k, v in obj.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(obj, list):
        return [leaf for i, v in enumerate(obj) for leaf in _leaves(v, (*path, i))]
    if isinstance(obj, bool) or obj is None:
        return []
    return [path] if isinstance(obj, int | float | str) else []


def _set(obj: Any, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value


def _get(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def edit_once(src: Path, out: Path, rng: np.random.Generator, strip: bool) -> str:
    """One edit that changes the file's content (a swap of two equal entries, or NaN × 1.2, is drawn again)."""
    with np.load(src, allow_pickle=False) as z:
        original = {k: z[k].copy() for k in z.files}
    while True:
        arrays = {k: v.copy() for k, v in original.items()}
        meta_bytes = bytes(arrays.pop(META_KEY))
        what, meta = _edit(arrays, json.loads(meta_bytes.decode()), rng)
        before = json.dumps(json.loads(meta_bytes), sort_keys=True)
        changed = json.dumps(meta, sort_keys=True) != before or any(
            not np.array_equal(arrays[k], original[k], equal_nan=arrays[k].dtype.kind == "f") for k in arrays)
        if changed:
            break
    if strip:
        arrays.pop(TAG_KEY, None)
    write_npz_atomic(out, arrays, json.dumps(meta, sort_keys=True).encode(), mode=0o600)
    return what


def _edit(arrays: dict[str, np.ndarray], meta: dict[str, Any], rng: np.random.Generator) -> tuple[str, Any]:
    names = [k for k in arrays if k != TAG_KEY and arrays[k].size > 1 and arrays[k].dtype.kind in "fiuU"]
    if rng.random() < 0.5 and names:
        name = names[int(rng.integers(len(names)))]
        a = arrays[name].reshape(-1)
        i, j = (int(v) for v in rng.choice(a.size, size=2, replace=False))
        if a.dtype.kind == "U" or rng.random() < 0.3:
            a[[i, j]] = a[[j, i]]
            what = f"{name}[{i}]<->[{j}]"
        elif a.dtype.kind == "f":
            a[i] = a[i] * 1.2 if a[i] != 0 else 0.1
            what = f"{name}[{i}]*1.2"
        else:
            a[i] = a[i] + 1
            what = f"{name}[{i}]+1"
    else:
        leaves = [p for p in _leaves(meta) if p[0] != "format_version"]
        path = leaves[int(rng.integers(len(leaves)))]
        v = _get(meta, path)
        if isinstance(v, str):
            new: Any = {"gaussian": "laplace", "laplace": "gaussian"}.get(v, v + "x")
        elif isinstance(v, int):
            new = max(0, v - 1) if v else 1
        else:
            new = v * 1.2 if v else 0.1
        _set(meta, path, new)
        what = f"meta{list(path)}={new!r}"
    return what, meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edits", type=int, default=60, help="random edits per family")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
    os.environ.pop("LETHE_MODEL_KEY", None)
    os.environ.pop("LETHE_MODEL_KEY_FILE", None)
    rng = np.random.default_rng(args.seed)
    total_default = total = 0
    for name, make in families().items():
        model = make()
        cls = type(model)
        src = model.save(tmp / f"{name}.npz")
        cls.load(src)  # the genuine file loads
        accepted, trusted_through = [], 0
        for e in range(args.edits):
            out = tmp / f"{name}-{e}.npz"
            what = edit_once(src, out, rng, strip=bool(e % 2))
            try:
                cls.load(out)
                accepted.append(what)
            except ValueError:
                pass
            try:
                cls.load(out, trust_unauthenticated=True)
                trusted_through += 1
            except Exception:  # noqa: BLE001 - any refusal counts (corrupted skops bytes raise BadZipFile)
                pass
        total += args.edits
        total_default += len(accepted)
        print(f"{name:20s} edits {args.edits:4d}  accepted by default {len(accepted):3d}  "
              f"through the invariant checks alone (trusted) {trusted_through:3d}"
              + (f"  ACCEPTED: {accepted[:3]}" if accepted else ""))
    # the release stream: a truncated count (unkeyed) and a rollback to an older authentic save
    from lethe.release import ReleasedLogisticRegression

    X, y = _data()
    m = ReleasedLogisticRegression(lam=1e-2, horizon=12, random_state=0).fit(X, y)
    m.remove([0])
    old = m.save(tmp / "stream.npz").read_bytes()
    for i in range(1, 10):
        m.remove([i])
    path = m.save(tmp / "stream.npz")
    path.write_bytes(old)
    outcomes = {}
    for label, trust in (("rollback, default", False), ("rollback, trusted", True)):
        try:
            ReleasedLogisticRegression.load(path, trust_unauthenticated=trust)
            outcomes[label] = "LOADED"
        except ValueError as exc:
            outcomes[label] = "refused: " + str(exc).split(": ", 1)[-1][:60]
    for label, out in outcomes.items():
        print(f"release stream {label}: {out}")
    print(f"total: {total_default} of {total} edited files accepted by default")
    return 0 if total_default == 0 and all(o.startswith("refused") for o in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

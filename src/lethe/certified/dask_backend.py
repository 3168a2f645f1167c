"""The Dask backend of the data interface (:mod:`lethe.certified.data`): X is a ``dask.array.Array`` chunked by rows
(e.g. ``da.from_zarr`` of an on-disk store), computed on whatever Dask scheduler is active (a
``dask.distributed.Client`` — a ``LocalCluster`` or a cluster given by its address — or the local threads).

Every pass is a map-reduce over the row chunks: a product X v returns an n-vector to the caller; Xᵀ g, Xᵀ diag(s) X,
‖X‖_F² and the training objective's value and gradient (:meth:`DaskBackend.loss_pass`, one pass per optimiser
step) are sums of per-chunk partial results. Only vectors of length n or d and d × d matrices travel. A removal
gathers only the removed rows (:meth:`DaskBackend.take`, read from the store by the calling process when X is
backed by one, e.g. Zarr on a shared file system): with ``solver="anchor"`` it makes no pass over the data at
all; ``"pcg"``/``"refine"`` make two passes per Hessian-vector product.

Rounding: each entry of X v is one dot product of d terms (the chunks split rows, never columns: ``check_data_matrix``
rechunks the columns into one block); Xᵀ g and Xᵀ diag(s) X sum per-chunk partial sums, which is one summation tree
over the n rows, so the bounds of :mod:`lethe.certified.data` hold unchanged (Higham 2002, §3.1: γ_k for any order).
For Xᵀg a product passes through at most (largest chunk) + #chunks − 1 roundings in that tree
(:meth:`DaskBackend.sum_terms`), which is what the gradient's rounding allowance uses.
"""

from __future__ import annotations

import hashlib
import math
import weakref
from typing import Any

import dask
import dask.array as da
import numpy as np
from scipy.linalg import eigvalsh

from lethe.certified import _limits
from lethe.certified.bounds import EPS, gamma_k
from lethe.certified.spectral import collatz_wielandt_bound, frobenius_bound
from lethe.losses import Loss


def _split(vec: np.ndarray, chunks: tuple[int, ...]) -> list[np.ndarray]:
    offsets = np.cumsum((0,) + tuple(chunks))
    return [vec[offsets[k]:offsets[k + 1]] for k in range(len(chunks))]


def _chunk_gram(x: np.ndarray, s: np.ndarray | None) -> np.ndarray:
    z = x if s is None else np.sqrt(s)[:, None] * x
    return z.T @ z


def _chunk_rmatvec(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    return x.T @ g


def _chunk_loss(x: np.ndarray, y: np.ndarray, w: np.ndarray, loss: Loss) -> np.ndarray:
    z = x @ w
    out = np.empty(w.shape[0] + 1)
    out[0] = float(np.sum(loss.value(z, y)))
    out[1:] = x.T @ loss.d1(z, y)
    return out


def _chunk_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per chunk: [all finite, Σ xᵢⱼ² in row order] and the Gram matrix xᵀx (the chunk's share of the stats pass)."""
    sq = np.einsum("ij,ij->i", x, x)
    head = np.empty(sq.shape[0] + 1)
    head[0] = float(np.isfinite(x).all())
    head[1:] = sq
    return head, x.T @ x


def _chunk_newton(x: np.ndarray, y: np.ndarray, w: np.ndarray,
                  loss: Loss) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk: [Σℓ, Σℓ'², Xᵀℓ'], Xᵀ diag(ℓ'') X (its Gram block formed as :func:`_chunk_gram` forms it), and
    the chunk's margins z = xw and curvatures ℓ''(z) (O(chunk) each: they spare the anchor's two passes)."""
    z = x @ w
    d1 = loss.d1(z, y)
    s = loss.d2(z, y)
    head = np.empty(w.shape[0] + 2)
    head[0] = float(np.sum(loss.value(z, y)))
    head[1] = float(d1 @ d1)
    head[2:] = x.T @ d1
    return head, _chunk_gram(x, s), z, s


def _select_rows(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x[m])


def _add_pairs(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return a[0] + b[0], a[1] + b[1]


def _tree_sum(parts: list[Any], add: Any = np.add) -> Any:
    """Pairwise sum of delayed partial results (a summation tree of depth log₂ #chunks). Every task holds at most
    two partial results (vectors of d and d × d matrices), never rows."""
    while len(parts) > 1:
        parts = [dask.delayed(add)(parts[k], parts[k + 1]) if k + 1 < len(parts) else parts[k]
                 for k in range(0, len(parts), 2)]
    return parts[0]


class _ArrayMemo:
    """Values kept per array object while it lives. A Dask array is unhashable and its ``==`` is elementwise, so
    neither a dict nor a ``weakref.WeakKeyDictionary`` can key it by itself: each entry holds a weak reference to its
    array and is served only for that very object (``ref() is X``; a new array at a recycled address gets nothing),
    and is dropped when its array dies (by its own reference's callback only, never an entry that replaced it)."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], Any]] = {}

    def get(self, X: Any) -> Any:
        entry = self._entries.get(id(X))
        return entry[1] if entry is not None and entry[0]() is X else None

    def put(self, X: Any, value: Any) -> None:
        key, entries = id(X), self._entries

        def drop(ref: weakref.ref[Any]) -> None:
            if key in entries and entries[key][0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(X, drop), value)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


#: Results of the stats pass (row norms, ‖X‖_F², the Gram matrix fl(XᵀX)) per Dask array object, kept while the
#: array lives: a Dask array's chunks are fixed by its graph, so these stay exact for it until its store is written
#: through :meth:`DaskBackend.zero_rows` (which clears them all).
_STATS = _ArrayMemo()


#: The last :meth:`DaskBackend.newton_pass` per array: (w, z = fl(Xw), s = ℓ''(z) as the tasks computed it, fl(Xᵀ
#: diag(s) X)). ``matvec(X, w)`` and ``gram(X, s)`` with exactly that w / those s (compared bit for bit) return them
#: instead of passing over the data again: they are the values those operations compute (the same per-chunk kernels).
_NEWTON = _ArrayMemo()


def forget_cached_passes() -> None:
    """Drop every memoised pass result (stats, last Newton pass): call after writing a store by other means than
    :meth:`DaskBackend.zero_rows` (e.g. the curator's in-place erasure), so no later call reads values of before."""
    _STATS.clear()
    _NEWTON.clear()


def _newton_of(X: da.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    got: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = _NEWTON.get(X)
    return got


def _stats_of(X: da.Array) -> dict[str, Any] | None:
    got: dict[str, Any] | None = _STATS.get(X)
    return got


def _keep_stats(X: da.Array, stats: dict[str, Any]) -> None:
    _STATS.put(X, stats)


def zarr_source(X: da.Array) -> Any:
    """The Zarr array X was made from by ``da.from_zarr`` with no operation since (same shape and dtype), else None."""
    if not str(X.name).startswith("from-zarr-"):
        return None
    graph = X.__dask_graph__()
    layers = getattr(graph, "layers", {})
    if len(layers) != 2:
        return None
    src = dict(graph).get("original-" + str(X.name))
    if src is None or type(src).__module__.split(".")[0] != "zarr":
        return None
    if tuple(src.shape) != tuple(X.shape) or np.dtype(src.dtype) != X.dtype:
        return None
    return src


#: Label chunks scattered to a ``dask.distributed`` cluster, per client object while it lives (served only for that
#: very client, never for a new one at a recycled address): {(BLAKE2 digest of the labels, row chunks): futures}, at
#: most four label vectors per client.
_SCATTERED = _ArrayMemo()


def _vector_parts(vec: np.ndarray, chunks: tuple[int, ...]) -> list[Any]:
    """The row-chunk slices of an n-vector (labels) for the tasks of a pass. On a ``dask.distributed`` cluster they
    are scattered to the workers once and reused while the vector's bytes are unchanged (keyed by a BLAKE2 digest of
    them), instead of being embedded in every pass's graph (n × 8 bytes sent to the scheduler per pass)."""
    try:
        from distributed import get_client

        client = get_client()
    except (ImportError, ValueError):
        return _split(vec, chunks)
    vec = np.ascontiguousarray(vec, dtype=np.float64)
    key = (hashlib.blake2b(vec.view(np.uint8).data, digest_size=16).digest(), tuple(chunks))
    held: dict[tuple[bytes, tuple[int, ...]], list[Any]] | None = _SCATTERED.get(client)
    if held is None:
        held = {}
        _SCATTERED.put(client, held)
    got = held.get(key)
    if got is None:
        if len(held) >= 4:
            held.pop(next(iter(held)))
        got = client.scatter(_split(vec, chunks))
        held[key] = got
    return got


def _has_futures(X: da.Array) -> bool:
    try:
        from distributed import futures_of
    except ImportError:  # pragma: no cover - dask without distributed
        return False
    return bool(futures_of(X))


class DaskBackend:
    """``dask.array`` data: map-reduce over row chunks (module docstring). The spectral bound is that of the dense
    backend, √(λ_max(fl(XᵀX)) + allowance) capped by the Frobenius norm, from one distributed pass that forms the
    d × d Gram matrix and ‖X‖_F² (d ≤ n); for many features the matrix-free Collatz–Wielandt bound."""

    name = "dask"

    def _rows(self, X: da.Array) -> list[Any]:
        return list(X.to_delayed().ravel())

    def stats(self, X: da.Array) -> dict[str, Any]:
        """One pass for everything that does not depend on w: whether every value is finite, the squared row
        norms (n floats to the caller), ‖X‖_F² (their sum) and fl(XᵀX) (tree-summed d × d blocks). Kept for the
        array object (``_STATS``), so input checks, the ‖X‖₂ bound, β₀'s Frobenius norm and the anchor's Gram matrix
        share this one pass."""
        got = _stats_of(X)
        if got is not None:
            return got
        parts = [dask.delayed(_chunk_stats, nout=2)(xb) for xb in self._rows(X)]
        heads, gram = dask.compute([p[0] for p in parts], _tree_sum([p[1] for p in parts]))
        finite = all(bool(h[0]) for h in heads)
        sq = np.concatenate([h[1:] for h in heads]) if heads else np.zeros(0)
        got = {"finite": finite, "row_sq_norms": sq, "frobenius_sq": float(np.sum(sq)),
               "gram": np.asfortranarray(gram)}
        _keep_stats(X, got)
        return got

    def newton_pass(self, X: da.Array, y: np.ndarray, w: np.ndarray,
                    loss: Loss) -> tuple[float, np.ndarray, np.ndarray, float]:
        """(Σᵢ ℓ(zᵢ, yᵢ), Xᵀℓ'(z), Xᵀ diag(ℓ''(z)) X, Σᵢ ℓ'(zᵢ)²) with z = Xw, all from ONE map-reduce pass: a Newton
        step of training per pass (d × d per task, summed in a tree). The gradient is computed as
        ``objective_grad`` computes it (per-row dot products of d terms, then a summation tree over the rows), so
        the rounding allowance of β₀ applies to it; the Hessian (upper triangle = full, symmetric) only steers."""
        def run(yparts: list[Any]) -> Any:
            parts = [dask.delayed(_chunk_newton, nout=4)(xb, yb, w, loss)
                     for xb, yb in zip(self._rows(X), yparts, strict=True)]
            return dask.compute(_tree_sum([p[:2] for p in parts], _add_pairs), [p[2] for p in parts],
                                [p[3] for p in parts])

        try:
            (head, H), zs, ss = run(_vector_parts(y, X.chunks[0]))
        except Exception:  # scattered labels lost with a restarted worker: send them with the tasks instead
            _SCATTERED.clear()
            (head, H), zs, ss = run(_split(y, X.chunks[0]))
        _NEWTON.put(X, (np.array(w, dtype=np.float64, copy=True), np.concatenate(zs), np.concatenate(ss), H))
        H = np.triu(H) + np.triu(H, 1).T
        return float(head[0]), np.asarray(head[2:], dtype=np.float64), H, float(head[1])

    def matvec(self, X: da.Array, v: np.ndarray) -> np.ndarray:
        last = _newton_of(X)
        if last is not None and last[0].shape == np.shape(v) and np.array_equal(last[0], v):
            return last[1].copy()
        return np.asarray((X @ np.asarray(v, dtype=np.float64)).compute(), dtype=np.float64)

    def rmatvec(self, X: da.Array, g: np.ndarray) -> np.ndarray:
        parts = [dask.delayed(_chunk_rmatvec)(xb, gb) for xb, gb in zip(self._rows(X), _split(g, X.chunks[0]),
                                                                        strict=True)]
        return np.asarray(_tree_sum(parts).compute(), dtype=np.float64)

    def gram(self, X: da.Array, s: np.ndarray | None = None) -> np.ndarray:
        st = _stats_of(X) if s is None else None
        if st is not None:
            return np.array(st["gram"], order="F")
        last = _newton_of(X) if s is not None else None
        if last is not None and s is not None and last[2].shape == s.shape and np.array_equal(last[2], s):
            return np.array(last[3], order="F")
        blocks = self._rows(X)
        ss = [None] * len(blocks) if s is None else _split(s, X.chunks[0])
        parts = [dask.delayed(_chunk_gram)(xb, sb) for xb, sb in zip(blocks, ss, strict=True)]
        return np.asfortranarray(_tree_sum(parts).compute())

    def diag_gram(self, X: da.Array, s: np.ndarray) -> np.ndarray:
        sd = da.from_array(s, chunks=(X.chunks[0],))
        return np.asarray(((X * X) * sd[:, None]).sum(axis=0).compute(), dtype=np.float64)

    def row_sq_norms(self, X: da.Array) -> np.ndarray:
        st = _stats_of(X)
        if st is not None:
            return np.array(st["row_sq_norms"])
        return np.asarray((X * X).sum(axis=1).compute(), dtype=np.float64)

    def frobenius_sq(self, X: da.Array) -> float:
        st = _stats_of(X)
        if st is not None:
            return float(st["frobenius_sq"])
        return float((X * X).sum().compute())

    def loss_pass(self, X: da.Array, y: np.ndarray, w: np.ndarray, loss: Loss) -> tuple[float, np.ndarray]:
        """(Σᵢ ℓ(xᵢᵀw, yᵢ), Σᵢ ℓ'(xᵢᵀw, yᵢ) xᵢ) in one map-reduce pass (the optimiser's step)."""
        parts = [dask.delayed(_chunk_loss)(xb, yb, w, loss)
                 for xb, yb in zip(self._rows(X), _split(y, X.chunks[0]), strict=True)]
        out = np.asarray(_tree_sum(parts).compute(), dtype=np.float64)
        return float(out[0]), out[1:]

    def spectral_norm_bound(self, X: da.Array, gram: np.ndarray | None = None) -> float:
        n, d = (int(v) for v in X.shape)
        if n == 0 or d == 0:
            return 0.0
        if self.matrix_free(X) or d > n:
            return min(collatz_wielandt_bound(X, self), frobenius_bound(X, self))
        G = self.gram(X) if gram is None else gram
        G = np.triu(G) + np.triu(G, 1).T
        fro2 = float(np.trace(G))  # Σᵢⱼ xᵢⱼ², computed as the Gram diagonal: within γ_n of the exact value
        fro2 *= 1.0 + 2.0 * gamma_k(n + 2)
        k = max(n, d)
        lam_max = float(eigvalsh(G, subset_by_index=[d - 1, d - 1])[0])
        allowance = 4.0 * (k + d) * EPS * fro2  # as in lethe.certified.bounds.spectral_norm_upper_bound
        fro = math.sqrt(fro2) * (1.0 + 4.0 * k * EPS)
        return min(math.sqrt(max(lam_max, 0.0) + allowance), fro)

    def take(self, X: da.Array, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        order = np.argsort(rows, kind="stable")
        store = zarr_source(X)
        if store is not None:  # X is exactly a Zarr array: read the rows from the store (only their Zarr chunks)
            got = np.asarray(store.get_orthogonal_selection((rows[order], slice(None))), dtype=np.float64)
        else:
            # other store-backed arrays are read here, in this process (no round trip through the scheduler; the
            # getter reads the Dask chunks holding the rows); rows of a persisted array are gathered from the workers
            sel = X[rows[order]]
            got = np.asarray(sel.compute(scheduler="sync" if not _has_futures(X) else None), dtype=np.float64)
        out = np.empty_like(got)
        out[order] = got
        return np.ascontiguousarray(out)

    def subset(self, X: da.Array, mask: np.ndarray) -> da.Array:
        """The rows where ``mask`` holds, chunk by chunk: each task selects from its own chunk with its own slice of
        the mask (``X[mask]`` let Dask plan a shuffle that moved rows between workers and exhausted small ones; an
        integer index of n′ rows would be embedded in every task)."""
        mask = np.asarray(mask, dtype=bool)
        d = int(X.shape[1])
        parts = []
        for xb, mb in zip(self._rows(X), _split(mask, X.chunks[0]), strict=True):
            k = int(np.count_nonzero(mb))
            if k:
                sel = xb if k == mb.size else dask.delayed(_select_rows)(xb, mb)
                parts.append(da.from_delayed(sel, shape=(k, d), dtype=X.dtype))
        return da.concatenate(parts, axis=0) if parts else X[:0]

    def zero_rows(self, X: da.Array, rows: np.ndarray) -> None:
        """Erase the rows in X's Zarr store (X must be exactly ``da.from_zarr`` of a writable store: later passes
        read the zeros); any other Dask array is refused (it cannot be overwritten in place). The mechanisms never
        need this: they take the active-row mask."""
        store = zarr_source(X)
        if store is None:
            raise TypeError("The rows of this Dask array cannot be erased: it must be da.from_zarr of a writable "
                            "Zarr store (then the removed rows are overwritten with zeros in the store).")
        if bool(getattr(store, "read_only", False)):
            # a store opened read-only belongs to its writer, which erases the rows itself once the removal is
            # committed (the curator's Zarr plane: lethe.curator.dask_plane.erase_rows); estimators copy read-only
            # input into a store of their own (own_zarr_copy), so theirs are always writable
            return
        rows = np.unique(np.asarray(rows))
        _STATS.clear()  # every array over this store now reads other values
        _NEWTON.clear()
        store.set_orthogonal_selection((rows, slice(None)), 0.0)

    def dot_terms(self, X: da.Array) -> int:
        return int(X.shape[1])

    def sum_terms(self, X: da.Array) -> int:
        """Xᵀg (``rmatvec``; the gradient of ``newton_pass``/``loss_pass``) is one BLAS product per row chunk —
        each partial entry a dot product of at most m_max = max chunk rows terms — and then the sum of the #chunks
        partials (``_tree_sum``, but any order would do): a product passes through ≤ m_max roundings in its chunk
        and ≤ #chunks − 1 additions after, so S = m_max + #chunks − 1 (docs/tighter_bounds.md §0a); never more than
        n (empty chunks add exact zeros). Only for X chunked by rows alone (``check_data_matrix`` makes it so);
        otherwise n."""
        n = int(X.shape[0])
        rows = tuple(int(c) for c in X.chunks[0])
        if len(X.chunks[1]) != 1 or not rows:
            return max(n, 1)
        return max(min(n, max(rows) + len(rows) - 1), 1)

    def matrix_free(self, X: da.Array) -> bool:
        return int(X.shape[1]) > _limits.MATRIX_FREE_MIN_FEATURES

    def to_float32(self, X: da.Array) -> da.Array:
        return X.astype(np.float32)


def from_dataframe(df: Any) -> da.Array:
    """The numeric columns of a ``dask.dataframe.DataFrame`` (e.g. ``dd.read_parquet``) as a Dask matrix with known
    row-chunk sizes (one pass to count the rows of each partition). Convert once and pass the same array to every
    call: solver caches are keyed to the array object."""
    return df.to_dask_array(lengths=True)


def own_zarr_copy(X: da.Array, directory: str | None = None, zarr_chunk_rows: int = 4096) -> da.Array:
    """A copy of X in a new Zarr store of its own (written on the cluster, chunk by chunk: nothing is gathered), as
    ``da.from_zarr`` with X's row chunks: the Dask counterpart of the dense path's own copy, whose removed rows can
    then be erased in place. Small Zarr chunks (``zarr_chunk_rows`` rows): an erasure or a removal reads and
    rewrites only the removed rows' chunks. The store lives in ``directory`` (default: ``$LETHE_DASK_STORE_DIR``,
    else the system's temporary directory; a multi-machine cluster needs a directory every worker shares) and is
    deleted when the returned array is garbage-collected."""
    import os
    import shutil
    import tempfile

    base = directory or os.environ.get("LETHE_DASK_STORE_DIR") or None
    path = tempfile.mkdtemp(prefix="lethe-data-", suffix=".zarr", dir=base)
    rows = max(1, min(int(zarr_chunk_rows), max(int(c) for c in X.chunks[0]) if X.chunks[0] else 1))
    X.rechunk((rows, -1)).to_zarr(path, overwrite=True)
    out = da.from_zarr(path, chunks=(X.chunks[0], X.shape[1]))
    weakref.finalize(out, shutil.rmtree, path, True)
    return out


def check_dask_matrix(name: str, X: Any) -> da.Array:
    """A float64 Dask matrix chunked by rows only (columns rechunked into one block), all values finite (one
    distributed pass). A Dask DataFrame is converted by :func:`from_dataframe`."""
    if hasattr(X, "to_dask_array"):
        X = from_dataframe(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array. Found shape {X.shape}.")
    if any(math.isnan(c) for c in X.chunks[0]):
        raise ValueError(f"{name} must have known chunk sizes (call X.compute_chunk_sizes()).")
    A = X.astype(np.float64)
    if len(A.chunks[1]) != 1:
        A = A.rechunk({1: -1})
    if not DASK.stats(A)["finite"]:
        raise ValueError(f"{name} must contain only finite values. Found a non-finite value (a Dask array: the "
                         f"position is not gathered).")
    return A


DASK = DaskBackend()

__all__ = ["DASK", "DaskBackend", "check_dask_matrix", "forget_cached_passes", "from_dataframe", "own_zarr_copy"]

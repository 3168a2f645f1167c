"""Single-precision passes over the data (the ``onepass`` solver): a float32 copy of X, with one column per group
of identical columns, and products X v, Xᵀ p with proven error bounds (Higham 2002, §3.1, for IEEE single
precision, underflow included)."""

from __future__ import annotations

import hashlib
import math

import numpy as np

from lethe.certified.bounds import UNIT_ROUNDOFF as U
from lethe.certified.bounds import gamma_k, vnorm
from lethe.certified.cache import WorkBuffers

U32 = 2.0**-24  # unit roundoff of IEEE single precision


TINY32 = 2.0**-125  # covers underflow (gradual or flush-to-zero) of one single-precision product or conversion


def _gamma32(k: int) -> float:
    """Higham's γ_k for single precision."""
    return k * U32 / (1.0 - k * U32)


def column_groups(X: np.ndarray) -> np.ndarray | None:
    """Exactly identical columns of X (bit for bit): the group index of every column (groups numbered in order of
    their first column), or ``None`` if all columns differ. Columns are compared by a BLAKE2 digest and then
    element by element, so a hash collision cannot merge different columns. Identical columns contribute
    xᵢⱼ(Σ_{j∈group} vⱼ) to X v: the single-precision copy keeps one column per group (on MNIST 3 vs 8, 624 of 784:
    the always-blank pixels)."""
    n, d = X.shape
    seen: dict[bytes, list[int]] = {}
    groups = np.empty(d, dtype=np.intp)
    reps: list[int] = []
    for j in range(d):
        col = np.ascontiguousarray(X[:, j])
        key = hashlib.blake2b(col.tobytes(), digest_size=16).digest()
        for k in seen.get(key, []):
            if np.array_equal(col.view(np.uint8), np.ascontiguousarray(X[:, reps[k]]).view(np.uint8)):
                groups[j] = k
                break
        else:
            seen.setdefault(key, []).append(len(reps))
            groups[j] = len(reps)
            reps.append(j)
    return None if len(reps) == d else groups


def representatives(groups: np.ndarray) -> np.ndarray:
    """The first column of every group of :func:`column_groups`."""
    _, first = np.unique(groups, return_index=True)
    return first


def single_pass_margins(X32: np.ndarray, v: np.ndarray, rho: float, buf: WorkBuffers | None = None,
                        groups: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """ã ≈ X v from the single-precision copy X32 = fl₃₂(X), and ζ ≥ maxᵢ |ãᵢ − xᵢᵀv| (rows with ‖xᵢ‖ ≤ ρ).

    v is scaled by a power of two s (exact) into [−1, 1] and rounded to single precision; then, per row,
    |xᵢᵀv − s·fl₃₂(x̂ᵢᵀv̂)| ≤ s(|xᵢᵀ(v/s − v̂)| + |(xᵢ − x̂ᵢ)ᵀv̂| + γ₃₂_d Σⱼ|x̂ᵢⱼ||v̂ⱼ| + d·2⁻¹²⁵)
    ≤ ρ‖v‖(2u₃₂ + γ₃₂_d)(1 + u₃₂)² + s·2⁻¹²⁵(2d + ρ√d) (+ 2⁻¹⁰⁷⁰ for the product by s, which may be subnormal),
    the ρ√d ≥ Σⱼ|xᵢⱼ| for the underflow of x̂ᵢⱼ, with
    |x̂ᵢⱼ − xᵢⱼ| ≤ u₃₂|xᵢⱼ| + 2⁻¹²⁵, |v̂ⱼ − vⱼ/s| ≤ u₃₂|vⱼ/s| + 2⁻¹²⁵ (underflow, gradual or flushed to zero)
    (Higham 2002, §3.1, any summation order, with or without fused multiply-add). Returns (ã, ζ); with ``buf``,
    ã is ``buf.a`` (overwritten by the next call).

    With ``groups`` (:func:`column_groups`; X32 then holds one column per group), v is first summed per group in
    double precision, ṽ_k = fl(Σ_{j∈k} vⱼ), within γ_{d} Σ_{j∈k}|vⱼ|; as xᵢⱼ is the same for all j of a group,
    |xᵢᵀv − Σ_k xᵢₖṽ_k| ≤ γ_d Σⱼ|xᵢⱼ||vⱼ| ≤ γ_d ρ‖v‖, and the single-precision part is the bound above with d the
    number of groups and Σ_k|xᵢₖ||ṽ_k| ≤ (1 + γ_d) ρ‖v‖.
    """
    d = v.shape[0]
    vn_full = vnorm(v)
    g64 = 0.0
    if groups is not None:
        d_u = X32.shape[1]
        v = np.bincount(groups, weights=v, minlength=d_u)
        g64 = gamma_k(d + 2)
        d = d_u
    vmax = float(np.max(np.abs(v), initial=0.0))
    if vmax == 0.0:
        return np.zeros(X32.shape[0]), rho * vn_full * g64 * (1.0 + 4 * U)
    s = math.ldexp(1.0, math.frexp(vmax)[1])  # a power of two ≥ max |vⱼ|: v / s is exact
    vs = v / s
    if buf is None:
        a = (X32 @ vs.astype(np.float32)).astype(np.float64) * s
    else:
        np.dot(X32, vs.astype(np.float32), out=buf.a32)
        a = np.multiply(buf.a32, s, out=buf.a, dtype=np.float64)
    vn = vn_full  # vnorm does not underflow, even for tiny v
    zeta = (rho * vn * ((2.0 * U32 + _gamma32(d + 2)) * (1.0 + U32) ** 2 * (1.0 + g64) + g64) * (1.0 + 4 * U)
            + s * TINY32 * (2.0 * d + rho * math.sqrt(d)) + 2.0**-1070)  # last: s·fl₃₂(·) may be subnormal
    return a, zeta


def single_pass_transpose(X32: np.ndarray, p: np.ndarray, rho: float, block: int = 2048,
                          groups: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """q̃ ≈ Xᵀp from the single-precision copy X32 = fl₃₂(X) (rows ‖xᵢ‖ ≤ ρ), and a bound on ‖q̃ − Xᵀp‖₂.

    p is scaled by a power of two s ≥ max |pᵢ| (exact) and rounded to single precision; each block of ``block``
    rows is reduced in single precision and the block sums are added in double precision. As in
    :func:`single_pass_margins`, per column j and block B: |Σ_B xᵢⱼpᵢ − s fl₃₂(Σ_B x̂ᵢⱼp̂ᵢ)| ≤
    (2u₃₂ + γ₃₂_|B|)(1 + u₃₂)² Σ_B |xᵢⱼ||pᵢ| + 2⁻¹²⁵ (Σ_B |pᵢ| + s Σ_B |x̂ᵢⱼ| + s|B|); adding the block sums costs
    γ_{#blocks+1} Σᵢ |xᵢⱼ||pᵢ| (1 + γ₃₂_|B|)(1 + u₃₂)² (the block sums' magnitudes). Over the columns,
    ‖ |X|ᵀ|p| ‖₂ ≤ ‖X‖_F ‖p‖ ≤ √n ρ ‖p‖, and with s ≤ 2‖p‖
    the underflow terms are at most 2⁻¹²⁵ ‖p‖ (√(dn) + 2 n √d + 3 n ρ), plus √d 2⁻¹⁰⁷⁰ for the product by s,
    which may be subnormal in double precision (found by the slow property test). With ``groups`` (X32 holds one column
    per group of identical columns) the entries of a group are equal and computed once: the bound is the same,
    for the full X.
    """
    n = X32.shape[0]
    d = X32.shape[1] if groups is None else groups.shape[0]
    pmax = float(np.max(np.abs(p), initial=0.0))
    if pmax == 0.0:
        return np.zeros(d), 0.0
    s = math.ldexp(1.0, math.frexp(pmax)[1])
    ps = (p / s).astype(np.float32)
    q = np.zeros(X32.shape[1])
    for start in range(0, n, block):
        q += X32[start:start + block].T @ ps[start:start + block]
    q *= s
    if groups is not None:
        q = q[groups]
    p_norm = vnorm(p / s) * s
    n_blocks = -(-n // block)
    g_block = _gamma32(min(block, n))
    err = (math.sqrt(n) * rho * p_norm * ((2 * U32 + g_block) * (1 + U32) ** 2 * (1 + 1e-6)
                                          + gamma_k(n_blocks + 1) * (1 + g_block) * (1 + U32) ** 2)
           + TINY32 * p_norm * (math.sqrt(d * n) + 2 * n * math.sqrt(d) + 3 * n * rho)) * (1 + 8 * U)
    # the product by s may land in double precision's subnormal range: ≤ 2⁻¹⁰⁷⁵ per entry
    return q, err + math.sqrt(d) * 2.0**-1070

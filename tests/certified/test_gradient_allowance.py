"""The gradient's rounding allowance with the backend's summation length (docs/tighter_bounds.md §0a), against exact
arithmetic, for the dense, sparse and chunked (Dask) backends:

* Lemma (``sum_terms``): each entry of fl(Xᵀg) as the backend computes it is within γ_S Σᵢ|xᵢⱼgᵢ| (+ n η for
  products that underflow) of the exact sum, computed with ``fractions.Fraction`` (exact: products and sums of floats
  are rationals). Chunked data both as the backend sums the partials (a pairwise tree) and with the partials added
  left to right (a legal order: the bound must not depend on the tree's shape);
* the training residual β₀ (``CertifiedRemoval.residual_with_allowance``) and the anchor's re-measure
  (``common.measured_residual``) dominate the exact gradient ∇L_b(w; D) = Σ ℓ'(xᵢᵀw) xᵢ + λn w + b, computed with
  mpmath at 40 digits (reference error ≤ 10⁻³⁵ of the magnitudes, subtracted from the bound), logistic and squared
  losses, adversarial magnitudes (row and column scales over 10¹⁵, sparse rows, ‖w‖ up to 10³, and a "near-ulp"
  construction whose sequential sum loses almost u at every addition);
* mutation checks: a summation length of the largest chunk only (ignoring the additions of the chunk partials)
  fails the lemma and the gradient bound on a chunked sum added left to right; the margin term removed fails a case
  whose whole error is the margins' rounding; an allowance of 0 fails for every backend.
"""

from __future__ import annotations

import contextlib
import math
from fractions import Fraction
from unittest import mock

import mpmath
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

import lethe.certified.dask_backend as dask_backend  # noqa: E402
from lethe.certified.bounds import UNIT_ROUNDOFF  # noqa: E402
from lethe.certified.common import measured_residual  # noqa: E402
from lethe.certified.data import backend_of  # noqa: E402
from lethe.certified.mechanism import CertifiedRemoval  # noqa: E402
from lethe.certified.training import Evaluation  # noqa: E402

SLOW = 2000
KINDS = ("dense", "sparse", "dask-tree", "dask-fold")
U_EXACT = Fraction(1, 2**53)
ETA = Fraction(1, 2**1074)


def _fold(parts, add=np.add):
    """Left-to-right sum of the chunk partials (instead of the pairwise tree): a legal order of the same sum."""
    acc = parts[0]
    for p in parts[1:]:
        acc = dask.delayed(add)(acc, p)
    return acc


@contextlib.contextmanager
def _kind_context(kind):
    with dask.config.set(scheduler="synchronous"):
        if kind == "dask-fold":
            with mock.patch.object(dask_backend, "_tree_sum", _fold):
                yield
        else:
            yield


def _as_kind(X, kind, chunks):
    if kind == "dense":
        return X
    if kind == "sparse":
        return sp.csr_matrix(X)
    return da.from_array(X, chunks=(tuple(chunks), X.shape[1]))


def _gamma_exact(k):
    return Fraction(k) * U_EXACT / (1 - Fraction(k) * U_EXACT)


# -- data ------------------------------------------------------------------------------------------------------------


def _matrix(rng, n, d, spread, density, unit_rows):
    X = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-spread, 0.0, size=(n, 1)) \
        * 10.0 ** rng.uniform(-spread, 0.0, size=(1, d))
    X *= rng.uniform(size=(n, d)) < density
    if unit_rows:
        X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    return X


def _near_ulp(n, c_rows):
    """Squared loss at w = 0 (ℓ' = −2y exactly, no margin error): column 0 holds 1 and then n − 1 values s with
    fl(s·ℓ') ≈ u (1 − 2⁻¹⁰); added left to right every addition 1 + (≈u) rounds back to 1, so the computed sum
    loses ≈ (n − 1) u while Σ|terms| ≈ 1 — the worst case of the lemma up to a factor 1 + O(nu)."""
    s = math.sqrt(UNIT_ROUNDOFF * (1 - 2.0**-10))
    X = np.zeros((n, 2))
    X[0, 0] = 1.0
    X[1:, 0] = s
    X[::2, 1] = 2.0**-30  # a second column of small entries
    y = np.full(n, -0.5)  # ℓ' = 2 (0 − y) = 1 on row 0
    y[1:] = -0.5 * s  # ℓ' = s: products s·s ≈ u (1 − 2⁻¹⁰)
    return X, y, [1] * c_rows + ([n - c_rows] if n > c_rows else [])


# -- the lemma: fl(Xᵀg) within γ_S Σ|xᵢⱼ gᵢ| -------------------------------------------------------------------------


def _lemma_violation(Xk, X, g, kind, S=None):
    """max over j of |fl(Xᵀg)ⱼ − (Xᵀg)ⱼ| − (γ_S Σᵢ|xᵢⱼgᵢ| + n η), exactly (≤ 0 when the lemma holds)."""
    B = backend_of(Xk)
    with _kind_context(kind):
        got = B.rmatvec(Xk, g)
        S = B.sum_terms(Xk) if S is None else S
    n, d = X.shape
    gam = _gamma_exact(S)
    worst = None
    for j in range(d):
        terms = [Fraction(float(X[i, j])) * Fraction(float(g[i])) for i in range(n)]
        excess = abs(Fraction(float(got[j])) - sum(terms)) - (gam * sum(abs(t) for t in terms) + n * ETA)
        worst = excess if worst is None else max(worst, excess)
    return worst


def lemma_property(kind, seed, n, d, spread, density, chunks_seed):
    rng = np.random.default_rng(seed)
    X = _matrix(rng, n, d, spread, density, unit_rows=False)
    g = rng.normal(size=n) * 10.0 ** rng.uniform(-spread, spread, size=n)
    c_rng = np.random.default_rng(chunks_seed)
    cuts = np.sort(c_rng.choice(np.arange(1, n), size=c_rng.integers(0, n), replace=False)) if n > 1 else []
    chunks = np.diff(np.concatenate([[0], cuts, [n]])).astype(int).tolist()
    assert _lemma_violation(_as_kind(X, kind, chunks), X, g, kind) <= 0


LEMMA_ARGS = dict(kind=st.sampled_from(KINDS), seed=st.integers(0, 2**31 - 1), n=st.integers(1, 60),
                  d=st.integers(1, 4), spread=st.floats(0.0, 15.0), density=st.floats(0.2, 1.0),
                  chunks_seed=st.integers(0, 2**31 - 1))
test_rmatvec_within_gamma_of_its_summation_length = given(**LEMMA_ARGS)(lemma_property)
test_rmatvec_within_gamma_of_its_summation_length_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**LEMMA_ARGS)(lemma_property)))


@pytest.mark.parametrize("kind", KINDS)
def test_near_ulp_sum_within_the_lemma(kind):
    X, y, chunks = _near_ulp(300, 300)
    g = -2.0 * y
    assert _lemma_violation(_as_kind(X, kind, chunks), X, g, kind) <= 0


def test_summation_lengths():
    X = np.zeros((10, 3))
    X[[0, 3, 4], 1] = 1.0
    assert backend_of(X).sum_terms(X) == 10
    assert backend_of(sp.csr_matrix(X)).sum_terms(sp.csr_matrix(X)) == 3  # the largest column count
    A = da.from_array(X, chunks=((4, 4, 2), 3))
    assert backend_of(A).sum_terms(A) == 4 + 3 - 1
    assert backend_of(da.from_array(X, chunks=(1, 3))).sum_terms(da.from_array(X, chunks=(1, 3))) == 10  # ≤ n


# -- the gradient: β₀ and the re-measure against mpmath -----------------------------------------------------------


def exact_gradient(w, b, X, y, lam, loss):
    """∇L_b(w; D) = Σ ℓ'(xᵢᵀw, yᵢ) xᵢ + λ n w + b at 40 digits (mpmath), written independently of lethe, and Σ of
    the magnitudes its own error is relative to."""
    mpmath.mp.dps = 40
    n, d = X.shape
    g = [mpmath.mpf(0)] * d
    mag = mpmath.mpf(0)
    for i in range(n):
        z = mpmath.fsum(mpmath.mpf(float(X[i, j])) * mpmath.mpf(float(w[j])) for j in range(d))
        yi = mpmath.mpf(float(y[i]))
        d1 = -yi / (1 + mpmath.exp(yi * z)) if loss == "logistic" else 2 * (z - yi)
        for j in range(d):
            t = mpmath.mpf(float(X[i, j])) * d1
            g[j] += t
            mag += abs(t)
    for j in range(d):
        r = mpmath.mpf(lam) * n * mpmath.mpf(float(w[j]))
        g[j] += r + mpmath.mpf(float(b[j]))
        mag += abs(r) + abs(mpmath.mpf(float(b[j])))
    return g, mag


def _distance(computed, exact):
    return mpmath.sqrt(mpmath.fsum((mpmath.mpf(float(c)) - e) ** 2 for c, e in zip(computed, exact, strict=True)))


def _problem(seed, n, d, loss, spread, density, w_scale, b_scale):
    rng = np.random.default_rng(seed)
    X = _matrix(rng, n, d, spread, density, unit_rows=True)
    y = np.where(rng.uniform(size=n) < 0.5, 1.0, -1.0) if loss == "logistic" else rng.normal(size=n) * 10.0
    w = rng.normal(size=d) * w_scale
    b = rng.normal(size=d) * b_scale
    return X, y, w, b


def _reference_slack(mag):
    return mag * mpmath.mpf(10) ** -35


def measured_property(kind, seed, n, d, loss, spread, density, w_scale, b_scale, lam, keep_share, chunks_seed):
    _measured(kind, seed, n, d, loss, spread, density, w_scale, b_scale, lam, keep_share, chunks_seed, None)


def _kind_and_config(X, kind, chunks_seed, loss, lam):
    """X in the backend ``kind`` (Dask: random row chunks drawn from ``chunks_seed``) and the mechanism measuring
    on it."""
    n = X.shape[0]
    c_rng = np.random.default_rng(chunks_seed)
    chunks = np.diff(np.concatenate([[0], np.sort(c_rng.choice(np.arange(1, n), size=c_rng.integers(0, n),
                                                                  replace=False)), [n]])).astype(int).tolist()
    cfg = CertifiedRemoval(loss=loss, lam=lam, sigma=1.0, bound="tight", calibration="analytic", solver="anchor")
    return _as_kind(X, kind, chunks), cfg


def _measured(kind, seed, n, d, loss, spread, density, w_scale, b_scale, lam, keep_share, chunks_seed, allowance):
    X, y, w, b = _problem(seed, n, d, loss, spread, density, w_scale, b_scale)
    active = np.random.default_rng(seed + 1).uniform(size=n) < keep_share
    active[0] = True
    Xk, cfg = _kind_and_config(X, kind, chunks_seed, loss, lam)
    with _kind_context(kind):
        g, err = measured_residual(cfg, w, b, Xk, y, active)
    exact, mag = exact_gradient(w, b, X[active], y[active], lam, loss)
    err = err if allowance is None else allowance
    assert _distance(g, exact) <= err - _reference_slack(mag)


def beta0_property(kind, seed, n, d, loss, spread, density, w_scale, b_scale, lam, chunks_seed):
    X, y, w, b = _problem(seed, n, d, loss, spread, density, w_scale, b_scale)
    Xk, cfg = _kind_and_config(X, kind, chunks_seed, loss, lam)
    with _kind_context(kind):
        beta = cfg.residual_with_allowance(w, Xk, y, Evaluation(Xk, y, cfg.loss_, lam, b))
    exact, mag = exact_gradient(w, b, X, y, lam, loss)
    assert mpmath.sqrt(mpmath.fsum(e * e for e in exact)) <= beta - _reference_slack(mag)


COMMON = dict(kind=st.sampled_from(KINDS), seed=st.integers(0, 2**31 - 1), n=st.integers(2, 60),
              d=st.integers(1, 5), loss=st.sampled_from(["logistic", "squared"]), spread=st.floats(0.0, 15.0),
              density=st.floats(0.2, 1.0), w_scale=st.sampled_from([1e-3, 1.0, 30.0, 1e3]),
              b_scale=st.sampled_from([0.0, 1e-6, 1.0, 100.0]), lam=st.floats(1e-6, 10.0),
              chunks_seed=st.integers(0, 2**31 - 1))
MEASURED_ARGS = dict(COMMON, keep_share=st.floats(0.0, 1.0))
test_measured_residual_within_its_allowance_all_backends = given(**MEASURED_ARGS)(measured_property)
test_measured_residual_within_its_allowance_all_backends_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**MEASURED_ARGS)(measured_property)))
test_training_residual_dominates_the_exact_gradient_all_backends = given(**COMMON)(beta0_property)
test_training_residual_dominates_the_exact_gradient_all_backends_slow = pytest.mark.slow(
    settings(max_examples=SLOW)(given(**COMMON)(beta0_property)))


def _near_ulp_measured(kind, n, allowance_of=None):
    """The near-ulp construction through ``measured_residual`` (squared loss, w = 0, λ = b = 0 contributions)."""
    X, y, chunks = _near_ulp(n, n)
    Xk = _as_kind(X, kind, chunks)
    w, b = np.zeros(2), np.zeros(2)
    cfg = CertifiedRemoval(loss="squared", lam=1e-3, sigma=1.0, bound="tight", calibration="analytic",
                           solver="anchor")
    with _kind_context(kind):
        g, err = measured_residual(cfg, w, b, Xk, y, np.ones(n, dtype=bool))
    exact, mag = exact_gradient(w, b, X, y, 1e-3, "squared")
    return _distance(g, exact), err, mag


@pytest.mark.parametrize("kind", KINDS)
def test_near_ulp_gradient_within_its_allowance(kind):
    dist, err, mag = _near_ulp_measured(kind, 300)
    assert dist <= err - _reference_slack(mag)


# -- mutation checks: a wrong allowance must be caught -------------------------------------------------------------


def test_mutation_summation_length_of_the_largest_chunk_only_fails_the_lemma():
    """Chunks of one row added left to right: S = m_max (= 1) would claim γ₁; the sum loses ≈ (n − 1) u."""
    X, y, chunks = _near_ulp(300, 300)
    g = -2.0 * y
    Xk = _as_kind(X, "dask-fold", chunks)
    assert _lemma_violation(Xk, X, g, "dask-fold") <= 0  # the real S = 1 + 300 − 1
    assert _lemma_violation(Xk, X, g, "dask-fold", S=max(chunks)) > 0
    # and chunks of 50 rows: S = 50 + 6 − 1 holds, S = 50 does not (the within-chunk BLAS order is its own)
    Xk = _as_kind(X, "dask-fold", [50] * 6)
    assert _lemma_violation(Xk, X, g, "dask-fold") <= 0
    worst_chunk_only = _lemma_violation(Xk, X, g, "dask-fold", S=1)
    assert worst_chunk_only > 0


def test_mutation_summation_length_of_the_largest_chunk_only_fails_the_gradient_bound():
    """The same through ``measured_residual``: with DaskBackend.sum_terms = the largest chunk, the exact gradient
    falls outside the allowance (n = 1200 rows of one chunk each: the sum loses ≈ 1200 u, the mutated allowance
    is ≈ 20 u ‖X‖_F ‖ℓ'‖ ≈ 20 u √1200)."""
    dist, err, mag = _near_ulp_measured("dask-fold", 1200)
    assert dist <= err - _reference_slack(mag)
    with mock.patch.object(dask_backend.DaskBackend, "sum_terms", lambda self, X: max(X.chunks[0])):
        dist, err, mag = _near_ulp_measured("dask-fold", 1200)
    assert dist > err


@pytest.mark.parametrize("kind", KINDS)
def test_mutation_without_allowance_fails(kind):
    with pytest.raises(AssertionError):
        for seed in range(200):
            _measured(kind, seed, 60, 5, "logistic", 0.0, 1.0, 30.0, 1.0, 1e-2, 0.9, seed, 0.0)


def test_chunked_summation_length_never_exceeds_n():
    """For chunked data S = m_max + #chunks − 1 never exceeds n (no loosening against the dense rule)."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 500))
        cuts = np.sort(rng.choice(np.arange(1, n), size=int(rng.integers(0, n)), replace=False)) if n > 1 else []
        chunks = tuple(int(c) for c in np.diff(np.concatenate([[0], cuts, [n]])))
        A = da.from_array(np.zeros((n, 2)), chunks=(chunks, 2))
        S = backend_of(A).sum_terms(A)
        assert S == min(n, max(chunks) + len(chunks) - 1)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_loss_derivatives_meet_the_evaluation_error_the_allowance_assumes(loss):
    """|fl(ℓ'(z)) − ℓ'(z)| ≤ D1_EVAL_ULPS u |ℓ'(z)| + D1_EVAL_ABS at float z (step 2 of §0a), against mpmath,
    including the range where expit's exp overflows (|z| > 709.78)."""
    from lethe.certified.bounds import D1_EVAL_ABS, D1_EVAL_ULPS
    from lethe.losses import get_loss

    mpmath.mp.dps = 40
    rng = np.random.default_rng(7)
    z = np.concatenate([rng.uniform(-800.0, 800.0, 1500), rng.uniform(-40.0, 40.0, 1500), rng.normal(size=500)])
    y = np.where(rng.uniform(size=z.size) < 0.5, 1.0, -1.0) if loss == "logistic" else rng.normal(size=z.size)
    got = get_loss(loss).d1(z, y)
    for zi, yi, gi in zip(z, y, got, strict=True):
        zm, ym = mpmath.mpf(float(zi)), mpmath.mpf(float(yi))
        exact = -ym / (1 + mpmath.exp(ym * zm)) if loss == "logistic" else 2 * (zm - ym)
        assert abs(mpmath.mpf(float(gi)) - exact) <= D1_EVAL_ULPS * UNIT_ROUNDOFF * abs(exact) + D1_EVAL_ABS


def _margin_only_case(n):
    """Squared loss, identical rows (one feature x), targets y = fl(x w): the computed ℓ' = 2(fl(xw) − y) is exactly
    0, while the exact ℓ' = 2(xw − fl(xw)) is the margin's rounding error, the same in every row — so the whole
    gradient error is the margin term of §0a, added up coherently over the rows. (x, w) chosen among a few seeds for
    a large relative rounding error of the product."""
    rng = np.random.default_rng(11)
    best = None
    for _ in range(200):
        x, w = float(rng.uniform(0.5, 1.0)), float(rng.uniform(100.0, 1000.0))
        err = abs(Fraction(x) * Fraction(w) - Fraction(x * w)) / (Fraction(x) * Fraction(w))
        if best is None or err > best[0]:
            best = (err, x, w)
    _, x, w = best
    X = np.full((n, 1), x)
    y = np.full(n, x * w)
    return X, y, np.array([w])


@pytest.mark.parametrize("kind", KINDS)
def test_margin_term_is_needed(kind):
    """Mutation check for the margin term: without it (sup ℓ'' taken as 0) the allowance falls below the error of
    this case; with it the bound holds."""
    X, y, w = _margin_only_case(64)
    lam = 1e-12
    b = np.zeros(1)
    Xk = _as_kind(X, kind, [8] * 8)
    cfg = CertifiedRemoval(loss="squared", lam=lam, sigma=1.0, bound="tight", calibration="analytic",
                           solver="anchor")
    with _kind_context(kind):
        g, err = measured_residual(cfg, w, b, Xk, y, np.ones(64, dtype=bool))
        with mock.patch.object(type(cfg.loss_), "d2_sup", 0.0):
            _, err_without = measured_residual(cfg, w, b, Xk, y, np.ones(64, dtype=bool))
    exact, mag = exact_gradient(w, b, X, y, lam, "squared")
    dist = _distance(g, exact)
    assert dist <= err - _reference_slack(mag)
    assert dist > err_without


def test_dask_gradient_is_per_chunk_blas_then_a_sum_of_the_partials():
    """The structure ``DaskBackend.sum_terms`` assumes, bit for bit: rmatvec and the Newton pass's gradient are one
    ``x.T @ g`` per row chunk and then additions of the partials (here the backend's pairwise order)."""
    from lethe.losses import get_loss

    rng = np.random.default_rng(5)
    n, d = 97, 4
    X = rng.normal(size=(n, d)) / 3.0
    chunks = [13, 40, 7, 22, 15]
    A = da.from_array(X, chunks=(tuple(chunks), d))
    g = rng.normal(size=n)
    edges = np.cumsum([0, *chunks])
    parts = [X[edges[k]:edges[k + 1]].T @ g[edges[k]:edges[k + 1]] for k in range(len(chunks))]
    while len(parts) > 1:
        parts = [parts[k] + parts[k + 1] if k + 1 < len(parts) else parts[k] for k in range(0, len(parts), 2)]
    with dask.config.set(scheduler="synchronous"):
        np.testing.assert_array_equal(dask_backend.DASK.rmatvec(A, g), parts[0])
        loss = get_loss("logistic")
        y = np.where(rng.uniform(size=n) < 0.5, 1.0, -1.0)
        w = rng.normal(size=d)
        _, grad, _, _ = dask_backend.DASK.newton_pass(A, y, w, loss)
    d1 = loss.d1(X @ w, y)
    parts = [X[edges[k]:edges[k + 1]].T @ d1[edges[k]:edges[k + 1]] for k in range(len(chunks))]
    while len(parts) > 1:
        parts = [parts[k] + parts[k + 1] if k + 1 < len(parts) else parts[k] for k in range(0, len(parts), 2)]
    np.testing.assert_array_equal(grad, parts[0])

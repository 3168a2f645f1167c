"""§3 / Thm 3.2 of Chourasia & Shah (2023): secret states leak deleted records over many releases.

Counting query h(x) ∈ {0, 1}. The curator keeps a secret state and each single release is (ε, 0)-indistinguishable
from retraining (Def. 2.6), yet observers of all later releases learn about a deleted record.

* :class:`PaperCurator` is the construction of the proof of Thm 3.2 verbatim: state ⟨cnt_i, del_i, i⟩,
  f_pub = cnt + del/i + Lap(1/ε). The record deleted at step i shifts release j ≥ i by exactly 1/j, so the *max*
  divergence of the release sequence, Σ_j ε/j, diverges — which is what the proof shows. But the KL divergence,
  Σ_j (μ_j/b + e^{−μ_j/b} − 1) ≤ ε²π²/12 with b = 1/ε and μ_j = 1/j, stays bounded, so by Pinsker no attacker
  reaches certainty: the theorem's "correctly infer" does not follow for this f_pub (see docs/noisygd.md).
  :func:`paper_attack` measures the optimal (likelihood-ratio) attacker and :func:`paper_success_bound` gives
  the ceiling ½ + ½·TV ≤ ½ + ½√(KL/2).
* :class:`BinaryCurator` repairs the construction: the secret del_i = Σ_k h(k-th deleted record)·2^{−k} ∈ [0, 1)
  still shifts each release by at most 1 (so each release stays (ε, 0)-unlearning), but a record's share no
  longer decays with time, and averaging m releases reveals it with probability → 1 (:func:`binary_attack`).

Run: ``python examples/noisygd_secret_state.py``.
"""

from __future__ import annotations

import math

import numpy as np


class PaperCurator:
    """Thm 3.2's (A, Ā, f_pub): secret ⟨cnt_i, del_i, i⟩, f_pub = cnt + del/i + Lap(1/ε) (b/c = 0 if c = 0)."""

    def __init__(self, h_values: np.ndarray, epsilon: float, rng: np.random.Generator) -> None:
        self.h = np.asarray(h_values, dtype=float).copy()
        self.epsilon = epsilon
        self.rng = rng
        self.cnt, self.dele, self.i = float(self.h.sum()), 0.0, 0  # Θ̂₀ = A(D₀) = ⟨Σh, 0, 0⟩

    def unlearn(self, index: int, new_h: float) -> None:
        """Ā for u_i = {⟨index, y⟩}: cnt += h(y) − h(old), del += h(old), i += 1."""
        old = self.h[index]
        self.cnt += new_h - old
        self.dele += old
        self.h[index] = new_h
        self.i += 1

    def publish(self) -> float:
        shift = self.dele / self.i if self.i > 0 else 0.0
        return self.cnt + shift + self.rng.laplace(scale=1.0 / self.epsilon)


def paper_attack(epsilon: float = 1.0, i: int = 1, m: int = 2000, trials: int = 2000, seed: int = 0) -> float:
    """Success of the optimal attacker on the record deleted at step i after m releases φ_i..φ_{i+m−1}.

    Non-adaptive 1-requester: step 1 deletes the target (index 0), later steps delete records with h = 0; the
    attacker knows everything but h(target) ∈ {0, 1} (uniform prior) and uses the Laplace likelihood ratio.
    Vectorised over trials: release j carries cnt_j + h·(1/j) + noise with cnt_j known.
    """
    rng = np.random.default_rng(seed)
    j = np.arange(i, i + m, dtype=float)
    b = 1.0 / epsilon
    truth = rng.integers(0, 2, trials)
    resid = truth[:, None] / j[None, :] + rng.laplace(scale=b, size=(trials, m))  # φ_j − (known part)
    llr = (np.abs(resid) - np.abs(resid - 1.0 / j[None, :])).sum(axis=1) / b  # log p(h=1)/p(h=0)
    return float(np.mean((llr > 0) == (truth == 1)))


def paper_success_bound(epsilon: float = 1.0, i: int = 1, m: int | None = None) -> float:
    """½ + ½·√(KL/2) over releases j ≥ i (all of them if m is None): no attacker can do better (Pinsker)."""
    b = 1.0 / epsilon
    if m is None:
        jj = np.arange(i, 10**6, dtype=float)
        kl = float(np.sum(np.expm1(-1.0 / (jj * b)) + 1.0 / (jj * b))) + epsilon**2 / 2 / 10**6  # + tail ≤ ε²/(2·10⁶)
    else:
        jj = np.arange(i, i + m, dtype=float)
        kl = float(np.sum(np.expm1(-1.0 / (jj * b)) + 1.0 / (jj * b)))
    return 0.5 + 0.5 * min(1.0, math.sqrt(kl / 2.0))


def max_divergence(epsilon: float, i: int, m: int) -> float:
    """Σ_{j=i}^{i+m−1} ε/j: the pure-DP privacy loss of m releases that the proof of Thm 3.2 computes (→ ∞)."""
    return float(epsilon * np.sum(1.0 / np.arange(i, i + m, dtype=float)))


def single_release_loss(epsilon: float, shift: float) -> float:
    """max_x |log Lap(x; 0, 1/ε) − log Lap(x; shift, 1/ε)| = ε|shift|: ≤ ε for every shift in [0, 1] (Def. 2.6)."""
    xs = np.linspace(-5.0, 5.0 + shift, 20001)
    return float(np.max(np.abs(epsilon * (np.abs(xs - shift) - np.abs(xs)))))


class BinaryCurator(PaperCurator):
    """Repaired construction: del_i = Σ_k h(k-th deleted)·2^{−k} ∈ [0, 1); f_pub = cnt + del + Lap(1/ε)."""

    def unlearn(self, index: int, new_h: float) -> None:
        old = self.h[index]
        self.cnt += new_h - old
        self.i += 1
        self.dele += old * 2.0 ** (-self.i)
        self.h[index] = new_h

    def publish(self) -> float:
        return self.cnt + self.dele + self.rng.laplace(scale=1.0 / self.epsilon)


def binary_attack(epsilon: float = 1.0, i: int = 2, m: int = 4000, trials: int = 1000, seed: int = 0) -> float:
    """Success of the averaging attacker on the record deleted at step i from m releases after it.

    Steps 1..i−1 delete records whose h-values the attacker knows (worst case: knows all but the target), step i
    deletes the target; each release is cnt + del + Lap(1/ε). The attacker subtracts the known part, averages,
    and thresholds at 2^{−i}/2.
    """
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 2, trials)
    resid = truth[:, None] * 2.0 ** (-i) + rng.laplace(scale=1.0 / epsilon, size=(trials, m))
    guess = resid.mean(axis=1) > 2.0 ** (-i) / 2
    return float(np.mean(guess == (truth == 1)))


def check_curators_agree_with_attack_model(seed: int = 0) -> None:
    """The vectorised attacks model the curators' releases exactly (sanity check run by the tests)."""
    for cls in (PaperCurator, BinaryCurator):
        rng = np.random.default_rng(seed)
        h = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
        cur = cls(h, 1.0, rng)
        cur.unlearn(0, 0.0)  # the target (h = 1) deleted at step 1 via a dummy with h = 0
        cur.unlearn(1, 0.0)  # a known record with h = 0
        state = (cur.cnt, cur.dele, cur.i)
        expected = (2.0, 1.0, 2) if cls is PaperCurator else (2.0, 0.5, 2)
        assert state == expected, (cls.__name__, state)


def main() -> None:
    eps = 1.0
    print(f"single release, worst shift 1: privacy loss {single_release_loss(eps, 1.0):.3f} <= eps = {eps}")
    for m in (10, 100, 1000, 10000):
        print(
            f"Thm 3.2 (paper's f_pub), {m:>5} releases: max-divergence {max_divergence(eps, 1, m):6.2f}, "
            f"optimal attacker {paper_attack(eps, 1, m, trials=2000):.3f}, "
            f"ceiling {paper_success_bound(eps, 1, m):.3f}"
        )
    print(f"  ceiling over infinitely many releases: {paper_success_bound(eps, 1):.3f} (< 1: not recovered)")
    for i in (1, 2, 3):
        print(f"repaired (binary) secret state, deletion at step {i}, 4000 releases: "
              f"attacker {binary_attack(eps, i, 4000):.3f}")


if __name__ == "__main__":
    main()

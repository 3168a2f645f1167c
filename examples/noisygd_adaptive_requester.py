"""§3 of Chourasia & Shah (2023): adaptive requesters defeat "indistinguishable from retraining" guarantees.

Three demonstrations, each a function returning the attacker's measured success or advantage:

1. :func:`sum_attack` — Eq. (8)–(9). A(D) = Σx and Ā perfectly imitates retraining, yet an attacker who knows
   the requester's rule reads the deleted record (−1 or +1) off the post-deletion model, every time.
2. :func:`median_attack` — Thm 3.1. A (0, 0)-adaptive-unlearning median release; a 1-adaptive requester
   re-inserts copies of φ₀; the record deleted at step i is revealed with probability ≥ 1 − (1/2)^{i−3}.
3. :func:`noisy_gd_attack` — the same adaptive rule as (1) against retraining-by-minimisation (exact) and
   against the Noisy-GD curator (Def. 5.1). Exact retraining leaks the identity; the Noisy-GD curator keeps the
   advantage below Thm 4.1's bound for ε = ε_dd + p ε_dp (Thm 4.3, p = 1).

Run: ``python examples/noisygd_adaptive_requester.py``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize_scalar

from lethe.noisygd.edit_stream import (
    AdaptiveRequester,
    CuratorConfig,
    Database,
    EditRequest,
    NoisyGDCurator,
    interact,
)
from lethe.noisygd.guarantees import membership_advantage_bound
from lethe.noisygd.models import LogisticModel
from lethe.noisygd.schedule import convex_schedule

# ----------------------------------------------------------------------------------------------- Eq. (8)–(9)


def sum_attack() -> float:
    """Success rate of the attacker of Eq. (8)–(9) over both neighbouring databases (the paper: always right)."""
    wins = 0
    for target, database in ((-1, [-2, -1, 2]), (1, [-2, 1, 2])):
        model = sum(database)  # A(D), never seen by the attacker
        S = [x for x in database if x < 0] if model < 0 else [x for x in database if x >= 0]  # Eq. (9)
        unlearned = sum(x for x in database if x not in S)  # Ā(D, S, A(D)) = A(D \ S)
        guess = -1 if unlearned > 0 else 1  # the attacker sees only the unlearned model
        wins += guess == target
    return wins / 2


# ----------------------------------------------------------------------------------------------- Thm 3.1


def median_attack(n: int = 101, i: int = 8, trials: int = 4000, seed: int = 0) -> float:
    """Thm 3.1: fraction of runs in which φ_i = med(D_i) equals the record deleted at step i."""
    rng = np.random.default_rng(seed)
    wins = 0
    for _ in range(trials):
        D = rng.permutation(n).astype(float)  # unique entries, n odd
        target = float(np.median(D))
        ind_m = int(np.flatnonzero(D == target)[0])
        phi0 = float(np.median(D))
        for ind in rng.choice(n, size=i - 1, replace=False):  # Eq. (31): ⟨ind_j, φ₀⟩, distinct indices
            D[ind] = phi0
        D[ind_m] = -1.0 if rng.random() < 0.5 else n + 1.0  # owner deletes: replaced by some y ≠ med(D₀)
        wins += float(np.median(D)) == target
    return wins / trials


# ----------------------------------------------------------------------------------------------- Noisy-GD

# Eq. (8)–(9) scaled into the unit ball: records x ∈ {−1, −½, ½, 1}, logistic loss with label +1 and no intercept,
# so the sign of the model is the sign of the sum. The target is record 1 (−½ or +½).
DATABASES = {-1: np.array([[-1.0], [-0.5], [1.0]]), +1: np.array([[-1.0], [0.5], [1.0]])}


def _policy(visible: dict, past: tuple) -> EditRequest:
    """Eq. (9): after seeing φ₀, delete the negative records (indices 0, 1) or the non-negative ones (1, 2)."""
    phi0 = float(np.ravel(visible[0])[0])
    return EditRequest.deletion([0, 1] if phi0 < 0 else [1, 2], n_features=1)


def _exact_fit(X: np.ndarray, lam: float) -> float:
    live = np.abs(X[:, 0]) > 0
    x = X[live, 0]

    def obj(t: float) -> float:
        return float(np.sum(np.logaddexp(0.0, -t * x)) / X.shape[0] + lam / 2 * t * t)

    return float(minimize_scalar(obj, bounds=(-1e3, 1e3), method="bounded", options={"xatol": 1e-10}).x)


def exact_retraining_attack(lam: float = 0.25) -> float:
    """Advantage of the sign attacker when the curator retrains exactly (A = argmin, Ā = A on D ∘ u)."""
    guesses = {}
    for target, X in DATABASES.items():
        theta0 = _exact_fit(X, lam)
        u = _policy({0: np.array([theta0])}, ())
        theta1 = _exact_fit(Database(X, np.ones(3)).apply(u).X, lam)
        guesses[target] = theta1 > 0  # "the deleted record was −½"
    return float(guesses[-1]) - float(guesses[+1])


def noisy_gd_config(epsilon_dp: float = 0.05, epsilon_dd: float = 0.01, lam: float = 0.25, k_learn: int = 50):
    """Thm 5.1's schedule for n = 3, d = 1, L = 1, β = ¼ (K_A raised to ``k_learn``: Thm 5.1 holds for any K_A)."""
    s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=lam, n=3, d=1, r=2, q=2.0, epsilon_dp=epsilon_dp,
                        epsilon_dd=epsilon_dd, utility=False)
    cfg = CuratorConfig.from_convex_schedule(s, p=1)
    return CuratorConfig(**{**cfg.to_dict(), "k_learn": k_learn}), s


def noisy_gd_attack(trials: int = 1500, seed: int = 0, **config_kw) -> tuple[float, float, float]:
    """(empirical advantage, its standard error, Thm 4.1 bound) of the sign attacker against the Noisy-GD curator."""
    cfg, _ = noisy_gd_config(**config_kw)
    ss = np.random.SeedSequence(seed)
    hits = {}
    eps_total = None
    for target, X in DATABASES.items():
        count = 0
        for child in ss.spawn(trials):
            cur = NoisyGDCurator(LogisticModel(1), cfg, random_state=np.random.default_rng(child))
            t = interact(cur, Database(X, np.ones(3)), AdaptiveRequester(_policy, observable=[0]), 1)
            count += float(t.published[1][0]) > 0
            eps_total = t.certificates[1].epsilon_dd_adaptive
        hits[target] = count / trials
    adv = hits[-1] - hits[+1]
    se = math.sqrt(hits[-1] * (1 - hits[-1]) / trials + hits[+1] * (1 - hits[+1]) / trials)
    assert eps_total is not None
    return adv, se, membership_advantage_bound(cfg.q, eps_total)


def main() -> None:
    print(f"Eq. (8)-(9), exact imitation of retraining: attacker success {sum_attack():.2f} (paper: 1)")
    for i in (5, 8, 12):
        print(f"Thm 3.1, median, deletion at step {i}: success {median_attack(i=i, trials=2000):.3f} "
              f"(paper: >= {1 - 0.5 ** (i - 3):.3f})")
    print(f"Eq. (9) rule vs exact retraining of logistic regression: advantage {exact_retraining_attack():.2f}")
    adv, se, bound = noisy_gd_attack()
    print(f"Eq. (9) rule vs Noisy-GD curator: advantage {adv:.3f} +- {se:.3f}, Thm 4.1/4.3 bound {bound:.3f}")


if __name__ == "__main__":
    main()

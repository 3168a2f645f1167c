"""ReleasedLogisticRegression with tree-aggregated noise (issue 39): opt-in, its certificate, its premises, the
horizon, save/load with the tree's state, and the public-only choice of ``noise_mechanism="auto"``."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from lethe.certified.bounds import release_sensitivity
from lethe.exceptions import BudgetExceededError
from lethe.privacy.drift import drift_bound
from lethe.privacy.gaussian import analytic_gaussian_epsilon
from lethe.privacy.release import ReleaseAccountant, ReleaseCertificate
from lethe.privacy.tree import TreeRelease
from lethe.release import ReleasedLogisticRegression
from lethe.release.tree_stream import (
    TreeReleaseCertificate,
    TreeStreamAccountant,
    accountant_from_dict,
    stream_accountant,
)

KEY = b"k" * 32


def _data(n: int = 3000, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1, -1)


def _tree(**kw):
    kw = {"lam": 1e-2, "horizon": 9, "random_state": 0, "noise_mechanism": "tree", "gram_cap": 3001.0, **kw}
    return ReleasedLogisticRegression(**kw)


def _prefix_s2(k: int, rows: int, lam: float, m: int, gram: float, beta: float) -> float:
    """Independent enumeration of the nodes published by the first k releases (increments 1 … k − 1), every
    deletion time τ ∈ 1 … k (τ = k: held throughout the prefix)."""
    delta = release_sensitivity(lam, m, beta, loss_at_zero=math.log(2) * (1 + 1e-15))
    e = beta / (lam * m)
    nodes = [(a, a + (1 << lv) - 1) for lv in range(12) for a in range(1, k, 1 << lv) if a + (1 << lv) - 1 < k]
    best = 0.0
    for tau in range(1, k + 1):
        total = 0.0
        for a, b in nodes:
            s = (min(2 * delta, drift_bound(rows * (b - a + 1), lam, m, gram) + 4 * e) if b < tau
                 else delta + 2 * e if a <= tau else 4 * e)
            total += s * s
        best = max(best, total)
    return best


def test_default_is_fresh_noise_unchanged() -> None:
    X, y = _data()
    a = ReleasedLogisticRegression(lam=1e-2, horizon=5, random_state=3).fit(X, y)
    b = ReleasedLogisticRegression(lam=1e-2, horizon=5, random_state=3, noise_mechanism="fresh").fit(X, y)
    for m in (a, b):
        m.remove([1])
    assert a.noise_mechanism_ == "fresh" and type(a.release_.certificate) is ReleaseCertificate
    assert isinstance(a.accountant_, ReleaseAccountant)
    for ra, rb in zip(a.releases_, b.releases_, strict=True):
        assert np.array_equal(ra.coef, rb.coef)
    # fresh noise: the centre plus σ times the seeded generator's normals (today's draw, bit for bit)
    c = ReleasedLogisticRegression(lam=1e-2, horizon=5, random_state=3).fit(X, y)
    rng = np.random.default_rng(3)
    assert np.array_equal(c.release_.coef, c.state_.w + c.sigma_ * rng.normal(0.0, 1.0, size=X.shape[1]))


def test_tree_releases_are_the_tree_of_the_secret_centres() -> None:
    """With a seed, the releases are exactly lethe.privacy.tree.TreeRelease fed the model's centres; every
    certificate states the mechanism, this release's std, μ, ε spent = Balle–Wang ε of the prefix's μ (checked
    against an independent enumeration of the nodes published so far) and the premises."""
    X, y = _data()
    m = _tree(horizon=9).fit(X, y)
    centres = [m.state_.w.copy()]
    for i in range(8):
        m.remove([i])
        centres.append(m.state_.w.copy())
    acc = m.accountant_
    assert isinstance(acc, TreeStreamAccountant) and m.noise_mechanism_ == "tree"
    ref = TreeRelease(acc.tree, random_state=0)
    mu_full = acc.tree.mu
    for t, (c, r) in enumerate(zip(centres, m.releases_, strict=True)):
        assert np.array_equal(ref.publish(c), r.coef)
        cert = r.certificate
        assert isinstance(cert, TreeReleaseCertificate) and cert.mechanism == "tree"
        assert cert.sigma == acc.release_std(t) and cert.noise_multiplier == cert.sigma / cert.sensitivity
        assert (cert.gram_cap, cert.rows_per_release, cert.mu) == (3001.0, 1, mu_full)
        s2 = _prefix_s2(t + 1, 1, 1e-2, m.n_floor_, 3001.0, 0.01)
        mu_k = math.sqrt(cert.sensitivity**2 / cert.sigma_first**2 + s2 / cert.sigma_node**2)
        assert cert.mu_spent == pytest.approx(mu_k, rel=1e-12)
        assert cert.epsilon == pytest.approx(analytic_gaussian_epsilon(1e-5, 1.0, mu_k), rel=1e-9)
        assert cert.epsilon <= 1.0 + 1e-9 and cert.private is False and "NOT PRIVATE" in cert.guarantee
    assert m.releases_[-1].certificate.epsilon == pytest.approx(1.0, abs=1e-6)  # the whole horizon spends ε
    assert json.loads(json.dumps(m.release_.certificate.to_dict()))["mechanism"] == "tree"


def test_unseeded_tree_states_the_tree_guarantee() -> None:
    X, y = _data()
    m = _tree(random_state=None).fit(X, y)
    cert = m.release_.certificate
    assert cert.private and cert.noise_source == "os-csprng" and "tree-aggregated" in cert.guarantee
    assert "gram_cap" in cert.guarantee


def test_premises_are_checked_with_clear_errors() -> None:
    X, y = _data()
    lam_max = float(np.linalg.eigvalsh(X.T @ X)[-1])
    m = _tree(gram_cap=lam_max * 0.99)
    with pytest.raises(ValueError, match="gram_cap must be >= the largest eigenvalue"):
        m.fit(X, y)
    with pytest.raises(NotFittedError):
        m.predict(X)
    nocap = _tree(gram_cap=None).fit(X, y)  # no Gram premise: the drift bound's self-concordance form alone
    assert nocap.noise_mechanism_ == "tree" and nocap.release_.certificate.gram_cap is None
    assert nocap.accountant_.sigma >= _tree(gram_cap=lam_max * 1.001).fit(X, y).accountant_.sigma
    with pytest.raises(ValueError, match="noise_mechanism must be one of"):
        _tree(noise_mechanism="correlated").fit(X, y)
    with pytest.raises(ValueError, match="rows_per_release must be None or an integer >= 1"):
        _tree(rows_per_release=0).fit(X, y)
    _tree(gram_cap=lam_max * 1.001).fit(X, y)  # a cap above λ_max is accepted


def test_rows_per_release_is_enforced_and_nothing_changes() -> None:
    X, y = _data()
    m = _tree(cadence=2, rows_per_release=3).fit(X, y)
    m.remove([0, 1])
    before = (m.n_removed_, m.active_.copy(), len(m.releases_), m.accountant_)
    with pytest.raises(ValueError, match="rows_per_release = 3"):
        m.remove([2, 3])  # 4 rows since the last release
    assert (m.n_removed_, len(m.releases_), m.accountant_) == (before[0], before[2], before[3])
    assert np.array_equal(m.active_, before[1])
    m.remove([2])  # completes the cadence: a release, the count restarts
    assert len(m.releases_) == 2
    m.remove([3, 4, 5])
    # fresh noise has no such premise
    f = ReleasedLogisticRegression(lam=1e-2, horizon=5, random_state=0).fit(X, y)
    f.remove([0, 1, 2, 3, 4])


def test_horizon_is_refused_as_for_fresh_noise() -> None:
    X, y = _data()
    m = _tree(horizon=3).fit(X, y)
    m.remove([0])
    m.release()
    with pytest.raises(BudgetExceededError):
        m.remove([1])
    with pytest.raises(BudgetExceededError):
        m.release()
    assert m.accountant_.releases == 3 and m._tree.releases == 3


def test_a_failed_publication_leaves_the_tree_as_it_was(monkeypatch) -> None:
    X, y = _data()
    m = _tree().fit(X, y)
    m.remove([0])
    tree, acc = m._tree, m.accountant_

    def boom(self, centre):
        raise RuntimeError("injected")

    monkeypatch.setattr(TreeRelease, "publish", boom)
    with pytest.raises(RuntimeError, match="injected"):
        m.remove([1])
    assert m._tree is tree and tree.releases == 2 and m.accountant_ == acc and m.n_removed_ == 1
    monkeypatch.undo()
    m.remove([1])
    assert m._tree.releases == 3 and np.array_equal(m._tree.released(2), m.release_.coef)


def test_save_load_keeps_the_tree(tmp_path) -> None:
    X, y = _data()
    m = _tree(horizon=12, fit_intercept=True).fit(X, y)
    for i in range(4):
        m.remove([i])
    path = m.save(tmp_path / "t.npz", key=KEY)
    back = ReleasedLogisticRegression.load(path, key=KEY)
    assert back.noise_mechanism_ == "tree" and back.accountant_ == m.accountant_
    assert back.certificate_ == m.certificate_ and type(back.certificate_) is TreeReleaseCertificate
    for t in range(5):
        assert np.array_equal(back._tree.released(t), m._tree.released(t))
    back.remove([10])
    assert back._tree.releases == 6 and back.release_.certificate.sigma == back.accountant_.release_std(5)
    w = back._tree.released(5)
    assert np.array_equal(back.release_.coef, w[:-1] * (1 / math.sqrt(2))) or np.allclose(
        back.release_.coef, w[:-1] / math.sqrt(2), rtol=0, atol=0)


def _edit(path, tmp_path, fn):
    from lethe.io import load_npz, save_npz

    arrays, meta = load_npz(path)
    fn(arrays, meta)
    out = tmp_path / "edited.npz"
    save_npz(out, arrays, json.loads(json.dumps(meta)))
    return out


def _nodes(a, m):
    a["tree_nodes"] = a["tree_nodes"] * 0.5


def _gram(a, m):
    m["accountant"]["gram_cap"] = 10.0


def _to_fresh(a, m):
    acc = m["accountant"]
    m["accountant"] = ReleaseAccountant.calibrated(acc["epsilon"], acc["delta"], acc["horizon"],
                                                   acc["sensitivity"]).to_dict() | {"releases": acc["releases"]}


def _params_fresh(a, m):
    m["params"]["noise_mechanism"] = "fresh"


def _tree_count(a, m):
    m["tree"]["releases"] = 2


def _rows_pending(a, m):
    m["rows_pending"] = 5


@pytest.mark.parametrize("edit", [_nodes, _gram, _to_fresh, _params_fresh, _tree_count, _rows_pending])
def test_edited_tree_files_are_refused(tmp_path, edit) -> None:
    X, y = _data()
    m = _tree().fit(X, y)
    for i in range(3):
        m.remove([i])
    path = m.save(tmp_path / "t.npz", key=KEY)
    ReleasedLogisticRegression.load(path, key=KEY)
    bad = _edit(path, tmp_path, edit)
    with pytest.raises(ValueError, match="no authentication tag"):
        ReleasedLogisticRegression.load(bad, key=KEY)
    with pytest.raises(ValueError):  # trusted anyway: the tree's invariants still refuse it
        ReleasedLogisticRegression.load(bad, trust_unauthenticated=True)


def test_auto_chooses_from_public_parameters_only() -> None:
    """``auto`` is the argmin of the two accountants' worst-release std, which depend on public parameters only:
    two data sets with the same published parameters get the same mechanism."""
    common = dict(epsilon=1.0, delta=1e-5, horizon=1000, lam=1e-2, n_floor=99_000, residual_cap=1e-6,
                  rows_per_release=1)
    dlt = release_sensitivity(1e-2, 99_000, 1e-6, loss_at_zero=math.log(2) * (1 + 1e-15))
    good = stream_accountant("auto", sensitivity=dlt, gram_cap=1200.0, **common)  # isotropic 10⁵ × 100
    none = stream_accountant("auto", sensitivity=dlt, gram_cap=None, **common)
    fresh_sigma = ReleaseAccountant.calibrated(1.0, 1e-5, 1000, dlt).sigma
    assert isinstance(good, TreeStreamAccountant) and good.sigma < fresh_sigma / 3  # the 3×
    # without a cap the tree's bound is the self-concordance form alone: a little more noise, still the tree here
    assert isinstance(none, TreeStreamAccountant) and good.sigma <= none.sigma < fresh_sigma / 3
    # MNIST-like: rows sharing a direction (Λ = 0.73 n), a release per 10 rows, T = 101: the tree loses
    mnist = dict(common, horizon=101, n_floor=10_783, rows_per_release=10)
    d2 = release_sensitivity(1e-2, 10_783, 1e-6, loss_at_zero=math.log(2) * (1 + 1e-15))
    bad = stream_accountant("auto", sensitivity=d2, gram_cap=8758.0, **mnist)
    tree_bad = stream_accountant("tree", sensitivity=d2, gram_cap=8758.0, **mnist)
    assert tree_bad.sigma > ReleaseAccountant.calibrated(1.0, 1e-5, 101, d2).sigma and isinstance(bad,
                                                                                                ReleaseAccountant)
    X1, y1 = _data(seed=1)
    X2, y2 = _data(seed=2)
    X2[:, 1:] *= 0.2
    X2 /= np.linalg.norm(X2, axis=1, keepdims=True)  # a very different spectrum, the same published parameters
    kinds = {ReleasedLogisticRegression(lam=1e-2, horizon=50, random_state=0, noise_mechanism="auto", gram_cap=3001.0,
                                        n_floor=2800).fit(X, y).noise_mechanism_ for X, y in ((X1, y1), (X2, y2))}
    assert len(kinds) == 1


def test_accountant_round_trip_and_refusals() -> None:
    acc = TreeStreamAccountant.calibrated(1.0, 1e-5, 20, 2, 1e-2, 5000, 1000.0, 0.01).record().record()
    assert accountant_from_dict(acc.to_dict()) == acc
    with pytest.raises(ValueError, match="sensitivity"):
        TreeStreamAccountant.from_dict(acc.to_dict() | {"sensitivity": acc.sensitivity / 2})
    with pytest.raises(ValueError, match="Unknown"):
        TreeStreamAccountant.from_dict(acc.to_dict() | {"sigma": 0.1})
    full = TreeStreamAccountant.calibrated(1.0, 1e-5, 3, 1, 1e-2, 5000, 1000.0, 0.01).record().record().record()
    with pytest.raises(BudgetExceededError):
        full.record()
    assert full.epsilon_spent() == pytest.approx(1.0, abs=1e-6) and full.mu_spent(0) == 0.0


def test_epsilon_spent_against_dp_accounting() -> None:
    """A prefix's ε (the certificate's) against Google's dp_accounting: the first release (sensitivity Δ, noise σ₀)
    composed with the nodes published so far (sensitivity √S_k², enumerated independently, noise σ) as privacy-loss
    distributions; δ at the certificate's ε is δ (up to the PLD's pessimistic discretisation). 3 % less node noise
    (a mutation of the accountant) would give a larger δ."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    acc = TreeStreamAccountant.calibrated(1.0, 1e-5, 200, 1, 1e-2, 99_000, 1200.0, 1e-6)
    for k in (1, 37, 200):
        acc_k = dataclasses.replace(acc, releases=k)
        eps = acc_k.epsilon_spent()
        t = acc.tree
        s2 = _prefix_s2(k, 1, 1e-2, 99_000, 1200.0, 1e-6)
        dist = pld.from_gaussian_mechanism(t.sigma_first / t.sensitivity, value_discretization_interval=1e-4)
        if s2 > 0:
            dist = dist.compose(pld.from_gaussian_mechanism(t.sigma / math.sqrt(s2),
                                                            value_discretization_interval=1e-4))
        got = dist.get_delta_for_epsilon(eps)
        assert 0.97e-5 <= got <= 1.03e-5, (k, got)
        if k == 200:  # the whole horizon: 3 % less node noise is caught
            worse = pld.from_gaussian_mechanism(t.sigma_first / t.sensitivity, value_discretization_interval=1e-4)
            worse = worse.compose(pld.from_gaussian_mechanism(0.97 * t.sigma / math.sqrt(s2),
                                                              value_discretization_interval=1e-4))
            assert worse.get_delta_for_epsilon(eps) > 1.03e-5

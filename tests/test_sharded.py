"""lethe.sharded: exact sharded unlearning (SISA) — exactness bit for bit, cost, the keyed partition, persistence."""

from __future__ import annotations

import copy
import json
import os
import pickle
import threading

import numpy as np
import pytest
from scipy import stats
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression, SGDClassifier, SGDRegressor
from sklearn.neural_network import MLPClassifier
from sklearn.tree import DecisionTreeRegressor

from lethe.io import load_npz, save_npz
from lethe.sharded import (
    ExactCertificate,
    ShardedClassifier,
    ShardedRegressor,
    TorchShardClassifier,
    shard_assignment,
)

KEY = b"0123456789abcdef-test-key"


def _data(n: int = 240, d: int = 4, classes: int = 3, seed: int = 0, regression: bool = False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if regression:
        return X, X @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    W = rng.normal(size=(d, classes))
    return X, np.argmax(X @ W + 0.5 * rng.normal(size=(n, classes)), axis=1)


def _ids(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) * 7 + 1000  # stable record keys, not positions


def _shard_params(est) -> list[np.ndarray]:
    """The learned parameters of one shard, where accessible."""
    if est is None:
        return []
    if isinstance(est, TorchShardClassifier):
        return [v.detach().numpy() for v in est.module_.state_dict().values()]
    out = []
    for attr in ("coef_", "intercept_", "coefs_", "intercepts_"):
        v = getattr(est, attr, None)
        if v is not None:
            out += [np.asarray(a) for a in (v if isinstance(v, list) else [v])]
    if hasattr(est, "tree_"):
        out += [est.tree_.threshold, est.tree_.value, est.tree_.feature]
    if hasattr(est, "booster_"):  # LightGBM: the whole model as text (trees, thresholds, leaf values)
        out.append(np.frombuffer(est.booster_.model_to_string().encode(), dtype=np.uint8))
    if hasattr(est, "_predictors"):
        out += [p.nodes["value"] for it in est._predictors for p in it]
        out += [p.nodes["num_threshold"] for it in est._predictors for p in it]
    return out


def _same_model(a, b, X) -> bool:
    """Bit-for-bit equality of two sharded models: predictions, and every shard's parameters."""
    if type(a) is not type(b) or a.n_shards_ != b.n_shards_:
        return False
    preds = (lambda m: m.predict_proba(X)) if isinstance(a, ShardedClassifier) else (lambda m: m.predict(X))
    if not np.array_equal(preds(a), preds(b)):
        return False
    for ea, eb in zip(a.estimators_, b.estimators_, strict=True):
        if (ea is None) != (eb is None):
            return False
        pa, pb = _shard_params(ea), _shard_params(eb)
        if len(pa) != len(pb) or not all(np.array_equal(x, y) for x, y in zip(pa, pb, strict=True)):
            return False
    return True


AUGMENT = {"kind": "shift", "image_shape": [2, 2], "max_shift": 1}


def _lgbm(**kw):
    import lightgbm  # the dev extra installs it

    return lightgbm.LGBMClassifier(n_estimators=8, num_leaves=4, min_child_samples=5, num_threads=1,
                                   deterministic=True, force_row_wise=True, verbose=-1, **kw)


CASES = {
    "hgb-R1": (ShardedClassifier, lambda: HistGradientBoostingClassifier(max_iter=8, early_stopping=False), 1,
               "vote"),
    # early stopping draws its validation split from the shard's recorded seed: still a function of the shard's rows
    "hgb-early-stopping-R1": (ShardedClassifier, lambda: HistGradientBoostingClassifier(
        max_iter=30, early_stopping=True, validation_fraction=0.2, n_iter_no_change=2), 1, "mean_proba"),
    # LightGBM (the alternative to HistGradientBoosting): deterministic on one thread
    "lightgbm-R1": (ShardedClassifier, lambda: _lgbm(), 1, "mean_proba"),
    "logreg-R1-mean_proba": (ShardedClassifier, lambda: LogisticRegression(), 1, "mean_proba"),
    "sgd-R4": (ShardedClassifier, lambda: SGDClassifier(), 4, "vote"),
    "mlp-R3": (ShardedClassifier, lambda: MLPClassifier(hidden_layer_sizes=(8,), max_iter=5), 3, "mean_proba"),
    "torch-R3": (ShardedClassifier, lambda: TorchShardClassifier({"kind": "mlp", "hidden": [8]}, batch_size=16), 3,
                 "mean_proba"),
    # augmentation: every minibatch's rows shifted as 2x2 images, shifts drawn from the (seed, call) generator
    # and the step size decayed linearly within each stage
    "torch-augment-linear-R3": (ShardedClassifier, lambda: TorchShardClassifier(
        {"kind": "mlp", "hidden": [8]}, batch_size=16, augment=AUGMENT, lr_schedule="linear"), 3, "mean_proba"),
    "tree-regressor-R1": (ShardedRegressor, lambda: DecisionTreeRegressor(max_depth=4), 1, "mean"),
    "sgd-regressor-R3": (ShardedRegressor, lambda: SGDRegressor(), 3, "mean"),
}


def _make(case: str, **kw):
    cls, est, R, agg = CASES[case]
    return cls(est(), **{"n_shards": 4, "n_slices": R, "aggregation": agg, "key": KEY, "random_state": 7, **kw})


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("case", sorted(CASES))
def test_removals_equal_a_fit_without_the_records_bit_for_bit(case):
    """After sequential batches of removals (by key and by index), the model equals, predictions and parameters bit
    for bit, the model fitted from scratch on the remaining records with the same key and random_state."""
    regression = CASES[case][0] is ShardedRegressor
    for seed in range(3):
        X, y = _data(seed=seed, regression=regression)
        ids = _ids(len(y))
        model = _make(case).fit(X, y, sample_ids=ids)
        rng = np.random.default_rng(100 + seed)
        removed: list[int] = []
        for step, size in enumerate((1, 3, 7)):
            pool = np.setdiff1d(np.arange(len(y)), removed)
            batch = rng.choice(pool, size=size, replace=False)
            held_in = set(model.shard_of_[batch].tolist())  # read before: a removal erases it (-1)
            cert = model.remove(keys=ids[batch]) if step % 2 == 0 else model.remove(indices=batch)
            removed += batch.tolist()
            assert cert.guarantee == "exact" and cert.epsilon == 0.0 and cert.delta == 0.0
            assert cert.n_removed == size and cert.n_remaining == len(y) - len(removed)
            keep = np.setdiff1d(np.arange(len(y)), removed)
            fresh = _make(case).fit(X[keep], y[keep], sample_ids=ids[keep])
            assert _same_model(model, fresh, X), (case, seed, step)
            # the unsharded row order is kept: only the shards of the removed rows changed
            assert set(cert.retrained_shards) == held_in


def test_exactness_check_detects_a_model_that_still_saw_the_record():
    """The comparison is not vacuous: a model fitted on all rows differs from one without the removed rows, and a
    removal that forgets to drop the rows (mutation) is caught."""
    X, y = _data()
    ids = _ids(len(y))
    full = _make("sgd-R4").fit(X, y, sample_ids=ids)
    keep = np.arange(1, len(y))
    assert not _same_model(full, _make("sgd-R4").fit(X[keep], y[keep], sample_ids=ids[keep]), X)


def _replay_mutant(monkeypatch, shift: int):
    """Mutation: replay the shard from the checkpoint ``shift`` slices AFTER the earliest one holding a removed
    record (a checkpoint that saw the record)."""
    original = ShardedClassifier._train_shard

    def mutant(self, s, active, start, previous):
        later = min(start + shift, self.n_slices_ - 1)
        if hasattr(self, "checkpoints_") and later > start and self.checkpoints_[s][later - 1] is not None:
            return original(self, s, active, later, self.checkpoints_[s][later - 1])
        return original(self, s, active, start, previous)

    monkeypatch.setattr(ShardedClassifier, "_train_shard", mutant)


def test_mutation_replaying_from_a_later_checkpoint_breaks_exactness(monkeypatch):
    X, y = _data()
    ids = _ids(len(y))
    model = _make("sgd-R4").fit(X, y, sample_ids=ids)
    # a record in slice 0 of its shard, so the earliest checkpoint is "from scratch"
    victim = int(np.flatnonzero(model.slice_of_ == 0)[0])
    _replay_mutant(monkeypatch, 2)
    model.remove(indices=[victim])
    monkeypatch.undo()
    keep = np.setdiff1d(np.arange(len(y)), [victim])
    assert not _same_model(model, _make("sgd-R4").fit(X[keep], y[keep], sample_ids=ids[keep]), X)


def test_mutation_positional_slices_break_exactness():
    """Why slices come from the keyed hash and not from positions: slices by position within the shard shift when a
    row leaves, so replaying from the old checkpoint is not the model without the row."""
    X, y = _data()
    ids = _ids(len(y))
    model = _make("sgd-R4").fit(X, y, sample_ids=ids)
    victim = int(np.flatnonzero(model.slice_of_ == 1)[0])
    s = model.shard_of_[victim]
    # mutant state: positional slices (rows of the shard cut into R equal runs), then a replay from slice 1
    rows = np.flatnonzero(model.shard_of_ == s)
    mutant = copy.deepcopy(model)
    mutant.slice_of_ = mutant.slice_of_.copy()
    mutant.slice_of_[rows] = np.arange(rows.size) * mutant.n_slices_ // rows.size
    est, cps, _ = mutant._train_shard(s, mutant.active_, 0, None)
    mutant.estimators_[s], mutant.checkpoints_[s] = est, cps
    mutant.remove(indices=[victim])
    keep = np.setdiff1d(np.arange(len(y)), [victim])
    fresh = _make("sgd-R4").fit(X[keep], y[keep], sample_ids=ids[keep])
    fresh.slice_of_ = fresh.slice_of_.copy()
    rows = np.flatnonzero(fresh.shard_of_ == s)
    fresh.slice_of_[rows] = np.arange(rows.size) * fresh.n_slices_ // rows.size
    est, cps, _ = fresh._train_shard(s, fresh.active_, 0, None)
    fresh.estimators_[s], fresh.checkpoints_[s] = est, cps
    assert not _same_model(mutant, fresh, X)


class _Counting(ClassifierMixin, BaseEstimator):
    """A classifier that counts its fit/partial_fit calls (class-level log of (seed, rows))."""

    log: list[tuple[str, int, int]] = []

    def __init__(self, random_state=None):
        self.random_state = random_state

    def fit(self, X, y):
        _Counting.log.append(("fit", self.random_state, len(y)))
        self.classes_ = np.unique(y)
        self.mean_ = X.mean(axis=0)
        return self

    def partial_fit(self, X, y, classes=None):
        _Counting.log.append(("partial_fit", self.random_state, len(y)))
        self.classes_ = np.asarray(classes)
        self.mean_ = X.mean(axis=0)
        return self

    def predict(self, X):
        return np.full(X.shape[0], self.classes_[0])


def test_only_the_affected_shards_are_retrained_from_the_right_slice():
    X, y = _data(n=400)
    ids = _ids(len(y))
    for R in (1, 4):
        _Counting.log.clear()
        model = ShardedClassifier(_Counting(), n_shards=8, n_slices=R, key=KEY, random_state=1).fit(
            X, y, sample_ids=ids)
        assert len(_Counting.log) == model.n_shard_fits_ == 8 * R  # every shard and stage trained once
        rng = np.random.default_rng(R)
        for _ in range(10):
            before = list(model.estimators_)
            victim = int(rng.choice(np.flatnonzero(model.active_)))
            s, r = int(model.shard_of_[victim]), int(model.slice_of_[victim])
            _Counting.log.clear()
            fits = model.n_shard_fits_
            cert = model.remove(indices=[victim])
            assert cert.retrained_shards == (s,) and cert.restart_slices == ((r,) if R > 1 else (0,))
            assert len(_Counting.log) == model.n_shard_fits_ - fits == R - r if R > 1 else 1
            assert {seed for _, seed, _ in _Counting.log} == {int(model.seeds_[s])}
            rows = np.flatnonzero(model.active_ & (model.shard_of_ == s))
            replayed = sum(int(np.count_nonzero(model.slice_of_[rows] <= q)) for q in range(r, R)) if R > 1 \
                else rows.size
            assert cert.rows_replayed == replayed == sum(n for _, _, n in _Counting.log)
            assert all(model.estimators_[t] is before[t] for t in range(8) if t != s)
            assert model.estimators_[s] is not before[s]


def test_a_batch_retrains_each_affected_shard_once():
    X, y = _data(n=400)
    _Counting.log.clear()
    model = ShardedClassifier(_Counting(), n_shards=8, key=KEY, random_state=1).fit(X, y)
    _Counting.log.clear()
    batch = np.arange(0, 60, 3)
    shards = sorted(set(model.shard_of_[batch].tolist()))
    cert = model.remove(indices=batch)
    assert list(cert.retrained_shards) == shards and len(_Counting.log) == len(shards)


def test_removing_the_last_record_of_a_class_retrains_every_shard_exactly():
    X, y = _data(n=200, classes=2)
    y = y.copy()
    y[17] = 2  # a class with one record
    ids = _ids(len(y))
    model = _make("sgd-R4").fit(X, y, sample_ids=ids)
    cert = model.remove(keys=[ids[17]])
    assert cert.n_shards_retrained == 4 and list(model.classes_) == [0, 1]
    keep = np.setdiff1d(np.arange(len(y)), [17])
    assert _same_model(model, _make("sgd-R4").fit(X[keep], y[keep], sample_ids=ids[keep]), X)


# -- the keyed partition ----------------------------------------------------------------------------------------------
def test_keyed_partition_is_balanced_stable_and_depends_on_the_key():
    keys = np.arange(20_000)
    shard, slc = shard_assignment(keys, KEY, 8, 4)
    # balanced: chi-square goodness of fit to uniform (seeded data; fails with probability 1e-4 for a true PRF)
    assert stats.chisquare(np.bincount(shard, minlength=8)).pvalue > 1e-4
    assert stats.chisquare(np.bincount(slc, minlength=4)).pvalue > 1e-4
    assert stats.chisquare(np.bincount(shard * 4 + slc, minlength=32)).pvalue > 1e-4  # shard and slice independent
    # a key's shard depends on that key only (not on the other records)
    sub = keys[::7]
    assert np.array_equal(shard_assignment(sub, KEY, 8, 4)[0], shard[::7])
    # another secret gives an unrelated partition: agreement ≈ 1/S (binomial, 5 sigma)
    other, _ = shard_assignment(keys, b"another-secret-key-16", 8, 4)
    agree = np.mean(other == shard)
    assert abs(agree - 1 / 8) < 5 * np.sqrt(1 / 8 * 7 / 8 / len(keys))
    # strings and integers are distinct keys
    assert shard_assignment(np.array(["5"]), KEY, 1_000_003)[0][0] != shard_assignment(np.array([5]), KEY,
                                                                                        1_000_003)[0][0]


def test_default_key_is_drawn_and_secret():
    X, y = _data()
    a = ShardedClassifier(LogisticRegression(), n_shards=4, random_state=0).fit(X, y)
    b = ShardedClassifier(LogisticRegression(), n_shards=4, random_state=0).fit(X, y)
    assert len(a.key_) == 32 and a.key_ != b.key_
    assert not np.array_equal(a.shard_of_, b.shard_of_)
    assert a.key_.hex() not in repr(a)
    c = ShardedClassifier(LogisticRegression(), key=KEY)
    assert "<secret>" in repr(c) and KEY.decode() not in repr(c)
    bundle = c._repr_mimebundle_()  # the IPython display protocol (text/plain and the HTML diagram)
    assert set(bundle) == {"text/plain", "text/html"}
    for text in bundle.values():
        assert KEY.decode() not in text and KEY.hex() not in text and "secret" in text


# -- certificates -----------------------------------------------------------------------------------------------------
def test_certificate_public_view_hides_operator_fields():
    X, y = _data()
    model = _make("sgd-R4").fit(X, y, sample_ids=_ids(len(y)))
    cert = model.remove(indices=[3])
    assert isinstance(cert, ExactCertificate)
    full, public = cert.to_dict(), cert.public_dict()
    json.dumps(full)
    assert set(full) - set(public) == ExactCertificate.OPERATOR_ONLY
    assert "retrained_shards" not in json.dumps(public) and public["guarantee"] == "exact"
    with pytest.raises(AttributeError):
        cert.epsilon = 1.0  # type: ignore[misc]


# -- persistence ------------------------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("case", ["hgb-R1", "mlp-R3", "torch-R3", "torch-augment-linear-R3", "sgd-regressor-R3"])
def test_save_load_round_trip_then_removals_stay_exact(case, tmp_path):
    regression = CASES[case][0] is ShardedRegressor
    X, y = _data(regression=regression)
    ids = _ids(len(y))
    model = _make(case).fit(X, y, sample_ids=ids)
    model.remove(keys=ids[:5])
    path = model.save(tmp_path / "m.npz")
    assert os.stat(path).st_mode & 0o777 == 0o600
    loaded = type(model).load(path)
    assert _same_model(model, loaded, X)
    assert loaded.key_ == model.key_ and np.array_equal(loaded.seeds_, model.seeds_)
    c1, c2 = model.remove(keys=ids[10:14]), loaded.remove(keys=ids[10:14])
    assert c1.retrained_shards == c2.retrained_shards and _same_model(model, loaded, X)


def test_load_torch_factory_needs_the_factory(tmp_path):
    import torch

    def factory(d, k):
        return torch.nn.Sequential(torch.nn.Linear(d, 6), torch.nn.Tanh(), torch.nn.Linear(6, k))

    X, y = _data()
    model = ShardedClassifier(factory, n_shards=3, n_slices=2, key=KEY, random_state=2).fit(X, y)
    path = model.save(tmp_path / "t.npz")
    with pytest.raises(ValueError, match="factory"):
        ShardedClassifier.load(path)
    with pytest.raises(ValueError, match="differ from the saved"):
        ShardedClassifier.load(path, estimator=TorchShardClassifier(factory, lr=0.5))
    loaded = ShardedClassifier.load(path, estimator=TorchShardClassifier(factory))
    assert _same_model(model, loaded, X)


def _edit(path, tmp_path, change):
    arrays, meta = load_npz(path)
    change(arrays, meta)
    meta.pop("format_version")
    return save_npz(tmp_path / "edited.npz", arrays, meta)


def test_load_checks_the_invariants(tmp_path):
    X, y = _data()
    model = _make("hgb-R1").fit(X, y, sample_ids=_ids(len(y)))
    path = model.save(tmp_path / "m.npz")

    def move_row(a, m):
        a["shard_of"] = a["shard_of"].copy()
        a["shard_of"][0] = (a["shard_of"][0] + 1) % 4

    def other_key(a, m):
        m["key_hex"] = (b"x" * 32).hex()

    def drop_shard(a, m):
        m["shards"] = m["shards"][:-1]

    def revive_row(a, m):
        a["active"] = a["active"].copy()
        a["active"][0] = False  # a row leaves a shard without a retraining

    def swap_keys(a, m):
        a["keys"] = a["keys"][::-1].copy()

    for change, match in ((move_row, "partition"), (other_key, "partition"), (drop_shard, "shards recorded"),
                          (revive_row, "row set"), (swap_keys, "partition")):
        with pytest.raises(ValueError, match="no authentication tag"):  # by default: no tag, refused
            ShardedClassifier.load(_edit(path, tmp_path, change))
        with pytest.raises(ValueError, match=match):  # trusted anyway: the invariant checks still refuse it
            ShardedClassifier.load(_edit(path, tmp_path, change), trust_unauthenticated=True)
    with pytest.raises(ValueError, match="not a ShardedRegressor"):
        ShardedRegressor.load(path)


def test_load_refuses_untrusted_types(tmp_path):
    from sklearn.ensemble import RandomForestClassifier

    X, y = _data()
    model = ShardedClassifier(RandomForestClassifier(n_estimators=2), n_shards=2, key=KEY, random_state=0).fit(X, y)
    path = model.save(tmp_path / "rf.npz")
    with pytest.raises(ValueError, match="trusted"):
        ShardedClassifier.load(path)
    loaded = ShardedClassifier.load(path, trusted=["sklearn.tree._tree.Tree"])
    assert np.array_equal(loaded.predict_proba(X), model.predict_proba(X))


LGBM_TYPES = ["collections.OrderedDict", "lightgbm.basic.Booster", "lightgbm.sklearn.LGBMClassifier"]


def test_lightgbm_shards_save_and_load_with_their_types_trusted_then_stay_exact(tmp_path):
    """LightGBM's types are not trusted by default (its Booster is rebuilt from a model string by LightGBM's own
    parser): load refuses them until named, then the loaded model equals the saved one and its removals stay exact."""
    X, y = _data()
    ids = _ids(len(y))
    model = _make("lightgbm-R1").fit(X, y, sample_ids=ids)
    path = model.save(tmp_path / "lgbm.npz")
    with pytest.raises(ValueError, match="trusted"):
        ShardedClassifier.load(path)
    loaded = ShardedClassifier.load(path, trusted=LGBM_TYPES)
    assert _same_model(model, loaded, X)
    loaded.remove(keys=ids[:3])
    keep = np.arange(3, len(y))
    assert _same_model(loaded, _make("lightgbm-R1").fit(X[keep], y[keep], sample_ids=ids[keep]), X)


# -- secrets, copies, threads -----------------------------------------------------------------------------------------
def test_pickle_refused_with_a_secret_deepcopy_and_clone_work():
    X, y = _data()
    unfitted = ShardedClassifier(LogisticRegression(), n_shards=2)
    assert pickle.loads(pickle.dumps(unfitted)).n_shards == 2  # no secret: pickles
    with pytest.raises(TypeError, match="SECRET"):
        pickle.dumps(ShardedClassifier(LogisticRegression(), key=KEY))
    model = _make("sgd-R4").fit(X, y)
    with pytest.raises(TypeError, match="SECRET"):
        pickle.dumps(model)
    twin = copy.deepcopy(model)
    assert _same_model(model, twin, X) and twin._mutex is not model._mutex
    twin.remove(indices=[0])
    assert model.active_[0]  # the copy is independent
    assert clone(model).get_params()["key"] == KEY


def test_concurrent_removals_are_serialised():
    X, y = _data(n=300)
    model = _make("sgd-R4").fit(X, y)
    reference = copy.deepcopy(model)
    batches = [np.arange(i, 300, 25)[:3] for i in range(8)]
    threads = [threading.Thread(target=model.remove, kwargs={"indices": b}) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b in batches:
        reference.remove(indices=b)
    assert model.n_removed_ == 24 and _same_model(model, reference, X)


# -- augmentation (TorchShardClassifier(augment=...)) ------------------------------------------------------------------
def _shift_direct(rows: np.ndarray, shifts: np.ndarray, chw: tuple[int, int, int]) -> np.ndarray:
    """The translation pixel by pixel: out[b, c, i, j] = img[b, c, i + dy, j + dx] if inside the image, else 0."""
    c, h, w = chw
    img = rows.reshape(-1, c, h, w)
    out = np.zeros_like(img)
    for b, (dy, dx) in enumerate(shifts):
        for i in range(h):
            for j in range(w):
                if 0 <= i + dy < h and 0 <= j + dx < w:
                    out[b, :, i, j] = img[b, :, i + dy, j + dx]
    return out.reshape(rows.shape)


def test_shift_images_equals_a_pixel_by_pixel_translation():
    import torch

    from lethe.sharded.torch import shift_images

    rng = np.random.default_rng(5)
    for _ in range(60):
        chw = (int(rng.integers(1, 4)), int(rng.integers(1, 7)), int(rng.integers(1, 7)))
        m = int(rng.integers(0, 4))
        rows = rng.normal(size=(int(rng.integers(1, 9)), int(np.prod(chw))))
        shifts = rng.integers(-m, m + 1, size=(rows.shape[0], 2))
        got = shift_images(torch.from_numpy(rows), shifts, chw, m).numpy()
        assert np.array_equal(got, _shift_direct(rows, shifts, chw)), (chw, m, shifts)


def test_augmentation_is_used_deterministic_and_absent_at_max_shift_zero():
    X, y = _data(n=120, d=4)

    def fit(augment, seed=3):
        return TorchShardClassifier({"kind": "mlp", "hidden": [8]}, batch_size=16, epochs=2, augment=augment,
                                    random_state=seed).fit(X, y)

    def params(m):
        return [v.numpy() for v in m.module_.state_dict().values()]

    def same(a, b):
        return all(np.array_equal(p, q) for p, q in zip(params(a), params(b), strict=True))

    assert same(fit(AUGMENT), fit(AUGMENT))  # a function of the rows and the seed
    assert not same(fit(AUGMENT), fit(None))  # the shifts reach training
    assert not same(fit(AUGMENT), fit(AUGMENT, seed=4))  # drawn from the seed
    assert same(fit({**AUGMENT, "max_shift": 0}), fit(None))  # no shift draws: the plain stream
    assert np.array_equal(fit(AUGMENT).predict_proba(X), fit(AUGMENT).predict_proba(X))


def test_linear_schedule_steps_are_eta_times_one_minus_t_over_T(monkeypatch):
    """The step size of every SGD step, recorded at the step, equals η·(1 − t/T) computed here (T = epochs × ⌈n/B⌉);
    the constant schedule keeps η."""
    import torch

    X, y = _data(n=100)
    seen: list[float] = []
    original = torch.optim.SGD.step

    def recording(self, *a, **k):
        seen.append(self.param_groups[0]["lr"])
        return original(self, *a, **k)

    monkeypatch.setattr(torch.optim.SGD, "step", recording)
    for epochs, batch, lr in ((1, 16, 0.1), (3, 32, 0.5), (2, 100, 0.2), (2, 7, 0.05)):
        seen.clear()
        TorchShardClassifier({"kind": "mlp", "hidden": [4]}, epochs=epochs, batch_size=batch, lr=lr,
                             lr_schedule="linear", random_state=0).fit(X, y)
        T = epochs * int(np.ceil(len(y) / batch))
        assert seen == [lr * (1.0 - t / T) for t in range(T)], (epochs, batch)
        seen.clear()
        TorchShardClassifier({"kind": "mlp", "hidden": [4]}, epochs=epochs, batch_size=batch, lr=lr,
                             random_state=0).fit(X, y)
        assert seen == [lr] * T


def test_bad_schedule_changes_nothing():
    X, y = _data()
    est = TorchShardClassifier({"kind": "mlp", "hidden": [4]}, random_state=0).fit(X, y)
    before = [v.clone() for v in est.module_.state_dict().values()]
    est.set_params(lr_schedule="cosine")
    for call in (lambda: est.fit(X, y), lambda: est.partial_fit(X, y)):
        with pytest.raises(ValueError, match="lr_schedule must be 'constant' or 'linear'. Found 'cosine'"):
            call()
        assert all(np.array_equal(a, b) for a, b in zip(before, est.module_.state_dict().values(), strict=True))


@pytest.mark.parametrize(("augment", "err", "match"), [
    ("shift", TypeError, "augment must be a dict"),
    ({"kind": "flip", "image_shape": [2, 2], "max_shift": 1}, ValueError, "kind 'flip'"),
    ({"kind": "shift", "image_shape": [2, 2], "max_shift": 1, "p": 0.5}, ValueError, r"unknown keys \['p'\]"),
    ({"kind": "shift", "image_shape": [4], "max_shift": 1}, ValueError, "2 or 3 positive integers"),
    ({"kind": "shift", "image_shape": [2, 0], "max_shift": 1}, ValueError, "2 or 3 positive integers"),
    ({"kind": "shift", "image_shape": [2, 2], "max_shift": -1}, ValueError, "max_shift'] must be an integer >= 0"),
    ({"kind": "shift", "image_shape": [2, 2], "max_shift": 1.5}, ValueError, "Found 1.5"),
    ({"kind": "shift", "image_shape": [3, 2], "max_shift": 1}, ValueError, "holds 6 values; the rows have 4"),
])
def test_bad_augment_specs_change_nothing(augment, err, match):
    X, y = _data()
    est = TorchShardClassifier({"kind": "mlp", "hidden": [4]}, augment=augment, random_state=0)
    with pytest.raises(err, match=match):
        est.fit(X, y)
    assert not hasattr(est, "module_") and not hasattr(est, "classes_")


# -- bad input ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kw", "err", "match"), [
    ({"n_shards": 0}, ValueError, "n_shards must be >= 1"),
    ({"n_shards": True}, TypeError, "n_shards must be an integer"),
    ({"n_slices": 2.0}, TypeError, "n_slices must be an integer"),
    ({"key": "a string key of 20 b"}, TypeError, "key must be bytes"),
    ({"key": b"short"}, ValueError, "at least 16 bytes"),
    ({"aggregation": "mean"}, ValueError, "aggregation must be one of"),
    ({"estimator": HistGradientBoostingClassifier(), "n_slices": 2}, ValueError, "trains incrementally"),
    ({"estimator": None}, ValueError, "estimator must be given"),
    ({"estimator": 3}, TypeError, "estimator must be"),
])
def test_bad_parameters(kw, err, match):
    X, y = _data()
    with pytest.raises(err, match=match):
        ShardedClassifier(**{"estimator": LogisticRegression(), **kw}).fit(X, y)


def test_bad_removals_change_nothing():
    X, y = _data()
    ids = _ids(len(y))
    model = _make("logreg-R1-mean_proba").fit(X, y, sample_ids=ids)
    model.remove(indices=[4])
    before = copy.deepcopy(model)
    for kwargs, err, match in (
        ({}, ValueError, "exactly one"),
        ({"indices": [1], "keys": [ids[1]]}, ValueError, "exactly one"),
        ({"indices": [4]}, ValueError, "already removed"),
        ({"indices": [1, 1]}, ValueError, "more than once"),
        ({"indices": [len(y)]}, ValueError, r"indices must be training-row indices in \[0, 240\)"),
        ({"indices": [0.5]}, TypeError, "integers"),
        ({"indices": []}, ValueError, "non-empty"),
        ({"keys": [3]}, ValueError, "not a record"),
        ({"indices": np.arange(len(y))}, ValueError, "already removed"),
        ({"indices": np.setdiff1d(np.arange(len(y)), [4])}, ValueError, "no training record"),
    ):
        with pytest.raises(err, match=match):
            model.remove(**kwargs)
        assert np.array_equal(model.active_, before.active_) and _same_model(model, before, X)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :2])
    with pytest.raises(ValueError, match="one key per row"):
        _make("hgb-R1").fit(X, y, sample_ids=ids[:-1])
    with pytest.raises(ValueError, match="distinct"):
        _make("hgb-R1").fit(X, y, sample_ids=np.zeros(len(y), dtype=int))


def test_quickstart_example_runs(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "sharded_quickstart.py"
    spec = importlib.util.spec_from_file_location("sharded_quickstart", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
    out = capsys.readouterr().out
    assert "equal bit for bit to a model trained without them: True" in out
    assert "reloaded model predicts the same: True" in out
    assert "cust-" not in out.split("for the operator only:")[0]  # the requester's view names no record


def test_partition_matches_an_independent_hmac_computation():
    """shard = h mod S, slice = (h // S) mod R, h = first 8 bytes (big-endian) of HMAC-SHA256(key, type:value)."""
    import hashlib
    import hmac

    rng = np.random.default_rng(5)
    ints = rng.integers(-(2**62), 2**62, size=200)
    strs = np.array([f"user-{i}-é" for i in rng.integers(0, 10**9, size=200)])
    for keys, prefix in ((ints, "i:"), (strs, "s:")):
        for S, R in ((8, 1), (7, 5), (1, 3)):
            shard, slc = shard_assignment(keys, KEY, S, R)
            for k, s, r in zip(keys.tolist(), shard.tolist(), slc.tolist(), strict=True):
                h = int.from_bytes(hmac.new(KEY, (prefix + str(k)).encode(), hashlib.sha256).digest()[:8], "big")
                assert (s, r) == (h % S, (h // S) % R)


# -- authenticated model files (lethe.io's HMAC tag; the policy of the certified estimators) -------------------------
MODEL_KEY = bytes(range(32))


def _rewrite(path, out, change):
    """Copy a saved file entry by entry (the tag included, if any), applying ``change(entries)``: an edit made on disk
    by someone without the model key."""
    with np.load(path, allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    change(entries)
    with open(out, "wb") as f:
        np.savez(f, **entries)
    return out


def test_authenticated_save_load_and_refusals(tmp_path, monkeypatch):
    from lethe.io import KEY_ENV, KEY_FILE_ENV, TAG_KEY, ModelFileError

    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    X, y = _data()
    ids = _ids(len(y))
    model = _make("hgb-R1").fit(X, y, sample_ids=ids)
    path = model.save(tmp_path / "m.npz", key=MODEL_KEY)
    with np.load(path) as z:
        assert TAG_KEY in z.files
    loaded = ShardedClassifier.load(path, key=MODEL_KEY)
    assert _same_model(model, loaded, X)
    assert ShardedClassifier.load(path, key=MODEL_KEY.hex()).key_ == model.key_  # hexadecimal str accepted

    with pytest.raises(ModelFileError, match="failed authentication"):  # under this machine's own key
        ShardedClassifier.load(path)
    with pytest.raises(ModelFileError, match="failed authentication"):
        ShardedClassifier.load(path, key=bytes(32))

    def flip_label(e):  # a label edited: no invariant check sees it (the rows' digests are over positions)
        e["y"] = e["y"].copy()
        e["y"][0] = (e["y"][0] + 1) % 3

    def strip(e):
        del e[TAG_KEY]

    with pytest.raises(ModelFileError, match="failed authentication"):
        ShardedClassifier.load(_rewrite(path, tmp_path / "edited.npz", flip_label), key=MODEL_KEY)
    stripped = _rewrite(path, tmp_path / "stripped.npz", strip)
    with pytest.raises(ModelFileError, match="no authentication tag"):
        ShardedClassifier.load(stripped, key=MODEL_KEY)
    with pytest.raises(ModelFileError, match="no authentication tag"):
        ShardedClassifier.load(stripped)  # without a key given either: a stripped tag is refused by default
    # the stripped and edited file loads only when trusted, and is wrong: the tag is what catches the edit (mutation
    # check: without authentication the edited label goes through every invariant check)
    both = _rewrite(stripped, tmp_path / "both.npz", flip_label)
    trusted = ShardedClassifier.load(both, trust_unauthenticated=True)
    assert not np.array_equal(trusted.y_, model.y_)
    assert trusted.model_file_.authenticated is False
    assert trusted.remove(keys=ids[:1]).to_dict()["authenticated"] is False
    with pytest.raises(ModelFileError, match="no authentication tag"):
        ShardedClassifier.load(both, key=MODEL_KEY)

    # the environment: $LETHE_MODEL_KEY (hexadecimal) signs and checks without key=; a file tagged under another
    # key (this machine's key file, created on the first save) is then refused
    plain = model.save(tmp_path / "plain.npz")
    monkeypatch.setenv(KEY_ENV, MODEL_KEY.hex())
    env_path = model.save(tmp_path / "env.npz")
    assert _same_model(model, ShardedClassifier.load(env_path), X)
    assert _same_model(model, ShardedClassifier.load(path), X)
    with pytest.raises(ModelFileError, match="failed authentication"):
        ShardedClassifier.load(plain)
    monkeypatch.delenv(KEY_ENV)
    key_file = tmp_path / "model.key"
    key_file.write_text(MODEL_KEY.hex() + "\n")
    key_file.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(key_file))
    assert _same_model(model, ShardedClassifier.load(env_path), X)
    with pytest.raises(ValueError, match="at least 16 bytes"):
        model.save(tmp_path / "short.npz", key=b"short")
    assert not (tmp_path / "short.npz").exists()


def test_compacted_model_drops_removed_rows_and_stays_exact():
    X, y = _data()
    ids = _ids(len(y))
    model = _make("hgb-R1").fit(X, y, sample_ids=ids)
    model.remove(keys=ids[[3, 50, 77]])
    small = model.compacted()
    keep = np.setdiff1d(np.arange(len(y)), [3, 50, 77])
    assert np.array_equal(small.keys_, ids[keep]) and np.array_equal(small.X_, X[keep]) and small.active_.all()
    small.remove(keys=ids[[10, 11]])
    fresh = _make("hgb-R1").fit(X[np.setdiff1d(keep, [10, 11])], y[np.setdiff1d(keep, [10, 11])],
                                sample_ids=ids[np.setdiff1d(keep, [10, 11])])
    assert np.array_equal(small.predict_proba(X), fresh.predict_proba(X))

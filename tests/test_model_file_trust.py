"""No unauthenticated model file is trusted by default (issue 35, What to build 2; issue 36, What to build 4).

Every save tags its file under the model key, created on the first save where none is configured (owner-only file in
an owner-only directory, created atomically); every load refuses a file without a valid tag unless the caller passes
``trust_unauthenticated=True``, and the certificates of a model loaded that way say so, also after it is saved again.
A release stream's counts are kept beside the key: an older file of the stream, authentic or not, is refused.

Each edit of the issue is refused by default: σ inflated ×1.2 at d = 784, the noise changed from gaussian to
laplace, two record keys swapped, the tag stripped, a release count truncated, a keyed file rolled back. The
mutation tests show what each refusal rests on: with the tag check taken out (``_authentication_failure`` returning
None) the edited files load and certify falsely; with the counter check taken out the rolled-back file loads.
"""

from __future__ import annotations

import os
import stat
import threading

import numpy as np
import pytest

import lethe.io as io_module
from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.io import TAG_KEY, ModelFileError, model_key
from lethe.model_keys import KeyFileError, counts_path, create_key_file, key_file_path
from lethe.model_origin import UnverifiedCertificate
from lethe.release import ReleasedLogisticRegression

from ._files import KEY, edit_model_file, read_model_file


@pytest.fixture()
def config(tmp_path, monkeypatch):
    """A fresh configuration directory: no key yet."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


def _data(n=400, d=20, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(X[:, 0] + 0.3 * X[:, 1] > 0, 1, 0)
    return X, y


def _no_authentication(monkeypatch):
    """The mutation: the tag check taken out (every file reads as authentic)."""
    monkeypatch.setattr(io_module, "_authentication_failure", lambda *args: None)


# -- the key ---------------------------------------------------------------------------------------------------------
def test_the_first_save_creates_an_owner_only_key_and_later_saves_use_it(config, tmp_path):
    assert model_key() is None and not (config / "lethe" / "model.key").exists()
    X, y = _data()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=0.5, random_state=0).fit(X, y)
    path = clf.save(tmp_path / "m.npz")
    kfile = config / "lethe" / "model.key"
    assert key_file_path() == kfile
    assert stat.S_IMODE(kfile.stat().st_mode) == 0o600
    assert stat.S_IMODE(kfile.parent.stat().st_mode) == 0o700
    text = kfile.read_text()
    assert len(bytes.fromhex(text.strip())) == 32 and TAG_KEY in read_model_file(path)[0]
    clf.save(tmp_path / "m2.npz")
    assert kfile.read_text() == text  # reused, never replaced
    assert CertifiedLogisticRegression.load(path).model_file_.authenticated


def test_a_key_file_others_can_read_is_refused(config, tmp_path):
    X, y = _data()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=0.5, random_state=0).fit(X, y)
    path = clf.save(tmp_path / "m.npz")
    kfile = key_file_path()
    for mode in (0o640, 0o604, 0o620):
        kfile.chmod(mode)
        with pytest.raises(KeyFileError, match="group or others can read or write it"):
            clf.save(tmp_path / "again.npz")
        with pytest.raises(KeyFileError, match="chmod 600"):
            CertifiedLogisticRegression.load(path)
    kfile.chmod(0o600)
    CertifiedLogisticRegression.load(path)


def test_the_key_file_is_created_once_even_when_another_process_is_first(config):
    """The link never replaces: a key file created between this process's temporary write and its link wins (the
    mutation that writes the key in place, e.g. ``os.replace`` instead of ``os.link``, fails here)."""
    path = key_file_path()
    path.parent.mkdir(mode=0o700, parents=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (KEY.hex() + "\n").encode())
    os.close(fd)
    assert create_key_file(path).strip() == KEY.hex()
    assert model_key(create=True) == KEY
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.key"]  # no temporary left behind


def test_concurrent_first_saves_agree_on_one_key(config):
    keys: list[bytes | None] = []
    barrier = threading.Barrier(8)

    def first_save():
        barrier.wait()
        keys.append(model_key(create=True))

    threads = [threading.Thread(target=first_save) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 8 and len(set(keys)) == 1 and keys[0] == bytes.fromhex(key_file_path().read_text())


# -- the edits, refused by default ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wide():
    """d = 784 (MNIST's width), where σ × 1.2 passes the ‖b‖ plausibility test."""
    X, y = _data(n=1000, d=784, seed=1)
    return CertifiedLogisticRegression(lam=1e-2, sigma=0.5, random_state=0).fit(X, y)


def test_sigma_inflated_at_d_784_is_refused_by_default(wide, tmp_path, monkeypatch):
    path = wide.save(tmp_path / "m.npz")
    bad = edit_model_file(path, tmp_path / "bad.npz", meta_fn=lambda m: m["params"].update(sigma=0.6))
    with pytest.raises(ModelFileError, match="failed authentication"):
        CertifiedLogisticRegression.load(bad)
    _no_authentication(monkeypatch)  # mutation: without the tag it loads, claiming a budget 1.2 times too large
    loaded = CertifiedLogisticRegression.load(bad)
    assert loaded.mechanism_.budget == pytest.approx(1.2 * wide.mechanism_.budget)


def test_noise_changed_to_laplace_is_refused_by_default(tmp_path, monkeypatch):
    X, y = _data()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=0.5, random_state=0).fit(X, y)
    bad = edit_model_file(clf.save(tmp_path / "m.npz"), tmp_path / "bad.npz",
                          meta_fn=lambda m: m["params"].update(noise="laplace"))
    with pytest.raises(ModelFileError, match="failed authentication"):
        CertifiedLogisticRegression.load(bad)
    _no_authentication(monkeypatch)  # mutation: it loads (‖b‖ passes the Laplace test) and claims delta = 0
    cert = CertifiedLogisticRegression.load(bad).remove([0])
    assert cert.delta == 0.0 and cert.noise == "laplace"


def test_two_record_keys_swapped_are_refused_by_default(tmp_path, monkeypatch):
    X, y = _data()
    ids = np.array([f"u{i}" for i in range(X.shape[0])])
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=0.5, random_state=0).fit(X, y, sample_ids=ids)

    def swap(a):
        a["keys"][[10, 11]] = a["keys"][[11, 10]]

    bad = edit_model_file(clf.save(tmp_path / "m.npz"), tmp_path / "bad.npz", arrays_fn=swap)
    with pytest.raises(ModelFileError, match="failed authentication"):
        CertifiedLogisticRegression.load(bad)
    _no_authentication(monkeypatch)  # mutation: remove(keys=["u10"]) certifies while u11's row goes
    loaded = CertifiedLogisticRegression.load(bad)
    loaded.remove(keys=["u10"])
    assert not loaded.active_[11] and loaded.active_[10]


def test_a_stripped_tag_is_refused_without_any_key_configured(tmp_path, config, monkeypatch):
    X, y = _data()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=0.5, random_state=0).fit(X, y)
    path = clf.save(tmp_path / "m.npz", key=KEY)  # keyed by hand; no key file here
    stripped = edit_model_file(path, tmp_path / "s.npz", arrays_fn=lambda a: a.pop(TAG_KEY))
    assert model_key() is None
    with pytest.raises(ModelFileError, match="no authentication tag"):
        CertifiedLogisticRegression.load(stripped)
    with pytest.raises(ModelFileError, match="no authentication tag"):
        CertifiedLogisticRegression.load(stripped, key=KEY)
    _no_authentication(monkeypatch)  # mutation: it loads as if authentic
    assert CertifiedLogisticRegression.load(stripped).model_file_.authenticated


# -- trusting an unauthenticated file ---------------------------------------------------------------------------------
def test_a_trusted_unauthenticated_file_says_so_in_every_later_certificate(tmp_path):
    X, y = _data()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=0.5, random_state=0).fit(X, y)
    foreign = clf.save(tmp_path / "m.npz", key=KEY)  # from a machine whose key is not configured here
    with pytest.raises(ModelFileError, match="trust_unauthenticated=True"):
        CertifiedLogisticRegression.load(foreign)
    loaded = CertifiedLogisticRegression.load(foreign, trust_unauthenticated=True)
    assert loaded.model_file_.authenticated is False
    cert = loaded.remove([3])
    assert isinstance(cert, UnverifiedCertificate) and cert.authenticated is False
    assert loaded.certificate_.authenticated is False
    d = cert.to_dict()
    assert d["authenticated"] is False and d["guarantee"].startswith("NOT AUTHENTICATED")
    assert cert.epsilon == cert.certificate.epsilon and cert.residual_bound == cert.certificate.residual_bound
    # saved again under this machine's key: the file authenticates, the origin is kept (no laundering)
    again = CertifiedLogisticRegression.load(loaded.save(tmp_path / "again.npz"))
    assert again.model_file_.authenticated is False
    assert again.remove([4]).to_dict()["authenticated"] is False
    # an edit of the kept origin breaks the tag
    cleaned = edit_model_file(tmp_path / "again.npz", tmp_path / "clean.npz",
                              meta_fn=lambda m: m.pop(io_module.ORIGIN_META))
    with pytest.raises(ModelFileError, match="failed authentication"):
        CertifiedLogisticRegression.load(cleaned)
    # a new fit starts from the caller's data
    again.fit(X, y)
    assert "model_file_" not in again.__dict__
    assert not isinstance(again.remove([5]), UnverifiedCertificate)


# -- release counts: no truncation, no rollback ------------------------------------------------------------------------
def _released(n=800):
    X, y = _data(n=n, d=6)
    return ReleasedLogisticRegression(lam=1e-2, epsilon=1.0, delta=1e-5, horizon=12, random_state=0).fit(X, y)


def _truncate(meta, arrays, releases):
    meta["releases"] = meta["releases"][:releases]
    meta["accountant"]["releases"] = releases
    arrays["release_coefs"] = arrays["release_coefs"][:releases]


def test_a_truncated_release_count_is_refused(tmp_path, monkeypatch):
    m = _released()
    for i in range(9):
        m.remove([i])
    assert m.accountant_.releases == 10
    path = m.save(tmp_path / "m.npz")
    arrays, meta = read_model_file(path)
    arrays.pop(TAG_KEY)

    def unkeyed(out, stream_counts=None):
        """The file truncated to 1 release, written without a tag (as an unkeyed file)."""
        a, mt = {k: v.copy() for k, v in arrays.items()}, __import__("copy").deepcopy(meta)
        _truncate(mt, a, 1)
        if stream_counts is not None:
            mt[io_module.STREAM_META]["counts"] = stream_counts
        return edit_model_file(path, out, arrays_fn=lambda x: (x.clear(), x.update(a)),
                               meta_fn=lambda x: (x.clear(), x.update(mt)))

    bad = unkeyed(tmp_path / "bad.npz")
    with pytest.raises(ModelFileError, match="no authentication tag"):
        ReleasedLogisticRegression.load(bad)
    # trusted anyway: the stream's counts must be the file's own, and not behind those recorded beside the key
    with pytest.raises(ModelFileError, match="differ from the file's own"):
        ReleasedLogisticRegression.load(bad, trust_unauthenticated=True)
    low = unkeyed(tmp_path / "low.npz", stream_counts={"releases": 1, "n_removed": 9})
    with pytest.raises(ModelFileError, match="older state of release stream"):
        ReleasedLogisticRegression.load(low, trust_unauthenticated=True)
    monkeypatch.setattr(io_module, "check_counts", lambda *a: None)  # mutation: the counters not checked
    loaded = ReleasedLogisticRegression.load(low, trust_unauthenticated=True)
    assert loaded.accountant_.releases == 1  # the ledger rolled back: 11 more releases under a horizon of 12


def test_a_keyed_file_rolled_back_to_an_older_authentic_save_is_refused(tmp_path, monkeypatch):
    m = _released()
    m.remove([0])
    old = m.save(tmp_path / "m.npz").read_bytes()
    for i in range(1, 6):
        m.remove([i])
    path = m.save(tmp_path / "m.npz")
    assert ReleasedLogisticRegression.load(path).accountant_.releases == 7
    path.write_bytes(old)  # the older authentic file put back
    with pytest.raises(ModelFileError, match=r"older state of release stream .*releases 2 < 7"):
        ReleasedLogisticRegression.load(path)
    with pytest.raises(ModelFileError, match="older state"):
        ReleasedLogisticRegression.load(path, trust_unauthenticated=True)
    assert counts_path().exists() and stat.S_IMODE(counts_path().stat().st_mode) == 0o600
    monkeypatch.setattr(io_module, "check_counts", lambda *a: None)  # mutation: it loads with 2 releases of 12
    assert ReleasedLogisticRegression.load(path).accountant_.releases == 2


def test_the_counter_follows_loads_and_new_streams(tmp_path, monkeypatch):
    """A file loaded raises the counter (a copy from elsewhere, then its older copy, is refused); a new fit is a new
    stream (its first file loads though it has fewer releases); the limit: under another key location the
    counters are not there."""
    m = _released()
    m.remove([0])
    before = m.save(tmp_path / "before.npz", key=KEY)
    for i in range(1, 4):
        m.remove([i])
    newer = m.save(tmp_path / "newer.npz", key=KEY)
    m2 = _released()
    m2.remove([0])
    m2.save(tmp_path / "other-stream.npz", key=KEY)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "second-machine"))
    assert ReleasedLogisticRegression.load(before, key=KEY).accountant_.releases == 2  # the limit: nothing here
    ReleasedLogisticRegression.load(tmp_path / "other-stream.npz", key=KEY)
    ReleasedLogisticRegression.load(newer, key=KEY)  # raises this machine's counter to 5 releases
    with pytest.raises(ModelFileError, match="releases 2 < 5"):
        ReleasedLogisticRegression.load(before, key=KEY)
    m.fit(*_data(n=800, d=6))  # a new stream
    fresh = m.save(tmp_path / "fresh.npz", key=KEY)
    assert ReleasedLogisticRegression.load(fresh, key=KEY).accountant_.releases == 1
    assert read_model_file(fresh)[1][io_module.STREAM_META]["id"] != read_model_file(newer)[1][
        io_module.STREAM_META]["id"]


# -- every family ------------------------------------------------------------------------------------------------------
def _family_models():
    from sklearn.linear_model import LogisticRegression

    from lethe.sharded import ShardedClassifier

    from .test_protocols import UNLEARNERS, _fit

    out = {name: (lambda name=name: _fit(name)[0]) for name in sorted(UNLEARNERS)}
    X, y = _data(n=240, d=4)
    ids = np.array([f"r{i}" for i in range(X.shape[0])])
    out["sharded"] = lambda: ShardedClassifier(LogisticRegression(), n_shards=3, random_state=0).fit(
        X, y, sample_ids=ids)
    out["released"] = lambda: ReleasedLogisticRegression(lam=1e-2, horizon=12, random_state=0).fit(
        X, y, sample_ids=ids)
    return out


FAMILIES = _family_models()


def _certificate(result):
    return result.certificate if hasattr(result, "coef") else result  # a release holds its certificate


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_refuses_an_unauthenticated_file_and_marks_a_trusted_one(name, tmp_path):
    model = FAMILIES[name]()
    cls = type(model)
    model_key(create=True)  # this machine's own key exists (another one than the file's)
    path = model.save(tmp_path / "m.npz", key=KEY)
    stripped = edit_model_file(path, tmp_path / "s.npz", arrays_fn=lambda a: a.pop(TAG_KEY))
    for bad, message in ((path, "failed authentication"), (stripped, "no authentication tag")):
        with pytest.raises(ModelFileError, match=message):
            cls.load(bad)
    genuine = cls.load(path, key=KEY)
    assert genuine.model_file_.authenticated
    assert not isinstance(_certificate(genuine.remove(keys=["r3"])), UnverifiedCertificate)
    trusted = cls.load(stripped, trust_unauthenticated=True)
    assert trusted.model_file_.authenticated is False
    cert = _certificate(trusted.remove(keys=["r3"]))
    assert cert.to_dict()["authenticated"] is False and cert.guarantee.startswith("NOT AUTHENTICATED")
    assert trusted.certificate_.to_dict()["authenticated"] is False
    again = cls.load(trusted.save(tmp_path / "again.npz"))  # this machine's key: authentic, still marked
    assert again.model_file_.authenticated is False
    assert _certificate(again.remove(keys=["r4"])).to_dict()["authenticated"] is False


def test_a_pipeline_passes_the_trust_on_to_its_final_step(tmp_path):
    import pandas as pd
    from sklearn.preprocessing import Normalizer

    from lethe.pipeline import make_unlearning_pipeline

    X, y = _data(n=240, d=4)
    df = pd.DataFrame(X, index=[f"r{i}" for i in range(X.shape[0])])
    pipe = make_unlearning_pipeline(Normalizer(), CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0))
    pipe.fit(df, y)
    assert type(pipe).load(pipe.save(tmp_path / "own.npz"))[-1].model_file_.authenticated  # the created key
    path = pipe.save(tmp_path / "p.npz", key=KEY)
    with pytest.raises(ModelFileError, match="failed authentication"):
        type(pipe).load(path)
    trusted = type(pipe).load(path, trust_unauthenticated=True)
    assert trusted.remove(keys=["r3"]).to_dict()["authenticated"] is False
    assert trusted.certificate_.to_dict()["authenticated"] is False


def test_a_stale_copy_of_a_stream_cannot_save_over_a_newer_one(tmp_path):
    """Two live models of one stream (the file loaded twice): once one has saved more releases, the stale one's save
    is refused before anything is written (mutation: without the check in ``save_model_file`` it overwrites the newer
    file with the older ledger)."""
    m = _released()
    m.remove([0])
    path = m.save(tmp_path / "m.npz")
    stale = ReleasedLogisticRegression.load(path)
    current = ReleasedLogisticRegression.load(path)
    for i in range(1, 4):
        current.remove([i])
    current.save(path)
    newer = path.read_bytes()
    with pytest.raises(ModelFileError, match="older state of release stream"):
        stale.save(path)
    assert path.read_bytes() == newer

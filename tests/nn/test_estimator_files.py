"""NoisyFineTuneClassifier.save/load: a genuine file round-trips (fresh noise stream), edited files are refused by
the invariant checks, and with a key by the HMAC tag (issue 28, for the neural front end)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lethe.io import ModelFileError
from lethe.nn.estimators import NoisyFineTuneClassifier

from .._files import KEY, edit_model_file, no_key_in_environment  # noqa: F401 (autouse fixture)

torch.set_num_threads(1)


def _fitted():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 60)
    X = rng.normal(size=(60, 4)) * 0.3 + np.eye(3, 4)[y] * 2.0
    clf = NoisyFineTuneClassifier(random_state=0, unlearn_steps=2, batch_size=16, train_epochs=2, post_steps=1)
    clf.fit(X, y, sample_ids=[f"u{i}" for i in range(60)])
    clf.remove([4, 9])
    clf.remove(keys=["u20"])
    return clf, X


EDITS = {
    "NaN theta": (lambda a: a["theta"].__setitem__(0, np.nan), None),
    "theta shape": (lambda a: a.__setitem__("theta", a["theta"][:-1]), None),
    "removed row restored": (lambda a: a["active"].__setitem__(4, True), None),
    "key of a removed row": (lambda a: a["keys"].__setitem__(9, "u9"), None),
    "schedule sigma": (None, lambda m: m["schedule"].__setitem__("sigma", m["schedule"]["sigma"] / 10)),
    "certificate sigma": (None, lambda m: m["certificates"][0].__setitem__("sigma", 1e-9)),
    "certificate count": (None, lambda m: m["certificates"][0].__setitem__("n_removed", 1)),
    "epsilon": (None, lambda m: m["params"].__setitem__("epsilon", 0.1)),
    "label code": (lambda a: a["y"].__setitem__(0, 7), None),
}


@pytest.mark.parametrize("what", sorted(EDITS))
def test_edited_files_are_refused(tmp_path, what):
    clf, _ = _fitted()
    path = clf.save(tmp_path / "m.npz")
    bad = edit_model_file(path, tmp_path / "bad.npz", *EDITS[what])
    with pytest.raises(ModelFileError, match="failed authentication"):  # by default: the tag
        NoisyFineTuneClassifier.load(bad)
    with pytest.raises(ModelFileError, match="refused"):  # trusted anyway: the invariant checks still refuse it
        NoisyFineTuneClassifier.load(bad, trust_unauthenticated=True)


def test_round_trip_and_tag_policy(tmp_path):
    clf, X = _fitted()
    path = clf.save(tmp_path / "m.npz", key=KEY)
    again = NoisyFineTuneClassifier.load(path, key=KEY)
    np.testing.assert_array_equal(again.predict_proba(X), clf.predict_proba(X))
    assert again.certificates_ == clf.certificates_ and again.certificate_ == clf.certificate_
    np.testing.assert_array_equal(again.X_.numpy(), clf.X_.numpy())
    with pytest.raises(ModelFileError, match="failed authentication"):
        NoisyFineTuneClassifier.load(path, key=bytes(32))
    with pytest.raises(ModelFileError, match="failed authentication"):
        NoisyFineTuneClassifier.load(path)  # tagged under another key than this machine's
    nudged = edit_model_file(path, tmp_path / "n.npz", lambda a: a["theta"].__setitem__(0, a["theta"][0] + 1e-3))
    with pytest.raises(ModelFileError, match="failed authentication"):
        NoisyFineTuneClassifier.load(nudged, key=KEY)
    with pytest.raises(ModelFileError, match="no authentication tag"):
        NoisyFineTuneClassifier.load(edit_model_file(path, tmp_path / "u.npz", lambda a: a.pop("__lethe_tag__")))
    # the noise stream is not in the file: the loaded model's next removal draws other noise
    a, b = clf.remove([30]), again.remove([30])
    assert a == b and not np.array_equal(clf.predict_proba(X), again.predict_proba(X))

"""lethe.protocols: every certificate class is a Certificate (guarantee, observer, epsilon, delta, to_dict) and every
unlearning front end an Unlearner (fit, remove by ORIGINAL position or key, add or a declared refusal, certificate_,
save/load) — checked by isinstance, by signature and by behaviour (issue 25, item 3)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import pickle

import numpy as np
import pytest
import torch
from sklearn.preprocessing import FunctionTransformer, Normalizer

from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression, MulticlassCertificate
from lethe.io import ModelFileError
from lethe.nn.accounting import calibrate_model_clip
from lethe.nn.estimators import NoisyFineTuneClassifier
from lethe.nn.models import build_module
from lethe.nn.unlearning import ModelClipCertificate, NNUnlearningCertificate, unlearn_model_clip
from lethe.noisygd.certificate import NoisyGDCertificate
from lethe.noisygd.edit_stream import CuratorConfig, Database, EditRequest, NoisyGDCurator
from lethe.noisygd.estimators import (
    NoisyGDBoundedMLPClassifier,
    NoisyGDLogisticRegression,
    NoisyGDMLPClassifier,
    PNSGDCertificate,
    PNSGDLogisticRegression,
)
from lethe.noisygd.guarantees import deletion_privacy_to_dp
from lethe.noisygd.models import LogisticModel
from lethe.noisygd.schedule import convex_schedule
from lethe.pipeline import make_unlearning_pipeline
from lethe.privacy.output_perturbation import OutputPerturbationLogisticRegression
from lethe.protocols import Certificate, Unlearner

torch.set_num_threads(1)


def _binary(n=240, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)
    return X, y


def _three(n=240, d=4, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = rng.normal(size=(n, d)) * 0.2 + np.eye(3, d)[y] * 0.6
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return X, y


NN = dict(unlearn_steps=2, batch_size=16, train_epochs=2, post_steps=1, model_radius=3.0)

# name -> (unfitted estimator, data maker); all take fit(X, y, sample_ids=...) except the pipeline (DataFrame index)
UNLEARNERS = {
    "certified-logistic": (lambda: CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0), _binary),
    "certified-one-vs-all": (lambda: CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0), _three),
    "certified-linear": (lambda: CertifiedLinearRegression(lam=1e-2), _binary),
    "noisygd-logistic": (lambda: NoisyGDLogisticRegression(random_state=0), _binary),
    "noisygd-bounded-mlp": (lambda: NoisyGDBoundedMLPClassifier(n_hidden=2, lam=1.0, n_iter=20, n_iter_unlearn=5,
                                                                 random_state=0), _binary),
    "noisygd-mlp": (lambda: NoisyGDMLPClassifier(n_hidden=3, n_iter=20, n_iter_unlearn=5, random_state=0), _binary),
    "pnsgd": (lambda: PNSGDLogisticRegression(batch_size=32, learn_epochs=2, random_state=0), _binary),
    "noisy-finetune": (lambda: NoisyFineTuneClassifier(random_state=0, **NN), _three),
}


def _fit(name, keys=True):
    make, data = UNLEARNERS[name]
    X, y = data()
    ids = np.array([f"r{i}" for i in range(X.shape[0])]) if keys else None
    return make().fit(X, y, sample_ids=ids), X, y


def _is_certificate(cert):
    """isinstance(cert, Certificate): every certificate, Guo's included, has guarantee, observer, ε, δ, to_dict."""
    return isinstance(cert, Certificate)


# -- Unlearner ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(UNLEARNERS))
def test_every_front_end_is_an_unlearner_with_one_signature(name):
    est = UNLEARNERS[name][0]()
    assert isinstance(est, Unlearner) and est.certificate_ is None  # unfitted: no certificate yet
    cls = type(est)
    sig = inspect.signature(cls.remove).parameters
    assert list(sig)[:2] == ["self", "indices"] and sig["indices"].default is None
    assert sig["keys"].kind is inspect.Parameter.KEYWORD_ONLY and sig["keys"].default is None
    for method in (cls.save, cls.load):
        p = inspect.signature(method).parameters["key"]
        assert p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None
    assert isinstance(cls.supports_add, bool)
    assert "sample_ids" in inspect.signature(cls.fit).parameters


@pytest.mark.parametrize("name", sorted(UNLEARNERS))
def test_indices_are_original_positions_and_keys_name_the_same_rows(name, tmp_path):
    est, X, y = _fit(name)
    assert isinstance(est, Unlearner)
    c1 = est.remove([0])
    assert _is_certificate(c1) and est.certificate_ is c1
    c2 = est.remove([5])  # ORIGINAL row 5 (after row 0 left, it is the 5th retained row, not the 6th)
    assert est.certificate_ is c2
    c3 = est.remove(keys=["r7"])
    assert est.certificate_ is c3
    for bad, exc, match in (([5], ValueError, "already removed"), ([X.shape[0]], ValueError, "in \\[0, "),
                            ([1.5], TypeError, "integers")):
        with pytest.raises(exc, match=match):
            est.remove(bad)
    with pytest.raises(ValueError, match="not a record of this model"):
        est.remove(keys=["r5"])  # its key left with it
    with pytest.raises(ValueError, match="exactly one of indices"):
        est.remove([1], keys=["r1"])
    assert est.certificate_ is c3  # failed calls changed nothing
    if name == "noisy-finetune":  # the retained rows are exactly the original rows other than 0, 5, 7
        keep = np.setdiff1d(np.arange(X.shape[0]), [0, 5, 7])
        np.testing.assert_array_equal(est.X_.numpy(), X[keep].astype(np.float32))


@pytest.mark.parametrize("name", sorted(UNLEARNERS))
def test_add_is_certified_or_refused_as_declared(name):
    est, X, y = _fit(name, keys=False)
    before = est.predict(X)
    if type(est).supports_add:
        cert = est.add(X[:3] * 0.5, y[:3])
        assert _is_certificate(cert) and est.certificate_ is cert
    else:
        with pytest.raises(NotImplementedError, match="supports_add = False"):
            est.add(X[:3], y[:3])
        np.testing.assert_array_equal(est.predict(X), before)
        assert est.certificate_ is None or est.certificate_.to_dict()["operation"] == "learn"


@pytest.mark.parametrize("name", sorted(UNLEARNERS))
def test_save_load_round_trip_keeps_the_model_and_its_certificate(name, tmp_path):
    est, X, y = _fit(name)
    est.remove([3])
    path = est.save(tmp_path / "m.npz", key=b"k" * 16)
    again = type(est).load(path, key=b"k" * 16)
    assert isinstance(again, Unlearner)
    if hasattr(est, "decision_function"):
        np.testing.assert_array_equal(again.decision_function(X), est.decision_function(X))
    else:
        np.testing.assert_array_equal(again.predict(X), est.predict(X))
    assert again.certificate_.to_dict() == est.certificate_.to_dict()  # every family keeps it (issue 34)
    with pytest.raises(ValueError, match="already removed"):
        again.remove([3])
    again.remove(keys=["r4"])  # the loaded model goes on removing, by position and by key


def test_pipeline_delegates_and_saves_its_stateless_steps(tmp_path):
    import pandas as pd

    X, y = _binary()
    df = pd.DataFrame(X, index=[f"r{i}" for i in range(X.shape[0])])
    pipe = make_unlearning_pipeline(Normalizer(), CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0))
    assert isinstance(pipe, Unlearner) and pipe.supports_add is True and pipe.certificate_ is None
    pipe.fit(df, y)
    cert = pipe.remove(keys=["r3"])
    assert pipe.certificate_ is cert and _is_certificate(cert)
    cert2 = pipe.add(pd.DataFrame(X[:2], index=["new0", "new1"]), y[:2])
    assert pipe.certificate_ is cert2
    pipe.remove(keys=["new1"])
    path = pipe.save(tmp_path / "p.npz", key=b"k" * 16)
    again = type(pipe).load(path, key=b"k" * 16)
    assert isinstance(again, Unlearner) and [n for n, _ in again.steps] == [n for n, _ in pipe.steps]
    np.testing.assert_array_equal(again.decision_function(X), pipe.decision_function(X))
    again.remove(keys=["r4"])
    with pytest.raises(ValueError, match="not a record"):
        again.remove(keys=["r3"])
    with pytest.raises(ModelFileError, match="failed authentication"):
        type(pipe).load(path, key=b"j" * 16)
    plain = pipe[-1].save(tmp_path / "final.npz")
    with pytest.raises(ModelFileError, match="does not hold an UnlearningPipeline"):
        type(pipe).load(plain)
    opaque = make_unlearning_pipeline(FunctionTransformer(np.tanh),
                                      CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0)).fit(X, y)
    with pytest.raises(NotImplementedError, match="cannot be written without pickle"):
        opaque.save(tmp_path / "o.npz")


def test_output_perturbation_is_not_an_unlearner():
    X, y = _binary()
    est = OutputPerturbationLogisticRegression(epsilon=1.0, delta=1e-5, random_state=0).fit(X, y)
    assert not isinstance(est, Unlearner) and not hasattr(est, "remove")


@pytest.mark.parametrize("name", ["noisygd-logistic", "pnsgd", "noisy-finetune"])
def test_a_fitted_model_holding_a_secret_refuses_pickle(name):
    est = UNLEARNERS[name][0]()
    pickle.loads(pickle.dumps(est))  # unfitted: pickles (clones for grid searches)
    est, _, _ = _fit(name)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(est)


def test_a_curator_that_has_learned_refuses_pickle():
    cur, X, y = _curator()
    pickle.loads(pickle.dumps(cur))
    cur.learn(Database(X, y))
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(cur)


# -- Certificate ----------------------------------------------------------------------------------------------------
def _curator(p=0):
    X, y = _binary(n=120, d=3)
    yy = np.where(y == 1, 1.0, -1.0)
    s = convex_schedule(lipschitz=1.0, smoothness=0.25, lam=0.1, n=120, d=3, r=1, q=2.0, epsilon_dp=1.0,
                        epsilon_dd=0.5)
    return NoisyGDCurator(LogisticModel(3), CuratorConfig.from_convex_schedule(s, p=p), random_state=0), X, yy


def _certificates():
    """One certificate of every class (and of each kind of operation where their meaning differs)."""
    out = {}
    X, y = _binary()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X, y)
    out["mechanism"] = clf.remove([0])
    X3, y3 = _three()
    out["multiclass"] = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(X3, y3).remove([0])
    for p in (0, 2):
        cur, Xc, yc = _curator(p)
        out["noisygd-learn"] = cur.learn(Database(Xc, yc))
        out[f"noisygd-edit-p{p}"] = cur.unlearn(EditRequest.deletion([1], 3))
    out["pnsgd"] = PNSGDLogisticRegression(batch_size=32, learn_epochs=2, random_state=0).fit(X, y).remove([1])
    out["nn"] = NoisyFineTuneClassifier(random_state=0, **NN).fit(X3, y3).remove([2])
    model = build_module({"kind": "mlp", "hidden": [4]}, 4, 3, random_state=np.random.default_rng(0))
    s = calibrate_model_clip(1.0, 1e-5, model_clip=0.5, lr=0.1, steps=2)
    out["model-clip"] = unlearn_model_clip(model, torch.tensor(X3, dtype=torch.float32), torch.as_tensor(y3),
                                           schedule=s, batch_size=16, random_state=0)
    return out


CERTS = _certificates()
CLASSES = {"mechanism": "Certificate", "multiclass": MulticlassCertificate, "noisygd-learn": NoisyGDCertificate,
           "noisygd-edit-p0": NoisyGDCertificate, "noisygd-edit-p2": NoisyGDCertificate, "pnsgd": PNSGDCertificate,
           "nn": NNUnlearningCertificate, "model-clip": ModelClipCertificate}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_certificate_is_a_certificate_and_round_trips_through_json(name):
    cert = CERTS[name]
    assert isinstance(cert, Certificate)
    d = cert.to_dict()
    back = json.loads(json.dumps(d))
    assert back == d  # JSON round trip, nothing lost
    for k in ("guarantee", "observer", "epsilon", "delta"):
        assert k in d and d[k] == getattr(cert, k), k
    assert isinstance(d["guarantee"], str) and d["guarantee"] and isinstance(d["observer"], str) and d["observer"]
    # no existing field's value changed: every field is in to_dict with its value
    for f in dataclasses.fields(cert):
        v = getattr(cert, f.name)
        if f.name == "per_class":
            continue
        if isinstance(v, float) and not math.isfinite(v) and d[f.name] is None:
            continue  # mechanism.Certificate writes non-finite numbers as null (strict JSON); the value is unchanged
        assert d[f.name] == (list(v) if isinstance(v, tuple) else v), f.name


def test_the_observers_say_whom_each_guarantee_covers():
    for name in ("multiclass", "pnsgd", "nn", "model-clip"):
        assert CERTS[name].observer == "one published version"
    assert "non-adaptive" in CERTS["noisygd-edit-p0"].observer
    assert "2-adaptive" in CERTS["noisygd-edit-p2"].observer
    assert "model state after this edit" in CERTS["noisygd-edit-p2"].observer
    assert "after learning" in CERTS["noisygd-learn"].observer


def test_renyi_certificates_have_no_delta_and_convert_on_request():
    for name in ("noisygd-learn", "noisygd-edit-p0", "noisygd-edit-p2"):
        cert = CERTS[name]
        assert cert.delta is None
        expected = cert.epsilon_dp if cert.operation == "learn" else cert.epsilon_dd_adaptive
        assert cert.epsilon == expected
        assert cert.to_dp(1e-5) == deletion_privacy_to_dp(cert.q, cert.epsilon, 1e-5)
    p2 = CERTS["noisygd-edit-p2"]
    assert p2.epsilon > p2.epsilon_dd  # the adaptive requester's ε (Thm 4.3), not the non-adaptive one
    for name in ("multiclass", "pnsgd", "nn", "model-clip"):
        assert isinstance(CERTS[name].delta, float)


@pytest.mark.parametrize("key, value", [("observer", "anyone"), ("epsilon", 0.0), ("delta", 1e-9),
                                        ("guarantee", "exact removal")])
def test_noisygd_from_dict_refuses_a_derived_key_that_disagrees(key, value):
    cert = CERTS["noisygd-edit-p0"]
    d = json.loads(cert.to_json())
    assert NoisyGDCertificate.from_dict(d) == cert
    legacy = {k: v for k, v in d.items() if k not in ("guarantee", "observer", "epsilon", "delta")}
    assert NoisyGDCertificate.from_dict(legacy) == cert  # files written before the protocol still load
    with pytest.raises(ValueError, match=key):
        NoisyGDCertificate.from_dict({**d, key: value})


def test_nn_from_dict_round_trip_and_refusal():
    cert = CERTS["nn"]
    assert NNUnlearningCertificate.from_dict(json.loads(json.dumps(cert.to_dict()))) == cert
    with pytest.raises(ValueError, match="observer"):
        NNUnlearningCertificate.from_dict({**cert.to_dict(), "observer": "everyone"})


def test_release_stream_and_sharded_models_follow_the_protocols():
    """The estimators added in round 3 (private releases, exact sharding) are Unlearners with Certificates too."""
    from sklearn.linear_model import LogisticRegression

    from lethe.release import ReleasedLogisticRegression
    from lethe.sharded import ShardedClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * 1.01
    y = (X[:, 0] > 0).astype(int)
    for model in (ReleasedLogisticRegression(lam=1e-2, horizon=5, random_state=0),
                  ShardedClassifier(LogisticRegression(), n_shards=4, random_state=0)):
        assert isinstance(model, Unlearner) and model.supports_add is False
        model.fit(X, y)
        with pytest.raises(NotImplementedError, match="cannot add"):
            model.add(X[:2], y[:2])
        out = model.remove(indices=[3])
        cert = getattr(out, "certificate", out)
        assert isinstance(cert, Certificate) and model.certificate_ == cert
        d = json.loads(json.dumps(cert.to_dict()))
        assert d["observer"] == cert.observer and isinstance(cert.guarantee, str) and cert.guarantee

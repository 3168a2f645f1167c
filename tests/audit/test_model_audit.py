"""The audit of a user's own model (lethe.audit.model, ``lethe audit --model-file``): deleted records that are truly
removed look like held-out records, within the bound; deleted records still in a memorising model are found, and the
audit fails."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from lethe.audit.model import audit_model, audit_version, confidence_scores, margins
from lethe.audit.stats import advantage, dp_advantage_bound
from lethe.certified.estimators import CertifiedLogisticRegression

N_TRAIN, N_DELETED, N_HELDOUT, D = 200, 100, 200, 400


def _population(seed=0):
    """Pure-noise labels with d > n: a model can only memorise, so members are easy to tell from non-members (the
    set-up of the papers' experiment's positive control). Rows on the unit sphere."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_TRAIN + N_HELDOUT, D))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.choice([-1.0, 1.0], size=X.shape[0])
    return X[:N_TRAIN], y[:N_TRAIN], X[N_TRAIN:], y[N_TRAIN:]


def _memorising(X, y):
    """Unregularised, unperturbed logistic regression (no intercept): fits every training label."""
    return LogisticRegression(C=1e6, fit_intercept=False, max_iter=5000).fit(X, y)


@pytest.fixture(scope="module")
def removed():
    """A certified model after removing the first N_DELETED training rows one request at a time (Newton steps, no
    retraining), and the plain model retrained from scratch without them (exact unlearning)."""
    X, y, Xh, yh = _population()
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, epsilon=1.0, delta=1e-5, random_state=0).fit(X, y)
    certs = [clf.remove([i]) for i in range(N_DELETED)]
    assert not any(c.retrained for c in certs)  # the audit exercises certified removal, not retraining
    return X, y, Xh, yh, clf, certs, _memorising(X[N_DELETED:], y[N_DELETED:])


def test_truly_removed_records_look_like_heldout_records_within_the_bound(removed):
    X, y, Xh, yh, clf, cert, retrained = removed
    audit = audit_model([clf, retrained], X[:N_DELETED], y[:N_DELETED], Xh, yh, names=["certified", "retrained"])
    cert_v, retr_v = audit.versions
    bound = dp_advantage_bound(1.0, 1e-5)
    # the certified version claims its own (ε, δ); the plain retrained one claims nothing unless told
    assert (cert_v.epsilon, cert_v.delta, cert_v.bound) == (1.0, 1e-5, pytest.approx(bound))
    assert retr_v.bound is None and retr_v.within_bound is None
    for v in audit.versions:
        assert v.low < 0 < v.high, v  # no evidence of membership: the interval contains 0
        assert (v.n_deleted, v.n_heldout) == (N_DELETED, N_HELDOUT)
    assert cert_v.within_bound and cert_v.confidently_within  # the whole interval below 0.462
    assert audit.passed
    text = str(audit)
    assert "certified" in text and "within the bound" in text and "no guarantee claimed" in text
    assert text.endswith("PASSED: no version's advantage exceeds its bound, and each interval is narrower than the "
                         "bound (the audit could have failed).")
    assert audit.verdict == "passed" and cert_v.verdict == "passed" and retr_v.verdict == "no guarantee claimed"
    assert cert_v.detectable == pytest.approx(cert_v.advantage - cert_v.low)
    assert cert_v.fails_above == pytest.approx(bound + cert_v.detectable)
    # the same bound checked on the retrained version when stated
    again = audit_model([clf, retrained], X[:N_DELETED], y[:N_DELETED], Xh, yh, epsilon=1.0, delta=1e-5)
    assert again.versions[1].within_bound and again.passed


def test_records_still_in_a_memorising_model_are_found_and_the_audit_fails(removed):
    """Positive control: the 'deleted' records were never removed from an unregularised, unperturbed fit."""
    X, y, Xh, yh, *_ = removed
    kept = _memorising(X, y)
    assert kept.score(X, y) == 1.0
    audit = audit_model([kept], X[:N_DELETED], y[:N_DELETED], Xh, yh, epsilon=0.5, delta=1e-5)
    (v,) = audit.versions
    assert v.low > 0.3 and v.auc > 0.7, v  # clearly positive
    bound = dp_advantage_bound(0.5, 1e-5)
    assert v.low > bound and v.within_bound is False and not audit.passed
    assert "EXCEEDS the bound" in str(audit) and str(audit).endswith("FAILED: a version's advantage exceeds the "
                                                                     "bound its guarantee implies.")
    # the versions after unlearning are audited beside it: only the one that kept the records fails
    _, _, _, _, clf, _, retrained = removed
    seq = audit_model([kept, clf, retrained], X[:N_DELETED], y[:N_DELETED], Xh, yh, epsilon=0.5, delta=1e-5)
    assert [v.within_bound for v in seq.versions] == [False, True, True]


def test_the_statistics_are_those_of_the_scores_computed_independently(removed):
    """Weights, a callable and the estimator give the same audit; it equals advantage() on y · Xw computed here."""
    X, y, Xh, yh, clf, *_ = removed
    w = clf.coef_.ravel()
    direct = advantage(y[:N_DELETED] * (X[:N_DELETED] @ w), yh * (Xh @ w), random_state=3)
    for version in (w, lambda A: A @ w, clf):
        v = audit_version(version, X[:N_DELETED], y[:N_DELETED], Xh, yh, epsilon=2.0, delta=1e-6,
                          random_state=3, classes=[-1.0, 1.0])
        assert (v.advantage, v.low, v.high, v.auc) == pytest.approx(
            (direct.advantage, direct.low, direct.high, direct.auc))
        assert v.bound == pytest.approx(dp_advantage_bound(2.0, 1e-6))
    # labels other than ±1: the positive class is the second of classes
    v01 = audit_version(w, X[:N_DELETED], (y[:N_DELETED] > 0).astype(int), Xh, (yh > 0).astype(int),
                        random_state=3)
    assert v01.advantage == pytest.approx(direct.advantage) and v01.bound is None


def test_multiclass_margins_score_the_true_class_against_the_best_other():
    rng = np.random.default_rng(1)
    for _ in range(20):
        z = rng.normal(size=(30, 4))
        labels = np.array(["a", "b", "c", "d"])
        y = rng.choice(labels, 30)
        phi = confidence_scores(z, y, labels)
        for i in range(30):
            k = int(np.flatnonzero(labels == y[i])[0])
            assert phi[i] == pytest.approx(z[i, k] - max(z[i, j] for j in range(4) if j != k))
    W = rng.normal(size=(3, 5))
    A = rng.normal(size=(7, 5))
    assert margins(W, A) == pytest.approx(A @ W.T)


def test_bad_inputs_are_refused():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(10, 3)), rng.choice([-1, 1], 10)
    w = np.ones(3)
    with pytest.raises(ValueError, match=r"shape \(d,\) or \(K, d\) with d = 3 features. Found \(4,\)"):
        audit_version(np.ones(4), X, y, X, y)
    with pytest.raises(ValueError, match="Labels must be among the classes"):
        audit_version(w, X, np.full(10, 7), X, y, classes=[-1, 1])
    with pytest.raises(ValueError, match="epsilon and delta must be given together"):
        audit_version(w, X, y, X, y, epsilon=1.0)
    with pytest.raises(ValueError, match=r"delta must be in \[0, 1\). Found 1.5"):
        audit_version(w, X, y, X, y, epsilon=1.0, delta=1.5)
    with pytest.raises(ValueError, match=r"at least 2 positive"):
        audit_version(w, X[:1], y[:1], X, y)
    with pytest.raises(ValueError, match="versions must hold at least one version"):
        audit_model([], X, y, X, y)
    with pytest.raises(ValueError, match=r"epsilon must be one value or one per version \(2\). Found 3"):
        audit_model([w, w], X, y, X, y, epsilon=[1, 1, 1], delta=1e-5)


# ---- the CLI: lethe audit --model-file ... --deleted ... --heldout ... ----------------------------------------------

def _csv(path, X, y):
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    frame["label"] = y
    frame.to_csv(path, index=False)
    return str(path)


def test_cli_audits_every_saved_version(removed, tmp_path, capsys):
    from lethe.cli import main

    X, y, Xh, yh, clf, *_ = removed
    before = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, epsilon=1.0, delta=1e-5, random_state=0).fit(X, y)
    files = [str(before.save(tmp_path / "v0.npz")), str(clf.save(tmp_path / "v1.npz"))]
    dele, held = _csv(tmp_path / "deleted.csv", X[:N_DELETED], y[:N_DELETED]), _csv(tmp_path / "held.csv", Xh, yh)
    args = ["audit", "--model-file", files[0], "--model-file", files[1], "--deleted", dele, "--heldout", held]
    assert main([*args, "--out", str(tmp_path / "audit.txt")]) == 0
    out = capsys.readouterr().out
    assert "v0.npz" in out and "v1.npz" in out and "PASSED" in out
    import json

    res = json.loads((tmp_path / "audit.json").read_text())
    assert res["passed"] and [v["name"] for v in res["versions"]] == ["v0.npz", "v1.npz"]
    assert res["versions"][1]["bound"] == pytest.approx(dp_advantage_bound(1.0, 1e-5))
    # nothing in the report identifies a deleted record: no row positions or values
    assert f"{X[0, 0]:.6g}" not in (tmp_path / "audit.json").read_text()
    # a memorising model that kept the records, checked against a claimed (0.5, 1e-5): exit 1, FAILED
    # (b negligible: Laplace-type with σ = 1e-9; ε = 1e12 lets the fit certify; the claim checked is --epsilon)
    kept = CertifiedLogisticRegression(lam=1e-5, noise="laplace", sigma=1e-9, epsilon=1e12, random_state=0).fit(X, y)
    kept_file = str(kept.save(tmp_path / "kept.npz"))
    assert main(["audit", "--model-file", kept_file, "--deleted", dele, "--heldout", held, "--epsilon", "0.5",
                 "--delta", "1e-5"]) == 1
    assert "FAILED" in capsys.readouterr().out
    # errors: missing CSVs, a missing label column, both modes at once
    assert main(["audit", "--model-file", files[0]]) == 2
    assert "needs --deleted CSV and --heldout CSV" in capsys.readouterr().err
    assert main([*args, "--label", "target"]) == 2
    assert "the label column 'target' is missing" in capsys.readouterr().err
    assert main([*args, "--experiment", "mnist"]) == 2
    # the papers' experiment is still there (its settings checked before MNIST is read)
    assert main(["audit", "--experiment", "mnist", "--quick", "--no-progress", "--trials", "0"]) == 2
    assert "trials must be >= 1" in capsys.readouterr().err


def test_cli_encodes_the_records_by_the_schema(tmp_path, capsys):
    from lethe.cli import main
    from lethe.preprocessing import SchemaEncoder
    from lethe.schema import load_schema

    schema = load_schema({"columns": [{"name": "x", "type": "numeric", "lower": -3, "upper": 3},
                                      {"name": "city", "type": "categorical", "categories": ["n", "s"]}],
                          "label": {"name": "y", "classes": ["no", "yes"]}})
    path = schema.save(tmp_path / "schema.json")
    rng = np.random.default_rng(0)

    def frame(n):
        f = pd.DataFrame({"x": rng.normal(size=n), "city": rng.choice(["n", "s"], n)})
        f["y"] = np.where(f["x"] + 0.5 * rng.normal(size=n) > 0, "yes", "no")
        return f

    train, held = frame(300), frame(100)
    clf = CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0).fit(
        SchemaEncoder(schema).transform(train[["x", "city"]]), train["y"].to_numpy())
    clf.remove(list(range(50)))
    model = str(clf.save(tmp_path / "m.npz"))
    train.iloc[:50].to_csv(tmp_path / "del.csv", index=False)
    held.to_csv(tmp_path / "held.csv", index=False)
    # 50 deleted vs 100 held-out records: an interval wider than the bound — inconclusive (status 3), not PASSED
    assert main(["audit", "--model-file", model, "--deleted", str(tmp_path / "del.csv"), "--heldout",
                 str(tmp_path / "held.csv"), "--schema", str(path)]) == 3
    out = capsys.readouterr().out
    assert "INCONCLUSIVE" in out and "PASSED" not in out and "detects" in out
    # without the schema the raw CSV is refused, with the rule
    assert main(["audit", "--model-file", model, "--deleted", str(tmp_path / "del.csv"), "--heldout",
                 str(tmp_path / "held.csv"), "--label", "y"]) == 2
    assert "must be numeric without --schema" in capsys.readouterr().err


def test_the_docs_section_is_the_generators_and_its_example_prints_what_it_shows(capsys):
    """docs/audit.md holds the section render_document appends (regenerating keeps it), and the section's
    example, run here, prints exactly the table the section shows."""
    import re
    from pathlib import Path

    from lethe.experiments.audit import OWN_MODEL_SECTION, render_document

    doc = (Path(__file__).resolve().parents[2] / "docs" / "audit.md").read_text(encoding="utf-8")
    assert OWN_MODEL_SECTION.startswith("## Auditing your own model") and OWN_MODEL_SECTION in doc
    assert render_document({"seed": 0, "seconds": 1.0, "markdown": "table"}).endswith("table\n\n" + OWN_MODEL_SECTION)
    code = re.search(r"```python\n(.*?)```", OWN_MODEL_SECTION, re.S).group(1)
    shown = re.search(r"```text\n(.*?)```", OWN_MODEL_SECTION, re.S).group(1)
    exec(compile(code, "docs/audit.md", "exec"), {})
    assert capsys.readouterr().out == shown

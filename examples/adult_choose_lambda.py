"""Choosing λ and σ for Adult without looking at the private rows: plan_lambda on PUBLIC data.

In this example the UCI test file stands in for a public sample of the same population (its first 8,000 rows);
the private training rows are never used to choose λ. Then plan_sigma (on the private rows: it only sizes the noise
for the removals to support, see docs/tabular.md) and the model. Run from the repository root.
"""

from pathlib import Path

from lethe.certified.estimators import CertifiedLogisticRegression
from lethe.datasets import load_adult
from lethe.pipeline import make_unlearning_pipeline
from lethe.planning import plan_lambda
from lethe.preprocessing import SchemaEncoder
from lethe.schema import load_schema

schema = load_schema(Path(__file__).with_name("adult_schema.yaml"))
train, test = load_adult()
public, held_out = test.iloc[:8000], test.iloc[8000:]
X_pub, y_pub = schema.split(public)
pipe = make_unlearning_pipeline(SchemaEncoder(schema), CertifiedLogisticRegression(fit_intercept=True))

plan = plan_lambda(X_pub, y_pub, data="public", estimator=pipe, lams=[1e-3, 1e-4, 3e-5, 1e-5],
                   sigmas=[0.1, 1.0], max_removals=1000, random_state=0)
print(plan)
best = plan.best(min_removals=1000)
print(f"chosen: λ = {best.lam:g}, σ = {best.sigma:g}")

X, y = schema.split(train)
model = pipe.set_params(certifiedlogisticregression__lam=best.lam, certifiedlogisticregression__sigma=best.sigma,
                        certifiedlogisticregression__random_state=0).fit(X, y)
X_ho, y_ho = schema.split(held_out)
print(f"accuracy on the held-out test rows: {model.score(X_ho, y_ho):.4f}")

"""Removal through a scikit-learn :class:`~sklearn.pipeline.Pipeline` (issue 16).

A certificate covers the *whole* published model. In a pipeline ``[transformers..., certified estimator]`` the
certified estimator forgets a record, but a transformer fitted on the same private data keeps it: a
``StandardScaler``'s ``mean_`` still averages the removed rows, a PCA's components still span them. So
:class:`UnlearningPipeline` accepts, before its final step, only steps that learn nothing from the private rows:

* **stateless** steps — scikit-learn's ``requires_fit=False`` tag: ``Normalizer``, ``FunctionTransformer`` (the
  function must not close over private data), :class:`lethe.preprocessing.UnitBallNormalizer`;
* steps **fitted on public data**, wrapped in :class:`sklearn.frozen.FrozenEstimator` (the pipeline never refits
  them; that the data they were fitted on is public is the caller's promise);
* ``"passthrough"``.

Any other step is refused at ``fit`` and at ``remove``, with its name and class. The final step must have ``remove``
(:class:`lethe.estimators.CertifiedLogisticRegression` or :class:`~lethe.estimators.CertifiedLinearRegression`).
Fitted on a pandas DataFrame, the pipeline passes the DataFrame's index to the final step as record keys
(``sample_ids``), so ``remove(keys=[...])`` removes records by their index labels.

>>> from sklearn.datasets import load_digits
>>> from sklearn.preprocessing import Normalizer
>>> from lethe.estimators import CertifiedLogisticRegression
>>> X, y = load_digits(return_X_y=True, as_frame=True)
>>> pipe = make_unlearning_pipeline(Normalizer(), CertifiedLogisticRegression(lam=1e-3, sigma=0.1, random_state=0))
>>> cert = pipe.fit(X, y).remove(keys=[10, 11])
>>> cert.residual_bound <= cert.budget
True
"""

from __future__ import annotations

from typing import Any

from sklearn.frozen import FrozenEstimator
from sklearn.pipeline import Pipeline, make_pipeline

from lethe._locking import SerialisedModel, serialised


def _step_learns_from_data(step: Any) -> bool:
    if step is None or (isinstance(step, str) and step == "passthrough"):
        return False
    if isinstance(step, FrozenEstimator):
        return False
    try:
        return bool(step.__sklearn_tags__().requires_fit)
    except AttributeError:
        return True


class UnlearningPipeline(SerialisedModel, Pipeline):
    """A :class:`~sklearn.pipeline.Pipeline` whose final, certified step can forget records, with a check that no
    earlier step learned from them (see the module docstring). ``remove(indices=None, *, keys=None)`` returns the
    final step's certificate.

    ``fit`` and ``remove`` run under the pipeline's lock (:mod:`lethe._locking`); predictions need no lock of their
    own (the steps before the last learn nothing and the final step serialises its calls), so concurrent calls
    are safe. A copy of a fitted pipeline copies its final step, which refuses (its secret b would be shared)."""

    def _check_steps(self, action: str) -> None:
        for name, step in self.steps[:-1]:
            if _step_learns_from_data(step):
                raise ValueError(
                    f"Cannot {action}: step {name!r} ({type(step).__name__}) learns from the training data, so its "
                    "fitted state would keep removed records (e.g. a StandardScaler's mean_) and no certificate would "
                    "cover it. Use a stateless step (Normalizer, FunctionTransformer, "
                    "lethe.preprocessing.UnitBallNormalizer) or a step fitted on public data wrapped in "
                    "sklearn.frozen.FrozenEstimator.")
        if not hasattr(self._final_estimator, "remove"):
            raise ValueError(f"Cannot {action}: the final step ({type(self._final_estimator).__name__}) has no "
                             "remove(); use a lethe certified estimator.")

    @serialised
    def fit(self, X: Any, y: Any = None, **params: Any) -> UnlearningPipeline:
        """Check the steps, then fit; a DataFrame's index becomes the final step's record keys (unless
        ``<final>__sample_ids`` is given)."""
        self._check_steps("fit")
        name = self.steps[-1][0]
        if hasattr(X, "columns") and hasattr(X, "index") and f"{name}__sample_ids" not in params:
            params = {**params, f"{name}__sample_ids": X.index.to_numpy()}
        super().fit(X, y, **params)
        return self

    @serialised
    def remove(self, indices: Any = None, *, keys: Any = None) -> Any:
        """Remove records from the final step (by ORIGINAL training-row position or by key, the one meaning of
        :class:`lethe.protocols.Unlearner`) and return its certificate."""
        self._check_steps("remove")
        return self._final_estimator.remove(indices, keys=keys)

    # -- the rest of the lethe.protocols.Unlearner protocol, delegated to the final step ---------------------------
    @property
    def supports_add(self) -> bool:
        """Whether the final step can add records with a certificate (its ``supports_add``)."""
        return bool(getattr(self._final_estimator, "supports_add", False))

    @property
    def certificate_(self) -> Any:
        """The final step's latest certificate (None before the first)."""
        return getattr(self._final_estimator, "certificate_", None)

    @serialised
    def add(self, X: Any, y: Any, *args: Any, **kwargs: Any) -> Any:
        """Add records through the pipeline: X goes through the earlier steps (they learn nothing, so they only
        transform), then the final step's ``add``; a DataFrame's index becomes the new records' keys when the final
        step has keys and no ``sample_ids`` is given. NotImplementedError when the final step cannot add."""
        self._check_steps("add")
        final = self._final_estimator
        if not getattr(final, "supports_add", False):
            raise NotImplementedError(f"The final step ({type(final).__name__}) cannot add records "
                                      "(supports_add = False).")
        if (hasattr(X, "columns") and hasattr(X, "index") and not args and "sample_ids" not in kwargs
                and getattr(final, "keys_", None) is not None):
            kwargs = {**kwargs, "sample_ids": X.index.to_numpy()}
        Xt = X
        for _, _, step in self._iter(with_final=False, filter_passthrough=True):
            Xt = step.transform(Xt)
        return final.add(Xt, y, *args, **kwargs)

    def save(self, path: Any, *, key: bytes | str | None = None) -> Any:
        """Not supported: the earlier steps (any scikit-learn transformer, a FunctionTransformer's function) cannot
        be written without pickle. Save the final step (``pipe[-1].save(path, key=...)``) and rebuild the pipeline
        around ``type(pipe[-1]).load(path, key=...)``. Raises NotImplementedError."""
        raise NotImplementedError(
            "UnlearningPipeline.save: the earlier steps cannot be written without pickle. Save the final step "
            "(pipe[-1].save(path)) and rebuild the pipeline around its load().")

    @classmethod
    def load(cls, path: Any, *, key: bytes | str | None = None) -> Any:
        """Not supported (see :meth:`save`). Raises NotImplementedError."""
        raise NotImplementedError(
            "UnlearningPipeline.load: pipelines are not saved; load the final step with its class's load() and "
            "rebuild the pipeline around it.")


def make_unlearning_pipeline(*steps: Any, **kwargs: Any) -> UnlearningPipeline:
    """Like :func:`sklearn.pipeline.make_pipeline` (step names from the class names), building an
    :class:`UnlearningPipeline`."""
    return UnlearningPipeline(make_pipeline(*steps, **kwargs).steps)


__all__ = ["UnlearningPipeline", "make_unlearning_pipeline"]

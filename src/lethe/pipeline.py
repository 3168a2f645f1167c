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
(:class:`lethe.certified.estimators.CertifiedLogisticRegression` or
:class:`~lethe.certified.estimators.CertifiedLinearRegression`).
Fitted on a pandas DataFrame, the pipeline passes the DataFrame's index to the final step as record keys
(``sample_ids``), so ``remove(keys=[...])`` removes records by their index labels.

>>> from sklearn.datasets import load_digits
>>> from sklearn.preprocessing import Normalizer
>>> from lethe.certified.estimators import CertifiedLogisticRegression
>>> X, y = load_digits(return_X_y=True, as_frame=True)
>>> pipe = make_unlearning_pipeline(Normalizer(), CertifiedLogisticRegression(lam=1e-3, sigma=0.1, random_state=0))
>>> cert = pipe.fit(X, y).remove(keys=[10, 11])
>>> cert.residual_bound <= cert.budget
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sklearn.frozen import FrozenEstimator
from sklearn.pipeline import Pipeline, make_pipeline

from lethe._locking import SerialisedModel, serialised
from lethe.io import ModelFileError, load_npz, model_key, open_model_file, save_npz


def step_learns_from_data(step: Any) -> bool:
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
            if step_learns_from_data(step):
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

    @serialised
    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        """Save a fitted pipeline whose earlier steps are ``"passthrough"``, :class:`~sklearn.preprocessing.Normalizer`
        or :class:`lethe.preprocessing.UnitBallNormalizer` (stateless: only their parameters are written): the final
        step's own file (its ``save``, same key policy) with the steps described in its metadata, re-tagged. Any
        other step (a FunctionTransformer's function, a frozen fitted step) cannot be written without pickle:
        ``NotImplementedError`` naming it — then save the final step alone (``pipe[-1].save``) and rebuild the
        pipeline around its ``load``."""
        specs = []
        for name, step in self.steps[:-1]:
            spec = _step_spec(step)
            if spec is None:
                raise NotImplementedError(
                    f"UnlearningPipeline.save: step {name!r} ({type(step).__name__}) cannot be written without "
                    "pickle (only 'passthrough', Normalizer and UnitBallNormalizer can). Save the final step "
                    "(pipe[-1].save(path)) and rebuild the pipeline around its load().")
            specs.append([name, *spec])
        final = self._final_estimator
        secret_key = model_key(key, create=True)  # the final step's file is tagged under it (created if need be)
        out = final.save(path, key=secret_key)
        arrays, meta = load_npz(out, key=secret_key, authenticate=True)
        meta.pop("format_version", None)
        meta["pipeline"] = {"steps": specs, "final": self.steps[-1][0]}
        return save_npz(out, arrays, meta, secret=True, key=secret_key)

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None,
             trust_unauthenticated: bool = False) -> UnlearningPipeline:
        """Load a pipeline written by :meth:`save`: the final step by its class's ``load`` (authentication and all of
        its invariant checks; ``trust_unauthenticated`` passed on), the earlier steps rebuilt from their parameters.
        :class:`lethe.io.ModelFileError` if the file holds no pipeline or names an unknown step or final class."""
        secret_key = model_key(key)
        meta = open_model_file(path, key=secret_key, trust_unauthenticated=trust_unauthenticated).meta
        desc = meta.get("pipeline")
        final_cls = _unlearner_classes().get(str(meta.get("class")))
        if not isinstance(desc, dict) or final_cls is None:
            raise ModelFileError(f"{path} does not hold an UnlearningPipeline (no pipeline description or an unknown "
                                 f"final class {meta.get('class')!r}).")
        final = final_cls.load(path, key=secret_key, trust_unauthenticated=trust_unauthenticated)
        steps: list[tuple[str, Any]] = []
        try:
            for name, kind, params in desc["steps"]:
                step = _step_from_spec(str(kind), dict(params))
                if step != "passthrough" and hasattr(final, "n_features_in_"):
                    step.fit(np.zeros((1, int(final.n_features_in_))))  # stateless: records the width only
                steps.append((str(name), step))
            steps.append((str(desc["final"]), final))
            return cls(steps)
        except (TypeError, ValueError, KeyError) as e:
            raise ModelFileError(f"{path}: its pipeline description is not valid: {e}") from None


_STATELESS = ("passthrough", "Normalizer", "UnitBallNormalizer")


def _step_spec(step: Any) -> tuple[str, dict[str, Any]] | None:
    from sklearn.preprocessing import Normalizer

    from lethe.preprocessing import UnitBallNormalizer

    if step is None or (isinstance(step, str) and step == "passthrough"):
        return ("passthrough", {})
    if type(step) is Normalizer:
        return ("Normalizer", {"norm": step.norm})
    if type(step) is UnitBallNormalizer:
        return ("UnitBallNormalizer", {})
    return None


def _step_from_spec(kind: str, params: dict[str, Any]) -> Any:
    from sklearn.preprocessing import Normalizer

    from lethe.preprocessing import UnitBallNormalizer

    if kind == "passthrough":
        return "passthrough"
    if kind == "Normalizer":
        return Normalizer(**params)
    if kind == "UnitBallNormalizer":
        return UnitBallNormalizer(**params)
    raise ValueError(f"step kind must be one of {list(_STATELESS)}. Found {kind!r}.")


def _unlearner_classes() -> dict[str, Any]:
    """The final steps a saved pipeline can name (torch's estimator only if torch is installed)."""
    from lethe.certified.estimators import CertifiedLinearRegression, CertifiedLogisticRegression
    from lethe.noisygd.estimators import (
        NoisyGDBoundedMLPClassifier,
        NoisyGDLogisticRegression,
        NoisyGDMLPClassifier,
        PNSGDLogisticRegression,
    )

    out: dict[str, Any] = {c.__name__: c for c in (CertifiedLogisticRegression, CertifiedLinearRegression,
                                                   NoisyGDLogisticRegression, NoisyGDMLPClassifier,
                                                   NoisyGDBoundedMLPClassifier, PNSGDLogisticRegression)}
    try:
        from lethe.nn.estimators import NoisyFineTuneClassifier
    except ImportError:  # pragma: no cover - the deep extra is not installed
        return out
    out["NoisyFineTuneClassifier"] = NoisyFineTuneClassifier
    return out


def make_unlearning_pipeline(*steps: Any, **kwargs: Any) -> UnlearningPipeline:
    """Like :func:`sklearn.pipeline.make_pipeline` (step names from the class names), building an
    :class:`UnlearningPipeline`."""
    return UnlearningPipeline(make_pipeline(*steps, **kwargs).steps)


__all__ = ["UnlearningPipeline", "make_unlearning_pipeline"]

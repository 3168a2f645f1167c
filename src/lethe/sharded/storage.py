"""How a sharded model's fitted shards are stored: skops (no pickle), and the types it may rebuild at load."""

from __future__ import annotations

from typing import Any

__all__ = ["SKOPS_TRUSTED", "skops_io"]


# Types skops may rebuild at load besides its defaults: the fitted parts of the estimators the tests and the
# benchmark use. Anything else must be named by the caller (``load(path, trusted=[...])``).
SKOPS_TRUSTED = (
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
    "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
    "sklearn.neural_network._stochastic_optimizers.SGDOptimizer",
    "sklearn._loss.loss.HalfBinomialLoss",
    "sklearn._loss.loss.HalfMultinomialLoss",
    "sklearn._loss.loss.HalfSquaredError",
    "sklearn._loss.link.LogitLink",
    "sklearn._loss.link.MultinomialLogit",
    "sklearn._loss.link.IdentityLink",
    "sklearn.linear_model._sgd_fast.Hinge",
    "sklearn.linear_model._sgd_fast.Log",
    "sklearn.linear_model._sgd_fast.SquaredLoss",
    "sklearn.linear_model._sgd_fast.ModifiedHuber",
    # HistGradientBoosting with declared categorical_features keeps a preprocessor holding
    # functools.partial(check_array, ...); skops loads a partial's function only if that function is trusted itself
    "functools.partial",
    "sklearn.utils.validation.check_array",
)


def skops_io() -> Any:
    try:
        import skops.io as sio
    except ImportError as e:  # pragma: no cover - the extra is installed in development
        raise ImportError("Saving and loading sharded models needs skops: "
                          "pip install 'lethe-unlearning[sharded]'.") from e
    return sio

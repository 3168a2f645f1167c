"""Project exceptions. Each subclasses the built-in a caller would expect (``ValueError``...)."""

from __future__ import annotations


class LetheError(Exception):
    """Base class of every exception lethe defines."""


class BudgetExceededError(LetheError, ValueError):
    """An operation would spend more privacy or removal budget than is left; nothing was recorded."""


class NotFittedError(LetheError, ValueError, AttributeError):
    """A model was used before it was trained (compatible with scikit-learn's NotFittedError)."""


class SecretStateError(LetheError, ValueError):
    """A state that must stay secret (e.g. the perturbation b) was handled unsafely."""

"""One lock per fitted model, and no copies of a model's secret (issue 28). Foundation: no math, no state of its own.

A certified model's methods read and replace several attributes that must agree (the weights, the secret b, the
accumulated residual bound β, the rows still active, n). Two threads interleaving inside ``remove`` would each
certify a step from the same old state and publish two certificates for a model that reflects one of them — a
false certificate. :class:`SerialisedModel` gives every instance a re-entrant lock (:class:`threading.RLock`),
created lazily on first use (so ``__init__`` still only stores its arguments), never part of ``get_params``, never
copied by :func:`sklearn.base.clone` (which builds a new instance from the parameters) and never pickled; the
methods decorated with :func:`serialised` run under it, one call at a time per instance. Calls on *different*
instances run in parallel.

The same mixin refuses ``copy.copy``/``copy.deepcopy`` of a *fitted* model: a copy would be a second live model
holding the same secret noise (b, or a noisy optimiser's random state), and two models released with one secret
are not covered by either's certificate. The supported way to get a second model is
``sklearn.base.clone(model).fit(X, y)``, which draws fresh noise. Unfitted models copy normally.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable
from typing import Any, ClassVar, NoReturn, TypeVar

_LOCK_ATTR = "_lethe_lock"
#: The attribute that holds an instance's lock: never copied, pickled or compared.
LOCK_ATTR = _LOCK_ATTR

F = TypeVar("F", bound=Callable[..., Any])


def instance_lock(obj: Any) -> threading.RLock:
    """The re-entrant lock of ``obj``, created on first use. ``dict.setdefault`` is atomic, so two threads asking
    at once get the same lock."""
    lock = obj.__dict__.get(_LOCK_ATTR)
    if lock is None:
        lock = obj.__dict__.setdefault(_LOCK_ATTR, threading.RLock())
    return lock  # type: ignore[no-any-return]


def serialised(method: F) -> F:
    """Run ``method`` under its instance's lock (:func:`instance_lock`): one call at a time per model."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        # One line on purpose: Python reports a line event (where a tracer, or a timeout handler using one, can
        # raise) only when execution moves to another line. On two lines the block's exit, which releases the lock,
        # is reported on the ``with`` line again after ``method`` returned, and an exception raised there skipped the
        # release: the model's lock stayed held, and every later call from another thread waited forever.
        with instance_lock(self): return method(self, *args, **kwargs)  # noqa: E701

    return wrapper  # type: ignore[return-value]


class SerialisedModel:
    """Mixin: a lazily created per-instance lock kept out of pickles and copies, and no copy of a fitted model.

    Subclasses name the attribute that marks a fitted model in ``_fitted_attribute`` (e.g. ``"states_"``) and
    decorate their state-reading and state-changing methods with :func:`serialised`. A subclass whose fitted state is
    secret names what it holds in ``_secret_state`` (e.g. ``"the SECRET perturbation b and the remaining training
    rows"``): pickling a fitted model then raises ``TypeError`` saying so (:meth:`_refuse`), and the message sends the
    user to ``save``/``load``. A model without certified addition calls :meth:`_refuse_add` from its ``add``.
    """

    _fitted_attribute: ClassVar[str] = ""
    #: What a fitted model holds that must not be pickled (a sentence part); "" = it pickles normally.
    _secret_state: ClassVar[str] = ""
    #: Why a fitted model is not copied (copy.copy, copy.deepcopy).
    _copy_reason: ClassVar[str] = (
        "the copy would be a second live model holding the same SECRET noise, and two models released with one "
        "secret are not covered by their certificates. Use sklearn.base.clone(model).fit(X, y) for a second model "
        "(fresh noise), or save()/load() to persist one where the model offers them.")
    #: The exception a refused pickle or copy raises.
    _refusal_error: ClassVar[type[Exception]] = TypeError

    def _is_fitted_model(self) -> bool:
        return bool(self._fitted_attribute) and self._fitted_attribute in self.__dict__

    def _refuse(self, how: str, reason: str) -> None:
        """Raise ``_refusal_error`` (``TypeError`` unless a subclass names another) if this model is fitted: it
        cannot be ``how`` (e.g. "pickled") because ``reason``."""
        if self._is_fitted_model():
            raise self._refusal_error(f"A fitted {type(self).__name__} cannot be {how}: {reason}")

    def _refuse_add(self, reason: str) -> NoReturn:
        """The ``add`` of a model with ``supports_add = False`` (:class:`lethe.protocols.Unlearner`): raise
        ``NotImplementedError`` saying why (``reason``); nothing changes."""
        raise NotImplementedError(f"{type(self).__name__} cannot add records (supports_add = False): {reason}")

    def __getstate__(self) -> Any:
        if self._secret_state:
            name = type(self).__name__
            self._refuse("pickled", f"it holds {self._secret_state}, which pickle would write with the default "
                         f"file mode, and loading a pickle runs code. Use model.save(path) and {name}.load(path) "
                         "(no pickle, owner-only file). Unfitted estimators pickle normally.")
        state = super().__getstate__()  # type: ignore[misc]
        if isinstance(state, dict) and _LOCK_ATTR in state:
            state = {k: v for k, v in state.items() if k != _LOCK_ATTR}
        return state

    def _refuse_copy(self, how: str) -> None:
        self._refuse(f"copied ({how})", self._copy_reason)

    def __copy__(self) -> Any:
        self._refuse_copy("copy.copy")
        new = type(self).__new__(type(self))
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k != _LOCK_ATTR})
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        self._refuse_copy("copy.deepcopy")
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if k != _LOCK_ATTR:
                new.__dict__[k] = copy.deepcopy(v, memo)
        return new


__all__ = ["LOCK_ATTR", "SerialisedModel", "instance_lock", "serialised"]

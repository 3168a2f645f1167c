"""Where a loaded model came from, and certificates that say so when its file was not authenticated.

Foundation layer: no math, no imports of lethe.

``load(path)`` refuses a model file without a valid tag (docs/estimators.md, "Model files"); a caller who trusts such
a file anyway passes ``trust_unauthenticated=True``. The model then records :class:`ModelFileOrigin` with
``authenticated=False`` in ``model_file_``, every file it saves carries that fact (under the new tag, so it cannot be
laundered by saving again), and every certificate it gives afterwards — returned by ``remove``/``add``/``release``
(or a curator's ``learn``/``unlearn``) and read from ``certificate_`` — is an :class:`UnverifiedCertificate`: the
same numbers, ``authenticated: false`` and a guarantee text that starts by saying they hold only if the file is the
one lethe saved. A new ``fit`` starts from the caller's data: the mark is cleared. Classes opt in with
:func:`reports_model_origin`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

#: The attribute of a loaded model that records its origin.
ORIGIN_ATTR = "model_file_"
#: The methods whose results are certificates (or releases holding one), when a class has them.
CERTIFYING_METHODS = ("remove", "add", "edit", "release", "learn", "unlearn")

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class ModelFileOrigin:
    """The file a model was loaded from: ``authenticated`` when its HMAC tag matched under the configured key and
    no earlier load in its history was unauthenticated; else ``note`` says why it was not."""

    path: str
    authenticated: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return dataclasses.asdict(self)


class UnverifiedCertificate:
    """A certificate given by a model loaded from an unauthenticated file (see the module docstring).

    Every attribute is the wrapped certificate's (``certificate``), except ``authenticated`` (False),
    ``model_file`` (the note), ``guarantee`` (prefixed by the warning) and ``to_dict()`` (with those three)."""

    authenticated = False

    def __init__(self, certificate: Any, note: str) -> None:
        self.__dict__["certificate"] = certificate
        self.__dict__["model_file"] = note

    def __getattr__(self, name: str) -> Any:
        try:
            inner = self.__dict__["certificate"]
        except KeyError:  # not yet initialised (copy, unpickling): no attribute to delegate to
            raise AttributeError(name) from None
        return getattr(inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only.")

    @property
    def guarantee(self) -> str:
        """The wrapped guarantee, after the statement that it rests on an unauthenticated model file."""
        return (f"NOT AUTHENTICATED: this model was loaded from a file whose authenticity was not verified "
                f"({self.model_file}); the guarantee below holds only if that file is the one lethe saved. "
                f"{self.certificate.guarantee}")

    def to_dict(self) -> dict[str, Any]:
        """The wrapped certificate's dict with ``authenticated: false``, ``model_file`` and the warned guarantee."""
        return {**self.certificate.to_dict(), "authenticated": False, "model_file": self.model_file,
                "guarantee": self.guarantee}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnverifiedCertificate) and other.to_dict() == self.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"UnverifiedCertificate({self.certificate!r}, model_file={self.model_file!r})"


def mark(result: Any, origin: ModelFileOrigin | None) -> Any:
    """``result`` as the model of ``origin`` gives it: unchanged unless the origin is unauthenticated; then a
    certificate becomes an :class:`UnverifiedCertificate`, and a dataclass holding one as ``certificate`` (a
    release) a copy holding the wrapped one. Idempotent."""
    if origin is None or origin.authenticated or result is None or isinstance(result, UnverifiedCertificate):
        return result
    if hasattr(result, "guarantee") and hasattr(result, "to_dict"):
        return UnverifiedCertificate(result, origin.note)
    if dataclasses.is_dataclass(result) and not isinstance(result, type) and hasattr(result, "certificate"):
        return dataclasses.replace(result, certificate=mark(result.certificate, origin))
    return result


def _marking(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return mark(method(self, *args, **kwargs), self.__dict__.get(ORIGIN_ATTR))

    return wrapper


def _clearing(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        self.__dict__.pop(ORIGIN_ATTR, None)  # a completed fit: the state is the caller's, not the file's
        return out

    return wrapper


def reports_model_origin(cls: T) -> T:
    """Class decorator: the certifying methods the class defines (:data:`CERTIFYING_METHODS`) and its
    ``certificate_`` property mark their results with the instance's origin (:func:`mark`); its ``fit`` clears
    the origin once it completes."""
    for name in CERTIFYING_METHODS:
        if name in cls.__dict__:
            setattr(cls, name, _marking(cls.__dict__[name]))
    prop = cls.__dict__.get("certificate_")
    if isinstance(prop, property) and prop.fget is not None:
        setattr(cls, "certificate_", property(_marking(prop.fget), doc=prop.__doc__))  # noqa: B010
    if "fit" in cls.__dict__:
        setattr(cls, "fit", _clearing(cls.__dict__["fit"]))  # noqa: B010
    return cls


def set_origin(model: Any, origin: ModelFileOrigin) -> Any:
    """Record ``origin`` on a freshly loaded ``model`` (as ``model_file_``); returns the model."""
    model.__dict__[ORIGIN_ATTR] = origin
    return model


def origin_of(model: Any) -> ModelFileOrigin | None:
    """The origin recorded on ``model`` (None: fitted here, or loaded before origins were recorded)."""
    return model.__dict__.get(ORIGIN_ATTR) if model is not None else None  # type: ignore[no-any-return]


__all__ = ["CERTIFYING_METHODS", "ORIGIN_ATTR", "ModelFileOrigin", "UnverifiedCertificate", "mark", "origin_of",
           "reports_model_origin", "set_origin"]

"""The two interfaces every unlearning front end and every certificate of lethe share (issue 25, item 3).

Foundation layer: :class:`typing.Protocol` classes only — no math, no state, no imports of lethe. A class conforms
by having the members (structural typing); nothing inherits from these protocols.

:class:`Certificate` — what one operation promised, to whom, with which numbers:

* ``guarantee`` (str): what is promised and by which theorem;
* ``observer`` (str): whom it covers. Certified removal (Guo et al. 2020) and noisy fine-tuning (Koloskova et al.
  2025) cover ``"one published version"``: the model after the operation against a model retrained without the
  removed records — not an observer who also kept an earlier version. Noisy-GD's deletion privacy
  (Chourasia & Shah 2023, Def. 4.1, Thm 4.3) covers the curator's model state after the edit against a requester who is
  non-adaptive (p = 0) or saw at most p earlier releases (each certificate says which);
* ``epsilon`` (float) and ``delta`` (float or None): for an (ε, δ) guarantee both numbers. ``delta is None``
  marks a **Rényi** guarantee: ``epsilon`` is then the Rényi ε at the certificate's order ``q``, not an (ε, δ)
  ε; it has no single δ, and the certificate's ``to_dp(delta)`` gives the (ε, δ) conversion for the δ the
  reader chooses (Chourasia & Shah, Thm B.1). Reading it as (ε, 0)-DP would be false, hence None, not 0;
* ``to_dict()``: a JSON-serialisable dict holding at least ``guarantee``, ``observer``, ``epsilon``, ``delta``.

:class:`Unlearner` — a fitted model that can forget training records and certify it:

* ``fit(X, y, ...)``; ``remove(indices=None, *, keys=None)`` returns a :class:`Certificate`. ``indices`` are
  always ORIGINAL row positions of the ``X`` given to ``fit`` (a row keeps its position after other rows are
  removed; rows appended by ``add`` get the next positions); ``keys`` are record keys (``sample_ids`` given to
  ``fit``, or a fitted DataFrame's index). Exactly one of the two.
* ``supports_add`` (class attribute, bool) says whether ``add(X, y, ...)`` can add records with a certificate.
  Every Unlearner has ``add``; when ``supports_add`` is False it raises :class:`NotImplementedError` naming the
  class and why, and changes nothing.
* ``certificate_``: the certificate of the last certified operation (``remove``/``add``, and ``fit`` where fitting
  is itself certified, e.g. Noisy-GD's learning run); None when there is none yet (also before ``fit``).
* ``save(path, *, key=None)`` and the classmethod ``load(path, *, key=None, trust_unauthenticated=False)``:
  :mod:`lethe.io` files (no pickle), always authenticated by an HMAC tag (``key=``, ``$LETHE_MODEL_KEY``, or the key
  file, created on the first save where none exists) and checked for the invariants of a certified state at load. A
  file without a valid tag is refused unless ``trust_unauthenticated=True``; the certificates of a model loaded
  that way say so (:mod:`lethe.model_origin`).

``isinstance(obj, Unlearner)`` checks that the members exist (``runtime_checkable``), not their signatures; the
tests in ``tests/test_protocols.py`` check the signatures and the behaviour of every class that conforms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["Certificate", "Unlearner"]


@runtime_checkable
class Certificate(Protocol):
    """What one operation guarantees (see the module docstring for each member's meaning)."""

    @property
    def guarantee(self) -> str:
        """What is promised, and by which theorem."""
        ...

    @property
    def observer(self) -> str:
        """Whom the promise covers."""
        ...

    @property
    def epsilon(self) -> float:
        """ε of the promise ((ε, δ), or Rényi at the certificate's order q when ``delta`` is None)."""
        ...

    @property
    def delta(self) -> float | None:
        """δ of an (ε, δ) promise; None for a Rényi promise (no single δ)."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict with at least guarantee, observer, epsilon and delta."""
        ...


@runtime_checkable
class Unlearner(Protocol):
    """A model that forgets training records with a certificate (see the module docstring)."""

    supports_add: bool

    @property
    def certificate_(self) -> Certificate | None:
        """The certificate of the last certified operation, or None."""
        ...

    def fit(self, X: Any, y: Any, *args: Any, **kwargs: Any) -> Any:
        """Train on (X, y)."""
        ...

    def remove(self, indices: Any = None, *, keys: Any = None) -> Certificate:
        """Remove records by original row position or by key; return the certificate."""
        ...

    def add(self, X: Any, y: Any, *args: Any, **kwargs: Any) -> Certificate:
        """Add records with a certificate, or raise NotImplementedError when ``supports_add`` is False."""
        ...

    def save(self, path: str | Path, *, key: bytes | str | None = None) -> Path:
        """Write the fitted model to a lethe.io file."""
        ...

    @classmethod
    def load(cls, path: str | Path, *, key: bytes | str | None = None, trust_unauthenticated: bool = False) -> Any:
        """Read a file written by ``save``, after authenticating and checking it."""
        ...

"""The curator's web console at ``/console``: what a data-protection officer opens every day.

Server-rendered pages (Jinja2 templates, one stylesheet, one small script, all served from this package: no CDN,
no build step), mounted on the curator's FastAPI app by :func:`mount_console`:

* **Requests** — every deletion request (a requester: only its own), filters, search by id, keyset pagination;
  a form to submit one.
* **A request** — its certificate in plain words (guarantee ε, δ and theorem, budget used and left, retraining or
  not; never the record's content or position) and a downloadable HTML certificate.
* **Models** (admin) — version history, inline SVG plots of budget used, held-out accuracy and removals per version
  with retrainings marked, and the public model (never the secret perturbation) as a download.
* **Ledger** (admin) — the append-only event log, paginated, with a hash-chain integrity check.
* **Health** (admin) — pending and failed requests, faults that need an operator, the worker's state.

Security (see :mod:`lethe.curator.console.auth`): token sign-in exchanged for an HttpOnly, SameSite=Strict
session cookie (Secure over TLS), CSRF tokens on every form that changes state, a strict Content-Security-Policy.
Data access is in one module, :mod:`lethe.curator.console.queries`.
"""

from __future__ import annotations

from lethe.curator.console.routes import console_router, mount_console

__all__ = ["console_router", "mount_console"]

"""Answer periods: when a deletion request is due, which are overdue, and counts by age.

GDPR Art. 12(3): the controller answers a request "without undue delay and in any event within one month of receipt
of the request", extendable by two further months where necessary. The period is configurable with
``LETHE_ANSWER_PERIOD`` (``"1 month"`` by default; ``"2 months"``, ``"30 days"``, ``"14d"``, ``"3m"``). A month is a
calendar month: a request received on 31 January is due on 28 (or 29) February, the last day of the next month.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import os
import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from lethe.curator.store import DeletionRequest, as_utc, iso, utcnow

ENV = "LETHE_ANSWER_PERIOD"
_PERIOD = re.compile(r"^\s*(\d+)\s*(m|mo|month|months|d|day|days)\s*$", re.IGNORECASE)
OPEN_STATUSES = ("pending", "waiting")


@dataclass(frozen=True)
class AnswerPeriod:
    """``months`` calendar months plus ``days`` days."""

    months: int = 1
    days: int = 0

    @classmethod
    def parse(cls, text: str | None) -> AnswerPeriod:
        """``"1 month"``, ``"2 months"``, ``"30 days"``, ``"14d"``, ``"3m"``; None or empty: one month."""
        if text is None or not str(text).strip():
            return cls()
        m = _PERIOD.match(str(text))
        if m is None or int(m.group(1)) <= 0:
            raise ValueError(f"{ENV} must be a positive number of months or days, e.g. '1 month' or '30 days'. "
                             f"Found {text!r}.")
        n = int(m.group(1))
        return cls(months=n, days=0) if m.group(2).lower().startswith("m") else cls(months=0, days=n)

    @classmethod
    def from_env(cls) -> AnswerPeriod:
        return cls.parse(os.environ.get(ENV))

    def due(self, submitted: _dt.datetime) -> _dt.datetime:
        """The deadline of a request received at ``submitted`` (calendar months, clamped to the month's end)."""
        t = as_utc(submitted)
        assert t is not None
        month0 = t.month - 1 + self.months
        year, month = t.year + month0 // 12, month0 % 12 + 1
        day = min(t.day, calendar.monthrange(year, month)[1])
        return t.replace(year=year, month=month, day=day) + _dt.timedelta(days=self.days)

    def __str__(self) -> str:
        if self.months:
            return f"{self.months} month{'s' if self.months != 1 else ''}"
        return f"{self.days} day{'s' if self.days != 1 else ''}"


def deadline_status(status: str, submitted: _dt.datetime, processed: _dt.datetime | None, period: AnswerPeriod,
                    now: _dt.datetime | None = None) -> str:
    """``answered in time``, ``answered late``, ``open`` (within the period) or ``overdue``."""
    due = period.due(submitted)
    if status in OPEN_STATUSES or processed is None:
        return "overdue" if (now or utcnow()) > due else "open"
    return "answered late" if as_utc(processed) > due else "answered in time"  # type: ignore[operator]


def age_summary(s: Any, period: AnswerPeriod, *, requester: str | None = None, now: _dt.datetime | None = None,
                list_limit: int = 20) -> dict[str, Any]:
    """Open requests (pending or waiting) by age against the answer period: counts in three bands (under half the
    period, half or more, overdue) and the oldest overdue ones (id, submitted, due, days over)."""
    now = now or utcnow()
    stmt = select(DeletionRequest.id, DeletionRequest.requester, DeletionRequest.submitted_at).where(
        DeletionRequest.status.in_(OPEN_STATUSES)).order_by(DeletionRequest.submitted_at, DeletionRequest.id)
    if requester is not None:
        stmt = stmt.where(DeletionRequest.requester == requester)
    bands = {"within": 0, "late_half": 0, "overdue": 0}
    overdue: list[dict[str, Any]] = []
    for rid, who, sub in s.execute(stmt):
        t = as_utc(sub)
        assert t is not None
        due = period.due(t)
        half = t + (due - t) / 2
        if now > due:
            bands["overdue"] += 1
            if len(overdue) < list_limit:
                overdue.append({"id": rid, "requester": who, "submitted_at": iso(t), "due_at": due.isoformat(),
                                "days_over": (now - due).total_seconds() / 86400.0})
        elif now >= half:
            bands["late_half"] += 1
        else:
            bands["within"] += 1
    return {"period": str(period), "open": sum(bands.values()), "bands": bands, "overdue": overdue}


__all__ = ["ENV", "OPEN_STATUSES", "AnswerPeriod", "age_summary", "deadline_status", "render_metrics"]


def render_metrics(curator: Any, *, period: AnswerPeriod | None = None, now: _dt.datetime | None = None) -> str:
    """Prometheus text of the open requests by age against the answer period: ``lethe_requests_open_by_age{band}``
    (within, late_half, overdue), ``lethe_requests_overdue`` and ``lethe_answer_period_seconds`` (of a request
    received now)."""
    period = period or AnswerPeriod.from_env()
    now = now or utcnow()
    with curator.store.read() as s:
        ages = age_summary(s, period, now=now, list_limit=0)
    lines = ["# HELP lethe_requests_open_by_age Open deletion requests by age against the answer period "
             "(GDPR Art. 12(3))", "# TYPE lethe_requests_open_by_age gauge"]
    lines += [f'lethe_requests_open_by_age{{band="{b}"}} {float(n)}' for b, n in ages["bands"].items()]
    lines += ["# HELP lethe_requests_overdue Open deletion requests past their answer deadline",
              "# TYPE lethe_requests_overdue gauge", f"lethe_requests_overdue {float(ages['bands']['overdue'])}",
              "# HELP lethe_answer_period_seconds The answer period of a request received now",
              "# TYPE lethe_answer_period_seconds gauge",
              f"lethe_answer_period_seconds {(period.due(now) - now).total_seconds()}"]
    return "\n".join(lines) + "\n"

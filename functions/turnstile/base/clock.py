"""Time: the one format turnstile writes, and a reader for whatever a producer wrote.

Producers set ``submitted_at`` with their own clocks, or not at all: it may be naive
(``datetime.utcnow().isoformat()``), in another zone, in the future, or not a time. Every
reader (the stream handler's latency metric, the sweeper, the audit, the API) goes through
``parse_timestamp``, which never raises, and ``age_s``, which says when an age is unknown.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["MAX_CLOCK_SKEW_S", "age_s", "iso_of_ms", "ms_of", "parse_timestamp", "utc_now"]

#: A timestamp up to this far ahead of the reader's clock is a clock's skew (age 0);
#: further ahead it is no age at all.
MAX_CLOCK_SKEW_S = 60.0
#: Longer text is no timestamp (ISO-8601 with nanoseconds and an offset needs 35).
_MAX_TEXT = 64


def utc_now(when: datetime | None = None) -> str:
    """ISO-8601 UTC with microseconds, the format of every timestamp turnstile writes: of
    now, or of ``when`` (a datetime in UTC)."""
    return (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(value: Any) -> datetime | None:
    """An aware UTC datetime from an ISO-8601 string (or a datetime), else None.

    A naive timestamp is taken as UTC (that is what ``utcnow().isoformat()`` writes).
    Junk of any type or length gives None; this never raises.
    """
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and len(value) <= _MAX_TEXT:
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    else:
        return None
    try:
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            return parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):  # year 1 or 9999 shifted out of range
        return None


def age_s(value: Any, now: datetime) -> float | None:
    """Seconds from ``value`` to ``now``; None when unknown: missing, junk, or further in
    the future than ``MAX_CLOCK_SKEW_S`` (callers that look for lost work count None as
    old, so no timestamp can hide a record)."""
    then = parse_timestamp(value)
    reference = parse_timestamp(now)
    if then is None or reference is None:
        return None
    age = (reference - then).total_seconds()
    if age < -MAX_CLOCK_SKEW_S:
        return None
    return max(0.0, age)


def ms_of(timestamp: str) -> int:
    """Epoch milliseconds of one of turnstile's own timestamps (``utc_now``); the engine
    counts time in these."""
    parsed = parse_timestamp(timestamp)
    if parsed is None:
        raise ValueError(f"not a timestamp: {timestamp!r}")
    return int(parsed.timestamp() * 1000)


def iso_of_ms(ms: int) -> str:
    """``utc_now``'s format of epoch milliseconds."""
    return utc_now(datetime.fromtimestamp(ms / 1000, UTC))

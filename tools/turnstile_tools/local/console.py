"""What ``turnstile local`` prints while it runs.

Two formats (``--log-format``):

* ``text`` (the default), for a person watching the terminal: one line per decision the
  worker makes, on stdout; log records as one short line each, on stderr, at
  ``--log-level`` (default WARNING: warnings and errors only). The HTTP API logs each
  request it answers: at INFO when it succeeded, at WARNING (4xx) or ERROR (5xx) when not,
  so by default a line appears only for a request that failed.
* ``json``: the functions' logs exactly as Lambda writes them (Powertools' JSON, one
  object a line, on stdout), the local stack's own records in the same form, at
  ``--log-level`` (default INFO). No decision lines: ``--log-level DEBUG`` adds the stream
  handler's own ``signup decided`` record per decision (with ``signup_ref``, as on AWS).

Either way the banner and the closing summary are plain ``turnstile local:`` lines on
stdout. ``--log-level`` sets turnstile's own loggers (the functions', the worker's, the
stack's); other libraries (botocore, moto, werkzeug) log their warnings and errors only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from turnstile.base.clock import iso_of_ms, parse_timestamp
from turnstile.base.contract import ID_PATTERN, Status, split_shard_key

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "Console",
    "SessionCounts",
    "TextFormatter",
    "decision_line",
]

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: The loggers whose level ``--log-level`` sets: the functions' (Powertools, named after
#: their service) and every module logger of the package (``turnstile_tools.local.poller``, ...).
OWN_LOGGERS = ("turnstile", "turnstile-api")
LOCAL_LOGGER = "turnstile_tools.local"

#: Attributes every LogRecord has; anything else on a record is an ``extra`` (Powertools
#: passes its keyword arguments as extras).
_RECORD_ATTRS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def _shown(value: Any, limit: int = 64) -> str:
    """An id as the console shows it: as is when it is a well-formed id, else quoted and
    escaped (a record written straight into intake may hold anything, terminal escapes
    included), and cut to ``limit`` characters."""
    text = value if isinstance(value, str) else str(value)
    if not ID_PATTERN.fullmatch(text) and split_shard_key(text) is None:
        text = json.dumps(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clock(at: datetime | None = None) -> str:
    """HH:MM:SS in local time."""
    return (at or datetime.now()).astimezone().strftime("%H:%M:%S")


def waited_s(submitted_at: Any, decided_at: Any) -> float | None:
    """Seconds from ``submitted_at`` to ``decided_at``: what the client waited, the
    number the stream handler's ``DecisionLatency`` metric records. None when the record
    carries no usable ``submitted_at`` (a producer may leave it out, or write junk).
    Negative when the producer's clock is ahead of this machine's: shown as it is."""
    start, end = parse_timestamp(submitted_at), parse_timestamp(decided_at)
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def move_line(moved: Any) -> str:
    """One line for a later move or a refusal (a processor's ``MovedSignup``), e.g.
    ``12:01:09 concert  carol  WAITLISTED -> HELD #3 (promotion)``."""
    t = moved.transition
    at = parse_timestamp(iso_of_ms(t.at))
    if t.refused:
        outcome = f"{t.cause} refused: {t.reason} (is {t.from_status})"
    else:
        outcome = f"{t.from_status} -> {t.to_status}"
        if t.to_status in (Status.HELD, Status.ACCEPTED) and t.position is not None:
            outcome += f" #{t.position}"
        outcome += f" ({t.cause})"
    return f"{_clock(at)} {_shown(moved.event_id):<10} {_shown(t.signup_id):<10} {outcome}"


def decision_line(decided: Any) -> str:
    """One line for one decision (a processor's ``DecidedSignup``), e.g.
    ``12:01:03 concert  alice  ACCEPTED #3  waited 0.41 s``."""
    decision = decided.decision
    at = parse_timestamp(decided.decided_at)
    if decision.status in (Status.ACCEPTED, Status.HELD):
        outcome = f"{decision.status} #{decision.position}"
    else:
        outcome = f"{decision.status} {decision.reason or ''}".rstrip()
    if decision.seats != 1:
        outcome += f" ({decision.seats} seats)"
    waited = waited_s(decided.submitted_at, decided.decided_at)
    wait = "no submitted_at" if waited is None else f"waited {waited:.2f} s"
    return (
        f"{_clock(at)} {_shown(decided.event_id):<10} {_shown(decision.signup_id):<10} "
        f"{outcome:<22}  {wait}"
    )


class TextFormatter(LambdaPowertoolsFormatter):
    """A log record as one short line: ``12:01:03 WARNING message key=value ...``.

    A Powertools formatter underneath, so it can replace the JSON formatter on the
    functions' Powertools handlers (their decorators keep appending keys to it). INFO
    records carry no level word; a record of another library names its logger. An
    exception adds its type and message; its traceback only with ``traceback=True``.
    """

    def __init__(self, traceback: bool = False) -> None:
        super().__init__()
        self.traceback = traceback

    def format(self, record: logging.LogRecord) -> str:
        parts = [_clock(datetime.fromtimestamp(record.created))]
        if record.levelno != logging.INFO:
            parts.append(record.levelname)
        if not record.name.startswith(OWN_LOGGERS):
            parts.append(f"{record.name}:")
        parts.append(record.getMessage())
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                parts.append(f"{key}={value}")
        line = " ".join(parts)
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line += f" ({type(error).__name__}: {error})"
            if self.traceback:
                line += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return line


def _own_loggers() -> list[logging.Logger]:
    """The functions' loggers and every logger below them that exists so far."""
    names = [
        name
        for name in logging.root.manager.loggerDict
        if name in OWN_LOGGERS or name.startswith(tuple(f"{n}." for n in OWN_LOGGERS))
    ]
    return [logging.getLogger(name) for name in sorted(set(names) | set(OWN_LOGGERS))]


def configure_logging(log_format: str, level: str | None) -> str:
    """Set up the process's logging for ``turnstile local``; returns the level applied.

    The functions' modules are imported first: their Powertools ``Logger``s configure
    themselves when created (a JSON handler on stdout, a level from the environment),
    so they must exist before they are set, whatever imports them later.
    """
    import turnstile.handlers.api
    import turnstile.handlers.stream  # noqa: F401

    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}")
    chosen = (level or ("INFO" if log_format == "json" else "WARNING")).upper()
    if chosen not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}")
    number = logging.getLevelName(chosen)
    for logger in _own_loggers():
        # The service loggers carry the level; the ones below them (Powertools' child
        # loggers set their own at import) inherit it.
        logger.setLevel(number if logger.name in OWN_LOGGERS else logging.NOTSET)
    root = logging.getLogger()
    root.setLevel(max(number, logging.WARNING))
    # The local stack's own modules (poller, API server, stack) are no function: their
    # records get a handler of their own, not the stream function's (whose formatter
    # carries the last invocation's Lambda context).
    local = logging.getLogger(LOCAL_LOGGER)
    local.setLevel(number)  # not below the functions' loggers: it carries its own level
    local.propagate = False
    local.handlers = [logging.StreamHandler()]
    handlers = [*(h for n in OWN_LOGGERS for h in logging.getLogger(n).handlers), *local.handlers]
    for handler in [*handlers, *root.handlers]:
        if log_format == "text":
            handler.setFormatter(TextFormatter(traceback=number <= logging.DEBUG))
        elif handler in local.handlers:
            handler.setFormatter(LambdaPowertoolsFormatter(service="turnstile-local"))
        elif handler in root.handlers:
            handler.setFormatter(LambdaPowertoolsFormatter())
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.stderr if log_format == "text" else sys.stdout)
    return chosen


@dataclass
class SessionCounts:
    """Decisions this process's worker made since it started."""

    accepted: int = 0
    rejected: int = 0
    #: First decisions that held seats or joined the waitlist (the lifecycle's).
    held: int = 0
    waitlisted: int = 0
    #: Later moves (confirmations, cancellations, expiries, promotions) and refusals.
    moved: int = 0
    events: set[str] = field(default_factory=set)

    @property
    def decided(self) -> int:
        return self.accepted + self.rejected + self.held + self.waitlisted


class Console:
    """Prints decisions as the worker makes them (text format) and counts them."""

    def __init__(self, log_format: str = "text", out: TextIO | None = None) -> None:
        self.log_format = log_format
        self.out = out
        self.counts = SessionCounts()
        self._lock = threading.Lock()

    def _print(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)

    def decided(self, decided: Any) -> None:
        """Called with each decision once it is committed (from the worker's threads)."""
        with self._lock:
            if hasattr(decided, "transition"):  # a later move, or a refusal
                self.counts.moved += 1
                if self.log_format == "text":
                    with contextlib.suppress(OSError, ValueError):
                        self._print(move_line(decided))
                return
            status = decided.decision.status
            if status == Status.ACCEPTED:
                self.counts.accepted += 1
            elif status == Status.HELD:
                self.counts.held += 1
            elif status == Status.WAITLISTED:
                self.counts.waitlisted += 1
            else:
                self.counts.rejected += 1
            # a sharded event is one event: its shards' keys count as it
            split = split_shard_key(decided.event_id)
            self.counts.events.add(split[0] if split is not None else decided.event_id)
            if self.log_format == "text":
                # stdout closed (a pipe gone): the decision stands all the same.
                with contextlib.suppress(OSError, ValueError):
                    self._print(decision_line(decided))

    def say(self, line: str) -> None:
        """A ``turnstile local:`` line (banner, summary), in either format."""
        self._print(f"turnstile local: {line}")

    def summary(
        self, counts: Any, in_memory: bool, state_dir: Path, worker: bool = True
    ) -> list[str]:
        """The closing lines: this session's decisions, what the tables hold (``counts``,
        a ``TableCounts``, or None when they could not be counted), where the state is."""
        c = self.counts
        if worker:
            more = "".join(
                f", {n} {what}" for n, what in ((c.held, "held"), (c.waitlisted, "waitlisted")) if n
            )
            lines = [
                f"this session decided {_plural(c.decided, 'signup')} ({c.accepted} accepted, "
                f"{c.rejected} rejected{more}) in {_plural(len(c.events), 'event')}"
            ]
            if c.moved:
                lines.append(
                    f"and {_plural(c.moved, 'later move')} (confirmations, cancellations, "
                    "expiries, promotions, refused requests)"
                )
        else:
            lines = ["this session decided nothing: no worker (--no-worker)"]
        if counts is None:
            lines.append("the tables were not counted in time: `turnstile audit` counts them")
        else:
            lines.append(
                f"the tables hold {_plural(counts.events, 'event')}, "
                f"{_plural(counts.decided, 'signup')} decided, {counts.pending} pending"
            )
        if in_memory:
            lines.append("state discarded (--in-memory)")
        else:
            lines.append(f"state kept in {state_dir.resolve()}: start again to carry on")
        for line in lines:
            self.say(line)
        return lines


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"

"""The console's lines: a decision, a log record."""

from __future__ import annotations

import logging
import sys
from datetime import datetime

import pytest

from turnstile.base.contract import Status
from turnstile.jobs.processor import DecidedSignup
from turnstile.storage.items import Decision
from turnstile_tools.local.console import Console, TextFormatter, decision_line

DECIDED_AT = "2026-01-01T12:00:03.500000Z"


def decided(
    signup_id: str = "alice",
    status: str = Status.ACCEPTED,
    submitted_at: str | None = "2026-01-01T12:00:03.090000Z",
    seats: int = 1,
    event_id: str = "concert",
) -> DecidedSignup:
    accepted = status == Status.ACCEPTED
    decision = Decision(
        signup_id,
        "1",
        status,
        seats,
        reason=None if accepted else "capacity_full",
        position=3 if accepted else None,
    )
    return DecidedSignup(event_id, decision, DECIDED_AT, submitted_at)


def clock(iso: str) -> str:
    at = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return at.astimezone().strftime("%H:%M:%S")


def test_an_accepted_signup_shows_its_position_and_how_long_it_waited():
    assert decision_line(decided()) == (
        f"{clock(DECIDED_AT)} concert    alice      ACCEPTED #3             waited 0.41 s"
    )


@pytest.mark.parametrize(
    ("kwargs", "tail"),
    [
        ({"status": Status.REJECTED}, "REJECTED capacity_full  waited 0.41 s"),
        ({"seats": 2}, "ACCEPTED #3 (2 seats)   waited 0.41 s"),
        ({"submitted_at": None}, "ACCEPTED #3             no submitted_at"),
        ({"submitted_at": "yesterday"}, "ACCEPTED #3             no submitted_at"),
        # The producer's clock ahead of this one: shown as it is, not hidden.
        ({"submitted_at": "2026-01-01T12:00:04Z"}, "ACCEPTED #3             waited -0.50 s"),
    ],
    ids=["rejected", "seats", "no-submitted-at", "junk-submitted-at", "clock-ahead"],
)
def test_a_decision_line_says_what_was_decided(kwargs, tail):
    assert decision_line(decided(**kwargs)).endswith(tail)


def test_ids_a_producer_wrote_into_intake_are_escaped_and_cut():
    line = decision_line(decided(signup_id="\x1b[31mred", event_id="e" * 200))
    assert "\x1b" not in line
    assert ' "\\u001b[31mred" ' in line
    assert ' "' + "e" * 62 + "… " in line


def test_a_shards_decisions_show_its_key_and_count_as_its_event():
    console = Console(out=open("/dev/null", "w"))  # noqa: SIM115 - the console's own stream
    for shard in ("drop#00", "drop#03"):
        assert f" {shard}    " in decision_line(decided(event_id=shard))
        console.decided(decided(event_id=shard))
    assert console.counts.events == {"drop"}


def record(
    message: str, level: int = logging.INFO, name: str = "turnstile", **extra
) -> logging.LogRecord:
    made = logging.LogRecord(name, level, __file__, 1, message, (), None)
    made.__dict__.update(extra)
    return made


def test_a_log_record_is_one_short_line_with_its_extras():
    formatter = TextFormatter()
    at = datetime.fromtimestamp(record("x").created).strftime("%H:%M:%S")
    assert (
        formatter.format(record("batch processed", records=3)) == f"{at} batch processed records=3"
    )
    assert formatter.format(record("event parked", logging.WARNING, event_id="gig")).endswith(
        " WARNING event parked event_id=gig"
    )
    # Another library's record names its logger.
    assert formatter.format(record("slow", logging.WARNING, name="botocore.x")).endswith(
        " WARNING botocore.x: slow"
    )


def test_an_exception_is_one_line_unless_tracebacks_are_asked_for():
    try:
        raise RuntimeError("poll failed")
    except RuntimeError:
        failed = record("stream poll failed", logging.ERROR)
        failed.exc_info = sys.exc_info()
    line = TextFormatter().format(failed)
    assert line.endswith(" ERROR stream poll failed (RuntimeError: poll failed)")
    assert "\n" not in line
    assert "Traceback" in TextFormatter(traceback=True).format(failed)


@pytest.mark.parametrize(("log_format", "printed"), [("text", 2), ("json", 0)])
def test_the_console_counts_decisions_and_prints_them_only_as_text(log_format, printed, capsys):
    console = Console(log_format)
    console.decided(decided("a"))
    console.decided(decided("b", Status.REJECTED, event_id="other"))
    assert (console.counts.accepted, console.counts.rejected) == (1, 1)
    assert console.counts.events == {"concert", "other"}
    assert len(capsys.readouterr().out.splitlines()) == printed


def test_later_moves_and_refusals_have_their_own_lines_and_counts():
    import io

    from turnstile.base.clock import ms_of
    from turnstile.engine.lifecycle import Transition
    from turnstile.jobs.processor import MovedSignup
    from turnstile_tools.local.console import move_line

    at = ms_of(DECIDED_AT)
    promoted = MovedSignup(
        "concert",
        Transition("carol", Status.WAITLISTED, Status.HELD, at, "9", "promotion", 1, position=3),
    )
    refused = MovedSignup(
        "concert",
        Transition(
            "bob",
            Status.EXPIRED,
            Status.EXPIRED,
            at,
            "10",
            "confirm",
            1,
            reason="hold_expired",
            refused=True,
        ),
    )
    assert move_line(promoted) == (
        f"{clock(DECIDED_AT)} concert    carol      WAITLISTED -> HELD #3 (promotion)"
    )
    assert move_line(refused) == (
        f"{clock(DECIDED_AT)} concert    bob        confirm refused: hold_expired (is EXPIRED)"
    )
    out = io.StringIO()
    console = Console(out=out)
    for item in (decided(status=Status.HELD), promoted, refused):
        console.decided(item)
    assert (console.counts.held, console.counts.moved, console.counts.decided) == (1, 2, 1)
    assert out.getvalue().splitlines()[1:] == [move_line(promoted), move_line(refused)]

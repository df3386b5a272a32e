"""The audit against moto while the stream processor keeps deciding: a view that changed
under it is read again, and one that never holds still is inconclusive, never a violation."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers import put_raw_intake
from turnstile.base.errors import EventNotFoundError
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.store import SignupStore
from turnstile_tools import cli
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext

NOW = "2026-01-01T00:00:00.000000Z"


class BusyStore(SignupStore):
    """A store whose reads of the main table race a processor: ``during_scan`` runs after
    the first item of a main-table read has been returned (a scan's first page)."""

    during_scan: Callable[[], None] = staticmethod(lambda: None)
    races = 0

    def decision_items(self, event_id: str | None = None) -> Iterator[dict[str, Any]]:
        first = list(super().decision_items(event_id))[:1]
        yield from first
        if self.races:
            self.races -= 1
            self.during_scan()
        seen = {(i["event_id"], i["signup_id"]) for i in first}
        for item in super().decision_items(event_id):
            if (item["event_id"], item["signup_id"]) not in seen:
                yield item


def busy_event(client, store, stream, pending: int) -> tuple[BusyStore, Callable[[], None]]:
    """An event with one decided signup and ``pending`` more in the stream; each call of
    the returned function has the processor decide the next one."""
    store.create_event("gig", 10, NOW)
    put_raw_intake(client, "gig", "u0", submitted_at={"S": NOW})
    for i in range(1, pending + 1):
        put_raw_intake(client, "gig", f"u{i}", submitted_at={"S": NOW})
    records = stream.read_new()
    processor = StreamProcessor(SignupStore(client, sleep=lambda _: None))
    stream_handler._processor = processor
    stream_handler.handler({"Records": records[:1]}, LocalLambdaContext())
    queue = list(records[1:])

    def decide_next() -> None:
        stream_handler.handler({"Records": [queue.pop(0)]}, LocalLambdaContext())

    busy = BusyStore(client, sleep=lambda _: None)
    busy.during_scan = decide_next
    return busy, decide_next


def test_a_commit_while_the_audit_reads_is_read_again_not_a_violation(client, store, stream):
    # GIVEN a processor that commits a decision while the audit is reading the decisions
    busy, _ = busy_event(client, store, stream, pending=1)
    busy.races = 1
    # WHEN the audit runs
    report = audit(busy, "gig", pending_grace_s=10**9)
    # THEN it saw the moving event, read it again, and found it intact
    assert report.ok, [(e.violations, e.notes) for e in report.events]
    [event] = report.events
    assert (event.status_counts, event.taken, event.inconclusive) == ({"ACCEPTED": 2}, 2, False)
    stream_handler._processor = None


def test_an_event_that_never_holds_still_is_inconclusive(
    client, store, stream, capsys, monkeypatch
):
    # GIVEN a processor that commits during every read the audit makes
    busy, _ = busy_event(client, store, stream, pending=8)
    busy.races = 8
    # WHEN the audit runs
    report = audit(busy, "gig", pending_grace_s=10**9)
    # THEN the event is inconclusive: not ok, not a violation
    [event] = report.events
    assert event.inconclusive and event.violations == []
    assert not report.ok and report.inconclusive
    # AND the command says so, with an exit code of its own
    busy.races = 8
    monkeypatch.setattr(cli, "_store", lambda: busy)
    capsys.readouterr()
    code = cli.main(["audit", "gig", "--pending-grace", "1000000000"])
    out, _ = capsys.readouterr()
    assert code == cli.EXIT_AUDIT_INCONCLUSIVE
    assert code not in (0, cli.EXIT_AUDIT_FAILED, cli.EXIT_ERROR, cli.EXIT_STILL_PENDING)
    assert "INCONCLUSIVE gig" in out
    assert out.splitlines()[-1].startswith("audit INCONCLUSIVE: 1 events")
    stream_handler._processor = None


def test_auditing_an_unknown_event_is_an_error(store):
    with pytest.raises(EventNotFoundError):
        audit(store, "no-such-event")


def test_audit_command_on_an_unknown_event_is_one_line(aws, capsys):
    code = cli.main(["audit", "no-such-event"])
    out, err = capsys.readouterr()
    assert (code, out) == (cli.EXIT_ERROR, "")
    assert err == "turnstile: no such event 'no-such-event'\n"


def test_how_often_an_event_is_read_again_is_the_caller_s(client, store, stream):
    # GIVEN a processor that commits once while the audit reads the decisions
    busy, _ = busy_event(client, store, stream, pending=2)
    busy.races = 1
    # WHEN the audit may read each event only once THEN that one race leaves it inconclusive
    [event] = audit(busy, "gig", pending_grace_s=10**9, attempts=1).events
    assert (event.inconclusive, event.violations) == (True, [])
    assert event.notes == [
        "the event changed while it was read, 1 times in a row; audit it again when it is quieter"
    ]
    # and with a second read allowed, the same race is read again and checked
    busy.races = 1
    [event] = audit(busy, "gig", pending_grace_s=10**9, attempts=2).events
    assert (event.inconclusive, event.violations, event.status_counts) == (
        False,
        [],
        {"ACCEPTED": 3},
    )
    stream_handler._processor = None

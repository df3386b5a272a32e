"""The lifecycle wired in: the stream processor and the store (moto) decide holds,
confirmations, cancellations, expiries and promotions from intake records, and the items
say so (docs/lifecycle.md).

Requests arrive as a producer makes them: a MODIFY of the signup's own intake item whose
``request_count`` went up. Time is the processor's clock, moved by hand.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from turnstile.base.clock import iso_of_ms, ms_of
from turnstile.base.contract import Attr, HistoryKey, Reason, Status
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.dynamo import event_key
from turnstile.storage.items import history_of
from turnstile.storage.store import SignupStore

T0 = "2026-01-01T00:00:00.000000Z"


class Clock:
    def __init__(self) -> None:
        self.ms = ms_of(T0)

    def __call__(self) -> str:
        return iso_of_ms(self.ms)

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


#: The intake records' ``expires_at``: long gone (TTL has passed), so a decision's retention
#: counts from the decision alone (tests/integration/test_personal_data.py has the rest).
INTAKE_GONE = Decimal(1)


class Feed:
    """Intake records as the stream delivers them: sequence numbers go up."""

    def __init__(self) -> None:
        self.seq = 100
        self.requests: dict[tuple[str, str], int] = {}

    def _next(self) -> str:
        self.seq += 1
        return str(self.seq)

    def signup(self, event_id: str, signup_id: str, seats: int = 1) -> StreamRecord:
        keys = {"event_id": event_id, "signup_id": signup_id}
        image = {
            **keys,
            "seats": Decimal(seats),
            "submitted_at": "2026-01-01T00:00:00Z",
            "expires_at": INTAKE_GONE,
        }
        return StreamRecord(self._next(), "INSERT", keys, image)

    def request(
        self, event_id: str, signup_id: str, kind: Any, seats: int = 1, count: Any = None
    ) -> StreamRecord:
        key = (event_id, signup_id)
        self.requests[key] = self.requests.get(key, 0) + 1
        keys = {"event_id": event_id, "signup_id": signup_id}
        image = {
            **keys,
            "seats": Decimal(seats),
            "request": kind,
            "request_count": Decimal(self.requests[key]) if count is None else count,
            "undecided": "0",
            "expires_at": INTAKE_GONE,
        }
        return StreamRecord(self._next(), "MODIFY", keys, image)

    def re_emit(self, record: StreamRecord) -> StreamRecord:
        """The same image again under a new sequence number (the sweeper's bump)."""
        return StreamRecord(self._next(), "MODIFY", record.keys, record.new_image)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def feed():
    return Feed()


@pytest.fixture
def processor(store, clock):
    return StreamProcessor(store, clock=clock)


def make_event(store: SignupStore, event_id: str, capacity: int, **options: int) -> None:
    """An event with lifecycle options, written as the organizer's role writes them."""
    store.create_event(event_id, capacity, T0)
    if options:
        names = {f"#{k}": k for k in options}
        values = {f":{k}": {"N": str(v)} for k, v in options.items()}
        store.dynamo.call(
            "update_item",
            TableName=store.control_table,
            Key=event_key(event_id),
            UpdateExpression="SET " + ", ".join(f"#{k} = :{k}" for k in options),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )


def status(store: SignupStore, event_id: str, signup_id: str) -> str | None:
    item = store.get_decision(event_id, signup_id)
    return item[Attr.STATUS] if item else None


def statuses(store: SignupStore, event_id: str, *signups: str) -> list[str | None]:
    return [status(store, event_id, s) for s in signups]


def moves(store: SignupStore, event_id: str, signup_id: str) -> list[tuple[str, str, str]]:
    item = store.get_decision(event_id, signup_id)
    assert item is not None
    return [(h[HistoryKey.FROM], h[HistoryKey.TO], h[HistoryKey.CAUSE]) for h in history_of(item)]


def event_state(store: SignupStore, event_id: str) -> tuple[int, int]:
    event = store.get_event(event_id)
    assert event is not None
    return event.event.taken, event.event.accepted


# -- each transition -----------------------------------------------------------------


def test_a_hold_is_confirmed(store, processor, feed, clock):
    make_event(store, "gig", 2, hold_seconds=60)
    processor.process([feed.signup("gig", "a")])
    item = store.get_decision("gig", "a")
    assert (item[Attr.STATUS], item[Attr.POSITION]) == (Status.HELD, 1)
    assert item[Attr.HOLD_EXPIRES_AT] == iso_of_ms(clock.ms + 60_000)
    clock.advance(59)
    result = processor.process([feed.request("gig", "a", "confirm")])
    item = store.get_decision("gig", "a")
    assert (item[Attr.STATUS], item[Attr.POSITION]) == (Status.ACCEPTED, 1)
    assert Attr.HOLD_EXPIRES_AT not in item
    assert item[Attr.REQUEST_COUNT] == 1
    assert history_of(item)[-1][HistoryKey.AT] == clock()
    assert moves(store, "gig", "a") == [
        (Status.PENDING, Status.HELD, "signup"),
        (Status.HELD, Status.ACCEPTED, "confirm"),
    ]
    assert event_state(store, "gig") == (1, 1)
    assert [(e, t.from_status, t.to_status) for e, t in result.transitions] == [
        ("gig", Status.HELD, Status.ACCEPTED)
    ]


def test_an_acceptance_is_cancelled_and_its_seats_come_back(store, processor, feed):
    make_event(store, "gig", 1)
    processor.process([feed.signup("gig", "a"), feed.signup("gig", "b")])
    assert statuses(store, "gig", "a", "b") == [Status.ACCEPTED, Status.REJECTED]
    processor.process([feed.request("gig", "a", "cancel"), feed.signup("gig", "c")])
    assert statuses(store, "gig", "a", "c") == [Status.CANCELLED, Status.ACCEPTED]
    assert event_state(store, "gig") == (1, 2)
    event = store.get_event("gig")
    assert event.status_counts == {Status.ACCEPTED: 1, Status.CANCELLED: 1, Status.REJECTED: 1}


def test_a_hold_lapses_at_its_expiry_on_any_record_of_the_event(store, processor, feed, clock):
    make_event(store, "gig", 1, hold_seconds=4)
    first = feed.signup("gig", "a")
    processor.process([first])
    clock.advance(3.999)
    processor.process([feed.re_emit(first)])  # a tick before the expiry: nothing
    assert status(store, "gig", "a") == Status.HELD
    clock.advance(0.001)
    processor.process([feed.re_emit(first)])  # the due-holds re-emission: a tick
    assert status(store, "gig", "a") == Status.EXPIRED
    assert event_state(store, "gig") == (0, 1)
    event = store.get_event("gig").event
    assert (event.holds, event.waiting) == ((), ())
    raw = store.dynamo.get(store.control_table, event_key("gig"))
    assert Attr.LINEUP not in raw
    assert Attr.HOLD_DUE_AT not in raw and Attr.HOLD_DUE_SHARD not in raw


def test_the_due_hold_is_on_the_event_item_for_the_index(store, processor, feed, clock):
    make_event(store, "gig", 3, hold_seconds=10)
    processor.process([feed.signup("gig", "a")])
    clock.advance(2)
    processor.process([feed.signup("gig", "b")])
    raw = store.dynamo.get(store.control_table, event_key("gig"))
    assert (raw[Attr.HOLD_DUE_AT], raw[Attr.HOLD_DUE_SIGNUP], raw[Attr.HOLD_DUE_SHARD]) == (
        ms_of(T0) + 10_000,
        "a",
        "0",
    )
    processor.process([feed.request("gig", "a", "confirm")])
    raw = store.dynamo.get(store.control_table, event_key("gig"))
    assert (raw[Attr.HOLD_DUE_AT], raw[Attr.HOLD_DUE_SIGNUP]) == (ms_of(T0) + 12_000, "b")


def test_a_waitlisted_signup_is_promoted_when_a_seat_comes_back(store, processor, feed):
    make_event(store, "gig", 1, waitlist=2)
    processor.process([feed.signup("gig", "a"), feed.signup("gig", "b"), feed.signup("gig", "c")])
    assert statuses(store, "gig", "a", "b", "c") == [
        Status.ACCEPTED,
        Status.WAITLISTED,
        Status.WAITLISTED,
    ]
    assert store.get_decision("gig", "c")[Attr.WAITLIST_POSITION] == 2
    processor.process([feed.request("gig", "a", "cancel")])
    assert statuses(store, "gig", "a", "b", "c") == [
        Status.CANCELLED,
        Status.ACCEPTED,
        Status.WAITLISTED,
    ]
    b = store.get_decision("gig", "b")
    assert b[Attr.POSITION] == 2
    assert moves(store, "gig", "b") == [
        (Status.PENDING, Status.WAITLISTED, "signup"),
        (Status.WAITLISTED, Status.ACCEPTED, "promotion"),
    ]


def test_one_cancellation_promotes_a_chain_in_waitlist_order(store, processor, feed):
    make_event(store, "gig", 4, waitlist=5, hold_seconds=30)
    processor.process(
        [
            feed.signup("gig", "big", seats=3),
            feed.signup("gig", "one", seats=1),
            feed.signup("gig", "w3", seats=3),
            feed.signup("gig", "w1", seats=1),
            feed.signup("gig", "w2", seats=1),
            feed.signup("gig", "w4", seats=1),
        ]
    )
    assert statuses(store, "gig", "big", "one", "w3", "w1", "w2", "w4") == [
        Status.HELD,
        Status.HELD,
        *[Status.WAITLISTED] * 4,
    ]
    processor.process([feed.request("gig", "big", "cancel")])
    # three seats back: w3 (3 seats, first in line) takes them all; nobody else fits
    assert statuses(store, "gig", "w3", "w1", "w2", "w4") == [
        Status.HELD,
        Status.WAITLISTED,
        Status.WAITLISTED,
        Status.WAITLISTED,
    ]
    processor.process([feed.request("gig", "w3", "cancel")])
    # again three: the three 1-seat signups, in line order, positions 4, 5, 6
    got = [
        (s, status(store, "gig", s), store.get_decision("gig", s)[Attr.POSITION])
        for s in ("w1", "w2", "w4")
    ]
    assert got == [("w1", Status.HELD, 4), ("w2", Status.HELD, 5), ("w4", Status.HELD, 6)]
    assert event_state(store, "gig") == (4, 6)


def test_a_close_rejects_the_waitlist(store, processor, feed):
    make_event(store, "gig", 1, waitlist=1)
    processor.process([feed.signup("gig", "a"), feed.signup("gig", "b")])
    store.close_event("gig")
    processor.process([feed.signup("gig", "c")])
    b = store.get_decision("gig", "b")
    assert (b[Attr.STATUS], b[Attr.REASON]) == (Status.REJECTED, Reason.EVENT_CLOSED)
    assert moves(store, "gig", "b")[-1] == (Status.WAITLISTED, Status.REJECTED, "close")
    assert status(store, "gig", "c") == Status.REJECTED


def test_seats_above_max_are_rejected(store, processor, feed):
    make_event(store, "gig", 10, max_seats=2)
    processor.process([feed.signup("gig", "a", seats=3), feed.signup("gig", "b", seats=2)])
    a = store.get_decision("gig", "a")
    assert (a[Attr.STATUS], a[Attr.REASON]) == (Status.REJECTED, Reason.SEATS_ABOVE_MAX)
    assert status(store, "gig", "b") == Status.ACCEPTED


# -- refusals ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "request_kind", "reason", "current"),
    [
        ("accepted", "confirm", Reason.TRANSITION_NOT_ALLOWED, Status.ACCEPTED),
        ("rejected", "cancel", Reason.TRANSITION_NOT_ALLOWED, Status.REJECTED),
        ("expired", "confirm", Reason.HOLD_EXPIRED, Status.EXPIRED),
        ("expired", "cancel", Reason.HOLD_EXPIRED, Status.EXPIRED),
        ("held", "refund", Reason.INVALID_REQUEST, Status.HELD),
    ],
)
def test_a_refused_request_changes_nothing_and_says_why(
    store, processor, feed, clock, setup, request_kind, reason, current
):
    make_event(store, "gig", 1, hold_seconds=0 if setup in ("accepted", "rejected") else 5)
    processor.process([feed.signup("gig", "x"), feed.signup("gig", "a")])
    sid = "a" if setup == "rejected" else "x"
    if setup == "expired":
        clock.advance(5)
        processor.process([feed.signup("gig", "tick")])  # any record: the hold lapses
        assert status(store, "gig", "x") == Status.EXPIRED
    before = event_state(store, "gig")
    processor.process([feed.request("gig", sid, request_kind)])
    item = store.get_decision("gig", sid)
    assert item[Attr.STATUS] == current
    assert event_state(store, "gig") == before
    refusal = item[Attr.LAST_REFUSAL]
    assert refusal == {
        "request": request_kind,
        "reason": reason,
        "status": current,
        "at": clock(),
        "sequence_number": str(feed.seq),
    }
    assert item[Attr.REQUEST_COUNT] == 1
    assert all(h[HistoryKey.CAUSE] != request_kind for h in history_of(item))


# -- replays and re-emissions ----------------------------------------------------------


def test_a_re_emitted_request_is_not_applied_again(store, processor, feed, clock):
    """A confirm refused while the signup waited must not confirm the hold it got later:
    the re-emitted record carries the same request counter, so it is a tick."""
    make_event(store, "gig", 1, waitlist=1, hold_seconds=30)
    processor.process([feed.signup("gig", "a"), feed.signup("gig", "b")])
    refused = feed.request("gig", "b", "confirm")
    processor.process([refused])
    assert store.get_decision("gig", "b")[Attr.LAST_REFUSAL]["reason"] == (
        Reason.TRANSITION_NOT_ALLOWED
    )
    processor.process([feed.request("gig", "a", "cancel")])
    assert status(store, "gig", "b") == Status.HELD
    processor.process([feed.re_emit(refused)])
    assert status(store, "gig", "b") == Status.HELD
    # and a redelivery of any record changes nothing either
    before = {s: store.get_decision("gig", s) for s in ("a", "b")}
    processor.process([refused, feed.re_emit(refused)])
    assert {s: store.get_decision("gig", s) for s in ("a", "b")} == before


def test_a_signup_and_its_cancel_in_one_batch(store, processor, feed):
    make_event(store, "gig", 1, waitlist=1)
    processor.process(
        [feed.signup("gig", "a"), feed.signup("gig", "b"), feed.request("gig", "a", "cancel")]
    )
    assert statuses(store, "gig", "a", "b") == [Status.CANCELLED, Status.ACCEPTED]
    assert moves(store, "gig", "a") == [
        (Status.PENDING, Status.ACCEPTED, "signup"),
        (Status.ACCEPTED, Status.CANCELLED, "cancel"),
    ]


def test_a_request_counter_that_is_no_number_is_a_tick(store, processor, feed):
    make_event(store, "gig", 1)
    processor.process([feed.signup("gig", "a")])
    processor.process([feed.request("gig", "a", "cancel", count="lots")])
    assert status(store, "gig", "a") == Status.ACCEPTED


# -- crashes -------------------------------------------------------------------------


class CrashAfterCommit(SignupStore):
    crash = False

    def materialize(self, event_id, journal, requests=None):  # type: ignore[override]
        if self.crash and journal.updates:
            self.crash = False
            raise RuntimeError("crash between commit and materialization")
        super().materialize(event_id, journal, requests)


def test_a_crash_mid_promotion_is_finished_by_the_next_processor(aws, feed, clock):
    store = CrashAfterCommit(aws.client("dynamodb"), sleep=lambda _: None)
    make_event(store, "gig", 2, waitlist=3)
    StreamProcessor(store, clock=clock).process(
        [feed.signup("gig", s) for s in ("a", "b", "c", "d", "e")]
    )
    store.crash = True
    crashed = StreamProcessor(store, clock=clock)
    crashed.process([feed.request("gig", "a", "cancel"), feed.request("gig", "b", "cancel")])
    # committed, not materialized: the items still say what they said
    assert event_state(store, "gig") == (2, 4)
    # the processor parked what it could not finish; a new one finishes the journal first
    fresh = StreamProcessor(store, clock=clock)
    fresh.release("gig")
    fresh.process([feed.signup("gig", "f")])
    assert statuses(store, "gig", "a", "b", "c", "d", "e", "f") == [
        Status.CANCELLED,
        Status.CANCELLED,
        Status.ACCEPTED,
        Status.ACCEPTED,
        Status.WAITLISTED,
        Status.WAITLISTED,
    ]
    for sid in "abcde":
        history = moves(store, "gig", sid)
        assert len(history) == len({(f, t) for f, t, _ in history})  # nothing twice


def test_an_older_journal_written_late_undoes_nothing(aws, feed, clock):
    """A slower processor materializing journal N after N+1 was written: every write is
    conditioned on the status it was decided from, so nothing moves back."""
    store = SignupStore(aws.client("dynamodb"), sleep=lambda _: None)
    make_event(store, "gig", 1, hold_seconds=30)
    p = StreamProcessor(store, clock=clock)
    p.process([feed.signup("gig", "a")])
    first = store.get_event("gig").journal
    p.process([feed.request("gig", "a", "confirm")])
    second = store.get_event("gig").journal
    p.process([feed.request("gig", "a", "cancel")])
    after = store.get_decision("gig", "a")
    store.materialize("gig", first)
    store.materialize("gig", second)
    assert store.get_decision("gig", "a") == after
    assert after[Attr.STATUS] == Status.CANCELLED


# -- the audit -------------------------------------------------------------------------


def test_the_audit_passes_a_lifecycle_and_catches_a_broken_history(store, processor, feed, clock):
    from turnstile_tools.audit import audit

    make_event(store, "gig", 2, waitlist=2, hold_seconds=4)
    processor.process([feed.signup("gig", s) for s in ("a", "b", "c", "d", "e")])
    processor.process([feed.request("gig", "a", "confirm"), feed.request("gig", "b", "cancel")])
    clock.advance(5)
    processor.process([feed.request("gig", "a", "cancel")])
    assert statuses(store, "gig", "a", "b", "c", "d", "e") == [
        Status.CANCELLED,
        Status.CANCELLED,
        Status.EXPIRED,  # promoted when b cancelled, never confirmed
        Status.HELD,  # promoted when c's hold lapsed
        Status.REJECTED,  # the waitlist (2) was full
    ]
    # judged at the processor's time: d's hold is not due yet
    now = datetime.fromisoformat(clock().replace("Z", "+00:00"))
    report = audit(store, pending_grace_s=3600, now=now)
    assert report.ok, report.to_dict()
    # a history that skips a status is a violation
    store.dynamo.call(
        "update_item",
        TableName=store.main_table,
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "d"}},
        UpdateExpression="SET #h = :h",
        ExpressionAttributeNames={"#h": Attr.HISTORY},
        ExpressionAttributeValues={
            ":h": {
                "L": [
                    {"M": {"from": {"S": "PENDING"}, "to": {"S": "HELD"}}},
                    {"M": {"from": {"S": "HELD"}, "to": {"S": "HELD"}}},
                ]
            }
        },
    )
    report = audit(store, pending_grace_s=3600, now=now)
    assert not report.ok
    [event] = report.events
    assert any("history moves HELD -> HELD" in v for v in event.violations), event.violations


# -- through the stream and the handler, as a producer writes --------------------------


def test_a_producer_s_documented_request_reaches_the_handler_through_the_filter(aws, stream):
    """The intake update the docs give a producer: its MODIFY passes the event-source
    filter and the handler applies it; a MODIFY without the marker does not pass."""
    import json

    from tests.helpers import put_raw_intake
    from turnstile.base.contract import STREAM_SOURCE, undecided_shard
    from turnstile.base.eventfilter import matches_any
    from turnstile.handlers import stream as stream_handler
    from turnstile_tools.local.context import LocalLambdaContext

    client = aws.client("dynamodb")
    store = SignupStore(client, sleep=lambda _: None)
    make_event(store, "gig", 1, waitlist=1)
    stream_handler._processor = None

    def deliver() -> list[dict[str, Any]]:
        records = [r for r in stream.read_new() if matches_any(STREAM_SOURCE.filter_patterns, r)]
        event = json.loads(json.dumps({"Records": records}, default=str))
        assert stream_handler.handler(event, LocalLambdaContext()) == {"batchItemFailures": []}
        return records

    for sid in ("a", "b"):
        put_raw_intake(client, "gig", sid, seats={"N": "1"}, submitted_at={"S": T0})
    deliver()
    assert statuses(store, "gig", "a", "b") == [Status.ACCEPTED, Status.WAITLISTED]
    # the producer of "a" cancels, exactly as the docs say
    client.update_item(
        TableName=store.intake_table,
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "a"}},
        UpdateExpression="SET #request = :kind, #undecided = :shard ADD #request_count :one",
        ExpressionAttributeNames={
            "#request": "request",
            "#undecided": "undecided",
            "#request_count": "request_count",
        },
        ExpressionAttributeValues={
            ":kind": {"S": "cancel"},
            ":shard": {"S": undecided_shard("gig", "a")},
            ":one": {"N": "1"},
        },
    )
    assert len(deliver()) == 1
    assert statuses(store, "gig", "a", "b") == [Status.CANCELLED, Status.ACCEPTED]
    assert store.get_decision("gig", "a")[Attr.REQUEST_COUNT] == 1
    stream_handler._processor = None


@pytest.mark.parametrize(
    ("count", "answered"),
    [(Decimal("1.5"), 2), (Decimal(10**30), 10**30), (Decimal(-1), None), ("2", None)],
)
def test_a_request_counter_a_producer_got_wrong_is_answered_or_ignored(
    store, processor, feed, count, answered
):
    """A fraction is refused and answered as the next whole number (so the sweeper sees
    it answered); a huge whole number is an ordinary count; a negative or text count is
    no request at all (a tick), as the sweeper also reads it."""
    make_event(store, "gig", 1)
    processor.process([feed.signup("gig", "a")])
    processor.process([feed.request("gig", "a", "cancel", count=count)])
    item = store.get_decision("gig", "a")
    assert item.get(Attr.REQUEST_COUNT) == answered
    expected = Status.CANCELLED if count == Decimal(10**30) else Status.ACCEPTED
    assert item[Attr.STATUS] == expected
    if count == Decimal("1.5"):
        assert item[Attr.LAST_REFUSAL]["reason"] == Reason.INVALID_REQUEST


def test_a_promoted_signup_whose_item_is_gone_gets_an_item_again(store, processor, feed):
    """A decision item deleted by hand (or by a retention TTL) while its signup waits: the
    promotion writes it again, its history starting from what is known."""
    make_event(store, "gig", 1, waitlist=1)
    processor.process([feed.signup("gig", "a"), feed.signup("gig", "b")])
    store.dynamo.call(
        "delete_item",
        TableName=store.main_table,
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "b"}},
    )
    processor.process([feed.request("gig", "a", "cancel")])
    b = store.get_decision("gig", "b")
    assert (b[Attr.STATUS], b[Attr.POSITION]) == (Status.ACCEPTED, 2)
    assert [(h["from"], h["to"]) for h in history_of(b)] == [
        (Status.PENDING, Status.WAITLISTED),
        (Status.WAITLISTED, Status.ACCEPTED),
    ]


def test_rewriting_a_gone_item_holds_nothing_up(store, processor, feed):
    """The promotion that writes a gone item again commits, reports, and holds no event."""
    make_event(store, "gig", 1, waitlist=1)
    processor.process([feed.signup("gig", "a"), feed.signup("gig", "b")])
    store.dynamo.call(
        "delete_item",
        TableName=store.main_table,
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "b"}},
    )
    result = processor.process([feed.request("gig", "a", "cancel")])
    assert (result.parked_events, result.parked, result.failures) == ([], 0, [])
    assert store.get_parking("gig") is None
    assert [(t.signup_id, t.cause) for _, t in result.transitions] == [
        ("a", "cancel"),
        ("b", "promotion"),
    ]
    assert result.decided == []


def test_a_counter_without_a_request_is_refused_as_naming_nothing(store, processor, feed):
    make_event(store, "gig", 1)
    processor.process([feed.signup("gig", "a")])
    processor.process([feed.request("gig", "a", None)])
    item = store.get_decision("gig", "a")
    assert item[Attr.STATUS] == Status.ACCEPTED
    assert (item[Attr.LAST_REFUSAL]["request"], item[Attr.LAST_REFUSAL]["reason"]) == (
        "",
        Reason.INVALID_REQUEST,
    )

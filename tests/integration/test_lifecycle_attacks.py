"""Attacks on the lifecycle as wired into the stream processor (docs/lifecycle.md §10):
what a producer may write into its own intake item, processors racing on one event,
crashes between a commit and its items, organizers' options, retention deleting items
that are still in the event's lineup. Each test states the attack and what must hold.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import Binary

from tests.integration.test_lifecycle_processor import (
    T0,
    Clock,
    Feed,
    event_state,
    make_event,
    status,
    statuses,
)
from tests.roles import as_user
from turnstile.base.clock import iso_of_ms
from turnstile.base.contract import Attr, HistoryKey, Reason, Status
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.dynamo import event_key, signup_key
from turnstile.storage.items import history_of
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def feed():
    return Feed()


@pytest.fixture
def processor(store, clock):
    return StreamProcessor(store, clock=clock)


def insert_with(feed: Feed, event_id: str, signup_id: str, **fields: Any) -> StreamRecord:
    """A producer's first write of its intake item, carrying whatever it likes."""
    keys = {"event_id": event_id, "signup_id": signup_id}
    image = {**keys, "seats": Decimal(1), "submitted_at": T0, **fields}
    feed.seq += 1
    return StreamRecord(str(feed.seq), "INSERT", keys, image)


def modify_with(feed: Feed, event_id: str, signup_id: str, **fields: Any) -> StreamRecord:
    keys = {"event_id": event_id, "signup_id": signup_id}
    image = {**keys, "seats": Decimal(1), "submitted_at": T0, "undecided": "0", **fields}
    feed.seq += 1
    return StreamRecord(str(feed.seq), "MODIFY", keys, image)


def clean(store: SignupStore) -> list[str]:
    report = audit(store, pending_grace_s=10**9)
    return [v for e in report.events for v in e.violations]


# -- a request on the record that first decides the signup ------------------------------


def test_an_insert_carrying_a_cancel_is_decided_first_and_the_cancel_answered_later(
    store, processor, feed
):
    make_event(store, "gig", 1, waitlist=1)
    first = insert_with(feed, "gig", "a", request="cancel", request_count=Decimal(1))
    processor.process([first, feed.signup("gig", "b")])
    assert statuses(store, "gig", "a", "b") == [Status.ACCEPTED, Status.WAITLISTED]
    assert Attr.REQUEST_COUNT not in store.get_decision("gig", "a")
    # the sweeper re-emits it (its marker stays until the count is answered)
    processor.process([feed.re_emit(first)])
    assert statuses(store, "gig", "a", "b") == [Status.CANCELLED, Status.ACCEPTED]
    assert store.get_decision("gig", "a")[Attr.REQUEST_COUNT] == 1
    processor.process([feed.re_emit(first)])  # once answered, a tick
    assert statuses(store, "gig", "a", "b") == [Status.CANCELLED, Status.ACCEPTED]
    assert clean(store) == []


# -- what a producer writes as its request ----------------------------------------------


@pytest.mark.parametrize(
    "junk",
    [
        Decimal(7),
        Decimal(0),
        {"kind": "cancel"},
        {},
        [],
        ["cancel"],
        True,
        False,
        Binary(b"cancel"),
        Binary(b""),
        {"cancel"},
        "x" * 400_000,
        "CANCEL",
        " cancel",
        "",
    ],
    ids=lambda j: f"{type(j).__name__}-{repr(j)[:20]}",
)
def test_a_request_that_is_not_confirm_or_cancel_is_refused_and_blocks_nothing(
    store, processor, feed, junk
):
    make_event(store, "gig", 2, hold_seconds=60)
    processor.process([feed.signup("gig", "a")])
    result = processor.process(
        [
            modify_with(feed, "gig", "a", request=junk, request_count=Decimal(1)),
            feed.signup("gig", "b"),
        ]
    )
    assert result.failures == [] and result.parked_events == []
    item = store.get_decision("gig", "a")
    assert item[Attr.STATUS] == Status.HELD
    assert item[Attr.REQUEST_COUNT] == 1
    assert item[Attr.LAST_REFUSAL]["reason"] == Reason.INVALID_REQUEST
    assert status(store, "gig", "b") == Status.HELD
    # and the signup's next, proper request is applied
    processor.process([modify_with(feed, "gig", "a", request="confirm", request_count=Decimal(2))])
    assert status(store, "gig", "a") == Status.ACCEPTED
    assert clean(store) == []


@pytest.mark.parametrize(
    "count",
    [
        Binary(b"\x01"),
        {"1"},
        {Decimal(1)},
        {"n": Decimal(1)},
        [Decimal(1)],
        True,
        "1",
        Decimal("-0"),
        Decimal("1E-130"),
        Decimal("9" * 38),
        Decimal("1E+125"),
    ],
    ids=lambda c: f"{type(c).__name__}-{repr(c)[:20]}",
)
def test_a_request_count_of_any_type_never_fails_the_event(store, processor, feed, count):
    make_event(store, "gig", 2)
    processor.process([feed.signup("gig", "a")])
    result = processor.process(
        [
            modify_with(feed, "gig", "a", request="cancel", request_count=count),
            feed.signup("gig", "b"),
        ]
    )
    assert result.failures == [] and result.parked_events == []
    assert status(store, "gig", "b") == Status.ACCEPTED
    assert clean(store) == []


# -- retention deletes an item the lineup still names ------------------------------------


def _ttl_delete(store: SignupStore, event_id: str, signup_id: str) -> None:
    """What DynamoDB's TTL does to a decision item past ``expires_at``."""
    store.dynamo.call(
        "delete_item", TableName=store.main_table, Key=signup_key(event_id, signup_id)
    )


def test_a_signup_in_the_lineup_never_expires_and_its_retention_counts_from_its_last_move(
    aws, feed, clock
):
    """Decision retention must never let TTL delete the item of a signup the event's lineup
    still names (WAITLISTED or HELD longer than the retention): such items carry no
    ``expires_at``; a move out of the lineup sets it, counted from that move."""
    store = SignupStore(aws.client("dynamodb"), sleep=lambda _: None)
    processor = StreamProcessor(store, clock=clock, decision_retention_days=1)
    make_event(store, "gig", 1, waitlist=2)
    processor.process([feed.signup("gig", "a"), feed.signup("gig", "w")])
    assert statuses(store, "gig", "a", "w") == [Status.ACCEPTED, Status.WAITLISTED]
    a_expires = store.get_decision("gig", "a")[Attr.EXPIRES_AT]
    assert a_expires is not None
    assert Attr.EXPIRES_AT not in store.get_decision("gig", "w")
    clock.advance(3 * 86_400)
    processor.process([feed.request("gig", "a", "cancel")])
    w = store.get_decision("gig", "w")
    assert w[Attr.STATUS] == Status.ACCEPTED
    # retention from the promotion (three days after a's first decision)
    assert w[Attr.EXPIRES_AT] == a_expires + 3 * 86_400
    assert store.get_decision("gig", "a")[Attr.EXPIRES_AT] == a_expires + 3 * 86_400


def test_a_promotion_of_a_signup_whose_decision_expired_keeps_a_true_history(aws, feed, clock):
    store = SignupStore(aws.client("dynamodb"), sleep=lambda _: None)
    processor = StreamProcessor(store, clock=clock, decision_retention_days=1)
    make_event(store, "gig", 1, waitlist=2)
    processor.process([feed.signup("gig", "a"), feed.signup("gig", "w")])
    clock.advance(3 * 86_400)
    _ttl_delete(store, "gig", "w")
    result = processor.process([feed.request("gig", "a", "cancel")])
    assert (result.failures, result.parked_events) == ([], [])
    assert status(store, "gig", "a") == Status.CANCELLED
    item = store.get_decision("gig", "w")
    assert item is None or history_of(item)[0][HistoryKey.TO] == Status.WAITLISTED
    assert clean(store) == []


# -- two processors on one event -----------------------------------------------------------


class PausingStore(SignupStore):
    """A store whose next materialization runs ``between`` first: another processor's whole
    batch lands between this one's commit and its items."""

    between: Any = None

    def materialize(self, event_id, journal, requests=None):  # type: ignore[override]
        hook, self.between = self.between, None
        if hook is not None:
            hook()
        super().materialize(event_id, journal, requests)


def snapshot_items(store: SignupStore, event_id: str) -> dict[str, dict[str, Any]]:
    return {i[Attr.SIGNUP_ID]: i for i in store.decision_items(event_id)}


def test_a_processor_slow_to_write_its_items_undoes_nothing_the_next_one_did(aws, feed, clock):
    slow_store = PausingStore(aws.client("dynamodb"), sleep=lambda _: None)
    fast_store = SignupStore(aws.client("dynamodb"), sleep=lambda _: None)
    make_event(fast_store, "gig", 2, waitlist=3, hold_seconds=30)
    slow, fast = StreamProcessor(slow_store, clock=clock), StreamProcessor(fast_store, clock=clock)
    fast.process([feed.signup("gig", s) for s in ("a", "b", "w1", "w2")])
    cancel_a = feed.request("gig", "a", "cancel")
    confirm_w1 = feed.request("gig", "w1", "confirm")
    cancel_b = feed.request("gig", "b", "cancel")
    confirm_w2 = feed.request("gig", "w2", "confirm")

    def other_processor() -> None:
        # the same records redelivered to another processor, and the next ones
        fast.process([cancel_a, confirm_w1, cancel_b])
        clock.advance(1)
        fast.process([confirm_w2])

    slow_store.between = other_processor
    slow.process([cancel_a])
    assert statuses(fast_store, "gig", "a", "b", "w1", "w2") == [
        Status.CANCELLED,
        Status.CANCELLED,
        Status.ACCEPTED,
        Status.ACCEPTED,
    ]
    before = snapshot_items(fast_store, "gig")
    slow.process([cancel_a, confirm_w1])  # the slow one goes on with its batch
    assert snapshot_items(fast_store, "gig") == before
    assert event_state(fast_store, "gig") == (2, 4)
    assert clean(fast_store) == []


def test_a_crash_after_a_commit_of_moves_then_a_replay_of_the_whole_stream(aws, feed, clock):
    from tests.integration.test_lifecycle_processor import CrashAfterCommit

    store = CrashAfterCommit(aws.client("dynamodb"), sleep=lambda _: None)
    make_event(store, "gig", 2, waitlist=3, hold_seconds=10)
    stream: list[StreamRecord] = [feed.signup("gig", s) for s in ("a", "b", "w1", "w2", "w3")]
    StreamProcessor(store, clock=clock).process(stream)
    more = [
        feed.request("gig", "a", "confirm"),
        feed.request("gig", "b", "cancel"),
        feed.request("gig", "a", "cancel"),
    ]
    stream += more
    store.crash = True
    clock.advance(1)
    StreamProcessor(store, clock=clock).process(more)  # committed, items not written
    clock.advance(4)
    stream.append(feed.request("gig", "w1", "confirm"))
    fresh = StreamProcessor(store, clock=clock)
    fresh.release("gig")
    fresh.process(stream[-1:])
    after = snapshot_items(store, "gig")
    state = store.get_event("gig")
    # the whole stream again, from its start, to a cold processor, later on
    clock.advance(2)
    StreamProcessor(store, clock=clock).process(stream)
    assert snapshot_items(store, "gig") == after
    again = store.get_event("gig")
    assert (again.event.taken, again.event.accepted) == (
        state.event.taken,
        state.event.accepted,
    )
    assert clean(store) == []


# -- a confirm at the very millisecond the hold is due ---------------------------------------


def _intake(store: SignupStore, event_id: str, signup_id: str) -> None:
    store.put_intake(event_id, signup_id, 1, None, T0)


def test_a_confirm_at_hold_expires_at_is_refused_by_the_api_and_by_the_processor(
    store, processor, feed, clock
):
    from turnstile.base.errors import RequestRefusedError

    make_event(store, "gig", 1, hold_seconds=60)
    _intake(store, "gig", "a")
    processor.process([feed.signup("gig", "a")])
    expires = store.get_decision("gig", "a")[Attr.HOLD_EXPIRES_AT]
    assert expires == iso_of_ms(clock.ms + 60_000)
    # the API: exactly at the expiry, nothing is recorded
    with pytest.raises(RequestRefusedError):
        store.request_transition("gig", "a", "confirm", expires)
    # a microsecond before, it is recorded ...
    before = iso_of_ms(clock.ms + 59_999)[:-2] + "9Z"
    store.request_transition("gig", "a", "confirm", before)
    # ... and the processor, reaching it exactly at the expiry, refuses it hold_expired
    clock.advance(60)
    assert clock() == expires
    processor.process([feed.request("gig", "a", "confirm")])
    item = store.get_decision("gig", "a")
    assert item[Attr.STATUS] == Status.EXPIRED
    assert item[Attr.LAST_REFUSAL]["reason"] == Reason.HOLD_EXPIRED
    assert event_state(store, "gig") == (0, 1)
    # one millisecond earlier the same confirm is applied
    make_event(store, "gig2", 1, hold_seconds=60)
    processor.process([feed.signup("gig2", "a")])
    clock.advance(59.999)
    processor.process([feed.request("gig2", "a", "confirm")])
    assert status(store, "gig2", "a") == Status.ACCEPTED


# -- a close while signups wait and holds are out ------------------------------------------


def test_a_close_with_holds_out_and_a_waitlist(store, processor, feed, clock):
    make_event(store, "gig", 2, waitlist=3, hold_seconds=30)
    processor.process([feed.signup("gig", s) for s in ("a", "b", "w1", "w2")])
    store.close_event("gig")
    clock.advance(1)
    # the next record: the line is rejected event_closed in order, holds stay
    processor.process([feed.request("gig", "a", "confirm"), feed.signup("gig", "late")])
    assert statuses(store, "gig", "a", "b", "w1", "w2", "late") == [
        Status.ACCEPTED,
        Status.HELD,
        Status.REJECTED,
        Status.REJECTED,
        Status.REJECTED,
    ]
    assert [store.get_decision("gig", s)[Attr.REASON] for s in ("w1", "w2", "late")] == [
        Reason.EVENT_CLOSED
    ] * 3
    # seats that come back after the close go to nobody
    processor.process([feed.request("gig", "b", "cancel"), feed.request("gig", "w1", "cancel")])
    assert statuses(store, "gig", "b", "w1") == [Status.CANCELLED, Status.REJECTED]
    assert store.get_decision("gig", "w1")[Attr.LAST_REFUSAL]["reason"] == (
        Reason.TRANSITION_NOT_ALLOWED
    )
    event = store.get_event("gig")
    assert (event.event.taken, event.event.holds, event.event.waiting) == (1, (), ())
    assert Attr.LINEUP not in store.dynamo.get(store.control_table, event_key("gig"))
    assert event.status_counts == {
        Status.ACCEPTED: 1,
        Status.CANCELLED: 1,
        Status.REJECTED: 3,
    }
    assert clean(store) == []


def test_a_close_that_lands_between_read_and_commit_rejects_the_line(aws, feed, clock):
    store = PausingStore(aws.client("dynamodb"), sleep=lambda _: None)
    make_event(store, "gig", 1, waitlist=2, hold_seconds=30)
    p = StreamProcessor(store, clock=clock)
    p.process([feed.signup("gig", "a"), feed.signup("gig", "w")])
    closing = [True]
    real_commit = store.commit

    def commit(*args, **kwargs):  # the organizer's close lands before this commit
        if closing:
            closing.clear()
            with as_user():  # the organizer, not the processor
                store.close_event("gig")
        return real_commit(*args, **kwargs)

    store.commit = commit  # type: ignore[method-assign]
    p.process([feed.request("gig", "a", "cancel")])
    # decided again from the CLOSED state: w is rejected, not promoted
    assert statuses(store, "gig", "a", "w") == [Status.CANCELLED, Status.REJECTED]
    assert event_state(store, "gig") == (0, 1)
    assert clean(store) == []


# -- capacity changed under holds ---------------------------------------------------------


def test_a_capacity_lowered_to_the_seats_held_then_raised(store, processor, feed, clock):
    from turnstile.base.errors import CapacityBelowTakenError

    make_event(store, "gig", 4, waitlist=3, hold_seconds=10)
    processor.process([feed.signup("gig", "a", 2), feed.signup("gig", "b", 1)])
    processor.process([feed.signup("gig", "w3", 3), feed.signup("gig", "w1", 1)])
    assert statuses(store, "gig", "a", "b", "w3", "w1") == [
        Status.HELD,
        Status.HELD,
        Status.WAITLISTED,
        Status.HELD,
    ]
    with pytest.raises(CapacityBelowTakenError):
        store.update_capacity("gig", 3)
    store.update_capacity("gig", 4)
    # the holds lapse: w3 (3 seats) is promoted, within the capacity
    clock.advance(10)
    processor.process([feed.signup("gig", "tick")])
    assert status(store, "gig", "w3") == Status.HELD
    taken, _ = event_state(store, "gig")
    assert taken <= 4
    assert clean(store) == []


# -- a parked event's records carry their requests -----------------------------------------


class FailingCommits(SignupStore):
    failing = False

    def commit(self, *args, **kwargs):  # type: ignore[override]
        if self.failing:
            raise RuntimeError("the commit keeps failing")
        return super().commit(*args, **kwargs)


def test_parked_requests_are_applied_in_arrival_order_when_released(aws, feed, clock):
    store = FailingCommits(aws.client("dynamodb"), sleep=lambda _: None)
    make_event(store, "gig", 1, waitlist=2, hold_seconds=30)
    p = StreamProcessor(store, clock=clock)
    p.process([feed.signup("gig", "a"), feed.signup("gig", "w1"), feed.signup("gig", "w2")])
    store.failing = True
    first = p.process([feed.request("gig", "a", "cancel"), feed.request("gig", "w1", "confirm")])
    assert first.parked_events and first.parked == 2
    second = p.process(
        [
            feed.request("gig", "w1", "confirm"),
            modify_with(feed, "gig", "w2", request="cancel", request_count=Decimal(10**30)),
            feed.signup("gig", "late"),
        ]
    )
    assert second.parked == 3
    store.failing = False
    assert p.release("gig")
    # in arrival order: a's cancel promoted w1, w1's first confirm was applied (its second
    # refused), w2 cancelled with a 31-digit count, late took w2's place in line
    assert statuses(store, "gig", "a", "w1", "w2", "late") == [
        Status.CANCELLED,
        Status.ACCEPTED,
        Status.CANCELLED,
        Status.WAITLISTED,
    ]
    assert store.get_decision("gig", "w1")[Attr.REQUEST_COUNT] == 2
    assert store.get_decision("gig", "w2")[Attr.REQUEST_COUNT] == 10**30
    assert clean(store) == []


# -- the audit between a commit of moves and its items -------------------------------------


def test_the_audit_of_a_journal_of_moves_not_written_yet(aws, feed, clock):
    from tests.integration.test_lifecycle_processor import CrashAfterCommit

    store = CrashAfterCommit(aws.client("dynamodb"), sleep=lambda _: None)
    make_event(store, "gig", 2, waitlist=2, hold_seconds=10)
    StreamProcessor(store, clock=clock).process(
        [feed.signup("gig", s) for s in ("a", "b", "w1", "w2")]
    )
    store.crash = True
    # a refusal only (no status moves), a cancel that promotes, an expiry
    StreamProcessor(store, clock=clock).process(
        [
            feed.request("gig", "w2", "confirm"),
            feed.request("gig", "a", "cancel"),
        ]
    )
    report = audit(store, pending_grace_s=10**9)
    [event] = report.events
    assert event.violations == [], event.violations
    assert event.unmaterialized == 2  # a and w1 moved; w2's refusal moves nothing
    # written out, the audit is clean and counts them
    fresh = StreamProcessor(store, clock=clock)
    fresh.release("gig")
    clock.advance(11)
    fresh.process([feed.signup("gig", "tick")])
    assert clean(store) == []


def test_a_commit_of_a_first_decision_and_a_move_written_out_is_clean(store, processor, feed):
    """One commit holds a first decision (``journal.decisions``) and a move of an earlier
    signup (``journal.updates``), both written out. The audit once set the first decision's
    item aside with the moves not yet written, then found it missing: an 'unmaterialized
    journal' past the grace on a settled event (found by the lifecycle state machine)."""
    make_event(store, "gig", 1, hold_seconds=30)
    processor.process([feed.signup("gig", "a")])
    processor.process([feed.request("gig", "a", "cancel"), feed.signup("gig", "b")])
    journal = store.get_event("gig").journal
    assert [d.signup_id for d in journal.decisions] == ["b"]
    assert [u.signup_id for u in journal.updates] == ["a"]
    # five seconds on, past a grace of none, before b's hold is due
    report = audit(store, pending_grace_s=0, now=datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC))
    [event] = report.events
    assert (event.unmaterialized, event.violations) == (0, [])
    assert event.status_counts == {Status.CANCELLED: 1, Status.HELD: 1}


def test_a_request_count_of_1e125_is_answered_and_the_sweeper_then_unmarks_it(
    store, processor, feed
):
    """1E+125 is a number DynamoDB stores (1 digit, magnitude 125): a request like any
    other (docs/lifecycle.md §10). Written out as 126 digits it is refused, so answering it
    once failed the event's every batch (and parking it too)."""
    from turnstile.jobs.sweeper import Sweeper

    make_event(store, "gig", 1, waitlist=1)
    for sid in ("a", "w"):
        _intake(store, "gig", sid)
    processor.process([feed.signup("gig", "a"), feed.signup("gig", "w")])
    huge = Decimal("1E+125")
    store.dynamo.call(
        "update_item",
        TableName=store.intake_table,
        Key=signup_key("gig", "a"),
        UpdateExpression="SET #r = :r, #n = :n",
        ExpressionAttributeNames={"#r": Attr.REQUEST, "#n": Attr.REQUEST_COUNT},
        ExpressionAttributeValues={":r": {"S": "cancel"}, ":n": {"N": "1E+125"}},
    )
    result = processor.process(
        [modify_with(feed, "gig", "a", request="cancel", request_count=huge)]
    )
    assert (result.failures, result.parked_events) == ([], [])
    assert statuses(store, "gig", "a", "w") == [Status.CANCELLED, Status.ACCEPTED]
    assert store.get_decision("gig", "a")[Attr.REQUEST_COUNT] == huge
    # the same record again is a tick; the sweeper finds it answered and unmarks it
    processor.process([modify_with(feed, "gig", "a", request="cancel", request_count=huge)])
    assert statuses(store, "gig", "a", "w") == [Status.CANCELLED, Status.ACCEPTED]
    swept = Sweeper(store, min_age_s=0, clock=lambda: 1_900_000_000.0).sweep("r1")
    assert swept.unanswered == 0
    assert Attr.UNDECIDED not in store.get_intake("gig", "a")


# -- a request on a signup of an event that does not exist ---------------------------------


def test_a_request_on_a_signup_of_an_unknown_event_is_answered(store, processor, feed):
    _intake(store, "nowhere", "a")
    processor.process([feed.signup("nowhere", "a")])
    assert store.get_decision("nowhere", "a")[Attr.REASON] == Reason.UNKNOWN_EVENT
    processor.process([feed.request("nowhere", "a", "cancel")])
    assert store.get_decision("nowhere", "a").get(Attr.REQUEST_COUNT) == 1


def test_options_written_by_hand_past_the_bounds_are_read_within_them(aws, feed, clock):
    """An organizer's item with a hold of 10**20 seconds and a waitlist of 10**9: deciding
    must not fail (a hold that long overflows any clock); they are read as a day's hold
    and the longest lineup."""
    store = SignupStore(aws.client("dynamodb"), sleep=lambda _: None)
    make_event(store, "gig", 1, hold_seconds=10**20, waitlist=10**9)
    result = StreamProcessor(store, clock=clock).process(
        [feed.signup("gig", "a"), feed.signup("gig", "b")]
    )
    assert (result.failures, result.parked_events) == ([], [])
    a = store.get_decision("gig", "a")
    assert a[Attr.STATUS] == Status.HELD
    assert a[Attr.HOLD_EXPIRES_AT] == iso_of_ms(clock.ms + 86_400_000)
    assert status(store, "gig", "b") == Status.WAITLISTED


def test_an_unreadable_lineup_parks_its_event_and_stops_no_other_reader(
    store, processor, feed, clock
):
    """A lineup that cannot be read (written by hand, or by a newer format) must not be
    decided from (its holds and waitlist would be lost: an oversell), and must not stop
    the organizer, the other events or the audit either."""
    from turnstile.service import usecases

    make_event(store, "gig", 2, waitlist=1, hold_seconds=60)
    make_event(store, "good", 2)
    processor.process([feed.signup("gig", "a")])
    assert status(store, "gig", "a") == Status.HELD
    store.dynamo.call(
        "update_item",
        TableName=store.control_table,
        Key=event_key("gig"),
        UpdateExpression="SET #l = :junk",
        ExpressionAttributeNames={"#l": Attr.LINEUP},
        ExpressionAttributeValues={":junk": {"B": b"junk"}},
    )
    # the processor refuses to decide from it: the event is parked, the other decided
    result = processor.process([feed.signup("gig", "b"), feed.signup("good", "c")])
    assert [event for event, _ in result.parked_events] == ["gig"]
    assert statuses(store, "gig", "b") + statuses(store, "good", "c") == [None, Status.ACCEPTED]
    # readers go on: the event shows (without its lineup), closes, and the audit runs
    record = store.get_event("gig")
    assert record.lineup_error is not None and "lineup unreadable" in record.lineup_error
    assert usecases.show_event(store, "gig")["taken"] == 1
    usecases.close_event(store, "gig")
    assert {e.event_id for e in audit(store).events} >= {"gig", "good"}

"""Holds lapse in steps of a bounded size (``StreamProcessor.max_lapses``): when more are
due than one step may lapse, the processor commits steps of lapses alone, earliest first,
until none is due, and only then decides the chunk's records, so a confirm still finds its
hold lapsed and a signup finds the seats the lapses freed. A commit whose lapses do not fit
a journal lapses half as many."""

from __future__ import annotations

import pytest

from tests.integration.test_lifecycle_processor import Clock, Feed, make_event, statuses
from turnstile.base.contract import Attr, Reason, Status
from turnstile.jobs.processor import StreamProcessor, StreamRecord


def held(store, processor, feed, event_id: str, count: int) -> list[str]:
    ids = [f"s{i:03d}" for i in range(count)]
    for start in range(0, count, 100):
        processor.process([feed.signup(event_id, s) for s in ids[start : start + 100]])
    assert set(statuses(store, event_id, *ids)) == {Status.HELD}
    return ids


def test_many_due_holds_lapse_in_bounded_steps_before_anything_else(store):
    clock, feed = Clock(), Feed()
    make_event(store, "many", 300, hold_seconds=60)
    ids = held(store, StreamProcessor(store, clock=clock), feed, "many", 300)
    clock.advance(61)
    processor = StreamProcessor(store, clock=clock, max_lapses=40)
    # the last hold to lapse is confirmed, and a new signup comes: both after every lapse
    result = processor.process(
        [feed.request("many", ids[-1], "confirm"), feed.signup("many", "late")]
    )
    assert result.failures == [] and result.parked_events == []
    assert set(statuses(store, "many", *ids)) == {Status.EXPIRED}
    refusal = store.get_decision("many", ids[-1])[Attr.LAST_REFUSAL]
    assert refusal["reason"] == Reason.HOLD_EXPIRED
    assert statuses(store, "many", "late") == [Status.HELD]
    event = store.get_event("many").event
    assert (event.taken, len(event.holds)) == (1, 1)
    # in steps of 40 lapses at most: 8 commits of lapses, then the records' own
    assert event.version >= 3 + 300 // 40 + 1


def test_lapses_that_do_not_fit_a_journal_lapse_half_as_many(store, monkeypatch):
    clock, feed = Clock(), Feed()
    make_event(store, "big", 200, hold_seconds=60)
    held(store, StreamProcessor(store, clock=clock), feed, "big", 200)
    clock.advance(61)
    # a journal of about 20 lapses at most
    monkeypatch.setattr("turnstile.storage.store.MAX_JOURNAL_BYTES", 800)
    result = StreamProcessor(store, clock=clock).process([feed.signup("big", "late")])
    assert result.failures == [] and result.parked_events == []
    event = store.get_event("big").event
    assert (event.taken, [h.signup_id for h in event.holds]) == (1, ["late"])


@pytest.mark.parametrize("limit", [1, 7])
def test_a_wake_up_lapses_every_due_hold_whatever_the_bound(store, limit):
    clock, feed = Clock(), Feed()
    make_event(store, "woken", 30, hold_seconds=60)
    ids = held(store, StreamProcessor(store, clock=clock), feed, "woken", 30)
    clock.advance(61)
    processor = StreamProcessor(store, clock=clock, max_lapses=limit)
    wake = StreamRecord("999999", "MODIFY", {"pk": "WAKE#woken", "sk": "WAKE"})
    assert processor.process([wake]).failures == []
    assert set(statuses(store, "woken", *ids)) == {Status.EXPIRED}
    assert store.get_event("woken").event.taken == 0


def test_a_closed_events_long_waitlist_is_rejected_in_bounded_steps(store):
    clock, feed = Clock(), Feed()
    make_event(store, "shut", 1, waitlist=200)
    processor = StreamProcessor(store, clock=clock, max_lapses=30)
    waiters = [f"w{i:03d}" for i in range(200)]
    processor.process([feed.signup("shut", "seated")])
    for start in range(0, 200, 100):
        processor.process([feed.signup("shut", w) for w in waiters[start : start + 100]])
    assert set(statuses(store, "shut", *waiters)) == {Status.WAITLISTED}
    store.close_event("shut")
    result = processor.process([feed.signup("shut", "late")])
    assert result.failures == [] and result.parked_events == []
    assert set(statuses(store, "shut", *waiters)) == {Status.REJECTED}
    late = store.get_decision("shut", "late")
    assert (late[Attr.STATUS], late[Attr.REASON]) == (Status.REJECTED, Reason.EVENT_CLOSED)
    assert store.get_event("shut").event.waiting == ()


def test_a_long_waitlist_is_promoted_in_bounded_steps_when_the_holds_lapse(store, monkeypatch):
    clock, feed = Clock(), Feed()
    make_event(store, "line", 100, hold_seconds=60, waitlist=100)
    processor = StreamProcessor(store, clock=clock, max_lapses=15)
    holders = held(store, processor, feed, "line", 100)
    waiters = [f"w{i:03d}" for i in range(100)]
    processor.process([feed.signup("line", w) for w in waiters])
    assert set(statuses(store, "line", *waiters)) == {Status.WAITLISTED}
    clock.advance(61)
    # a journal of a few dozen moves at most: 100 promotions in one step would not fit
    monkeypatch.setattr("turnstile.storage.store.MAX_JOURNAL_BYTES", 700)
    result = processor.process([feed.signup("line", "late")])
    assert result.failures == [] and result.parked_events == []
    # every hold lapsed, every waiter promoted in waitlist order, then the late one waits
    assert set(statuses(store, "line", *holders)) == {Status.EXPIRED}
    promoted = [store.get_decision("line", w) for w in waiters]
    assert {p[Attr.STATUS] for p in promoted} == {Status.HELD}
    positions = [int(p[Attr.POSITION]) for p in promoted]
    assert positions == sorted(positions) == list(range(101, 201))
    assert statuses(store, "line", "late") == [Status.WAITLISTED]

"""Attacks on sharded events (escrow, commits a79e9e5 and 8760200): a reviewer's tests, on moto.

FOUND AND FIXED (each test failed before its fix):

* a shard's waitlist waitlisted signups while the pool had seats, never saw seats raised or
  given back elsewhere, and the audit passed it: a sharded event had no waitlist until its
  shards' lines were built across shards
  (``test_found_a_shards_waitlist_waited_while_its_pool_had_seats``);
* ``SignupStore.update_capacity`` of a shard key rewrote a shard's quota (oversold), and
  ``close_event`` of one failed with a bare ValueError: both refuse shard keys now
  (``test_found_the_stores_update_capacity_takes_a_shard_key_and_oversells``).

* a short shard counted another shard's lapsed holds as taken until that shard took a
  step: it refused ``capacity_full`` while a seat was free; now it steps those shards
  first (``test_found_a_shard_refused_capacity_full_while_another_shard_held_only_lapsed_holds``,
  and ``test_found_a_full_mark_made_while_holds_were_live_hid_them_once_they_lapsed``).

* a signup for more seats than the whole event made its shard secure every seat before it
  was refused (seats moved for nothing; a producer could repeat it in every shard): the
  seats of a signup larger than the event's capacity are left out of what a shard secures
  (``test_found_a_signup_that_can_never_fit_pulled_every_seat_into_its_shard``).

HELD (attacks tried that the code withstands; they pass and document what holds): every
``test_held_*`` below: hostile shard keys (``solo#00`` of an unsharded event, ``gig#31``
of a 4-shard one, a 2,048-byte id with ``#00``, full-width and Arabic-Indic digits, a
trailing newline or space, ``gig#1``); the pool's own key getting signups, requests,
removals and wake-ups; two processors on one shard interleaved around ``secure``; a crash
between a draw and the commit; a crash after a taking commit before its items are
written; a batch with takes delivered twice; a shard's intake item removed and put again
(the REMOVE seen or lost); close racing a take; capacity changes between ``secure``'s read
and its draw; lowering below ``dealt``; multi-seat signups around the last seats and
``max_seats``; a parked shard released by the due-holds job's wake-up; a hold lapsing on a
shard's tick (and by the due-holds job) becoming slack another shard takes; the audit
catching a seat in two places and a refusal while the pool had seats; a request under
another shard's key.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from tests.helpers import ids_in
from tests.roles import as_user
from turnstile.base.clock import iso_of_ms, ms_of
from turnstile.base.contract import (
    WAKE_SOURCE,
    Attr,
    ControlKey,
    Reason,
    Status,
    shard_key,
    shard_of,
)
from turnstile.base.errors import (
    CapacityBelowTakenError,
    EventNotFoundError,
    InvalidRequestError,
)
from turnstile.jobs.due_holds import release_due_holds
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.dynamo import event_key
from turnstile.storage.escrow import Escrow, Secured
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.poller import matches_filter

T0 = "2026-01-01T00:00:00.000000Z"
INTAKE_GONE = Decimal(1)


class Clock:
    def __init__(self) -> None:
        self.ms = ms_of(T0)

    def __call__(self) -> str:
        return iso_of_ms(self.ms)

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


class Feed:
    """Intake records as the stream delivers them: sequence numbers go up."""

    def __init__(self) -> None:
        self.seq = 1000
        self.requests: dict[tuple[str, str], int] = {}

    def _next(self) -> str:
        self.seq += 1
        return str(self.seq)

    def signup(self, key: str, signup_id: str, seats: int = 1) -> StreamRecord:
        keys = {"event_id": key, "signup_id": signup_id}
        image = {
            **keys,
            "seats": Decimal(seats),
            "submitted_at": "2026-01-01T00:00:00Z",
            "expires_at": INTAKE_GONE,
        }
        return StreamRecord(self._next(), "INSERT", keys, image)

    def request(self, key: str, signup_id: str, kind: str, seats: int = 1) -> StreamRecord:
        k = (key, signup_id)
        self.requests[k] = self.requests.get(k, 0) + 1
        keys = {"event_id": key, "signup_id": signup_id}
        image = {
            **keys,
            "seats": Decimal(seats),
            "request": kind,
            "request_count": Decimal(self.requests[k]),
            "undecided": "0",
            "expires_at": INTAKE_GONE,
        }
        return StreamRecord(self._next(), "MODIFY", keys, image)

    def remove(self, key: str, signup_id: str) -> StreamRecord:
        return StreamRecord(self._next(), "REMOVE", {"event_id": key, "signup_id": signup_id})

    def wake(self, key: str) -> StreamRecord:
        pk, sk = ControlKey.wake(key)
        return StreamRecord(self._next(), "MODIFY", {"pk": pk, "sk": sk})


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def feed() -> Feed:
    return Feed()


def status(store: SignupStore, key: str, signup_id: str) -> str | None:
    item = store.get_decision(key, signup_id)
    return item[Attr.STATUS] if item else None


def reason(store: SignupStore, key: str, signup_id: str) -> str | None:
    item = store.get_decision(key, signup_id)
    return item.get(Attr.REASON) if item else None


def escrow(store: SignupStore, event_id: str, shards: int) -> tuple[int, int, list, int]:
    """(capacity, dealt, [(quota, taken)] per shard, seats given in all)."""
    pool, shares = Escrow(store).snapshot(event_id, shards)
    assert pool is not None
    return (
        pool.capacity,
        pool.dealt,
        [(s.quota, s.taken) for s in shares],
        sum(s.taken for s in shares),
    )


def seated_rows(store: SignupStore, event_id: str, shards: int) -> int:
    """Seats of HELD and ACCEPTED decision items across every shard (and the pool's key)."""
    total = 0
    for key in [event_id] + [shard_key(event_id, k) for k in range(shards)]:
        for item in store.decision_items(key):
            if item.get(Attr.STATUS) in (Status.HELD, Status.ACCEPTED):
                total += int(item.get(Attr.SEATS, 1))
    return total


def assert_never_oversold(store: SignupStore, event_id: str, shards: int) -> None:
    capacity, dealt, shares, given = escrow(store, event_id, shards)
    assert sum(q for q, _ in shares) == dealt <= capacity, (capacity, dealt, shares)
    assert all(t <= q for q, t in shares), shares
    assert given <= capacity
    assert seated_rows(store, event_id, shards) <= capacity


def deliver_wakes(proc: StreamProcessor, wakes: Any, feed: Feed) -> None:
    """Every wake-up written to the control table since the last call, to ``proc``."""
    records = []
    for r in wakes.read_new():
        if not any(matches_filter(p, r) for p in WAKE_SOURCE.filter_patterns):
            continue
        keys = {k: v["S"] for k, v in r["dynamodb"]["Keys"].items()}
        records.append(StreamRecord(feed._next(), r["eventName"], keys))
    if records:
        ok(proc.process(records))


def ok(result: Any) -> Any:
    assert not result.failures and not result.parked_events, result
    return result


# =====================================================================================
# FINDINGS
# =====================================================================================


def test_found_a_shard_refused_capacity_full_while_another_shard_held_only_lapsed_holds(
    store, feed, clock
):
    """A hold lapsed in one shard is not a seat another shard can get.

    An unsharded event's step lapses every hold past its expiry before it decides, so a
    signup arriving after a hold's expiry gets its seat. A sharded event's short shard
    plans its takes from the other shards' ``quota - taken``, where a lapsed hold still
    counts as taken until *its* shard takes a step (a wake-up from the due-holds job, some
    time later): the signup is refused ``capacity_full`` while every seat of the event is
    free. The same event unsharded accepts it (checked below)."""
    for event_id, shards in (("flat", 1), ("gig", 2)):
        store.create_event(event_id, 2, T0, shards=shards, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    holders = ids_in(0, 2, 2, "h")
    late = ids_in(1, 2, 1, "late")[0]
    for sid in holders:
        ok(proc.process([feed.signup("flat", sid)]))
        ok(proc.process([feed.signup(shard_key("gig", 0), sid)]))
    assert {status(store, shard_key("gig", 0), s) for s in holders} == {Status.HELD}
    clock.advance(120)  # both holds lapsed a minute ago
    ok(proc.process([feed.signup("flat", late)]))
    assert status(store, "flat", late) == Status.HELD  # unsharded: the seat is given
    ok(proc.process([feed.signup(shard_key("gig", 1), late)]))
    assert status(store, shard_key("gig", 1), late) == Status.HELD, reason(
        store, shard_key("gig", 1), late
    )


def _secure_nothing(store: SignupStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``secure`` finds nothing to draw or take (a shard that believes no seat is
    left): the state an undersold shard leaves, made whatever the processor's logic."""

    def nothing(event_id: str, shards: int, shard: int, need: int, *_: Any) -> Secured:
        return Secured(Escrow(store).share(event_id, shard))

    monkeypatch.setattr(store, "secure", nothing)


def test_found_a_shards_waitlist_waited_while_its_pool_had_seats(store, feed, clock):
    """Found: a shard's waitlist secured no seats (it waitlisted while the pool had them),
    never got seats raised or given back in another shard, and the audit missed it. For a
    while a sharded event had no waitlist; now a shard secures seats for whoever would wait
    before anyone waits (the rest: tests/integration/test_sharded_waitlist.py)."""
    store.create_event("gig", 40, T0, shards=2, waitlist=5)
    proc = StreamProcessor(store, clock=clock)
    crowd = ids_in(0, 2, 30, "crowd")
    ok(proc.process([feed.signup(shard_key("gig", 0), sid) for sid in crowd]))
    assert {status(store, shard_key("gig", 0), sid) for sid in crowd} == {Status.ACCEPTED}
    assert audit(store, "gig").ok


def test_found_a_full_mark_made_while_holds_were_live_hid_them_once_they_lapsed(store, feed, clock):
    """A refusal while another shard's holds are live is right; but marking the pool full
    then would hide those seats once the holds lapse (a lapse is no commit until the
    holding shard steps), and the next short shard would refuse from the mark alone."""
    store.create_event("gig", 2, T0, shards=2, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    for sid in ids_in(0, 2, 2, "h"):
        ok(proc.process([feed.signup(shard_key("gig", 0), sid)]))
    early, late = ids_in(1, 2, 2, "x")
    ok(proc.process([feed.signup(shard_key("gig", 1), early)]))
    assert reason(store, shard_key("gig", 1), early) == Reason.CAPACITY_FULL  # holds live
    clock.advance(120)  # both holds lapsed; shard 0 has not stepped since
    ok(proc.process([feed.signup(shard_key("gig", 1), late)]))
    assert status(store, shard_key("gig", 1), late) == Status.HELD
    assert_never_oversold(store, "gig", 2)


def test_found_the_stores_update_capacity_takes_a_shard_key_and_oversells(store, feed, clock):
    """``SignupStore.update_capacity`` sets any event item's capacity, a shard's included:
    a shard's capacity is its *quota*, the escrow's, and raising it by hand puts seats in
    two places (50 on a 4-seat event: oversold). The API and the CLI refuse a ``#`` in an
    event id (``usecases._id``), but the store, which every tool and library caller uses,
    does not (``close_event`` of a shard key fails with a bare ValueError, after reading)."""
    store.create_event("gig", 4, T0, shards=2)
    with pytest.raises((InvalidRequestError, EventNotFoundError, ValueError)):
        store.update_capacity(shard_key("gig", 0), 50)
    proc = StreamProcessor(store, clock=clock)
    ok(proc.process([feed.signup(shard_key("gig", 0), s) for s in ids_in(0, 2, 10, "z")]))
    assert_never_oversold(store, "gig", 2)


def test_found_a_signup_that_can_never_fit_pulled_every_seat_into_its_shard(store, feed, clock):
    """One record for more seats than the whole event has drains the pool into its shard.

    ``_short`` counts every seat refused ``capacity_full``, so a signup of 17 seats on a
    16-seat event makes its shard draw every undealt seat (and, once the pool is empty,
    plan to take every other shard's slack), only to refuse it anyway. Nothing is oversold,
    but one hostile record (seats up to 1,000,000 pass intake) moves the whole escrow: every
    other shard's next signup must take its seats back, one transaction each that also
    makes the hoarding shard's own commits conflict (its quota moved), and a producer can
    repeat it in every shard. A signup whose seats exceed the event's capacity (or
    ``max_seats``) can never fit: it should be refused without securing anything."""
    store.create_event("gig", 16, T0, shards=4)
    proc = StreamProcessor(store, clock=clock)
    for k in range(4):
        ok(proc.process([feed.signup(shard_key("gig", k), ids_in(k, 4, 1, "a")[0])]))
    before = escrow(store, "gig", 4)
    assert before[1:] == (4, [(1, 1)] * 4, 4)
    huge = ids_in(0, 4, 1, "huge")[0]
    ok(proc.process([feed.signup(shard_key("gig", 0), huge, 17)]))
    assert reason(store, shard_key("gig", 0), huge) == Reason.CAPACITY_FULL
    assert escrow(store, "gig", 4) == before, "a hopeless signup moved seats"


# =====================================================================================
# HELD
# =====================================================================================

LONG_ID = "e" * 2044


@pytest.mark.parametrize(
    "key",
    [
        "solo#00",  # a shard key of an event that is not sharded
        "gig#31",  # a shard the 4-shard event does not have
        f"{LONG_ID}#00",  # 2,048 bytes in all: no id, and any prefix would pass the limit
        "gig#\uff10\uff11",  # full-width digits
        "gig#01\n",  # a trailing newline
        "gig#1",
        "gig#\u0660\u0661",  # Arabic-Indic digits
        "gig#00 ",
    ],
)
def test_held_hostile_shard_keys_are_rejected_and_move_no_seat(store, feed, clock, key):
    store.create_event("gig", 8, T0, shards=4)
    store.create_event("solo", 3, T0)
    proc = StreamProcessor(store, clock=clock)
    good = ids_in(2, 4, 1, "good")[0]
    result = proc.process([feed.signup(key, "x"), feed.signup(shard_key("gig", 2), good)])
    ok(result)
    item = store.get_decision(key, "x")
    assert item is not None and item[Attr.STATUS] == Status.REJECTED
    assert item[Attr.REASON] in (Reason.INVALID_REQUEST, Reason.UNKNOWN_EVENT)
    # the good record behind it is decided; nothing else moved
    assert status(store, shard_key("gig", 2), good) == Status.ACCEPTED
    assert escrow(store, "gig", 4)[3] == 1
    solo = store.get_event("solo")
    assert solo is not None and (solo.event.taken, solo.event.version) == (0, 0)
    assert audit(store, "gig").ok and audit(store, "solo").ok


def test_held_the_pools_own_key_gets_records_requests_removals_and_ticks(store, feed, clock):
    store.create_event("gig", 4, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    records = [
        feed.signup("gig", "p1"),
        feed.request("gig", "p1", "cancel"),
        feed.remove("gig", "p1"),
        feed.signup("gig", "p1"),
        feed.wake("gig"),
        feed.signup(shard_key("gig", shard_of("ok1", 2)), "ok1"),
    ]
    ok(proc.process(records))
    assert (status(store, "gig", "p1"), reason(store, "gig", "p1")) == (
        Status.REJECTED,
        Reason.INVALID_REQUEST,
    )
    assert status(store, shard_key("gig", shard_of("ok1", 2)), "ok1") == Status.ACCEPTED
    pool = store.get_event("gig")
    assert pool is not None and pool.event.version == 0 and pool.event.taken == 0
    assert audit(store, "gig").ok


def test_held_two_processors_on_one_shard_interleaved_around_secure_never_oversell(
    store, feed, clock, monkeypatch
):
    """P1 secures (draws, or plans takes), then P2 decides the same shard and others before
    P1 commits: P1's commit conflicts and it decides again; nothing oversold or lost."""
    store.create_event("gig", 6, T0, shards=3)
    p1 = StreamProcessor(store, clock=clock)
    p2 = StreamProcessor(store, clock=clock)
    p3 = StreamProcessor(store, clock=clock)
    key0 = shard_key("gig", 0)
    first = ids_in(0, 3, 5, "p1-")
    second = ids_in(0, 3, 5, "p2-")
    others = ids_in(1, 3, 3, "o-")
    real_secure = store.secure
    calls = {"n": 0}

    def interleaved(*args: Any) -> Any:
        secured = real_secure(*args)
        calls["n"] += 1
        if calls["n"] in (1, 3, 5):  # between P1's secure and its commit, thrice
            ok(p2.process([feed.signup(key0, second.pop(0))]))
            if others:
                ok(p3.process([feed.signup(shard_key("gig", 1), others.pop(0))]))
        return secured

    monkeypatch.setattr(store, "secure", interleaved)
    ok(p1.process([feed.signup(key0, sid) for sid in first]))
    monkeypatch.setattr(store, "secure", real_secure)
    assert calls["n"] >= 1
    for sid in second:
        ok(p2.process([feed.signup(key0, sid)]))
    for sid in others:
        ok(p3.process([feed.signup(shard_key("gig", 1), sid)]))
    assert_never_oversold(store, "gig", 3)
    assert escrow(store, "gig", 3)[3] == 6  # 13 signups for 6 seats: all given
    assert audit(store, "gig").ok


def test_held_a_crash_between_a_draw_and_the_commit_loses_no_seat(store, feed, clock, monkeypatch):
    store.create_event("gig", 4, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    key0 = shard_key("gig", 0)
    real_secure = store.secure

    def crash_after(*args: Any) -> Any:
        real_secure(*args)
        raise RuntimeError("killed between the draw and the commit")

    monkeypatch.setattr(store, "secure", crash_after)
    ids0 = ids_in(0, 2, 3, "a")
    result = proc.process([feed.signup(key0, s) for s in ids0])
    assert result.parked_events  # parked, not lost
    monkeypatch.setattr(store, "secure", real_secure)
    assert escrow(store, "gig", 2)[1] >= 1  # seats were drawn into shard 0
    # the parked shard is released by its wake-up; shard 1 takes whatever is left
    ok(proc.process([feed.wake(key0)]))
    ids1 = ids_in(1, 2, 3, "b")
    ok(proc.process([feed.signup(shard_key("gig", 1), s) for s in ids1]))
    got = Counter(status(store, key0, s) for s in ids0) + Counter(
        status(store, shard_key("gig", 1), s) for s in ids1
    )
    assert got == {Status.ACCEPTED: 4, Status.REJECTED: 2}
    assert_never_oversold(store, "gig", 2)
    assert store.get_parking(key0) is None
    assert audit(store, "gig").ok


def test_held_a_batch_with_takes_delivered_twice_decides_each_signup_once(store, feed, clock):
    store.create_event("gig", 8, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    ok(proc.process([feed.signup(shard_key("gig", 1), ids_in(1, 2, 1, "one")[0])]))
    batch = [feed.signup(shard_key("gig", 0), s) for s in ids_in(0, 2, 10, "z")]
    first = ok(proc.process(batch))
    before = escrow(store, "gig", 2)
    assert before[3] == 8 and before[2][1][0] == 1  # shard 0 took shard 1's slack
    again = ok(StreamProcessor(store, clock=clock).process(batch))  # a cold replay
    assert not again.decided
    assert escrow(store, "gig", 2) == before
    assert len(first.decided) == 10
    assert audit(store, "gig").ok


@pytest.mark.parametrize("removal_seen", [True, False])
def test_held_a_shards_intake_item_removed_and_put_again_is_decided_once(
    store, feed, clock, removal_seen
):
    store.create_event("gig", 3, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    key0 = shard_key("gig", 0)
    sid = ids_in(0, 2, 1, "again")[0]
    ok(proc.process([feed.signup(key0, sid)]))
    removal = feed.remove(key0, sid)
    if removal_seen:
        ok(proc.process([removal]))
    ok(StreamProcessor(store, clock=clock).process([feed.signup(key0, sid)]))
    item = store.get_decision(key0, sid)
    assert item is not None and item[Attr.STATUS] == Status.ACCEPTED
    shard = store.get_event(key0)
    assert shard is not None and shard.event.taken == 1
    assert_never_oversold(store, "gig", 2)
    assert audit(store, "gig").ok


def test_held_close_racing_a_take_rejects_event_closed(store, feed, clock, monkeypatch):
    store.create_event("gig", 16, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    ok(proc.process([feed.signup(shard_key("gig", 1), ids_in(1, 2, 1, "one")[0])]))
    ok(proc.process([feed.signup(shard_key("gig", 0), s) for s in ids_in(0, 2, 14, "a")]))
    assert escrow(store, "gig", 2)[2] == [(14, 14), (2, 1)]
    real_secure = store.secure

    def close_after_plan(*args: Any) -> Any:
        secured = real_secure(*args)
        if secured.takes:
            with as_user():
                store.close_event("gig")
        return secured

    monkeypatch.setattr(store, "secure", close_after_plan)
    late = ids_in(0, 2, 2, "late")
    ok(proc.process([feed.signup(shard_key("gig", 0), s) for s in late]))
    assert {reason(store, shard_key("gig", 0), s) for s in late} == {Reason.EVENT_CLOSED}
    assert escrow(store, "gig", 2)[3] == 15
    assert_never_oversold(store, "gig", 2)


@pytest.mark.parametrize("new_capacity", [1, 3, 30])
def test_held_a_capacity_change_between_secures_read_and_its_draw(
    store, feed, clock, monkeypatch, new_capacity
):
    store.create_event("gig", 20, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    real_draw = Escrow.draw
    fired = {"done": False}

    def draw_after_change(self: Escrow, *args: Any) -> Any:
        if not fired["done"]:
            fired["done"] = True
            with as_user():
                store.update_capacity("gig", new_capacity)
        return real_draw(self, *args)

    monkeypatch.setattr(Escrow, "draw", draw_after_change)
    ids = ids_in(0, 2, 12, "c")
    ok(proc.process([feed.signup(shard_key("gig", 0), s) for s in ids]))
    given = escrow(store, "gig", 2)[3]
    assert given == min(12, new_capacity)
    assert_never_oversold(store, "gig", 2)
    assert audit(store, "gig").ok


def test_held_lowering_capacity_below_dealt_is_refused(store, feed, clock):
    store.create_event("gig", 16, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    ok(proc.process([feed.signup(shard_key("gig", shard_of("y", 2)), "y")]))
    dealt = escrow(store, "gig", 2)[1]
    assert dealt == 2
    with pytest.raises(CapacityBelowTakenError):
        store.update_capacity("gig", dealt - 1)
    assert escrow(store, "gig", 2)[0] == 16


def test_held_multi_seat_signups_around_the_last_seats_and_max_seats(store, feed, clock):
    store.create_event("gig", 5, T0, shards=3, max_seats=3)
    proc = StreamProcessor(store, clock=clock)
    plan = [
        (0, "a", 2),
        (1, "b", 2),
        (2, "c", 4),  # above max_seats
        (2, "d", 2),  # only 1 left anywhere
        (0, "e", 1),  # the last seat (in whichever shard holds it)
        (1, "f", 1),  # none left
    ]
    for shard, prefix, seats in plan:
        sid = ids_in(shard, 3, 1, prefix)[0]
        ok(proc.process([feed.signup(shard_key("gig", shard), sid, seats)]))
    got = [
        (
            status(store, shard_key("gig", k), ids_in(k, 3, 1, p)[0]),
            reason(store, shard_key("gig", k), ids_in(k, 3, 1, p)[0]),
        )
        for k, p, _ in plan
    ]
    assert got == [
        (Status.ACCEPTED, None),
        (Status.ACCEPTED, None),
        (Status.REJECTED, Reason.SEATS_ABOVE_MAX),
        (Status.REJECTED, Reason.CAPACITY_FULL),
        (Status.ACCEPTED, None),
        (Status.REJECTED, Reason.CAPACITY_FULL),
    ]
    assert escrow(store, "gig", 3)[3] == 5
    assert audit(store, "gig").ok


def test_held_a_parked_shard_is_released_by_its_wake_up(store, feed, clock, monkeypatch, wakes):
    store.create_event("gig", 6, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    key0 = shard_key("gig", 0)
    real_commit = store.commit

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("throttled for good")

    monkeypatch.setattr(store, "commit", failing)
    ids = ids_in(0, 2, 3, "p")
    result = proc.process([feed.signup(key0, s) for s in ids])
    assert result.parked_events and result.parked_events[0][0] == key0
    # more records of the shard arrive while it is parked: parked behind
    more = ids_in(0, 2, 5, "p")[3:]
    proc.process([feed.signup(key0, s) for s in more])
    monkeypatch.setattr(store, "commit", real_commit)
    deliver_wakes(proc, wakes, feed)  # whatever was written so far
    # the due-holds job finds the parking marker's release and wakes the shard
    clock.advance(60)
    assert release_due_holds(store, ms_of(clock()) + 60_000) >= 1
    deliver_wakes(proc, wakes, feed)
    assert [status(store, key0, s) for s in ids + more] == [Status.ACCEPTED] * 5
    assert store.get_parking(key0) is None
    assert audit(store, "gig").ok


def test_held_a_hold_lapsing_on_a_shards_tick_becomes_slack_another_shard_takes(store, feed, clock):
    store.create_event("gig", 2, T0, shards=2, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    holders = ids_in(0, 2, 2, "h")
    for sid in holders:
        ok(proc.process([feed.signup(shard_key("gig", 0), sid)]))
    clock.advance(120)
    ok(proc.process([feed.wake(shard_key("gig", 0))]))
    assert {status(store, shard_key("gig", 0), s) for s in holders} == {Status.EXPIRED}
    late = ids_in(1, 2, 2, "late")
    ok(proc.process([feed.signup(shard_key("gig", 1), s) for s in late]))
    assert [status(store, shard_key("gig", 1), s) for s in late] == [Status.HELD] * 2
    assert_never_oversold(store, "gig", 2)


def test_held_the_audit_catches_an_oversold_escrow_and_passes_a_sound_one(store, feed, clock):
    store.create_event("gig", 4, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    for k in (0, 1):
        ok(proc.process([feed.signup(shard_key("gig", k), s) for s in ids_in(k, 2, 3, "a")]))
    assert audit(store, "gig").ok
    assert audit(store).ok
    # a seat put in two places (a quota raised by hand): the audit says so
    store.dynamo.call(
        "update_item",
        TableName=store.control_table,
        Key=event_key(shard_key("gig", 1)),
        UpdateExpression="ADD #q :one",
        ExpressionAttributeNames={"#q": Attr.CAPACITY},
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    report = audit(store, "gig")
    assert not report.ok
    assert not audit(store).ok


def test_held_the_audit_reports_a_refusal_while_the_pool_had_seats(store, feed, clock, monkeypatch):
    store.create_event("gig", 40, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    key = shard_key("gig", 0)
    fans = ids_in(0, 2, 7, "fan")
    ok(proc.process([feed.signup(key, fans[0])]))
    _secure_nothing(store, monkeypatch)
    ok(proc.process([feed.signup(key, s) for s in fans[1:]]))
    assert reason(store, key, fans[-1]) == Reason.CAPACITY_FULL
    report = audit(store, "gig", now=datetime(2026, 1, 1, 1, tzinfo=UTC))
    assert not report.ok
    assert any("undersold" in v for e in report.events for v in e.violations)


def test_held_a_request_under_another_shards_key_changes_nothing(store, feed, clock):
    store.create_event("gig", 4, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    sid = ids_in(0, 2, 1, "r")[0]
    ok(proc.process([feed.signup(shard_key("gig", 0), sid)]))
    ok(proc.process([feed.request(shard_key("gig", 1), sid, "cancel")]))
    ok(proc.process([feed.request("gig", sid, "cancel")]))
    assert status(store, shard_key("gig", 0), sid) == Status.ACCEPTED
    assert escrow(store, "gig", 2)[3] == 1
    assert audit(store, "gig").ok


def test_held_the_due_holds_job_wakes_a_shard_whose_hold_lapsed(store, feed, clock, wakes):
    store.create_event("gig", 2, T0, shards=2, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    holders = ids_in(0, 2, 2, "h")
    for sid in holders:
        ok(proc.process([feed.signup(shard_key("gig", 0), sid)]))
    deliver_wakes(proc, wakes, feed)
    clock.advance(61)
    assert release_due_holds(store, ms_of(clock())) == 1
    deliver_wakes(proc, wakes, feed)
    assert {status(store, shard_key("gig", 0), s) for s in holders} == {Status.EXPIRED}
    late = ids_in(1, 2, 2, "late")
    ok(proc.process([feed.signup(shard_key("gig", 1), s) for s in late]))
    assert [status(store, shard_key("gig", 1), s) for s in late] == [Status.HELD] * 2


def test_held_a_crash_after_a_taking_commit_before_its_items_are_written(
    store, feed, clock, monkeypatch, wakes
):
    store.create_event("gig", 16, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    ok(proc.process([feed.signup(shard_key("gig", 1), ids_in(1, 2, 1, "one")[0])]))
    ok(proc.process([feed.signup(shard_key("gig", 0), s) for s in ids_in(0, 2, 14, "a")]))
    real = store.materialize
    crashed = {"n": 0}

    def crash_once(*args: Any, **kwargs: Any) -> Any:
        if not crashed["n"]:
            crashed["n"] += 1
            raise RuntimeError("killed after the commit")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "materialize", crash_once)
    late = ids_in(0, 2, 4, "late")
    batch = [feed.signup(shard_key("gig", 0), s) for s in late]
    first = proc.process(batch)
    assert first.parked_events
    assert escrow(store, "gig", 2)[2] == [(15, 15), (1, 1)]  # the take landed
    # redelivered to a cold processor, and the parked shard released
    StreamProcessor(store, clock=clock).process(batch)
    deliver_wakes(StreamProcessor(store, clock=clock), wakes, feed)
    ok(StreamProcessor(store, clock=clock).process([feed.wake(shard_key("gig", 0))]))
    got = [status(store, shard_key("gig", 0), s) for s in late]
    assert got == [Status.ACCEPTED] + [Status.REJECTED] * 3
    assert_never_oversold(store, "gig", 2)
    assert audit(store, "gig").ok

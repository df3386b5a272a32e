"""Attacks on sharded events, second round (at 148e6f8): a reviewer's tests, on moto.

FOUND (each ``test_found_*`` failed on 148e6f8; all fixed: the mark names the ``dealt`` it
was made at, a short shard survives another shard's failed step, and a signup larger than
what the shard and the pool hold draws nothing until a snapshot shows it can fit):

* the pool's full mark (``full_at == frees``) outlives a capacity raise: the raise makes
  ``undealt`` positive, a shard draws the new seats (a chunk: more than it gives), and
  ``dealt == capacity`` again with ``frees`` unchanged, so ``Pool.full`` says full while
  the drawing shard holds slack: another shard refuses ``capacity_full`` with seats free
  (``test_found_a_full_mark_outlives_a_capacity_raise_and_hides_the_slack_drawn``); the
  same with holds made from the new seats that lapse: the mark skips the snapshot, so no
  shard is ticked (``test_found_a_full_mark_outlives_a_capacity_raise_and_hides_lapsed_holds``);
* a shard ticking another shard whose holds lapsed lets that shard's failure escape into
  its own batch: the short shard is parked with the other shard's error, every record of
  its chunk with it (its own confirms included, which then lapse while parked)
  (``test_found_a_failing_tick_of_another_shard_parks_the_short_shard_and_its_confirms``);
* ``sizes`` leaves out only a signup larger than the event's whole capacity: one of exactly
  the capacity, on an event where any seat is given, can never fit either and still drains
  the pool into its shard (``test_found_a_signup_of_the_whole_capacity_drains_the_pool``).

The audit does not see the first: its undersold check stands down once the capacity was
ever changed (``min_capacity``), and the pool had nothing undealt. The same stale mark
follows a capacity lowered to ``dealt`` and raised again (not a separate test).

HELD (``test_held_*``, they pass): a confirm recorded in intake before a hold's expiry but
decided after it is refused ``hold_expired`` exactly as on an unsharded event (processor
time decides, in both); two shards each with lapsed holds, both short: every seat given,
a few conflicts, no loop, a replay of the ticking batch moves nothing; the other shard
parked (ticked while parked, its parked records decided once on release); the other
shard's own processor stepping between the plan and the tick (the tick finds nothing, the
chunk is decided again); a shard's own lapsed holds (lapsed in its own step, it never
ticks itself) and a clock before their expiry (refused, the pool not marked full while
holds live); a cancel or a lapse after the mark (``frees`` raised: seen); a void
``_take_back`` on a shard lifting a mark made while the void seat was counted; a
multi-seat signup larger than the event, then the capacity raised; the API's known-shards
cache across a close and a capacity change (a signup's key never changes); clock skew
between two processors stepping one shard (documented: the hold lapses by the clock of
whoever steps it first).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.helpers import ids_in
from tests.hostile.test_sharded_attacks import (
    T0,
    Clock,
    Feed,
    assert_never_oversold,
    escrow,
    ok,
    reason,
    status,
)
from tests.roles import as_user
from turnstile.base.contract import Reason, Status, shard_key, shard_of
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.escrow import Escrow
from turnstile_tools.audit import audit


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def feed() -> Feed:
    return Feed()


def _fill_and_mark(store, feed, clock, capacity: int, hold_seconds: int = 0) -> StreamProcessor:
    """A 2-shard event whose every seat shard 0 gave, then a refusal in shard 1 that marks
    the pool full (no seat anywhere, no hold anywhere)."""
    store.create_event("gig", capacity, T0, shards=2, hold_seconds=hold_seconds)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    ok(proc.process([feed.signup(k0, s) for s in ids_in(0, 2, capacity, "fill")]))
    if hold_seconds:  # the fill's holds confirmed: no hold left anywhere
        ok(proc.process([feed.request(k0, s, "confirm") for s in ids_in(0, 2, capacity, "fill")]))
    first = ids_in(1, 2, 1, "mark")[0]
    ok(proc.process([feed.signup(k1, first)]))
    assert reason(store, k1, first) == Reason.CAPACITY_FULL
    pool = Escrow(store).pool("gig")
    assert pool is not None and pool.full, pool  # the mark is made
    return proc


# =====================================================================================
# FINDINGS
# =====================================================================================


def test_found_a_full_mark_outlives_a_capacity_raise_and_hides_the_slack_drawn(store, feed, clock):
    """The mark says "no seat anywhere, none given back since": ``full_at == frees`` with
    nothing undealt. A capacity raise makes seats undealt (not full), but once a shard
    draws them (at least a chunk: ``capacity / (4 K)``, here 6 for 1 needed) ``dealt ==
    capacity`` again, ``frees`` never moved, and ``Pool.full`` is true again while the
    drawing shard holds 3 seats it never gave. The next short shard reads the pool, sees
    the stale mark, and refuses ``capacity_full`` without a snapshot: undersold, for as
    long as no shard gives a seat back (the audit's undersold check is what would say so).
    Fix: a draw (or a capacity change) clears the mark, or the mark records the ``dealt``
    and ``capacity`` it was made at and ``Pool.full`` compares them."""
    proc = _fill_and_mark(store, feed, clock, 40)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    with as_user():
        store.update_capacity("gig", 44)
    ok(proc.process([feed.signup(k0, ids_in(0, 2, 41, "fill")[40])]))
    _, dealt, shares, given = escrow(store, "gig", 2)
    assert (dealt, shares, given) == (44, [(44, 41), (0, 0)], 41)  # 3 seats of slack
    late = ids_in(1, 2, 2, "mark")[1]
    ok(proc.process([feed.signup(k1, late)]))
    assert (status(store, k1, late), reason(store, k1, late)) == (Status.ACCEPTED, None)
    assert_never_oversold(store, "gig", 2)


def test_found_a_full_mark_outlives_a_capacity_raise_and_hides_lapsed_holds(store, feed, clock):
    """The same stale mark with holds: the seats added are drawn and held by shard 0 (no
    slack left, so the mark looks right), then the holds lapse. Shard 0 has not stepped;
    shard 1, short, reads the pool, finds the mark and refuses without the snapshot that
    would have shown the lapsed holds (and ticked shard 0). An unsharded event gives the
    seat (its step lapses the holds first); this is the finding of 4c706f8 again, through
    a mark made while no hold existed, which a raise makes wrong."""
    proc = _fill_and_mark(store, feed, clock, 8, hold_seconds=60)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    with as_user():
        store.update_capacity("gig", 10)
    holders = ids_in(0, 2, 10, "fill")[8:]
    ok(proc.process([feed.signup(k0, s) for s in holders]))
    assert {status(store, k0, s) for s in holders} == {Status.HELD}
    assert escrow(store, "gig", 2)[1:3] == (10, [(10, 10), (0, 0)])
    clock.advance(120)  # both holds lapsed; shard 0 has not stepped since
    late = ids_in(1, 2, 2, "mark")[1]
    ok(proc.process([feed.signup(k1, late)]))
    assert status(store, k1, late) == Status.HELD, reason(store, k1, late)
    assert_never_oversold(store, "gig", 2)


def test_found_a_failing_tick_of_another_shard_parks_the_short_shard_and_its_confirms(
    store, feed, clock, monkeypatch
):
    """``_decide_chunk`` ticks the shards whose holds lapsed from inside its own retry
    loop, outside any ``try``: when one of those ticks fails (the other shard's partition
    throttled past the store's retries, its lineup unreadable: a shard the processor
    parks on its own), the exception is the short shard's. Its whole group is parked with
    the other shard's error, its own records with it: here a confirm of its own hold, made
    in time, that can now only be decided once the other shard is well again, after the
    hold lapsed (refused ``hold_expired``). One sick shard parks every shard that runs
    short, and each release tries the sick tick again. An unsharded event would have
    confirmed. Fix: a failed tick of another shard is that shard's (logged, its wake-up
    retried): the short shard decides without those seats (refusing, not marking full) or
    parks only the records after the ones it decided."""
    store.create_event("gig", 2, T0, shards=2, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    held0 = ids_in(0, 2, 1, "h")[0]
    ok(proc.process([feed.signup(k0, held0)]))  # shard 0's hold lapses at T0 + 60
    clock.advance(30)
    mine = ids_in(1, 2, 1, "m")[0]
    ok(proc.process([feed.signup(k1, mine)]))  # shard 1's hold lapses at T0 + 90
    assert escrow(store, "gig", 2)[1:3] == (2, [(1, 1), (1, 1)])
    clock.advance(40)  # T0 + 70: shard 0's hold lapsed, shard 1's not yet
    real_commit = store.commit

    def shard0_throttled(expected: Any, *args: Any, **kwargs: Any) -> Any:
        if expected.event_id == k0:
            raise RuntimeError("shard 0's partition: throttled past every retry")
        return real_commit(expected, *args, **kwargs)

    monkeypatch.setattr(store, "commit", shard0_throttled)
    late = ids_in(1, 2, 2, "m")[1]
    result = proc.process([feed.request(k1, mine, "confirm"), feed.signup(k1, late)])
    # shard 1's own confirm, in time, is decided whatever becomes of shard 0
    assert status(store, k1, mine) == Status.ACCEPTED, result.parked_events
    assert not result.parked_events, result.parked_events


def test_found_a_signup_of_the_whole_capacity_drains_the_pool(store, feed, clock):
    """148e6f8 leaves out of ``need`` a signup larger than the event's capacity. One of
    exactly the capacity (allowed: no ``max_seats``) on an event where another shard gave
    a seat can never fit either, yet its shard draws every undealt seat (12 of 16) before
    the snapshot shows it cannot be given, and refuses it holding them: the hoarding the
    last fix meant to stop, one seat smaller, repeatable in every shard (each other
    shard's next signup must then take its seats back). Fix: leave out a signup larger
    than ``capacity - (seats given elsewhere)`` as read before drawing (the snapshot's
    taken), or draw only after a snapshot says the need can be met."""
    store.create_event("gig", 16, T0, shards=4)
    proc = StreamProcessor(store, clock=clock)
    for k in range(4):
        ok(proc.process([feed.signup(shard_key("gig", k), ids_in(k, 4, 1, "a")[0])]))
    before = escrow(store, "gig", 4)
    assert before[1:] == (4, [(1, 1)] * 4, 4)
    whole = ids_in(0, 4, 1, "whole")[0]
    ok(proc.process([feed.signup(shard_key("gig", 0), whole, 16)]))
    assert reason(store, shard_key("gig", 0), whole) == Reason.CAPACITY_FULL
    assert escrow(store, "gig", 4) == before, "a hopeless signup moved seats"


# =====================================================================================
# HELD
# =====================================================================================


def test_held_a_confirm_recorded_in_time_but_decided_late_lapses_as_on_an_unsharded_event(
    store, feed, clock
):
    """A confirm written to intake before the hold's expiry and decided after it: on an
    unsharded event the step lapses due holds before any record, so it is refused
    ``hold_expired`` and the later signup gets the seat. On a sharded event the same
    happens, whichever comes first: the other shard's tick or the holding shard's step."""
    for event_id, shards in (("flat", 1), ("gig", 2)):
        store.create_event(event_id, 1, T0, shards=shards, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    holder = ids_in(0, 2, 1, "h")[0]
    late = ids_in(1, 2, 1, "late")[0]
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    ok(proc.process([feed.signup("flat", holder)]))
    ok(proc.process([feed.signup(k0, holder)]))
    clock.advance(59)
    flat_confirm = feed.request("flat", holder, "confirm")  # written in time
    gig_confirm = feed.request(k0, holder, "confirm")
    clock.advance(2)  # decided late
    ok(proc.process([flat_confirm, feed.signup("flat", late)]))
    ok(proc.process([feed.signup(k1, late)]))  # shard 1 first: it ticks shard 0
    ok(proc.process([gig_confirm]))
    flat = [(status(store, "flat", s), reason(store, "flat", s)) for s in (holder, late)]
    gig = [(status(store, k, s), reason(store, k, s)) for k, s in ((k0, holder), (k1, late))]
    assert flat == gig == [(Status.EXPIRED, None), (Status.HELD, None)]
    item = store.get_decision(k0, holder)
    assert item is not None and item["last_refusal"]["reason"] == Reason.HOLD_EXPIRED
    assert_never_oversold(store, "gig", 2)


def test_held_two_shards_each_with_lapsed_holds_both_short_give_every_seat(store, feed, clock):
    store.create_event("gig", 4, T0, shards=2, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    ok(proc.process([feed.signup(k0, s) for s in ids_in(0, 2, 2, "h")]))
    ok(proc.process([feed.signup(k1, s) for s in ids_in(1, 2, 2, "h")]))
    clock.advance(120)
    a = ids_in(0, 2, 5, "a")
    b = ids_in(1, 2, 5, "b")
    batch0 = [feed.signup(k0, s) for s in a]
    first = ok(proc.process(batch0))
    assert first.conflicts <= 4
    ok(proc.process([feed.signup(k1, s) for s in b]))
    got = Counter(status(store, k0, s) for s in a) + Counter(status(store, k1, s) for s in b)
    assert got == {Status.HELD: 4, Status.REJECTED: 6}
    assert_never_oversold(store, "gig", 2)
    # the batch that ticked shard 1, replayed to a cold processor: nothing moves
    before = escrow(store, "gig", 2)
    again = ok(StreamProcessor(store, clock=clock).process(batch0))
    assert not again.decided and escrow(store, "gig", 2) == before
    assert audit(store, "gig", now=datetime(2026, 1, 1, 0, 2, 30, tzinfo=UTC)).ok


def test_held_a_parked_shard_with_lapsed_holds_is_ticked_and_its_records_decided_once(
    store, feed, clock, monkeypatch
):
    store.create_event("gig", 2, T0, shards=2, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    holders = ids_in(0, 2, 2, "h")
    ok(proc.process([feed.signup(k0, s) for s in holders]))
    real_commit = store.commit

    def failing(expected: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("throttled")

    monkeypatch.setattr(store, "commit", failing)
    parked = ids_in(0, 2, 4, "h")[2:]
    result = proc.process(
        [feed.request(k0, holders[0], "confirm")] + [feed.signup(k0, s) for s in parked]
    )
    assert result.parked_events and result.parked_events[0][0] == k0
    monkeypatch.setattr(store, "commit", real_commit)
    clock.advance(120)  # shard 0's holds lapsed while it is parked
    late = ids_in(1, 2, 2, "late")
    ok(proc.process([feed.signup(k1, s) for s in late]))
    assert [status(store, k1, s) for s in late] == [Status.HELD] * 2
    ok(proc.process([feed.wake(k0)]))  # released: its records decided once, in order
    assert store.get_parking(k0) is None
    assert status(store, k0, holders[0]) == Status.EXPIRED
    assert {reason(store, k0, s) for s in parked} == {Reason.CAPACITY_FULL}
    assert_never_oversold(store, "gig", 2)


def test_held_the_other_shards_own_step_between_the_plan_and_the_tick(
    store, feed, clock, monkeypatch
):
    """Shard 1 plans (holds lapsed in shard 0), then shard 0's own processor steps first
    (lapsing them itself, and giving one seat): the tick finds nothing, shard 1 decides
    again and takes the one seat left."""
    store.create_event("gig", 2, T0, shards=2, hold_seconds=60)
    mine = StreamProcessor(store, clock=clock)
    theirs = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    ok(theirs.process([feed.signup(k0, s) for s in ids_in(0, 2, 2, "h")]))
    clock.advance(120)
    real_secure = store.secure
    fired = {"n": 0}
    own = ids_in(0, 2, 3, "h")[2]

    def step_between(*args: Any) -> Any:
        secured = real_secure(*args)
        if secured.holding and not fired["n"]:
            fired["n"] += 1
            ok(theirs.process([feed.signup(k0, own)]))
        return secured

    monkeypatch.setattr(store, "secure", step_between)
    late = ids_in(1, 2, 2, "late")
    ok(mine.process([feed.signup(k1, s) for s in late]))
    assert fired["n"] == 1
    assert status(store, k0, own) == Status.HELD
    assert [status(store, k1, s) for s in late] == [Status.HELD, Status.REJECTED]
    assert_never_oversold(store, "gig", 2)


def test_held_a_shard_never_ticks_itself_and_a_clock_before_expiry_does_not_mark_full(
    store, feed, clock
):
    store.create_event("gig", 2, T0, shards=2, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    ok(proc.process([feed.signup(k0, s) for s in ids_in(0, 2, 2, "h")]))
    clock.advance(59)  # not lapsed yet: refused, and not marked full (holds are live)
    early = ids_in(1, 2, 1, "e")[0]
    ok(proc.process([feed.signup(k1, early)]))
    assert reason(store, k1, early) == Reason.CAPACITY_FULL
    pool = Escrow(store).pool("gig")
    assert pool is not None and not pool.full
    clock.advance(2)
    again = ids_in(0, 2, 4, "h")[2:]  # shard 0's own holds: lapsed in its own step
    result = ok(proc.process([feed.signup(k0, s) for s in again]))
    assert result.conflicts == 0
    assert [status(store, k0, s) for s in again] == [Status.HELD] * 2
    assert_never_oversold(store, "gig", 2)


@pytest.mark.parametrize("give_back", ["cancel", "lapse"])
def test_held_a_seat_given_back_after_the_mark_is_seen(store, feed, clock, give_back):
    hold = 60 if give_back == "lapse" else 0
    store.create_event("gig", 4, T0, shards=2, hold_seconds=hold)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    fill = ids_in(0, 2, 4, "f")
    ok(proc.process([feed.signup(k0, s) for s in fill]))
    if give_back == "lapse":  # three confirmed, one left to lapse: marked only once
        ok(proc.process([feed.request(k0, s, "confirm") for s in fill[:3]]))
        clock.advance(120)
        ok(proc.process([feed.wake(k0)]))  # its lapse is a commit: frees raised
        ok(proc.process([feed.signup(k0, ids_in(0, 2, 5, "f")[4])]))  # taken again
        ok(proc.process([feed.request(k0, ids_in(0, 2, 5, "f")[4], "confirm")]))
    first = ids_in(1, 2, 1, "m")[0]
    ok(proc.process([feed.signup(k1, first)]))
    pool = Escrow(store).pool("gig")
    assert pool is not None and pool.full
    ok(proc.process([feed.request(k0, fill[0], "cancel")]))
    late = ids_in(1, 2, 2, "m")[1]
    ok(proc.process([feed.signup(k1, late)]))
    assert status(store, k1, late) in (Status.ACCEPTED, Status.HELD)
    assert_never_oversold(store, "gig", 2)


def test_held_a_void_take_back_on_a_shard_lifts_a_mark_made_while_it_was_counted(
    store, feed, clock, monkeypatch
):
    """A shard's intake item deleted (the REMOVE lost) and put again: decided unread, its
    seat counted twice until ``_take_back``. A crash after that commit leaves it counted;
    another shard's snapshot then finds no seat and marks the pool full. The take-back,
    on the shard's next step, is a commit that gives a seat back: it raises ``frees``."""
    store.create_event("gig", 3, T0, shards=2)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    x = ids_in(0, 2, 1, "x")[0]
    ok(proc.process([feed.signup(k0, x)]))
    ok(proc.process([feed.signup(k1, ids_in(1, 2, 1, "y")[0])]))
    real = store.materialize
    crashed = {"n": 0}

    def crash_once(*args: Any, **kwargs: Any) -> Any:
        if not crashed["n"]:
            crashed["n"] += 1
            raise RuntimeError("killed after the commit")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "materialize", crash_once)
    assert proc.process([feed.signup(k0, x)]).parked_events  # put again, REMOVE lost
    monkeypatch.setattr(store, "materialize", real)
    assert escrow(store, "gig", 2)[2:] == ([(2, 2), (1, 1)], 3)  # x counted twice
    marker = ids_in(1, 2, 2, "y")[1]
    ok(proc.process([feed.signup(k1, marker)]))
    assert reason(store, k1, marker) == Reason.CAPACITY_FULL
    pool = Escrow(store).pool("gig")
    assert pool is not None and pool.full
    ok(StreamProcessor(store, clock=clock).process([feed.wake(k0)]))  # released: taken back
    assert escrow(store, "gig", 2)[2:] == ([(2, 1), (1, 1)], 2)
    late = ids_in(1, 2, 3, "y")[2]
    ok(proc.process([feed.signup(k1, late)]))
    assert status(store, k1, late) == Status.ACCEPTED
    assert_never_oversold(store, "gig", 2)


def test_held_a_multi_seat_refusal_then_a_capacity_raise(store, feed, clock):
    store.create_event("gig", 4, T0, shards=2, max_seats=6)
    proc = StreamProcessor(store, clock=clock)
    k0 = shard_key("gig", 0)
    big = ids_in(0, 2, 2, "big")
    ok(proc.process([feed.signup(k0, big[0], 5)]))  # larger than the event: nothing moves
    assert reason(store, k0, big[0]) == Reason.CAPACITY_FULL
    assert escrow(store, "gig", 2)[1] == 0
    with as_user():
        store.update_capacity("gig", 6)
    ok(proc.process([feed.signup(k0, big[1], 5)]))  # fits now
    assert status(store, k0, big[1]) == Status.ACCEPTED
    k1 = shard_key("gig", 1)
    two = ids_in(1, 2, 2, "two")
    ok(proc.process([feed.signup(k1, two[0], 2), feed.signup(k1, two[1], 1)]))
    assert [status(store, k1, s) for s in two] == [Status.REJECTED, Status.ACCEPTED]
    assert escrow(store, "gig", 2)[3] == 6
    assert_never_oversold(store, "gig", 2)


def test_held_the_apis_known_shards_survive_a_close_and_a_capacity_change(store, feed, clock):
    from turnstile.service import usecases

    usecases.forget_known_shards()
    with as_user():
        usecases.create_event(store, "gig", 4, None, shards=2)
        usecases.submit_signup(store, "gig", "a1", retention_days=30)
        usecases.update_capacity(store, "gig", 6)
        usecases.close_event(store, "gig")
        usecases.submit_signup(store, "gig", "a2", retention_days=30)
    for sid in ("a1", "a2"):
        key = shard_key("gig", shard_of(sid, 2))
        assert store.get_intake(key, sid) is not None
        assert store.get_intake("gig", sid) is None
    usecases.forget_known_shards()


def test_held_clock_skew_the_hold_lapses_by_the_clock_of_whoever_steps_its_shard(store, feed):
    """Documents, does not endorse: a processor whose clock is 5 s ahead steps another
    shard (its holds lapsed by its clock) while that shard's own processor, 5 s behind,
    still sees the hold live; the confirm it decides next is refused ``hold_expired``.
    Expiry is processor time on an unsharded event too (successive invocations on other
    hosts); sharding adds only that two processors may step one shard's item. Clients
    confirm with margin: the API refuses a confirm after ``hold_expires_at`` anyway."""
    store.create_event("gig", 1, T0, shards=2, hold_seconds=60)
    ahead, behind = Clock(), Clock()
    mine = StreamProcessor(store, clock=ahead)
    theirs = StreamProcessor(store, clock=behind)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    holder = ids_in(0, 2, 1, "h")[0]
    ok(theirs.process([feed.signup(k0, holder)]))
    ahead.advance(63)
    behind.advance(57)
    late = ids_in(1, 2, 1, "late")[0]
    ok(mine.process([feed.signup(k1, late)]))
    ok(theirs.process([feed.request(k0, holder, "confirm")]))
    assert status(store, k0, holder) == Status.EXPIRED
    assert status(store, k1, late) == Status.HELD
    assert_never_oversold(store, "gig", 2)

"""A waitlist on a sharded event, decided by the stream processor on moto
(docs/hot-events.md, "Waitlists across shards").

Each shard keeps its own line; the event's ``waitlist`` bounds them all together (the pool
counts who waits, in every shard commit that changes a line); a seat given back in a shard
with nobody waiting reaches another shard's line (the commit wakes the shards the pool
names, and a shard with someone waiting secures seats for them before anyone later); a
signup waits only when no seat is left anywhere (a shard short of seats draws or takes
first).
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers import ids_in
from tests.hostile.test_sharded_attacks import (
    Clock,
    Feed,
    assert_never_oversold,
    deliver_wakes,
    escrow,
    ok,
    status,
)
from turnstile.base.contract import Attr, Reason, RequestKind, Status, shard_key
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.escrow import Escrow
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit

T0 = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def feed() -> Feed:
    return Feed()


def waiting(store: SignupStore, event_id: str) -> tuple[int, frozenset[int]]:
    pool = Escrow(store).pool(event_id)
    assert pool is not None
    return pool.waiting, pool.waiters


def line(store: SignupStore, key: str) -> list[str]:
    """The signups waiting in one shard, in line order."""
    record = store.load_lineup(store.get_event(key))
    return [w.signup_id for w in record.event.waiting]


def audit_ok(store: SignupStore, event_id: str) -> None:
    report = audit(store, event_id, pending_grace_s=0)
    assert report.ok, [(e.event_id, e.violations) for e in report.events if e.violations]


def test_a_shard_waits_only_when_no_seat_is_left_anywhere(store, feed, clock):
    # GIVEN 4 seats over 2 shards, a waitlist of 3; shard 1 is dealt a seat and uses it
    store.create_event("gig", 4, T0, shards=2, waitlist=3)
    proc = StreamProcessor(store, clock=clock)
    ok(proc.process([feed.signup(shard_key("gig", 1), ids_in(1, 2, 1, "one")[0])]))
    # WHEN shard 0 gets 6 signups in one batch
    crowd = ids_in(0, 2, 6, "crowd")
    ok(proc.process([feed.signup(shard_key("gig", 0), sid) for sid in crowd]))
    # THEN it gives the 3 seats left (drawn from the pool), then waits 3 (the whole
    # waitlist), and refuses the rest capacity_full
    got = [status(store, shard_key("gig", 0), sid) for sid in crowd]
    assert got == [Status.ACCEPTED] * 3 + [Status.WAITLISTED] * 3
    assert waiting(store, "gig") == (3, frozenset({0}))
    late = ids_in(1, 2, 2, "late")
    ok(proc.process([feed.signup(shard_key("gig", 1), sid) for sid in late]))
    # and shard 1's later signups find the event's waitlist full: refused, never waiting
    assert [status(store, shard_key("gig", 1), sid) for sid in late] == [Status.REJECTED] * 2
    assert waiting(store, "gig") == (3, frozenset({0}))
    assert_never_oversold(store, "gig", 2)
    audit_ok(store, "gig")


def test_the_waitlist_is_one_bound_over_every_shard(store, feed, clock):
    # GIVEN 2 seats over 3 shards and a waitlist of 4, every seat given
    store.create_event("gig", 2, T0, shards=3, waitlist=4)
    procs = [StreamProcessor(store, clock=clock) for _ in range(3)]
    ok(procs[0].process([feed.signup(shard_key("gig", 0), s) for s in ids_in(0, 3, 2, "a")]))
    # WHEN each shard in turn gets 3 more signups
    got: Counter[str] = Counter()
    for k in (2, 0, 1):
        ids = ids_in(k, 3, 3, f"w{k}-")
        ok(procs[k].process([feed.signup(shard_key("gig", k), s) for s in ids]))
        got.update(status(store, shard_key("gig", k), s) for s in ids)
    # THEN 4 wait in all (3 in shard 2, the first to ask; 1 in shard 0), 5 are refused
    assert got == {Status.WAITLISTED: 4, Status.REJECTED: 5}
    assert [len(line(store, shard_key("gig", k))) for k in range(3)] == [1, 0, 3]
    assert waiting(store, "gig") == (4, frozenset({0, 2}))
    audit_ok(store, "gig")


def test_a_seat_given_back_in_a_shard_with_nobody_waiting_reaches_another_shards_line(
    store, feed, clock, wakes
):
    # GIVEN 2 seats over 2 shards, both given in shard 1; shard 0 has two waiting
    store.create_event("gig", 2, T0, shards=2, waitlist=5)
    one, zero = StreamProcessor(store, clock=clock), StreamProcessor(store, clock=clock)
    seated = ids_in(1, 2, 2, "seated")
    ok(one.process([feed.signup(shard_key("gig", 1), s) for s in seated]))
    queued = ids_in(0, 2, 2, "queued")
    ok(zero.process([feed.signup(shard_key("gig", 0), s) for s in queued]))
    assert [status(store, shard_key("gig", 0), s) for s in queued] == [Status.WAITLISTED] * 2
    wakes.read_new()  # (the creation's)
    # WHEN a signup of shard 1 cancels
    ok(one.process([feed.request(shard_key("gig", 1), seated[0], RequestKind.CANCEL)]))
    assert status(store, shard_key("gig", 1), seated[0]) == Status.CANCELLED
    # THEN shard 1 keeps the seat free for the line, and its commit woke shard 0, whose
    # step takes the seat and promotes the first in line
    assert escrow(store, "gig", 2)[2] == [(0, 0), (2, 1)]
    deliver_wakes(zero, wakes, feed)
    assert [status(store, shard_key("gig", 0), s) for s in queued] == [
        Status.ACCEPTED,
        Status.WAITLISTED,
    ]
    assert escrow(store, "gig", 2)[2] == [(1, 1), (1, 1)]
    assert waiting(store, "gig") == (1, frozenset({0}))
    assert_never_oversold(store, "gig", 2)
    audit_ok(store, "gig")


def test_a_waiter_takes_a_seat_given_back_before_a_later_signup_of_its_own_shard(
    store, feed, clock
):
    # GIVEN one seat over 2 shards, given in shard 1; one signup waits in shard 0
    store.create_event("gig", 1, T0, shards=2, waitlist=5)
    one, zero = StreamProcessor(store, clock=clock), StreamProcessor(store, clock=clock)
    seated = ids_in(1, 2, 1, "seated")[0]
    ok(one.process([feed.signup(shard_key("gig", 1), seated)]))
    first, later = ids_in(0, 2, 2, "zero")
    ok(zero.process([feed.signup(shard_key("gig", 0), first)]))
    # WHEN shard 1's seat comes back, and shard 0's next record is a later signup
    ok(one.process([feed.request(shard_key("gig", 1), seated, RequestKind.CANCEL)]))
    ok(zero.process([feed.signup(shard_key("gig", 0), later)]))
    # THEN the seat went to the one waiting, and the later signup waits behind nobody
    assert status(store, shard_key("gig", 0), first) == Status.ACCEPTED
    assert status(store, shard_key("gig", 0), later) == Status.WAITLISTED
    assert line(store, shard_key("gig", 0)) == [later]
    audit_ok(store, "gig")


def test_a_close_rejects_every_shards_line_and_the_pool_counts_nobody(store, feed, clock, wakes):
    store.create_event("gig", 1, T0, shards=2, waitlist=6)
    procs = [StreamProcessor(store, clock=clock) for _ in range(2)]
    for k in (0, 1):
        ids = ids_in(k, 2, 3, f"s{k}-")
        ok(procs[k].process([feed.signup(shard_key("gig", k), s) for s in ids]))
    assert waiting(store, "gig") == (5, frozenset({0, 1}))
    # WHEN the organizer closes the event, and each shard acts on its wake-up
    store.close_event("gig")
    deliver_wakes(procs[0], wakes, feed)
    # THEN everyone waiting is rejected event_closed, and the pool counts nobody waiting
    for k in (0, 1):
        assert line(store, shard_key("gig", k)) == []
    closed = [
        item
        for k in (0, 1)
        for item in store.decision_items(shard_key("gig", k))
        if item.get(Attr.REASON) == Reason.EVENT_CLOSED
    ]
    assert len(closed) == 5
    assert waiting(store, "gig") == (0, frozenset())
    audit_ok(store, "gig")


def test_seats_added_reach_the_shards_lines(store, feed, clock, wakes):
    store.create_event("gig", 1, T0, shards=2, waitlist=4)
    procs = [StreamProcessor(store, clock=clock) for _ in range(2)]
    for k in (0, 1):
        ids = ids_in(k, 2, 2, f"s{k}-")
        ok(procs[k].process([feed.signup(shard_key("gig", k), s) for s in ids]))
    assert waiting(store, "gig")[0] == 3
    wakes.read_new()
    # WHEN the organizer adds 2 seats
    store.update_capacity("gig", 3)
    deliver_wakes(procs[0], wakes, feed)
    # THEN both new seats went to signups waiting, one left waiting
    assert waiting(store, "gig")[0] == 1
    assert escrow(store, "gig", 2)[3] == 3
    audit_ok(store, "gig")


def test_a_shard_cannot_wait_signups_past_a_seat_given_back_after_it_read_its_pool(
    store, feed, clock, monkeypatch
):
    """A shard waits its signups because no seat was left anywhere as its pool read; a seat
    given back in another shard between that read and its commit makes the commit conflict,
    and the shard decides again and takes it (else the seat sat free with someone waiting,
    and nothing woke the shard: it had nobody waiting when the seat came back)."""
    store.create_event("gig", 1, T0, shards=2, waitlist=5)
    one, zero = StreamProcessor(store, clock=clock), StreamProcessor(store, clock=clock)
    seated = ids_in(1, 2, 1, "seated")[0]
    ok(one.process([feed.signup(shard_key("gig", 1), seated)]))
    commit = store.commit
    calls = []

    def cancel_first(*args, **kwargs):
        if not calls:
            calls.append(1)
            ok(one.process([feed.request(shard_key("gig", 1), seated, RequestKind.CANCEL)]))
        return commit(*args, **kwargs)

    monkeypatch.setattr(store, "commit", cancel_first)
    first = ids_in(0, 2, 1, "zero")[0]
    result = ok(zero.process([feed.signup(shard_key("gig", 0), first)]))
    assert result.conflicts >= 1
    assert status(store, shard_key("gig", 0), first) == Status.ACCEPTED
    assert waiting(store, "gig") == (0, frozenset())
    audit_ok(store, "gig")


def test_a_seat_given_back_as_another_shard_starts_waiting_wakes_it(
    store, feed, clock, wakes, monkeypatch
):
    """Shard 1 gives a seat back having read the pool before shard 0 started waiting: its
    commit conflicts (the pool's waitlists started since), and it decides again and wakes
    shard 0."""
    store.create_event("gig", 1, T0, shards=2, waitlist=5)
    one, zero = StreamProcessor(store, clock=clock), StreamProcessor(store, clock=clock)
    seated = ids_in(1, 2, 1, "seated")[0]
    ok(one.process([feed.signup(shard_key("gig", 1), seated)]))
    first = ids_in(0, 2, 1, "zero")[0]
    pool_of = one._pool_of
    calls = []

    def zero_waits_after_the_read(*args):
        pool = pool_of(*args)
        if not calls:
            calls.append(1)
            ok(zero.process([feed.signup(shard_key("gig", 0), first)]))
        return pool

    monkeypatch.setattr(one, "_pool_of", zero_waits_after_the_read)
    wakes.read_new()
    result = ok(one.process([feed.request(shard_key("gig", 1), seated, RequestKind.CANCEL)]))
    assert result.conflicts >= 1
    assert status(store, shard_key("gig", 0), first) == Status.WAITLISTED
    deliver_wakes(zero, wakes, feed)
    assert status(store, shard_key("gig", 0), first) == Status.ACCEPTED
    audit_ok(store, "gig")


def test_a_commit_past_the_events_waitlist_is_refused_by_the_pool(store, feed, clock):
    """The bound holds in the write itself: a commit decided from a pool read before another
    shard filled the waitlist conflicts."""
    store.create_event("gig", 1, T0, shards=2, waitlist=2)
    zero = StreamProcessor(store, clock=clock)
    one = StreamProcessor(store, clock=clock)
    ok(one.process([feed.signup(shard_key("gig", 1), ids_in(1, 2, 1, "seated")[0])]))
    pool = Escrow(store).pool("gig")
    assert pool is not None and pool.places == 2
    ok(one.process([feed.signup(shard_key("gig", 1), s) for s in ids_in(1, 2, 2, "one")]))
    assert waiting(store, "gig")[0] == 2
    # a shard that decides from the pool as it was: two places
    zero._pool_of = lambda *args: pool  # type: ignore[method-assign]
    ids = ids_in(0, 2, 1, "zero")
    result = zero.process([feed.signup(shard_key("gig", 0), s) for s in ids])
    # THEN every commit of it conflicted (the pool read stays stale here): nothing waits
    # past the bound; the records are parked for a release, which reads the pool again
    assert result.conflicts >= 1 and result.parked_events
    assert status(store, shard_key("gig", 0), ids[0]) is None
    assert waiting(store, "gig")[0] == 2


def test_a_shard_whose_own_cancel_frees_too_few_seats_for_its_line_wakes_itself(
    store, feed, clock, wakes
):
    """Found by the state machine: a 2-seat signup waits in shard 0 beside the pool's last
    seat; shard 0's own seated signup cancels. The step frees one seat, too few for the
    head of the line; the seats it secured before committing were counted from its share
    before the cancel (none free), so it drew nothing. Its commit wakes itself: the next
    step counts from the share the cancel left, draws the pool's seat and seats the line."""
    store.create_event("gig", 2, T0, shards=2, waitlist=1)
    zero = StreamProcessor(store, clock=clock)
    seated, big = ids_in(0, 2, 2, "zero")
    ok(zero.process([feed.signup(shard_key("gig", 0), seated)]))
    ok(zero.process([feed.signup(shard_key("gig", 0), big, seats=2)]))
    assert status(store, shard_key("gig", 0), big) == Status.WAITLISTED
    wakes.read_new()
    ok(zero.process([feed.request(shard_key("gig", 0), seated, RequestKind.CANCEL)]))
    deliver_wakes(zero, wakes, feed)
    assert status(store, shard_key("gig", 0), big) == Status.ACCEPTED
    assert escrow(store, "gig", 2)[2:] == ([(2, 2), (0, 0)], 2)
    audit_ok(store, "gig")

"""Attacks on waitlists of sharded events, a second round (after 49c8e9c): holds with lines,
the self-wake, paged lines, bounded closes, odd keys and tampered pools. A reviewer's
tests, on moto (``tests/hostile/test_sharded_waitlist_attacks.py`` is the first round).

FOUND AND FIXED (``test_found_*`` failed on 49c8e9c, and passes with its fix):

* a shard short of seats for its line (or a chunk) ticks a shard whose holds lapsed with
  one call of ``_decide_chunk`` per retry, a step bounded by ``max_lapses`` whose partial
  result is dropped; every retry counts as a conflict, so a line wanting more seats than
  ``max_conflicts`` steps of lapses free makes the batch fail "20 conflicts in a row" and
  park, with the seats it needed already free
  (``test_found_a_line_longer_than_the_retries_times_max_lapses_parks_its_shard``); now
  each lapsed shard is stepped until its due holds are all lapsed, as a wake-up steps it.

HELD (``test_held_*``: they pass): random signups of 1-3 seats over four shards with
holds, ``max_lapses`` of 1-2, confirms, cancels, time, the due-holds job and capacity
changes (settled: nobody waits for seats that fit, the audit passes, the wake-ups stop);
holds lapsing in three shards at once reaching lines in two (wake-ups counted, bounded by
the commits giving seats back); the self-wake of 49c8e9c (a shard giving back seats with
its line waiting wakes itself once per such commit, the tick it wakes writes none, even
for a line that can never fit, from which no seat is taken); a confirm racing another
shard's tick that lapses its hold and promotes into its seat (either order: the seat given
once); multi-seat lines in three shards fed seat by seat; a line of 330 in lineup pages
fed from other shards, cancels in its middle pages and a capacity raise promoting 7 a
step (arrival order kept, pages agreeing with the items); a close rejecting three lines 2
a step with the capacity raised and lowered between its commits (the pool's count exact
after every commit, nothing drawn, nobody promoted); a pool naming a shard the event lacks
(once a wake-up of nothing, now none), naming shard 40 (once parked until repaired; now
a number past the event's shards is never woken), or without its ``waitlist`` (nobody more
waits); records under a shard key past the event's shards.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.helpers import ids_in
from tests.hostile.test_sharded_attacks import (
    Clock,
    Feed,
    assert_never_oversold,
    ok,
    reason,
    status,
)
from tests.roles import as_user
from turnstile.base.contract import (
    WAKE_SOURCE,
    Attr,
    Reason,
    RequestKind,
    Status,
    shard_key,
    shard_of,
)
from turnstile.engine.escrow import Pool
from turnstile.jobs.due_holds import due_events, release_due_holds
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.dynamo import event_key
from turnstile.storage.escrow import Escrow
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.poller import matches_filter

T0 = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def feed() -> Feed:
    return Feed()


# -- the harness ----------------------------------------------------------------------


def pool_of(store: SignupStore, event: str = "gig") -> Pool:
    pool = Escrow(store).pool(event)
    assert pool is not None
    return pool


def waiting_items(store: SignupStore, shards: int, event: str = "gig") -> dict[str, tuple]:
    """(shard, seats) of every WAITLISTED decision item, by signup."""
    return {
        item[Attr.SIGNUP_ID]: (k, int(item.get(Attr.SEATS, 1)))
        for k in range(shards)
        for item in store.decision_items(shard_key(event, k))
        if item.get(Attr.STATUS) == Status.WAITLISTED
    }


def counted(store: SignupStore, shards: int, event: str = "gig") -> None:
    """Never oversold; the pool counts exactly the WAITLISTED items, within the waitlist,
    and names exactly the shards where someone waits."""
    assert_never_oversold(store, event, shards)
    pool = pool_of(store, event)
    rows = waiting_items(store, shards, event)
    assert pool.waiting == len(rows) <= pool.waitlist, (pool, rows)
    assert pool.waiters == {k for k, _ in rows.values()}, (pool, rows)


def free_seats(store: SignupStore, shards: int, event: str = "gig") -> int:
    pool, shares = Escrow(store).snapshot(event, shards)
    assert pool is not None
    return pool.capacity - sum(s.taken for s in shares)


def sound(store: SignupStore, shards: int, clock: Clock, event: str = "gig") -> None:
    """``counted``; nobody waits whose seats fit what the event has free; the audit,
    a millisecond after ``clock`` (everything still), finds nothing."""
    counted(store, shards, event)
    free = free_seats(store, shards, event)
    fits = {s: v for s, v in waiting_items(store, shards, event).items() if v[1] <= free}
    assert fits == {}, (free, fits)
    now = datetime.fromtimestamp((clock.ms + 1) / 1000, UTC)
    report = audit(store, event, pending_grace_s=0, now=now)
    bad = [(e.event_id, e.violations) for e in report.events if e.violations]
    assert bad == [] and report.ok, bad


class Wakes:
    """The control table's wake-up records, counted by the key they wake: the writes of
    wake-up items (moto's stream gives the write that creates an item twice, as two
    INSERTs: counted once, as a wake-up item is never deleted)."""

    def __init__(self, reader: Any, feed: Feed) -> None:
        self.reader, self.feed = reader, feed
        self.written: Counter[str] = Counter()
        self._inserted: set[str] = set()

    def new(self) -> list[StreamRecord]:
        records = []
        for r in self.reader.read_new():
            if not any(matches_filter(p, r) for p in WAKE_SOURCE.filter_patterns):
                continue
            keys = {k: v["S"] for k, v in r["dynamodb"]["Keys"].items()}
            record = StreamRecord(self.feed._next(), r["eventName"], keys)
            key = record.woken_event
            if key is not None and (r["eventName"] != "INSERT" or key not in self._inserted):
                self._inserted.add(key)
                self.written[key] += 1
            records.append(record)
        return records

    def drop(self) -> None:
        self.new()
        self.written.clear()

    def deliver(self, proc: StreamProcessor) -> int:
        records = self.new()
        if records:
            ok(proc.process(records))
        return len(records)

    def settle(self, store: SignupStore, proc: StreamProcessor, clock: Clock, rounds: int = 30):
        """Due holds released (at ``clock``, which does not move) and every wake-up
        delivered, with those they write, until none is left; how many were delivered."""
        delivered = 0
        for _ in range(rounds):
            release_due_holds(store, clock.ms)
            n = self.deliver(proc)
            if not n:
                return delivered
            delivered += n
        raise AssertionError(f"wake-ups kept coming: {self.written.most_common(4)}")


@pytest.fixture
def woken(wakes: Any, feed: Feed) -> Wakes:
    return Wakes(wakes, feed)


def signups(proc: StreamProcessor, feed: Feed, k: int, ids: list[str], seats: int = 1) -> Any:
    return ok(proc.process([feed.signup(shard_key("gig", k), s, seats) for s in ids]))


def request(proc: StreamProcessor, feed: Feed, sid: str, kind: str, shards: int, seats=1) -> Any:
    k = shard_of(sid, shards)
    return ok(proc.process([feed.request(shard_key("gig", k), sid, kind, seats)]))


def statuses(store: SignupStore, shards: int, *ids: str) -> list[str | None]:
    return [status(store, shard_key("gig", shard_of(s, shards)), s) for s in ids]


# =====================================================================================
# FINDINGS
# =====================================================================================


def test_found_a_line_longer_than_the_retries_times_max_lapses_parks_its_shard(store, clock, feed):
    """A shard short of seats for its line parks when another shard's lapsed holds take
    more than ``max_conflicts`` bounded steps to lapse.

    30 seats over 2 shards (60 s holds): shard 1 holds all 30, 25 wait in shard 0. A minute
    later a signup reaches shard 0, decided by a processor lapsing at most 1 hold a step
    (``max_lapses=1``; the default is 1,000, and a journal too big halves it). Shard 0's
    step wants 26 seats for its line and the signup (``_wanted``); ``_secure`` finds shard
    1's lapsed hold and raises ``_LapsedElsewhere``; ``_decide_chunk`` ticks shard 1 with
    ONE call of ``_decide_chunk(shard, [tick])``, a step that lapses ``max_lapses`` holds
    and is ``partial`` (its ``consumed`` of 0, which ``_wake`` and ``_finish_stopped``
    loop on, is dropped here), counts a conflict and decides again: one seat more, still
    short, the next hold of shard 1 still lapsed, another tick... After ``max_conflicts``
    (20) rounds, each of which freed seats, ``_decide_chunk`` raises ``CommitConflictError
    ("20 conflicts in a row")``: the batch is parked (a wake-up fails, written again 5 s
    later), with 20 of shard 1's seats already free, for a reason that is only another
    shard's backlog. hot-events.md says the opposite: a short shard "decides without those
    seats rather than fail, or be parked, for another shard's trouble". At the defaults it
    takes a line (or a chunk) wanting more seats than 20 steps of another shard's lapses
    free (20,000 at ``max_lapses=1000``; far fewer once copied fields halve the lapses a
    journal holds), which a skewed drop with a long waitlist reaches; each retry of the
    parked batch then repeats the 20 rounds of reads and commits.
    Fix: in the ``_LapsedElsewhere`` handler, step each lapsed shard until its step is whole
    (``while not consumed: _, consumed = self._decide_chunk(shard, [tick], result)``, as
    ``_wake`` does; each partial step lapses at least one hold, so it ends), or do not
    count a round that freed seats against ``max_conflicts``."""
    store.create_event("gig", 30, T0, shards=2, waitlist=30, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    signups(proc, feed, 1, ids_in(1, 2, 30, "held"))
    line = ids_in(0, 2, 26, "line")
    signups(proc, feed, 0, line[:25])
    assert pool_of(store).waiting == 25
    clock.advance(61)
    bounded = StreamProcessor(store, clock=clock, max_lapses=1)
    result = bounded.process([feed.signup(shard_key("gig", 0), line[25])])
    # THEN the line and the signup take 26 of the 30 seats freed (the batch is parked)
    assert not result.parked_events and not result.failures, result.parked_events
    assert statuses(store, 2, *line) == [Status.HELD] * 26
    sound(store, 2, clock)


# =====================================================================================
# HELD
# =====================================================================================


@pytest.mark.parametrize("seed", [7])
def test_held_random_holds_lines_and_bounded_lapses(store, woken, seed):
    """Random signups of 1-3 seats over four shards with 60 s holds and a processor that
    lapses at most 1 or 2 holds a step (``max_lapses``) and decides chunks of 2; confirms,
    cancels, time passing, the due-holds job run at random moments, capacity raised and
    lowered to what is dealt, wake-ups delivered at random. After every step the pool
    counts exactly who waits; settled (due holds released, wake-ups delivered until none)
    nobody waits for seats that fit, the audit passes, and the wake-ups stop."""
    rnd = random.Random(seed)
    clock, feed = Clock(), woken.feed
    shards = 4
    store.create_event("gig", 5, T0, shards=shards, waitlist=6, hold_seconds=60)
    lapses = rnd.choice([1, 2])
    procs = [StreamProcessor(store, clock=clock, max_lapses=lapses, chunk_size=2) for _ in range(4)]
    known: dict[str, int] = {}
    for n in range(50):
        roll = rnd.random()
        if roll < 0.4 or not known:
            k = rnd.randrange(shards)
            ids = ids_in(k, shards, rnd.randint(1, 3), f"r{seed}-{n}-")
            seats = rnd.choice([1, 1, 2, 3])
            signups(procs[k], feed, k, ids, seats)
            known.update(dict.fromkeys(ids, seats))
        elif roll < 0.55:
            sid = rnd.choice(list(known))
            request(procs[shard_of(sid, shards)], feed, sid, RequestKind.CONFIRM, shards)
        elif roll < 0.7:
            sid = rnd.choice(list(known))
            k = shard_of(sid, shards)
            request(procs[k], feed, sid, RequestKind.CANCEL, shards, known[sid])
        elif roll < 0.82:
            clock.advance(rnd.choice([10, 30, 61]))
        elif roll < 0.9:
            release_due_holds(store, clock.ms)
        elif roll < 0.95:
            store.update_capacity("gig", pool_of(store).capacity + rnd.choice([1, 2]))
        else:
            store.update_capacity("gig", pool_of(store).dealt)
        if rnd.random() < 0.35:
            woken.deliver(procs[rnd.randrange(shards)])
        counted(store, shards)
        if rnd.random() < 0.1:
            woken.settle(store, procs[rnd.randrange(shards)], clock)
            sound(store, shards, clock)
    woken.settle(store, procs[0], clock)
    sound(store, shards, clock)
    # and again later: every hold lapsed, the lines took what fits
    clock.advance(61)
    woken.settle(store, procs[1], clock)
    sound(store, shards, clock)
    assert woken.settle(store, procs[2], clock) == 0


def test_held_holds_lapsing_in_three_shards_at_once_reach_two_lines(store, woken, clock, feed):
    """Four shards, 6 seats: holds in shards 1, 2 and 3 (two each), lines in shard 0 (of 1
    and 2 seats) and shard 3 (two of 1). The holds lapse together; the due-holds job wakes
    the three shards, each lapsing one hold a step (``max_lapses=1``), giving seats back and
    waking the lines.
    Every waiting signup is promoted into a hold of its own, the wake-ups stop (each shard
    woken a handful of times), and a second settling delivers nothing."""
    store.create_event("gig", 6, T0, shards=4, waitlist=5, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock, max_lapses=1)
    held = {k: ids_in(k, 4, 2, f"h{k}-") for k in (1, 2, 3)}
    for k, ids in held.items():
        signups(proc, feed, k, ids)
    clock.advance(30)
    line0 = ids_in(0, 4, 2, "w0-")
    signups(proc, feed, 0, line0[:1], seats=1)
    signups(proc, feed, 0, line0[1:], seats=2)
    line3 = ids_in(3, 4, 4, "w3-")[2:]
    signups(proc, feed, 3, line3, seats=1)
    assert pool_of(store).waiting == 4 and pool_of(store).waiters == {0, 3}
    woken.drop()
    clock.advance(31)
    assert len(list(due_events(store, clock.ms))) == 3
    woken.settle(store, proc, clock)
    assert statuses(store, 4, *line0, *line3) == [Status.HELD] * 4
    assert all(s == Status.EXPIRED for s in statuses(store, 4, *itertools.chain(*held.values())))
    # each commit giving a seat back wakes the lines it saw (and its own): 6 lapses, 2
    # lines, and the job's 3 wake-ups
    assert sum(woken.written.values()) <= 6 * 2 + 3, woken.written
    assert woken.settle(store, proc, clock) == 0
    sound(store, 4, clock)


def test_held_a_shard_waking_itself_stops_when_nothing_more_comes_back(store, woken, clock, feed):
    """The self-wake of 49c8e9c: a shard whose commit gives seats back while its own line
    still waits wakes itself. A 3-seat signup waits in shard 0 beside three 1-seat holds of
    its own shard (one confirmed) and one in shard 1; the holds lapse one a step
    (``max_lapses=1``): each commit that gives a seat back with the line still there writes
    a wake-up of its own shard. The tick it wakes gives nothing back, so writes none: the
    wake-ups stop, and the 3-seat signup is promoted once shard 1's seat is free too."""
    store.create_event("gig", 4, T0, shards=2, waitlist=4, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock, max_lapses=1)
    k0 = shard_key("gig", 0)
    held = ids_in(0, 2, 3, "held")
    signups(proc, feed, 0, held)
    other = ids_in(1, 2, 1, "other")
    signups(proc, feed, 1, other)
    big = ids_in(0, 2, 4, "held")[3]
    signups(proc, feed, 0, [big], seats=3)
    assert status(store, k0, big) == Status.WAITLISTED
    request(proc, feed, held[0], RequestKind.CONFIRM, 2)
    woken.drop()
    clock.advance(61)
    delivered = woken.settle(store, proc, clock)
    assert delivered <= 8 and woken.written[k0] <= 5, woken.written
    assert statuses(store, 2, *held, big, *other) == [
        Status.ACCEPTED,
        Status.EXPIRED,
        Status.EXPIRED,
        Status.HELD,
        Status.EXPIRED,
    ]
    assert woken.settle(store, proc, clock) == 0
    sound(store, 2, clock)


def test_held_a_line_that_can_never_fit_is_woken_once_per_seat_given_back(
    store, woken, clock, feed
):
    """A 3-seat signup waits in shard 0 of an event of 3 seats, one of which shard 1 gave
    for good: it can never fit. Shard 0's own seats come and go (signups, cancels, holds
    lapsing): each commit giving one back wakes shard 0 itself, exactly once; delivering
    that wake-up writes no other (the tick gives nothing back), and no seat is taken from
    shard 1 for a signup that cannot fit."""
    store.create_event("gig", 3, T0, shards=2, waitlist=4, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    forever = ids_in(1, 2, 1, "forever")[0]
    signups(proc, feed, 1, [forever])
    request(proc, feed, forever, RequestKind.CONFIRM, 2)
    big = ids_in(0, 2, 1, "big")[0]
    seats = ids_in(0, 2, 8, "churn")
    signups(proc, feed, 0, seats[:2])
    signups(proc, feed, 0, [big], seats=3)
    assert status(store, k0, big) == Status.WAITLISTED
    for n in range(3):
        woken.drop()
        if n == 0:
            request(proc, feed, seats[0], RequestKind.CANCEL, 2)
        elif n == 1:
            clock.advance(61)  # seats[1]'s hold lapses on the next step
            ok(proc.process([feed.wake(k0)]))
        else:
            signups(proc, feed, 0, seats[2 + n : 3 + n])
            request(proc, feed, seats[2 + n], RequestKind.CANCEL, 2)
        assert woken.new() and woken.written[k0] == 1, woken.written
        woken.written.clear()
        ok(proc.process([feed.wake(k0)]))
        assert woken.new() == [], woken.written
        assert status(store, k0, big) == Status.WAITLISTED
        assert Escrow(store).share("gig", 1).quota == 1  # nothing taken for big
        sound(store, 2, clock)
    assert status(store, k1, forever) == Status.ACCEPTED


@pytest.mark.parametrize("confirm_first", [False, True])
def test_held_a_confirm_racing_another_shards_promotion_of_its_seat(
    store, feed, monkeypatch, confirm_first
):
    """Shard 1 holds the last seat; shard 0 has one waiting. Shard 1's processor, its clock
    a second before the hold lapses, decides the hold's confirm; before it commits, shard
    0's processor (its clock past the lapse) gets a signup, is short, ticks shard 1 (the
    hold lapses) and promotes its waiting signup into the seat. Shard 1's commit conflicts
    and decides again from the lapsed hold: the confirm is refused ``hold_expired``; the
    seat was given once. And the other way round: the confirm lands first, the tick finds
    no lapsed hold, the waiting signup keeps waiting and the new one waits behind it."""
    store.create_event("gig", 1, T0, shards=2, waitlist=3, hold_seconds=60)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    clock, early = Clock(), Clock()
    p0, p1 = StreamProcessor(store, clock=clock), StreamProcessor(store, clock=early)
    holder = ids_in(1, 2, 1, "holder")[0]
    ok(p1.process([feed.signup(k1, holder)]))
    waiter, late = ids_in(0, 2, 2, "waits")
    ok(p0.process([feed.signup(k0, waiter)]))
    clock.advance(61)
    early.advance(59)
    commit = store.commit
    raced: list[int] = []

    def tick_first(expected: Any, *args: Any, **kwargs: Any) -> Any:
        if expected.event_id == k1 and not raced:
            raced.append(1)
            ok(p0.process([feed.signup(k0, late)]))
        return commit(expected, *args, **kwargs)

    if confirm_first:
        ok(p1.process([feed.request(k1, holder, RequestKind.CONFIRM)]))
        ok(p0.process([feed.signup(k0, late)]))
    else:
        monkeypatch.setattr(store, "commit", tick_first)
        assert ok(p1.process([feed.request(k1, holder, RequestKind.CONFIRM)])).conflicts
        monkeypatch.setattr(store, "commit", commit)
    got = [status(store, k1, holder), status(store, k0, waiter), status(store, k0, late)]
    if confirm_first:
        assert got == [Status.ACCEPTED, Status.WAITLISTED, Status.WAITLISTED]
    else:
        assert got == [Status.EXPIRED, Status.HELD, Status.WAITLISTED]
        last = store.get_decision(k1, holder)[Attr.LAST_REFUSAL]
        assert "hold_expired" in str(last), last
    sound(store, 2, clock)


def test_held_multi_seat_lines_in_three_shards_fed_seat_by_seat(store, woken, clock, feed):
    """Lines in three shards of 3, 2 and 1 seats; the event's 6 seats held in shard 3 in
    1-seat holds lapsing 5 s apart, the due-holds job every 5 s: after every
    lapse, once settled, nobody waits whose seats fit what is free (a 1-seat signup is not
    kept waiting behind a 3-seat one in another shard, nor a 3-seat one left beside 3 free
    seats spread over shards)."""
    store.create_event("gig", 6, T0, shards=4, waitlist=6, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    holders = ids_in(3, 4, 6, "hold")
    for sid in holders:
        signups(proc, feed, 3, [sid])
        clock.advance(5)
    lines = {k: (ids_in(k, 4, 2, f"w{k}-"), 3 - k) for k in (0, 1, 2)}
    for k, (ids, seats) in lines.items():
        signups(proc, feed, k, ids, seats)
    assert pool_of(store).waiting == 6
    woken.drop()
    clock.advance(30)  # the first hold is due at 60 s, then one every 5 s
    for _ in range(8):
        clock.advance(5)
        woken.settle(store, proc, clock)
        sound(store, 4, clock)
    assert woken.settle(store, proc, clock) == 0


def hex_ids_in(shard: int, shards: int, count: int, prefix: str) -> list[str]:
    """``count`` ids of shard ``shard`` that compress as badly as uuids do."""
    found = (hashlib.sha1(f"{prefix}{i}".encode()).hexdigest() for i in itertools.count())
    return list(itertools.islice((s for s in found if shard_of(s, shards) == shard), count))


def test_held_a_paged_line_fed_from_other_shards_in_bounded_steps(store, woken, clock, feed):
    """A line of 330 in shard 0 (uuid-like ids: past ``INLINE_BYTES``, its lineup is in
    pages), decided in chunks of 40; shards 1 and 2 hold the event's 6 seats. Seats come
    back from the other shards (two cancels, then their holds lapsing), waiting signups in
    the middle pages cancel, and the capacity is raised by 40 for a processor promoting 7
    a step: each seat goes to the line's head in arrival order, the pool counts the line
    exactly after every batch, and the lineup stays paged and agrees with the items."""
    store.create_event("gig", 6, T0, shards=3, waitlist=400, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock, chunk_size=40, max_lapses=7)
    k0 = shard_key("gig", 0)
    holders = {k: hex_ids_in(k, 3, 3, f"h{k}") for k in (1, 2)}
    for k, ids in holders.items():
        signups(proc, feed, k, ids)
    clock.advance(10)
    line = hex_ids_in(0, 3, 330, "line")
    ok(proc.process([feed.signup(k0, s) for s in line]))
    assert store.get_event(k0).pages is not None
    counted(store, 3)
    woken.drop()
    for sid in holders[1][:2]:
        request(proc, feed, sid, RequestKind.CANCEL, 3)
    gone = [line[100], line[200], line[201], line[329]]
    for sid in gone:
        request(proc, feed, sid, RequestKind.CANCEL, 3)
    woken.settle(store, proc, clock)
    counted(store, 3)
    store.update_capacity("gig", 46)
    woken.settle(store, proc, clock)
    counted(store, 3)
    clock.advance(51)  # the other shards' four holds lapse; the line's do not yet
    woken.settle(store, proc, clock)
    left = [s for s in line if s not in gone]
    seated = 2 + 40 + 4
    assert statuses(store, 3, *left[:seated]) == [Status.HELD] * seated
    assert set(statuses(store, 3, *left[seated:])) == {Status.WAITLISTED}
    assert set(statuses(store, 3, *gone)) == {Status.CANCELLED}
    lineup = store.load_lineup(store.get_event(k0)).event
    assert [w.signup_id for w in lineup.waiting] == left[seated:]
    assert len(lineup.holds) == seated and store.get_event(k0).pages is not None
    sound(store, 3, clock)


def test_held_a_bounded_close_over_three_lines_with_capacity_changes_midway(
    store, woken, clock, feed, monkeypatch
):
    """Lines of 3, 4 and 4 in three shards; the event closes, and a processor rejecting 2
    a step (``max_lapses=2``) works through them over several commits of each shard. Between
    those commits the organizer raises the capacity by 3, then lowers it to what is dealt.
    After every commit the pool counts exactly who still waits; in the end nobody waits,
    the pool names no shard, nobody was promoted into the seats added, and no seat was
    drawn for a closed event."""
    store.create_event("gig", 2, T0, shards=3, waitlist=12)
    proc = StreamProcessor(store, clock=clock, max_lapses=2)
    signups(proc, feed, 0, ids_in(0, 3, 2, "seated"))
    lines = {0: ids_in(0, 3, 5, "seated")[2:], 1: ids_in(1, 3, 4, "w1-"), 2: ids_in(2, 3, 4, "w2-")}
    for k, ids in lines.items():
        signups(proc, feed, k, ids)
    assert pool_of(store).waiting == 11
    dealt = pool_of(store).dealt
    store.close_event("gig")
    materialize = store.materialize
    commits: list[int] = []

    def organizer_midway(*args: Any, **kwargs: Any) -> Any:
        voids = materialize(*args, **kwargs)  # a commit, its items written
        commits.append(1)
        with as_user():  # the organizer (and the test's look), between two commits
            counted(store, 3)
            if len(commits) == 2:
                store.update_capacity("gig", pool_of(store).capacity + 3)
            elif len(commits) == 4:
                store.update_capacity("gig", pool_of(store).dealt)
        return voids

    monkeypatch.setattr(store, "materialize", organizer_midway)
    woken.settle(store, proc, clock)
    monkeypatch.setattr(store, "materialize", materialize)
    assert len(commits) >= 6
    pool = pool_of(store)
    assert pool.waiting == 0 and pool.waiters == frozenset() and pool.dealt == dealt
    everyone = list(itertools.chain(*lines.values()))
    assert set(statuses(store, 3, *everyone)) == {Status.REJECTED}
    assert {reason(store, shard_key("gig", shard_of(s, 3)), s) for s in everyone} == {
        Reason.EVENT_CLOSED
    }
    sound(store, 3, clock)


# -- operators and odd keys -------------------------------------------------------------


def _tamper(store: SignupStore, expression: str, values: dict | None = None, **names: str) -> None:
    kwargs: dict[str, Any] = {"ExpressionAttributeNames": names}
    if values:
        kwargs["ExpressionAttributeValues"] = values
    store.dynamo.call(
        "update_item",
        TableName=store.control_table,
        Key=event_key("gig"),
        UpdateExpression=expression,
        **kwargs,
    )


def _one_waiting(store: SignupStore, proc: StreamProcessor, feed: Feed) -> tuple[str, str]:
    """1 seat over 2 shards, given in shard 1; one signup waiting in shard 0."""
    store.create_event("gig", 1, T0, shards=2, waitlist=4)
    seated = ids_in(1, 2, 1, "seated")[0]
    signups(proc, feed, 1, [seated])
    c = ids_in(0, 2, 1, "waits")[0]
    signups(proc, feed, 0, [c])
    return seated, c


def test_held_a_pool_naming_a_shard_the_event_lacks_wakes_nothing_real(store, woken, clock, feed):
    """An operator adds shard 5 to a 2-shard event's ``waiters``. A seat given back in
    shard 1 wakes shard 0 and no ``gig#05`` (a number past the event's shards is never
    woken; once it was, and that wake-up found no event item), shard 0's signup gets the
    seat, nothing is oversold; the audit keeps naming the pool's wrong shard, which no
    commit removes."""
    proc = StreamProcessor(store, clock=clock)
    seated, c = _one_waiting(store, proc, feed)
    _tamper(store, "ADD #w :x", {":x": {"NS": ["5"]}}, **{"#w": Attr.WAITERS})
    woken.drop()
    request(proc, feed, seated, RequestKind.CANCEL, 2)
    woken.settle(store, proc, clock)
    assert woken.written["gig#05"] == 0
    assert store.get_event("gig#05") is None
    assert status(store, shard_key("gig", 0), c) == Status.ACCEPTED
    assert_never_oversold(store, "gig", 2)
    assert pool_of(store).waiters == {5} and pool_of(store).waiting == 0
    report = audit(
        store, "gig", pending_grace_s=0, now=datetime.fromtimestamp(clock.ms / 1000, UTC)
    )
    assert any("pool names [5]" in v for e in report.events for v in e.violations)


def test_held_a_pool_naming_shard_40_wakes_only_the_shards_there_are(store, woken, clock, feed):
    """An operator adds shard 40 (past ``MAX_SHARDS``) to ``waiters``: the cancel in shard
    1 that gives a seat back wakes shard 0, where someone waits, and no shard 40 (once, the
    shard parked: ``shard_key`` refuses 40); the waiting signup gets the seat."""
    proc = StreamProcessor(store, clock=clock)
    seated, c = _one_waiting(store, proc, feed)
    _tamper(store, "ADD #w :x", {":x": {"NS": ["40"]}}, **{"#w": Attr.WAITERS})
    k1 = shard_key("gig", 1)
    woken.drop()
    result = proc.process([feed.request(k1, seated, RequestKind.CANCEL)])
    assert not result.parked_events and not result.failures, result
    woken.settle(store, proc, clock)
    assert status(store, k1, seated) == Status.CANCELLED
    assert status(store, shard_key("gig", 0), c) == Status.ACCEPTED
    _tamper(store, "DELETE #w :x", {":x": {"NS": ["40"]}}, **{"#w": Attr.WAITERS})
    sound(store, 2, clock)


def test_held_a_pool_without_its_waitlist_lets_nobody_more_wait(store, woken, clock, feed):
    """An operator removes ``waitlist`` from the pool (the shards keep theirs): the pool
    has no places, so later signups are refused ``capacity_full`` instead of waiting; the
    one already waiting is still counted, and a seat given back still reaches it."""
    proc = StreamProcessor(store, clock=clock)
    seated, c = _one_waiting(store, proc, feed)
    _tamper(store, "REMOVE #w", **{"#w": Attr.WAITLIST})
    late = ids_in(0, 2, 3, "waits")[1:] + ids_in(1, 2, 2, "late")
    for sid in late:
        signups(proc, feed, shard_of(sid, 2), [sid])
    assert [reason(store, shard_key("gig", shard_of(s, 2)), s) for s in late] == [
        Reason.CAPACITY_FULL
    ] * 4
    assert pool_of(store).waiting == 1
    woken.drop()
    request(proc, feed, seated, RequestKind.CANCEL, 2)
    woken.settle(store, proc, clock)
    assert status(store, shard_key("gig", 0), c) == Status.ACCEPTED
    assert pool_of(store).waiting == 0 and not pool_of(store).waiters
    assert_never_oversold(store, "gig", 2)


def test_held_records_under_a_shard_the_event_lacks(store, woken, clock, feed):
    """Under ``gig#05`` of a 2-shard event with someone waiting: a signup (rejected
    ``unknown_event``), a cancel and a confirm of the waiting signup (refused: no such
    signup there), a wake-up (ignored). Nothing is written under the key but the
    rejection, the pool and the line are as they were."""
    proc = StreamProcessor(store, clock=clock)
    _, c = _one_waiting(store, proc, feed)
    before = (pool_of(store), Escrow(store).snapshot("gig", 2))
    bad = "gig#05"
    ok(proc.process([feed.signup(bad, "stray")]))
    ok(proc.process([feed.request(bad, c, RequestKind.CANCEL)]))
    ok(proc.process([feed.request(bad, c, RequestKind.CONFIRM)]))
    ok(proc.process([feed.wake(bad)]))
    assert reason(store, bad, "stray") == Reason.UNKNOWN_EVENT
    assert store.get_event(bad) is None
    assert (pool_of(store), Escrow(store).snapshot("gig", 2)) == before
    assert status(store, shard_key("gig", 0), c) == Status.WAITLISTED
    woken.settle(store, proc, clock)
    sound(store, 2, clock)

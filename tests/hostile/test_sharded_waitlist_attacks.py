"""Attacks on waitlists of sharded events (commit 14f01bf): a reviewer's tests, on moto.

FOUND AND FIXED (each ``test_found_*`` failed on 14f01bf, and passes with its fix):

* a void first decision taken back (``StreamProcessor._take_back``: an INSERT decided
  unread whose REMOVE was lost) gives its seat back in a commit made without the pool:
  no shard where someone waits is woken, and nothing else ever steps them, so a signup
  waits for good while a seat is free
  (``test_found_a_void_seat_taken_back_never_reaches_another_shards_line``); the take-back
  now commits with the pool and wakes as any commit that gives seats back does;
* a capacity raise wakes the shards only when the capacity read was lower: when a wake-up
  of a shard fails after the raise is written, the organizer's retry (the same capacity)
  wakes the pool's key alone, and the shards' lines never see the seats
  (``test_found_a_retried_capacity_raise_wakes_no_shard``). An unsharded event's retry
  does wake it, and a close's retry wakes every shard (``_wake_all``); now every raise
  (every successful capacity change) of a sharded event with a waitlist wakes its shards;
* two shards each with a lapsed hold and someone still waiting after their own step tick
  each other without end: the tick of a shard with a line now secures seats for it, finds
  the other shard's lapsed hold (whose step is the one under way, not committed yet) and
  ticks it, which does the same; every nested ``_decide_chunk`` starts a fresh
  ``_unsteppable`` set, so nothing stops it short of Python's recursion limit (1,800 steps,
  900 conflicts in one batch on moto)
  (``test_found_two_shards_with_lines_and_lapsed_holds_tick_each_other_without_end``);
  now a nested step inherits the shards on the stack above it, which it never steps.

HELD (``test_held_*``: they pass): the bound over eight shards that all decided from one
pool read; promotions, cancels of waiting and seated signups and a close keeping the
pool's count; a batch replayed to cold processors; a crash between a waitlisting commit
and its items; two processors of one shard interleaved; hostile records (seats above the
capacity, 0 and negative seats, records under another shard's key and under the pool's,
a cancel or a confirm of a waiting signup under another shard's key); a hold lapsing in
one shard reaching a line in another through the due-holds job, and a shard with a line
ticking another whose hold lapsed; cancels and closes moved in bounded steps
(``max_lapses=2``); capacity raised and
lowered around waiting lines (and a raise between a shard's pool read and its commit); a
close racing a promotion and a close landing between a shard's read and its commit; a
parked shard holding a cancel, and a wake-up whose step fails; a two-seat waiter whose
seats come back one in each of two shards; a void waitlisted decision taken back; random
signups and cancels over eight shards with a small capacity.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.helpers import ids_in
from tests.hostile.test_sharded_attacks import (
    Clock,
    Feed,
    assert_never_oversold,
    deliver_wakes,
    escrow,
    ok,
    reason,
    status,
)
from tests.roles import as_user
from turnstile.base.clock import ms_of
from turnstile.base.contract import Attr, Reason, RequestKind, Status, shard_key, shard_of
from turnstile.engine.escrow import Pool
from turnstile.jobs.due_holds import release_due_holds
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


# -- checks ---------------------------------------------------------------------------


def pool_of(store: SignupStore) -> Pool:
    pool = Escrow(store).pool("gig")
    assert pool is not None
    return pool


def lines(store: SignupStore, shards: int) -> dict[int, int]:
    """WAITLISTED decision items per shard."""
    return {
        k: sum(
            1
            for item in store.decision_items(shard_key("gig", k))
            if item.get(Attr.STATUS) == Status.WAITLISTED
        )
        for k in range(shards)
    }


def audit_at(store: SignupStore, clock: Clock) -> list[tuple[str, list[str]]]:
    """The audit's violations, a second after ``clock`` (so everything is still, and a
    hold not yet due by the processor's clock is not judged past its expiry)."""
    now = datetime.fromtimestamp(clock.ms / 1000 + 1, UTC)
    report = audit(store, "gig", pending_grace_s=0, now=now)
    return [(e.event_id, e.violations) for e in report.events if e.violations]


def assert_sound(store: SignupStore, shards: int, clock: Clock) -> None:
    """Never oversold; the pool counts exactly the WAITLISTED items, within the waitlist,
    and names exactly the shards with someone waiting; the audit passes."""
    assert_never_oversold(store, "gig", shards)
    pool = pool_of(store)
    rows = lines(store, shards)
    assert pool.waiting == sum(rows.values()) <= pool.waitlist, (pool, rows)
    assert pool.waiters == {k for k, n in rows.items() if n}, (pool, rows)
    assert audit_at(store, clock) == []


def settle(
    store: SignupStore, proc: StreamProcessor, wakes: Any, feed: Feed, clock: Clock, holds: bool
) -> None:
    """Every wake-up delivered, and those they write, until none is left (with holds, the
    clock moves past every hold and the due-holds job runs each round)."""
    for _ in range(20):
        if holds:
            clock.advance(61)
            release_due_holds(store, ms_of(clock()))
        before = feed.seq
        deliver_wakes(proc, wakes, feed)
        if feed.seq == before:
            return
    raise AssertionError("wake-ups kept coming")


def signups(proc: StreamProcessor, feed: Feed, k: int, ids: list[str], seats: int = 1) -> Any:
    return ok(proc.process([feed.signup(shard_key("gig", k), s, seats) for s in ids]))


# =====================================================================================
# FINDINGS
# =====================================================================================


def test_found_a_void_seat_taken_back_never_reaches_another_shards_line(store, feed, clock, wakes):
    """A seat freed by taking back a void first decision never reaches a line elsewhere.

    2 seats over 2 shards, both given in shard 1 (a, d); c waits in shard 0. Shard 1 then
    gets a batch: d cancels, and a's INSERT comes again (its intake item was deleted and
    put again, the REMOVE lost). a is decided unread as a new signup and takes d's seat,
    so the commit's ``taken`` does not go down: no wake-up (right: no seat is left).
    ``materialize`` then finds a's item holding its first decision: the new one is void,
    and ``StreamProcessor._take_back`` commits a tick with the void seat given back
    (``without_void``). That commit is ``store.commit(record.event, outcome, now, {},
    expires_at)``: no ``pool`` and no ``wake``, so shard 0, which the pool names in
    ``waiters``, is not woken (and the commit is not conditioned on ``waiters_joined``).
    Shard 1 has no line of its own, nothing else steps shard 0: c waits for good with a
    seat free, and the audit says undersold. The same cancel without the void wakes shard 0
    (``test_a_seat_given_back_in_a_shard_with_nobody_waiting_reaches_another_shards_line``).
    Fix: ``_take_back`` reads the pool like ``_try_chunk`` (``_pool_of``) and passes
    ``pool=`` and the ``wake`` list computed as there."""
    store.create_event("gig", 2, T0, shards=2, waitlist=4)
    zero, one = StreamProcessor(store, clock=clock), StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    a, d = ids_in(1, 2, 2, "seated")
    signups(one, feed, 1, [a, d])
    c = ids_in(0, 2, 1, "waits")[0]
    signups(zero, feed, 0, [c])
    assert status(store, k0, c) == Status.WAITLISTED
    wakes.read_new()
    # WHEN d cancels and a's INSERT comes again in one batch (to a cold processor)
    batch = [feed.request(k1, d, RequestKind.CANCEL), feed.signup(k1, a)]
    ok(StreamProcessor(store, clock=clock).process(batch))
    assert status(store, k1, d) == Status.CANCELLED
    assert status(store, k1, a) == Status.ACCEPTED
    assert escrow(store, "gig", 2)[2] == [(0, 0), (2, 1)]  # the void seat was given back
    settle(store, zero, wakes, feed, clock, holds=False)
    # THEN c got the seat d gave back (it did not)
    assert status(store, k0, c) == Status.ACCEPTED
    assert_sound(store, 2, clock)


def test_found_a_retried_capacity_raise_wakes_no_shard(store, feed, clock, wakes, monkeypatch):
    """A capacity raise whose wake-ups fail part way is never made up by its retry.

    ``EventItems.update_capacity`` writes the new capacity, then wakes the pool's key, then
    each shard ``if current.shards > 1 and event.waitlist > 0 and capacity >
    event.capacity``, one ``update_item`` each, outside the capacity's write. When a shard's
    wake-up fails (throttled past the retries, the API's Lambda timing out), the organizer
    gets a 5xx and retries the same PUT: the capacity read is now the new one, so the
    retry wakes the pool's key alone (which decides nothing). The shard where signups
    wait is never stepped: they wait while the seats added are free, and the audit says
    undersold. An unsharded event is woken by every call (the same failure heals on the
    retry, checked first below), and a close's retry wakes every shard (``_wake_all``,
    "closed already: maybe by a call that failed before its wake-up"). Fix: wake the
    shards on every successful call (a raise or the same capacity), or write their
    wake-ups in the capacity's own transaction."""
    store.create_event("solo", 1, T0, waitlist=4)
    store.create_event("gig", 1, T0, shards=2, waitlist=4)
    proc = StreamProcessor(store, clock=clock)
    k0 = shard_key("gig", 0)
    ok(proc.process([feed.signup("solo", "first"), feed.signup("solo", "second")]))
    signups(proc, feed, 1, ids_in(1, 2, 1, "seated"))
    c = ids_in(0, 2, 1, "waits")[0]
    signups(proc, feed, 0, [c])
    assert status(store, "solo", "second") == status(store, k0, c) == Status.WAITLISTED
    wakes.read_new()
    real = store.wake
    failed: list[str] = []

    def throttled_once(event_id: str, why: str, now: str | None = None) -> None:
        if event_id in ("solo", k0) and event_id not in failed:
            failed.append(event_id)
            raise RuntimeError("ProvisionedThroughputExceededException, past every retry")
        real(event_id, why, now)

    monkeypatch.setattr(store, "wake", throttled_once)
    for event_id in ("solo", "gig"):
        with pytest.raises(RuntimeError):
            store.update_capacity(event_id, 2)
        store.update_capacity(event_id, 2)  # the organizer's retry
    settle(store, proc, wakes, feed, clock, holds=False)
    assert status(store, "solo", "second") == Status.ACCEPTED  # unsharded: the retry woke it
    # THEN the sharded event's waiting signup got the seat added (it did not)
    assert status(store, k0, c) == Status.ACCEPTED
    assert_sound(store, 2, clock)


class _Runaway(BaseException):
    """Stops a processor whose steps nest past any reason (not an Exception: the
    processor's handlers would take it as a failed step and go on)."""


def test_found_two_shards_with_lines_and_lapsed_holds_tick_each_other_without_end(
    store, feed, clock, monkeypatch
):
    """Two shards, each with a lapsed hold and two waiting: one batch nests without end.

    2 seats over 2 shards (holds of 60 s), one hold in each shard, two waiting in each. A
    minute later a signup reaches shard 0. Its step lapses its own hold, promotes its first
    waiter, and still has a line: ``_wanted`` asks ``_secure`` for seats for it, the
    snapshot shows shard 1's lapsed hold, and ``_LapsedElsewhere`` has shard 0 tick shard 1
    (``_decide_chunk(shard, [tick])``). New in 14f01bf, a tick of a shard with a line
    secures seats too: shard 1's tick lapses its hold, still has a line, and finds shard
    0's hold lapsed (its step is the one under way: not committed), so it ticks shard 0,
    whose tick ticks shard 1 again... Each nested ``_decide_chunk`` installs a fresh
    ``unsteppable`` set (``outer, self._unsteppable = self._unsteppable, unsteppable``), so
    the shards on the stack are never excluded. On 14f01bf this runs to Python's recursion
    limit: about 1,800 nested steps and 900 conflicts in one batch, each step reading the
    shard, its decisions, the pool, its share and a snapshot; the ``RecursionError`` is
    then taken as a failed step (``unsteppable``) and the stack unwinds to commits that
    happen to be right. Against DynamoDB that is thousands of reads in one invocation,
    past a Lambda's timeout, and the batch is retried into the same loop. Without a line,
    a tick asks for nothing (the no-waitlist case of
    ``test_held_two_shards_each_with_lapsed_holds_both_short_give_every_seat``). Fix: keep
    the shards being stepped on the stack in ``_unsteppable`` for nested steps (or have a
    tick made for another shard not chase holds elsewhere)."""
    store.create_event("gig", 2, T0, shards=2, waitlist=6, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    ids = {k: ids_in(k, 2, 3, f"s{k}-") for k in (0, 1)}
    for k in (0, 1):
        signups(proc, feed, k, ids[k][:1])
    for k in (0, 1):
        signups(proc, feed, k, ids[k][1:])
    assert pool_of(store).waiting == 4
    clock.advance(61)
    steps = {"n": 0}
    real = proc._try_chunk

    def counted(*args: Any, **kwargs: Any) -> Any:
        steps["n"] += 1
        if steps["n"] > 40:
            raise _Runaway(f"{steps['n']} nested steps for one record")
        return real(*args, **kwargs)

    monkeypatch.setattr(proc, "_try_chunk", counted)
    late = ids_in(0, 2, 4, "late")[3]
    try:
        result = proc.process([feed.signup(shard_key("gig", 0), late)])
    except _Runaway:
        result = None
    # THEN one signup takes a handful of steps (each shard's hold lapses once)
    assert result is not None, f"{steps['n']} steps and counting"
    ok(result)
    assert result.conflicts < 10
    for k in (0, 1):
        assert status(store, shard_key("gig", k), ids[k][1]) == Status.HELD
    assert_sound(store, 2, clock)


# =====================================================================================
# HELD
# =====================================================================================


def test_held_the_bound_over_eight_shards_all_deciding_from_one_pool_read(store, feed, clock):
    """Eight shards, the event full, a waitlist of 3: each shard decides two signups from
    the pool as read before any of them committed (3 places). The pool's condition
    (``waiting <= waitlist - added``) refuses every commit past the bound; each decides
    again from a fresh read. 3 wait in all, the rest are refused ``capacity_full``."""
    store.create_event("gig", 2, T0, shards=8, waitlist=3)
    procs = [StreamProcessor(store, clock=clock) for _ in range(8)]
    signups(procs[0], feed, 0, ids_in(0, 8, 2, "seated"))
    stale = pool_of(store)
    assert stale.places == 3
    for proc in procs:
        first = {"stale": True}
        fresh = proc._pool_of

        def once_stale(*args: Any, _first: dict = first, _fresh: Any = fresh) -> Pool | None:
            if _first["stale"]:
                _first["stale"] = False
                return stale
            return _fresh(*args)

        proc._pool_of = once_stale  # type: ignore[method-assign]
    got = []
    for k in range(8):
        ids = ids_in(k, 8, 4, f"w{k}-")[2:]
        signups(procs[k], feed, k, ids)
        got += [
            (status(store, shard_key("gig", k), s), reason(store, shard_key("gig", k), s))
            for s in ids
        ]
    assert sum(1 for s, _ in got if s == Status.WAITLISTED) == 3
    assert all(r == Reason.CAPACITY_FULL for s, r in got if s == Status.REJECTED)
    assert_sound(store, 8, clock)


def test_held_promotions_cancels_and_a_close_keep_the_pools_count(store, feed, clock, wakes):
    """Lines in three shards; a waiting signup cancels (its line shrinks), a seated one in a
    shard with no line cancels (its seat reaches a line elsewhere by a wake-up), a waiting
    one cancels twice; then the event closes and every line is rejected ``event_closed``.
    The pool counts exactly the WAITLISTED items after every step."""
    store.create_event("gig", 3, T0, shards=4, waitlist=6)
    proc = StreamProcessor(store, clock=clock)
    seated = ids_in(3, 4, 3, "seated")
    signups(proc, feed, 3, seated)
    waiting = {k: ids_in(k, 4, 2, f"w{k}-") for k in (0, 1, 2)}
    for k in (0, 1, 2):
        signups(proc, feed, k, waiting[k])
    assert pool_of(store).waiting == 6
    settle(store, proc, wakes, feed, clock, holds=False)
    assert_sound(store, 4, clock)
    ok(proc.process([feed.request(shard_key("gig", 1), waiting[1][0], RequestKind.CANCEL)]))
    assert_sound(store, 4, clock)
    ok(proc.process([feed.request(shard_key("gig", 3), seated[0], RequestKind.CANCEL)]))
    settle(store, proc, wakes, feed, clock, holds=False)
    promoted = [
        s
        for k in (0, 1, 2)
        for s in waiting[k]
        if status(store, shard_key("gig", k), s) == Status.ACCEPTED
    ]
    assert len(promoted) == 1
    assert_sound(store, 4, clock)
    twice = waiting[2][1]
    for _ in range(2):
        ok(proc.process([feed.request(shard_key("gig", 2), twice, RequestKind.CANCEL)]))
    assert status(store, shard_key("gig", 2), twice) == Status.CANCELLED
    assert_sound(store, 4, clock)
    store.close_event("gig")
    settle(store, proc, wakes, feed, clock, holds=False)
    assert pool_of(store).waiting == 0 and not pool_of(store).waiters
    assert_sound(store, 4, clock)


@pytest.mark.parametrize("big_in", [0, 1])
def test_held_bounded_steps_of_a_cancel_and_a_close_keep_the_count(
    store, feed, clock, wakes, big_in
):
    """A processor moving at most 2 signups a step (``max_lapses=2``): a cancel of 5 seats
    (in the shard with the line, or in the other) promotes 5 waiting in steps of 2 (each
    commit counts its promotions; one that gives seats back with a line left wakes the
    other shards), then a close rejects a line of 6 in steps of 2. The pool counts exactly
    the items after each batch."""
    store.create_event("gig", 5, T0, shards=2, waitlist=12)
    proc = StreamProcessor(store, clock=clock, max_lapses=2)
    big = ids_in(big_in, 2, 1, "big")[0]
    signups(proc, feed, big_in, [big], seats=5)
    queued = ids_in(0, 2, 11, "queued")
    signups(proc, feed, 0, queued)
    assert pool_of(store).waiting == 11
    ok(proc.process([feed.request(shard_key("gig", big_in), big, RequestKind.CANCEL)]))
    settle(store, proc, wakes, feed, clock, holds=False)
    got = [status(store, shard_key("gig", 0), s) for s in queued]
    assert got == [Status.ACCEPTED] * 5 + [Status.WAITLISTED] * 6
    assert_sound(store, 2, clock)
    store.close_event("gig")
    settle(store, proc, wakes, feed, clock, holds=False)
    assert pool_of(store).waiting == 0
    assert_sound(store, 2, clock)


def test_held_a_batch_replayed_to_cold_processors_counts_its_line_once(store, feed, clock):
    """A batch that waits three signups and promotes none, delivered three times (to a
    warm processor, then to cold ones): decided once, counted once."""
    store.create_event("gig", 1, T0, shards=2, waitlist=5)
    proc = StreamProcessor(store, clock=clock)
    signups(proc, feed, 1, ids_in(1, 2, 1, "seated"))
    batch = [feed.signup(shard_key("gig", 0), s) for s in ids_in(0, 2, 3, "w")]
    ok(proc.process(batch))
    before = pool_of(store)
    for again in (proc, StreamProcessor(store, clock=clock), StreamProcessor(store, clock=clock)):
        assert not ok(again.process(batch)).decided
    assert pool_of(store) == before and before.waiting == 3
    assert_sound(store, 2, clock)


def test_held_a_crash_between_a_waitlisting_commit_and_its_items(
    store, feed, clock, wakes, monkeypatch
):
    """``materialize`` raises once after a commit that waited two signups: the pool
    counted them in the commit, their items are not written and the shard is parked. The
    batch redelivered to a cold processor and the parked shard's release write them once;
    the pool and the items agree, nothing counted twice."""
    store.create_event("gig", 1, T0, shards=2, waitlist=5)
    proc = StreamProcessor(store, clock=clock)
    signups(proc, feed, 1, ids_in(1, 2, 1, "seated"))
    real = store.materialize
    crashed: list[int] = []

    def crash_once(*args: Any, **kwargs: Any) -> Any:
        if not crashed:
            crashed.append(1)
            raise RuntimeError("killed after the commit")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "materialize", crash_once)
    ids = ids_in(0, 2, 2, "w")
    batch = [feed.signup(shard_key("gig", 0), s) for s in ids]
    assert proc.process(batch).parked_events
    assert pool_of(store).waiting == 2 and lines(store, 2)[0] == 0  # counted, not written
    StreamProcessor(store, clock=clock).process(batch)
    clock.advance(60)
    release_due_holds(store, ms_of(clock()) + 60_000)
    settle(store, StreamProcessor(store, clock=clock), wakes, feed, clock, holds=False)
    assert [status(store, shard_key("gig", 0), s) for s in ids] == [Status.WAITLISTED] * 2
    assert store.get_parking(shard_key("gig", 0)) is None
    assert_sound(store, 2, clock)


def test_held_two_processors_of_one_shard_interleaved(store, feed, clock, monkeypatch):
    """Processor A of shard 0 reads the pool and decides two signups to wait; before it
    commits, processor B of the same shard waits two others and commits. A's commit
    conflicts (the shard's version), it decides again from B's line: four wait, counted
    once each, and the line keeps B's first (committed first)."""
    store.create_event("gig", 1, T0, shards=2, waitlist=5)
    a, b = StreamProcessor(store, clock=clock), StreamProcessor(store, clock=clock)
    signups(a, feed, 1, ids_in(1, 2, 1, "seated"))
    ids = ids_in(0, 2, 4, "w")
    k0 = shard_key("gig", 0)
    a_batch = [feed.signup(k0, s) for s in ids[:2]]
    b_batch = [feed.signup(k0, s) for s in ids[2:]]
    commit = store.commit
    calls: list[int] = []

    def b_first(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append(1)
            ok(b.process(b_batch))
        return commit(*args, **kwargs)

    monkeypatch.setattr(store, "commit", b_first)
    assert ok(a.process(a_batch)).conflicts >= 1
    line = store.load_lineup(store.get_event(k0)).event.waiting
    assert [w.signup_id for w in line][:2] == ids[2:]
    assert sorted(w.signup_id for w in line) == sorted(ids)
    assert_sound(store, 2, clock)


def test_held_hostile_records_put_nobody_on_a_line(store, feed, clock):
    """With one signup waiting in shard 0 and places left: a signup of more seats than the
    capacity, of 0 and of -1 seats, a million seats, a signup under another shard's key
    and under the pool's own, a cancel and a confirm of the waiting signup under shard 1's
    key and under the pool's. None waits, no seat moves, the waiting one still waits."""
    store.create_event("gig", 2, T0, shards=2, waitlist=5)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    signups(proc, feed, 1, ids_in(1, 2, 2, "seated"))
    c = ids_in(0, 2, 1, "waits")[0]
    signups(proc, feed, 0, [c])
    before = escrow(store, "gig", 2)
    hostile = ids_in(0, 2, 6, "h")[1:]
    batch = [
        feed.signup(k0, hostile[0], 3),
        feed.signup(k0, hostile[1], 0),
        feed.signup(k0, hostile[2], -1),
        feed.signup(k0, hostile[3], 1_000_000),
        feed.signup(k1, hostile[4]),  # belongs under k0
        feed.signup("gig", ids_in(1, 2, 3, "p")[2]),
        feed.request(k1, c, RequestKind.CANCEL),
        feed.request(k1, c, RequestKind.CONFIRM),
        feed.request("gig", c, RequestKind.CANCEL),
    ]
    for record in batch:
        proc.process([record])
    assert status(store, k0, c) == Status.WAITLISTED
    assert escrow(store, "gig", 2) == before
    assert pool_of(store).waiting == 1
    got = [(status(store, k0, sid), reason(store, k0, sid)) for sid in hostile[:4]]
    assert got == [
        (Status.REJECTED, Reason.CAPACITY_FULL),  # 3 seats: more than the event holds
        (Status.REJECTED, Reason.INVALID_REQUEST),  # 0 seats
        (Status.REJECTED, Reason.INVALID_REQUEST),  # -1 seats
        (Status.REJECTED, Reason.CAPACITY_FULL),  # a million
    ]
    assert status(store, k1, hostile[4]) == Status.REJECTED
    assert reason(store, k1, hostile[4]) == Reason.INVALID_REQUEST
    assert_sound(store, 2, clock)


def test_held_a_hold_lapsing_in_one_shard_reaches_a_line_in_another(store, feed, clock, wakes):
    """Shard 1 holds both seats (60 s holds), shard 0 has two waiting. The holds lapse; the
    due-holds job wakes shard 1, whose step gives the seats back and wakes shard 0 in the
    same commit; shard 0 takes them: both waiting are promoted to holds of their own."""
    store.create_event("gig", 2, T0, shards=2, waitlist=4, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    holders = ids_in(1, 2, 2, "held")
    signups(proc, feed, 1, holders)
    queued = ids_in(0, 2, 2, "queued")
    signups(proc, feed, 0, queued)
    assert pool_of(store).waiters == {0}
    deliver_wakes(proc, wakes, feed)
    clock.advance(61)
    assert release_due_holds(store, ms_of(clock())) == 1
    deliver_wakes(proc, wakes, feed)  # shard 1 lapses, its commit wakes shard 0
    deliver_wakes(proc, wakes, feed)
    assert [status(store, shard_key("gig", 1), s) for s in holders] == [Status.EXPIRED] * 2
    assert [status(store, shard_key("gig", 0), s) for s in queued] == [Status.HELD] * 2
    assert_sound(store, 2, clock)


def test_held_a_shard_with_a_line_ticks_another_shard_whose_hold_lapsed(store, feed, clock):
    """Shard 1 holds both seats, its holds lapsed a minute ago (no due-holds job yet);
    shard 0 has one waiting and gets a new signup. Its step secures seats for both, finds
    shard 1's lapsed holds, ticks shard 1 (whose line is empty: its tick asks for nothing)
    and takes the seats freed: the waiting one first, then the new signup."""
    store.create_event("gig", 2, T0, shards=2, waitlist=4, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    signups(proc, feed, 1, ids_in(1, 2, 2, "held"))
    first, later = ids_in(0, 2, 2, "zero")
    signups(proc, feed, 0, [first])
    assert status(store, shard_key("gig", 0), first) == Status.WAITLISTED
    clock.advance(61)
    result = signups(proc, feed, 0, [later])
    assert result.conflicts < 10
    assert status(store, shard_key("gig", 0), first) == Status.HELD
    assert status(store, shard_key("gig", 0), later) == Status.HELD
    assert_sound(store, 2, clock)


def test_held_capacity_raised_and_lowered_around_lines(store, feed, clock, wakes, monkeypatch):
    """Three waiting over two shards; the capacity goes up by 2 (both shards woken, two
    promoted), down to what is dealt, up by 1 again between shard 1's pool read and its
    commit of a new waiter (the commit conflicts on the capacity read and the signup takes
    the seat instead)."""
    store.create_event("gig", 1, T0, shards=2, waitlist=4)
    proc = StreamProcessor(store, clock=clock)
    signups(proc, feed, 0, ids_in(0, 2, 1, "seated"))
    signups(proc, feed, 0, ids_in(0, 2, 3, "seated")[1:])
    signups(proc, feed, 1, ids_in(1, 2, 1, "w1-"))
    assert pool_of(store).waiting == 3
    wakes.read_new()
    store.update_capacity("gig", 3)
    settle(store, proc, wakes, feed, clock, holds=False)
    assert pool_of(store).waiting == 1
    assert_sound(store, 2, clock)
    pool = pool_of(store)
    store.update_capacity("gig", pool.dealt)
    assert_sound(store, 2, clock)
    late = ids_in(1, 2, 2, "w1-")[1]
    commit = store.commit
    raised: list[int] = []

    def raise_first(*args: Any, **kwargs: Any) -> Any:
        if not raised:
            raised.append(1)
            with as_user():  # the organizer, mid-commit
                store.update_capacity("gig", pool_of(store).capacity + 2)
        return commit(*args, **kwargs)

    monkeypatch.setattr(store, "commit", raise_first)
    result = signups(proc, feed, 1, [late])
    monkeypatch.setattr(store, "commit", commit)
    assert result.conflicts >= 1
    settle(store, proc, wakes, feed, clock, holds=False)
    assert status(store, shard_key("gig", 1), late) == Status.ACCEPTED
    assert pool_of(store).waiting == 0
    assert_sound(store, 2, clock)


def test_held_a_close_racing_a_promotion(store, feed, clock, wakes, monkeypatch):
    """A seat comes back in shard 1 and its commit wakes shard 0; the event closes before
    that wake-up is acted on: shard 0's line is rejected ``event_closed``, not promoted.
    And a close landing between a shard's pool read and its commit of a new waiter makes
    the commit conflict: decided again, the signup is rejected ``event_closed``."""
    store.create_event("gig", 1, T0, shards=3, waitlist=4)
    proc = StreamProcessor(store, clock=clock)
    seated = ids_in(1, 3, 1, "seated")[0]
    signups(proc, feed, 1, [seated])
    queued = ids_in(0, 3, 2, "queued")
    signups(proc, feed, 0, queued)
    wakes.read_new()
    ok(proc.process([feed.request(shard_key("gig", 1), seated, RequestKind.CANCEL)]))
    late = ids_in(2, 3, 1, "late")[0]
    commit = store.commit
    closed: list[int] = []

    def close_first(*args: Any, **kwargs: Any) -> Any:
        if not closed:
            closed.append(1)
            with as_user():  # the organizer, mid-commit
                store.close_event("gig")
        return commit(*args, **kwargs)

    monkeypatch.setattr(store, "commit", close_first)
    # shard 2's new signup: it would take the seat given back, but the close lands first
    assert signups(proc, feed, 2, [late]).conflicts >= 1
    monkeypatch.setattr(store, "commit", commit)
    assert reason(store, shard_key("gig", 2), late) == Reason.EVENT_CLOSED
    settle(store, proc, wakes, feed, clock, holds=False)
    for sid in queued:
        assert status(store, shard_key("gig", 0), sid) == Status.REJECTED
        assert reason(store, shard_key("gig", 0), sid) == Reason.EVENT_CLOSED
    assert escrow(store, "gig", 3)[3] == 0
    assert_sound(store, 3, clock)


def test_held_a_parked_shard_holding_a_cancel_and_a_failing_wake_up(
    store, feed, clock, wakes, monkeypatch
):
    """Shard 1's commits fail: a cancel is parked there (its seat not given back yet:
    nobody is undersold). Released, the cancel's commit wakes shard 0; that wake-up's step
    fails once too and is written again later (``wake_later``); the due-holds job wakes
    it again and the waiting signup gets the seat."""
    store.create_event("gig", 1, T0, shards=2, waitlist=4)
    proc = StreamProcessor(store, clock=clock)
    k0, k1 = shard_key("gig", 0), shard_key("gig", 1)
    seated = ids_in(1, 2, 1, "seated")[0]
    signups(proc, feed, 1, [seated])
    c = ids_in(0, 2, 1, "waits")[0]
    signups(proc, feed, 0, [c])
    deliver_wakes(proc, wakes, feed)
    real = store.commit

    def failing_on(key: str) -> Any:
        def commit(expected: Any, *args: Any, **kwargs: Any) -> Any:
            if expected.event_id == key:
                raise RuntimeError("throttled for good")
            return real(expected, *args, **kwargs)

        return commit

    monkeypatch.setattr(store, "commit", failing_on(k1))
    assert proc.process([feed.request(k1, seated, RequestKind.CANCEL)]).parked_events
    assert status(store, k0, c) == Status.WAITLISTED
    assert escrow(store, "gig", 2)[3] == 1
    monkeypatch.setattr(store, "commit", real)
    clock.advance(60)
    assert release_due_holds(store, ms_of(clock()) + 60_000) >= 1
    monkeypatch.setattr(store, "commit", failing_on(k0))
    deliver_wakes(proc, wakes, feed)  # shard 1 released: the cancel wakes shard 0
    assert status(store, k1, seated) == Status.CANCELLED
    result = proc.process([feed.wake(k0)])  # shard 0's step fails: written again later
    assert result.failures
    monkeypatch.setattr(store, "commit", real)
    assert status(store, k0, c) == Status.WAITLISTED
    clock.advance(10)
    assert release_due_holds(store, ms_of(clock())) >= 1
    settle(store, proc, wakes, feed, clock, holds=False)
    assert status(store, k0, c) == Status.ACCEPTED
    assert_sound(store, 2, clock)


def test_held_a_two_seat_waiter_gets_seats_given_back_one_in_each_of_two_shards(
    store, feed, clock, wakes
):
    """A signup of two seats waits in shard 0. One seat comes back in shard 1 (too few: it
    keeps waiting, and the audit agrees nothing fits), then one in shard 2: woken again,
    shard 0 takes both shards' slack in one commit."""
    store.create_event("gig", 3, T0, shards=3, waitlist=4)
    proc = StreamProcessor(store, clock=clock)
    one = ids_in(1, 3, 1, "one")[0]
    two = ids_in(2, 3, 1, "two")[0]
    signups(proc, feed, 1, [one])
    signups(proc, feed, 2, [two])
    signups(proc, feed, 0, ids_in(0, 3, 1, "zero"))
    big = ids_in(0, 3, 2, "zero")[1]
    signups(proc, feed, 0, [big], seats=2)
    assert status(store, shard_key("gig", 0), big) == Status.WAITLISTED
    wakes.read_new()
    ok(proc.process([feed.request(shard_key("gig", 1), one, RequestKind.CANCEL)]))
    settle(store, proc, wakes, feed, clock, holds=False)
    assert status(store, shard_key("gig", 0), big) == Status.WAITLISTED
    assert_sound(store, 3, clock)
    ok(proc.process([feed.request(shard_key("gig", 2), two, RequestKind.CANCEL)]))
    settle(store, proc, wakes, feed, clock, holds=False)
    assert status(store, shard_key("gig", 0), big) == Status.ACCEPTED
    assert escrow(store, "gig", 3)[2] == [(3, 3), (0, 0), (0, 0)]
    assert_sound(store, 3, clock)


def test_held_a_void_waitlisted_decision_taken_back_keeps_the_count(store, feed, clock, wakes):
    """A waiting signup's INSERT comes again (its REMOVE lost): decided unread, it waits a
    second time (the pool counts 2) until ``materialize`` finds it void and the take-back
    commit takes it off the line (the pool counts 1 again)."""
    store.create_event("gig", 1, T0, shards=2, waitlist=4)
    proc = StreamProcessor(store, clock=clock)
    signups(proc, feed, 1, ids_in(1, 2, 1, "seated"))
    c = ids_in(0, 2, 1, "waits")[0]
    signups(proc, feed, 0, [c])
    ok(StreamProcessor(store, clock=clock).process([feed.signup(shard_key("gig", 0), c)]))
    assert status(store, shard_key("gig", 0), c) == Status.WAITLISTED
    line = store.load_lineup(store.get_event(shard_key("gig", 0))).event.waiting
    assert [w.signup_id for w in line] == [c]
    assert pool_of(store).waiting == 1
    settle(store, proc, wakes, feed, clock, holds=False)
    assert_sound(store, 2, clock)


@pytest.mark.parametrize("seed", [3])
def test_held_random_signups_and_cancels_over_eight_shards(store, wakes, seed):
    """Eight shards, 4 seats, a waitlist of 5; signups of 1 or 2 seats in random shards,
    cancels of random signups (seated, waiting, decided already), a capacity raise and a
    lowering to what is dealt, wake-ups delivered at random moments. After every step the
    pool counts exactly the WAITLISTED items and nothing is oversold; once every wake-up is
    delivered, the audit finds nobody waiting for a free seat."""
    rnd = random.Random(seed)
    clock, feed = Clock(), Feed()
    store.create_event("gig", 4, T0, shards=8, waitlist=5)
    procs = [StreamProcessor(store, clock=clock) for _ in range(8)]
    known: list[str] = []
    for n in range(36):
        roll = rnd.random()
        if roll < 0.55 or not known:
            sid = f"r{seed}-{n}"
            k = shard_of(sid, 8)
            signups(procs[k], feed, k, [sid], seats=rnd.choice([1, 1, 1, 2]))
            known.append(sid)
        elif roll < 0.9:
            sid = rnd.choice(known)
            k = shard_of(sid, 8)
            ok(procs[k].process([feed.request(shard_key("gig", k), sid, RequestKind.CANCEL)]))
        elif roll < 0.95:
            store.update_capacity("gig", pool_of(store).capacity + 1)
        else:
            store.update_capacity("gig", pool_of(store).dealt)
        if rnd.random() < 0.4:
            deliver_wakes(procs[rnd.randrange(8)], wakes, feed)
        assert_never_oversold(store, "gig", 8)
        pool = pool_of(store)
        assert pool.waiting == sum(lines(store, 8).values()) <= pool.waitlist
    settle(store, procs[0], wakes, feed, clock, holds=False)
    assert_sound(store, 8, clock)

"""Waitlists across a sharded event's shards against a model, on moto, through the stream
processor under its deployed role (docs/hot-events.md, "Waitlists across shards").

Signups of 1-2 seats arrive in any shard; any signup seated or waiting cancels; holds lapse
as time passes and shards take steps (their wake-ups); a second processor of a shard decides
from a pool it read before other shards moved; the organizer closes the event. After every
step:

* never oversold: the shards gave at most their quotas, which add up to what the pool dealt,
  at most the capacity;
* the waitlist is one bound over the shards: the pool counts exactly the signups waiting in
  every shard, at most the event's waitlist, and names exactly the shards where someone
  waits;
* nothing lost: every signup has its one decision;

and once every wake-up written is delivered, nobody waits for seats the event has free (a
seat given back in one shard reached another shard's line), and nobody waits on a closed
event.
"""

from __future__ import annotations

import contextlib
import itertools
import os

import boto3
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from moto import mock_aws

from tests.conftest import StreamReader, create_tables
from tests.helpers import ids_in
from tests.hostile.test_sharded_attacks import (
    Clock,
    Feed,
    assert_never_oversold,
    deliver_wakes,
    ok,
)
from tests.roles import functions_under_roles
from turnstile.base.contract import CONTROL_TABLE, Attr, RequestKind, Status, shard_key
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.escrow import Escrow
from turnstile.storage.store import SignupStore
from turnstile_tools.local.limits import enforced_in_moto
from turnstile_tools.local.server import patch_moto

T0 = "2026-01-01T00:00:00.000000Z"
_EVENTS = itertools.count()
EXPLORE = bool(os.environ.get("TURNSTILE_EXPLORE"))


class ShardedWaitlist(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        patch_moto()
        self.exits = contextlib.ExitStack()
        self.exits.enter_context(mock_aws())
        self.exits.enter_context(enforced_in_moto())
        session = boto3.Session(region_name="us-east-1")
        create_tables(session)
        self.exits.enter_context(functions_under_roles())
        self.store = SignupStore(session.client("dynamodb"), sleep=lambda _: None)
        self.wakes = StreamReader(session, CONTROL_TABLE.name)
        self.clock, self.feed = Clock(), Feed()
        #: (shard key, signup id, seats) of every signup submitted.
        self.signups: list[tuple[str, str, int]] = []
        self.closed = False

    def teardown(self) -> None:
        self.exits.close()

    @initialize(
        capacity=st.integers(1, 6),
        shards=st.integers(2, 4),
        waitlist=st.integers(1, 5),
        hold_seconds=st.sampled_from([0, 60]),
    )
    def create_event(self, capacity: int, shards: int, waitlist: int, hold_seconds: int) -> None:
        self.event = f"ev{next(_EVENTS)}"
        self.shards, self.waitlist, self.capacity = shards, waitlist, capacity
        self.store.create_event(
            self.event, capacity, T0, shards=shards, waitlist=waitlist, hold_seconds=hold_seconds
        )
        self.procs = [StreamProcessor(self.store, clock=self.clock) for _ in range(shards)]
        self.waker = StreamProcessor(self.store, clock=self.clock)
        self.wakes.read_new()  # the creation's

    def _key(self, shard: int) -> str:
        return shard_key(self.event, shard)

    def _status(self, key: str, signup_id: str) -> str | None:
        item = self.store.get_decision(key, signup_id)
        return item[Attr.STATUS] if item else None

    def _arrive(self, shard: int, seats: int, count: int) -> None:
        ids = ids_in(shard, self.shards, count, f"s{len(self.signups)}-")
        key = self._key(shard)
        ok(self.procs[shard].process([self.feed.signup(key, sid, seats) for sid in ids]))
        self.signups += [(key, sid, seats) for sid in ids]

    def _cancel(self, data: st.DataObject) -> None:
        key, sid, seats = data.draw(st.sampled_from(self.signups), label="cancels")
        shard = int(key.rpartition("#")[2])
        record = self.feed.request(key, sid, RequestKind.CANCEL, seats)
        ok(self.procs[shard].process([record]))

    def _then(self, data: st.DataObject) -> None:
        """Every wake-up written so far delivered now, or not yet (drawn)."""
        if data.draw(st.booleans(), label="wake-ups delivered now"):
            self.every_wake_up_is_delivered()

    @rule(data=st.data(), seats=st.integers(1, 2), count=st.integers(1, 3))
    def signups_arrive(self, data: st.DataObject, seats: int, count: int) -> None:
        self._arrive(data.draw(st.integers(0, self.shards - 1), label="shard"), seats, count)
        self._then(data)

    @precondition(lambda self: bool(self.signups))
    @rule(data=st.data())
    def a_signup_cancels(self, data: st.DataObject) -> None:
        self._cancel(data)
        self._then(data)

    @rule(data=st.data(), later=st.booleans())
    def a_shard_takes_a_step(self, data: st.DataObject, later: bool) -> None:
        """A shard's wake-up (the due-holds releaser's, say), after time passed or not."""
        if later:
            self.clock.advance(61)
        shard = data.draw(st.integers(0, self.shards - 1), label="shard")
        ok(self.procs[shard].process([self.feed.wake(self._key(shard))]))
        self._then(data)

    @rule(data=st.data(), seats=st.integers(1, 2))
    def a_second_processor_decides_from_an_old_pool(self, data: st.DataObject, seats: int) -> None:
        """A processor of a shard read the pool, then another shard moved (a signup, a
        cancel), then it decides: its commit must not pass the bound nor miss a seat."""
        shard = data.draw(st.integers(0, self.shards - 1), label="shard")
        second = StreamProcessor(self.store, clock=self.clock)
        pool_of = second._pool_of
        moved: list[int] = []

        def then_another_shard_moves(*args):  # type: ignore[no-untyped-def]
            pool = pool_of(*args)
            if not moved:
                moved.append(1)
                if self.signups and data.draw(st.booleans(), label="a cancel"):
                    self._cancel(data)
                else:
                    self._arrive(data.draw(st.integers(0, self.shards - 1)), 1, 1)
            return pool

        second._pool_of = then_another_shard_moves  # type: ignore[method-assign]
        sid = ids_in(shard, self.shards, 1, f"late{len(self.signups)}-")[0]
        key = self._key(shard)
        ok(second.process([self.feed.signup(key, sid, seats)]))
        self.signups.append((key, sid, seats))
        self._then(data)

    @precondition(lambda self: not self.closed)
    @rule()
    def the_organizer_closes(self) -> None:
        self.store.close_event(self.event)
        self.closed = True

    @rule()
    def every_wake_up_is_delivered(self) -> None:
        for _ in range(20):
            before = self.feed.seq
            deliver_wakes(self.waker, self.wakes, self.feed)
            if self.feed.seq == before:
                break
        else:
            raise AssertionError("wake-ups kept coming")
        # Settled: nobody waits for seats the event has free, nor on a closed event.
        waiting = self._waiting()
        pool, shares = Escrow(self.store).snapshot(self.event, self.shards)
        assert pool is not None
        free = pool.capacity - sum(s.taken for s in shares)
        if self.closed:
            assert waiting == {}, waiting
        else:
            fits = [w for w, seats in waiting.items() if seats <= free]
            assert fits == [], (fits, free, waiting, shares)

    def _waiting(self) -> dict[tuple[str, str], int]:
        return {
            (key, sid): seats
            for key, sid, seats in self.signups
            if self._status(key, sid) == Status.WAITLISTED
        }

    @invariant()
    def never_oversold(self) -> None:
        if hasattr(self, "event"):
            assert_never_oversold(self.store, self.event, self.shards)

    @invariant()
    def the_pool_counts_exactly_who_waits(self) -> None:
        if not hasattr(self, "event"):
            return
        pool = Escrow(self.store).pool(self.event)
        assert pool is not None
        waiting = self._waiting()
        assert pool.waiting == len(waiting) <= self.waitlist, (pool, waiting)
        assert pool.waiters == {int(key.rpartition("#")[2]) for key, _ in waiting}, pool

    @invariant()
    def every_signup_is_decided(self) -> None:
        missing = [s for s in self.signups if self._status(s[0], s[1]) is None]
        assert missing == []


ShardedWaitlist.TestCase.settings = settings(
    max_examples=60 if EXPLORE else 6,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    # The same programs on every `make test`; TURNSTILE_EXPLORE=1 draws 60 new ones.
    derandomize=not EXPLORE,
)
TestShardedWaitlist = ShardedWaitlist.TestCase

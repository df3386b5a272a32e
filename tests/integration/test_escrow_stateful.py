"""The escrow of a sharded event (``turnstile.storage.escrow``) against a model, on moto.

Shards draw seats, take other shards' slack, give seats and give them back, in any order;
a second processor of a shard acts on what it read earlier (its writes must fail when
anything moved since); a processor may crash right after a draw or a take, before it
commits. After every step, both invariants of the escrow hold against what the tables say:

* never oversold: each shard has given at most its quota, the quotas add up to what the pool
  dealt, and that is at most the capacity;
* never undersold: a signup was refused only when fewer seats than it asked for were left
  anywhere (undealt, or dealt and not given);

and every seat given is exactly what the model says each shard gave (nothing lost, nothing
doubled).
"""

from __future__ import annotations

import contextlib
import itertools
import os

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from moto import mock_aws

from tests.conftest import create_tables
from turnstile.base.contract import Attr, ControlKey, shard_key
from turnstile.engine.escrow import Pool, Share
from turnstile.storage.dynamo import ConditionFailed, Tables, TransactionCancelled, control_key
from turnstile.storage.escrow import Escrow
from turnstile.storage.store import SignupStore
from turnstile_tools.local.server import patch_moto

_EVENT_IDS = itertools.count()


class EscrowMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        patch_moto()
        self.exits = contextlib.ExitStack()
        self.exits.enter_context(mock_aws())
        session = boto3.Session(region_name="us-east-1")
        create_tables(session)
        self.client = session.client("dynamodb")
        self.escrow = Escrow(Tables(self.client, sleep=lambda _: None))
        #: Seats each shard gave, as the model counts them.
        self.given: list[int] = []
        #: What second processors read earlier: shard shares, and givers' shares.
        self.stale: list[Share] = []
        self.stale_pool: Pool | None = None
        self.refusals = 0

    def teardown(self) -> None:
        self.exits.close()

    @initialize(capacity=st.integers(1, 12), shards=st.integers(1, 5))
    def create_event(self, capacity: int, shards: int) -> None:
        self.event_id = f"ev{next(_EVENT_IDS)}"
        self.capacity, self.shards = capacity, shards
        self.given = [0] * shards
        _create(self.client, self.event_id, capacity, shards)

    def _shard(self, data: st.DataObject) -> int:
        return data.draw(st.integers(0, self.shards - 1), label="shard")

    def _left_anywhere(self) -> int:
        _, shares = self.escrow.snapshot(self.event_id, self.shards)
        return self.capacity - sum(s.taken for s in shares)

    @rule(data=st.data(), seats=st.integers(1, 3))
    def signup(self, data: st.DataObject, seats: int) -> None:
        """A shard's processor decides a signup of ``seats``: gives them (taking what it
        must from other shards in the same write), or refuses."""
        shard = self._shard(data)
        secured = self.escrow.secure(self.event_id, self.shards, shard, seats)
        if secured.free >= seats:
            share = secured.share
            self.escrow.commit(self.event_id, share, share.taken + seats, secured.takes)
            self.given[shard] += seats
        else:
            left = self._left_anywhere()
            assert left < seats, f"refused {seats} seats while {left} were left: undersold"
            self.refusals += 1

    @rule(data=st.data(), seats=st.integers(1, 3))
    def give_back(self, data: st.DataObject, seats: int) -> None:
        """A cancel or a lapsed hold: the shard gives seats back."""
        shard = self._shard(data)
        seats = min(seats, self.given[shard])
        if seats:
            share = self.escrow.share(self.event_id, shard)
            self.escrow.commit(self.event_id, share, share.taken - seats)
            self.given[shard] -= seats

    @rule(data=st.data(), seats=st.integers(1, 3))
    def crash_after_securing(self, data: st.DataObject, seats: int) -> None:
        """A processor draws what it needs and plans its takes, then dies before it
        commits."""
        self.escrow.secure(self.event_id, self.shards, self._shard(data), seats)

    @rule(data=st.data())
    def second_processor_reads(self, data: st.DataObject) -> None:
        if len(self.stale) < 4:
            self.stale.append(self.escrow.share(self.event_id, self._shard(data)))

    @precondition(lambda self: self.stale)
    @rule(data=st.data(), delta=st.sampled_from([-2, -1, 1, 2]))
    def second_processor_commits(self, data: st.DataObject, delta: int) -> None:
        """A processor commits from what it read earlier: only if nothing moved since."""
        old = self.stale.pop(data.draw(st.integers(0, len(self.stale) - 1), label="which"))
        now = self.escrow.share(self.event_id, old.shard)
        taken = old.taken + delta
        if not 0 <= taken <= old.quota:
            return  # it would not have decided so from what it read
        try:
            self.escrow.commit(self.event_id, old, taken)
        except (ConditionFailed, TransactionCancelled):  # a give-back is a transaction
            assert now.version != old.version or now.quota < taken, "refused for nothing"
            return
        assert now.version == old.version, "a commit from a stale read went through"
        self.given[old.shard] = taken

    @precondition(lambda self: self.stale and self.shards > 1)
    @rule(data=st.data(), seats=st.integers(1, 3))
    def second_processor_takes(self, data: st.DataObject, seats: int) -> None:
        """A shard commits seats taken from another's slack as it read it earlier: only if
        the giver did not move since."""
        giver = self.stale.pop(data.draw(st.integers(0, len(self.stale) - 1), label="which"))
        seats = min(seats, giver.free)
        if not seats:
            return
        shard = (giver.shard + 1 + data.draw(st.integers(0, self.shards - 2))) % self.shards
        now = self.escrow.share(self.event_id, giver.shard)
        me = self.escrow.share(self.event_id, shard)
        try:
            self.escrow.commit(self.event_id, me, me.taken + seats, [(giver, seats)])
        except (ConditionFailed, TransactionCancelled):
            assert (now.version, now.quota) != (giver.version, giver.quota), "refused for nothing"
            return
        assert (now.version, now.quota) == (giver.version, giver.quota), "took from a stale read"
        self.given[shard] += seats

    @rule(data=st.data(), seats=st.integers(1, 4))
    def processor_draws_from_an_old_read(self, data: st.DataObject, seats: int) -> None:
        """A draw planned from the pool as read before others drew: only what is still
        undealt."""
        if self.stale_pool is None:
            self.stale_pool = self.escrow.pool(self.event_id)
            return
        old, self.stale_pool = self.stale_pool, None
        now = self.escrow.pool(self.event_id)
        assert old is not None and now is not None
        seats = min(seats, old.undealt)
        if not seats:
            return
        try:
            self.escrow.draw(self.event_id, old, self._shard(data), seats)
        except (ConditionFailed, TransactionCancelled):
            assert now.undealt < seats, "a draw was refused while the seats were there"
            return
        assert now.undealt >= seats, "drew seats that were dealt already"

    @invariant()
    def never_oversold_and_nothing_lost(self) -> None:
        if not self.given:
            return
        pool, shares = self.escrow.snapshot(self.event_id, self.shards)
        assert pool is not None
        for share in shares:
            assert 0 <= share.taken <= share.quota, share
        assert sum(s.quota for s in shares) == pool.dealt <= self.capacity
        assert [s.taken for s in shares] == self.given


EscrowMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    # The same programs on every `make test`; TURNSTILE_EXPLORE=1 draws new ones.
    derandomize=os.environ.get("TURNSTILE_EXPLORE", "") in ("", "0"),
)
TestEscrow = EscrowMachine.TestCase


def _create(client, event_id: str, capacity: int, shards: int) -> None:
    """The event as the store creates it: its item (the pool) and one item per shard.
    One shard (which no event is created with: it would be an unsharded event) is put by
    hand, as the store would lay it out."""
    if shards > 1:
        SignupStore(client).create_event(event_id, capacity, "2026-11-27T00:00:00Z", shards=shards)
        return
    for key, seats in ((event_id, capacity), (shard_key(event_id, 0), 0)):
        client.put_item(
            TableName="turnstile-control",
            Item={
                **control_key(ControlKey.event(key)),
                Attr.EVENT_ID: {"S": key},
                Attr.CAPACITY: {"N": str(seats)},
                Attr.SHARDS: {"N": "1"},
            },
        )


def _event(client, capacity: int, shards: int) -> Escrow:
    _create(client, "gig", capacity, shards)
    return Escrow(Tables(client, sleep=lambda _: None))


def _give(escrow: Escrow, shards: int, shard: int, seats: int) -> Share | None:
    """A shard's processor gives ``seats``: the share after, or None when it refused."""
    secured = escrow.secure("gig", shards, shard, seats)
    if secured.free < seats:
        return None
    share = secured.share
    return escrow.commit("gig", share, share.taken + seats, secured.takes)


def test_a_shard_takes_the_slack_of_others_once_the_pool_is_empty(client) -> None:
    """Seats dealt to a shard whose signups never came are taken by one that needs them:
    the event fills to the last seat."""
    escrow = _event(client, capacity=8, shards=4)
    for shard in range(4):  # every shard draws 2 seats and gives one
        secured = escrow.secure("gig", 4, shard, 2)
        escrow.commit("gig", secured.share, 1)
    assert escrow.pool("gig").undealt == 0
    for _ in range(4):  # shard 0 alone gets the rest, taken from the others' slack
        assert _give(escrow, 4, 0, 1) is not None
    _, shares = escrow.snapshot("gig", 4)
    assert [s.taken for s in shares] == [5, 1, 1, 1]
    assert [s.quota for s in shares] == [5, 1, 1, 1]
    assert _give(escrow, 4, 2, 1) is None  # and nothing is left


def test_a_commit_decided_before_another_took_its_slack_cannot_give_it(client) -> None:
    """Shard 1 read its share (2 seats free); shard 0 then took them and gave them: shard
    1's commit of what it decided from the old read is refused, and the seats are given
    once."""
    escrow = _event(client, capacity=2, shards=2)
    escrow.secure("gig", 2, 1, 2)
    before = escrow.share("gig", 1)
    assert before.free == 2
    assert _give(escrow, 2, 0, 2) is not None
    with pytest.raises(ConditionFailed):
        escrow.commit("gig", before, 2)
    _, shares = escrow.snapshot("gig", 2)
    assert [(s.quota, s.taken) for s in shares] == [(2, 2), (0, 0)]


def test_a_commit_from_a_read_before_another_commit_is_refused(client) -> None:
    """Two processors of one shard read the same share; the second to commit is refused
    (its version moved), even with seats to spare."""
    escrow = _event(client, capacity=6, shards=1)
    secured = escrow.secure("gig", 1, 0, 3)
    both = escrow.share("gig", 0)
    escrow.commit("gig", both, 1)
    with pytest.raises(ConditionFailed):
        escrow.commit("gig", both, 1)
    assert escrow.share("gig", 0).taken == 1 and secured.share.quota >= 3


def test_a_take_planned_before_another_take_from_the_same_giver_is_refused(client) -> None:
    """Shards 0 and 2 both plan to take shard 1's two free seats: the second take is
    refused, whatever the giver's version says (takes do not move it)."""
    escrow = _event(client, capacity=3, shards=3)
    escrow.secure("gig", 3, 1, 3)  # shard 1 draws every seat, gives one
    escrow.commit("gig", escrow.share("gig", 1), 1)
    giver = escrow.share("gig", 1)
    assert giver.free == 2
    escrow.commit("gig", escrow.share("gig", 0), 2, [(giver, 2)])
    with pytest.raises((ConditionFailed, TransactionCancelled)):
        escrow.commit("gig", escrow.share("gig", 2), 1, [(giver, 1)])
    _, shares = escrow.snapshot("gig", 3)
    assert [(s.quota, s.taken) for s in shares] == [(2, 2), (1, 1), (0, 0)]


def test_seats_another_processor_of_the_shard_drew_meanwhile_are_not_refused(
    client, monkeypatch
) -> None:
    """A processor reads its share (nothing free); another processor of the same shard
    draws the last seats into it before the first looks at the pool: the first finds
    them in its snapshot instead of refusing."""
    escrow = _event(client, capacity=2, shards=2)
    real_pool = Escrow.pool
    calls = []

    def pool_after_the_other_drew(self: Escrow, event_id: str):
        if not calls:
            calls.append(1)
            other = Escrow(escrow.tables)
            other.draw("gig", real_pool(other, "gig"), 0, 2)
        return real_pool(self, event_id)

    monkeypatch.setattr(Escrow, "pool", pool_after_the_other_drew)
    secured = escrow.secure("gig", 2, 0, 2)
    assert secured.free == 2 and calls == [1]


def test_two_shards_short_of_seats_do_not_take_them_back_and_forth(client) -> None:
    """Near the end, two shards that each need three of four seats both plan to take:
    the seats taken are given in the same write, so one of them gives its three and the
    other finds only what is left, instead of both taking forever."""
    escrow = _event(client, capacity=4, shards=2)
    a = escrow.secure("gig", 2, 0, 3)
    b = escrow.secure("gig", 2, 1, 3)
    assert a.free == 3 and b.free == 3 and b.takes  # b plans to take a's slack
    escrow.commit("gig", a.share, 3)
    with pytest.raises((ConditionFailed, TransactionCancelled)):
        escrow.commit("gig", b.share, 3, b.takes)
    assert escrow.secure("gig", 2, 1, 3).free == 1
    _, shares = escrow.snapshot("gig", 2)
    assert [s.taken for s in shares] == [3, 0] and sum(s.quota for s in shares) == 4


def test_a_share_never_dealt_a_seat_commits_its_refusals(client) -> None:
    escrow = _event(client, capacity=0, shards=2)
    secured = escrow.secure("gig", 2, 1, 1)
    assert secured.free == 0
    assert escrow.commit("gig", secured.share, 0).version == 1


def test_a_draw_planned_before_others_drew_gets_only_what_is_left(client) -> None:
    """A draw from the pool as read before another shard drew is refused when the seats it
    counted on are gone: the pool never deals more than its capacity."""
    escrow = _event(client, capacity=5, shards=2)
    old = escrow.pool("gig")
    escrow.draw("gig", old, 0, 3)
    with pytest.raises((ConditionFailed, TransactionCancelled)):
        escrow.draw("gig", old, 1, 3)
    escrow.draw("gig", escrow.pool("gig"), 1, 2)
    assert escrow.pool("gig").dealt == 5
    with pytest.raises(ValueError, match="a draw of 1 seats from a pool with 0 left"):
        escrow.draw("gig", escrow.pool("gig"), 1, 1)
    with pytest.raises(ValueError):
        escrow.draw("gig", old, 1, 6)  # more than the capacity, even on a fresh read
    _, shares = escrow.snapshot("gig", 2)
    assert [s.quota for s in shares] == [3, 2]


def test_a_move_retried_by_the_store_is_sent_again_with_the_same_token(client) -> None:
    """A transaction applied whose answer is lost (a 5xx) is retried with the token it was
    sent with, so DynamoDB applies it once (it answers a token's repeats as the first)."""
    sent: list[str] = []

    class LostAnswer:
        def __getattr__(self, name):
            real = getattr(client, name)
            if name != "transact_write_items":
                return real

            def call(**kwargs):
                sent.append(kwargs["ClientRequestToken"])
                real(**kwargs)
                if len(sent) == 1:
                    raise ClientError(
                        {"Error": {"Code": "InternalServerError", "Message": "lost"}},
                        "TransactWriteItems",
                    )

            return call

    _event(client, capacity=4, shards=2)
    escrow = Escrow(Tables(LostAnswer(), sleep=lambda _: None))
    with contextlib.suppress(ConditionFailed, TransactionCancelled):
        escrow.draw("gig", escrow.pool("gig"), 0, 1)  # moto applies the repeat too
    assert len(sent) == 2 and sent[0] == sent[1] and len(sent[0]) == 32
    escrow.draw("gig", escrow.pool("gig"), 1, 1)
    assert len(set(sent)) == 2  # a new move, a new token


def test_a_full_pool_is_taken_at_its_word_until_a_shard_gives_seats_back(client) -> None:
    """Once a snapshot found no seat anywhere, a shard short of seats reads the pool alone;
    a commit that gives seats back raises the pool's ``frees``, so the next one looks
    again and takes them."""
    escrow = _event(client, capacity=2, shards=2)
    both = escrow.secure("gig", 2, 0, 2)
    escrow.commit("gig", both.share, 2, both.takes)
    assert escrow.secure("gig", 2, 1, 1).free == 0
    pool = escrow.pool("gig")
    assert pool is not None and pool.full
    # WHEN shard 0 gives a seat back
    escrow.commit("gig", escrow.share("gig", 0), 1)
    # THEN the pool is no longer full, and shard 1 takes the seat
    pool = escrow.pool("gig")
    assert pool is not None and not pool.full
    secured = escrow.secure("gig", 2, 1, 1)
    assert secured.free == 1 and [s for _, s in secured.takes] == [1]


def test_a_full_mark_from_a_snapshot_older_than_a_give_back_is_not_written(client) -> None:
    escrow = _event(client, capacity=2, shards=2)
    both = escrow.secure("gig", 2, 0, 2)
    escrow.commit("gig", both.share, 2, both.takes)
    pool, _ = escrow.snapshot("gig", 2)
    assert pool is not None
    escrow.commit("gig", escrow.share("gig", 0), 1)  # a seat given back after the snapshot
    escrow._mark_full("gig", pool)
    after = escrow.pool("gig")
    assert after is not None and after.full_at is None and not after.full

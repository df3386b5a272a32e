"""The escrow's pure part (``turnstile.engine.escrow``): where a signup's shard is, and where
a shard's missing seats come from."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnstile.engine.escrow import MAX_SHARDS, Plan, Pool, Share, chunk_size, plan, shard_of


def test_a_signups_shard_is_fixed_forever() -> None:
    """Producers writing intake directly compute it themselves: these values are the
    contract (the first 8 bytes of BLAKE2b of the UTF-8 id, big-endian, modulo K)."""
    assert [shard_of(s, 16) for s in ["alice", "bob", "u000001-00000000ff", "日本"]] == [
        9,
        2,
        7,
        10,
    ]
    assert shard_of("alice", 32) == 5614559425216174729 % 32 == 9
    assert shard_of("anything", 1) == 0


@pytest.mark.parametrize("shards", [0, -1, MAX_SHARDS + 1])
def test_an_event_has_one_to_thirty_two_shards(shards: int) -> None:
    with pytest.raises(ValueError, match="shards"):
        shard_of("alice", shards)


def test_signups_spread_evenly_over_the_shards_whatever_their_ids_look_like() -> None:
    counts = Counter(shard_of(f"user-{i:06d}", 16) for i in range(16_000))
    assert sorted(counts) == list(range(16))
    assert max(counts.values()) < 1.15 * 1000 and min(counts.values()) > 0.85 * 1000


def test_a_chunk_is_a_share_of_the_capacity_and_never_nothing() -> None:
    assert chunk_size(1000, 16) == 16  # 1000 / 64, rounded up
    assert chunk_size(3, 16) == 1


def test_a_shard_with_enough_seats_moves_none() -> None:
    assert plan(Pool(10, 4), Share(0, quota=4, taken=1), need=3, chunk=2) == Plan()


def test_a_shard_draws_at_least_a_chunk_and_at_most_what_the_pool_has() -> None:
    assert plan(Pool(10, 4), Share(0, quota=4, taken=4), need=1, chunk=3) == Plan(draw=3)
    assert plan(Pool(10, 4), Share(0, quota=4, taken=4), need=5, chunk=3) == Plan(draw=5)
    assert plan(Pool(10, 9), Share(0, quota=4, taken=4), need=5, chunk=3) == Plan(draw=1)


def test_only_then_from_the_shards_with_the_most_slack_never_itself() -> None:
    others = [Share(0, 3, 3), Share(1, 5, 4), Share(2, 5, 2), Share(3, 4, 2), Share(4, 9, 0)]
    me = others.pop(4)
    got = plan(Pool(26, 25), me, need=16, chunk=2, others=[*others, me])
    assert got == Plan(draw=1, steals=((2, 3), (3, 2), (1, 1)))


def test_a_plan_short_of_the_need_means_nothing_is_left() -> None:
    others = [Share(1, 5, 5), Share(2, 5, 4)]
    got = plan(Pool(10, 10), Share(0, 0, 0), need=3, chunk=2, others=others)
    assert got == Plan(steals=((2, 1),)) and got.seats == 1


@given(
    capacity=st.integers(0, 50),
    quotas=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), min_size=1, max_size=6),
    need=st.integers(1, 20),
    chunk=st.integers(1, 8),
)
def test_a_plan_moves_only_what_is_there_and_all_of_it_when_short(
    capacity: int, quotas: list[tuple[int, int]], need: int, chunk: int
) -> None:
    shares = [Share(k, q, min(t, q)) for k, (q, t) in enumerate(quotas)]
    dealt = sum(s.quota for s in shares)
    pool = Pool(max(capacity, dealt), dealt)
    me, others = shares[0], shares[1:]
    got = plan(pool, me, need, chunk, others)
    assert 0 <= got.draw <= pool.undealt
    by_shard = {s.shard: s for s in others}
    assert all(0 < seats <= by_shard[k].free for k, seats in got.steals)
    assert len({k for k, _ in got.steals}) == len(got.steals)
    left = pool.undealt + sum(s.free for s in others)
    short = max(0, need - me.free)
    assert got.seats >= min(short, left)  # never undersold: short only when nothing is left
    assert got.steals == () or got.draw == pool.undealt  # the pool first

"""Escrow: a sharded event's seats dealt out to its shards. Pure, no I/O.

A sharded event spreads its signups over ``K`` shards (``shard_of``), each decided on its
own, in its own arrival order, by one processor at a time. No shard may give a seat another
shard gave, so the seats are held in escrow: the event's *pool* (its capacity, and how many
seats it has ``dealt``) deals them to the shards, and each shard's *share* says how many it
was dealt (``quota``) and how many of those it gave (``taken``). A shard gives a seat only
from its own quota, so

* **never oversold**: every shard's ``taken <= quota``, and the quotas add up to the pool's
  ``dealt <= capacity``, so the seats given add up to at most the capacity;
* **never undersold**: a shard that needs seats it does not have draws them from the pool
  (a chunk at a time: ``chunk_size``), and when the pool has none left, takes what other
  shards were dealt and have not given (their *slack*); it refuses a signup ``capacity_full``
  only when neither is enough (``plan``).

``plan`` says where a shard's missing seats come from; ``turnstile.storage.escrow`` makes each
move one DynamoDB transaction, conditioned on what was read, so that a seat is never in two
quotas, nor in none, whatever crashes or races between the moves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from turnstile.base.contract import MAX_SHARDS, shard_of

__all__ = [
    "CHUNKS_PER_SHARD",
    "MAX_SHARDS",
    "Plan",
    "Pool",
    "Share",
    "chunk_size",
    "plan",
    "shard_of",
]

#: A shard draws at least ``capacity / (shards * CHUNKS_PER_SHARD)`` seats at a time: few
#: enough draws to keep the pool's partition cool, small enough chunks that little is dealt
#: to a shard its signups never reach (which another shard then has to take back).
CHUNKS_PER_SHARD = 4


def chunk_size(capacity: int, shards: int) -> int:
    """The fewest seats a shard draws from the pool at a time."""
    return max(1, -(-capacity // (shards * CHUNKS_PER_SHARD)))


@dataclass(frozen=True)
class Pool:
    """The event's side of the escrow: its capacity and the seats it has dealt out."""

    capacity: int
    dealt: int
    #: How many commits gave seats back in any shard (seats a shard no longer holds).
    frees: int = 0
    #: ``(frees, dealt)`` when a snapshot last found no seat left anywhere (None: never):
    #: while both are still the pool's and nothing is undealt, the event is full without a
    #: snapshot. A draw since (after a capacity raise) moves ``dealt``: seats it dealt may
    #: be slack.
    full_at: tuple[int, int] | None = None
    #: The event's waitlist (0: none), the signups waiting in all its shards, and the
    #: shards where someone waits.
    waitlist: int = 0
    waiting: int = 0
    waiters: frozenset[int] = frozenset()
    #: How many times a shard's waitlist started (went from empty to not): moves whenever
    #: ``waiters`` gains a shard.
    joined: int = 0

    @property
    def places(self) -> int:
        """Places left on the event's waitlist, across its shards."""
        return max(0, self.waitlist - self.waiting)

    @property
    def undealt(self) -> int:
        return max(0, self.capacity - self.dealt)

    @property
    def full(self) -> bool:
        """No seat left anywhere, as a snapshot found and nothing given back since."""
        return self.undealt == 0 and self.full_at == (self.frees, self.dealt)


@dataclass(frozen=True)
class Share:
    """A shard's side: the seats it was dealt, the seats it gave, and the version of its
    item (moved by each of its commits)."""

    shard: int
    quota: int
    taken: int
    version: int = 0
    #: When the shard's earliest hold lapses (epoch ms; None: it holds nothing). A lapsed
    #: hold is still ``taken`` until the shard takes a step: a seat to free, not slack yet.
    due_at: int | None = None

    @property
    def free(self) -> int:
        """Seats dealt to the shard and not given: its own to give, or another's to take."""
        return max(0, self.quota - self.taken)


@dataclass(frozen=True)
class Plan:
    """Where a shard's missing seats come from: ``draw`` from the pool, then ``steals``
    (shard, seats) from other shards' slack."""

    draw: int = 0
    steals: tuple[tuple[int, int], ...] = ()

    @property
    def seats(self) -> int:
        return self.draw + sum(seats for _, seats in self.steals)


def plan(
    pool: Pool,
    me: Share,
    need: int,
    chunk: int,
    others: Iterable[Share] | None = None,
) -> Plan:
    """How shard ``me`` comes to hold ``need`` free seats, as far as any are left.

    From the pool first: what is missing, at least a ``chunk`` while the pool has one, at
    most what it has. Then, only when ``others`` (every other shard, as just read) is given
    and the pool cannot cover it, from the shards with the most slack first (ties: the
    lowest shard), each giving at most its slack. A plan short of ``need`` means no more
    seats are anywhere: the shard gives what it holds and refuses the rest."""
    short = need - me.free
    if short <= 0:
        return Plan()
    draw = min(pool.undealt, max(short, chunk))
    short -= draw
    steals: list[tuple[int, int]] = []
    if short > 0 and others is not None:
        for other in sorted(others, key=lambda s: (-s.free, s.shard)):
            if short <= 0 or other.free <= 0:
                break
            if other.shard == me.shard:
                continue
            seats = min(other.free, short)
            steals.append((other.shard, seats))
            short -= seats
    return Plan(draw=draw, steals=tuple(steals))

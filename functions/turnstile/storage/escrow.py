"""Escrow on DynamoDB: the moves of a sharded event's seats, each one conditional write.

The pool is the event's item (``Attr.CAPACITY``, ``Attr.DEALT``). Each shard is decided as
an event of its own, under its shard key (``contract.shard_key``: ``<event>#<kk>``), and its
event item is its share: its ``capacity`` is its *quota*, the seats dealt to it, beside the
``taken`` and ``version`` every commit writes. What ``turnstile.engine.escrow`` plans, this
module does, so that a seat is always in exactly one place, whatever crashes, retries or
races come between the moves:

* **draw** (pool to shard): one transaction, the pool's ``dealt`` (and its
  ``capacity_floor``, which an organizer's capacity change is conditioned on) raised on
  condition that it stays within the capacity it was read with, the shard's ``capacity``
  raised by as much. Both or neither; a crash after it leaves the seats in the shard's
  quota, where the shard (or a shard that takes them) gives them later.
* **commit** (seats given or given back by a shard, and seats it takes from others): one
  write, or one transaction when it takes. The shard's ``taken`` is set and its
  ``version`` moved on condition that the version is the one it decided from and its
  quota, with what it takes, covers the new ``taken``; each giving shard's quota is
  lowered on condition that its ``version`` and quota are what was read (nothing given
  and nothing taken since: its slack is what was counted). Seats taken from another shard
  are given in the same write, never held: two shards short of seats cannot take the same
  seats back and forth without either giving any. The stream processor's commit of a
  shard is ``SignupStore.commit`` with ``takes`` (the givers' writes are ``gives``); the
  lean ``commit`` here is the same write without the decisions, for the escrow's own tests.

``secure`` plans for a shard about to decide: it draws from the pool while it has seats,
then reads the pool and every share in one transactional read (a snapshot no move can be
half way through) and plans what to take. It returns the shard's share and the takes,
which the caller's ``commit`` makes; or, when the snapshot shows fewer seats than needed
anywhere, what is left. A draw that fails its condition means another writer moved first:
``secure`` reads again, and a shard that keeps losing raises ``StoreUnavailableError`` (its
batch is retried) rather than decide short.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from turnstile.base.contract import MAX_SHARDS, Attr, ControlKey, shard_key
from turnstile.base.errors import StoreUnavailableError
from turnstile.engine.escrow import Pool, Share, chunk_size, plan
from turnstile.storage.dynamo import (
    TRANSACTION_LIMIT,
    ConditionFailed,
    Tables,
    TransactionCancelled,
    control_key,
    from_item,
    number_text,
)

__all__ = ["SECURE_ATTEMPTS", "Escrow", "PoolChange", "Secured", "freed", "gives", "pool_update"]

#: How often ``secure`` starts again after another writer moved first.
SECURE_ATTEMPTS = 16


def _n(value: int) -> dict[str, str]:
    return {"N": number_text(value)}


@dataclass(frozen=True)
class Secured:
    """What ``secure`` found for a shard: its share as read, and the seats to take from
    other shards' shares (as read) in its commit."""

    share: Share
    takes: tuple[tuple[Share, int], ...] = ()
    #: When short: the other shards holding seats in holds, with when the earliest of
    #: them lapses (shard, epoch ms). A lapsed one is freed by a step of that shard.
    holding: tuple[tuple[int, int], ...] = ()

    @property
    def free(self) -> int:
        """The seats the shard may give in its commit."""
        return self.share.free + sum(seats for _, seats in self.takes)


class Escrow:
    """The escrow of the sharded events in one control table."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    @property
    def _table(self) -> str:
        return self.tables.control_table

    # -- reading ------------------------------------------------------------------------

    def pool(self, event_id: str) -> Pool | None:
        """The event's pool as it is now (None: no such event)."""
        item = self.tables.dynamo.get(self._table, control_key(ControlKey.event(event_id)))
        return _pool(item) if item is not None else None

    def share(self, event_id: str, shard: int) -> Share:
        """Shard ``shard``'s share as it is now (no item: all zero)."""
        key = control_key(ControlKey.event(shard_key(event_id, shard)))
        return _share(shard, self.tables.dynamo.get(self._table, key))

    def snapshot(self, event_id: str, shards: int) -> tuple[Pool | None, list[Share]]:
        """The pool and every share at one instant (one ``TransactGetItems``: no draw or
        commit is seen half made), in shard order."""
        if not 1 <= shards <= min(MAX_SHARDS, TRANSACTION_LIMIT - 1):
            raise ValueError(f"an event has 1 to {MAX_SHARDS} shards, not {shards}")
        keys = [ControlKey.event(event_id)] + [
            ControlKey.event(shard_key(event_id, k)) for k in range(shards)
        ]
        response = self.tables.dynamo.call(
            "transact_get_items",
            TransactItems=[
                {"Get": {"TableName": self._table, "Key": control_key(key)}} for key in keys
            ],
        )
        found = [from_item(r["Item"]) if r.get("Item") else None for r in response["Responses"]]
        pool = found[0]
        return (
            _pool(pool) if pool is not None else None,
            [_share(k, found[k + 1]) for k in range(shards)],
        )

    # -- the moves ----------------------------------------------------------------------

    def draw(self, event_id: str, pool: Pool, shard: int, seats: int) -> None:
        """Deal ``seats`` from the pool (as read: ``pool``) to ``shard``; ConditionFailed
        when the pool changed so that they are no longer there."""
        if not 0 < seats <= pool.undealt:
            raise ValueError(f"a draw of {seats} seats from a pool with {pool.undealt} left")
        pool_update = {
            "TableName": self._table,
            "Key": control_key(ControlKey.event(event_id)),
            # The floor mirrors ``dealt``: a capacity change may not go below it.
            "UpdateExpression": (
                "SET #dealt = if_not_exists(#dealt, :zero) + :seats, "
                "#floor = if_not_exists(#dealt, :zero) + :seats"
            ),
            "ConditionExpression": (
                "#capacity = :capacity AND (attribute_not_exists(#dealt) OR #dealt <= :most)"
            ),
            "ExpressionAttributeNames": {
                "#dealt": Attr.DEALT,
                "#capacity": Attr.CAPACITY,
                "#floor": Attr.CAPACITY_FLOOR,
            },
            "ExpressionAttributeValues": {
                ":seats": _n(seats),
                ":zero": _n(0),
                ":capacity": _n(pool.capacity),
                ":most": _n(pool.capacity - seats),
            },
        }
        self._transact([pool_update, self._raise_quota(event_id, shard, seats)])

    def commit(
        self,
        event_id: str,
        share: Share,
        taken: int,
        takes: Sequence[tuple[Share, int]] = (),
    ) -> Share:
        """Set the seats ``share``'s shard has given to ``taken`` (seats given, or given
        back), taking ``takes`` (giving share as read, seats) from other shards in the same
        write; on condition that nothing was committed to the shard since ``share`` was read,
        that its quota with what it takes covers ``taken``, and that each giver is as read.
        ConditionFailed (or TransactionCancelled) otherwise, nothing written. The share
        after: ``taken`` and ``version`` as written, ``quota`` as read plus what it took
        (another shard's take since may have lowered it)."""
        took = sum(seats for _, seats in takes)
        if taken < 0 or any(seats <= 0 or seats > g.free for g, seats in takes):
            raise ValueError(f"shard {share.shard} cannot give {taken} seats taking {takes}")
        if any(g.shard == share.shard for g, _ in takes):
            raise ValueError(f"shard {share.shard} cannot take from itself")
        version = share.version
        same_version = "#version = :version"
        if version == 0:  # never committed: no version yet
            same_version = f"(attribute_not_exists(#version) OR {same_version})"
        update = {
            "TableName": self._table,
            "Key": control_key(ControlKey.event(shard_key(event_id, share.shard))),
            "UpdateExpression": "SET #taken = :taken, #version = :next ADD #quota :took",
            "ConditionExpression": f"{same_version} AND #quota >= :needed",
            "ExpressionAttributeNames": {
                "#quota": Attr.CAPACITY,
                "#taken": Attr.TAKEN,
                "#version": Attr.VERSION,
            },
            "ExpressionAttributeValues": {
                ":taken": _n(taken),
                ":version": _n(version),
                ":next": _n(version + 1),
                ":took": _n(took),
                ":needed": _n(taken - took),
            },
        }
        moves = [*gives(self._table, event_id, takes), update]
        if taken < share.taken:  # seats given back: the pool hears of it (Pool.full)
            moves.append(freed(self._table, event_id))
        if len(moves) == 1:
            self.tables.dynamo.call("update_item", **update)
        else:
            self._transact(moves)
        return Share(share.shard, share.quota + took, taken, version + 1)

    def secure(
        self, event_id: str, shards: int, shard: int, need: int, sizes: Sequence[int] = ()
    ) -> Secured:
        """What ``shard`` holds, and may take, toward ``need`` free seats: enough, or every
        seat left anywhere. Draws from the pool while it has seats (each draw planned from
        what was just read, ``turnstile.engine.escrow.plan``); once it has none, plans the
        takes from one snapshot of the pool and every share, made by the caller's
        ``commit``. ``sizes``: the seats of the signups ``need`` counts; one larger than the
        event's capacity, or than every seat a snapshot shows left anywhere (holds counted
        as left: they may lapse), can never be given them and is left out of ``need``, so a
        hostile signup of the whole capacity moves no seat."""
        if not 0 <= shard < shards:
            raise ValueError(f"no shard {shard} in an event of {shards}")
        #: Whether a snapshot showed that the signups larger than what this shard and the
        #: pool hold may fit, with other shards' seats: then seats are drawn for them too.
        whole = False
        for _ in range(SECURE_ATTEMPTS):
            pool = self.pool(event_id)
            me = self.share(event_id, shard)
            if pool is None:
                return Secured(me)
            need_now = need - sum(s for s in sizes if s > pool.capacity)
            if me.free >= need_now or pool.full:
                # Enough; or a snapshot found no seat anywhere, and no shard gave one back
                # since (each such commit raises ``frees``): no seat to draw or take.
                return Secured(me)
            chunk = chunk_size(pool.capacity, shards)
            # A signup larger than what this shard and the pool hold may fit nowhere: only
            # a snapshot can tell, so no seat is drawn for it before one.
            big = 0
            if not whole:
                big = sum(s for s in sizes if pool.capacity >= s > me.free + pool.undealt)
            first = plan(pool, me, need_now - big, chunk)
            if first.draw:
                with contextlib.suppress(ConditionFailed, TransactionCancelled):
                    self.draw(event_id, pool, shard, first.draw)  # lost: another drew first
                continue
            snapped, shares = self.snapshot(event_id, shards)
            if snapped is None:
                return Secured(me)
            me = shares[shard]
            # What could be left anywhere: undealt seats, every shard's slack, and the seats
            # of shards that hold (a lapsed hold's seat is free once its shard steps).
            left = snapped.undealt + sum(
                s.free + (s.taken if s.due_at is not None else 0) for s in shares
            )
            need_snap = need_now - sum(s for s in sizes if s > left)
            rest = plan(snapped, me, need_snap, chunk, [s for s in shares if s.shard != shard])
            if rest.draw:
                whole = True
                continue  # seats in the pool (back, or for a signup that fits): draw them
            takes = tuple((shares[k], seats) for k, seats in rest.steals)
            holding = tuple(
                (s.shard, s.due_at) for s in shares if s.due_at is not None and s.shard != shard
            )
            # Full, unless a hold lapses: only with no hold anywhere is it full until a seat
            # is given back (a hold is made only from a free seat).
            no_holds = not any(s.due_at is not None for s in shares)
            if snapped.undealt == 0 and not any(s.free for s in shares) and no_holds:
                self._mark_full(event_id, snapped)
            return Secured(me, takes, holding if rest.seats < need_snap - me.free else ())
        raise StoreUnavailableError(
            f"event {event_id!r} shard {shard}: seats kept moving under {SECURE_ATTEMPTS} tries"
        )

    def _mark_full(self, event_id: str, pool: Pool) -> None:
        """Note on the pool that ``pool``'s snapshot found no seat left anywhere
        (``"<frees>/<dealt>"``, ``Pool.full``): only if no shard gave seats back since
        (``frees`` as read) and nothing was added (its capacity and ``dealt`` as read); else
        nothing (the next shard short of seats looks again)."""
        frees_as_read = "#frees = :frees"
        if pool.frees == 0:
            frees_as_read = f"(attribute_not_exists(#frees) OR {frees_as_read})"
        with contextlib.suppress(ConditionFailed):
            self.tables.dynamo.call(
                "update_item",
                TableName=self._table,
                Key=control_key(ControlKey.event(event_id)),
                UpdateExpression="SET #full = :mark",
                ConditionExpression=(
                    f"{frees_as_read} AND #capacity = :capacity AND #dealt = :dealt"
                ),
                ExpressionAttributeNames={
                    "#full": Attr.FULL_AT,
                    "#frees": Attr.FREES,
                    "#capacity": Attr.CAPACITY,
                    "#dealt": Attr.DEALT,
                },
                ExpressionAttributeValues={
                    ":mark": {"S": f"{pool.frees}/{pool.dealt}"},
                    ":frees": _n(pool.frees),
                    ":capacity": _n(pool.capacity),
                    ":dealt": _n(pool.dealt),
                },
            )

    # -- plumbing -----------------------------------------------------------------------

    def _raise_quota(self, event_id: str, shard: int, seats: int) -> dict[str, Any]:
        # Only a shard created with its event (``EventItems.create_event``) is dealt seats.
        return {
            "TableName": self._table,
            "Key": control_key(ControlKey.event(shard_key(event_id, shard))),
            "UpdateExpression": "ADD #quota :seats",
            "ConditionExpression": "attribute_exists(#pk)",
            "ExpressionAttributeNames": {"#quota": Attr.CAPACITY, "#pk": ControlKey.PK},
            "ExpressionAttributeValues": {":seats": _n(seats)},
        }

    def _transact(self, updates: Sequence[dict[str, Any]]) -> None:
        """One move, as one transaction. Its token makes the store's retries of it (a
        throttle, a 5xx after it was applied) one move: DynamoDB applies a token once in
        ten minutes, and answers its repeats as the first (moto ignores it)."""
        self.tables.dynamo.call(
            "transact_write_items",
            TransactItems=[{"Update": u} for u in updates],
            ClientRequestToken=uuid.uuid4().hex,
        )


def gives(table: str, event_id: str, takes: Sequence[tuple[Share, int]]) -> list[dict[str, Any]]:
    """The givers' writes of ``takes`` (giving share as read, seats), for the taker's commit
    transaction: each lowers its quota on condition that its ``version`` and quota are
    what was read, so the slack it gives is what was counted, and moves nothing else (its
    version included: its own commit, decided from the quota before, then conflicts on
    the quota it read)."""
    updates = []
    for giver, seats in takes:
        version_is = "#version = :version"
        if giver.version == 0:
            version_is = f"(attribute_not_exists(#version) OR {version_is})"
        updates.append(
            {
                "TableName": table,
                "Key": control_key(ControlKey.event(shard_key(event_id, giver.shard))),
                "UpdateExpression": "ADD #quota :less",
                "ConditionExpression": f"{version_is} AND #quota = :quota",
                "ExpressionAttributeNames": {"#quota": Attr.CAPACITY, "#version": Attr.VERSION},
                "ExpressionAttributeValues": {
                    ":less": _n(-seats),
                    ":version": _n(giver.version),
                    ":quota": _n(giver.quota),
                },
            }
        )
    return updates


def _pool(item: dict[str, Any]) -> Pool:
    mark = item.get(Attr.FULL_AT)
    full_at = None
    if isinstance(mark, str) and mark.count("/") == 1:
        frees, dealt = mark.split("/")
        if frees.isdigit() and dealt.isdigit():
            full_at = (int(frees), int(dealt))
    waiters = item.get(Attr.WAITERS)
    return Pool(
        capacity=int(item.get(Attr.CAPACITY, 0)),
        dealt=int(item.get(Attr.DEALT, 0)),
        frees=int(item.get(Attr.FREES, 0)),
        full_at=full_at,
        waitlist=int(item.get(Attr.WAITLIST, 0)),
        waiting=int(item.get(Attr.WAITING, 0)),
        waiters=frozenset(int(k) for k in waiters) if isinstance(waiters, set) else frozenset(),
        joined=int(item.get(Attr.WAITERS_JOINED, 0)),
    )


def freed(table: str, event_id: str) -> dict[str, Any]:
    """The pool's side of a shard commit that gives seats back (its ``taken`` goes down):
    ``frees`` raised, so a full mark set before it no longer holds (``Pool.full``)."""
    return pool_update(table, event_id, PoolChange(frees=True))


@dataclass(frozen=True)
class PoolChange:
    """What one shard commit changes on its pool, in the commit's transaction (one write of
    the pool: a transaction may name an item once).

    ``frees``: the shard gives seats back (``Pool.full``). ``waiting``: how many more (or
    fewer) signups wait in the shard; ``join``/``leave``: the shard's number, when its
    waitlist was empty and is not (is now empty). ``joined_from``: the pool as the shard
    read it before it decided, when the commit puts new signups on its waitlist: they
    wait because no seat was left anywhere, as of that read, so the commit stands only if
    no shard gave seats back since (``frees``) and the capacity is the same; and only
    while the event's waitlist has room for them all (``waiting`` at most its bound less
    what is added)."""

    frees: bool = False
    waiting: int = 0
    join: int | None = None
    leave: int | None = None
    joined_from: Pool | None = None
    #: The pool as read before deciding, when the commit gives seats back on an event with
    #: a waitlist: the commit wakes the shards that had someone waiting then, so it stands
    #: only if no shard's waitlist has started since (``Attr.WAITERS_JOINED`` as read).
    freed_from: Pool | None = None

    def __bool__(self) -> bool:
        return bool(
            self.frees
            or self.waiting
            or self.join is not None
            or self.leave is not None
            or self.joined_from is not None
            or self.freed_from is not None
        )


def pool_update(table: str, event_id: str, change: PoolChange) -> dict[str, Any]:
    """The pool's side of a shard commit (``PoolChange``), an ``Update`` of a transaction."""
    names: dict[str, str] = {"#pk": ControlKey.PK}
    values: dict[str, Any] = {}
    adds: list[str] = []
    deletes: list[str] = []
    conditions = ["attribute_exists(#pk)"]
    if change.frees:
        names["#frees"] = Attr.FREES
        values[":one"] = _n(1)
        adds.append("#frees :one")
    if change.waiting or change.joined_from is not None:  # (an update names something)
        names["#waiting"] = Attr.WAITING
        values[":waiting"] = _n(change.waiting)
        adds.append("#waiting :waiting")
    if change.join is not None:
        names["#waiters"] = Attr.WAITERS
        names["#joined"] = Attr.WAITERS_JOINED
        values[":join"] = {"NS": [number_text(change.join)]}
        values[":one"] = _n(1)
        adds += ["#waiters :join", "#joined :one"]
    if change.leave is not None:
        names["#waiters"] = Attr.WAITERS
        values[":leave"] = {"NS": [number_text(change.leave)]}
        deletes.append("#waiters :leave")
    read = change.joined_from
    if read is not None:
        names["#frees"] = Attr.FREES
        names["#capacity"] = Attr.CAPACITY
        values[":frees_read"] = _n(read.frees)
        values[":capacity_read"] = _n(read.capacity)
        frees_as_read = "#frees = :frees_read"
        if read.frees == 0:
            frees_as_read = f"(attribute_not_exists(#frees) OR {frees_as_read})"
        conditions += [frees_as_read, "#capacity = :capacity_read"]
        if change.waiting > 0:
            names["#waiting"] = Attr.WAITING
            values[":most"] = _n(read.waitlist - change.waiting)
            conditions.append("(attribute_not_exists(#waiting) OR #waiting <= :most)")
            if read.waitlist - change.waiting < 0:
                conditions.append("attribute_not_exists(#pk)")  # never: past the bound
    if change.freed_from is not None:
        names["#joined"] = Attr.WAITERS_JOINED
        values[":joined_read"] = _n(change.freed_from.joined)
        joined_as_read = "#joined = :joined_read"
        if change.freed_from.joined == 0:
            joined_as_read = f"(attribute_not_exists(#joined) OR {joined_as_read})"
        conditions.append(joined_as_read)
    if change.waiting > 0 and read is None:
        raise ValueError("signups join a waitlist only against the pool they were decided from")
    if not adds:
        raise ValueError("a pool update that changes nothing")
    expression = "ADD " + ", ".join(adds)
    if deletes:
        expression += " DELETE " + ", ".join(deletes)
    return {
        "TableName": table,
        "Key": control_key(ControlKey.event(event_id)),
        "UpdateExpression": expression,
        "ConditionExpression": " AND ".join(conditions),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def _share(shard: int, item: dict[str, Any] | None) -> Share:
    if item is None:
        return Share(shard=shard, quota=0, taken=0, version=0)
    due = item.get(Attr.HOLD_DUE_AT)
    return Share(
        shard=shard,
        quota=int(item.get(Attr.CAPACITY, 0)),
        taken=int(item.get(Attr.TAKEN, 0)),
        version=int(item.get(Attr.VERSION, 0)),
        due_at=int(due) if due is not None else None,
    )

"""Escrow on DynamoDB: the moves of a sharded event's seats, each one conditional write.

The pool is the event item (``Attr.CAPACITY``, ``Attr.DEALT``); each shard's share is an
item of its own (``ControlKey.share``: ``Attr.QUOTA``, ``Attr.TAKEN``, ``Attr.VERSION``).
What ``turnstile.engine.escrow`` plans, this module does, so that a seat is always in exactly
one place, whatever crashes, retries or races come between the moves:

* **draw** (pool to shard): one transaction, the pool's ``dealt`` raised on condition that
  it stays within the capacity it was read with, the shard's ``quota`` raised by as much.
  Both or neither; a crash after it leaves the seats in the shard's quota, where the shard
  (or a shard that takes them) gives them later.
* **take** (shard to shard): one transaction, the giving shard's ``quota`` lowered on
  condition that its ``version`` and ``quota`` are what was read (nothing given and nothing
  taken since: its slack is what was counted), the taking shard's raised by as much.
* **commit** (seats given or given back by a shard): ``taken`` set and ``version`` moved,
  on condition that the version is the one decided from and the ``quota`` still covers the
  new ``taken`` (a take that landed first leaves it covered, or the commit decides again).

``secure`` strings them together for a shard about to decide: it returns the shard's share
once it holds the seats it needs, or every seat left anywhere. Each failed condition means
another writer moved first, so every retry follows progress; a shard that keeps losing
raises ``StoreUnavailableError`` (its batch is retried) rather than decide short.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnstile.base.contract import Attr, ControlKey
from turnstile.base.errors import StoreUnavailableError
from turnstile.engine.escrow import Pool, Share, chunk_size, plan
from turnstile.storage.dynamo import (
    BATCH_GET_LIMIT,
    ConditionFailed,
    Tables,
    TransactionCancelled,
    chunks,
    control_key,
    from_item,
    number_text,
)

__all__ = ["SECURE_ATTEMPTS", "Escrow"]

#: How often ``secure`` starts again after another writer moved first.
SECURE_ATTEMPTS = 16


def _n(value: int) -> dict[str, str]:
    return {"N": number_text(value)}


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
        if item is None:
            return None
        return Pool(capacity=int(item[Attr.CAPACITY]), dealt=int(item.get(Attr.DEALT, 0)))

    def share(self, event_id: str, shard: int) -> Share:
        """Shard ``shard``'s share as it is now (nothing dealt yet: all zero)."""
        key = control_key(ControlKey.share(event_id, shard))
        return _share(shard, self.tables.dynamo.get(self._table, key))

    def shares(self, event_id: str, shards: int) -> list[Share]:
        """Every shard's share, read strongly consistent, in shard order."""
        found: dict[int, dict[str, Any]] = {}
        keys = [control_key(ControlKey.share(event_id, k)) for k in range(shards)]
        for part in chunks(keys, BATCH_GET_LIMIT):
            request: dict[str, Any] = {self._table: {"Keys": list(part), "ConsistentRead": True}}
            while request:
                response = self.tables.dynamo.call("batch_get_item", RequestItems=request)
                for raw in response.get("Responses", {}).get(self._table, []):
                    item = from_item(raw)
                    found[int(str(item[ControlKey.PK]).rsplit("#", 1)[1])] = item
                request = response.get("UnprocessedKeys") or {}
        return [_share(k, found.get(k)) for k in range(shards)]

    # -- the moves ----------------------------------------------------------------------

    def draw(self, event_id: str, pool: Pool, shard: int, seats: int) -> None:
        """Deal ``seats`` from the pool (as read: ``pool``) to ``shard``; ConditionFailed
        when the pool changed so that they are no longer there."""
        if seats <= 0:
            raise ValueError(f"a draw is of at least one seat, not {seats}")
        pool_update = {
            "TableName": self._table,
            "Key": control_key(ControlKey.event(event_id)),
            "UpdateExpression": "ADD #dealt :seats",
            "ConditionExpression": (
                "#capacity = :capacity AND (attribute_not_exists(#dealt) OR #dealt <= :most)"
            ),
            "ExpressionAttributeNames": {"#dealt": Attr.DEALT, "#capacity": Attr.CAPACITY},
            "ExpressionAttributeValues": {
                ":seats": _n(seats),
                ":capacity": _n(pool.capacity),
                ":most": _n(pool.capacity - seats),
            },
        }
        self._transact([pool_update, self._raise_quota(event_id, shard, seats)])

    def take(self, event_id: str, giver: Share, shard: int, seats: int) -> None:
        """Move ``seats`` of ``giver``'s slack (as read) to ``shard``; ConditionFailed when
        the giver's share changed since it was read."""
        if not 0 < seats <= giver.free or giver.shard == shard:
            raise ValueError(f"shard {giver.shard} cannot give {seats} seats to {shard}")
        give = {
            "TableName": self._table,
            "Key": control_key(ControlKey.share(event_id, giver.shard)),
            "UpdateExpression": "ADD #quota :less",
            "ConditionExpression": "#version = :version AND #quota = :quota",
            "ExpressionAttributeNames": {"#quota": Attr.QUOTA, "#version": Attr.VERSION},
            "ExpressionAttributeValues": {
                ":less": _n(-seats),
                ":version": _n(giver.version),
                ":quota": _n(giver.quota),
            },
        }
        self._transact([give, self._raise_quota(event_id, shard, seats)])

    def commit(self, event_id: str, share: Share, taken: int) -> Share:
        """Set the seats ``share``'s shard has given to ``taken`` (seats given, or given
        back), on condition that nothing else was committed since ``share`` was read and
        its quota covers ``taken``; ConditionFailed otherwise. The share after."""
        if taken < 0:
            raise ValueError(f"a shard cannot have given {taken} seats")
        version = share.version
        condition = "#quota >= :taken AND " + (
            "(attribute_not_exists(#version) OR #version = :version)"
            if version == 0
            else "#version = :version"
        )
        response = self.tables.dynamo.call(
            "update_item",
            TableName=self._table,
            Key=control_key(ControlKey.share(event_id, share.shard)),
            UpdateExpression="SET #taken = :taken, #version = :next",
            ConditionExpression=condition,
            ExpressionAttributeNames={
                "#quota": Attr.QUOTA,
                "#taken": Attr.TAKEN,
                "#version": Attr.VERSION,
            },
            ExpressionAttributeValues={
                ":taken": _n(taken),
                ":version": _n(version),
                ":next": _n(version + 1),
            },
            ReturnValues="ALL_NEW",
        )
        return _share(share.shard, from_item(response["Attributes"]))

    def secure(self, event_id: str, shards: int, shard: int, need: int) -> Share:
        """``shard``'s share once it holds ``need`` free seats, or as many as are left
        anywhere: drawn from the pool first, then taken from the other shards' slack, each
        move planned from what was just read (``turnstile.engine.escrow.plan``)."""
        for _ in range(SECURE_ATTEMPTS):
            me = self.share(event_id, shard)
            if me.free >= need:
                return me
            pool = self.pool(event_id)
            if pool is None:
                return me
            chunk = chunk_size(pool.capacity, shards)
            first = plan(pool, me, need, chunk)
            try:
                if first.draw:
                    self.draw(event_id, pool, shard, first.draw)
                    me = self.share(event_id, shard)
                    if me.free >= need:
                        return me
                others = [s for s in self.shares(event_id, shards) if s.shard != shard]
                pool = self.pool(event_id) or pool
                rest = plan(pool, me, need, chunk, others)
                if rest.seats == 0:
                    return me  # nothing left anywhere
                if rest.draw:
                    self.draw(event_id, pool, shard, rest.draw)
                by_shard = {s.shard: s for s in others}
                for giver, seats in rest.steals:
                    self.take(event_id, by_shard[giver], shard, seats)
            except (ConditionFailed, TransactionCancelled):
                continue  # another writer moved first: read again
        raise StoreUnavailableError(
            f"event {event_id!r} shard {shard}: seats kept moving under {SECURE_ATTEMPTS} tries"
        )

    # -- plumbing -----------------------------------------------------------------------

    def _raise_quota(self, event_id: str, shard: int, seats: int) -> dict[str, Any]:
        return {
            "TableName": self._table,
            "Key": control_key(ControlKey.share(event_id, shard)),
            "UpdateExpression": (
                "ADD #quota :seats SET #taken = if_not_exists(#taken, :zero), "
                "#version = if_not_exists(#version, :zero)"
            ),
            "ExpressionAttributeNames": {
                "#quota": Attr.QUOTA,
                "#taken": Attr.TAKEN,
                "#version": Attr.VERSION,
            },
            "ExpressionAttributeValues": {":seats": _n(seats), ":zero": _n(0)},
        }

    def _transact(self, updates: Sequence[dict[str, Any]]) -> None:
        self.tables.dynamo.call(
            "transact_write_items", TransactItems=[{"Update": u} for u in updates]
        )


def _share(shard: int, item: dict[str, Any] | None) -> Share:
    if item is None:
        return Share(shard=shard, quota=0, taken=0, version=0)
    return Share(
        shard=shard,
        quota=int(item.get(Attr.QUOTA, 0)),
        taken=int(item.get(Attr.TAKEN, 0)),
        version=int(item.get(Attr.VERSION, 0)),
    )

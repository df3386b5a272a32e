"""The signup store: intake records, decisions, and the commit that decides them.

``SignupStore`` is what every part of turnstile reads and writes signups through. It is
made of parts, each in its own module: the event items (``turnstile.storage.events``),
parked events (``turnstile.storage.parking``), and, here, the intake records, the decision
items and the commit; all of them talk to DynamoDB through ``turnstile.storage.dynamo``
(retries, batches, pages). The sweeper's own items and writes are its
``turnstile.storage.ledger``.

The commit design (why each decision costs one write unit, and why that is safe):

* The event item is the serialization point. A group's decisions are committed by one
  ``UpdateItem`` on it, conditioned on ``version`` (an optimistic lock), on the
  ``capacity`` and ``state`` they were decided from (organizers change those without
  touching ``version``: their IAM role may not write it) and, when it takes seats, on
  ``taken <= capacity``; the update stores the new counters and a compact *journal*
  (``turnstile.storage.journal``) of exactly the decisions that commit made.
* The decision items are then *materialized* from that journal with single conditional
  writes, a few at a time in parallel: one write unit per decision item of up to 1 KB,
  instead of the two a transaction charges. A first decision is written only where no
  item exists; a change to an item decided before (the lifecycle: a confirmation, a
  cancellation, an expiry, a promotion) only while its status is the one the change was
  decided from. No transition returns to a status a signup left, so materializing is
  idempotent, and a stale materialization (a slower processor writing an older journal)
  can never undo a newer one.
* Nothing a producer writes can make an item too big to write: the journal bounds every
  decision, and a commit whose journal would exceed ``MAX_JOURNAL_BYTES`` raises
  ``JournalTooLargeError`` saying how many decisions fit; the processor commits those and
  decides the rest in its next round. The event item stays well under 400 KB.
* Before a processor commits journal N+1 it makes sure journal N is materialized (it
  wrote it itself, or it writes it again). So every decision is either an item or in the
  current journal, and "already decided" is known exactly before each commit. Every
  commit also keeps the event's high-water mark (``Attr.HIGH_WATER``), so that the
  processor reads that only for signups that can be decided already (docs/design.md §4).
* A signup of an event that does not exist has no event item to lock; its rejection is
  a transaction guarded by a ConditionCheck that the event item still does not exist.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

from turnstile.base.contract import (
    DUE_HOLDS_SHARD,
    Attr,
    ControlKey,
    EventState,
    Status,
    WakeReason,
    split_shard_key,
    undecided_shard,
)
from turnstile.base.errors import CommitConflictError, JournalTooLargeError, SignupConflictError
from turnstile.engine.escrow import Pool, Share
from turnstile.engine.lifecycle import Event
from turnstile.storage.dynamo import (
    TRANSACTION_BYTES,
    TRANSACTION_LIMIT,
    ConditionFailed,
    Tables,
    TransactionCancelled,
    chunks_within,
    event_key,
    from_item,
    signup_key,
    to_item,
)
from turnstile.storage.escrow import Escrow, PoolChange, Secured, gives, pool_update
from turnstile.storage.events import EventItems, high_water_text, is_or_absent_as, wake_update
from turnstile.storage.intake import IntakeRecord, parse_intake
from turnstile.storage.items import Decision, Outcome, update_call
from turnstile.storage.items import decision_item as _decision_item
from turnstile.storage.journal import Journal
from turnstile.storage.lineups import LineupPages
from turnstile.storage.parking import ParkedEvents
from turnstile.storage.requests import SignupRequests

__all__ = ["MAX_JOURNAL_BYTES", "SignupStore"]

#: An encoded (compressed) journal stays under this, so the event item that carries it
#: stays under 300 KB, far from DynamoDB's 400 KB item limit (and under it where binary is
#: counted as its base64 text, as moto does).
MAX_JOURNAL_BYTES = 192 * 1024
#: The journal and the lineup together stay under this: a big lineup shrinks the journal's
#: bound (the lineup is bounded by the event's options, ``MAX_LINEUP_ENTRIES``).
MAX_JOURNAL_AND_LINEUP_BYTES = 300 * 1024
#: The most items one TransactWriteItems takes (DynamoDB's limit).
MAX_TRANSACTION_ITEMS = 100
#: The lineup pages one commit may write (a transaction holds at most 4 MB).
MAX_TRANSACTION_PAGE_BYTES = 3 * 1024 * 1024
#: Conditional writes of one materialization sent at once.
MATERIALIZE_THREADS = 8


class SignupStore(Tables, EventItems, LineupPages, ParkedEvents, SignupRequests):
    """DynamoDB access for the three tables. Pass ``client`` to use a stubbed or local one.

    ``intake`` and ``main`` are keyed by ``(event_id, signup_id)``: the producer's record and
    its decision. Everything turnstile keeps for itself (event items, parked events, the
    sweeper's lease and run history) lives in the ``control`` table under ``ControlKey``
    keys, out of reach of any key a producer can write. The constructor is ``Tables``'.
    """

    # -- intake -----------------------------------------------------------------------

    def put_intake(
        self,
        event_id: str,
        signup_id: str,
        seats: int,
        attributes: Mapping[str, Any] | None,
        submitted_at: str,
        expires_at: int | None = None,
        owner: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Write a provisional signup once (``attribute_not_exists``), deleted by TTL at
        ``expires_at`` (epoch seconds; None: kept), and ``owner``'s (who submitted it).

        It carries no ``undecided`` marker: the marker's index entry and its removal would
        cost three write units a signup, and a record the stream never got decided is found
        without it (the on-failure queue's note, the daily full scan: docs/design.md §7).
        The same body again from the same owner returns the stored record and False; a
        different body, or another owner, for the same key raises ``SignupConflictError``.
        """
        values = {
            Attr.EVENT_ID: event_id,
            Attr.SIGNUP_ID: signup_id,
            Attr.SEATS: seats,
            Attr.SUBMITTED_AT: submitted_at,
            Attr.ATTRIBUTES: _decimalize(dict(attributes)) if attributes else None,
            Attr.EXPIRES_AT: expires_at,
            Attr.OWNER: owner,
        }
        try:
            self.dynamo.call(
                "put_item",
                TableName=self.intake_table,
                Item=to_item(values),
                ConditionExpression="attribute_not_exists(#sk)",
                ExpressionAttributeNames={"#sk": Attr.SIGNUP_ID},
            )
            return {k: v for k, v in values.items() if v is not None}, True
        except ConditionFailed:
            pass
        existing = self.get_intake(event_id, signup_id) or {}
        existing.pop(Attr.UNDECIDED, None)  # a re-emission's or a request's, not the body's
        if existing.get(Attr.OWNER) != owner:
            raise SignupConflictError(
                f"signup {signup_id!r} of event {event_id!r} was submitted by another caller"
            )
        same = int(existing.get(Attr.SEATS, 1)) == seats and (
            existing.get(Attr.ATTRIBUTES) or {}
        ) == (_decimalize(attributes) or {})
        if not same:
            raise SignupConflictError(
                f"signup {signup_id!r} of event {event_id!r} was submitted with another body"
            )
        return existing, False

    def get_intake(self, event_id: str, signup_id: str) -> dict[str, Any] | None:
        """The intake record, read strongly consistent, or None."""
        return self.dynamo.get(self.intake_table, signup_key(event_id, signup_id))

    def get_intakes(self, event_id: str, signup_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return self._batch_get(self.intake_table, event_id, list(signup_ids))

    def re_emit(self, event_id: str, signup_id: str) -> bool:
        """Re-emit an intake record into the stream (a MODIFY) by bumping its re-emissions'
        counter (``Attr.RE_EMITS``); it is marked ``undecided`` too (a string shard), which
        lets the MODIFY through the stream filter and keeps the record in the sweeper's
        index until it is decided. False if there is no such record. (The sweeper's own
        re-emissions are fenced by its lease: ``Ledger.fenced_re_emit_many``.)"""
        try:
            self.dynamo.call(
                "update_item",
                TableName=self.intake_table,
                Key=signup_key(event_id, signup_id),
                UpdateExpression="ADD #count :one SET #mark = :shard",
                ConditionExpression="attribute_exists(#sk)",
                ExpressionAttributeNames={
                    "#count": Attr.RE_EMITS,
                    "#sk": Attr.SIGNUP_ID,
                    "#mark": Attr.UNDECIDED,
                },
                ExpressionAttributeValues={
                    ":one": {"N": "1"},
                    ":shard": {"S": undecided_shard(event_id, signup_id)},
                },
            )
        except ConditionFailed:
            return False
        return True

    def intake_items(self, event_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every intake record (or one event's), read consistently, page by page: the
        audit's and the sweeper's daily full scan; never the decision path."""
        return self._read_whole(self.intake_table, event_id)

    # -- decisions --------------------------------------------------------------------

    def get_decision(
        self, event_id: str, signup_id: str, consistent: bool = True
    ) -> dict[str, Any] | None:
        """The decision item, read strongly consistent by default, or None."""
        return self.dynamo.get(self.main_table, signup_key(event_id, signup_id), consistent)

    def get_decisions(self, event_id: str, signup_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Decision items that exist for these signups, read strongly consistent."""
        return self._batch_get(self.main_table, event_id, list(dict.fromkeys(signup_ids)))

    def _batch_get(
        self, table: str, event_id: str, signup_ids: list[str]
    ) -> dict[str, dict[str, Any]]:
        keys = [signup_key(event_id, s) for s in signup_ids]
        items = (from_item(raw) for raw in self.dynamo.batch_get(table, keys))
        return {item[Attr.SIGNUP_ID]: item for item in items}

    def decision_items(self, event_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every decision item (or one event's), read consistently, page by page: the
        audit's; never the decision path."""
        return self._read_whole(self.main_table, event_id)

    def _read_whole(self, table: str, event_id: str | None) -> Iterator[dict[str, Any]]:
        """A Scan of intake or main, or a Query of one event's partition."""
        if event_id is None:
            return self.dynamo.items("scan", TableName=table, ConsistentRead=True)
        return self.dynamo.items(
            "query",
            TableName=table,
            ConsistentRead=True,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": Attr.EVENT_ID},
            ExpressionAttributeValues={":pk": {"S": event_id}},
        )

    def commit(
        self,
        expected: Event,
        outcome: Outcome,
        decided_at: str,
        requests: Mapping[str, IntakeRecord | Mapping[str, Any]],
        expires_at: int | None = None,
        high_water: int | None = None,
        takes: Sequence[tuple[Share, int]] = (),
        pool: Pool | None = None,
        wake: Sequence[str] = (),
    ) -> Journal:
        """Commit a group's decisions and the event's counters in one conditional write.

        ``takes`` (a shard of a sharded event only: giving shard as read, seats): seats
        the shard takes from other shards' slack in this very commit, one transaction
        (``storage.escrow``): its capacity (quota) is raised by them, each giver's lowered on
        condition that it is as read. ``expected.capacity`` is the shard's as read, without
        them; the outcome was decided with them.

        ``pool`` (a shard of a sharded event with a waitlist): the pool as the processor
        read it before it decided. A commit that changes the shard's waitlist tells the
        pool in the same transaction (``storage.escrow.PoolChange``): how many more or fewer
        wait, on condition, when signups join, that the waitlist has room for them and that
        no seat came back or was added since that read. ``wake``: shards' keys woken in the
        same transaction (seats this commit gives back, for their waitlists).

        The journal fixes each decision item to the byte, with the fields it copies from
        ``requests`` (by signup id) and ``expires_at`` (when TTL deletes them; None: kept).
        ``high_water`` (None: left as it is) becomes the event's ``Attr.HIGH_WATER``, in the
        same write: the greatest sequence number of the intake records its commits decided
        from, which the caller computes (the version condition pins the one it read).
        The write is conditioned on every input of the decision: the ``version`` (the
        counters and the journal, the processor's), and the ``capacity`` and ``state`` it
        was decided against (the organizer's, changed without touching ``version``).
        Raises ``CommitConflictError`` when any of them moved on (another processor, a
        capacity change, a close), so the caller reloads and decides again;
        ``JournalTooLargeError`` (nothing written) when the journal would exceed
        ``MAX_JOURNAL_BYTES``, with how many leading decisions would fit.
        """
        assert outcome.state is not None
        journal = Journal.build(
            expected.event_id,
            expected.version + 1,
            decided_at,
            outcome.decisions,
            requests,
            expires_at,
            extras=outcome.extras,
            updates=outcome.updates,
        )
        blob = journal.encoded
        lifecycle = dict(outcome.lifecycle or {})
        split = split_shard_key(expected.event_id)
        # A shard giving seats back, or changing its waitlist, tells its pool in the same
        # transaction (Pool.full, Pool.waiting).
        change = _pool_change(expected, outcome, pool) if split is not None else PoolChange()
        if wake and split is None:
            raise ValueError(f"{expected.event_id!r} is no shard: it wakes no other")
        write = (
            self._lineup_write(
                expected,
                outcome.state,
                lifecycle,
                journal.version,
                # what the transaction has room for beside the event item and the escrow's
                room=MAX_TRANSACTION_ITEMS - 1 - len(takes) - int(bool(change)) - len(wake),
            )
            if outcome.lifecycle is not None
            else None
        )
        lineup = write.lineup if write is not None else None
        pages = write.pages if write is not None else None
        if write is not None and write.plan is not None and write.plan.pages is None:
            pages = b""  # back on the item: the directory goes
        limit = min(
            MAX_JOURNAL_BYTES,
            MAX_JOURNAL_AND_LINEUP_BYTES - len(lineup or b"") - len(pages or b""),
        )
        if len(blob) > limit:
            fits = journal.longest_prefix(limit)
            raise JournalTooLargeError(
                f"event {expected.event_id!r}: a journal of {len(outcome.decisions)} decisions"
                + (f" and {len(outcome.updates)} changes" if outcome.updates else "")
                + f" is {len(blob)} bytes; {fits} fit in {limit}",
                fits=fits,
            )
        names = {
            "#pk": ControlKey.PK,
            "#taken": Attr.TAKEN,
            "#accepted": Attr.ACCEPTED,
            "#version": Attr.VERSION,
            "#journal": Attr.JOURNAL,
            "#floor": Attr.CAPACITY_FLOOR,
            "#capacity": Attr.CAPACITY,
            "#state": Attr.STATE,
        }
        # The event still exists, and is what the decisions were made from: a close or a
        # capacity change that landed first makes this commit conflict.
        condition = " AND ".join(
            (
                "attribute_exists(#pk)",
                _version_is(expected.version),
                is_or_absent_as("#capacity", ":capacity", expected.capacity, 0),
                is_or_absent_as("#state", ":state", expected.state, EventState.OPEN),
            )
        )
        took = sum(seats for _, seats in takes)
        if outcome.state.taken > expected.taken:
            # Only a commit that takes seats depends on room for them: one that only
            # rejects must go through even when an operator left capacity below taken.
            condition += " AND #capacity >= :needed"
        values: dict[str, Any] = {
            ":taken": {"N": str(outcome.state.taken)},
            ":accepted": {"N": str(outcome.state.accepted)},
            ":next": {"N": str(journal.version)},
            ":expected": {"N": str(expected.version)},
            ":capacity": {"N": str(expected.capacity)},
            ":state": {"S": expected.state},
            ":j": {"B": blob},
        }
        if outcome.state.taken > expected.taken:
            values[":needed"] = {"N": str(outcome.state.taken - took)}
        # capacity_floor: what a capacity change is conditioned on (it may not read taken,
        # see update_capacity).
        sets = [
            "#taken = :taken",
            "#accepted = :accepted",
            "#version = :next",
            "#journal = :j",
            "#floor = :taken",
        ]
        removes: list[str] = []
        if high_water is not None:
            names["#high"] = Attr.HIGH_WATER
            values[":high"] = {"S": high_water_text(high_water, journal.version)}
            sets.append("#high = :high")
        if outcome.lifecycle is not None:
            _lifecycle_expression(lifecycle, lineup, pages, names, values, sets, removes)
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        if took:
            values[":took"] = {"N": str(took)}
            expression += " ADD #capacity :took"
        update = {
            "TableName": self.control_table,
            "Key": event_key(expected.event_id),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        page_actions = write.actions(self.control_table) if write is not None else []
        items = 1 + len(takes) + int(bool(change)) + len(wake) + len(page_actions)
        paged = sum(len(blob) for _, blob in write.plan.writes) if write and write.plan else 0
        if items > MAX_TRANSACTION_ITEMS or paged > MAX_TRANSACTION_PAGE_BYTES:
            # a chunk that touches fewer pages fits: the processor decides a shorter one
            raise JournalTooLargeError(
                f"event {expected.event_id!r}: a commit of {items} items and {paged} bytes "
                f"of lineup pages is past a transaction's {MAX_TRANSACTION_ITEMS} items or "
                f"{MAX_TRANSACTION_PAGE_BYTES} bytes",
                fits=0,
            )
        try:
            if takes or change or wake:
                self._commit_taking(
                    expected.event_id, update, takes, change, page_actions, wake, decided_at
                )
            elif page_actions:
                self._commit_paged(expected.event_id, update, page_actions)
            else:
                self.dynamo.call("update_item", **update)
        except ConditionFailed as exc:
            raise CommitConflictError(
                f"event {expected.event_id!r} moved past version {expected.version} "
                "(or its capacity or state changed)"
            ) from exc
        if write is not None:
            self._committed_lineup(write, outcome.state)
        return journal

    def _commit_paged(
        self, event_id: str, update: dict[str, Any], page_actions: list[dict[str, Any]]
    ) -> None:
        """A commit with the lineup pages it writes, one transaction."""
        try:
            self.dynamo.call(
                "transact_write_items",
                TransactItems=[{"Update": update}, *page_actions],
                ClientRequestToken=uuid.uuid4().hex,
            )
        except TransactionCancelled as exc:
            moved = {"ConditionalCheckFailed", "TransactionConflict"}
            if not exc.reasons or moved.intersection(r for r in exc.reasons if r):
                raise CommitConflictError(f"event {event_id!r} moved on") from exc
            raise

    def secure(
        self, event_id: str, shards: int, shard: int, need: int, sizes: Sequence[int] = ()
    ) -> Secured:
        """What shard ``shard`` of sharded event ``event_id`` holds and may take toward
        ``need`` free seats, drawing from the pool first (``Escrow.secure``)."""
        return Escrow(self).secure(event_id, shards, shard, need, sizes)

    def pool(self, event_id: str) -> Pool | None:
        """A sharded event's pool as it is now (None: no such event)."""
        return Escrow(self).pool(event_id)

    def shares(self, event_id: str, shards: int) -> tuple[Pool | None, list[Share]]:
        """A sharded event's pool and every shard's share at one instant (the audit's)."""
        return Escrow(self).snapshot(event_id, shards)

    def _commit_taking(
        self,
        shard: str,
        update: dict[str, Any],
        takes: Sequence[tuple[Share, int]],
        change: PoolChange | None = None,
        page_actions: Sequence[dict[str, Any]] = (),
        wake: Sequence[str] = (),
        now: str | None = None,
    ) -> None:
        """A shard's commit with the seats it takes (and, when it gives seats back, its
        pool's ``frees`` raised), one transaction; CommitConflictError when any of its
        writes' conditions failed (the shard or a giver moved on)."""
        split = split_shard_key(shard)
        if split is None:
            raise ValueError(f"{shard!r} is no shard: it cannot take seats")
        actions = [{"Update": u} for u in gives(self.control_table, split[0], takes)]
        if change is not None and change:
            actions.append({"Update": pool_update(self.control_table, split[0], change)})
        actions += [
            {"Update": wake_update(self.control_table, key, WakeReason.SEATS, now)} for key in wake
        ]
        try:
            self.dynamo.call(
                "transact_write_items",
                TransactItems=[*actions, {"Update": update}, *page_actions],
                ClientRequestToken=uuid.uuid4().hex,
            )
        except TransactionCancelled as exc:
            moved = {"ConditionalCheckFailed", "TransactionConflict"}
            if not exc.reasons or moved.intersection(r for r in exc.reasons if r):
                raise CommitConflictError(
                    f"shard {shard!r} or a shard it takes seats from moved on"
                ) from exc
            raise

    def decision_item(
        self,
        event_id: str,
        decision: Decision,
        decided_at: str,
        request: IntakeRecord | Mapping[str, Any] | None,
        expires_at: int | None = None,
    ) -> dict[str, Any]:
        """The decision item exactly as the contract describes it (``items.decision_item``)."""
        return _decision_item(event_id, decision, decided_at, request, expires_at)

    def journal_items(
        self,
        event_id: str,
        journal: Journal,
        requests: Mapping[str, IntakeRecord | Mapping[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """The journal's decision items. A journal built here, or of format 2 or 3, holds
        their copied fields; one of format 4 read back takes them from ``requests``, or
        else from intake, where their digest is what the commit fixed (``items_from``); one
        of format 1 takes them from there unchecked."""
        if journal.copies is not None:
            return journal.items(event_id)
        requests = requests or {}
        missing = [d.signup_id for d in journal.decisions if d.signup_id not in requests]
        sources: dict[str, IntakeRecord | Mapping[str, Any]] = dict(requests)
        if missing:
            found = self.get_intakes(event_id, missing)
            if journal.digests is not None:
                # Read as the processor reads a stream image, so the same record gives
                # the same copied fields (a field the contract drops is dropped alike).
                keys = {Attr.EVENT_ID: event_id}
                sources.update(
                    {
                        sid: parse_intake(item, "", {**keys, Attr.SIGNUP_ID: sid})
                        for sid, item in found.items()
                    }
                )
            else:
                sources.update(found)
        if journal.digests is not None:
            return journal.items_from(event_id, sources)
        return [
            self.decision_item(event_id, d, journal.decided_at, sources.get(d.signup_id))
            for d in journal.decisions
        ]

    def materialize(
        self,
        event_id: str,
        journal: Journal,
        requests: Mapping[str, IntakeRecord | Mapping[str, Any]] | None = None,
    ) -> list[Decision]:
        """Write the journal's decision items and changes (idempotent: the journal fixes
        their content, and each write is conditioned, see the module's notes).

        Returns the journal's *void* first decisions: those whose signup's item holds
        another first decision (another sequence number), made before from an earlier
        intake record of the same key. The commit counted them, and they never took
        effect: the caller takes them back out of the event (``StreamProcessor``). A
        write refused because the item is this very decision (a replay) is no such thing.

        ``requests`` is read only for a journal of format 1 (see ``journal_items``).
        """
        writes: list[dict[str, Any]] = [
            {
                "op": "put_item",
                "TableName": self.main_table,
                "Item": item,
                "ConditionExpression": "attribute_not_exists(#sk)",
                "ExpressionAttributeNames": {"#sk": Attr.SIGNUP_ID},
                # free on a refusal (no read units): tells a replay from a void decision
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
            for item in self.journal_items(event_id, journal, requests)
        ]
        firsts = len(writes)
        writes += [update_call(self.main_table, event_id, u) for u in journal.retained_updates()]
        if len(writes) <= 1:
            olds = [self._conditional(write) for write in writes]
        else:
            with ThreadPoolExecutor(min(MATERIALIZE_THREADS, len(writes))) as pool:
                olds = list(pool.map(self._conditional, writes))
        return [
            decision
            for decision, old in zip(journal.decisions, olds[:firsts], strict=True)
            if old is not None
            and old.get(Attr.SEQUENCE_NUMBER, {}).get("S") != decision.sequence_number
        ]

    def keep_decision(self, event_id: str, signup_id: str, until: int | None) -> None:
        """Keep a decision until ``until`` (epoch seconds; None: for good), never shorter
        than it is kept now (conditioned: a later, longer keep is never undone)."""
        names = {"#e": Attr.EXPIRES_AT}
        if until is None:
            kwargs: dict[str, Any] = {
                "UpdateExpression": "REMOVE #e",
                "ConditionExpression": "attribute_exists(#e)",
            }
        else:
            kwargs = {
                "UpdateExpression": "SET #e = :until",
                "ConditionExpression": "#e < :until",
                "ExpressionAttributeValues": {":until": {"N": str(int(until))}},
            }
        with contextlib.suppress(ConditionFailed):
            self.dynamo.call(
                "update_item",
                TableName=self.main_table,
                Key=signup_key(event_id, signup_id),
                ExpressionAttributeNames=names,
                **kwargs,
            )

    def _conditional(self, write: Mapping[str, Any]) -> dict[str, Any] | None:
        """One conditional write of a materialization; a false condition means the item
        is already as this write, or a later one, left it: then the item as it is, when
        the write asked for it (typed), else None."""
        kwargs = dict(write)
        operation = kwargs.pop("op")
        try:
            self.dynamo.call(operation, **kwargs)
        except ConditionFailed as refused:
            item = refused.response.get("Item")
            return dict(item) if isinstance(item, Mapping) else None
        return None

    def reject_without_event(
        self,
        event_id: str,
        decisions: Sequence[Decision],
        requests: Mapping[str, IntakeRecord],
        decided_at: str,
        expires_at: int | None = None,
        event_may_appear: bool = True,
    ) -> None:
        """Write rejections for an event with no event item, only while it still has none.

        Each transaction checks that the event item does not exist, so a rejection can
        never race with an acceptance committed after the event was created. Transactions
        hold at most 99 items and ``TRANSACTION_BYTES``. Without ``event_may_appear`` (an
        event id that is no id: no such event can ever be created, and its key may be one
        DynamoDB refuses) there is nothing to check: the puts alone, each conditioned on
        no decision existing.
        """
        items = [
            self.decision_item(event_id, d, decided_at, requests.get(d.signup_id), expires_at)
            for d in decisions
        ]
        for chunk in chunks_within(items, TRANSACTION_LIMIT - 1, TRANSACTION_BYTES):
            actions: list[dict[str, Any]] = []
            if event_may_appear:
                actions.append(
                    {
                        "ConditionCheck": {
                            "TableName": self.control_table,
                            "Key": event_key(event_id),
                            "ConditionExpression": "attribute_not_exists(#pk)",
                            "ExpressionAttributeNames": {"#pk": ControlKey.PK},
                        }
                    }
                )
            actions += [
                {
                    "Put": {
                        "TableName": self.main_table,
                        "Item": item,
                        "ConditionExpression": "attribute_not_exists(#sk)",
                        "ExpressionAttributeNames": {"#sk": Attr.SIGNUP_ID},
                    }
                }
                for item in chunk
            ]
            try:
                self.dynamo.call("transact_write_items", TransactItems=actions)
            except TransactionCancelled as exc:
                raise CommitConflictError(
                    f"event {event_id!r} appeared, or a signup was decided, meanwhile"
                ) from exc


def _lifecycle_expression(
    lifecycle: Mapping[str, Any],
    lineup: bytes | None,
    pages: bytes | None,
    names: dict[str, str],
    values: dict[str, Any],
    sets: list[str],
    removes: list[str],
) -> None:
    """The commit's writes of the event's lifecycle state: the lineup (or a long one's
    directory, ``storage.lineups``), the counts per status, and the earliest hold due (the
    key of the due-holds index), each removed when there is none."""
    names.update(
        {
            "#lineup": Attr.LINEUP,
            "#counts": Attr.STATUS_COUNTS,
            "#due": Attr.HOLD_DUE_AT,
            "#due_signup": Attr.HOLD_DUE_SIGNUP,
            "#due_shard": Attr.HOLD_DUE_SHARD,
        }
    )
    counts = lifecycle.get(Attr.STATUS_COUNTS) or {}
    values[":counts"] = {"M": {k: {"N": str(int(v))} for k, v in counts.items()}}
    sets.append("#counts = :counts")
    if lineup:
        values[":lineup"] = {"B": lineup}
        sets.append("#lineup = :lineup")
    else:
        removes.append("#lineup")
    if pages:
        names["#pages"] = Attr.LINEUP_PAGES
        values[":pages"] = {"B": pages}
        sets.append("#pages = :pages")
    elif pages is not None:  # b"": the lineup is back on the item
        names["#pages"] = Attr.LINEUP_PAGES
        removes.append("#pages")
    due = lifecycle.get(Attr.HOLD_DUE_AT)
    if due is not None:
        values[":due"] = {"N": str(int(due))}
        values[":due_signup"] = {"S": str(lifecycle[Attr.HOLD_DUE_SIGNUP])}
        values[":due_shard"] = {"S": DUE_HOLDS_SHARD}
        sets += ["#due = :due", "#due_signup = :due_signup", "#due_shard = :due_shard"]
    else:
        removes += ["#due", "#due_signup", "#due_shard"]


def _version_is(expected: int) -> str:
    """The optimistic lock's condition on ``#version`` = ``:expected``. An event item
    written by hand may have no version: that reads as 0, so 0 also matches its absence."""
    if expected == 0:
        return "(attribute_not_exists(#version) OR #version = :expected)"
    return "#version = :expected"


def _decimalize(value: Any) -> Any:
    """JSON floats and ints as DynamoDB returns them (Decimal), for comparing bodies."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float | int):
        return Decimal(str(value))
    if isinstance(value, Mapping):
        return {k: _decimalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_decimalize(v) for v in value]
    return value


def _pool_change(expected: Event, outcome: Outcome, pool: Pool | None) -> PoolChange:
    """What a shard's commit changes on its pool: seats given back (``frees``), and for an
    event with a waitlist, the change in how many wait in the shard (``PoolChange``)."""
    assert outcome.state is not None
    frees = outcome.state.taken < expected.taken
    if expected.waitlist <= 0:
        return PoolChange(frees=frees)
    before, after = len(expected.waiting), len(outcome.state.waiting)
    joined = any(d.status == Status.WAITLISTED for d in outcome.decisions)
    if joined and pool is None:
        raise ValueError(
            f"{expected.event_id!r}: signups join a shard's waitlist only against its pool"
        )
    return PoolChange(
        frees=frees,
        waiting=after - before,
        join=expected.shard if before == 0 and after > 0 else None,
        leave=expected.shard if before > 0 and after == 0 else None,
        joined_from=pool if joined else None,
        freed_from=pool if frees else None,
    )

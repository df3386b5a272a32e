"""``FakeStore``: the processor's store (``turnstile.storage.ports.ProcessorStore``) in memory.

Same semantics as ``SignupStore`` on every method the processor calls, held to it by
``tests/contract/test_processor_store_contract.py``, which runs the same cases against both.
It keeps DynamoDB's typed items in three dicts (one per table, keyed like the table) and
builds them with the real store's pure code (``Journal``, ``SignupStore.journal_items`` and
``decision_item``, ``to_item``): what it stores is, to the byte, what the real one writes.
Only the conditions and the key lookups are its own.

For failure paths it injects faults: ``fail_next("commit", times=3,
error=CommitConflictError)`` makes the next three commits raise before writing anything
(``after=True``: after writing, a response lost on the way back; ``skip=1``: the one after
next), ``before_next`` runs
something just before a call (another writer getting in first). Every call is logged in
``calls`` as ``(method, event_id)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from turnstile.base.clock import ms_of, utc_now
from turnstile.base.contract import (
    CONTROL_TABLE,
    DUE_HOLDS_SHARD,
    INTAKE_TABLE,
    MAIN_TABLE,
    Attr,
    ControlKey,
    EventState,
    ParkAttr,
    WakeAttr,
    WakeReason,
    shard_key,
    split_shard_key,
)
from turnstile.base.errors import (
    CapacityBelowTakenError,
    CommitConflictError,
    EventExistsError,
    EventNotFoundError,
    JournalTooLargeError,
    StoreUnavailableError,
)
from turnstile.engine.escrow import Pool, Share, chunk_size, plan
from turnstile.engine.lifecycle import Event
from turnstile.engine.lineup import encode_lineup
from turnstile.storage import dynamo, events, parking
from turnstile.storage import store as real
from turnstile.storage.dynamo import from_item, to_item
from turnstile.storage.escrow import Secured
from turnstile.storage.events import EventRecord, high_water_text
from turnstile.storage.intake import IntakeRecord, parse_intake
from turnstile.storage.items import Decision, Outcome
from turnstile.storage.journal import Journal
from turnstile.storage.parking import MAX_PARKING_ERROR_CHARS
from turnstile.storage.store import SignupStore

__all__ = ["FakeStore", "Fault"]

Key = tuple[str, str]
Item = dict[str, Any]


@dataclass
class Fault:
    """An injected failure of the next ``times`` calls of ``method`` (None: every call)."""

    method: str
    error: BaseException | type[BaseException]
    times: int | None = 1
    after: bool = False
    event_id: str | None = None
    #: Matching calls to let through first.
    skip: int = 0

    def exception(self) -> BaseException:
        if isinstance(self.error, BaseException):
            return self.error
        return self.error(f"injected: {self.method}")


def _number(item: Mapping[str, Any], name: str) -> Decimal | None:
    value = item.get(name)
    return Decimal(value["N"]) if value is not None and "N" in value else None


def _string(item: Mapping[str, Any], name: str) -> str | None:
    value = item.get(name)
    return value["S"] if value is not None and "S" in value else None


def _is_or_absent_as(item: Mapping[str, Any], name: str, expected: Any, default: Any) -> bool:
    """``#name = :expected``, also true of an absent attribute when ``expected`` is what
    an absent one reads as (``store._is_or_absent_as``)."""
    if name not in item:
        return expected == default
    value = item[name]
    if "N" in value:
        return isinstance(expected, int | Decimal) and Decimal(value["N"]) == expected
    if "S" in value:
        return value["S"] == expected
    return False


class FakeStore:
    """An in-memory ``ProcessorStore`` (and the event set-up calls tests need)."""

    def __init__(self) -> None:
        self.intake_table = INTAKE_TABLE.name
        self.main_table = MAIN_TABLE.name
        self.control_table = CONTROL_TABLE.name
        #: Typed items per table name, keyed by their key values, as DynamoDB keeps them.
        self.tables: dict[str, dict[Key, Item]] = {
            self.intake_table: {},
            self.main_table: {},
            self.control_table: {},
        }
        #: Every call, in order: (method, event_id).
        self.calls: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        self._before: list[tuple[str, Callable[[], Any]]] = []
        # The real store's pure item builders; its client is never called.
        self._items = SignupStore(client=object())

    # -- fault injection -------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        times: int | None = 1,
        error: BaseException | type[BaseException] = StoreUnavailableError,
        *,
        after: bool = False,
        event_id: str | None = None,
        skip: int = 0,
    ) -> Fault:
        """Make the next ``times`` calls of ``method`` (of ``event_id``'s, if given) raise
        ``error`` (a class, or an instance raised as is); ``times=None``: until removed with
        ``clear_faults``. ``after``: the call does its writes, then raises. ``skip``: let
        that many matching calls through first."""
        if not callable(getattr(self, method, None)):
            raise AttributeError(f"FakeStore has no method {method!r}")
        fault = Fault(method, error, times, after, event_id, skip)
        self.faults.append(fault)
        return fault

    def before_next(self, method: str, action: Callable[[], Any]) -> None:
        """Run ``action`` once, just before the next call of ``method``."""
        self._before.append((method, action))

    def clear_faults(self) -> None:
        self.faults.clear()
        self._before.clear()

    def count(self, method: str, event_id: str | None = None) -> int:
        """How many times ``method`` was called (for ``event_id``, if given)."""
        return sum(1 for m, e in self.calls if m == method and event_id in (None, e))

    def _enter(self, method: str, event_id: str) -> Fault | None:
        """Log the call, run a pending ``before_next`` action, raise an injected fault
        that strikes before the call; return one that strikes after it."""
        self.calls.append((method, event_id))
        for index, (name, action) in enumerate(self._before):
            if name == method:
                del self._before[index]
                action()
                break
        for fault in self.faults:
            if fault.method != method or fault.event_id not in (None, event_id):
                continue
            if fault.skip:
                fault.skip -= 1
                continue
            if fault.times is not None:
                fault.times -= 1
                if fault.times == 0:
                    self.faults.remove(fault)
            if not fault.after:
                raise fault.exception()
            return fault
        return None

    @staticmethod
    def _exit(fault: Fault | None) -> None:
        if fault is not None:
            raise fault.exception()

    # -- tables ------------------------------------------------------------------------

    @property
    def control(self) -> dict[Key, Item]:
        return self.tables[self.control_table]

    @property
    def main(self) -> dict[Key, Item]:
        return self.tables[self.main_table]

    def items(self, table: str) -> dict[Key, Item]:
        """A copy of a table's typed items by key (what ``tests.helpers.table_items``
        reads from DynamoDB)."""
        return copy.deepcopy(self.tables[table])

    @staticmethod
    def _event_key(event_id: str) -> Key:
        return ControlKey.event(event_id)

    def _event_item(self, event_id: str) -> Item | None:
        return self.control.get(self._event_key(event_id))

    def _read_event(self, event_id: str) -> EventRecord | None:
        item = self._event_item(event_id)
        return EventRecord.from_values(from_item(item)) if item is not None else None

    def _read_parking(self, event_id: str) -> dict[str, Any] | None:
        item = self.control.get(ControlKey.parking(event_id))
        return parking._if_parked(from_item(item)) if item is not None else None

    def _put_decisions(self, items: Iterable[Item]) -> list[Item | None]:
        """First decisions: written only where no item exists (as the real store's
        conditional puts). Per item, the one that was there instead (None: written)."""
        olds: list[Item | None] = []
        for item in items:
            key = (item[Attr.EVENT_ID]["S"], item[Attr.SIGNUP_ID]["S"])
            olds.append(copy.deepcopy(self.main[key]) if key in self.main else None)
            self.main.setdefault(key, copy.deepcopy(item))
        return olds

    def _apply_updates(self, event_id: str, updates: Iterable[Any]) -> None:
        """Changes to items decided before, each only while the item's status is the one
        it was decided from (and its answered requests below the change's)."""
        for u in updates:
            item = self.main.get((event_id, u.signup_id))
            if item is None or item.get(Attr.STATUS) != {"S": u.from_status}:
                continue
            answered = item.get(Attr.REQUEST_COUNT)
            stale = answered is not None and int(answered["N"]) >= (u.request_count or 0)
            if u.request_count is not None and stale:
                continue
            for name, value in u.set.items():
                item[name] = copy.deepcopy(value)
            for name in u.remove:
                item.pop(name, None)

    # -- events (set-up; not part of ProcessorStore) -----------------------------------

    def create_event(
        self, event_id: str, capacity: int, now: str, created_by: str | None = None
    ) -> EventRecord:
        fault = self._enter("create_event", event_id)
        key = self._event_key(event_id)
        if key in self.control:
            raise EventExistsError(f"event {event_id!r} already exists")
        item: Item = {
            ControlKey.PK: {"S": key[0]},
            ControlKey.SK: {"S": key[1]},
            Attr.EVENT_ID: {"S": event_id},
            Attr.CAPACITY: {"N": str(capacity)},
            Attr.STATE: {"S": EventState.OPEN},
            Attr.CREATED_AT: {"S": now},
        }
        if created_by:
            created_by = created_by[: events.MAX_CREATED_BY_CHARS]
            item[Attr.CREATED_BY] = {"S": created_by}
        self.control[key] = item
        self._exit(fault)
        event = Event(event_id=event_id, capacity=capacity)
        return EventRecord(event=event, created_at=now, created_by=created_by or None)

    def close_event(self, event_id: str) -> tuple[EventRecord | None, bool]:
        fault = self._enter("close_event", event_id)
        item = self._event_item(event_id)
        closed = item is not None and _is_or_absent_as(
            item, Attr.STATE, EventState.OPEN, EventState.OPEN
        )
        if item is not None and closed:
            item[Attr.STATE] = {"S": EventState.CLOSED}
        self._exit(fault)
        if item is not None:
            self.wake(event_id, WakeReason.CLOSE)
        return self._read_event(event_id), closed

    def wake(self, event_id: str, reason: str, now: str | None = None) -> None:
        """The event's wake-up item, as ``EventItems.wake`` writes it (its stream record,
        on AWS and the local stack, is the processor's tick: the fake has no stream)."""
        key = ControlKey.wake(event_id)
        item = self.control.setdefault(
            key, {ControlKey.PK: {"S": key[0]}, ControlKey.SK: {"S": key[1]}}
        )
        item[WakeAttr.WAKES] = {"N": str(int(_number(item, WakeAttr.WAKES) or 0) + 1)}
        item[WakeAttr.WOKEN_AT] = {"S": now or utc_now()}
        item[WakeAttr.REASON] = {"S": reason}
        item.pop(Attr.HOLD_DUE_AT, None)
        item.pop(Attr.HOLD_DUE_SHARD, None)

    def update_capacity(self, event_id: str, capacity: int, attempts: int = 10) -> EventRecord:
        fault = self._enter("update_capacity", event_id)
        current = self._read_event(event_id)
        if current is None:
            raise EventNotFoundError(f"no such event {event_id!r}")
        event = current.event
        if capacity < event.taken:
            raise CapacityBelowTakenError(event_id, capacity, event.taken)
        item = self._event_item(event_id)
        assert item is not None
        floor = _number(item, Attr.CAPACITY_FLOOR)
        if floor is not None and floor > capacity:
            # Only an item written by hand (every commit sets the floor to taken): the
            # real store's condition fails on every attempt.
            raise StoreUnavailableError(
                f"event {event_id!r} kept changing under the capacity update; try again"
            )
        lowest = event.capacity if current.min_capacity is None else current.min_capacity
        item[Attr.CAPACITY] = {"N": str(capacity)}
        item[Attr.MIN_CAPACITY] = {"N": str(min(lowest, capacity))}
        self._exit(fault)
        self.wake(event_id, WakeReason.CAPACITY)
        updated = self._read_event(event_id)
        assert updated is not None
        return updated

    # -- ProcessorStore: the event item and its decisions --------------------------------

    def get_event(self, event_id: str, consistent: bool = True) -> EventRecord | None:
        fault = self._enter("get_event", event_id)
        event = self._read_event(event_id)
        self._exit(fault)
        return event

    def load_lineup(self, record: EventRecord) -> EventRecord:
        return record  # this store keeps every lineup on its event item

    def get_decisions(self, event_id: str, signup_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        fault = self._enter("get_decisions", event_id)
        found: dict[str, dict[str, Any]] = {}
        for signup_id in dict.fromkeys(signup_ids):
            item = self.main.get((event_id, signup_id))
            if item is not None:
                found[signup_id] = from_item(item)
        self._exit(fault)
        return found

    def secure(
        self, event_id: str, shards: int, shard: int, need: int, sizes: Sequence[int] = ()
    ) -> Secured:
        """The escrow's moves on the fake's items, as ``Escrow.secure`` makes them: draw
        from the pool while it has seats, then plan takes from the other shards."""
        fault = self._enter("secure", event_id)

        def share(k: int) -> Share:
            item = self._event_item(shard_key(event_id, k)) or {}
            return Share(
                k,
                int(_number(item, Attr.CAPACITY) or 0),
                int(_number(item, Attr.TAKEN) or 0),
                int(_number(item, Attr.VERSION) or 0),
            )

        me = share(shard)
        pool_item = self._event_item(event_id)
        if pool_item is not None:
            capacity = int(_number(pool_item, Attr.CAPACITY) or 0)
            need -= sum(s for s in sizes if s > capacity)
        if me.free >= need or pool_item is None:
            self._exit(fault)
            return Secured(me)
        pool = Pool(
            int(_number(pool_item, Attr.CAPACITY) or 0), int(_number(pool_item, Attr.DEALT) or 0)
        )
        chunk = chunk_size(pool.capacity, shards)
        others = [share(k) for k in range(shards) if k != shard]
        planned = plan(pool, me, need, chunk, others)
        if planned.draw:
            dealt = str(pool.dealt + planned.draw)
            pool_item[Attr.DEALT] = {"N": dealt}
            pool_item[Attr.CAPACITY_FLOOR] = {"N": dealt}
            mine = self._event_item(shard_key(event_id, shard))
            assert mine is not None
            mine[Attr.CAPACITY] = {"N": str(me.quota + planned.draw)}
            self._exit(fault)
            return Secured(share(shard))
        takes = tuple((share(k), seats) for k, seats in planned.steals)
        self._exit(fault)
        return Secured(me, takes)

    def pool(self, event_id: str) -> Pool | None:
        raise NotImplementedError("the in-memory store has no waitlists on sharded events")

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
        if pool is not None or wake:
            raise NotImplementedError("the in-memory store has no waitlists on sharded events")
        fault = self._enter("commit", expected.event_id)
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
        lineup = lifecycle.get(Attr.LINEUP)
        if lifecycle.get(Attr.LINEUP_PAGES):
            # the real store pages a long lineup; this one keeps it on the item, whole
            lineup = encode_lineup(outcome.state.holds, outcome.state.waiting)
        limit = min(real.MAX_JOURNAL_BYTES, real.MAX_JOURNAL_AND_LINEUP_BYTES - len(lineup or b""))
        if len(blob) > limit:
            fits = journal.longest_prefix(limit)
            raise JournalTooLargeError(
                f"event {expected.event_id!r}: a journal of {len(outcome.decisions)} decisions"
                + (f" and {len(outcome.updates)} changes" if outcome.updates else "")
                + f" is {len(blob)} bytes; {fits} fit in {limit}",
                fits=fits,
            )
        item = self._event_item(expected.event_id)
        holds = (
            item is not None
            and _is_or_absent_as(item, Attr.VERSION, expected.version, 0)
            and _is_or_absent_as(item, Attr.CAPACITY, expected.capacity, 0)
            and _is_or_absent_as(item, Attr.STATE, expected.state, EventState.OPEN)
        )
        took = sum(seats for _, seats in takes)
        if item is not None and holds and outcome.state.taken > expected.taken:
            # only a commit that takes seats needs room for them
            capacity = _number(item, Attr.CAPACITY)
            holds = capacity is not None and capacity + took >= outcome.state.taken
        givers = []
        split = split_shard_key(expected.event_id)
        for giver, seats in takes:
            assert split is not None, "only a shard takes seats"
            given = self._event_item(shard_key(split[0], giver.shard))
            holds = (
                holds
                and given is not None
                and _is_or_absent_as(given, Attr.VERSION, giver.version, 0)
                and _number(given, Attr.CAPACITY) == giver.quota
            )
            givers.append((given, seats))
        if item is None or not holds:
            raise CommitConflictError(
                f"event {expected.event_id!r} moved past version {expected.version} "
                "(or its capacity or state changed)"
            )
        item.update(
            {
                Attr.TAKEN: {"N": str(outcome.state.taken)},
                Attr.ACCEPTED: {"N": str(outcome.state.accepted)},
                Attr.VERSION: {"N": str(journal.version)},
                Attr.JOURNAL: {"B": blob},
                Attr.CAPACITY_FLOOR: {"N": str(outcome.state.taken)},
            }
        )
        for given, seats in givers:
            assert given is not None
            given[Attr.CAPACITY] = {"N": str((_number(given, Attr.CAPACITY) or 0) - seats)}
        if took:
            item[Attr.CAPACITY] = {"N": str((_number(item, Attr.CAPACITY) or 0) + took)}
        if high_water is not None:
            item[Attr.HIGH_WATER] = {"S": high_water_text(high_water, journal.version)}
        if outcome.lifecycle is not None:
            counts = lifecycle.get(Attr.STATUS_COUNTS) or {}
            item[Attr.STATUS_COUNTS] = {"M": {k: {"N": str(v)} for k, v in counts.items()}}
            if lineup:
                item[Attr.LINEUP] = {"B": lineup}
            else:
                item.pop(Attr.LINEUP, None)
            due = lifecycle.get(Attr.HOLD_DUE_AT)
            if due is not None:
                item[Attr.HOLD_DUE_AT] = {"N": str(due)}
                item[Attr.HOLD_DUE_SIGNUP] = {"S": str(lifecycle[Attr.HOLD_DUE_SIGNUP])}
                item[Attr.HOLD_DUE_SHARD] = {"S": DUE_HOLDS_SHARD}
            else:
                for name in (Attr.HOLD_DUE_AT, Attr.HOLD_DUE_SIGNUP, Attr.HOLD_DUE_SHARD):
                    item.pop(name, None)
        self._exit(fault)
        return journal

    def materialize(
        self,
        event_id: str,
        journal: Journal,
        requests: Mapping[str, IntakeRecord | Mapping[str, Any]] | None = None,
    ) -> list[Decision]:
        fault = self._enter("materialize", event_id)
        if journal.copies is not None:
            items = self._items.journal_items(event_id, journal)
        elif journal.digests is not None:
            # format 4 read back: copied fields from ``requests``, else from intake (read as
            # the processor reads an image), where their digest is the journal's
            found: dict[str, Any] = dict(requests or {})
            for d in journal.decisions:
                intake = self.tables[self.intake_table].get((event_id, d.signup_id))
                if d.signup_id not in found and intake is not None:
                    keys = {"event_id": event_id, "signup_id": d.signup_id}
                    found[d.signup_id] = parse_intake(from_item(intake), "", keys)
            items = journal.items_from(event_id, found)
        else:  # format 1: copied fields from ``requests``, else from intake
            sources: dict[str, Any] = dict(requests or {})
            for d in journal.decisions:
                intake = self.tables[self.intake_table].get((event_id, d.signup_id))
                if d.signup_id not in sources and intake is not None:
                    sources[d.signup_id] = from_item(intake)
            items = [
                self._items.decision_item(event_id, d, journal.decided_at, sources.get(d.signup_id))
                for d in journal.decisions
            ]
        olds = self._put_decisions(items)
        self._apply_updates(event_id, journal.retained_updates())
        self._exit(fault)
        return [
            d
            for d, old in zip(journal.decisions, olds, strict=True)
            if old is not None and old.get(Attr.SEQUENCE_NUMBER, {}).get("S") != d.sequence_number
        ]

    def reject_without_event(
        self,
        event_id: str,
        decisions: Sequence[Decision],
        requests: Mapping[str, IntakeRecord],
        decided_at: str,
        expires_at: int | None = None,
        event_may_appear: bool = True,
    ) -> None:
        fault = self._enter("reject_without_event", event_id)
        items = [
            self._items.decision_item(
                event_id, d, decided_at, requests.get(d.signup_id), expires_at
            )
            for d in decisions
        ]
        chunks = dynamo.chunks_within(items, dynamo.TRANSACTION_LIMIT - 1, dynamo.TRANSACTION_BYTES)
        for chunk in chunks:  # one transaction each: all of it or none of it
            decided = any((event_id, item[Attr.SIGNUP_ID]["S"]) in self.main for item in chunk)
            appeared = event_may_appear and self._event_item(event_id) is not None
            if appeared or decided:
                raise CommitConflictError(
                    f"event {event_id!r} appeared, or a signup was decided, meanwhile"
                )
            self._put_decisions(chunk)
        self._exit(fault)

    # -- ProcessorStore: parked events ---------------------------------------------------

    def get_event_and_parking(
        self, event_id: str
    ) -> tuple[EventRecord | None, dict[str, Any] | None, bool]:
        fault = self._enter("get_event_and_parking", event_id)
        marker = self.control.get(ControlKey.parking(event_id))
        may_repeat = marker is not None and ParkAttr.MAY_REPEAT in marker
        read = self._read_event(event_id), self._read_parking(event_id), may_repeat
        self._exit(fault)
        return read

    def note_may_repeat(self, event_id: str) -> None:
        fault = self._enter("note_may_repeat", event_id)
        key = ControlKey.parking(event_id)
        marker = self.control.setdefault(
            key, {ControlKey.PK: {"S": key[0]}, ControlKey.SK: {"S": key[1]}}
        )
        marker[Attr.EVENT_ID] = {"S": event_id}
        marker[ParkAttr.MAY_REPEAT] = {"BOOL": True}
        self._exit(fault)

    def last_woken(self, event_id: str) -> str | None:
        item = self.control.get(ControlKey.wake(event_id))
        return _string(item, WakeAttr.WOKEN_AT) if item is not None else None

    def get_parking(self, event_id: str) -> dict[str, Any] | None:
        fault = self._enter("get_parking", event_id)
        marker = self._read_parking(event_id)
        self._exit(fault)
        return marker

    def park(
        self, event_id: str, requests: Sequence[IntakeRecord], now: str, error: str | None
    ) -> int:
        fault = self._enter("park", event_id)
        items: dict[Key, Item] = {}
        for request in requests:
            pk, sk = ControlKey.parked(event_id, request.sequence_number)
            items.setdefault(
                (pk, sk),
                to_item(
                    {
                        ControlKey.PK: pk,
                        ControlKey.SK: sk,
                        Attr.EVENT_ID: event_id,
                        Attr.SIGNUP_ID: request.signup_id,
                        Attr.SEQUENCE_NUMBER: request.sequence_number,
                        Attr.SEATS: request.seats,
                        Attr.ATTRIBUTES: dict(request.attributes) or None,
                        Attr.SUBMITTED_AT: request.submitted_at,
                        ParkAttr.PROBLEM: request.problem,
                    }
                ),
            )
        for key, item in items.items():
            self.control[key] = item
        first = min(requests, key=lambda r: int(r.sequence_number)).sequence_number
        key = ControlKey.parking(event_id)
        marker = self.control.setdefault(
            key, {ControlKey.PK: {"S": key[0]}, ControlKey.SK: {"S": key[1]}}
        )
        version = int(_number(marker, Attr.VERSION) or 0) + 1
        marker[Attr.VERSION] = {"N": str(version)}
        marker[Attr.EVENT_ID] = {"S": event_id}
        marker.setdefault(ParkAttr.PARKED_SINCE, {"S": now})
        marker.setdefault(ParkAttr.FIRST_SEQUENCE_NUMBER, {"S": first})
        marker[Attr.HOLD_DUE_AT] = {"N": str(ms_of(now))}
        marker[Attr.HOLD_DUE_SHARD] = {"S": DUE_HOLDS_SHARD}
        if error:
            marker[ParkAttr.ERROR] = {"S": error[:MAX_PARKING_ERROR_CHARS]}
        self._exit(fault)
        return version

    def parked_records(self, event_id: str) -> list[IntakeRecord]:
        fault = self._enter("parked_records", event_id)
        pk, _ = ControlKey.parking(event_id)
        keys = sorted(
            (k for k in self.control if k[0] == pk and k[1].startswith(ControlKey.PARKED_PREFIX)),
            key=lambda k: k[1].encode(),  # DynamoDB orders sort keys by their UTF-8 bytes
        )
        requests: list[IntakeRecord] = []
        for key in keys:
            item = from_item(self.control[key])
            attributes = item.get(Attr.ATTRIBUTES)
            requests.append(
                IntakeRecord(
                    event_id=event_id,
                    signup_id=str(item[Attr.SIGNUP_ID]),
                    sequence_number=str(item[Attr.SEQUENCE_NUMBER]),
                    seats=int(item.get(Attr.SEATS, 0)),
                    attributes=dict(attributes) if isinstance(attributes, Mapping) else {},
                    submitted_at=item.get(Attr.SUBMITTED_AT),
                    problem=item.get(ParkAttr.PROBLEM),
                )
            )
        self._exit(fault)
        return requests

    def unpark(self, event_id: str, sequence_numbers: Iterable[str]) -> None:
        fault = self._enter("unpark", event_id)
        keys = {ControlKey.parked(event_id, s) for s in sequence_numbers}
        for key in keys:
            self.control.pop(key, None)
        self._exit(fault)

    def clear_parking(self, event_id: str, version: int) -> bool:
        fault = self._enter("clear_parking", event_id)
        marker = self.control.get(ControlKey.parking(event_id))
        if marker is None or _number(marker, Attr.VERSION) != version:
            self._exit(fault)
            return False
        for name in (
            ParkAttr.PARKED_SINCE,
            ParkAttr.FIRST_SEQUENCE_NUMBER,
            ParkAttr.ERROR,
            Attr.HOLD_DUE_AT,
            Attr.HOLD_DUE_SHARD,
        ):
            marker.pop(name, None)
        self._exit(fault)
        return True

    def keep_decision(self, event_id: str, signup_id: str, until: int | None) -> None:
        fault = self._enter("keep_decision", event_id)
        item = self.main.get((event_id, signup_id))
        kept = _number(item, Attr.EXPIRES_AT) if item is not None else None
        if item is not None and kept is not None:
            if until is None:
                item.pop(Attr.EXPIRES_AT, None)
            elif kept < until:
                item[Attr.EXPIRES_AT] = {"N": str(int(until))}
        self._exit(fault)

    def wake_later(self, event_id: str, due_ms: int) -> None:
        fault = self._enter("wake_later", event_id)
        key = ControlKey.wake(event_id)
        item = self.control.setdefault(
            key, {ControlKey.PK: {"S": key[0]}, ControlKey.SK: {"S": key[1]}}
        )
        item[Attr.EVENT_ID] = {"S": event_id}
        item[Attr.HOLD_DUE_AT] = {"N": str(int(due_ms))}
        item[Attr.HOLD_DUE_SHARD] = {"S": DUE_HOLDS_SHARD}
        self._exit(fault)

    def release_due(self, event_id: str, due_ms: int) -> None:
        fault = self._enter("release_due", event_id)
        marker = self.control.get(ControlKey.parking(event_id))
        if marker is not None and ParkAttr.PARKED_SINCE in marker:
            marker[Attr.HOLD_DUE_AT] = {"N": str(due_ms)}
            marker[Attr.HOLD_DUE_SHARD] = {"S": DUE_HOLDS_SHARD}
        self._exit(fault)

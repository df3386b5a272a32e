"""Event items: creating, reading, listing, closing and re-sizing events.

An event item (control table, ``ControlKey.event``) holds the event's configuration, which
organizers write (``capacity``, ``min_capacity``, ``state``, ``created_at``,
``created_by``: ``contract.EVENT_CONFIG_ATTRIBUTES``), and its counters and last journal,
which only the stream processor's commit writes (``SignupStore.commit``). The writes here
name only the configuration and leave ``version`` alone: every commit is conditioned on
the ``capacity`` and ``state`` it decided from, so an organizer's change that lands first
makes it decide again (docs/design.md, section 4).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from turnstile.base.clock import utc_now
from turnstile.base.contract import (
    DUE_HOLDS_SHARD,
    EVENTS_CREATED,
    MAX_HOLD_SECONDS,
    MAX_IDENTITY_CHARS,
    MAX_LINEUP_ENTRIES,
    MAX_SHARDS,
    Attr,
    ControlKey,
    EventState,
    WakeAttr,
    WakeReason,
    is_id,
    shard_key,
    split_shard_key,
)
from turnstile.base.errors import (
    CapacityBelowTakenError,
    EventExistsError,
    EventNotFoundError,
    EventQuotaError,
    InvalidRequestError,
    StoreUnavailableError,
)
from turnstile.engine.lifecycle import Event
from turnstile.engine.lineup import Pages, decode_lineup
from turnstile.storage.dynamo import (
    ConditionFailed,
    Dynamo,
    TransactionCancelled,
    control_key,
    event_key,
    from_item,
)
from turnstile.storage.journal import Journal

__all__ = [
    "MAX_CREATED_BY_CHARS",
    "PAGES_NOT_READ",
    "EventItems",
    "EventRecord",
    "high_water_text",
    "is_or_absent_as",
    "lineup_problem",
]

#: ``created_by`` is cut to this: an IAM ARN or a token subject is far shorter.
MAX_CREATED_BY_CHARS = MAX_IDENTITY_CHARS


@dataclass(frozen=True)
class EventRecord:
    """The event item: the event as the engine decides from it, when and by whom it was
    created, and what only the store needs (its last journal, its lowest capacity, its
    signups per status)."""

    #: The event's options, counters, state, lock version and lineup (holds and waitlist).
    event: Event
    created_at: str | None = None
    #: The last commit's journal as stored (compressed), None before the first commit;
    #: ``journal`` decodes it when asked. Its version is always ``event.version``: the
    #: commit writes both.
    journal_blob: bytes | None = field(default=None, repr=False)
    #: The lowest capacity the event has had, once it was changed (None: never changed).
    min_capacity: int | None = None
    #: Who created it (``Attr.CREATED_BY``); None for an event item written by other means.
    created_by: str | None = None
    #: Signups per status (the processor's ``Attr.STATUS_COUNTS``); None before any commit
    #: of the lifecycle.
    status_counts: dict[str, int] | None = None
    #: Why the stored lineup could not be read (None: it was, or there is none). ``event``
    #: then holds no holds and nobody waiting: enough to show, close or re-size the event,
    #: never to decide from (the processor refuses, and the event is parked).
    lineup_error: str | None = None
    #: The greatest stream sequence number of an intake record the event's commits decided
    #: from (``Attr.HIGH_WATER``), None when the item keeps none: no commit yet (``version``
    #: 0), or one committed before the mark was kept (then it knows nothing).
    high_water: int | None = None
    #: The event's shards (``Attr.SHARDS``: 1, the default, on an event as it always was).
    #: On a sharded event's own item (its pool) and on each of its shards' items alike.
    shards: int = 1
    #: The seats a sharded event's pool has dealt to its shards (``Attr.DEALT``).
    dealt: int = 0
    #: A long lineup's directory (``Attr.LINEUP_PAGES``), None when the lineup is on the
    #: item. Its holds and waitlist are then in pages of their own, which only
    #: ``SignupStore.load_lineup`` reads: until then ``lineup_error`` says so, and nothing
    #: decides from the record.
    pages: Pages | None = None

    @cached_property
    def journal(self) -> Journal | None:
        """The last commit's journal, decoded (only when asked: deciding needs its version
        alone, which is the event's)."""
        return Journal.decode(self.journal_blob) if self.journal_blob is not None else None

    @classmethod
    def from_item(cls, raw: Mapping[str, Any]) -> EventRecord:
        """From the event item as stored (typed)."""
        return cls.from_values(from_item(raw))

    @classmethod
    def from_values(cls, item: Mapping[str, Any]) -> EventRecord:
        """From the event item as plain Python values (what ``from_item`` returns).

        Options an organizer wrote by hand past the API's bounds are read within them (a
        waitlist of at most ``MAX_LINEUP_ENTRIES``, holds of at most ``MAX_HOLD_SECONDS``):
        the item is inside the trust boundary, but no option may make deciding fail. A
        lineup that cannot be read is kept as ``lineup_error`` (every reader but the
        processor goes on)."""
        journal_blob = item.get(Attr.JOURNAL)
        shards = min(max(_whole(item.get(Attr.SHARDS)) or 1, 1), MAX_SHARDS)
        pages = None
        try:
            if item.get(Attr.LINEUP_PAGES) is not None:
                pages = Pages.decode(item[Attr.LINEUP_PAGES])
                holds, waiting = (), ()
                lineup_error = PAGES_NOT_READ
            else:
                holds, waiting = decode_lineup(item.get(Attr.LINEUP))
                lineup_error = None
        except Exception as exc:  # the item is inside the trust boundary, but one bad
            holds, waiting = (), ()  # attribute must not stop every reader of the event
            lineup_error = f"lineup unreadable ({type(exc).__name__}: {exc})"[:512]
        return cls(
            event=Event(
                event_id=item[Attr.EVENT_ID],
                capacity=int(item.get(Attr.CAPACITY, 0)),
                waitlist=min(max(_whole(item.get(Attr.WAITLIST)) or 0, 0), MAX_LINEUP_ENTRIES),
                hold_seconds=min(
                    max(_whole(item.get(Attr.HOLD_SECONDS)) or 0, 0), MAX_HOLD_SECONDS
                ),
                max_seats=_whole(item.get(Attr.MAX_SEATS)),
                taken=int(item.get(Attr.TAKEN, 0)),
                accepted=int(item.get(Attr.ACCEPTED, 0)),
                state=str(item.get(Attr.STATE, EventState.OPEN)),
                version=int(item.get(Attr.VERSION, 0)),
                holds=holds,
                waiting=waiting,
                **_numbering(item[Attr.EVENT_ID], shards),
            ),
            created_at=item.get(Attr.CREATED_AT),
            journal_blob=bytes(journal_blob) if journal_blob is not None else None,
            min_capacity=(
                int(item[Attr.MIN_CAPACITY]) if item.get(Attr.MIN_CAPACITY) is not None else None
            ),
            created_by=_text_or_none(item.get(Attr.CREATED_BY)),
            status_counts=(
                {str(k): int(v) for k, v in counts.items()}
                if isinstance(counts := item.get(Attr.STATUS_COUNTS), Mapping)
                else None
            ),
            lineup_error=lineup_error,
            high_water=_high_water(item.get(Attr.HIGH_WATER), item.get(Attr.VERSION)),
            shards=shards,
            dealt=max(_whole(item.get(Attr.DEALT)) or 0, 0),
            pages=pages,
        )


#: ``lineup_error`` of a record whose lineup is in pages not read yet (``load_lineup``).
PAGES_NOT_READ = "lineup in pages, not read"

#: How often a sharded event's close is tried while its shards' commits are in flight.
CLOSE_ATTEMPTS = 5


def _shard_item(update: Mapping[str, Any], event_id: str, shard: int) -> dict[str, Any]:
    """The creation of shard ``shard``'s item: the event's configuration under the shard's
    key, with no seats (its quota is dealt from the pool)."""
    key = shard_key(event_id, shard)
    values = dict(update["ExpressionAttributeValues"])
    values[":event"] = {"S": key}
    values[":capacity"] = {"N": "0"}
    return {**update, "Key": event_key(key), "ExpressionAttributeValues": values}


def wake_update(table: str, event_id: str, reason: str, now: str | None = None) -> dict[str, Any]:
    """The write of an event's wake-up item (``EventItems.wake``), as an update's arguments
    (a transaction's ``Update`` too)."""
    return {
        "TableName": table,
        "Key": control_key(ControlKey.wake(event_id)),
        # A wake-up that was due to be written again (``wake_later``) is written now.
        "UpdateExpression": "ADD #n :one SET #at = :at, #why = :why REMOVE #due, #shard",
        "ExpressionAttributeNames": {
            "#n": WakeAttr.WAKES,
            "#at": WakeAttr.WOKEN_AT,
            "#why": WakeAttr.REASON,
            "#due": Attr.HOLD_DUE_AT,
            "#shard": Attr.HOLD_DUE_SHARD,
        },
        "ExpressionAttributeValues": {
            ":one": {"N": "1"},
            ":at": {"S": now or utc_now()},
            ":why": {"S": reason},
        },
    }


def high_water_text(mark: int, version: int) -> str:
    """The high-water mark as a commit stores it: the sequence number and the version that
    commit writes (``<number>@<version>``). A commit that did not raise it (a processor of a
    version before the mark, in a mixed deployment or a rollback) leaves the version behind,
    so the mark is never trusted past a commit it did not see."""
    return f"{mark}@{version}"


def _high_water(value: Any, version: Any) -> int | None:
    """The event's high-water mark if the last commit wrote it (its version is the event's),
    else None: every signup is then read, for good (``jobs.processor._to_read``)."""
    if not isinstance(value, str):
        return None
    number, _, written_at = value.partition("@")
    if not (number.isdigit() and number.isascii() and written_at.isdigit()):
        return None
    try:
        current = int(version)
    except (TypeError, ValueError, ArithmeticError):
        return None
    return int(number) if int(written_at) == current else None


def _numbering(event_id: Any, shards: int) -> dict[str, int]:
    """How a shard's item numbers its grants (``Event.shard``, ``Event.shards``): none
    but the default on an event's own item."""
    split = split_shard_key(event_id)
    if split is None or shards <= 1 or split[1] >= shards:
        return {}
    return {"shard": split[1], "shards": shards}


def _whole(value: Any) -> int | None:
    """An option as the event item holds it (a number), else None."""
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError, ArithmeticError):
        return None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def lineup_problem(capacity: int, waitlist: int, hold_seconds: int) -> str | None:
    """Why these options could need a lineup longer than ``MAX_LINEUP_ENTRIES``, or None.

    The lineup holds every hold and every waiting signup (docs/lifecycle.md, §10): with
    holds, up to ``capacity + waitlist`` entries (one seat each); without, ``waitlist``.
    """
    if waitlist > MAX_LINEUP_ENTRIES:
        return f"waitlist must be at most {MAX_LINEUP_ENTRIES}"
    if hold_seconds > 0 and capacity + waitlist > MAX_LINEUP_ENTRIES:
        return (
            f"an event with holds (hold_seconds above 0) may have capacity + waitlist of at "
            f"most {MAX_LINEUP_ENTRIES}; this one would have {capacity} + {waitlist} = "
            f"{capacity + waitlist}"
        )
    return None


def is_or_absent_as(name: str, placeholder: str, value: Any, default: Any) -> str:
    """``name = placeholder``; when ``value`` is what an absent attribute reads as
    (``default``), its absence matches too (an event item written by hand)."""
    if value == default:
        return f"(attribute_not_exists({name}) OR {name} = {placeholder})"
    return f"{name} = {placeholder}"


class EventItems:
    """The event items of the control table; a part of ``SignupStore``, which gives it
    ``dynamo`` and ``control_table``."""

    dynamo: Dynamo
    control_table: str

    def create_event(
        self,
        event_id: str,
        capacity: int,
        now: str,
        created_by: str | None = None,
        *,
        waitlist: int = 0,
        hold_seconds: int = 0,
        max_seats: int | None = None,
        quota: int | None = None,
        shards: int = 1,
    ) -> EventRecord:
        """Create an OPEN event; raise ``EventExistsError`` if the id is taken.

        With ``shards`` > 1 (a sharded event, docs/hot-events.md), its item is the pool of
        its seats and each shard gets an item of its own under its shard key, with no seats
        yet (``capacity`` 0, the shard's quota, dealt from the pool as its signups come), in
        the same transaction: both or neither.

        With a ``quota`` (and a ``created_by``), the creator's count of events it created
        (its organizer item, ``ControlKey.organizer``) is raised in the same transaction,
        only while it is below the quota: ``EventQuotaError`` past it, nothing written.

        An ``UpdateItem`` that names only the event's configuration
        (``contract.EVENT_CONFIG_ATTRIBUTES``): the counters, ``version`` and the journal
        are the processor's, absent until its first commit (they read as 0). So the API's
        role needs no write on any attribute the processor owns (docs/design.md, §5).
        """
        names = {
            "#pk": ControlKey.PK,
            "#event": Attr.EVENT_ID,
            "#capacity": Attr.CAPACITY,
            "#state": Attr.STATE,
            "#created": Attr.CREATED_AT,
        }
        values: dict[str, Any] = {
            ":event": {"S": event_id},
            ":capacity": {"N": str(capacity)},
            ":open": {"S": EventState.OPEN},
            ":now": {"S": now},
        }
        expression = "SET #event = :event, #capacity = :capacity, #state = :open, #created = :now"
        if created_by:
            created_by = created_by[:MAX_CREATED_BY_CHARS]
            names["#by"] = Attr.CREATED_BY
            values[":by"] = {"S": created_by}
            expression += ", #by = :by"
        # The options only when they are not their defaults: an event without them is
        # written (and read back) exactly as before they existed.
        options = {
            Attr.WAITLIST: waitlist or None,
            Attr.HOLD_SECONDS: hold_seconds or None,
            Attr.MAX_SEATS: max_seats,
            Attr.SHARDS: shards if shards > 1 else None,
        }
        for name, value in options.items():
            if value is not None:
                names[f"#{name}"] = name
                values[f":{name}"] = {"N": str(value)}
                expression += f", #{name} = :{name}"
        update = {
            "TableName": self.control_table,
            "Key": event_key(event_id),
            "UpdateExpression": expression,
            "ConditionExpression": "attribute_not_exists(#pk)",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        if not 1 <= shards <= MAX_SHARDS:
            raise InvalidRequestError([f"shards must be from 1 to {MAX_SHARDS}, not {shards}"])
        updates = [update] + (
            [_shard_item(update, event_id, k) for k in range(shards)] if shards > 1 else []
        )
        try:
            if (quota is None or not created_by) and len(updates) == 1:
                self.dynamo.call("update_item", **update)
            else:
                self._create_counted(event_id, updates, created_by, quota)
        except ConditionFailed as exc:
            raise EventExistsError(f"event {event_id!r} already exists") from exc
        event = Event(
            event_id=event_id,
            capacity=capacity,
            waitlist=waitlist,
            hold_seconds=hold_seconds,
            max_seats=max_seats,
        )
        return EventRecord(
            event=event, created_at=now, created_by=created_by or None, shards=shards
        )

    def _create_counted(
        self,
        event_id: str,
        updates: list[dict[str, Any]],
        created_by: str | None,
        quota: int | None,
    ) -> None:
        """The event's creation (its item and its shards') and, with a ``quota``, its
        creator's count: one transaction."""
        actions = [{"Update": u} for u in updates]
        if quota is None or not created_by:
            self._create_all(event_id, actions)
            return
        count = {
            "TableName": self.control_table,
            "Key": control_key(ControlKey.organizer(created_by)),
            "UpdateExpression": "ADD #n :one",
            "ConditionExpression": "attribute_not_exists(#n) OR #n < :quota",
            "ExpressionAttributeNames": {"#n": EVENTS_CREATED},
            "ExpressionAttributeValues": {":one": {"N": "1"}, ":quota": {"N": str(quota)}},
        }
        try:
            self.dynamo.call("transact_write_items", TransactItems=[*actions, {"Update": count}])
        except TransactionCancelled as exc:
            reasons = exc.reasons
            exists = (
                "ConditionalCheckFailed" in reasons[: len(actions)]
                if reasons
                else self.get_event(event_id) is not None
            )
            if exists:
                raise EventExistsError(f"event {event_id!r} already exists") from exc
            raise EventQuotaError(
                f"the caller has created its {quota} events, as many as one organizer may "
                "(turnstile:maxEventsPerOrganizer)"
            ) from exc

    def _create_all(self, event_id: str, actions: list[dict[str, Any]]) -> None:
        try:
            self.dynamo.call("transact_write_items", TransactItems=actions)
        except TransactionCancelled as exc:
            raise EventExistsError(f"event {event_id!r} already exists") from exc

    def get_event(self, event_id: str, consistent: bool = True) -> EventRecord | None:
        """The event item, read strongly consistent by default, or None."""
        item = self.dynamo.get(self.control_table, event_key(event_id), consistent)
        return EventRecord.from_values(item) if item is not None else None

    def last_woken(self, event_id: str) -> str | None:
        """When the event was last woken (``wake``), or None: never."""
        item = self.dynamo.get(self.control_table, control_key(ControlKey.wake(event_id)))
        woken = (item or {}).get(WakeAttr.WOKEN_AT)
        return woken if isinstance(woken, str) else None

    def last_journal(self, event_id: str) -> Journal | None:
        """The event's last commit (its journal alone, read consistently), or None."""
        response = self.dynamo.call(
            "get_item",
            TableName=self.control_table,
            Key=event_key(event_id),
            ConsistentRead=True,
            ProjectionExpression="#j",
            ExpressionAttributeNames={"#j": Attr.JOURNAL},
        )
        blob = response.get("Item", {}).get(Attr.JOURNAL, {}).get("B")
        return Journal.decode(bytes(blob)) if blob is not None else None

    def scan_events(self) -> Iterator[EventRecord]:
        """Every event (the audit's and the CLI's listing; never the decision path)."""
        for item in self.event_items():
            yield EventRecord.from_values(item)

    def event_items(self, event_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Event items as plain values: one event's (if it exists) or all, read consistently."""
        if event_id is not None:
            item = self.dynamo.get(self.control_table, event_key(event_id))
            if item is not None:
                yield item
            return
        yield from self.dynamo.items(
            "scan",
            TableName=self.control_table,
            ConsistentRead=True,
            FilterExpression="begins_with(#pk, :prefix)",
            ExpressionAttributeNames={"#pk": ControlKey.PK},
            ExpressionAttributeValues={":prefix": {"S": ControlKey.EVENT_PREFIX}},
        )

    def close_event(self, event_id: str) -> tuple[EventRecord | None, bool]:
        """OPEN -> CLOSED, conditionally; returns the event after the call and whether this
        call closed it.

        It leaves ``version`` (the processor's) alone: every commit is conditioned on the
        state it decided from, so a commit that decided on the OPEN event and lands after
        the close conflicts and decides again, rejecting ``event_closed``. No signup is
        accepted once the close has been written (docs/design.md, §4).
        """
        if not is_id(event_id):
            return None, False  # a shard is closed with its event, never on its own
        current = self.get_event(event_id)
        shards = current.shards if current is not None else 1
        try:
            self._close(event_id, shards)
        except ConditionFailed:
            record = self.get_event(event_id)
            if record is not None:
                # Closed already: maybe by a call that failed before its wake-up.
                self._wake_all(record.event.event_id, record.shards)
            return record, False
        self._wake_all(event_id, shards)
        return self.get_event(event_id), True

    def _close(self, event_id: str, shards: int) -> None:
        """The close's write: of a sharded event, its item and every shard's in one
        transaction (each shard decides on its own, from its own item), so that no shard
        accepts a signup once the close is written; ConditionFailed if the event was not
        OPEN."""
        update = {
            "TableName": self.control_table,
            "Key": event_key(event_id),
            "UpdateExpression": "SET #state = :closed",
            "ConditionExpression": (
                "attribute_exists(#pk) AND "
                + is_or_absent_as("#state", ":open", EventState.OPEN, EventState.OPEN)
            ),
            "ExpressionAttributeNames": {"#state": Attr.STATE, "#pk": ControlKey.PK},
            "ExpressionAttributeValues": {
                ":closed": {"S": EventState.CLOSED},
                ":open": {"S": EventState.OPEN},
            },
        }
        if shards <= 1:
            self.dynamo.call("update_item", **update)
            return
        each = {
            **update,
            "ConditionExpression": "attribute_exists(#pk)",
            "ExpressionAttributeValues": {":closed": {"S": EventState.CLOSED}},
        }
        actions = [{"Update": update}] + [
            {"Update": {**each, "Key": event_key(shard_key(event_id, k))}} for k in range(shards)
        ]
        for _ in range(CLOSE_ATTEMPTS):
            try:
                self.dynamo.call("transact_write_items", TransactItems=actions)
                return
            except TransactionCancelled as exc:
                if exc.reasons[:1] == ["ConditionalCheckFailed"]:  # the event's own item
                    raise ConditionFailed(
                        {"Error": {"Code": "ConditionalCheckFailedException", "Message": ""}},
                        "TransactWriteItems",
                    ) from exc
                # a shard's commit in flight (TransactionConflict): try again
        raise StoreUnavailableError(f"event {event_id!r} kept changing under the close; try again")

    def _wake_all(self, event_id: str, shards: int) -> None:
        """The close acted on: the event woken, and each of its shards."""
        self.wake(event_id, WakeReason.CLOSE)
        if shards > 1:
            for k in range(shards):
                self.wake(shard_key(event_id, k), WakeReason.CLOSE)

    def wake(self, event_id: str, reason: str, now: str | None = None) -> None:
        """Make the event take a step soon: a write of its wake-up item, whose record on
        the control table's stream the processor takes as a tick of the event (a lapsed
        hold, a waitlist promoted into seats given back or added, a close acted on, a parked
        event released). Turnstile's own item: nothing a producer writes can stop it.
        Idempotent in effect (a second tick finds nothing more to do)."""
        self.dynamo.call("update_item", **wake_update(self.control_table, event_id, reason, now))

    def wake_later(self, event_id: str, due_ms: int) -> None:
        """A wake-up whose step failed is written again at ``due_ms`` (epoch ms): its item
        is put in the due-holds index, which the release of due holds reads (and ``wake``
        takes it out again). So no wake-up is lost, a close or a capacity change's included,
        however often its step fails."""
        self.dynamo.call(
            "update_item",
            TableName=self.control_table,
            Key=control_key(ControlKey.wake(event_id)),
            UpdateExpression="SET #event = :event, #due = :due, #shard = :shard",
            ExpressionAttributeNames={
                "#event": Attr.EVENT_ID,
                "#due": Attr.HOLD_DUE_AT,
                "#shard": Attr.HOLD_DUE_SHARD,
            },
            ExpressionAttributeValues={
                ":event": {"S": event_id},
                ":due": {"N": str(int(due_ms))},
                ":shard": {"S": DUE_HOLDS_SHARD},
            },
        )

    def update_capacity(self, event_id: str, capacity: int, attempts: int = 10) -> EventRecord:
        """Set an event's capacity: up at any time, down to the seats taken and no lower.

        Conditioned on the capacity it read (and the lowest capacity, ``min_capacity``, it
        keeps for the audit) and on ``capacity_floor``, the seats taken that every commit
        writes: so a commit that took seats meanwhile refuses a capacity below them. It
        leaves ``version`` (the processor's) alone; a commit decided against the old
        capacity conflicts anyway, since every commit is conditioned on the capacity it
        read, and is decided again with the new one.
        Raises ``EventNotFoundError``, ``CapacityBelowTakenError`` (with the seats taken),
        or ``StoreUnavailableError`` if the event kept changing for ``attempts`` tries.
        """
        if not is_id(event_id):
            # A shard's capacity is its quota, the escrow's alone (docs/hot-events.md).
            raise EventNotFoundError(f"no such event {event_id[:60]!r}")
        for _ in range(attempts):
            current = self.get_event(event_id)
            if current is None:
                raise EventNotFoundError(f"no such event {event_id!r}")
            event = current.event
            if capacity < event.taken:
                raise CapacityBelowTakenError(event_id, capacity, event.taken)
            if current.shards > 1 and capacity < current.dealt:
                # A sharded event's floor: what its pool dealt (``capacity_floor`` mirrors it).
                raise CapacityBelowTakenError(event_id, capacity, current.dealt, dealt=True)
            # The options never change once created, so the ones read here stand.
            problem = lineup_problem(capacity, event.waitlist, event.hold_seconds)
            if problem:
                raise InvalidRequestError([f"capacity {capacity}: {problem}"])
            lowest = event.capacity if current.min_capacity is None else current.min_capacity
            names = {
                "#pk": ControlKey.PK,
                "#capacity": Attr.CAPACITY,
                "#min": Attr.MIN_CAPACITY,
                "#floor": Attr.CAPACITY_FLOOR,
            }
            values = {
                ":capacity": {"N": str(capacity)},
                ":min": {"N": str(min(lowest, capacity))},
                ":read": {"N": str(event.capacity)},
            }
            if current.min_capacity is None:
                min_unchanged = "attribute_not_exists(#min)"
            else:
                min_unchanged = "#min = :read_min"
                values[":read_min"] = {"N": str(current.min_capacity)}
            try:
                self.dynamo.call(
                    "update_item",
                    TableName=self.control_table,
                    Key=event_key(event_id),
                    UpdateExpression="SET #capacity = :capacity, #min = :min",
                    ConditionExpression=(
                        "attribute_exists(#pk) AND "
                        f"{is_or_absent_as('#capacity', ':read', event.capacity, 0)} AND "
                        f"{min_unchanged} AND "
                        "(attribute_not_exists(#floor) OR #floor <= :capacity)"
                    ),
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
            except ConditionFailed:
                continue  # a commit or another change moved the event on: read again
            # Seats added may be the waitlist's now: the event takes a step (a sharded
            # event's shards each: any may have someone waiting, whom a draw now seats).
            self.wake(event_id, WakeReason.CAPACITY)
            # (Every time: a retry of a raise whose wake-ups failed reads the new capacity.)
            if current.shards > 1 and event.waitlist > 0:
                for k in range(current.shards):
                    self.wake(shard_key(event_id, k), WakeReason.CAPACITY)
            updated = self.get_event(event_id)
            if updated is None:  # pragma: no cover - event items are never deleted
                raise EventNotFoundError(f"no such event {event_id!r}")
            return updated
        raise StoreUnavailableError(
            f"event {event_id!r} kept changing under the capacity update; try again"
        )

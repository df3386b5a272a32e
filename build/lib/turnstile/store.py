"""The only module that talks to DynamoDB.

It owns keys, expressions and conditions, retries throttled calls with backoff, and turns
``ClientError`` codes into the domain errors of ``turnstile.errors``.

The commit design (why each decision costs one write unit, and why that is safe):

* The event item is the serialization point. A group's decisions are committed by one
  ``UpdateItem`` on it, conditioned on ``version`` (an optimistic lock), on the
  ``capacity`` and ``state`` they were decided from (organizers change those without
  touching ``version``: their IAM role may not write it) and, when it takes seats, on
  ``taken <= capacity``; the update stores the new counters and a compact *journal*
  (bzip2-compressed JSON) of exactly the decisions that commit made.
* The decision items are then *materialized* from that journal with plain batch writes:
  one write unit per decision item of up to 1 KB, instead of the two a transaction
  charges. Materializing is idempotent: the journal fixes every byte of every item. It
  carries the fields copied from intake (``attributes``, ``submitted_at``) in DynamoDB's
  typed form, so materializing never reads intake: a producer who rewrites or deletes an
  intake record later cannot change a decision, and binary stays binary.
* Nothing a producer writes can make an item too big to write. A decision item over
  ``MAX_DECISION_ITEM_BYTES`` is stored without its copied fields (``detail`` says so),
  and a commit whose journal would exceed ``MAX_JOURNAL_BYTES`` raises
  ``JournalTooLargeError`` saying how many decisions fit; the processor commits those and
  decides the rest in its next round. The event item stays well under 400 KB.
* Before a processor commits journal N+1 it makes sure journal N is materialized (it
  wrote it itself, or it writes it again). So every decision is either an item or in the
  current journal, and "already decided" is known exactly before each commit.
* A signup of an event that does not exist has no event item to lock; its rejection is
  a transaction guarded by a ConditionCheck that the event item still does not exist.
"""

from __future__ import annotations

import base64
import bz2
import json
import random
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import cached_property
from typing import Any, TypeVar

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.config import Config
from botocore.exceptions import ClientError

from turnstile.contract import (
    CONTROL_TABLE,
    INTAKE_TABLE,
    MAIN_TABLE,
    UNDECIDED_INDEX,
    Attr,
    ControlKey,
    EventState,
    HoldAttr,
    Status,
    undecided_shard,
)
from turnstile.domain import Decision, EventSnapshot, Outcome, SignupRequest
from turnstile.errors import (
    CapacityBelowTakenError,
    CommitConflictError,
    DuplicateRunError,
    EventExistsError,
    EventNotFoundError,
    JournalTooLargeError,
    LeaseLostError,
    SignupConflictError,
    StoreUnavailableError,
)

__all__ = [
    "EventRecord",
    "Journal",
    "SignupStore",
    "bounded_decision",
    "default_client",
    "refused_as_invalid",
]

T = TypeVar("T")

#: Error codes that mean "try again shortly".
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
        "TransactionInProgressException",
    }
)
#: DynamoDB's per-request limits.
BATCH_WRITE_LIMIT = 25
BATCH_GET_LIMIT = 100
TRANSACTION_LIMIT = 100
#: A transaction's items together; DynamoDB's limit is 4 MB.
TRANSACTION_BYTES = 3 * 1024 * 1024

#: An encoded (compressed) journal stays under this, so the event item that carries it
#: stays under 300 KB, far from DynamoDB's 400 KB item limit (and under it where binary is
#: counted as its base64 text, as moto does).
MAX_JOURNAL_BYTES = 192 * 1024
#: A decision item over this (DynamoDB's item size) is stored without its copied fields.
MAX_DECISION_ITEM_BYTES = 64 * 1024
#: So is one whose journal row (JSON) would be longer than this: one decision then always
#: fits a journal, whatever its characters cost in JSON.
MAX_JOURNAL_ROW_BYTES = 128 * 1024
#: ``created_by`` is cut to this: an IAM ARN or a token subject is far shorter.
MAX_CREATED_BY_CHARS = 512
#: The attributes a decision item copies from its intake record.
COPIED_FIELDS = (Attr.SUBMITTED_AT, Attr.ATTRIBUTES)

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def default_client(endpoint_url: str | None = None) -> Any:
    """A DynamoDB client; our own loop retries throttling, so botocore retries little."""
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        config=Config(retries={"mode": "standard", "total_max_attempts": 2}),
    )


def to_item(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(v) for k, v in values.items() if v is not None}


def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deserializer.deserialize(v) for k, v in item.items()}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _base64_text(value: Any) -> str:
    """JSON for the bytes in a typed value: base64 text, as on DynamoDB's own wire."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _binary_back(obj: dict[str, Any]) -> dict[str, Any]:
    """``json.loads`` hook: a one-key ``{"B": text}`` or ``{"BS": [text]}`` is a typed binary
    (a map's value is always an object, so no map can look like one)."""
    if len(obj) == 1:
        if isinstance(obj.get("B"), str):
            return {"B": base64.b64decode(obj["B"])}
        if isinstance(obj.get("BS"), list):
            return {"BS": [base64.b64decode(v) for v in obj["BS"]]}
    return obj


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one typed value by DynamoDB's item-size rules (numbers rounded up)."""
    (kind, raw), *_ = value.items()
    if kind in ("S", "N"):
        return _utf8_len(str(raw))
    if kind == "B":
        return len(raw)
    if kind in ("SS", "NS"):
        return sum(_utf8_len(str(v)) for v in raw)
    if kind == "BS":
        return sum(len(v) for v in raw)
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in raw)
    if kind == "M":
        return 3 + sum(_utf8_len(k) + _value_size(v) + 1 for k, v in raw.items())
    return 1  # BOOL, NULL


def _item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes of a typed item: every attribute name plus its value (an upper bound: a
    number counts its text, not DynamoDB's one byte per two digits)."""
    return sum(len(name.encode()) + _value_size(v) for name, v in item.items())


def _check_storable(value: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` for what the serializer accepts and DynamoDB refuses."""
    (kind, raw), *_ = value.items()
    if kind in ("SS", "NS", "BS") and not raw:
        raise ValueError("an empty set")
    if kind == "M":
        for v in raw.values():
            _check_storable(v)
    elif kind == "L":
        for v in raw:
            _check_storable(v)


def _copied_values(request: SignupRequest | Mapping[str, Any] | None) -> dict[str, Any]:
    """The copied fields of a request (or of an intake item, plain values), if present."""
    if isinstance(request, SignupRequest):
        attributes: Any = request.attributes or None
        submitted_at = request.submitted_at
    elif request is not None:
        raw_attrs = request.get(Attr.ATTRIBUTES)
        attributes = raw_attrs if isinstance(raw_attrs, Mapping) and raw_attrs else None
        raw_sub = request.get(Attr.SUBMITTED_AT)
        submitted_at = raw_sub if isinstance(raw_sub, str) else None
    else:
        attributes, submitted_at = None, None
    return {Attr.SUBMITTED_AT: submitted_at, Attr.ATTRIBUTES: attributes}


def _without_copies(decision: Decision, why: str) -> Decision:
    note = f"attributes and submitted_at not stored: {why}"
    return replace(decision, detail=f"{decision.detail}; {note}" if decision.detail else note)


def _base_item(
    event_id: str, decision: Decision, decided_at: str, expires_at: int | None = None
) -> dict[str, Any]:
    """The decision item without its copied fields, typed (what ``to_item`` would give,
    built directly: this runs for every decision). ``expires_at``: when TTL deletes it."""
    item: dict[str, Any] = {
        Attr.EVENT_ID: {"S": event_id},
        Attr.SIGNUP_ID: {"S": decision.signup_id},
        Attr.STATUS: {"S": decision.status},
    }
    if decision.reason is not None:
        item[Attr.REASON] = {"S": decision.reason}
    if decision.detail is not None:
        item["detail"] = {"S": decision.detail}
    item[Attr.SEATS] = {"N": str(int(decision.seats))}
    if decision.position is not None:
        item[Attr.POSITION] = {"N": str(int(decision.position))}
    item[Attr.DECIDED_AT] = {"S": decided_at}
    item[Attr.SEQUENCE_NUMBER] = {"S": decision.sequence_number}
    if expires_at is not None:
        item[Attr.EXPIRES_AT] = {"N": str(int(expires_at))}
    return item


def _bounded(
    event_id: str,
    decision: Decision,
    decided_at: str,
    request: SignupRequest | Mapping[str, Any] | None,
    expires_at: int | None = None,
) -> tuple[Decision, dict[str, Any], str]:
    """``bounded_decision``, and the copied fields as journal JSON."""
    try:
        copies = to_item(_copied_values(request))
        for value in copies.values():
            _check_storable(value)
    except (TypeError, ValueError, ArithmeticError) as exc:
        return _without_copies(decision, f"not storable in DynamoDB ({exc})"), {}, "{}"
    text = _json(copies)
    if not copies:
        return decision, copies, text
    # The JSON is never shorter than the item size (tags, quotes, base64): the exact size
    # is needed only when the JSON alone would go over.
    json_bytes = _utf8_len(text)
    base = _item_size(_base_item(event_id, decision, decided_at, expires_at))
    if base + json_bytes > MAX_DECISION_ITEM_BYTES:
        if base + _item_size(copies) > MAX_DECISION_ITEM_BYTES:
            why = f"item over {MAX_DECISION_ITEM_BYTES} bytes"
            return _without_copies(decision, why), {}, "{}"
        if json_bytes > MAX_JOURNAL_ROW_BYTES - 1024:
            why = f"journal row over {MAX_JOURNAL_ROW_BYTES} bytes"
            return _without_copies(decision, why), {}, "{}"
    return decision, copies, text


def bounded_decision(
    event_id: str,
    decision: Decision,
    decided_at: str,
    request: SignupRequest | Mapping[str, Any] | None,
    expires_at: int | None = None,
) -> tuple[Decision, dict[str, Any]]:
    """The decision and its copied fields (typed), fixed now; bounded whatever the input.

    Copied fields that DynamoDB would refuse, or that would make the decision item larger
    than ``MAX_DECISION_ITEM_BYTES`` (or its journal row than ``MAX_JOURNAL_ROW_BYTES``),
    are dropped, and the decision's ``detail`` says so.
    """
    decision, copies, _ = _bounded(event_id, decision, decided_at, request, expires_at)
    return decision, copies


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_base64_text)


@dataclass(frozen=True)
class Journal:
    """The decisions of the last commit on an event item, to be materialized as items.

    ``copies`` holds, per decision, the fields its item copies from intake, in DynamoDB's
    typed form as fixed at commit time. It is None only for a journal of format 1 (written
    before journals carried them), whose items take those fields from intake.
    """

    version: int
    decided_at: str
    decisions: tuple[Decision, ...]
    copies: tuple[Mapping[str, Any], ...] | None
    #: ``copies`` as JSON, when ``build`` has it already.
    copies_json: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    #: When TTL deletes the decision items (epoch seconds); None: they are kept. Fixed at
    #: commit like every other byte of the items (header key "e", absent when None).
    expires_at: int | None = None

    #: Format 2: rows carry the copied fields. Format 1 (no "f"): rows without them.
    FORMAT = 2
    _STATUS = {Status.ACCEPTED: "A", Status.REJECTED: "R"}
    _STATUS_BACK = {"A": Status.ACCEPTED, "R": Status.REJECTED}

    @classmethod
    def build(
        cls,
        event_id: str,
        version: int,
        decided_at: str,
        decisions: Sequence[Decision],
        requests: Mapping[str, SignupRequest | Mapping[str, Any]],
        expires_at: int | None = None,
    ) -> Journal:
        """The journal of ``decisions``, each with its copied fields (bounded) fixed now."""
        bounded = [
            _bounded(event_id, d, decided_at, requests.get(d.signup_id), expires_at)
            for d in decisions
        ]
        return cls(
            version=version,
            decided_at=decided_at,
            decisions=tuple(d for d, _, _ in bounded),
            copies=tuple(c for _, c, _ in bounded),
            copies_json=tuple(j for _, _, j in bounded),
            expires_at=expires_at,
        )

    @cached_property
    def _rows(self) -> tuple[str, ...]:
        if self.copies is None:
            raise ValueError("a journal without copied fields is format 1: decode only")
        texts = self.copies_json or tuple(_json(c) for c in self.copies)
        return tuple(
            _json(
                [
                    d.signup_id,
                    self._STATUS[d.status],
                    d.reason,
                    d.seats,
                    d.position,
                    d.sequence_number,
                    d.detail,
                ]
            )[:-1]
            + f",{text}]"
            for d, text in zip(self.decisions, texts, strict=True)
        )

    def encode(self, count: int | None = None) -> bytes:
        """The journal (or its first ``count`` decisions) as stored on the event item."""
        rows = self._rows if count is None else self._rows[:count]
        header: dict[str, Any] = {"f": self.FORMAT, "v": self.version, "t": self.decided_at}
        if self.expires_at is not None:
            header["e"] = self.expires_at
        head = _json(header)
        doc = f'{head[:-1]},"d":[{",".join(rows)}]}}'
        # bzip2: copied fields (text, mostly) come out ~30% smaller than with zlib, and
        # every KB of journal is a write unit per commit; the CPU is a few ms per commit.
        return bz2.compress(doc.encode("utf-8", "surrogatepass"), 9)

    def longest_prefix(self, limit: int) -> int:
        """How many leading decisions encode within ``limit`` bytes (at least one: a row
        is bounded by ``MAX_JOURNAL_ROW_BYTES``)."""
        if len(self.encode()) <= limit:
            return len(self.decisions)
        fits, too_many = 1, len(self.decisions)
        while too_many - fits > 1:
            middle = (fits + too_many) // 2
            if len(self.encode(middle)) <= limit:
                fits = middle
            else:
                too_many = middle
        return fits

    @classmethod
    def decode(cls, blob: bytes) -> Journal:
        """Any journal this code or an earlier one wrote (format 1 is zlib-compressed)."""
        raw = bz2.decompress(blob) if blob[:3] == b"BZh" else zlib.decompress(blob)
        # Unescaped, '"B":"' and '"BS":[' occur only in a typed binary: skip the hook if absent.
        has_binary = b'"B":"' in raw or b'"BS":[' in raw
        doc = json.loads(raw, object_hook=_binary_back if has_binary else None)
        fmt = doc.get("f", 1)
        if fmt not in (1, cls.FORMAT):
            raise ValueError(f"journal format {fmt!r} is newer than this code")
        decisions: list[Decision] = []
        copies: list[dict[str, Any]] = []
        for row in doc["d"]:
            sid, st, reason, seats, position, seq, detail = row[:7]
            decisions.append(
                Decision(
                    signup_id=sid,
                    status=cls._STATUS_BACK[st],
                    reason=reason,
                    seats=seats,
                    position=position,
                    sequence_number=seq,
                    detail=detail,
                )
            )
            if fmt != 1:
                copies.append(row[7])
        expires_at = doc.get("e")
        return cls(
            version=int(doc["v"]),
            decided_at=doc["t"],
            decisions=tuple(decisions),
            copies=tuple(copies) if fmt != 1 else None,
            expires_at=int(expires_at) if expires_at is not None else None,
        )


@dataclass(frozen=True)
class EventRecord:
    """The event item: the lockable state, when it was created, and its last journal."""

    snapshot: EventSnapshot
    created_at: str | None = None
    journal: Journal | None = None
    #: The lowest capacity the event has had, once it was changed (None: never changed).
    min_capacity: int | None = None
    #: Who created it (``Attr.CREATED_BY``); None for an event item written by other means.
    created_by: str | None = None

    @classmethod
    def from_values(cls, item: Mapping[str, Any]) -> EventRecord:
        """From the event item as plain Python values (what ``from_item`` returns)."""
        journal_blob = item.get(Attr.JOURNAL)
        return cls(
            snapshot=EventSnapshot(
                event_id=item[Attr.EVENT_ID],
                capacity=int(item.get(Attr.CAPACITY, 0)),
                taken=int(item.get(Attr.TAKEN, 0)),
                accepted=int(item.get(Attr.ACCEPTED, 0)),
                state=str(item.get(Attr.STATE, EventState.OPEN)),
                version=int(item.get(Attr.VERSION, 0)),
            ),
            created_at=item.get(Attr.CREATED_AT),
            journal=Journal.decode(bytes(journal_blob)) if journal_blob is not None else None,
            min_capacity=(
                int(item[Attr.MIN_CAPACITY]) if item.get(Attr.MIN_CAPACITY) is not None else None
            ),
            created_by=_text_or_none(item.get(Attr.CREATED_BY)),
        )

    def to_public(self) -> dict[str, Any]:
        s = self.snapshot
        return {
            "event_id": s.event_id,
            "capacity": s.capacity,
            "taken": s.taken,
            "remaining": s.remaining,
            "accepted": s.accepted,
            "state": s.state,
            "version": s.version,
            "created_at": self.created_at,
            "created_by": self.created_by,
        }


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _is_or_absent_as(name: str, placeholder: str, value: Any, default: Any) -> str:
    """``name = placeholder``; when ``value`` is what an absent attribute reads as
    (``default``), its absence matches too (an event item written by hand)."""
    if value == default:
        return f"(attribute_not_exists({name}) OR {name} = {placeholder})"
    return f"{name} = {placeholder}"


def _version_is(expected: int) -> str:
    """The optimistic lock's condition on ``#version`` = ``:expected``. An event item
    written by hand may have no version: that reads as 0, so 0 also matches its absence."""
    if expected == 0:
        return "(attribute_not_exists(#version) OR #version = :expected)"
    return "#version = :expected"


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _chunks_within(
    items: Sequence[dict[str, Any]], count: int, size: int
) -> Iterator[Sequence[dict[str, Any]]]:
    """Consecutive runs of at most ``count`` typed items and ``size`` bytes (at least one)."""
    start, total = 0, 0
    for index, item in enumerate(items):
        item_bytes = _item_size(item)
        if index > start and (index - start == count or total + item_bytes > size):
            yield items[start:index]
            start, total = index, 0
        total += item_bytes
    if start < len(items):
        yield items[start:]


class SignupStore:
    """DynamoDB access for the three tables. Pass ``client`` to use a stubbed or local one.

    ``intake`` and ``main`` are keyed by ``(event_id, signup_id)``: the producer's record and
    its decision. Everything turnstile keeps for itself (event items, the sweeper's lease and
    run history) lives in the ``control`` table under ``ControlKey`` keys, out of reach of any
    key a producer can write.
    """

    def __init__(
        self,
        client: Any = None,
        intake_table: str | None = None,
        main_table: str | None = None,
        control_table: str | None = None,
        max_attempts: int = 8,
        base_delay_s: float = 0.05,
        max_delay_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client or default_client()
        self.intake_table = intake_table or INTAKE_TABLE.name
        self.main_table = main_table or MAIN_TABLE.name
        self.control_table = control_table or CONTROL_TABLE.name
        self.max_attempts = max_attempts
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self._sleep = sleep
        #: Calls retried after throttling or a 5xx, for metrics and the benchmark.
        self.retries = 0

    # -- plumbing ---------------------------------------------------------------------

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """Call a client operation, retrying throttling and 5xx with capped full jitter."""
        method = getattr(self.client, operation)
        for attempt in range(1, self.max_attempts + 1):
            try:
                return method(**kwargs)
            except ClientError as exc:
                code = _code(exc)
                if code == "TransactionCanceledException":
                    reasons = {r.get("Code") for r in exc.response.get("CancellationReasons", [])}
                    if "ConditionalCheckFailed" in reasons:
                        raise
                    retryable = bool(reasons & {"ThrottlingError", "TransactionConflict"})
                else:
                    retryable = code in RETRYABLE_CODES
                if not retryable:
                    raise
                if attempt == self.max_attempts:
                    raise StoreUnavailableError(
                        f"{operation} still failing after {attempt} attempts: {code}"
                    ) from exc
                self.retries += 1
                cap = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
                self._sleep(random.uniform(0, cap))
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _key(event_id: str, signup_id: str) -> dict[str, Any]:
        """The key of an intake record or of its decision."""
        return {Attr.EVENT_ID: {"S": event_id}, Attr.SIGNUP_ID: {"S": signup_id}}

    @staticmethod
    def _control_key(key: tuple[str, str]) -> dict[str, Any]:
        """A control-table key, as built by ``ControlKey``."""
        return {ControlKey.PK: {"S": key[0]}, ControlKey.SK: {"S": key[1]}}

    def _event_key(self, event_id: str) -> dict[str, Any]:
        return self._control_key(ControlKey.event(event_id))

    # -- events -----------------------------------------------------------------------

    def create_event(
        self, event_id: str, capacity: int, now: str, created_by: str | None = None
    ) -> EventRecord:
        """Create an OPEN event; raise ``EventExistsError`` if the id is taken.

        An ``UpdateItem`` that names only the event's configuration
        (``contract.EVENT_CONFIG_ATTRIBUTES``): the counters, ``version`` and the journal
        are the processor's, absent until its first commit (they read as 0). So the API's
        role needs no write on any attribute the processor owns (docs/design.md, §5).
        """
        snapshot = EventSnapshot(event_id=event_id, capacity=capacity)
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
        try:
            self._call(
                "update_item",
                TableName=self.control_table,
                Key=self._event_key(event_id),
                UpdateExpression=expression,
                ConditionExpression="attribute_not_exists(#pk)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                raise EventExistsError(f"event {event_id!r} already exists") from exc
            raise
        return EventRecord(snapshot=snapshot, created_at=now, created_by=created_by or None)

    def get_event(self, event_id: str, consistent: bool = True) -> EventRecord | None:
        """The event item, read strongly consistent by default, or None."""
        response = self._call(
            "get_item",
            TableName=self.control_table,
            Key=self._event_key(event_id),
            ConsistentRead=consistent,
        )
        if "Item" not in response:
            return None
        return self._event_from_item(response["Item"])

    def scan_events(self) -> Iterator[EventRecord]:
        """Every event (the audit's and the CLI's listing; never the decision path)."""
        for item in self.event_items():
            yield EventRecord.from_values(item)

    def event_items(self, event_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Event items as plain values: one event's (if it exists) or all, read consistently."""
        if event_id is not None:
            response = self._call(
                "get_item",
                TableName=self.control_table,
                Key=self._event_key(event_id),
                ConsistentRead=True,
            )
            if "Item" in response:
                yield from_item(response["Item"])
            return
        kwargs: dict[str, Any] = {
            "TableName": self.control_table,
            "ConsistentRead": True,
            "FilterExpression": "begins_with(#pk, :prefix)",
            "ExpressionAttributeNames": {"#pk": ControlKey.PK},
            "ExpressionAttributeValues": {":prefix": {"S": ControlKey.EVENT_PREFIX}},
        }
        while True:
            response = self._call("scan", **kwargs)
            for raw in response.get("Items", []):
                yield from_item(raw)
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    @staticmethod
    def _event_from_item(raw: Mapping[str, Any]) -> EventRecord:
        return EventRecord.from_values(from_item(raw))

    def close_event(self, event_id: str) -> tuple[EventRecord | None, bool]:
        """OPEN -> CLOSED, conditionally; returns the event after the call and whether this
        call closed it.

        It leaves ``version`` (the processor's) alone: every commit is conditioned on the
        state it decided from, so a commit that decided on the OPEN event and lands after
        the close conflicts and decides again, rejecting ``event_closed``. No signup is
        accepted once the close has been written (docs/design.md, §4).
        """
        try:
            self._call(
                "update_item",
                TableName=self.control_table,
                Key=self._event_key(event_id),
                UpdateExpression="SET #state = :closed",
                ConditionExpression=(
                    "attribute_exists(#pk) AND "
                    + _is_or_absent_as("#state", ":open", EventState.OPEN, EventState.OPEN)
                ),
                ExpressionAttributeNames={"#state": Attr.STATE, "#pk": ControlKey.PK},
                ExpressionAttributeValues={
                    ":closed": {"S": EventState.CLOSED},
                    ":open": {"S": EventState.OPEN},
                },
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return self.get_event(event_id), False
            raise
        return self.get_event(event_id), True

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
        for _ in range(attempts):
            current = self.get_event(event_id)
            if current is None:
                raise EventNotFoundError(f"no event {event_id!r}")
            snapshot = current.snapshot
            if capacity < snapshot.taken:
                raise CapacityBelowTakenError(event_id, capacity, snapshot.taken)
            lowest = snapshot.capacity if current.min_capacity is None else current.min_capacity
            names = {
                "#pk": ControlKey.PK,
                "#capacity": Attr.CAPACITY,
                "#min": Attr.MIN_CAPACITY,
                "#floor": Attr.CAPACITY_FLOOR,
            }
            values = {
                ":capacity": {"N": str(capacity)},
                ":min": {"N": str(min(lowest, capacity))},
                ":read": {"N": str(snapshot.capacity)},
            }
            if current.min_capacity is None:
                min_unchanged = "attribute_not_exists(#min)"
            else:
                min_unchanged = "#min = :read_min"
                values[":read_min"] = {"N": str(current.min_capacity)}
            try:
                self._call(
                    "update_item",
                    TableName=self.control_table,
                    Key=self._event_key(event_id),
                    UpdateExpression="SET #capacity = :capacity, #min = :min",
                    ConditionExpression=(
                        "attribute_exists(#pk) AND "
                        f"{_is_or_absent_as('#capacity', ':read', snapshot.capacity, 0)} AND "
                        f"{min_unchanged} AND "
                        "(attribute_not_exists(#floor) OR #floor <= :capacity)"
                    ),
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
            except ClientError as exc:
                if _code(exc) == "ConditionalCheckFailedException":
                    continue  # a commit or another change moved the event on: read again
                raise
            updated = self.get_event(event_id)
            if updated is None:  # pragma: no cover - event items are never deleted
                raise EventNotFoundError(f"no event {event_id!r}")
            return updated
        raise StoreUnavailableError(
            f"event {event_id!r} kept changing under the capacity update; try again"
        )

    # -- intake -----------------------------------------------------------------------

    def put_intake(
        self,
        event_id: str,
        signup_id: str,
        seats: int,
        attributes: Mapping[str, Any] | None,
        submitted_at: str,
        expires_at: int | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Write a provisional signup once (``attribute_not_exists``), marked ``undecided``
        so the sweeper finds it through its index until it is decided, and deleted by TTL
        at ``expires_at`` (epoch seconds; None: kept).

        The same body again returns the stored record and False; a different body for the
        same key raises ``SignupConflictError``. The marker is not part of what it returns.
        """
        values = {
            Attr.EVENT_ID: event_id,
            Attr.SIGNUP_ID: signup_id,
            Attr.SEATS: seats,
            Attr.SUBMITTED_AT: submitted_at,
            Attr.ATTRIBUTES: _decimalize(dict(attributes)) if attributes else None,
            Attr.EXPIRES_AT: expires_at,
        }
        marker = {Attr.UNDECIDED: undecided_shard(event_id, signup_id)}
        try:
            self._call(
                "put_item",
                TableName=self.intake_table,
                Item=to_item({**values, **marker}),
                ConditionExpression="attribute_not_exists(#sk)",
                ExpressionAttributeNames={"#sk": Attr.SIGNUP_ID},
            )
            return {k: v for k, v in values.items() if v is not None}, True
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise
        existing = self.get_intake(event_id, signup_id) or {}
        existing.pop(Attr.UNDECIDED, None)
        same = int(existing.get(Attr.SEATS, 1)) == seats and (
            existing.get(Attr.ATTRIBUTES) or {}
        ) == (_decimalize(attributes) or {})
        if not same:
            raise SignupConflictError(
                f"signup {signup_id!r} of event {event_id!r} was submitted with another body"
            )
        return existing, False

    def get_intake(self, event_id: str, signup_id: str) -> dict[str, Any] | None:
        response = self._call(
            "get_item",
            TableName=self.intake_table,
            Key=self._key(event_id, signup_id),
            ConsistentRead=True,
        )
        return from_item(response["Item"]) if "Item" in response else None

    def get_intakes(self, event_id: str, signup_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        return self._batch_get(self.intake_table, event_id, list(signup_ids))

    def redrive(self, event_id: str, signup_id: str) -> bool:
        """Re-emit an intake record into the stream (a MODIFY) by bumping ``redrive``; it
        is marked ``undecided`` too (a string shard), which lets the MODIFY through the
        stream filter and keeps the record in the sweeper's index until it is decided."""
        try:
            self._call(
                "update_item",
                TableName=self.intake_table,
                Key=self._key(event_id, signup_id),
                UpdateExpression="ADD #redrive :one SET #mark = :shard",
                ConditionExpression="attribute_exists(#sk)",
                ExpressionAttributeNames={
                    "#redrive": Attr.REDRIVE,
                    "#sk": Attr.SIGNUP_ID,
                    "#mark": Attr.UNDECIDED,
                },
                ExpressionAttributeValues={
                    ":one": {"N": "1"},
                    ":shard": {"S": undecided_shard(event_id, signup_id)},
                },
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def undecided_marked(self) -> Iterator[dict[str, Any]]:
        """Every entry of the sparse ``undecided`` index: the key, the marker and what the
        sweeper reads to judge age (``submitted_at``, ``redriven_at``, ``redrive``).

        Only records carrying the marker are there, so this reads what is (or was until
        lately) undecided, not the table. A Scan, not a Query per shard: any marker value a
        producer writes is found. Eventually consistent (an index has no other kind): a
        record written a moment ago may be missing, and is young anyway.
        """
        kwargs: dict[str, Any] = {"TableName": self.intake_table, "IndexName": UNDECIDED_INDEX.name}
        while True:
            response = self._call("scan", **kwargs)
            for raw in response.get("Items", []):
                yield from_item(raw)
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def clear_undecided(self, keys: Sequence[tuple[str, str]], workers: int = 8) -> int:
        """Remove the ``undecided`` marker from these (decided) intake records; how many
        carried it.

        ``attribute_exists`` on the marker: a record that lost it meanwhile costs no write
        beyond the failed condition, and an update never creates an item that is gone.
        Each removal is a MODIFY without the marker, which the stream filter drops.
        """

        def clear(key: tuple[str, str]) -> bool:
            try:
                self._call(
                    "update_item",
                    TableName=self.intake_table,
                    Key=self._key(*key),
                    UpdateExpression="REMOVE #mark",
                    ConditionExpression="attribute_exists(#mark)",
                    ExpressionAttributeNames={"#mark": Attr.UNDECIDED},
                )
            except ClientError as exc:
                if _code(exc) == "ConditionalCheckFailedException":
                    return False
                raise
            return True

        if len(keys) <= 1 or workers <= 1:
            return sum(clear(k) for k in keys)
        # One UpdateItem per record (BatchWriteItem has no update): a few at a time.
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return sum(pool.map(clear, keys))

    # -- decisions --------------------------------------------------------------------

    def get_decision(
        self, event_id: str, signup_id: str, consistent: bool = True
    ) -> dict[str, Any] | None:
        response = self._call(
            "get_item",
            TableName=self.main_table,
            Key=self._key(event_id, signup_id),
            ConsistentRead=consistent,
        )
        return from_item(response["Item"]) if "Item" in response else None

    def get_decisions(self, event_id: str, signup_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Decision items that exist for these signups, read strongly consistent."""
        return self._batch_get(self.main_table, event_id, list(dict.fromkeys(signup_ids)))

    def _batch_get(
        self, table: str, event_id: str, signup_ids: list[str]
    ) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for chunk in _chunks(signup_ids, BATCH_GET_LIMIT):
            request: dict[str, Any] = {
                table: {
                    "Keys": [self._key(event_id, s) for s in chunk],
                    "ConsistentRead": True,
                }
            }
            attempt = 0
            while request:
                response = self._call("batch_get_item", RequestItems=request)
                for raw in response.get("Responses", {}).get(table, []):
                    item = from_item(raw)
                    found[item[Attr.SIGNUP_ID]] = item
                request = response.get("UnprocessedKeys") or {}
                attempt = self._backoff_unprocessed(request, attempt, "batch_get_item")
        return found

    def _backoff_unprocessed(self, pending: Mapping[str, Any], attempt: int, op: str) -> int:
        if not pending:
            return 0
        attempt += 1
        if attempt >= self.max_attempts:
            raise StoreUnavailableError(f"{op} left unprocessed items after {attempt} tries")
        self.retries += 1
        self._sleep(random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt)))
        return attempt

    def commit(
        self,
        expected: EventSnapshot,
        outcome: Outcome,
        decided_at: str,
        requests: Mapping[str, SignupRequest | Mapping[str, Any]],
        expires_at: int | None = None,
    ) -> Journal:
        """Commit a group's decisions and the event's counters in one conditional write.

        The journal fixes each decision item to the byte, with the fields it copies from
        ``requests`` (by signup id) and ``expires_at`` (when TTL deletes them; None: kept).
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
        )
        blob = journal.encode()
        if len(blob) > MAX_JOURNAL_BYTES:
            fits = journal.longest_prefix(MAX_JOURNAL_BYTES)
            raise JournalTooLargeError(
                f"event {expected.event_id!r}: a journal of {len(outcome.decisions)} decisions"
                f" is {len(blob)} bytes; {fits} fit in {MAX_JOURNAL_BYTES}",
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
                _is_or_absent_as("#capacity", ":capacity", expected.capacity, 0),
                _is_or_absent_as("#state", ":state", expected.state, EventState.OPEN),
            )
        )
        if outcome.state.taken > expected.taken:
            # Only a commit that takes seats depends on room for them: one that only
            # rejects must go through even when an operator left capacity below taken.
            condition += " AND #capacity >= :taken"
        try:
            self._call(
                "update_item",
                TableName=self.control_table,
                Key=self._event_key(expected.event_id),
                # capacity_floor: what a capacity change is conditioned on (it may not
                # read taken, see update_capacity).
                UpdateExpression=(
                    "SET #taken = :taken, #accepted = :accepted, #version = :next, "
                    "#journal = :j, #floor = :taken"
                ),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={
                    ":taken": {"N": str(outcome.state.taken)},
                    ":accepted": {"N": str(outcome.state.accepted)},
                    ":next": {"N": str(journal.version)},
                    ":expected": {"N": str(expected.version)},
                    ":capacity": {"N": str(expected.capacity)},
                    ":state": {"S": expected.state},
                    ":j": {"B": blob},
                },
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                raise CommitConflictError(
                    f"event {expected.event_id!r} moved past version {expected.version} "
                    "(or its capacity or state changed)"
                ) from exc
            raise
        return journal

    def decision_item(
        self,
        event_id: str,
        decision: Decision,
        decided_at: str,
        request: SignupRequest | Mapping[str, Any] | None,
        expires_at: int | None = None,
    ) -> dict[str, Any]:
        """The decision item exactly as the contract describes it (typed for the client),
        bounded as ``bounded_decision`` says."""
        decision, copies = bounded_decision(event_id, decision, decided_at, request, expires_at)
        return {**_base_item(event_id, decision, decided_at, expires_at), **copies}

    def journal_items(
        self,
        event_id: str,
        journal: Journal,
        requests: Mapping[str, SignupRequest | Mapping[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """The journal's decision items. A journal fixes them to the byte; only one of
        format 1 takes the copied fields from ``requests``, or else from intake."""
        if journal.copies is not None:
            return [
                {**_base_item(event_id, d, journal.decided_at, journal.expires_at), **c}
                for d, c in zip(journal.decisions, journal.copies, strict=True)
            ]
        requests = requests or {}
        missing = [d.signup_id for d in journal.decisions if d.signup_id not in requests]
        sources: dict[str, SignupRequest | Mapping[str, Any]] = dict(requests)
        if missing:
            sources.update(self.get_intakes(event_id, missing))
        return [
            self.decision_item(event_id, d, journal.decided_at, sources.get(d.signup_id))
            for d in journal.decisions
        ]

    def materialize(
        self,
        event_id: str,
        journal: Journal,
        requests: Mapping[str, SignupRequest | Mapping[str, Any]] | None = None,
    ) -> None:
        """Write the journal's decision items (idempotent: the journal fixes their content).

        ``requests`` is read only for a journal of format 1 (see ``journal_items``).
        """
        self._batch_write(self.main_table, self.journal_items(event_id, journal, requests))

    def _batch_write(self, table: str, items: Sequence[dict[str, Any]]) -> None:
        for chunk in _chunks(items, BATCH_WRITE_LIMIT):
            request: dict[str, Any] = {table: [{"PutRequest": {"Item": i}} for i in chunk]}
            attempt = 0
            while request:
                response = self._call("batch_write_item", RequestItems=request)
                request = response.get("UnprocessedItems") or {}
                attempt = self._backoff_unprocessed(request, attempt, "batch_write_item")

    def reject_without_event(
        self,
        event_id: str,
        decisions: Sequence[Decision],
        requests: Mapping[str, SignupRequest],
        decided_at: str,
        expires_at: int | None = None,
    ) -> None:
        """Write rejections for an event with no event item, only while it still has none.

        Each transaction checks that the event item does not exist, so a rejection can
        never race with an acceptance committed after the event was created. Transactions
        hold at most 99 items and ``TRANSACTION_BYTES``.
        """
        items = [
            self.decision_item(event_id, d, decided_at, requests.get(d.signup_id), expires_at)
            for d in decisions
        ]
        for chunk in _chunks_within(items, TRANSACTION_LIMIT - 1, TRANSACTION_BYTES):
            actions: list[dict[str, Any]] = [
                {
                    "ConditionCheck": {
                        "TableName": self.control_table,
                        "Key": self._event_key(event_id),
                        "ConditionExpression": "attribute_not_exists(#pk)",
                        "ExpressionAttributeNames": {"#pk": ControlKey.PK},
                    }
                }
            ]
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
                self._call("transact_write_items", TransactItems=actions)
            except ClientError as exc:
                if _code(exc) == "TransactionCanceledException":
                    raise CommitConflictError(
                        f"event {event_id!r} appeared, or a signup was decided, meanwhile"
                    ) from exc
                raise

    # -- the sweeper's lease and run history (control table) ---------------------------

    def acquire_lease(self, owner: str, duration_s: float, now: float) -> int | None:
        """Take the sweeper lease if free, expired or already ours.

        Returns the new fencing token (it grows with every acquisition), or None while
        another owner holds an unexpired lease. TTL never decides expiry: the condition does.
        """
        try:
            response = self._call(
                "update_item",
                TableName=self.control_table,
                Key=self._control_key(ControlKey.SWEEPER_LEASE),
                UpdateExpression="SET #owner = :owner, #until = :until ADD #fence :one",
                ConditionExpression=(
                    "attribute_not_exists(#pk) OR #until < :now OR #owner = :owner"
                ),
                ExpressionAttributeNames={
                    "#owner": "owner",
                    "#until": "lease_until",
                    "#fence": "fence",
                    "#pk": ControlKey.PK,
                },
                ExpressionAttributeValues={
                    ":owner": {"S": owner},
                    ":until": {"N": repr(now + duration_s)},
                    ":now": {"N": repr(now)},
                    ":one": {"N": "1"},
                },
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return None
            raise
        return int(response["Attributes"]["fence"]["N"])

    def _lease_check(self, owner: str, token: int, now: float) -> dict[str, Any]:
        return {
            "ConditionCheck": {
                "TableName": self.control_table,
                "Key": self._control_key(ControlKey.SWEEPER_LEASE),
                "ConditionExpression": "#owner = :owner AND #fence = :token AND #until >= :now",
                "ExpressionAttributeNames": {
                    "#owner": "owner",
                    "#fence": "fence",
                    "#until": "lease_until",
                },
                "ExpressionAttributeValues": {
                    ":owner": {"S": owner},
                    ":token": {"N": str(token)},
                    ":now": {"N": repr(now)},
                },
            }
        }

    def get_lease(self) -> dict[str, Any] | None:
        """The sweeper's lease item (owner, fence, lease_until), read consistently, or None."""
        response = self._call(
            "get_item",
            TableName=self.control_table,
            Key=self._control_key(ControlKey.SWEEPER_LEASE),
            ConsistentRead=True,
        )
        return from_item(response["Item"]) if "Item" in response else None

    def release_lease(self, owner: str, token: int) -> None:
        """Give the lease up early (only if it is still ours, with the same token)."""
        self._set_on_own_lease(owner, token, "lease_until", {"N": "0"})

    def note_full_scan(self, owner: str, token: int, at: float) -> bool:
        """Record on the lease item (while it is ours) that a full scan of intake finished
        at ``at``; False if the lease moved on. ``get_lease()["full_scan_at"]`` reads it."""
        return self._set_on_own_lease(owner, token, "full_scan_at", {"N": repr(at)})

    def _set_on_own_lease(
        self, owner: str, token: int, attribute: str, value: dict[str, str]
    ) -> bool:
        """Set one attribute of the lease item only while ``owner`` holds it with ``token``;
        False if the lease moved on."""
        try:
            self._call(
                "update_item",
                TableName=self.control_table,
                Key=self._control_key(ControlKey.SWEEPER_LEASE),
                UpdateExpression="SET #attribute = :value",
                ConditionExpression="#owner = :owner AND #fence = :token",
                ExpressionAttributeNames={
                    "#owner": "owner",
                    "#fence": "fence",
                    "#attribute": attribute,
                },
                ExpressionAttributeValues={
                    ":owner": {"S": owner},
                    ":token": {"N": str(token)},
                    ":value": value,
                },
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def fenced_redrive(
        self, owner: str, token: int, now: float, event_id: str, signup_id: str
    ) -> bool:
        """Re-emit one intake record only while our lease (and its token) holds.

        Raises ``LeaseLostError`` if the lease moved on; returns False if the intake record
        no longer exists.
        """
        return self.fenced_redrive_many(owner, token, now, [(event_id, signup_id)]) == 1

    def fenced_redrive_many(
        self,
        owner: str,
        token: int,
        now: float,
        keys: Sequence[tuple[str, str]],
        junk_counters: Collection[tuple[str, str]] = (),
    ) -> int:
        """Re-emit intake records, up to 99 per transaction, each transaction fenced by a
        ConditionCheck on our lease and token. Returns how many were re-emitted.

        Raises ``LeaseLostError`` the moment the lease has moved on. A record that no longer
        exists cancels its transaction; that chunk is then re-emitted one record at a time.
        So does one whose ``redrive`` a producer wrote as something other than a number
        (``ADD`` refuses it): that record is then re-emitted by its ``redriven_at`` alone, as
        are the ``junk_counters`` the caller already knows of.
        """
        done = 0
        junk = set(junk_counters)
        plain = [k for k in keys if k not in junk]
        for chunk in _chunks(plain, TRANSACTION_LIMIT - 1):
            done += self._fenced_chunk(owner, token, now, chunk, overwrite=False)
        for chunk in _chunks([k for k in keys if k in junk], TRANSACTION_LIMIT - 1):
            done += self._fenced_chunk(owner, token, now, chunk, overwrite=True)
        return done

    def _fenced_chunk(
        self,
        owner: str,
        token: int,
        now: float,
        chunk: Sequence[tuple[str, str]],
        overwrite: bool,
    ) -> int:
        try:
            self._call(
                "transact_write_items",
                TransactItems=[
                    self._lease_check(owner, token, now),
                    *(self._redrive_update(e, s, now, overwrite) for e, s in chunk),
                ],
            )
            return len(chunk)
        except ClientError as exc:
            code = _code(exc)
            reasons = {r.get("Code") for r in exc.response.get("CancellationReasons") or []}
            invalid = code == "ValidationException" or "ValidationError" in reasons
            if code != "TransactionCanceledException" and not invalid:
                raise
            if not invalid:
                self._raise_if_lease_lost(exc, owner, token, now)
            if len(chunk) > 1:
                return sum(
                    self._fenced_chunk(owner, token, now, [key], overwrite) for key in chunk
                )
            if invalid and not overwrite:
                return self._fenced_chunk(owner, token, now, chunk, overwrite=True)
            return 0  # the one record is gone (or cannot be written): nothing to re-emit

    def _redrive_update(
        self, event_id: str, signup_id: str, now: float, overwrite: bool
    ) -> dict[str, Any]:
        names = {"#at": Attr.REDRIVEN_AT, "#sk": Attr.SIGNUP_ID, "#mark": Attr.UNDECIDED}
        values: dict[str, Any] = {
            ":at": {"N": repr(now)},
            ":shard": {"S": undecided_shard(event_id, signup_id)},
        }
        # The marker (a string, whatever the producer wrote) lets the MODIFY through the
        # stream filter, and keeps the record in the sweeper's index until it is decided.
        mark = "#mark = :shard"
        if overwrite:
            # A new redriven_at alone is a MODIFY too: the way for a record whose counter
            # a producer wrote as something ADD refuses.
            bump = f"SET #at = :at, {mark}"
        else:
            bump = f"ADD #redrive :one SET #at = :at, {mark}"
            names["#redrive"] = Attr.REDRIVE
            values[":one"] = {"N": "1"}
        return {
            "Update": {
                "TableName": self.intake_table,
                "Key": self._key(event_id, signup_id),
                "UpdateExpression": bump,
                "ConditionExpression": "attribute_exists(#sk)",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def _raise_if_lease_lost(self, exc: ClientError, owner: str, token: int, now: float) -> None:
        """Which condition cancelled the transaction: the lease's (raise) or a record's."""
        reasons = exc.response.get("CancellationReasons") or []
        if reasons:
            if reasons[0].get("Code") == "ConditionalCheckFailed":
                raise LeaseLostError(f"sweeper lease of {owner!r} (token {token}) lapsed") from exc
            return
        # moto gives no per-item reasons: read the lease to tell.
        lease = self.get_lease() or {}
        if lease.get("owner") != owner or int(lease.get("fence", -1)) != token:
            raise LeaseLostError(f"sweeper lease of {owner!r} (token {token}) lapsed") from exc
        if float(lease.get("lease_until", 0)) < now:
            raise LeaseLostError(f"sweeper lease of {owner!r} expired") from exc

    def start_run(self, run_id: str, now: str, replay: bool = False) -> int | None:
        """Record that a sweep run starts, immutably; the history item's number.

        None when the run already started or succeeded (unless ``replay`` and it failed).
        A concurrent duplicate start of the same entry is caught by an atomic counter:
        the second starter sees a count above 1 and raises ``DuplicateRunError``.
        """
        history = self.run_history(run_id)
        latest = history[-1] if history else None
        if latest is not None and (not replay or latest["exec_status"] != "failed"):
            return None  # this run happened; only a replay reruns it, and only if it failed
        seq = int(latest["seq"]) + 1 if latest else 1
        response = self._call(
            "update_item",
            TableName=self.control_table,
            Key=self._control_key(ControlKey.sweep_run(run_id, seq)),
            UpdateExpression=(
                "ADD #counter :one SET #status = if_not_exists(#status, :started), "
                "#created = if_not_exists(#created, :now), #run = :run, #seq = :seq"
            ),
            ExpressionAttributeNames={
                "#counter": "atomic_counter",
                "#status": "exec_status",
                "#created": Attr.CREATED_AT,
                "#run": "run_id",
                "#seq": "seq",
            },
            ExpressionAttributeValues={
                ":one": {"N": "1"},
                ":started": {"S": "started"},
                ":now": {"S": now},
                ":run": {"S": run_id},
                ":seq": {"N": str(seq)},
            },
            ReturnValues="UPDATED_NEW",
        )
        if int(response["Attributes"]["atomic_counter"]["N"]) > 1:
            raise DuplicateRunError(f"sweep run {run_id!r} was started twice at once")
        return seq

    def finish_run(
        self, run_id: str, seq: int, status: str, now: str, detail: Mapping[str, Any]
    ) -> None:
        """Append the run's outcome (``succeeded`` or ``failed``) as a new immutable item."""
        pk, sk = ControlKey.sweep_run(run_id, seq + 1)
        self._call(
            "put_item",
            TableName=self.control_table,
            Item=to_item(
                {
                    ControlKey.PK: pk,
                    ControlKey.SK: sk,
                    "run_id": run_id,
                    "seq": seq + 1,
                    "exec_status": status,
                    "atomic_counter": 1,
                    Attr.CREATED_AT: now,
                    "detail": json.dumps(dict(detail), default=str),
                }
            ),
            ConditionExpression="attribute_not_exists(#pk)",
            ExpressionAttributeNames={"#pk": ControlKey.PK},
        )

    def run_history(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """History items of one run (or all runs), oldest first."""
        kwargs: dict[str, Any] = {
            "TableName": self.control_table,
            "ConsistentRead": True,
            "ExpressionAttributeNames": {"#pk": ControlKey.PK},
            "ExpressionAttributeValues": {":pk": {"S": ControlKey.SWEEP_RUNS}},
            "KeyConditionExpression": "#pk = :pk",
        }
        if run_id is not None:
            kwargs["KeyConditionExpression"] += " AND begins_with(#sk, :prefix)"
            kwargs["ExpressionAttributeNames"]["#sk"] = ControlKey.SK
            kwargs["ExpressionAttributeValues"][":prefix"] = {"S": f"{run_id}#"}
        items: list[dict[str, Any]] = []
        while True:
            response = self._call("query", **kwargs)
            items += [from_item(i) for i in response.get("Items", [])]
            if "LastEvaluatedKey" not in response:
                return items
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    # -- held events: the hold marker and parked records (control table) ---------------
    #
    # An event whose group keeps failing is *held* (docs/arrival-order.md): its records are
    # parked under ``ControlKey.parked`` in arrival order and released in that order later.
    # The hold marker is never deleted, only cleared: its ``version`` grows for ever, so a
    # release that read version N can never lift a hold placed after it (no ABA).

    def get_event_and_hold(self, event_id: str) -> tuple[EventRecord | None, dict[str, Any] | None]:
        """The event item and the event's hold marker (None unless held), in one consistent
        ``BatchGetItem``: the decision path's only read before deciding a group."""
        request: dict[str, Any] = {
            self.control_table: {
                "Keys": [
                    self._event_key(event_id),
                    self._control_key(ControlKey.hold(event_id)),
                ],
                "ConsistentRead": True,
            }
        }
        event: EventRecord | None = None
        hold: dict[str, Any] | None = None
        attempt = 0
        while request:
            response = self._call("batch_get_item", RequestItems=request)
            for raw in response.get("Responses", {}).get(self.control_table, []):
                if raw[ControlKey.SK]["S"] == ControlKey.EVENT_SK:
                    event = self._event_from_item(raw)
                else:
                    hold = _held(from_item(raw))
            request = response.get("UnprocessedKeys") or {}
            attempt = self._backoff_unprocessed(request, attempt, "batch_get_item")
        return event, hold

    def get_hold(self, event_id: str) -> dict[str, Any] | None:
        """The event's hold marker, read consistently, if the event is held."""
        response = self._call(
            "get_item",
            TableName=self.control_table,
            Key=self._control_key(ControlKey.hold(event_id)),
            ConsistentRead=True,
        )
        return _held(from_item(response["Item"])) if "Item" in response else None

    def holds(self, event_id: str | None = None) -> dict[str, dict[str, Any]]:
        """Hold markers of held events by event id (one event's, or all: a filtered Scan)."""
        if event_id is not None:
            hold = self.get_hold(event_id)
            return {event_id: hold} if hold else {}
        kwargs: dict[str, Any] = {
            "TableName": self.control_table,
            "ConsistentRead": True,
            "FilterExpression": "begins_with(#pk, :prefix) AND #sk = :hold AND "
            "attribute_exists(#since)",
            "ExpressionAttributeNames": {
                "#pk": ControlKey.PK,
                "#sk": ControlKey.SK,
                "#since": HoldAttr.HELD_SINCE,
            },
            "ExpressionAttributeValues": {
                ":prefix": {"S": ControlKey.PARK_PREFIX},
                ":hold": {"S": ControlKey.HOLD_SK},
            },
        }
        found: dict[str, dict[str, Any]] = {}
        while True:
            response = self._call("scan", **kwargs)
            for raw in response.get("Items", []):
                item = from_item(raw)
                found[item[Attr.EVENT_ID]] = item
            if "LastEvaluatedKey" not in response:
                return found
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def park(
        self, event_id: str, requests: Sequence[SignupRequest], now: str, error: str | None
    ) -> int:
        """Park records of an event (keeping their sequence numbers) and hold the event.

        The records are written first and the hold marker bumped second, so a release that
        ran in between either fails to lift the hold (the version moved) or lifted it before
        the bump, which holds the event again. Parking a record twice writes the same item.
        Returns the hold's new version. Raises ``ValueError`` for a record without a stream
        sequence number (it cannot be ordered).
        """
        items: dict[str, dict[str, Any]] = {}
        for request in requests:
            pk, sk = ControlKey.parked(event_id, request.sequence_number)
            items.setdefault(
                sk,
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
                        HoldAttr.PROBLEM: request.problem,
                    }
                ),
            )
        self._batch_write(self.control_table, list(items.values()))
        first = min(requests, key=lambda r: int(r.sequence_number)).sequence_number
        names = {
            "#version": Attr.VERSION,
            "#event": Attr.EVENT_ID,
            "#since": HoldAttr.HELD_SINCE,
            "#first": HoldAttr.FIRST_SEQUENCE_NUMBER,
        }
        values: dict[str, Any] = {
            ":one": {"N": "1"},
            ":event": {"S": event_id},
            ":now": {"S": now},
            ":first": {"S": first},
        }
        expression = (
            "ADD #version :one SET #event = :event, #since = if_not_exists(#since, :now), "
            "#first = if_not_exists(#first, :first)"
        )
        if error:
            expression += ", #error = :error"
            names["#error"] = HoldAttr.ERROR
            values[":error"] = {"S": error[:200]}
        response = self._call(
            "update_item",
            TableName=self.control_table,
            Key=self._control_key(ControlKey.hold(event_id)),
            UpdateExpression=expression,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="UPDATED_NEW",
        )
        return int(response["Attributes"][Attr.VERSION]["N"])

    def parked_requests(self, event_id: str) -> list[SignupRequest]:
        """The event's parked records, in arrival order, read consistently."""
        pk, _ = ControlKey.hold(event_id)
        kwargs: dict[str, Any] = {
            "TableName": self.control_table,
            "ConsistentRead": True,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": ControlKey.PK, "#sk": ControlKey.SK},
            "ExpressionAttributeValues": {
                ":pk": {"S": pk},
                ":prefix": {"S": ControlKey.PARKED_PREFIX},
            },
        }
        requests: list[SignupRequest] = []
        while True:
            response = self._call("query", **kwargs)
            for raw in response.get("Items", []):
                item = from_item(raw)
                attributes = item.get(Attr.ATTRIBUTES)
                requests.append(
                    SignupRequest(
                        event_id=event_id,
                        signup_id=str(item[Attr.SIGNUP_ID]),
                        sequence_number=str(item[Attr.SEQUENCE_NUMBER]),
                        seats=int(item.get(Attr.SEATS, 0)),
                        attributes=dict(attributes) if isinstance(attributes, Mapping) else {},
                        submitted_at=item.get(Attr.SUBMITTED_AT),
                        problem=item.get(HoldAttr.PROBLEM),
                    )
                )
            if "LastEvaluatedKey" not in response:
                return requests
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def unpark(self, event_id: str, sequence_numbers: Iterable[str]) -> None:
        """Delete parked records (once they are decided); deleting one twice is harmless."""
        keys = {ControlKey.parked(event_id, s) for s in sequence_numbers}
        requests = [{"DeleteRequest": {"Key": self._control_key(k)}} for k in sorted(keys)]
        self._batch_requests(self.control_table, requests)

    def lift_hold(self, event_id: str, version: int) -> bool:
        """Clear the hold if its version is still ``version``; False if records were parked
        meanwhile (the event stays held). The marker stays, cleared, with its version."""
        try:
            self._call(
                "update_item",
                TableName=self.control_table,
                Key=self._control_key(ControlKey.hold(event_id)),
                UpdateExpression="REMOVE #since, #first, #error",
                ConditionExpression="#version = :version",
                ExpressionAttributeNames={
                    "#since": HoldAttr.HELD_SINCE,
                    "#first": HoldAttr.FIRST_SEQUENCE_NUMBER,
                    "#error": HoldAttr.ERROR,
                    "#version": Attr.VERSION,
                },
                ExpressionAttributeValues={":version": {"N": str(version)}},
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def _batch_requests(self, table: str, requests: Sequence[dict[str, Any]]) -> None:
        """BatchWriteItem of put or delete requests, 25 at a time, unprocessed ones retried."""
        for chunk in _chunks(requests, BATCH_WRITE_LIMIT):
            pending: dict[str, Any] = {table: list(chunk)}
            attempt = 0
            while pending:
                response = self._call("batch_write_item", RequestItems=pending)
                pending = response.get("UnprocessedItems") or {}
                attempt = self._backoff_unprocessed(pending, attempt, "batch_write_item")

    # -- reading whole tables (audit, the sweeper's backstop; never the decision path) -----

    def scan(self, table: str, event_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Every item of a table (or of one event), read consistently, page by page."""
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        operation = "scan"
        if event_id is not None:
            operation = "query"
            kwargs["KeyConditionExpression"] = "#pk = :pk"
            kwargs["ExpressionAttributeNames"] = {"#pk": Attr.EVENT_ID}
            kwargs["ExpressionAttributeValues"] = {":pk": {"S": event_id}}
        while True:
            response = self._call(operation, **kwargs)
            for raw in response.get("Items", []):
                yield from_item(raw)
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def refused_as_invalid(error: BaseException | None) -> bool:
    """Whether DynamoDB refused a request as invalid (ValidationException): the request
    itself is at fault, so trying it again, however late, cannot help."""
    return isinstance(error, ClientError) and _code(error) == "ValidationException"


def _held(hold: dict[str, Any]) -> dict[str, Any] | None:
    """A hold marker counts only while it is set (a released one keeps just its version)."""
    return hold if HoldAttr.HELD_SINCE in hold else None


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

"""The one place that defines turnstile's data contract and event-source settings.

The CDK stack, the local stack, the store and the handlers all read these definitions, so
the tables and the stream mapping cannot drift between AWS and a laptop.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from turnstile.base.eventfilter import parse_pattern

__all__ = [
    "ADMIN_PRINCIPALS_ENV",
    "ADMIN_SCOPE",
    "ALL_TABLES",
    "CONTROL_TABLE",
    "DECISION_ATTRIBUTES",
    "DECISION_RETENTION_ENV",
    "DUE_HOLDS_INDEX",
    "DUE_HOLDS_SHARD",
    "EVENTS_CREATED",
    "EVENT_CONFIG_ATTRIBUTES",
    "EVENT_LIST_ATTRIBUTES",
    "FAILURE_QUEUE_NAME",
    "FUNCTION_HANDLERS",
    "ID_PATTERN",
    "INTAKE_RETENTION_DAYS",
    "INTAKE_RETENTION_ENV",
    "INTAKE_SUBMIT_ATTRIBUTES",
    "INTAKE_TABLE",
    "MAIN_TABLE",
    "MAX_ATTRIBUTES_BYTES",
    "MAX_EVENTS_ENV",
    "MAX_HOLD_SECONDS",
    "MAX_IDENTITY_CHARS",
    "MAX_ITEM_BYTES",
    "MAX_LINEUP_ENTRIES",
    "MAX_OWNER_CHARS",
    "MAX_PARTITION_KEY_BYTES",
    "MAX_SHARDS",
    "MAX_SORT_KEY_BYTES",
    "ORGANIZER_ATTRIBUTES",
    "SHARD_KEY_PATTERN",
    "STREAM_SOURCE",
    "UNDECIDED_INDEX",
    "UNDECIDED_SHARDS",
    "WAKE_SOURCE",
    "Attr",
    "ControlKey",
    "EventSourceSettings",
    "EventState",
    "Function",
    "HistoryKey",
    "IndexSpec",
    "LeaseAttr",
    "ParkAttr",
    "Reason",
    "RequestKind",
    "RunAttr",
    "RunStatus",
    "Status",
    "TableSpec",
    "WakeAttr",
    "WakeReason",
    "control_table_name",
    "fits_partition_key",
    "intake_table_name",
    "is_event_key",
    "is_id",
    "main_table_name",
    "recorded_identity",
    "shard_key",
    "shard_of",
    "signup_key",
    "split_shard_key",
    "undecided_shard",
]

#: signup_id and event_id both match this (docs/design.md, the data contract).
ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")

#: The largest ``attributes`` map a signup may carry, in DynamoDB's item-size bytes.
MAX_ATTRIBUTES_BYTES = 4096
#: The most events one organizer (an API caller who is no admin) may create, when set (the
#: stack's ``turnstile:maxEventsPerOrganizer``); unset: no cap.
MAX_EVENTS_ENV = "TURNSTILE_MAX_EVENTS_PER_ORGANIZER"
#: An organizer's item: its key and the count of events it created.
EVENTS_CREATED = "events_created"
ORGANIZER_ATTRIBUTES = ("pk", "sk", EVENTS_CREATED)
#: The longest identity turnstile records as it is (an IAM ARN is at most 2,048
#: characters); a longer one (a token's subject) is recorded as its hash
#: (``recorded_identity``), never cut short: two identities never share a record.
MAX_IDENTITY_CHARS = 2048
#: The longest ``owner`` a signup keeps.
MAX_OWNER_CHARS = MAX_IDENTITY_CHARS
#: The principals (IAM ARN patterns, ``*`` wildcards, comma-separated) the API treats as
#: admins: they may act on every event and signup. With a JWT authorizer, the scope
#: ``ADMIN_SCOPE`` makes a caller an admin.
ADMIN_PRINCIPALS_ENV = "TURNSTILE_ADMIN_PRINCIPALS"
ADMIN_SCOPE = "turnstile/admin"

#: DynamoDB's limits: a partition key value of 1 to 2,048 bytes and a sort key value of 1
#: to 1,024 (a string's UTF-8, a binary's raw bytes), refused past them on every operation
#: that takes a key, reads included; an item of at most 400 KB (``turnstile.base.itemsize``).
MAX_PARTITION_KEY_BYTES = 2048
MAX_SORT_KEY_BYTES = 1024
MAX_ITEM_BYTES = 400 * 1024


def is_id(value: Any) -> bool:
    """Whether ``value`` is an id (``ID_PATTERN``, in full). Only an id ever names an event
    item, a parking marker or a parked record, so a control key is built from nothing else:
    the longest one an id makes (``PARK#`` and 128 characters) is far inside the limits,
    while an event id read from intake may be up to 2,048 bytes, and prefixed, one AWS
    refuses."""
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def fits_partition_key(value: Any) -> bool:
    """Whether DynamoDB takes ``value`` as a string partition key value: 1 to
    ``MAX_PARTITION_KEY_BYTES`` bytes of UTF-8 (every intake record's event id does)."""
    if not isinstance(value, str):
        return False
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 at all
        return False
    return 0 < size <= MAX_PARTITION_KEY_BYTES


#: The most shards an event may have (``Attr.SHARDS``; docs/hot-events.md).
MAX_SHARDS = 32

#: A shard of a sharded event, as intake and the main table key its signups and as the
#: processor decides it: ``<event id>#<shard, two digits>``, shard 00 to 31. ``#`` is in no
#: id, so a shard key is never an event's id, nor an id's prefix.
SHARD_KEY_PATTERN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._:@-]{0,127})#(0[0-9]|[12][0-9]|3[01])$")


def shard_of(signup_id: str, shards: int) -> int:
    """The one shard of a signup of an event of ``shards`` shards: the first 8 bytes of the
    BLAKE2b digest of its UTF-8 id, as an unsigned big-endian number, modulo ``shards``.

    Fixed forever (a producer writing intake directly computes it the same way; the data
    contract states it, and ``turnstile_tools.client.shard_key_of`` computes it), and
    spread evenly whatever the ids look like."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"an event has 1 to {MAX_SHARDS} shards, not {shards}")
    digest = hashlib.blake2b(signup_id.encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(digest.digest(), "big") % shards


def shard_key(event_id: str, shard: int) -> str:
    """Shard ``shard``'s key of event ``event_id`` (``SHARD_KEY_PATTERN``)."""
    if not 0 <= shard < MAX_SHARDS:
        raise ValueError(f"no shard {shard}: an event has at most {MAX_SHARDS}")
    return f"{_event_id(event_id)}#{shard:02d}"


def signup_key(event_id: str, signup_id: str, shards: int) -> str:
    """The event key a signup of event ``event_id`` is written and decided under: the
    event's id when it has one shard, else its shard's key."""
    if shards == 1:
        return event_id
    return shard_key(event_id, shard_of(signup_id, shards))


def shard_position(given: int, shard: int = 0, shards: int = 1) -> int:
    """The position of the ``given``-th grant of seats (1: the first) in shard ``shard`` of
    an event of ``shards``: ``shard + 1``, then every ``shards``-th number after it, so
    shards never give the same position (an unsharded event: 1, 2, 3 ...)."""
    return shard + 1 + (given - 1) * shards


def split_shard_key(key: Any) -> tuple[str, int] | None:
    """A shard key's event id and shard number; None when ``key`` is no shard key."""
    if not isinstance(key, str):
        return None
    found = SHARD_KEY_PATTERN.fullmatch(key)
    return (found.group(1), int(found.group(2))) if found else None


def is_event_key(value: Any) -> bool:
    """Whether ``value`` may name an event item: an id, or a shard key (a sharded event's
    shard is decided as an event of its own, ``docs/hot-events.md``)."""
    return is_id(value) or split_shard_key(value) is not None


def _event_id(event_id: str) -> str:
    """``event_id``, refused unless it is an id or a shard key: every key of turnstile's own
    items is built from one, never from an id a producer wrote that could make a key
    DynamoDB refuses (2,048 bytes with the prefix), or name another kind of item."""
    if not ID_PATTERN.fullmatch(event_id) and not SHARD_KEY_PATTERN.fullmatch(event_id):
        raise ValueError(f"not an event id: {event_id[:60]!r}")
    return event_id


class ControlKey:
    """Keys of the control table, the only home of the items turnstile keeps for itself.

    The trust boundary by construction: producers write any key they like into intake, and
    every decision lands in the main table under its intake record's own key. No item of
    turnstile's own lives there, so no intake key can write, replace or shadow one. In the
    control table each key starts with a fixed kind prefix (``EVENT#``, ``PARK#``,
    ``SWEEPER``, ``SWEEP-RUN``) and a free-form part (an event id) only ever follows
    ``EVENT#`` or ``PARK#``, so even a hostile event id read from intake can name nothing but
    an event item or that event's own parking marker and parked records.
    """

    PK = "pk"
    SK = "sk"
    EVENT_PREFIX = "EVENT#"
    EVENT_SK = "EVENT"
    SWEEPER_LEASE = ("SWEEPER", "LEASE")
    SWEEP_RUNS = "SWEEP-RUN"

    @classmethod
    def event(cls, event_id: str) -> tuple[str, str]:
        return f"{cls.EVENT_PREFIX}{_event_id(event_id)}", cls.EVENT_SK

    @classmethod
    def sweep_run(cls, run_id: str, seq: int) -> tuple[str, str]:
        return cls.SWEEP_RUNS, f"{run_id}#{seq:06d}"

    # A parked event (docs/arrival-order.md): its parking marker and its parked records
    # share one partition; parked records sort by their arrival sequence number.
    PARK_PREFIX = "PARK#"
    PARKED_SK = "PARKED"
    PARKED_PREFIX = "R#"
    #: DynamoDB Streams sequence numbers are decimal strings of 21 to 40 digits.
    SEQUENCE_DIGITS = 40

    @classmethod
    def parking(cls, event_id: str) -> tuple[str, str]:
        """An event's parking marker's key (the partition of its parked records)."""
        return f"{cls.PARK_PREFIX}{_event_id(event_id)}", cls.PARKED_SK

    # An event's wake-up: written by whatever needs the event to take a step (a hold due,
    # an organizer's change, a parked event to release); its stream record is the step's
    # record (``WAKE_SOURCE``). Turnstile's own: no producer can write, delete or block it.
    WAKE_PREFIX = "WAKE#"
    WAKE_SK = "WAKE"

    @classmethod
    def wake(cls, event_id: str) -> tuple[str, str]:
        return f"{cls.WAKE_PREFIX}{_event_id(event_id)}", cls.WAKE_SK

    # A long lineup's pages (``turnstile.engine.lineup``): written only by the commit of
    # the event they belong to, in its transaction, under a prefix of their own, so the
    # processor's right to put and delete them reaches no event item.
    LINEUP_PREFIX = "LINEUP#"

    @classmethod
    def lineup_page(cls, event_id: str, kind: str, first: int) -> tuple[str, str]:
        """The key of the page of ``kind`` ("h": holds, "w": the waitlist) whose entries'
        keys start at ``first`` (a position, an arrival sequence number)."""
        if kind not in ("h", "w") or first < 0:
            raise ValueError(f"not a lineup page: {kind!r} {first!r}")
        return f"{cls.LINEUP_PREFIX}{_event_id(event_id)}", f"{kind}#{first:040d}"

    # An organizer's count of the events it created (``ORGANIZER_ATTRIBUTES``), kept only
    # while a cap applies (``MAX_EVENTS_ENV``); keyed by a hash of its identity, which may
    # be as long as an ARN and is no id.
    ORGANIZER_PREFIX = "ORGANIZER#"
    ORGANIZER_SK = "ORGANIZER"

    @classmethod
    def organizer(cls, identity: str) -> tuple[str, str]:
        digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{cls.ORGANIZER_PREFIX}{digest}", cls.ORGANIZER_SK

    @classmethod
    def parked(cls, event_id: str, sequence_number: str) -> tuple[str, str]:
        """A parked record's key; its sort key orders parked records by arrival."""
        if not sequence_number.isdigit() or len(sequence_number) > cls.SEQUENCE_DIGITS:
            raise ValueError(f"not a stream sequence number: {sequence_number[:60]!r}")
        padded = sequence_number.rjust(cls.SEQUENCE_DIGITS, "0")
        return f"{cls.PARK_PREFIX}{_event_id(event_id)}", f"{cls.PARKED_PREFIX}{padded}"


class Attr:
    """Attribute names, shared by every reader and writer of the tables."""

    EVENT_ID = "event_id"
    SIGNUP_ID = "signup_id"
    # intake
    SEATS = "seats"
    SUBMITTED_AT = "submitted_at"
    ATTRIBUTES = "attributes"
    EXPIRES_AT = "expires_at"
    #: Who submitted the signup (the API caller's IAM ARN or token subject, ``cli:<user>``):
    #: only they, the event's organizers and admins may read it, confirm or cancel it. On
    #: intake, and copied to the decision.
    OWNER = "owner"
    #: The sweeper's marker: present only on records not yet known to be decided; the key
    #: of the sparse ``UNDECIDED_INDEX`` (a shard, ``undecided_shard``).
    UNDECIDED = "undecided"
    #: Re-emissions: a counter that every re-emission (the sweeper's, ``turnstile
    #: redrive``'s) bumps, a MODIFY the stream delivers again, and when the sweeper last did
    #: (epoch seconds). The stored names are the data contract's, kept for the records and
    #: the grants that carry them.
    RE_EMITS = "redrive"
    RE_EMITTED_AT = "redriven_at"
    # event item
    CAPACITY = "capacity"
    #: The lowest capacity the event has had (set when capacity changes), for the audit.
    MIN_CAPACITY = "min_capacity"
    TAKEN = "taken"
    ACCEPTED = "accepted"
    STATE = "state"
    VERSION = "version"
    CREATED_AT = "created_at"
    #: Who created the event: the API caller's IAM ARN or token subject, or ``cli:<user>``.
    CREATED_BY = "created_by"
    JOURNAL = "journal"
    #: The seats taken as of the last commit, written by the processor with every commit and
    #: read by a capacity change's condition; nothing decides on it (see EVENT_CONFIG_ATTRIBUTES).
    CAPACITY_FLOOR = "capacity_floor"
    #: The greatest stream sequence number of any intake record the event's commits have
    #: decided from (a string: sequence numbers have up to 40 digits, compared as numbers),
    #: set by every commit since the event's first (absent: no commit yet, or an event
    #: committed before it was kept, whose records are all read). An intake INSERT above it
    #: was never committed, so its signup needs no "already decided?" read (docs/design.md
    #: section 4).
    HIGH_WATER = "high_water"
    #: A sharded event's shards (absent: one, the event as it always was), on its item
    #: (the pool) and on each shard's; and the seats the pool has dealt to its shards (the
    #: processor's; a shard's ``capacity`` is the seats dealt to it, docs/hot-events.md).
    SHARDS = "shards"
    DEALT = "dealt"
    #: On a sharded event's pool, the processor's: how many shard commits gave seats back
    #: (each raises it, in the commit's transaction), and ``"<frees>/<dealt>"`` when a
    #: snapshot last found no seat left anywhere (``engine.escrow.Pool.full``).
    FREES = "frees"
    FULL_AT = "full_at"
    #: On a sharded event's pool, the processor's, when the event has a waitlist: how many
    #: signups wait in all its shards (every shard commit that changes its waitlist's length
    #: adds the change, in the commit's transaction, never past the event's ``waitlist``),
    #: and the shards with someone waiting (a number set), which a shard that gives seats
    #: back wakes (docs/hot-events.md, "Waitlists across shards").
    WAITING = "waiting"
    WAITERS = "waiters"
    #: How many times a shard joined ``WAITERS``: a shard commit that gives seats back wakes
    #: the shards it read there, on condition that this has not moved since.
    WAITERS_JOINED = "waiters_joined"
    # decision item
    STATUS = "status"
    REASON = "reason"
    POSITION = "position"
    DECIDED_AT = "decided_at"
    SEQUENCE_NUMBER = "sequence_number"
    #: Why a decision is what it is, in words (a rejection's problems; copied fields dropped).
    DETAIL = "detail"

    # -- the lifecycle (docs/lifecycle.md) -----------------------------------------------
    # event item, the organizer's (in EVENT_CONFIG_ATTRIBUTES): the event's options
    #: How many signups may wait for seats at once (absent: 0, no waitlist).
    WAITLIST = "waitlist"
    #: Seconds a granted signup holds its seats before it must be confirmed (absent: 0).
    HOLD_SECONDS = "hold_seconds"
    #: The most seats one signup may ask for (absent: only the capacity bounds it).
    MAX_SEATS = "max_seats"
    # event item, the processor's (written by every commit, like ``taken``)
    #: The current holds and the waitlist, compressed (``turnstile.engine.lineup``).
    LINEUP = "lineup"
    #: A long lineup's pages (their first keys and the versions that wrote them), when it
    #: lives in page items of its own (``ControlKey.lineup_page``) instead of ``LINEUP``.
    LINEUP_PAGES = "lineup_pages"
    #: How many signups are in each status now (a map, status -> count), from the commits
    #: made since the lifecycle was wired in.
    STATUS_COUNTS = "status_counts"
    #: The earliest ``hold_expires_at`` of the event's holds (epoch milliseconds) and the
    #: signup that holds it; with ``HOLD_DUE_SHARD`` the key of ``DUE_HOLDS_INDEX``. Absent
    #: when the event holds nothing, so the index holds only events with a hold to lapse.
    HOLD_DUE_AT = "hold_due_at"
    HOLD_DUE_SIGNUP = "hold_due_signup"
    HOLD_DUE_SHARD = "hold_due_shard"
    # intake item, the producer's: a request to confirm or cancel the signup
    #: ``confirm`` or ``cancel`` (``RequestKind``): what the latest request asks.
    REQUEST = "request"
    #: On intake: how many requests were made (every request adds one). On the decision
    #: item: how many of them the processor has answered (applied or refused).
    REQUEST_COUNT = "request_count"
    #: On intake: every request made, oldest first (a list of ``RequestKind``): the log
    #: that lets a record recovered from intake (its stream records lost) answer each
    #: request in order, not only the latest.
    REQUESTS = "requests"
    # decision item, the processor's
    #: When a HELD signup's hold lapses (ISO-8601 UTC, the format of ``decided_at``).
    HOLD_EXPIRES_AT = "hold_expires_at"
    #: A WAITLISTED signup's place in line when it joined (1 = first).
    WAITLIST_POSITION = "waitlist_position"
    #: When the signup's last transition was made: not stored (every byte of a decision
    #: item is a write unit's share), the API reads it off the history's last entry.
    UPDATED_AT = "updated_at"
    #: Every transition, oldest first, never rewritten: a list of maps (``HistoryKey``).
    HISTORY = "history"

    #: The last request refused (a map: ``request``, ``reason``, ``status``, ``at``,
    #: ``sequence_number``): the answer a 409 gives.
    LAST_REFUSAL = "last_refusal"


#: The event item's attributes that creating, re-sizing and closing an event may name
#: (keys included): the API's IAM policy allows its UpdateItem on ``EVENT#`` items to touch
#: these and nothing else, so it can never write the processor's ``taken``, ``accepted``,
#: ``version`` or ``journal`` (docs/design.md, the trust boundary). ``capacity_floor`` is
#: here because a capacity change is conditioned on it; a wrong floor can at most let
#: capacity go below ``taken``, which stops acceptances (every commit that takes seats
#: requires ``capacity >= taken``) and never oversells.
EVENT_CONFIG_ATTRIBUTES = (
    ControlKey.PK,
    ControlKey.SK,
    Attr.EVENT_ID,
    Attr.CAPACITY,
    Attr.MIN_CAPACITY,
    Attr.STATE,
    Attr.CREATED_AT,
    Attr.CREATED_BY,
    Attr.CAPACITY_FLOOR,
    Attr.WAITLIST,
    Attr.HOLD_SECONDS,
    Attr.MAX_SEATS,
    Attr.SHARDS,
)

#: What a listing of events reads of each control-table item (``GET /events``, ``turnstile
#: event list``): an event's public fields and the keys, never its journal. A Scan reads
#: every item of the table, and the API's IAM policy lets its Scan name these and nothing
#: else, so it cannot read a parked event's records or the sweeper's items either.
EVENT_LIST_ATTRIBUTES = (
    ControlKey.PK,
    ControlKey.SK,
    Attr.EVENT_ID,
    Attr.CAPACITY,
    Attr.MIN_CAPACITY,
    Attr.TAKEN,
    Attr.ACCEPTED,
    Attr.STATE,
    Attr.CREATED_AT,
    Attr.CREATED_BY,
    Attr.WAITLIST,
    Attr.HOLD_SECONDS,
    Attr.MAX_SEATS,
    Attr.STATUS_COUNTS,
    Attr.SHARDS,
)

#: Every attribute a decision item may have (keys included): the stream processor's IAM
#: policy lets its writes on the main table (a first decision's PutItem, a later move's
#: UpdateItem) name these and nothing else. ``attributes``, ``submitted_at`` and ``owner``
#: are copied from intake; the rest are the decision's and its lifecycle's.
DECISION_ATTRIBUTES = (
    Attr.EVENT_ID,
    Attr.SIGNUP_ID,
    Attr.STATUS,
    Attr.REASON,
    Attr.DETAIL,
    Attr.SEATS,
    Attr.POSITION,
    Attr.DECIDED_AT,
    Attr.SEQUENCE_NUMBER,
    Attr.SUBMITTED_AT,
    Attr.ATTRIBUTES,
    Attr.OWNER,
    Attr.EXPIRES_AT,
    Attr.HOLD_EXPIRES_AT,
    Attr.WAITLIST_POSITION,
    Attr.HISTORY,
    Attr.REQUEST_COUNT,
    Attr.LAST_REFUSAL,
)

#: What a submission through the API or the CLI writes on intake (keys included): its
#: IAM policy lets the API's PutItem name these and nothing else.
INTAKE_SUBMIT_ATTRIBUTES = (
    Attr.EVENT_ID,
    Attr.SIGNUP_ID,
    Attr.SEATS,
    Attr.SUBMITTED_AT,
    Attr.ATTRIBUTES,
    Attr.OWNER,
    Attr.EXPIRES_AT,
)


class Function:
    """turnstile's deployed functions, by the name their roles go by in the local stack
    (``turnstile_tools.local.roles``) and in docs/operations.md."""

    PROCESSOR = "processor"
    API = "api"
    #: The waiting status reads (``GET .../decision``): the API's code, a function of its own.
    WAITER = "waiter"
    SWEEPER = "sweeper"
    DUE_HOLDS = "due-holds"


#: Each function's Lambda handler: the CDK stack deploys it, the local stack runs it.
FUNCTION_HANDLERS = {
    Function.PROCESSOR: "turnstile.handlers.stream.handler",
    Function.API: "turnstile.handlers.api.handler",
    Function.WAITER: "turnstile.handlers.api.waiter",
    Function.SWEEPER: "turnstile.handlers.sweeper.handler",
    Function.DUE_HOLDS: "turnstile.handlers.due_holds.handler",
}

#: Days an intake record is kept (its ``expires_at``), unless INTAKE_RETENTION_ENV says.
INTAKE_RETENTION_DAYS = 30
#: The functions' (and the CLI's) retention settings, in days: intake records always expire
#: (default INTAKE_RETENTION_DAYS); decisions only when the second variable is set.
INTAKE_RETENTION_ENV = "TURNSTILE_INTAKE_RETENTION_DAYS"
DECISION_RETENTION_ENV = "TURNSTILE_DECISION_RETENTION_DAYS"


class WakeAttr:
    """Attributes of an event's wake-up item (``ControlKey.wake``)."""

    #: How many wake-ups it has had (each an ``ADD``: a MODIFY the control stream delivers).
    WAKES = "wakes"
    #: When the last one was written, and why (``WakeReason``).
    WOKEN_AT = "woken_at"
    REASON = "reason"


class WakeReason:
    """Why an event was woken."""

    HOLD_DUE = "hold_due"
    RETRY = "retry"
    CAPACITY = "capacity"
    CLOSE = "close"
    SWEEP = "sweep"
    #: Seats given back in another shard of a sharded event, for this shard's waitlist.
    SEATS = "seats"


class ParkAttr:
    """Attributes of a parked event's items in the control table (besides ``Attr``'s)."""

    #: On the parking marker; present while the event is parked, removed when it is released.
    PARKED_SINCE = "parked_since"
    FIRST_SEQUENCE_NUMBER = "first_sequence_number"
    ERROR = "error"
    #: On a parked record: why the request is invalid (it is rejected when released).
    PROBLEM = "problem"
    #: On a parked record: when TTL deletes its intake record (its decision outlives it).
    INTAKE_EXPIRES_AT = "intake_expires_at"
    #: On the parking marker, parked or not, never removed: an INSERT of the event may be of
    #: a signup decided already whatever its sequence number (an intake record of the event
    #: was deleted and may be put again; a signup was rejected before the event item
    #: existed), so the processor reads the decision of every one (docs/design.md section 4).
    MAY_REPEAT = "may_repeat"


class RequestKind:
    """What a producer may ask of a signup already decided, by updating its intake item
    (``Attr.REQUEST``; docs/lifecycle.md, "Requests")."""

    CONFIRM = "confirm"
    CANCEL = "cancel"
    ALL = (CONFIRM, CANCEL)


class HistoryKey:
    """The keys of one entry of a decision item's ``history``."""

    FROM = "from"
    TO = "to"
    AT = "at"
    SEQUENCE_NUMBER = "sequence_number"
    #: ``signup``, ``confirm``, ``cancel``, ``close``, ``expiry`` or ``promotion``.
    CAUSE = "cause"
    #: Present on a rejection.
    REASON = "reason"


#: The most entries (holds plus waiting signups) an event's lineup may need: the API and
#: the CLI refuse options that could need more (``capacity + waitlist`` with holds,
#: ``waitlist`` without). A long lineup lives in pages of its own (``storage.lineups``), a
#: commit writes only the pages it touches, and a step's own moves come in bounded
#: numbers (``lifecycle.step``'s ``max_lapses``): 50,000 seats held and a waitlist of
#: 10,000 fit, and more would only cost more at a processor's cold start.
MAX_LINEUP_ENTRIES = 60_000
#: The longest hold an event may give, in seconds (a day).
MAX_HOLD_SECONDS = 86_400


class LeaseAttr:
    """Attributes of the sweeper's lease item (``ControlKey.SWEEPER_LEASE``)."""

    #: Who holds it, until when (epoch seconds), and the fencing token, which every
    #: acquisition (a renewal included) moves up by one.
    OWNER = "owner"
    UNTIL = "lease_until"
    FENCE = "fence"
    #: When the last full scan of intake that re-emitted all it found began (epoch seconds).
    FULL_SCAN_AT = "full_scan_at"


class RunAttr:
    """Attributes of the sweep runs' history items (``ControlKey.sweep_run``)."""

    RUN_ID = "run_id"
    SEQ = "seq"
    #: ``started``, ``succeeded`` or ``failed`` (``RunStatus``).
    STATUS = "exec_status"
    #: How many starts the item counted: a second concurrent start sees 2.
    COUNTER = "atomic_counter"
    #: The run's result, as JSON (on the outcome items).
    DETAIL = "detail"


class RunStatus:
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Status:
    """A signup's status (docs/lifecycle.md): PENDING until its first decision, then
    along the lifecycle's transitions (``turnstile.engine.lifecycle.ALLOWED_TRANSITIONS``)."""

    PENDING = "PENDING"
    ACCEPTED = "ACCEPTED"
    REJECTED = "REJECTED"
    #: Seats reserved until ``hold_expires_at``; confirmed, cancelled or lapsed from there.
    HELD = "HELD"
    #: Waiting for seats, at ``waitlist_position``; promoted when seats come back.
    WAITLISTED = "WAITLISTED"
    CANCELLED = "CANCELLED"
    #: A hold that was not confirmed in time.
    EXPIRED = "EXPIRED"

    ALL = (PENDING, HELD, ACCEPTED, WAITLISTED, REJECTED, CANCELLED, EXPIRED)
    #: Statuses a signup never leaves.
    FINAL = frozenset({REJECTED, CANCELLED, EXPIRED})

    @classmethod
    def reached(cls, status: Any, wanted: Any = None) -> bool:
        """Whether a client waiting for ``wanted`` statuses is done: the status is one of
        them, or final; without ``wanted``, any status but PENDING (a decision)."""
        if wanted is None:
            return status != cls.PENDING
        return status in wanted or status in cls.FINAL


class Reason:
    CAPACITY_FULL = "capacity_full"
    UNKNOWN_EVENT = "unknown_event"
    EVENT_CLOSED = "event_closed"
    INVALID_REQUEST = "invalid_request"
    #: A signup asking for more seats than the event's ``max_seats`` (lifecycle only).
    SEATS_ABOVE_MAX = "seats_above_max"
    #: Refusals of a confirm or a cancel (lifecycle only): they change nothing and come with
    #: the signup's current status. The hold lapsed before the request arrived:
    HOLD_EXPIRED = "hold_expired"
    #: The request is not a transition the signup's current status allows:
    TRANSITION_NOT_ALLOWED = "transition_not_allowed"

    #: The reasons a decision written today may carry (the audit checks against these).
    ALL = (CAPACITY_FULL, UNKNOWN_EVENT, EVENT_CLOSED, INVALID_REQUEST)
    #: The reasons of a REJECTED status in the lifecycle engine: today's and ``max_seats``'.
    REJECTIONS = (*ALL, SEATS_ABOVE_MAX)
    #: The reasons of a refused request (a confirm or cancel that changed nothing).
    REFUSALS = (HOLD_EXPIRED, TRANSITION_NOT_ALLOWED, INVALID_REQUEST)


class EventState:
    OPEN = "OPEN"
    CLOSED = "CLOSED"


@dataclass(frozen=True)
class IndexSpec:
    """A global secondary index: its key (a string partition key, and optionally a sort key
    of its own type) and what it projects."""

    name: str
    partition_key: str
    #: ``KEYS_ONLY``, or ``INCLUDE`` with ``non_key_attributes``.
    projection_type: str = "KEYS_ONLY"
    non_key_attributes: tuple[str, ...] = ()
    #: The index's sort key, if any, and its DynamoDB type (``S``, ``N`` or ``B``).
    sort_key: str | None = None
    sort_key_type: str = "S"

    def attribute_definitions(self) -> list[dict[str, str]]:
        """The ``AttributeDefinitions`` entries of the index's key attributes."""
        definitions = [{"AttributeName": self.partition_key, "AttributeType": "S"}]
        if self.sort_key:
            definitions.append(
                {"AttributeName": self.sort_key, "AttributeType": self.sort_key_type}
            )
        return definitions

    def create_kwargs(self) -> dict[str, Any]:
        """The index as boto3 ``create_table``'s ``GlobalSecondaryIndexes`` entry."""
        projection: dict[str, Any] = {"ProjectionType": self.projection_type}
        if self.non_key_attributes:
            projection["NonKeyAttributes"] = list(self.non_key_attributes)
        key_schema = [{"AttributeName": self.partition_key, "KeyType": "HASH"}]
        if self.sort_key:
            key_schema.append({"AttributeName": self.sort_key, "KeyType": "RANGE"})
        return {"IndexName": self.name, "KeySchema": key_schema, "Projection": projection}


#: Marker values the API, the CLI and the local producers write: 16 shards, so the index's
#: writes spread over 16 partition keys (a single value would be one hot partition).
UNDECIDED_SHARDS = 16


def undecided_shard(event_id: str, signup_id: str) -> str:
    """The marker value of a signup: a hex digit fixed by its key (a rewrite keeps it)."""
    return format(zlib.crc32(f"{event_id}\x00{signup_id}".encode()) % UNDECIDED_SHARDS, "x")


#: The sparse index of undecided intake records: only items carrying ``Attr.UNDECIDED`` are
#: in it, with just what the sweeper reads to judge a record's age (docs/design.md, §7).
UNDECIDED_INDEX = IndexSpec(
    name="undecided",
    partition_key=Attr.UNDECIDED,
    projection_type="INCLUDE",
    non_key_attributes=(Attr.SUBMITTED_AT, Attr.RE_EMITTED_AT, Attr.RE_EMITS),
)


#: The one value of ``Attr.HOLD_DUE_SHARD`` the processor writes: every event with a hold
#: to lapse is in one partition of ``DUE_HOLDS_INDEX``, read by one Query sorted by time.
#: (An event item changes once per commit, so the index's write rate is the commits'.)
DUE_HOLDS_SHARD = "0"

#: The sparse index of events holding seats: an event item is in it only while it carries
#: ``hold_due_at`` (the processor removes it with the event's last hold), sorted by when its
#: earliest hold lapses, with the signup that holds it (docs/lifecycle.md §10, "Releasing
#: due holds"; ``turnstile.jobs.due_holds``).
DUE_HOLDS_INDEX = IndexSpec(
    name="due-holds",
    partition_key=Attr.HOLD_DUE_SHARD,
    sort_key=Attr.HOLD_DUE_AT,
    sort_key_type="N",
    projection_type="INCLUDE",
    non_key_attributes=(Attr.EVENT_ID, Attr.HOLD_DUE_SIGNUP),
)


@dataclass(frozen=True)
class TableSpec:
    """A table's keys, stream and TTL, as both CloudFormation and CreateTable need them."""

    logical_id: str
    default_name: str
    env_var: str
    partition_key: str = Attr.EVENT_ID
    sort_key: str = Attr.SIGNUP_ID
    stream_view_type: str | None = None
    ttl_attribute: str | None = None
    indexes: tuple[IndexSpec, ...] = ()

    @property
    def name(self) -> str:
        """The table name in force: the environment variable, else the default."""
        return os.environ.get(self.env_var) or self.default_name

    def create_table_kwargs(self, name: str | None = None) -> dict[str, Any]:
        """Arguments for boto3 ``create_table`` (the local stack's way of building it)."""
        kwargs: dict[str, Any] = {
            "TableName": name or self.name,
            "KeySchema": [
                {"AttributeName": self.partition_key, "KeyType": "HASH"},
                {"AttributeName": self.sort_key, "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": [
                {"AttributeName": self.partition_key, "AttributeType": "S"},
                {"AttributeName": self.sort_key, "AttributeType": "S"},
            ],
            "BillingMode": "PAY_PER_REQUEST",
        }
        for index in self.indexes:
            for definition in index.attribute_definitions():
                if definition not in kwargs["AttributeDefinitions"]:
                    kwargs["AttributeDefinitions"].append(definition)
        if self.indexes:
            kwargs["GlobalSecondaryIndexes"] = [index.create_kwargs() for index in self.indexes]
        if self.stream_view_type:
            kwargs["StreamSpecification"] = {
                "StreamEnabled": True,
                "StreamViewType": self.stream_view_type,
            }
        return kwargs


INTAKE_TABLE = TableSpec(
    logical_id="IntakeTable",
    default_name="turnstile-intake",
    env_var="TURNSTILE_INTAKE_TABLE",
    stream_view_type="NEW_IMAGE",
    ttl_attribute=Attr.EXPIRES_AT,
    indexes=(UNDECIDED_INDEX,),
)

#: The local stack's on-failure destination (on AWS the CDK stack names it).
FAILURE_QUEUE_NAME = "turnstile-stream-failures"

#: Decision items only, one per intake record, under the intake record's own key.
MAIN_TABLE = TableSpec(
    logical_id="MainTable",
    default_name="turnstile-main",
    env_var="TURNSTILE_MAIN_TABLE",
)

#: Event items and the sweeper's lease and run history (keys: ``ControlKey``); the sparse
#: index of events holding seats (``DUE_HOLDS_INDEX``).
CONTROL_TABLE = TableSpec(
    logical_id="ControlTable",
    default_name="turnstile-control",
    env_var="TURNSTILE_CONTROL_TABLE",
    partition_key=ControlKey.PK,
    sort_key=ControlKey.SK,
    # Keys only: the processor needs a wake-up's key (its event), never an image, and an
    # event item is far too big to stream with every commit.
    stream_view_type="KEYS_ONLY",
    indexes=(DUE_HOLDS_INDEX,),
)


def intake_table_name() -> str:
    return INTAKE_TABLE.name


def main_table_name() -> str:
    return MAIN_TABLE.name


def control_table_name() -> str:
    return CONTROL_TABLE.name


#: Every table turnstile owns, in the order the stacks create them.
ALL_TABLES = (INTAKE_TABLE, MAIN_TABLE, CONTROL_TABLE)


@dataclass(frozen=True)
class EventSourceSettings:
    """How the intake stream is fed to the stream processor.

    AWS's defaults (retry forever, records never too old) let one bad batch block a shard
    for 24 hours; these are bounded. The CDK event source mapping and the local
    ``StreamPoller`` are both built from this object.
    """

    batch_size: int = 100
    max_batching_window_s: int = 1
    starting_position: str = "TRIM_HORIZON"
    #: One concurrent batch per shard keeps stream order per partition key.
    parallelization_factor: int = 1
    retry_attempts: int = 5
    max_record_age_s: int = 6 * 3600
    bisect_on_error: bool = True
    report_batch_item_failures: bool = True
    #: New intake records, re-emitted ones (every re-emission sets ``undecided``), and
    #: deletions (REMOVE: TTL's, whose userIdentity is the DynamoDB service, and anyone
    #: else's), which decide nothing and only note that the event's records may be put
    #: again (``ParkAttr.MAY_REPEAT``). The sweeper's removal of the marker from a decided
    #: record (a MODIFY without it) never reaches the function. Two filters of AWS's five.
    filter_patterns: tuple[dict[str, Any], ...] = field(
        default_factory=lambda: (
            {"eventName": ["INSERT", "REMOVE"]},
            {
                "eventName": ["MODIFY"],
                "dynamodb": {"NewImage": {Attr.UNDECIDED: {"S": [{"exists": True}]}}},
            },
        )
    )
    #: AWS polls each shard four times a second.
    poll_interval_s: float = 0.25

    def __post_init__(self) -> None:
        """Refuse what CreateEventSourceMapping refuses, so neither runtime runs it."""
        if not 1 <= self.parallelization_factor <= 10:
            raise ValueError("parallelization_factor is 1 to 10 (AWS's range)")
        if not 0 <= self.max_batching_window_s <= 300:
            raise ValueError("max_batching_window_s is 0 to 300 seconds (AWS's range)")
        if self.retry_attempts < -1:
            raise ValueError("retry_attempts is -1 (until the record expires) or more")
        # A pattern may come as the API's JSON text; it is kept as the object it parses to.
        patterns = tuple(parse_pattern(p) for p in self.filter_patterns)
        object.__setattr__(self, "filter_patterns", patterns)


STREAM_SOURCE = EventSourceSettings()

#: The control table's stream into the same processor: only wake-ups pass (a commit, a
#: parked record, the sweeper's lease are filtered out before any invocation).
WAKE_SOURCE = EventSourceSettings(
    filter_patterns=(
        {
            "eventName": ["INSERT", "MODIFY"],
            "dynamodb": {"Keys": {ControlKey.PK: {"S": [{"prefix": ControlKey.WAKE_PREFIX}]}}},
        },
    ),
)


def recorded_identity(identity: str) -> str:
    """How a caller's identity is recorded (``owner``, ``created_by``) and compared: as it
    is up to ``MAX_IDENTITY_CHARS``, else ``sha256:`` and its hash."""
    if len(identity) <= MAX_IDENTITY_CHARS:
        return identity
    return "sha256:" + hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()

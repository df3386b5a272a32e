"""The operations on events and signups, shared by the HTTP API and the ``turnstile`` CLI.

Each function takes plain values (already parsed from JSON or from the command line),
validates them with the one set of rules (``domain``, which the stream processor applies
too), calls ``SignupStore`` and returns the answer as its view (``views``): ``Event``,
``EventClosed``, ``SignupAccepted``, ``Signup``, ``RequestRecorded``. Both adapters print or
send that value as it is, so the API and the CLI cannot disagree. Lists come a page at a
time (``EventList``, ``SignupList``: ``next`` is the token of the next page); ``listing``
reads them.

Refusals are typed (``errors``): ``InvalidRequestError`` (its ``problems`` named),
``EventNotFoundError`` / ``SignupNotFoundError``, ``EventExistsError`` /
``SignupConflictError`` (conflicts), ``CapacityBelowTakenError``. Logging and metrics are
the adapters' (the CLI's stdout is its JSON).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from turnstile.base.clock import utc_now
from turnstile.base.contract import (
    MAX_HOLD_SECONDS,
    MAX_LINEUP_ENTRIES,
    MAX_SHARDS,
    Attr,
    RequestKind,
    Status,
    shard_key,
    signup_key,
    split_shard_key,
)
from turnstile.base.errors import (
    EventExistsError,
    EventNotFoundError,
    ForbiddenError,
    InvalidRequestError,
    RequestRefusedError,
    SignupConflictError,
    SignupNotFoundError,
)
from turnstile.base.jsonable import plain
from turnstile.base.personal_data import intake_expires_at
from turnstile.engine.rules import (
    MAX_CAPACITY,
    MAX_SEATS,
    MAX_SUBMITTED_AT_CHARS,
    id_problem,
    signup_problems,
)
from turnstile.service import views
from turnstile.storage import listing
from turnstile.storage.events import EventRecord, lineup_problem
from turnstile.storage.intake import parse_intake
from turnstile.storage.items import history_of
from turnstile.storage.requests import ANYONE, request_transition
from turnstile.storage.store import SignupStore

__all__ = [
    "ABSENT",
    "ATTRIBUTES_RULE",
    "DEFAULT_PAGE_SIZE",
    "LISTED_STATUSES",
    "MAX_PAGE_SIZE",
    "STATUS_RULE",
    "Created",
    "EventOptions",
    "Submitted",
    "await_decision",
    "close_event",
    "create_event",
    "forget_known_shards",
    "integer_rule",
    "list_events",
    "list_signups",
    "request_signup",
    "show_event",
    "signup_status",
    "submit_signup",
    "update_capacity",
]

#: Page sizes of the lists (``limit``).
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
#: What ``list_signups`` may filter on: every status (docs/lifecycle.md, §2).
LISTED_STATUSES = Status.ALL


class _Absent:
    """The type of ``ABSENT``: a field the caller left out (not the same as JSON null)."""

    def __repr__(self) -> str:
        return "ABSENT"


#: A field left out of the request (``seats`` then means 1; ``attributes`` none).
ABSENT: Final = _Absent()


# -- validation -----------------------------------------------------------------------


def _id(value: Any, name: str) -> str:
    problem = id_problem(value, name)
    if problem:
        raise InvalidRequestError([problem])
    return str(value)


def integer_rule(name: str, minimum: int, maximum: int) -> str:
    """What an integer field must be, as a refusal says it."""
    return f"{name} must be an integer from {minimum} to {maximum}"


#: What ``attributes`` must be, as the refusal of a null says it.
ATTRIBUTES_RULE = "attributes must be a map (a JSON object), or left out"
#: What ``list_signups``' status must be, as its refusal says it.
STATUS_RULE = f"status must be one of {', '.join(LISTED_STATUSES)}"


def _integer_problem(value: Any, name: str, minimum: int, maximum: int) -> str | None:
    # bool is an int subclass, and a Decimal means the JSON had a fraction or exponent
    # (even 2.0): both are refused, so only integers pass.
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        return integer_rule(name, minimum, maximum)
    return None


def _capacity(value: Any) -> int:
    problem = _integer_problem(value, "capacity", 0, MAX_CAPACITY)
    if problem:
        raise InvalidRequestError([problem])
    return int(value)


@dataclass(frozen=True)
class EventOptions:
    """An event's options (docs/lifecycle.md, §1), validated: ``waitlist`` and
    ``hold_seconds`` 0 (none) by default, ``max_seats`` None (only the capacity bounds a
    signup), ``shards`` 1 (an event as it always was; docs/hot-events.md)."""

    waitlist: int = 0
    hold_seconds: int = 0
    max_seats: int | None = None
    shards: int = 1


def event_options(
    capacity: int,
    waitlist: Any = ABSENT,
    hold_seconds: Any = ABSENT,
    max_seats: Any = ABSENT,
    shards: Any = ABSENT,
) -> EventOptions:
    """The options of a new event of ``capacity`` seats; ``InvalidRequestError`` naming
    every problem. ``ABSENT`` is the default; None (JSON null) is refused, as for every
    optional field: leave it out. The lineup the processor keeps on the event item is
    bounded (``MAX_LINEUP_ENTRIES``), so are the options that feed it."""
    problems: list[str] = []
    values: dict[str, int | None] = {}
    for name, value, low, high in (
        ("waitlist", waitlist, 0, MAX_LINEUP_ENTRIES),
        ("hold_seconds", hold_seconds, 0, MAX_HOLD_SECONDS),
        ("max_seats", max_seats, 1, MAX_SEATS),
        ("shards", shards, 1, MAX_SHARDS),
    ):
        if value is ABSENT:
            values[name] = None
            continue
        problem = _integer_problem(value, name, low, high)
        if problem:
            problems.append(problem)
        values[name] = None if problem else int(value)
    if problems:
        raise InvalidRequestError(problems)
    options = EventOptions(
        waitlist=values["waitlist"] or 0,
        hold_seconds=values["hold_seconds"] or 0,
        max_seats=values["max_seats"],
        shards=values["shards"] or 1,
    )
    problem = lineup_problem(capacity, options.waitlist, options.hold_seconds)
    if problem:
        raise InvalidRequestError([problem])
    return options


def _options_of(record: EventRecord) -> EventOptions:
    return EventOptions(
        record.event.waitlist, record.event.hold_seconds, record.event.max_seats, record.shards
    )


# -- views ----------------------------------------------------------------------------


def _whole(value: Any) -> int | None:
    """An item's number as an int, or None where a direct writer left something else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return int(value)
    return None


def event_view(record: EventRecord, shards: Sequence[EventRecord | None] = ()) -> views.Event:
    """The ``Event`` view. A sharded event's (``record`` its own item, the pool of its
    seats) takes its counters from its shards' items, ``shards`` (``_shard_records``): the
    seats each holds and the positions and statuses each gave, summed; a shard item that
    is missing counts none."""
    s = record.event
    taken, accepted, counts = s.taken, s.accepted, dict(record.status_counts or {})
    if record.shards > 1:
        taken = sum(r.event.taken for r in shards if r is not None)
        accepted = sum(r.event.accepted for r in shards if r is not None)
        counts = {}
        for r in shards:
            for status, n in (r.status_counts or {} if r is not None else {}).items():
                counts[status] = counts.get(status, 0) + n
    # No version: the processor's optimistic lock is not part of the public answer.
    return views.Event(
        event_id=s.event_id,
        capacity=s.capacity,
        taken=taken,
        remaining=s.capacity - taken,
        # The event item's ``accepted`` counter: every signup ever given a seat, held or
        # accepted, which numbers their positions. Not the ACCEPTED signups of now
        # (``status_counts``), nor seats (``taken``): the view names it for what it is.
        positions_given=accepted,
        state=s.state,
        created_at=record.created_at,
        created_by=record.created_by,
        waitlist=s.waitlist,
        hold_seconds=s.hold_seconds,
        max_seats=s.max_seats,
        status_counts=counts,
        # Only on a sharded event's answer: every other event's is as it always was.
        **({"shards": record.shards} if record.shards > 1 else {}),
    )


def signup_view(
    event_id: str,
    signup_id: str,
    decision: Mapping[str, Any] | None,
    intake: Mapping[str, Any] | None,
) -> views.Signup:
    """The ``Signup`` view, from its decision item or else its intake record."""
    if decision is not None:
        seats = decision.get(Attr.SEATS)
        attributes = decision.get(Attr.ATTRIBUTES)
        submitted_at = decision.get(Attr.SUBMITTED_AT)
    else:
        # A pending signup is shown as the processor will read it: whatever a producer
        # wrote straight into intake (400 KB of submitted_at, a map of any size) is
        # bounded by the same rules, never copied as it is.
        request = parse_intake(intake or {}, "", {"event_id": event_id, "signup_id": signup_id})
        seats, attributes = request.seats or None, request.attributes
        submitted_at = request.submitted_at
    if not isinstance(submitted_at, str) or len(submitted_at) > MAX_SUBMITTED_AT_CHARS:
        submitted_at = None
    decided = decision or {}
    # every transition, the first (the decision itself) read off the item; none pending
    history = [plain(h) for h in history_of(decided)] if decision is not None else []
    return views.Signup(
        event_id=event_id,
        signup_id=signup_id,
        status=decided.get(Attr.STATUS, Status.PENDING),
        seats=_whole(seats),
        reason=_text(decided.get(Attr.REASON)),
        detail=_text(decided.get("detail")),
        position=_whole(decided.get(Attr.POSITION)),
        submitted_at=submitted_at,
        decided_at=_text(decided.get(Attr.DECIDED_AT)),
        attributes=plain(attributes) if isinstance(attributes, Mapping) else {},
        # The lifecycle's fields (docs/lifecycle.md, §10): null until the processor
        # writes them.
        hold_expires_at=_text(decided.get(Attr.HOLD_EXPIRES_AT)),
        waitlist_position=_whole(decided.get(Attr.WAITLIST_POSITION)),
        # when it last moved: the history's last entry (not stored twice)
        updated_at=_text(history[-1].get("at")) if history else None,
        request_count=_whole(decided.get(Attr.REQUEST_COUNT)),
        history=history,
        last_refusal=_map(decided.get(Attr.LAST_REFUSAL)),
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _map(value: Any) -> dict[str, Any] | None:
    return plain(dict(value)) if isinstance(value, Mapping) else None


# -- sharded events -------------------------------------------------------------------
#
# A sharded event (docs/hot-events.md) keeps each signup under its shard's key
# (``contract.signup_key``): intake, main and the shard's own event item. Callers name the
# event by its own id only; the key is found here, from the event's ``shards``, which never
# change once it is created. So an event's shards, once read, are kept for a while
# (``SHARDS_KNOWN_FOR_S``): a signup's status, a confirm or a cancel then costs no read of
# the event item, which a hot event's every caller would otherwise read.

#: How long an event's shards, once read from its item (or created), are used unread.
#: Bounded, though they never change: an event deleted and created again by hand (never
#: by turnstile) is seen within this.
SHARDS_KNOWN_FOR_S = 300.0
_KNOWN_MAX = 4096
_known: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()
_known_lock = threading.Lock()


def forget_known_shards() -> None:
    """Forget every event's shards read so far (each is read again when next needed)."""
    with _known_lock:
        _known.clear()


def _remember(store: SignupStore, record: EventRecord) -> None:
    """Keep ``record``'s shards (read from its whole item: a listing's projection has none)."""
    key = (str(getattr(store, "control_table", "")), record.event.event_id)
    with _known_lock:
        _known[key] = (record.shards, time.monotonic() + SHARDS_KNOWN_FOR_S)
        _known.move_to_end(key)
        while len(_known) > _KNOWN_MAX:
            _known.popitem(last=False)


def _known_shards(store: SignupStore, event_id: str) -> int | None:
    key = (str(getattr(store, "control_table", "")), event_id)
    with _known_lock:
        found = _known.get(key)
        if found is not None and found[1] <= time.monotonic():
            del _known[key]
            found = None
    return found[0] if found is not None else None


def _read_event(store: SignupStore, event_id: str) -> EventRecord | None:
    """The event item (None: no such event); its shards kept."""
    record = store.get_event(event_id)
    if record is not None:
        _remember(store, record)
    return record


def _event_shards(store: SignupStore, event_id: str) -> int | None:
    """The event's shards: known, else read from its item; None when there is no event."""
    known = _known_shards(store, event_id)
    if known is not None:
        return known
    record = _read_event(store, event_id)
    return record.shards if record is not None else None


def _located(store: SignupStore, event_id: str, signup_id: str) -> str:
    """The event key ``signup_id`` of ``event_id`` is kept under: its shard's of a sharded
    event, else the event's own id (an event of one shard, or none: a producer may have
    written intake for an event that does not exist, and its rejection is kept there)."""
    return signup_key(event_id, signup_id, _event_shards(store, event_id) or 1)


def _shard_records(store: SignupStore, record: EventRecord) -> list[EventRecord | None]:
    """A sharded event's shards' items (one consistent point read each); none otherwise."""
    if record.shards <= 1:
        return []
    return [store.get_event(shard_key(record.event.event_id, k)) for k in range(record.shards)]


def _view(store: SignupStore, record: EventRecord) -> views.Event:
    """The ``Event`` view of an event item read whole, its shards' counters summed."""
    return event_view(record, _shard_records(store, record))


def _plain_conflict(exc: SignupConflictError, key: str, event_id: str) -> SignupConflictError:
    """``exc`` naming the event by its own id, not the shard ``key`` the store used."""
    return SignupConflictError(str(exc).replace(repr(key), repr(event_id)))


def _not_found(event_id: str, signup_id: str) -> SignupNotFoundError:
    return SignupNotFoundError(f"no signup {signup_id!r} for event {event_id!r}")


# -- events ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Created:
    """An event after ``create_event``: ``body`` is its ``Event`` view; ``created`` is
    False when it existed already with this capacity (a retry)."""

    body: views.Event
    created: bool


def create_event(
    store: SignupStore,
    event_id: Any,
    capacity: Any,
    created_by: str | None,
    now: str | None = None,
    *,
    waitlist: Any = ABSENT,
    hold_seconds: Any = ABSENT,
    max_seats: Any = ABSENT,
    quota: int | None = None,
    shards: Any = ABSENT,
) -> Created:
    """Create an OPEN event, idempotently: an event with this id, this capacity and these
    options is answered as it is now (``created`` False); with another capacity or other
    options, ``EventExistsError`` naming them. The capacity compared is the current one: a
    create retried after the capacity was changed is a conflict. ``created_by`` stays the
    first creator's. The options (``event_options``) default to none. ``quota``: the most
    events ``created_by`` may create (``EventQuotaError`` past it); None: no cap.
    ``shards`` (1 to ``MAX_SHARDS``, default 1): a sharded event's (docs/hot-events.md),
    whose signups the store keeps and the processor decides shard by shard."""
    event_id = _id(event_id, "event_id")
    capacity = _capacity(capacity)
    options = event_options(capacity, waitlist, hold_seconds, max_seats, shards)
    # An event of one shard is created as it always was (the store's own default).
    sharded = {"shards": options.shards} if options.shards > 1 else {}
    try:
        record = store.create_event(
            event_id,
            capacity,
            now=now or utc_now(),
            created_by=created_by,
            waitlist=options.waitlist,
            hold_seconds=options.hold_seconds,
            max_seats=options.max_seats,
            quota=quota,
            **sharded,
        )
        _remember(store, record)
        # Its shards' items were created with it, each with nothing taken yet.
        return Created(body=event_view(record, [None] * record.shards), created=True)
    except EventExistsError:
        existing = _read_event(store, event_id)
        if existing is None:  # deleted by hand in between: nothing to be idempotent with
            raise
        if existing.event.capacity != capacity:
            raise EventExistsError(
                f"event {event_id!r} already exists with capacity "
                f"{existing.event.capacity}, not {capacity}"
            ) from None
        if _options_of(existing) != options:
            theirs = _options_of(existing)
            raise EventExistsError(
                f"event {event_id!r} already exists with "
                f"{_described(existing.event.capacity, theirs)}, not "
                f"{_differing(theirs, options)}"
            ) from None
        return Created(body=_view(store, existing), created=False)


def _described(capacity: int, options: EventOptions) -> str:
    """``capacity 5, waitlist 0, hold_seconds 0`` (and ``max_seats M`` when it has one,
    ``shards K`` when it has more than one)."""
    named = f"capacity {capacity}, waitlist {options.waitlist}"
    named += f", hold_seconds {options.hold_seconds}"
    named += f", max_seats {options.max_seats}" if options.max_seats is not None else ""
    return named + (f", shards {options.shards}" if options.shards > 1 else "")


def _differing(theirs: EventOptions, asked: EventOptions) -> str:
    """The options asked for that differ, each named: ``hold_seconds 30, max_seats none``."""
    return ", ".join(
        f"{name} {'none' if getattr(asked, name) is None else getattr(asked, name)}"
        for name in ("waitlist", "hold_seconds", "max_seats", "shards")
        if getattr(asked, name) != getattr(theirs, name)
    )


def show_event(store: SignupStore, event_id: Any) -> views.Event:
    """The event (its ``Event`` view); a sharded event's counters are its shards' summed
    (one point read of each shard's item)."""
    event_id = _id(event_id, "event_id")
    record = _read_event(store, event_id)
    if record is None:
        raise EventNotFoundError(f"no such event {event_id!r}")
    return _view(store, record)


@dataclass(frozen=True)
class Caller:
    """Who asks: ``identity`` as the API authenticated it (an IAM ARN, a token's subject;
    None for an unsigned request to the local stack), and whether it is an admin."""

    identity: str | None
    admin: bool = False

    def organizes(self, record: EventRecord) -> bool:
        """Whether it may run the event: its creator (``created_by``), or an admin."""
        return self.admin or (record.created_by or None) == self.identity


#: The operator's own tools (the CLI, a library caller): every right, as the table access
#: they run with gives them anyway. The API never uses it: it passes its caller.
OPERATOR = Caller(identity=None, admin=True)


def _organized(store: SignupStore, event_id: str, caller: Caller) -> EventRecord:
    """The event, if ``caller`` runs it: ``EventNotFoundError``, else ``ForbiddenError``."""
    record = _read_event(store, event_id)
    if record is None:
        raise EventNotFoundError(f"no such event {event_id!r}")
    if not caller.organizes(record):
        raise ForbiddenError(f"event {event_id!r} is another organizer's")
    return record


def update_capacity(
    store: SignupStore, event_id: Any, capacity: Any, caller: Caller = OPERATOR
) -> views.Event:
    """Up at any time, down to the seats taken (``CapacityBelowTakenError`` below); for
    an event with holds, never so high that its lineup could pass ``MAX_LINEUP_ENTRIES``
    (``InvalidRequestError``: the store checks it against the options it reads). Only by
    the event's creator or an admin (``ForbiddenError``). A sharded event's goes down to
    the seats its pool dealt its shards, no lower (the store's ``update_capacity``)."""
    event_id = _id(event_id, "event_id")
    capacity = _capacity(capacity)
    _organized(store, event_id, caller)
    return _view(store, store.update_capacity(event_id, capacity))


def close_event(store: SignupStore, event_id: Any, caller: Caller = OPERATOR) -> views.EventClosed:
    """OPEN -> CLOSED, idempotent; the ``EventClosed`` view (``closed_now``). Only by the
    event's creator or an admin (``ForbiddenError``). A sharded event's shards are closed
    with it (the store's ``close_event``: one transaction)."""
    event_id = _id(event_id, "event_id")
    _organized(store, event_id, caller)
    record, closed_now = store.close_event(event_id)
    if record is None:
        raise EventNotFoundError(f"no such event {event_id!r}")
    return views.EventClosed(**_view(store, record), closed_now=closed_now)


# -- signups --------------------------------------------------------------------------


@dataclass(frozen=True)
class Submitted:
    """A recorded submission: ``body`` is its ``SignupAccepted`` view; ``created`` is
    False when the same body had been submitted before."""

    body: views.SignupAccepted
    created: bool


def submit_signup(
    store: SignupStore,
    event_id: Any,
    signup_id: Any,
    seats: Any = ABSENT,
    attributes: Any = ABSENT,
    *,
    retention_days: int,
    now: str | None = None,
    owner: str | None = None,
) -> Submitted:
    """Record a PENDING signup of an existing event, ``owner``'s (idempotent for the same
    body from the same owner; another body, or another owner, is a conflict)."""
    event_id = _id(event_id, "event_id")
    problems: list[str] = []
    # Strictness first (2.0 and true are no seat counts; null is no map), then the one
    # validator the stream processor applies too.
    if seats is ABSENT:
        seats = 1
    else:
        problem = _integer_problem(seats, "seats", 1, MAX_SEATS)
        if problem:
            raise InvalidRequestError([problem])
    if attributes is ABSENT:
        attributes = None
    elif attributes is None:
        raise InvalidRequestError([ATTRIBUTES_RULE])
    problems = signup_problems(event_id, signup_id, seats, attributes)
    if problems:
        raise InvalidRequestError(problems)
    # Checked here because the processor would only reject it later as unknown_event;
    # an event created meanwhile is fine either way. A sharded event known already is not
    # read again: it exists (event items are never deleted), and its item is the one every
    # submission of a hot event would read.
    shards = _known_shards(store, event_id)
    if shards is None or shards == 1:
        found = _read_event(store, event_id)
        if found is None:
            raise EventNotFoundError(f"no such event {event_id!r}")
        shards = found.shards
    # A sharded event's signup goes under its shard's key: the same signup always to the
    # same shard, so a retry finds its first submission (idempotent, owner checked).
    key = signup_key(event_id, signup_id, shards)
    try:
        record, created = store.put_intake(
            key,
            signup_id,
            seats,
            attributes,
            submitted_at=now or utc_now(),
            expires_at=intake_expires_at(retention_days),
            owner=owner,
        )
    except SignupConflictError as exc:
        if key == event_id:
            raise
        raise _plain_conflict(exc, key, event_id) from None
    submitted_at = record.get(Attr.SUBMITTED_AT)
    body = views.SignupAccepted(
        status=Status.PENDING,
        event_id=event_id,
        signup_id=signup_id,
        seats=seats,
        submitted_at=submitted_at if isinstance(submitted_at, str) else None,
    )
    return Submitted(body=body, created=created)


def request_signup(
    store: SignupStore,
    event_id: Any,
    signup_id: Any,
    kind: str,
    now: str | None = None,
    caller: Caller = OPERATOR,
) -> views.RequestRecorded:
    """Ask to confirm or cancel a signup (``kind``: a ``RequestKind``): the
    ``RequestRecorded`` view ``{event_id, signup_id, request}`` once it is recorded for
    the stream processor to apply. Refused at once, nothing recorded, when the signup's
    current status does not allow it (``RequestRefusedError``, with that status: a confirm
    needs HELD before ``hold_expires_at``, a cancel HELD, ACCEPTED or WAITLISTED);
    ``SignupNotFoundError`` if it was never submitted, or if it is not ``caller``'s to ask
    of (it is only its owner's, its event's organizers' and admins'): the same answer, so a
    stranger learns nothing of another's signup. The owner is checked in the same
    transaction that records the request."""
    event_id = _id(event_id, "event_id")
    signup_id = _id(signup_id, "signup_id")
    if kind not in RequestKind.ALL:
        raise InvalidRequestError([f"request must be one of {', '.join(RequestKind.ALL)}"])
    now = now or utc_now()
    key = _located(store, event_id, signup_id)
    try:
        try:
            recorded = request_transition(store, key, signup_id, kind, now, owner=_owned_by(caller))
        except SignupNotFoundError:
            # Not the caller's: an organizer of the event may still ask (an admin was not
            # held to the owner in the first place).
            record = store.get_event(event_id) if not caller.admin else None
            if record is None or not caller.organizes(record):
                raise
            recorded = request_transition(store, key, signup_id, kind, now)
    except SignupNotFoundError:
        if key == event_id:
            raise
        raise _not_found(event_id, signup_id) from None
    except RequestRefusedError as exc:
        if key == event_id:
            raise
        # The refusal names the event as the caller did, never its shard's key.
        raise RequestRefusedError(
            event_id,
            exc.signup_id,
            exc.request,
            exc.status,
            hold_expires_at=exc.hold_expires_at,
            reason=exc.reason,
        ) from None
    return views.RequestRecorded(
        event_id=event_id, signup_id=recorded.signup_id, request=recorded.request
    )


def _owned_by(caller: Caller) -> str | object | None:
    """The owner a request of ``caller`` is held to: none for an admin (``ANYONE``)."""
    return ANYONE if caller.admin else caller.identity


def signup_status(
    store: SignupStore, event_id: Any, signup_id: Any, caller: Caller = OPERATOR
) -> views.Signup:
    """The signup's status (its ``Signup`` view); ``SignupNotFoundError`` if never submitted, or
    if it is not ``caller``'s to read (its owner's, its event's organizers', admins')."""
    event_id = _id(event_id, "event_id")
    signup_id = _id(signup_id, "signup_id")
    return _status_at(store, event_id, _located(store, event_id, signup_id), signup_id, caller)


def _status_at(
    store: SignupStore, event_id: str, key: str, signup_id: str, caller: Caller
) -> views.Signup:
    """``signup_status`` of a signup kept under the event key ``key`` (``_located``)."""
    # Decision first: a decision never goes away, so if it is absent now and the intake
    # record is present next, the signup was PENDING at some point in between.
    decision = store.get_decision(key, signup_id)
    intake = None if decision is not None else store.get_intake(key, signup_id)
    if decision is None and intake is None:
        raise _not_found(event_id, signup_id)
    owner = (decision or intake or {}).get(Attr.OWNER)
    if not caller.admin and owner != caller.identity:
        record = store.get_event(event_id)
        if record is None or not caller.organizes(record):
            raise _not_found(event_id, signup_id)
    return signup_view(event_id, signup_id, decision, intake)


def await_decision(
    store: SignupStore,
    event_id: Any,
    signup_id: Any,
    wait_s: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    first_delay_s: float = 0.05,
    max_delay_s: float = 0.5,
    statuses: Collection[str] | None = None,
    caller: Caller = OPERATOR,
) -> views.Signup:
    """``signup_status``, waiting up to ``wait_s`` seconds for a decision (or, with
    ``statuses``, for one of them or a final status): as soon as it is read, else the
    status at the deadline. After the first read (which 404s an unknown signup at once) it
    polls only the decision item, a strongly consistent point read every ``first_delay_s``
    doubling to ``max_delay_s``."""
    deadline = clock() + max(0.0, wait_s)
    event_id = _id(event_id, "event_id")
    signup_id = _id(signup_id, "signup_id")
    key = _located(store, event_id, signup_id)
    status = _status_at(store, event_id, key, signup_id, caller)
    delay = first_delay_s
    while not Status.reached(status.status, statuses):
        remaining = deadline - clock()
        if remaining <= 0:
            break
        sleep(min(delay, remaining))
        delay = min(delay * 2, max_delay_s)
        decision = store.get_decision(key, status.signup_id)
        if decision is not None:
            status = signup_view(status.event_id, status.signup_id, decision, None)
    return status


# -- lists ----------------------------------------------------------------------------


def _page_size(limit: Any) -> int:
    if limit is None:
        return DEFAULT_PAGE_SIZE
    problem = _integer_problem(limit, "limit", 1, MAX_PAGE_SIZE)
    if problem:
        raise InvalidRequestError([problem])
    return int(limit)


def list_events(
    store: SignupStore, limit: Any = None, next_token: str | None = None
) -> views.EventList:
    """A page of events (the ``EventList`` view): ``{"events": [Event, ...], "next"}``,
    in the control table's order (no particular one); ``next`` is None on the last page."""
    size = _page_size(limit)
    after: tuple[str, str] | None = None
    if next_token:
        payload = listing.decode_token(next_token, "events")
        if not listing.valid_control_key(payload.get("a")):
            raise InvalidRequestError([listing.TOKEN_REFUSED])
        after = (payload["a"][0], payload["a"][1])
    items, last, more = listing.event_items(store, size, after)
    records = [EventRecord.from_values(item) for item in items]
    # A sharded event's shards' items are its own, not events: never listed apart.
    records = [r for r in records if split_shard_key(r.event.event_id) is None]
    events = [_view(store, record) for record in records]
    token = listing.encode_token({"k": "events", "a": list(last)}) if more and last else None
    return views.EventList(events=events, next=token)


def list_signups(
    store: SignupStore,
    event_id: Any,
    status: Any = None,
    limit: Any = None,
    next_token: str | None = None,
    caller: Caller = OPERATOR,
) -> views.SignupList:
    """A page of an event's signups (the ``SignupList`` view): ``{"signups": [Signup,
    ...], "next"}`` in ``signup_id`` order, only those with ``status`` if given (PENDING:
    recorded, not decided yet). ``EventNotFoundError`` for an unknown event; only for the
    event's organizers and admins (``ForbiddenError``): the signups' attributes are
    personal data.

    A sharded event's signups come shard by shard (shard 0's first), each shard's in
    ``signup_id`` order: its partitions are read one after another, and the token of the
    next page names the shard it goes on in (``h``) and the last signup read there."""
    event_id = _id(event_id, "event_id")
    if status is not None and status not in LISTED_STATUSES:
        raise InvalidRequestError([STATUS_RULE])
    size = _page_size(limit)
    after: str | None = None
    shard: int | None = None
    if next_token:
        payload = listing.decode_token(next_token, "signups")
        if payload.get("e") != event_id or payload.get("s") != status:
            raise InvalidRequestError([listing.TOKEN_REFUSED])
        shard = payload.get("h")
        # A sharded listing's token may start its shard at the beginning (no cursor).
        at_start = shard is not None and payload.get("a") is None
        if not at_start and not listing.valid_signup_cursor(payload.get("a")):
            raise InvalidRequestError([listing.TOKEN_REFUSED])
        after = payload.get("a")
    record = _organized(store, event_id, caller)
    if record.shards > 1 or shard is not None:
        return _sharded_signups(store, record, status, size, after, shard)
    rows, last, more = listing.signup_rows(store, event_id, status, size, after)
    signups = [signup_view(event_id, sid, decision, intake) for sid, decision, intake in rows]
    token = None
    if more and last is not None:
        token = listing.encode_token({"k": "signups", "e": event_id, "s": status, "a": last})
    return views.SignupList(signups=signups, next=token)


def _sharded_signups(
    store: SignupStore,
    record: EventRecord,
    status: str | None,
    size: int,
    after: str | None,
    shard: Any,
) -> views.SignupList:
    """``list_signups`` of a sharded event: its shards' partitions one after another, from
    shard ``shard`` (None: the first page) after ``after``, until the page is full or a
    shard may have more than the page read of it (then the token goes on there)."""
    event_id = record.event.event_id
    if shard is None:
        shard, after = 0, None
    elif isinstance(shard, bool) or not isinstance(shard, int):
        raise InvalidRequestError([listing.TOKEN_REFUSED])
    elif record.shards <= 1 or not 0 <= shard < record.shards:
        # A token of another listing: an event of one shard, or of fewer shards.
        raise InvalidRequestError([listing.TOKEN_REFUSED])
    signups: list[views.Signup] = []
    while shard < record.shards:
        key = shard_key(event_id, shard)
        rows, last, more = listing.signup_rows(store, key, status, size - len(signups), after)
        signups += [signup_view(event_id, sid, decision, intake) for sid, decision, intake in rows]
        if more and last is not None:
            token = {"k": "signups", "e": event_id, "s": status, "a": last, "h": shard}
            return views.SignupList(signups=signups, next=listing.encode_token(token))
        shard, after = shard + 1, None
        if len(signups) >= size and shard < record.shards:
            break  # full: the next page starts at the next shard's beginning
    else:
        return views.SignupList(signups=signups, next=None)
    token = {"k": "signups", "e": event_id, "s": status, "a": None, "h": shard}
    return views.SignupList(signups=signups, next=listing.encode_token(token))

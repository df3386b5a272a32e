"""The operations on events and signups, shared by the HTTP API and the ``turnstile`` CLI.

Each function takes plain values (already parsed from JSON or from the command line),
validates them with the one set of rules (``domain``, which the stream processor applies
too), calls ``SignupStore`` and returns the public JSON shape of the answer: the shapes
the OpenAPI document calls ``Event``, ``EventClosed``, ``SignupAccepted`` and ``Signup``.
Both adapters print or send that value as it is, so the API and the CLI cannot disagree.

Refusals are typed (``errors``): ``InvalidRequestError`` (its ``problems`` named),
``EventNotFoundError`` / ``SignupNotFoundError``, ``EventExistsError`` /
``SignupConflictError`` (conflicts), ``CapacityBelowTakenError``. Logging and metrics are
the adapters' (the CLI's stdout is its JSON).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from turnstile.clock import utc_now
from turnstile.contract import Attr, Status
from turnstile.domain import (
    MAX_CAPACITY,
    MAX_SEATS,
    MAX_SUBMITTED_AT_CHARS,
    id_problem,
    parse_request,
    signup_problems,
)
from turnstile.errors import EventNotFoundError, InvalidRequestError, SignupNotFoundError
from turnstile.jsonable import plain
from turnstile.personal_data import intake_expires_at
from turnstile.store import EventRecord, SignupStore

__all__ = [
    "ABSENT",
    "Submitted",
    "close_event",
    "create_event",
    "show_event",
    "signup_status",
    "submit_signup",
    "update_capacity",
]


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


def _integer_problem(value: Any, name: str, minimum: int, maximum: int) -> str | None:
    # bool is an int subclass, and a Decimal means the JSON had a fraction or exponent
    # (even 2.0): both are refused, so only integers pass.
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        return f"{name} must be an integer from {minimum} to {maximum}"
    return None


def _capacity(value: Any) -> int:
    problem = _integer_problem(value, "capacity", 0, MAX_CAPACITY)
    if problem:
        raise InvalidRequestError([problem])
    return int(value)


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


def event_view(record: EventRecord) -> dict[str, Any]:
    """The ``Event`` shape."""
    public = record.to_public()
    # version is the processor's optimistic lock, not part of the public answer.
    public.pop("version", None)
    return public


def signup_view(
    event_id: str,
    signup_id: str,
    decision: Mapping[str, Any] | None,
    intake: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The ``Signup`` shape, from its decision item or else its intake record."""
    if decision is not None:
        seats = decision.get(Attr.SEATS)
        attributes = decision.get(Attr.ATTRIBUTES)
        submitted_at = decision.get(Attr.SUBMITTED_AT)
    else:
        # A pending signup is shown as the processor will read it: whatever a producer
        # wrote straight into intake (400 KB of submitted_at, a map of any size) is
        # bounded by the same rules, never copied as it is.
        request = parse_request(intake or {}, "", {"event_id": event_id, "signup_id": signup_id})
        seats, attributes = request.seats or None, request.attributes
        submitted_at = request.submitted_at
    if not isinstance(submitted_at, str) or len(submitted_at) > MAX_SUBMITTED_AT_CHARS:
        submitted_at = None
    decided = decision or {}
    return {
        "event_id": event_id,
        "signup_id": signup_id,
        "status": decided.get(Attr.STATUS, Status.PENDING),
        "seats": _whole(seats),
        "reason": decided.get(Attr.REASON),
        "detail": decided.get("detail"),
        "position": _whole(decided.get(Attr.POSITION)),
        "submitted_at": submitted_at,
        "decided_at": decided.get(Attr.DECIDED_AT),
        "attributes": plain(attributes) if isinstance(attributes, Mapping) else {},
    }


# -- events ---------------------------------------------------------------------------


def create_event(
    store: SignupStore,
    event_id: Any,
    capacity: Any,
    created_by: str | None,
    now: str | None = None,
) -> dict[str, Any]:
    """Create an OPEN event; ``EventExistsError`` if the id is taken (whatever the body)."""
    event_id = _id(event_id, "event_id")
    capacity = _capacity(capacity)
    record = store.create_event(event_id, capacity, now=now or utc_now(), created_by=created_by)
    return event_view(record)


def show_event(store: SignupStore, event_id: Any) -> dict[str, Any]:
    event_id = _id(event_id, "event_id")
    record = store.get_event(event_id)
    if record is None:
        raise EventNotFoundError(f"no event {event_id!r}")
    return event_view(record)


def update_capacity(store: SignupStore, event_id: Any, capacity: Any) -> dict[str, Any]:
    """Up at any time, down to the seats taken (``CapacityBelowTakenError`` below)."""
    event_id = _id(event_id, "event_id")
    capacity = _capacity(capacity)
    return event_view(store.update_capacity(event_id, capacity))


def close_event(store: SignupStore, event_id: Any) -> dict[str, Any]:
    """OPEN -> CLOSED, idempotent; the ``EventClosed`` shape (``closed_now``)."""
    event_id = _id(event_id, "event_id")
    record, closed_now = store.close_event(event_id)
    if record is None:
        raise EventNotFoundError(f"no event {event_id!r}")
    return {**event_view(record), "closed_now": closed_now}


# -- signups --------------------------------------------------------------------------


@dataclass(frozen=True)
class Submitted:
    """A recorded submission: ``body`` is the ``SignupAccepted`` shape; ``created`` is
    False when the same body had been submitted before."""

    body: dict[str, Any]
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
) -> Submitted:
    """Record a PENDING signup of an existing event (idempotent for the same body)."""
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
        raise InvalidRequestError(["attributes must be a map (a JSON object), or left out"])
    problems = signup_problems(event_id, signup_id, seats, attributes)
    if problems:
        raise InvalidRequestError(problems)
    # Checked here because the processor would only reject it later as unknown_event;
    # an event created meanwhile is fine either way.
    if store.get_event(event_id) is None:
        raise EventNotFoundError(f"no event {event_id!r}")
    record, created = store.put_intake(
        event_id,
        signup_id,
        seats,
        attributes,
        submitted_at=now or utc_now(),
        expires_at=intake_expires_at(retention_days),
    )
    submitted_at = record.get(Attr.SUBMITTED_AT)
    body = {
        "status": Status.PENDING,
        "event_id": event_id,
        "signup_id": signup_id,
        "seats": seats,
        "submitted_at": submitted_at if isinstance(submitted_at, str) else None,
    }
    return Submitted(body=body, created=created)


def signup_status(store: SignupStore, event_id: Any, signup_id: Any) -> dict[str, Any]:
    """PENDING, ACCEPTED or REJECTED; ``SignupNotFoundError`` if never submitted."""
    event_id = _id(event_id, "event_id")
    signup_id = _id(signup_id, "signup_id")
    # Decision first: a decision never goes away, so if it is absent now and the intake
    # record is present next, the signup was PENDING at some point in between.
    decision = store.get_decision(event_id, signup_id)
    intake = None if decision is not None else store.get_intake(event_id, signup_id)
    if decision is None and intake is None:
        raise SignupNotFoundError(f"no signup {signup_id!r} for event {event_id!r}")
    return signup_view(event_id, signup_id, decision, intake)

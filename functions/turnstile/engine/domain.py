"""The domain's values and the rules of valid input: pure, no I/O.

An event as last committed (``EventSnapshot``), one intake record as the processor read it
(``SignupRequest``, made by ``parse_request``, which says what is wrong with a record rather
than raising), a first decision (``Decision``), a change to a decided signup
(``ItemUpdate``) and what one commit writes (``Outcome``); and the limits every input is held
to (seats, capacity, ids, attributes). The one engine that decides is ``lifecycle.step``;
``transitions`` carries records to it and its answer back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from turnstile.base.contract import (
    ID_PATTERN,
    MAX_ATTRIBUTES_BYTES,
    MAX_OWNER_CHARS,
    EventState,
    Status,
)
from turnstile.base.itemsize import value_size
from turnstile.base.personal_data import intake_expiry

__all__ = [
    "MAX_ATTRIBUTES_DEPTH",
    "MAX_CAPACITY",
    "MAX_DETAIL_CHARS",
    "MAX_LOGGED_REQUESTS",
    "MAX_SEATS",
    "MAX_SUBMITTED_AT_CHARS",
    "Decision",
    "EventSnapshot",
    "ItemUpdate",
    "Outcome",
    "SignupRequest",
    "attributes_problem",
    "capacity_problem",
    "id_problem",
    "parse_request",
    "seats_problem",
    "signup_problems",
]

#: The largest seat count one signup may ask for; bigger numbers are bad input, not "full".
MAX_SEATS = 1_000_000
#: The largest capacity: the largest integer every JSON parser represents exactly (2**53 - 1).
MAX_CAPACITY = 2**53 - 1
#: DynamoDB allows 32 levels of nesting in an item; this leaves room around attributes.
MAX_ATTRIBUTES_DEPTH = 16
#: ``submitted_at`` is copied onto the decision only up to this length (ISO-8601 needs 32).
MAX_SUBMITTED_AT_CHARS = 64
#: A decision's ``detail`` never grows past this, whatever the intake record held.
MAX_DETAIL_CHARS = 512


@dataclass(frozen=True)
class EventSnapshot:
    """The event item as last committed: the only state a decision depends on."""

    event_id: str
    capacity: int
    taken: int = 0
    accepted: int = 0
    state: str = EventState.OPEN
    version: int = 0

    @property
    def remaining(self) -> int:
        return self.capacity - self.taken


@dataclass(frozen=True)
class SignupRequest:
    """One intake record as the processor received it, already validated.

    ``problem`` is None for a valid request; otherwise it says why the request is invalid
    and ``seats`` may be 0.
    """

    event_id: str
    signup_id: str
    sequence_number: str
    seats: int = 1
    attributes: Mapping[str, Any] = field(default_factory=dict)
    submitted_at: str | None = None
    problem: str | None = None
    #: A remark that is no reason to reject (a dropped field), kept in the decision's detail.
    note: str | None = None
    #: What the record's latest request asks (``RequestKind``: confirm or cancel; any other
    #: text is refused as invalid), or None: the record carries no request.
    request: str | None = None
    #: How many requests the producer has made of this signup (``Attr.REQUEST_COUNT``; a
    #: fraction rounded up); None when the record's count is no number of 0 or more.
    request_count: int | None = 0
    #: A wake-up of the event (a record of the control table's stream), not a signup's
    #: record: it only lets the event's time advance (``signup_id`` is empty).
    tick: bool = False
    #: Every request the producer has made, oldest first (``Attr.REQUESTS``), each as text
    #: (anything else as "": refused as invalid); None when the record keeps no log.
    requests: tuple[str, ...] | None = None
    #: When TTL deletes the intake record (epoch seconds), None when it never does: its
    #: decision must outlive it (``personal_data.decision_expires_at``).
    expires_at: int | None = None
    #: Who submitted it (``Attr.OWNER``), copied to the decision; None when the record
    #: names nobody (or names no one a decision can keep: not text, or too long).
    owner: str | None = None


@dataclass(frozen=True)
class Decision:
    """The final word on one signup. Written once, never changed."""

    signup_id: str
    sequence_number: str
    status: str
    seats: int
    reason: str | None = None
    position: int | None = None
    detail: str | None = None

    @property
    def accepted(self) -> bool:
        return self.status == Status.ACCEPTED


@dataclass(frozen=True)
class ItemUpdate:
    """A change to a decision item that exists: the attributes to set (DynamoDB-typed)
    and to remove, applied only while the item's status is still ``from_status`` (and, when
    ``request_count`` is set, its answered requests below it): so applying it twice, or
    after a later change, changes nothing."""

    signup_id: str
    from_status: str
    set: Mapping[str, Any]
    remove: tuple[str, ...] = ()
    request_count: int | None = None


@dataclass(frozen=True)
class Outcome:
    """What one commit writes: the new decisions in stream order and the next state.

    The lifecycle's commits (``turnstile.storage.transitions``) also carry, per decision, the
    typed attributes its item has beyond today's (``extras``: a hold's expiry, a place in
    line, a history), the changes to items decided before (``updates``) and the event's
    lifecycle state (``lifecycle``: the attributes the commit sets on the event item)."""

    decisions: tuple[Decision, ...]
    state: EventSnapshot | None
    extras: tuple[Mapping[str, Any], ...] | None = None
    updates: tuple[ItemUpdate, ...] = ()
    lifecycle: Mapping[str, Any] | None = None


# -- the one validator of a signup (API, CLI and stream processor) --------------------


def id_problem(value: Any, name: str) -> str | None:
    """Rule: an id is a string matching ``ID_PATTERN`` in full (no trailing newline)."""
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
        return f"{name} must match {ID_PATTERN.pattern}"
    return None


def _seats(raw: Any) -> tuple[int, str | None]:
    """Rule: seats is optional (default 1) and must be a whole number from 1 to MAX_SEATS."""
    if raw is None:
        return 1, None
    if isinstance(raw, bool) or not isinstance(raw, int | Decimal):
        return 0, f"seats must be a number, got {type(raw).__name__}"
    if isinstance(raw, Decimal) and (not raw.is_finite() or raw != raw.to_integral_value()):
        return 0, "seats must be a whole number"
    if raw < 1:
        return 0, "seats must be at least 1"
    if raw > MAX_SEATS:
        return 0, f"seats must be at most {MAX_SEATS}"
    return int(raw), None


def seats_problem(raw: Any) -> str | None:
    """Rule: see ``_seats``; None when ``raw`` is a valid seat count (or absent)."""
    return _seats(raw)[1]


def capacity_problem(value: Any) -> str | None:
    """Rule: a capacity is a whole number from 0 to MAX_CAPACITY (seats)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CAPACITY:
        return f"capacity must be an integer from 0 to {MAX_CAPACITY}"
    return None


def _text_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, from "\udXXX" escapes
        return "attributes must be valid Unicode text"
    return None


def _number_problem(number: int | Decimal) -> str | None:
    """DynamoDB numbers: 38 significant digits, magnitude 1e-130 to under 1e126, or 0."""
    value = Decimal(number)
    if not value.is_finite():
        return "attributes hold a number that is not finite"
    if value.is_zero():
        return None
    if len(value.as_tuple().digits) > 38 or not -130 <= value.adjusted() <= 125:
        return "attributes hold a number DynamoDB cannot store (38 digits, 1e-130 to 1e125)"
    return None


def _value_problem(value: Any, depth: int) -> str | None:
    """The first thing in an attribute value that DynamoDB or the contract refuses."""
    if depth > MAX_ATTRIBUTES_DEPTH:
        return f"attributes are nested more than {MAX_ATTRIBUTES_DEPTH} levels deep"
    if value is None or isinstance(value, bool | bytes | bytearray):
        return None
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, int | Decimal):
        return _number_problem(value)
    if type(value).__name__ == "Binary":  # boto3's wrapper of binary values
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                return "attribute names must be non-empty strings"
            problem = _text_problem(key) or _value_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list | tuple | set | frozenset):
        for item in value:
            problem = _value_problem(item, depth + 1)
            if problem:
                return problem
        return None
    return f"attributes hold a {type(value).__name__}, which DynamoDB cannot store exactly"


def attributes_problem(value: Any) -> str | None:
    """Rule: attributes are a map, nested at most ``MAX_ATTRIBUTES_DEPTH`` levels, with
    non-empty names, valid text and numbers DynamoDB can hold, and at most
    ``MAX_ATTRIBUTES_BYTES`` by DynamoDB's item-size rules (they are copied onto the
    decision item, so an unbounded map could push it past DynamoDB's 400 KB)."""
    if not isinstance(value, Mapping):
        return "attributes must be a map (a JSON object)"
    problem = _value_problem(value, 1)
    if problem:
        return problem
    size = value_size(value)
    if size > MAX_ATTRIBUTES_BYTES:
        return (
            f"attributes are {size} bytes by DynamoDB's item-size rules, "
            f"over {MAX_ATTRIBUTES_BYTES}"
        )
    return None


def signup_problems(
    event_id: Any, signup_id: Any, seats: Any = None, attributes: Any = None
) -> list[str]:
    """Every way a signup breaks the contract; empty when it is valid.

    The one validator: the API and ``turnstile submit`` refuse what it flags, the stream
    processor rejects it ``invalid_request``, so whatever the first two take the third
    never rejects as invalid. ``seats`` and ``attributes`` may be None (absent).
    """
    problems = [
        p
        for p in (
            id_problem(event_id, "event_id"),
            id_problem(signup_id, "signup_id"),
            seats_problem(seats),
            None if attributes is None else attributes_problem(attributes),
        )
        if p
    ]
    return problems


def _bounded(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _submitted_at(raw: Any) -> tuple[str | None, str | None]:
    """Rule: ``submitted_at`` is copied only as a string of at most MAX_SUBMITTED_AT_CHARS;
    anything else is dropped (with a note), never a reason to reject."""
    if raw is None:
        return None, None
    if isinstance(raw, str) and len(raw) <= MAX_SUBMITTED_AT_CHARS:
        return raw, None
    return None, (
        f"submitted_at dropped: not a string of at most {MAX_SUBMITTED_AT_CHARS} characters"
    )


def parse_request(
    image: Mapping[str, Any] | None, sequence_number: str, keys: Mapping[str, Any] | None = None
) -> SignupRequest:
    """Rule: any intake image yields a request; whatever breaks the contract sets ``problem``.

    ``image`` is the record's NEW_IMAGE as plain Python values (numbers as Decimal);
    ``keys`` stands in for a missing image. Never raises. An id off the pattern is still
    the request's id (its rejection is written under the record's own key).
    """
    image = image or {}
    keys = keys or {}
    event_id = image.get("event_id", keys.get("event_id"))
    signup_id = image.get("signup_id", keys.get("signup_id"))
    seats, _ = _seats(image.get("seats"))
    attributes = image.get("attributes")
    problems = signup_problems(event_id, signup_id, image.get("seats"), attributes)
    if attributes is None or (problems and attributes_problem(attributes)):
        attributes = {}  # never copied when invalid: only its problem is kept
    submitted_at, note = _submitted_at(image.get("submitted_at"))
    request = image.get("request")
    request_count, whole = _count(image.get("request_count"))
    if not whole and request_count is not None:
        request = ""  # a fraction of a request: refused as invalid
    return SignupRequest(
        event_id=str(event_id),
        signup_id=str(signup_id),
        sequence_number=sequence_number,
        seats=seats,
        attributes=dict(attributes),
        submitted_at=submitted_at,
        problem=_bounded("; ".join(problems)) if problems else None,
        note=note,
        # Present but not text: a request all the same, refused as invalid.
        request=_bounded(request, 64) if isinstance(request, str) else request and "",
        request_count=request_count,
        requests=_request_log(image.get("requests")),
        expires_at=intake_expiry(image.get("expires_at")),
        owner=_owner(image.get("owner")),
    )


def _owner(raw: Any) -> str | None:
    """Rule: an owner is text of at most ``MAX_OWNER_CHARS``; anything else names nobody
    (the signup is then the event organizers' alone to act on through the API)."""
    return raw if isinstance(raw, str) and 0 < len(raw) <= MAX_OWNER_CHARS else None


#: The most requests one record is read for (a log longer than this, past what it has
#: answered, is answered by its latest request alone, as a record without a log is).
MAX_LOGGED_REQUESTS = 64


def _request_log(raw: Any) -> tuple[str, ...] | None:
    """Rule: the request log is a list; each entry a request's text (anything else reads
    as "", refused as invalid). Not a list: no log."""
    if not isinstance(raw, list):
        return None
    return tuple(_bounded(r, 64) if isinstance(r, str) else "" for r in raw[:100_000])


def _count(raw: Any) -> tuple[int | None, bool]:
    """Rule: a request counter is a whole number, 0 or more (absent: 0). Returns the count
    and whether it is whole. A fraction counts as the next whole number, and its request is
    refused; anything else (text, a negative number) is no count at all: its record
    carries no request the processor can tell from another."""
    if raw is None:
        return 0, True
    if isinstance(raw, bool) or not isinstance(raw, int | Decimal):
        return None, False
    if isinstance(raw, Decimal) and not raw.is_finite():
        return None, False
    if raw < 0:
        return None, False
    whole = Decimal(raw).to_integral_value(rounding="ROUND_CEILING")
    return int(whole), whole == raw

"""The answers' shapes, defined once: one pydantic model per resource.

``usecases`` builds them; the HTTP API serves them (and its OpenAPI document is generated
from them), the ``turnstile`` command prints them as JSON and the Python client
(``turnstile_tools.client``) reads the API's answers into them. A field's type, its
constraints and its description are written here and nowhere else.

A view reads like the JSON object it stands for: ``view.status`` and ``view["status"]`` are
the same value, ``dict(view)`` has the fields in their JSON order, and a view equals a
mapping of the same fields and values (``Signup(...) == {"status": ..., ...}``), so code
written against the answers as dicts keeps working. Views are immutable. A field a newer
API adds is kept (``extra="allow"``), so an older client still shows it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from turnstile.base.contract import ID_PATTERN, MAX_SHARDS, EventState, RequestKind, Status

__all__ = [
    "ERROR_CODES",
    "Error",
    "Event",
    "EventClosed",
    "EventList",
    "Id",
    "Index",
    "RequestRecorded",
    "RequestRefused",
    "Signup",
    "SignupAccepted",
    "SignupList",
    "View",
]

#: What ``error`` of an error answer may be.
ERROR_CODES = (
    "invalid_request",
    "capacity_below_taken",
    "payload_too_large",
    "not_found",
    "method_not_allowed",
    "event_not_found",
    "signup_not_found",
    "event_exists",
    "event_quota_exceeded",
    "forbidden",
    "signup_conflict",
    "request_refused",
    "unavailable",
    "internal_error",
)

#: An event's or a signup's id (``contract.ID_PATTERN``).
Id = Annotated[str, Field(pattern=ID_PATTERN.pattern, min_length=1, max_length=128)]
#: A signup's status, any of ``Status.ALL``.
StatusName = Literal[Status.ALL]  # type: ignore[valid-type]
#: What a producer may ask of a decided signup: ``RequestKind.ALL``.
RequestName = Literal[RequestKind.ALL]  # type: ignore[valid-type]
#: The token of the next page; null on the last.
NextToken = Annotated[
    str | None, Field(description="The token of the next page; null on the last.")
]


class View(BaseModel, Mapping[str, Any]):
    """A view: a pydantic model that also reads as the mapping of its JSON fields.

    A field named in ``_OMITTED_WHEN_NONE`` is no field of the answer while it is None:
    neither in its JSON nor among its keys (an event's ``shards``, shown only for a
    sharded event, so every other event's answer is what it always was)."""

    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)
    _OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()

    def __getitem__(self, key: str) -> Any:
        if key in self._fields() or key in (self.__pydantic_extra__ or {}):
            return getattr(self, key)
        raise KeyError(key)

    def _fields(self) -> list[str]:
        omitted = self._OMITTED_WHEN_NONE
        return [
            name
            for name in type(self).model_fields
            if name not in omitted or getattr(self, name) is not None
        ]

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        # The field names (a Mapping's keys), not pydantic's (name, value) pairs.
        yield from self._fields()
        yield from self.__pydantic_extra__ or {}

    def __len__(self) -> int:
        return len(self._fields()) + len(self.__pydantic_extra__ or {})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BaseModel):
            return super().__eq__(other)
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


# -- the API itself -----------------------------------------------------------------------


class Index(View):
    """What ``GET /`` answers: where the OpenAPI document is, and every route."""

    service: str
    openapi: str = Field(description="The OpenAPI document's path.")
    routes: list[str] = Field(description="Every route, as METHOD PATH.")


class Error(View):
    """Every error answer: a code to act on, and a sentence for people."""

    error: str = Field(description=", ".join(ERROR_CODES))
    message: str


# -- events ---------------------------------------------------------------------------------


class Event(View):
    """An event: its capacity, the seats taken, its state and its options."""

    event_id: Id
    capacity: int = Field(ge=0)
    taken: int = Field(ge=0, description="Seats held or accepted now.")
    remaining: int
    positions_given: int = Field(
        ge=0,
        description=(
            "Positions handed out: every signup ever given a seat, held or accepted, "
            "numbered in order. Seats are `taken`; signups by status, `status_counts`."
        ),
    )
    state: Literal[EventState.OPEN, EventState.CLOSED]
    created_at: str | None
    created_by: str | None = Field(
        description=(
            "Who created the event: the IAM caller's ARN or the token's subject "
            "(as in the access log), `cli:<user>` for `turnstile event create`; "
            "null when the request carried no identity (the local stack)."
        ),
    )
    waitlist: int = Field(ge=0)
    hold_seconds: int = Field(ge=0)
    max_seats: int | None = Field(ge=1)
    status_counts: dict[str, int] = Field(
        description=(
            "How many signups are in each status now, as the stream processor "
            "counts them (empty until it has decided some with the lifecycle)."
        ),
    )
    shards: int = Field(
        None,  # type: ignore[assignment]  # an event of one shard: no such field
        ge=2,
        le=MAX_SHARDS,
        description=(
            "A sharded event only (absent otherwise): its shards. Its signups are decided "
            "shard by shard; `taken`, `positions_given` and `status_counts` are its shards' "
            "summed."
        ),
        json_schema_extra=lambda schema: schema.pop("default", None),
        exclude_if=lambda value: value is None,
    )

    _OMITTED_WHEN_NONE: ClassVar[frozenset[str]] = frozenset({"shards"})


class EventClosed(Event):
    """The event after ``POST /events/{event_id}/close``."""

    closed_now: bool = Field(description="True only for the call that moved OPEN to CLOSED.")


class EventList(View):
    """A page of events."""

    events: list[Event]
    next: NextToken


# -- signups --------------------------------------------------------------------------------


class SignupAccepted(View):
    """A submission, recorded: PENDING until the stream processor decides it."""

    status: Literal[Status.PENDING]
    event_id: Id
    signup_id: Id
    seats: int = Field(ge=1)
    submitted_at: str | None


class Signup(View):
    """A signup and its status, from its decision item or else its intake record."""

    event_id: Id
    signup_id: Id
    status: StatusName
    seats: int | None
    reason: str | None = Field(
        description="REJECTED only: capacity_full, unknown_event, event_closed, invalid_request."
    )
    detail: str | None
    position: int | None = Field(
        description="Once granted seats (HELD or ACCEPTED): 1, 2, 3 ... in order of the grants."
    )
    submitted_at: str | None
    decided_at: str | None
    attributes: dict[str, Any]
    hold_expires_at: str | None = Field(
        description="HELD: when the hold lapses unless confirmed (ISO-8601 UTC)."
    )
    waitlist_position: int | None = Field(
        description="Its place in line when it joined the waitlist (1 = first)."
    )
    updated_at: str | None = Field(description="When its last transition was made.")
    request_count: int | None = Field(
        description="How many of its confirm/cancel requests were answered."
    )
    history: list[dict[str, Any]] = Field(
        description=(
            "Its transitions, oldest first: from, to, at, sequence_number, cause, and "
            "reason on a rejection."
        ),
    )
    last_refusal: dict[str, Any] | None = Field(
        description=(
            "The last request the processor refused: request, reason (hold_expired, "
            "transition_not_allowed), status, at, sequence_number."
        ),
    )


class SignupList(View):
    """A page of an event's signups."""

    signups: list[Signup]
    next: NextToken


class RequestRecorded(View):
    """A confirm or cancel, recorded for the stream processor to apply."""

    event_id: Id
    signup_id: Id
    request: RequestName


class RequestRefused(View):
    """A confirm or cancel the signup's current status does not allow; nothing recorded."""

    error: Literal["request_refused"]
    message: str
    event_id: Id
    signup_id: Id
    request: RequestName
    status: StatusName = Field(description="The signup's status as the refusal saw it.")
    hold_expires_at: str | None
    reason: str | None

"""The decision engine: pure functions, no I/O.

Given an event's state and the intake requests of that event in stream order, ``decide``
returns one decision per new request and the event's next state. "Full" is a value here,
not an exception; so is "invalid".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from turnstile.contract import ID_PATTERN, MAX_ATTRIBUTES_BYTES, EventState, Reason, Status

__all__ = [
    "Decision",
    "EventSnapshot",
    "Outcome",
    "SignupRequest",
    "attribute_size",
    "decide",
    "parse_request",
]

#: The largest seat count one signup may ask for; bigger numbers are bad input, not "full".
MAX_SEATS = 1_000_000


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
class Outcome:
    """What ``decide`` returns: the new decisions in stream order and the next state."""

    decisions: tuple[Decision, ...]
    state: EventSnapshot | None


def attribute_size(value: Any) -> int:
    """Bytes a value takes in a DynamoDB item, by DynamoDB's sizing rules (close estimate)."""
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, int | Decimal | float):
        return len(str(value).lstrip("-").replace(".", "")) // 2 + 2
    if isinstance(value, Mapping):
        return 3 + sum(len(str(k).encode()) + attribute_size(v) + 1 for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return 3 + sum(attribute_size(v) + 1 for v in value)
    return len(str(value).encode())


def _seats(raw: Any) -> tuple[int, str | None]:
    """Rule: seats is optional (default 1) and must be a whole number from 1 to MAX_SEATS."""
    if raw is None:
        return 1, None
    if isinstance(raw, bool) or not isinstance(raw, int | Decimal):
        return 0, f"seats must be a number, got {type(raw).__name__}"
    if isinstance(raw, Decimal) and (not raw.is_finite() or raw != raw.to_integral_value()):
        return 0, "seats must be a whole number"
    seats = int(raw)
    if seats < 1:
        return 0, "seats must be at least 1"
    if seats > MAX_SEATS:
        return 0, f"seats must be at most {MAX_SEATS}"
    return seats, None


def parse_request(
    image: Mapping[str, Any] | None, sequence_number: str, keys: Mapping[str, Any] | None = None
) -> SignupRequest:
    """Rule: any intake image yields a request; whatever breaks the contract sets ``problem``.

    ``image`` is the record's NEW_IMAGE as plain Python values (numbers as Decimal);
    ``keys`` stands in for a missing image. Never raises.
    """
    image = image or {}
    keys = keys or {}
    event_id = image.get("event_id", keys.get("event_id"))
    signup_id = image.get("signup_id", keys.get("signup_id"))
    problems: list[str] = []
    if not isinstance(event_id, str) or not ID_PATTERN.fullmatch(event_id):
        problems.append("event_id does not match the id pattern")
    if not isinstance(signup_id, str) or not ID_PATTERN.fullmatch(signup_id):
        problems.append("signup_id does not match the id pattern")
    seats, seat_problem = _seats(image.get("seats"))
    if seat_problem:
        problems.append(seat_problem)
    attributes = image.get("attributes")
    if attributes is None:
        attributes = {}
    elif not isinstance(attributes, Mapping):
        problems.append("attributes must be a map")
        attributes = {}
    elif attribute_size(attributes) > MAX_ATTRIBUTES_BYTES:
        # Copied into the decision item; an unbounded map could push it past 400 KB.
        problems.append(f"attributes exceed {MAX_ATTRIBUTES_BYTES} bytes")
        attributes = {}
    submitted_at = image.get("submitted_at")
    return SignupRequest(
        event_id=str(event_id),
        signup_id=str(signup_id),
        sequence_number=sequence_number,
        seats=seats,
        attributes=dict(attributes),
        submitted_at=submitted_at if isinstance(submitted_at, str) else None,
        problem="; ".join(problems) or None,
    )


def decide(
    event: EventSnapshot | None,
    requests: Sequence[SignupRequest],
    already_decided: Iterable[str] = (),
) -> Outcome:
    """Decide each new request of one event, in the order given.

    Rules, in order:
    - a request whose signup is already decided, or repeats an earlier one here, gets no
      new decision (a decision is made once, never changed);
    - invalid input is REJECTED ``invalid_request``;
    - no event item: REJECTED ``unknown_event``; a CLOSED event: REJECTED ``event_closed``;
    - seats beyond what remains: REJECTED ``capacity_full`` (a later, smaller request may
      still fit: that is not an order violation, it was never rejected while fitting);
    - otherwise ACCEPTED with the next position, and the seats are taken.
    The returned state is ``event`` advanced past every acceptance (version unchanged:
    the store bumps it when it commits).
    """
    seen = set(already_decided)
    decisions: list[Decision] = []
    taken = event.taken if event else 0
    accepted = event.accepted if event else 0
    for request in requests:
        if request.signup_id in seen:
            continue
        seen.add(request.signup_id)
        decision = Decision(
            signup_id=request.signup_id,
            sequence_number=request.sequence_number,
            status=Status.REJECTED,
            seats=request.seats,
        )
        if request.problem:
            decision = replace(decision, reason=Reason.INVALID_REQUEST, detail=request.problem)
        elif event is None:
            decision = replace(decision, reason=Reason.UNKNOWN_EVENT)
        elif event.state != EventState.OPEN:
            decision = replace(decision, reason=Reason.EVENT_CLOSED)
        elif request.seats > event.capacity - taken:
            decision = replace(decision, reason=Reason.CAPACITY_FULL)
        else:
            taken += request.seats
            accepted += 1
            decision = replace(decision, status=Status.ACCEPTED, position=accepted)
        decisions.append(decision)
    state = replace(event, taken=taken, accepted=accepted) if event else None
    return Outcome(decisions=tuple(decisions), state=state)

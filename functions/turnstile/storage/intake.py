"""Intake records as the processor reads them: one typed value per record, never an error.

``parse_intake`` turns a record's image (plain Python values, as the stream or a read of
intake gives it) into an ``IntakeRecord``: the signup's ids, seats and copied fields,
what the record asks of a signup decided before (``request``, ``request_count``, the log
``requests``), when TTL deletes it and who made it. Whatever breaks the contract is held
in ``problem`` (the signup is then rejected ``invalid_request``) or, for a field that is
no reason to reject, dropped with a ``note``: the processor never fails on a record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from turnstile.base.contract import MAX_OWNER_CHARS, RequestKind
from turnstile.base.personal_data import intake_expiry
from turnstile.engine.lifecycle import Command, Kind
from turnstile.engine.rules import (
    MAX_SUBMITTED_AT_CHARS,
    attributes_problem,
    bounded,
    seat_count,
    signup_problems,
)

__all__ = [
    "MAX_LOGGED_REQUESTS",
    "IntakeRecord",
    "engine_commands",
    "parse_intake",
    "signup_command",
]


@dataclass(frozen=True)
class IntakeRecord:
    """One intake record as the processor read it, already validated.

    ``problem`` is None for a valid signup; otherwise it says why the signup is invalid
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
    #: The stream delivered it as an INSERT: the first put of its intake item, so its
    #: signup can be decided already only if this very record was committed before (a
    #: redelivery: its sequence number is not above the event's high-water mark) or the
    #: event's records may repeat (``ParkAttr.MAY_REPEAT``). False for anything else (a
    #: MODIFY, a parked record, a wake-up): its decision is always read.
    inserted: bool = False


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


def parse_intake(
    image: Mapping[str, Any] | None,
    sequence_number: str,
    keys: Mapping[str, Any] | None = None,
    *,
    inserted: bool = False,
) -> IntakeRecord:
    """Rule: any intake image yields a record; whatever breaks the contract sets ``problem``.

    ``image`` is the record's NEW_IMAGE as plain Python values (numbers as Decimal);
    ``keys`` stands in for a missing image; ``inserted``: the stream delivered it as an
    INSERT (``IntakeRecord.inserted``). Never raises. An id off the pattern is still the
    record's id (its rejection is written under the record's own key).
    """
    image = image or {}
    keys = keys or {}
    event_id = image.get("event_id", keys.get("event_id"))
    signup_id = image.get("signup_id", keys.get("signup_id"))
    seats, _ = seat_count(image.get("seats"))
    attributes = image.get("attributes")
    problems = signup_problems(event_id, signup_id, image.get("seats"), attributes)
    if attributes is None or (problems and attributes_problem(attributes)):
        attributes = {}  # never copied when invalid: only its problem is kept
    submitted_at, note = _submitted_at(image.get("submitted_at"))
    request = image.get("request")
    request_count, whole = _count(image.get("request_count"))
    if not whole and request_count is not None:
        request = ""  # a fraction of a request: refused as invalid
    return IntakeRecord(
        event_id=str(event_id),
        signup_id=str(signup_id),
        sequence_number=sequence_number,
        seats=seats,
        attributes=dict(attributes),
        submitted_at=submitted_at,
        problem=bounded("; ".join(problems)) if problems else None,
        note=note,
        # Present but not text: a request all the same, refused as invalid.
        request=bounded(request, 64) if isinstance(request, str) else request and "",
        request_count=request_count,
        requests=_request_log(image.get("requests")),
        expires_at=intake_expiry(image.get("expires_at")),
        owner=_owner(image.get("owner")),
        inserted=inserted,
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
    return tuple(bounded(r, 64) if isinstance(r, str) else "" for r in raw[:100_000])


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


# -- intake records as the engine's commands -----------------------------------------


def signup_command(record: IntakeRecord) -> Command:
    """A signup's first record as the engine's command."""
    return Command(
        kind=Kind.SIGNUP,
        sequence_number=record.sequence_number,
        signup_id=record.signup_id,
        seats=record.seats,
        problem=record.problem,
        note=record.note,
    )


def engine_commands(
    chunk: Sequence[IntakeRecord], decided: Mapping[str, int]
) -> tuple[list[Command], dict[str, int]]:
    """The engine's commands for ``chunk`` (in order), and, per signup, the request count
    its item will have answered once they are applied. ``decided`` holds, for every
    signup of the chunk decided before, the requests its item has answered.

    A record of a signup not decided yet is its signup (its first decision); a record
    whose request counter is above the answered ones carries a new request (``confirm``,
    ``cancel``, or anything else, refused ``invalid_request``), one command each; any
    other is a tick: a re-emission, a redelivery, a record of nothing new."""
    commands: list[Command] = []
    counts = dict(decided)
    seen: set[str] = set()
    for record in chunk:
        sid = record.signup_id
        if record.tick:
            commands.append(Command.tick(record.sequence_number))
            continue
        if sid not in decided and sid not in seen:
            seen.add(sid)
            commands.append(signup_command(record))
            counts[sid] = 0  # a request this record carries too is answered later
            continue
        count = record.request_count
        if count is None or sid not in counts or count <= counts[sid]:
            # a re-emission, a redelivery, a second record of a signup decided in this
            # chunk that asks nothing new (or a counter that is no number: no request
            # can be told apart from another); it only lets time advance.
            commands.append(Command.tick(record.sequence_number))
            continue
        answered, counts[sid] = counts[sid], count
        for i, kind in enumerate(_asked(record, answered, count)):
            commands.append(_command(kind, sid, record.sequence_number, follows=i > 0))
    # A first record that also carries a request (a re-emission of a record whose signup
    # was never decided, made after the request): its signup is decided now, its request
    # when the sweeper re-emits the record again (its counter is then above the answered).
    return commands, counts


def _asked(record: IntakeRecord, answered: int, count: int) -> list[str | None]:
    """The requests a record asks that are not answered yet, in order: those of its log
    past ``answered`` (a record recovered from intake after its stream records were lost
    carries several), or, with no log (or a log that does not reach its count), its
    latest request alone."""
    log = record.requests
    if log is not None and len(log) >= count and count - answered <= MAX_LOGGED_REQUESTS:
        return list(log[answered:count])
    return [record.request]


def _command(kind: str | None, signup_id: str, sequence_number: str, follows: bool) -> Command:
    if kind == RequestKind.CONFIRM:
        return Command(Kind.CONFIRM, sequence_number, signup_id, follows=follows)
    if kind == RequestKind.CANCEL:
        return Command(Kind.CANCEL, sequence_number, signup_id, follows=follows)
    return Command(
        Kind.CONFIRM,
        sequence_number,
        signup_id,
        problem=f"request must be one of {', '.join(RequestKind.ALL)}, with a whole request_count",
        follows=follows,
    )

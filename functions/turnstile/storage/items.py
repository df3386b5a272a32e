"""Decision items: the only place they are built, and read back as the engine's values.

Reading: ``signup_state`` makes a decision item (plain values) the engine's
``SignupState`` with the requests it has answered (``Answered``); ``history_of`` gives
its transitions, oldest first.

Building: a first decision is a ``Decision``; ``base_item`` and ``decision_item`` make its
item, and ``bounded_decision`` fixes its copied fields within DynamoDB's limits (the
journal, ``turnstile.storage.journal``, keeps them so). A change to an item decided before
is an ``ItemUpdate``, written by ``update_call`` as one conditional ``UpdateItem``, applied
only while the item's status is the one it was decided from. ``outcome_of`` turns the
engine's step into what one commit writes (an ``Outcome``): first decisions with their
lifecycle attributes, changes to items decided before, and the event item's lifecycle
state. ``decisions_without_event`` and ``refusals_without_event`` do the same for the
records of an event with no event item.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from turnstile.base.clock import iso_of_ms, ms_of
from turnstile.base.contract import Attr, HistoryKey, Reason, RequestKind, Status
from turnstile.base.itemsize import text_size, typed_item_size
from turnstile.engine.lifecycle import (
    Cause,
    Event,
    SignupState,
    Step,
    Transition,
    advance,
    step,
)
from turnstile.engine.lineup import MAX_ENCODED_ENTRIES, encode_lineup
from turnstile.storage.dynamo import number_text, signup_key, to_item, typed_json
from turnstile.storage.intake import IntakeRecord, signup_command

__all__ = [
    "COPIED_FIELDS",
    "IN_LINEUP",
    "MAX_BASE_ITEM_BYTES",
    "MAX_DECISION_ITEM_BYTES",
    "MAX_JOURNAL_ROW_BYTES",
    "Answered",
    "Decision",
    "ItemUpdate",
    "Outcome",
    "base_item",
    "bounded_copies",
    "bounded_decision",
    "copied_fields",
    "decision_item",
    "decisions_without_event",
    "history_of",
    "outcome_of",
    "refusals_without_event",
    "retained",
    "signup_state",
    "touched_without_state",
    "update_call",
    "without_copies",
    "without_void",
]

#: A decision item over this (DynamoDB's item size) is stored without its copied fields.
MAX_DECISION_ITEM_BYTES = 64 * 1024
#: So is one whose journal row (JSON) would be longer than this: one decision then always
#: fits a journal, whatever its characters cost in JSON.
MAX_JOURNAL_ROW_BYTES = 128 * 1024
#: The most a decision item without copied fields or extras can take: keys of at most
#: 2,048 and 1,024 bytes (DynamoDB's own limits), a detail of at most ``MAX_DETAIL_CHARS``
#: characters, a reason, numbers and timestamps (``tests/unit/test_journal.py`` builds the
#: largest one).
MAX_BASE_ITEM_BYTES = 8 * 1024
#: The attributes a decision item copies from its intake record.
COPIED_FIELDS = (Attr.SUBMITTED_AT, Attr.ATTRIBUTES)
#: Statuses of signups the event's lineup still holds: their items never expire.
IN_LINEUP = (Status.HELD, Status.WAITLISTED)


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
    """What one commit writes (``outcome_of`` makes it): the new decisions in stream
    order; the event's next state (its ``state`` and ``version`` as they were read: the
    commit is conditioned on them); per decision, the typed attributes its item has beyond
    ``base_item`` (``extras``: a hold's expiry, a place in line, a history); the changes to
    items decided before (``updates``); and the attributes the commit sets on the event
    item besides its counters (``lifecycle``: the lineup, the status counts, the next
    hold due)."""

    decisions: tuple[Decision, ...]
    state: Event | None
    extras: tuple[Mapping[str, Any], ...] | None = None
    updates: tuple[ItemUpdate, ...] = ()
    lifecycle: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Answered:
    """A decided signup as the processor read it: the engine's state, the requests it has
    answered, and its item (plain values)."""

    state: SignupState
    request_count: int
    item: Mapping[str, Any]


# -- reading a decision item -------------------------------------------------------------


def signup_state(item: Mapping[str, Any]) -> Answered:
    """The decision item (plain values) as the engine needs it."""
    sequence_number = str(item.get(Attr.SEQUENCE_NUMBER, "0"))
    expires = item.get(Attr.HOLD_EXPIRES_AT)
    state = SignupState(
        signup_id=str(item[Attr.SIGNUP_ID]),
        status=str(item.get(Attr.STATUS, Status.REJECTED)),
        seats=int(item.get(Attr.SEATS, 0)),
        last_sequence_number=_last_own_record(item, sequence_number),
        arrival=sequence_number,
        position=_int_or_none(item.get(Attr.POSITION)),
        waitlist_position=_int_or_none(item.get(Attr.WAITLIST_POSITION)),
        hold_expires_at=ms_of(expires) if isinstance(expires, str) else None,
        reason=item.get(Attr.REASON),
        detail=item.get("detail"),
    )
    return Answered(state, int(item.get(Attr.REQUEST_COUNT, 0)), item)


def _last_own_record(item: Mapping[str, Any], sequence_number: str) -> str:
    """The greatest sequence number of the signup's own records answered (the engine's
    replay guard), from what the item keeps anyway: its first record, the records of its
    own transitions (a signup, a confirm, a cancel) and of its last refusal. (Records of one
    event share a shard, so a new record's number is above every one answered before.)"""
    numbers = [sequence_number]
    history = item.get(Attr.HISTORY)
    if isinstance(history, list):
        numbers += [
            str(h.get(HistoryKey.SEQUENCE_NUMBER))
            for h in history
            if isinstance(h, Mapping) and h.get(HistoryKey.CAUSE) in _OWN_CAUSES
        ]
    refusal = item.get(Attr.LAST_REFUSAL)
    if isinstance(refusal, Mapping):
        numbers.append(str(refusal.get("sequence_number")))
    return max((n for n in numbers if n.isdigit()), key=int, default=sequence_number)


_OWN_CAUSES = (Cause.SIGNUP, Cause.CONFIRM, Cause.CANCEL)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def history_of(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A decision item's transitions, oldest first (plain values).

    The item stores only the moves after its first decision (``history``); the first is
    read off the item itself (``decided_at``, ``sequence_number``, and the status it left
    at its first move, or its status if it never moved), so no byte is stored twice."""
    later = _stored_history(item)
    status = later[0].get(HistoryKey.FROM) if later else item.get(Attr.STATUS)
    if not isinstance(status, str):
        return later
    first: dict[str, Any] = {
        HistoryKey.FROM: Status.PENDING,
        HistoryKey.TO: status,
        HistoryKey.AT: item.get(Attr.DECIDED_AT),
        HistoryKey.SEQUENCE_NUMBER: item.get(Attr.SEQUENCE_NUMBER),
        HistoryKey.CAUSE: Cause.SIGNUP,
    }
    if status == Status.REJECTED and item.get(Attr.REASON):
        first[HistoryKey.REASON] = item.get(Attr.REASON)
    return [first, *later]


def _stored_history(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    stored = item.get(Attr.HISTORY)
    return [dict(h) for h in stored if isinstance(h, Mapping)] if isinstance(stored, list) else []


# -- a first decision's item -------------------------------------------------------------


def retained(status: str, expires_at: int | None) -> int | None:
    """The ``expires_at`` of a decision item in ``status``: none while the signup holds
    seats or waits for them (the event's lineup names it; TTL must not delete it)."""
    return None if status in IN_LINEUP else expires_at


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


def _json_or_none(copies: Mapping[str, Any]) -> str | None:
    """``typed_json(copies)``, or None where it raises (``bounded_copies`` checks first)."""
    try:
        return typed_json(copies)
    except Exception:
        return None


def _copied_values(request: IntakeRecord | Mapping[str, Any] | None) -> dict[str, Any]:
    """The copied fields of a request (or of an intake item, plain values), if present."""
    if isinstance(request, IntakeRecord):
        attributes: Any = request.attributes or None
        submitted_at = request.submitted_at
        owner = request.owner
    elif request is not None:
        raw_attrs = request.get(Attr.ATTRIBUTES)
        attributes = raw_attrs if isinstance(raw_attrs, Mapping) and raw_attrs else None
        raw_sub = request.get(Attr.SUBMITTED_AT)
        submitted_at = raw_sub if isinstance(raw_sub, str) else None
        raw_owner = request.get(Attr.OWNER)
        owner = raw_owner if isinstance(raw_owner, str) and raw_owner else None
    else:
        attributes, submitted_at, owner = None, None, None
    return {Attr.SUBMITTED_AT: submitted_at, Attr.ATTRIBUTES: attributes, Attr.OWNER: owner}


def without_copies(decision: Decision, why: str) -> Decision:
    """The decision, its ``detail`` saying why its item copies no field from intake."""
    note = f"attributes and submitted_at not stored: {why}"
    return replace(decision, detail=f"{decision.detail}; {note}" if decision.detail else note)


def copied_fields(request: IntakeRecord | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The fields a decision item copies from a record, typed (``attributes``,
    ``submitted_at``, ``owner``, where present); None when DynamoDB could not store them.
    The same record gives the same fields (``bounded_copies`` starts from them)."""
    try:
        copies = to_item(_copied_values(request))
        for value in copies.values():
            _check_storable(value)
    except (TypeError, ValueError, ArithmeticError):
        return None
    return copies


def base_item(
    event_id: str,
    decision: Decision,
    decided_at: str,
    expires_at: int | None = None,
    extras: Mapping[str, Any] | None = None,
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
        item[Attr.DETAIL] = {"S": decision.detail}
    item[Attr.SEATS] = {"N": str(int(decision.seats))}
    if decision.position is not None:
        item[Attr.POSITION] = {"N": str(int(decision.position))}
    item[Attr.DECIDED_AT] = {"S": decided_at}
    item[Attr.SEQUENCE_NUMBER] = {"S": decision.sequence_number}
    if expires_at is not None:
        item[Attr.EXPIRES_AT] = {"N": str(int(expires_at))}
    if extras:
        item.update(extras)
    return item


def bounded_copies(
    event_id: str,
    decision: Decision,
    decided_at: str,
    request: IntakeRecord | Mapping[str, Any] | None,
    expires_at: int | None = None,
    extras: Mapping[str, Any] | None = None,
) -> tuple[Decision, dict[str, Any], str]:
    """``bounded_decision``, and the copied fields as journal JSON."""
    try:
        copies = to_item(_copied_values(request))
        text = _json_or_none(copies)
        # What the serializer takes and DynamoDB refuses is an empty set, typed as "[]" in
        # JSON: fields whose JSON holds no "[]" need no walk (the same answer either way).
        if text is None or "[]" in text:
            for value in copies.values():
                _check_storable(value)
    except (TypeError, ValueError, ArithmeticError) as exc:
        return without_copies(decision, f"not storable in DynamoDB ({exc})"), {}, "{}"
    if text is None:
        text = typed_json(copies)  # raises as it did, after the checks
    if not copies:
        return decision, copies, text
    # The JSON is never shorter than the item size (tags, quotes, base64): the exact size
    # is needed only when the JSON alone would go over, and the base item's only when it
    # could matter (without extras it is under ``MAX_BASE_ITEM_BYTES``).
    json_bytes = text_size(text)
    if not extras and json_bytes <= MAX_DECISION_ITEM_BYTES - MAX_BASE_ITEM_BYTES:
        return decision, copies, text
    base = typed_item_size(base_item(event_id, decision, decided_at, expires_at, extras))
    if base + json_bytes > MAX_DECISION_ITEM_BYTES:
        if base + typed_item_size(copies) > MAX_DECISION_ITEM_BYTES:
            why = f"item over {MAX_DECISION_ITEM_BYTES} bytes"
            return without_copies(decision, why), {}, "{}"
        if json_bytes > MAX_JOURNAL_ROW_BYTES - 1024:
            why = f"journal row over {MAX_JOURNAL_ROW_BYTES} bytes"
            return without_copies(decision, why), {}, "{}"
    return decision, copies, text


def bounded_decision(
    event_id: str,
    decision: Decision,
    decided_at: str,
    request: IntakeRecord | Mapping[str, Any] | None,
    expires_at: int | None = None,
) -> tuple[Decision, dict[str, Any]]:
    """The decision and its copied fields (typed), fixed now; bounded whatever the input.

    Copied fields that DynamoDB would refuse, or that would make the decision item larger
    than ``MAX_DECISION_ITEM_BYTES`` (or its journal row than ``MAX_JOURNAL_ROW_BYTES``),
    are dropped, and the decision's ``detail`` says so.
    """
    decision, copies, _ = bounded_copies(event_id, decision, decided_at, request, expires_at)
    return decision, copies


def decision_item(
    event_id: str,
    decision: Decision,
    decided_at: str,
    request: IntakeRecord | Mapping[str, Any] | None,
    expires_at: int | None = None,
) -> dict[str, Any]:
    """The decision item exactly as the contract describes it (typed for the client),
    bounded as ``bounded_decision`` says."""
    decision, copies = bounded_decision(event_id, decision, decided_at, request, expires_at)
    return {**base_item(event_id, decision, decided_at, expires_at), **copies}


# -- a commit ----------------------------------------------------------------------------


def outcome_of(
    before: Event,
    status_counts: Mapping[str, int] | None,
    step: Step,
    decided: Mapping[str, Answered],
    counts: Mapping[str, int],
    requested: Mapping[str, str],
) -> Outcome:
    """The commit of ``step``, taken from ``before``: ``decided`` holds the item of every
    signup it moved that was decided before (``touched_without_state`` says which to read),
    ``counts`` the requests answered per signup (``intake.engine_commands``), ``requested`` the
    raw request text of each request record (by sequence number) for a refusal's answer."""
    by_signup: dict[str, list[Transition]] = {}
    for t in step.transitions:
        by_signup.setdefault(t.signup_id, []).append(t)
    decisions: list[Decision] = []
    extras: list[dict[str, Any] | None] = []
    updates: list[ItemUpdate] = []
    for sid, moves in by_signup.items():
        old = decided.get(sid)
        state = old.state if old is not None else None
        for t in moves:
            state = advance(state, t)
        assert state is not None
        applied = [t for t in moves if not t.refused]
        refusals = [t for t in moves if t.refused]
        answered = counts.get(sid)
        if old is None:
            if not applied:
                continue  # a refusal of a signup nobody decided: it has no item to carry it
            extra: dict[str, Any] = {}
            if state.hold_expires_at is not None and state.status == Status.HELD:
                extra[Attr.HOLD_EXPIRES_AT] = iso_of_ms(state.hold_expires_at)
            if state.waitlist_position is not None:
                extra[Attr.WAITLIST_POSITION] = state.waitlist_position
            if applied[0].from_status != Status.PENDING:
                # moved by the engine, its item gone (deleted by hand, or by a retention
                # TTL): written again with the moves known, the first read off them
                extra[Attr.HISTORY] = [_entry(t) for t in applied]
            elif len(applied) > 1:  # moved on in the commit that decided it
                extra[Attr.HISTORY] = [_entry(t) for t in applied[1:]]
            if answered:
                extra[Attr.REQUEST_COUNT] = answered
            if refusals:
                extra[Attr.LAST_REFUSAL] = _refusal(
                    refusals[-1], _requested(refusals[-1], requested)
                )
            first = applied[0]
            decisions.append(
                Decision(
                    signup_id=sid,
                    sequence_number=first.sequence_number,
                    status=state.status,
                    seats=state.seats,
                    reason=state.reason if state.status == Status.REJECTED else None,
                    position=state.position,
                    detail=state.detail,
                )
            )
            extras.append(to_item(extra) if extra else None)
            continue
        sets: dict[str, Any] = {}
        remove: list[str] = []
        if applied:
            sets[Attr.STATUS] = state.status
            sets[Attr.HISTORY] = _stored_history(old.item) + [_entry(t) for t in applied]
            if state.position is not None:
                sets[Attr.POSITION] = state.position
            if state.status == Status.HELD and state.hold_expires_at is not None:
                sets[Attr.HOLD_EXPIRES_AT] = iso_of_ms(state.hold_expires_at)
            elif Attr.HOLD_EXPIRES_AT in old.item:
                remove.append(Attr.HOLD_EXPIRES_AT)
            if state.status == Status.REJECTED and state.reason:
                sets[Attr.REASON] = state.reason
        new_count = answered if answered is not None and answered > old.request_count else None
        if new_count is not None:
            sets[Attr.REQUEST_COUNT] = new_count
        if refusals:
            sets[Attr.LAST_REFUSAL] = _refusal(refusals[-1], _requested(refusals[-1], requested))
        if not sets:
            continue
        updates.append(
            ItemUpdate(
                signup_id=sid,
                from_status=old.state.status,
                set=to_item(sets),
                remove=tuple(remove),
                request_count=new_count,
            )
        )
    # requests answered by records that moved nothing (a tick cannot answer one): none.
    after = step.event
    assert after is not None
    # A long lineup is the store's to page (``SignupStore.commit``), from ``state``.
    long = len(after.holds) + len(after.waiting) > MAX_ENCODED_ENTRIES
    lineup = None if long else encode_lineup(after.holds, after.waiting)
    due = after.holds[0] if after.holds else None
    next_counts = _next_counts(status_counts, before, step.transitions)
    # ``state`` stays the one decided from: a close is the organizer's write, never the
    # commit's (the engine only finds the event CLOSED).
    state = replace(after, state=before.state)
    return Outcome(
        decisions=tuple(decisions),
        state=state,
        extras=tuple(extras),
        updates=tuple(updates),
        lifecycle={
            Attr.LINEUP: lineup,
            Attr.LINEUP_PAGES: long,
            Attr.STATUS_COUNTS: next_counts,
            Attr.HOLD_DUE_AT: due.expires_at if due else None,
            Attr.HOLD_DUE_SIGNUP: due.signup_id if due else None,
        },
    )


def _entry(t: Transition) -> dict[str, Any]:
    entry: dict[str, Any] = {
        HistoryKey.FROM: t.from_status,
        HistoryKey.TO: t.to_status,
        HistoryKey.AT: iso_of_ms(t.at),
        HistoryKey.SEQUENCE_NUMBER: t.sequence_number,
        HistoryKey.CAUSE: t.cause,
    }
    if t.to_status == Status.REJECTED and t.reason:
        entry[HistoryKey.REASON] = t.reason
    return entry


def _refusal(t: Transition, request: str) -> dict[str, Any]:
    assert t.reason is not None
    return _answer(request, t.reason, t.from_status, t.at, t.sequence_number)


def _answer(
    request: str, reason: str, status: str, at: int, sequence_number: str
) -> dict[str, Any]:
    """A decision item's ``last_refusal``: what was asked, why not, of which status."""
    return {
        "request": request,
        "reason": reason,
        "status": status,
        "at": iso_of_ms(at),
        "sequence_number": sequence_number,
    }


def _requested(t: Transition, kinds: Mapping[str, str]) -> str:
    """What the refused record asked, as its producer wrote it ("" when it named nothing:
    a counter without a request)."""
    return kinds.get(t.sequence_number, "")


def without_void(
    event: Event, counts: Mapping[str, int] | None, voids: Iterable[Decision]
) -> tuple[Event, dict[str, int] | None]:
    """The event, and its signups per status, as the commit that made ``voids`` leaves
    them, less what it counted for them: first decisions that never took effect (their
    signups' items hold another first decision, ``SignupStore.materialize``). A void
    decision's seats come back if it holds them (HELD, ACCEPTED), its own place in the
    lineup goes (HELD: the hold of its position; WAITLISTED: the place of its record; never
    the place of the signup's real decision, which may be in the lineup too), and so does
    its count; the position it took stays taken (a gap in the positions). Only exact on the
    event as that commit left it: the caller checks that nothing was committed since."""
    taken = event.taken
    holds, waiting = event.holds, event.waiting
    out = {k: int(v) for k, v in counts.items()} if counts is not None else None
    for d in voids:
        if d.status in (Status.HELD, Status.ACCEPTED):
            taken -= d.seats
        holds = tuple(h for h in holds if (h.signup_id, h.position) != (d.signup_id, d.position))
        waiting = tuple(
            w for w in waiting if (w.signup_id, w.arrival) != (d.signup_id, d.sequence_number)
        )
        if out is not None and out.get(d.status, 0) > 0:
            out[d.status] -= 1
    return replace(event, taken=max(0, taken), holds=holds, waiting=waiting), out


def _next_counts(
    counts: Mapping[str, int] | None, before: Event, transitions: Iterable[Transition]
) -> dict[str, int]:
    """Signups per status after ``transitions``. An event decided before the lifecycle
    was wired in has no counts: its acceptances are known (``accepted``, none of them ever
    cancelled), its rejections are not, and are counted from here on."""
    out = {k: int(v) for k, v in counts.items()} if counts is not None else {}
    if counts is None and before.accepted:
        out[Status.ACCEPTED] = before.accepted
    for t in transitions:
        if t.refused:
            continue
        out[t.to_status] = out.get(t.to_status, 0) + 1
        if t.from_status != Status.PENDING:
            out[t.from_status] = max(0, out.get(t.from_status, 0) - 1)
    return {k: v for k, v in sorted(out.items()) if v}


def touched_without_state(step: Step, decided: Mapping[str, Answered]) -> list[str]:
    """Signups the step moved by itself (an expiry, a promotion, a close) whose items the
    processor has not read: their changes need them."""
    out: dict[str, None] = {}
    for t in step.transitions:
        if t.signup_id not in decided and t.from_status != Status.PENDING:
            out.setdefault(t.signup_id, None)
    return [sid for sid in out if sid not in _first_decided(step.transitions)]


def _first_decided(transitions: Iterable[Transition]) -> set[str]:
    return {t.signup_id for t in transitions if t.from_status == Status.PENDING and not t.refused}


# -- an event with no event item ---------------------------------------------------------


def decisions_without_event(
    chunk: Sequence[IntakeRecord], items: Mapping[str, Mapping[str, Any]], now: int
) -> tuple[Decision, ...]:
    """The first decisions of the signups of an event with no event item, as the engine
    makes them (``lifecycle.step`` with no event: each rejected ``unknown_event``, or
    ``invalid_request``). ``items`` are the decision items of the chunk's signups that have
    one: those are decided already, and get nothing new; neither do wake-ups."""
    signups = {sid: signup_state(item).state for sid, item in items.items()}
    requests = [signup_command(record) for record in chunk if not record.tick]
    return tuple(
        Decision(
            signup_id=t.signup_id,
            sequence_number=t.sequence_number,
            status=t.to_status,
            seats=t.seats,
            reason=t.reason,
            position=t.position,
            detail=t.detail,
        )
        for t in step(None, signups, requests, now).transitions
        if t.from_status == Status.PENDING and not t.refused
    )


def refusals_without_event(
    chunk: Sequence[IntakeRecord], items: Mapping[str, Mapping[str, Any]], now: int
) -> tuple[ItemUpdate, ...]:
    """The answers to requests on signups of an event with no event item (each rejected
    before, ``unknown_event`` or ``invalid_request``): refused, as the engine refuses a
    request of a REJECTED signup, with the item's ``request_count`` moved to the last one."""
    answers: dict[str, ItemUpdate] = {}
    for record in chunk:
        item = items.get(record.signup_id)
        count = record.request_count
        if item is None or count is None:
            continue
        earlier = answers.get(record.signup_id)
        answered = earlier.request_count if earlier else int(item.get(Attr.REQUEST_COUNT, 0))
        if count <= (answered or 0):
            continue
        status = str(item.get(Attr.STATUS, Status.REJECTED))
        valid = record.request in RequestKind.ALL
        refusal = _answer(
            record.request if record.request is not None else "",
            Reason.TRANSITION_NOT_ALLOWED if valid else Reason.INVALID_REQUEST,
            status,
            now,
            record.sequence_number,
        )
        answers[record.signup_id] = ItemUpdate(
            signup_id=record.signup_id,
            from_status=status,
            set=to_item({Attr.REQUEST_COUNT: count, Attr.LAST_REFUSAL: refusal}),
            request_count=count,
        )
    return tuple(answers.values())


# -- a change to an item decided before --------------------------------------------------


def update_call(table: str, event_id: str, update: ItemUpdate) -> dict[str, Any]:
    """A journal's change to an item decided before, as one conditional ``UpdateItem``:
    applied only while the item's status is the one it was decided from (and its answered
    requests below the change's)."""
    names = {"#status": Attr.STATUS}
    values: dict[str, Any] = {":from": {"S": update.from_status}}
    sets = []
    for i, (name, value) in enumerate(sorted(update.set.items())):
        names[f"#s{i}"] = name
        values[f":s{i}"] = value
        sets.append(f"#s{i} = :s{i}")
    removes = []
    for i, name in enumerate(update.remove):
        names[f"#r{i}"] = name
        removes.append(f"#r{i}")
    expression = "SET " + ", ".join(sets) if sets else ""
    if removes:
        expression += " REMOVE " + ", ".join(removes)
    condition = "#status = :from"
    if update.request_count is not None:
        names["#rc"] = Attr.REQUEST_COUNT
        values[":rc"] = {"N": number_text(update.request_count)}
        condition += " AND (attribute_not_exists(#rc) OR #rc < :rc)"
    return {
        "op": "update_item",
        "TableName": table,
        "Key": signup_key(event_id, update.signup_id),
        "UpdateExpression": expression.strip(),
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }

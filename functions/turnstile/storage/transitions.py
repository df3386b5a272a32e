"""Between the stream and the lifecycle engine: what the processor feeds ``lifecycle.step``
and how its answer becomes a commit. Pure, no I/O.

* ``signup_state``: a decision item (plain values) as the engine's ``SignupState``, with
  the requests it has answered (``Attr.REQUEST_COUNT``).
* ``engine_requests``: a chunk of intake records as the engine's requests. A record of a
  signup not decided yet is its signup (its first decision); a record whose request
  counter is above the answered ones carries a new request (``confirm``, ``cancel``, or
  anything else, refused ``invalid_request``); any other is a tick: a re-emission, a
  redelivery, a record of nothing new.
* ``outcome_of``: the engine's step as an ``Outcome`` the store commits: first decisions
  (whole items, with their lifecycle attributes), changes to items decided before (each
  conditioned on the status it was decided from), and the event item's lifecycle state.
* ``history_of``: a decision item's transitions (it stores those after its first
  decision; the first is read off the item).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from turnstile.base.clock import parse_timestamp, utc_now
from turnstile.base.contract import (
    MAX_HOLD_SECONDS,
    MAX_LINEUP_ENTRIES,
    Attr,
    HistoryKey,
    Reason,
    RequestKind,
    Status,
)
from turnstile.engine.domain import (
    MAX_LOGGED_REQUESTS,
    Decision,
    EventSnapshot,
    ItemUpdate,
    Outcome,
    SignupRequest,
)
from turnstile.engine.lifecycle import (
    Cause,
    Kind,
    LifecycleEvent,
    Request,
    SignupState,
    Step,
    Transition,
    advance,
    step,
)
from turnstile.engine.lineup import decode_lineup, encode_lineup
from turnstile.storage.dynamo import to_item

__all__ = [
    "Answered",
    "decisions_without_event",
    "engine_requests",
    "history_of",
    "iso_of_ms",
    "lifecycle_event",
    "ms_of",
    "outcome_of",
    "refusals_without_event",
    "signup_state",
    "touched_without_state",
]


def ms_of(timestamp: str) -> int:
    """Epoch milliseconds of one of turnstile's own timestamps (``clock.utc_now``)."""
    parsed = parse_timestamp(timestamp)
    if parsed is None:
        raise ValueError(f"not a timestamp: {timestamp!r}")
    return int(parsed.timestamp() * 1000)


def iso_of_ms(ms: int) -> str:
    return utc_now(datetime.fromtimestamp(ms / 1000, UTC))


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Answered:
    """A decided signup as the processor read it: the engine's state, the requests it has
    answered, and its item (plain values)."""

    state: SignupState
    request_count: int
    item: Mapping[str, Any]


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


def lifecycle_event(
    snapshot: EventSnapshot,
    *,
    waitlist: int = 0,
    hold_seconds: int = 0,
    max_seats: int | None = None,
    lineup: Any = None,
) -> LifecycleEvent:
    """The engine's view of an event item: its snapshot, options and stored lineup.

    Options an organizer wrote by hand past the API's bounds are read within them (a
    waitlist of at most ``MAX_LINEUP_ENTRIES``, holds of at most ``MAX_HOLD_SECONDS``):
    the item is inside the trust boundary, but no option may make deciding fail."""
    holds, waiting = decode_lineup(lineup)
    waitlist = min(max(waitlist, 0), MAX_LINEUP_ENTRIES)
    hold_seconds = min(max(hold_seconds, 0), MAX_HOLD_SECONDS)
    return replace(
        LifecycleEvent.from_snapshot(
            snapshot, waitlist=waitlist, hold_seconds=hold_seconds, max_seats=max_seats
        ),
        holds=holds,
        waiting=waiting,
    )


def engine_requests(
    chunk: Sequence[SignupRequest], decided: Mapping[str, Answered]
) -> tuple[list[Request], dict[str, int]]:
    """The engine's requests for ``chunk`` (in order), and, per signup, the request count
    its item will have answered once they are applied."""
    requests: list[Request] = []
    counts = {sid: a.request_count for sid, a in decided.items()}
    seen: set[str] = set()
    for record in chunk:
        sid = record.signup_id
        if record.tick:
            requests.append(Request.tick(record.sequence_number))
            continue
        if sid not in decided and sid not in seen:
            seen.add(sid)
            requests.append(Request.of_signup(record))
            counts[sid] = 0  # a request this record carries too is answered later
            continue
        count = record.request_count
        if count is None or sid not in counts or count <= counts[sid]:
            # a re-emission, a redelivery, a second record of a signup decided in this
            # chunk that asks nothing new (or a counter that is no number: no request
            # can be told apart from another); it only lets time advance.
            requests.append(Request.tick(record.sequence_number))
            continue
        answered, counts[sid] = counts[sid], count
        for i, kind in enumerate(_asked(record, answered, count)):
            requests.append(_request(kind, sid, record.sequence_number, follows=i > 0))
    # A first record that also carries a request (a re-emission of a record whose signup
    # was never decided, made after the request): its signup is decided now, its request
    # when the sweeper re-emits the record again (its counter is then above the answered).
    return requests, counts


def decisions_without_event(
    chunk: Sequence[SignupRequest], items: Mapping[str, Mapping[str, Any]], now: int
) -> tuple[Decision, ...]:
    """The first decisions of the signups of an event with no event item, as the engine
    makes them (``lifecycle.step`` with no event: each rejected ``unknown_event``, or
    ``invalid_request``). ``items`` are the decision items of the chunk's signups that have
    one: those are decided already, and get nothing new; neither do wake-ups."""
    signups = {sid: signup_state(item).state for sid, item in items.items()}
    requests = [Request.of_signup(record) for record in chunk if not record.tick]
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
    chunk: Sequence[SignupRequest], items: Mapping[str, Mapping[str, Any]], now: int
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


def _asked(record: SignupRequest, answered: int, count: int) -> list[str | None]:
    """The requests a record asks that are not answered yet, in order: those of its log
    past ``answered`` (a record recovered from intake after its stream records were lost
    carries several), or, with no log (or a log that does not reach its count), its
    latest request alone."""
    log = record.requests
    if log is not None and len(log) >= count and count - answered <= MAX_LOGGED_REQUESTS:
        return list(log[answered:count])
    return [record.request]


def _request(kind: str | None, signup_id: str, sequence_number: str, follows: bool) -> Request:
    if kind == RequestKind.CONFIRM:
        return Request(Kind.CONFIRM, sequence_number, signup_id, follows=follows)
    if kind == RequestKind.CANCEL:
        return Request(Kind.CANCEL, sequence_number, signup_id, follows=follows)
    return Request(
        Kind.CONFIRM,
        sequence_number,
        signup_id,
        problem=f"request must be one of {', '.join(RequestKind.ALL)}, with a whole request_count",
        follows=follows,
    )


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


def outcome_of(
    event: LifecycleEvent,
    before: EventSnapshot,
    status_counts: Mapping[str, int] | None,
    step: Step,
    decided: Mapping[str, Answered],
    counts: Mapping[str, int],
    requested: Mapping[str, str],
) -> Outcome:
    """The commit of ``step``: ``decided`` holds the item of every signup it moved that was
    decided before (``touched_without_state`` says which to read), ``counts`` the requests
    answered per signup (``engine_requests``), ``requested`` the raw request text of each
    request record (by sequence number) for a refusal's answer."""
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
    lineup = encode_lineup(after.holds, after.waiting)
    due = after.holds[0] if after.holds else None
    next_counts = _next_counts(status_counts, before, step.transitions)
    # ``state`` stays the one decided from: a close is the organizer's write, never the
    # commit's (the engine only finds the event CLOSED).
    state = replace(before, taken=after.taken, accepted=after.accepted)
    return Outcome(
        decisions=tuple(decisions),
        state=state,
        extras=tuple(extras),
        updates=tuple(updates),
        lifecycle={
            Attr.LINEUP: lineup,
            Attr.STATUS_COUNTS: next_counts,
            Attr.HOLD_DUE_AT: due.expires_at if due else None,
            Attr.HOLD_DUE_SIGNUP: due.signup_id if due else None,
        },
    )


def _next_counts(
    counts: Mapping[str, int] | None, before: EventSnapshot, transitions: Iterable[Transition]
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

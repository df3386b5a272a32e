"""The lifecycle engine: holds, confirmations, cancellations and a waitlist. Pure, no I/O.

``step`` takes one event (``Event``), the current state of the signups its commands touch,
the commands in stream order (``Command``: a signup's first record, a confirm, a cancel, a
close, a tick) and the processor's clock, and returns every transition it made
(``Transition``), in order, with the event's next state. It is the one engine that
decides: the processor calls it once per chunk of an event's records, for an event that
does not exist too (each signup then rejected ``unknown_event``). With no waitlist, no
holds and nothing but signups it decides exactly as the decider it replaced (kept as the
tests' oracle, tests/oracle.py). docs/lifecycle.md states the rules.

Times are whole milliseconds since the epoch (``now``, ``hold_expires_at``); the options
``hold_seconds`` are seconds. Sequence numbers are the stream's decimal strings, compared as
integers.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace

from turnstile.base.contract import EventState, Reason, Status, shard_position
from turnstile.engine.rules import bounded

__all__ = [
    "ALLOWED_TRANSITIONS",
    "Cause",
    "Command",
    "Event",
    "Hold",
    "Kind",
    "SignupState",
    "Step",
    "Transition",
    "Waiting",
    "advance",
    "history_problems",
    "step",
]


class Kind:
    """What an intake record asks of the engine."""

    #: The first record of a signup (later ones change nothing).
    SIGNUP = "signup"
    CONFIRM = "confirm"
    CANCEL = "cancel"
    #: The event closed: no new seats, and the waitlist is rejected ``event_closed``.
    CLOSE = "close"
    #: Any other record (a re-emission, a batch with nothing new): it only lets time advance.
    TICK = "tick"

    ALL = (SIGNUP, CONFIRM, CANCEL, CLOSE, TICK)


class Cause:
    """Why a transition happened: a request of one of these kinds, or one of the two moves
    the engine makes by itself."""

    SIGNUP = Kind.SIGNUP
    CONFIRM = Kind.CONFIRM
    CANCEL = Kind.CANCEL
    CLOSE = Kind.CLOSE
    #: A hold reached ``hold_expires_at`` unconfirmed.
    EXPIRY = "expiry"
    #: Seats came back and went to a waitlisted signup.
    PROMOTION = "promotion"


#: Every move a signup may make, and no other.
ALLOWED_TRANSITIONS: frozenset[tuple[str, str]] = frozenset(
    {
        (Status.PENDING, Status.HELD),
        (Status.PENDING, Status.ACCEPTED),
        (Status.PENDING, Status.WAITLISTED),
        (Status.PENDING, Status.REJECTED),
        (Status.HELD, Status.ACCEPTED),
        (Status.HELD, Status.EXPIRED),
        (Status.HELD, Status.CANCELLED),
        (Status.ACCEPTED, Status.CANCELLED),
        (Status.WAITLISTED, Status.HELD),
        (Status.WAITLISTED, Status.ACCEPTED),
        (Status.WAITLISTED, Status.CANCELLED),
        (Status.WAITLISTED, Status.REJECTED),
    }
)

#: Statuses whose seats count in ``taken``.
SEATED = (Status.HELD, Status.ACCEPTED)


@dataclass(frozen=True)
class Hold:
    """A HELD signup's entry in the event: its seats are taken until ``expires_at``."""

    signup_id: str
    seats: int
    position: int
    expires_at: int


@dataclass(frozen=True)
class Waiting:
    """A WAITLISTED signup's entry in the event; the event keeps them in waitlist order."""

    signup_id: str
    seats: int
    #: The sequence number of the signup's first record.
    arrival: str


@dataclass(frozen=True)
class Event:
    """An event: its options and the state the engine decides from, as its event item holds
    them (``turnstile.storage.events.EventRecord`` reads it)."""

    event_id: str
    capacity: int
    #: Everything else is named (``Event("gig", 5, taken=2)``): the fields are many, and
    #: the options and the counters are all ints.
    _: KW_ONLY
    #: How many signups may wait for seats at once (0: no waitlist).
    waitlist: int = 0
    #: How long a granted signup holds its seats before it must be confirmed (0: no hold,
    #: a granted signup is ACCEPTED at once).
    hold_seconds: int = 0
    #: The most seats one signup may ask for; None: no limit but the capacity (as today).
    max_seats: int | None = None
    #: Seats of HELD and ACCEPTED signups.
    taken: int = 0
    #: Positions given out so far: every grant of seats (a hold, or an acceptance without
    #: one) takes the next; a cancellation or an expiry never gives one back.
    accepted: int = 0
    #: A shard of a sharded event (``shard`` of ``shards``) numbers its grants so that no
    #: other shard gives the same position (``contract.shard_position``); an event of its
    #: own is shard 0 of 1: positions 1, 2, 3 ...
    shard: int = 0
    shards: int = 1
    #: A shard's: the whole event's capacity, the most seats one of its signups could ever
    #: be given (its ``capacity`` is its quota, the seats dealt to it so far); None: the
    #: event's own ``capacity``. Not stored: the processor sets it from the pool it read.
    ceiling: int | None = None
    state: str = EventState.OPEN
    #: The store's optimistic lock; the engine leaves it as it is.
    version: int = 0
    #: The current holds, by (expires_at, position).
    holds: tuple[Hold, ...] = ()
    #: The waitlist, in waitlist order (the order the signups joined it).
    waiting: tuple[Waiting, ...] = ()

    @property
    def remaining(self) -> int:
        return self.capacity - self.taken


@dataclass(frozen=True)
class Command:
    """What one record of the event asks of the engine, in stream order: a signup's first
    decision, a confirm or a cancel (a producer's *request*), a close, or a tick (time
    passes: nothing but the expiry of lapsed holds)."""

    kind: str
    sequence_number: str
    #: None for a close or a tick.
    signup_id: str | None = None
    #: A signup's seats (0 when invalid); unused by the other kinds.
    seats: int = 1
    #: Why a signup breaks the contract (it is then rejected ``invalid_request``).
    problem: str | None = None
    #: A remark kept in the decision's detail (an intake record's ``note``).
    note: str | None = None
    #: A later request carried by the same record as the one before it for this signup
    #: (a record recovered from intake answers every request of its log): its sequence
    #: number equals the signup's last one and is no replay.
    follows: bool = False

    @classmethod
    def confirm(cls, signup_id: str, sequence_number: str) -> Command:
        return cls(Kind.CONFIRM, sequence_number, signup_id)

    @classmethod
    def cancel(cls, signup_id: str, sequence_number: str) -> Command:
        return cls(Kind.CANCEL, sequence_number, signup_id)

    @classmethod
    def close(cls, sequence_number: str) -> Command:
        return cls(Kind.CLOSE, sequence_number)

    @classmethod
    def tick(cls, sequence_number: str) -> Command:
        return cls(Kind.TICK, sequence_number)


@dataclass(frozen=True)
class Transition:
    """One move of one signup, or one refused request (``refused``: then ``from_status`` ==
    ``to_status`` is the signup's current status and ``reason`` says why)."""

    signup_id: str
    from_status: str
    to_status: str
    #: ``now`` of the step that made it.
    at: int
    #: The record that caused it (for an expiry, the first record of its step).
    sequence_number: str
    cause: str
    seats: int
    reason: str | None = None
    position: int | None = None
    waitlist_position: int | None = None
    hold_expires_at: int | None = None
    detail: str | None = None
    refused: bool = False

    @property
    def current_status(self) -> str:
        """The signup's status once this is applied (for a refusal, the unchanged one)."""
        return self.to_status


@dataclass(frozen=True)
class SignupState:
    """A signup as its last applied record left it."""

    signup_id: str
    status: str
    seats: int
    #: The greatest sequence number of the signup's own records the engine has seen (a
    #: signup, a confirm, a cancel; applied or refused): records up to it are replays.
    last_sequence_number: str
    #: The sequence number of the signup's first record (None: none seen yet).
    arrival: str | None = None
    position: int | None = None
    waitlist_position: int | None = None
    hold_expires_at: int | None = None
    reason: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class Step:
    """What ``step`` returns."""

    transitions: tuple[Transition, ...]
    #: The event's next state (None for an unknown event); ``version`` unchanged.
    event: Event | None
    #: The next state of every signup given to ``step`` and of every signup it first saw.
    #: A signup moved only by the engine itself (an expiry, a promotion, a close) and not
    #: given is not here: ``advance`` applies its transitions to its stored state.
    signups: Mapping[str, SignupState] = field(default_factory=dict)
    #: More holds were due than the step's ``max_lapses``: it lapsed that many (the
    #: earliest) and applied nothing else, no command and no promotion, so that every
    #: command still finds every due hold lapsed; the caller commits it and steps again.
    partial: bool = False
    #: A cancel freed more seats, or a close rejected more waiting signups, than
    #: ``max_lapses`` moves: the step made that many and stopped after that command's
    #: record (its sequence number here), leaving the records after it unapplied; the
    #: caller commits what it applied, and the next step starts with the moves left
    #: (promotions, a closed event's rejections), bounded alike, before any later record.
    stopped_at: str | None = None


_OWN_RECORDS = (Cause.SIGNUP, Cause.CONFIRM, Cause.CANCEL)


def advance(state: SignupState | None, transition: Transition) -> SignupState:
    """A signup's state after ``transition`` (its first decision when ``state`` is None).

    A transition caused by the signup's own record (or a refusal of one) moves
    ``last_sequence_number`` to that record; an expiry, promotion or close does not.
    """
    own = transition.cause in _OWN_RECORDS
    if state is None:
        state = SignupState(
            signup_id=transition.signup_id,
            status=Status.PENDING,
            seats=0,
            last_sequence_number=transition.sequence_number,
        )
    if own and _seq(transition.sequence_number) > _seq(state.last_sequence_number):
        state = replace(state, last_sequence_number=transition.sequence_number)
    if transition.refused:
        return state
    changes: dict[str, object] = {"status": transition.to_status, "seats": transition.seats}
    if transition.from_status == Status.PENDING:
        changes["arrival"] = transition.sequence_number
    for name in ("position", "waitlist_position", "hold_expires_at", "reason", "detail"):
        value = getattr(transition, name)
        if value is not None:
            changes[name] = value
    return replace(state, **changes)  # type: ignore[arg-type]


def _seq(sequence_number: str) -> int:
    return int(sequence_number)


def _hold_order(hold: Hold) -> tuple[int, int]:
    return hold.expires_at, hold.position


def _with_hold(holds: tuple[Hold, ...], hold: Hold) -> tuple[Hold, ...]:
    """``holds`` (in (expires_at, position) order) with ``hold`` in its place. A new hold
    lapses last but for a clock that went back or a shorter ``hold_seconds``: appended,
    without sorting the whole lineup again on every grant."""
    if not holds or _hold_order(holds[-1]) <= _hold_order(hold):
        return (*holds, hold)
    at = bisect.bisect_right(holds, _hold_order(hold), key=_hold_order)
    return (*holds[:at], hold, *holds[at:])


def _without_waiting(waiting: tuple[Waiting, ...], state: SignupState) -> tuple[Waiting, ...]:
    """``waiting`` less the signup, found where its arrival puts it (the waitlist is in
    arrival order), walking the whole waitlist only when it is not there."""
    if state.arrival is not None and state.arrival.isdigit():
        at = bisect.bisect_left(waiting, int(state.arrival), key=lambda w: int(w.arrival))
        if at < len(waiting) and waiting[at].signup_id == state.signup_id:
            return waiting[:at] + waiting[at + 1 :]
    return tuple(w for w in waiting if w.signup_id != state.signup_id)


def _without_hold(holds: tuple[Hold, ...], state: SignupState) -> tuple[Hold, ...]:
    """``holds`` less the signup's hold, found where its expiry and position put it (the
    whole lineup is walked only when it is not there)."""
    if state.hold_expires_at is not None and state.position is not None:
        at = bisect.bisect_left(holds, (state.hold_expires_at, state.position), key=_hold_order)
        if at < len(holds) and holds[at].signup_id == state.signup_id:
            return holds[:at] + holds[at + 1 :]
    return tuple(h for h in holds if h.signup_id != state.signup_id)


class _Run:
    """One step's working state; every change goes through ``_move``.

    Holds granted and signups put on the waitlist in order (the common case: each lapses
    or arrived after all the others) are kept in lists until something reads the lineup
    (``event``): a step of 100 signups beside 50,000 holds copies the lineup once, not once
    a signup. What reads only the counters reads ``_event``."""

    def __init__(self, event: Event | None, signups: Mapping[str, SignupState], now: int) -> None:
        self._event = event
        self._new_holds: list[Hold] = []
        self._new_waiting: list[Waiting] = []
        self.signups = dict(signups)
        self.now = now
        self.transitions: list[Transition] = []

    @property
    def event(self) -> Event | None:
        """The event as the step has made it so far, its lineup whole."""
        if self._new_holds or self._new_waiting:
            assert self._event is not None
            self._event = replace(
                self._event,
                holds=(*self._event.holds, *self._new_holds),
                waiting=(*self._event.waiting, *self._new_waiting),
            )
            self._new_holds.clear()
            self._new_waiting.clear()
        return self._event

    @event.setter
    def event(self, value: Event | None) -> None:
        # a value made from ``event`` (whole): nothing may be waiting to join it
        assert not self._new_holds and not self._new_waiting
        self._event = value

    # -- recording ---------------------------------------------------------------------

    def _emit(self, transition: Transition) -> None:
        self.transitions.append(transition)
        known = self.signups.get(transition.signup_id)
        if known is not None or transition.cause in _OWN_RECORDS:
            self.signups[transition.signup_id] = advance(known, transition)

    def _move(
        self,
        signup_id: str,
        from_status: str,
        to_status: str,
        seq: str,
        cause: str,
        seats: int,
        **fields: object,
    ) -> None:
        self._emit(
            Transition(
                signup_id=signup_id,
                from_status=from_status,
                to_status=to_status,
                at=self.now,
                sequence_number=seq,
                cause=cause,
                seats=seats,
                **fields,  # type: ignore[arg-type]
            )
        )

    def _refuse(self, command: Command, state: SignupState | None, reason: str) -> None:
        status = state.status if state is not None else Status.PENDING
        seats = state.seats if state is not None else 0
        assert command.signup_id is not None
        self._emit(
            Transition(
                signup_id=command.signup_id,
                from_status=status,
                to_status=status,
                at=self.now,
                sequence_number=command.sequence_number,
                cause=command.kind,
                seats=seats,
                reason=reason,
                refused=True,
            )
        )

    # -- the moves -----------------------------------------------------------------------

    def _grant(
        self, signup_id: str, seats: int, from_status: str, seq: str, cause: str, **fields: object
    ) -> None:
        """Seats for a signup that fits: HELD when the event holds, else ACCEPTED."""
        event = self._event
        assert event is not None
        given = event.accepted + 1
        position = shard_position(given, event.shard, event.shards)
        if event.hold_seconds > 0:
            expires_at = self.now + event.hold_seconds * 1000
            hold = Hold(signup_id, seats, position, expires_at)
            last = self._new_holds[-1] if self._new_holds else None
            if last is None and event.holds:
                last = event.holds[-1]
            if last is None or _hold_order(last) <= _hold_order(hold):
                self._new_holds.append(hold)  # lapses last: joins the lineup's end
                self._event = replace(event, taken=event.taken + seats, accepted=given)
            else:
                event = self.event
                assert event is not None
                holds = _with_hold(event.holds, hold)
                self.event = replace(event, taken=event.taken + seats, accepted=given, holds=holds)
            self._move(
                signup_id,
                from_status,
                Status.HELD,
                seq,
                cause,
                seats,
                position=position,
                hold_expires_at=expires_at,
                **fields,
            )
        else:
            self._event = replace(event, taken=event.taken + seats, accepted=given)
            self._move(
                signup_id,
                from_status,
                Status.ACCEPTED,
                seq,
                cause,
                seats,
                position=position,
                **fields,
            )

    def expire(self, seq: str, limit: int | None = None) -> bool:
        """Every hold due at ``now`` lapses, earliest first; its seats come back. At most
        ``limit`` of them (None: all): whether some due ones are left."""
        event = self.event
        if event is None:
            return False
        # holds are in (expires_at, position) order: the due ones come first
        count = bisect.bisect_right(event.holds, self.now, key=lambda h: h.expires_at)
        if not count:
            return False
        left = limit is not None and count > limit
        if left:
            count = max(limit or 0, 1)
        due = event.holds[:count]
        self.event = replace(
            event,
            taken=event.taken - sum(h.seats for h in due),
            holds=event.holds[count:],
        )
        for h in due:
            self._move(
                h.signup_id,
                Status.HELD,
                Status.EXPIRED,
                seq,
                Cause.EXPIRY,
                h.seats,
                position=h.position,
                hold_expires_at=h.expires_at,
            )
        return left

    def promote(self, seq: str, limit: int | None = None) -> bool:
        """Free seats go down the waitlist in order: each waiting signup that fits gets
        them; one that does not keeps its place. At most ``limit`` of them (None: all):
        whether it stopped there with seats and signups left."""
        event = self.event
        if event is None or event.state != EventState.OPEN or not event.waiting:
            return False
        if event.remaining <= 0:
            return False  # no seat for anyone (every waiting signup asks for one at least)
        kept: list[Waiting] = []
        promoted = 0
        stopped = False
        for at, w in enumerate(event.waiting):
            assert self._event is not None
            if self._event.remaining <= 0:  # no seat left for anyone after: all keep theirs
                kept.extend(event.waiting[at:])
                break
            if limit is not None and promoted >= max(limit, 1):
                kept.extend(event.waiting[at:])  # the rest in the steps that follow
                stopped = True
                break
            if w.seats <= self._event.remaining:
                self._grant(w.signup_id, w.seats, Status.WAITLISTED, seq, Cause.PROMOTION)
                promoted += 1
            else:
                kept.append(w)
        assert self.event is not None
        self.event = replace(self.event, waiting=tuple(kept))
        return stopped

    def close(self, seq: str, limit: int | None = None) -> bool:
        """The event is closed: everyone waiting is rejected ``event_closed``, the first
        ``limit`` of them at most (None: all): whether some are left waiting."""
        event = self.event
        if event is None:
            return False
        count = len(event.waiting) if limit is None else min(len(event.waiting), max(limit, 1))
        rejected = event.waiting[:count]
        self.event = replace(event, state=EventState.CLOSED, waiting=event.waiting[count:])
        for w in rejected:
            self._move(
                w.signup_id,
                Status.WAITLISTED,
                Status.REJECTED,
                seq,
                Cause.CLOSE,
                w.seats,
                reason=Reason.EVENT_CLOSED,
            )
        return count < len(event.waiting)

    def first_decision(self, command: Command) -> None:
        """A signup's first record: rejected, granted seats, or put on the waitlist."""
        sid, seq, seats = command.signup_id, command.sequence_number, command.seats
        assert sid is not None
        event = self._event  # its counters; the waitlist's new entries are apart
        reason = None
        detail = command.note
        if command.problem:
            reason = Reason.INVALID_REQUEST
            detail = bounded("; ".join(p for p in (command.problem, command.note) if p))
        elif event is None:
            reason = Reason.UNKNOWN_EVENT
        elif event.state != EventState.OPEN:
            reason = Reason.EVENT_CLOSED
        elif event.max_seats is not None and seats > event.max_seats:
            reason = Reason.SEATS_ABOVE_MAX
        elif seats <= event.remaining:
            self._grant(sid, seats, Status.PENDING, seq, Cause.SIGNUP, detail=detail)
            return
        elif seats <= (event.capacity if event.ceiling is None else event.ceiling) and (
            len(event.waiting) + len(self._new_waiting) < event.waitlist
        ):
            self._new_waiting.append(Waiting(sid, seats, seq))  # arrived last: the end
            self._move(
                sid,
                Status.PENDING,
                Status.WAITLISTED,
                seq,
                Cause.SIGNUP,
                seats,
                waitlist_position=len(event.waiting) + len(self._new_waiting),
                detail=detail,
            )
            return
        else:
            reason = Reason.CAPACITY_FULL
        self._move(
            sid,
            Status.PENDING,
            Status.REJECTED,
            seq,
            Cause.SIGNUP,
            seats,
            reason=reason,
            detail=detail,
        )

    def confirm(self, command: Command, state: SignupState | None) -> None:
        """HELD → ACCEPTED. A hold due at ``now`` has lapsed already (expiry runs first)."""
        if state is None or state.status != Status.HELD:
            lapsed = state is not None and state.status == Status.EXPIRED
            self._refuse(
                command, state, Reason.HOLD_EXPIRED if lapsed else Reason.TRANSITION_NOT_ALLOWED
            )
            return
        event = self.event
        assert event is not None
        self.event = replace(event, holds=_without_hold(event.holds, state))
        self._move(
            state.signup_id,
            Status.HELD,
            Status.ACCEPTED,
            command.sequence_number,
            Cause.CONFIRM,
            state.seats,
            position=state.position,
        )

    def cancel(self, command: Command, state: SignupState | None, limit: int | None = None) -> bool:
        """HELD, ACCEPTED or WAITLISTED → CANCELLED; freed seats go down the waitlist, to
        ``limit`` signups at most (None: all): whether it stopped there with more to move."""
        status = state.status if state is not None else Status.PENDING
        if state is None or status not in (Status.HELD, Status.ACCEPTED, Status.WAITLISTED):
            lapsed = status == Status.EXPIRED
            self._refuse(
                command, state, Reason.HOLD_EXPIRED if lapsed else Reason.TRANSITION_NOT_ALLOWED
            )
            return False
        event = self.event
        assert event is not None
        sid, seq = state.signup_id, command.sequence_number
        if status == Status.WAITLISTED:
            self.event = replace(event, waiting=_without_waiting(event.waiting, state))
        else:
            holds = _without_hold(event.holds, state) if status == Status.HELD else event.holds
            self.event = replace(event, taken=event.taken - state.seats, holds=holds)
        self._move(
            sid, status, Status.CANCELLED, seq, Cause.CANCEL, state.seats, position=state.position
        )
        return self.promote(seq, limit)


def step(
    event: Event | None,
    signups: Mapping[str, SignupState],
    commands: Sequence[Command],
    now: int,
    max_lapses: int | None = None,
) -> Step:
    """Apply one event's records, in stream order, at the processor's time ``now`` (ms).

    ``max_lapses``: the most holds one step lapses, the most waiting signups a closed
    event's step rejects, and the most it promotes before its records (None: all). With
    more, the step makes that many of those moves, the earliest first, and nothing else
    (``Step.partial``). It bounds a cancel's promotions and a close's rejections alike:
    past it, the step stops after that record (``Step.stopped_at``), and the next step
    starts with the moves left, before any later record takes a seat.

    Rules, in order:
    - before any command: every hold with ``hold_expires_at <= now`` lapses (EXPIRED,
      earliest first); a CLOSED event's waitlist is rejected ``event_closed``; free seats
      go down the waitlist. These are attributed to the step's first record, and a step
      with no record changes nothing;
    - a record of a signup whose sequence number is not greater than the last one seen for
      it is a replay and changes nothing; so is a signup record of a signup already decided,
      a close of a closed or unknown event, and a tick;
    - a signup's first record: ``invalid_request``, ``unknown_event``, ``event_closed``,
      ``seats_above_max`` (only when ``max_seats`` is set), else it fits (HELD with
      ``hold_seconds``, else ACCEPTED, with the next position), else WAITLISTED when it
      could ever fit and the waitlist has room, else ``capacity_full``;
    - a confirm or cancel with a ``problem`` (a request the producer got wrong) is refused
      ``invalid_request``;
    - a confirm: HELD → ACCEPTED; a cancel: HELD, ACCEPTED or WAITLISTED → CANCELLED, and
      the freed seats go down the waitlist at once; anything else is refused, with the
      current status and a reason, and changes nothing;
    - a close: the event is CLOSED and its waitlist rejected ``event_closed``; holds stay
      (they may still be confirmed, cancelled or lapse).

    ``signups`` must hold the current state of every signup a command names that has one.
    """
    if not commands:
        return Step((), event, dict(signups))
    run = _Run(event, signups, now)
    first = commands[0].sequence_number
    if run.expire(first, max_lapses):
        return Step(tuple(run.transitions), run.event, run.signups, partial=True)
    closing = run.event is not None and run.event.state != EventState.OPEN and run.event.waiting
    if closing and run.close(first, max_lapses):
        return Step(tuple(run.transitions), run.event, run.signups, partial=True)
    if run.promote(first, max_lapses):
        return Step(tuple(run.transitions), run.event, run.signups, partial=True)
    stopped_at: str | None = None
    for command in commands:
        if stopped_at is not None and command.sequence_number != stopped_at:
            break  # the rest of the stopping record's commands only (its own signup's)
        if command.kind == Kind.TICK:
            continue
        if command.kind == Kind.CLOSE:
            is_open = run.event is not None and run.event.state == EventState.OPEN
            if is_open and run.close(command.sequence_number, max_lapses):
                stopped_at = command.sequence_number
            continue
        if command.kind not in Kind.ALL or command.signup_id is None:
            raise ValueError(f"not a command the engine knows: {command.kind!r}")
        state = run.signups.get(command.signup_id)
        seq = _seq(command.sequence_number)
        last = _seq(state.last_sequence_number) if state is not None else -1
        if state is not None and (seq < last or (seq == last and not command.follows)):
            continue  # a replay
        if command.kind == Kind.SIGNUP:
            if state is None or state.status == Status.PENDING:
                run.first_decision(command)
        elif command.problem:
            run._refuse(command, state, Reason.INVALID_REQUEST)
        elif command.kind == Kind.CONFIRM:
            run.confirm(command, state)
        elif run.cancel(command, state, max_lapses):
            stopped_at = command.sequence_number
    return Step(tuple(run.transitions), run.event, run.signups, stopped_at=stopped_at)


def history_problems(history: Iterable[Transition]) -> list[str]:
    """What is wrong with one signup's history of applied transitions (empty: nothing).

    A history starts at PENDING, follows ``ALLOWED_TRANSITIONS`` link by link, and so makes
    each transition at most once (the allowed moves never return to a status).
    """
    problems = []
    status = Status.PENDING
    for t in history:
        if t.refused:
            problems.append(f"a refusal in the history: {t}")
            continue
        if t.from_status != status:
            problems.append(f"{t.signup_id}: from {t.from_status}, but it was {status}")
        if (t.from_status, t.to_status) not in ALLOWED_TRANSITIONS:
            problems.append(f"{t.signup_id}: {t.from_status} -> {t.to_status} is not allowed")
        status = t.to_status
    return problems

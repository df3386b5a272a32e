"""The lifecycle engine by example: each transition, each refusal, expiry, promotion, replays;
and a property: without a waitlist, holds or requests to confirm and cancel, it decides
exactly as the oracle ``tests.oracle.decide`` (the decider it replaced). The state machine
test is test_lifecycle_machine.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.oracle import decide
from tests.unit import test_rules as rules_tests
from turnstile.base.contract import EventState, Reason, Status
from turnstile.engine.lifecycle import (
    ALLOWED_TRANSITIONS,
    Cause,
    Command,
    Event,
    Hold,
    Kind,
    SignupState,
    Step,
    Transition,
    Waiting,
    advance,
    history_problems,
    step,
)
from turnstile.storage.intake import signup_command

T0 = 1_700_000_000_000  # ms


class Book:
    """An event and every signup's state and history, advanced one step at a time."""

    def __init__(self, event: Event | None) -> None:
        self.event = event
        self.states: dict[str, SignupState] = {}
        self.history: dict[str, list[Transition]] = {}
        self.seq = 100

    def next_seq(self) -> str:
        self.seq += 1
        return str(self.seq)

    def signup(self, sid: str, seats: int = 1, problem: str | None = None) -> Command:
        return Command(Kind.SIGNUP, self.next_seq(), sid, seats, problem)

    def confirm(self, sid: str) -> Command:
        return Command.confirm(sid, self.next_seq())

    def cancel(self, sid: str) -> Command:
        return Command.cancel(sid, self.next_seq())

    def close(self) -> Command:
        return Command.close(self.next_seq())

    def tick(self) -> Command:
        return Command.tick(self.next_seq())

    def run(self, *requests: Command, now: int = T0) -> Step:
        result = step(self.event, self.states, list(requests), now)
        self.event = result.event
        self.states.update(result.signups)
        for t in result.transitions:
            if not t.refused:
                self.history.setdefault(t.signup_id, []).append(t)
        return result

    def status(self, sid: str) -> str:
        return self.states[sid].status

    def statuses(self) -> dict[str, str]:
        return {sid: s.status for sid, s in sorted(self.states.items())}


def moves(result: Step) -> list[tuple]:
    """The transitions in short: (signup, from, to, cause, reason), refusals marked."""
    return [
        (t.signup_id, t.from_status, t.to_status, t.cause, t.reason)
        + (("refused",) if t.refused else ())
        for t in result.transitions
    ]


def event(**options) -> Event:
    return Event(event_id="e1", **options)


# -- first decisions ------------------------------------------------------------------


def test_pending_to_accepted_without_holds_takes_seats_and_the_next_position():
    book = Book(event(capacity=3))
    result = book.run(book.signup("a", 2), book.signup("b", 1))
    assert moves(result) == [
        ("a", Status.PENDING, Status.ACCEPTED, Cause.SIGNUP, None),
        ("b", Status.PENDING, Status.ACCEPTED, Cause.SIGNUP, None),
    ]
    assert [t.position for t in result.transitions] == [1, 2]
    assert (book.event.taken, book.event.accepted, book.event.holds) == (3, 2, ())


def test_pending_to_held_with_hold_seconds_until_hold_expires_at():
    book = Book(event(capacity=3, hold_seconds=4))
    [t] = book.run(book.signup("a", 2), now=T0).transitions
    assert (t.to_status, t.position, t.hold_expires_at, t.at) == (Status.HELD, 1, T0 + 4000, T0)
    assert book.event.holds == (Hold("a", 2, 1, T0 + 4000),)
    assert book.event.taken == 2  # a hold takes its seats
    assert book.states["a"].hold_expires_at == T0 + 4000


def test_pending_to_waitlisted_while_the_waitlist_has_room_then_capacity_full():
    book = Book(event(capacity=1, waitlist=2))
    result = book.run(*(book.signup(s) for s in "abcd"))
    assert moves(result) == [
        ("a", Status.PENDING, Status.ACCEPTED, Cause.SIGNUP, None),
        ("b", Status.PENDING, Status.WAITLISTED, Cause.SIGNUP, None),
        ("c", Status.PENDING, Status.WAITLISTED, Cause.SIGNUP, None),
        ("d", Status.PENDING, Status.REJECTED, Cause.SIGNUP, Reason.CAPACITY_FULL),
    ]
    assert [t.waitlist_position for t in result.transitions] == [None, 1, 2, None]
    assert [w.signup_id for w in book.event.waiting] == ["b", "c"]
    assert book.event.taken == 1  # waiting takes no seats


def test_no_waitlist_means_capacity_full_as_today():
    book = Book(event(capacity=1))
    result = book.run(book.signup("a"), book.signup("b"))
    assert moves(result)[1] == (
        "b",
        Status.PENDING,
        Status.REJECTED,
        Cause.SIGNUP,
        Reason.CAPACITY_FULL,
    )
    assert book.event.waiting == ()


def test_a_signup_bigger_than_the_event_is_never_waitlisted():
    book = Book(event(capacity=2, waitlist=5))
    result = book.run(book.signup("a", 3))
    assert moves(result) == [
        ("a", Status.PENDING, Status.REJECTED, Cause.SIGNUP, Reason.CAPACITY_FULL)
    ]


@pytest.mark.parametrize(
    ("max_seats", "seats", "expected"),
    [
        (2, 3, (Status.REJECTED, Reason.SEATS_ABOVE_MAX)),
        (2, 2, (Status.ACCEPTED, None)),
        # unset: only the capacity bounds a signup, and too big is capacity_full as today
        (None, 11, (Status.REJECTED, Reason.CAPACITY_FULL)),
        # max_seats above the capacity does not make a signup fit
        (20, 11, (Status.REJECTED, Reason.CAPACITY_FULL)),
    ],
)
def test_max_seats(max_seats, seats, expected):
    book = Book(event(capacity=10, waitlist=3, max_seats=max_seats))
    [t] = book.run(book.signup("a", seats)).transitions
    assert (t.to_status, t.reason) == expected


def test_seats_above_max_is_rejected_even_with_room_on_the_waitlist():
    book = Book(event(capacity=10, taken=10, waitlist=3, max_seats=4))
    [t] = book.run(book.signup("a", 5)).transitions
    assert (t.to_status, t.reason) == (Status.REJECTED, Reason.SEATS_ABOVE_MAX)
    assert book.event.waiting == ()


def test_invalid_unknown_and_closed_as_today_and_the_rule_order():
    book = Book(None)
    result = book.run(book.signup("a"), book.signup("b", 0, problem="seats must be at least 1"))
    assert [t.reason for t in result.transitions] == [
        Reason.UNKNOWN_EVENT,
        Reason.INVALID_REQUEST,
    ]
    assert result.transitions[1].detail == "seats must be at least 1"
    assert book.event is None
    book = Book(event(capacity=5, waitlist=3, max_seats=1, state=EventState.CLOSED))
    [t] = book.run(book.signup("a", 2)).transitions  # closed comes before max_seats
    assert (t.to_status, t.reason) == (Status.REJECTED, Reason.EVENT_CLOSED)


# -- confirm, cancel, expiry ----------------------------------------------------------


def held_book(**options) -> Book:
    book = Book(event(**{"capacity": 2, "hold_seconds": 10, **options}))
    book.run(book.signup("a"), now=T0)
    return book


def test_held_to_accepted_when_confirmed_before_the_hold_lapses():
    book = held_book()
    result = book.run(book.confirm("a"), now=T0 + 9_999)
    assert moves(result) == [("a", Status.HELD, Status.ACCEPTED, Cause.CONFIRM, None)]
    assert result.transitions[0].position == 1
    assert book.event.holds == ()
    assert book.event.taken == 1  # the seats stay taken
    assert book.states["a"].position == 1


def test_held_to_expired_at_hold_expires_at_before_the_steps_requests():
    book = held_book(waitlist=1)
    # the hold lapses at exactly hold_expires_at, before the step's own record
    tick = book.tick()
    result = book.run(tick, now=T0 + 10_000)
    assert moves(result) == [("a", Status.HELD, Status.EXPIRED, Cause.EXPIRY, None)]
    [t] = result.transitions
    assert t.sequence_number == tick.sequence_number  # the record that let time advance
    assert (book.event.taken, book.event.holds) == (0, ())
    # a hold is still a hold one millisecond before
    book = held_book()
    assert book.run(book.tick(), now=T0 + 9_999).transitions == ()


def test_holds_lapse_earliest_first():
    book = Book(event(capacity=3, hold_seconds=5))
    book.run(book.signup("a"), now=T0 + 2000)
    book.run(book.signup("b"), now=T0)
    book.run(book.signup("c"), now=T0 + 1000)
    assert [h.signup_id for h in book.event.holds] == ["b", "c", "a"]
    result = book.run(book.tick(), now=T0 + 60_000)
    assert [t.signup_id for t in result.transitions] == ["b", "c", "a"]


def test_a_confirm_after_the_hold_lapsed_is_refused_with_the_current_status():
    book = held_book()
    before = book.event
    confirm = book.confirm("a")
    result = book.run(confirm, now=T0 + 10_000)
    assert moves(result) == [
        ("a", Status.HELD, Status.EXPIRED, Cause.EXPIRY, None),
        ("a", Status.EXPIRED, Status.EXPIRED, Cause.CONFIRM, Reason.HOLD_EXPIRED, "refused"),
    ]
    assert result.transitions[1].current_status == Status.EXPIRED
    assert book.event == replace(before, taken=0, holds=())  # only the expiry changed it


def test_held_to_cancelled_frees_the_seats():
    book = held_book()
    result = book.run(book.cancel("a"), now=T0 + 1)
    assert moves(result) == [("a", Status.HELD, Status.CANCELLED, Cause.CANCEL, None)]
    assert (book.event.taken, book.event.holds, book.event.accepted) == (0, (), 1)


def test_accepted_to_cancelled_frees_the_seats_and_keeps_positions_moving_on():
    book = Book(event(capacity=2))
    book.run(book.signup("a", 2))
    result = book.run(book.cancel("a"))
    assert moves(result) == [("a", Status.ACCEPTED, Status.CANCELLED, Cause.CANCEL, None)]
    assert book.event.taken == 0
    [t] = book.run(book.signup("b")).transitions
    assert t.position == 2  # a position is never given twice
    assert book.states["a"].position == 1


def test_waitlisted_to_cancelled_leaves_the_line_and_the_rest_keep_their_order():
    book = Book(event(capacity=1, waitlist=3))
    book.run(*(book.signup(s) for s in "abcd"))
    result = book.run(book.cancel("c"))
    assert moves(result) == [("c", Status.WAITLISTED, Status.CANCELLED, Cause.CANCEL, None)]
    assert [w.signup_id for w in book.event.waiting] == ["b", "d"]
    assert book.event.taken == 1


def test_waitlisted_to_rejected_event_closed_when_the_event_closes():
    book = Book(event(capacity=1, waitlist=3, hold_seconds=5))
    book.run(*(book.signup(s) for s in "abc"), now=T0)
    result = book.run(book.close(), book.signup("d"), now=T0 + 1)
    assert moves(result) == [
        ("b", Status.WAITLISTED, Status.REJECTED, Cause.CLOSE, Reason.EVENT_CLOSED),
        ("c", Status.WAITLISTED, Status.REJECTED, Cause.CLOSE, Reason.EVENT_CLOSED),
        ("d", Status.PENDING, Status.REJECTED, Cause.SIGNUP, Reason.EVENT_CLOSED),
    ]
    assert (book.event.state, book.event.waiting) == (EventState.CLOSED, ())
    # the hold granted while open stays: it may be confirmed after the close
    assert moves(book.run(book.confirm("a"), now=T0 + 2)) == [
        ("a", Status.HELD, Status.ACCEPTED, Cause.CONFIRM, None)
    ]
    # a second close changes nothing
    assert book.run(book.close(), now=T0 + 3).transitions == ()


def test_an_event_found_closed_rejects_its_waitlist_at_the_steps_first_record():
    book = Book(event(capacity=1, waitlist=3))
    book.run(*(book.signup(s) for s in "abc"))
    book.event = replace(book.event, state=EventState.CLOSED)  # the organizer closed it
    tick = book.tick()
    result = book.run(tick)
    assert moves(result) == [
        ("b", Status.WAITLISTED, Status.REJECTED, Cause.CLOSE, Reason.EVENT_CLOSED),
        ("c", Status.WAITLISTED, Status.REJECTED, Cause.CLOSE, Reason.EVENT_CLOSED),
    ]
    assert {t.sequence_number for t in result.transitions} == {tick.sequence_number}


def test_after_a_close_seats_that_come_back_go_to_nobody():
    book = Book(event(capacity=1, waitlist=1, hold_seconds=5))
    book.run(book.signup("a"), book.signup("b"), book.close(), now=T0)
    result = book.run(book.tick(), now=T0 + 5000)
    assert moves(result) == [("a", Status.HELD, Status.EXPIRED, Cause.EXPIRY, None)]
    assert (book.event.taken, book.status("b")) == (0, Status.REJECTED)


# -- promotion ------------------------------------------------------------------------


@pytest.mark.parametrize(("hold_seconds", "promoted_to"), [(0, Status.ACCEPTED), (5, Status.HELD)])
def test_waitlisted_to_promoted_when_seats_come_back(hold_seconds, promoted_to):
    book = Book(event(capacity=1, waitlist=1, hold_seconds=hold_seconds))
    book.run(book.signup("a"), book.signup("b"), now=T0)
    if hold_seconds:
        book.run(book.confirm("a"), now=T0)
    cancel = book.cancel("a")
    result = book.run(cancel, now=T0 + 1000)
    assert moves(result) == [
        ("a", Status.ACCEPTED, Status.CANCELLED, Cause.CANCEL, None),
        ("b", Status.WAITLISTED, promoted_to, Cause.PROMOTION, None),
    ]
    promoted = result.transitions[1]
    assert promoted.sequence_number == cancel.sequence_number  # the release's record
    assert promoted.position == 2
    assert promoted.hold_expires_at == (T0 + 1000 + 5000 if hold_seconds else None)
    assert (book.event.taken, book.event.waiting) == (1, ())


def test_an_expiry_promotes_before_the_steps_new_signups():
    book = Book(event(capacity=1, waitlist=1, hold_seconds=5))
    book.run(book.signup("a"), book.signup("b"), now=T0)
    result = book.run(book.signup("c"), now=T0 + 5000)
    assert moves(result) == [
        ("a", Status.HELD, Status.EXPIRED, Cause.EXPIRY, None),
        ("b", Status.WAITLISTED, Status.HELD, Cause.PROMOTION, None),
        ("c", Status.PENDING, Status.WAITLISTED, Cause.SIGNUP, None),
    ]


def test_one_cancellation_promotes_a_chain_of_small_waitlisted_signups_in_order():
    book = Book(event(capacity=4, waitlist=4))
    book.run(book.signup("big", 3), book.signup("one", 1))
    book.run(*(book.signup(s, 1) for s in ("w1", "w2", "w3", "w4")))
    result = book.run(book.cancel("big"))
    assert moves(result) == [
        ("big", Status.ACCEPTED, Status.CANCELLED, Cause.CANCEL, None),
        ("w1", Status.WAITLISTED, Status.ACCEPTED, Cause.PROMOTION, None),
        ("w2", Status.WAITLISTED, Status.ACCEPTED, Cause.PROMOTION, None),
        ("w3", Status.WAITLISTED, Status.ACCEPTED, Cause.PROMOTION, None),
    ]
    assert [t.position for t in result.transitions[1:]] == [3, 4, 5]
    assert [w.signup_id for w in book.event.waiting] == ["w4"]
    assert book.event.taken == 4


def test_a_big_waitlisted_signup_keeps_its_place_while_a_smaller_later_one_goes_ahead():
    book = Book(event(capacity=4, waitlist=3))
    book.run(book.signup("a", 1), book.signup("b", 3))
    book.run(book.signup("big", 3), book.signup("small", 1), book.signup("tiny", 1))
    assert [w.signup_id for w in book.event.waiting] == ["big", "small", "tiny"]
    # one seat back: big (3) does not fit and keeps its place; small goes ahead of it
    result = book.run(book.cancel("a"))
    assert moves(result)[1:] == [
        ("small", Status.WAITLISTED, Status.ACCEPTED, Cause.PROMOTION, None)
    ]
    assert [w.signup_id for w in book.event.waiting] == ["big", "tiny"]
    # three back: big is first in line and takes them all; tiny, behind it, waits on
    result = book.run(book.cancel("b"))
    assert moves(result)[1:] == [("big", Status.WAITLISTED, Status.ACCEPTED, Cause.PROMOTION, None)]
    assert [w.signup_id for w in book.event.waiting] == ["tiny"]
    assert book.event.taken == 4


def test_a_later_small_signup_takes_free_seats_a_big_waitlisted_one_cannot_use():
    book = Book(event(capacity=3, waitlist=2))
    book.run(book.signup("a", 1), book.signup("b", 2), book.signup("big", 3))
    book.run(book.cancel("a"))  # one seat back; big still waits
    result = book.run(book.signup("late", 1))
    assert moves(result) == [("late", Status.PENDING, Status.ACCEPTED, Cause.SIGNUP, None)]
    assert [w.signup_id for w in book.event.waiting] == ["big"]


def test_a_raised_capacity_promotes_at_the_next_step():
    book = Book(event(capacity=1, waitlist=2))
    book.run(book.signup("a"), book.signup("b"), book.signup("c"))
    book.event = replace(book.event, capacity=2)  # the organizer raised it
    result = book.run(book.tick())
    assert moves(result) == [("b", Status.WAITLISTED, Status.ACCEPTED, Cause.PROMOTION, None)]


# -- refusals -------------------------------------------------------------------------


def book_with_every_status() -> Book:
    """One signup in each status: held, accepted, waitlisted, rejected, cancelled, expired."""
    book = Book(event(capacity=3, waitlist=1, hold_seconds=10))
    book.run(book.signup("expired"), now=T0)
    book.run(
        book.signup("held"), book.signup("accepted"), book.signup("cancelled", 1), now=T0 + 5000
    )
    book.run(book.confirm("accepted"), book.cancel("cancelled"), now=T0 + 5000)
    book.run(book.signup("waitlisted", 2), book.signup("rejected", 9), now=T0 + 5000)
    book.run(book.tick(), now=T0 + 10_000)
    assert {sid: s.status for sid, s in book.states.items()} == {
        "expired": Status.EXPIRED,
        "held": Status.HELD,
        "accepted": Status.ACCEPTED,
        "cancelled": Status.CANCELLED,
        "waitlisted": Status.WAITLISTED,
        "rejected": Status.REJECTED,
    }
    return book


REFUSED = [
    (Kind.CONFIRM, "accepted", Reason.TRANSITION_NOT_ALLOWED),
    (Kind.CONFIRM, "waitlisted", Reason.TRANSITION_NOT_ALLOWED),
    (Kind.CONFIRM, "rejected", Reason.TRANSITION_NOT_ALLOWED),
    (Kind.CONFIRM, "cancelled", Reason.TRANSITION_NOT_ALLOWED),
    (Kind.CONFIRM, "expired", Reason.HOLD_EXPIRED),
    (Kind.CONFIRM, "nobody", Reason.TRANSITION_NOT_ALLOWED),
    (Kind.CANCEL, "rejected", Reason.TRANSITION_NOT_ALLOWED),
    (Kind.CANCEL, "cancelled", Reason.TRANSITION_NOT_ALLOWED),
    (Kind.CANCEL, "expired", Reason.HOLD_EXPIRED),
    (Kind.CANCEL, "nobody", Reason.TRANSITION_NOT_ALLOWED),
]


@pytest.mark.parametrize(("kind", "sid", "reason"), REFUSED)
def test_a_refused_request_changes_nothing_and_says_why(kind, sid, reason):
    book = book_with_every_status()
    before_event, before_states = book.event, dict(book.states)
    request = Command(kind, book.next_seq(), sid)
    result = book.run(request, now=T0 + 10_000)
    current = before_states[sid].status if sid in before_states else Status.PENDING
    [t] = result.transitions
    assert (t.refused, t.from_status, t.to_status, t.reason, t.cause) == (
        True,
        current,
        current,
        reason,
        kind,
    )
    assert t.current_status == current
    assert book.event == before_event
    # the signup's state is as it was, but for the record it has now seen
    after = book.states[sid]
    assert after.last_sequence_number == request.sequence_number
    if sid in before_states:
        assert after == replace(before_states[sid], last_sequence_number=after.last_sequence_number)
    else:
        assert (after.status, after.seats, after.arrival) == (Status.PENDING, 0, None)
    # and a replay of the refused record says nothing at all
    assert book.run(request, now=T0 + 10_000).transitions == ()


def test_a_signup_seen_first_through_a_refused_request_is_still_decided_by_its_record():
    book = Book(event(capacity=1))
    book.run(book.cancel("a"))
    [t] = book.run(book.signup("a")).transitions
    assert (t.from_status, t.to_status, t.position) == (Status.PENDING, Status.ACCEPTED, 1)
    assert book.states["a"].arrival == t.sequence_number


# -- replays --------------------------------------------------------------------------


def test_replays_of_any_record_change_nothing():
    book = Book(event(capacity=1, waitlist=1, hold_seconds=5))
    records = [book.signup("a"), book.signup("b"), book.confirm("a"), book.cancel("a")]
    book.run(*records, now=T0)
    assert book.statuses() == {"a": Status.CANCELLED, "b": Status.HELD}
    event_after, states_after = book.event, dict(book.states)
    for _ in range(3):
        assert book.run(*records, now=T0).transitions == ()
        assert book.run(*reversed(records), now=T0).transitions == ()
    assert (book.event, book.states) == (event_after, states_after)


def test_a_repeated_signup_record_with_a_new_sequence_number_changes_nothing():
    book = Book(event(capacity=5))
    book.run(book.signup("a", 1))
    before = book.states["a"]
    assert book.run(book.signup("a", 3)).transitions == ()
    assert book.states["a"] == before and book.event.taken == 1


def test_duplicates_inside_one_step_apply_once():
    book = Book(event(capacity=2, hold_seconds=5))
    signup = book.signup("a")
    confirm = book.confirm("a")
    result = book.run(signup, signup, confirm, confirm, signup)
    assert moves(result) == [
        ("a", Status.PENDING, Status.HELD, Cause.SIGNUP, None),
        ("a", Status.HELD, Status.ACCEPTED, Cause.CONFIRM, None),
    ]


def test_sequence_numbers_compare_as_integers():
    book = Book(event(capacity=2, hold_seconds=5))
    book.run(Command(Kind.SIGNUP, "9", "a"))
    # "10" sorts before "9" as text, but comes after it
    assert moves(book.run(Command.confirm("a", "10"))) == [
        ("a", Status.HELD, Status.ACCEPTED, Cause.CONFIRM, None)
    ]


# -- the engine's own edges -----------------------------------------------------------


def test_a_step_without_records_changes_nothing_even_with_holds_due():
    book = held_book()
    result = step(book.event, book.states, [], T0 + 60_000)
    assert (result.transitions, result.event) == ((), book.event)


def test_an_unknown_kind_of_request_is_a_programming_error():
    with pytest.raises(ValueError, match="not a command the engine knows"):
        step(event(capacity=1), {}, [Command("refund", "1", "a")], T0)


def test_advance_builds_a_signups_state_from_its_transitions():
    book = Book(event(capacity=1, waitlist=1, hold_seconds=5))
    book.run(book.signup("a"), book.signup("b"), now=T0)
    book.run(book.cancel("a"), now=T0 + 1)
    state = None
    for t in book.history["b"]:
        state = advance(state, t)
    assert state == book.states["b"]
    assert (state.status, state.position, state.waitlist_position, state.hold_expires_at) == (
        Status.HELD,
        2,
        1,
        T0 + 1 + 5000,
    )
    # an engine move (here a promotion) leaves the signup's last own record as it was
    assert state.last_sequence_number == state.arrival


def test_history_problems_names_a_broken_history():
    book = Book(event(capacity=1, hold_seconds=5))
    book.run(book.signup("a"), book.confirm("a"), book.cancel("a"))
    good = book.history["a"]
    assert history_problems(good) == []
    assert history_problems(good[1:]) != []  # not from PENDING
    assert history_problems([good[0], good[0]]) != []  # a transition twice
    skip = replace(good[1], to_status=Status.EXPIRED)
    assert history_problems([good[0], skip, good[2]]) != []


def test_the_allowed_transitions_are_exactly_the_contracts():
    table = {
        Status.PENDING: {Status.HELD, Status.ACCEPTED, Status.WAITLISTED, Status.REJECTED},
        Status.HELD: {Status.ACCEPTED, Status.EXPIRED, Status.CANCELLED},
        Status.ACCEPTED: {Status.CANCELLED},
        Status.WAITLISTED: {Status.HELD, Status.ACCEPTED, Status.CANCELLED, Status.REJECTED},
    }
    expected = {(a, b) for a, targets in table.items() for b in targets}
    assert expected == ALLOWED_TRANSITIONS


# -- properties -----------------------------------------------------------------------

options = st.fixed_dictionaries(
    {}, optional={"waitlist": st.integers(0, 4), "hold_seconds": st.sampled_from([0, 1, 5])}
)


@settings(max_examples=200, deadline=None)
@given(
    event=rules_tests.events_strategy,
    requests=rules_tests.requests_strategy,
    decided=st.sets(st.sampled_from([f"s{i}" for i in range(25)]), max_size=5),
    cut=st.integers(0, 40),
    now=st.integers(0, 2**41),
    notes=st.lists(st.booleans(), max_size=40),
)
def test_without_waitlist_holds_or_requests_it_decides_exactly_as_decide(
    event, requests, decided, cut, now, notes
):
    """Statuses, reasons, positions, details and the next taken/accepted are decide's,
    also when the records come in two steps and some signups are decided already."""
    # a remark on a record (a dropped submitted_at) is rare in hostile images: add some
    requests = [
        replace(r, note=r.note or "submitted_at dropped") if note else r
        for r, note in zip(requests, notes + [False] * len(requests), strict=False)
    ]
    expected = decide(event, requests, already_decided=decided)
    lifecycle = event
    states = {
        sid: SignupState(sid, Status.REJECTED, 1, "1", arrival="1", reason=Reason.CAPACITY_FULL)
        for sid in decided
    }
    transitions: list[Transition] = []
    for part in (requests[:cut], requests[cut:]):
        result = step(lifecycle, states, [signup_command(r) for r in part], now)
        lifecycle = result.event
        states = {**states, **result.signups}
        transitions += result.transitions
    got = [
        (t.signup_id, t.sequence_number, t.to_status, t.seats, t.reason, t.position, t.detail)
        for t in transitions
    ]
    assert got == [
        (d.signup_id, d.sequence_number, d.status, d.seats, d.reason, d.position, d.detail)
        for d in expected.decisions
    ]
    assert all(t.from_status == Status.PENDING and t.cause == Cause.SIGNUP for t in transitions)
    if event is None:
        assert lifecycle is None and expected.state is None
    else:
        assert (lifecycle.taken, lifecycle.accepted) == (
            expected.state.taken,
            expected.state.accepted,
        )
        assert lifecycle == expected.state


def test_an_events_defaults_are_the_behaviour_before_the_lifecycle():
    """An event made with nothing but its counters has no waitlist, no holds, no seat limit
    and an empty lineup: the oracle's event."""
    event = Event("e1", capacity=5, taken=2, accepted=1, version=7)
    assert (event.waitlist, event.hold_seconds, event.max_seats) == (0, 0, None)
    assert (event.holds, event.waiting, event.state) == ((), (), EventState.OPEN)


@st.composite
def busy_books(draw: st.DrawFn) -> tuple[Book, list[Command], int]:
    """An event with holds and a waitlist after a few steps, and the next step's records."""
    book = Book(event(capacity=draw(st.integers(0, 5)), **draw(options)))
    now = T0
    ids = [f"s{i}" for i in range(8)]
    for _ in range(draw(st.integers(1, 4))):
        requests = draw(
            st.lists(
                st.one_of(
                    st.builds(book.signup, st.sampled_from(ids), st.integers(1, 3)),
                    st.builds(book.confirm, st.sampled_from(ids)),
                    st.builds(book.cancel, st.sampled_from(ids)),
                ),
                min_size=1,
                max_size=5,
            )
        )
        now += draw(st.sampled_from([0, 1000, 3000]))
        book.run(*requests, now=now)
    last = draw(
        st.lists(
            st.one_of(
                st.builds(book.signup, st.sampled_from(ids), st.integers(1, 3)),
                st.builds(book.confirm, st.sampled_from(ids)),
                st.builds(book.cancel, st.sampled_from(ids)),
                st.builds(book.tick),
            ),
            min_size=1,
            max_size=5,
        )
    )
    return book, last, now + draw(st.sampled_from([0, 1000, 6000]))


@settings(max_examples=100, deadline=None)
@given(case=busy_books())
def test_the_transitions_need_only_the_states_of_the_signups_the_records_name(case):
    """Expiries and promotions come from the event's own entries: passing every signup's
    state or only those the records name gives the same transitions and event."""
    book, requests, now = case
    named = {r.signup_id for r in requests if r.signup_id in book.states}
    everything = step(book.event, book.states, requests, now)
    only_named = step(book.event, {s: book.states[s] for s in named}, requests, now)
    assert only_named.transitions == everything.transitions
    assert only_named.event == everything.event
    # and the rest follow from their transitions
    rebuilt = dict(book.states)
    rebuilt.update(only_named.signups)
    for t in only_named.transitions:
        if t.signup_id not in only_named.signups:
            rebuilt[t.signup_id] = advance(rebuilt[t.signup_id], t)
    assert rebuilt == {**book.states, **everything.signups}


def test_waiting_entries_carry_their_arrival():
    book = Book(event(capacity=1, taken=1, waitlist=1))
    request = book.signup("a")
    book.run(request)
    assert book.event.waiting == (Waiting("a", 1, request.sequence_number),)


def test_a_step_of_many_grants_and_waiters_rebuilds_a_long_lineup_once_not_once_each(
    monkeypatch,
):
    """At 50,000 holds, building the lineup again for every grant was a millisecond a
    signup: a step keeps what joins the end of the lineup apart, and builds it once."""
    from turnstile.engine import lifecycle

    rebuilt: list[str] = []

    def counting_replace(obj, **changes):
        rebuilt.extend(k for k in ("holds", "waiting") if k in changes)
        return replace(obj, **changes)

    monkeypatch.setattr(lifecycle, "replace", counting_replace)
    # GIVEN an event with 2,000 holds, 500 waiting and 100 seats free
    holds = tuple(Hold(f"h{i}", 1, i + 1, T0 + 1_000 + i) for i in range(2_000))
    waiting = tuple(Waiting(f"w{i}", 1, str(i)) for i in range(500))
    big = replace(
        event(capacity=2_100, waitlist=600, hold_seconds=600),
        taken=2_000,
        accepted=2_000,
        holds=holds,
        waiting=waiting,
    )
    # WHEN one step takes 200 signups: 100 waiters promoted first, the 200 put on the list
    commands = [Command(Kind.SIGNUP, str(10_000 + i), f"s{i}", 1) for i in range(200)]
    result = step(big, {}, commands, T0)
    moved = [(t.cause, t.to_status) for t in result.transitions]
    assert (
        moved == [(Cause.PROMOTION, Status.HELD)] * 100 + [(Cause.SIGNUP, Status.WAITLISTED)] * 200
    )
    # THEN the lineup is whole and in order: the new holds last, the new waiters last
    assert len(result.event.holds) == 2_100 and len(result.event.waiting) == 600
    assert [h.signup_id for h in result.event.holds[-100:]] == [f"w{i}" for i in range(100)]
    assert [w.signup_id for w in result.event.waiting[-200:]] == [f"s{i}" for i in range(200)]
    assert [t.waitlist_position for t in result.transitions[100:102]] == [401, 402]
    # ... kept entries are the same objects (how a paged commit finds what changed)
    assert result.event.holds[0] is holds[0] and result.event.waiting[0] is waiting[100]
    # AND the lineup was built again a few times in the whole step, not once a signup
    assert len(rebuilt) <= 6, rebuilt  # before: 301 (one a grant, one a waiter, the end)


def test_a_cancel_freeing_more_seats_than_max_lapses_stops_the_step_after_its_record():
    # GIVEN a group of 5 seats accepted, 5 single signups waiting
    waiting = tuple(Waiting(f"w{i}", 1, str(10 + i)) for i in range(5))
    full = replace(event(capacity=5, waitlist=10), taken=5, accepted=1, waiting=waiting)
    states = {"group": SignupState("group", Status.ACCEPTED, 5, "1", position=1)}
    # WHEN the group cancels, and a later signup and a close follow, with max_lapses 2
    commands = [
        Command(Kind.CANCEL, "20", "group"),
        Command(Kind.SIGNUP, "21", "late", 1),
        Command(Kind.CLOSE, "22"),
    ]
    result = step(full, states, commands, T0, max_lapses=2)
    # THEN two waiters are promoted and the step stops after the cancel's record
    assert result.stopped_at == "20" and not result.partial
    assert [(t.signup_id, t.to_status) for t in result.transitions] == [
        ("group", Status.CANCELLED),
        ("w0", Status.ACCEPTED),
        ("w1", Status.ACCEPTED),
    ]
    assert [w.signup_id for w in result.event.waiting] == ["w2", "w3", "w4"]
    # AND the next step promotes the rest first, before the later signup is decided
    later = step(result.event, result.signups, commands[1:], T0, max_lapses=2)
    assert later.partial and [t.signup_id for t in later.transitions] == ["w2", "w3"]
    last = step(later.event, later.signups, commands[1:], T0, max_lapses=2)
    assert [(t.signup_id, t.to_status) for t in last.transitions[:2]] == [
        ("w4", Status.ACCEPTED),
        ("late", Status.WAITLISTED),
    ]
    # ... and the close rejects the one left waiting
    assert last.stopped_at is None and last.event.state == EventState.CLOSED
    assert [(t.signup_id, t.reason) for t in last.transitions[2:]] == [
        ("late", Reason.EVENT_CLOSED)
    ]
    # without a bound the cancel promotes all five at once, as before
    whole = step(full, states, commands[:1], T0)
    assert whole.stopped_at is None and len(whole.transitions) == 6


def test_a_close_rejecting_more_than_max_lapses_stops_the_step_after_its_record():
    waiting = tuple(Waiting(f"w{i}", 1, str(10 + i)) for i in range(3))
    full = replace(event(capacity=1, waitlist=5), taken=1, accepted=1, waiting=waiting)
    commands = [Command(Kind.CLOSE, "20"), Command(Kind.SIGNUP, "21", "late", 1)]
    result = step(full, {}, commands, T0, max_lapses=2)
    assert result.stopped_at == "20" and result.event.state == EventState.CLOSED
    assert [t.signup_id for t in result.transitions] == ["w0", "w1"]
    # the next step rejects the one left first, then the later signup
    after = step(result.event, result.signups, commands[1:], T0, max_lapses=2)
    assert [(t.signup_id, t.reason) for t in after.transitions] == [
        ("w2", Reason.EVENT_CLOSED),
        ("late", Reason.EVENT_CLOSED),
    ]

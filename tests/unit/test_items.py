"""``turnstile.storage.transitions`` on its own: the pieces between the stream and the lifecycle
engine that the processor tests reach only as a whole (the exact answers to requests on an
event that does not exist, the history entries, what is read off an item)."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.oracle import decide
from tests.unit import test_rules as rules_tests
from turnstile.base.clock import iso_of_ms
from turnstile.base.contract import Attr, EventState, Reason, Status
from turnstile.engine.lifecycle import Command, Event, Hold, Waiting, step
from turnstile.storage.dynamo import to_item
from turnstile.storage.intake import IntakeRecord, engine_commands
from turnstile.storage.items import (
    ItemUpdate,
    decisions_without_event,
    history_of,
    outcome_of,
    refusals_without_event,
    signup_state,
    touched_without_state,
)

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def record(sid: str, seq: str, request: str | None = None, count: int | None = 0):
    return IntakeRecord("gone", sid, seq, request=request, request_count=count)


def rejected(sid: str, count: int | None = None) -> dict:
    item = {Attr.SIGNUP_ID: sid, Attr.STATUS: Status.REJECTED, Attr.SEQUENCE_NUMBER: "1"}
    if count is not None:
        item[Attr.REQUEST_COUNT] = Decimal(count)
    return item


def refusal(request: str, reason: str, seq: str) -> dict:
    return {
        "request": request,
        "reason": reason,
        "status": Status.REJECTED,
        "at": iso_of_ms(NOW),
        "sequence_number": seq,
    }


@settings(max_examples=200, deadline=None)
@given(
    requests=rules_tests.requests_strategy,
    decided=st.sets(st.sampled_from([f"s{i}" for i in range(25)]), max_size=5),
)
def test_signups_of_an_event_that_does_not_exist_are_decided_as_the_oracle_decides(
    requests, decided
):
    """The processor's one engine, given no event, rejects each new signup once, in order,
    ``unknown_event`` or ``invalid_request``, exactly as the decider it replaced; signups
    decided before get nothing, and neither does a wake-up."""
    items = {sid: rejected(sid) for sid in decided}
    tick = IntakeRecord("e1", "", "99999", tick=True)
    got = decisions_without_event([tick, *requests], items, NOW)
    assert got == decide(None, requests, already_decided=decided).decisions


def test_requests_on_an_event_that_does_not_exist_are_each_answered_once():
    items = {"a": rejected("a"), "b": rejected("b", 2), "c": rejected("c"), "d": rejected("d")}
    chunk = [
        record("nobody", "10", "cancel", 1),  # no item: no decision to carry an answer
        record("a", "11", "cancel", 1),
        record("a", "12", "confirm", 2),  # a second request of a in the same chunk
        record("a", "13", "cancel", 2),  # ... and a re-emission of it: answered already
        record("b", "14", "cancel", 2),  # answered before (the item says 2)
        record("c", "15", None, 1),  # a count and no request: invalid
        record("c", "16", "cancel", None),  # a count that is no number: nothing to answer
        record("d", "17", "refund", 3),
    ]
    answers = refusals_without_event(chunk, items, NOW)
    assert answers == (
        ItemUpdate(
            "a",
            Status.REJECTED,
            to_item(
                {
                    Attr.REQUEST_COUNT: 2,
                    Attr.LAST_REFUSAL: refusal("confirm", Reason.TRANSITION_NOT_ALLOWED, "12"),
                }
            ),
            request_count=2,
        ),
        ItemUpdate(
            "c",
            Status.REJECTED,
            to_item(
                {
                    Attr.REQUEST_COUNT: 1,
                    Attr.LAST_REFUSAL: refusal("", Reason.INVALID_REQUEST, "15"),
                }
            ),
            request_count=1,
        ),
        ItemUpdate(
            "d",
            Status.REJECTED,
            to_item(
                {
                    Attr.REQUEST_COUNT: 3,
                    Attr.LAST_REFUSAL: refusal("refund", Reason.INVALID_REQUEST, "17"),
                }
            ),
            request_count=3,
        ),
    )
    # an item without a status reads as REJECTED (the only status without an event) ...
    bare = {"e": {Attr.SIGNUP_ID: "e"}}
    [answer] = refusals_without_event([record("e", "18", "cancel", 1)], bare, NOW)
    assert answer.from_status == Status.REJECTED
    # ... and one with a status (its event item deleted by hand) keeps it
    kept = {"f": {Attr.SIGNUP_ID: "f", Attr.STATUS: Status.ACCEPTED}}
    [answer] = refusals_without_event([record("f", "19", "cancel", 1)], kept, NOW)
    assert answer.from_status == Status.ACCEPTED
    assert answer.set[Attr.LAST_REFUSAL]["M"]["status"] == {"S": Status.ACCEPTED}


def test_a_signup_decided_and_moved_in_one_step_is_not_read_again():
    """Its item does not exist yet: only signups decided before and moved by the engine
    itself are read."""
    before = Event("gig", 1)
    chunk = [record("a", "1"), record("a", "2", "cancel", 1)]
    requests, _ = engine_commands(chunk, {})
    result = step(before, {}, requests, NOW)
    assert [t.to_status for t in result.transitions] == [Status.ACCEPTED, Status.CANCELLED]
    assert touched_without_state(result, {}) == []


def test_history_entries_carry_every_field_and_a_rejection_its_reason():
    """A close rejects the waitlist: the entry has from, to, at, sequence_number, cause and
    the reason; an entry of any other move has no reason."""
    w_item = {
        Attr.SIGNUP_ID: "w",
        Attr.STATUS: Status.WAITLISTED,
        Attr.SEATS: Decimal(1),
        Attr.SEQUENCE_NUMBER: "5",
        Attr.DECIDED_AT: iso_of_ms(NOW - 1000),
        Attr.WAITLIST_POSITION: Decimal(1),
    }
    before = Event(
        "gig",
        1,
        waitlist=1,
        taken=1,
        accepted=1,
        state=EventState.CLOSED,
        waiting=(Waiting("w", 1, "5"),),
    )
    result = step(before, {}, [Command.tick("9")], NOW)
    assert touched_without_state(result, {}) == ["w"]
    decided = {"w": signup_state(w_item)}
    outcome = outcome_of(before, None, result, decided, {}, {})
    [update] = outcome.updates
    history = update.set[Attr.HISTORY]["L"]
    assert history == [
        to_item(
            {
                "e": {
                    "from": Status.WAITLISTED,
                    "to": Status.REJECTED,
                    "at": iso_of_ms(NOW),
                    "sequence_number": "9",
                    "cause": "close",
                    "reason": Reason.EVENT_CLOSED,
                }
            }
        )["e"]
    ]


def test_a_third_move_keeps_the_moves_stored_before():
    item = {
        Attr.SIGNUP_ID: "h",
        Attr.STATUS: Status.HELD,
        Attr.SEATS: Decimal(1),
        Attr.POSITION: Decimal(2),
        Attr.SEQUENCE_NUMBER: "5",
        Attr.DECIDED_AT: iso_of_ms(NOW - 9000),
        Attr.HOLD_EXPIRES_AT: iso_of_ms(NOW + 5000),
        Attr.HISTORY: [
            {
                "from": Status.WAITLISTED,
                "to": Status.HELD,
                "at": iso_of_ms(NOW - 1000),
                "sequence_number": "7",
                "cause": "promotion",
            }
        ],
    }
    before = Event(
        "gig", 1, hold_seconds=10, taken=1, accepted=2, holds=(Hold("h", 1, 2, NOW + 5000),)
    )
    decided = {"h": signup_state(item)}
    answered = {sid: a.request_count for sid, a in decided.items()}
    requests, counts = engine_commands([record("h", "9", "confirm", 1)], answered)
    result = step(before, {"h": decided["h"].state}, requests, NOW)
    outcome = outcome_of(before, None, result, decided, counts, {})
    [update] = outcome.updates
    stored = [e["M"]["to"]["S"] for e in update.set[Attr.HISTORY]["L"]]
    assert stored == [Status.HELD, Status.ACCEPTED]
    # and read back, the first move is read off the item, before the stored ones
    moved = {
        **item,
        Attr.STATUS: Status.ACCEPTED,
        Attr.HISTORY: [
            {k: v["S"] for k, v in e["M"].items()} for e in update.set[Attr.HISTORY]["L"]
        ],
    }
    assert [(h["from"], h["to"]) for h in history_of(moved)] == [
        (Status.PENDING, Status.WAITLISTED),
        (Status.WAITLISTED, Status.HELD),
        (Status.HELD, Status.ACCEPTED),
    ]


def logged(sid: str, seq: str, log: list[str], count: int | None = None) -> IntakeRecord:
    """A record carrying its request log (a record recovered from intake)."""
    count = len(log) if count is None else count
    return IntakeRecord("gig", sid, seq, request=log[-1], request_count=count, requests=tuple(log))


def test_a_records_log_answers_each_request_it_has_not_answered_in_order():
    """A record recovered from intake carries every request of its log: each unanswered
    one becomes a command, in order, the later ones marked as following the first (same
    record, same sequence number), an unknown kind refused with the contract's words."""
    from turnstile.engine.lifecycle import Kind

    commands, counts = engine_commands(
        [logged("a", "9", ["confirm", "refund", "cancel"])], {"a": 0}
    )
    assert [(c.kind, c.follows, c.problem is None) for c in commands] == [
        (Kind.CONFIRM, False, True),
        (Kind.CONFIRM, True, False),
        (Kind.CANCEL, True, True),
    ]
    assert commands[1].problem == (
        "request must be one of confirm, cancel, with a whole request_count"
    )
    assert counts == {"a": 3}


def test_a_log_answers_at_most_its_bound_of_requests_at_once():
    """Up to MAX_LOGGED_REQUESTS unanswered requests are each answered from the log; more
    than that, the record answers its latest request alone (as a record without a log)."""
    from turnstile.storage.intake import MAX_LOGGED_REQUESTS

    bound = MAX_LOGGED_REQUESTS
    log = ["confirm"] * (bound + 10)
    # exactly the bound unanswered, after 10 answered: each one
    commands, _ = engine_commands([logged("a", "9", log)], {"a": 10})
    assert len(commands) == bound
    # one more than the bound unanswered: the latest alone
    commands, _ = engine_commands([logged("a", "9", log)], {"a": 9})
    assert len(commands) == 1

"""The decision engine: table-driven rules and hypothesis properties for the invariants."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnstile.contract import MAX_ATTRIBUTES_BYTES, EventState, Reason, Status
from turnstile.domain import (
    MAX_ATTRIBUTES_DEPTH,
    MAX_DETAIL_CHARS,
    MAX_SUBMITTED_AT_CHARS,
    EventSnapshot,
    SignupRequest,
    decide,
    parse_request,
    signup_problems,
)
from turnstile.itemsize import value_size


def req(signup_id: str, seats: int = 1, seq: int = 0, problem: str | None = None) -> SignupRequest:
    return SignupRequest(
        event_id="e1",
        signup_id=signup_id,
        sequence_number=str(1000 + seq),
        seats=seats,
        problem=problem,
    )


OPEN3 = EventSnapshot(event_id="e1", capacity=3)


def _nested(depth: int) -> dict[str, Any]:
    """A map nested ``depth`` levels deep (itself the first)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("event", "requests", "expected"),
    [
        # GIVEN room for three WHEN four single seats arrive THEN the fourth is full.
        (
            OPEN3,
            [req("a", seq=1), req("b", seq=2), req("c", seq=3), req("d", seq=4)],
            [
                ("a", Status.ACCEPTED, None, 1),
                ("b", Status.ACCEPTED, None, 2),
                ("c", Status.ACCEPTED, None, 3),
                ("d", Status.REJECTED, Reason.CAPACITY_FULL, None),
            ],
        ),
        # A big request that does not fit does not stop a later small one that does.
        (
            OPEN3,
            [req("a", 2, 1), req("b", 2, 2), req("c", 1, 3)],
            [
                ("a", Status.ACCEPTED, None, 1),
                ("b", Status.REJECTED, Reason.CAPACITY_FULL, None),
                ("c", Status.ACCEPTED, None, 2),
            ],
        ),
        # No event item: unknown_event, for every request.
        (
            None,
            [req("a"), req("b", 2)],
            [
                ("a", Status.REJECTED, Reason.UNKNOWN_EVENT, None),
                ("b", Status.REJECTED, Reason.UNKNOWN_EVENT, None),
            ],
        ),
        # A closed event takes nobody.
        (
            EventSnapshot(event_id="e1", capacity=3, state=EventState.CLOSED),
            [req("a")],
            [("a", Status.REJECTED, Reason.EVENT_CLOSED, None)],
        ),
        # Invalid input is rejected before anything else, even for an unknown event.
        (
            None,
            [req("a", 0, problem="seats must be at least 1")],
            [("a", Status.REJECTED, Reason.INVALID_REQUEST, None)],
        ),
        # Duplicates in one batch: decided once, at the first occurrence.
        (OPEN3, [req("a", 1, 1), req("a", 1, 2)], [("a", Status.ACCEPTED, None, 1)]),
        # Capacity zero: everything is full.
        (
            EventSnapshot(event_id="e1", capacity=0),
            [req("a")],
            [("a", Status.REJECTED, Reason.CAPACITY_FULL, None)],
        ),
        # Positions continue from the event's accepted count.
        (
            EventSnapshot(event_id="e1", capacity=10, taken=4, accepted=3),
            [req("a", 6)],
            [("a", Status.ACCEPTED, None, 4)],
        ),
    ],
)
def test_decide_rules(event, requests, expected):
    outcome = decide(event, requests)
    got = [(d.signup_id, d.status, d.reason, d.position) for d in outcome.decisions]
    assert got == expected


def test_already_decided_signups_get_no_new_decision():
    outcome = decide(OPEN3, [req("a", seq=1), req("b", seq=2)], already_decided={"a"})
    assert [d.signup_id for d in outcome.decisions] == ["b"]
    assert outcome.state is not None and outcome.state.taken == 1


def test_state_advances_but_version_is_the_stores():
    outcome = decide(EventSnapshot(event_id="e1", capacity=5, version=7), [req("a", 2)])
    assert outcome.state == EventSnapshot(event_id="e1", capacity=5, taken=2, accepted=1, version=7)


# -- parsing what a producer wrote straight into intake ---------------------------------


@pytest.mark.parametrize(
    ("image", "problem_part"),
    [
        ({"seats": Decimal(0)}, "at least 1"),
        ({"seats": Decimal(-2)}, "at least 1"),
        ({"seats": Decimal("1.5")}, "whole number"),
        ({"seats": "2"}, "must be a number"),
        ({"seats": [Decimal(1)]}, "must be a number"),
        ({"seats": True}, "must be a number"),
        ({"seats": Decimal("1e9")}, "at most"),
        ({"attributes": "x"}, "attributes must be a map"),
        ({"attributes": ["x"]}, "attributes must be a map"),
        ({"attributes": {"blob": "x" * 5000}}, "bytes by DynamoDB's item-size rules"),
        ({"attributes": {"l": [{}] * 1300}}, "5208 bytes"),  # 3,906 bytes as JSON
        ({"attributes": {"": 1}}, "non-empty"),
        ({"attributes": {"n": Decimal("1" * 39)}}, "cannot store"),
        ({"attributes": {"n": Decimal("1e126")}}, "cannot store"),
        ({"attributes": {"n": Decimal("NaN")}}, "not finite"),
        ({"attributes": {"s": "\ud800"}}, "Unicode"),
        ({"attributes": {"f": 1.5}}, "float"),
        ({"attributes": _nested(MAX_ATTRIBUTES_DEPTH + 1)}, "nested more than"),
        ({"signup_id": "#EVENT"}, "signup_id"),
        ({"signup_id": "ok\n"}, "signup_id"),
        ({"signup_id": 7}, "signup_id"),
        ({"signup_id": "-starts-with-dash"}, "signup_id"),
        ({"signup_id": "x" * 129}, "signup_id"),
        ({"event_id": "has space"}, "event_id"),
    ],
)
def test_parse_request_flags_bad_input(image, problem_part):
    # The one validator: the API and the CLI refuse exactly this (signup_problems).
    full = {"event_id": "e1", "signup_id": "s1", **image}
    request = parse_request(full, "1")
    assert request.problem is not None and problem_part in request.problem


def test_attributes_at_the_limits_are_valid():
    # GIVEN attributes of exactly 4,096 bytes by DynamoDB's rules, nested 16 levels
    blob = {"b": "x" * (MAX_ATTRIBUTES_BYTES - 3 - 1 - 1)}
    assert value_size(blob) == MAX_ATTRIBUTES_BYTES
    for attributes in (blob, _nested(MAX_ATTRIBUTES_DEPTH), {"n": Decimal("1" * 38)}):
        assert signup_problems("e1", "s1", 1, attributes) == []
        image = {"event_id": "e1", "signup_id": "s1", "attributes": attributes}
        assert parse_request(image, "1").problem is None
    assert signup_problems("e1", "s1", 1, {"b": "x" * 4092}) != []


def test_a_bad_id_is_rejected_under_its_own_key_whatever_its_length():
    # GIVEN an intake record whose signup id is 1,000 characters off the pattern
    signup_id = "#" + "\u00e9" * 999
    request = parse_request({"event_id": "e1", "signup_id": signup_id}, "1")
    # THEN the request keeps the id (the rejection is written under it) and the detail
    # does not repeat it
    assert request.signup_id == signup_id
    [decision] = decide(OPEN3, [request]).decisions
    assert (decision.status, decision.reason) == (Status.REJECTED, Reason.INVALID_REQUEST)
    assert decision.signup_id == signup_id
    assert decision.detail is not None and len(decision.detail) <= MAX_DETAIL_CHARS


@pytest.mark.parametrize(
    "submitted_at",
    ["x" * (MAX_SUBMITTED_AT_CHARS + 1), "2026-01-01T00:00:00Z" * 1000, Decimal(5), ["a"], {}],
    ids=["65 chars", "20,000 chars", "number", "list", "map"],
)
def test_submitted_at_off_the_bound_is_dropped_with_a_note_not_rejected(submitted_at):
    # GIVEN a valid signup whose submitted_at is too long or not a string
    image = {"event_id": "e1", "signup_id": "s1", "submitted_at": submitted_at}
    request = parse_request(image, "1")
    # THEN it is valid, submitted_at is dropped, and the decision says so
    assert request.problem is None
    assert request.submitted_at is None
    [decision] = decide(OPEN3, [request]).decisions
    assert decision.status == Status.ACCEPTED
    assert decision.detail is not None and "submitted_at dropped" in decision.detail


def test_submitted_at_within_the_bound_is_kept_as_it_is():
    for value in ("2026-01-01T00:00:00Z", "not a time at all", "y" * MAX_SUBMITTED_AT_CHARS):
        request = parse_request({"event_id": "e1", "signup_id": "s1", "submitted_at": value}, "1")
        assert (request.submitted_at, request.note) == (value, None)
        assert decide(OPEN3, [request]).decisions[0].detail is None


def test_detail_is_bounded_whatever_the_record_held():
    # GIVEN a record that breaks every rule at once, and a dropped submitted_at
    image = {
        "event_id": "bad event " * 100,
        "signup_id": "-" * 1000,
        "seats": Decimal("1.5"),
        "attributes": {"": "x" * 10_000},
        "submitted_at": "z" * 100,
    }
    [decision] = decide(OPEN3, [parse_request(image, "1")]).decisions
    assert decision.reason == Reason.INVALID_REQUEST
    assert decision.detail is not None and len(decision.detail) <= MAX_DETAIL_CHARS
    assert "submitted_at dropped" in decision.detail
    # AND a problem text of any length (a future rule quoting input) is cut to the bound
    long = SignupRequest("e1", "s2", "2", problem="p" * 5000, note="dropped")
    [decision] = decide(OPEN3, [long]).decisions
    assert decision.detail is not None and len(decision.detail) == MAX_DETAIL_CHARS


def test_parse_request_defaults():
    request = parse_request({"event_id": "e1", "signup_id": "u-1@x.io"}, "7")
    assert request.problem is None
    assert (request.seats, dict(request.attributes), request.sequence_number) == (1, {}, "7")


def test_parse_request_without_image_uses_keys():
    request = parse_request(None, "9", keys={"event_id": "e1", "signup_id": "s1"})
    assert (request.event_id, request.signup_id, request.problem) == ("e1", "s1", None)


# -- properties of the invariants ------------------------------------------------------

requests_strategy = st.lists(
    st.tuples(
        st.sampled_from([f"s{i}" for i in range(25)]),  # repeats model redelivery
        st.integers(min_value=1, max_value=4),
        st.booleans().map(lambda bad: "bad input" if bad else None),
    ),
    max_size=60,
)
events_strategy = st.one_of(
    st.none(),
    st.builds(
        EventSnapshot,
        event_id=st.just("e1"),
        capacity=st.integers(min_value=0, max_value=30),
        state=st.sampled_from([EventState.OPEN, EventState.OPEN, EventState.CLOSED]),
    ),
)


def build(raw: list[tuple[str, int, str | None]]) -> list[SignupRequest]:
    return [
        SignupRequest("e1", sid, str(10_000 + i), seats, problem=problem if i % 7 == 0 else None)
        for i, (sid, seats, problem) in enumerate(raw)
    ]


@settings(max_examples=300, deadline=None)
@given(event=events_strategy, raw=requests_strategy)
def test_invariant_1_never_oversold_and_taken_matches(event, raw):
    outcome = decide(event, build(raw))
    accepted_seats = sum(d.seats for d in outcome.decisions if d.accepted)
    if event is None:
        assert accepted_seats == 0
        return
    assert outcome.state is not None
    assert accepted_seats <= event.capacity
    assert outcome.state.taken == event.taken + accepted_seats
    assert outcome.state.taken <= event.capacity


@settings(max_examples=300, deadline=None)
@given(event=events_strategy, raw=requests_strategy)
def test_invariant_2_exactly_one_decision_per_signup(event, raw):
    requests = build(raw)
    outcome = decide(event, requests)
    ids = [d.signup_id for d in outcome.decisions]
    assert len(ids) == len(set(ids))
    assert set(ids) == {r.signup_id for r in requests}
    # Each decision belongs to the first occurrence (the earliest stream record).
    first_seq = {}
    for r in requests:
        first_seq.setdefault(r.signup_id, r.sequence_number)
    assert all(d.sequence_number == first_seq[d.signup_id] for d in outcome.decisions)


@settings(max_examples=300, deadline=None)
@given(event=events_strategy, raw=requests_strategy)
def test_invariant_3_arrival_order(event, raw):
    outcome = decide(event, build(raw))
    accepted = [d for d in outcome.decisions if d.accepted]
    seqs = [int(d.sequence_number) for d in accepted]
    positions = [d.position for d in accepted]
    assert seqs == sorted(seqs)
    start = event.accepted if event else 0
    assert positions == list(range(start + 1, start + 1 + len(accepted)))
    # No request was rejected for capacity while it fitted at its turn.
    if event is not None:
        remaining = event.capacity - event.taken
        for d in outcome.decisions:
            if d.accepted:
                remaining -= d.seats
            elif d.reason == Reason.CAPACITY_FULL:
                assert d.seats > remaining


@settings(max_examples=300, deadline=None)
@given(event=events_strategy, raw=requests_strategy, cut=st.integers(min_value=0, max_value=60))
def test_invariant_5_replaying_a_prefix_changes_nothing(event, raw, cut):
    """Deciding a prefix, then the whole stream again on top of it, equals deciding once."""
    requests = build(raw)
    once = decide(event, requests)
    first = decide(event, requests[:cut])
    again = decide(first.state, requests, already_decided={d.signup_id for d in first.decisions})
    assert first.decisions + again.decisions == once.decisions
    assert again.state == once.state
    # And a full replay on top of everything decides nothing new.
    replay = decide(once.state, requests, already_decided={d.signup_id for d in once.decisions})
    assert replay.decisions == () and replay.state == once.state

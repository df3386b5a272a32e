"""The decision engine: table-driven rules and hypothesis properties for the invariants."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import Binary
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.oracle import decide
from turnstile.base.contract import ID_PATTERN, MAX_ATTRIBUTES_BYTES, EventState, Reason, Status
from turnstile.base.itemsize import value_size
from turnstile.engine.lifecycle import Event
from turnstile.engine.rules import (
    MAX_ATTRIBUTES_DEPTH,
    MAX_CAPACITY,
    MAX_DETAIL_CHARS,
    MAX_SEATS,
    MAX_SUBMITTED_AT_CHARS,
    attributes_problem,
    capacity_problem,
    signup_problems,
)
from turnstile.storage.intake import IntakeRecord, parse_intake


def req(signup_id: str, seats: int = 1, seq: int = 0, problem: str | None = None) -> IntakeRecord:
    return IntakeRecord(
        event_id="e1",
        signup_id=signup_id,
        sequence_number=str(1000 + seq),
        seats=seats,
        problem=problem,
    )


OPEN3 = Event(event_id="e1", capacity=3)


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
            Event(event_id="e1", capacity=3, state=EventState.CLOSED),
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
            Event(event_id="e1", capacity=0),
            [req("a")],
            [("a", Status.REJECTED, Reason.CAPACITY_FULL, None)],
        ),
        # Positions continue from the event's accepted count.
        (
            Event(event_id="e1", capacity=10, taken=4, accepted=3),
            [req("a", 6)],
            [("a", Status.ACCEPTED, None, 4)],
        ),
        # Room is what the committed taken leaves: 2 of 10, not 10.
        (
            Event(event_id="e1", capacity=10, taken=8, accepted=5, version=3),
            [req("a", 3, 1), req("b", 2, 2), req("c", 1, 3)],
            [
                ("a", Status.REJECTED, Reason.CAPACITY_FULL, None),
                ("b", Status.ACCEPTED, None, 6),
                ("c", Status.REJECTED, Reason.CAPACITY_FULL, None),
            ],
        ),
        # An event already full takes nobody, not even one seat.
        (
            Event(event_id="e1", capacity=4, taken=4, accepted=4),
            [req("a", 1)],
            [("a", Status.REJECTED, Reason.CAPACITY_FULL, None)],
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


def test_state_advances_from_the_committed_state():
    before = Event(event_id="e1", capacity=10, taken=8, accepted=5, version=3)
    outcome = decide(before, [req("a", 3, 1), req("b", 2, 2)])
    assert outcome.state == Event("e1", 10, taken=10, accepted=6, version=3)


def test_invalid_input_keeps_its_detail_and_takes_no_seats():
    outcome = decide(OPEN3, [req("a", 0, 1, problem="seats must be at least 1"), req("b", 3, 2)])
    bad, good = outcome.decisions
    assert (bad.reason, bad.detail, bad.position) == (
        Reason.INVALID_REQUEST,
        "seats must be at least 1",
        None,
    )
    assert (good.status, good.position) == (Status.ACCEPTED, 1)


def test_state_advances_but_version_is_the_stores():
    outcome = decide(Event(event_id="e1", capacity=5, version=7), [req("a", 2)])
    assert outcome.state == Event(event_id="e1", capacity=5, taken=2, accepted=1, version=7)


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
    request = parse_intake(full, "1")
    assert request.problem is not None and problem_part in request.problem


def test_attributes_at_the_limits_are_valid():
    # GIVEN attributes of exactly 4,096 bytes by DynamoDB's rules, nested 16 levels
    blob = {"b": "x" * (MAX_ATTRIBUTES_BYTES - 3 - 1 - 1)}
    assert value_size(blob) == MAX_ATTRIBUTES_BYTES
    for attributes in (blob, _nested(MAX_ATTRIBUTES_DEPTH), {"n": Decimal("1" * 38)}):
        assert signup_problems("e1", "s1", 1, attributes) == []
        image = {"event_id": "e1", "signup_id": "s1", "attributes": attributes}
        assert parse_intake(image, "1").problem is None
    assert signup_problems("e1", "s1", 1, {"b": "x" * 4092}) != []


def _nested_lists(depth: int) -> dict[str, Any]:
    """Attributes whose deepest value sits ``depth`` levels down, through lists."""
    value: Any = []
    for _ in range(depth - 2):
        value = [value]
    return {"l": value}


@pytest.mark.parametrize(
    "attributes",
    [
        {"n": None, "t": True, "b": b"\x00", "ba": bytearray(b"\x01"), "w": Binary(b"\xff")},
        {"small": Decimal("1e-130"), "big": Decimal("9" * 38 + "e88"), "zero": Decimal(0)},
        {"s": {"a", "b"}, "l": ["x", Decimal(1), {"k": b"\x02"}], "f": frozenset({Decimal(2)})},
        _nested_lists(MAX_ATTRIBUTES_DEPTH),
    ],
    ids=["null-bool-binary", "number-edges", "sets-and-lists", "lists-at-the-depth-limit"],
)
def test_every_kind_of_value_dynamodb_holds_is_valid(attributes):
    assert attributes_problem(attributes) is None


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        ({"n": Decimal("NaN")}, "attributes hold a number that is not finite"),
        (
            {"n": Decimal("1e-131")},
            "attributes hold a number DynamoDB cannot store (38 digits, 1e-130 to 1e125)",
        ),
        (
            {"n": Decimal("1e126")},
            "attributes hold a number DynamoDB cannot store (38 digits, 1e-130 to 1e125)",
        ),
        ({"s": "\ud800"}, "attributes must be valid Unicode text"),
        ({"": 1}, "attribute names must be non-empty strings"),
        ({"l": [Decimal("Infinity")]}, "attributes hold a number that is not finite"),
        (_nested_lists(MAX_ATTRIBUTES_DEPTH + 1), "attributes are nested more than 16 levels deep"),
        ({"f": 1.5}, "attributes hold a float, which DynamoDB cannot store exactly"),
    ],
    ids=[
        "nan",
        "too-small",
        "too-big",
        "surrogate",
        "empty-name",
        "in-a-list",
        "lists-too-deep",
        "float",
    ],
)
def test_each_attribute_problem_is_named_exactly(attributes, problem):
    assert attributes_problem(attributes) == problem


@pytest.mark.parametrize(
    ("capacity", "valid"),
    [
        (0, True),
        (1, True),
        (MAX_CAPACITY, True),
        (-1, False),
        (MAX_CAPACITY + 1, False),
        (True, False),
        (1.0, False),
        ("3", False),
        (None, False),
    ],
    ids=repr,
)
def test_capacity_rule(capacity, valid):
    problem = capacity_problem(capacity)
    assert (
        problem is None
        if valid
        else problem == (f"capacity must be an integer from 0 to {MAX_CAPACITY}")
    )


def test_a_detail_of_exactly_the_bound_is_kept_whole():
    request = IntakeRecord("e1", "s1", "1", problem="p" * MAX_DETAIL_CHARS)
    [decision] = decide(OPEN3, [request]).decisions
    assert decision.detail == "p" * MAX_DETAIL_CHARS
    longer = replace(request, problem="p" * (MAX_DETAIL_CHARS + 1))
    [decision] = decide(OPEN3, [longer]).decisions
    assert decision.detail == "p" * (MAX_DETAIL_CHARS - 1) + "\u2026"


def test_a_bad_id_is_rejected_under_its_own_key_whatever_its_length():
    # GIVEN an intake record whose signup id is 1,000 characters off the pattern
    signup_id = "#" + "\u00e9" * 999
    request = parse_intake({"event_id": "e1", "signup_id": signup_id}, "1")
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
    request = parse_intake(image, "1")
    # THEN it is valid, submitted_at is dropped, and the decision says so
    assert request.problem is None
    assert request.submitted_at is None
    [decision] = decide(OPEN3, [request]).decisions
    assert decision.status == Status.ACCEPTED
    assert decision.detail is not None and "submitted_at dropped" in decision.detail


def test_submitted_at_within_the_bound_is_kept_as_it_is():
    for value in ("2026-01-01T00:00:00Z", "not a time at all", "y" * MAX_SUBMITTED_AT_CHARS):
        request = parse_intake({"event_id": "e1", "signup_id": "s1", "submitted_at": value}, "1")
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
    [decision] = decide(OPEN3, [parse_intake(image, "1")]).decisions
    assert decision.reason == Reason.INVALID_REQUEST
    assert decision.detail is not None and len(decision.detail) <= MAX_DETAIL_CHARS
    assert "submitted_at dropped" in decision.detail
    # AND a problem text of any length (a future rule quoting input) is cut to the bound
    long = IntakeRecord("e1", "s2", "2", problem="p" * 5000, note="dropped")
    [decision] = decide(OPEN3, [long]).decisions
    assert decision.detail is not None and len(decision.detail) == MAX_DETAIL_CHARS


@pytest.mark.parametrize(
    ("seats", "expected"),
    [
        (Decimal(1), (1, None)),
        (Decimal(MAX_SEATS), (MAX_SEATS, None)),
        (Decimal(MAX_SEATS + 1), (0, f"seats must be at most {MAX_SEATS}")),
        (Decimal(0), (0, "seats must be at least 1")),
        (Decimal("2.0"), (2, None)),
        (Decimal("2.5"), (0, "seats must be a whole number")),
        (Decimal("NaN"), (0, "seats must be a whole number")),
        ("3", (0, "seats must be a number, got str")),
        (False, (0, "seats must be a number, got bool")),
    ],
)
def test_seats_rules_exactly(seats, expected):
    """An invalid request takes no seats (0), and says why in words a producer can act on."""
    request = parse_intake({"event_id": "e1", "signup_id": "s1", "seats": seats}, "1")
    assert (request.seats, request.problem) == expected


def test_every_problem_is_reported_and_the_rest_is_copied():
    # GIVEN a record that breaks four rules at once THEN all four are named, in rule order
    image = {"event_id": "bad id", "signup_id": "-x", "seats": Decimal(0), "attributes": "x"}
    pattern = ID_PATTERN.pattern
    request = parse_intake(image, "1")
    assert request.problem == (
        f"event_id must match {pattern} (or, for a sharded event, <event_id>#<00-31>); "
        f"signup_id must match {pattern}; "
        "seats must be at least 1; attributes must be a map (a JSON object)"
    )
    assert (request.event_id, request.signup_id, request.seats, request.attributes) == (
        "bad id",
        "-x",
        0,
        {},
    )
    # GIVEN a valid record THEN seats, attributes and submitted_at are copied as they are
    image = {
        "event_id": "e1",
        "signup_id": "s1",
        "seats": Decimal(3),
        "attributes": {"vip": True},
        "submitted_at": "2026-01-01T00:00:00Z",
    }
    request = parse_intake(image, "9")
    assert (
        request.seats,
        request.attributes,
        request.submitted_at,
        request.problem,
        request.note,
    ) == (3, {"vip": True}, "2026-01-01T00:00:00Z", None, None)
    # AND valid attributes are still copied when something else is wrong
    request = parse_intake({**image, "seats": Decimal(0)}, "9")
    assert (request.attributes, request.problem) == ({"vip": True}, "seats must be at least 1")
    # AND attributes over the limit are never copied, only their problem kept
    too_big = {"k": "x" * (MAX_ATTRIBUTES_BYTES - 4)}
    request = parse_intake({**image, "attributes": too_big}, "9")
    assert request.problem is not None and "over 4096" in request.problem
    assert request.attributes == {}


def test_parse_request_defaults():
    request = parse_intake({"event_id": "e1", "signup_id": "u-1@x.io"}, "7")
    assert request.problem is None
    assert (request.seats, dict(request.attributes), request.sequence_number) == (1, {}, "7")


def test_parse_request_without_image_uses_keys():
    request = parse_intake(None, "9", keys={"event_id": "e1", "signup_id": "s1"})
    assert (request.event_id, request.signup_id, request.problem) == ("e1", "s1", None)


# -- properties of the invariants ------------------------------------------------------

SIGNUP_IDS = [f"s{i}" for i in range(25)]  # repeats model redelivery

#: Whatever a producer can put in an intake item's seats (typed values, as boto3 reads them).
hostile_seats = st.one_of(
    st.none(),
    st.integers(min_value=-3, max_value=MAX_SEATS + 3).map(Decimal),
    st.decimals(allow_nan=True, allow_infinity=True, places=2),
    st.text(max_size=3),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
hostile_attributes = st.one_of(
    st.none(),
    st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=3),
    st.just({"blob": "x" * (MAX_ATTRIBUTES_BYTES + 1)}),
    st.text(max_size=5),
    st.lists(st.text(max_size=3), max_size=2),
)
hostile_ids = st.one_of(st.sampled_from(SIGNUP_IDS), st.text(max_size=8), st.integers(), st.none())

#: One intake image: mostly well formed, sometimes anything.
images = st.one_of(
    st.fixed_dictionaries(
        {"signup_id": st.sampled_from(SIGNUP_IDS)},
        optional={"seats": st.integers(min_value=1, max_value=40).map(Decimal)},
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "signup_id": hostile_ids,
            "seats": hostile_seats,
            "attributes": hostile_attributes,
            "submitted_at": st.one_of(st.text(max_size=5), st.integers()),
        },
    ),
)

requests_strategy = st.lists(images, max_size=40).map(
    lambda raw: [
        parse_intake({"event_id": "e1", **image}, str(10_000 + i)) for i, image in enumerate(raw)
    ]
)


@st.composite
def committed_events(draw: st.DrawFn) -> Event:
    """An event as some earlier commit may have left it: seats and signups already taken."""
    capacity = draw(st.one_of(st.integers(0, 30), st.integers(0, 2 * MAX_SEATS)))
    taken = draw(st.integers(0, capacity))
    accepted = draw(st.integers(0, taken))
    return Event(
        event_id="e1",
        capacity=capacity,
        taken=taken,
        accepted=accepted,
        state=draw(st.sampled_from([EventState.OPEN, EventState.OPEN, EventState.CLOSED])),
        version=draw(st.integers(0, 10**9)),
    )


events_strategy = st.one_of(st.none(), committed_events())


def test_the_strategies_reach_what_they_claim():
    """The properties below see committed state, bad input, misses and hits."""
    seen: set[str] = set()

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(event=events_strategy, requests=requests_strategy)
    def look(event, requests):
        if event is not None and event.taken and event.accepted and event.version:
            seen.add("committed state")
        for d in decide(event, requests).decisions:
            seen.add(d.reason or "accepted")

    look()
    assert seen >= {
        "committed state",
        "accepted",
        Reason.CAPACITY_FULL,
        Reason.INVALID_REQUEST,
        Reason.UNKNOWN_EVENT,
        Reason.EVENT_CLOSED,
    }


@settings(max_examples=300, deadline=None)
@given(
    image=st.dictionaries(
        st.sampled_from(["event_id", "signup_id", "seats", "attributes", "submitted_at", "other"]),
        st.one_of(hostile_seats, hostile_attributes, hostile_ids),
    )
)
def test_any_image_parses_and_a_valid_request_is_sane(image):
    request = parse_intake(image, "1")
    if request.problem is None:
        assert 1 <= request.seats <= MAX_SEATS
        assert ID_PATTERN.fullmatch(request.event_id) and ID_PATTERN.fullmatch(request.signup_id)
        assert isinstance(request.attributes, dict)
        assert value_size(request.attributes) <= MAX_ATTRIBUTES_BYTES


@settings(max_examples=200, deadline=None)
@given(event=events_strategy, requests=requests_strategy)
def test_invalid_or_unknown_or_closed_never_takes_a_seat(event, requests):
    outcome = decide(event, requests)
    by_id: dict[str, IntakeRecord] = {}
    for r in requests:
        by_id.setdefault(r.signup_id, r)
    for d in outcome.decisions:
        request = by_id[d.signup_id]
        if request.problem:
            # the problem, then any note, cut to the bound
            detail = "; ".join(p for p in (request.problem, request.note) if p)
            if len(detail) > MAX_DETAIL_CHARS:
                detail = detail[: MAX_DETAIL_CHARS - 1] + "\u2026"
            assert (d.status, d.reason, d.detail) == (
                Status.REJECTED,
                Reason.INVALID_REQUEST,
                detail,
            )
        else:
            assert d.detail == request.note
        if request.problem is None and event is None:
            assert (d.status, d.reason) == (Status.REJECTED, Reason.UNKNOWN_EVENT)
        elif request.problem is None and event.state == EventState.CLOSED:
            assert (d.status, d.reason) == (Status.REJECTED, Reason.EVENT_CLOSED)
        assert d.seats == request.seats
        assert (d.position is not None) == d.accepted
    if event is None:
        assert outcome.state is None


@settings(max_examples=200, deadline=None)
@given(event=events_strategy, requests=requests_strategy)
def test_invariant_1_never_oversold_and_taken_matches(event, requests):
    outcome = decide(event, requests)
    accepted_seats = sum(d.seats for d in outcome.decisions if d.accepted)
    if event is None:
        assert accepted_seats == 0
        return
    assert outcome.state is not None
    assert accepted_seats <= event.capacity - event.taken
    assert outcome.state == replace(
        event,
        taken=event.taken + accepted_seats,
        accepted=event.accepted + sum(1 for d in outcome.decisions if d.accepted),
    )


@settings(max_examples=200, deadline=None)
@given(event=events_strategy, requests=requests_strategy)
def test_invariant_2_exactly_one_decision_per_signup(event, requests):
    outcome = decide(event, requests)
    ids = [d.signup_id for d in outcome.decisions]
    assert len(ids) == len(set(ids))
    assert set(ids) == {r.signup_id for r in requests}
    # Each decision belongs to the first occurrence (the earliest stream record).
    first_seq = {}
    for r in requests:
        first_seq.setdefault(r.signup_id, r.sequence_number)
    assert all(d.sequence_number == first_seq[d.signup_id] for d in outcome.decisions)


@settings(max_examples=200, deadline=None)
@given(event=events_strategy, requests=requests_strategy)
def test_invariant_3_arrival_order(event, requests):
    outcome = decide(event, requests)
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


@settings(max_examples=200, deadline=None)
@given(
    event=events_strategy,
    requests=requests_strategy,
    cut=st.integers(min_value=0, max_value=40),
)
def test_invariant_5_replaying_a_prefix_changes_nothing(event, requests, cut):
    """Deciding a prefix, then the whole stream again on top of it, equals deciding once."""
    once = decide(event, requests)
    first = decide(event, requests[:cut])
    again = decide(first.state, requests, already_decided={d.signup_id for d in first.decisions})
    assert first.decisions + again.decisions == once.decisions
    assert again.state == once.state
    # And a full replay on top of everything decides nothing new.
    replay = decide(once.state, requests, already_decided={d.signup_id for d in once.decisions})
    assert replay.decisions == () and replay.state == once.state

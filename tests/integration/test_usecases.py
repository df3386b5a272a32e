"""The use cases the API and the CLI share: validation, typed refusals, answer shapes."""

from __future__ import annotations

import time
from decimal import Decimal

import boto3
import pytest

from tests.api.helpers import decide_pending
from tests.helpers import NO_EVENT_OPTIONS, NO_LIFECYCLE_FIELDS
from turnstile import usecases
from turnstile.domain import MAX_CAPACITY, MAX_SEATS
from turnstile.errors import (
    CapacityBelowTakenError,
    ConflictError,
    EventExistsError,
    EventNotFoundError,
    InvalidRequestError,
    NotFoundError,
    SignupConflictError,
    SignupNotFoundError,
)
from turnstile.store import SignupStore

NOW = "2026-11-21T21:00:00.000000Z"


@pytest.fixture
def store(aws: boto3.Session) -> SignupStore:
    return SignupStore(client=aws.client("dynamodb"))


def submit(store: SignupStore, *args, **kwargs) -> usecases.Submitted:
    return usecases.submit_signup(store, *args, retention_days=30, **kwargs)


def test_create_show_update_close_answer_the_event_shape(store):
    result = usecases.create_event(store, "gig", 2, created_by="cli:ada", now=NOW)
    assert result.created is True
    created = result.body
    assert created == {
        "event_id": "gig",
        "capacity": 2,
        "taken": 0,
        "remaining": 2,
        "accepted": 0,
        "state": "OPEN",
        "created_at": NOW,
        "created_by": "cli:ada",
        **NO_EVENT_OPTIONS,
    }
    assert usecases.show_event(store, "gig") == created
    assert usecases.update_capacity(store, "gig", 5) == {**created, "capacity": 5, "remaining": 5}
    closed = usecases.close_event(store, "gig")
    assert closed == {
        **created,
        "capacity": 5,
        "remaining": 5,
        "state": "CLOSED",
        "closed_now": True,
    }
    assert usecases.close_event(store, "gig")["closed_now"] is False


def test_create_again_with_the_same_capacity_answers_the_event_as_it_is(store):
    first = usecases.create_event(store, "gig", 2, created_by="cli:ada", now=NOW)
    submit(store, "gig", "u1", 1)
    decide_pending(store, "gig")
    again = usecases.create_event(store, "gig", 2, created_by="cli:bob")
    # nothing created; the event now (a seat taken), still the first creator's
    assert again == usecases.Created(body=usecases.show_event(store, "gig"), created=False)
    assert (again.body["taken"], again.body["created_by"]) == (1, "cli:ada")
    assert again.body["created_at"] == first.body["created_at"]


def test_create_again_with_another_capacity_is_a_conflict_naming_it(store):
    usecases.create_event(store, "gig", 2, created_by=None)
    with pytest.raises(EventExistsError) as info:
        usecases.create_event(store, "gig", 3, created_by=None)
    assert isinstance(info.value, ConflictError)
    assert str(info.value) == "event 'gig' already exists with capacity 2, not 3"


@pytest.mark.parametrize(
    ("event_id", "capacity", "problem"),
    [
        ("gig", -1, f"capacity must be an integer from 0 to {MAX_CAPACITY}"),
        ("gig", MAX_CAPACITY + 1, f"capacity must be an integer from 0 to {MAX_CAPACITY}"),
        ("gig", 2.0, f"capacity must be an integer from 0 to {MAX_CAPACITY}"),
        ("gig", Decimal(2), f"capacity must be an integer from 0 to {MAX_CAPACITY}"),
        ("gig", True, f"capacity must be an integer from 0 to {MAX_CAPACITY}"),
        ("gig", None, f"capacity must be an integer from 0 to {MAX_CAPACITY}"),
        ("bad id", 2, "event_id must match"),
        (None, 2, "event_id must match"),
    ],
)
def test_create_refuses_what_breaks_the_rules_and_writes_nothing(
    store, event_id, capacity, problem
):
    with pytest.raises(InvalidRequestError) as info:
        usecases.create_event(store, event_id, capacity, created_by=None)
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith(problem)
    assert list(store.scan_events()) == []


def test_the_largest_capacity_is_taken(store):
    created = usecases.create_event(store, "gig", MAX_CAPACITY, created_by=None)
    assert created.body["capacity"] == MAX_CAPACITY


def test_unknown_events_are_not_found(store):
    for call in (
        lambda: usecases.show_event(store, "nope"),
        lambda: usecases.update_capacity(store, "nope", 3),
        lambda: usecases.close_event(store, "nope"),
        lambda: submit(store, "nope", "u1"),
    ):
        with pytest.raises(EventNotFoundError, match="no event 'nope'") as info:
            call()
        assert isinstance(info.value, NotFoundError)
    # and the submission was not recorded, to be rejected later as unknown_event
    assert store.get_intake("nope", "u1") is None


def test_capacity_below_taken_is_refused(store):
    usecases.create_event(store, "gig", 3, created_by=None)
    submit(store, "gig", "u1", 2)
    decide_pending(store, "gig")
    with pytest.raises(CapacityBelowTakenError):
        usecases.update_capacity(store, "gig", 1)
    assert usecases.update_capacity(store, "gig", 2)["remaining"] == 0


def test_submit_records_a_pending_signup_with_its_expiry(store):
    usecases.create_event(store, "gig", 2, created_by=None)
    before = int(time.time())
    submitted = submit(store, "gig", "u1", 2, {"name": "Ada"}, now=NOW)
    assert submitted == usecases.Submitted(
        body={
            "status": "PENDING",
            "event_id": "gig",
            "signup_id": "u1",
            "seats": 2,
            "submitted_at": NOW,
        },
        created=True,
    )
    intake = store.get_intake("gig", "u1")
    assert intake is not None and intake["attributes"] == {"name": "Ada"}
    assert before + 30 * 86_400 <= int(intake["expires_at"]) <= int(time.time()) + 30 * 86_400
    # the same body again: recorded once, the first submission's time answered
    again = submit(store, "gig", "u1", 2, {"name": "Ada"}, now="2026-11-21T22:00:00Z")
    assert again == usecases.Submitted(body=submitted.body, created=False)
    with pytest.raises(SignupConflictError) as info:
        submit(store, "gig", "u1", 1)
    assert isinstance(info.value, ConflictError)


def test_seats_left_out_mean_one(store):
    usecases.create_event(store, "gig", 2, created_by=None)
    assert submit(store, "gig", "u1").body["seats"] == 1


@pytest.mark.parametrize(
    ("signup_id", "seats", "attributes", "problems"),
    [
        ("u1", 0, usecases.ABSENT, [f"seats must be an integer from 1 to {MAX_SEATS}"]),
        ("u1", MAX_SEATS + 1, usecases.ABSENT, [f"seats must be an integer from 1 to {MAX_SEATS}"]),
        (
            "u1",
            Decimal("2.0"),
            usecases.ABSENT,
            [f"seats must be an integer from 1 to {MAX_SEATS}"],
        ),
        ("u1", True, usecases.ABSENT, [f"seats must be an integer from 1 to {MAX_SEATS}"]),
        ("u1", None, usecases.ABSENT, [f"seats must be an integer from 1 to {MAX_SEATS}"]),
        ("u1", 1, None, ["attributes must be a map (a JSON object), or left out"]),
        ("u1", 1, [1], ["attributes must be a map (a JSON object)"]),
        ("u1", 1, {"": 1}, ["attribute names must be non-empty"]),
        # every problem the one validator finds is named
        ("u 1", 1, [1], ["signup_id must match", "attributes must be a map (a JSON object)"]),
    ],
)
def test_submit_refuses_what_the_processor_would_reject(
    store, signup_id, seats, attributes, problems
):
    usecases.create_event(store, "gig", 2, created_by=None)
    with pytest.raises(InvalidRequestError) as info:
        submit(store, "gig", signup_id, seats, attributes)
    assert len(info.value.problems) == len(problems)
    for found, expected in zip(info.value.problems, problems, strict=True):
        assert found.startswith(expected)
    assert str(info.value) == "; ".join(info.value.problems)
    assert list(store.intake_items("gig")) == []


def test_status_pending_then_decided(store):
    usecases.create_event(store, "gig", 2, created_by=None)
    submit(store, "gig", "u1", 2, {"n": Decimal("1.5")}, now=NOW)
    submit(store, "gig", "u2", 1, now=NOW)
    pending = usecases.signup_status(store, "gig", "u1")
    assert pending == {
        "event_id": "gig",
        "signup_id": "u1",
        "status": "PENDING",
        "seats": 2,
        "reason": None,
        "detail": None,
        "position": None,
        "submitted_at": NOW,
        "decided_at": None,
        "attributes": {"n": 1.5},
        **NO_LIFECYCLE_FIELDS,
    }
    decide_pending(store, "gig", decided_at="2026-11-21T21:30:00Z")
    accepted = usecases.signup_status(store, "gig", "u1")
    assert accepted == {
        **pending,
        "status": "ACCEPTED",
        "position": 1,
        "decided_at": "2026-11-21T21:30:00Z",
    }
    rejected = usecases.signup_status(store, "gig", "u2")
    assert (rejected["status"], rejected["reason"], rejected["position"]) == (
        "REJECTED",
        "capacity_full",
        None,
    )


def test_status_of_an_unknown_signup_is_not_found(store):
    with pytest.raises(SignupNotFoundError, match="no signup 'ghost' for event 'gig'") as info:
        usecases.signup_status(store, "gig", "ghost")
    assert isinstance(info.value, NotFoundError)
    with pytest.raises(InvalidRequestError, match="signup_id must match"):
        usecases.signup_status(store, "gig", "bad id")


# -- waiting for a decision --------------------------------------------------------------


class Clock:
    """A clock that only the sleeps move; ``on_sleep`` runs at each one."""

    def __init__(self, on_sleep=None) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.on_sleep:
            self.on_sleep(len(self.sleeps))

    def __call__(self) -> float:
        return self.now


class CountingStore(SignupStore):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[str] = []

    def get_decision(self, *args, **kwargs):
        self.reads.append("decision")
        return super().get_decision(*args, **kwargs)

    def get_intake(self, *args, **kwargs):
        self.reads.append("intake")
        return super().get_intake(*args, **kwargs)


@pytest.fixture
def counting(aws: boto3.Session) -> CountingStore:
    return CountingStore(client=aws.client("dynamodb"))


def test_await_decision_answers_once_the_decision_is_read(counting):
    usecases.create_event(counting, "gig", 1, created_by=None)
    submit(counting, "gig", "u1")
    # GIVEN the processor decides during the third pause
    clock = Clock(on_sleep=lambda n: n == 3 and decide_pending(counting, "gig"))
    counting.reads.clear()
    # WHEN
    status = usecases.await_decision(
        counting, "gig", "u1", 10, sleep=clock.sleep, clock=clock, first_delay_s=0.05
    )
    # THEN the decision, read right after that pause; after the first full status read
    # (decision, intake) only the decision item was polled, with growing pauses
    assert status == usecases.signup_status(counting, "gig", "u1")
    assert status["status"] == "ACCEPTED"
    assert clock.sleeps == [0.05, 0.1, 0.2]
    assert counting.reads[:5] == ["decision", "intake", "decision", "decision", "decision"]


def test_await_decision_answers_pending_at_the_deadline(counting):
    usecases.create_event(counting, "gig", 1, created_by=None)
    submit(counting, "gig", "u1")
    clock = Clock()
    status = usecases.await_decision(counting, "gig", "u1", 2.0, sleep=clock.sleep, clock=clock)
    assert status["status"] == "PENDING"
    assert clock.now == pytest.approx(102.0)  # not a moment past it
    assert max(clock.sleeps) == 0.5  # pauses double up to max_delay_s
    assert counting.reads.count("intake") == 1


def test_await_decision_of_an_unknown_signup_is_not_found_at_once(store):
    clock = Clock()
    with pytest.raises(SignupNotFoundError):
        usecases.await_decision(store, "gig", "ghost", 10, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == []


# -- lists -------------------------------------------------------------------------------


def test_lists_page_through_events_and_signups(store):
    for n in range(3):
        usecases.create_event(store, f"e{n}", 1, created_by=None)
    for n in range(4):
        submit(store, "e0", f"u{n}")
    decide_pending(store, "e0")
    first = usecases.list_events(store, limit=2)
    rest = usecases.list_events(store, limit=2, next_token=first["next"])
    listed = [e["event_id"] for e in first["events"] + rest["events"]]
    assert sorted(listed) == ["e0", "e1", "e2"] and rest["next"] is None
    page = usecases.list_signups(store, "e0", "REJECTED", limit=2)
    assert [s["signup_id"] for s in page["signups"]] == ["u1", "u2"]
    page = usecases.list_signups(store, "e0", "REJECTED", limit=2, next_token=page["next"])
    assert ([s["signup_id"] for s in page["signups"]], page["next"]) == (["u3"], None)


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda s: usecases.list_signups(s, "e0", "accepted"), "status must be one of"),
        (lambda s: usecases.list_signups(s, "e0", limit=0), "limit must be an integer from 1"),
        (lambda s: usecases.list_events(s, limit=101), "limit must be an integer from 1 to 100"),
        (lambda s: usecases.list_events(s, limit=True), "limit must be an integer"),
        (lambda s: usecases.list_events(s, next_token="x"), "next is not a token"),
        (lambda s: usecases.list_signups(s, "bad id"), "event_id must match"),
    ],
)
def test_lists_refuse_bad_parameters(store, call, problem):
    usecases.create_event(store, "e0", 1, created_by=None)
    with pytest.raises(InvalidRequestError) as info:
        call(store)
    assert str(info.value).startswith(problem)

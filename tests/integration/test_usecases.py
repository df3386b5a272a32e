"""The use cases the API and the CLI share: validation, typed refusals, answer shapes."""

from __future__ import annotations

import re
import time
from decimal import Decimal

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.api.helpers import decide_pending
from tests.helpers import NO_EVENT_OPTIONS, NO_LIFECYCLE_FIELDS, put_decision
from turnstile.base.contract import MAX_LINEUP_ENTRIES, undecided_shard
from turnstile.base.errors import (
    CapacityBelowTakenError,
    ConflictError,
    EventExistsError,
    EventNotFoundError,
    InvalidRequestError,
    NotFoundError,
    RequestRefusedError,
    SignupConflictError,
    SignupNotFoundError,
)
from turnstile.engine.rules import MAX_CAPACITY, MAX_SEATS
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile.service import usecases
from turnstile.storage.store import SignupStore
from turnstile_tools.local.context import LocalLambdaContext

NOW = "2026-11-21T21:00:00.000000Z"


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
        "positions_given": 0,
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
        with pytest.raises(EventNotFoundError, match="no such event 'nope'") as info:
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
    decided_at = "2026-11-21T21:30:00Z"
    [decision] = accepted["history"]  # its one transition, read off the item
    assert decision == {
        "from": "PENDING",
        "to": "ACCEPTED",
        "at": decided_at,
        "sequence_number": decision["sequence_number"],
        "cause": "signup",
    }
    assert accepted == {
        **pending,
        "status": "ACCEPTED",
        "position": 1,
        "decided_at": decided_at,
        "updated_at": decided_at,
        "history": [decision],
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


# -- event options (docs/lifecycle.md, §1) -----------------------------------------------


def test_options_are_written_read_and_shown(store, aws):
    # WHEN an event is created with every option
    body = usecases.create_event(
        store, "gig", 10, None, now=NOW, waitlist=5, hold_seconds=300, max_seats=4
    ).body
    # THEN the answer, the event as read back, and the item all have them
    options = {"waitlist": 5, "hold_seconds": 300, "max_seats": 4, "status_counts": {}}
    assert {k: body[k] for k in options} == options
    assert usecases.show_event(store, "gig") == body
    record = store.get_event("gig")
    assert (record.event.waitlist, record.event.hold_seconds, record.event.max_seats) == (5, 300, 4)
    # and the same body again is the event as it is; other options are a conflict
    again = usecases.create_event(store, "gig", 10, None, waitlist=5, hold_seconds=300, max_seats=4)
    assert (again.created, again.body) == (False, body)
    with pytest.raises(EventExistsError, match="hold_seconds 300"):
        usecases.create_event(store, "gig", 10, None, waitlist=5, max_seats=4)


def test_an_event_without_options_is_written_as_before(store, aws):
    # WHEN an event is created with the options at their defaults
    usecases.create_event(store, "gig", 3, "cli:ada", now=NOW, waitlist=0, hold_seconds=0)
    # THEN its item names none of them (the item an older turnstile wrote)
    item = aws.client("dynamodb").get_item(
        TableName="turnstile-control", Key={"pk": {"S": "EVENT#gig"}, "sk": {"S": "EVENT"}}
    )["Item"]
    assert set(item) == {"pk", "sk", "event_id", "capacity", "state", "created_at", "created_by"}


def test_status_counts_are_shown_as_the_processor_keeps_them(store, aws):
    usecases.create_event(store, "gig", 3, None)
    aws.client("dynamodb").update_item(
        TableName="turnstile-control",
        Key={"pk": {"S": "EVENT#gig"}, "sk": {"S": "EVENT"}},
        UpdateExpression="SET status_counts = :counts",
        ExpressionAttributeValues={
            ":counts": {"M": {"HELD": {"N": "2"}, "WAITLISTED": {"N": "1"}}}
        },
    )
    assert usecases.show_event(store, "gig")["status_counts"] == {"HELD": 2, "WAITLISTED": 1}
    [listed] = usecases.list_events(store)["events"]
    assert listed["status_counts"] == {"HELD": 2, "WAITLISTED": 1}


@pytest.mark.parametrize(
    ("capacity", "options", "problem"),
    [
        (
            10,
            {"waitlist": MAX_LINEUP_ENTRIES + 1},
            f"waitlist must be an integer from 0 to {MAX_LINEUP_ENTRIES}",
        ),
        (10, {"waitlist": -1}, f"waitlist must be an integer from 0 to {MAX_LINEUP_ENTRIES}"),
        (10, {"hold_seconds": 86_401}, "hold_seconds must be an integer from 0 to 86400"),
        (10, {"hold_seconds": True}, "hold_seconds must be an integer"),
        (10, {"max_seats": 0}, f"max_seats must be an integer from 1 to {MAX_SEATS}"),
        (10, {"max_seats": MAX_SEATS + 1}, "max_seats must be an integer"),
        (10, {"waitlist": "3"}, "waitlist must be an integer"),
        # null is no default: leave an option out
        (10, {"max_seats": None}, "max_seats must be an integer"),
        (10, {"waitlist": None}, "waitlist must be an integer"),
        # with holds the lineup holds capacity + waitlist entries at most
        (
            MAX_LINEUP_ENTRIES,
            {"hold_seconds": 60, "waitlist": 1},
            f"capacity + waitlist of at most {MAX_LINEUP_ENTRIES}",
        ),
        (
            MAX_LINEUP_ENTRIES + 1,
            {"hold_seconds": 1},
            f"{MAX_LINEUP_ENTRIES + 1} + 0 = {MAX_LINEUP_ENTRIES + 1}",
        ),
    ],
)
def test_options_that_break_the_rules_or_the_lineup_bound_are_refused(
    store, capacity, options, problem
):
    with pytest.raises(InvalidRequestError, match=re.escape(problem)):
        usecases.create_event(store, "gig", capacity, None, **options)
    assert store.get_event("gig") is None


def test_the_lineup_bound_allows_its_limit_and_no_bound_without_holds(store):
    usecases.create_event(store, "held", MAX_LINEUP_ENTRIES - 1, None, hold_seconds=60, waitlist=1)
    usecases.create_event(store, "big", 10**6, None, waitlist=MAX_LINEUP_ENTRIES)
    assert store.get_event("held").event.hold_seconds == 60
    assert store.get_event("big").event.waitlist == MAX_LINEUP_ENTRIES


def test_a_capacity_update_may_not_break_the_lineup_bound_of_an_event_with_holds(store):
    top = MAX_LINEUP_ENTRIES - 100
    usecases.create_event(store, "held", top, None, hold_seconds=60, waitlist=100)
    usecases.create_event(store, "plain", top, None, waitlist=100)
    over = rf"capacity {top + 1}: .* {top + 1} \+ 100 = {MAX_LINEUP_ENTRIES + 1}"
    with pytest.raises(InvalidRequestError, match=over):
        usecases.update_capacity(store, "held", top + 1)
    assert store.get_event("held").event.capacity == top
    assert usecases.update_capacity(store, "held", top - 1)["capacity"] == top - 1
    assert usecases.update_capacity(store, "plain", 10**6)["capacity"] == 10**6


# -- confirm and cancel (docs/lifecycle.md, §10) -----------------------------------------

LATER = "2999-01-01T00:00:00.000000Z"
EARLIER = "2000-01-01T00:00:00.000000Z"


class CallCounting:
    """A DynamoDB client that records the operations called (and can hide the
    cancellation reasons, as an endpoint that names none would)."""

    def __init__(self, client, hide_reasons: bool = False) -> None:
        self.client = client
        self.hide_reasons = hide_reasons
        self.calls: list[str] = []

    def __getattr__(self, name):
        method = getattr(self.client, name)

        def call(**kwargs):
            self.calls.append(name)
            try:
                return method(**kwargs)
            except ClientError as exc:
                if self.hide_reasons:
                    exc.response.pop("CancellationReasons", None)
                raise

        return call


@pytest.fixture
def held(store, aws) -> SignupStore:
    """gig: h HELD until much later, late HELD until long ago, a ACCEPTED, w WAITLISTED,
    r REJECTED, c CANCELLED, p PENDING (no decision item yet)."""
    client = aws.client("dynamodb")
    usecases.create_event(store, "gig", 10, None, hold_seconds=60, waitlist=5)
    for signup_id in ("h", "late", "a", "w", "r", "c", "p"):
        submit(store, "gig", signup_id, now=NOW)
    put_decision(client, "gig", "h", "HELD", position=1, hold_expires_at=LATER)
    put_decision(client, "gig", "late", "HELD", position=2, hold_expires_at=EARLIER)
    put_decision(client, "gig", "a", "ACCEPTED", position=3)
    put_decision(client, "gig", "w", "WAITLISTED", waitlist_position=1)
    put_decision(client, "gig", "r", "REJECTED", reason="seats_above_max")
    put_decision(client, "gig", "c", "CANCELLED", position=4)
    return store


def test_a_confirm_of_a_held_signup_is_recorded_on_its_intake_item(held, aws):
    # WHEN a HELD signup is confirmed, twice
    answer = usecases.request_signup(held, "gig", "h", "confirm", now=NOW)
    # THEN it is recorded: the request, its count, and the marker that puts the record back
    # in the sweeper's index
    assert answer == {"event_id": "gig", "signup_id": "h", "request": "confirm"}
    intake = held.get_intake("gig", "h")
    assert (intake["request"], intake["request_count"]) == ("confirm", 1)
    assert intake["undecided"] == undecided_shard("gig", "h")
    usecases.request_signup(held, "gig", "h", "confirm", now=NOW)
    assert held.get_intake("gig", "h")["request_count"] == 2
    # and the intake record is otherwise as it was submitted
    assert (intake["seats"], intake["submitted_at"]) == (1, NOW)


@pytest.mark.parametrize("signup_id", ["h", "late", "a", "w"])
def test_a_cancel_is_recorded_from_held_accepted_or_waitlisted(held, signup_id):
    usecases.request_signup(held, "gig", signup_id, "cancel", now=NOW)
    intake = held.get_intake("gig", signup_id)
    assert (intake["request"], intake["request_count"]) == ("cancel", 1)


@pytest.mark.parametrize(
    ("kind", "signup_id", "status", "expires", "reason"),
    [
        ("confirm", "late", "HELD", EARLIER, None),  # its hold lapsed: too late
        ("confirm", "a", "ACCEPTED", None, None),
        ("confirm", "w", "WAITLISTED", None, None),
        ("confirm", "r", "REJECTED", None, "seats_above_max"),
        ("confirm", "p", "PENDING", None, None),  # not decided yet
        ("cancel", "r", "REJECTED", None, "seats_above_max"),
        ("cancel", "c", "CANCELLED", None, None),
        ("cancel", "p", "PENDING", None, None),
    ],
)
def test_a_request_the_status_refuses_records_nothing_and_says_the_status(
    held, aws, kind, signup_id, status, expires, reason
):
    # GIVEN a client that counts the calls made
    counting = CallCounting(aws.client("dynamodb"))
    store = SignupStore(client=counting)
    before = held.get_intake("gig", signup_id)
    # WHEN
    with pytest.raises(RequestRefusedError) as refused:
        usecases.request_signup(store, "gig", signup_id, kind, now=NOW)
    # THEN the refusal has the status as the transaction saw it, from its own answer (and
    # one read of the event's last commit, the state the request will be applied to: it
    # does not say otherwise here), and nothing was written
    error = refused.value
    assert (error.status, error.hold_expires_at, error.reason) == (status, expires, reason)
    assert (error.event_id, error.signup_id, error.request) == ("gig", signup_id, kind)
    assert f"cannot {kind} signup '{signup_id}' of event 'gig': it is {status}" in str(error)
    assert isinstance(error, ConflictError)
    assert counting.calls == ["transact_write_items", "get_item"]
    assert held.get_intake("gig", signup_id) == before


def test_a_refusal_is_told_by_reads_only_where_the_endpoint_names_no_reasons(held, aws):
    # GIVEN an endpoint whose cancellations name no reasons
    counting = CallCounting(aws.client("dynamodb"), hide_reasons=True)
    store = SignupStore(client=counting)
    # WHEN / THEN the same answers, from one read of each item (and of the event's last
    # commit, as every refusal)
    with pytest.raises(RequestRefusedError) as refused:
        usecases.request_signup(store, "gig", "late", "confirm", now=NOW)
    assert (refused.value.status, refused.value.hold_expires_at) == ("HELD", EARLIER)
    assert counting.calls == ["transact_write_items", "get_item", "get_item", "get_item"]
    with pytest.raises(SignupNotFoundError):
        usecases.request_signup(store, "gig", "ghost", "cancel", now=NOW)


def test_a_request_for_a_signup_never_submitted_is_not_found(held, aws):
    counting = CallCounting(aws.client("dynamodb"))
    store = SignupStore(client=counting)
    with pytest.raises(SignupNotFoundError, match="no signup 'ghost' for event 'gig'"):
        usecases.request_signup(store, "gig", "ghost", "confirm", now=NOW)
    assert counting.calls == ["transact_write_items"]
    # nothing was written for it either
    assert held.get_intake("gig", "ghost") is None


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("bad id", "h", "confirm"), "event_id must match"),
        (("gig", "bad id", "cancel"), "signup_id must match"),
        (("gig", "h", "hold"), "request must be one of confirm, cancel"),
    ],
)
def test_a_request_with_bad_input_is_invalid(held, args, problem):
    with pytest.raises(InvalidRequestError, match=problem):
        usecases.request_signup(held, *args)


def test_the_status_shows_the_lifecycle_fields_of_the_decision(store, aws):
    usecases.create_event(store, "gig", 2, None, hold_seconds=60)
    submit(store, "gig", "u1", now=NOW)
    # as the processor stores it: the decision on the item, the later moves in history
    held = {"from": "PENDING", "to": "HELD", "at": NOW, "sequence_number": "100", "cause": "signup"}
    lapsed = {
        "from": "HELD",
        "to": "EXPIRED",
        "at": LATER,
        "sequence_number": "150",
        "cause": "expiry",
    }
    refusal = {
        "request": "confirm",
        "reason": "hold_expired",
        "status": "EXPIRED",
        "at": LATER,
        "sequence_number": "200",
    }
    put_decision(
        aws.client("dynamodb"),
        "gig",
        "u1",
        "EXPIRED",
        seats=1,
        position=1,
        hold_expires_at=EARLIER,
        decided_at=NOW,
        sequence_number="100",
        request_count=1,
        history=[lapsed],
        last_refusal=refusal,
    )
    status = usecases.signup_status(store, "gig", "u1")
    assert {k: status[k] for k in NO_LIFECYCLE_FIELDS} == {
        "hold_expires_at": EARLIER,
        "waitlist_position": None,
        "updated_at": LATER,
        "request_count": 1,
        "history": [held, lapsed],
        "last_refusal": refusal,
    }
    assert usecases.list_signups(store, "gig", "EXPIRED")["signups"] == [status]


def decide_stream(store: SignupStore, stream) -> None:
    """What the intake stream delivered since the last call, through the stream handler."""
    stream_handler._processor = StreamProcessor(store)
    try:
        answer = stream_handler.handler({"Records": stream.read_new()}, LocalLambdaContext())
    finally:
        stream_handler._processor = None
    assert answer == {"batchItemFailures": []}


def test_requests_made_here_are_applied_by_the_stream_processor(store, stream):
    # GIVEN an event with holds and a waitlist of one: two signups hold its two seats,
    # the third waits
    usecases.create_event(store, "gig", 2, None, hold_seconds=600, waitlist=1)
    for signup_id in ("u1", "u2", "u3"):
        submit(store, "gig", signup_id)
    decide_stream(store, stream)
    states = [usecases.signup_status(store, "gig", s)["status"] for s in ("u1", "u2", "u3")]
    assert states == ["HELD", "HELD", "WAITLISTED"]
    # WHEN the first is confirmed and the second cancelled, here
    usecases.request_signup(store, "gig", "u1", "confirm")
    usecases.request_signup(store, "gig", "u2", "cancel")
    decide_stream(store, stream)
    # THEN the processor applied both: the cancelled seat went to the one waiting
    u1, u2, u3 = (usecases.signup_status(store, "gig", s) for s in ("u1", "u2", "u3"))
    assert (u1["status"], u2["status"], u3["status"]) == ("ACCEPTED", "CANCELLED", "HELD")
    assert [h["to"] for h in u1["history"]] == ["HELD", "ACCEPTED"]
    assert (u1["request_count"], u2["request_count"]) == (1, 1)
    assert u3["hold_expires_at"] is not None
    counts = usecases.show_event(store, "gig")["status_counts"]
    assert {k: v for k, v in counts.items() if v} == {"ACCEPTED": 1, "CANCELLED": 1, "HELD": 1}
    # and a request its new status refuses is refused here, with that status
    with pytest.raises(RequestRefusedError, match="it is CANCELLED"):
        usecases.request_signup(store, "gig", "u2", "cancel")

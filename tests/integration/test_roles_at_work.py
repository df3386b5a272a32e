"""Each function's code, run under its deployed role, does its whole job, and nothing
outside it gets through: IAM alone keeps a role to its job.

moto enforces no IAM: the store's client here (``tests.roles.CheckedClient``) refuses what
the role's statements (the generated ``turnstile_tools/local/roles.json``, which
tests/infra/test_local_roles.py keeps equal to a synthesis) would not allow on AWS.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from botocore.exceptions import ClientError

from tests.api.helpers import v2_event
from tests.helpers import put_raw_intake
from tests.oracle import decide
from tests.roles import CheckedClient, roles_without, table_of
from turnstile.base.clock import iso_of_ms, ms_of
from turnstile.base.contract import (
    STREAM_SOURCE,
    WAKE_SOURCE,
    Attr,
    ControlKey,
    EventSourceSettings,
    Function,
    LeaseAttr,
    Reason,
    RequestKind,
    RunAttr,
    RunStatus,
    Status,
    WakeAttr,
    WakeReason,
    undecided_shard,
)
from turnstile.base.errors import StoreUnavailableError
from turnstile.base.eventfilter import matches_any
from turnstile.engine.lifecycle import Event
from turnstile.handlers import stream as stream_handler
from turnstile.handlers.stream import to_stream_record
from turnstile.jobs.due_holds import release_due_holds
from turnstile.jobs.processor import StreamProcessor
from turnstile.jobs.sweeper import Sweeper
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.ledger import Ledger
from turnstile.storage.store import SignupStore
from turnstile.web.api import WAITING_ROUTES, create_app
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.iam import Request
from turnstile_tools.local.roles import LocalRoles
from turnstile_tools.redrive import redrive_queue

API = Function.API
WAITER = Function.WAITER
PROCESSOR = Function.PROCESSOR
SWEEPER = Function.SWEEPER
DUE_HOLDS = Function.DUE_HOLDS
NOW = "2026-01-01T00:00:00.000000Z"
OLD = "2020-01-01T00:00:00Z"


@pytest.fixture
def plain(aws) -> SignupStore:
    """A store with every right, to set scenes up and to check the outcome."""
    return SignupStore(aws.client("dynamodb"), sleep=lambda _: None)


@pytest.fixture
def as_role(aws) -> Callable[[str], tuple[SignupStore, CheckedClient]]:
    def build(role: str) -> tuple[SignupStore, CheckedClient]:
        client = CheckedClient(aws.client("dynamodb"), role)
        return SignupStore(client, sleep=lambda _: None), client

    return build


@pytest.fixture(autouse=True)
def fresh_processor():
    stream_handler._processor = None
    yield
    stream_handler._processor = None


def decide_stream(store: SignupStore, stream) -> dict[str, Any]:
    stream_handler._processor = StreamProcessor(store)
    return stream_handler.handler({"Records": stream.read_new()}, LocalLambdaContext())


def delivered(reader: Any, source: EventSourceSettings) -> list[dict[str, Any]]:
    """The reader's new records that ``source``'s event source mapping delivers (its
    filter): for the control table's stream (``WAKE_SOURCE``), its wake-ups only."""
    return [r for r in reader.read_new() if matches_any(source.filter_patterns, r)]


def wake_items(plain: SignupStore) -> dict[str, dict[str, Any]]:
    """Every wake-up item of the control table, by the event it wakes."""
    items = plain.dynamo.items(
        "scan",
        TableName=plain.control_table,
        ConsistentRead=True,
        FilterExpression="begins_with(#pk, :prefix)",
        ExpressionAttributeNames={"#pk": ControlKey.PK},
        ExpressionAttributeValues={":prefix": {"S": ControlKey.WAKE_PREFIX}},
    )
    return {str(i[ControlKey.PK]).removeprefix(ControlKey.WAKE_PREFIX): i for i in items}


def woken_events(wakes: Any) -> list[str]:
    """The events whose wake-ups came down the control table's stream since the last read
    (as the processor's wake-up mapping delivers them), in stream order. (moto streams an
    item's creation by UpdateItem as two INSERT records: count wake-ups on the item.)"""
    return [
        r["dynamodb"]["Keys"][ControlKey.PK]["S"].removeprefix(ControlKey.WAKE_PREFIX)
        for r in delivered(wakes, WAKE_SOURCE)
    ]


def test_the_api_role_runs_every_route(as_role, plain, stream, wakes):
    api_store, api_client = as_role(API)
    waiter_store, waiter_client = as_role(WAITER)
    processor_store, processor_client = as_role(PROCESSOR)
    app = create_app(store=lambda: api_store)
    # The waiting read runs as the waiter, a function (and role) of its own.
    waiter = create_app(store=lambda: waiter_store, routes=WAITING_ROUTES)

    def call(method: str, path: str, body: Any = None, query: str = "") -> tuple[int, Any]:
        served = waiter if path.endswith("/decision") else app
        response = served.resolve(v2_event(method, path, body, query=query), LocalLambdaContext())
        return response["statusCode"], json.loads(response["body"])

    assert call("POST", "/events", {"event_id": "gala", "capacity": 2})[0] == 201
    assert call("POST", "/events", {"event_id": "gala", "capacity": 2})[0] == 200
    assert call("POST", "/events", {"event_id": "gala", "capacity": 3})[0] == 409
    assert call("PATCH", "/events/gala", {"capacity": 3})[1]["capacity"] == 3
    for signup in ("ada", "bob"):
        assert call("POST", "/events/gala/signups", {"signup_id": signup, "seats": 1})[0] == 202
    assert call("POST", "/events/gala/signups", {"signup_id": "ada", "seats": 1})[0] == 202
    assert call("POST", "/events/gala/signups", {"signup_id": "ada", "seats": 2})[0] == 409
    assert call("GET", "/events/gala/signups/ada")[1]["status"] == "PENDING"
    waited = call("GET", "/events/gala/signups/ada/decision", query="wait=0.2")
    assert waited[1]["status"] == "PENDING"
    pending = call("GET", "/events/gala/signups", query="status=PENDING&limit=1")[1]
    assert [s["signup_id"] for s in pending["signups"]] == ["ada"]
    rest = call("GET", "/events/gala/signups", query=f"status=PENDING&next={pending['next']}")
    assert [s["signup_id"] for s in rest[1]["signups"]] == ["bob"]
    assert decide_stream(processor_store, stream) == {"batchItemFailures": []}
    assert call("GET", "/events/gala/signups/bob")[1]["status"] == "ACCEPTED"
    assert call("GET", "/events/gala/signups/bob/decision")[1]["status"] == "ACCEPTED"
    # A confirm or cancel: recorded on intake (202), or refused with the status (409)
    assert call("POST", "/events/gala/signups/bob/cancel")[0] == 202
    status, body = call("POST", "/events/gala/signups/bob/confirm")
    assert (status, body["status"]) == (409, "ACCEPTED")
    assert call("POST", "/events/gala/signups/ghost/cancel")[0] == 404
    accepted = call("GET", "/events/gala/signups", query="status=ACCEPTED")[1]["signups"]
    assert [s["signup_id"] for s in accepted] == ["ada", "bob"]
    listed = call("GET", "/events", query="limit=5")[1]
    assert [e["event_id"] for e in listed["events"]] == ["gala"]
    status, body = call("PATCH", "/events/gala", {"capacity": 1})
    assert (status, body["error"]) == (400, "capacity_below_taken")
    assert call("PATCH", "/events/gala", {"capacity": 2})[1]["capacity"] == 2
    assert call("POST", "/events/gala/close")[1]["closed_now"] is True
    assert call("POST", "/events/gala/close")[1]["closed_now"] is False
    status, body = call("GET", "/events/gala")
    assert (status, body["state"], body["taken"]) == (200, "CLOSED", 2)
    assert call("GET", "/events/nope")[0] == 404
    assert api_client.denied == [] and processor_client.denied == []
    # The waiter read an intake record and decisions: point reads, nothing else.
    assert waiter_client.denied == []
    assert {(r.action, table_of(r)) for r in waiter_client.allowed} == {
        ("dynamodb:GetItem", "turnstile-intake"),
        ("dynamodb:GetItem", "turnstile-main"),
    }
    # It wrote event items only through the attribute-restricted UpdateItem.
    control_writes = {r.action for r in api_client.allowed if table_of(r) == "turnstile-control"}
    assert control_writes == {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Scan"}
    # Intake: the submissions' puts and the requests' attribute-restricted updates; main:
    # reads and the requests' condition checks, never a write.
    intake = {r.action for r in api_client.allowed if table_of(r) == "turnstile-intake"}
    assert intake == {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:UpdateItem",
    }
    main = {r.action for r in api_client.allowed if table_of(r) == "turnstile-main"}
    assert main == {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem"}
    updates = {
        frozenset(r.attributes)
        for r in api_client.allowed
        if r.action == "dynamodb:UpdateItem" and table_of(r) == "turnstile-intake"
    }
    request = {"event_id", "signup_id", "request", "requests", "request_count", "undecided"}
    # a request is held to its owner (named in the condition), an organizer's is not
    assert request | {"owner"} in updates
    assert updates <= {frozenset(request), frozenset(request | {"owner"})}
    # Control: the event item, and the event's wake-up after each capacity change and
    # close (two of each: the refused capacity below the seats taken woke nothing), its
    # counter, time and reason only; nothing else.
    control_updates = [
        (r.leading_keys, r.attributes)
        for r in api_client.allowed
        if r.action == UPDATE and table_of(r) == CONTROL
    ]
    woke = [a for k, a in control_updates if k == {"WAKE#gala"}]
    assert woke == [WAKE_ATTRIBUTES] * 4
    assert {k for k, _ in control_updates} == {frozenset({"EVENT#gala"}), frozenset({"WAKE#gala"})}
    assert set(woken_events(wakes)) == {"gala"}
    wake = wake_items(plain)["gala"]
    assert (wake[WakeAttr.WAKES], wake[WakeAttr.REASON]) == (4, WakeReason.CLOSE)
    # Its Scan of control projects an event's public fields only, never the journal.
    (scan,) = {r for r in api_client.allowed if r.action == "dynamodb:Scan"}
    assert scan.select == "SPECIFIC_ATTRIBUTES" and "journal" not in scan.attributes


def test_the_api_role_may_not_scan_control_whole(aws, as_role):
    """Without the projection (or without Select) the API's Scan of control is refused:
    it could otherwise read journals, parked records' attributes, the sweeper's items."""
    api_store, api_client = as_role(API)
    for extra in ({}, {"Select": "ALL_ATTRIBUTES"}):
        with pytest.raises(ClientError, match="AccessDenied"):
            api_client.scan(TableName=api_store.control_table, **extra)
    with pytest.raises(ClientError, match="AccessDenied"):
        api_client.scan(
            TableName=api_store.control_table,
            ProjectionExpression="#pk, #journal",
            ExpressionAttributeNames={"#pk": "pk", "#journal": "journal"},
            Select="SPECIFIC_ATTRIBUTES",
        )


def _api_call(store: SignupStore, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    app = create_app(store=lambda: store)
    response = app.resolve(v2_event(method, path, body), LocalLambdaContext())
    return response["statusCode"], json.loads(response["body"])


def _deliver_wakes(store: SignupStore, wakes: Any) -> dict[str, Any]:
    """The control table's new wake-ups through the handler (as the wake-up mapping
    delivers them), by a processor over ``store``; {} if there was none."""
    records = delivered(wakes, WAKE_SOURCE)
    if not records:
        return {}
    stream_handler._processor = StreamProcessor(store)
    return stream_handler.handler({"Records": records}, LocalLambdaContext())


#: An organizer's change through the API: the call, what the waiting signup becomes at
#: the event's next step, and the reason the wake-up gives.
ORGANIZER_CHANGES: dict[str, tuple[tuple[Any, ...], str, str]] = {
    "capacity-raised": (
        ("PATCH", "/events/gig", {"capacity": 2}),
        Status.ACCEPTED,
        WakeReason.CAPACITY,
    ),
    "close": (("POST", "/events/gig/close"), Status.REJECTED, WakeReason.CLOSE),
}


def _one_waiting(
    aws: Any, plain: SignupStore, processor: SignupStore, stream: Any, wakes: Any
) -> None:
    """An event of one seat and a waitlist of one: 'a' has the seat, 'b' waits (decided by
    ``processor``); nothing on the control table's stream is new."""
    plain.create_event("gig", 1, NOW, waitlist=1)
    for signup_id in ("a", "b"):
        put_raw_intake(aws.client("dynamodb"), "gig", signup_id, submitted_at={"S": NOW})
    assert decide_stream(processor, stream) == {"batchItemFailures": []}
    assert [_status(plain, s) for s in "ab"] == [Status.ACCEPTED, Status.WAITLISTED]
    wakes.read_new()


@pytest.mark.parametrize("change", list(ORGANIZER_CHANGES))
def test_the_api_role_wakes_the_event_it_changes(aws, as_role, plain, stream, wakes, change):
    call, waiting_becomes, reason = ORGANIZER_CHANGES[change]
    processor_store, processor_client = as_role(PROCESSOR)
    _one_waiting(aws, plain, processor_store, stream, wakes)
    api_store, api_client = as_role(API)
    # WHEN the organizer makes the change through the API, under its role
    assert _api_call(api_store, *call)[0] == 200
    # THEN it woke the event: one update of its wake-up item (counter, time and reason),
    # nothing refused
    assert api_client.denied == []
    woke = [r for r in api_client.allowed if r.leading_keys == {"WAKE#gig"}]
    assert [(r.action, _where(r), r.attributes) for r in woke] == [
        (UPDATE, CONTROL, WAKE_ATTRIBUTES)
    ]
    assert wake_items(plain)["gig"][WakeAttr.REASON] == reason
    # ... and the wake-up, delivered to the processor under its role, is the event's step
    # (no other record of the event came): the one waiting has the seat, or is rejected
    assert stream.read_new() == []
    assert _deliver_wakes(processor_store, wakes) == {"batchItemFailures": []}
    assert _status(plain, "b") == waiting_becomes
    assert processor_client.denied == []


@pytest.mark.parametrize("change", list(ORGANIZER_CHANGES))
def test_the_api_s_wake_up_is_denied_without_its_grant(aws, as_role, plain, stream, wakes, change):
    call, waiting_becomes, reason = ORGANIZER_CHANGES[change]
    processor_store, processor_client = as_role(PROCESSOR)
    _one_waiting(aws, plain, processor_store, stream, wakes)
    # GIVEN the API's role without its UpdateItem on WAKE# items (its UpdateItem on event
    # items kept)
    roles = _roles_without_on_keys(API, UPDATE, CONTROL_ARN, "WAKE#*")
    client = CheckedClient(aws.client("dynamodb"), API, roles=roles)
    # WHEN the organizer makes the change
    status, body = _api_call(SignupStore(client, sleep=lambda _: None), *call)
    # THEN the call fails on IAM's refusal of exactly the wake-up ...
    assert (status, body["error"]) == (500, "internal_error")
    assert {(r.action, _where(r)) for r in client.denied} == {(UPDATE, CONTROL)}
    assert {k for r in client.denied for k in r.leading_keys or ()} == {"WAKE#gig"}
    # ... nothing woke the event: no wake-up item, nothing for the processor, 'b' waits
    assert wake_items(plain) == {}
    assert _deliver_wakes(processor_store, wakes) == {}
    assert _status(plain, "b") == Status.WAITLISTED
    # ... though the change itself, written before the wake-up, stands; the organizer's
    # retry (an error answered), once the grant is back, wakes the event: the step is made
    event = plain.get_event("gig")
    assert event is not None
    assert (event.event.capacity, event.event.state) == (
        (2, "OPEN") if change == "capacity-raised" else (1, "CLOSED")
    )
    api_store, api_client = as_role(API)
    assert _api_call(api_store, *call)[0] == 200
    assert wake_items(plain)["gig"][WakeAttr.REASON] == reason
    assert _deliver_wakes(processor_store, wakes) == {"batchItemFailures": []}
    assert _status(plain, "b") == waiting_becomes
    assert api_client.denied == [] and processor_client.denied == []


class FailsFirstCommits(SignupStore):
    """DynamoDB unavailable for the first commits of one event: the event is parked."""

    def __init__(self, *args: Any, event_id: str, failures: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.event_id, self.failures = event_id, failures

    def commit(self, expected: Event, *args: Any, **kwargs: Any):
        if expected.event_id == self.event_id and self.failures:
            self.failures -= 1
            raise StoreUnavailableError("throttled")
        return super().commit(expected, *args, **kwargs)


def test_the_processor_role_decides_parks_and_releases(aws, as_role, plain, stream):
    _, processor_client = as_role(PROCESSOR)
    processor_store = FailsFirstCommits(
        processor_client, event_id="parked", failures=20, sleep=lambda _: None
    )
    plain.create_event("gig", 1, NOW)
    plain.create_event("parked", 5, NOW)
    plain.create_event("shut", 5, NOW)
    plain.close_event("shut")
    client = aws.client("dynamodb")
    for event_id, signup_id in [
        ("gig", "a"), ("gig", "b"), ("nowhere", "c"), ("shut", "d"), ("parked", "e"),
    ]:  # fmt: skip
        put_raw_intake(client, event_id, signup_id, submitted_at={"S": NOW})
    # WHEN the processor decides, one event failing (it is parked)
    assert decide_stream(processor_store, stream) == {"batchItemFailures": []}
    assert plain.get_parking("parked") is not None
    # ... and the event's next record, once DynamoDB is back, releases it in order
    processor_store.failures = 0
    put_raw_intake(client, "parked", "f", submitted_at={"S": NOW})
    assert decide_stream(processor_store, stream) == {"batchItemFailures": []}
    # ... and a format-1 journal's items are rebuilt from intake
    assert set(processor_store.get_intakes("gig", ["a", "b"])) == {"a", "b"}
    # THEN nothing it needed was refused, and every signup is decided
    assert processor_client.denied == []
    assert plain.get_parking("parked") is None
    report = audit(plain)
    assert report.ok and report.totals["pending"] == 0, report.to_dict()
    assert report.totals["status_counts"] == {"ACCEPTED": 3, "REJECTED": 3}


def test_the_sweeper_role_re_emits_and_clears_an_empty_parking_marker(aws, as_role, plain, stream):
    sweeper_store, sweeper_client = as_role(SWEEPER)
    plain.create_event("gig", 5, NOW)
    client = aws.client("dynamodb")
    put_raw_intake(client, "gig", "lost", submitted_at={"S": OLD})
    put_raw_intake(client, "gig", "junk-counter", submitted_at={"S": OLD}, redrive={"S": "x"})
    stream.read_new()  # the stream "lost" them: nobody decided
    # ... and a parking marker whose parked records were all decided (a release that died
    # before clearing it)
    plain.park("parked", [IntakeRecord("parked", "z", "1" * 21)], NOW, "ThrottlingError")
    plain.unpark("parked", ["1" * 21])
    # WHEN the sweeper runs under its role
    result = Sweeper(sweeper_store, min_age_s=60).sweep("run-1")
    # THEN it re-emitted both records, cleared the marker, and kept its history
    assert (result.status, result.re_emitted, result.undecided) == ("succeeded", 2, 2)
    assert result.releases_triggered == 1 and plain.get_parking("parked") is None
    assert [r.status for r in Sweeper(sweeper_store).replay_failed()] == []
    assert sweeper_client.denied == []
    assert {r.signup_id for r in _re_emitted(stream)} == {"lost", "junk-counter"}


def test_the_sweeper_role_reads_the_undecided_index_and_clears_markers(aws, as_role, plain, stream):
    sweeper_store, sweeper_client = as_role(SWEEPER)
    plain.create_event("gig", 5, NOW)
    # GIVEN a full scan recorded (an empty intake), so the next run reads the index ...
    assert Sweeper(sweeper_store, min_age_s=60).sweep("run-0").full_scan
    # ... and two marked records, one of them decided
    client = aws.client("dynamodb")
    for signup_id in ("lost", "decided"):
        put_raw_intake(client, "gig", signup_id, marked=True, submitted_at={"S": OLD})
    client.put_item(
        TableName=MAIN_TABLE,
        Item={"event_id": {"S": "gig"}, "signup_id": {"S": "decided"}, "status": {"S": "ACCEPTED"}},
    )
    stream.read_new()
    # WHEN the sweeper runs under its role
    result = Sweeper(sweeper_store, min_age_s=60).sweep("run-1")
    # THEN it read the index, re-emitted the lost record and unmarked the decided one
    assert (result.status, result.full_scan) == ("succeeded", False)
    assert (result.re_emitted, result.unmarked) == (1, 1)
    assert sweeper_client.denied == []
    intake = {i["signup_id"]["S"]: i for i in client.scan(TableName=INTAKE_TABLE)["Items"]}
    assert "undecided" not in intake["decided"] and "redrive" not in intake["decided"]
    assert intake["lost"]["redrive"] == {"N": "1"} and "undecided" in intake["lost"]


def test_the_due_holds_role_wakes_the_events_due(aws, as_role, plain, wakes):
    due_store, due_client = as_role(DUE_HOLDS)
    _due_events(plain, aws.client("dynamodb"))
    wakes.read_new()
    # WHEN due holds are released under the function's role, 5 s after NOW
    assert release_due_holds(due_store, T0 + 5_000) == 2
    # THEN nothing it needed was refused: a Query of the index, and an update of each due
    # event's wake-up item, naming its counter, time and reason only (no intake record)
    assert due_client.denied == []
    assert {(r.action, _where(r)) for r in due_client.allowed} == {
        ("dynamodb:Query", DUE_INDEX),
        (UPDATE, CONTROL),
    }
    woke = [(r.leading_keys, r.attributes) for r in due_client.allowed if r.action == UPDATE]
    assert sorted(key for keys, _ in woke for key in keys or ()) == ["WAKE#due", "WAKE#parked"]
    assert {attributes for _, attributes in woke} == {WAKE_ATTRIBUTES}
    # ... the two events' wake-ups came down the control table's stream (the processor's),
    # each saying why it was due; the event not due yet was not woken
    assert set(woken_events(wakes)) == {"due", "parked"}
    reasons = {event_id: item[WakeAttr.REASON] for event_id, item in wake_items(plain).items()}
    assert reasons == {"due": WakeReason.HOLD_DUE, "parked": WakeReason.RETRY}


def _re_emitted(stream) -> list[IntakeRecord]:
    records = DynamoDBStreamEvent({"Records": stream.read_new()}).records
    return [
        IntakeRecord(r.event_id, str(r.keys["signup_id"]), r.sequence_number)
        for r in map(to_stream_record, records)
        if r.event_name == "MODIFY"
    ]


def _commit_as(store: SignupStore) -> None:
    snapshot = Event("gig", 5)
    store.commit(snapshot, decide(snapshot, [IntakeRecord("gig", "x", "1" * 21)]), NOW, {})


def _update(table: str, key: dict[str, Any], expression: str, **extra: Any):
    def attempt(client: Any) -> None:
        names = {f"#{n}": n for n in re.findall(r"#(\w+)", expression)}
        client.update_item(
            TableName=table,
            Key=key,
            UpdateExpression=expression,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={":v": {"N": "99"}},
            **extra,
        )

    return attempt


EVENT_KEY = {"pk": {"S": "EVENT#gig"}, "sk": {"S": "EVENT"}}
LEASE_KEY = {"pk": {"S": "SWEEPER"}, "sk": {"S": "LEASE"}}
PARKED_KEY = {"pk": {"S": "PARK#gig"}, "sk": {"S": "R#" + "1" * 40}}
PARKING_KEY = {"pk": {"S": "PARK#gig"}, "sk": {"S": ControlKey.PARKED_SK}}
WAKE_KEY = {"pk": {"S": "WAKE#gig"}, "sk": {"S": ControlKey.WAKE_SK}}
INTAKE_KEY = {"event_id": {"S": "gig"}, "signup_id": {"S": "a"}}
DECISION = {**INTAKE_KEY, "status": {"S": "ACCEPTED"}}


CONTROL, MAIN_TABLE, INTAKE_TABLE = "turnstile-control", "turnstile-main", "turnstile-intake"
#: What a wake-up (``SignupStore.wake``) names, and all the roles that wake may name there.
WAKE_ATTRIBUTES = frozenset(
    {
        ControlKey.PK,
        ControlKey.SK,
        WakeAttr.WAKES,
        WakeAttr.WOKEN_AT,
        WakeAttr.REASON,
        # removed by every wake-up: a wake-up its step failed had put in the index
        Attr.HOLD_DUE_AT,
        Attr.HOLD_DUE_SHARD,
    }
)

#: What each role must not do: (role, attempt on its client), by name.
OUTSIDE_THE_JOB: dict[str, tuple[str, Callable[[Any], Any]]] = {
    # The API: no counters, version or journal, no decision, nothing of the sweeper's.
    "api-commits": (API, lambda c: _commit_as(SignupStore(c))),
    "api-sets-taken": (API, _update(CONTROL, EVENT_KEY, "SET #taken = :v")),
    "api-sets-version": (API, _update(CONTROL, EVENT_KEY, "SET #version = :v")),
    "api-drops-journal": (API, _update(CONTROL, EVENT_KEY, "SET #capacity = :v REMOVE #journal")),
    "api-reads-all-back": (
        API,
        _update(CONTROL, EVENT_KEY, "SET #capacity = :v", ReturnValues="ALL_NEW"),
    ),
    "api-puts-event-item": (API, lambda c: c.put_item(TableName=CONTROL, Item=EVENT_KEY)),
    "api-deletes-event-item": (API, lambda c: c.delete_item(TableName=CONTROL, Key=EVENT_KEY)),
    "api-touches-lease": (API, _update(CONTROL, LEASE_KEY, "SET #fence = :v")),
    "api-writes-decision": (API, lambda c: c.put_item(TableName=MAIN_TABLE, Item=DECISION)),
    "api-edits-decision": (API, _update(MAIN_TABLE, INTAKE_KEY, "SET #position = :v")),
    # Of an intake record, the API updates only a request: never the seats or attributes.
    "api-sets-seats": (API, _update(INTAKE_TABLE, INTAKE_KEY, "SET #request = :v, #seats = :v")),
    "api-sets-attributes": (API, _update(INTAKE_TABLE, INTAKE_KEY, "SET #attributes = :v")),
    "api-reads-intake-back": (
        API,
        _update(INTAKE_TABLE, INTAKE_KEY, "SET #request = :v", ReturnValues="ALL_OLD"),
    ),
    "api-deletes-intake": (
        API,
        lambda c: c.delete_item(TableName=INTAKE_TABLE, Key=INTAKE_KEY),
    ),
    # Of a wake-up item, the API (as every role that wakes) writes only its counter, time
    # and reason: never another field, never those fields on another item, never the
    # item whole.
    "api-wakes-with-a-capacity": (
        API,
        _update(CONTROL, WAKE_KEY, "ADD #wakes :v SET #capacity = :v"),
    ),
    "api-wakes-the-event-item": (API, _update(CONTROL, EVENT_KEY, "ADD #wakes :v")),
    "api-reads-wake-up-back": (
        API,
        _update(CONTROL, WAKE_KEY, "ADD #wakes :v", ReturnValues="ALL_NEW"),
    ),
    "api-puts-wake-up": (API, lambda c: c.put_item(TableName=CONTROL, Item=WAKE_KEY)),
    "api-deletes-wake-up": (API, lambda c: c.delete_item(TableName=CONTROL, Key=WAKE_KEY)),
    # The sweeper: no event item, no decision, no intake field but its counter.
    "sweeper-commits": (SWEEPER, lambda c: _commit_as(SignupStore(c))),
    "sweeper-edits-event": (SWEEPER, _update(CONTROL, EVENT_KEY, "SET #capacity = :v")),
    "sweeper-edits-parked-record": (SWEEPER, _update(CONTROL, PARKED_KEY, "SET #seats = :v")),
    "sweeper-puts-parked-record": (
        SWEEPER,
        lambda c: c.put_item(TableName=CONTROL, Item=PARKED_KEY),
    ),
    "sweeper-writes-decision": (SWEEPER, lambda c: c.put_item(TableName=MAIN_TABLE, Item=DECISION)),
    "sweeper-edits-intake": (SWEEPER, _update(INTAKE_TABLE, INTAKE_KEY, "SET #seats = :v")),
    "sweeper-deletes-intake": (
        SWEEPER,
        lambda c: c.delete_item(TableName=INTAKE_TABLE, Key=INTAKE_KEY),
    ),
    "sweeper-sets-a-parking-marker-field-on-a-wake-up": (
        SWEEPER,
        _update(CONTROL, WAKE_KEY, "ADD #wakes :v SET #parked_since = :v"),
    ),
    "sweeper-deletes-wake-up": (
        SWEEPER,
        lambda c: c.delete_item(TableName=CONTROL, Key=WAKE_KEY),
    ),
    # Releasing due holds: the index and wake-up items' counter, time and reason; nothing
    # else (no intake record, no event item, no parking marker).
    "due-holds-reads-event": (DUE_HOLDS, lambda c: c.get_item(TableName=CONTROL, Key=EVENT_KEY)),
    "due-holds-queries-control": (
        DUE_HOLDS,
        lambda c: c.query(
            TableName=CONTROL,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": "pk"},
            ExpressionAttributeValues={":pk": {"S": "EVENT#gig"}},
        ),
    ),
    "due-holds-scans-its-index": (
        DUE_HOLDS,
        lambda c: c.scan(TableName=CONTROL, IndexName="due-holds"),
    ),
    "due-holds-edits-event": (DUE_HOLDS, _update(CONTROL, EVENT_KEY, "SET #hold_due_at = :v")),
    "due-holds-edits-intake": (DUE_HOLDS, _update(INTAKE_TABLE, INTAKE_KEY, "SET #seats = :v")),
    "due-holds-re-emits": (DUE_HOLDS, lambda c: SignupStore(c).re_emit("gig", "a")),
    "due-holds-edits-parking-marker": (
        DUE_HOLDS,
        _update(CONTROL, PARKING_KEY, "SET #hold_due_at = :v"),
    ),
    "due-holds-wakes-with-a-journal": (
        DUE_HOLDS,
        _update(CONTROL, WAKE_KEY, "ADD #wakes :v SET #journal = :v"),
    ),
    "due-holds-puts-wake-up": (
        DUE_HOLDS,
        lambda c: c.put_item(TableName=CONTROL, Item=WAKE_KEY),
    ),
    "due-holds-puts-intake": (
        DUE_HOLDS,
        lambda c: c.put_item(TableName=INTAKE_TABLE, Item=INTAKE_KEY),
    ),
    "due-holds-writes-decision": (
        DUE_HOLDS,
        lambda c: c.put_item(TableName=MAIN_TABLE, Item=DECISION),
    ),
    # The waiter: point reads of a signup, its decision and its event; nothing else.
    "waiter-submits": (WAITER, lambda c: c.put_item(TableName=INTAKE_TABLE, Item=INTAKE_KEY)),
    "waiter-requests": (WAITER, _update(INTAKE_TABLE, INTAKE_KEY, "SET #request = :v")),
    "waiter-writes-decision": (WAITER, lambda c: c.put_item(TableName=MAIN_TABLE, Item=DECISION)),
    "waiter-edits-event": (WAITER, _update(CONTROL, EVENT_KEY, "SET #capacity = :v")),
    "waiter-wakes": (WAITER, lambda c: SignupStore(c).wake("gig", WakeReason.RETRY)),
    "waiter-lists-decisions": (
        WAITER,
        lambda c: c.query(
            TableName=MAIN_TABLE,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": "event_id"},
            ExpressionAttributeValues={":pk": {"S": "gig"}},
        ),
    ),
    "waiter-reads-the-sweeper-lease": (
        WAITER,
        lambda c: c.get_item(TableName=CONTROL, Key=LEASE_KEY),
    ),
    # The processor: never intake, never the sweeper's lease; a wake-up's counter, time and
    # reason (a shard's commit wakes the shards where someone waits), nothing else of it.
    "processor-touches-lease": (PROCESSOR, _update(CONTROL, LEASE_KEY, "SET #fence = :v")),
    "processor-wakes-and-writes-more": (
        PROCESSOR,
        _update(CONTROL, WAKE_KEY, "ADD #wakes :v SET #journal = :v"),
    ),
    "processor-deletes-wake-up": (
        PROCESSOR,
        lambda c: c.delete_item(TableName=CONTROL, Key=WAKE_KEY),
    ),
    "processor-edits-intake": (PROCESSOR, _update(INTAKE_TABLE, INTAKE_KEY, "SET #seats = :v")),
    "processor-puts-intake": (
        PROCESSOR,
        lambda c: c.put_item(TableName=INTAKE_TABLE, Item=INTAKE_KEY),
    ),
}


@pytest.mark.parametrize("name", sorted(OUTSIDE_THE_JOB))
def test_nothing_outside_a_role_s_job_gets_through(as_role, plain, name):
    handler, attempt = OUTSIDE_THE_JOB[name]
    plain.create_event("gig", 5, NOW)
    _, client = as_role(handler)
    with pytest.raises(ClientError) as refused:
        attempt(client)
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert client.denied and not client.allowed


# -- the processor role through every lifecycle move (docs/lifecycle.md) ----------------

HOLD_S = 60
UPDATE, PUT = "dynamodb:UpdateItem", "dynamodb:PutItem"
MAIN_ARN, CONTROL_ARN, INTAKE_ARN = "${MainTable.Arn}", "${ControlTable.Arn}", "${IntakeTable.Arn}"


class Clock:
    """The processor's clock, set by hand: seconds after NOW, as ``clock.utc_now`` writes
    them."""

    def __init__(self) -> None:
        self.ms = ms_of(NOW)

    def __call__(self) -> str:
        return iso_of_ms(self.ms)

    def at(self, seconds: float) -> str:
        return iso_of_ms(ms_of(NOW) + int(seconds * 1000))

    def set(self, seconds: float) -> None:
        self.ms = ms_of(NOW) + int(seconds * 1000)


@dataclass
class Scene:
    """One event's lifecycle, each function under its own role: the API records requests
    (and wakes the event after a close), the due-holds function wakes events whose hold is
    due, the processor (``processor``, full role) decides everything before the move under
    test."""

    plain: SignupStore
    raw: Any
    stream: Any
    wakes: Any
    clock: Clock
    api: SignupStore
    api_client: CheckedClient
    due: SignupStore
    due_client: CheckedClient
    processor: SignupStore
    processor_client: CheckedClient
    #: The wake-ups last delivered (the event source delivers a failed one again).
    woken: list[dict[str, Any]] = field(default_factory=list)

    def decide(self, store: SignupStore) -> dict[str, Any]:
        """The new records of both streams through the handler, as their event source
        mappings filter and deliver them (intake's, then the control table's wake-ups),
        by a processor over ``store`` on the scene's clock (a cold one: it writes the last
        journal again first). The batch item failures of both invocations."""
        stream_handler._processor = StreamProcessor(store, clock=self.clock)
        failures: list[dict[str, str]] = []
        records = delivered(self.stream, STREAM_SOURCE)
        self.woken = delivered(self.wakes, WAKE_SOURCE)
        for batch in (records, self.woken):
            if batch:
                answer = stream_handler.handler({"Records": batch}, LocalLambdaContext())
                failures += answer["batchItemFailures"]
        return {"batchItemFailures": failures}

    def deliver_again(self, store: SignupStore) -> dict[str, Any]:
        """The wake-ups last delivered, once more (the event source's retry of a failed
        batch), to a processor over ``store``."""
        assert self.woken, "no wake-up was delivered"
        stream_handler._processor = StreamProcessor(store, clock=self.clock)
        return stream_handler.handler({"Records": self.woken}, LocalLambdaContext())

    def release_due(self) -> int:
        """The due-holds function, under its role, at the scene's clock: how many events it
        woke (their wake-ups on the control table's stream, for ``decide``)."""
        return release_due_holds(self.due, self.clock.ms)

    def statuses(self) -> dict[str, str | None]:
        return {sid: _status(self.plain, sid) for sid in ("a", "b")}


def _status(store: SignupStore, signup_id: str, event_id: str = "gig") -> str | None:
    item = store.get_decision(event_id, signup_id)
    return item[Attr.STATUS] if item else None


@pytest.fixture
def scene(aws, as_role, plain, stream, wakes) -> Scene:
    api, due, processor = as_role(API), as_role(DUE_HOLDS), as_role(PROCESSOR)
    return Scene(plain, aws.client("dynamodb"), stream, wakes, Clock(), *api, *due, *processor)


def _signups(scene: Scene) -> None:
    """An event of one seat held HOLD_S seconds and a waitlist of one; 'a' and 'b' sign up."""
    scene.plain.create_event("gig", 1, NOW, waitlist=1, hold_seconds=HOLD_S)
    for signup_id in ("a", "b"):
        put_raw_intake(scene.raw, "gig", signup_id, submitted_at={"S": NOW})


def _decided(scene: Scene) -> None:
    """'a' holds the seat, 'b' waits (the first decisions, by the full processor role)."""
    _signups(scene)
    assert scene.decide(scene.processor) == {"batchItemFailures": []}
    assert scene.statuses() == {"a": Status.HELD, "b": Status.WAITLISTED}


def _api_requests(kind: str, signup_id: str, at_s: float) -> Callable[[Scene], None]:
    """The API records a request at ``at_s`` (its own clock); the processor reads it then."""

    def stage(scene: Scene) -> None:
        _decided(scene)
        scene.api.request_transition("gig", signup_id, kind, scene.clock.at(at_s))
        scene.clock.set(at_s)

    return stage


def _due_holds_lapse(scene: Scene) -> None:
    """Past the hold's expiry, the due-holds function wakes the event: its wake-up, on the
    control table's stream, is a tick (no producer's record is involved)."""
    _decided(scene)
    scene.clock.set(HOLD_S - 1)
    assert scene.release_due() == 0  # not due yet
    scene.clock.set(HOLD_S + 1)
    assert scene.release_due() == 1
    assert wake_items(scene.plain)["gig"][WakeAttr.REASON] == WakeReason.HOLD_DUE


def _confirm_expired(scene: Scene) -> None:
    """A confirm recorded a second before the hold lapses, read by the processor after."""
    _api_requests(RequestKind.CONFIRM, "a", HOLD_S - 1)(scene)
    scene.clock.set(HOLD_S + 1)


def _producer_confirms_the_waitlisted(scene: Scene) -> None:
    """A producer writing intake itself (README) confirms 'b', which only waits: the API
    would refuse it at once, the processor refuses it when it reads it."""
    _decided(scene)
    scene.raw.update_item(
        TableName=INTAKE_TABLE,
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "b"}},
        UpdateExpression="SET #request = :kind, #undecided = :shard ADD #request_count :one",
        ExpressionAttributeNames={
            "#request": Attr.REQUEST,
            "#undecided": Attr.UNDECIDED,
            "#request_count": Attr.REQUEST_COUNT,
        },
        ExpressionAttributeValues={
            ":kind": {"S": RequestKind.CONFIRM},
            ":shard": {"S": undecided_shard("gig", "b")},
            ":one": {"N": "1"},
        },
    )


def _closed(scene: Scene) -> None:
    """The organizer closes the event through the API, which wakes it: the wake-up, on the
    control table's stream, reaches the processor (no producer's record is involved)."""
    _decided(scene)
    assert scene.api.close_event("gig")[1] is True
    assert wake_items(scene.plain)["gig"][WakeAttr.REASON] == WakeReason.CLOSE


@dataclass(frozen=True)
class Move:
    stage: Callable[[Scene], None]
    before: dict[str, str | None]
    after: dict[str, str]
    #: The grant of the processor role on the main table the move is written with.
    grant: str = UPDATE
    #: (signup, reason) of the refusal the decision item records, if any.
    refused: tuple[str, str] | None = None
    #: (signup, reason) of a signup the move rejects, if any.
    rejected: tuple[str, str] | None = None
    #: The move's record is an event's wake-up (the control table's stream), no intake
    #: record: a tick of the event.
    woken: bool = False


HELD_WAITING = {"a": Status.HELD, "b": Status.WAITLISTED}
MOVES: dict[str, Move] = {
    "first-decisions": Move(
        _signups, {"a": None, "b": None}, {"a": Status.HELD, "b": Status.WAITLISTED}, PUT
    ),
    "confirm": Move(
        _api_requests(RequestKind.CONFIRM, "a", 10),
        HELD_WAITING,
        {"a": Status.ACCEPTED, "b": Status.WAITLISTED},
    ),
    "cancel-of-the-waitlisted": Move(
        _api_requests(RequestKind.CANCEL, "b", 10),
        HELD_WAITING,
        {"a": Status.HELD, "b": Status.CANCELLED},
    ),
    "cancel-promotes-the-waitlisted": Move(
        _api_requests(RequestKind.CANCEL, "a", 10),
        HELD_WAITING,
        {"a": Status.CANCELLED, "b": Status.HELD},
    ),
    "lapse-promotes-the-waitlisted": Move(
        _due_holds_lapse, HELD_WAITING, {"a": Status.EXPIRED, "b": Status.HELD}, woken=True
    ),
    "refused-confirm-of-a-lapsed-hold": Move(
        _confirm_expired,
        HELD_WAITING,
        {"a": Status.EXPIRED, "b": Status.HELD},
        refused=("a", Reason.HOLD_EXPIRED),
    ),
    "refused-confirm-of-the-waitlisted": Move(
        _producer_confirms_the_waitlisted,
        HELD_WAITING,
        HELD_WAITING,
        refused=("b", Reason.TRANSITION_NOT_ALLOWED),
    ),
    "close-rejects-the-waitlist": Move(
        _closed,
        HELD_WAITING,
        {"a": Status.HELD, "b": Status.REJECTED},
        rejected=("b", Reason.EVENT_CLOSED),
        woken=True,
    ),
}


@pytest.mark.parametrize("name", list(MOVES))
def test_the_processor_role_makes_each_lifecycle_move(scene, name):
    move = MOVES[name]
    # GIVEN the event's records up to the move, each written under its function's role
    move.stage(scene)
    assert scene.statuses() == move.before
    last_journal = scene.plain.get_event("gig").journal
    client = CheckedClient(scene.raw, PROCESSOR)
    store = SignupStore(client, sleep=lambda _: None)
    # WHEN the processor, under its role, reads the move's records (a woken move's: its
    # wake-up alone)
    assert scene.decide(store) == {"batchItemFailures": []}
    assert bool(scene.woken) == move.woken
    # THEN the move is made, nothing was refused, and nothing is parked
    assert scene.statuses() == move.after
    assert client.denied == [] and scene.api_client.denied == []
    assert scene.due_client.denied == [] and scene.processor_client.denied == []
    assert scene.plain.get_parking("gig") is None
    if move.refused:
        signup_id, reason = move.refused
        refusal = scene.plain.get_decision("gig", signup_id)[Attr.LAST_REFUSAL]
        assert (refusal["request"], refusal["reason"]) == (RequestKind.CONFIRM, reason)
    if move.rejected:
        signup_id, reason = move.rejected
        assert scene.plain.get_decision("gig", signup_id)[Attr.REASON] == reason
    # ... written with the one grant on main the move needs: first decisions are put, later
    # moves (refusals too) update each signup they touch. (A cold processor puts the last
    # journal's first decisions again, conditionally: a no-op, PutItem in every case; their
    # copied fields it reads from intake, as the journal keeps only their digests.)
    moved = {s for s in move.after if move.after[s] != move.before[s]}
    moved |= {move.refused[0]} if move.refused else set()
    writes = [r.action for r in client.allowed if table_of(r) == MAIN_TABLE]
    assert writes.count(move.grant) == len(moved)
    assert writes.count(UPDATE if move.grant == PUT else PUT) == (0 if move.grant == PUT else 2)
    used = {(table_of(r), r.action) for r in client.allowed}
    assert used == {
        (CONTROL, "dynamodb:BatchGetItem"),  # the event item and its parking marker
        (CONTROL, UPDATE),  # the commit on the event item
        # the last journal's records, for the copied fields of its first decisions
        *(
            [(INTAKE_TABLE, "dynamodb:BatchGetItem")]
            if last_journal and last_journal.decisions
            else []
        ),
        # the decision items of signups that may be decided already: none for fresh
        # INSERTs above the event's high-water mark (first decisions)
        *([(MAIN_TABLE, "dynamodb:BatchGetItem")] if move.grant == UPDATE else []),
        (MAIN_TABLE, PUT),
        *([(MAIN_TABLE, UPDATE)] if move.grant == UPDATE else []),
    }


@pytest.mark.parametrize("name", list(MOVES))
def test_each_lifecycle_move_is_kept_without_its_grant(scene, name):
    """Without the grant a move is written with, the move waits, nothing of it on the
    items: a producer's records parked behind a parking marker, released once the due-holds function
    wakes the event; a wake-up given back to the event source, which delivers it again."""
    move = MOVES[name]
    # GIVEN the event's records up to the move, and a processor role without the grant on
    # the main table the move is written with
    move.stage(scene)
    roles = roles_without(PROCESSOR, move.grant, MAIN_ARN)
    client = CheckedClient(scene.raw, PROCESSOR, roles=roles)
    # WHEN that processor reads the move's records
    answer = scene.decide(SignupStore(client, sleep=lambda _: None))
    # THEN IAM refused that write on main, and the move is not on the items
    assert {(table_of(r), r.action) for r in client.denied} == {(MAIN_TABLE, move.grant)}
    assert scene.statuses() == move.before
    if move.refused:
        assert Attr.LAST_REFUSAL not in scene.plain.get_decision("gig", move.refused[0])
    if move.rejected:
        assert Attr.REASON not in scene.plain.get_decision("gig", move.rejected[0])
    marker = scene.plain.get_parking("gig")
    if move.woken:
        # ... the wake-up failed back to the event source (a wake-up is no arrival:
        # nothing is parked) ...
        failed = scene.woken[-1]["dynamodb"]["SequenceNumber"]
        assert answer == {"batchItemFailures": [{"itemIdentifier": failed}]}
        assert marker is None
        # ... and once the grant is back, the event source's retry makes the move
        assert scene.deliver_again(scene.processor) == {"batchItemFailures": []}
    else:
        # ... the event is parked, its marker naming the refusal (the records are parked, not
        # lost) ...
        assert answer == {"batchItemFailures": []}
        assert marker is not None and marker["error"].startswith("AccessDenied")
        assert f"may not {move.grant} on " in marker["error"]
        assert [r.signup_id for r in scene.plain.parked_records("gig")]
        # ... and once the grant is back, the due-holds function wakes the parked event (its
        # marker is due at once) and the wake-up releases it: the move lands
        assert scene.release_due() == 1
        assert scene.decide(scene.processor) == {"batchItemFailures": []}
        assert scene.woken and scene.due_client.denied == []
    assert scene.plain.get_parking("gig") is None and scene.statuses() == move.after
    assert scene.plain.parked_records("gig") == []
    assert scene.processor_client.denied == []


def test_a_failing_event_is_not_parked_without_batch_writes_on_control(scene):
    """Parking a failing event's records is the processor's one BatchWriteItem (on PARK#
    items of control): without it the group goes back to the event source."""
    # GIVEN signups of an event whose commits fail (DynamoDB unavailable)
    _signups(scene)
    roles = roles_without(PROCESSOR, "dynamodb:BatchWriteItem", CONTROL_ARN)
    client = CheckedClient(scene.raw, PROCESSOR, roles=roles)
    store = FailsFirstCommits(client, event_id="gig", failures=100, sleep=lambda _: None)
    records = scene.stream.read_new()
    # WHEN the processor, without BatchWriteItem on control, decides them
    stream_handler._processor = StreamProcessor(store, clock=scene.clock)
    result = stream_handler.handler({"Records": records}, LocalLambdaContext())
    # THEN parking them was refused: the group's first record goes back to the event
    # source, nothing is parked and nothing decided
    first = records[0]["dynamodb"]["SequenceNumber"]
    assert result == {"batchItemFailures": [{"itemIdentifier": first}]}
    assert {(table_of(r), r.action) for r in client.denied} == {
        (CONTROL, "dynamodb:BatchWriteItem")
    }
    assert {key for r in client.denied for key in r.leading_keys or ()} == {"PARK#gig"}
    assert scene.plain.get_parking("gig") is None
    assert scene.statuses() == {"a": None, "b": None}


def test_the_processor_role_parks_a_failing_event(scene):
    """The counterpart: with its role whole, the same failure parks the event."""
    # GIVEN signups of an event whose commits fail (DynamoDB unavailable)
    _signups(scene)
    client = CheckedClient(scene.raw, PROCESSOR)
    store = FailsFirstCommits(client, event_id="gig", failures=100, sleep=lambda _: None)
    # WHEN the processor, under its role, decides them
    stream_handler._processor = StreamProcessor(store, clock=scene.clock)
    result = stream_handler.handler({"Records": scene.stream.read_new()}, LocalLambdaContext())
    # THEN their records are parked on PARK# items and the event marked, naming the failure
    assert result == {"batchItemFailures": []}
    assert client.denied == []
    parking = {r.leading_keys for r in client.allowed if r.action == "dynamodb:BatchWriteItem"}
    assert parking == {frozenset({"PARK#gig"})}
    marker = scene.plain.get_parking("gig")
    assert marker is not None and marker["error"] == "StoreUnavailableError"
    assert [r.signup_id for r in scene.plain.parked_records("gig")] == ["a", "b"]


#: What rejecting signups of an event that does not exist takes: one transaction, the
#: decisions' puts and a check that the event item still does not exist.
UNKNOWN_EVENT_GRANTS = {
    "decision-puts": (PUT, MAIN_ARN, MAIN_TABLE),
    "event-check": ("dynamodb:ConditionCheckItem", CONTROL_ARN, CONTROL),
}


@pytest.mark.parametrize("removed", [None, *UNKNOWN_EVENT_GRANTS])
def test_the_processor_role_rejects_signups_of_an_unknown_event(scene, removed):
    # GIVEN signups of an event nobody created, and the processor's role (without one of
    # the rejection's grants)
    for signup_id in ("a", "b"):
        put_raw_intake(scene.raw, "gig", signup_id, submitted_at={"S": NOW})
    action, resource, table = UNKNOWN_EVENT_GRANTS.get(removed or "", (None, None, None))
    roles = roles_without(PROCESSOR, action, resource) if action and resource else None
    client = CheckedClient(scene.raw, PROCESSOR, roles=roles)
    # WHEN the processor decides them
    assert scene.decide(SignupStore(client, sleep=lambda _: None)) == {"batchItemFailures": []}
    if removed is None:
        # THEN both are rejected unknown_event, with both grants
        assert scene.statuses() == {"a": Status.REJECTED, "b": Status.REJECTED}
        assert scene.plain.get_decision("gig", "a")[Attr.REASON] == Reason.UNKNOWN_EVENT
        assert client.denied == [] and scene.plain.get_parking("gig") is None
        used = {(table_of(r), r.action) for r in client.allowed}
        assert {(t, a) for a, _, t in UNKNOWN_EVENT_GRANTS.values()} <= used
    else:
        # THEN IAM refused the transaction: nothing is decided, and the event is parked
        assert {(table_of(r), r.action) for r in client.denied} == {(table, action)}
        assert scene.statuses() == {"a": None, "b": None}
        marker = scene.plain.get_parking("gig")
        assert marker is not None and f"may not {action} on " in marker["error"]


# -- the sweeper role: each path, and each grant removed ---------------------------------

INDEX_ARN = "${IntakeTable.Arn}/index/undecided"
#: The table (or index) a grant's resource reference names, as requests name it.
WHERE = {
    INTAKE_ARN: INTAKE_TABLE,
    INDEX_ARN: f"{INTAKE_TABLE}/index/undecided",
    MAIN_ARN: MAIN_TABLE,
    CONTROL_ARN: CONTROL,
}


def _where(request: Request) -> str:
    return request.resource.partition(":table/")[2]


def _roles_without_on_keys(role: str, action: str, resource: str, key: str) -> LocalRoles:
    """``roles_without``, but only from the role's statements on ``resource`` whose
    ``dynamodb:LeadingKeys`` condition names ``key``: the sweeper's UpdateItem on control
    is three grants (its own items, PARK# items' marker fields, WAKE# items), the API's two
    (EVENT# items, WAKE# items), one removed at a time."""
    document = copy.deepcopy(dict(LocalRoles.load().document))
    removed = False
    for statement in document["roles"][role]["statements"]:
        condition = statement.get("Condition", {}).get("ForAllValues:StringLike", {})
        if statement["Resource"] != resource or key not in condition.get(
            "dynamodb:LeadingKeys", []
        ):
            continue
        actions = statement["Action"]
        listed = [actions] if isinstance(actions, str) else list(actions)
        if action in listed:
            listed.remove(action)
            removed = True
        statement["Action"] = listed or ["none:Nothing"]
    assert removed, f"the {role} role has no {action} on {resource} for {key}"
    return LocalRoles(document)


def _intake(plain: SignupStore, signup_id: str) -> dict[str, Any]:
    item = plain.get_intake("gig", signup_id)
    assert item is not None
    return item


def _lost(plain: SignupStore, raw: Any) -> None:
    """An old record, marked undecided, that the stream lost: nobody decided it."""
    plain.create_event("gig", 5, NOW)
    put_raw_intake(raw, "gig", "lost", marked=True, submitted_at={"S": OLD})


def _decided_marked(plain: SignupStore, raw: Any) -> None:
    """A decided record that still carries the marker (decided before it was re-marked)."""
    plain.create_event("gig", 5, NOW)
    put_raw_intake(raw, "gig", "done", marked=True, submitted_at={"S": OLD})
    raw.put_item(
        TableName=MAIN_TABLE,
        Item={"event_id": {"S": "gig"}, "signup_id": {"S": "done"}, "status": {"S": "ACCEPTED"}},
    )


def _empty_parking(plain: SignupStore, raw: Any) -> None:
    """A parking marker whose parked records were all decided (a release died before
    clearing it)."""
    plain.park("parked", [IntakeRecord("parked", "z", "1" * 21)], NOW, "ThrottlingError")
    plain.unpark("parked", ["1" * 21])


def _parked_with_a_record(plain: SignupStore, raw: Any) -> None:
    """A parked event with a record parked: the sweeper sets its release off (wakes it)."""
    plain.create_event("gig", 5, NOW)
    put_raw_intake(raw, "gig", "parked", submitted_at={"S": OLD})
    plain.park("gig", [IntakeRecord("gig", "parked", "1" * 21)], NOW, "ThrottlingError")


def _woken_by_the_sweeper(plain: SignupStore) -> bool:
    """The parked event's wake-up is written, once, by the sweeper; and nothing of intake
    was re-emitted for it (its parked record waits behind the marker)."""
    wake = wake_items(plain).get("gig", {})
    woken = (wake.get(WakeAttr.WAKES), wake.get(WakeAttr.REASON)) == (1, WakeReason.SWEEP)
    return woken and Attr.RE_EMITS not in _intake(plain, "parked")


def _re_emitted_lost(plain: SignupStore) -> bool:
    return _intake(plain, "lost").get(Attr.RE_EMITS) == 1


def _history(plain: SignupStore) -> list[str]:
    return [i[RunAttr.STATUS] for i in Ledger.beside(plain).run_history("run-x")]


@dataclass(frozen=True)
class SweepPath:
    scene: Callable[[SignupStore, Any], None]
    #: Whether the path's work is done (read with every right).
    done: Callable[[SignupStore], bool]
    #: The grant the path needs: action, the roles file's resource, and on control which
    #: statement (its leading key) when the role has two.
    action: str
    resource: str
    key: str | None = None
    #: The run reads the whole intake table (else the index of marked records).
    full_scan: bool = False
    #: Without the grant the sweep raises (no run history to fail), else the run fails.
    raises: bool = False
    #: The partition key the refused request names (None: a Scan names none).
    leading: str | None = None


SWEEP_PATHS: dict[str, SweepPath] = {
    # Finding undecided records: the index of marked records, or the daily full scan.
    "index-scan": SweepPath(_lost, _re_emitted_lost, "dynamodb:Scan", INDEX_ARN),
    "full-scan": SweepPath(
        _lost,
        lambda p: _re_emitted_lost(p) and LeaseAttr.FULL_SCAN_AT in Ledger.beside(p).get_lease(),
        "dynamodb:Scan",
        INTAKE_ARN,
        full_scan=True,
    ),
    # ... and whether they are decided: their decision items, their event (its journal)
    "decision-reads": SweepPath(
        _lost, _re_emitted_lost, "dynamodb:BatchGetItem", MAIN_ARN, leading="gig"
    ),
    "lease-and-event-reads": SweepPath(
        _lost, _re_emitted_lost, "dynamodb:GetItem", CONTROL_ARN, full_scan=True, leading="SWEEPER"
    ),
    # Re-emission: the intake update and the lease's check, in one transaction.
    "re-emission": SweepPath(_lost, _re_emitted_lost, UPDATE, INTAKE_ARN, leading="gig"),
    "re-emission-fence": SweepPath(
        _lost, _re_emitted_lost, "dynamodb:ConditionCheckItem", CONTROL_ARN, leading="SWEEPER"
    ),
    # Clearing the marker of a decided record.
    "clearing-a-marker": SweepPath(
        _decided_marked,
        lambda p: Attr.UNDECIDED not in _intake(p, "done"),
        UPDATE,
        INTAKE_ARN,
        leading="gig",
    ),
    # Parked events: found by a Scan of control, their parked records by a Query, a release
    # set off by a wake-up of the event, an empty parking marker cleared.
    "finding-parked-events": SweepPath(
        _empty_parking, lambda p: p.get_parking("parked") is None, "dynamodb:Scan", CONTROL_ARN
    ),
    "clearing-an-empty-parking-marker": SweepPath(
        _empty_parking,
        lambda p: p.get_parking("parked") is None,
        UPDATE,
        CONTROL_ARN,
        key="PARK#*",
        leading="PARK#parked",
    ),
    "setting-a-release-off": SweepPath(
        _parked_with_a_record,
        _woken_by_the_sweeper,
        UPDATE,
        CONTROL_ARN,
        key="WAKE#*",
        leading="WAKE#gig",
    ),
    # The lease and the run history: without them no run starts or ends.
    "lease": SweepPath(
        _lost, _re_emitted_lost, UPDATE, CONTROL_ARN, key="SWEEPER", raises=True, leading="SWEEPER"
    ),
    "run-history-read": SweepPath(
        _lost, _re_emitted_lost, "dynamodb:Query", CONTROL_ARN, raises=True, leading="SWEEP-RUN"
    ),
    "run-outcome": SweepPath(
        _lost,
        lambda p: _history(p) == [RunStatus.STARTED, RunStatus.SUCCEEDED],
        PUT,
        CONTROL_ARN,
        key="SWEEPER",
        raises=True,
        leading="SWEEP-RUN",
    ),
}


def _sweeper(store: SignupStore, path: SweepPath) -> Sweeper:
    return Sweeper(store, min_age_s=60, full_scan_every_s=0 if path.full_scan else math.inf)


@pytest.mark.parametrize("name", list(SWEEP_PATHS))
def test_the_sweeper_role_takes_each_path(aws, as_role, plain, name):
    path = SWEEP_PATHS[name]
    # GIVEN what the path is for
    path.scene(plain, aws.client("dynamodb"))
    assert not path.done(plain)
    store, client = as_role(SWEEPER)
    # WHEN the sweeper runs under its role
    result = _sweeper(store, path).sweep("run-x")
    # THEN the run succeeded and did the path's work, with the grant the path names
    assert (result.status, result.full_scan, result.errors) == ("succeeded", path.full_scan, [])
    assert path.done(plain)
    assert client.denied == []
    used = {(r.action, _where(r)) for r in client.allowed}
    assert (path.action, WHERE[path.resource]) in used


@pytest.mark.parametrize("name", list(SWEEP_PATHS))
def test_each_sweeper_path_is_denied_without_its_grant(aws, plain, name):
    path = SWEEP_PATHS[name]
    # GIVEN what the path is for, and the sweeper's role without the path's grant
    path.scene(plain, aws.client("dynamodb"))
    roles = (
        _roles_without_on_keys(SWEEPER, path.action, path.resource, path.key)
        if path.key
        else roles_without(SWEEPER, path.action, path.resource)
    )
    client = CheckedClient(aws.client("dynamodb"), SWEEPER, roles=roles)
    sweeper = _sweeper(SignupStore(client, sleep=lambda _: None), path)
    # WHEN the sweeper runs
    if path.raises:
        with pytest.raises(ClientError) as refused:
            sweeper.sweep("run-x")
        assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    else:
        result = sweeper.sweep("run-x")
        # THEN the run failed, saying IAM refused it (the handler raises for a failed run)
        assert result.status == "failed"
        assert "AccessDenied" in result.errors[0]
        assert _history(plain) == [RunStatus.STARTED, RunStatus.FAILED]
    # ... IAM refused exactly that grant, and the path's work is not done
    assert {(r.action, _where(r)) for r in client.denied} == {(path.action, WHERE[path.resource])}
    keys = {k for r in client.denied for k in r.leading_keys or ()}
    assert keys == ({path.leading} if path.leading else set())
    assert not path.done(plain)


def test_the_sweeper_s_wake_up_releases_a_parked_event(aws, as_role, plain, wakes):
    # GIVEN a parked event with a record parked
    _parked_with_a_record(plain, aws.client("dynamodb"))
    wakes.read_new()
    sweeper_store, sweeper_client = as_role(SWEEPER)
    processor_store, processor_client = as_role(PROCESSOR)
    # WHEN the sweeper runs under its role, and its wake-up of the event is delivered to
    # the processor under its role
    result = Sweeper(sweeper_store, min_age_s=60, full_scan_every_s=math.inf).sweep("run-1")
    assert (result.status, result.parked_events, result.releases_triggered) == (
        "succeeded",
        1,
        1,
    )
    assert _deliver_wakes(processor_store, wakes) == {"batchItemFailures": []}
    # THEN the processor released the event: its parked record decided, the marker cleared;
    # nothing was re-emitted, nothing refused
    assert _status(plain, "parked") == Status.ACCEPTED
    assert plain.get_parking("gig") is None and plain.parked_records("gig") == []
    assert result.re_emitted == 0 and Attr.RE_EMITS not in _intake(plain, "parked")
    assert sweeper_client.denied == [] and processor_client.denied == []


def test_the_sweeper_role_takes_renews_and_releases_its_lease(aws, as_role, plain):
    # GIVEN a lost record, and a sweeper whose clock moves 50 s a look (its lease: 120 s,
    # renewed once over a third of it has gone by)
    _lost(plain, aws.client("dynamodb"))
    store, client = as_role(SWEEPER)
    looks = itertools.count()
    start = time.time()
    sweeper = Sweeper(
        store,
        owner="sweeper-1",
        lease_s=120,
        min_age_s=60,
        max_run_s=1e9,
        clock=lambda: start + 50 * next(looks),
        full_scan_every_s=math.inf,
    )
    # WHEN it runs under its role
    result = sweeper.sweep("run-x")
    # THEN it took the lease, renewed it before re-emitting (a new fencing token), and
    # gave it up at the end
    assert (result.status, result.re_emitted, result.lease_token) == ("succeeded", 1, 2)
    lease = Ledger.beside(plain).get_lease()
    assert lease is not None
    assert (lease[LeaseAttr.OWNER], lease[LeaseAttr.FENCE], lease[LeaseAttr.UNTIL]) == (
        "sweeper-1",
        2,
        0,
    )
    assert client.denied == []
    lease_writes = [
        r for r in client.allowed if r.action == UPDATE and r.leading_keys == {"SWEEPER"}
    ]
    assert len(lease_writes) == 3  # take, renew, release


def _failed_run(aws: Any, plain: SignupStore) -> None:
    """A run that failed: its role could not read decisions (the grant came back since)."""
    _lost(plain, aws.client("dynamodb"))
    roles = roles_without(SWEEPER, "dynamodb:BatchGetItem", MAIN_ARN)
    failing = CheckedClient(aws.client("dynamodb"), SWEEPER, roles=roles)
    store = SignupStore(failing, sleep=lambda _: None)
    result = Sweeper(store, min_age_s=60, full_scan_every_s=math.inf).sweep("run-x")
    assert result.status == RunStatus.FAILED
    assert _history(plain) == [RunStatus.STARTED, RunStatus.FAILED]


def test_the_sweeper_role_replays_a_failed_run_once(aws, as_role, plain):
    # GIVEN a run that failed
    _failed_run(aws, plain)
    store, client = as_role(SWEEPER)
    sweeper = Sweeper(store, min_age_s=60, full_scan_every_s=math.inf)
    # WHEN the sweeper, under its role, runs it again, then replays failed runs, twice
    assert sweeper.sweep("run-x").status == "already_ran"  # a run happens once ...
    replayed = sweeper.replay_failed()  # ... unless it failed, and is replayed
    # THEN the replay succeeded and re-emitted the record, and is history: not replayed again
    assert [(r.run_id, r.status, r.re_emitted) for r in replayed] == [("run-x", "succeeded", 1)]
    assert _re_emitted_lost(plain)
    assert _history(plain) == [
        RunStatus.STARTED,
        RunStatus.FAILED,
        RunStatus.STARTED,
        RunStatus.SUCCEEDED,
    ]
    assert sweeper.replay_failed() == []
    assert client.denied == []
    history = {(r.action, frozenset(r.leading_keys or ())) for r in client.allowed}
    assert {
        ("dynamodb:Query", frozenset({"SWEEP-RUN"})),  # reading the history
        (UPDATE, frozenset({"SWEEP-RUN"})),  # a start, counted
        (PUT, frozenset({"SWEEP-RUN"})),  # an outcome
    } <= history


def test_replaying_failed_runs_is_denied_without_query_on_control(aws, plain):
    # GIVEN a run that failed, and the sweeper's role without Query on control
    _failed_run(aws, plain)
    roles = roles_without(SWEEPER, "dynamodb:Query", CONTROL_ARN)
    client = CheckedClient(aws.client("dynamodb"), SWEEPER, roles=roles)
    sweeper = Sweeper(SignupStore(client, sleep=lambda _: None), min_age_s=60)
    # WHEN it replays failed runs
    with pytest.raises(ClientError) as refused:
        sweeper.replay_failed()
    # THEN IAM refused the history's Query: nothing replayed, nothing re-emitted
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert [(r.action, r.leading_keys) for r in client.denied] == [
        ("dynamodb:Query", frozenset({"SWEEP-RUN"}))
    ]
    assert _history(plain) == [RunStatus.STARTED, RunStatus.FAILED]
    assert not _re_emitted_lost(plain)


# -- releasing due holds, and the operator's redrive -------------------------------------

DUE_INDEX_ARN = "${ControlTable.Arn}/index/due-holds"
DUE_INDEX = f"{CONTROL}/index/due-holds"
T0 = ms_of(NOW)


def _due_events(plain: SignupStore, client: Any) -> None:
    """Three events in the due-holds index: 'due' and 'later', whose earliest hold lapses
    1 s and 9 s after NOW (as a commit marks an event item), and 'parked', whose deciding
    failed at NOW: its record parked, its release due at once (as ``park`` marks it)."""
    for event_id, due_at in (("due", T0 + 1_000), ("later", T0 + 9_000)):
        plain.create_event(event_id, 5, NOW)
        client.update_item(
            TableName=CONTROL,
            Key={"pk": {"S": f"EVENT#{event_id}"}, "sk": {"S": "EVENT"}},
            UpdateExpression="SET hold_due_at = :at, hold_due_signup = :s, hold_due_shard = :z",
            ExpressionAttributeValues={
                ":at": {"N": str(due_at)},
                ":s": {"S": "holder"},
                ":z": {"S": "0"},
            },
        )
    plain.create_event("parked", 5, NOW)
    plain.park("parked", [IntakeRecord("parked", "p", "1" * 21)], NOW, "ThrottlingError")


@pytest.mark.parametrize(
    ("action", "resource", "where"),
    [("dynamodb:Query", DUE_INDEX_ARN, DUE_INDEX), (UPDATE, CONTROL_ARN, CONTROL)],
    ids=["query-of-the-due-holds-index", "wake-up-of-the-event"],
)
def test_releasing_due_holds_is_denied_without_its_grant(
    aws, plain, wakes, action, resource, where
):
    # GIVEN events due, and the due-holds role without one of its grants (its one
    # UpdateItem on control: the WAKE# items')
    _due_events(plain, aws.client("dynamodb"))
    wakes.read_new()
    roles = roles_without(DUE_HOLDS, action, resource)
    client = CheckedClient(aws.client("dynamodb"), DUE_HOLDS, roles=roles)
    # WHEN due holds are released
    with pytest.raises(ClientError) as refused:
        release_due_holds(SignupStore(client, sleep=lambda _: None), T0 + 5_000)
    # THEN the run fails on IAM's refusal (a missing grant is no bad entry to skip): the
    # Query, or the wake-up of the first event due (the parked one, due at NOW)
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert {(r.action, _where(r)) for r in client.denied} == {(action, where)}
    keys = {k for r in client.denied for k in r.leading_keys or ()}
    assert keys == ({"WAKE#parked"} if action == UPDATE else {"0"})
    # ... and no event was woken: no wake-up item, nothing on the control table's stream
    assert wake_items(plain) == {}
    assert woken_events(wakes) == []


class _RedriveStore(SignupStore):
    """The operator's store (``turnstile redrive`` runs with the operator's rights: it reads
    the stream, intake and decisions, which no function's role may all do) whose one
    DynamoDB write, the re-emission (``SignupStore.re_emit``: ``ADD redrive SET undecided``
    on an intake record, conditioned on it existing), goes through ``re_emitter``. Its
    attributes (event_id, signup_id, redrive, undecided) are within what the sweeper
    role's UpdateItem on intake allows (the role that re-emits): the redrive's writes run
    under that role here."""

    def __init__(self, client: Any, re_emitter: SignupStore) -> None:
        super().__init__(client, sleep=lambda _: None)
        self.re_emitter = re_emitter

    def re_emit(self, event_id: str, signup_id: str) -> bool:
        return self.re_emitter.re_emit(event_id, signup_id)


def _failed_batch(aws: Any, plain: SignupStore, stream: Any) -> tuple[Any, str]:
    """Two signups whose batch failed into the on-failure queue (metadata only, as on AWS);
    the queue's client and url."""
    client = aws.client("dynamodb")
    plain.create_event("gig", 5, NOW)
    for signup_id in ("u0", "u1"):
        put_raw_intake(client, "gig", signup_id, submitted_at={"S": NOW})
    records = stream.read_new()  # delivered, failed, never decided
    sqs = aws.client("sqs")
    queue_url = sqs.create_queue(QueueName="failures")["QueueUrl"]
    info = {
        "shardId": stream.shard_id,
        "startSequenceNumber": records[0]["dynamodb"]["SequenceNumber"],
        "endSequenceNumber": records[-1]["dynamodb"]["SequenceNumber"],
        "batchSize": len(records),
        "streamArn": stream.arn,
    }
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps({"DDBStreamBatchInfo": info}))
    return sqs, queue_url


def test_redrive_re_emits_under_the_sweeper_role(aws, as_role, plain, stream):
    # GIVEN a failed batch in the on-failure queue
    sqs, queue_url = _failed_batch(aws, plain, stream)
    sweeper_store, sweeper_client = as_role(SWEEPER)
    processor_store, processor_client = as_role(PROCESSOR)
    store = _RedriveStore(aws.client("dynamodb"), sweeper_store)

    def the_stream_delivers(_: float) -> None:
        assert decide_stream(processor_store, stream) == {"batchItemFailures": []}

    # WHEN the operator redrives it, its re-emissions under the sweeper role
    result = redrive_queue(
        store, sqs, queue_url, aws.client("dynamodbstreams"), wait_s=5, sleep=the_stream_delivers
    )
    # THEN both records were re-emitted, decided by the processor's role, and the message
    # deleted; the role was asked for nothing but the re-emissions' updates
    assert (result.from_stream, result.re_emitted, result.deleted, result.kept) == (2, 2, 1, 0)
    assert {sid: _status(plain, sid) for sid in ("u0", "u1")} == {
        "u0": Status.ACCEPTED,
        "u1": Status.ACCEPTED,
    }
    assert sweeper_client.denied == [] and processor_client.denied == []
    assert {(r.action, _where(r)) for r in sweeper_client.allowed} == {(UPDATE, INTAKE_TABLE)}
    updates = {(r.leading_keys, r.attributes) for r in sweeper_client.allowed}
    assert updates == {
        (frozenset({"gig"}), frozenset({"event_id", "signup_id", "redrive", "undecided"}))
    }


def test_redrive_is_denied_without_the_sweeper_role_s_update_of_intake(aws, plain, stream):
    # GIVEN a failed batch in the on-failure queue, and the sweeper role without its
    # UpdateItem on intake
    sqs, queue_url = _failed_batch(aws, plain, stream)
    roles = roles_without(SWEEPER, UPDATE, INTAKE_ARN)
    client = CheckedClient(aws.client("dynamodb"), SWEEPER, roles=roles)
    store = _RedriveStore(aws.client("dynamodb"), SignupStore(client, sleep=lambda _: None))
    # WHEN the operator redrives it
    with pytest.raises(ClientError) as refused:
        redrive_queue(store, sqs, queue_url, aws.client("dynamodbstreams"), wait_s=0)
    # THEN IAM refused the re-emission: nothing came down the stream, nothing was decided,
    # and the message was not deleted
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert {(r.action, _where(r)) for r in client.denied} == {(UPDATE, INTAKE_TABLE)}
    assert {k for r in client.denied for k in r.leading_keys or ()} == {"gig"}
    assert _re_emitted(stream) == []
    assert Attr.RE_EMITS not in _intake(plain, "u0")
    assert _status(plain, "u0") is None
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"

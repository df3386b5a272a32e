"""Each function's code, run under its deployed role, does its whole job, and nothing
outside it gets through: IAM alone keeps a role to its job.

moto enforces no IAM: the store's client here (``tests.roles.CheckedClient``) refuses what
the role's statements (the generated ``turnstile/local/roles.json``, which
tests/infra/test_local_roles.py keeps equal to a synthesis) would not allow on AWS.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from botocore.exceptions import ClientError

from tests.api.helpers import v2_event
from tests.helpers import put_raw_intake
from tests.roles import CheckedClient, table_of
from turnstile.api import create_app
from turnstile.audit import audit
from turnstile.contract import Function
from turnstile.domain import EventSnapshot, SignupRequest, decide
from turnstile.due_holds import release_due_holds
from turnstile.errors import StoreUnavailableError
from turnstile.handlers import stream as stream_handler
from turnstile.handlers.stream import to_intake_record
from turnstile.local.context import LocalLambdaContext
from turnstile.processor import StreamProcessor
from turnstile.store import SignupStore
from turnstile.sweeper import Sweeper

API = Function.API
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


def test_the_api_role_runs_every_route(as_role, stream):
    api_store, api_client = as_role(API)
    processor_store, processor_client = as_role(PROCESSOR)
    app = create_app(store=lambda: api_store)

    def call(method: str, path: str, body: Any = None, query: str = "") -> tuple[int, Any]:
        response = app.resolve(v2_event(method, path, body, query=query), LocalLambdaContext())
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
    assert call("GET", "/events/gala/signups/ada", query="wait=0.2")[1]["status"] == "PENDING"
    pending = call("GET", "/events/gala/signups", query="status=PENDING&limit=1")[1]
    assert [s["signup_id"] for s in pending["signups"]] == ["ada"]
    rest = call("GET", "/events/gala/signups", query=f"status=PENDING&next={pending['next']}")
    assert [s["signup_id"] for s in rest[1]["signups"]] == ["bob"]
    assert decide_stream(processor_store, stream) == {"batchItemFailures": []}
    assert call("GET", "/events/gala/signups/bob")[1]["status"] == "ACCEPTED"
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
    (update,) = {
        r
        for r in api_client.allowed
        if r.action == "dynamodb:UpdateItem" and table_of(r) == "turnstile-intake"
    }
    assert update.attributes == {"event_id", "signup_id", "request", "request_count", "undecided"}
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


class FailsFirstCommits(SignupStore):
    """DynamoDB unavailable for the first commits of one event: the event is held."""

    def __init__(self, *args: Any, event_id: str, failures: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.event_id, self.failures = event_id, failures

    def commit(self, expected: EventSnapshot, *args: Any, **kwargs: Any):
        if expected.event_id == self.event_id and self.failures:
            self.failures -= 1
            raise StoreUnavailableError("throttled")
        return super().commit(expected, *args, **kwargs)


def test_the_processor_role_decides_parks_and_releases(aws, as_role, plain, stream):
    _, processor_client = as_role(PROCESSOR)
    processor_store = FailsFirstCommits(
        processor_client, event_id="held", failures=20, sleep=lambda _: None
    )
    plain.create_event("gig", 1, NOW)
    plain.create_event("held", 5, NOW)
    plain.create_event("shut", 5, NOW)
    plain.close_event("shut")
    client = aws.client("dynamodb")
    for event_id, signup_id in [
        ("gig", "a"), ("gig", "b"), ("nowhere", "c"), ("shut", "d"), ("held", "e"),
    ]:  # fmt: skip
        put_raw_intake(client, event_id, signup_id, submitted_at={"S": NOW})
    # WHEN the processor decides, one event failing (it is parked and held)
    assert decide_stream(processor_store, stream) == {"batchItemFailures": []}
    assert plain.get_hold("held") is not None
    # ... and the event's next record, once DynamoDB is back, releases it in order
    processor_store.failures = 0
    put_raw_intake(client, "held", "f", submitted_at={"S": NOW})
    assert decide_stream(processor_store, stream) == {"batchItemFailures": []}
    # ... and a format-1 journal's items are rebuilt from intake
    assert set(processor_store.get_intakes("gig", ["a", "b"])) == {"a", "b"}
    # THEN nothing it needed was refused, and every signup is decided
    assert processor_client.denied == []
    assert plain.get_hold("held") is None
    report = audit(plain)
    assert report.ok and report.totals["pending"] == 0, report.to_dict()
    assert report.totals["accepted"] == 3 and report.totals["rejected"] == 3


def test_the_sweeper_role_re_emits_and_lifts_an_empty_hold(aws, as_role, plain, stream):
    sweeper_store, sweeper_client = as_role(SWEEPER)
    plain.create_event("gig", 5, NOW)
    client = aws.client("dynamodb")
    put_raw_intake(client, "gig", "lost", submitted_at={"S": OLD})
    put_raw_intake(client, "gig", "junk-counter", submitted_at={"S": OLD}, redrive={"S": "x"})
    stream.read_new()  # the stream "lost" them: nobody decided
    # ... and a hold whose parked records were all decided (a release that died before
    # lifting it)
    plain.park("held", [SignupRequest("held", "z", "1" * 21)], NOW, "ThrottlingError")
    plain.unpark("held", ["1" * 21])
    # WHEN the sweeper runs under its role
    result = Sweeper(sweeper_store, min_age_s=60).sweep("run-1")
    # THEN it re-emitted both records, lifted the hold, and kept its history
    assert (result.status, result.re_emitted, result.undecided) == ("succeeded", 2, 2)
    assert result.releases_triggered == 1 and plain.get_hold("held") is None
    assert [r.status for r in Sweeper(sweeper_store).replay_failed()] == []
    assert sweeper_client.denied == []
    assert {r.signup_id for r in _re_emitted(stream)} == {"lost", "junk-counter"}


def test_the_sweeper_role_reads_the_undecided_index_and_clears_markers(
    aws, as_role, plain, stream
):
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
    intake = {
        i["signup_id"]["S"]: i for i in client.scan(TableName=INTAKE_TABLE)["Items"]
    }
    assert "undecided" not in intake["decided"] and "redrive" not in intake["decided"]
    assert intake["lost"]["redrive"] == {"N": "1"} and "undecided" in intake["lost"]


def test_the_due_holds_role_finds_due_events_and_re_emits_their_holders(
    aws, as_role, plain, stream
):
    due_store, due_client = as_role(DUE_HOLDS)
    client = aws.client("dynamodb")
    for event_id, due_at in (("due", 1_000), ("later", 9_000)):
        plain.create_event(event_id, 5, NOW)
        put_raw_intake(client, event_id, "holder", submitted_at={"S": NOW})
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
    stream.read_new()
    # WHEN due holds are released under the function's role
    assert release_due_holds(due_store, 5_000) == 1
    # THEN nothing it needed was refused, and the due event's holder came down the stream
    assert due_client.denied == []
    assert {r.action for r in due_client.allowed} == {"dynamodb:Query", "dynamodb:UpdateItem"}
    assert {(r.event_id, r.signup_id) for r in _re_emitted(stream)} == {("due", "holder")}


def _re_emitted(stream) -> list[SignupRequest]:
    records = DynamoDBStreamEvent({"Records": stream.read_new()}).records
    return [
        SignupRequest(r.event_id, str(r.keys["signup_id"]), r.sequence_number)
        for r in map(to_intake_record, records)
        if r.event_name == "MODIFY"
    ]


def _commit_as(store: SignupStore) -> None:
    snapshot = EventSnapshot("gig", 5)
    store.commit(snapshot, decide(snapshot, [SignupRequest("gig", "x", "1" * 21)]), NOW, {})


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
INTAKE_KEY = {"event_id": {"S": "gig"}, "signup_id": {"S": "a"}}
DECISION = {**INTAKE_KEY, "status": {"S": "ACCEPTED"}}


CONTROL, MAIN_TABLE, INTAKE_TABLE = "turnstile-control", "turnstile-main", "turnstile-intake"

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
    # Releasing due holds: the index and intake's counter and marker, nothing else.
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
    "due-holds-sets-a-request": (
        DUE_HOLDS,
        _update(INTAKE_TABLE, INTAKE_KEY, "ADD #redrive :v, #request_count :v"),
    ),
    "due-holds-puts-intake": (
        DUE_HOLDS,
        lambda c: c.put_item(TableName=INTAKE_TABLE, Item=INTAKE_KEY),
    ),
    "due-holds-writes-decision": (
        DUE_HOLDS,
        lambda c: c.put_item(TableName=MAIN_TABLE, Item=DECISION),
    ),
    # The processor: never intake, never the sweeper's lease.
    "processor-touches-lease": (PROCESSOR, _update(CONTROL, LEASE_KEY, "SET #fence = :v")),
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

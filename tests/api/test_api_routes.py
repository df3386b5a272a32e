"""The HTTP API's routes, through the Lambda handler with v2 events, against moto."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.api.helpers import Invoke, decide_pending, v2_event
from tests.helpers import NO_EVENT_OPTIONS, put_decision
from turnstile.base.contract import MAX_LINEUP_ENTRIES
from turnstile.base.itemsize import value_size
from turnstile.handlers import api as api_handler
from turnstile.storage.dynamo import event_key
from turnstile.storage.store import SignupStore
from turnstile.web import api
from turnstile_tools.local.context import LocalLambdaContext

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
def concert(invoke: Invoke) -> str:
    answer = invoke("POST", "/events", {"event_id": "concert", "capacity": 3})
    assert answer.status == 201
    return "concert"


# -- events ---------------------------------------------------------------------------


def test_create_event_answers_201_with_the_event_and_its_location(invoke: Invoke):
    # WHEN
    answer = invoke("POST", "/events", {"event_id": "concert-2026", "capacity": 0})
    # THEN
    assert answer.status == 201
    assert answer.headers["location"] == "/events/concert-2026"
    assert answer.headers["content-type"] == "application/json"
    body = answer.body
    assert ISO_UTC.match(body.pop("created_at"))
    assert body == {
        "event_id": "concert-2026",
        "capacity": 0,
        "taken": 0,
        "remaining": 0,
        "positions_given": 0,
        "state": "OPEN",
        # The handler saw no authorizer (the local stack's API has none).
        "created_by": None,
        **NO_EVENT_OPTIONS,
    }


IAM_CALLER = "arn:aws:sts::123456789012:assumed-role/event-admins/alice"


@pytest.mark.parametrize(
    ("authorizer", "creator"),
    [
        (
            {"iam": {"accountId": "123456789012", "userArn": IAM_CALLER, "userId": "AROA:a"}},
            IAM_CALLER,
        ),
        (
            {"jwt": {"claims": {"sub": "user-7f3c", "scope": "turnstile/organizer"}}},
            "user-7f3c",
        ),
    ],
    ids=["iam", "jwt"],
)
def test_the_event_records_who_created_it(
    invoke: Invoke, store: SignupStore, authorizer: dict[str, Any], creator: str
):
    # GIVEN a request API Gateway authorized (an IAM caller, or a token's subject)
    answer = invoke("POST", "/events", {"event_id": "gala", "capacity": 1}, authorizer=authorizer)
    # THEN the event item records the caller, and GET /events/{id} shows it
    assert answer.status == 201
    assert answer.body["created_by"] == creator
    assert invoke("GET", "/events/gala").body["created_by"] == creator
    item = store.client.get_item(TableName=store.control_table, Key=event_key("gala"))
    assert item["Item"]["created_by"] == {"S": creator}


@pytest.mark.parametrize(("env_days", "days"), [(None, 30), ("7", 7)])
def test_a_submitted_signup_expires_after_the_intake_retention(
    invoke: Invoke, store: SignupStore, concert: str, monkeypatch, env_days, days
):
    import time

    if env_days is None:
        monkeypatch.delenv("TURNSTILE_INTAKE_RETENTION_DAYS", raising=False)
    else:
        monkeypatch.setenv("TURNSTILE_INTAKE_RETENTION_DAYS", env_days)
    before = int(time.time())
    answer = invoke("POST", f"/events/{concert}/signups", {"signup_id": "ada"})
    after = int(time.time())
    assert answer.status == 202
    # THEN TTL deletes the intake record (personal data) that many days after it was written
    expires_at = int(store.get_intake(concert, "ada")["expires_at"])
    assert before + days * 86_400 <= expires_at <= after + days * 86_400


def test_create_existing_event_with_another_capacity_answers_409(invoke: Invoke, concert: str):
    answer = invoke("POST", "/events", {"event_id": concert, "capacity": 9})
    assert answer.status == 409
    assert answer.body == {
        "error": "event_exists",
        "message": "event 'concert' already exists with capacity 3, not 9",
    }
    assert invoke("GET", f"/events/{concert}").body["capacity"] == 3


def test_create_again_with_the_same_body_answers_200_with_the_event(
    invoke: Invoke, concert: str, store: SignupStore
):
    # GIVEN the event has moved on since it was created (a decision, then closed)
    assert invoke("POST", f"/events/{concert}/signups", {"signup_id": "ada"}).status == 202
    decide_pending(store, concert)
    assert invoke("POST", f"/events/{concert}/close").status == 200
    # WHEN its creation is retried with the same body
    answer = invoke("POST", "/events", {"event_id": concert, "capacity": 3})
    # THEN 200 (nothing created) with the event as it is now, and where it is
    assert answer.status == 200
    assert answer.headers["location"] == f"/events/{concert}"
    assert answer.body == invoke("GET", f"/events/{concert}").body
    assert (answer.body["taken"], answer.body["state"]) == (1, "CLOSED")


def test_create_retried_after_a_capacity_change_is_a_conflict(invoke: Invoke, concert: str):
    assert invoke("PATCH", f"/events/{concert}", {"capacity": 5}).status == 200
    answer = invoke("POST", "/events", {"event_id": concert, "capacity": 3})
    assert (answer.status, answer.body["error"]) == (409, "event_exists")
    assert "with capacity 5, not 3" in answer.body["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"event_id": "e1"},
        {"capacity": 1},
        {"event_id": "e1", "capacity": -1},
        {"event_id": "e1", "capacity": 1.5},
        {"event_id": "e1", "capacity": "3"},
        {"event_id": "e1", "capacity": True},
        {"event_id": "e1", "capacity": None},
        {"event_id": "e1", "capacity": api.MAX_CAPACITY + 1},
        {"event_id": "", "capacity": 1},
        {"event_id": "-e1", "capacity": 1},
        {"event_id": "e 1", "capacity": 1},
        {"event_id": "e1\n", "capacity": 1},
        {"event_id": "e" * 129, "capacity": 1},
        {"event_id": 7, "capacity": 1},
        {"event_id": "e1", "capacity": 1, "owner": "me"},
        [],
        "e1",
        None,
        7,
    ],
    ids=repr,
)
def test_create_event_refuses_bad_input_with_400(invoke: Invoke, body: Any):
    answer = invoke("POST", "/events", json.dumps(body))
    assert answer.status == 400
    assert answer.body["error"] == "invalid_request"
    assert answer.body["message"]


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "{",
        '{"event_id": "e1", "capacity": 2.0}',
        '{"event_id": "e1", "capacity": 1e2}',
        '{"event_id": "e1", "capacity": NaN}',
        '{"event_id": "e1", "capacity": Infinity}',
        '{"event_id": "e1", "capacity": ' + "9" * 5000 + "}",
        "[" * 5000 + "]" * 5000,
        b'{"event_id": "\xff"}',
    ],
    ids=["empty", "truncated", "2.0", "1e2", "NaN", "Infinity", "5000 digits", "deep", "bad utf-8"],
)
def test_malformed_or_inexact_json_answers_400(invoke: Invoke, raw: str | bytes):
    answer = invoke("POST", "/events", raw, base64_body=isinstance(raw, bytes))
    assert answer.status == 400
    assert answer.body["error"] == "invalid_request"


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ('{"event_id": "e1", "capacity": 1, "capacity": 2}', "capacity"),
        ('{"event_id": "e1", "event_id": "e2", "capacity": 1}', "event_id"),
    ],
)
def test_a_key_given_twice_answers_400_naming_it(invoke: Invoke, raw: str, key: str):
    answer = invoke("POST", "/events", raw)
    assert answer.status == 400
    assert answer.body == {
        "error": "invalid_request",
        "message": f'body has the key "{key}" more than once',
    }
    assert invoke("GET", "/events/e1").status == 404  # neither value was taken


def test_a_key_given_twice_inside_attributes_answers_400(invoke: Invoke, concert: str):
    raw = '{"signup_id": "u1", "attributes": {"tier": "vip", "tier": "basic"}}'
    answer = invoke("POST", f"/events/{concert}/signups", raw)
    assert answer.status == 400
    assert answer.body["message"] == 'body has the key "tier" more than once'


DYNAMODB_NUMBERS = "attributes hold a number DynamoDB cannot store (38 digits, 1e-130 to 1e125)"


@pytest.mark.parametrize(
    ("number", "message"),
    [
        ("1e200", DYNAMODB_NUMBERS),
        ("-1e200", DYNAMODB_NUMBERS),
        ("1e-200", DYNAMODB_NUMBERS),
        ("1e999999999999", DYNAMODB_NUMBERS),
        ("9" * 39, DYNAMODB_NUMBERS),
        ("9" * 5000, DYNAMODB_NUMBERS),  # past Python's 4,300-digit int conversion
        ("NaN", "body is not valid JSON: NaN is not a JSON number"),
        ("Infinity", "body is not valid JSON: Infinity is not a JSON number"),
        ("-Infinity", "body is not valid JSON: -Infinity is not a JSON number"),
    ],
    ids=["1e200", "-1e200", "1e-200", "1e999999999999", "39 digits", "5000 digits", "NaN",
         "Infinity", "-Infinity"],
)  # fmt: skip
def test_numbers_dynamodb_cannot_hold_answer_a_clear_400(
    invoke: Invoke, concert: str, number: str, message: str
):
    raw = '{"signup_id": "u1", "attributes": {"n": ' + number + "}}"
    answer = invoke("POST", f"/events/{concert}/signups", raw)
    assert answer.status == 400
    assert answer.body == {"error": "invalid_request", "message": message}


@pytest.mark.parametrize("number", ["1e200", "9" * 5000, "1e-200"])
def test_seats_and_capacity_that_are_huge_numbers_answer_a_clear_400(
    invoke: Invoke, concert: str, number: str
):
    raw = '{"signup_id": "u1", "seats": ' + number + "}"
    answer = invoke("POST", f"/events/{concert}/signups", raw)
    assert answer.body == {
        "error": "invalid_request",
        "message": "seats must be an integer from 1 to 1000000",
    }
    answer = invoke("POST", "/events", '{"event_id": "e9", "capacity": ' + number + "}")
    assert answer.status == 400
    assert answer.body["message"].startswith("capacity must be an integer from 0 to")


def test_base64_body_is_decoded(invoke: Invoke):
    answer = invoke("POST", "/events", {"event_id": "b64", "capacity": 1}, base64_body=True)
    assert answer.status == 201


def test_body_that_is_not_base64_answers_400(store: SignupStore):
    event = v2_event("POST", "/events", "x")
    event.update(body="@@@", isBase64Encoded=True)
    response = api_handler.handler(event, LocalLambdaContext.api())
    assert response["statusCode"] == 400


def test_get_event_answers_200_with_counts(invoke: Invoke, concert: str):
    answer = invoke("GET", f"/events/{concert}")
    assert answer.status == 200
    assert {k: answer.body[k] for k in ("capacity", "taken", "remaining", "state")} == {
        "capacity": 3,
        "taken": 0,
        "remaining": 3,
        "state": "OPEN",
    }
    assert "version" not in answer.body


def test_unknown_event_answers_404(invoke: Invoke):
    answer = invoke("GET", "/events/nope")
    assert answer.status == 404
    assert answer.body["error"] == "event_not_found"


@pytest.mark.parametrize("segment", ["-x", "%2Fx", "a%20b", "x" * 129, "%E2%82%AC", 'a"b'])
def test_path_id_off_the_pattern_answers_400(invoke: Invoke, segment: str):
    answer = invoke("GET", f"/events/{segment}")
    assert answer.status == 400
    assert answer.body["error"] == "invalid_request"


def test_percent_encoded_path_ids_are_decoded(invoke: Invoke):
    invoke("POST", "/events", {"event_id": "a@b:c", "capacity": 1})
    assert invoke("GET", "/events/a%40b%3Ac").body["event_id"] == "a@b:c"
    assert invoke("GET", "/events/a@b:c").status == 200


def test_close_closes_once_then_reports_the_state(invoke: Invoke, concert: str):
    first = invoke("POST", f"/events/{concert}/close")
    second = invoke("POST", f"/events/{concert}/close")
    assert (first.status, first.body["state"], first.body["closed_now"]) == (200, "CLOSED", True)
    assert (second.status, second.body["state"], second.body["closed_now"]) == (
        200,
        "CLOSED",
        False,
    )


def _take_seats(store: SignupStore, event_id: str, taken: int) -> None:
    store.client.update_item(
        TableName=store.control_table,
        Key=event_key(event_id),
        UpdateExpression="SET taken = :taken",
        ExpressionAttributeValues={":taken": {"N": str(taken)}},
    )


def test_patch_changes_capacity_and_answers_the_event(
    invoke: Invoke, concert: str, store: SignupStore
):
    _take_seats(store, concert, 2)
    answer = invoke("PATCH", f"/events/{concert}", {"capacity": 10})
    assert answer.status == 200
    assert (answer.body["capacity"], answer.body["taken"], answer.body["remaining"]) == (10, 2, 8)
    assert "version" not in answer.body
    assert invoke("GET", f"/events/{concert}").body["capacity"] == 10
    # down to exactly what is taken
    assert invoke("PATCH", f"/events/{concert}", {"capacity": 2}).body["remaining"] == 0


def test_patch_below_taken_answers_400_naming_taken(
    invoke: Invoke, concert: str, store: SignupStore
):
    _take_seats(store, concert, 2)
    answer = invoke("PATCH", f"/events/{concert}", {"capacity": 1})
    assert answer.status == 400
    assert answer.body["error"] == "capacity_below_taken"
    assert "2 seats already taken" in answer.body["message"]
    assert invoke("GET", f"/events/{concert}").body["capacity"] == 3


def test_patch_unknown_event_answers_404(invoke: Invoke):
    answer = invoke("PATCH", "/events/nope", {"capacity": 1})
    assert (answer.status, answer.body["error"]) == (404, "event_not_found")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"capacity": -1},
        {"capacity": 1.5},
        {"capacity": "3"},
        {"capacity": None},
        {"capacity": api.MAX_CAPACITY + 1},
        {"capacity": 3, "state": "OPEN"},
        [],
        None,
    ],
    ids=repr,
)
def test_patch_refuses_bad_input_with_400(invoke: Invoke, concert: str, body: Any):
    answer = invoke("PATCH", f"/events/{concert}", json.dumps(body))
    assert (answer.status, answer.body["error"]) == (400, "invalid_request")


def test_close_unknown_event_answers_404(invoke: Invoke):
    assert invoke("POST", "/events/nope/close").status == 404


# -- signups --------------------------------------------------------------------------


def test_submit_answers_202_pending_with_location(invoke: Invoke, concert: str):
    answer = invoke("POST", f"/events/{concert}/signups", {"signup_id": "user-1", "seats": 2})
    assert answer.status == 202
    assert answer.headers["location"] == f"/events/{concert}/signups/user-1"
    body = answer.body
    assert ISO_UTC.match(body.pop("submitted_at"))
    assert body == {"status": "PENDING", "event_id": concert, "signup_id": "user-1", "seats": 2}


def test_submit_defaults_to_one_seat(invoke: Invoke, concert: str):
    answer = invoke("POST", f"/events/{concert}/signups", {"signup_id": "user-1"})
    assert answer.body["seats"] == 1


def test_same_submission_again_is_202_with_the_first_timestamp(invoke: Invoke, concert: str):
    body = {"signup_id": "u1", "seats": 2, "attributes": {"tier": "gold", "score": 1.5}}
    first = invoke("POST", f"/events/{concert}/signups", body)
    again = invoke("POST", f"/events/{concert}/signups", body)
    assert (first.status, again.status) == (202, 202)
    assert again.body == first.body


def test_same_submission_after_the_decision_is_still_202(
    invoke: Invoke, concert: str, store: SignupStore
):
    invoke("POST", f"/events/{concert}/signups", {"signup_id": "u1"})
    decide_pending(store, concert)
    again = invoke("POST", f"/events/{concert}/signups", {"signup_id": "u1"})
    assert again.status == 202
    assert invoke("GET", f"/events/{concert}/signups/u1").body["status"] == "ACCEPTED"


@pytest.mark.parametrize(
    "other",
    [
        {"signup_id": "u1", "seats": 3},
        {"signup_id": "u1", "seats": 2, "attributes": {"tier": "silver"}},
        {"signup_id": "u1", "seats": 2, "attributes": {}},
    ],
    ids=["seats", "attributes", "no attributes"],
)
def test_same_signup_with_another_body_answers_409(invoke: Invoke, concert: str, other):
    invoke("POST", f"/events/{concert}/signups", {**other, "seats": 2, "attributes": {"a": 1}})
    answer = invoke("POST", f"/events/{concert}/signups", other)
    assert answer.status == 409
    assert answer.body["error"] == "signup_conflict"


def test_submit_to_unknown_event_answers_404(invoke: Invoke, store: SignupStore):
    answer = invoke("POST", "/events/nope/signups", {"signup_id": "u1"})
    assert answer.status == 404
    assert answer.body["error"] == "event_not_found"
    assert store.get_intake("nope", "u1") is None


def test_submit_to_closed_event_is_recorded_and_later_rejected(
    invoke: Invoke, concert: str, store: SignupStore
):
    invoke("POST", f"/events/{concert}/close")
    assert invoke("POST", f"/events/{concert}/signups", {"signup_id": "late"}).status == 202
    decide_pending(store, concert)
    status = invoke("GET", f"/events/{concert}/signups/late").body
    assert (status["status"], status["reason"]) == ("REJECTED", "event_closed")


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"seats": 1},
        {"signup_id": ""},
        {"signup_id": "#EVENT"},
        {"signup_id": "u1", "seats": 0},
        {"signup_id": "u1", "seats": -1},
        {"signup_id": "u1", "seats": 1.5},
        {"signup_id": "u1", "seats": "1"},
        {"signup_id": "u1", "seats": True},
        {"signup_id": "u1", "seats": None},
        {"signup_id": "u1", "seats": 1_000_001},
        {"signup_id": "u1", "attributes": []},
        {"signup_id": "u1", "attributes": "x"},
        {"signup_id": "u1", "attributes": None},
        {"signup_id": "u1", "attributes": {"blob": "x" * 4100}},
        {"signup_id": "u1", "attributes": {"": 1}},
        {"signup_id": "u1", "attributes": _nested(api.MAX_ATTRIBUTES_DEPTH + 1)},
        {"signup_id": "u1", "seat": 2},
    ],
    ids=repr,
)
def test_submit_refuses_bad_input_with_400(invoke: Invoke, concert: str, body: Any):
    answer = invoke("POST", f"/events/{concert}/signups", body)
    assert answer.status == 400, answer.body
    assert answer.body["error"] == "invalid_request"


@pytest.mark.parametrize(
    "raw",
    [
        '{"signup_id": "u1", "seats": 2.0}',
        '{"signup_id": "u1", "attributes": {"n": 1.' + "1" * 40 + "}}",
        '{"signup_id": "u1", "attributes": {"n": 1e999}}',
        '{"signup_id": "u1", "attributes": {"s": "\\ud800"}}',
    ],
    ids=["seats 2.0", "41 digits", "1e999", "lone surrogate"],
)
def test_submit_refuses_what_dynamodb_cannot_hold_with_400(invoke: Invoke, concert: str, raw):
    answer = invoke("POST", f"/events/{concert}/signups", raw)
    assert answer.status == 400, answer.body


def test_attributes_of_exactly_4_kb_by_dynamodb_rules_are_taken(invoke: Invoke, concert: str):
    # GIVEN attributes of exactly 4,096 bytes by DynamoDB's item-size rules:
    # 3 (map) + 4 ("blob") + 1 (element) + the string's bytes
    attributes = {"blob": "x" * (api.MAX_ATTRIBUTES_BYTES - 8)}
    assert value_size(attributes) == api.MAX_ATTRIBUTES_BYTES
    answer = invoke(
        "POST", f"/events/{concert}/signups", {"signup_id": "u1", "attributes": attributes}
    )
    assert answer.status == 202
    attributes["blob"] += "x"
    answer = invoke(
        "POST", f"/events/{concert}/signups", {"signup_id": "u2", "attributes": attributes}
    )
    assert answer.status == 400
    assert "4097 bytes" in answer.body["message"]


def test_attributes_small_as_json_but_big_in_dynamodb_are_refused(invoke: Invoke, concert: str):
    # GIVEN 1,300 empty maps: 3,906 bytes as JSON, 5,208 by DynamoDB's rules
    attributes = {"l": [{}] * 1300}
    answer = invoke(
        "POST", f"/events/{concert}/signups", {"signup_id": "u1", "attributes": attributes}
    )
    # THEN refused now, instead of a 202 the processor would reject as invalid_request
    assert answer.status == 400
    assert "5208 bytes" in answer.body["message"]


def test_get_signup_is_pending_until_decided(invoke: Invoke, concert: str, store: SignupStore):
    invoke("POST", f"/events/{concert}/signups", {"signup_id": "u1", "attributes": {"k": [1, "v"]}})
    pending = invoke("GET", f"/events/{concert}/signups/u1")
    assert pending.status == 200
    assert pending.body["status"] == "PENDING"
    assert pending.body["attributes"] == {"k": [1, "v"]}
    assert (pending.body["reason"], pending.body["position"], pending.body["decided_at"]) == (
        None,
        None,
        None,
    )


def test_pending_signup_written_straight_into_intake_is_shown_bounded(
    invoke: Invoke, concert: str, store: SignupStore
):
    # GIVEN a producer's own intake item: a huge submitted_at, attributes over the limit,
    # seats that are no seat count
    store.client.put_item(
        TableName=store.intake_table,
        Item={
            "event_id": {"S": concert},
            "signup_id": {"S": "raw"},
            "seats": {"S": "many"},
            "submitted_at": {"S": "2026-01-01T00:00:00Z" + " " * 50_000},
            "attributes": {"M": {"blob": {"S": "x" * 100_000}}},
        },
    )
    # WHEN a client polls it
    answer = invoke("GET", f"/events/{concert}/signups/raw")
    # THEN it is PENDING, and nothing unbounded is copied into the answer
    assert answer.status == 200
    body = answer.body
    assert (body["status"], body["seats"], body["submitted_at"], body["attributes"]) == (
        "PENDING",
        None,
        None,
        {},
    )


def test_get_signup_reports_acceptance_and_rejection(
    invoke: Invoke, concert: str, store: SignupStore
):
    # GIVEN capacity 3: 2 seats, then 2 more (too many), then 1 (fits)
    for signup_id, seats in (("a", 2), ("b", 2), ("c", 1)):
        invoke("POST", f"/events/{concert}/signups", {"signup_id": signup_id, "seats": seats})
    # WHEN the processor decides
    decide_pending(store, concert)
    # THEN
    a, b, c = (invoke("GET", f"/events/{concert}/signups/{s}").body for s in "abc")
    assert (a["status"], a["position"], a["seats"], a["reason"]) == ("ACCEPTED", 1, 2, None)
    assert (b["status"], b["position"], b["reason"]) == ("REJECTED", None, "capacity_full")
    assert (c["status"], c["position"]) == ("ACCEPTED", 2)
    assert a["decided_at"] == "2026-11-21T21:30:00Z"
    assert invoke("GET", f"/events/{concert}").body["taken"] == 3


def test_unknown_signup_answers_404(invoke: Invoke, concert: str):
    answer = invoke("GET", f"/events/{concert}/signups/nobody")
    assert answer.status == 404
    assert answer.body["error"] == "signup_not_found"


# -- routing, limits and failures ------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/nope", "/events/e1/extra/x", "/events/e1/signups/u1/x", "//", "/index.html"]
)
def test_unknown_route_answers_404(invoke: Invoke, path: str):
    answer = invoke("GET", path)
    assert answer.status == 404
    assert answer.body["error"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/events/e1", "GET, PATCH"),
        ("PATCH", "/events", "GET, POST"),
        ("PUT", "/events/e1/signups/u1", "GET"),
        ("GET", "/events/e1/close", "POST"),
        ("DELETE", "/events/e1/signups", "GET, POST"),
        ("POST", "/", "GET"),
        ("HEAD", "/events/e1", "GET, PATCH"),
        ("POST", "/openapi.json", "GET"),
    ],
)
def test_wrong_method_answers_405_with_allow(invoke: Invoke, method: str, path: str, allow: str):
    answer = invoke(method, path)
    assert (answer.status, answer.headers["allow"]) == (405, allow)
    assert answer.body["error"] == "method_not_allowed"


def test_body_over_the_limit_answers_413(invoke: Invoke, concert: str):
    big = {"signup_id": "u1", "attributes": {"x": "y" * api.MAX_BODY_BYTES}}
    assert invoke("POST", f"/events/{concert}/signups", big).status == 413
    assert invoke("POST", f"/events/{concert}/signups", big, base64_body=True).status == 413
    assert invoke("POST", "/nope", big).status == 413


def test_the_root_points_at_the_document_and_the_routes(invoke: Invoke):
    answer = invoke("GET", "/")
    assert answer.status == 200
    assert answer.body["openapi"] == "/openapi.json"
    assert answer.body["routes"] == [f"{r.method} {r.path}" for r in api.ROUTES]
    assert "GET /events/{event_id}/signups" in answer.body["routes"]


def test_json_bodies_end_with_a_newline(store: SignupStore):
    for method, path in (("GET", "/"), ("GET", "/events/nope"), ("GET", "/nope")):
        response = api_handler.handler(v2_event(method, path), LocalLambdaContext.api())
        assert response["body"].endswith("}\n"), (method, path)
        assert response["body"].count("\n") == 1


def test_openapi_document_is_served(invoke: Invoke):
    answer = invoke("GET", "/openapi.json")
    assert answer.status == 200
    assert answer.body == json.loads(json.dumps(api.OPENAPI))


class _FailingClient:
    """A DynamoDB client whose every call raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        def call(**_: Any) -> Any:
            raise self.error

        return call


def _failing_store(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def build(**kwargs: Any) -> SignupStore:
        return SignupStore(
            client=_FailingClient(error), sleep=lambda _: None, max_attempts=2, **kwargs
        )

    monkeypatch.setattr(api_handler, "SignupStore", build)
    api_handler.get_store.cache_clear()


@pytest.mark.parametrize(
    "error",
    [
        ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "GetItem"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
    ],
    ids=["throttled", "unreachable"],
)
def test_store_unavailable_answers_503_with_retry_after(
    invoke: Invoke, monkeypatch: pytest.MonkeyPatch, error: Exception
):
    _failing_store(monkeypatch, error)
    answer = invoke("GET", "/events/e1")
    assert answer.status == 503
    assert answer.headers["retry-after"] == str(api.RETRY_AFTER_S)
    assert answer.body["error"] == "unavailable"


def test_unexpected_store_error_is_a_json_500(invoke: Invoke, monkeypatch: pytest.MonkeyPatch):
    error = ClientError({"Error": {"Code": "ResourceNotFoundException", "Message": "x"}}, "GetItem")
    _failing_store(monkeypatch, error)
    answer = invoke("GET", "/events/e1")
    assert answer.status == 500
    assert answer.body == {"error": "internal_error", "message": "the request failed on the server"}


# -- the lifecycle: event options, confirm and cancel (docs/lifecycle.md) ----------------

LATER = "2999-01-01T00:00:00.000000Z"
EARLIER = "2000-01-01T00:00:00.000000Z"


def test_an_event_is_created_with_its_options_and_shows_them(invoke: Invoke):
    body = {"event_id": "gig", "capacity": 10, "waitlist": 5, "hold_seconds": 300, "max_seats": 2}
    answer = invoke("POST", "/events", body)
    assert answer.status == 201
    options = {"waitlist": 5, "hold_seconds": 300, "max_seats": 2, "status_counts": {}}
    assert {k: answer.body[k] for k in options} == options
    shown = invoke("GET", "/events/gig").body
    assert {k: shown[k] for k in options} == options
    [listed] = invoke("GET", "/events").body["events"]
    assert {k: listed[k] for k in options} == options


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"waitlist": MAX_LINEUP_ENTRIES + 1},
            f"waitlist must be an integer from 0 to {MAX_LINEUP_ENTRIES}",
        ),
        (
            {"hold_seconds": 60, "capacity": MAX_LINEUP_ENTRIES - 5, "waitlist": 6},
            "capacity + waitlist of at most",
        ),
        ({"hold_seconds": -1}, "hold_seconds must be an integer from 0 to 86400"),
        ({"max_seats": 0}, "max_seats must be an integer from 1 to"),
        ({"max_seats": 1.5}, "max_seats must be an integer"),
        ({"hold_seconds": None}, "hold_seconds must be an integer"),
        ({"hold": 60}, "unknown field(s): hold"),
    ],
)
def test_options_that_break_the_rules_answer_400(invoke: Invoke, body: dict, message: str):
    answer = invoke("POST", "/events", {"event_id": "gig", "capacity": 10, **body})
    assert (answer.status, answer.body["error"]) == (400, "invalid_request")
    assert message in answer.body["message"]
    assert invoke("GET", "/events/gig").status == 404


def test_a_capacity_change_past_the_lineup_bound_answers_400(invoke: Invoke):
    invoke("POST", "/events", {"event_id": "gig", "capacity": 10, "hold_seconds": 60})
    answer = invoke("PATCH", "/events/gig", {"capacity": MAX_LINEUP_ENTRIES + 1})
    assert (answer.status, answer.body["error"]) == (400, "invalid_request")
    assert f"capacity + waitlist of at most {MAX_LINEUP_ENTRIES}" in answer.body["message"]
    assert invoke("GET", "/events/gig").body["capacity"] == 10


@pytest.fixture
def lineup(invoke: Invoke, store: SignupStore) -> str:
    """gig: h HELD until much later, late HELD until long ago, a ACCEPTED, p PENDING."""
    invoke("POST", "/events", {"event_id": "gig", "capacity": 5, "hold_seconds": 60})
    for signup_id in ("h", "late", "a", "p"):
        assert invoke("POST", "/events/gig/signups", {"signup_id": signup_id}).status == 202
    put_decision(store.client, "gig", "h", "HELD", position=1, hold_expires_at=LATER)
    put_decision(store.client, "gig", "late", "HELD", position=2, hold_expires_at=EARLIER)
    put_decision(store.client, "gig", "a", "ACCEPTED", position=3)
    return "gig"


@pytest.mark.parametrize(("kind", "signup_id"), [("confirm", "h"), ("cancel", "a")])
def test_a_request_is_recorded_and_answered_202(
    invoke: Invoke, store: SignupStore, lineup: str, kind: str, signup_id: str
):
    answer = invoke("POST", f"/events/gig/signups/{signup_id}/{kind}")
    assert answer.status == 202
    assert answer.body == {"event_id": "gig", "signup_id": signup_id, "request": kind}
    assert answer.headers["location"] == f"/events/gig/signups/{signup_id}"
    intake = store.get_intake("gig", signup_id)
    assert (intake["request"], intake["request_count"]) == (kind, 1)


@pytest.mark.parametrize(
    ("kind", "signup_id", "status", "expires"),
    [
        ("confirm", "late", "HELD", EARLIER),
        ("confirm", "a", "ACCEPTED", None),
        ("confirm", "p", "PENDING", None),
        ("cancel", "p", "PENDING", None),
    ],
)
def test_a_request_the_status_refuses_answers_409_with_the_status(
    invoke: Invoke, store: SignupStore, lineup: str, kind, signup_id, status, expires
):
    answer = invoke("POST", f"/events/gig/signups/{signup_id}/{kind}")
    assert answer.status == 409
    message = answer.body.pop("message")
    assert message.startswith(f"cannot {kind} signup '{signup_id}' of event 'gig': it is {status}")
    assert answer.body == {
        "error": "request_refused",
        "event_id": "gig",
        "signup_id": signup_id,
        "request": kind,
        "status": status,
        "hold_expires_at": expires,
        "reason": None,
    }
    assert "request" not in store.get_intake("gig", signup_id)


def test_a_request_for_an_unknown_signup_answers_404(invoke: Invoke, lineup: str):
    for path in ("/events/gig/signups/ghost/confirm", "/events/nope/signups/h/cancel"):
        answer = invoke("POST", path)
        assert (answer.status, answer.body["error"]) == (404, "signup_not_found")


def test_a_request_route_takes_only_post(invoke: Invoke, lineup: str):
    answer = invoke("GET", "/events/gig/signups/h/confirm")
    assert (answer.status, answer.headers["allow"]) == (405, "POST")


def test_the_signup_shows_the_lifecycle_fields(invoke: Invoke, store: SignupStore, lineup: str):
    """As the processor stores a signup promoted from the waitlist: its decision (joined the
    line) on the item itself, the later move in ``history``; the API shows every transition,
    and ``updated_at`` is the last one's time."""
    promoted = "2001-01-01T00:00:00.000000Z"
    later = [
        {
            "from": "WAITLISTED",
            "to": "HELD",
            "at": promoted,
            "sequence_number": "5",
            "cause": "promotion",
        }
    ]
    put_decision(
        store.client,
        "gig",
        "h",
        "HELD",
        position=1,
        hold_expires_at=LATER,
        history=later,
        decided_at=EARLIER,
        sequence_number="1",
        request_count=0,
    )
    body = invoke("GET", "/events/gig/signups/h").body
    first = {
        "from": "PENDING",
        "to": "WAITLISTED",
        "at": EARLIER,
        "sequence_number": "1",
        "cause": "signup",
    }
    assert (body["status"], body["hold_expires_at"]) == ("HELD", LATER)
    assert body["history"] == [first, *later]
    assert (body["updated_at"], body["request_count"], body["last_refusal"]) == (promoted, 0, None)
    assert body["waitlist_position"] is None


# -- the edge on Powertools: request validation, bodies ---------------------------------------


@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "text/plain", "application/json"]
)
def test_a_body_is_read_as_json_whatever_its_content_type(invoke: Invoke, content_type: str):
    # curl -d labels its body application/x-www-form-urlencoded
    body = {"event_id": "labelled", "capacity": 1}
    answer = invoke("POST", "/events", body, headers={"content-type": content_type})
    assert answer.status == 201
    assert answer.body["event_id"] == "labelled"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"event_id": "e1"}, "capacity is required"),
        (
            {"event_id": "bad id", "capacity": -1},
            "event_id must match ^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$; "
            f"capacity must be an integer from 0 to {api.MAX_CAPACITY}",
        ),
        ({"event_id": "e1", "capacity": 1, "zz": 1, "aa": 2}, "unknown field(s): aa, zz"),
    ],
)
def test_a_request_the_models_refuse_is_a_400_naming_each_field(
    invoke: Invoke, body: dict[str, Any], message: str
):
    # Powertools' own answer would be a 422 with pydantic's error list: never given here.
    answer = invoke("POST", "/events", body)
    assert (answer.status, answer.body) == (400, {"error": "invalid_request", "message": message})

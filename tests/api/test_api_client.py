"""TurnstileClient without the real API: SigV4 signing, transient errors in wait()."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.helpers import NO_LIFECYCLE_FIELDS
from turnstile.service import views
from turnstile_tools.client import (
    ApiError,
    ApiUnreachableError,
    NotTurnstileApiError,
    TurnstileClient,
    WaitTimeoutError,
    region_of_execute_api,
)
from turnstile_tools.local.api_server import ApiServer

AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/\d{8}/(?P<region>[a-z0-9-]+)/execute-api/"
    r"aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), Signature=(?P<signature>[0-9a-f]{64})$"
)


class Scripted:
    """An app handler that answers from a script of v2 results and records the events."""

    def __init__(self, *results: dict[str, Any]) -> None:
        self.results = list(results)
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.events.append(event)
        return self.results.pop(0) if len(self.results) > 1 else self.results[0]


def signup(status: str, **fields: Any) -> dict[str, Any]:
    """A signup as the API answers it, whole (the client reads answers into their views)."""
    return {
        "event_id": "e1",
        "signup_id": "u1",
        "status": status,
        "seats": 1,
        "reason": None,
        "detail": None,
        "position": None,
        "submitted_at": None,
        "decided_at": None,
        "attributes": {},
        **NO_LIFECYCLE_FIELDS,
        **fields,
    }


#: An event as the API answers it.
EVENT = {
    "event_id": "e1",
    "capacity": 5,
    "taken": 0,
    "remaining": 5,
    "positions_given": 0,
    "state": "OPEN",
    "created_at": None,
    "created_by": None,
    "waitlist": 0,
    "hold_seconds": 0,
    "max_seats": None,
    "status_counts": {},
}


def reply(status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": json.dumps(body),
    }


@pytest.fixture
def scripted() -> Scripted:
    return Scripted(reply(200, signup("PENDING")))


@pytest.fixture
def server(scripted: Scripted) -> Iterator[ApiServer]:
    api = ApiServer("127.0.0.1", 0, lambda: {}, scripted)
    api.start()
    yield api
    api.stop()


@pytest.fixture
def session() -> boto3.Session:
    return boto3.Session(
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        aws_session_token="token",
        region_name="us-east-1",
    )


def _recomputed_signature(event: dict[str, Any], url: str, signed: str) -> str:
    """What botocore's SigV4 signs for the request as the server received it."""
    headers = event["headers"]
    names = signed.split(";")
    request = AWSRequest(
        method=event["requestContext"]["http"]["method"],
        url=url + event["rawPath"],
        data=(event.get("body") or "").encode(),
        headers={n: headers[n] for n in names if n != "host"},
    )
    request.context["timestamp"] = headers["x-amz-date"]
    auth = SigV4Auth(Credentials("AKIDEXAMPLE", "secret", "token"), "execute-api", "us-east-1")
    return auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)


def test_sign_true_adds_a_valid_sigv4_signature(server, scripted, session, monkeypatch):
    # GIVEN a client told to sign, and botocore's signer watched
    calls: list[str] = []
    original = SigV4Auth.add_auth

    def watched(self: SigV4Auth, request: AWSRequest) -> None:
        calls.append(self._service_name)
        original(self, request)

    monkeypatch.setattr(SigV4Auth, "add_auth", watched)
    client = TurnstileClient(server.url, session=session, sign=True)
    # WHEN
    client.submit("e1", "u1", seats=2)
    client.get("e1", "u1")
    # THEN every request carries a SigV4 Authorization that botocore recomputes exactly
    assert calls == ["execute-api", "execute-api"]
    for event in scripted.events:
        headers = event["headers"]
        match = AUTHORIZATION.match(headers["authorization"])
        assert match, headers["authorization"]
        assert match["region"] == "us-east-1"
        assert {"host", "x-amz-date", "x-amz-security-token"} <= set(match["signed"].split(";"))
        assert headers["x-amz-security-token"] == "token"
        assert match["signature"] == _recomputed_signature(event, server.url, match["signed"])


def test_local_url_is_not_signed_by_default(server, scripted, session):
    TurnstileClient(server.url, session=session).get("e1", "u1")
    assert "authorization" not in scripted.events[0]["headers"]


def test_execute_api_url_is_signed_for_its_region(monkeypatch, session):
    # No AWS here: capture the request urllib would send instead of sending it.
    sent: list[urllib.request.Request] = []

    class Answer:
        status = 200

        def read(self) -> bytes:
            return json.dumps(signup("PENDING")).encode()

        def __enter__(self) -> Answer:
            return self

        def __exit__(self, *_: Any) -> None:
            return None

    def fake_urlopen(request: urllib.request.Request, timeout: float) -> Answer:
        sent.append(request)
        return Answer()

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    url = "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/prod"
    TurnstileClient(url, session=session).get("e1", "u1")
    (request,) = sent
    assert request.full_url == f"{url}/events/e1/signups/u1"
    match = AUTHORIZATION.match(request.get_header("Authorization"))
    assert match and match["region"] == "eu-west-1"


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://abc123.execute-api.us-east-1.amazonaws.com/prod", "us-east-1"),
        ("https://abc123.execute-api.cn-north-1.amazonaws.com.cn", "cn-north-1"),
        ("https://abc-vpce-1.execute-api.ap-south-1.vpce.amazonaws.com/", "ap-south-1"),
        ("http://127.0.0.1:8080", None),
        ("https://api.example.com/execute-api.us-east-1.amazonaws.com", None),
    ],
)
def test_region_of_execute_api(url: str, region: str | None):
    assert region_of_execute_api(url) == region


def test_wait_polls_through_503_and_honours_retry_after(server, scripted):
    # GIVEN the API throttled twice, then a decision
    scripted.results = [
        reply(503, {"error": "unavailable", "message": "busy"}, {"Retry-After": "1"}),
        reply(503, {"error": "unavailable", "message": "busy"}, {"Retry-After": "1"}),
        reply(200, signup("REJECTED", reason="capacity_full")),
    ]
    pauses: list[float] = []
    client = TurnstileClient(server.url, sleep=pauses.append)
    # WHEN
    decision = client.wait("e1", "u1", timeout_s=30, initial_delay_s=0.01)
    # THEN
    assert decision["reason"] == "capacity_full"
    assert pauses == [1.0, 1.0]


def test_api_error_carries_retry_after(server, scripted):
    scripted.results = [
        reply(503, {"error": "unavailable", "message": "busy"}, {"Retry-After": "2"})
    ]
    with pytest.raises(ApiError) as error:
        TurnstileClient(server.url).get_event("e1")
    assert (error.value.status, error.value.code, error.value.retry_after) == (
        503,
        "unavailable",
        2,
    )
    assert error.value.transient


def test_wait_stops_polling_at_a_permanent_error(server, scripted):
    scripted.results = [reply(404, {"error": "signup_not_found", "message": "no"})]
    pauses: list[float] = []
    with pytest.raises(ApiError):
        TurnstileClient(server.url, sleep=pauses.append).wait("e1", "u1", timeout_s=30)
    assert pauses == []


def test_wait_asks_the_server_to_wait_never_past_the_deadline(server, scripted):
    # GIVEN a server that answers PENDING at once (it does not hold requests), and a clock
    # that only the client's pauses move
    now = [1000.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    client = TurnstileClient(server.url, sleep=sleep, clock=lambda: now[0])
    # WHEN the client waits 5 s
    with pytest.raises(WaitTimeoutError) as timeout:
        client.wait("e1", "u1", timeout_s=5, initial_delay_s=0.1, max_delay_s=0.8)
    # THEN each request asked the server to wait what was left of the deadline (at most
    # 10 s); answered sooner, it paused with backoff, and gave up at the deadline, not past
    assert timeout.value.last["status"] == "PENDING"
    assert now[0] == pytest.approx(1005.0)
    assert all(p <= 0.8 for p in pauses) and len(pauses) > 5
    waits = [e.get("queryStringParameters", {}).get("wait") for e in scripted.events]
    assert waits[0] == "5.000"
    assert all(w is None or 0 < float(w) <= 5 for w in waits)


def test_wait_asks_for_at_most_10_seconds_at_a_time(server, scripted):
    scripted.results = [reply(200, signup("ACCEPTED"))]
    TurnstileClient(server.url).wait("e1", "u1", timeout_s=300)
    assert scripted.events[0]["queryStringParameters"] == {"wait": "10.000"}
    assert scripted.events[0]["rawPath"] == "/events/e1/signups/u1/decision"


def test_lists_send_only_the_parameters_given(server, scripted):
    signups, events = {"signups": [], "next": None}, {"events": [], "next": None}
    scripted.results = [reply(200, signups), reply(200, signups), reply(200, events)]
    client = TurnstileClient(server.url)
    client.list_signups("e 1", status="PENDING", limit=5, next="tok")
    client.list_signups("e1")
    client.list_events(limit=3)
    sent = [(e["rawPath"], e.get("queryStringParameters")) for e in scripted.events]
    assert sent == [
        ("/events/e%201/signups", {"status": "PENDING", "limit": "5", "next": "tok"}),
        ("/events/e1/signups", None),
        ("/events", {"limit": "3"}),
    ]


def html(status: int, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """What a proxy or some other web server answers: a page, not the API's JSON."""
    return {
        "statusCode": status,
        "headers": {"Content-Type": "text/html", **(headers or {})},
        "body": "<html><body>Service Unavailable</body></html>",
    }


@pytest.mark.parametrize("status", [200, 404])
def test_an_answer_that_is_not_json_is_not_a_turnstile_api(server, scripted, status):
    scripted.results = [html(status)]
    with pytest.raises(NotTurnstileApiError) as error:
        TurnstileClient(server.url).get("e1", "u1")
    assert (error.value.status, error.value.content_type) == (status, "text/html")
    assert error.value.url == f"{server.url}/events/e1/signups/u1"
    assert "Service Unavailable" in error.value.body["message"]


def test_wait_polls_through_a_proxys_503_page(server, scripted):
    # GIVEN a load balancer's HTML 503 (with Retry-After), then the API's decision
    scripted.results = [
        html(503, {"Retry-After": "1"}),
        reply(200, signup("ACCEPTED")),
    ]
    pauses: list[float] = []
    decision = TurnstileClient(server.url, sleep=pauses.append).wait(
        "e1", "u1", timeout_s=30, initial_delay_s=0.01
    )
    # THEN the page counts as a transient error, like the API's own 503
    assert decision["status"] == "ACCEPTED" and pauses == [1.0]


def test_wait_for_statuses_polls_past_a_decision_until_one_of_them(server, scripted):
    # GIVEN a signup HELD twice, then ACCEPTED (a confirm applied)
    scripted.results = [
        reply(200, signup("HELD")),
        reply(200, signup("HELD")),
        reply(200, signup("ACCEPTED")),
    ]
    pauses: list[float] = []
    client = TurnstileClient(server.url, sleep=pauses.append)
    # WHEN the client waits for ACCEPTED
    done = client.wait("e1", "u1", timeout_s=30, initial_delay_s=0.01, statuses={"ACCEPTED"})
    # THEN it polled on past HELD (pausing: the server answers a decided signup at once)
    assert done["status"] == "ACCEPTED"
    assert len(scripted.events) == 3 and len(pauses) == 2
    # and without statuses, any decision ends the wait (HELD here)
    scripted.results = [reply(200, signup("HELD"))]
    assert client.wait("e1", "u1", timeout_s=30)["status"] == "HELD"


def test_wait_for_statuses_ends_at_a_final_status(server, scripted):
    scripted.results = [reply(200, signup("WAITLISTED")), reply(200, signup("EXPIRED"))]
    client = TurnstileClient(server.url, sleep=lambda s: None)
    done = client.wait("e1", "u1", timeout_s=30, statuses=("ACCEPTED",))
    assert done["status"] == "EXPIRED"
    assert len(scripted.events) == 2


def test_confirm_and_cancel_post_to_their_routes_and_a_refusal_is_an_api_error(server, scripted):
    refused = {
        "error": "request_refused",
        "message": "cannot confirm signup 'u 1' of event 'e1': it is ACCEPTED",
        "status": "ACCEPTED",
        "hold_expires_at": None,
    }
    scripted.results = [
        reply(202, {"event_id": "e1", "signup_id": "u1", "request": "cancel"}),
        reply(409, refused),
    ]
    client = TurnstileClient(server.url)
    assert client.cancel("e1", "u 1")["request"] == "cancel"
    with pytest.raises(ApiError) as error:
        client.confirm("e1", "u 1")
    assert (error.value.status, error.value.code) == (409, "request_refused")
    assert error.value.body["status"] == "ACCEPTED"
    sent = [(e["requestContext"]["http"]["method"], e["rawPath"]) for e in scripted.events]
    assert sent == [
        ("POST", "/events/e1/signups/u%201/cancel"),
        ("POST", "/events/e1/signups/u%201/confirm"),
    ]


def test_create_event_sends_only_the_options_given(server, scripted):
    scripted.results = [reply(201, EVENT)]
    client = TurnstileClient(server.url)
    client.create_event("e1", 5)
    client.create_event("e1", 5, waitlist=0, hold_seconds=60)
    bodies = [json.loads(e["body"]) for e in scripted.events]
    assert bodies == [
        {"event_id": "e1", "capacity": 5},
        {"event_id": "e1", "capacity": 5, "waitlist": 0, "hold_seconds": 60},
    ]


def _nothing_listening() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_nothing_listening_is_an_api_error_not_a_bare_urlerror():
    url = _nothing_listening()
    with pytest.raises(ApiUnreachableError) as raised:
        TurnstileClient(url).get("e1", "u1")
    error = raised.value
    assert isinstance(error, ApiError) and error.transient
    assert (error.status, error.code) == (0, "unreachable")
    assert error.url == f"{url}/events/e1/signups/u1"
    assert "refused" in str(error.reason).lower()


def test_wait_on_nothing_listening_ends_as_unreachable_not_as_a_slow_decision():
    # GIVEN a clock only the client's pauses move, and no server at the URL
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    client = TurnstileClient(_nothing_listening(), sleep=sleep, clock=lambda: now[0])
    # WHEN it waits 5 s THEN it retried through the deadline and says it never got an answer
    with pytest.raises(ApiUnreachableError):
        client.wait("e1", "u1", timeout_s=5, initial_delay_s=0.1, max_delay_s=0.8)
    assert now[0] == pytest.approx(5.0)


def test_wait_whose_api_answers_still_times_out_as_undecided(server, scripted):
    # an API that answers PENDING to the end: a slow decision, not an outage
    scripted.results = [reply(200, signup("PENDING"))] * 100
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    client = TurnstileClient(server.url, sleep=sleep, clock=lambda: now[0])
    with pytest.raises(WaitTimeoutError) as timeout:
        client.wait("e1", "u1", timeout_s=2, initial_delay_s=0.1, max_delay_s=0.4)
    assert timeout.value.last["status"] == "PENDING"


def test_an_answer_is_read_into_its_view(server, scripted):
    scripted.results = [reply(200, signup("HELD", hold_expires_at="2999-01-01T00:00:00Z"))]
    answer = TurnstileClient(server.url).get("e1", "u1")
    assert isinstance(answer, views.Signup)
    assert (answer.status, answer["status"]) == ("HELD", "HELD")
    assert answer == signup("HELD", hold_expires_at="2999-01-01T00:00:00Z")


def test_json_that_is_not_the_answers_view_is_not_a_turnstile_api(server, scripted):
    scripted.results = [reply(200, {"status": "PENDING"})]
    with pytest.raises(NotTurnstileApiError) as error:
        TurnstileClient(server.url).get("e1", "u1")
    assert error.value.status == 200
    assert "not a turnstile Signup (event_id: Field required)" in error.value.message

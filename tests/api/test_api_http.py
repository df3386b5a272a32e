"""The API over real HTTP: ApiServer + handler + a moto server, driven by TurnstileClient."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.api.helpers import LiveApi, decide_pending
from turnstile.api import MAX_BODY_BYTES
from turnstile.client import ApiError, TurnstileClient, WaitTimeoutError


@pytest.fixture(scope="module")
def client(live_api: LiveApi) -> TurnstileClient:
    return TurnstileClient(live_api.url)


@pytest.fixture(scope="module")
def festival(client: TurnstileClient) -> str:
    client.create_event("festival", capacity=3)
    return "festival"


def raw(live_api: LiveApi, method: str, path: str, data: bytes | None = None):
    """A plain urllib request; returns status, headers and parsed JSON body."""
    request = urllib.request.Request(live_api.url + path, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read())


def test_producer_and_poller_round_trip(client: TurnstileClient, live_api: LiveApi):
    # GIVEN an event and a producer's signup
    created = client.create_event("round-trip", capacity=2)
    assert (created["state"], created["remaining"]) == ("OPEN", 2)
    submitted = client.submit("round-trip", "user@example.com", seats=2, attributes={"n": 1})
    assert submitted["status"] == "PENDING"
    assert client.get("round-trip", "user@example.com")["status"] == "PENDING"
    # WHEN the processor decides it
    decide_pending(live_api.store, "round-trip")
    # THEN the poller sees the decision and the event its counters
    decision = client.wait("round-trip", "user@example.com", timeout_s=10)
    assert (decision["status"], decision["position"], decision["seats"]) == ("ACCEPTED", 1, 2)
    assert decision["attributes"] == {"n": 1}
    event = client.get_event("round-trip")
    assert (event["taken"], event["remaining"]) == (2, 0)
    # and its capacity changes over HTTP too: up, then not below what is taken
    assert client.update_event("round-trip", capacity=5)["remaining"] == 3
    with pytest.raises(ApiError) as below:
        client.update_event("round-trip", capacity=1)
    assert (below.value.status, below.value.code) == (400, "capacity_below_taken")
    assert "2 seats already taken" in below.value.message
    closed = client.close_event("round-trip")
    assert (closed["state"], closed["closed_now"]) == ("CLOSED", True)
    assert client.close_event("round-trip")["closed_now"] is False


def test_submit_is_idempotent_and_conflicts_are_typed(client: TurnstileClient, festival: str):
    first = client.submit(festival, "repeat", seats=1)
    assert client.submit(festival, "repeat", seats=1) == first
    with pytest.raises(ApiError) as conflict:
        client.submit(festival, "repeat", seats=2)
    assert (conflict.value.status, conflict.value.code) == (409, "signup_conflict")


@pytest.mark.parametrize(
    ("call", "status", "code"),
    [
        (lambda c: c.get_event("missing"), 404, "event_not_found"),
        (lambda c: c.get("festival", "nobody"), 404, "signup_not_found"),
        (lambda c: c.submit("missing", "u1"), 404, "event_not_found"),
        (lambda c: c.create_event("festival", capacity=1), 409, "event_exists"),
        (lambda c: c.create_event("bad id", capacity=1), 400, "invalid_request"),
        (lambda c: c.submit("festival", "u1", seats=0), 400, "invalid_request"),
        (lambda c: c.get_event("../openapi.json"), 400, "invalid_request"),
    ],
    ids=["event", "signup", "submit", "exists", "bad id", "seats", "traversal"],
)
def test_errors_are_api_errors_with_status_and_code(
    client: TurnstileClient, festival: str, call: Any, status: int, code: str
):
    with pytest.raises(ApiError) as error:
        call(client)
    assert (error.value.status, error.value.code) == (status, code)
    assert error.value.message


def test_wait_returns_the_decision_once_made(client: TurnstileClient, live_api: LiveApi, festival):
    # GIVEN a pending signup, and a processor that decides during the poller's first pause
    client.submit(festival, "patient")
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 1:
            decide_pending(live_api.store, festival)

    poller = TurnstileClient(live_api.url, sleep=sleep)
    # WHEN
    decision = poller.wait(festival, "patient", timeout_s=60, initial_delay_s=0.25)
    # THEN one pause, within the first backoff step (full jitter: uniform in [0, delay])
    assert decision["status"] == "ACCEPTED"
    assert len(pauses) == 1
    assert 0 <= pauses[0] <= 0.25


def test_wait_raises_at_its_deadline(live_api: LiveApi, festival: str):
    # GIVEN a signup nobody decides, and a clock that the pauses move forward
    TurnstileClient(live_api.url).submit(festival, "forgotten")
    now = [1000.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    poller = TurnstileClient(live_api.url, sleep=sleep, clock=lambda: now[0])
    # WHEN / THEN
    with pytest.raises(WaitTimeoutError) as timeout:
        poller.wait(festival, "forgotten", timeout_s=5, initial_delay_s=0.1, max_delay_s=0.8)
    assert timeout.value.last["status"] == "PENDING"
    assert now[0] == pytest.approx(1005.0)  # it polled right up to the deadline, not past it
    assert all(p <= 0.8 for p in pauses)
    assert len(pauses) > 5


def test_wait_with_a_real_clock_gives_up(live_api: LiveApi, festival: str):
    client = TurnstileClient(live_api.url)
    client.submit(festival, "real-clock")
    with pytest.raises(WaitTimeoutError):
        client.wait(festival, "real-clock", timeout_s=0.2, initial_delay_s=0.01, max_delay_s=0.05)


def test_wait_on_an_unknown_signup_fails_at_once(client: TurnstileClient, festival: str):
    with pytest.raises(ApiError) as error:
        client.wait(festival, "never-submitted", timeout_s=60)
    assert error.value.status == 404


def test_ids_with_reserved_characters_round_trip(client: TurnstileClient, live_api: LiveApi):
    client.create_event("tz:2026@eu", capacity=1)
    client.submit("tz:2026@eu", "a.b_c-d:e@f")
    assert client.get("tz:2026@eu", "a.b_c-d:e@f")["signup_id"] == "a.b_c-d:e@f"


def test_location_header_is_where_the_status_is(live_api: LiveApi, festival: str):
    body = json.dumps({"signup_id": "located"}).encode()
    status, headers, _ = raw(live_api, "POST", f"/events/{festival}/signups", body)
    assert status == 202
    status, _, document = raw(live_api, "GET", headers["Location"])
    assert (status, document["signup_id"]) == (200, "located")


def test_over_http_bad_bodies_are_4xx(live_api: LiveApi, festival: str):
    assert raw(live_api, "POST", "/events", b"{nope")[0] == 400
    assert raw(live_api, "POST", "/events", b"[]")[0] == 400
    status, _, body = raw(live_api, "POST", "/events", b"x" * (MAX_BODY_BYTES + 1))
    assert (status, body["error"]) == (413, "payload_too_large")
    status, headers, _ = raw(live_api, "DELETE", f"/events/{festival}")
    assert (status, headers["Allow"]) == (405, "GET, PATCH")
    assert raw(live_api, "GET", "/health")[0] == 200


def test_openapi_document_is_served_over_http(live_api: LiveApi):
    status, headers, document = raw(live_api, "GET", "/openapi.json")
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert document["openapi"].startswith("3.")

"""The API over real HTTP: ApiServer + handler + a moto server, driven by TurnstileClient."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.api.conftest import MAX_WAITERS
from tests.api.helpers import LiveApi, decide_pending
from turnstile.web.api import MAX_BODY_BYTES
from turnstile_tools.client import ApiError, TurnstileClient, WaitTimeoutError


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


def _decide_later(live_api: LiveApi, event_id: str, after_s: float) -> threading.Timer:
    timer = threading.Timer(after_s, decide_pending, args=(live_api.store, event_id))
    timer.start()
    return timer


def test_wait_returns_the_decision_in_one_request(
    client: TurnstileClient, live_api: LiveApi, festival
):
    # GIVEN a pending signup that the processor decides in 1.5 s
    client.submit(festival, "patient")
    path = f"/events/{festival}/signups/patient/decision"
    before = len(live_api.requests_to(path))
    started = time.monotonic()
    decider = _decide_later(live_api, festival, 1.5)
    try:
        # WHEN a client waits for it
        decision = client.wait(festival, "patient", timeout_s=60)
    finally:
        decider.join()
    # THEN one request, held by the API until the decision, instead of a poll every
    # 50 ms .. 2 s (about 8 requests in those 1.5 s)
    assert decision["status"] == "ACCEPTED"
    asked = live_api.requests_to(path)[before:]
    assert len(asked) == 1
    assert asked[0]["queryStringParameters"] == {"wait": "10.000"}
    assert 1.5 <= time.monotonic() - started < 4


def test_wait_gives_up_at_its_deadline_after_one_request(live_api: LiveApi, festival: str):
    # GIVEN a signup nobody decides
    client = TurnstileClient(live_api.url)
    client.submit(festival, "forgotten")
    path = f"/events/{festival}/signups/forgotten/decision"
    before = len(live_api.requests_to(path))
    started = time.monotonic()
    # WHEN a client waits 1.5 s THEN it gives up at the deadline, with the PENDING status
    with pytest.raises(WaitTimeoutError) as timeout:
        client.wait(festival, "forgotten", timeout_s=1.5)
    assert timeout.value.last["status"] == "PENDING"
    assert 1.5 <= time.monotonic() - started < 3
    # one request held 1.5 s (a last, short one may follow it at the deadline)
    asked = live_api.requests_to(path)[before:]
    assert 1 <= len(asked) <= 2
    assert asked[0]["queryStringParameters"] == {"wait": "1.500"}


def test_a_waiting_request_holds_no_other_request_up(
    client: TurnstileClient, live_api: LiveApi, festival: str
):
    # GIVEN a client waiting 3 s for a signup nobody decides
    client.submit(festival, "held")
    waiting = threading.Thread(target=client.get, args=(festival, "held", 3.0))
    waiting.start()
    try:
        time.sleep(0.3)
        # WHEN another client reads meanwhile THEN it is answered at once
        started = time.monotonic()
        assert client.get_event(festival)["event_id"] == festival
        assert time.monotonic() - started < 1.5
    finally:
        waiting.join()


def test_wait_over_http_answers_when_decided(client: TurnstileClient, live_api: LiveApi):
    client.create_event("raw-wait", capacity=1)
    client.submit("raw-wait", "raw-waiter")
    decider = _decide_later(live_api, "raw-wait", 0.5)
    try:
        status, _, body = raw(
            live_api, "GET", "/events/raw-wait/signups/raw-waiter/decision?wait=10"
        )
    finally:
        decider.join()
    assert (status, body["status"]) == (200, "ACCEPTED")
    status, _, body = raw(live_api, "GET", "/events/raw-wait/signups/raw-waiter/decision?wait=25")
    assert (status, body["error"]) == (400, "invalid_request")


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


def test_json_replies_end_with_a_newline(live_api: LiveApi):
    for path in ("/", "/events/nope", "/nope", "/health"):
        try:
            with urllib.request.urlopen(live_api.url + path, timeout=10) as response:
                data = response.read()
        except urllib.error.HTTPError as exc:
            data = exc.read()
        assert data.endswith(b"}\n"), path


def test_the_root_points_at_the_document(live_api: LiveApi):
    status, _, index = raw(live_api, "GET", "/")
    assert (status, index["openapi"]) == (200, "/openapi.json")
    assert "GET /events" in index["routes"]


def test_create_twice_over_http(client: TurnstileClient):
    first = client.create_event("twice", capacity=4)
    assert client.create_event("twice", capacity=4) == first
    with pytest.raises(ApiError) as conflict:
        client.create_event("twice", capacity=5)
    assert (conflict.value.status, conflict.value.code) == (409, "event_exists")
    assert "already exists with capacity 4, not 5" in conflict.value.message


def test_lists_page_over_http(client: TurnstileClient, live_api: LiveApi):
    # GIVEN an event with 2 seats and 5 signups, 2 accepted and 3 rejected, 1 more pending
    client.create_event("listed", capacity=2)
    for n in range(5):
        client.submit("listed", f"s{n}")
        time.sleep(0.002)
    decide_pending(live_api.store, "listed")
    client.submit("listed", "s5")
    # WHEN the client lists them a page at a time
    seen, token = [], None
    while True:
        page = client.list_signups("listed", limit=2, next=token)
        seen += [s["signup_id"] for s in page["signups"]]
        token = page["next"]
        if token is None:
            break
    # THEN every signup, in order, and by status
    assert seen == [f"s{n}" for n in range(6)]
    rejected = client.list_signups("listed", status="REJECTED")
    assert [s["signup_id"] for s in rejected["signups"]] == ["s2", "s3", "s4"]
    assert [s["signup_id"] for s in client.list_signups("listed", "PENDING")["signups"]] == ["s5"]
    # and the events, "listed" among them
    events, token = [], None
    while True:
        page = client.list_events(limit=1, next=token)
        events += [e["event_id"] for e in page["events"]]
        token = page["next"]
        if token is None:
            break
    assert "listed" in events and len(events) == len(set(events))
    with pytest.raises(ApiError) as refused:
        client.list_signups("listed", next=rejected["next"] or "bm9wZQ")
    assert (refused.value.status, refused.value.code) == (400, "invalid_request")


def test_confirm_and_cancel_over_http_and_through_the_cli(
    client: TurnstileClient, live_api: LiveApi, capsys: pytest.CaptureFixture[str]
):
    from tests.helpers import put_decision
    from turnstile_tools import cli

    # GIVEN a HELD signup and an ACCEPTED one
    client.create_event("holds", 4, hold_seconds=60)
    for signup_id in ("h", "a"):
        client.submit("holds", signup_id)
    later = "2999-01-01T00:00:00.000000Z"
    put_decision(live_api.store.client, "holds", "h", "HELD", position=1, hold_expires_at=later)
    put_decision(live_api.store.client, "holds", "a", "ACCEPTED", position=2)
    # WHEN / THEN the client confirms one; the other is refused with its status
    assert client.confirm("holds", "h") == {
        "event_id": "holds",
        "signup_id": "h",
        "request": "confirm",
    }
    with pytest.raises(ApiError) as refused:
        client.confirm("holds", "a")
    assert (refused.value.status, refused.value.body["status"]) == (409, "ACCEPTED")
    # and the CLI through the API prints the same answers, a refusal as one line, exit 2
    assert cli.main(["cancel", "holds", "a", "--api-url", live_api.url]) == 0
    assert json.loads(capsys.readouterr().out)["request"] == "cancel"
    assert cli.main(["confirm", "holds", "a", "--api-url", live_api.url]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err == (
        "turnstile: API error 409 request_refused: cannot confirm signup 'a' of event "
        "'holds': it is ACCEPTED\n"
    )
    intake = live_api.store.get_intake("holds", "a")
    assert (intake["request"], intake["request_count"]) == ("cancel", 1)


def _until(condition: Any, what: str, limit_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds (a generous limit: it fails only when it never does)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.02)


def test_waits_have_instances_of_their_own_and_one_too_many_is_throttled(
    client: TurnstileClient, live_api: LiveApi, festival: str
):
    # GIVEN as many held waits as the waiter has instances (MAX_WAITERS), on signups
    # nobody decides yet
    held = [f"held-{n}" for n in range(MAX_WAITERS)]
    for signup_id in held:
        client.submit(festival, signup_id)
    answers: dict[str, Any] = {}

    def wait(signup_id: str) -> None:
        answers[signup_id] = raw(
            live_api, "GET", f"/events/{festival}/signups/{signup_id}/decision?wait=10"
        )

    waiting = [threading.Thread(target=wait, args=(signup_id,)) for signup_id in held]
    for thread in waiting:
        thread.start()
    try:
        _until(
            lambda: all(
                live_api.requests_to(f"/events/{festival}/signups/{s}/decision") for s in held
            ),
            "every wait reached a waiter instance",
        )
        # WHEN one more client asks to wait THEN it is throttled (500, as API Gateway answers
        # a throttled function) without reaching a handler
        client.submit(festival, "one-too-many")
        before = len(live_api.requests)
        status, _, body = raw(
            live_api, "GET", f"/events/{festival}/signups/one-too-many/decision?wait=10"
        )
        assert (status, body) == (500, {"message": "Internal Server Error"})
        assert len(live_api.requests) == before
        # AND every other route is still answered by the API's own instances
        assert client.get(festival, "one-too-many")["status"] == "PENDING"
        assert client.submit(festival, "still-served")["status"] == "PENDING"
        assert client.get_event(festival)["event_id"] == festival
        assert not any(answers), "a held wait answered before anything was decided"
    finally:
        decide_pending(live_api.store, festival)
        for thread in waiting:
            thread.join()
    # THEN the held waits end with the decision, and the client that was throttled gets
    # its decision by waiting again (it backs off through 5xx)
    assert {answers[s][0] for s in held} == {200}
    assert client.wait(festival, "one-too-many", timeout_s=60)["status"] != "PENDING"

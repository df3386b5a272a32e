"""The local ApiServer: HTTP to API Gateway v2 events and back, health, body limits."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from turnstile_tools.local.api_server import MAX_DRAIN_BYTES, ApiServer

LIMIT = 1024


class Recorder:
    """An app handler that records its events and answers with ``reply``."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.contexts: list[Any] = []
        self.reply: Any = {"statusCode": 200, "headers": {}, "body": "{}"}

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        self.events.append(event)
        self.contexts.append(context)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def server(recorder: Recorder) -> Iterator[ApiServer]:
    api = ApiServer("127.0.0.1", 0, lambda: {"tables": True}, recorder, max_body_bytes=LIMIT)
    api.start()
    yield api
    api.stop()


def connect(server: ApiServer) -> http.client.HTTPConnection:
    host, port = server.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=5)


def request(
    server: ApiServer, method: str, path: str, body: Any = None, headers=None, chunked=False
) -> tuple[int, http.client.HTTPMessage, bytes]:
    conn = connect(server)
    try:
        conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def raw_exchange(server: ApiServer, data: bytes) -> bytes:
    """Send raw bytes; return the first response (head and its Content-Length of body)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(data)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            if not chunk:
                return received
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body


# -- /health --------------------------------------------------------------------------


def test_health_without_an_app_handler_keeps_working():
    checks = {"tables": True, "worker": False}
    api = ApiServer("127.0.0.1", 0, lambda: checks)
    api.start()
    try:
        status, _, body = request(api, "GET", "/health")
        assert (status, json.loads(body)) == (503, checks)
        checks["worker"] = True
        assert request(api, "GET", "/health?verbose=1")[0] == 200
        status, _, body = request(api, "POST", "/events", b"{}")
        assert status == 404
        assert json.loads(body)["error"] == "not_found"
    finally:
        api.stop()


def test_health_is_answered_by_the_server_not_the_handler(server, recorder):
    assert request(server, "GET", "/health")[0] == 200
    assert recorder.events == []


# -- requests become v2 events ---------------------------------------------------------


def test_request_becomes_an_http_api_v2_event(server, recorder):
    # WHEN
    request(
        server,
        "POST",
        "/events/e1/signups?a=1&b=2&a=3&empty=",
        body=b'{"signup_id": "u1"}',
        headers={
            "Content-Type": "application/json",
            "X-Trace": "one",
            "Cookie": "session=abc; theme=dark",
        },
    )
    # THEN
    (event,) = recorder.events
    assert event["version"] == "2.0"
    assert event["routeKey"] == "$default"
    assert event["rawPath"] == "/events/e1/signups"
    assert event["rawQueryString"] == "a=1&b=2&a=3&empty="
    assert event["queryStringParameters"] == {"a": "1,3", "b": "2", "empty": ""}
    assert event["headers"]["content-type"] == "application/json"
    assert event["headers"]["x-trace"] == "one"
    assert all(name == name.lower() for name in event["headers"])
    assert "cookie" not in event["headers"]
    assert event["cookies"] == ["session=abc", "theme=dark"]
    http_context = event["requestContext"]["http"]
    assert (http_context["method"], http_context["path"], http_context["sourceIp"]) == (
        "POST",
        "/events/e1/signups",
        "127.0.0.1",
    )
    assert event["requestContext"]["stage"] == "$default"
    assert (event["body"], event["isBase64Encoded"]) == ('{"signup_id": "u1"}', False)
    assert recorder.contexts[0].get_remaining_time_in_millis() > 0


def test_request_without_body_has_no_body_field(server, recorder):
    request(server, "GET", "/events/e1")
    (event,) = recorder.events
    assert "body" not in event
    assert event["rawQueryString"] == ""
    assert "queryStringParameters" not in event


def test_binary_body_arrives_base64_encoded(server, recorder):
    payload = bytes(range(256))
    request(server, "PUT", "/blob", payload, {"Content-Type": "application/octet-stream"})
    (event,) = recorder.events
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == payload


def test_repeated_headers_are_joined_with_commas(server, recorder):
    raw_exchange(
        server,
        b"GET /x HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-A: 2\r\nConnection: close\r\n\r\n",
    )
    assert recorder.events[0]["headers"]["x-a"] == "1,2"


def test_any_method_reaches_the_handler(server, recorder):
    assert request(server, "BREW", "/pot")[0] == 200
    assert recorder.events[0]["requestContext"]["http"]["method"] == "BREW"


# -- v2 results become responses -------------------------------------------------------


def test_result_headers_cookies_and_base64_body_are_written(server, recorder):
    recorder.reply = {
        "statusCode": 201,
        "headers": {"Location": "/x", "Content-Type": "application/octet-stream"},
        "cookies": ["a=1; Path=/", "b=2"],
        "body": base64.b64encode(b"\x00\xffbin").decode(),
        "isBase64Encoded": True,
    }
    status, headers, body = request(server, "GET", "/x")
    assert status == 201
    assert headers["Location"] == "/x"
    assert headers.get_all("Set-Cookie") == ["a=1; Path=/", "b=2"]
    assert body == b"\x00\xffbin"
    assert headers["Content-Length"] == str(len(body))


def test_result_without_status_code_is_a_200_json(server, recorder):
    recorder.reply = {"hello": "world"}
    status, headers, body = request(server, "GET", "/x")
    assert (status, json.loads(body)) == (200, {"hello": "world"})
    assert headers["Content-Type"] == "application/json"


def test_head_answers_without_a_body(server, recorder):
    recorder.reply = {"statusCode": 405, "headers": {"Allow": "GET"}, "body": '{"e": 1}'}
    conn = connect(server)
    conn.request("HEAD", "/events/e1")
    response = conn.getresponse()
    assert (response.status, response.headers["Allow"], response.read()) == (405, "GET", b"")
    # The connection is still in step: a second request on it works.
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
    conn.close()


def test_handler_crash_is_api_gateways_500(server, recorder):
    recorder.reply = RuntimeError("boom")
    status, _, body = request(server, "GET", "/x")
    assert (status, json.loads(body)) == (500, {"message": "Internal Server Error"})


def test_invocations_run_one_at_a_time(recorder):
    # The Powertools resolver keeps the current event on itself, like one Lambda instance.
    active = 0
    most = 0
    guard = threading.Lock()

    def slow_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        nonlocal active, most
        with guard:
            active += 1
            most = max(most, active)
        time.sleep(0.02)
        with guard:
            active -= 1
        return {"statusCode": 200, "body": ""}

    api = ApiServer("127.0.0.1", 0, lambda: {}, slow_handler)
    api.start()
    try:
        threads = [threading.Thread(target=request, args=(api, "GET", "/x")) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        api.stop()
    assert most == 1


def test_instances_serve_requests_side_by_side_each_one_at_a_time():
    # GIVEN a factory of handlers (Lambda instances), each slow, and 6 requests at once
    guard = threading.Lock()
    busy: set[int] = set()
    overlaps: list[int] = []
    most = 0
    started: list[int] = []

    def new_instance() -> Any:
        number = len(started)
        started.append(number)

        def slow(event: dict[str, Any], context: Any) -> dict[str, Any]:
            nonlocal most
            with guard:
                if number in busy:
                    overlaps.append(number)  # this instance already serves a request
                busy.add(number)
                most = max(most, len(busy))
            time.sleep(0.2)
            with guard:
                busy.discard(number)
            return {"statusCode": 200, "body": ""}

        return slow

    api = ApiServer("127.0.0.1", 0, lambda: {}, new_instance=new_instance, max_instances=4)
    api.start()
    try:
        threads = [threading.Thread(target=request, args=(api, "GET", "/x")) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # a later request reuses an idle instance
        assert request(api, "GET", "/x")[0] == 200
    finally:
        api.stop()
    # THEN up to 4 at once, never two on one instance, and no more than 4 instances
    assert most > 1
    assert most <= 4 and len(started) <= 4
    assert overlaps == []


def test_health_and_errors_end_with_a_newline(server, recorder):
    assert request(server, "GET", "/health")[2].endswith(b"}\n")
    assert request(server, "POST", "/events", b"x" * (LIMIT + 1))[2].endswith(b"}\n")


# -- CORS -----------------------------------------------------------------------------

ORIGIN = "http://localhost:3000"


@pytest.fixture
def cors_server(recorder: Recorder) -> Iterator[ApiServer]:
    api = ApiServer("127.0.0.1", 0, lambda: {}, recorder, cors_origins=(ORIGIN,))
    api.start()
    yield api
    api.stop()


def test_no_cors_headers_unless_origins_are_given(server, recorder):
    status, headers, _ = request(server, "GET", "/events", headers={"Origin": ORIGIN})
    assert status == 200
    assert "Access-Control-Allow-Origin" not in headers
    # an OPTIONS request is the handler's (its 405), not a preflight answered here
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    request(server, "OPTIONS", "/events", headers=preflight)
    assert recorder.events[-1]["requestContext"]["http"]["method"] == "OPTIONS"


def test_a_preflight_from_an_allowed_origin_is_answered(cors_server, recorder):
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    status, headers, body = request(cors_server, "OPTIONS", "/events", headers=preflight)
    assert (status, body) == (204, b"")
    assert headers["Access-Control-Allow-Origin"] == ORIGIN
    assert headers["Access-Control-Allow-Methods"] == "GET, PATCH, POST"
    assert "content-type" in headers["Access-Control-Allow-Headers"]
    assert recorder.events == []  # API Gateway answers preflights itself, so does this


def test_replies_to_an_allowed_origin_say_so(cors_server, recorder):
    status, headers, _ = request(cors_server, "GET", "/events", headers={"Origin": ORIGIN})
    assert status == 200
    assert headers["Access-Control-Allow-Origin"] == ORIGIN
    assert headers["Access-Control-Expose-Headers"] == "location, retry-after"
    assert headers["Vary"] == "Origin"


def test_another_origin_gets_no_cors_headers(cors_server, recorder):
    other = {"Origin": "https://evil.example.com"}
    _, headers, _ = request(cors_server, "GET", "/events", headers=other)
    assert "Access-Control-Allow-Origin" not in headers
    preflight = {**other, "Access-Control-Request-Method": "POST"}
    _, headers, _ = request(cors_server, "OPTIONS", "/events", headers=preflight)
    assert "Access-Control-Allow-Origin" not in headers


# -- body limits ----------------------------------------------------------------------


def test_body_over_the_limit_is_413_and_never_reaches_the_handler(server, recorder):
    status, _, body = request(server, "POST", "/events", b"x" * (LIMIT + 1))
    assert status == 413
    assert json.loads(body)["error"] == "payload_too_large"
    assert recorder.events == []
    assert request(server, "POST", "/events", b"x" * LIMIT)[0] == 200


def test_huge_declared_body_is_refused_unread(server, recorder):
    # Content-Length far past the drain limit, and not one byte of body sent: an answer
    # at all proves the server did not wait to read it.
    head = (
        f"POST /events HTTP/1.1\r\nHost: h\r\nContent-Length: {MAX_DRAIN_BYTES * 50}\r\n\r\n"
    ).encode()
    answer = raw_exchange(server, head)
    assert answer.startswith(b"HTTP/1.1 413")
    assert b"Connection: close" in answer
    assert recorder.events == []


def test_expect_100_continue_with_a_big_body_is_refused_before_sending(server, recorder):
    head = (
        "POST /events HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n"
        f"Content-Length: {LIMIT + 1}\r\n\r\n"
    ).encode()
    answer = raw_exchange(server, head)
    assert answer.startswith(b"HTTP/1.1 413")
    assert b"100 Continue" not in answer
    assert recorder.events == []


def test_expect_100_continue_within_the_limit_goes_through(server, recorder):
    conn = connect(server)
    conn.putrequest("POST", "/events")
    conn.putheader("Content-Length", "2")
    conn.putheader("Expect", "100-continue")
    conn.endheaders()
    conn.send(b"{}")
    assert conn.getresponse().status == 200
    conn.close()
    assert recorder.events[0]["body"] == "{}"


def test_chunked_body_is_assembled(server, recorder):
    chunks = iter([b'{"a":', b' "b"}'])
    headers = {"Transfer-Encoding": "chunked", "Content-Type": "application/json"}
    status = request(server, "POST", "/x", chunks, headers, chunked=True)[0]
    assert status == 200
    assert recorder.events[0]["body"] == '{"a": "b"}'


def test_chunked_body_over_the_limit_is_413(server, recorder):
    chunks = iter([b"x" * 600, b"x" * 600])
    status = request(server, "POST", "/x", chunks, {"Transfer-Encoding": "chunked"}, True)[0]
    assert status == 413
    assert recorder.events == []


@pytest.mark.parametrize("length", ["-1", "abc"])
def test_bad_content_length_is_400(server, recorder, length: str):
    answer = raw_exchange(
        server, f"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: {length}\r\n\r\n".encode()
    )
    assert answer.startswith(b"HTTP/1.1 400")
    assert recorder.events == []


@pytest.mark.parametrize(
    ("target", "path", "query"),
    [
        ("http://h/events/e1?x=1", "/events/e1", "x=1"),
        # http.server folds leading slashes (an open-redirect guard); inner ones stay.
        ("//events//e1", "/events//e1", ""),
        ("/events/a%40b?q=%20", "/events/a%40b", "q=%20"),
    ],
)
def test_request_target_becomes_raw_path_and_query(server, recorder, target, path, query):
    raw_exchange(server, f"GET {target} HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n".encode())
    (event,) = recorder.events
    assert (event["rawPath"], event["rawQueryString"]) == (path, query)

"""The local HTTP API on the API port: ``GET /health`` and, given a handler, the full API.

``ApiServer`` plays API Gateway's part for the local stack: every request other than
``GET /health`` becomes an API Gateway HTTP API (payload format 2.0) event, the same
Lambda handler that runs on AWS answers it, and its v2 response becomes the HTTP reply.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from turnstile.api import MAX_BODY_BYTES
from turnstile.local.server import BackgroundServer

__all__ = ["MAX_DRAIN_BYTES", "ApiServer", "LocalLambdaContext"]

log = logging.getLogger(__name__)

#: An oversized body up to this size is read and dropped so the 413 reaches the client
#: on a healthy connection; anything larger is refused unread and the connection closed.
MAX_DRAIN_BYTES = 1024 * 1024

#: Content types API Gateway passes as text; any other body arrives base64-encoded.
_TEXT_TYPES = (
    "text/",
    "application/json",
    "application/xml",
    "application/javascript",
    "application/x-www-form-urlencoded",
)
#: Hop-by-hop or framing headers the server sets itself, never copied from the handler.
_OWN_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})

AppHandler = Callable[[dict[str, Any], Any], Any]


@dataclass
class LocalLambdaContext:
    """The parts of Lambda's context object that Powertools and handlers read."""

    function_name: str = "turnstile-api-local"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 128
    timeout_s: float = 30.0
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/turnstile-api-local"
    log_stream_name: str = "local"
    _started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_s - (time.monotonic() - self._started)) * 1000))


def _target(request_target: str) -> tuple[str, str]:
    """Path and query string of a request target, as sent (still percent-encoded)."""
    if not request_target.startswith("/"):  # absolute form: http://host/path?query
        split = urlsplit(request_target)
        request_target = split.path + ("?" + split.query if split.query else "")
    path, _, query = request_target.partition("?")
    return path or "/", query.partition("#")[0]


class _BodyError(Exception):
    """The request body cannot be taken; the reply has been decided already."""

    def __init__(self, status: int, code: str, message: str, close: bool) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.close = status, code, message, close


class ApiServer(BackgroundServer):
    """Serves the API on ``host:port`` in a background thread.

    ``health`` returns a dict of checks; ``GET /health`` answers 200 when every value is
    true, else 503. With ``app_handler`` (a Lambda handler for API Gateway HTTP API v2
    events) every other request is served by it; without, they answer 404.
    Invocations run one at a time, as on one Lambda instance: Powertools' resolver keeps
    the current request on itself, so two at once would mix them up.
    """

    def __init__(
        self,
        host: str,
        port: int,
        health: Callable[[], dict[str, bool]],
        app_handler: AppHandler | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self._health = health
        self._app_handler = app_handler
        self._max_body_bytes = max_body_bytes
        self._invoke_lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.1 for keep-alive and "Expect: 100-continue"; every reply sets
            # Content-Length, which keep-alive requires.
            protocol_version = "HTTP/1.1"
            server_version = "turnstile-local"
            timeout = 60  # idle keep-alive connections do not pin a thread forever

            def do_GET(self) -> None:
                if _target(self.path)[0] == "/health":
                    checks = outer._health()
                    outer._send(self, 200 if all(checks.values()) else 503, checks)
                else:
                    outer._dispatch(self)

            def __getattr__(self, name: str) -> Any:
                # Any other method (POST, DELETE, HEAD, even made-up ones) goes to the
                # handler, which answers 405/404, instead of http.server's 501.
                if name.startswith("do_"):
                    return lambda: outer._dispatch(self)
                raise AttributeError(name)

            def handle_expect_100(self) -> bool:
                length = self.headers.get("Content-Length", "")
                if length.strip().isdigit() and int(length) > outer._max_body_bytes:
                    # Refused before the client sends the body at all.
                    self.close_connection = True
                    outer._send_error(
                        self, 413, "payload_too_large", outer._too_large(), close=True
                    )
                    return False
                return super().handle_expect_100()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        # A short poll interval so stop() returns promptly (shutdown waits for one poll).
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- replies ----------------------------------------------------------------------

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    @staticmethod
    def _send_error(
        handler: BaseHTTPRequestHandler, status: int, code: str, message: str, close: bool
    ) -> None:
        data = json.dumps({"error": code, "message": message}).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        if close:
            handler.send_header("Connection", "close")
            handler.close_connection = True
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    def _too_large(self) -> str:
        return f"request body is over {self._max_body_bytes} bytes"

    # -- requests ---------------------------------------------------------------------

    def _dispatch(self, handler: BaseHTTPRequestHandler) -> None:
        if self._app_handler is None:
            self._send(handler, 404, {"error": "not_found", "message": handler.path})
            return
        try:
            body = self._read_body(handler)
        except _BodyError as exc:
            self._send_error(handler, exc.status, exc.code, exc.message, exc.close)
            return
        event = self.to_event(handler, body)
        try:
            with self._invoke_lock:
                result = self._app_handler(event, LocalLambdaContext())
        except Exception:
            # What API Gateway answers when the function itself fails.
            log.exception("API handler failed")
            self._send(handler, 500, {"message": "Internal Server Error"})
            return
        self._write_result(handler, result)

    def _read_body(self, handler: BaseHTTPRequestHandler) -> bytes:
        """The body, never more than the limit read into memory."""
        limit = self._max_body_bytes
        encoding = handler.headers.get("Transfer-Encoding", "").strip().lower()
        if encoding and encoding != "identity":
            if encoding != "chunked":
                raise _BodyError(400, "invalid_request", "unsupported Transfer-Encoding", True)
            return self._read_chunked(handler, limit)
        raw_length = handler.headers.get("Content-Length")
        if raw_length is None:
            return b""
        try:
            length = int(raw_length)
        except ValueError:
            length = -1
        if length < 0:
            raise _BodyError(400, "invalid_request", "bad Content-Length", True)
        if length > limit:
            drain = length <= MAX_DRAIN_BYTES
            if drain:
                remaining = length
                while remaining > 0:
                    chunk = handler.rfile.read(min(remaining, 65536))
                    if not chunk:
                        break
                    remaining -= len(chunk)
            raise _BodyError(413, "payload_too_large", self._too_large(), close=not drain)
        return handler.rfile.read(length)

    def _read_chunked(self, handler: BaseHTTPRequestHandler, limit: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = handler.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError as exc:
                raise _BodyError(400, "invalid_request", "bad chunk size", True) from exc
            if size == 0:
                # Trailers, up to the blank line that ends the body.
                while handler.rfile.readline(8192).strip():
                    pass
                return b"".join(parts)
            total += size
            if total > limit:
                raise _BodyError(413, "payload_too_large", self._too_large(), close=True)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline(8)  # the CRLF after the chunk

    def to_event(self, handler: BaseHTTPRequestHandler, body: bytes) -> dict[str, Any]:
        """The API Gateway HTTP API (payload format 2.0) event for this request."""
        raw_path, raw_query = _target(handler.path)
        headers: dict[str, str] = {}
        cookies: list[str] = []
        for name, value in handler.headers.items():
            key = name.lower()
            if key == "cookie":
                cookies += [c.strip() for c in value.split(";") if c.strip()]
                continue
            # API Gateway joins repeated headers with commas.
            headers[key] = f"{headers[key]},{value}" if key in headers else value
        query: dict[str, str] = {}
        for key, value in parse_qsl(raw_query, keep_blank_values=True):
            query[key] = f"{query[key]},{value}" if key in query else value
        now = time.time()
        host = headers.get("host", "")
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": raw_path,
            "rawQueryString": raw_query,
            "headers": headers,
            "requestContext": {
                "accountId": "000000000000",
                "apiId": "local",
                "domainName": host,
                "domainPrefix": host.split(".", 1)[0],
                "http": {
                    "method": handler.command,
                    "path": raw_path,
                    "protocol": handler.request_version,
                    "sourceIp": handler.client_address[0],
                    "userAgent": headers.get("user-agent", ""),
                },
                "requestId": str(uuid.uuid4()),
                "routeKey": "$default",
                "stage": "$default",
                "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
                "timeEpoch": int(now * 1000),
            },
            "isBase64Encoded": False,
        }
        if cookies:
            event["cookies"] = cookies
        if query:
            event["queryStringParameters"] = query
        if body:
            content_type = headers.get("content-type", "").lower()
            text = None
            if not content_type or content_type.startswith(_TEXT_TYPES):
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
            if text is None:
                event["body"] = base64.b64encode(body).decode()
                event["isBase64Encoded"] = True
            else:
                event["body"] = text
        return event

    def _write_result(self, handler: BaseHTTPRequestHandler, result: Any) -> None:
        """Write a v2 response; like API Gateway, a result without statusCode is a 200 JSON."""
        if not isinstance(result, dict) or "statusCode" not in result:
            body = result if isinstance(result, str) else json.dumps(result)
            result = {
                "statusCode": 200,
                "headers": {"content-type": "application/json"},
                "body": body,
            }
        raw = result.get("body") or ""
        if result.get("isBase64Encoded"):
            data = base64.b64decode(raw)
        else:
            data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
        handler.send_response(int(result["statusCode"]))
        for name, value in (result.get("headers") or {}).items():
            if name.lower() not in _OWN_HEADERS:
                handler.send_header(name, str(value))
        for name, values in (result.get("multiValueHeaders") or {}).items():
            if name.lower() not in _OWN_HEADERS:
                for value in values:
                    handler.send_header(name, str(value))
        for cookie in result.get("cookies") or []:
            handler.send_header("Set-Cookie", cookie)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

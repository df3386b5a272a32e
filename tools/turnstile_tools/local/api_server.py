"""The local HTTP API on the API port: ``GET /health`` and, given a handler, the full API.

``ApiServer`` plays API Gateway's part for the local stack: every request other than
``GET /health`` becomes an API Gateway HTTP API (payload format 2.0) event, the same
Lambda handler that runs on AWS answers it, and its v2 response becomes the HTTP reply.
Given origins, it also answers CORS preflights and marks replies to those origins, as
API Gateway does for a stack with ``turnstile:apiCorsOrigins``.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from turnstile.web.api import (
    CORS_ALLOW_HEADERS,
    CORS_EXPOSE_HEADERS,
    CORS_MAX_AGE_S,
    LOCAL_OPERATOR,
    MAX_BODY_BYTES,
    ROUTES,
    waits,
)
from turnstile_tools.local.context import API_ACCOUNT_ID, LocalLambdaContext
from turnstile_tools.local.server import BackgroundServer, ListenError

__all__ = ["DEFAULT_MAX_WAITERS", "MAX_DRAIN_BYTES", "ApiServer"]

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

#: At most this many invocations at once, when the server may start instances.
DEFAULT_MAX_INSTANCES = 8
#: At most this many waiting reads held at once (the waiter function's reserved
#: concurrency; deployed, ``turnstile:waiterReservedConcurrency``): one more is throttled.
DEFAULT_MAX_WAITERS = 16
#: What API Gateway answers when Lambda throttles the function behind a route.
_THROTTLED = {"message": "Internal Server Error"}
#: What a preflight may ask for: the API's methods.
_CORS_METHODS = ", ".join(sorted({route.method for route in ROUTES}))


#: The ARN a SigV4-signed request to the local API is taken to come from: the access key
#: id names the caller (the signature is not checked: the local stack trusts its callers).
LOCAL_CALLER_ARN = "arn:aws:iam::" + API_ACCOUNT_ID + ":user/{}"


def local_authorizer(authorization: str) -> dict[str, Any] | None:
    """What API Gateway's authorizer would pass for ``authorization``, unverified: a SigV4
    header (``AWS4-HMAC-SHA256 Credential=KEY/...``) as an IAM caller named by its access
    key id (``LOCAL_CALLER_ARN``), a bearer token's claims (its middle part, base64url
    JSON) as a JWT caller; None for anything else (an anonymous caller). So the local API
    can be driven by different callers as the deployed one is; docs/operations.md."""
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme == "AWS4-HMAC-SHA256":
        for part in rest.split(","):
            name, _, value = part.strip().partition("=")
            key = value.split("/", 1)[0]
            if name == "Credential" and key:
                return {"iam": {"userArn": LOCAL_CALLER_ARN.format(key), "accessKey": key}}
        return None
    if scheme.lower() == "bearer":
        parts = rest.strip().split(".")
        if len(parts) != 3:
            return None
        try:
            padded = parts[1] + "=" * (-len(parts[1]) % 4)
            claims = json.loads(base64.urlsafe_b64decode(padded))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(claims, dict):
            return None
        scope = claims.get("scope")
        scopes = scope.split() if isinstance(scope, str) else []
        return {"jwt": {"claims": claims, "scopes": scopes}}
    return None


class _Instances:
    """Handlers, each serving one request at a time, as Lambda instances do: an idle one
    is reused, a new one started (``new``) while fewer than ``most`` exist, else the
    request waits for one to be free. Without ``new``, the one handler there is."""

    def __init__(self, first: AppHandler | None, new: Callable[[], AppHandler] | None, most: int):
        self._new = new
        self._most = most if new is not None else 1
        self._idle: list[AppHandler] = [first] if first is not None else []
        self._count = len(self._idle)
        self._free = threading.Condition()

    def acquire(self, block: bool = True) -> AppHandler | None:
        """An instance; when all are busy, the first to be free (``block``), else None: a
        throttled invocation."""
        with self._free:
            while True:
                if self._idle:
                    return self._idle.pop()
                if self._new is not None and self._count < self._most:
                    self._count += 1
                    break
                if not block:
                    return None
                self._free.wait()
        try:
            return self._new()  # type: ignore[misc]
        except BaseException:
            with self._free:
                self._count -= 1
                self._free.notify()
            raise

    def release(self, handler: AppHandler) -> None:
        with self._free:
            self._idle.append(handler)
            self._free.notify()


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
    A handler serves one request at a time, as a Lambda instance does: Powertools'
    resolver keeps the current request on itself, so two at once would mix them up. With
    ``new_instance`` (a factory of such handlers) requests run side by side, each on an
    instance of its own, up to ``max_instances`` (a request finding them all busy waits for
    one). With ``new_waiter`` the waiting reads (``turnstile.web.api.waits``) have instances of
    their own, as the stack's waiter function has: up to ``max_waiters``, and a wait finding
    them all busy is throttled at once (500, as API Gateway answers when Lambda throttles),
    never queued behind the others nor given an API instance. ``cors_origins``: origins
    whose browsers may call the API (``*`` any), as the stack's ``turnstile:apiCorsOrigins``;
    none by default.
    """

    def __init__(
        self,
        host: str,
        port: int,
        health: Callable[[], dict[str, bool]],
        app_handler: AppHandler | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        new_instance: Callable[[], AppHandler] | None = None,
        max_instances: int = DEFAULT_MAX_INSTANCES,
        cors_origins: Sequence[str] = (),
        new_waiter: Callable[[], AppHandler] | None = None,
        max_waiters: int = DEFAULT_MAX_WAITERS,
    ) -> None:
        self._health = health
        self._serves = app_handler is not None or new_instance is not None
        self._instances = _Instances(app_handler, new_instance, max_instances)
        self._waiters = _Instances(None, new_waiter, max_waiters) if new_waiter else None
        self._max_body_bytes = max_body_bytes
        self._cors_origins = tuple(cors_origins)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.1 for keep-alive and "Expect: 100-continue"; every reply sets
            # Content-Length, which keep-alive requires.
            protocol_version = "HTTP/1.1"
            server_version = "turnstile-local"
            timeout = 60  # idle keep-alive connections do not pin a thread forever

            def do_GET(self) -> None:
                if _target(self.path)[0] == "/health":
                    started = time.monotonic()
                    checks = outer._health()
                    status = 200 if all(checks.values()) else 503
                    # Health checks poll: only with --log-level DEBUG.
                    _log_request(self, status, started, level=logging.DEBUG)
                    outer._send(self, status, checks)
                else:
                    outer._dispatch(self)

            def do_OPTIONS(self) -> None:
                if not outer._preflight(self):
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
                    _log_request(self, 413, time.monotonic(), "payload_too_large")
                    outer._send_error(
                        self, 413, "payload_too_large", outer._too_large(), close=True
                    )
                    return False
                return super().handle_expect_100()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:  # the port taken, an address not of this machine, ...
            raise ListenError("api", host, port, exc) from exc
        self._server.daemon_threads = True
        # A short poll interval so stop() returns promptly (shutdown waits for one poll).
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- replies ----------------------------------------------------------------------

    def _send(self, handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode() + b"\n"
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        self._cors_headers(handler)
        handler.end_headers()
        handler.wfile.write(data)

    def _send_error(
        self, handler: BaseHTTPRequestHandler, status: int, code: str, message: str, close: bool
    ) -> None:
        data = json.dumps({"error": code, "message": message}).encode() + b"\n"
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        self._cors_headers(handler)
        if close:
            handler.send_header("Connection", "close")
            handler.close_connection = True
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    def _too_large(self) -> str:
        return f"request body is over {self._max_body_bytes} bytes"

    # -- CORS -------------------------------------------------------------------------

    def _allowed_origin(self, handler: BaseHTTPRequestHandler) -> str | None:
        """What Access-Control-Allow-Origin says to this request; None: no CORS headers."""
        origin = handler.headers.get("Origin")
        if not origin or not self._cors_origins:
            return None
        if "*" in self._cors_origins:
            return "*"
        return origin if origin in self._cors_origins else None

    def _cors_headers(self, handler: BaseHTTPRequestHandler) -> None:
        origin = self._allowed_origin(handler)
        if origin is None:
            return
        handler.send_header("Access-Control-Allow-Origin", origin)
        handler.send_header("Access-Control-Expose-Headers", ", ".join(CORS_EXPOSE_HEADERS))
        if origin != "*":
            handler.send_header("Vary", "Origin")

    def _preflight(self, handler: BaseHTTPRequestHandler) -> bool:
        """Answer a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method)
        itself, as API Gateway does when CORS is configured; False when it is not one."""
        if not self._cors_origins or not handler.headers.get("Access-Control-Request-Method"):
            return False
        started = time.monotonic()
        try:
            self._read_body(handler)
        except _BodyError:
            handler.close_connection = True
        _log_request(handler, 204, started, level=logging.DEBUG)
        handler.send_response(204)
        origin = self._allowed_origin(handler)
        if origin is not None:
            handler.send_header("Access-Control-Allow-Origin", origin)
            handler.send_header("Access-Control-Allow-Methods", _CORS_METHODS)
            handler.send_header("Access-Control-Allow-Headers", ", ".join(CORS_ALLOW_HEADERS))
            handler.send_header("Access-Control-Max-Age", str(CORS_MAX_AGE_S))
            if origin != "*":
                handler.send_header("Vary", "Origin")
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True

    # -- requests ---------------------------------------------------------------------

    def _dispatch(self, handler: BaseHTTPRequestHandler) -> None:
        started = time.monotonic()
        if not self._serves:
            _log_request(handler, 404, started, "not_found")
            self._send(handler, 404, {"error": "not_found", "message": handler.path})
            return
        try:
            body = self._read_body(handler)
        except _BodyError as exc:
            _log_request(handler, exc.status, started, exc.code)
            self._send_error(handler, exc.status, exc.code, exc.message, exc.close)
            return
        event = self.to_event(handler, body)
        pool = self._instances
        if self._waiters is not None and waits(handler.command, event["rawPath"]):
            pool = self._waiters
        try:
            instance = pool.acquire(block=pool is self._instances)
            if instance is None:
                _log_request(handler, 500, started, "throttled")
                self._send(handler, 500, _THROTTLED)
                return
            try:
                result = instance(event, LocalLambdaContext.api())
            finally:
                pool.release(instance)
        except Exception:
            # What API Gateway answers when the function itself fails.
            log.exception("API handler failed")
            _log_request(handler, 500, started)
            self._send(handler, 500, {"message": "Internal Server Error"})
            return
        self._write_result(handler, result, started)

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
                "accountId": API_ACCOUNT_ID,
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
        authorizer = local_authorizer(headers.get("authorization", ""))
        # An unsigned request is the machine's own user, the local operator: an admin, as
        # the CLI on the tables is (a Lambda authorizer's context: none a client can forge).
        event["requestContext"]["authorizer"] = authorizer or {"lambda": {LOCAL_OPERATOR: True}}
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

    def _write_result(
        self, handler: BaseHTTPRequestHandler, result: Any, started: float | None = None
    ) -> None:
        """Write a v2 response; like API Gateway, a result without statusCode is a 200 JSON.
        With ``started``, the request's line is logged first: before the client has its
        answer, so nothing it does next is printed before it."""
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
        status = int(result["statusCode"])
        if started is not None:
            _log_request(handler, status, started, _error_code(result) if status >= 400 else None)
        handler.send_response(status)
        for name, value in (result.get("headers") or {}).items():
            if name.lower() not in _OWN_HEADERS:
                handler.send_header(name, str(value))
        for name, values in (result.get("multiValueHeaders") or {}).items():
            if name.lower() not in _OWN_HEADERS:
                for value in values:
                    handler.send_header(name, str(value))
        for cookie in result.get("cookies") or []:
            handler.send_header("Set-Cookie", cookie)
        self._cors_headers(handler)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)


def _error_code(result: Any) -> str | None:
    """The ``error`` of an API error body ({"error": code, "message": ...}), if it is one."""
    try:
        body = json.loads(result.get("body") or "")
    except (AttributeError, TypeError, ValueError):
        return None
    code = body.get("error") if isinstance(body, dict) else None
    return code if isinstance(code, str) and code.isidentifier() else None


def _log_request(
    handler: BaseHTTPRequestHandler,
    status: int,
    started: float,
    error: str | None = None,
    level: int | None = None,
) -> None:
    """One line per request, logged just before its answer is sent (the time is the
    handler's): ``POST /events/gala/signups 202 4 ms``; at INFO when
    it succeeded, WARNING for a 4xx, ERROR for a 5xx (``turnstile local`` shows warnings
    and errors by default)."""
    if level is None:
        level = logging.INFO if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    if not log.isEnabledFor(level):
        return
    path = _target(handler.path)[0]
    if not path.isprintable():  # a request line may carry terminal escapes
        path = json.dumps(path)
    if len(path) > 120:
        path = path[:119] + "…"
    method = handler.command if (handler.command or "").isalpha() else json.dumps(handler.command)
    ms = (time.monotonic() - started) * 1000
    log.log(level, "%s %s %d%s %.0f ms", method, path, status, f" {error}" if error else "", ms)

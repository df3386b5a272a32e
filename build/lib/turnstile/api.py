"""The HTTP API: routes, request validation and the OpenAPI document.

One Powertools ``APIGatewayHttpResolver`` (API Gateway HTTP API, payload format 2.0)
serves every route. It runs unchanged behind API Gateway on AWS and behind the local
``ApiServer``. The routes are thin: parse the body, one call into ``usecases`` (which
validates, calls ``SignupStore`` and shapes the answer, for the CLI too), send it.
``ROUTES`` is the single list the resolver, the 405 answers and the OpenAPI
document are all built from, so the document cannot drift from what is served.

Errors are always JSON ``{"error": CODE, "message": TEXT}``; nothing a client sends
yields a 5xx (a 503 means DynamoDB is throttling or down: retry after ``Retry-After``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any
from urllib.parse import quote, unquote

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.metrics import Metrics, MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from turnstile import usecases
from turnstile.contract import ID_PATTERN, MAX_ATTRIBUTES_BYTES
from turnstile.domain import (
    MAX_ATTRIBUTES_DEPTH,
    MAX_CAPACITY,
    MAX_SEATS,
)
from turnstile.errors import (
    CapacityBelowTakenError,
    EventExistsError,
    EventNotFoundError,
    InvalidRequestError,
    SignupConflictError,
    SignupNotFoundError,
    StoreUnavailableError,
)
from turnstile.personal_data import intake_retention_days, signup_ref
from turnstile.store import SignupStore

__all__ = [
    "MAX_ATTRIBUTES_BYTES",
    "MAX_ATTRIBUTES_DEPTH",
    "MAX_BODY_BYTES",
    "MAX_CAPACITY",
    "OPENAPI",
    "ROUTES",
    "SERVICE",
    "RequestError",
    "Route",
    "caller_identity",
    "create_app",
]

SERVICE = "turnstile-api"

#: Largest request body (decoded bytes); larger ones get 413 before any parsing.
MAX_BODY_BYTES = 16 * 1024
#: Seconds a client should wait after a 503 before trying again.
RETRY_AFTER_S = 1

JSON = "application/json"

logger = Logger(service=SERVICE, child=True)


@dataclass(frozen=True)
class Route:
    """One operation, defined once: the method, its OpenAPI path template and operation
    id, its OpenAPI operation object (``spec``, without the id) and the function that
    serves it (``handler(call, **path_parameters)``). The resolver, the 405 answers and
    the OpenAPI document are all built from ``ROUTES``: adding a route touches one place."""

    method: str
    path: str
    operation_id: str
    spec: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    handler: Callable[..., Response[str]] | None = field(
        default=None, compare=False, hash=False, repr=False
    )

    @property
    def powertools_rule(self) -> str:
        """The path in Powertools' syntax: ``{event_id}`` becomes ``<event_id>``."""
        return re.sub(r"\{(\w+)\}", r"<\1>", self.path)

    @cached_property
    def matcher(self) -> re.Pattern[str]:
        """Matches any request path of this shape, whatever the segment holds."""
        return re.compile("^" + re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(self.path)) + "$")


class RequestError(Exception):
    """A request the API refuses; becomes ``{"error": code, "message": message}``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def _invalid(message: str) -> RequestError:
    return RequestError(400, "invalid_request", message)


# -- responses ------------------------------------------------------------------------


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response[str]:
    return Response(status_code=status, content_type=JSON, body=_dumps(body), headers=headers)


def _error(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> Response[str]:
    return _json(status, {"error": code, "message": message}, headers)


def _signup_location(event_id: str, signup_id: str) -> str:
    return f"/events/{quote(event_id, safe=':@')}/signups/{quote(signup_id, safe=':@')}"


def caller_identity(event: Mapping[str, Any]) -> str | None:
    """Who made the request, as API Gateway authenticated it: the IAM caller's ARN
    (``requestContext.authorizer.iam.userArn``) or the token's subject
    (``requestContext.authorizer.jwt.claims.sub``); None without an authorizer (the local
    stack's API). The access log records the same value as ``caller``."""
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    if not isinstance(authorizer, Mapping):
        return None
    iam = authorizer.get("iam")
    if isinstance(iam, Mapping) and isinstance(iam.get("userArn"), str) and iam["userArn"]:
        return str(iam["userArn"])
    jwt = authorizer.get("jwt")
    claims = jwt.get("claims") if isinstance(jwt, Mapping) else None
    if isinstance(claims, Mapping) and isinstance(claims.get("sub"), str) and claims["sub"]:
        return str(claims["sub"])
    return None


# -- request parsing ------------------------------------------------------------------


def _raw_body(event: Mapping[str, Any]) -> bytes:
    """The request body as bytes; 400 if it is not valid base64 where it says it is."""
    body = event.get("body")
    if not body:
        return b""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _invalid("body is not valid base64") from exc
    try:
        return str(body).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _invalid("body is not valid UTF-8") from exc


def _check_body_size(event: Mapping[str, Any]) -> None:
    body = event.get("body") or ""
    # base64 inflates by 4/3; a cheap upper bound before decoding anything big.
    if len(body) > MAX_BODY_BYTES * 4 // 3 + 4 or len(_raw_body(event)) > MAX_BODY_BYTES:
        raise RequestError(413, "payload_too_large", f"request body is over {MAX_BODY_BYTES} bytes")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_object(event: Mapping[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    """The body as a JSON object with only ``allowed`` keys; fractions parse as Decimal."""
    raw = _raw_body(event)
    if not raw.strip():
        raise _invalid("body must be a JSON object")
    try:
        # Decimal, not float: DynamoDB takes no floats, and 2.0 must stay distinguishable
        # from 2 so that seats and capacity can insist on integers.
        value = json.loads(raw, parse_float=Decimal, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise _invalid("body is nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, NaN, ints over 4300 digits
        raise _invalid(f"body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise _invalid("body must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        # Refused, not ignored: a misspelt "seats" would otherwise silently mean 1 seat.
        raise _invalid(f"unknown field(s): {', '.join(unknown)}")
    return value


# -- OpenAPI building blocks (each route carries its own operation object) ---------

_ID_SCHEMA = {"type": "string", "pattern": ID_PATTERN.pattern, "minLength": 1, "maxLength": 128}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _error_response(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {JSON: {"schema": _ref("Error")}},
    }
    if headers:
        response["headers"] = headers
    return response


def _ok(description: str, schema: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {JSON: {"schema": _ref(schema)}},
    }
    if headers:
        response["headers"] = headers
    return response


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {JSON: {"schema": _ref(schema)}}}


_LOCATION = {"Location": {"required": True, "schema": {"type": "string"}}}
_COMMON = {
    "400": _error_response("Bad input: the message says which."),
    "413": _error_response(f"The body is over {MAX_BODY_BYTES} bytes."),
    "503": _error_response(
        "DynamoDB is throttling or unreachable; retry after Retry-After seconds.",
        {"Retry-After": {"required": True, "schema": {"type": "integer"}}},
    ),
}
_EVENT_PARAM = {"$ref": "#/components/parameters/EventId"}
_SIGNUP_PARAM = {"$ref": "#/components/parameters/SignupId"}

# -- the operations -------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """What a route's handler works with: the resolver (for the request), the store and
    the metrics counter."""

    app: APIGatewayHttpResolver
    store: Callable[[], SignupStore]
    count: Callable[[str], None]

    @property
    def raw_event(self) -> Mapping[str, Any]:
        return self.app.current_event.raw_event


def _served(route: Route, call: _Call) -> Callable[..., Response[str]]:
    handler = route.handler
    if handler is None:
        raise RuntimeError(f"route {route.operation_id} has no handler")
    return lambda **params: handler(call, **params)


def _create_event(call: _Call) -> Response[str]:
    body = _json_object(call.raw_event, frozenset({"event_id", "capacity"}))
    creator = caller_identity(call.raw_event)
    event = usecases.create_event(
        call.store(), body.get("event_id"), body.get("capacity"), created_by=creator
    )
    call.count("EventCreated")
    logger.info("event created", event_id=event["event_id"], capacity=event["capacity"])
    location = f"/events/{quote(event['event_id'], safe=':@')}"
    return _json(201, event, {"Location": location})


def _get_event(call: _Call, event_id: str) -> Response[str]:
    return _json(200, usecases.show_event(call.store(), unquote(event_id)))


def _update_event(call: _Call, event_id: str) -> Response[str]:
    event_id = unquote(event_id)
    body = _json_object(call.raw_event, frozenset({"capacity"}))
    if "capacity" not in body:
        raise _invalid("capacity is required")
    event = usecases.update_capacity(call.store(), event_id, body["capacity"])
    call.count("EventUpdated")
    logger.info("event capacity changed", event_id=event_id, capacity=event["capacity"])
    return _json(200, event)


def _close_event(call: _Call, event_id: str) -> Response[str]:
    event = usecases.close_event(call.store(), unquote(event_id))
    if event["closed_now"]:
        call.count("EventClosed")
        logger.info("event closed", event_id=event["event_id"])
    return _json(200, event)


def _submit_signup(call: _Call, event_id: str) -> Response[str]:
    event_id = unquote(event_id)
    body = _json_object(call.raw_event, frozenset({"signup_id", "seats", "attributes"}))
    submitted = usecases.submit_signup(
        call.store(),
        event_id,
        body.get("signup_id"),
        body.get("seats", usecases.ABSENT),
        body.get("attributes", usecases.ABSENT),
        retention_days=intake_retention_days(),
    )
    call.count("SignupSubmitted" if submitted.created else "SignupResubmitted")
    # Never the signup id itself, nor its attributes: both may be personal data.
    signup_id = submitted.body["signup_id"]
    logger.info(
        "signup submitted",
        event_id=event_id,
        signup_ref=signup_ref(event_id, signup_id),
        new=submitted.created,
    )
    location = _signup_location(event_id, signup_id)
    return _json(202, submitted.body, {"Location": location})


def _get_signup(call: _Call, event_id: str, signup_id: str) -> Response[str]:
    return _json(200, usecases.signup_status(call.store(), unquote(event_id), unquote(signup_id)))


def _openapi_document(call: _Call) -> Response[str]:
    return _json(200, OPENAPI)


ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        "/events",
        "createEvent",
        handler=_create_event,
        spec={
            "summary": "Create an OPEN event with a capacity in seats.",
            "requestBody": _body("EventCreate"),
            "responses": {
                "201": _ok("Created.", "Event", _LOCATION),
                "409": _error_response("An event with this id exists (error: event_exists)."),
                **_COMMON,
            },
        },
    ),
    Route(
        "GET",
        "/events/{event_id}",
        "getEvent",
        handler=_get_event,
        spec={
            "summary": "The event's capacity, seats taken and state (read consistently).",
            "parameters": [_EVENT_PARAM],
            "responses": {
                "200": _ok("The event.", "Event"),
                "404": _error_response("No such event (error: event_not_found)."),
                **_COMMON,
            },
        },
    ),
    Route(
        "PATCH",
        "/events/{event_id}",
        "updateEvent",
        handler=_update_event,
        spec={
            "summary": "Change an event's capacity: up at any time, down to the seats taken.",
            "description": (
                "Decisions already made stand; signups decided after the change are decided "
                "against the new capacity (a decision in flight is decided again). Lowering "
                "below the seats already taken answers 400 capacity_below_taken, and the "
                "message says how many are taken."
            ),
            "parameters": [_EVENT_PARAM],
            "requestBody": _body("EventUpdate"),
            "responses": {
                "200": _ok("The event after the change.", "Event"),
                "404": _error_response("No such event (error: event_not_found)."),
                **_COMMON,
                "400": _error_response(
                    "Bad input (error: invalid_request), or a capacity below the seats already "
                    "taken (error: capacity_below_taken; the message names how many)."
                ),
            },
        },
    ),
    Route(
        "POST",
        "/events/{event_id}/close",
        "closeEvent",
        handler=_close_event,
        spec={
            "summary": "OPEN -> CLOSED. Later signups are rejected with event_closed.",
            "description": (
                "Idempotent: closing a CLOSED event answers 200 with closed_now false. "
                "No body is read."
            ),
            "parameters": [_EVENT_PARAM],
            "responses": {
                "200": _ok("The event after the call.", "EventClosed"),
                "404": _error_response("No such event (error: event_not_found)."),
                **_COMMON,
            },
        },
    ),
    Route(
        "POST",
        "/events/{event_id}/signups",
        "submitSignup",
        handler=_submit_signup,
        spec={
            "summary": "Submit a signup: recorded as PENDING, decided later in arrival order.",
            "description": (
                "signup_id is the idempotency key: the same body again answers 202 again, even "
                "once decided; another body for the same signup_id answers 409. A CLOSED "
                "event still takes submissions; they are rejected with event_closed."
            ),
            "parameters": [_EVENT_PARAM],
            "requestBody": _body("SignupCreate"),
            "responses": {
                "202": _ok(
                    "Recorded; poll the Location for the decision.", "SignupAccepted", _LOCATION
                ),
                "404": _error_response("No such event (error: event_not_found)."),
                "409": _error_response(
                    "This signup_id was submitted with another body (error: signup_conflict)."
                ),
                **_COMMON,
            },
        },
    ),
    Route(
        "GET",
        "/events/{event_id}/signups/{signup_id}",
        "getSignup",
        handler=_get_signup,
        spec={
            "summary": "A signup's status: PENDING, ACCEPTED or REJECTED (read consistently).",
            "parameters": [_EVENT_PARAM, _SIGNUP_PARAM],
            "responses": {
                "200": _ok("The signup.", "Signup"),
                "404": _error_response("No such signup (error: signup_not_found)."),
                **_COMMON,
            },
        },
    ),
    Route(
        "GET",
        "/openapi.json",
        "getOpenApiDocument",
        handler=_openapi_document,
        spec={
            "summary": "This document.",
            "responses": {
                "200": {
                    "description": "The OpenAPI document.",
                    "content": {JSON: {"schema": {"type": "object"}}},
                },
                "413": _COMMON["413"],
            },
        },
    ),
)


# -- the application ------------------------------------------------------------------


def create_app(
    store: Callable[[], SignupStore],
    metrics: Metrics | None = None,
) -> APIGatewayHttpResolver:
    """Build the resolver with every route of ``ROUTES``.

    ``store`` is called on each request that needs DynamoDB (so the Lambda entry can
    build its ``SignupStore`` lazily); ``metrics``, when given, receives PascalCase
    past-tense counts such as ``SignupSubmitted``.
    """
    app = APIGatewayHttpResolver(serializer=_dumps)

    def count(name: str) -> None:
        if metrics is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)

    def limit_body(app: APIGatewayHttpResolver, next_middleware: Any) -> Any:
        # Every route, and unknown ones too: the limit is the API's, not a route's.
        _check_body_size(app.current_event.raw_event)
        return next_middleware(app)

    app.use(middlewares=[limit_body])
    call = _Call(app, store, count)

    for route in ROUTES:
        app.route(route.powertools_rule, method=route.method)(_served(route, call))

    @app.not_found
    def no_route(_: Exception) -> Response[str]:
        method = app.current_event.http_method.upper()
        path = app.current_event.path
        allowed = sorted({r.method for r in ROUTES if r.matcher.match(path)})
        if method in allowed:
            # The shape fits but a segment holds characters no id may contain.
            return _error(400, "invalid_request", "a path segment is not a valid id")
        if allowed:
            return _error(
                405,
                "method_not_allowed",
                f"{method} is not allowed here; use {', '.join(allowed)}",
                {"Allow": ", ".join(allowed)},
            )
        return _error(404, "not_found", f"no route for {method} {path}")

    @app.exception_handler(RequestError)
    def request_error(exc: RequestError) -> Response[str]:
        return _error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(InvalidRequestError)
    def invalid_request(exc: InvalidRequestError) -> Response[str]:
        return _error(400, "invalid_request", str(exc))

    @app.exception_handler(EventNotFoundError)
    def event_not_found(exc: EventNotFoundError) -> Response[str]:
        return _error(404, "event_not_found", str(exc))

    @app.exception_handler(SignupNotFoundError)
    def signup_not_found(exc: SignupNotFoundError) -> Response[str]:
        return _error(404, "signup_not_found", str(exc))

    @app.exception_handler(CapacityBelowTakenError)
    def capacity_below_taken(exc: CapacityBelowTakenError) -> Response[str]:
        return _error(400, "capacity_below_taken", str(exc))

    @app.exception_handler(EventExistsError)
    def event_exists(exc: EventExistsError) -> Response[str]:
        return _error(409, "event_exists", str(exc))

    @app.exception_handler(SignupConflictError)
    def signup_conflict(exc: SignupConflictError) -> Response[str]:
        return _error(409, "signup_conflict", str(exc))

    @app.exception_handler([StoreUnavailableError, BotoCoreError])
    def unavailable(exc: Exception) -> Response[str]:
        # Throttled past the store's retries, or DynamoDB unreachable: transient.
        count("StoreUnavailable")
        logger.warning("store unavailable", error=str(exc))
        return _error(
            503,
            "unavailable",
            "the store is busy or unreachable; retry later",
            {"Retry-After": str(RETRY_AFTER_S)},
        )

    @app.exception_handler([ClientError, Exception])
    def internal(exc: Exception) -> Response[str]:
        logger.exception("request failed")
        return _error(500, "internal_error", "the request failed on the server")

    return app


# -- the OpenAPI document -------------------------------------------------------------

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {
                "type": "string",
                "description": (
                    "invalid_request, capacity_below_taken, payload_too_large, not_found, "
                    "method_not_allowed, event_not_found, signup_not_found, event_exists, "
                    "signup_conflict, unavailable, internal_error"
                ),
            },
            "message": {"type": "string"},
        },
    },
    "EventCreate": {
        "type": "object",
        "additionalProperties": False,
        "required": ["event_id", "capacity"],
        "example": {"event_id": "concert-2026", "capacity": 100},
        "properties": {
            "event_id": _ID_SCHEMA,
            "capacity": {"type": "integer", "minimum": 0, "maximum": MAX_CAPACITY},
        },
    },
    "EventUpdate": {
        "type": "object",
        "additionalProperties": False,
        "required": ["capacity"],
        "example": {"capacity": 150},
        "properties": {
            "capacity": {"type": "integer", "minimum": 0, "maximum": MAX_CAPACITY},
        },
    },
    "Event": {
        "type": "object",
        "required": [
            "event_id",
            "capacity",
            "taken",
            "remaining",
            "accepted",
            "state",
            "created_at",
            "created_by",
        ],
        "properties": {
            "event_id": _ID_SCHEMA,
            "capacity": {"type": "integer", "minimum": 0},
            "taken": {"type": "integer", "minimum": 0, "description": "Seats accepted."},
            "remaining": {"type": "integer"},
            "accepted": {"type": "integer", "minimum": 0, "description": "Signups accepted."},
            "state": {"type": "string", "enum": ["OPEN", "CLOSED"]},
            "created_at": {"type": "string", "nullable": True},
            "created_by": {
                "type": "string",
                "nullable": True,
                "description": (
                    "Who created the event: the IAM caller's ARN or the token's subject "
                    "(as in the access log), `cli:<user>` for `turnstile event create`; "
                    "null when the request carried no identity (the local stack)."
                ),
            },
        },
    },
    "EventClosed": {
        "allOf": [
            _ref("Event"),
            {
                "type": "object",
                "required": ["closed_now"],
                "properties": {
                    "closed_now": {
                        "type": "boolean",
                        "description": "True only for the call that moved OPEN to CLOSED.",
                    }
                },
            },
        ]
    },
    "SignupCreate": {
        "type": "object",
        "additionalProperties": False,
        "required": ["signup_id"],
        "example": {"signup_id": "user-42", "seats": 2, "attributes": {"name": "Ada"}},
        "properties": {
            "signup_id": _ID_SCHEMA,
            "seats": {"type": "integer", "minimum": 1, "maximum": MAX_SEATS, "default": 1},
            "attributes": {
                "type": "object",
                "description": (
                    f"The producer's own data, copied onto the decision. Limits beyond "
                    f"this schema: at most {MAX_ATTRIBUTES_BYTES} bytes by DynamoDB's "
                    "item-size rules (strings their UTF-8 bytes, numbers about one byte "
                    "per two significant digits plus one, null and booleans one, maps and "
                    "lists 3 bytes plus one per element, plus each name's bytes), nested "
                    f"at most {MAX_ATTRIBUTES_DEPTH} levels, no empty names, numbers "
                    "DynamoDB can hold (38 significant digits, magnitude 1e-130 to under "
                    "1e126, or 0). Past them: 400. The stream processor applies the same "
                    "rules, so a 202 is never rejected later as invalid_request."
                ),
            },
        },
    },
    "SignupAccepted": {
        "type": "object",
        "required": ["status", "event_id", "signup_id", "seats", "submitted_at"],
        "properties": {
            "status": {"type": "string", "enum": ["PENDING"]},
            "event_id": _ID_SCHEMA,
            "signup_id": _ID_SCHEMA,
            "seats": {"type": "integer", "minimum": 1},
            "submitted_at": {"type": "string", "nullable": True},
        },
    },
    "Signup": {
        "type": "object",
        "required": [
            "event_id",
            "signup_id",
            "status",
            "seats",
            "reason",
            "detail",
            "position",
            "submitted_at",
            "decided_at",
            "attributes",
        ],
        "properties": {
            "event_id": _ID_SCHEMA,
            "signup_id": _ID_SCHEMA,
            "status": {"type": "string", "enum": ["PENDING", "ACCEPTED", "REJECTED"]},
            "seats": {"type": "integer", "nullable": True},
            "reason": {
                "type": "string",
                "nullable": True,
                "description": "REJECTED only: capacity_full, unknown_event, event_closed, "
                "invalid_request.",
            },
            "detail": {"type": "string", "nullable": True},
            "position": {
                "type": "integer",
                "nullable": True,
                "description": "ACCEPTED only: 1, 2, 3 ... in order of acceptance.",
            },
            "submitted_at": {"type": "string", "nullable": True},
            "decided_at": {"type": "string", "nullable": True},
            "attributes": {"type": "object"},
        },
    },
}


def _build_openapi() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        operation = {"operationId": route.operation_id, **route.spec}
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "turnstile",
            "version": "1",
            "description": (
                "Decide who gets a limited resource, exactly once, in arrival order. "
                "Submit signups, then poll their status."
            ),
        },
        "paths": paths,
        "components": {
            "parameters": {
                "EventId": {
                    "name": "event_id",
                    "in": "path",
                    "required": True,
                    "schema": _ID_SCHEMA,
                    "example": "concert-2026",
                },
                "SignupId": {
                    "name": "signup_id",
                    "in": "path",
                    "required": True,
                    "schema": _ID_SCHEMA,
                    "example": "user-42",
                },
            },
            "schemas": _SCHEMAS,
        },
    }


#: The OpenAPI 3.0 document of every route, served at ``GET /openapi.json``.
OPENAPI: dict[str, Any] = _build_openapi()


if __name__ == "__main__":  # python -m turnstile.api > docs/openapi.json
    print(json.dumps(OPENAPI, indent=2, sort_keys=True))

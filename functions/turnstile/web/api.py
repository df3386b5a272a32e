"""The HTTP API: routes, request validation and the OpenAPI document.

One Powertools ``APIGatewayHttpResolver`` (API Gateway HTTP API, payload format 2.0)
serves every route. It runs unchanged behind API Gateway on AWS and behind the local
``ApiServer``. The routes are thin: parse the body, one call into ``usecases`` (which
validates, calls ``SignupStore`` and shapes the answer, for the CLI too), send it.
``ROUTES`` is the single list the resolver, the 405 answers and the OpenAPI
document are all built from, so the document cannot drift from what is served.

Errors are always JSON ``{"error": CODE, "message": TEXT}``; nothing a client sends
yields a 5xx (a 503 means DynamoDB is throttling or down: retry after ``Retry-After``).
Every JSON body ends with a newline.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any
from urllib.parse import quote, unquote

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.metrics import Metrics, MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from turnstile.base.contract import (
    ADMIN_PRINCIPALS_ENV,
    ADMIN_SCOPE,
    ID_PATTERN,
    MAX_ATTRIBUTES_BYTES,
    MAX_EVENTS_ENV,
    MAX_HOLD_SECONDS,
    MAX_LINEUP_ENTRIES,
    RequestKind,
    Status,
    recorded_identity,
)
from turnstile.base.errors import (
    CapacityBelowTakenError,
    EventExistsError,
    EventNotFoundError,
    EventQuotaError,
    ForbiddenError,
    InvalidRequestError,
    RequestRefusedError,
    SignupConflictError,
    SignupNotFoundError,
    StoreUnavailableError,
)
from turnstile.base.personal_data import intake_retention_days, signup_ref
from turnstile.engine.domain import (
    MAX_ATTRIBUTES_DEPTH,
    MAX_CAPACITY,
    MAX_SEATS,
)
from turnstile.service import usecases
from turnstile.storage.store import SignupStore

__all__ = [
    "CORS_ALLOW_HEADERS",
    "CORS_EXPOSE_HEADERS",
    "CORS_MAX_AGE_S",
    "LOCAL_OPERATOR",
    "MAX_ATTRIBUTES_BYTES",
    "MAX_ATTRIBUTES_DEPTH",
    "MAX_BODY_BYTES",
    "MAX_CAPACITY",
    "MAX_WAIT_S",
    "OPENAPI",
    "ROUTES",
    "SERVICE",
    "WAITING_ROUTES",
    "RequestError",
    "Route",
    "caller_identity",
    "create_app",
    "waits",
]

SERVICE = "turnstile-api"

#: Largest request body (decoded bytes); larger ones get 413 before any parsing.
MAX_BODY_BYTES = 16 * 1024
#: Seconds a client should wait after a 503 before trying again.
RETRY_AFTER_S = 1
#: The longest ``?wait=`` of a waiting read (``GET .../signups/{signup_id}/decision``), and
#: its default. A wait holds one instance of the waiter function for as long as it lasts;
#: shorter waits hand those instances round sooner (docs/operations.md, "Waiting reads").
MAX_WAIT_S = 10
#: A wait ends this long before the invocation's own deadline, to answer in time.
WAIT_MARGIN_S = 2.0
#: JSON numbers with more digits than this are parsed as Decimal: Python refuses to turn
#: text of over 4,300 digits into an int, and every rule refuses such a number anyway.
_MAX_INT_DIGITS = 4000

#: Cross-origin requests, when a stack (``turnstile:apiCorsOrigins``) or ``turnstile local
#: --cors-origin`` allows some origins: what a browser may send, and may read back.
CORS_ALLOW_HEADERS = (
    "authorization",
    "content-type",
    "x-amz-content-sha256",
    "x-amz-date",
    "x-amz-security-token",
)
CORS_EXPOSE_HEADERS = ("location", "retry-after")
CORS_MAX_AGE_S = 600

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
    #: Served by the waiter function, not the API function: the request may be held for
    #: up to ``MAX_WAIT_S`` (``WAITING_ROUTES``).
    waits: bool = False

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
    # The trailing newline: `curl` output ends its line, and JSON parsers do not mind.
    return Response(
        status_code=status, content_type=JSON, body=_dumps(body) + "\n", headers=headers
    )


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


#: The authorizer context (``requestContext.authorizer.lambda``) the local API gives an
#: unsigned request: the local operator, an admin. The deployed API has no Lambda
#: authorizer, so no caller there can carry it.
LOCAL_OPERATOR = "turnstileLocalOperator"


def events_quota() -> int | None:
    """The most events one organizer may create (``TURNSTILE_MAX_EVENTS_PER_ORGANIZER``,
    the stack's ``turnstile:maxEventsPerOrganizer``); None: no cap (unset, or not a whole
    number of at least 1)."""
    raw = os.environ.get(MAX_EVENTS_ENV, "")
    return int(raw) if raw.isdigit() and int(raw) >= 1 else None


def caller_of(event: Mapping[str, Any]) -> usecases.Caller:
    """The caller: its identity (``caller_identity``), and whether it is an admin: a
    token carrying the scope ``turnstile/admin`` (``scope`` or ``scp`` claim), or an
    identity matching one of ``TURNSTILE_ADMIN_PRINCIPALS`` (comma-separated ARN patterns,
    ``*`` a wildcard; the stack's ``turnstile:adminPrincipals``)."""
    raw = caller_identity(event)
    identity = recorded_identity(raw) if raw else None
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    local = authorizer.get("lambda") if isinstance(authorizer, Mapping) else None
    if isinstance(local, Mapping) and local.get(LOCAL_OPERATOR) is True and identity is None:
        return usecases.OPERATOR
    jwt = authorizer.get("jwt") if isinstance(authorizer, Mapping) else None
    claims = jwt.get("claims") if isinstance(jwt, Mapping) else None
    scopes: set[str] = set()
    granted = jwt.get("scopes") if isinstance(jwt, Mapping) else None
    if isinstance(granted, list):
        scopes |= {str(v) for v in granted}
    if isinstance(claims, Mapping):
        for name in ("scope", "scp"):
            value = claims.get(name)
            if isinstance(value, str):
                scopes |= set(value.replace(",", " ").split())
            elif isinstance(value, list):
                scopes |= {str(v) for v in value}
    patterns = [p.strip() for p in os.environ.get(ADMIN_PRINCIPALS_ENV, "").split(",") if p.strip()]
    admin = ADMIN_SCOPE in scopes or (
        raw is not None and any(fnmatch.fnmatchcase(raw, p) for p in patterns)
    )
    return usecases.Caller(identity=identity, admin=admin)


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


def _integer(text: str) -> int | Decimal:
    return Decimal(text) if len(text) > _MAX_INT_DIGITS else int(text)


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice: which of the two would count is a guess
    (Python's json takes the last, other parsers the first), so neither is taken."""
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise _DuplicateKeyError(key)
        value[key] = item
    return value


def _json_object(event: Mapping[str, Any], allowed: frozenset[str]) -> dict[str, Any]:
    """The body as a JSON object with only ``allowed`` keys; fractions parse as Decimal."""
    raw = _raw_body(event)
    if not raw.strip():
        raise _invalid("body must be a JSON object")
    try:
        # Decimal, not float: DynamoDB takes no floats, and 2.0 must stay distinguishable
        # from 2 so that seats and capacity can insist on integers. 1e200 parses too (as
        # Decimal), and the rules refuse it by name.
        value = json.loads(
            raw,
            parse_float=Decimal,
            parse_int=_integer,
            parse_constant=_reject_constant,
            object_pairs_hook=_unique_keys,
        )
    except _DuplicateKeyError as exc:
        shown = json.dumps(exc.key[:64], ensure_ascii=False)
        raise _invalid(f"body has the key {shown} more than once") from exc
    except RecursionError as exc:
        raise _invalid("body is nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, NaN, Infinity
        raise _invalid(f"body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise _invalid("body must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        # Refused, not ignored: a misspelt "seats" would otherwise silently mean 1 seat.
        raise _invalid(f"unknown field(s): {', '.join(unknown)}")
    return value


_WAIT = re.compile(r"^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")
_DIGITS = re.compile(r"^\d{1,9}$")


def _query(event: Mapping[str, Any]) -> Mapping[str, str]:
    """The query string's parameters (a repeated one arrives joined with commas)."""
    query = event.get("queryStringParameters")
    return query if isinstance(query, Mapping) else {}


def _limit(query: Mapping[str, str]) -> int | None:
    text = query.get("limit")
    if text is None:
        return None
    if not _DIGITS.match(text):
        raise _invalid(f"limit must be an integer from 1 to {usecases.MAX_PAGE_SIZE}")
    return int(text)


def _wait(query: Mapping[str, str]) -> float:
    text = query.get("wait")
    if text is None:
        return float(MAX_WAIT_S)
    seconds = float(text) if _WAIT.match(text) else -1.0
    if not 0 < seconds <= MAX_WAIT_S:
        raise _invalid(f"wait must be a number of seconds above 0 and at most {MAX_WAIT_S}")
    return seconds


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
_LIMIT_PARAM = {"$ref": "#/components/parameters/Limit"}
_NEXT_PARAM = {"$ref": "#/components/parameters/Next"}
_STATUS_PARAM = {"$ref": "#/components/parameters/Status"}
_WAIT_PARAM = {"$ref": "#/components/parameters/Wait"}

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

    @property
    def query(self) -> Mapping[str, str]:
        return _query(self.raw_event)

    def seconds_left(self) -> float | None:
        """Seconds until the invocation's deadline, if the context knows it."""
        remaining = getattr(self.app.lambda_context, "get_remaining_time_in_millis", None)
        return remaining() / 1000 if callable(remaining) else None


def _served(route: Route, call: _Call) -> Callable[..., Response[str]]:
    handler = route.handler
    if handler is None:
        raise RuntimeError(f"route {route.operation_id} has no handler")
    return lambda **params: handler(call, **params)


def _index(call: _Call) -> Response[str]:
    return _json(200, INDEX)


def _create_event(call: _Call) -> Response[str]:
    body = _json_object(
        call.raw_event,
        frozenset({"event_id", "capacity", "waitlist", "hold_seconds", "max_seats"}),
    )
    caller = caller_of(call.raw_event)
    creator = caller.identity
    result = usecases.create_event(
        call.store(),
        body.get("event_id"),
        body.get("capacity"),
        created_by=creator,
        waitlist=body.get("waitlist", usecases.ABSENT),
        hold_seconds=body.get("hold_seconds", usecases.ABSENT),
        max_seats=body.get("max_seats", usecases.ABSENT),
        quota=None if caller.admin else events_quota(),
    )
    event = result.body
    location = f"/events/{quote(event['event_id'], safe=':@')}"
    if not result.created:
        # The same body again (a retry): the event as it is, nothing created.
        return _json(200, event, {"Location": location})
    call.count("EventCreated")
    logger.info("event created", event_id=event["event_id"], capacity=event["capacity"])
    return _json(201, event, {"Location": location})


def _list_events(call: _Call) -> Response[str]:
    query = call.query
    page = usecases.list_events(call.store(), _limit(query), query.get("next") or None)
    return _json(200, page)


def _list_signups(call: _Call, event_id: str) -> Response[str]:
    query = call.query
    page = usecases.list_signups(
        call.store(),
        unquote(event_id),
        query.get("status"),
        _limit(query),
        query.get("next") or None,
        caller_of(call.raw_event),
    )
    return _json(200, page)


def _get_event(call: _Call, event_id: str) -> Response[str]:
    return _json(200, usecases.show_event(call.store(), unquote(event_id)))


def _update_event(call: _Call, event_id: str) -> Response[str]:
    event_id = unquote(event_id)
    body = _json_object(call.raw_event, frozenset({"capacity"}))
    if "capacity" not in body:
        raise _invalid("capacity is required")
    event = usecases.update_capacity(
        call.store(), event_id, body["capacity"], caller_of(call.raw_event)
    )
    call.count("EventUpdated")
    logger.info("event capacity changed", event_id=event_id, capacity=event["capacity"])
    return _json(200, event)


def _close_event(call: _Call, event_id: str) -> Response[str]:
    event = usecases.close_event(call.store(), unquote(event_id), caller_of(call.raw_event))
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
        owner=caller_of(call.raw_event).identity,
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
    if "wait" in call.query:
        raise _invalid(
            "wait is not read here: GET /events/{event_id}/signups/{signup_id}/decision"
            f"?wait=S (0 < S <= {MAX_WAIT_S}) waits for the decision"
        )
    event_id, signup_id = unquote(event_id), unquote(signup_id)
    return _json(
        200, usecases.signup_status(call.store(), event_id, signup_id, caller_of(call.raw_event))
    )


def _await_decision(call: _Call, event_id: str, signup_id: str) -> Response[str]:
    wait = _wait(call.query)
    event_id, signup_id = unquote(event_id), unquote(signup_id)
    left = call.seconds_left()
    if left is not None:
        wait = max(0.0, min(wait, left - WAIT_MARGIN_S))
    return _json(
        200,
        usecases.await_decision(
            call.store(), event_id, signup_id, wait, caller=caller_of(call.raw_event)
        ),
    )


def _request(kind: str) -> Callable[..., Response[str]]:
    """The handler of ``POST .../signups/{signup_id}/confirm`` (or ``/cancel``)."""

    def handler(call: _Call, event_id: str, signup_id: str) -> Response[str]:
        event_id, signup_id = unquote(event_id), unquote(signup_id)
        body = usecases.request_signup(
            call.store(), event_id, signup_id, kind, caller=caller_of(call.raw_event)
        )
        call.count("ConfirmRequested" if kind == RequestKind.CONFIRM else "CancelRequested")
        logger.info(
            f"{kind} recorded", event_id=event_id, signup_ref=signup_ref(event_id, signup_id)
        )
        return _json(202, body, {"Location": _signup_location(event_id, signup_id)})

    return handler


def _request_route(kind: str, operation_id: str, summary: str, description: str) -> Route:
    return Route(
        "POST",
        f"/events/{{event_id}}/signups/{{signup_id}}/{kind}",
        operation_id,
        handler=_request(kind),
        spec={
            "summary": summary,
            "description": description
            + (
                " Recorded on the signup's intake record and applied by the stream "
                "processor, which judges it again (a request recorded a moment before a "
                "hold lapses is refused there: the signup's `last_refusal` says so); poll "
                "the Location for the outcome. No body is read."
            ),
            "parameters": [_EVENT_PARAM, _SIGNUP_PARAM],
            "responses": {
                "202": _ok("Recorded; poll the Location.", "RequestRecorded", _LOCATION),
                "404": _error_response(
                    "No such signup, or not the caller's: only its owner, its event's "
                    "organizers and admins see it (error: signup_not_found)."
                ),
                "409": {
                    "description": (
                        "The signup's current status does not allow it (error: "
                        "request_refused); nothing recorded. The answer carries the status."
                    ),
                    "content": {JSON: {"schema": _ref("RequestRefused")}},
                },
                **_COMMON,
            },
        },
    )


def _openapi_document(call: _Call) -> Response[str]:
    return _json(200, OPENAPI)


ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/",
        "getIndex",
        handler=_index,
        spec={
            "summary": "Where the OpenAPI document is, and the routes.",
            "responses": {
                "200": _ok("A pointer to /openapi.json and the route list.", "Index"),
                "413": _COMMON["413"],
            },
        },
    ),
    Route(
        "POST",
        "/events",
        "createEvent",
        handler=_create_event,
        spec={
            "summary": "Create an OPEN event with a capacity in seats.",
            "description": (
                "Idempotent: the same body again (same event_id and capacity) answers 200 "
                "with the event as it is now, nothing created; the same event_id with "
                "another capacity answers 409 event_exists, naming the capacity it has."
            ),
            "requestBody": _body("EventCreate"),
            "responses": {
                "201": _ok("Created.", "Event", _LOCATION),
                "200": _ok(
                    "It existed already with this capacity (a retry): the event now.",
                    "Event",
                    _LOCATION,
                ),
                "409": _error_response(
                    "An event with this id exists with another capacity (error: event_exists)."
                ),
                "403": _error_response(
                    "The caller has created as many events as one organizer may "
                    "(turnstile:maxEventsPerOrganizer; error: event_quota_exceeded)."
                ),
                **_COMMON,
            },
        },
    ),
    Route(
        "GET",
        "/events",
        "listEvents",
        handler=_list_events,
        spec={
            "summary": "A page of events, in no particular order.",
            "description": (
                "Pass the answer's `next` back as `?next=` for the following page; `next` "
                "is null on the last one. A page may hold fewer than `limit` events (even "
                "none) and still have a `next`. This reads the control table whole, "
                "page by page (each event is a partition of its own)."
            ),
            "parameters": [_LIMIT_PARAM, _NEXT_PARAM],
            "responses": {
                "200": _ok("A page of events.", "EventList"),
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
                "403": _error_response(
                    "The event is another organizer's: only its creator or an admin (error: "
                    "forbidden)."
                ),
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
                "403": _error_response(
                    "The event is another organizer's: only its creator or an admin (error: "
                    "forbidden)."
                ),
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
        "/events/{event_id}/signups",
        "listSignups",
        handler=_list_signups,
        spec={
            "summary": "A page of an event's signups in signup_id order, optionally by status.",
            "description": (
                "PENDING: recorded, not decided yet. Pass the answer's `next` back as "
                "`?next=` (with the same status) for the following page; `next` is null "
                "on the last one. A page may hold fewer than `limit` signups (even none) "
                "and still have a `next`. Reads the event's partition of the main table "
                "(ACCEPTED, REJECTED) or of both main and intake (PENDING, no status)."
            ),
            "parameters": [_EVENT_PARAM, _STATUS_PARAM, _LIMIT_PARAM, _NEXT_PARAM],
            "responses": {
                "200": _ok("A page of signups.", "SignupList"),
                "404": _error_response("No such event (error: event_not_found)."),
                "403": _error_response(
                    "The event is another organizer's: only its creator or an admin (error: "
                    "forbidden)."
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
            "summary": "A signup's status (PENDING, HELD, ACCEPTED, WAITLISTED, REJECTED, "
            "CANCELLED or EXPIRED), read consistently.",
            "description": (
                "Answers at once. To wait for the decision, read "
                "`/events/{event_id}/signups/{signup_id}/decision` instead (a `wait` "
                "parameter here answers 400)."
            ),
            "parameters": [_EVENT_PARAM, _SIGNUP_PARAM],
            "responses": {
                "200": _ok("The signup.", "Signup"),
                "404": _error_response(
                    "No such signup, or not the caller's: only its owner, its event's "
                    "organizers and admins see it (error: signup_not_found)."
                ),
                **_COMMON,
            },
        },
    ),
    Route(
        "GET",
        "/events/{event_id}/signups/{signup_id}/decision",
        "awaitSignupDecision",
        handler=_await_decision,
        waits=True,
        spec={
            "summary": "A signup's status, once decided: waits while it is PENDING.",
            "description": (
                "Answers as soon as the signup is decided, or after `wait` seconds "
                f"(default and most: {MAX_WAIT_S}) with its status then (PENDING): one "
                "request instead of many polls. Served by a function of its own with a "
                "capped concurrency and its own rate limit, so waits never take the "
                "instances the other routes need; when those are all busy the request "
                "fails (500, or 429 over the rate limit): read the status route instead, "
                "or wait again after a pause."
            ),
            "parameters": [_EVENT_PARAM, _SIGNUP_PARAM, _WAIT_PARAM],
            "responses": {
                "200": _ok("The signup.", "Signup"),
                "404": _error_response(
                    "No such signup, or not the caller's: only its owner, its event's "
                    "organizers and admins see it (error: signup_not_found)."
                ),
                **_COMMON,
            },
        },
    ),
    _request_route(
        RequestKind.CONFIRM,
        "confirmSignup",
        "Confirm a HELD signup before its hold expires: it becomes ACCEPTED.",
        "Only a HELD signup whose hold_expires_at is still ahead may be confirmed; any "
        "other answers 409 request_refused with its status.",
    ),
    _request_route(
        RequestKind.CANCEL,
        "cancelSignup",
        "Cancel a HELD, ACCEPTED or WAITLISTED signup: its seats go to the next in line.",
        "Any other status (PENDING, REJECTED, CANCELLED, EXPIRED) answers 409 "
        "request_refused with its status.",
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


#: The routes the waiter function serves (``Route.waits``); the API function the rest.
WAITING_ROUTES: tuple[Route, ...] = tuple(route for route in ROUTES if route.waits)


def waits(method: str, path: str) -> bool:
    """Whether a request (its method and raw path) is one the waiter function serves."""
    return any(route.method == method and route.matcher.match(path) for route in WAITING_ROUTES)


#: What ``GET /`` answers: where the document is, and every route.
INDEX: dict[str, Any] = {
    "service": "turnstile",
    "openapi": "/openapi.json",
    "routes": [f"{route.method} {route.path}" for route in ROUTES],
}


# -- the application ------------------------------------------------------------------


#: The domain's errors, each answered ``{"error": code, "message": str(exc)}`` with its
#: status (the ones with a body of their own have handlers in ``create_app``).
_DOMAIN_ERRORS: Mapping[type[Exception], tuple[int, str]] = {
    InvalidRequestError: (400, "invalid_request"),
    EventNotFoundError: (404, "event_not_found"),
    EventQuotaError: (403, "event_quota_exceeded"),
    ForbiddenError: (403, "forbidden"),
    SignupNotFoundError: (404, "signup_not_found"),
    CapacityBelowTakenError: (400, "capacity_below_taken"),
    EventExistsError: (409, "event_exists"),
    SignupConflictError: (409, "signup_conflict"),
}


def _answer(status: int, code: str) -> Callable[[Exception], Response[str]]:
    def answer(exc: Exception) -> Response[str]:
        return _error(status, code, str(exc))

    return answer


def create_app(
    store: Callable[[], SignupStore],
    metrics: Metrics | None = None,
    routes: Sequence[Route] = ROUTES,
) -> APIGatewayHttpResolver:
    """Build the resolver with ``routes`` (every route of ``ROUTES`` by default; the
    waiter function's app has ``WAITING_ROUTES`` only, and answers 404 to the rest).

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

    for route in routes:
        app.route(route.powertools_rule, method=route.method)(_served(route, call))

    @app.not_found
    def no_route(_: Exception) -> Response[str]:
        method = app.current_event.http_method.upper()
        path = app.current_event.path
        allowed = sorted({r.method for r in routes if r.matcher.match(path)})
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

    for error, (status, code) in _DOMAIN_ERRORS.items():
        app.exception_handler(error)(_answer(status, code))

    @app.exception_handler(RequestRefusedError)
    def request_refused(exc: RequestRefusedError) -> Response[str]:
        count("RequestRefused")
        body = {
            "error": "request_refused",
            "message": str(exc),
            "event_id": exc.event_id,
            "signup_id": exc.signup_id,
            "request": exc.request,
            "status": exc.status,
            "hold_expires_at": exc.hold_expires_at,
            "reason": exc.reason,
        }
        return _json(409, body)

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
    "Index": {
        "type": "object",
        "required": ["service", "openapi", "routes"],
        "properties": {
            "service": {"type": "string"},
            "openapi": {"type": "string", "description": "The OpenAPI document's path."},
            "routes": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Every route, as METHOD PATH.",
            },
        },
    },
    "Error": {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {
                "type": "string",
                "description": (
                    "invalid_request, capacity_below_taken, payload_too_large, not_found, "
                    "method_not_allowed, event_not_found, signup_not_found, event_exists, "
                    "signup_conflict, request_refused, unavailable, internal_error"
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
        "description": (
            f"With holds (hold_seconds above 0), capacity + waitlist is at most "
            f"{MAX_LINEUP_ENTRIES} (400 otherwise): the event item keeps every hold and "
            "every waiting signup."
        ),
        "properties": {
            "event_id": _ID_SCHEMA,
            "capacity": {"type": "integer", "minimum": 0, "maximum": MAX_CAPACITY},
            "waitlist": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_LINEUP_ENTRIES,
                "default": 0,
                "description": "How many signups may wait for seats at once (0: none).",
            },
            "hold_seconds": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_HOLD_SECONDS,
                "default": 0,
                "description": (
                    "Seconds a granted signup holds its seats (HELD) until confirmed; "
                    "0: granted signups are ACCEPTED at once."
                ),
            },
            "max_seats": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SEATS,
                "description": "The most seats one signup may ask for (default: no limit "
                "but the capacity).",
            },
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
            "positions_given",
            "state",
            "created_at",
            "created_by",
            "waitlist",
            "hold_seconds",
            "max_seats",
            "status_counts",
        ],
        "properties": {
            "event_id": _ID_SCHEMA,
            "capacity": {"type": "integer", "minimum": 0},
            "taken": {
                "type": "integer",
                "minimum": 0,
                "description": "Seats held or accepted now.",
            },
            "remaining": {"type": "integer"},
            "positions_given": {
                "type": "integer",
                "minimum": 0,
                "description": (
                    "Positions handed out: every signup ever given a seat, held or accepted, "
                    "numbered in order. Seats are `taken`; signups by status, `status_counts`."
                ),
            },
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
            "waitlist": {"type": "integer", "minimum": 0},
            "hold_seconds": {"type": "integer", "minimum": 0},
            "max_seats": {"type": "integer", "minimum": 1, "nullable": True},
            "status_counts": {
                "type": "object",
                "additionalProperties": {"type": "integer"},
                "description": (
                    "How many signups are in each status now, as the stream processor "
                    "counts them (empty until it has decided some with the lifecycle)."
                ),
            },
        },
    },
    "EventList": {
        "type": "object",
        "required": ["events", "next"],
        "properties": {
            "events": {"type": "array", "items": _ref("Event")},
            "next": {
                "type": "string",
                "nullable": True,
                "description": "The token of the next page; null on the last.",
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
            "hold_expires_at",
            "waitlist_position",
            "updated_at",
            "request_count",
            "history",
            "last_refusal",
        ],
        "properties": {
            "event_id": _ID_SCHEMA,
            "signup_id": _ID_SCHEMA,
            "status": {"type": "string", "enum": list(Status.ALL)},
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
                "description": "Once granted seats (HELD or ACCEPTED): 1, 2, 3 ... in "
                "order of the grants.",
            },
            "submitted_at": {"type": "string", "nullable": True},
            "decided_at": {"type": "string", "nullable": True},
            "attributes": {"type": "object"},
            "hold_expires_at": {
                "type": "string",
                "nullable": True,
                "description": "HELD: when the hold lapses unless confirmed (ISO-8601 UTC).",
            },
            "waitlist_position": {
                "type": "integer",
                "nullable": True,
                "description": "Its place in line when it joined the waitlist (1 = first).",
            },
            "updated_at": {
                "type": "string",
                "nullable": True,
                "description": "When its last transition was made.",
            },
            "request_count": {
                "type": "integer",
                "nullable": True,
                "description": "How many of its confirm/cancel requests were answered.",
            },
            "history": {
                "type": "array",
                "description": "Its transitions, oldest first: from, to, at, "
                "sequence_number, cause, and reason on a rejection.",
                "items": {"type": "object"},
            },
            "last_refusal": {
                "type": "object",
                "nullable": True,
                "description": "The last request the processor refused: request, reason "
                "(hold_expired, transition_not_allowed), status, at, sequence_number.",
            },
        },
    },
    "RequestRecorded": {
        "type": "object",
        "required": ["event_id", "signup_id", "request"],
        "properties": {
            "event_id": _ID_SCHEMA,
            "signup_id": _ID_SCHEMA,
            "request": {"type": "string", "enum": list(RequestKind.ALL)},
        },
    },
    "RequestRefused": {
        "type": "object",
        "required": [
            "error",
            "message",
            "event_id",
            "signup_id",
            "request",
            "status",
            "hold_expires_at",
            "reason",
        ],
        "properties": {
            "error": {"type": "string", "enum": ["request_refused"]},
            "message": {"type": "string"},
            "event_id": _ID_SCHEMA,
            "signup_id": _ID_SCHEMA,
            "request": {"type": "string", "enum": list(RequestKind.ALL)},
            "status": {
                "type": "string",
                "enum": list(Status.ALL),
                "description": "The signup's status as the refusal saw it.",
            },
            "hold_expires_at": {"type": "string", "nullable": True},
            "reason": {"type": "string", "nullable": True},
        },
    },
}


_SCHEMAS["SignupList"] = {
    "type": "object",
    "required": ["signups", "next"],
    "properties": {
        "signups": {"type": "array", "items": _ref("Signup")},
        "next": _SCHEMAS["EventList"]["properties"]["next"],
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
                "Limit": {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "description": "Most items on the page.",
                    "schema": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": usecases.MAX_PAGE_SIZE,
                        "default": usecases.DEFAULT_PAGE_SIZE,
                    },
                },
                "Next": {
                    "name": "next",
                    "in": "query",
                    "required": False,
                    "description": (
                        "The `next` of the previous page, as it was given (opaque; a "
                        "changed one, or one of another listing, answers 400)."
                    ),
                    "schema": {"type": "string"},
                },
                "Status": {
                    "name": "status",
                    "in": "query",
                    "required": False,
                    "description": "Only signups in this status (default: all).",
                    "schema": {"type": "string", "enum": list(usecases.LISTED_STATUSES)},
                },
                "Wait": {
                    "name": "wait",
                    "in": "query",
                    "required": False,
                    "description": (
                        "Seconds to wait for a decision before answering PENDING "
                        f"(above 0, at most {MAX_WAIT_S}; default {MAX_WAIT_S})."
                    ),
                    "schema": {
                        "type": "number",
                        "minimum": 0,
                        "exclusiveMinimum": True,
                        "maximum": MAX_WAIT_S,
                    },
                },
            },
            "schemas": _SCHEMAS,
        },
    }


#: The OpenAPI 3.0 document of every route, served at ``GET /openapi.json``.
OPENAPI: dict[str, Any] = _build_openapi()


if __name__ == "__main__":  # python -m turnstile.web.api > docs/openapi.json
    print(json.dumps(OPENAPI, indent=2, sort_keys=True))

"""The routes: Powertools route decorators, each with its request and response models.

A route's signature says what it reads (its path and query parameters, its body's model,
from ``inputs``) and what it answers (``Response[view]``, from ``turnstile.service.views``);
Powertools validates the request against them before the route runs, and generates the
OpenAPI document from them and from the decorator's summary, description and responses.
A route is thin: one call into ``usecases`` (which applies the domain's rules again and
builds the view, for the CLI too), then the answer. What it works with comes as
dependencies (``Depends``) that each application built by ``turnstile.web.api.create_app``
provides: its store, its metrics counter, its invocation's deadline.

Two routers: ``api``, served by the API function, and ``waiting``, the waiting reads,
served by the waiter function (and by the API function too). Every route they are given is
also listed, in order, in ``ROUTES``: the index, the 405 answers and the stack's routes are
all built from it.
"""

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any
from urllib.parse import quote

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.depends import Depends
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.event_handler.request import Request

from turnstile.base.contract import RequestKind
from turnstile.base.personal_data import intake_retention_days, signup_ref
from turnstile.service import usecases, views
from turnstile.storage.store import SignupStore
from turnstile.web import inputs
from turnstile.web.callers import caller_of, events_quota
from turnstile.web.edge import JSON, MAX_BODY_BYTES, MAX_WAIT_S, SERVICE, WAIT_MARGIN_S
from turnstile.web.errors import answer, invalid

__all__ = [
    "INDEX",
    "ROUTES",
    "WAITING_ROUTES",
    "Route",
    "api",
    "caller",
    "counter",
    "openapi_document",
    "seconds_left",
    "store",
    "waiting",
    "waits",
]

logger = Logger(service=SERVICE, child=True)


@dataclass(frozen=True)
class Route:
    """One operation: its method, its OpenAPI path template and operation id, and whether
    the waiter function serves it (``waits``: the request may be held for up to
    ``MAX_WAIT_S``)."""

    method: str
    path: str
    operation_id: str
    waits: bool = False

    @property
    def powertools_rule(self) -> str:
        """The path in Powertools' syntax: ``{event_id}`` becomes ``<event_id>``."""
        return re.sub(r"\{(\w+)\}", r"<\1>", self.path)

    @cached_property
    def matcher(self) -> re.Pattern[str]:
        """Matches any request path of this shape, whatever the segment holds."""
        return re.compile("^" + re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(self.path)) + "$")


_LISTED: list[Route] = []
_ROUTE_PARAMETERS = inspect.signature(Router.route)


class _Router(Router):
    """Powertools' ``Router``, listing each route it is given in ``_LISTED`` as well."""

    def __init__(self, *, waits: bool = False) -> None:
        super().__init__()
        self.waits = waits

    def route(self, *args: Any, **kwargs: Any) -> Any:
        given = _ROUTE_PARAMETERS.bind(self, *args, **kwargs).arguments
        path = re.sub(r"<(\w+)>", r"{\1}", given["rule"])
        method = str(given["method"]).upper()
        _LISTED.append(Route(method, path, str(given["operation_id"]), self.waits))
        return super().route(*args, **kwargs)


#: The API function's routes, and the waiter function's.
api = _Router()
waiting = _Router(waits=True)


# -- what a route works with ---------------------------------------------------------------


def store() -> SignupStore:
    """The application's store (``create_app`` overrides this)."""
    raise LookupError("no store: an application of create_app provides it")


def counter() -> Callable[[str], None]:
    """The application's metrics counter (``create_app`` overrides this)."""
    return lambda _: None


def seconds_left() -> float | None:
    """Seconds until the invocation's deadline, if known (``create_app`` overrides this)."""
    return None


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document (``create_app`` overrides this)."""
    raise LookupError("no document: an application of create_app provides it")


def caller(request: Request) -> usecases.Caller:
    """Who asks, and whether it is an admin (``callers.caller_of``)."""
    return caller_of(request.resolved_event.raw_event)


Store = Annotated[SignupStore, Depends(store)]
Caller = Annotated[usecases.Caller, Depends(caller)]
Count = Annotated[Callable[[str], None], Depends(counter)]
SecondsLeft = Annotated[float | None, Depends(seconds_left)]
Document = Annotated[dict[str, Any], Depends(openapi_document)]


# -- the OpenAPI responses -----------------------------------------------------------------

_LOCATION = {"Location": {"required": True, "schema": {"type": "string"}}}


def _ok(description: str, *, located: bool = False) -> OpenAPIResponse:
    """A success: its body is the route's own view (its return annotation)."""
    response: OpenAPIResponse = {"description": description}
    if located:
        response["headers"] = _LOCATION  # type: ignore[typeddict-item]
    return response


def _error(description: str, model: type[views.View] = views.Error) -> OpenAPIResponse:
    return {"description": description, "content": {JSON: {"model": model}}}


_TOO_LARGE = _error(f"The body is over {MAX_BODY_BYTES} bytes.")
_COMMON: dict[int, OpenAPIResponse] = {
    400: _error("Bad input: the message says which."),
    413: _TOO_LARGE,
    503: {
        "description": "DynamoDB is throttling or unreachable; retry after Retry-After seconds.",
        "headers": {"Retry-After": {"required": True, "schema": {"type": "integer"}}},  # type: ignore[typeddict-item]
        "content": {JSON: {"model": views.Error}},
    },
}
_NO_EVENT = _error("No such event (error: event_not_found).")
_NOT_THEIRS = _error(
    "The event is another organizer's: only its creator or an admin (error: forbidden)."
)
_NO_SIGNUP = _error(
    "No such signup, or not the caller's: only its owner, its event's organizers and admins "
    "see it (error: signup_not_found)."
)


def _location(event_id: str, signup_id: str | None = None) -> str:
    path = f"/events/{quote(event_id, safe=':@')}"
    return path if signup_id is None else f"{path}/signups/{quote(signup_id, safe=':@')}"


# -- the routes ----------------------------------------------------------------------------


@api.get(
    "/",
    operation_id="getIndex",
    summary="Where the OpenAPI document is, and the routes.",
    responses={200: _ok("A pointer to /openapi.json and the route list."), 413: _TOO_LARGE},
)
def get_index() -> Response[views.Index]:
    return answer(200, INDEX)


@api.post(
    "/events",
    operation_id="createEvent",
    summary="Create an OPEN event with a capacity in seats.",
    description=(
        "Idempotent: the same body again (same event_id and capacity) answers 200 with the "
        "event as it is now, nothing created; the same event_id with another capacity "
        "answers 409 event_exists, naming the capacity it has."
    ),
    responses={
        201: _ok("Created.", located=True),
        200: _ok("It existed already with this capacity (a retry): the event now.", located=True),
        409: _error("An event with this id exists with another capacity (error: event_exists)."),
        403: _error(
            "The caller has created as many events as one organizer may "
            "(turnstile:maxEventsPerOrganizer; error: event_quota_exceeded)."
        ),
        **_COMMON,
    },
)
def create_event(
    body: inputs.EventCreate, store: Store, caller: Caller, count: Count
) -> Response[views.Event]:
    result = usecases.create_event(
        store,
        body.event_id,
        body.capacity,
        created_by=caller.identity,
        waitlist=inputs.given(body, "waitlist"),
        hold_seconds=inputs.given(body, "hold_seconds"),
        max_seats=inputs.given(body, "max_seats"),
        quota=None if caller.admin else events_quota(),
        shards=inputs.given(body, "shards"),
    )
    event = result.body
    location = {"Location": _location(event.event_id)}
    if not result.created:
        # The same body again (a retry): the event as it is, nothing created.
        return answer(200, event, location)
    count("EventCreated")
    logger.info("event created", event_id=event.event_id, capacity=event.capacity)
    return answer(201, event, location)


@api.get(
    "/events",
    operation_id="listEvents",
    summary="A page of events, in no particular order.",
    description=(
        "Pass the answer's `next` back as `?next=` for the following page; `next` is null "
        "on the last one. A page may hold fewer than `limit` events (even none) and still "
        "have a `next`. This reads the control table whole, page by page (each event is a "
        "partition of its own)."
    ),
    responses={200: _ok("A page of events."), **_COMMON},
)
def list_events(
    store: Store,
    limit: inputs.Limit = usecases.DEFAULT_PAGE_SIZE,
    next: inputs.Next = None,  # type: ignore[assignment]
) -> Response[views.EventList]:
    return answer(200, usecases.list_events(store, limit, next or None))


@api.get(
    "/events/<event_id>",
    operation_id="getEvent",
    summary="The event's capacity, seats taken and state (read consistently).",
    responses={200: _ok("The event."), 404: _NO_EVENT, **_COMMON},
)
def get_event(event_id: inputs.EventId, store: Store) -> Response[views.Event]:
    return answer(200, usecases.show_event(store, event_id))


@api.patch(
    "/events/<event_id>",
    operation_id="updateEvent",
    summary="Change an event's capacity: up at any time, down to the seats taken.",
    description=(
        "Decisions already made stand; signups decided after the change are decided against "
        "the new capacity (a decision in flight is decided again). Lowering below the seats "
        "already taken answers 400 capacity_below_taken, and the message says how many are "
        "taken."
    ),
    responses={
        200: _ok("The event after the change."),
        404: _NO_EVENT,
        403: _NOT_THEIRS,
        **_COMMON,
        400: _error(
            "Bad input (error: invalid_request), or a capacity below the seats already taken "
            "(error: capacity_below_taken; the message names how many)."
        ),
    },
)
def update_event(
    event_id: inputs.EventId, body: inputs.EventUpdate, store: Store, caller: Caller, count: Count
) -> Response[views.Event]:
    event = usecases.update_capacity(store, event_id, body.capacity, caller)
    count("EventUpdated")
    logger.info("event capacity changed", event_id=event_id, capacity=event.capacity)
    return answer(200, event)


@api.post(
    "/events/<event_id>/close",
    operation_id="closeEvent",
    summary="OPEN -> CLOSED. Later signups are rejected with event_closed.",
    description=(
        "Idempotent: closing a CLOSED event answers 200 with closed_now false. No body is read."
    ),
    responses={200: _ok("The event after the call."), 404: _NO_EVENT, 403: _NOT_THEIRS, **_COMMON},
)
def close_event(
    event_id: inputs.EventId, store: Store, caller: Caller, count: Count
) -> Response[views.EventClosed]:
    event = usecases.close_event(store, event_id, caller)
    if event.closed_now:
        count("EventClosed")
        logger.info("event closed", event_id=event.event_id)
    return answer(200, event)


@api.post(
    "/events/<event_id>/signups",
    operation_id="submitSignup",
    summary="Submit a signup: recorded as PENDING, decided later in arrival order.",
    description=(
        "signup_id is the idempotency key: the same body again answers 202 again, even once "
        "decided; another body for the same signup_id answers 409. A CLOSED event still "
        "takes submissions; they are rejected with event_closed."
    ),
    responses={
        202: _ok("Recorded; poll the Location for the decision.", located=True),
        404: _NO_EVENT,
        409: _error("This signup_id was submitted with another body (error: signup_conflict)."),
        **_COMMON,
    },
)
def submit_signup(
    event_id: inputs.EventId, body: inputs.SignupCreate, store: Store, caller: Caller, count: Count
) -> Response[views.SignupAccepted]:
    submitted = usecases.submit_signup(
        store,
        event_id,
        body.signup_id,
        body.seats,
        inputs.given(body, "attributes"),
        retention_days=intake_retention_days(),
        owner=caller.identity,
    )
    count("SignupSubmitted" if submitted.created else "SignupResubmitted")
    # Never the signup id itself, nor its attributes: both may be personal data.
    signup_id = submitted.body.signup_id
    logger.info(
        "signup submitted",
        event_id=event_id,
        signup_ref=signup_ref(event_id, signup_id),
        new=submitted.created,
    )
    return answer(202, submitted.body, {"Location": _location(event_id, signup_id)})


@api.get(
    "/events/<event_id>/signups",
    operation_id="listSignups",
    summary="A page of an event's signups in signup_id order, optionally by status.",
    description=(
        "PENDING: recorded, not decided yet. Pass the answer's `next` back as `?next=` (with "
        "the same status) for the following page; `next` is null on the last one. A page may "
        "hold fewer than `limit` signups (even none) and still have a `next`. Reads the "
        "event's partition of the main table (ACCEPTED, REJECTED) or of both main and intake "
        "(PENDING, no status). A sharded event's signups come shard by shard, each shard's "
        "in signup_id order (its partitions are read one after another)."
    ),
    responses={200: _ok("A page of signups."), 404: _NO_EVENT, 403: _NOT_THEIRS, **_COMMON},
)
def list_signups(
    event_id: inputs.EventId,
    store: Store,
    caller: Caller,
    status: inputs.StatusFilter = None,  # type: ignore[assignment]
    limit: inputs.Limit = usecases.DEFAULT_PAGE_SIZE,
    next: inputs.Next = None,  # type: ignore[assignment]
) -> Response[views.SignupList]:
    page = usecases.list_signups(store, event_id, status, limit, next or None, caller)
    return answer(200, page)


@api.get(
    "/events/<event_id>/signups/<signup_id>",
    operation_id="getSignup",
    summary=(
        "A signup's status (PENDING, HELD, ACCEPTED, WAITLISTED, REJECTED, CANCELLED or "
        "EXPIRED), read consistently."
    ),
    description=(
        "Answers at once. To wait for the decision, read "
        "`/events/{event_id}/signups/{signup_id}/decision` instead (a `wait` parameter here "
        "answers 400)."
    ),
    responses={200: _ok("The signup."), 404: _NO_SIGNUP, **_COMMON},
)
def get_signup(
    event_id: inputs.EventId,
    signup_id: inputs.SignupId,
    store: Store,
    caller: Caller,
    request: Request,
) -> Response[views.Signup]:
    if "wait" in (request.query_parameters or {}):
        # A wait here would hold an instance of the API function: the waiter's route waits.
        raise invalid(
            "wait is not read here: GET /events/{event_id}/signups/{signup_id}/decision"
            f"?wait=S (0 < S <= {MAX_WAIT_S}) waits for the decision"
        )
    return answer(200, usecases.signup_status(store, event_id, signup_id, caller))


@waiting.get(
    "/events/<event_id>/signups/<signup_id>/decision",
    operation_id="awaitSignupDecision",
    summary="A signup's status, once decided: waits while it is PENDING.",
    description=(
        "Answers as soon as the signup is decided, or after `wait` seconds (default and "
        f"most: {MAX_WAIT_S}) with its status then (PENDING): one request instead of many "
        "polls. Served by a function of its own with a capped concurrency and its own rate "
        "limit, so waits never take the instances the other routes need; when those are all "
        "busy the request fails (500, or 429 over the rate limit): read the status route "
        "instead, or wait again after a pause."
    ),
    responses={200: _ok("The signup."), 404: _NO_SIGNUP, **_COMMON},
)
def await_signup_decision(
    event_id: inputs.EventId,
    signup_id: inputs.SignupId,
    store: Store,
    caller: Caller,
    left: SecondsLeft,
    wait: inputs.Wait = float(MAX_WAIT_S),
) -> Response[views.Signup]:
    if left is not None:
        wait = max(0.0, min(wait, left - WAIT_MARGIN_S))
    return answer(200, usecases.await_decision(store, event_id, signup_id, wait, caller=caller))


def _request_route(kind: str, summary: str, description: str) -> dict[str, Any]:
    """The decorator's arguments of ``POST .../signups/{signup_id}/confirm`` (or
    ``/cancel``)."""
    return {
        "rule": f"/events/<event_id>/signups/<signup_id>/{kind}",
        "operation_id": f"{kind}Signup",
        "summary": summary,
        "description": description
        + (
            " Recorded on the signup's intake record and applied by the stream processor, "
            "which judges it again (a request recorded a moment before a hold lapses is "
            "refused there: the signup's `last_refusal` says so); poll the Location for the "
            "outcome. No body is read."
        ),
        "responses": {
            202: _ok("Recorded; poll the Location.", located=True),
            404: _NO_SIGNUP,
            409: _error(
                "The signup's current status does not allow it (error: request_refused); "
                "nothing recorded. The answer carries the status.",
                views.RequestRefused,
            ),
            **_COMMON,
        },
    }


def _ask(
    kind: str,
    event_id: str,
    signup_id: str,
    store: SignupStore,
    caller: usecases.Caller,
    count: Any,
) -> Response[Any]:
    recorded = usecases.request_signup(store, event_id, signup_id, kind, caller=caller)
    count("ConfirmRequested" if kind == RequestKind.CONFIRM else "CancelRequested")
    logger.info(f"{kind} recorded", event_id=event_id, signup_ref=signup_ref(event_id, signup_id))
    return answer(202, recorded, {"Location": _location(event_id, signup_id)})


@api.post(
    **_request_route(
        RequestKind.CONFIRM,
        "Confirm a HELD signup before its hold expires: it becomes ACCEPTED.",
        "Only a HELD signup whose hold_expires_at is still ahead may be confirmed; any other "
        "answers 409 request_refused with its status.",
    )
)
def confirm_signup(
    event_id: inputs.EventId, signup_id: inputs.SignupId, store: Store, caller: Caller, count: Count
) -> Response[views.RequestRecorded]:
    return _ask(RequestKind.CONFIRM, event_id, signup_id, store, caller, count)


@api.post(
    **_request_route(
        RequestKind.CANCEL,
        "Cancel a HELD, ACCEPTED or WAITLISTED signup: its seats go to the next in line.",
        "Any other status (PENDING, REJECTED, CANCELLED, EXPIRED) answers 409 request_refused "
        "with its status.",
    )
)
def cancel_signup(
    event_id: inputs.EventId, signup_id: inputs.SignupId, store: Store, caller: Caller, count: Count
) -> Response[views.RequestRecorded]:
    return _ask(RequestKind.CANCEL, event_id, signup_id, store, caller, count)


@api.get(
    "/openapi.json",
    operation_id="getOpenApiDocument",
    summary="This document.",
    responses={200: _ok("The OpenAPI document."), 413: _TOO_LARGE},
)
def get_openapi_document(document: Document) -> Response[dict[str, Any]]:
    return answer(200, document)


#: Every route, in order of definition.
ROUTES: tuple[Route, ...] = tuple(_LISTED)
#: The routes the waiter function serves (``Route.waits``); the API function the rest.
WAITING_ROUTES: tuple[Route, ...] = tuple(route for route in ROUTES if route.waits)


def waits(method: str, path: str) -> bool:
    """Whether a request (its method and raw path) is one the waiter function serves."""
    return any(route.method == method and route.matcher.match(path) for route in WAITING_ROUTES)


#: What ``GET /`` answers: where the document is, and every route.
INDEX = views.Index(
    service="turnstile",
    openapi="/openapi.json",
    routes=[f"{route.method} {route.path}" for route in ROUTES],
)

"""The HTTP API: one Powertools ``APIGatewayHttpResolver`` with request validation.

It runs unchanged behind API Gateway (HTTP API, payload format 2.0) on AWS and behind the
local ``ApiServer``. The routes (``routes``) are Powertools decorators whose signatures
name their request models (``inputs``) and their answers' views
(``turnstile.service.views``); Powertools validates each request against them, and the
OpenAPI document served at ``GET /openapi.json`` is generated from them (``openapi``), so
it cannot drift from what is served. ``ROUTES`` lists them: the index, the 405 answers and
the stack's routes are all built from it.

Errors are always JSON ``{"error": CODE, "message": TEXT}`` (``errors``); nothing a client
sends yields a 5xx (a 503 means DynamoDB is throttling or down: retry after
``Retry-After``). Every JSON body ends with a newline.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.metrics import Metrics, MetricUnit

from turnstile.base.contract import MAX_ATTRIBUTES_BYTES
from turnstile.engine.rules import MAX_ATTRIBUTES_DEPTH, MAX_CAPACITY
from turnstile.storage.store import SignupStore
from turnstile.web import errors, openapi
from turnstile.web import routes as operations
from turnstile.web.body import JsonBodyValidation
from turnstile.web.callers import caller_identity, caller_of, events_quota
from turnstile.web.edge import (
    CORS_ALLOW_HEADERS,
    CORS_EXPOSE_HEADERS,
    CORS_MAX_AGE_S,
    LOCAL_OPERATOR,
    MAX_BODY_BYTES,
    MAX_WAIT_S,
    RETRY_AFTER_S,
    SERVICE,
    WAIT_MARGIN_S,
)
from turnstile.web.errors import RequestError
from turnstile.web.routes import INDEX, ROUTES, WAITING_ROUTES, Route, waits

__all__ = [
    "CORS_ALLOW_HEADERS",
    "CORS_EXPOSE_HEADERS",
    "CORS_MAX_AGE_S",
    "INDEX",
    "LOCAL_OPERATOR",
    "MAX_ATTRIBUTES_BYTES",
    "MAX_ATTRIBUTES_DEPTH",
    "MAX_BODY_BYTES",
    "MAX_CAPACITY",
    "MAX_WAIT_S",
    "RETRY_AFTER_S",
    "ROUTES",
    "SERVICE",
    "WAITING_ROUTES",
    "WAIT_MARGIN_S",
    "RequestError",
    "Route",
    "caller_identity",
    "caller_of",
    "create_app",
    "events_quota",
    "openapi_document",
    "waits",
]


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
    served = tuple(routes)
    app = APIGatewayHttpResolver(enable_validation=True, serializer=errors.dumps)
    # Powertools' request validation, reading every body as JSON by the API's rules, after
    # the size limit (turnstile.web.body). Powertools builds each route's middlewares from
    # this attribute on the route's first request.
    app._request_validation_middleware = JsonBodyValidation()  # type: ignore[attr-defined]
    openapi.describe(app)

    for router in (operations.api, operations.waiting):
        listed = [route for route in ROUTES if route.waits == router.waits]
        if any(route in served for route in listed):
            if not all(route in served for route in listed):
                raise ValueError("a router's routes are served all together or not at all")
            app.include_router(router)

    def count(name: str) -> None:
        if metrics is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)

    def seconds_left() -> float | None:
        remaining = getattr(app.lambda_context, "get_remaining_time_in_millis", None)
        return remaining() / 1000 if callable(remaining) else None

    app.dependency_overrides.update(
        {
            operations.store: store,
            operations.counter: lambda: count,
            operations.seconds_left: seconds_left,
            operations.openapi_document: openapi_document,
        }
    )

    @app.not_found
    def no_route(_: Exception) -> Response[Any]:
        method = app.current_event.http_method.upper()
        path = app.current_event.path
        allowed = sorted({r.method for r in served if r.matcher.match(path)})
        if method in allowed:
            # The shape fits but a segment holds characters no id may contain.
            return errors.error_answer(400, "invalid_request", "a path segment is not a valid id")
        if allowed:
            return errors.error_answer(
                405,
                "method_not_allowed",
                f"{method} is not allowed here; use {', '.join(allowed)}",
                {"Allow": ", ".join(allowed)},
            )
        return errors.error_answer(404, "not_found", f"no route for {method} {path}")

    errors.install(app, count)
    return app


def _no_store() -> SignupStore:
    raise LookupError("the document's application reads no store")


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of every route, generated once (``openapi.document``)."""
    return openapi.document(create_app(store=_no_store))


def __getattr__(name: str) -> Any:
    # ``OPENAPI`` is generated on first use, not at import: the functions' cold start
    # does not pay for it.
    if name == "OPENAPI":
        return openapi_document()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":  # python -m turnstile.web.api > docs/openapi.json
    print(json.dumps(openapi_document(), indent=2, sort_keys=True))

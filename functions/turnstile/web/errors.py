"""The API's answers on the wire, and its error answers.

Errors are always JSON ``{"error": CODE, "message": TEXT}`` (``views.Error``; a refused
confirm or cancel, ``views.RequestRefused``, says more); nothing a client sends yields a
5xx (a 503 means DynamoDB is throttling or down: retry after ``Retry-After``). Every JSON
body ends with a newline. A request Powertools' validation refuses is a 400
``invalid_request`` naming the field and its rule, not Powertools' own 422.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

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
from turnstile.service import views
from turnstile.web import inputs
from turnstile.web.edge import JSON, RETRY_AFTER_S, SERVICE

__all__ = [
    "DOMAIN_ERRORS",
    "RequestError",
    "answer",
    "dumps",
    "error_answer",
    "install",
    "invalid",
]

logger = Logger(service=SERVICE, child=True)


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


def invalid(message: str) -> RequestError:
    return RequestError(400, "invalid_request", message)


def dumps(value: Any) -> str:
    """The resolver's serializer: compact JSON (a view as its JSON fields), ending with a
    newline (``curl`` output ends its line, and JSON parsers do not mind)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n"


def answer(status: int, view: Any, headers: Mapping[str, str] | None = None) -> Response[Any]:
    """A JSON answer of ``view`` (a view, or any JSON value)."""
    return Response(status_code=status, content_type=JSON, body=view, headers=dict(headers or {}))


def error_answer(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> Response[Any]:
    return answer(status, views.Error(error=code, message=message), headers)


#: The domain's errors, each answered ``{"error": code, "message": str(exc)}`` with its
#: status (the ones with a body of their own have handlers in ``install``).
DOMAIN_ERRORS: Mapping[type[Exception], tuple[int, str]] = {
    InvalidRequestError: (400, "invalid_request"),
    EventNotFoundError: (404, "event_not_found"),
    EventQuotaError: (403, "event_quota_exceeded"),
    ForbiddenError: (403, "forbidden"),
    SignupNotFoundError: (404, "signup_not_found"),
    CapacityBelowTakenError: (400, "capacity_below_taken"),
    EventExistsError: (409, "event_exists"),
    SignupConflictError: (409, "signup_conflict"),
}


def _answering(status: int, code: str) -> Callable[[Exception], Response[Any]]:
    def answering(exc: Exception) -> Response[Any]:
        return error_answer(status, code, str(exc))

    return answering


def _internal() -> Response[Any]:
    return error_answer(500, "internal_error", "the request failed on the server")


def install(app: APIGatewayHttpResolver, count: Callable[[str], None]) -> None:
    """Give ``app`` the API's error answers (``count`` counts the refusals and outages)."""

    @app.exception_handler(RequestError)
    def request_error(exc: RequestError) -> Response[Any]:
        return error_answer(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    def not_valid(exc: RequestValidationError) -> Response[Any]:
        errors = exc.errors()
        if any(tuple(e.get("loc") or ())[:1] == ("response",) for e in errors):
            # An answer that does not fit its own view: ours to fix, not the caller's.
            # (Where, and which rule; never the values, which may be personal data.)
            logger.error(
                "answer does not fit its view",
                errors=[{"loc": e.get("loc"), "type": e.get("type")} for e in errors],
            )
            return _internal()
        return error_answer(400, "invalid_request", inputs.problem(errors))

    for error, (status, code) in DOMAIN_ERRORS.items():
        app.exception_handler(error)(_answering(status, code))

    @app.exception_handler(RequestRefusedError)
    def request_refused(exc: RequestRefusedError) -> Response[Any]:
        count("RequestRefused")
        body = views.RequestRefused(
            error="request_refused",
            message=str(exc),
            event_id=exc.event_id,
            signup_id=exc.signup_id,
            request=exc.request,
            status=exc.status,
            hold_expires_at=exc.hold_expires_at,
            reason=exc.reason,
        )
        return answer(409, body)

    @app.exception_handler([StoreUnavailableError, BotoCoreError])
    def unavailable(exc: Exception) -> Response[Any]:
        # Throttled past the store's retries, or DynamoDB unreachable: transient.
        count("StoreUnavailable")
        logger.warning("store unavailable", error=str(exc))
        return error_answer(
            503,
            "unavailable",
            "the store is busy or unreachable; retry later",
            {"Retry-After": str(RETRY_AFTER_S)},
        )

    @app.exception_handler([ClientError, Exception])
    def internal(exc: Exception) -> Response[Any]:
        logger.exception("request failed")
        return _internal()

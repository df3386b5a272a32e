"""Request bodies: the size limit, and JSON read by the API's own rules.

Powertools' request validation parses the body by its Content-Type (a form for
``application/x-www-form-urlencoded``, which ``curl -d`` sends) with ``json.loads``. The API
reads every body as JSON, whatever it is labelled, and more strictly: a key given twice is
refused (which of the two would count is a guess), fractions and huge integers stay exact
(``Decimal``: DynamoDB takes no floats, and 2.0 must stay distinguishable from 2), NaN and
Infinity are no numbers. ``JsonBodyValidation`` is Powertools' validation middleware with
that parser, after the size check: it runs first on every request, an unknown route's too.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from aws_lambda_powertools.event_handler.middlewares.openapi_validation import (
    OpenAPIRequestValidationMiddleware,
)

from turnstile.web.edge import MAX_BODY_BYTES
from turnstile.web.errors import RequestError, invalid

__all__ = ["JsonBodyValidation", "check_body_size", "json_object"]

#: JSON numbers with more digits than this are parsed as Decimal: Python refuses to turn
#: text of over 4,300 digits into an int, and every rule refuses such a number anyway.
_MAX_INT_DIGITS = 4000


def _raw_body(event: Mapping[str, Any]) -> bytes:
    """The request body as bytes; 400 if it is not valid base64 where it says it is."""
    body = event.get("body")
    if not body:
        return b""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise invalid("body is not valid base64") from exc
    try:
        return str(body).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise invalid("body is not valid UTF-8") from exc


def check_body_size(event: Mapping[str, Any]) -> None:
    """413 past ``MAX_BODY_BYTES`` (400 for a body that is not the base64 it claims to be)."""
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


def json_object(event: Mapping[str, Any]) -> dict[str, Any]:
    """The body as a JSON object; fractions parse as Decimal. Which keys it may have is
    the request model's to say (an unknown one is refused there, by name)."""
    raw = _raw_body(event)
    if not raw.strip():
        raise invalid("body must be a JSON object")
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
        raise invalid(f"body has the key {shown} more than once") from exc
    except RecursionError as exc:
        raise invalid("body is nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, NaN, Infinity
        raise invalid(f"body is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise invalid("body must be a JSON object")
    return value


class JsonBodyValidation(OpenAPIRequestValidationMiddleware):
    """Powertools' request validation (path, query and body against the route's models),
    after the size limit, reading the body with ``json_object`` whatever its Content-Type.

    Powertools lets an application choose the JSON parser (``json_body_deserializer``) but
    not that every body is JSON, nor run anything before its validation: this subclass, put
    in place of its own middleware, is the one way to have both."""

    def handler(self, app: Any, next_middleware: Any) -> Any:
        check_body_size(app.current_event.raw_event)
        return super().handler(app, next_middleware)

    def _get_body(self, app: Any) -> dict[str, Any]:
        return json_object(app.current_event.raw_event)

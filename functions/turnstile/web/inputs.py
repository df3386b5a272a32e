"""What a request may carry: the bodies' models, the path and query parameters, each with
its rule, and the sentence a 400 answers when one is broken.

Powertools validates a request against these before any route runs (the routes' signatures
name them), and the OpenAPI document is generated from them. The sentences are the service
layer's own (``usecases``, ``rules``), so the API and ``turnstile`` refuse the same input
with the same words. The rules the models cannot state (an attributes map's size and
depth, an event's lineup bound, a page token's check value) stay with the use cases, which
apply every rule again whoever calls them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from turnstile.base.contract import (
    ID_PATTERN,
    MAX_ATTRIBUTES_BYTES,
    MAX_HOLD_SECONDS,
    MAX_LINEUP_ENTRIES,
    MAX_SHARDS,
)
from turnstile.engine.rules import (
    MAX_ATTRIBUTES_DEPTH,
    MAX_CAPACITY,
    MAX_SEATS,
    attributes_problem,
    id_problem,
)
from turnstile.service import usecases, views
from turnstile.web.edge import MAX_WAIT_S

__all__ = [
    "WAIT_RULE",
    "EventCreate",
    "EventId",
    "EventUpdate",
    "Limit",
    "Next",
    "SignupCreate",
    "SignupId",
    "StatusFilter",
    "Wait",
    "given",
    "problem",
]

#: What ``?wait=`` must be, as its refusal says it.
WAIT_RULE = f"wait must be a number of seconds above 0 and at most {MAX_WAIT_S}"

_DIGITS = re.compile(r"^\d{1,9}$")
_SECONDS = re.compile(r"^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$")


def _unquoted(value: Any) -> Any:
    """A path segment as the id it spells: ``a%40b`` is ``a@b``."""
    return unquote(value) if isinstance(value, str) else value


def _whole_number(value: Any) -> Any:
    """Digits only (no sign, no spaces, no ``1_0``), as an int; anything else as it came,
    for the rule to refuse."""
    return int(value) if isinstance(value, str) and _DIGITS.match(value) else value


def _seconds(value: Any) -> Any:
    """A plain decimal number of seconds (``5``, ``0.5``, ``1e1``: no ``nan``, ``inf``,
    ``0x10`` nor ``1,2``), as a float; anything else refused."""
    if isinstance(value, str) and _SECONDS.match(value):
        return float(value)
    raise ValueError(WAIT_RULE)


# -- path parameters ---------------------------------------------------------------------
# (Each parameter's Field before its BeforeValidator: the other way round, pydantic leaves
# the Field's rules out of the parameter's JSON schema.)

EventId = Annotated[
    str,
    Field(pattern=ID_PATTERN.pattern, min_length=1, max_length=128),
    BeforeValidator(_unquoted),
    Path(openapi_examples={"concert": {"value": "concert-2026"}}),
]
SignupId = Annotated[
    str,
    Field(pattern=ID_PATTERN.pattern, min_length=1, max_length=128),
    BeforeValidator(_unquoted),
    Path(openapi_examples={"user": {"value": "user-42"}}),
]

# -- query parameters --------------------------------------------------------------------

Limit = Annotated[
    int,
    Field(strict=True, ge=1, le=usecases.MAX_PAGE_SIZE),
    BeforeValidator(_whole_number),
    Query(description="Most items on the page."),
]
Next = Annotated[
    str,
    Query(
        description=(
            "The `next` of the previous page, as it was given (opaque; a changed one, or "
            "one of another listing, answers 400)."
        ),
    ),
]
StatusFilter = Annotated[
    views.StatusName,
    Query(description="Only signups in this status (default: all)."),
]
Wait = Annotated[
    float,
    Field(gt=0, le=MAX_WAIT_S),
    BeforeValidator(_seconds),
    Query(
        description=(
            "Seconds to wait for a decision before answering PENDING "
            f"(above 0, at most {MAX_WAIT_S}; default {MAX_WAIT_S})."
        ),
    ),
]

# -- bodies ------------------------------------------------------------------------------


def _no_default(schema: dict[str, Any]) -> None:
    """An optional field that has no value when left out: no ``default`` in its schema."""
    schema.pop("default", None)


class _Body(BaseModel):
    # Strict: 2.0, "3" and true are no integers, 7 is no id; unknown fields are refused
    # (a misspelt "seats" would otherwise silently mean 1 seat).
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class EventCreate(_Body):
    model_config = ConfigDict(
        json_schema_extra={
            "description": (
                f"A new event. With holds (hold_seconds above 0), capacity + waitlist is at "
                f"most {MAX_LINEUP_ENTRIES} (400 otherwise): the event keeps every hold "
                "and every waiting signup."
            ),
            "examples": [{"event_id": "concert-2026", "capacity": 100}],
        },
    )

    event_id: views.Id
    capacity: int = Field(ge=0, le=MAX_CAPACITY)
    waitlist: int = Field(
        0,
        ge=0,
        le=MAX_LINEUP_ENTRIES,
        description="How many signups may wait for seats at once (0: none).",
    )
    hold_seconds: int = Field(
        0,
        ge=0,
        le=MAX_HOLD_SECONDS,
        description=(
            "Seconds a granted signup holds its seats (HELD) until confirmed; 0: granted "
            "signups are ACCEPTED at once."
        ),
    )
    max_seats: int = Field(
        None,  # type: ignore[assignment]  # left out: no limit (null is refused)
        ge=1,
        le=MAX_SEATS,
        description="The most seats one signup may ask for (default: no limit but the capacity).",
        json_schema_extra=_no_default,
    )
    shards: int = Field(
        1,
        ge=1,
        le=MAX_SHARDS,
        description=(
            "Shards to spread a hot event's signups over (1: none, the default). Each "
            "signup is kept and decided in one shard, fixed by its id; callers name the "
            "event by its own id as ever. A sharded event's waitlist is one bound over "
            "its shards; each shard keeps its own line."
        ),
    )


class EventUpdate(_Body):
    """An event's new capacity."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"capacity": 150}]})

    capacity: int = Field(ge=0, le=MAX_CAPACITY)


class SignupCreate(_Body):
    """A signup."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"signup_id": "user-42", "seats": 2, "attributes": {"name": "Ada"}}]
        },
    )

    signup_id: views.Id
    seats: int = Field(1, ge=1, le=MAX_SEATS)
    attributes: dict[str, Any] = Field(
        None,  # type: ignore[assignment]  # left out: none (null is refused)
        description=(
            f"The producer's own data, copied onto the decision. Limits beyond this "
            f"schema: at most {MAX_ATTRIBUTES_BYTES} bytes by DynamoDB's item-size rules "
            "(strings their UTF-8 bytes, numbers about one byte per two significant digits "
            "plus one, null and booleans one, maps and lists 3 bytes plus one per element, "
            f"plus each name's bytes), nested at most {MAX_ATTRIBUTES_DEPTH} levels, no "
            "empty names, numbers DynamoDB can hold (38 significant digits, magnitude "
            "1e-130 to under 1e126, or 0). Past them: 400. The stream processor applies "
            "the same rules, so a 202 is never rejected later as invalid_request."
        ),
        json_schema_extra=_no_default,
    )


def given(body: BaseModel, name: str) -> Any:
    """A body field as the use cases take it: ``usecases.ABSENT`` when it was left out."""
    return getattr(body, name) if name in body.model_fields_set else usecases.ABSENT


# -- refusals ----------------------------------------------------------------------------


def _integer(name: str, low: int, high: int) -> Callable[[Any], str]:
    return lambda _: usecases.integer_rule(name, low, high)


def _id(name: str) -> Callable[[Any], str]:
    # The domain's sentence for an id (None is never one).
    return lambda _: str(id_problem(None, name))


def _attributes(value: Any) -> str:
    return usecases.ATTRIBUTES_RULE if value is None else attributes_problem(value) or ""


#: Each field's refusal, from the value that broke its rule.
RULES: Mapping[str, Callable[[Any], str]] = {
    "event_id": _id("event_id"),
    "signup_id": _id("signup_id"),
    "capacity": _integer("capacity", 0, MAX_CAPACITY),
    "waitlist": _integer("waitlist", 0, MAX_LINEUP_ENTRIES),
    "hold_seconds": _integer("hold_seconds", 0, MAX_HOLD_SECONDS),
    "max_seats": _integer("max_seats", 1, MAX_SEATS),
    "shards": _integer("shards", 1, MAX_SHARDS),
    "seats": _integer("seats", 1, MAX_SEATS),
    "attributes": _attributes,
    "limit": _integer("limit", 1, usecases.MAX_PAGE_SIZE),
    "status": lambda _: usecases.STATUS_RULE,
    "wait": lambda _: WAIT_RULE,
}


def problem(errors: Sequence[Mapping[str, Any]]) -> str:
    """The one sentence a 400 answers for Powertools' validation errors (``loc`` is
    ``("body", field)``, ``("query", name)`` or ``("path", name)``): the unknown fields if
    there are any, else each broken field's rule, in the request's order."""
    unknown = sorted(str(e["loc"][-1]) for e in errors if e.get("type") == "extra_forbidden")
    if unknown:
        return f"unknown field(s): {', '.join(unknown)}"
    sentences: list[str] = []
    for error in errors:
        loc = tuple(error.get("loc") or ())
        name = str(loc[1]) if len(loc) > 1 else ""
        if not name:
            sentence = "body must be a JSON object"
        elif error.get("type") == "missing":
            sentence = f"{name} is required"
        elif name in RULES:
            sentence = RULES[name](error.get("input"))
        else:
            sentence = f"{name} is not valid"
        if sentence not in sentences:
            sentences.append(sentence)
    return "; ".join(sentences)

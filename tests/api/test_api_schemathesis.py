"""Schemathesis against the live local API, driven by the document it serves at /openapi.json.

Valid and invalid requests generated from the document must never get a 5xx, and every
response must match the document (status code, headers, content type, body schema).

Cases come from ``as_strategy`` under a plain ``@given``: schemathesis' pytest
``from_fixture`` loader reads ``Node._nodeid``, which pytest 9.2 no longer has.

``attributes`` has limits JSON Schema cannot state (size, depth, non-empty names, the
numbers DynamoDB can hold); the document names them in prose, the API answers 400 past
them, and valid-mode cases are kept inside them so "valid must be accepted" still holds.
So has an event's lineup bound (with holds, ``capacity + waitlist`` at most
``MAX_LINEUP_ENTRIES``): valid-mode cases past it leave ``hold_seconds`` out.
So has a list's ``next``: only a token the API gave out is valid (the document says so),
so valid-mode cases leave it out. So has an integer: the
document is OpenAPI 3.1, whose JSON Schema counts ``2.0`` as an integer, and the API takes
only ``2`` (the document says so): valid-mode cases write a whole number as one. The
known signup is decided (rejected: no seat taken), so a generated ``?wait=`` on it answers
at once.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from tests.api.helpers import LiveApi, decide_pending
from turnstile.engine.rules import attributes_problem
from turnstile.storage.events import lineup_problem
from turnstile.web.api import ROUTES

KNOWN_EVENT = "concert-2026"
KNOWN_SIGNUP = "user-42"
#: Per operation and mode; small enough that the whole module stays well under a minute.
MAX_EXAMPLES = 15


def _whole(value: Any) -> Any:
    """A whole number a generator wrote with a fraction (``2.0``), as an integer (``2``)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def within_documented_limits(case: Any) -> Any:
    """The case, its whole numbers written as integers, without ``attributes`` where they
    break a limit the schema cannot state (checked by the API's own validator, on the
    attributes as the API parses them), and without a made-up page token."""
    if isinstance(case.body, dict):
        case.body = {k: v if k == "attributes" else _whole(v) for k, v in case.body.items()}
    if isinstance(case.query, dict):
        case.query = {k: _whole(v) for k, v in case.query.items()}
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("attributes"), dict):
        parsed = json.loads(json.dumps(body["attributes"]), parse_float=Decimal)
        if attributes_problem(parsed) is not None:
            case.body = {k: v for k, v in body.items() if k != "attributes"}
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("hold_seconds"), int):
        capacity, waitlist = body.get("capacity", 0), body.get("waitlist") or 0
        if lineup_problem(capacity, waitlist, body["hold_seconds"]) is not None:
            case.body = {k: v for k, v in body.items() if k != "hold_seconds"}
    if isinstance(case.query, dict) and "next" in case.query:
        case.query = {k: v for k, v in case.query.items() if k != "next"}
    return case


#: The longest a generated waiting read may wait: a generated id can name a signup another
#: generated request submitted (nothing decides it here), on which a wait lasts it all.
SHORT_WAIT_S = 0.2


def short_wait(case: Any) -> Any:
    """The case with a valid ``wait`` shortened to ``SHORT_WAIT_S`` (absent: the default,
    the longest), and an invalid one left as generated."""
    query = dict(case.query or {})
    try:
        valid = 0 < float(query.get("wait", 10)) <= 10
    except (TypeError, ValueError):
        valid = False
    if valid:
        query["wait"] = min(float(query.get("wait", 10)), SHORT_WAIT_S)
        case.query = query
    return case


@pytest.fixture(scope="module")
def api_schema(live_api: LiveApi) -> Any:
    # An existing event and signup, so generated requests reach the happy paths too.
    now = "2026-11-21T21:24:27.000000Z"
    # The known signup is decided (REJECTED: no seat taken, so any capacity stays valid).
    live_api.store.create_event(KNOWN_EVENT, 0, now=now)
    live_api.store.put_intake(KNOWN_EVENT, KNOWN_SIGNUP, 1, None, submitted_at=now)
    decide_pending(live_api.store, KNOWN_EVENT)
    live_api.store.update_capacity(KNOWN_EVENT, 100)
    return schemathesis.openapi.from_url(f"{live_api.url}/openapi.json")


@pytest.mark.parametrize(
    ("mode", "known_ids"),
    [
        (GenerationMode.POSITIVE, True),
        (GenerationMode.POSITIVE, False),
        (GenerationMode.NEGATIVE, False),
    ],
    ids=["valid-known-ids", "valid", "invalid"],
)
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_api_conforms_to_its_openapi_document(
    api_schema: Any, live_api: LiveApi, route: Any, mode: GenerationMode, known_ids: bool
) -> None:
    operation = api_schema[route.path][route.method]
    names = {p.name for p in operation.path_parameters}
    if known_ids and not names:
        pytest.skip("no path parameters to fix")
    if mode is GenerationMode.NEGATIVE and not (
        names or operation.body.items or operation.query.items
    ):
        pytest.skip("no input to make invalid")
    fixed = {"event_id": KNOWN_EVENT, "signup_id": KNOWN_SIGNUP} if known_ids else {}
    strategy = operation.as_strategy(
        generation_mode=mode, path_parameters={k: v for k, v in fixed.items() if k in names}
    )
    if mode is GenerationMode.POSITIVE:
        strategy = strategy.map(within_documented_limits)
    if route.waits:
        strategy = strategy.map(short_wait)

    @given(case=strategy)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def check(case: Any) -> None:
        case.call_and_validate(base_url=live_api.url)

    check()

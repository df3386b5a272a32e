"""Helpers of the HTTP API tests: v2 event factory, answers, a stand-in processor."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from tests.oracle import decide
from turnstile.storage.intake import parse_intake
from turnstile.storage.items import Decision
from turnstile.storage.store import SignupStore


def v2_event(
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    query: str = "",
    base64_body: bool = False,
    authorizer: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload 2.0) event as API Gateway sends it.

    ``body`` may be a dict/list (sent as JSON), a str or bytes (sent as they are);
    ``authorizer`` is the request context's (``{"iam": {...}}`` or ``{"jwt": {...}}``).
    """
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": {"content-type": "application/json", **(headers or {})},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api",
            "domainName": "api.execute-api.us-east-1.amazonaws.com",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "192.0.2.1",
                "userAgent": "pytest",
            },
            "requestId": "request-1",
            "routeKey": "$default",
            "stage": "$default",
            "time": "21/Nov/2026:21:24:27 +0000",
            "timeEpoch": 1795296267000,
        },
        "isBase64Encoded": False,
    }
    parameters: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        # API Gateway joins a repeated parameter's values with commas.
        parameters[key] = f"{parameters[key]},{value}" if key in parameters else value
    if parameters:
        event["queryStringParameters"] = parameters
    if authorizer is not None:
        event["requestContext"]["authorizer"] = authorizer
    if body is not None:
        raw = body if isinstance(body, str | bytes) else json.dumps(body)
        if base64_body:
            data = raw.encode() if isinstance(raw, str) else raw
            event["body"] = base64.b64encode(data).decode()
            event["isBase64Encoded"] = True
        else:
            event["body"] = raw.decode() if isinstance(raw, bytes) else raw
    return event


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any


Invoke = Callable[..., Answer]


@dataclass
class LiveApi:
    url: str
    moto_url: str
    store: SignupStore
    #: Every event the API's handlers were invoked with, in order.
    requests: list[dict[str, Any]] = field(default_factory=list)

    def requests_to(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["rawPath"] == path]


def decide_pending(
    store: SignupStore, event_id: str, decided_at: str = "2026-11-21T21:30:00Z"
) -> tuple[Decision, ...]:
    """Stand in for the stream processor: decide every undecided intake record of an event.

    Uses the store's own commit path (counters and journal, then decision items), so the
    API reads exactly what the real processor would leave behind.
    """
    intake = sorted(store.intake_items(event_id), key=lambda i: i["submitted_at"])
    requests = [parse_intake(item, f"{n:021d}") for n, item in enumerate(intake, start=1)]
    record = store.get_event(event_id)
    assert record is not None, "decide_pending needs an existing event"
    already = store.get_decisions(event_id, [r.signup_id for r in requests])
    outcome = decide(record.event, requests, already_decided=already)
    by_id = {r.signup_id: r for r in requests}
    journal = store.commit(record.event, outcome, decided_at, by_id)
    store.materialize(event_id, journal)
    return outcome.decisions

"""The HTTP API and the ``turnstile`` command answer the same inputs alike.

Each case runs twice on fresh tables of one embedded endpoint: once through the API's
Lambda handler, once through ``turnstile`` as a real subprocess. Both must reach the same
outcome (the API's 2xx is exit 0, its 4xx is exit 2 with the API's ``message`` as the one
line on stderr) and print the same JSON (times aside, which differ by when they ran).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.api.helpers import decide_pending, v2_event
from tests.helpers import put_decision
from turnstile.base.contract import ALL_TABLES, MAX_LINEUP_ENTRIES
from turnstile.handlers import api as api_handler
from turnstile.storage.dynamo import default_client
from turnstile.storage.store import SignupStore
from turnstile_tools.local.context import LocalLambdaContext

USER = "tester"
#: The API caller whose identity reads as the CLI's ``created_by`` (``cli:<user>``).
AUTHORIZER = {"jwt": {"claims": {"sub": f"cli:{USER}"}}}
TIMES = ("created_at", "submitted_at", "decided_at")


@dataclass(frozen=True)
class Op:
    """One operation, as an HTTP request and as a command line."""

    method: str
    path: str
    body: Any
    argv: tuple[str, ...]
    query: str = ""


def create(event_id: str, capacity: Any, **options: int) -> Op:
    body = {"event_id": event_id, "capacity": capacity, **options}
    argv = ["event", "create", event_id, "--capacity", str(capacity)]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return Op("POST", "/events", body, tuple(argv))


def request(kind: str, event_id: str, signup_id: str) -> Op:
    path = f"/events/{event_id}/signups/{signup_id}/{kind}"
    return Op("POST", path, None, (kind, event_id, signup_id))


def show(event_id: str) -> Op:
    return Op("GET", f"/events/{event_id}", None, ("event", "show", event_id))


def update(event_id: str, capacity: int) -> Op:
    argv = ("event", "update", event_id, "--capacity", str(capacity))
    return Op("PATCH", f"/events/{event_id}", {"capacity": capacity}, argv)


def close(event_id: str) -> Op:
    return Op("POST", f"/events/{event_id}/close", None, ("event", "close", event_id))


_LEFT_OUT: Any = object()


def submit(event_id: str, signup_id: str, seats: Any = _LEFT_OUT, attrs: Any = _LEFT_OUT) -> Op:
    body: dict[str, Any] = {"signup_id": signup_id}
    argv = ["submit", event_id, signup_id]
    if seats is not _LEFT_OUT:
        body["seats"] = seats
        argv += ["--seats", str(seats)]
    if attrs is not _LEFT_OUT:
        body["attributes"] = attrs
        argv += ["--attributes", json.dumps(attrs)]
    return Op("POST", f"/events/{event_id}/signups", body, tuple(argv))


def status(event_id: str, signup_id: str) -> Op:
    return Op(
        "GET", f"/events/{event_id}/signups/{signup_id}", None, ("status", event_id, signup_id)
    )


def list_events(limit: int | None = None) -> Op:
    argv = ("event", "list", *(("--limit", str(limit)) if limit else ()))
    return Op("GET", "/events", None, argv, f"limit={limit}" if limit else "")


def list_signups(event_id: str, status: str | None = None, limit: int | None = None) -> Op:
    argv = ["signups", "list", event_id]
    query = []
    if status:
        argv += ["--status", status]
        query.append(f"status={status}")
    if limit:
        argv += ["--limit", str(limit)]
        query.append(f"limit={limit}")
    return Op("GET", f"/events/{event_id}/signups", None, tuple(argv), "&".join(query))


Setup = Callable[[SignupStore], None]


def an_event(event_id: str = "gig", capacity: int = 2) -> Setup:
    return lambda store: store.create_event(
        event_id, capacity, "2026-11-21T21:00:00Z", created_by=f"cli:{USER}"
    )


#: Who the setup's signups belong to: the caller of both runs (the API's caller reads as
#: the CLI's ``cli:<user>``), so a resubmission is the owner's own.
SETUP_OWNER = {"owner": f"cli:{USER}"}


def signed_up(signup_id: str, seats: int = 1, event_id: str = "gig") -> Setup:
    return lambda store: store.put_intake(
        event_id,
        signup_id,
        seats,
        {"name": "Ada"},
        submitted_at="2026-11-21T21:01:00Z",
        owner=SETUP_OWNER["owner"],
    )[1]


def decided(event_id: str = "gig") -> Setup:
    return lambda store: decide_pending(store, event_id) and None


def a_decision(signup_id: str, status: str, **fields: Any) -> Setup:
    """A decision item as the lifecycle's processor writes it (HELD, WAITLISTED ...)."""
    return lambda store: put_decision(store.client, "gig", signup_id, status, **fields) and None


#: gig (holds): h HELD until much later, late HELD until long ago, a ACCEPTED, p PENDING.
HELD_AND_OTHERS: tuple[Setup, ...] = (
    lambda store: (
        store.create_event(
            "gig", 5, "2026-11-21T21:00:00Z", created_by=f"cli:{USER}", hold_seconds=60
        )
        and None
    ),
    signed_up("h"),
    signed_up("late"),
    signed_up("a"),
    signed_up("p"),
    a_decision("h", "HELD", position=1, hold_expires_at="2999-01-01T00:00:00.000000Z"),
    a_decision("late", "HELD", position=2, hold_expires_at="2000-01-01T00:00:00.000000Z"),
    a_decision("a", "ACCEPTED", position=3),
)


#: gig (1 seat): u1 accepted, u2 rejected, u3 pending.
DECIDED_AND_PENDING: tuple[Setup, ...] = (
    an_event("gig", 1),
    signed_up("u1"),
    signed_up("u2"),
    decided(),
    signed_up("u3"),
)

# (case id, setup, operation, API status, API error code or None)
CASES: list[tuple[str, tuple[Setup, ...], Op, int, str | None]] = [
    ("create", (), create("gig", 2), 201, None),
    ("create-twice-same", (an_event("gig", 2),), create("gig", 2), 200, None),
    ("create-twice-other", (an_event("gig", 2),), create("gig", 3), 409, "event_exists"),
    ("capacity-too-large", (), create("gig", 2**53), 400, "invalid_request"),
    ("capacity-huge", (), create("gig", 10**20), 400, "invalid_request"),
    ("bad-event-id", (), create("bad id", 2), 400, "invalid_request"),
    (
        "create-with-options",
        (),
        create("gig", 10, waitlist=5, hold_seconds=300, max_seats=2),
        201,
        None,
    ),
    (
        "create-past-the-lineup-bound",
        (),
        create("gig", MAX_LINEUP_ENTRIES, waitlist=1, hold_seconds=60),
        400,
        "invalid_request",
    ),
    (
        "create-waitlist-too-long",
        (),
        create("gig", 1, waitlist=MAX_LINEUP_ENTRIES + 1),
        400,
        "invalid_request",
    ),
    ("create-max-seats-zero", (), create("gig", 1, max_seats=0), 400, "invalid_request"),
    (
        "create-twice-other-options",
        (an_event("gig", 2),),
        create("gig", 2, waitlist=3),
        409,
        "event_exists",
    ),
    (
        "update-past-the-lineup-bound",
        HELD_AND_OTHERS,
        update("gig", MAX_LINEUP_ENTRIES + 1),
        400,
        "invalid_request",
    ),
    ("confirm", HELD_AND_OTHERS, request("confirm", "gig", "h"), 202, None),
    (
        "confirm-too-late",
        HELD_AND_OTHERS,
        request("confirm", "gig", "late"),
        409,
        "request_refused",
    ),
    ("confirm-accepted", HELD_AND_OTHERS, request("confirm", "gig", "a"), 409, "request_refused"),
    ("confirm-unknown", HELD_AND_OTHERS, request("confirm", "gig", "x"), 404, "signup_not_found"),
    ("cancel", HELD_AND_OTHERS, request("cancel", "gig", "a"), 202, None),
    ("cancel-pending", HELD_AND_OTHERS, request("cancel", "gig", "p"), 409, "request_refused"),
    ("cancel-bad-id", HELD_AND_OTHERS, request("cancel", "gig", "a b"), 400, "invalid_request"),
    ("status-held", HELD_AND_OTHERS, status("gig", "h"), 200, None),
    ("show", (an_event(),), show("gig"), 200, None),
    ("show-unknown", (), show("nope"), 404, "event_not_found"),
    ("update", (an_event(),), update("gig", 5), 200, None),
    (
        "update-below-taken",
        (an_event("gig", 2), signed_up("u1", 2), decided()),
        update("gig", 1),
        400,
        "capacity_below_taken",
    ),
    ("close", (an_event(),), close("gig"), 200, None),
    ("close-again", (an_event(), lambda s: s.close_event("gig")), close("gig"), 200, None),
    ("close-unknown", (), close("nope"), 404, "event_not_found"),
    ("submit", (an_event(),), submit("gig", "u1", 2, {"name": "Ada", "n": 1.5}), 202, None),
    ("submit-default-seats", (an_event(),), submit("gig", "u1"), 202, None),
    ("submit-unknown-event", (), submit("nope", "u1"), 404, "event_not_found"),
    (
        "submit-too-many-seats",
        (an_event(),),
        submit("gig", "u1", 1_000_001),
        400,
        "invalid_request",
    ),
    ("submit-no-seats", (an_event(),), submit("gig", "u1", 0), 400, "invalid_request"),
    ("submit-attributes-list", (an_event(),), submit("gig", "u1", 1, [1]), 400, "invalid_request"),
    ("submit-attributes-null", (an_event(),), submit("gig", "u1", 1, None), 400, "invalid_request"),
    ("submit-empty-name", (an_event(),), submit("gig", "u1", 1, {"": 1}), 400, "invalid_request"),
    ("submit-bad-signup-id", (an_event(),), submit("gig", "u 1"), 400, "invalid_request"),
    (
        "resubmit-same",
        (an_event(), signed_up("u1")),
        submit("gig", "u1", 1, {"name": "Ada"}),
        202,
        None,
    ),
    (
        "resubmit-other",
        (an_event(), signed_up("u1")),
        submit("gig", "u1", 2),
        409,
        "signup_conflict",
    ),
    ("status-pending", (an_event(), signed_up("u1")), status("gig", "u1"), 200, None),
    (
        "status-accepted",
        (an_event("gig", 2), signed_up("u1", 2), decided()),
        status("gig", "u1"),
        200,
        None,
    ),
    (
        "status-rejected",
        (an_event("gig", 1), signed_up("u1", 2), decided()),
        status("gig", "u1"),
        200,
        None,
    ),
    ("status-unknown-signup", (an_event(),), status("gig", "ghost"), 404, "signup_not_found"),
    ("list-events", (an_event("gig"), an_event("fest")), list_events(), 200, None),
    ("list-events-page", (an_event("gig"), an_event("fest")), list_events(1), 200, None),
    ("list-signups", DECIDED_AND_PENDING, list_signups("gig"), 200, None),
    ("list-signups-page", DECIDED_AND_PENDING, list_signups("gig", limit=1), 200, None),
    ("list-rejected", DECIDED_AND_PENDING, list_signups("gig", "REJECTED"), 200, None),
    ("list-pending", DECIDED_AND_PENDING, list_signups("gig", "PENDING"), 200, None),
    ("list-unknown-event", (), list_signups("nope"), 404, "event_not_found"),
    ("list-bad-status", (an_event(),), list_signups("gig", "accepted"), 400, "invalid_request"),
    ("list-bad-limit", (an_event(),), list_signups("gig", limit=500), 400, "invalid_request"),
]


@dataclass
class Outcome:
    ok: bool
    body: Any  # the JSON printed or answered; None for a CLI error
    message: str  # the API's message, or the CLI's stderr line without "turnstile: "


def _timeless(value: Any) -> Any:
    """Times as a placeholder (when they were set differs between the two runs)."""
    if isinstance(value, dict):
        return {
            k: "<time>" if k in TIMES and isinstance(v, str) else _timeless(v)
            for k, v in value.items()
        }
    return value


@pytest.fixture
def tables(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], SignupStore]]:
    """Fresh tables on the endpoint, each call; the API handler's store points there too."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    client = default_client(endpoint)

    def fresh() -> SignupStore:
        for spec in ALL_TABLES:
            if spec.name in client.list_tables()["TableNames"]:
                client.delete_table(TableName=spec.name)
            client.create_table(**spec.create_table_kwargs())
        api_handler.get_store.cache_clear()
        return SignupStore(client=client)

    yield fresh
    api_handler.get_store.cache_clear()


def via_api(op: Op) -> tuple[int, str | None, Outcome]:
    event = v2_event(op.method, op.path, op.body, authorizer=AUTHORIZER, query=op.query)
    response = api_handler.handler(event, LocalLambdaContext.api())
    body = json.loads(response["body"])
    code = response["statusCode"]
    if code < 300:
        return code, None, Outcome(True, body, "")
    return code, body["error"], Outcome(False, None, body["message"])


def via_cli(op: Op, endpoint: str) -> Outcome:
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": endpoint,
        "LOGNAME": USER,
        "USER": USER,
    }
    done = subprocess.run(
        [sys.executable, "-m", "turnstile_tools.cli", *op.argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode == 0:
        assert done.stderr == ""
        return Outcome(True, json.loads(done.stdout), "")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("turnstile: ") and done.stderr.count("\n") == 1, done.stderr
    return Outcome(False, None, done.stderr.removeprefix("turnstile: ").rstrip("\n"))


@pytest.mark.parametrize(
    ("setup", "op", "status", "error"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_the_api_and_the_cli_agree(
    tables: Callable[[], SignupStore],
    endpoint: str,
    setup: tuple[Setup, ...],
    op: Op,
    status: int,
    error: str | None,
) -> None:
    # GIVEN the same tables before each run
    store = tables()
    for step in setup:
        step(store)
    # WHEN the API answers the operation
    api_status, api_error, api = via_api(op)
    assert (api_status, api_error) == (status, error), api.message
    # and, from the same start, the CLI runs it
    store = tables()
    for step in setup:
        step(store)
    cli = via_cli(op, endpoint)
    # THEN both reach the same outcome with the same JSON (or the same message)
    assert (cli.ok, cli.message) == (api.ok, api.message)
    assert _timeless(cli.body) == _timeless(api.body)

"""End to end, the lifecycle through ``turnstile local`` and its HTTP API, as a user drives
it: an event of 2 seats, a waitlist of 2 and 4-second holds; five signups; a confirmation,
a cancellation that promotes the first in line, a hold left to lapse with no other traffic
(the local stack's due-holds loop releases it) that promotes the next, refusals answered
409 with the current status, and ``turnstile audit`` clean."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.e2e.conftest import RunningStack, denials, running_local_stack
from tests.roles import roles_without
from turnstile.base.contract import Function
from turnstile_tools.local.roles import ROLES_ENV

pytestmark = pytest.mark.e2e

EVENT = "e2e-life"


def call(stack: RunningStack, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{stack.api_url}{path}", data=data, method=method)
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def signup(stack: RunningStack, sid: str) -> dict[str, Any]:
    return call(stack, "GET", f"/events/{EVENT}/signups/{sid}")[1]


def wait_for(stack: RunningStack, sid: str, status: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = signup(stack, sid)
        if body.get("status") == status or time.monotonic() > deadline:
            assert body.get("status") == status, (sid, status, body)
            return body
        time.sleep(0.1)


def test_holds_confirmations_cancellations_and_the_waitlist_over_http(tmp_path):
    # a stack of its own: the shared one's tests count every decision in its tables
    with running_local_stack(tmp_path) as stack:
        _session(stack)


def _session(stack: RunningStack) -> None:
    status, event = call(
        stack,
        "POST",
        "/events",
        {"event_id": EVENT, "capacity": 2, "waitlist": 2, "hold_seconds": 4},
    )
    assert status == 201, event
    assert (event["waitlist"], event["hold_seconds"]) == (2, 4)
    # five signups, one after the other (arrival order is the stream's)
    for sid in ("a", "b", "c", "d", "e"):
        status, body = call(stack, "POST", f"/events/{EVENT}/signups", {"signup_id": sid})
        assert status == 202, body
    # a confirms as soon as it holds its seat: 202, then ACCEPTED
    a = wait_for(stack, "a", "HELD")
    assert a["position"] == 1 and a["hold_expires_at"]
    assert call(stack, "POST", f"/events/{EVENT}/signups/a/confirm")[0] == 202
    got = {
        sid: wait_for(stack, sid, s)
        for sid, s in zip("bcde", ["HELD", "WAITLISTED", "WAITLISTED", "REJECTED"], strict=True)
    }
    assert got["b"]["position"] == 2
    assert [got[s]["waitlist_position"] for s in "cd"] == [1, 2]
    assert got["e"]["reason"] == "capacity_full"
    wait_for(stack, "a", "ACCEPTED", timeout=4)
    # confirming again is refused, with the signup's current status
    status, refused = call(stack, "POST", f"/events/{EVENT}/signups/a/confirm")
    assert (status, refused["error"], refused["status"]) == (409, "request_refused", "ACCEPTED")

    # b cancels: its seat goes to c, first in line, as a new hold
    assert call(stack, "POST", f"/events/{EVENT}/signups/b/cancel")[0] == 202
    wait_for(stack, "b", "CANCELLED")
    c = wait_for(stack, "c", "HELD")
    assert c["position"] == 3 and c["hold_expires_at"]
    assert signup(stack, "d")["status"] == "WAITLISTED"
    status, refused = call(stack, "POST", f"/events/{EVENT}/signups/e/cancel")
    assert (status, refused["status"], refused["reason"]) == (409, "REJECTED", "capacity_full")

    # c lets its hold lapse; nothing else happens to the event: the due-holds loop
    # re-emits c's record, the processor lapses the hold and promotes d
    c = wait_for(stack, "c", "EXPIRED", timeout=4 + 10)
    d = wait_for(stack, "d", "HELD", timeout=5)
    assert d["position"] == 4
    status, refused = call(stack, "POST", f"/events/{EVENT}/signups/c/confirm")
    assert (status, refused["status"]) == (409, "EXPIRED")
    assert [(h["from"], h["to"], h["cause"]) for h in c["history"]] == [
        ("PENDING", "WAITLISTED", "signup"),
        ("WAITLISTED", "HELD", "promotion"),
        ("HELD", "EXPIRED", "expiry"),
    ]
    assert call(stack, "POST", f"/events/{EVENT}/signups/d/confirm")[0] == 202
    wait_for(stack, "d", "ACCEPTED", timeout=4)

    status, event = call(stack, "GET", f"/events/{EVENT}")
    assert status == 200
    assert event["taken"] == 2
    assert event["status_counts"] == {
        "ACCEPTED": 2,
        "CANCELLED": 1,
        "EXPIRED": 1,
        "REJECTED": 1,
    }
    audit = stack.turnstile("audit", "--json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert json.loads(audit.stdout)["ok"]


def test_a_grant_the_lifecycle_needs_fails_the_run_loudly_when_it_is_missing(tmp_path):
    """What passes here works on AWS: run under a processor role without ``UpdateItem``
    on the main table (the grant it once lacked), the first later move of a signup is
    denied, the console says which role was denied what, the event is parked, and
    ``turnstile audit`` fails naming the denial."""
    roles = roles_without(Function.PROCESSOR, "dynamodb:UpdateItem", "${MainTable.Arn}")
    roles_file = tmp_path / "roles.json"
    roles_file.write_text(json.dumps(roles.document))
    with running_local_stack(
        tmp_path / "state",
        environment={ROLES_ENV: str(roles_file)},
        denials_expected=True,
    ) as stack:
        status, _ = call(stack, "POST", "/events", {"event_id": EVENT, "capacity": 2})
        assert status == 201
        # a first decision is a put: still granted
        assert call(stack, "POST", f"/events/{EVENT}/signups", {"signup_id": "a"})[0] == 202
        wait_for(stack, "a", "ACCEPTED")
        # WHEN a cancels (a later move: an update of its decision item)
        assert call(stack, "POST", f"/events/{EVENT}/signups/a/cancel")[0] == 202
        # THEN the endpoint refuses the processor, and says so
        deadline = time.monotonic() + 30
        while not denials(stack.endpoint) and time.monotonic() < deadline:
            time.sleep(0.1)
        (refused, *_) = denials(stack.endpoint)
        assert refused["role"] == "processor"
        assert refused["denied"].startswith("dynamodb:UpdateItem on arn:aws:dynamodb:")
        assert "table/turnstile-main" in refused["denied"]
        # ... the move is not made, and the next signup of the event waits behind it
        assert call(stack, "POST", f"/events/{EVENT}/signups", {"signup_id": "b"})[0] == 202
        time.sleep(1)
        assert signup(stack, "a")["status"] == "ACCEPTED"
        assert signup(stack, "b")["status"] == "PENDING"
        # ... and the audit fails, naming the role, the action and the parked event
        audit = stack.turnstile("audit")
        assert audit.returncode == 1, audit.stdout + audit.stderr
        assert "access denied to the processor role: dynamodb:UpdateItem" in audit.stdout
        assert f"VIOLATION {EVENT}: parked" in audit.stdout
        assert "may not dynamodb:UpdateItem" in audit.stdout
    console = (tmp_path / "state" / "local.log").read_text()
    assert "ACCESS DENIED to role processor: dynamodb:UpdateItem" in console

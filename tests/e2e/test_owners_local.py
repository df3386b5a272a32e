"""Owners through ``turnstile local``'s HTTP API, as users call it: each caller signs its
requests with SigV4 under credentials of its own (``TurnstileClient``, as on AWS), or
sends a bearer token; the local API takes the caller from either (docs/operations.md,
"Who may do what"). The stack's processor decides; every right is checked end to end."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import boto3

from tests.e2e.conftest import running_local_stack
from turnstile.base.contract import ADMIN_PRINCIPALS_ENV
from turnstile_tools.client import ApiError, TurnstileClient


def signed(stack: Any, access_key: str) -> TurnstileClient:
    session = boto3.Session(
        aws_access_key_id=access_key, aws_secret_access_key="secret", region_name="us-east-1"
    )
    return TurnstileClient(stack.api_url, session=session, sign=True)


def token(subject: str, *scopes: str) -> str:
    """An unsigned token as the local API reads it (on AWS the JWT authorizer checks it)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'scope': ' '.join(scopes)})}."


def bearer(stack: Any, method: str, path: str, subject: str, *scopes: str) -> int:
    request = urllib.request.Request(
        stack.api_url + path,
        method=method,
        headers={"Authorization": f"Bearer {token(subject, *scopes)}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def status_of(call: Any) -> int:
    try:
        call()
    except ApiError as error:
        return int(error.status)
    return 200


def test_each_caller_reaches_only_what_is_its_own(tmp_path: Path):
    admins = {ADMIN_PRINCIPALS_ENV: "arn:aws:iam::*:user/AKIDADMIN*"}
    with running_local_stack(tmp_path / "stack", environment=admins) as stack:
        organizer, owner = signed(stack, "AKIDORGANIZER"), signed(stack, "AKIDOWNER")
        other, reader = signed(stack, "AKIDOTHER"), signed(stack, "AKIDREADER")
        admin = signed(stack, "AKIDADMIN1")
        organizer.create_event("gig", 2)
        signed(stack, "AKIDTHEATRE").create_event("play", 2)
        owner.submit("gig", "mine", 1)
        other.submit("gig", "theirs", 1)
        decided = owner.wait("gig", "mine", timeout_s=60)
        assert decided["status"] == "ACCEPTED"
        # reading the owner's signup: the owner, the organizer, an admin; nobody else
        for client, expected in (
            (owner, 200),
            (organizer, 200),
            (admin, 200),
            (other, 404),
            (reader, 404),
            (signed(stack, "AKIDTHEATRE"), 404),
        ):
            assert status_of(lambda c=client: c.get("gig", "mine")) == expected
        # another producer cannot cancel it; nothing changes
        assert status_of(lambda: other.cancel("gig", "mine")) == 404
        assert owner.get("gig", "mine")["status"] == "ACCEPTED"
        # the event's signups are listed for its organizer and admins only
        assert status_of(lambda: organizer.list_signups("gig")) == 200
        assert status_of(lambda: admin.list_signups("gig")) == 200
        assert status_of(lambda: owner.list_signups("gig")) == 403
        assert status_of(lambda: signed(stack, "AKIDTHEATRE").list_signups("gig")) == 403
        # only the organizer (or an admin) resizes and closes
        assert status_of(lambda: other.close_event("gig")) == 403
        assert status_of(lambda: organizer.update_event("gig", 3)) == 200
        # tokens: a stranger's is refused, the admin scope opens everything
        assert bearer(stack, "GET", "/events/gig/signups/mine", "someone") == 404
        assert bearer(stack, "GET", "/events/gig/signups", "ops", "turnstile/admin") == 200
        # unsigned: the machine's own user, the local operator (as the CLI): every right
        unsigned = TurnstileClient(stack.api_url)
        assert unsigned.get("gig", "mine")["status"] == "ACCEPTED"
        assert status_of(lambda: unsigned.list_signups("gig")) == 200
        # the owner cancels its own: the stack's processor moves it
        owner.cancel("gig", "mine")
        deadline = time.monotonic() + 60
        while owner.get("gig", "mine")["status"] != "CANCELLED":
            assert time.monotonic() < deadline, "the owner's cancel was never applied"
            time.sleep(0.2)


#: Who each caller is (its access key: the local API's caller is ``user/<key>``).
CALLERS = {
    "owner": "AKIDOWNER",
    "other producer": "AKIDOTHER",
    "organizer": "AKIDORGANIZER",
    "other organizer": "AKIDTHEATRE",
    "reader": "AKIDREADER",
    "admin": "AKIDADMIN1",
}
#: May it act on the owner's signups (read, wait, confirm, cancel)?
ON_SIGNUPS = {"owner", "organizer", "admin"}
#: May it list the event's signups, resize it and close it?
ON_EVENT = {"organizer", "admin"}


def _until(condition: Any, what: str, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)


def test_every_route_for_every_kind_of_caller(tmp_path: Path):
    """The matrix of docs/operations.md ("Callers: three roles, and what is whose") end to
    end: every route that touches a signup or an event, called by each kind of caller
    through the local HTTP API, with the stack's own processor deciding. A refused call
    changes nothing: the signup's status document (with its request count) and the event
    are read back unchanged."""
    admins = {ADMIN_PRINCIPALS_ENV: "arn:aws:iam::*:user/AKIDADMIN*"}
    with running_local_stack(tmp_path / "stack", environment=admins) as stack:
        as_ = {name: signed(stack, key) for name, key in CALLERS.items()}
        owner, organizer = as_["owner"], as_["organizer"]
        # The organizer's events: one to read, and each caller's own to resize and close.
        organizer.create_event("gig", 50, hold_seconds=600)
        as_["other organizer"].create_event("play", 2)
        for name in CALLERS:
            organizer.create_event(f"close-{len(name)}-{name[:3]}", 1)
        # The owner's signups, held (hold_seconds): one for each caller to read, confirm, cancel.
        slug = {name: name.replace(" ", "-") for name in CALLERS}
        for name in CALLERS:
            for act in ("confirm", "cancel"):
                owner.submit("gig", f"{act}-{slug[name]}", 1)
        for name in CALLERS:
            for act in ("confirm", "cancel"):
                assert owner.wait("gig", f"{act}-{slug[name]}", timeout_s=120)["status"] == "HELD"

        for name, client in as_.items():
            allowed = name in ON_SIGNUPS
            # read, and wait for, the owner's signup: 404 to a stranger (nothing learned)
            target = f"confirm-{slug[name]}"
            assert status_of(lambda c=client, t=target: c.get("gig", t)) == (
                200 if allowed else 404
            )
            waited = status_of(lambda c=client, t=target: c.get("gig", t, wait_s=0.5))
            assert waited == (200 if allowed else 404), name
            # confirm and cancel it
            for act in ("confirm", "cancel"):
                signup = f"{act}-{slug[name]}"
                before = owner.get("gig", signup)
                answer = status_of(lambda c=client, a=act, s=signup: getattr(c, a)("gig", s))
                assert answer == (200 if allowed else 404), (name, act)  # 202: no error
                if not allowed:
                    assert owner.get("gig", signup) == before, (name, act)
                else:
                    # applied by the processor before the event is read below, unchanged
                    done = {"confirm": "ACCEPTED", "cancel": "CANCELLED"}[act]
                    _until(
                        lambda s=signup, d=done: owner.get("gig", s)["status"] == d,
                        f"{name}'s {act} applied",
                    )
            # list the event's signups; resize it; close one of its events
            allowed = name in ON_EVENT
            expected = 200 if allowed else 403
            assert status_of(lambda c=client: c.list_signups("gig")) == expected, name
            event_before = organizer.get_event("gig")
            capacity = event_before["capacity"] + 1
            assert status_of(lambda c=client, n=capacity: c.update_event("gig", n)) == expected, (
                name
            )
            if not allowed:
                assert organizer.get_event("gig") == event_before, name
            closing = f"close-{len(name)}-{name[:3]}"
            assert status_of(lambda c=client, e=closing: c.close_event(e)) == expected, name
            state = organizer.get_event(closing)["state"]
            assert state == ("CLOSED" if allowed else "OPEN"), name
            # the event itself is public; any producer may sign up to it, as its own
            assert status_of(lambda c=client: c.get_event("gig")) == 200
            assert client.submit("gig", f"own-{slug[name]}", 1)["status"] == "PENDING"
            assert client.get("gig", f"own-{slug[name]}")["event_id"] == "gig"
            # decided before the next caller reads the event to see it unchanged
            assert client.wait("gig", f"own-{slug[name]}", timeout_s=120)["status"] == "HELD"
            # and may create events of its own
            assert status_of(lambda c=client, n=slug[name]: c.create_event(f"mine-{n}", 1)) in (
                200,
                201,
            )

        # The allowed requests took effect, applied by the stack's processor.
        for name in ON_SIGNUPS:
            _until(
                lambda n=name: owner.get("gig", f"confirm-{slug[n]}")["status"] == "ACCEPTED",
                f"{name}'s confirm applied",
            )
            _until(
                lambda n=name: owner.get("gig", f"cancel-{slug[n]}")["status"] == "CANCELLED",
                f"{name}'s cancel applied",
            )
        # The refused ones never did: still held, no request recorded.
        for name in set(CALLERS) - ON_SIGNUPS:
            for act in ("confirm", "cancel"):
                signup = owner.get("gig", f"{act}-{slug[name]}")
                assert signup["status"] == "HELD", (name, act)
                assert not signup["request_count"], (name, act)

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
from turnstile.client import ApiError, TurnstileClient
from turnstile.contract import ADMIN_PRINCIPALS_ENV


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

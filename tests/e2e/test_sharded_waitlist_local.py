"""A sharded event with a waitlist on ``turnstile local``, as a user drives it with the CLI:
a seat given back in one shard goes to the signup waiting in another shard's line, and the
audit passes (docs/hot-events.md, "Waitlists across shards")."""

from __future__ import annotations

import json
import subprocess
import time

from tests.e2e.conftest import BIN, running_local_stack
from turnstile.base.contract import shard_of


def turnstile(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "turnstile"), *args], env=env, capture_output=True, text=True, timeout=90
    )


def status(env: dict[str, str], signup_id: str) -> str:
    shown = turnstile(env, "status", "gig", signup_id, "--wait", "60", "-o", "json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return str(json.loads(shown.stdout)["status"])


def test_a_seat_given_back_in_one_shard_reaches_the_line_of_another(tmp_path):
    # two signups whose ids fall in different shards of four
    seated = "ann"
    waiting = next(
        s for s in (f"w{i}" for i in range(100)) if shard_of(s, 4) != shard_of(seated, 4)
    )
    with running_local_stack(tmp_path / "state", "--in-memory", "--stream-shards", "4") as stack:
        env = stack.env
        created = turnstile(
            env, "event", "create", "gig", "--capacity", "1", "--shards", "4", "--waitlist", "1"
        )
        assert created.returncode == 0, created.stderr
        for sid in (seated, waiting):
            submitted = turnstile(env, "submit", "gig", sid)
            assert submitted.returncode == 0, submitted.stderr
            status(env, sid)  # decided before the next arrives: arrival order is theirs
        assert (status(env, seated), status(env, waiting)) == ("ACCEPTED", "WAITLISTED")
        cancelled = turnstile(env, "cancel", "gig", seated)
        assert cancelled.returncode == 0, cancelled.stderr
        deadline = time.monotonic() + 60
        while status(env, waiting) != "ACCEPTED" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert (status(env, seated), status(env, waiting)) == ("CANCELLED", "ACCEPTED")
        audited = turnstile(env, "audit", "gig")
        assert audited.returncode == 0, audited.stdout + audited.stderr
        assert "0 violations" in audited.stdout, audited.stdout

"""The README's sessions (tables + CLI, then the HTTP API) run verbatim against a fresh stack,
and the local console prints what docs/local-stack.md shows of the first one.

The helpers here (``first_session``, ``run_first_session``, ``check_first_session``) are
shared with tests/e2e/test_light_install.py, which runs the same session on a light install.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import RunningStack, running_local_stack

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def marked_block(path: Path, name: str, lang: str = "") -> str:
    """The fenced block between ``<!-- name -->`` and ``<!-- /name -->`` of ``path``."""
    text = path.read_text()
    block = re.search(rf"<!-- {name} -->\n```{lang}\n(.*?)```\n<!-- /{name} -->", text, re.S)
    assert block, f"{path.relative_to(ROOT)} lost its {name} block"
    return block.group(1)


def readme_block(name: str) -> str:
    return marked_block(ROOT / "README.md", name, "sh")


def first_session() -> str:
    return readme_block("first-session")


def console_shape(text: str) -> list[str]:
    """Decision and summary lines with what changes from run to run taken out: the clock,
    the waits, the state directory, the counts (the test's stack runs both sessions)."""
    lines = []
    for line in text.replace("^C", "").splitlines():
        line = re.sub(r"^\d\d:\d\d:\d\d ", "HH:MM:SS ", line)
        line = re.sub(r"waited -?\d+\.\d\d s", "waited S s", line)
        line = re.sub(r"kept in /\S+:", "kept in DIR:", line)
        banner = ("AWS ", "HTTP ", "worker ", "state  ")
        if line.startswith("turnstile local: ") and not line[17:].startswith(banner):
            lines.append(re.sub(r"\d+ (\w+?)s?\b", r"N \1", line))
        elif line.startswith("HH:MM:SS concert "):
            lines.append(line)
    return lines


#: A fresh shell's PATH: no virtual environment active, nothing of .venv on it (the first
#: session activates .venv itself; the HTTP session needs only curl and .venv/bin/python).
FRESH_PATH = "/usr/local/bin:/usr/bin:/bin"


def session_environment(stack: RunningStack, path: str, keep: tuple[str, ...] = ()) -> dict:
    """The stack's user environment as a fresh shell has it: ``path`` as PATH, no virtual
    environment active, no PYTHONPATH (unless named in ``keep``)."""
    dropped = {"VIRTUAL_ENV", "PYTHONPATH"} - set(keep)
    env = {k: v for k, v in stack.env.items() if k not in dropped}
    env["PATH"] = path
    return env


def run_first_session(stack: RunningStack, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The README's first session, verbatim but for the endpoint's port, under ``env``."""
    port = stack.endpoint.rsplit(":", 1)[1]
    script = first_session().replace("127.0.0.1:4566", f"127.0.0.1:{port}")
    return subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def audit_lines(out: str) -> list[dict[str, int]]:
    """Each closing line of `turnstile audit` (``audit OK: 2 events, 3 ..., 0 violations``)
    as its counts by what they count ({"events": 2, ...}): the test checks what the audit
    says, not how the line is worded."""
    found = []
    for line in re.findall(r"^audit OK: (.*)$", out, re.M):
        counts = {}
        for part in line.split(", "):
            number, _, what = part.partition(" ")
            counts[what] = int(number)
        found.append(counts)
    return found


def check_first_session(result: subprocess.CompletedProcess) -> None:
    """What the README says the first session shows."""
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    statuses = [json.loads(m) for m in re.findall(r"^\{\n.*?^\}", out, re.S | re.M)]
    by_signup = {s.get("signup_id"): s for s in statuses if "status" in s}
    assert by_signup["alice"]["status"] == "ACCEPTED" and by_signup["alice"]["position"] == 1
    assert by_signup["carol"]["status"] == "REJECTED"
    assert by_signup["carol"]["reason"] == "capacity_full"
    assert '"taken": 2' in out
    # Two audits, each clean: after concert (2 accepted, 1 rejected), after gig too (erin
    # accepted; dave cancelled), no seat held at the end. Seats taken, where the line
    # counts them: 2, then 3.
    first, last = audit_lines(out)
    for audit, events, accepted, taken in ((first, 1, 2, 2), (last, 2, 3, 3)):
        assert audit["events"] == events, audit
        assert audit["accepted"] == accepted and audit["rejected"] == 1, audit
        assert audit.get("held", 0) == 0 and audit["pending"] == 0, audit
        assert audit["violations"] == 0, audit
        assert audit.get("seats taken", taken) == taken, audit
    # The lifecycle part: a hold, a place in line, a cancellation that promotes, a confirm.
    gig = [s for s in statuses if s.get("event_id") == "gig" and "status" in s]
    seen = [(s["signup_id"], s["status"]) for s in gig]
    assert seen[-4:] == [
        ("dave", "HELD"),
        ("erin", "WAITLISTED"),
        ("erin", "HELD"),
        ("erin", "ACCEPTED"),
    ], seen
    dave, erin = gig[-4], gig[-3]
    assert dave["position"] == 1 and dave["hold_expires_at"]
    assert erin["waitlist_position"] == 1
    final = [s for s in gig if s["signup_id"] == "erin"][-1]
    assert (final["status"], final["position"]) == ("ACCEPTED", 2)
    assert [(h["to"], h["cause"]) for h in final["history"]] == [
        ("WAITLISTED", "signup"),
        ("HELD", "promotion"),
        ("ACCEPTED", "confirm"),
    ]
    assert "cannot confirm signup 'dave' of event 'gig': it is CANCELLED" in result.stderr


def test_audit_lines_are_read_by_what_they_count():
    out = "x\naudit OK: 2 events, 3 seats taken, 1 accepted, 1 held, 0 pending, 0 violations\n"
    assert audit_lines(out) == [
        {"events": 2, "seats taken": 3, "accepted": 1, "held": 1, "pending": 0, "violations": 0}
    ]


def test_readme_sessions_work_verbatim(tmp_path):
    with running_local_stack(tmp_path) as stack:
        env = session_environment(stack, FRESH_PATH)
        result = run_first_session(stack, env)
        api_port = stack.api_url.rsplit(":", 1)[1]
        http = subprocess.run(
            ["bash", "-e", "-c", readme_block("http-session").replace("8080", str(api_port))],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    check_first_session(result)
    # The console printed what docs/local-stack.md shows: the first session's decisions,
    # a summary.
    console = marked_block(ROOT / "docs" / "local-stack.md", "local-console")
    assert console_shape((tmp_path / "local.log").read_text()) == console_shape(console)
    # The HTTP API block: the producer's 202 with a Location, then the polled decisions.
    assert http.returncode == 0, http.stdout + http.stderr
    assert "HTTP/1.1 202" in http.stdout or "HTTP/1.0 202" in http.stdout
    assert "Location: /events/gala/signups/dana" in http.stdout
    assert "ACCEPTED\ncapacity_full\n" in http.stdout
    # then eve's status read (with ?wait=), the rejected signups and the events, a JSON
    # line each (every body ends with a newline)
    status, rejected, events = (json.loads(line) for line in http.stdout.splitlines()[-3:])
    assert status["reason"] == "capacity_full"
    assert [s["signup_id"] for s in rejected["signups"]] == ["eve"]
    assert rejected["next"] is None
    assert sorted(e["event_id"] for e in events["events"]) == ["concert", "gala", "gig"]

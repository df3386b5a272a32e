"""What ``turnstile local`` prints, read from the real process's output: a line per decision,
no JSON logs and no warnings by default, a summary when it stops; JSON with --log-format json."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.error
import urllib.request
from datetime import datetime

import pytest

from tests.e2e.conftest import RunningStack, running_local_stack
from tests.e2e.test_persistence import api_signup, put_signup, wait_all_decided

pytestmark = pytest.mark.e2e

DECISION = re.compile(
    r"^\d\d:\d\d:\d\d (?P<event>\S+) +(?P<signup>\S+) +(?P<outcome>ACCEPTED #\d+|REJECTED \S+)"
    r" +(?P<wait>waited -?\d+\.\d\d s|no submitted_at)$"
)


def request(stack: RunningStack, method: str, path: str, body: object = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(
            urllib.request.Request(stack.api_url + path, data=data, method=method), timeout=10
        ) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def stop(stack: RunningStack, how: signal.Signals) -> tuple[int, list[str]]:
    stack.process.send_signal(how)
    code = stack.process.wait(timeout=30)
    return code, (stack.state_dir / "local.log").read_text().splitlines()


def between(start: str, end: str) -> float:
    """Seconds from one ISO timestamp to another, computed as the console does."""
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def test_a_line_per_decision_no_logs_and_a_summary_on_ctrl_c(tmp_path):
    state = tmp_path / "state"
    with running_local_stack(state) as stack:
        # GIVEN two seats, three signups through the API and one written straight into
        # intake (no submitted_at)
        assert request(stack, "POST", "/events", {"event_id": "show", "capacity": 2}) == 201
        for signup_id in ("alice", "bob", "carol"):
            api_signup(stack, "show", signup_id)
        put_signup(stack, "show", "dave")
        decided = wait_all_decided(stack)
        assert len(decided) == 4
        # ... and one request that fails
        assert request(stack, "GET", "/events/show/signups/nobody") == 404
        # WHEN it is stopped with Ctrl-C
        code, lines = stop(stack, signal.SIGINT)
    assert code == 0
    # THEN one line per decision, with its outcome and decided_at - submitted_at
    found = {m["signup"]: m for m in map(DECISION.match, lines) if m}
    assert sorted(found) == ["alice", "bob", "carol", "dave"]
    assert len([line for line in lines if DECISION.match(line)]) == 4
    assert {s: m["outcome"] for s, m in found.items()} == {
        "alice": "ACCEPTED #1",
        "bob": "ACCEPTED #2",
        "carol": "REJECTED capacity_full",
        "dave": "REJECTED capacity_full",
    }
    for signup_id in ("alice", "bob", "carol"):
        item = decided[("show", signup_id)]
        waited = between(item["submitted_at"]["S"], item["decided_at"]["S"])
        assert found[signup_id]["wait"] == f"waited {waited:.2f} s"
    assert found["dave"]["wait"] == "no submitted_at"
    # ... the failed request as one short line, the ones that succeeded not at all
    (failed,) = [line for line in lines if " 404 " in line]
    assert re.fullmatch(
        r"\d\d:\d\d:\d\d WARNING GET /events/show/signups/nobody 404 "
        r"signup_not_found \d+ ms",
        failed,
    )
    assert not [line for line in lines if re.search(r" (201|202|200) \d+ ms$", line)]
    # ... no JSON log line, no warning, no traceback
    text = "\n".join(lines)
    assert not [line for line in lines if line.startswith("{")]
    assert "Warning" not in text and "Traceback" not in text
    # ... and the summary, last (the worker may still decide what it had read after
    # "stopping")
    assert "turnstile local: stopping" in lines[:-3]
    assert lines[-3:] == [
        "turnstile local: this session decided 4 signups (2 accepted, 2 rejected) in 1 event",
        "turnstile local: the tables hold 1 event, 4 signups decided, 0 pending",
        f"turnstile local: state kept in {state.resolve()}: start again to carry on",
    ]


def test_json_logs_with_log_format_json_and_the_pending_count_without_a_worker(tmp_path):
    state = tmp_path / "state"
    with running_local_stack(state, "--no-worker", "--log-format", "json") as stack:
        assert request(stack, "POST", "/events", {"event_id": "gala", "capacity": 1}) == 201
        api_signup(stack, "gala", "dana")
        put_signup(stack, "gala", "eve")
        assert request(stack, "GET", "/events/nowhere") == 404
        code, lines = stop(stack, signal.SIGTERM)
    assert code == 0
    # Every line but the banner and the summary is one JSON object ...
    text_lines = [
        line for line in lines if line.startswith(("turnstile local: ", "  export AWS_ENDPOINT"))
    ]
    records = [json.loads(line) for line in lines if line not in text_lines]
    assert all(isinstance(r, dict) and "level" in r for r in records)
    # ... the functions' own records, as Lambda writes them, and one per request (INFO)
    submitted = [r for r in records if r["message"] == "signup submitted"]
    assert [(r["service"], r["event_id"]) for r in submitted] == [("turnstile-api", "gala")]
    requests = {
        r["message"].rsplit(" ", 2)[0]: r["level"] for r in records if " ms" in r["message"]
    }
    assert requests == {
        "POST /events 201": "INFO",
        "POST /events/gala/signups 202": "INFO",
        "GET /events/nowhere 404 event_not_found": "WARNING",
    }
    assert "Warning" not in "\n".join(lines)
    # ... and the summary counts what was left undecided
    assert text_lines[-3:] == [
        "turnstile local: this session decided nothing: no worker (--no-worker)",
        "turnstile local: the tables hold 1 event, 0 signups decided, 2 pending",
        f"turnstile local: state kept in {state.resolve()}: start again to carry on",
    ]


def test_a_second_ctrl_c_stops_it_at_once(tmp_path):
    # The first Ctrl-C asks for a clean stop; a second one, while it is stopping, ends the
    # process at once, as a kill does, with no traceback. An idle stack may finish its clean
    # stop before the second signal lands: then it is tried again (three times at most).
    outcomes = []
    for attempt in range(3):
        state = tmp_path / f"state{attempt}"
        with running_local_stack(state, "--in-memory") as stack:
            log = state / "local.log"
            stack.process.send_signal(signal.SIGINT)
            deadline = time.monotonic() + 30
            while "stopping" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.002)
            stack.process.send_signal(signal.SIGINT)
            code = stack.process.wait(timeout=30)
        text = log.read_text()
        assert "turnstile local: stopping" in text and "Traceback" not in text
        outcomes.append(code)
        if code == -signal.SIGINT:
            assert "this session decided" not in text  # no clean stop's summary
            return
        assert code == 0 and "this session decided" in text  # the clean stop won the race
    pytest.fail(f"the clean stop finished before the second Ctrl-C every time: {outcomes}")

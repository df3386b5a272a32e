"""What ``turnstile worker`` tells its operator, as one runs it beside ``turnstile local
--no-worker``: its own warnings and errors (its pollers', its lanes') on stderr, one line
each, with no traceback for what it expects to meet (an unreachable on-failure queue);
the stream function's logs stay Powertools' JSON on stdout, as on Lambda.

(They were all silent: the stream handler's ``Logger(service="turnstile")`` puts
Powertools' ``SuppressFilter("turnstile")`` on the root handler, which drops every record
whose logger name contains ``turnstile``: ``turnstile_tools.local.poller``'s too.)"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.e2e.conftest import BIN, RunningStack, running_local_stack
from turnstile.base.contract import INTAKE_TABLE

#: A record older than this (seconds) goes to the on-failure destination unread.
MAX_RECORD_AGE_S = 1
STATS_LINE = "turnstile worker: stats "
#: One of the worker's own log lines: a clock, a level, the message, on one line.
LINE = re.compile(r"\d\d:\d\d:\d\d (WARNING|ERROR) \S.*")


def aged_signups(stack: RunningStack, event_id: str, count: int) -> None:
    """An event and ``count`` signups, older than ``MAX_RECORD_AGE_S`` once this returns."""
    created = stack.turnstile("event", "create", event_id, "--capacity", "5")
    assert created.returncode == 0, created.stderr
    client = stack.dynamodb(max_attempts=10)
    for i in range(count):
        client.put_item(
            TableName=INTAKE_TABLE.name,
            Item={"event_id": {"S": event_id}, "signup_id": {"S": f"s-{i}"}, "seats": {"N": "1"}},
        )
    # A stream record's creation time may be rounded to the second: 2.1 s later it is more
    # than 1 s old whichever way (a lower bound on the age, not a race).
    time.sleep(MAX_RECORD_AGE_S + 1.1)


def worker(stack: RunningStack, state: Path, **env: str) -> tuple[list[str], dict[str, str]]:
    """``turnstile worker --stream-shards 2`` on ``state``: its command line and environment
    (a maximum record age of ``MAX_RECORD_AGE_S``, retries after 20 ms, and ``env``)."""
    return (
        [str(BIN / "turnstile"), "worker", "--state-dir", str(state), "--stream-shards", "2"],
        {
            **stack.env,
            "TURNSTILE_MAX_RECORD_AGE_S": str(MAX_RECORD_AGE_S),
            "TURNSTILE_RETRY_BASE_DELAY_MS": "20",
            **env,
        },
    )


def test_the_worker_says_on_stderr_when_it_sends_a_batch_to_the_on_failure_queue(tmp_path):
    with running_local_stack(tmp_path / "stack", "--in-memory", "--no-worker") as stack:
        aged_signups(stack, "aged", 4)
        argv, env = worker(stack, tmp_path / "w")
        done = subprocess.run(
            [*argv, "--until-idle", "2"], env=env, capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    stats: dict[str, Any] = json.loads(
        [line for line in done.stdout.splitlines() if line.startswith(STATS_LINE)][-1][
            len(STATS_LINE) :
        ]
    )
    assert stats["sent_to_failure_destination"] == 4, stats
    lines = done.stderr.splitlines()
    # THEN each batch given up on is one ERROR line on stderr, and nothing else is there
    sent = [line for line in lines if "batch sent to the on-failure destination: {" in line]
    assert sent, done.stderr[-2000:]
    assert all(LINE.fullmatch(line) for line in lines), done.stderr[-2000:]
    assert " ERROR batch sent to the on-failure destination: {" in sent[0], sent
    # ... and the function's logs are still Powertools' JSON, on stdout only
    assert '"batch processed"' not in done.stderr
    assert all(json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))


def test_a_lane_that_cannot_reach_the_on_failure_queue_says_so_in_one_line(tmp_path):
    with running_local_stack(
        tmp_path / "stack", "--in-memory", "--no-worker", denials_expected=True
    ) as stack:
        aged_signups(stack, "unsent", 2)
        nowhere = f"{stack.endpoint}/000000000000/no-such-queue"
        argv, env = worker(stack, tmp_path / "w", TURNSTILE_FAILURE_QUEUE_URL=nowhere)
        log = tmp_path / "worker.err"
        with open(log, "w") as err:
            process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 60
            while "delivery failed; retrying it" not in log.read_text():
                assert process.poll() is None, log.read_text()[-2000:]
                assert time.monotonic() < deadline, "no delivery failure said within 60 s"
                time.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0, log.read_text()[-2000:]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    text = log.read_text()
    # THEN the lane says it and that it retries, with the error's type and message, in one
    # line each: an expected condition, no traceback
    assert "Traceback" not in text, text[-3000:]
    lines = text.splitlines()
    assert all(LINE.fullmatch(line) for line in lines), text[-3000:]
    failed = [line for line in lines if "delivery failed; retrying it" in line]
    assert re.fullmatch(
        r"\S+ ERROR stream shard \d+: delivery failed; retrying it \(\w+: .+\)", failed[0]
    ), failed[0]

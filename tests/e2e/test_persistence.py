"""``turnstile local`` keeps its state across a restart (SIGINT or SIGKILL), real processes."""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.e2e.conftest import RunningStack, running_local_stack
from turnstile.base.contract import FAILURE_QUEUE_NAME, INTAKE_TABLE, MAIN_TABLE
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.cli import audit_summary
from turnstile_tools.local.persist import (
    COMPACT_BYTES_ENV,
    SNAPSHOT_NAME,
    STREAM_RETENTION_ENV,
    WriteAheadLog,
)
from turnstile_tools.local.server import WAL_NAME


def client(stack: RunningStack, service: str = "dynamodb") -> Any:
    return _client(stack.endpoint, service)


@functools.cache
def _client(endpoint: str, service: str) -> Any:
    """One client per endpoint and service: the test's many reads do not each build one."""
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def scan(stack: RunningStack, table: str) -> dict[tuple[str, str], dict[str, Any]]:
    items: dict[tuple[str, str], dict[str, Any]] = {}
    for page in client(stack).get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            key = ("pk", "sk") if "pk" in item else ("event_id", "signup_id")
            items[(item[key[0]]["S"], item[key[1]]["S"])] = item
    return items


def put_signup(stack: RunningStack, event_id: str, signup_id: str, dynamodb: Any = None) -> None:
    """A producer's write straight into intake; returns once it is acknowledged (200)."""
    (dynamodb or client(stack)).put_item(
        TableName=INTAKE_TABLE.name,
        Item={
            "event_id": {"S": event_id},
            "signup_id": {"S": signup_id},
            "seats": {"N": "1"},
            "undecided": {"S": signup_id[:1]},
        },
        ConditionExpression="attribute_not_exists(signup_id)",
    )


def post(stack: RunningStack, path: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(
        f"{stack.api_url}{path}", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def api_signup(stack: RunningStack, event_id: str, signup_id: str) -> None:
    assert post(stack, f"/events/{event_id}/signups", {"signup_id": signup_id, "seats": 1}) == 202


def create_event(stack: RunningStack, event_id: str, capacity: int) -> None:
    """Through the HTTP API (the CLI's ``event create`` is the same use case: a process
    start saved)."""
    assert post(stack, "/events", {"event_id": event_id, "capacity": capacity}) == 201


def audit_line(stack: RunningStack) -> str:
    """What ``turnstile audit`` closes with, from the same audit run in this process (a
    process start saved; the refusals it would list are checked as each stack stops)."""
    return audit_summary(audit(SignupStore(client(stack))).to_dict())


def wait_all_decided(stack: RunningStack, timeout: float = 60) -> dict[Any, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        intake, main = scan(stack, INTAKE_TABLE.name), scan(stack, MAIN_TABLE.name)
        decisions = {k: v for k, v in main.items() if "status" in v}
        if set(intake) <= set(decisions) or time.monotonic() > deadline:
            return decisions
        time.sleep(0.05)


def stop(stack: RunningStack, how: signal.Signals) -> None:
    stack.process.send_signal(how)
    stack.process.wait(timeout=30)


def stream_arn(stack: RunningStack) -> str:
    return client(stack).describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]


def banner(state_dir: Path) -> str:
    return (state_dir / "local.log").read_text()


#: Compact the write log after every write and at every start: each restart loads a
#: snapshot (and a tail of at most one record), never the whole history.
COMPACT_ALWAYS = {COMPACT_BYTES_ENV: "0"}

#: A worker that hands each poll's records over at once, not after the stack's batching
#: window (1 s): for a start whose worker only has to decide what is there.
NO_BATCHING_WINDOW = {"TURNSTILE_BATCHING_WINDOW_S": "0"}


@pytest.mark.parametrize(
    ("how", "environment"),
    [(signal.SIGINT, None), (signal.SIGKILL, None), (signal.SIGKILL, COMPACT_ALWAYS)],
    ids=["sigint", "sigkill", "sigkill-compacting"],
)
def test_state_survives_a_restart_and_nothing_is_decided_twice(tmp_path, how, environment):
    state = tmp_path / "state"
    running = functools.partial(running_local_stack, environment=environment)
    # 1. The worker decides a first lot; a burst acknowledged just before the kill follows.
    with running(state) as stack:
        create_event(stack, "p", 7)
        for i in range(6):
            put_signup(stack, "p", f"a{i}")
        before = wait_all_decided(stack)
        assert len(before) == 6
        arn = stream_arn(stack)
        for i in range(3):
            put_signup(stack, "p", f"b{i}")
            api_signup(stack, "p", f"c{i}")
        stop(stack, how)
    # 2. Without a worker: everything acknowledged is there; more arrives, undecided.
    with running(state, "--no-worker") as stack:
        assert "writes restored" in banner(state)
        intake = scan(stack, INTAKE_TABLE.name)
        assert {f"b{i}" for i in range(3)} | {f"c{i}" for i in range(3)} <= {k[1] for k in intake}
        assert len(intake) == 12
        assert stream_arn(stack) == arn
        for i in range(3):
            put_signup(stack, "p", f"d{i}")
        stop(stack, how)
    # 3. The worker resumes: the rest decided, the first lot untouched, audit clean.
    with running_local_stack(
        state, environment={**(environment or {}), **NO_BATCHING_WINDOW}
    ) as stack:
        after = wait_all_decided(stack)
        intake = scan(stack, INTAKE_TABLE.name)
        assert len(intake) == 15
        assert set(after) == set(intake)  # every intake record has exactly one decision
        for key, decision in before.items():
            assert after[key] == decision  # decided before the restarts, never again
        assert sum(d["status"]["S"] == "ACCEPTED" for d in after.values()) == 7
        assert audit_line(stack) == (
            "audit OK: 1 events, 7 seats taken, 7 accepted, 0 held, 8 rejected, 0 pending, "
            "0 violations"
        )
        assert stream_arn(stack) == arn
        checkpoints = json.loads((state / "checkpoints.json").read_text())
        # one checkpoint per stream (intake's, and the control table's wake-ups), both
        # streams the same after the restarts: never re-read
        assert arn in checkpoints and len(checkpoints) == 2
        (wake_arn,) = set(checkpoints) - {arn}
        assert ":table/turnstile-control/stream/" in wake_arn
    if environment is COMPACT_ALWAYS:
        # every restart loaded a snapshot; the log holds nothing since the last one
        assert (state / SNAPSHOT_NAME).exists()
        assert list(WriteAheadLog(state / WAL_NAME).records()) == []


def test_a_sigkill_while_compacting_loses_no_acknowledged_write(tmp_path):
    """Every write compacts the log (a snapshot written, renamed, a new log begun) before
    its response: a SIGKILL amid the writes lands in a compaction or next to one."""
    state = tmp_path / "state"
    acknowledged: list[str] = []
    with running_local_stack(state, "--no-worker", environment=COMPACT_ALWAYS) as stack:
        stop_writing = threading.Event()

        def write() -> None:
            c = client(stack)
            for i in range(100_000):
                if stop_writing.is_set():
                    return
                try:
                    put_signup(stack, "k", f"w{i}", c)
                except Exception:  # the kill: this write was never acknowledged
                    return
                acknowledged.append(f"w{i}")

        writer = threading.Thread(target=write)
        writer.start()
        deadline = time.monotonic() + 60
        while len(acknowledged) < 60 and time.monotonic() < deadline:
            time.sleep(0.01)
        stack.process.send_signal(signal.SIGKILL)
        stack.process.wait(timeout=30)
        stop_writing.set()
        writer.join(timeout=30)
    assert len(acknowledged) >= 60
    with running_local_stack(state, "--no-worker", environment=COMPACT_ALWAYS) as stack:
        restored = {k[1] for k in scan(stack, INTAKE_TABLE.name)}
        assert set(acknowledged) <= restored
        assert restored - set(acknowledged) <= {f"w{len(acknowledged)}"}  # the one in flight


def test_undecided_signups_whose_stream_records_were_trimmed_are_decided_after_a_restart(
    tmp_path,
):
    """A snapshot keeps a stream's records of the last 24 hours (DynamoDB Streams keep them
    that long): a signup written, never decided, and its record trimmed by then, is found
    by the sweeper (it looks every period; an idle one writes nothing) and re-emitted."""
    state = tmp_path / "state"
    with running_local_stack(state, "--no-worker") as stack:
        create_event(stack, "t", 2)
        for i in range(4):
            put_signup(stack, "t", f"u{i}")
        stop(stack, signal.SIGKILL)
    # A start that compacts as if a day had passed: the snapshot has no stream records.
    trim = {**COMPACT_ALWAYS, STREAM_RETENTION_ENV: "0"}
    with running_local_stack(state, "--no-worker", environment=trim) as stack:
        shard = client(stack, "dynamodbstreams").describe_stream(StreamArn=stream_arn(stack))
        assert shard["StreamDescription"]["Shards"]
        stop(stack, signal.SIGKILL)
    sweeping = {
        "TURNSTILE_SWEEP_INTERVAL_S": "0.2",
        "TURNSTILE_SWEEP_MIN_AGE_S": "0",
        **NO_BATCHING_WINDOW,
    }
    with running_local_stack(state, environment=sweeping) as stack:
        decisions = wait_all_decided(stack)
        assert set(decisions) == set(scan(stack, INTAKE_TABLE.name))
        assert sum(d["status"]["S"] == "ACCEPTED" for d in decisions.values()) == 2
        assert "sweeper re-emitted" in banner(state)
        assert audit_line(stack).startswith("audit OK: 1 events, 2 seats taken, 2 accepted")


def test_the_failure_queue_survives_a_sigkill(tmp_path):
    """Sent messages come back with their ids, deleted ones stay deleted."""
    state = tmp_path / "state"
    with running_local_stack(state, "--no-worker") as stack:
        sqs = client(stack, "sqs")
        url = sqs.get_queue_url(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
        ids = [sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")["MessageId"] for i in range(3)]
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        deleted = next(m for m in got if m["MessageId"] == ids[1])
        sqs.delete_message(QueueUrl=url, ReceiptHandle=deleted["ReceiptHandle"])
        stop(stack, signal.SIGKILL)
    with running_local_stack(state, "--no-worker") as stack:
        sqs = client(stack, "sqs")
        url = sqs.get_queue_url(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert sorted((m["MessageId"], m["Body"]) for m in got) == sorted(
            [(ids[0], "m0"), (ids[2], "m2")]
        )
        # A message received after the restart is deleted by its new receipt handle.
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
        deleted_after = got[0]["MessageId"]
        stop(stack, signal.SIGKILL)
    with running_local_stack(state, "--no-worker") as stack:
        sqs = client(stack, "sqs")
        url = sqs.get_queue_url(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        left = {ids[0], ids[2]} - {deleted_after}
        assert [m["MessageId"] for m in got] == list(left)


def test_in_memory_keeps_nothing_and_reset_starts_clean(tmp_path):
    state = tmp_path / "state"
    with running_local_stack(state, "--in-memory", "--no-worker") as stack:
        assert "state        in memory" in banner(state)
        put_signup(stack, "m", "x")
    assert sorted(p.name for p in state.iterdir()) == ["local.log"]  # no file of its state
    with running_local_stack(state, "--no-worker") as stack:
        # nothing of the in-memory run anywhere: not restored, not readable
        assert f"state        {state.resolve()} (0 writes restored)" in banner(state)
        assert scan(stack, INTAKE_TABLE.name) == {}
        put_signup(stack, "m", "x")
    with running_local_stack(state, "--no-worker", environment=COMPACT_ALWAYS) as stack:
        assert list(scan(stack, INTAKE_TABLE.name)) == [("m", "x")]  # the log restored
        assert (state / SNAPSHOT_NAME).exists()  # the start compacted: a snapshot to reset
    with running_local_stack(state, "--reset", "--no-worker") as stack:
        assert "(0 writes restored)" in banner(state)
        assert scan(stack, INTAKE_TABLE.name) == {}
        assert not (state / SNAPSHOT_NAME).exists()
    with running_local_stack(state, "--no-worker") as stack:
        assert scan(stack, INTAKE_TABLE.name) == {}  # the reset is itself persistent


def test_reset_with_in_memory_is_a_usage_error(tmp_path):
    stack = RunningStack("", "", dict(os.environ), tmp_path, None)  # type: ignore[arg-type]
    result = stack.turnstile("local", "--in-memory", "--reset", "--state-dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--reset" in result.stderr

"""``turnstile local`` releases due holds in the background, every second by default: an
event whose earliest hold is due gets its holding signup's intake record re-emitted (a
MODIFY on the stream, its ``redrive`` bumped) within seconds; one not due yet does not."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.conftest import StreamReader
from turnstile.contract import CONTROL_TABLE, DUE_HOLDS_SHARD, Attr
from turnstile.local.stack import DUE_HOLDS_INTERVAL_ENV, LocalStack, local_aws_environment
from turnstile.store import SignupStore

NOW = "2026-01-01T00:00:00.000000Z"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    """A whole local stack in this process (in memory), its environment undone afterwards."""
    from moto.core.base_backend import BackendDict

    for name in [*local_aws_environment("http://x"), "TURNSTILE_FAILURE_QUEUE_URL"]:
        # Recorded as it is (set or not), so the stack's own settings are undone.
        kept = os.environ.get(name)
        monkeypatch.setenv(name, kept or "")
        if kept is None:
            monkeypatch.delenv(name)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.delenv(DUE_HOLDS_INTERVAL_ENV, raising=False)  # the default: 1 s
    BackendDict.reset()
    local = LocalStack(port=free_port(), api_port=free_port(), state_dir=tmp_path, in_memory=True)
    local.start()
    yield local
    local.stop()
    BackendDict.reset()


def hold_due(store: SignupStore, event_id: str, due_at_ms: int) -> None:
    """What the processor's commit writes on an event that holds seats."""
    store.client.update_item(
        TableName=CONTROL_TABLE.name,
        Key={"pk": {"S": f"EVENT#{event_id}"}, "sk": {"S": "EVENT"}},
        UpdateExpression="SET #at = :at, #signup = :signup, #shard = :shard",
        ExpressionAttributeNames={
            "#at": Attr.HOLD_DUE_AT,
            "#signup": Attr.HOLD_DUE_SIGNUP,
            "#shard": Attr.HOLD_DUE_SHARD,
        },
        ExpressionAttributeValues={
            ":at": {"N": str(due_at_ms)},
            ":signup": {"S": "holder"},
            ":shard": {"S": DUE_HOLDS_SHARD},
        },
    )


def test_the_local_stack_re_emits_due_holds_within_seconds(stack: LocalStack) -> None:
    store = SignupStore(sleep=lambda _: None)
    stream = StreamReader(boto3.Session())
    now_ms = int(time.time() * 1000)
    for event_id, due_at in (("due", now_ms - 60_000), ("later", now_ms + 3_600_000)):
        store.create_event(event_id, 5, NOW)
        hold_due(store, event_id, due_at)
        store.put_intake(event_id, "holder", 1, None, NOW)
    # WHEN the stack runs for a few seconds
    modified: dict[str, dict] = {}
    deadline = time.monotonic() + 6
    while "due" not in modified and time.monotonic() < deadline:
        time.sleep(0.25)
        for record in stream.read_new():
            if record["eventName"] == "MODIFY":
                modified[record["dynamodb"]["Keys"]["event_id"]["S"]] = record
    # THEN the due event's holding signup came down the stream again, its counter bumped
    assert "due" in modified, "no re-emission of the due hold within 6 seconds"
    assert modified["due"]["dynamodb"]["NewImage"]["redrive"] == {"N": "1"}
    # ... and, a few periods later, the event not due yet still has not
    time.sleep(2.5)
    later = [r for r in stream.read_new() if r["eventName"] == "MODIFY"]
    assert "later" not in modified
    assert all(r["dynamodb"]["Keys"]["event_id"]["S"] == "due" for r in later)

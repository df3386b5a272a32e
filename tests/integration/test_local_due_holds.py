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


def test_the_local_stack_re_emits_due_holds_within_seconds(stack: LocalStack) -> None:
    store = SignupStore(sleep=lambda _: None)
    stream = StreamReader(boto3.Session())
    # GIVEN two events whose signups are held, one for a second, one for an hour
    for event_id, hold_seconds in (("due", 1), ("later", 3600)):
        store.create_event(event_id, 5, NOW, hold_seconds=hold_seconds)
        store.put_intake(event_id, "holder", 1, None, NOW)
    # WHEN the stack runs for a few seconds
    modified: dict[str, dict] = {}
    deadline = time.monotonic() + 8
    while "due" not in modified and time.monotonic() < deadline:
        time.sleep(0.25)
        for record in stream.read_new():
            if record["eventName"] == "MODIFY":
                modified[record["dynamodb"]["Keys"]["event_id"]["S"]] = record
    # THEN the due event's holding signup came down the stream again, its counter bumped,
    # and the processor lapsed its hold
    assert "due" in modified, "no re-emission of the due hold within 8 seconds"
    assert modified["due"]["dynamodb"]["NewImage"]["redrive"] == {"N": "1"}
    # ... and, a few periods later, the event not due yet still has not
    time.sleep(2.5)
    later = [r for r in stream.read_new() if r["eventName"] == "MODIFY"]
    assert "later" not in modified
    assert all(r["dynamodb"]["Keys"]["event_id"]["S"] == "due" for r in later)
    assert store.get_decision("later", "holder")["status"] == "HELD"
    deadline = time.monotonic() + 5
    while store.get_decision("due", "holder")["status"] != "EXPIRED":
        assert time.monotonic() < deadline, "the due hold was re-emitted but never lapsed"
        time.sleep(0.2)
    # ... all of it under the functions' roles
    assert stack.aws is not None and stack.aws.enforcement.denials == []

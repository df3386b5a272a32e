"""``turnstile local`` releases due holds in the background, every second by default: an
event whose earliest hold is due is woken (its own wake-up item) and its hold ends; one
not due yet is not. (The liveness deadline here is generous, so a loaded machine cannot
fail it; the bound itself, 5 s, is measured in docs/lifecycle.md.)"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstile.storage.store import SignupStore
from turnstile_tools.local.stack import DUE_HOLDS_INTERVAL_ENV, LocalStack, local_aws_environment

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


def test_the_local_stack_ends_due_holds_within_seconds(stack: LocalStack) -> None:
    store = SignupStore(sleep=lambda _: None)
    # GIVEN two events whose signups are held, one for a second, one for an hour
    for event_id, hold_seconds in (("due", 1), ("later", 3600)):
        store.create_event(event_id, 5, NOW, hold_seconds=hold_seconds)
        store.put_intake(event_id, "holder", 1, None, NOW)
    deadline = time.monotonic() + 30
    while any(store.get_decision(e, "holder") is None for e in ("due", "later")):
        assert time.monotonic() < deadline, "the signups were never decided"
        time.sleep(0.1)
    held_at = time.monotonic()
    # WHEN the stack runs on, with no other traffic
    # THEN the due hold ends (the due-holds loop wakes the event every second; the
    # processor lapses the hold), and the other one does not
    while store.get_decision("due", "holder")["status"] != "EXPIRED":
        assert time.monotonic() - held_at < 60, "the due hold never ended"
        time.sleep(0.1)
    assert store.get_decision("later", "holder")["status"] == "HELD"
    # ... woken through its own item, never by touching the holder's intake record
    assert "redrive" not in store.get_intake("due", "holder")
    # ... all of it under the functions' roles
    assert stack.aws is not None and stack.aws.enforcement.denials == []

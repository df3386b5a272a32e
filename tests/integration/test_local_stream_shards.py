"""``turnstile local`` with emulated stream shards (``TURNSTILE_STREAM_SHARDS``, or
``--stream-shards``): each partition key's records go, in order, to one of N lanes, each
worked by a processor of its own (a container per shard, as Lambda runs one invocation per
stream shard). The decisions are the ones one lane makes: never oversold, and within one
intake partition arrival order holds."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstile.base.contract import Status, signup_key
from turnstile.storage.store import SignupStore
from turnstile_tools.local.stack import (
    STREAM_SHARDS_ENV,
    LocalStack,
    count_tables,
    local_aws_environment,
)

NOW = "2026-01-01T00:00:00.000000Z"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalStack]:
    """A whole local stack in this process (in memory), with four stream shards."""
    from moto.core.base_backend import BackendDict

    for name in [*local_aws_environment("http://x"), "TURNSTILE_FAILURE_QUEUE_URL"]:
        kept = os.environ.get(name)
        monkeypatch.setenv(name, kept or "")
        if kept is None:
            monkeypatch.delenv(name)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv(STREAM_SHARDS_ENV, "4")
    BackendDict.reset()
    local = LocalStack(port=free_port(), api_port=free_port(), state_dir=tmp_path, in_memory=True)
    local.start()
    yield local
    local.stop()
    BackendDict.reset()


def test_stream_shards_decide_as_one_lane_does_each_partition_in_order(stack: LocalStack) -> None:
    store = SignupStore(sleep=lambda _: None)
    # GIVEN a sharded event (4 shards) and three plain ones, more signups than seats
    store.create_event("hot", 12, NOW, shards=4)
    capacities = {"hot": 12, "a": 3, "b": 5, "c": 4}
    for event_id in ("a", "b", "c"):
        store.create_event(event_id, capacities[event_id], NOW)
    keys: dict[str, str] = {}
    for i in range(80):
        event_id = ("hot", "a", "b", "c")[i % 4]
        sid = f"s{i:03d}"
        keys[sid] = signup_key(event_id, sid, 4 if event_id == "hot" else 1)
        store.put_intake(keys[sid], sid, 1, None, NOW)
    # WHEN the worker's lanes decide them
    deadline = time.monotonic() + 120
    while any(store.get_decision(key, sid) is None for sid, key in keys.items()):
        assert time.monotonic() < deadline, "not every signup was decided"
        time.sleep(0.2)
    decided = {sid: store.get_decision(key, sid) for sid, key in keys.items()}
    # THEN the records went to several lanes, each with a processor of its own
    assert stack.worker is not None and stack.worker.stream_shards == 4
    assert len(stack.worker._lane_stores) >= 2, stack.worker._lane_stores
    # ... every event has exactly its seats given, never more
    for event_id, capacity in capacities.items():
        given = [d for d in decided.values() if d["event_id"].split("#")[0] == event_id]
        accepted = [d for d in given if d["status"] == Status.ACCEPTED]
        assert len(accepted) == capacity, (event_id, len(accepted))
        assert {d["reason"] for d in given if d["status"] == Status.REJECTED} == {"capacity_full"}
    # ... and within one intake partition, no signup is given a seat after one refused
    for key in set(keys.values()):
        in_order = sorted(
            (d for d in decided.values() if d["event_id"] == key),
            key=lambda d: int(d["sequence_number"]),
        )
        statuses = [d["status"] for d in in_order]
        first_refused = statuses.index(Status.REJECTED) if Status.REJECTED in statuses else None
        if first_refused is not None:
            assert Status.ACCEPTED not in statuses[first_refused:], (key, statuses)
    # ... the stop's summary counts the sharded event once, not its shards' items
    counts = count_tables(60)
    assert counts is not None and (counts.events, counts.decided) == (4, 80)
    # ... all of it under the functions' roles
    assert stack.aws is not None and stack.aws.enforcement.denials == []

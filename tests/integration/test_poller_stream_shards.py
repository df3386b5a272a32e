"""The local poller's emulated stream shards: each partition key's records in order, in a
lane of its own, worked independently of the others, as Lambda works each shard of a real
stream; the checkpoint never passes a record not yet delivered (moto's stream, on moto)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from turnstile.base.contract import INTAKE_TABLE, STREAM_SOURCE
from turnstile_tools.local.poller import CheckpointStore, StreamPoller

#: Two partition keys that fall in different lanes of two (crc32 of their JSON, mod 2).
SLOW, QUICK = "slow", "quick"


class Handler:
    """Records each invocation's (event, signup) keys; the slow key's wait for ``go``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.delivered: list[tuple[str, str]] = []
        self.go = threading.Event()
        self.slow_started = threading.Event()
        self.threads: dict[str, set[str]] = {SLOW: set(), QUICK: set()}
        self.sequence_numbers: list[int] = []

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        keys = [
            (r["dynamodb"]["Keys"]["event_id"]["S"], r["dynamodb"]["Keys"]["signup_id"]["S"])
            for r in event["Records"]
        ]
        assert len({e for e, _ in keys}) == 1, f"a batch mixes partition keys: {keys}"
        event_id = keys[0][0]
        self.threads[event_id].add(threading.current_thread().name)
        if event_id == SLOW:
            self.slow_started.set()
            assert self.go.wait(10), "never let go"
        with self.lock:
            self.delivered.extend(keys)
            self.sequence_numbers += [
                int(r["dynamodb"]["SequenceNumber"]) for r in event["Records"]
            ]
        return {"batchItemFailures": []}


@pytest.fixture
def setup(aws, tmp_path):
    client = aws.client("dynamodb")
    arn = client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]
    checkpoints = CheckpointStore(tmp_path / "checkpoints.json")
    handler = Handler()
    poller = StreamPoller(
        handler,
        aws.client("dynamodbstreams"),
        arn,
        checkpoints,
        settings=replace(STREAM_SOURCE, batch_size=2, filter_patterns=()),
        sleep=lambda _: None,
        stream_shards=2,
        partition_key="event_id",
    )
    for i in range(4):
        for event_id in (SLOW, QUICK):
            client.put_item(
                TableName=INTAKE_TABLE.name,
                Item={"event_id": {"S": event_id}, "signup_id": {"S": f"s{i}"}},
            )
    return poller, handler, checkpoints, arn


def test_a_slow_shard_holds_back_neither_another_shard_nor_its_own_order(setup):
    poller, handler, checkpoints, arn = setup
    from turnstile_tools.local.poller import _lane

    lanes = {
        k: _lane({"dynamodb": {"Keys": {"event_id": {"S": k}}}}, 2, "event_id")
        for k in (SLOW, QUICK)
    }
    assert lanes[SLOW] != lanes[QUICK]  # the premise: they are two shards
    # WHEN the stream is read while the slow key's handler is stuck
    reader = threading.Thread(target=lambda: [poller.poll_once() for _ in range(3)])
    reader.start()
    assert handler.slow_started.wait(10)
    reader.join(10)
    # THEN the quick key's records are all delivered meanwhile, in order
    deadline = threading.Event()
    for _ in range(100):
        with handler.lock:
            if len(handler.delivered) == 4:
                break
        deadline.wait(0.05)
    with handler.lock:
        assert handler.delivered == [(QUICK, f"s{i}") for i in range(4)]
    # AND the checkpoint has not passed the slow key's first record
    first = checkpoints.get(arn, next(iter(poller._shards)))
    assert first is None
    # WHEN the slow key goes on
    handler.go.set()
    poller.flush()
    # THEN its records come in order, and the checkpoint is past every record
    slow = [k for k in handler.delivered if k[0] == SLOW]
    assert slow == [(SLOW, f"s{i}") for i in range(4)]
    last = checkpoints.get(arn, next(iter(poller._shards)))
    assert last is not None and int(last) == max(handler.sequence_numbers)
    # each lane is worked by a thread of its own (a container of its own)
    assert handler.threads[SLOW].isdisjoint(handler.threads[QUICK])


def test_stream_shards_need_the_partition_key(aws, tmp_path):
    client = aws.client("dynamodb")
    arn = client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]
    with pytest.raises(ValueError, match="partition key"):
        StreamPoller(
            lambda e, c: None,
            aws.client("dynamodbstreams"),
            arn,
            CheckpointStore(tmp_path / "c.json"),
            stream_shards=2,
        )

"""Processors deciding the same stream at once decide exactly as one would alone.

Invariants 1-3: never oversold, one decision per intake record, arrival order. This runs
against the embedded endpoint (moto behind one lock), because in-process moto is not
atomic under concurrent requests and would break DynamoDB's own guarantees.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from dataclasses import replace
from typing import Any

import boto3

from tests.helpers import decisions, put_raw_intake
from tests.oracle import decide
from turnstile.base.contract import ALL_TABLES, INTAKE_TABLE, STREAM_SOURCE
from turnstile.engine.lifecycle import Event
from turnstile.jobs.processor import DecidedSignup, StreamProcessor, StreamRecord
from turnstile.storage.dynamo import default_client
from turnstile.storage.intake import parse_intake
from turnstile.storage.store import SignupStore
from turnstile_tools.local.poller import CheckpointStore, StreamPoller, to_lambda_record

NOW = "2026-01-01T00:00:00.000000Z"


def test_three_processors_on_one_stream_decide_as_one_alone(endpoint):
    client = default_client(endpoint)
    for spec in ALL_TABLES:
        client.create_table(**spec.create_table_kwargs())
    store = SignupStore(client)
    capacities = {"small": 5, "mid": 17, "big": 60}
    for event_id, capacity in capacities.items():
        store.create_event(event_id, capacity, NOW)
    rng = random.Random(7)
    for i in range(240):
        event_id = rng.choice(list(capacities))
        put_raw_intake(client, event_id, f"u{i}", seats={"N": str(rng.randint(1, 3))})

    streams = boto3.client("dynamodbstreams", endpoint_url=endpoint)
    arn = client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    raw = streams.get_records(ShardIterator=iterator, Limit=1000)["Records"]
    from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import (
        DynamoDBRecord,
    )

    from turnstile.handlers.stream import to_stream_record

    records: list[StreamRecord] = [
        to_stream_record(DynamoDBRecord(to_lambda_record(r, arn))) for r in raw
    ]
    assert len(records) == 240

    errors: list[BaseException] = []
    conflicts: list[int] = []
    #: Every decision any processor committed: a doubled decision shows up here, even
    #: where the second write of an item would hide the first.
    committed: list[DecidedSignup] = []

    def run(seed: int) -> None:
        local_rng = random.Random(seed)
        processor = StreamProcessor(SignupStore(default_client(endpoint)), max_conflicts=200)
        start = 0
        try:
            while start < len(records):
                size = local_rng.randint(1, 40)
                result = processor.process(records[start : start + size])
                conflicts.append(result.conflicts)
                committed.extend(result.decided)
                if result.failures:
                    raise AssertionError(f"failed groups: {result.failures}")
                start += size
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(conflicts) > 0, "the processors never collided: the test proved nothing"

    # The oracle: one decide() per event over the same stream, serially, from scratch.
    by_event: dict[str, list] = {}
    for record in records:
        request = parse_intake(record.new_image, record.sequence_number, record.keys)
        by_event.setdefault(request.event_id, []).append(request)
    expected = {}
    for event_id, requests in by_event.items():
        outcome = decide(Event(event_id, capacities[event_id]), requests)
        for d in outcome.decisions:
            expected[(event_id, d.signup_id)] = (d.status, d.reason, d.position, d.sequence_number)
        event = store.get_event(event_id)
        assert event is not None and outcome.state is not None
        assert (event.event.taken, event.event.accepted) == (
            outcome.state.taken,
            outcome.state.accepted,
        )

    # Exactly one decision committed per intake record, none doubled, none lost.
    per_record = Counter((c.event_id, c.decision.signup_id) for c in committed)
    assert [k for k, n in per_record.items() if n != 1] == []
    assert set(per_record) == set(expected)
    # The same decisions as the serial oracle: statuses, reasons, positions, and each
    # decided by its own stream record.
    got = {
        key: (
            item["status"]["S"],
            item.get("reason", {}).get("S"),
            int(item["position"]["N"]) if "position" in item else None,
            item["sequence_number"]["S"],
        )
        for key, item in decisions(client).items()
    }
    assert got == expected
    # Positions grow with sequence numbers (invariant 3), as the oracle's do.
    for event_id in capacities:
        accepted = sorted((int(v[3]), v[2]) for k, v in got.items() if k[0] == event_id and v[2])
        assert [p for _, p in accepted] == list(range(1, len(accepted) + 1))


class RacingStore(SignupStore):
    """Holds the first commit until another commit has gone through, so that first one
    commits on a version already moved: the guard must turn it into a conflict."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self._lock = threading.Lock()
        self._held = False
        self.other_committed = threading.Event()

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            hold, self._held = not self._held, True
        if hold:
            self.other_committed.wait(timeout=10)
        try:
            return super().commit(*args, **kwargs)
        finally:
            if not hold:
                self.other_committed.set()


def test_a_parallelization_factor_above_one_never_oversells_nor_decides_twice(
    endpoint, tmp_path, monkeypatch
):
    """A misconfigured stack's event source (parallelization factor 3): one event's signups
    are decided by concurrent invocations of the real handler, each item's records in
    order in one lane (as AWS does). Stream order across an event's signups is lost; the
    version guard keeps the event from being oversold or a signup decided twice."""
    from turnstile.handlers import stream as stream_handler

    client = default_client(endpoint)
    for spec in ALL_TABLES:
        client.create_table(**spec.create_table_kwargs())
    store = RacingStore(client)
    store.create_event("gig", 25, NOW)
    rng = random.Random(11)
    for i in range(90):
        put_raw_intake(client, "gig", f"u{i}", seats={"N": str(rng.randint(1, 2))})

    lock = threading.Lock()
    committed: list[DecidedSignup] = []
    conflicts: list[int] = []

    class RecordingProcessor(StreamProcessor):
        def process(self, records):  # type: ignore[no-untyped-def]
            result = super().process(records)
            with lock:
                committed.extend(result.decided)
                conflicts.append(result.conflicts)
            return result

    monkeypatch.setattr(stream_handler, "_processor", RecordingProcessor(store, max_conflicts=200))
    streams = boto3.client("dynamodbstreams", endpoint_url=endpoint)
    arn = client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]
    settings = replace(
        STREAM_SOURCE, batch_size=10, max_batching_window_s=0, parallelization_factor=3
    )
    poller = StreamPoller(
        stream_handler.handler,
        streams,
        arn,
        CheckpointStore(tmp_path / "checkpoints.json"),
        settings=settings,
        sleep=lambda _: None,
    )
    poller.run(threading.Event(), until_idle_s=0.5)

    assert poller.stats.sent_to_failure_destination == 0
    # Exactly one decision committed per signup: none doubled, none lost.
    per_signup = Counter(c.decision.signup_id for c in committed)
    assert sorted(per_signup.values()) == [1] * 90
    items = decisions(client)
    assert len(items) == 90
    accepted = [item for item in items.values() if item["status"]["S"] == "ACCEPTED"]
    seats = sum(int(item["seats"]["N"]) for item in accepted)
    event = store.get_event("gig")
    assert event is not None
    # Never oversold; the counter is the sum of what was accepted; positions 1..n, once each.
    assert seats <= 25
    assert event.event.taken == seats
    assert sorted(int(item["position"]["N"]) for item in accepted) == list(
        range(1, len(accepted) + 1)
    )
    rejected = [item for item in items.values() if item["status"]["S"] == "REJECTED"]
    assert {item["reason"]["S"] for item in rejected} <= {"capacity_full"}
    assert sum(conflicts) > 0, "no commit met another: the guard was not exercised"

"""Two or more processors deciding the same stream at once never oversell (invariant 1).

This runs against the embedded endpoint (moto behind one lock), because in-process moto
is not atomic under concurrent requests and would break DynamoDB's own guarantees.
"""

from __future__ import annotations

import random
import threading

import boto3

from tests.helpers import decisions, put_raw_intake
from turnstile.contract import ALL_TABLES, INTAKE_TABLE
from turnstile.local.poller import to_lambda_record
from turnstile.processor import IntakeRecord, StreamProcessor
from turnstile.store import SignupStore, default_client

NOW = "2026-01-01T00:00:00.000000Z"


def test_three_processors_on_one_stream_never_oversell(endpoint):
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

    from turnstile.handlers.stream import to_intake_record

    records: list[IntakeRecord] = [
        to_intake_record(DynamoDBRecord(to_lambda_record(r, arn))) for r in raw
    ]
    assert len(records) == 240

    errors: list[BaseException] = []
    conflicts: list[int] = []

    def run(seed: int) -> None:
        local_rng = random.Random(seed)
        processor = StreamProcessor(SignupStore(default_client(endpoint)), max_conflicts=200)
        start = 0
        try:
            while start < len(records):
                size = local_rng.randint(1, 40)
                result = processor.process(records[start : start + size])
                conflicts.append(result.conflicts)
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

    got = decisions(client)
    assert len(got) == 240  # one decision per signup, none doubled
    for event_id, capacity in capacities.items():
        accepted = [
            int(d["seats"]["N"])
            for (eid, _), d in got.items()
            if eid == event_id and d["status"]["S"] == "ACCEPTED"
        ]
        event = store.get_event(event_id)
        assert event is not None
        assert sum(accepted) <= capacity
        assert sum(accepted) == event.snapshot.taken
        positions = sorted(
            int(d["position"]["N"])
            for (eid, _), d in got.items()
            if eid == event_id and d["status"]["S"] == "ACCEPTED"
        )
        assert positions == list(range(1, len(accepted) + 1))

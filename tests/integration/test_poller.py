"""StreamPoller: Lambda's event source mapping semantics, against moto's streams."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from botocore.exceptions import ClientError

from tests.helpers import put_raw_intake
from turnstile.base.contract import INTAKE_TABLE, STREAM_SOURCE
from turnstile_tools.local import poller as poller_module
from turnstile_tools.local.poller import CheckpointStore, StreamPoller, matches_filter

FAST = replace(STREAM_SOURCE, batch_size=4, max_batching_window_s=0, retry_attempts=2)


class Recorder:
    """A handler that records what it got and fails as told."""

    def __init__(self, fail: Any = None) -> None:
        self.batches: list[list[str]] = []
        self.fail = fail

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        # A Lambda context, as Powertools reads it in the real handler.
        assert context.function_name and context.get_remaining_time_in_millis() > 0
        ids = [r["dynamodb"]["Keys"]["signup_id"]["S"] for r in event["Records"]]
        self.batches.append(ids)
        if self.fail:
            return self.fail(event["Records"], ids)
        return {"batchItemFailures": []}


@pytest.fixture
def setup(aws, tmp_path):
    client = aws.client("dynamodb")
    sqs = aws.client("sqs")
    queue_url = sqs.create_queue(QueueName="failures")["QueueUrl"]
    arn = client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]

    def make(handler: Any, settings=FAST, from_start=False, waits=False) -> StreamPoller:
        """``waits``: the poller's own wait between retries (which a stop ends), not none."""
        return StreamPoller(
            handler,
            aws.client("dynamodbstreams"),
            arn,
            CheckpointStore(tmp_path / "checkpoints.json"),
            sqs_client=sqs,
            failure_queue_url=queue_url,
            settings=settings,
            from_start=from_start,
            sleep=None if waits else lambda _: None,
        )

    def messages() -> list[dict[str, Any]]:
        got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        return [json.loads(m["Body"]) for m in got]

    return client, make, messages


def signup_id(record: dict[str, Any]) -> str:
    return record["dynamodb"]["Keys"]["signup_id"]["S"]


def drain(poller: StreamPoller, polls: int = 10) -> None:
    for _ in range(polls):
        poller.poll_once()
    poller.flush()


def write(client, n: int, prefix: str = "s") -> None:
    for i in range(n):
        put_raw_intake(client, "e1", f"{prefix}{i}")


def test_batches_respect_batch_size_and_order(setup):
    client, make, _ = setup
    write(client, 10)
    recorder = Recorder()
    drain(make(recorder))
    assert recorder.batches == [["s0", "s1", "s2", "s3"], ["s4", "s5", "s6", "s7"], ["s8", "s9"]]


def test_filter_passes_removes_and_drops_a_rewrite_without_the_marker(setup):
    client, make, _ = setup
    write(client, 2)
    client.delete_item(
        TableName=INTAKE_TABLE.name, Key={"event_id": {"S": "e1"}, "signup_id": {"S": "s0"}}
    )
    put_raw_intake(client, "e1", "s1", marked=False)  # a MODIFY without the marker
    recorder = Recorder()
    poller = make(recorder)
    drain(poller)
    # the deletion reaches the processor (it notes that the record may be put again)
    assert [i for b in recorder.batches for i in b] == ["s0", "s1", "s0"]
    assert poller.stats.records_filtered == 1


def test_partial_failure_redelivers_from_the_failed_record(setup):
    client, make, _ = setup
    write(client, 4)
    calls = {"n": 0}

    def fail_once_at_s2(records, ids):
        calls["n"] += 1
        if calls["n"] == 1:
            return {
                "batchItemFailures": [{"itemIdentifier": records[2]["dynamodb"]["SequenceNumber"]}]
            }
        return {"batchItemFailures": []}

    recorder = Recorder(fail_once_at_s2)
    drain(make(recorder))
    assert recorder.batches == [["s0", "s1", "s2", "s3"], ["s2", "s3"]]


class WorkerDied(BaseException):
    """The worker process dies mid-retry: nothing the poller catches."""


def test_partial_failures_checkpoint_before_the_lowest_failed_record(setup, stream):
    # GIVEN s0..s3, and a handler that fails s3 and s1 (reported in that order), then dies
    client, make, _ = setup
    write(client, 4)
    seq: dict[str, str] = {}

    def fail_s3_s1_then_die(records, ids):
        seq.update({i: r["dynamodb"]["SequenceNumber"] for i, r in zip(ids, records, strict=True)})
        if len(recorder.batches) > 1:
            raise WorkerDied
        failed = [{"itemIdentifier": seq["s3"]}, {"itemIdentifier": seq["s1"]}]
        return {"batchItemFailures": failed}

    recorder = Recorder(fail_s3_s1_then_die)
    poller = make(recorder)
    with pytest.raises(WorkerDied):
        drain(poller)
    # THEN the retry starts at the lowest failed record, and the stored checkpoint is the
    # record before it: s0 is done, s1 is not
    assert recorder.batches == [["s0", "s1", "s2", "s3"], ["s1", "s2", "s3"]]
    assert poller.checkpoints.get(stream.arn, stream.shard_id) == seq["s0"]
    # AND a fresh poller on the same checkpoints resumes exactly at s1
    resumed = Recorder()
    drain(make(resumed))
    assert [i for b in resumed.batches for i in b] == ["s1", "s2", "s3"]


def test_failures_after_the_first_record_checkpoint_what_succeeded(setup, stream):
    # GIVEN a batch whose only failure is its last record, on every delivery
    client, make, messages = setup
    write(client, 3)

    def fail_last(records, ids):
        last = records[-1]["dynamodb"]["SequenceNumber"]
        return {"batchItemFailures": [{"itemIdentifier": last}]}

    recorder = Recorder(fail_last)
    poller = make(recorder)
    drain(poller)
    # THEN s2 is split off (not a retry: as recorded on AWS, test_poller_conformance.py),
    # retried alone until the attempts run out, then sent to the failure queue
    assert recorder.batches == [["s0", "s1", "s2"]] + [["s2"]] * (1 + FAST.retry_attempts)
    assert (poller.stats.partial_failures, poller.stats.retries) == (4, 2)
    assert (poller.stats.invocations, poller.stats.records_delivered) == (4, 6)
    assert (poller.stats.function_errors, poller.stats.sent_to_failure_destination) == (0, 1)
    [message] = messages()
    assert message["DDBStreamBatchInfo"]["batchSize"] == 1
    assert message["requestContext"]["approximateInvokeCount"] == 1 + FAST.retry_attempts
    # AND the checkpoint moved past s2: a fresh poller has nothing to redeliver
    again = Recorder()
    drain(make(again))
    assert again.batches == []


def test_empty_item_identifier_fails_the_whole_batch(setup):
    client, make, _ = setup
    write(client, 2)
    calls = {"n": 0}

    def fail_once(records, ids):
        calls["n"] += 1
        return {"batchItemFailures": [{"itemIdentifier": ""}]} if calls["n"] == 1 else None

    recorder = Recorder(fail_once)
    drain(make(recorder))
    assert recorder.batches == [["s0", "s1"], ["s0", "s1"]]


def test_bisect_isolates_a_poison_record_and_sends_it_to_the_failure_queue(setup):
    client, make, messages = setup
    write(client, 4)

    def poison(records, ids):
        if "s1" in ids:
            raise RuntimeError("boom")
        return {"batchItemFailures": []}

    recorder = Recorder(poison)
    poller = make(recorder)
    drain(poller)
    # halves, in order: [s0 s1] then [s2 s3]; [s0 s1] halves again; s1 alone is retried
    assert recorder.batches == [
        ["s0", "s1", "s2", "s3"],
        ["s0", "s1"],
        ["s0"],
        ["s1"],
        ["s1"],
        ["s1"],
        ["s2", "s3"],
    ]
    assert poller.stats.function_errors == 2 + 1 + FAST.retry_attempts
    # s1 alone: first try plus two retries, then the on-failure destination
    assert recorder.batches.count(["s1"]) == 1 + FAST.retry_attempts
    [message] = messages()
    info = message["DDBStreamBatchInfo"]
    assert info["batchSize"] == 1
    assert info["startSequenceNumber"] == info["endSequenceNumber"]
    assert message["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert poller.stats.sent_to_failure_destination == 1


def test_records_past_max_age_go_to_the_failure_destination(setup):
    client, make, messages = setup
    write(client, 2)
    recorder = Recorder()
    drain(make(recorder, settings=replace(FAST, max_record_age_s=-2)))  # disabled: delivered
    assert recorder.batches == [["s0", "s1"]]
    write(client, 1, prefix="old")
    old = Recorder()
    poller = make(old, settings=replace(FAST, max_record_age_s=0))
    poller._too_old = lambda record: True  # the clock moved a day on
    drain(poller)
    assert old.batches == []
    assert messages()[0]["requestContext"]["condition"] == "RecordAgeExceeded"
    # AND the checkpoint moved past the expired record: a fresh poller (no age limit) has
    # nothing to redeliver
    again = Recorder()
    drain(make(again, settings=replace(FAST, max_record_age_s=-1)))
    assert again.batches == []


def test_resumes_from_checkpoint_and_replays_from_start(setup):
    client, make, _ = setup
    write(client, 3)
    first = Recorder()
    drain(make(first))
    write(client, 2, prefix="t")
    resumed = Recorder()
    drain(make(resumed))
    assert [i for b in resumed.batches for i in b] == ["t0", "t1"]
    replay = Recorder()
    drain(make(replay, from_start=True))
    assert [i for b in replay.batches for i in b] == ["s0", "s1", "s2", "t0", "t1"]


@pytest.mark.parametrize(
    ("pattern", "record", "expected"),
    [
        ({"eventName": ["INSERT", "MODIFY"]}, {"eventName": "INSERT"}, True),
        ({"eventName": ["INSERT", "MODIFY"]}, {"eventName": "REMOVE"}, False),
        (
            {"dynamodb": {"NewImage": {"seats": {"N": [{"exists": True}]}}}},
            {"dynamodb": {"NewImage": {"seats": {"N": "1"}}}},
            True,
        ),
        (
            {"dynamodb": {"NewImage": {"seats": {"N": [{"exists": False}]}}}},
            {"dynamodb": {"NewImage": {"seats": {"N": "1"}}}},
            False,
        ),
        # An attribute is an object ({"N": "1"}), not a leaf: it does not "exist" (AWS).
        (
            {"dynamodb": {"NewImage": {"seats": [{"exists": True}]}}},
            {"dynamodb": {"NewImage": {"seats": {"N": "1"}}}},
            False,
        ),
        (
            {"dynamodb": {"NewImage": {"seats": [{"exists": False}]}}},
            {"dynamodb": {"NewImage": {"seats": {"N": "1"}}}},
            True,
        ),
        ({"a": {"b": [{"exists": False}]}}, {"c": 1}, True),  # under a missing parent
        ({"a": {"b": [{"exists": True}]}}, {"a": {"b": [1, 2]}}, True),
        ({"a": [{"prefix": "IN"}]}, {"a": "INSERT"}, True),
        ({"a": [{"prefix": {"equals-ignore-case": "in"}}]}, {"a": "INSERT"}, True),
        ({"a": [{"suffix": "ERT"}]}, {"a": "INSERT"}, True),
        ({"a": [{"suffix": "ERT"}]}, {"a": 7}, False),
        ({"a": [{"equals-ignore-case": "insert"}]}, {"a": "InSeRt"}, True),
        ({"a": [{"anything-but": ["x", "y"]}]}, {"a": "z"}, True),
        ({"a": [{"anything-but": ["x", "y"]}]}, {"a": "y"}, False),
        ({"a": [{"anything-but": "x"}]}, {"b": "z"}, False),  # needs the field
        ({"a": [{"anything-but": {"prefix": "us-"}}]}, {"a": "eu-1"}, True),
        ({"a": [{"anything-but": {"prefix": "us-"}}]}, {"a": "us-1"}, False),
        ({"a": [{"numeric": [">", 0, "<=", 5]}]}, {"a": 5}, True),
        ({"a": [{"numeric": [">", 0, "<=", 5]}]}, {"a": 0}, False),
        ({"a": [{"numeric": ["=", 3]}]}, {"a": 3.0}, True),
        ({"a": [{"numeric": [">=", 3]}]}, {"a": "4"}, False),  # text is not a number
        ({"a": [{"numeric": ["<", 3]}]}, {"a": True}, False),  # nor is a boolean
        ({"a": [3]}, {"a": 3.0}, True),
        ({"a": ["3"]}, {"a": 3}, False),
        ({"a": [None]}, {"a": None}, True),
        ({"a": [True]}, {"a": 1}, False),
        ({"a": ["x"]}, {"a": ["w", "x"]}, True),  # any item of an array
        ({"a": []}, {"a": "x"}, False),
        ({"userIdentity": {"type": ["Service"]}}, {"eventName": "REMOVE"}, False),
    ],
)
def test_filter_matching(pattern, record, expected):
    assert matches_filter(pattern, record) is expected


def test_the_on_failure_message_is_shaped_as_aws_sends_it(setup, stream):
    client, make, messages = setup
    write(client, 2)
    poller = make(Recorder(lambda records, ids: {"batchItemFailures": [{"itemIdentifier": ""}]}))
    drain(poller)
    [message] = messages()
    first, last = (r["dynamodb"] for r in stream.read_new())
    arrival = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
    info = message.pop("DDBStreamBatchInfo")
    assert arrival.fullmatch(info.pop("approximateArrivalOfFirstRecord"))
    assert arrival.fullmatch(info.pop("approximateArrivalOfLastRecord"))
    assert info == {
        "shardId": stream.shard_id,
        "startSequenceNumber": first["SequenceNumber"],
        "endSequenceNumber": last["SequenceNumber"],
        "batchSize": 2,
        "streamArn": stream.arn,
    }
    context = message.pop("requestContext")
    uuid.UUID(context.pop("requestId"))
    assert context == {
        "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:turnstile-stream-processor",
        "condition": "RetryAttemptsExhausted",
        "approximateInvokeCount": 1 + FAST.retry_attempts,
    }
    stamp = message.pop("timestamp")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp)
    assert message == {
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": None,  # failures reported, not raised (AWS)
        },
        "version": "1.0",
    }


@pytest.mark.parametrize("jitter", ["low", "high"])
def test_retries_back_off_exponentially_with_jitter(aws, setup, tmp_path, monkeypatch, jitter):
    client, _, _ = setup
    write(client, 1)
    sleeps: list[float] = []
    bounds: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        bounds.append((low, high))
        return low if jitter == "low" else high

    monkeypatch.setattr(poller_module.random, "uniform", uniform)
    poller = StreamPoller(
        Recorder(lambda records, ids: {"batchItemFailures": [{"itemIdentifier": ""}]}),
        aws.client("dynamodbstreams"),
        client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"],
        CheckpointStore(tmp_path / "backoff.json"),
        settings=replace(FAST, retry_attempts=6),
        retry_base_delay_s=1.0,
        sleep=sleeps.append,
    )
    drain(poller)
    # 1, 2, 4, 8, 16 s, then capped at 16 s, each stretched by up to half as much again
    assert bounds == [(1, 1.5)] * 6
    stretch = 1 if jitter == "low" else 1.5
    assert sleeps == [stretch * base for base in (1, 2, 4, 8, 16, 16)]


def test_a_handler_that_raises_is_retried_and_counted(setup):
    client, make, messages = setup
    write(client, 1)

    def boom(records, ids):
        raise RuntimeError("boom")

    poller = make(Recorder(boom))
    drain(poller)
    assert (poller.stats.function_errors, poller.stats.retries) == (1 + FAST.retry_attempts, 2)
    assert poller.stats.partial_failures == 0
    assert len(messages()) == 1


@pytest.mark.parametrize(
    "response",
    [
        {"batchItemFailures": ["not a map"]},
        {"batchItemFailures": [{"itemIdentifier": "999"}]},  # no such record in the batch
        {"batchItemFailures": [{}]},
    ],
)
def test_a_failure_naming_no_record_of_the_batch_fails_all_of_it(setup, response):
    client, make, _ = setup
    write(client, 2)
    calls = {"n": 0}

    def fail_once(records, ids):
        calls["n"] += 1
        return response if calls["n"] == 1 else None

    recorder = Recorder(fail_once)
    drain(make(recorder))
    assert recorder.batches == [["s0", "s1"], ["s0", "s1"]]


def test_without_partial_batch_responses_a_reported_failure_is_ignored(setup):
    client, make, _ = setup
    write(client, 2)

    def fail_s0(records, ids):
        return {"batchItemFailures": [{"itemIdentifier": records[0]["dynamodb"]["SequenceNumber"]}]}

    recorder = Recorder(fail_s0)
    poller = make(recorder, settings=replace(FAST, report_batch_item_failures=False))
    drain(poller)
    assert recorder.batches == [["s0", "s1"]]
    assert poller.stats.partial_failures == 0


def test_record_age_is_judged_per_record_from_the_front(setup, monkeypatch):
    _, make, _ = setup
    poller = make(Recorder(), settings=replace(FAST, max_record_age_s=60))
    now = time.time()

    def batch(*ages: float | None) -> list[dict]:
        return [
            {"dynamodb": {} if age is None else {"ApproximateCreationDateTime": now - age}}
            for age in ages
        ]

    assert poller._expired(batch(61, 62, 0)) == 2  # the expired front, fresh ones kept
    assert poller._expired(batch(59, 120)) == 0  # a fresh first record: nothing expired
    assert poller._expired(batch(None, 120)) == 0  # no creation time: never too old
    assert poller._expired(batch(61, 61)) == 2
    monkeypatch.setattr(poller_module.time, "time", lambda: now)
    assert poller._expired(batch(60)) == 0  # exactly the limit: not yet too old
    assert make(Recorder(), settings=replace(FAST, max_record_age_s=-1))._expired(batch(10**6)) == 0
    assert make(Recorder(), settings=replace(FAST, max_record_age_s=0))._expired(batch(1)) == 1
    ageless = make(Recorder(), settings=replace(FAST, max_record_age_s=None))
    assert ageless._expired(batch(10**6)) == 0


def test_a_batch_with_an_expired_front_still_delivers_its_fresh_records(setup):
    # GIVEN a batch whose first two records are past the maximum age, the third fresh
    client, make, messages = setup
    write(client, 2, prefix="old")
    write(client, 1, prefix="new")
    recorder = Recorder()
    poller = make(recorder, settings=replace(FAST, max_record_age_s=60))
    poller._too_old = lambda r: r["dynamodb"]["Keys"]["signup_id"]["S"].startswith("old")
    drain(poller)
    # THEN the two expired records go to the on-failure destination, the fresh one is
    # delivered (AWS discards the expired records only)
    [message] = messages()
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"
    assert message["DDBStreamBatchInfo"]["batchSize"] == 2
    assert recorder.batches == [["new0"]]


def test_clearing_checkpoints_forgets_one_stream_only(tmp_path):
    store = CheckpointStore(tmp_path / "c.json")
    store.put("arn-1", "shard-a", "10")
    store.put("arn-1", "shard-b", "11")
    store.put("arn-2", "shard-a", "20")
    assert (store.get("arn-1", "shard-b"), store.get("arn-2", "shard-a")) == ("11", "20")
    store.clear("arn-1")
    store.clear("arn-3")  # nothing to forget
    reread = CheckpointStore(tmp_path / "c.json")
    assert (reread.get("arn-1", "shard-a"), reread.get("arn-2", "shard-a")) == (None, "20")
    assert CheckpointStore(tmp_path / "none.json").get("arn-1", "shard-a") is None


def test_a_failure_at_the_first_record_checkpoints_nothing(setup, stream):
    client, make, _ = setup
    write(client, 3)

    def fail_first_then_die(records, ids):
        if len(recorder.batches) > 1:
            raise WorkerDied
        return {"batchItemFailures": [{"itemIdentifier": records[0]["dynamodb"]["SequenceNumber"]}]}

    recorder = Recorder(fail_first_then_die)
    poller = make(recorder)
    with pytest.raises(WorkerDied):
        drain(poller)
    assert poller.checkpoints.get(stream.arn, stream.shard_id) is None
    resumed = Recorder()
    drain(make(resumed))
    assert [i for b in resumed.batches for i in b] == ["s0", "s1", "s2"]


def test_a_half_too_old_to_retry_does_not_drop_the_other_half(setup, stream, caplog):
    client, make, messages = setup
    write(client, 2)

    failed: list[bool] = []

    def poison(records, ids):
        if "s0" in ids:
            failed.append(True)
            raise RuntimeError("boom")
        return None

    recorder = Recorder(poison)
    poller = make(recorder)
    # s0 has aged past the limit by the time its half comes up (after the first failure)
    poller._too_old = lambda record: bool(failed) and signup_id(record) == "s0"
    with caplog.at_level(logging.WARNING, logger="turnstile_tools.local.poller"):
        drain(poller)
    assert recorder.batches == [["s0", "s1"], ["s1"]]
    [message] = messages()
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"
    assert message["DDBStreamBatchInfo"]["shardId"] == stream.shard_id
    assert message["requestContext"]["approximateInvokeCount"] == 0
    # the half was never invoked on its own; the batch it came from raised
    assert message["responseContext"]["functionError"] == "Unhandled"
    logged = [r.getMessage() for r in caplog.records]
    assert logged[0] == "stream handler raised: RuntimeError('boom')"
    assert logged[1].startswith("batch sent to the on-failure destination: {")
    assert json.loads(logged[1].split(": ", 1)[1])["DDBStreamBatchInfo"]["batchSize"] == 1


def test_without_a_failure_queue_the_batch_is_still_given_up(aws, tmp_path):
    client = aws.client("dynamodb")
    write(client, 1)
    poller = StreamPoller(
        Recorder(lambda records, ids: {"batchItemFailures": [{"itemIdentifier": ""}]}),
        aws.client("dynamodbstreams"),
        client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"],
        CheckpointStore(tmp_path / "deep" / "er" / "checkpoints.json"),
        sqs_client=aws.client("sqs"),
        failure_queue_url=None,
        settings=FAST,
        sleep=lambda _: None,
    )
    drain(poller)
    assert poller.stats.sent_to_failure_destination == 1
    assert (tmp_path / "deep" / "er" / "checkpoints.json").exists()


def test_every_batch_given_up_is_counted(setup):
    client, make, messages = setup
    write(client, 8)  # two batches of four, each failing for good
    poller = make(Recorder(lambda records, ids: {"batchItemFailures": [{"itemIdentifier": ""}]}))
    drain(poller)
    assert poller.stats.sent_to_failure_destination == 8
    assert [m["DDBStreamBatchInfo"]["batchSize"] for m in messages()] == [4, 4]


def test_a_response_that_is_not_a_map_counts_as_success(setup):
    client, make, _ = setup
    write(client, 2)
    recorder = Recorder(lambda records, ids: "done")
    poller = make(recorder)
    drain(poller)
    assert recorder.batches == [["s0", "s1"]]
    assert poller.stats.partial_failures == 0


def test_arrival_times_are_utc_and_default_to_now(setup, stream, monkeypatch):
    """A record without a creation time arrived 'now'; times are UTC whatever the zone."""
    _, make, messages = setup
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        poller = make(Recorder())
        old = {"dynamodb": {"SequenceNumber": "1", "ApproximateCreationDateTime": 86400}}
        undated = {"dynamodb": {"SequenceNumber": "2"}}
        poller._send_to_failure_destination(
            stream.shard_id, [old, undated], "RecordAgeExceeded", poller_module._Part([]), True
        )
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    [message] = messages()
    info = message["DDBStreamBatchInfo"]
    assert info["approximateArrivalOfFirstRecord"] == "1970-01-02T00:00:00Z"
    last = datetime.strptime(info["approximateArrivalOfLastRecord"], "%Y-%m-%dT%H:%M:%SZ")
    stamp = datetime.strptime(message["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
    for then in (last, stamp):
        assert abs((datetime.now(UTC) - then.replace(tzinfo=UTC)).total_seconds()) < 60


def test_a_checkpoint_is_renamed_into_place_from_its_own_directory(tmp_path, monkeypatch):
    """Atomic only within one file system: the new file is written beside the old one."""
    renames: list[tuple[str, str]] = []
    real_replace = poller_module.os.replace

    def replace_(src, dst):
        renames.append((str(Path(src).parent), str(Path(dst).parent)))
        real_replace(src, dst)

    monkeypatch.setattr(poller_module.os, "replace", replace_)
    store = CheckpointStore(tmp_path / "state" / "checkpoints.json")
    store.put("arn", "shard", "1")
    assert renames == [(str(tmp_path / "state"), str(tmp_path / "state"))]
    assert [f.name for f in (tmp_path / "state").iterdir()] == ["checkpoints.json"]


def test_time_spent_delivering_is_not_idle_time(setup):
    # GIVEN a batch delivered by a poll that read nothing new (the batching window was still
    # open), whose handler is slower than the idle limit while producers keep writing
    client, make, _ = setup
    write(client, 2)

    def slow(records, ids):
        if len(recorder.batches) == 1:
            write(client, 2, prefix="t")
            time.sleep(0.6)
        return None

    recorder = Recorder(slow)
    poller = make(recorder, settings=replace(FAST, max_batching_window_s=30))
    # WHEN the worker runs until the stream has been quiet for 0.3 s
    poller.run(threading.Event(), until_idle_s=0.3)
    # THEN it did not stop while it was busy: the records written meanwhile are delivered
    assert [i for b in recorder.batches for i in b] == ["s0", "s1", "t0", "t1"]


def test_polls_that_fail_are_not_idle_time(setup, aws, tmp_path):
    # GIVEN records in the stream, and a streams endpoint whose next GetRecords calls fail
    # for longer than the idle limit (throttling, 5xx, a restarting endpoint)
    client, make, _ = setup
    write(client, 3)
    recorder = Recorder()
    poller = make(recorder)
    streams = poller.streams
    failures = {"left": 3}

    class Flaky:
        def __getattr__(self, name: str) -> Any:
            call = getattr(streams, name)
            if name != "get_records":
                return call

            def get_records(**kwargs: Any) -> Any:
                if failures["left"]:
                    failures["left"] -= 1
                    raise ClientError(
                        {"Error": {"Code": "InternalServerError", "Message": "5xx"}},
                        "GetRecords",
                    )
                return call(**kwargs)

            return get_records

    poller.streams = Flaky()

    class Stop(threading.Event):
        """A stop never set that does not wait: each wait moves the clock on instead."""

        def __init__(self) -> None:
            super().__init__()
            self.now = 0.0
            self.waits: list[float] = []

        def wait(self, timeout: float | None = None) -> bool:
            self.waits.append(timeout or 0.0)
            self.now += timeout or 0.0
            return False

    # WHEN the worker runs until the stream has been quiet for 1.5 s (each failed poll
    # waits before the next: a second by default, 0.3 s here)
    poller.poll_error_delay_s = 0.3
    stop = Stop()
    with patch.object(poller_module.time, "monotonic", lambda: stop.now):
        poller.run(stop, until_idle_s=1.5)
    # THEN it read the stream once the endpoint answered, and delivered what it held
    assert failures["left"] == 0
    assert [i for b in recorder.batches for i in b] == ["s0", "s1", "s2"]
    # AND each failed poll waited its delay, and the quiet counted only from after them
    assert stop.waits[:3] == [0.3] * 3
    assert sum(stop.waits[3:]) >= 1.5


def test_a_shorter_retry_delay_shortens_the_wait_after_a_failed_poll(setup, monkeypatch):
    from turnstile_tools.local.stack import RETRY_DELAY_ENV, local_retry_delay

    _, make, _ = setup
    poller = make(Recorder())
    assert poller.poll_error_delay_s == 1.0  # the default: five times 200 ms
    monkeypatch.setenv(RETRY_DELAY_ENV, "20")
    shorter = StreamPoller(
        Recorder(), poller.streams, poller.stream_arn, poller.checkpoints, **local_retry_delay()
    )
    assert shorter.poll_error_delay_s == pytest.approx(0.1)


class TrimmedAfterCheckpoints:
    """A streams client whose GetShardIterator finds every checkpoint past the retention."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_shard_iterator(self, **kwargs: Any) -> Any:
        if kwargs.get("ShardIteratorType") == "AFTER_SEQUENCE_NUMBER":
            self.refused += 1
            error = {"Code": "TrimmedDataAccessException", "Message": "beyond the trim horizon"}
            raise ClientError({"Error": error}, "GetShardIterator")
        return self._client.get_shard_iterator(**kwargs)


def test_a_checkpoint_past_the_retention_reads_on_from_the_oldest_record(aws, stream, tmp_path):
    # GIVEN a checkpoint on a record the stream no longer keeps (a worker down for a day)
    client = aws.client("dynamodb")
    write(client, 2)
    checkpoints = CheckpointStore(tmp_path / "checkpoints.json")
    checkpoints.put(stream.arn, stream.shard_id, "1")
    streams = TrimmedAfterCheckpoints(aws.client("dynamodbstreams"))
    recorder = Recorder()
    poller = StreamPoller(recorder, streams, stream.arn, checkpoints, settings=FAST)
    # WHEN it polls: the first GetShardIterator is refused as trimmed
    drain(poller)
    # THEN it reads on from the trim horizon, once, instead of asking again forever
    assert recorder.batches == [["s0", "s1"]]
    assert (streams.refused, poller.stats.checkpoints_trimmed) == (1, 1)


@pytest.mark.parametrize("operation", ["put", "clear"])
def test_a_crash_while_checkpointing_leaves_the_old_file(tmp_path, monkeypatch, operation):
    """Nothing is visible until the new file is renamed over the old one."""
    store = CheckpointStore(tmp_path / "checkpoints.json")
    store.put("arn-1", "shard", "10")
    store.put("arn-2", "shard", "20")
    before = (tmp_path / "checkpoints.json").read_text()

    def killed(src, dst):
        raise OSError("killed before the rename")

    monkeypatch.setattr(poller_module.os, "replace", killed)
    with pytest.raises(OSError, match="killed"):
        store.put("arn-1", "shard", "11") if operation == "put" else store.clear("arn-1")
    assert (tmp_path / "checkpoints.json").read_text() == before
    assert [f.name for f in tmp_path.iterdir()] == ["checkpoints.json"]  # no temp file left


class LaneRecorder:
    """Records each invocation's (key, sequence number) pairs; the first invocation waits
    until a second one has started, so lanes that do not run at once are seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.invocations: list[list[tuple[str, int]]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.second_started = threading.Event()

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            first = not self.invocations
            self.invocations.append(
                [(signup_id(r), int(r["dynamodb"]["SequenceNumber"])) for r in event["Records"]]
            )
            if not first:
                self.second_started.set()
        if first:
            self.second_started.wait(timeout=10)
        with self.lock:
            self.in_flight -= 1
        return {"batchItemFailures": []}


def test_lanes_run_at_once_and_keep_each_items_records_in_order(setup, stream):
    # GIVEN 12 items each written three times (an INSERT and two MODIFYs that carry the
    # undecided marker, so the stream filter lets them through as it does re-emissions)
    client, make, _ = setup
    for round_ in range(3):
        for i in range(12):
            put_raw_intake(client, "e1", f"s{i}", marked=True, round={"N": str(round_)})
    handler = LaneRecorder()
    poller = make(handler, settings=replace(FAST, parallelization_factor=3, batch_size=5))
    drain(poller)
    # THEN invocations ran at once, every record was delivered once, each batch at most
    # batch_size, each item's records in stream order and all in one lane's batches
    assert handler.most_in_flight >= 2
    delivered = [pair for invocation in handler.invocations for pair in invocation]
    assert len(delivered) == len(set(delivered)) == 36
    assert max(len(invocation) for invocation in handler.invocations) <= 5
    by_item: dict[str, list[int]] = {}
    for key, sequence in delivered:
        by_item.setdefault(key, []).append(sequence)
    assert all(seqs == sorted(seqs) for seqs in by_item.values())
    lanes_of_item = {poller_module._lane(r, 3) for r in stream.read_new() if signup_id(r) == "s0"}
    assert len(lanes_of_item) == 1
    # AND the checkpoint moved only once all lanes were done: to the last record read
    last = max(sequence for _, sequence in delivered)
    assert poller.checkpoints.get(stream.arn, stream.shard_id) == str(last)


def test_one_lane_failing_holds_the_checkpoint_for_all(setup, stream):
    client, make, _ = setup
    write(client, 8)

    def die_on_s3(event: dict[str, Any], context: Any) -> Any:
        if any(signup_id(r) == "s3" for r in event["Records"]):
            raise WorkerDied
        return None

    poller = make(die_on_s3, settings=replace(FAST, parallelization_factor=4, batch_size=2))
    with pytest.raises(WorkerDied):
        drain(poller)
    assert poller.checkpoints.get(stream.arn, stream.shard_id) is None  # all redelivered


def test_settings_refuse_a_parallelization_factor_aws_refuses():
    for factor in (0, 11):
        with pytest.raises(ValueError, match="parallelization_factor is 1 to 10"):
            replace(STREAM_SOURCE, parallelization_factor=factor)


def test_the_local_worker_takes_its_window_and_lanes_from_the_environment(monkeypatch):
    from turnstile.base.errors import TurnstileError
    from turnstile_tools.local.stack import local_event_source

    assert local_event_source() == STREAM_SOURCE  # nothing set: the deployed settings
    monkeypatch.setenv("TURNSTILE_BATCHING_WINDOW_S", "0")
    monkeypatch.setenv("TURNSTILE_PARALLELIZATION_FACTOR", "4")
    settings = local_event_source()
    assert (settings.max_batching_window_s, settings.parallelization_factor) == (0, 4)
    monkeypatch.setenv("TURNSTILE_PARALLELIZATION_FACTOR", "eleven")
    with pytest.raises(TurnstileError, match="from 1 to 10, not 'eleven'"):
        local_event_source()


def test_drills_shorten_the_local_workers_retry_delay_through_the_environment(monkeypatch):
    from turnstile.base.errors import TurnstileError
    from turnstile_tools.local.stack import RETRY_DELAY_ENV, local_retry_delay

    monkeypatch.delenv(RETRY_DELAY_ENV, raising=False)
    assert local_retry_delay() == {}  # unset: the poller's own delay
    monkeypatch.setenv(RETRY_DELAY_ENV, "20")
    assert local_retry_delay() == {"retry_base_delay_s": 0.02}
    for bad in ("-1", "60001", "0.5", "soon"):
        monkeypatch.setenv(RETRY_DELAY_ENV, bad)
        with pytest.raises(TurnstileError, match=f"from 0 to 60000, not '{bad}'"):
            local_retry_delay()


def test_no_retries_means_one_invocation_then_the_failure_destination(setup):
    client, make, messages = setup
    write(client, 1)

    def boom(records, ids):
        raise RuntimeError("boom")

    recorder = Recorder(boom)
    drain(make(recorder, settings=replace(FAST, retry_attempts=0)))
    assert recorder.batches == [["s0"]]
    [message] = messages()
    assert message["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert message["requestContext"]["approximateInvokeCount"] == 1
    assert message["responseContext"]["functionError"] == "Unhandled"


def test_a_record_that_failed_then_expired_says_how_it_failed(setup):
    # GIVEN a record whose first invocation raises, and which is past the maximum age by
    # the time its retry comes up
    client, make, messages = setup
    write(client, 1)
    failed: list[bool] = []

    def boom(records, ids):
        failed.append(True)
        raise RuntimeError("boom")

    poller = make(Recorder(boom))
    poller._too_old = lambda record: bool(failed)
    drain(poller)
    # THEN it is given up as too old, with the one failed invocation it had, and how it failed
    [message] = messages()
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"
    assert message["requestContext"]["approximateInvokeCount"] == 1
    assert message["responseContext"]["functionError"] == "Unhandled"


@pytest.mark.parametrize("given_up", ["RecordAgeExceeded", "RetryAttemptsExhausted"])
def test_records_given_up_inside_a_lane_are_checkpointed_only_with_the_lanes(
    setup, stream, given_up
):
    # GIVEN lanes, and records one lane gives up on (too old, or out of retries)
    client, make, messages = setup
    write(client, 8)

    def boom(records, ids):
        raise RuntimeError("boom")

    handler = Recorder(boom if given_up == "RetryAttemptsExhausted" else None)
    poller = make(handler, settings=replace(FAST, parallelization_factor=4, batch_size=8))
    if given_up == "RecordAgeExceeded":
        poller._too_old = lambda record: signup_id(record) in ("s1", "s2")
    checkpoints: list[str] = []
    put = poller.checkpoints.put
    poller.checkpoints.put = lambda arn, shard, seq: (checkpoints.append(seq), put(arn, shard, seq))
    drain(poller)
    # THEN the shard is checkpointed once, at the last record read, after every lane is done:
    # never at a record of one lane while another lane still has records to deliver
    given = messages()
    assert given and all(m["requestContext"]["condition"] == given_up for m in given)
    last = stream.read_new()[-1]["dynamodb"]["SequenceNumber"]
    assert checkpoints == [last]


def test_a_stop_gives_up_a_failing_batch_instead_of_waiting_out_its_retries(setup, aws, tmp_path):
    # GIVEN records in the stream, and a handler that fails, as a stop comes (Ctrl-C)
    client, make, messages = setup
    write(client, 3)
    stop = threading.Event()
    calls: list[list[str]] = []

    def failing(event: dict[str, Any], context: Any) -> Any:
        calls.append([signup_id(r) for r in event["Records"]])
        stop.set()
        raise RuntimeError("the table is unreachable")

    poller = make(failing, waits=True)
    # WHEN the worker runs and the stop comes during the batch's first invocation
    poller.run(stop)
    # THEN it returns without retrying the batch and without giving up on its records:
    # nothing sent to the on-failure queue, the checkpoint still before them
    assert calls == [["s0", "s1", "s2"]]
    assert poller.stats.sent_to_failure_destination == 0 and messages() == []
    assert poller.checkpoints.get(poller.stream_arn, next(iter(poller._shards))) is None
    # AND the next start delivers them again
    recorder = Recorder()
    again = make(recorder)
    again.checkpoints = poller.checkpoints
    drain(again)
    assert [i for b in recorder.batches for i in b] == ["s0", "s1", "s2"]


def test_a_stop_ends_the_wait_between_retries(setup):
    _, make, _ = setup
    poller = make(Recorder(), waits=True)
    stop = threading.Event()
    stop.set()
    poller._stop = stop  # as run() holds it
    waiting = threading.Thread(target=poller._sleep, args=(30,))
    waiting.start()
    waiting.join(10)
    assert not waiting.is_alive()

"""``turnstile redrive``: on-failure messages (metadata only) get their records decided."""

from __future__ import annotations

import json

import pytest

from tests.helpers import decisions, fail_everything_into_the_queue, put_raw_intake
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.redrive import redrive_queue

NOW = "2026-01-01T00:00:00.000000Z"

#: Records written with the marker and without; the sweeper's index path and full scan.
pytestmark = pytest.mark.usefixtures("sweep_path")


@pytest.fixture
def world(aws, tmp_path, stream):
    client = aws.client("dynamodb")
    sqs = aws.client("sqs")
    queue_url = sqs.create_queue(QueueName="failures")["QueueUrl"]
    store = SignupStore(client, sleep=lambda _: None)
    stream_handler._processor = StreamProcessor(store)
    yield client, sqs, queue_url, store, aws.client("dynamodbstreams")
    stream_handler._processor = None


def test_redrive_reads_the_stream_re_emits_and_deletes_once_decided(world, tmp_path, stream):
    client, sqs, queue_url, store, streams = world
    store.create_event("gig", 2, NOW)
    for i in range(3):
        put_raw_intake(client, "gig", f"u{i}")
    stream.read_new()  # the test's own reader sits past them
    poller = fail_everything_into_the_queue(streams, client, sqs, queue_url, tmp_path)
    assert poller.stats.sent_to_failure_destination == 3
    assert decisions(client) == {}

    def the_stream_delivers(_: float) -> None:
        records = stream.read_new()
        if records:
            stream_handler.handler({"Records": records}, LocalLambdaContext())

    result = redrive_queue(store, sqs, queue_url, streams, wait_s=5, sleep=the_stream_delivers)
    assert (result.messages, result.deleted, result.kept) == (1, 1, 0)
    assert (result.from_stream, result.re_emitted) == (3, 3)
    assert {k[1] for k in decisions(client)} == {"u0", "u1", "u2"}
    assert sqs.receive_message(QueueUrl=queue_url).get("Messages") is None
    assert audit(store).ok


def test_past_retention_the_intake_table_is_read_instead(world, stream):
    client, sqs, queue_url, store, streams = world
    store.create_event("gig", 5, NOW)
    put_raw_intake(client, "gig", "old")
    stream.read_new()
    message = {
        "DDBStreamBatchInfo": {
            "shardId": "shardId-that-was-trimmed-away",
            "startSequenceNumber": "100000000000000000001",
            "endSequenceNumber": "100000000000000000002",
            "streamArn": "arn:aws:dynamodb:us-east-1:123456789012:table/turnstile-intake/stream/x",
            "batchSize": 2,
        }
    }
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(message))

    def the_stream_delivers(_: float) -> None:
        records = stream.read_new()
        if records:
            stream_handler.handler({"Records": records}, LocalLambdaContext())

    result = redrive_queue(store, sqs, queue_url, streams, wait_s=5, sleep=the_stream_delivers)
    assert (result.deleted, result.from_intake, result.re_emitted) == (1, 1, 1)
    assert set(decisions(client)) == {("gig", "old")}


def test_a_message_whose_records_stay_undecided_is_kept(world, tmp_path):
    client, sqs, queue_url, store, streams = world
    store.create_event("gig", 5, NOW)
    put_raw_intake(client, "gig", "stuck")
    fail_everything_into_the_queue(streams, client, sqs, queue_url, tmp_path)
    result = redrive_queue(store, sqs, queue_url, streams, wait_s=0.2, sleep=lambda _: None)
    assert (result.deleted, result.kept) == (0, 1)

"""The local event source mapping against what AWS was recorded doing.

Each fixture below is a fact recorded against real AWS (or stated by AWS's documentation),
kept small: only the fields a test checks, with its source. The recordings are LocalStack's
AWS-validated snapshots of Lambda's DynamoDB Streams event source mapping:

* ``SNAPSHOT``: localstack/localstack,
  tests/aws/services/lambda_/event_source_mapping/test_lambda_integration_dynamodbstreams.snapshot.json
  (commit 4417e3b3e2a591146e24a60e30c7c15bad15dbd4, recorded against AWS on 2025-11-25),
* ``SNAPSHOT_TEST``: the test module that recorded it, same path with ``.py`` (its
  parameters: what was written, the mapping's settings, the filter of each case).

Every test runs the real ``StreamPoller`` (or its record and filter functions) against
moto's DynamoDB Streams and SQS.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.helpers import put_raw_intake
from turnstile.base.contract import INTAKE_TABLE, STREAM_SOURCE, EventSourceSettings
from turnstile.base.eventfilter import InvalidFilterPattern, matches_any
from turnstile.handlers import sweeper as sweeper_handler
from turnstile.jobs.sweeper import run_id_for
from turnstile_tools.local.poller import CheckpointStore, StreamPoller, to_lambda_record

SNAPSHOT = (
    "localstack/localstack tests/aws/services/lambda_/event_source_mapping/"
    "test_lambda_integration_dynamodbstreams.snapshot.json"
)

#: A mapping as the recordings configure it: no batching window here (the records are all
#: in the stream before the first poll), no bisect (the recorded mappings leave it off).
RECORDED_MAPPING = replace(
    STREAM_SOURCE,
    batch_size=3,
    max_batching_window_s=0,
    retry_attempts=3,
    bisect_on_error=False,
    max_record_age_s=-1,
    filter_patterns=(),
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Handler:
    """Records every invocation (the signup ids of its records) and answers as told."""

    def __init__(self, answer: Any = None) -> None:
        self.invocations: list[list[str]] = []
        self.events: list[dict[str, Any]] = []
        self.answer = answer

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        self.events.append(event)
        self.invocations.append([r["dynamodb"]["Keys"]["signup_id"]["S"] for r in event["Records"]])
        return self.answer(event["Records"]) if callable(self.answer) else self.answer


@pytest.fixture
def esm(aws, tmp_path):
    """Builds pollers on the intake stream, with an on-failure queue to read back."""
    client = aws.client("dynamodb")
    sqs = aws.client("sqs")
    queue_url = sqs.create_queue(QueueName="on-failure")["QueueUrl"]
    arn = client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]

    class Esm:
        dynamodb = client
        stream_arn = arn

        @staticmethod
        def poller(handler: Any, settings: EventSourceSettings, **kwargs: Any) -> StreamPoller:
            return StreamPoller(
                handler,
                aws.client("dynamodbstreams"),
                arn,
                CheckpointStore(tmp_path / "checkpoints.json"),
                sqs_client=sqs,
                failure_queue_url=queue_url,
                settings=settings,
                sleep=lambda _: None,
                **kwargs,
            )

        @staticmethod
        def on_failure_messages() -> list[dict[str, Any]]:
            got = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
            return [json.loads(m["Body"]) for m in got.get("Messages", [])]

    return Esm


def drain(poller: StreamPoller, polls: int = 5) -> None:
    for _ in range(polls):
        poller.poll_once()
    poller.flush()


# -- the record Lambda delivers ---------------------------------------------------------

#: SNAPSHOT, test_dynamodb_event_source_mapping, ``event_logs``: an INSERT of
#: {"my_partition_key": "hello world", "binary_key": b"foobar"} on a NEW_IMAGE stream.
RECORDED_RECORD = {
    "fields": {
        "eventID",
        "eventName",
        "eventVersion",
        "eventSource",
        "awsRegion",
        "dynamodb",
        "eventSourceARN",
    },
    "eventVersion": "1.1",
    "eventSource": "aws:dynamodb",
    "dynamodb_fields": {
        "ApproximateCreationDateTime",
        "Keys",
        "NewImage",
        "SequenceNumber",
        "SizeBytes",
        "StreamViewType",
    },
    "StreamViewType": "NEW_IMAGE",
    "binary_key": {"B": "Zm9vYmFy"},  # b"foobar", base64-encoded
}


def test_a_delivered_record_has_the_recorded_shape(esm):
    """Fields and constants from ``RECORDED_RECORD`` (SNAPSHOT); the creation time is a
    float of seconds: SNAPSHOT_TEST asserts ``isinstance(creation_time, float)`` in
    test_dynamodb_event_filter and ``int(math.log10(timestamp)) == 9`` in
    test_dynamodb_event_source_mapping (both validated against AWS)."""
    put_raw_intake(esm.dynamodb, "e1", "s1", binary_key={"B": b"foobar"})
    handler = Handler()
    drain(esm.poller(handler, RECORDED_MAPPING))
    [[record]] = [event["Records"] for event in handler.events]
    assert set(record) == RECORDED_RECORD["fields"]
    assert record["eventVersion"] == RECORDED_RECORD["eventVersion"]
    assert record["eventSource"] == RECORDED_RECORD["eventSource"]
    assert record["eventName"] == "INSERT"
    stream = record["dynamodb"]
    assert set(stream) == RECORDED_RECORD["dynamodb_fields"]
    assert stream["StreamViewType"] == RECORDED_RECORD["StreamViewType"]
    assert stream["NewImage"]["binary_key"] == RECORDED_RECORD["binary_key"]
    created = stream["ApproximateCreationDateTime"]
    assert isinstance(created, float)
    assert int(math.log10(created)) == 9  # seconds, not milliseconds


#: SNAPSHOT: the SizeBytes of recorded records, with their keys and images (test,
#: Keys, NewImage, OldImage, SizeBytes). DynamoDB's item-size rules over the three.
RECORDED_SIZES = [
    (
        "test_dynamodb_event_source_mapping",
        {"my_partition_key": {"S": "hello world"}},
        {"binary_key": {"B": b"foobar"}, "my_partition_key": {"S": "hello world"}},
        None,
        70,
    ),
    (
        "test_dynamodb_event_filter[content_or_filter] INSERT",
        {"id": {"S": "id_value"}},
        {"id": {"S": "id_value"}},
        None,
        20,
    ),
    (
        "test_dynamodb_event_filter[content_or_filter] MODIFY",
        {"id": {"S": "id_value"}},
        {"id2": {"S": "id2_new_value"}, "id": {"S": "id_value"}},
        {"id": {"S": "id_value"}},
        46,
    ),
    (
        "test_dynamodb_report_batch_item_failures",
        {"my_partition_key": {"S": "testId0"}},
        {"my_partition_key": {"S": "testId0"}, "should_fail": {"BOOL": False}},
        None,
        58,
    ),
]


@pytest.mark.parametrize(
    ("keys", "new_image", "old_image", "size"),
    [case[1:] for case in RECORDED_SIZES],
    ids=[case[0] for case in RECORDED_SIZES],
)
def test_size_bytes_are_the_recorded_sizes(keys, new_image, old_image, size):
    """SizeBytes from SNAPSHOT; moto reports its own (larger) figure, which is replaced."""
    stream = {
        "ApproximateCreationDateTime": datetime(2026, 1, 1, tzinfo=UTC),
        "Keys": keys,
        "NewImage": new_image,
        "SequenceNumber": "100",
        "SizeBytes": 999,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if old_image:
        stream["OldImage"] = old_image
    raw = {"eventID": "1", "eventName": "INSERT", "eventVersion": "1.0", "dynamodb": stream}
    assert to_lambda_record(raw, "arn")["dynamodb"]["SizeBytes"] == size


# -- the on-failure record --------------------------------------------------------------

#: SNAPSHOT, test_dynamodb_event_source_mapping_with_on_failure_destination_config: a
#: function that raises, BatchSize 1, MaximumRetryAttempts 1, an SQS destination.
RECORDED_ON_FAILURE = {
    "retry_attempts": 1,
    "approximateInvokeCount": 2,
    "requestContext": {"requestId", "functionArn", "condition", "approximateInvokeCount"},
    "condition": "RetryAttemptsExhausted",
    "responseContext": {
        "statusCode": 200,
        "executedVersion": "$LATEST",
        "functionError": "Unhandled",
    },
    "version": "1.0",
    "fields": {"requestContext", "responseContext", "version", "timestamp", "DDBStreamBatchInfo"},
    "timestamp": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",  # 2022-07-13T13:48:01.000Z
    "batch_info": {
        "shardId",
        "startSequenceNumber",
        "endSequenceNumber",
        "approximateArrivalOfFirstRecord",
        "approximateArrivalOfLastRecord",
        "batchSize",
        "streamArn",
    },
    "arrival": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",  # 2022-07-13T13:48:01Z
}


def test_the_on_failure_record_of_a_function_that_raises(esm):
    """Every field of ``RECORDED_ON_FAILURE`` (SNAPSHOT): 1 retry, 2 invocations, count 2."""
    put_raw_intake(esm.dynamodb, "e1", "s1")

    def raises(records):
        raise RuntimeError("boom")

    handler = Handler(raises)
    settings = replace(
        RECORDED_MAPPING, batch_size=1, retry_attempts=RECORDED_ON_FAILURE["retry_attempts"]
    )
    drain(esm.poller(handler, settings))
    assert handler.invocations == [["s1"]] * RECORDED_ON_FAILURE["approximateInvokeCount"]
    [message] = esm.on_failure_messages()
    assert set(message) == RECORDED_ON_FAILURE["fields"]
    context = message["requestContext"]
    assert set(context) == RECORDED_ON_FAILURE["requestContext"]
    uuid.UUID(context["requestId"])
    assert context["condition"] == RECORDED_ON_FAILURE["condition"]
    assert context["approximateInvokeCount"] == RECORDED_ON_FAILURE["approximateInvokeCount"]
    assert message["responseContext"] == RECORDED_ON_FAILURE["responseContext"]
    assert message["version"] == RECORDED_ON_FAILURE["version"]
    assert re.fullmatch(RECORDED_ON_FAILURE["timestamp"], message["timestamp"])
    info = message["DDBStreamBatchInfo"]
    assert set(info) == RECORDED_ON_FAILURE["batch_info"]
    assert info["batchSize"] == 1
    assert info["startSequenceNumber"] == info["endSequenceNumber"]
    assert info["streamArn"] == esm.stream_arn
    for field in ("approximateArrivalOfFirstRecord", "approximateArrivalOfLastRecord"):
        assert re.fullmatch(RECORDED_ON_FAILURE["arrival"], info[field])


def _raise(records: Any) -> Any:
    return 1 / 0  # SNAPSHOT_TEST's "(lambda: 1 / 0)()"


#: SNAPSHOT, test_dynamodb_report_batch_item_failure_scenarios and
#: test_dynamodb_report_batch_item_success_scenarios: one record, MaximumRetryAttempts 3,
#: ReportBatchItemFailures on; (case, the function's answer, invocations, on-failure
#: record's functionError or None for no record).
RECORDED_ANSWERS = [
    ("item_identifier_not_present_failure", {"batchItemFailures": [{"itemIdentifier": 123}]}, 4, None),  # noqa: E501
    ("empty_string_item_identifier_failure", {"batchItemFailures": [{"itemIdentifier": ""}]}, 4, None),  # noqa: E501
    ("null_item_identifier_failure", {"batchItemFailures": [{"itemIdentifier": None}]}, 4, None),
    ("invalid_key_foo_failure", {"batchItemFailures": [{"foo": 123}]}, 4, None),
    ("invalid_key_foo_null_value_failure", {"batchItemFailures": [{"foo": None}]}, 4, None),
    ("unhandled_exception_in_function", _raise, 4, "Unhandled"),
    ("empty_list_success", {"batchItemFailures": []}, 1, "no record"),
    ("null_success", None, 1, "no record"),
    ("empty_dict_success", {}, 1, "no record"),
    ("empty_batch_item_failure_success", {"batchItemFailures": []}, 1, "no record"),
    ("null_batch_item_failure_success", {"batchItemFailures": None}, 1, "no record"),
]


@pytest.mark.parametrize(
    ("answer", "invocations", "function_error"),
    [case[1:] for case in RECORDED_ANSWERS],
    ids=[case[0] for case in RECORDED_ANSWERS],
)
def test_what_each_answer_of_the_function_leads_to(esm, answer, invocations, function_error):
    """``RECORDED_ANSWERS`` (SNAPSHOT): a failure reported in ``batchItemFailures`` has
    ``functionError`` null; only a function that raised is ``Unhandled``; 3 retries are 4
    invocations and ``approximateInvokeCount`` 4."""
    put_raw_intake(esm.dynamodb, "e1", "s1")
    handler = Handler(answer)
    drain(esm.poller(handler, RECORDED_MAPPING))
    assert handler.invocations == [["s1"]] * invocations
    messages = esm.on_failure_messages()
    if function_error == "no record":
        assert messages == []
        return
    [message] = messages
    assert message["requestContext"]["approximateInvokeCount"] == invocations
    assert message["responseContext"]["functionError"] == function_error


#: SNAPSHOT, test_dynamodb_report_batch_item_failures: testId0..testId5 written in order,
#: BatchSize 3, MaximumRetryAttempts 3, the function reports testId5 failed every time.
#: ``dynamodb_records`` (every record the function received, sorted by key) and the one
#: on-failure record.
RECORDED_PARTIAL_FAILURE = {
    "received": ["testId0", "testId1", "testId2", "testId3", "testId4"] + ["testId5"] * 5,
    "approximateInvokeCount": 4,
    "functionError": None,
    "batchSize": 1,
}


def test_a_record_failed_behind_others_is_split_off_then_retried(esm):
    """``RECORDED_PARTIAL_FAILURE`` (SNAPSHOT): testId5 reaches the function five times
    (once in its batch, then as a batch of its own: once plus 3 retries) and the on-failure
    record counts the 4 invocations of that last batch. A partial failure behind
    successful records splits the batch there, as BisectBatchOnFunctionError splits it
    (https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html:
    "the batch is bisected at the returned sequence number"); it is not a retry."""
    for i in range(6):
        put_raw_intake(esm.dynamodb, "e1", f"testId{i}")

    def fail_test_id5(records):
        failed = [
            {"itemIdentifier": r["dynamodb"]["SequenceNumber"]}
            for r in records
            if r["dynamodb"]["Keys"]["signup_id"]["S"] == "testId5"
        ]
        return {"batchItemFailures": failed}

    handler = Handler(fail_test_id5)
    drain(esm.poller(handler, RECORDED_MAPPING))
    received = sorted(i for invocation in handler.invocations for i in invocation)
    assert received == RECORDED_PARTIAL_FAILURE["received"]
    [message] = esm.on_failure_messages()
    count = message["requestContext"]["approximateInvokeCount"]
    assert count == RECORDED_PARTIAL_FAILURE["approximateInvokeCount"]
    assert message["responseContext"]["functionError"] is RECORDED_PARTIAL_FAILURE["functionError"]
    info = message["DDBStreamBatchInfo"]
    assert info["batchSize"] == RECORDED_PARTIAL_FAILURE["batchSize"]
    last = handler.events[-1]["Records"][0]["dynamodb"]["SequenceNumber"]
    assert info["startSequenceNumber"] == info["endSequenceNumber"] == last


# -- retries ------------------------------------------------------------------------------


def test_retries_minus_one_retry_until_the_record_expires(esm):
    """MaximumRetryAttempts -1: "failed records are retried until the record expires"
    (https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html). A record
    failing 12 times is retried a 13th time; then, once too old, it goes to the on-failure
    destination as RecordAgeExceeded."""
    put_raw_intake(esm.dynamodb, "e1", "s1")
    put_raw_intake(esm.dynamodb, "e1", "s2")
    failures = {"s1": 12, "s2": 10**6}

    def fail_for_a_while(records):
        signup = records[0]["dynamodb"]["Keys"]["signup_id"]["S"]
        failures[signup] -= 1
        if failures[signup] >= 0:
            raise RuntimeError("not yet")

    handler = Handler(fail_for_a_while)
    settings = replace(RECORDED_MAPPING, batch_size=1, retry_attempts=-1, max_record_age_s=3600)
    poller = esm.poller(handler, settings)
    # s2 ages past the maximum record age after 20 invocations.
    poller._too_old = lambda record: len(handler.invocations) >= 20 + 13
    drain(poller)
    assert handler.invocations == [["s1"]] * 13 + [["s2"]] * 20
    [message] = esm.on_failure_messages()
    assert message["requestContext"]["condition"] == "RecordAgeExceeded"


# -- batching -----------------------------------------------------------------------------


def test_an_empty_poll_does_not_end_the_batching_window(esm):
    """A batch is sent when it is full, its batching window is over, or its payload reaches
    6 MB; "the next batching window begins as soon as the previous function invocation
    completes" (https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventsourcemapping.html,
    batching behavior). Records written at 0, 0.5 and 0.9 s of a 1 s window, with polls in
    between that find nothing, are one batch."""
    clock = FakeClock()
    handler = Handler()
    settings = replace(RECORDED_MAPPING, batch_size=100, max_batching_window_s=1)
    poller = esm.poller(handler, settings, clock=clock)
    start = clock.now
    writes = {0.0: "r0", 0.5: "r1", 0.9: "r2", 1.2: "r3", 9.0: "r4"}
    for tick in range(0, 100):
        at = tick / 10
        clock.now = start + at
        if at in writes:
            put_raw_intake(esm.dynamodb, "e1", writes[at])
        poller.poll_once()
        if at == 0.9:
            assert handler.invocations == []  # nothing sent by the empty polls before 1 s
    # r3 waits for the window that began when the first invocation completed (1.0 to 2.0);
    # r4, long after that window, is sent by the first poll that reads it.
    assert handler.invocations == [["r0", "r1", "r2"], ["r3"], ["r4"]]


def test_a_batch_is_sent_when_its_payload_reaches_6_mb(esm):
    """The 6 MB payload limit of an invocation ends a batch (same page as above). 17
    records of 380 KB: the first 16 fit in 6 MB (6,291,456 bytes), the 17th does not."""
    for i in range(17):
        put_raw_intake(esm.dynamodb, "e1", f"big{i:02d}", note={"S": "x" * 380_000})
    clock = FakeClock()
    handler = Handler()
    settings = replace(RECORDED_MAPPING, batch_size=100, max_batching_window_s=300)
    poller = esm.poller(handler, settings, clock=clock)
    for _ in range(5):
        poller.poll_once()  # the window is not over: only the payload limit sends
    assert [len(i) for i in handler.invocations] == [16]
    assert len(json.dumps(handler.events[0])) <= 6 * 1024 * 1024
    poller.flush()
    assert [len(i) for i in handler.invocations] == [16, 1]


# -- filters ------------------------------------------------------------------------------


def _record(new_image: dict[str, Any], event_name: str = "INSERT") -> dict[str, Any]:
    return {
        "eventName": event_name,
        "eventSource": "aws:dynamodb",
        "dynamodb": {
            "ApproximateCreationDateTime": 1764087000.0,
            "Keys": {"id": new_image["id"]},
            "NewImage": new_image,
        },
    }


#: SNAPSHOT and SNAPSHOT_TEST, test_dynamodb_event_filter: each case's filter, the records
#: its two writes produced, and which of them the function received (calls).
RECORDED_FILTERS = [
    (
        "content_or_filter",
        {"eventName": ["INSERT", "MODIFY"]},
        [
            (_record({"id": {"S": "id_value"}}), True),
            (_record({"id": {"S": "id_value"}, "id2": {"S": "id2_new_value"}}, "MODIFY"), True),
        ],
    ),
    (
        "content_filter_type",
        {"dynamodb": {"NewImage": {"presentKey": {"S": ["presentValue"]}}}},
        [
            (_record({"id": {"S": "id_value_1"}, "presentKey": {"S": "presentValue"}}), True),
            (_record({"id": {"S": "id_value_2"}}), False),
        ],
    ),
    (
        "exists_filter_type",
        {"dynamodb": {"NewImage": {"presentKey": {"S": [{"exists": True}]}}}},
        [
            (_record({"id": {"S": "id_value_1"}, "presentKey": {"S": "presentValue"}}), True),
            (_record({"id": {"S": "id_value_2"}}), False),
        ],
    ),
    (
        # presentKey is an object ({"S": ...}), not a leaf: "does not exist" matches it.
        "exists_false_filter",
        {"dynamodb": {"NewImage": {"presentKey": [{"exists": False}]}}},
        [
            (_record({"id": {"S": "id_value_1"}}), True),
            (_record({"id": {"S": "id_value_2"}, "presentKey": {"S": "presentValue"}}), True),
        ],
    ),
    (
        # N travels as a string: numeric never matches it; anything-but "101" matches "42".
        "numeric_filter",
        {
            "dynamodb": {
                "NewImage": {
                    "numericFilter": {"N": [{"numeric": [">", 100]}, {"anything-but": "101"}]}
                }
            }
        },
        [
            (_record({"id": {"S": "id_value_1"}, "numericFilter": {"N": "42"}}), True),
            (_record({"id": {"S": "id_value_2"}, "numericFilter": {"N": "101"}}), False),
        ],
    ),
    (
        "prefix_filter",
        {"dynamodb": {"NewImage": {"prefix": {"S": [{"prefix": "us-1"}]}}}},
        [
            (_record({"id": {"S": "id_value_1"}, "prefix": {"S": "us-1-other-suffix"}}), True),
            (_record({"id": {"S": "id_value_1"}, "prefix": {"S": "other-suffix"}}), False),
        ],
    ),
    (
        # The creation time is a number when filtered: numeric matches it.
        "date_time_conversion",
        {"dynamodb": {"ApproximateCreationDateTime": [{"numeric": [">", 0]}]}},
        [
            (_record({"id": {"S": "id_value_1"}}), True),
            (_record({"id": {"S": "id_value_2"}}), True),
        ],
    ),
]


@pytest.mark.parametrize(
    ("pattern", "records"),
    [case[1:] for case in RECORDED_FILTERS],
    ids=[case[0] for case in RECORDED_FILTERS],
)
def test_filters_deliver_what_aws_delivered(pattern, records):
    """``RECORDED_FILTERS`` (SNAPSHOT, SNAPSHOT_TEST)."""
    for record, delivered in records:
        assert matches_any([pattern], record) is delivered


def test_filters_in_the_poller_deliver_what_aws_delivered(esm):
    """Two of ``RECORDED_FILTERS`` end to end: exists false over an attribute (an object,
    not a leaf), and anything-but beside numeric on an N (a string)."""
    put_raw_intake(esm.dynamodb, "e1", "plain")
    put_raw_intake(esm.dynamodb, "e1", "typed", presentKey={"S": "presentValue"})
    put_raw_intake(esm.dynamodb, "e1", "n42", numericFilter={"N": "42"})
    put_raw_intake(esm.dynamodb, "e1", "n101", numericFilter={"N": "101"})
    delivered = {}
    for case, pattern, _ in RECORDED_FILTERS:
        if case in ("exists_false_filter", "numeric_filter"):
            handler = Handler()
            settings = replace(RECORDED_MAPPING, filter_patterns=(pattern,))
            drain(esm.poller(handler, settings, from_start=True))
            delivered[case] = [i for invocation in handler.invocations for i in invocation]
    assert delivered == {
        "exists_false_filter": ["plain", "typed", "n42", "n101"],
        "numeric_filter": ["n42"],
    }


def test_no_filter_delivers_every_record(esm):
    """A mapping without FilterCriteria delivers everything (FilterCriteria is optional,
    https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-params.html; SNAPSHOT's
    test_dynamodb_event_source_mapping has none and its record is delivered)."""
    put_raw_intake(esm.dynamodb, "e1", "s1")
    esm.dynamodb.delete_item(
        TableName=INTAKE_TABLE.name, Key={"event_id": {"S": "e1"}, "signup_id": {"S": "s1"}}
    )
    handler = Handler()
    drain(esm.poller(handler, replace(RECORDED_MAPPING, filter_patterns=())))
    names = [r["eventName"] for event in handler.events for r in event["Records"]]
    assert names == ["INSERT", "REMOVE"]


#: Patterns refused when the mapping is created. SNAPSHOT,
#: test_dynamodb_invalid_event_filter: InvalidParameterValueException "Invalid filter pattern
#: definition." for the first two; the third breaks "the value to match is in a JSON array"
#: (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-create-pattern.html).
REFUSED_PATTERNS = [
    ("single-string", "single-string"),
    ("not-json", '[{"eventName": ["INSERT"=123}]'),
    ("scalar-leaf", {"eventName": "INSERT"}),
    ("scalar-nested-leaf", {"dynamodb": {"NewImage": {"seats": {"N": "1"}}}}),
    ("unknown-operator", {"eventName": [{"starts-with": "IN"}]}),
    ("numeric-on-text", {"dynamodb": {"SizeBytes": [{"numeric": [">", "10"]}]}}),
]


@pytest.mark.parametrize(
    "pattern", [case[1] for case in REFUSED_PATTERNS], ids=[case[0] for case in REFUSED_PATTERNS]
)
def test_a_pattern_aws_refuses_is_refused_when_the_mapping_is_created(pattern):
    with pytest.raises(InvalidFilterPattern, match=r"^Invalid filter pattern definition"):
        replace(STREAM_SOURCE, filter_patterns=(pattern,))


# -- the sweeper's schedule ---------------------------------------------------------------

#: The default notification EventBridge Scheduler delivers to a target without Input
#: (https://docs.aws.amazon.com/scheduler/latest/APIReference/API_Target.html, Input) is an
#: EventBridge event; its ``time`` is when the schedule fired
#: (https://docs.aws.amazon.com/eventbridge/latest/ref/events-structure.html).
SCHEDULER_DEFAULT_PAYLOAD = {
    "version": "0",
    "detail-type": "Scheduled Event",
    "source": "aws.scheduler",
    "time": "2026-11-21T22:04:59Z",
    "detail": {},
}


def test_the_sweep_run_is_the_slot_of_the_schedules_time():
    """A redelivery of one tick, even after the next five-minute boundary, is the same run."""
    run_id = sweeper_handler._run_id(dict(SCHEDULER_DEFAULT_PAYLOAD))
    assert run_id == run_id_for(datetime(2026, 11, 21, 22, 4, 59, tzinfo=UTC))
    assert run_id == "2026-11-21T22:00:00Z"

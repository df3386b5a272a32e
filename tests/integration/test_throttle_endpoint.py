"""The embedded endpoint, and in-process moto, hold each partition to DynamoDB's throughput
and answer as DynamoDB does, driven with boto3 over HTTP; the limit's clock is a fake one,
so nothing here depends on how fast the machine is (turnstile_tools.local.throughput)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from turnstile_tools.local.throughput import ON_DEMAND_MESSAGE, PartitionThroughput


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limited(clock: Clock) -> Iterator[tuple[str, PartitionThroughput]]:
    """The endpoint at 2 write and 6 read units a second per partition, on ``clock``."""
    from moto.core.base_backend import BackendDict

    from turnstile_tools.local.server import EmbeddedAws

    BackendDict.reset()
    limit = PartitionThroughput(0.002, clock)
    server = EmbeddedAws("127.0.0.1", 0, throughput=limit)
    server.start()
    try:
        yield server.url, limit
    finally:
        server.stop()
        BackendDict.reset()


def client(url: str | None, attempts: int = 1) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"mode": "standard", "total_max_attempts": attempts}),
    )


def make_table(dynamodb: Any, billing: str = "PAY_PER_REQUEST") -> None:
    extra: dict[str, Any] = {"BillingMode": billing}
    if billing == "PROVISIONED":
        extra = {"ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}}
    dynamodb.create_table(
        TableName="t",
        KeySchema=[
            {"AttributeName": "p", "KeyType": "HASH"},
            {"AttributeName": "s", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "p", "AttributeType": "S"},
            {"AttributeName": "s", "AttributeType": "S"},
        ],
        **extra,
    )


def item(p: str, s: str) -> dict[str, Any]:
    return {"p": {"S": p}, "s": {"S": s}}


def test_the_raw_refusal_of_an_on_demand_table(limited):
    url, limit = limited
    dynamodb = client(url)
    make_table(dynamodb)
    dynamodb.put_item(TableName="t", Item=item("a", "1"))
    dynamodb.put_item(TableName="t", Item=item("a", "2"))
    with pytest.raises(dynamodb.exceptions.ThrottlingException) as refused:
        dynamodb.put_item(TableName="t", Item=item("a", "3"))
    response = refused.value.response
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert response["Error"] == {"Code": "ThrottlingException", "Message": ON_DEMAND_MESSAGE}
    assert response["throttlingReasons"] == [
        {
            "reason": "TableWriteKeyRangeThroughputExceeded",
            "resource": "arn:aws:dynamodb:us-east-1:123456789012:table/t",
        }
    ]
    dynamodb.put_item(TableName="t", Item=item("b", "3"))  # another partition: its own bucket
    keys = {i["s"]["S"] for i in dynamodb.scan(TableName="t")["Items"]}
    assert keys == {"1", "2", "3"}  # "3" of b; a's third was not written
    assert limit.stats.refused["PutItem"] == 1


def test_a_provisioned_table_answers_provisioned_throughput_exceeded(limited):
    url, _ = limited
    dynamodb = client(url)
    make_table(dynamodb, "PROVISIONED")
    dynamodb.put_item(TableName="t", Item=item("a", "1"))
    dynamodb.put_item(TableName="t", Item=item("a", "2"))
    with pytest.raises(dynamodb.exceptions.ProvisionedThroughputExceededException) as refused:
        dynamodb.delete_item(TableName="t", Key=item("a", "1"))
    assert refused.value.response["ThrottlingReasons"][0]["reason"] == (
        "TableWriteKeyRangeThroughputExceeded"
    )


def test_botocore_retries_a_throttled_request_by_itself(limited, clock, monkeypatch):
    from botocore.retries import standard

    monkeypatch.setattr(standard.RetryPolicy, "compute_retry_delay", lambda self, ctx: 0)
    url, limit = limited
    dynamodb = client(url, attempts=3)
    make_table(dynamodb)
    for s in "12":
        dynamodb.put_item(TableName="t", Item=item("a", s))
    with pytest.raises(ClientError) as refused:  # the clock stands still: every try refused
        dynamodb.put_item(TableName="t", Item=item("a", "3"))
    assert refused.value.response["ResponseMetadata"]["RetryAttempts"] == 2
    assert limit.stats.refused["PutItem"] == 3

    tries: list[int] = []

    def half_a_second_per_try(**kwargs: Any) -> None:
        tries.append(1)
        if len(tries) > 1:
            clock.now += 0.5  # one write unit back before each retry

    dynamodb.meta.events.register("before-send.dynamodb.PutItem", half_a_second_per_try)
    answer = dynamodb.put_item(TableName="t", Item=item("a", "3"))
    assert answer["ResponseMetadata"]["RetryAttempts"] == 1
    assert limit.stats.refused["PutItem"] == 4


def test_a_batch_write_gets_unprocessed_items_and_writes_the_rest(limited, clock):
    url, limit = limited
    dynamodb = client(url)
    make_table(dynamodb)
    requests = [{"PutRequest": {"Item": item(p, s)}} for p, s in ("a1", "a2", "a3", "b1")]
    answer = dynamodb.batch_write_item(RequestItems={"t": requests})
    assert answer["UnprocessedItems"] == {"t": [requests[2]]}
    written = {(i["p"]["S"], i["s"]["S"]) for i in dynamodb.scan(TableName="t")["Items"]}
    assert written == {("a", "1"), ("a", "2"), ("b", "1")}
    with pytest.raises(dynamodb.exceptions.ThrottlingException):  # none of it: refused whole
        dynamodb.batch_write_item(RequestItems={"t": [requests[2]]})
    clock.now += 1
    assert dynamodb.batch_write_item(RequestItems={"t": [requests[2]]})["UnprocessedItems"] == {}
    assert limit.stats.unprocessed["UnprocessedItems"] == 1


def test_a_transaction_is_cancelled_with_throttling_error(limited):
    url, _ = limited
    dynamodb = client(url)
    make_table(dynamodb)
    dynamodb.put_item(TableName="t", Item=item("a", "0"))  # a has 1 of 2 units left
    with pytest.raises(dynamodb.exceptions.TransactionCanceledException) as refused:
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "t", "Item": item("b", "1")}},
                {"Put": {"TableName": "t", "Item": item("a", "1")}},
            ]
        )
    response = refused.value.response
    assert response["CancellationReasons"] == [
        {"Code": "None"},
        {"Code": "ThrottlingError", "Message": ON_DEMAND_MESSAGE},
    ]
    assert response["Error"]["Message"].endswith("[None, ThrottlingError]")
    assert len(dynamodb.scan(TableName="t")["Items"]) == 1  # nothing of it done


def test_the_default_limit_is_aws_s_rates():
    assert PartitionThroughput().bucket("t", None, "Write", {"S": "a"}).rate == 1000
    assert PartitionThroughput().bucket("t", None, "Read", {"S": "a"}).rate == 3000


def test_in_process_moto_has_the_same_limit_when_asked(clock):
    from moto import mock_aws

    from turnstile_tools.local.limits import enforced_in_moto as limits_in_moto
    from turnstile_tools.local.throughput import enforced_in_moto

    with mock_aws(), limits_in_moto(), enforced_in_moto(0.001, clock) as limit:
        dynamodb = client(None)
        make_table(dynamodb)
        dynamodb.put_item(TableName="t", Item=item("a", "1"))
        with pytest.raises(dynamodb.exceptions.ThrottlingException):
            dynamodb.put_item(TableName="t", Item=item("a", "2"))
        answer = dynamodb.batch_get_item(
            RequestItems={
                "t": {"Keys": [item("a", "1")] * 1 + [item("a", str(i)) for i in range(2, 9)]}
            }
        )
        assert len(answer["UnprocessedKeys"]["t"]["Keys"]) == 2  # 3 units: six halves
        clock.now += 1
        dynamodb.put_item(TableName="t", Item=item("a", "2"))
        assert limit.stats.refused["PutItem"] == 1
    with mock_aws():  # gone on the way out
        dynamodb = client(None)
        make_table(dynamodb)
        for s in "123":
            dynamodb.put_item(TableName="t", Item=item("a", s))

"""The per-partition throughput limit's rules, on a fake clock and fake tables: units as
DynamoDB counts them, buckets that refill at the rate, one bucket per partition key value,
and each refusal as DynamoDB answers it (turnstile_tools.local.throughput)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from turnstile_tools.local import throughput
from turnstile_tools.local.throughput import (
    ON_DEMAND_MESSAGE,
    PROVISIONED_MESSAGE,
    PartitionThroughput,
    TokenBucket,
    parse_scale,
    read_units,
    write_units,
)

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/t"


@dataclass
class FakeTable:
    name: str = "t"
    hash_key: str = "p"
    range_key: str | None = "s"
    on_demand: bool = True
    arn: str = ARN
    index_hash_keys: dict[str, str] = field(default_factory=lambda: {"by-x": "x"})
    sizes: dict[tuple[str, str], int] = field(default_factory=dict)

    def item_size(self, key: Any) -> int | None:
        return self.sizes.get((key["p"]["S"], key["s"]["S"]))


class FakeTables:
    def __init__(self, *tables: FakeTable) -> None:
        self.by_name = {t.name: t for t in tables}

    def table(self, region: str, name: str) -> FakeTable | None:
        return self.by_name.get(name)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Moto:
    """Stands in for moto: answers 200 with ``answer`` and keeps each body it served."""

    def __init__(self, answer: dict[str, Any] | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.answer = answer or {}

    def __call__(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        self.bodies.append(json.loads(body))
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(self.answer).encode()


def limit(scale: float = 0.001, *tables: FakeTable) -> tuple[PartitionThroughput, Clock]:
    clock = Clock()
    return PartitionThroughput(scale, clock, FakeTables(*(tables or (FakeTable(),)))), clock


def send(limit: PartitionThroughput, action: str, params: dict[str, Any], moto: Any = None):
    status, _, payload = limit.serve(
        f"DynamoDB_20120810.{action}", json.dumps(params).encode(), "us-east-1", moto or Moto()
    )
    return status, json.loads(payload)


def key(p: str, s: str = "1") -> dict[str, Any]:
    return {"p": {"S": p}, "s": {"S": s}}


def put(p: str, s: str = "1", pad: int = 0) -> dict[str, Any]:
    item = key(p, s)
    if pad:
        item["pad"] = {"S": "x" * pad}
    return {"TableName": "t", "Item": item}


# -- units and buckets ------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "units"), [(0, 1), (1, 1), (1024, 1), (1025, 2), (409_600, 400)])
def test_a_write_costs_a_unit_per_kb_begun(size, units):
    assert write_units(size) == units


@pytest.mark.parametrize(
    ("size", "consistent", "units"),
    [(0, True, 1), (4096, True, 1), (4097, True, 2), (0, False, 0.5), (8193, False, 1.5)],
)
def test_a_read_costs_a_unit_per_4_kb_begun_half_eventually_consistent(size, consistent, units):
    assert read_units(size, consistent) == units


def test_a_bucket_refills_at_its_rate_up_to_one_second_of_it():
    bucket = TokenBucket(rate=20, now=0.0)
    assert bucket.capacity == 20
    for _ in range(20):
        assert bucket.admits(1, 0.0)
        bucket.take(1, 0.0)
    assert not bucket.admits(1, 0.0)
    assert not bucket.admits(1, 0.049)
    assert bucket.admits(1, 0.05)  # 20 a second: one unit every 50 ms
    assert bucket.level(100.0) == 20  # an idle second and more: full, no more


def test_a_request_above_the_bucket_goes_when_it_is_full_and_leaves_debt():
    bucket = TokenBucket(rate=2, now=0.0)
    assert bucket.admits(10, 0.0)
    bucket.take(10, 0.0)
    assert bucket.level(0.0) == -8
    assert not bucket.admits(1, 4.0)  # 8 units of debt take 4 s, then one more for a unit
    assert bucket.admits(1, 4.5)


@pytest.mark.parametrize("text", ["abc", "-1", "nan", "inf", "1001", ""])
def test_a_bad_scale_is_refused_in_words(text):
    with pytest.raises(ValueError, match="not a throughput scale"):
        parse_scale(text)


def test_scale_zero_is_off_and_a_share_scales_both_rates():
    assert parse_scale("0") == 0
    off, _ = limit(0)
    moto = Moto()
    for _ in range(50):
        assert send(off, "PutItem", put("a"), moto)[0] == 200
    on, _ = limit(0.02)
    assert on.bucket("t", None, "Write", {"S": "a"}).rate == 20
    assert on.bucket("t", None, "Read", {"S": "a"}).rate == 60


# -- single items ------------------------------------------------------------------------------


def test_a_partition_over_its_write_rate_is_refused_as_an_on_demand_table_answers():
    limiter, _ = limit(0.002)  # 2 write units a second
    assert send(limiter, "PutItem", put("a", "1"))[0] == 200
    assert send(limiter, "PutItem", put("a", "2"))[0] == 200
    status, answer = send(limiter, "PutItem", put("a", "3"))
    assert status == 400
    assert answer == {
        "__type": "com.amazon.coral.availability#ThrottlingException",
        "message": ON_DEMAND_MESSAGE,
        "throttlingReasons": [{"reason": "TableWriteKeyRangeThroughputExceeded", "resource": ARN}],
    }
    assert limiter.stats.refused["PutItem"] == 1


def test_a_provisioned_table_answers_provisioned_throughput_exceeded():
    limiter, _ = limit(0.001, FakeTable(on_demand=False))
    send(limiter, "PutItem", put("a", "1"))
    status, answer = send(limiter, "DeleteItem", {"TableName": "t", "Key": key("a", "1")})
    assert status == 400
    assert answer == {
        "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
        "message": PROVISIONED_MESSAGE,
        "ThrottlingReasons": [{"reason": "TableWriteKeyRangeThroughputExceeded", "resource": ARN}],
    }


def test_different_partition_keys_do_not_share_a_bucket_and_reads_not_writes():
    limiter, _ = limit(0.001)  # 1 write unit, 3 read units a second
    assert send(limiter, "PutItem", put("a"))[0] == 200
    assert send(limiter, "PutItem", put("a", "2"))[0] == 400
    assert send(limiter, "PutItem", put("b"))[0] == 200  # another partition key value
    for _ in range(3):  # the same partition's reads have a bucket of their own
        get = {"TableName": "t", "Key": key("a"), "ConsistentRead": True}
        assert send(limiter, "GetItem", get)[0] == 200
    status, answer = send(limiter, "GetItem", {"TableName": "t", "Key": key("a")})
    assert status == 400
    assert answer["throttlingReasons"][0]["reason"] == "TableReadKeyRangeThroughputExceeded"


def test_the_bucket_refills_at_the_rate():
    limiter, clock = limit(0.002)
    for s in "12":
        assert send(limiter, "PutItem", put("a", s))[0] == 200
    assert send(limiter, "PutItem", put("a", "3"))[0] == 400
    clock.now += 0.49
    assert send(limiter, "PutItem", put("a", "3"))[0] == 400
    clock.now += 0.01  # 2 units a second: one more unit after 0.5 s
    assert send(limiter, "PutItem", put("a", "3"))[0] == 200
    assert send(limiter, "PutItem", put("a", "4"))[0] == 400


def test_a_write_costs_the_larger_of_the_old_and_new_item():
    table = FakeTable(sizes={("a", "1"): 3000})  # 3 KB stored
    limiter, clock = limit(0.005, table)  # 5 write units a second
    assert send(limiter, "PutItem", put("a", "1"))[0] == 200  # a small item over 3 KB: 3 units
    assert limiter.bucket("t", None, "Write", {"S": "a"}).level(clock.now) == 2
    assert send(limiter, "PutItem", put("a", "2", pad=1500))[0] == 200  # 2 KB new: 2 units
    assert send(limiter, "PutItem", put("a", "3"))[0] == 400


def test_a_failed_condition_still_consumes_units():
    limiter, clock = limit(0.002)

    def refuses(body: bytes) -> tuple[int, dict[str, str], bytes]:
        error = {"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}
        return 400, {}, json.dumps(error).encode()

    assert send(limiter, "PutItem", put("a"), refuses)[0] == 400
    assert limiter.bucket("t", None, "Write", {"S": "a"}).level(clock.now) == 1


def test_a_query_is_charged_for_what_it_returns_and_an_index_has_partitions_of_its_own():
    items = [{"p": {"S": "a"}, "s": {"S": str(i)}, "pad": {"S": "x" * 2000}} for i in range(4)]
    limiter, clock = limit(0.001)  # 3 read units a second
    query = {
        "TableName": "t",
        "KeyConditionExpression": "p = :p",
        "ExpressionAttributeValues": {":p": {"S": "a"}},
        "ConsistentRead": True,
    }
    assert send(limiter, "Query", query, Moto({"Items": items}))[0] == 200  # ~8 KB: 2 units
    assert limiter.bucket("t", None, "Read", {"S": "a"}).level(clock.now) == 1
    on_index = {
        "TableName": "t",
        "IndexName": "by-x",
        "KeyConditionExpression": "#x = :x",
        "ExpressionAttributeNames": {"#x": "x"},
        "ExpressionAttributeValues": {":x": {"S": "a"}},
    }
    for _ in range(6):  # eventually consistent, half a unit each
        assert send(limiter, "Query", on_index, Moto({"Items": []}))[0] == 200
    status, answer = send(limiter, "Query", on_index)
    assert status == 400
    assert answer["throttlingReasons"] == [
        {"reason": "IndexReadKeyRangeThroughputExceeded", "resource": f"{ARN}/index/by-x"}
    ]


# -- batches and transactions -----------------------------------------------------------------


def test_a_batch_write_gets_what_is_over_the_limit_back_unprocessed():
    limiter, _ = limit(0.002)
    requests = [{"PutRequest": put(p, s)} for p, s in ("a1", "a2", "a3", "b1")]
    for request in requests:
        request["PutRequest"] = {"Item": request["PutRequest"]["Item"]}
    moto = Moto({"UnprocessedItems": {}})
    status, answer = send(limiter, "BatchWriteItem", {"RequestItems": {"t": requests}}, moto)
    assert status == 200
    assert moto.bodies == [{"RequestItems": {"t": [requests[0], requests[1], requests[3]]}}]
    assert answer == {"UnprocessedItems": {"t": [requests[2]]}}
    assert limiter.stats.unprocessed["UnprocessedItems"] == 1


def test_a_batch_none_of_which_can_be_done_is_refused_whole():
    limiter, _ = limit(0.001)
    send(limiter, "PutItem", put("a"))
    batch = {"RequestItems": {"t": [{"DeleteRequest": {"Key": key("a", "2")}}]}}
    moto = Moto()
    status, answer = send(limiter, "BatchWriteItem", batch, moto)
    assert (status, answer["message"], moto.bodies) == (400, ON_DEMAND_MESSAGE, [])


def test_a_batch_get_gets_unprocessed_keys_with_the_request_s_options():
    limiter, _ = limit(0.001)  # 3 read units; eventually consistent reads are half a unit
    keys = [key("a", str(i)) for i in range(8)]
    entry = {"Keys": keys, "ProjectionExpression": "p"}
    moto = Moto({"Responses": {"t": []}, "UnprocessedKeys": {}})
    status, answer = send(limiter, "BatchGetItem", {"RequestItems": {"t": entry}}, moto)
    assert status == 200
    assert moto.bodies[0]["RequestItems"]["t"] == {"Keys": keys[:6], "ProjectionExpression": "p"}
    assert answer["UnprocessedKeys"] == {"t": {"Keys": keys[6:], "ProjectionExpression": "p"}}


def test_a_transaction_over_the_limit_is_cancelled_with_throttling_error_reasons():
    limiter, _ = limit(0.005)  # 5 write units: a transactional write of a small item is 2
    send(limiter, "PutItem", put("a", "8"))
    send(limiter, "PutItem", put("a", "9"))  # 3 left of a's 5, and the transaction asks 4
    actions = [
        {"Put": put("a", "1")},
        {"Put": put("b", "1")},
        {"Update": {"TableName": "t", "Key": key("a", "2"), "UpdateExpression": "SET x = :x"}},
    ]
    moto = Moto()
    status, answer = send(limiter, "TransactWriteItems", {"TransactItems": actions}, moto)
    assert status == 400
    assert moto.bodies == []  # nothing done
    assert answer == {
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
        "Message": "Transaction cancelled, please refer cancellation reasons for specific "
        "reasons [ThrottlingError, None, ThrottlingError]",
        "CancellationReasons": [
            {"Code": "ThrottlingError", "Message": ON_DEMAND_MESSAGE},
            {"Code": "None"},
            {"Code": "ThrottlingError", "Message": ON_DEMAND_MESSAGE},
        ],
    }
    assert send(limiter, "TransactWriteItems", {"TransactItems": actions[1:2]}, moto)[0] == 200


def test_a_provisioned_table_s_transaction_names_provisioned_throughput_exceeded():
    limiter, _ = limit(0.001, FakeTable(on_demand=False))  # 3 read units
    send(limiter, "GetItem", {"TableName": "t", "Key": key("a"), "ConsistentRead": True})
    gets = {"TransactItems": [{"Get": {"TableName": "t", "Key": key("a")}}] * 2}
    status, answer = send(limiter, "TransactGetItems", gets)
    assert status == 400
    assert [r["Code"] for r in answer["CancellationReasons"]] == [
        "ProvisionedThroughputExceeded",
        "ProvisionedThroughputExceeded",
    ]
    assert answer["CancellationReasons"][0]["Message"] == PROVISIONED_MESSAGE


def test_unknown_tables_and_other_requests_pass_untouched():
    limiter, _ = limit(0.000001)
    moto = Moto()
    for _ in range(3):
        assert send(limiter, "PutItem", {"TableName": "other", "Item": key("a")}, moto)[0] == 200
        assert send(limiter, "Scan", {"TableName": "t"}, moto)[0] == 200
    served: list[bytes] = []

    def moto_refuses(body: bytes) -> tuple[int, dict[str, str], bytes]:
        served.append(body)
        return 400, {}, b'{"__type": "SerializationException"}'

    answer = limiter.serve("DynamoDB_20120810.PutItem", b"not json", "us-east-1", moto_refuses)
    assert answer[0] == 400
    assert served == [b"not json"]  # moto says what is wrong with it


def test_the_region_is_the_signature_s():
    scope = "AWS4-HMAC-SHA256 Credential=k/20260101/eu-west-3/dynamodb/aws4_request, X=y"
    assert throughput.region_of(scope) == "eu-west-3"
    assert throughput.region_of("") == "us-east-1"

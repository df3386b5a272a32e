"""The embedded endpoint's repairs to moto: serialized requests, sane transactions."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from turnstile.base.contract import ALL_TABLES, CONTROL_TABLE, INTAKE_TABLE
from turnstile.storage.dynamo import default_client


def update(key: str) -> dict:
    return {
        "Update": {
            "TableName": INTAKE_TABLE.name,
            "Key": {"event_id": {"S": "e"}, "signup_id": {"S": key}},
            "UpdateExpression": "ADD redrive :one",
            "ExpressionAttributeValues": {":one": {"N": "1"}},
        }
    }


def test_a_cancelled_transaction_leaves_no_trace_and_the_stream_goes_on(endpoint):
    client = default_client(endpoint)
    for spec in ALL_TABLES:
        client.create_table(**spec.create_table_kwargs())
    streams = boto3.client("dynamodbstreams", endpoint_url=endpoint)
    arn = client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(
        StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    for key in ("a", "b"):
        client.put_item(
            TableName=INTAKE_TABLE.name,
            Item={"event_id": {"S": "e"}, "signup_id": {"S": key}},
        )
    page = streams.get_records(ShardIterator=iterator)
    assert len(page["Records"]) == 2
    iterator = page["NextShardIterator"]

    # WHEN a transaction updates two items and then fails its last condition
    failing_check = {
        "ConditionCheck": {
            "TableName": CONTROL_TABLE.name,
            "Key": {"pk": {"S": "EVENT#e"}, "sk": {"S": "EVENT"}},
            "ConditionExpression": "attribute_exists(pk)",
        }
    }
    with pytest.raises(ClientError) as info:
        client.transact_write_items(TransactItems=[update("a"), update("b"), failing_check])
    assert info.value.response["Error"]["Code"] == "TransactionCanceledException"
    # THEN nothing changed and nothing was streamed
    item = client.get_item(
        TableName=INTAKE_TABLE.name, Key={"event_id": {"S": "e"}, "signup_id": {"S": "a"}}
    )["Item"]
    assert "redrive" not in item
    # and the stream the poller is reading still receives later writes
    client.transact_write_items(TransactItems=[update("a"), update("b")])
    page = streams.get_records(ShardIterator=iterator)
    assert [r["eventName"] for r in page["Records"]] == ["MODIFY", "MODIFY"]

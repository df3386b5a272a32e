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
    for key in ("a", "b", "c", "untouched"):
        client.put_item(
            TableName=INTAKE_TABLE.name,
            Item={"event_id": {"S": "e"}, "signup_id": {"S": key}, "v": {"N": "1"}},
        )
    page = streams.get_records(ShardIterator=iterator)
    assert len(page["Records"]) == 4
    iterator = page["NextShardIterator"]
    before = client.scan(TableName=INTAKE_TABLE.name, ConsistentRead=True)["Items"]

    # WHEN a transaction updates two items, deletes one, puts a new one and then fails
    # its last condition
    failing_check = {
        "ConditionCheck": {
            "TableName": CONTROL_TABLE.name,
            "Key": {"pk": {"S": "EVENT#e"}, "sk": {"S": "EVENT"}},
            "ConditionExpression": "attribute_exists(pk)",
        }
    }
    delete_c = {
        "Delete": {
            "TableName": INTAKE_TABLE.name,
            "Key": {"event_id": {"S": "e"}, "signup_id": {"S": "c"}},
        }
    }
    put_d = {
        "Put": {
            "TableName": INTAKE_TABLE.name,
            "Item": {"event_id": {"S": "e"}, "signup_id": {"S": "d"}},
        }
    }
    with pytest.raises(ClientError) as info:
        client.transact_write_items(
            TransactItems=[update("a"), update("b"), delete_c, put_d, failing_check]
        )
    assert info.value.response["Error"]["Code"] == "TransactionCanceledException"
    # THEN nothing changed (the updated items as they were, the deleted one back, the new
    # one gone, the rest as it was) and nothing was streamed
    item = client.get_item(
        TableName=INTAKE_TABLE.name, Key={"event_id": {"S": "e"}, "signup_id": {"S": "a"}}
    )["Item"]
    assert "redrive" not in item
    assert client.scan(TableName=INTAKE_TABLE.name, ConsistentRead=True)["Items"] == before
    # and the stream the poller is reading still receives later writes
    client.transact_write_items(TransactItems=[update("a"), update("b")])
    page = streams.get_records(ShardIterator=iterator)
    assert [r["eventName"] for r in page["Records"]] == ["MODIFY", "MODIFY"]


def test_an_unsigned_request_is_refused_as_dynamodb_refuses_it_and_breaks_nothing(
    endpoint, caplog
):
    """An HTTP client pointed at the AWS endpoint instead of the HTTP API (``POST
    /events/x/signups``): moto would take it for S3 and fail with a traceback; it gets
    DynamoDB's answer to an unsigned request, one warning line, and the endpoint goes on."""
    import json
    import logging
    import urllib.error
    import urllib.request

    from turnstile_tools.local.roles import DENIALS_PATH
    from turnstile_tools.local.server import MISSING_TOKEN_CODE

    request = urllib.request.Request(
        f"{endpoint}/events/gig/signups", data=b'{"signup_id": "a"}', method="POST"
    )
    with caplog.at_level(logging.WARNING), pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    body = json.loads(refused.value.read())
    assert body["__type"].endswith(MISSING_TOKEN_CODE)
    assert "HTTP API" in body["message"]
    assert "Traceback" not in caplog.text and "unsigned request" in caplog.text
    # the endpoint's own unsigned path still answers, and signed requests are served
    with urllib.request.urlopen(f"{endpoint}{DENIALS_PATH}", timeout=10) as answer:
        assert answer.status == 200
    assert default_client(endpoint_url=endpoint).list_tables()["TableNames"] is not None

"""The CPU benchmark's in-memory DynamoDB keeps its items pickled: a read is a copy (a
change to it changes nothing stored, as with DynamoDB), and each request still answers
as the store's calls expect."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from turnstile_bench.cpu import MemoryDynamoDB

KEY = {"event_id": {"S": "e1"}, "signup_id": {"S": "s1"}}


def test_an_item_read_is_a_copy_of_the_one_stored():
    client = MemoryDynamoDB()
    item = {**KEY, "attributes": {"M": {"a": {"L": [{"S": "x"}]}}}, "blob": {"B": b"\x00"}}
    client.put_item(TableName="t", Item=item)
    item["attributes"]["M"]["a"]["L"].append({"S": "changed after the put"})
    read = client.get_item(TableName="t", Key=KEY)["Item"]
    assert read["attributes"] == {"M": {"a": {"L": [{"S": "x"}]}}} and read["blob"] == {
        "B": b"\x00"
    }
    read["attributes"]["M"].clear()
    (again,) = client.batch_get_item(RequestItems={"t": {"Keys": [KEY]}})["Responses"]["t"]
    assert again["attributes"] == {"M": {"a": {"L": [{"S": "x"}]}}}


def test_puts_batches_and_updates_keep_their_conditions():
    client = MemoryDynamoDB()
    client.batch_write_item(
        RequestItems={"t": [{"PutRequest": {"Item": {**KEY, "n": {"N": "1"}}}}]}
    )
    with pytest.raises(ClientError):
        client.put_item(TableName="t", Item=KEY, ConditionExpression="attribute_not_exists(#k)")
    client.update_item(
        TableName="t",
        Key=KEY,
        UpdateExpression="SET #n = :two REMOVE #gone",
        ConditionExpression="#n = :one",
        ExpressionAttributeNames={"#n": "n", "#gone": "gone"},
        ExpressionAttributeValues={":one": {"N": "1"}, ":two": {"N": "2"}},
    )
    assert client.get_item(TableName="t", Key=KEY)["Item"] == {**KEY, "n": {"N": "2"}}
    with pytest.raises(ClientError):
        client.update_item(
            TableName="t",
            Key=KEY,
            UpdateExpression="SET #n = :two",
            ConditionExpression="#n = :one",
            ExpressionAttributeNames={"#n": "n"},
            ExpressionAttributeValues={":one": {"N": "1"}, ":two": {"N": "2"}},
        )
    assert client.get_item(TableName="t", Key={**KEY, "signup_id": {"S": "none"}}) == {}

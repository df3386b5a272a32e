"""The embedded endpoint's repairs to moto: serialized requests, sane transactions."""

from __future__ import annotations

from unittest.mock import patch

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_an_unsigned_request_is_refused_as_dynamodb_refuses_it_and_breaks_nothing(endpoint, caplog):
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


def test_transactions_on_two_threads_each_back_up_what_they_name():
    """In-process moto (the tests' ``aws`` fixture) runs requests on many threads at once.
    Two cancelled transactions at once each restored, with its backup, the other's item
    as the other had left it: an update of a cancelled transaction stayed. Transactions
    now run one at a time. Here each waits (a second at most) for the other inside its
    first update: together, they would both be there; one at a time, the first gives up
    waiting, and both are cancelled either way."""
    import threading

    from moto import mock_aws
    from moto.dynamodb import models

    from turnstile_tools.local.server import patch_moto_transactions

    patch_moto_transactions()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(**INTAKE_TABLE.create_table_kwargs())
        for key in ("a", "b"):
            client.put_item(
                TableName=INTAKE_TABLE.name,
                Item={"event_id": {"S": "e"}, "signup_id": {"S": key}},
            )
        missing = {
            "ConditionCheck": {
                "TableName": INTAKE_TABLE.name,
                "Key": {"event_id": {"S": "e"}, "signup_id": {"S": "none"}},
                "ConditionExpression": "attribute_exists(signup_id)",
            }
        }
        both_backed_up = threading.Barrier(2, timeout=1)
        update_item = models.DynamoDBBackend.update_item

        def update_after_both(self, *args, **kwargs):
            both_backed_up.wait()
            return update_item(self, *args, **kwargs)

        errors: list[str] = []

        def cancelled(key: str) -> None:
            try:
                client.transact_write_items(TransactItems=[update(key), missing])
            except ClientError as exc:
                errors.append(exc.response["Error"]["Code"])

        with patch.object(models.DynamoDBBackend, "update_item", update_after_both):
            threads = [threading.Thread(target=cancelled, args=(k,)) for k in ("a", "b")]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
        assert errors == ["TransactionCanceledException"] * 2
        items = client.scan(TableName=INTAKE_TABLE.name, ConsistentRead=True)["Items"]
        assert sorted(i["signup_id"]["S"] for i in items) == ["a", "b"]
        assert [i for i in items if "redrive" in i] == [], items


_NAMES = st.text(min_size=1, max_size=5)
_SCALARS = st.one_of(
    st.builds(lambda s: {"S": s}, st.text(max_size=8)),
    st.builds(lambda n: {"N": str(n)}, st.integers() | st.decimals(allow_nan=False)),
    st.builds(lambda b: {"B": b}, st.binary(max_size=8)),
    st.builds(lambda b: {"BOOL": b}, st.booleans()),
    st.just({"NULL": True}),
    st.builds(lambda s: {"SS": s}, st.lists(st.text(max_size=4), max_size=3)),
    st.builds(lambda s: {"NS": [str(n) for n in s]}, st.lists(st.integers(), max_size=3)),
    st.builds(lambda s: {"BS": s}, st.lists(st.binary(max_size=4), max_size=3)),
)
#: What moto hands its serializer: binaries as bytes, and now and then a shape it makes
#: no other way (a string in a binary, a number that is not a string, an empty name, two
#: members), which moto's own walk must still write.
_ODD = st.sampled_from(
    [{"B": "aGk="}, {"N": 5}, {"S": None}, {"S": "x", "N": "1"}, {}, {"M": {"": {"S": "x"}}}]
)
_VALUES = st.recursive(
    _SCALARS | _ODD,
    lambda inner: (
        st.builds(lambda m: {"M": m}, st.dictionaries(_NAMES, inner, max_size=3))
        | st.builds(lambda items: {"L": items}, st.lists(inner, max_size=3))
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(item=st.dictionaries(_NAMES, _VALUES, max_size=4))
def test_attribute_values_are_written_as_moto_writes_them(item):
    """The embedded endpoint writes an item's attribute values directly, not by moto's walk
    of the service's shapes: byte for byte what moto's walk writes, for every form of value
    (nested, binary, sets, empty) and for shapes moto never makes, which the walk still
    writes."""
    from moto.core.responses import get_service_model
    from moto.core.serialize import BaseJSONSerializer, JSONSerializer, XFormedAttributePicker

    from turnstile_tools.local.server import patch_moto_attribute_values

    patch_moto_attribute_values()
    model = get_service_model("dynamodb")

    def body(operation: str, result: dict) -> str:
        serializer = JSONSerializer(
            operation_model=model.operation_model(operation),
            pretty_print=False,
            value_picker=XFormedAttributePicker(response_transformers=None),
        )
        return serializer.serialize(result)["body"]

    walk = BaseJSONSerializer._serialize_type_structure.moto_original
    for operation, result in (
        ("GetItem", {"Item": item}),
        ("Scan", {"Items": [item, item], "Count": 2, "LastEvaluatedKey": item}),
        ("UpdateItem", {"Attributes": item}),
    ):
        written = body(operation, result)
        with patch.object(BaseJSONSerializer, "_serialize_type_structure", walk):
            assert written == body(operation, result)


def test_moto_lists_its_modules_once_and_the_same_ones():
    """The endpoint asks moto on every request whether a host is one of its modules: the
    list is made once (a listdir of moto's package each time was a twentieth of the
    endpoint's time), and it is the list moto makes."""
    import os

    from moto import backends

    from turnstile_tools.local.server import patch_moto_module_listing

    patch_moto_module_listing()
    path = os.path.dirname(backends.__file__)
    assert list(backends.list_of_moto_modules()) == sorted(
        m for m in os.listdir(path) if os.path.isdir(os.path.join(path, m)) and m[:2] != "__"
    )
    with patch.object(os, "listdir", side_effect=AssertionError("listed again")):
        assert "dynamodb" in backends.list_of_moto_modules()

"""Attacks on the session's repairs: the poller's stop, moto's patches, per-container
metrics, the benchmark's option checks."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.test_poller import FAST, setup, signup_id, write  # noqa: F401


def test_a_poller_run_again_after_a_stop_delivers_the_batch_it_gave_up_on(setup):  # noqa: F811
    # GIVEN a poller whose failing batch a stop gave up on (behind the checkpoint)
    client, make, messages = setup
    write(client, 3)
    stop = threading.Event()
    calls: list[list[str]] = []
    fail = [True]

    def handler(event: dict[str, Any], context: Any) -> Any:
        calls.append([signup_id(r) for r in event["Records"]])
        if fail[0]:
            stop.set()
            raise RuntimeError("the table is unreachable")
        return {"batchItemFailures": []}

    poller = make(handler, waits=True)
    poller.run(stop)
    assert calls == [["s0", "s1", "s2"]]
    # WHEN the same poller runs again (the handler now succeeds)
    fail[0] = False
    poller.run(threading.Event(), until_idle_s=0.3)
    # THEN the records it gave up on are delivered: nothing read and abandoned is skipped
    assert calls[1:] == [["s0", "s1", "s2"]]
    assert messages() == []


def _table(aws, name: str = "attacks", range_key: bool = False) -> Any:
    client = aws.client("dynamodb")
    keys = [("pk", "HASH")] + ([("sk", "RANGE")] if range_key else [])
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": n, "KeyType": t} for n, t in keys],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n, _ in keys],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    return client


@pytest.mark.parametrize("bad", [{"L": []}, {"M": {}}, {"SS": ["x"]}, {"NS": ["1"]}])
@pytest.mark.parametrize("range_key", [False, True])
def test_a_transaction_on_a_key_of_a_list_map_or_set_is_cancelled_not_a_crash(aws, bad, range_key):
    # GIVEN a table with an item (moto's own backup cancels such a transaction)
    client = _table(aws, range_key=range_key)
    good = {"pk": {"S": "a"}, **({"sk": {"S": "b"}} if range_key else {})}
    client.put_item(TableName="attacks", Item=good)
    key = {"pk": bad, **({"sk": {"S": "b"}} if range_key else {})}
    keys = [key, {"pk": {"S": "a"}, "sk": bad}] if range_key else [key]
    for key in keys:
        # WHEN a transaction names an item by a key no item can have
        with pytest.raises(ClientError) as raised:
            client.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": "attacks", "Item": {**key, "x": {"S": "1"}}}},
                ]
            )
        # THEN it is refused as moto refuses it, not an unhandled TypeError
        assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert client.scan(TableName="attacks")["Items"] == [good]


def test_responses_of_every_read_are_the_bytes_moto_own_walk_writes(aws):
    # GIVEN an item of every form (empty string, binary and binary set, nested lists and
    # maps, numbers), some history in the stream, and the raw body of every response
    from moto.core.serialize import BaseJSONSerializer

    client = _table(aws)
    streams = aws.client("dynamodbstreams")
    bodies: list[str] = []

    def grab(http_response: Any, **_: Any) -> None:
        bodies.append(http_response.content.decode())

    for c in (client, streams):
        c.meta.events.register("after-call", grab)
    item = {
        "pk": {"S": "a"},
        "e": {"S": ""},
        "n": {"N": "1.50"},
        "b": {"B": b"\x00\xff"},
        "bs": {"BS": [b"a", b"\x01"]},
        "ss": {"SS": ["x", "y"]},
        "ns": {"NS": ["1", "2"]},
        "l": {"L": []},
        "m": {"M": {}},
        "t": {"BOOL": False},
        "nul": {"NULL": True},
        "deep": {"L": [{"M": {"k": {"L": [{"B": b"z"}, {"N": "0"}, {"S": ""}]}}}, {"L": []}]},
    }
    client.put_item(TableName="attacks", Item=item)
    client.update_item(
        TableName="attacks",
        Key={"pk": {"S": "a"}},
        UpdateExpression="SET n = n + :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    arn = client.describe_table(TableName="attacks")["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    key = {"pk": {"S": "a"}}

    def reads() -> list[str]:
        bodies.clear()
        client.get_item(TableName="attacks", Key=key)
        client.get_item(TableName="attacks", Key=key, ProjectionExpression="deep[0].k, b, e")
        client.query(
            TableName="attacks",
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "a"}},
        )
        client.batch_get_item(RequestItems={"attacks": {"Keys": [key, {"pk": {"S": "z"}}]}})
        client.transact_get_items(TransactItems=[{"Get": {"TableName": "attacks", "Key": key}}])
        with pytest.raises(ClientError):
            client.transact_write_items(
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": "attacks",
                            "Key": key,
                            "ConditionExpression": "attribute_not_exists(pk)",
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        }
                    }
                ]
            )
        with pytest.raises(ClientError):
            client.put_item(
                TableName="attacks",
                Item=key,
                ConditionExpression="attribute_not_exists(pk)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        read = list(bodies)
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        streams.get_records(ShardIterator=iterator)
        # (an iterator is new each time)
        return [*read, re.sub(r'"NextShardIterator": "[^"]*"', "", bodies[-1])]

    # WHEN the same reads are written by the repair and by moto's own walk
    patched = BaseJSONSerializer._serialize_type_structure
    direct = reads()
    BaseJSONSerializer._serialize_type_structure = patched.moto_original
    try:
        walked = reads()
    finally:
        BaseJSONSerializer._serialize_type_structure = patched
    # THEN the bytes are the same
    assert direct == walked and "AP8=" in direct[0]


def test_an_idle_measurement_of_no_seconds_is_refused_before_it_runs(monkeypatch, capsys):
    # GIVEN the persistence benchmark, its idle measurement stubbed (it divides by --idle-s
    # after running a stack for it: ZeroDivisionError at the end of a real run)
    from turnstile_bench import persist

    ran: list[float] = []
    monkeypatch.setattr(persist, "_idle", lambda tmp, args, figures: ran.append(args.idle_s))
    # WHEN it is asked for an idle measurement of 0 s
    with pytest.raises(SystemExit) as exit_:
        persist.main(["--only", "idle", "--idle-s", "0"])
    # THEN it is a one-line usage error, and nothing ran
    _, err = capsys.readouterr()
    assert exit_.value.code == 2 and ran == []
    assert "error: argument --idle-s: expected seconds, more than 0, got '0'" in err
    # AND a fraction of a second is still a measurement
    assert persist.main(["--only", "idle", "--idle-s", "0.5"]) == 0 and ran == [0.5]

"""Attacks on the session's repairs: the poller's stop, moto's patches, per-container
metrics, the benchmark's option checks."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.test_poller import FAST, setup, signup_id, write  # noqa: F401
from turnstile_tools.local.poller import StreamPoller


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

    template = make(handler)
    poller = StreamPoller(
        handler,
        template.streams,
        template.stream_arn,
        template.checkpoints,
        sqs_client=template.sqs,
        failure_queue_url=template.failure_queue_url,
        settings=FAST,
    )
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

"""Metering arithmetic: item sizes and request units by DynamoDB's rules, to the unit.

The wrapped client runs against moto (the ``aws`` fixture); the units come from the
items, never from moto's ConsumedCapacity.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from turnstile.bench.metering import (
    ItemSizes,
    Meter,
    MeteredClient,
    attribute_value_size,
    item_size,
    read_units,
    write_units,
)
from turnstile.bench.prices import ON_DEMAND_US_EAST_1
from turnstile.contract import MAIN_TABLE

# -- sizes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ({"S": "hello"}, 5),
        ({"S": "山田"}, 6),  # UTF-8 bytes, not characters
        ({"N": "123"}, 3),  # ceil(3 digits / 2) + 1
        ({"N": "100"}, 2),  # trailing zeros trimmed: one significant digit
        ({"N": "-0.0015"}, 2),  # sign, point and leading zeros do not count
        ({"N": "123456"}, 4),
        ({"B": b"\x00\x01\x02"}, 3),
        ({"B": "AAEC"}, 3),  # base64, as in a Lambda event
        ({"BOOL": True}, 1),
        ({"NULL": True}, 1),
        ({"SS": ["ab", "c"]}, 3),
        ({"L": [{"S": "ab"}, {"N": "1"}]}, 3 + (2 + 1) + (2 + 1)),
        ({"M": {"k": {"S": "v"}}}, 3 + (1 + 1 + 1)),
        ({"M": {}}, 3),
    ],
)
def test_attribute_value_sizes_follow_dynamodb_rules(value, size):
    assert attribute_value_size(value) == size


def test_item_size_counts_attribute_names():
    # GIVEN an item of two string attributes
    item = {"event_id": {"S": "e1"}, "signup_id": {"S": "alice"}}
    # THEN names and values both count: 8 + 2 + 9 + 5
    assert item_size(item) == 24


@pytest.mark.parametrize(
    ("size", "units", "transactional"),
    [(0, 1, False), (1, 1, False), (1024, 1, False), (1025, 2, False), (1025, 4, True)],
)
def test_write_units_per_started_kilobyte(size, units, transactional):
    assert write_units(size, transactional=transactional) == units


@pytest.mark.parametrize(
    ("size", "consistent", "transactional", "units"),
    [
        (0, True, False, 1.0),  # a missing item still costs a read
        (4096, True, False, 1.0),
        (4097, True, False, 2.0),
        (4097, False, False, 1.0),  # eventually consistent: half
        (100, False, False, 0.5),
        (100, True, True, 2.0),
    ],
)
def test_read_units_per_started_4kb(size, consistent, transactional, units):
    assert read_units(size, consistent=consistent, transactional=transactional) == units


def test_prices_turn_units_into_dollars_per_million_decisions():
    # 1 write unit + 1 read unit per decision at us-east-1 on-demand prices
    assert ON_DEMAND_US_EAST_1.per_million_decisions_usd(1.0, 1.0) == pytest.approx(0.75)


# -- the wrapped client -----------------------------------------------------------------

TABLE = MAIN_TABLE.name


def sized_item(signup_id: str, size: int, event_id: str = "e1") -> dict[str, Any]:
    """An item of exactly ``size`` bytes by DynamoDB's rules."""
    fixed = len("event_id") + len(event_id) + len("signup_id") + len(signup_id) + len("pad")
    item = {
        "event_id": {"S": event_id},
        "signup_id": {"S": signup_id},
        "pad": {"S": "x" * (size - fixed)},
    }
    assert item_size(item) == size
    return item


def key(signup_id: str, event_id: str = "e1") -> dict[str, Any]:
    return {"event_id": {"S": event_id}, "signup_id": {"S": signup_id}}


@pytest.fixture
def metered(aws):
    meter = Meter("test")
    return MeteredClient(aws.client("dynamodb"), meter, ItemSizes()), meter


def test_put_item_costs_a_unit_per_kilobyte_of_the_larger_item(metered):
    client, meter = metered
    # GIVEN a new 1,000-byte item, then the same key rewritten at 1,025 bytes, then at 100
    client.put_item(TableName=TABLE, Item=sized_item("a", 1000))
    client.put_item(TableName=TABLE, Item=sized_item("a", 1025))
    client.put_item(TableName=TABLE, Item=sized_item("a", 100))
    # THEN 1 + 2 + 2 (the last is charged on the 1,025-byte item it replaced)
    assert meter.snapshot().write_units == {"put_item": 5}
    assert meter.snapshot().requests == {"put_item": 3}


def test_failed_conditional_write_still_costs_the_existing_items_units(metered):
    client, meter = metered
    client.put_item(TableName=TABLE, Item=sized_item("a", 2000))
    # WHEN a conditional put loses
    with pytest.raises(ClientError):
        client.put_item(
            TableName=TABLE,
            Item=sized_item("a", 100),
            ConditionExpression="attribute_not_exists(signup_id)",
        )
    snapshot = meter.snapshot()
    # THEN it is charged on the 2,000-byte item it did not replace
    assert snapshot.write_units == {"put_item": 2 + 2}
    assert snapshot.failed_conditional_writes == 1


def test_update_item_is_charged_on_before_or_after_whichever_is_larger(metered):
    client, meter = metered
    client.put_item(TableName=TABLE, Item=sized_item("a", 3000))
    # WHEN an update grows the item by 2,000 bytes
    response = client.update_item(
        TableName=TABLE,
        Key=key("a"),
        UpdateExpression="SET grow = :g",
        ExpressionAttributeValues={":g": {"S": "y" * (2000 - len("grow"))}},
    )
    # THEN 5 units (the 5,000-byte after), and the caller does not see the sizing read
    assert meter.snapshot().write_units == {"put_item": 3, "update_item": 5}
    assert "Attributes" not in response


def test_batch_write_is_charged_item_by_item(metered):
    client, meter = metered
    client.batch_write_item(
        RequestItems={
            TABLE: [
                {"PutRequest": {"Item": sized_item("a", 500)}},
                {"PutRequest": {"Item": sized_item("b", 1500)}},
                {"PutRequest": {"Item": sized_item("c", 3000)}},
            ]
        }
    )
    assert meter.snapshot().write_units == {"batch_write_item": 1 + 2 + 3}


def test_batch_get_charges_every_key_including_missing_ones(metered, aws):
    client, meter = metered
    client.batch_write_item(
        RequestItems={
            TABLE: [
                {"PutRequest": {"Item": sized_item("big", 5000)}},
                {"PutRequest": {"Item": sized_item("small", 100)}},
            ]
        }
    )
    keys = [key("big"), key("small"), key("missing")]
    client.batch_get_item(RequestItems={TABLE: {"Keys": keys, "ConsistentRead": True}})
    # consistent: 2 (5,000 bytes) + 1 + 1 (missing)
    assert meter.snapshot().read_units == {"batch_get_item": 4.0}
    client.batch_get_item(RequestItems={TABLE: {"Keys": keys, "ProjectionExpression": "signup_id"}})
    # eventually consistent, projected: still the whole items' sizes, halved
    assert meter.snapshot().read_units == {"batch_get_item": 4.0 + 2.0}


def test_get_item_eventually_consistent_is_half(metered):
    client, meter = metered
    client.put_item(TableName=TABLE, Item=sized_item("a", 9000))
    client.get_item(TableName=TABLE, Key=key("a"))
    client.get_item(TableName=TABLE, Key=key("nobody"), ConsistentRead=True)
    # 9,000 bytes = 3 blocks of 4 KB, halved; a missing item, consistent: 1
    assert meter.snapshot().read_units == {"get_item": 1.5 + 1.0}


def test_query_is_charged_on_everything_read_before_filter_and_projection(metered):
    client, meter = metered
    for signup_id in ("a", "b", "c"):
        client.put_item(TableName=TABLE, Item=sized_item(signup_id, 3000))
    client.put_item(TableName=TABLE, Item=sized_item("z", 3000, event_id="other"))
    response = client.query(
        TableName=TABLE,
        KeyConditionExpression="event_id = :e",
        FilterExpression="signup_id = :nobody",
        ProjectionExpression="signup_id",
        ExpressionAttributeValues={":e": {"S": "e1"}, ":nobody": {"S": "nobody"}},
        ConsistentRead=True,
    )
    assert response["Count"] == 0
    # THEN 9,000 bytes of e1 read = 3 units, though nothing came back
    assert meter.snapshot().read_units == {"query": 3.0}
    assert meter.snapshot().estimated_reads == 0


def test_transactions_cost_double(metered):
    client, meter = metered
    client.transact_write_items(
        TransactItems=[
            {
                "ConditionCheck": {
                    "TableName": TABLE,
                    "Key": key("#EVENT"),
                    "ConditionExpression": "attribute_not_exists(signup_id)",
                }
            },
            {"Put": {"TableName": TABLE, "Item": sized_item("a", 1500)}},
        ]
    )
    # 2 x 1 (the check, on a missing item) + 2 x 2 (1,500 bytes)
    assert meter.snapshot().write_units == {"transact_write_items": 6}


def test_other_calls_pass_through_and_are_counted(aws):
    meter = Meter("streams")
    client = MeteredClient(aws.client("dynamodb"), meter)
    assert TABLE in client.list_tables()["TableNames"]
    assert meter.snapshot().requests == {"list_tables": 1}
    assert meter.snapshot().total_write_units == 0

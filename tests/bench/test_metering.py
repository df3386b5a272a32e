"""Metering arithmetic: item sizes and request units by DynamoDB's rules, to the unit.

The wrapped client runs against moto (the ``aws`` fixture); the units come from the
items, never from moto's ConsumedCapacity.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from turnstile.base.contract import (
    DUE_HOLDS_INDEX,
    INTAKE_TABLE,
    MAIN_TABLE,
    UNDECIDED_INDEX,
    Attr,
    ControlKey,
)
from turnstile_bench.metering import (
    ItemSizes,
    Meter,
    MeteredClient,
    attribute_value_size,
    index_entry,
    index_write_units,
    item_size,
    read_units,
    write_units,
)
from turnstile_bench.prices import ON_DEMAND_US_EAST_1

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
    assert snapshot.failed_write_units == 2  # of the 4, those the lost put was charged


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


# -- global secondary index writes: intake's sparse ``undecided`` index -----------------------
#
# The DynamoDB Developer Guide (global secondary indexes, write capacity units): a write that
# puts an entry into the index costs one write on it, changing the index key's value two (a
# delete and a put), removing the key one, changing only projected attributes one, and an
# item in the index neither before nor after nothing; a write unit per 1 KB of the entry.

INTAKE = INTAKE_TABLE.name
INDEX = UNDECIDED_INDEX.name


def intake(signup_id: str, size: int, marker: str | None = "a", **extra: str) -> dict[str, Any]:
    """An intake item of exactly ``size`` bytes, marked ``undecided`` unless ``marker`` is
    None; ``extra`` string attributes count in the size."""
    item = sized_item(signup_id, size)
    taken = sum(len(k) + len(v) for k, v in extra.items())
    if marker is not None:
        taken += len(Attr.UNDECIDED) + len(marker)
    item["pad"] = {"S": "x" * (len(item["pad"]["S"]) - taken)}
    item.update({k: {"S": v} for k, v in extra.items()})
    if marker is not None:
        item[Attr.UNDECIDED] = {"S": marker}
    assert item_size(item) == size
    return item


def entry_size(item: dict[str, Any]) -> int:
    entry = index_entry(item, UNDECIDED_INDEX, (Attr.EVENT_ID, Attr.SIGNUP_ID))
    assert entry is not None
    return item_size(entry)


def units(meter: Meter) -> tuple[dict[str, float], dict[str, float]]:
    snapshot = meter.snapshot()
    return snapshot.write_units, snapshot.index_write_units


def test_index_entry_is_the_keys_the_marker_and_the_included_attributes():
    item = intake("a", 900, submitted_at="2026-01-01T00:00:00.000000Z")
    entry = index_entry(item, UNDECIDED_INDEX, (Attr.EVENT_ID, Attr.SIGNUP_ID))
    # the 900-byte item's padding is not projected (INCLUDE names submitted_at and the
    # sweeper's two attributes only)
    assert entry == {
        Attr.EVENT_ID: {"S": "e1"},
        Attr.SIGNUP_ID: {"S": "a"},
        Attr.UNDECIDED: {"S": "a"},
        Attr.SUBMITTED_AT: {"S": "2026-01-01T00:00:00.000000Z"},
    }
    unmarked = intake("b", 900, marker=None)
    assert index_entry(unmarked, UNDECIDED_INDEX, (Attr.EVENT_ID, Attr.SIGNUP_ID)) is None


def _event_item(due: str | None, signup: str = "s1") -> dict[str, Any]:
    item: dict[str, Any] = {
        ControlKey.PK: {"S": "EVENT#e1"},
        ControlKey.SK: {"S": "EVENT"},
        Attr.EVENT_ID: {"S": "e1"},
        Attr.HOLD_DUE_SHARD: {"S": "0"},
        Attr.HOLD_DUE_SIGNUP: {"S": signup},
        "journal": {"B": b"x" * 2000},
    }
    if due is not None:
        item[Attr.HOLD_DUE_AT] = {"N": due}
    return item


def test_an_index_with_a_sort_key_counts_a_moved_sort_key_as_a_delete_and_a_put():
    # GIVEN the control table's due-holds index: shard (partition) and hold_due_at (sort)
    keys = (ControlKey.PK, ControlKey.SK)
    before = index_entry(_event_item("1000"), DUE_HOLDS_INDEX, keys)
    # THEN its entry is the keys, both index keys and the projected ids, not the journal
    assert before is not None and set(before) == {
        *keys,
        Attr.HOLD_DUE_SHARD,
        Attr.HOLD_DUE_AT,
        Attr.EVENT_ID,
        Attr.HOLD_DUE_SIGNUP,
    }
    # and an item without the sort key is not in the index (sparse)
    assert index_entry(_event_item(None), DUE_HOLDS_INDEX, keys) is None
    # WHEN only the sort key moves (a later hold is due next): a delete and a put
    later = index_entry(_event_item("2000"), DUE_HOLDS_INDEX, keys)
    assert index_write_units(DUE_HOLDS_INDEX, before, later) == 2
    # a projected attribute changes, the key does not: one write; nothing changes: none
    other = index_entry(_event_item("1000", signup="s2"), DUE_HOLDS_INDEX, keys)
    assert index_write_units(DUE_HOLDS_INDEX, before, other) == 1
    assert index_write_units(DUE_HOLDS_INDEX, before, before) == 0


def test_put_with_the_marker_writes_the_index_entry_too(metered):
    client, meter = metered
    # GIVEN a 900-byte intake item carrying the marker: its index entry is ~60 bytes
    item = intake("a", 900)
    assert entry_size(item) < 100
    client.put_item(TableName=INTAKE, Item=item)
    # THEN one unit on the table and one on the index (the entry, not the item, sized)
    assert units(meter) == ({"put_item": 1}, {INDEX: 1})
    assert meter.snapshot().total_write_units == 2


def test_put_without_the_marker_costs_nothing_on_the_index(metered):
    client, meter = metered
    client.put_item(TableName=INTAKE, Item=intake("a", 900, marker=None))
    assert units(meter) == ({"put_item": 1}, {})


def test_index_units_are_per_kilobyte_of_the_projected_entry(metered):
    client, meter = metered
    # GIVEN a projected attribute of 1,500 bytes, in a 3,000-byte item
    item = intake("a", 3000, submitted_at="t" * 1500)
    assert 1024 < entry_size(item) <= 2048
    client.put_item(TableName=INTAKE, Item=item)
    # THEN the table is charged on 3,000 bytes, the index on the ~1.5 KB entry
    assert units(meter) == ({"put_item": 3}, {INDEX: 2})


def test_failed_conditional_put_writes_nothing_to_the_index(metered):
    client, meter = metered
    client.put_item(TableName=INTAKE, Item=intake("a", 900))
    with pytest.raises(ClientError):
        client.put_item(
            TableName=INTAKE,
            Item=intake("a", 900, marker="b"),
            ConditionExpression="attribute_not_exists(signup_id)",
        )
    assert units(meter) == ({"put_item": 2}, {INDEX: 1})


def update(client: Any, signup_id: str, expression: str, values: dict[str, str] | None = None):
    kwargs: dict[str, Any] = {
        "TableName": INTAKE,
        "Key": key(signup_id),
        "UpdateExpression": expression,
    }
    if values:
        kwargs["ExpressionAttributeValues"] = {k: {"S": v} for k, v in values.items()}
    client.update_item(**kwargs)


def test_update_setting_the_marker_puts_an_entry(metered):
    client, meter = metered
    client.put_item(TableName=INTAKE, Item=intake("a", 900, marker=None))
    update(client, "a", "SET undecided = :m", {":m": "a"})
    assert units(meter) == ({"put_item": 1, "update_item": 1}, {INDEX: 1})


def test_update_changing_the_markers_value_deletes_and_puts(metered):
    client, meter = metered
    client.put_item(TableName=INTAKE, Item=intake("a", 900, marker="a"))
    update(client, "a", "SET undecided = :m", {":m": "b"})
    # 1 for the put, then 2 for the move (the old entry deleted, the new one put)
    assert units(meter) == ({"put_item": 1, "update_item": 1}, {INDEX: 1 + 2})


def test_update_removing_the_marker_deletes_the_entry(metered):
    client, meter = metered
    client.put_item(TableName=INTAKE, Item=intake("a", 900))
    update(client, "a", "REMOVE undecided")
    assert units(meter) == ({"put_item": 1, "update_item": 1}, {INDEX: 1 + 1})
    # and once it is out, a further update leaves the index alone
    update(client, "a", "SET note = :n", {":n": "decided"})
    assert units(meter) == ({"put_item": 1, "update_item": 2}, {INDEX: 2})


def test_update_of_projected_attributes_only_writes_the_entry_once(metered):
    client, meter = metered
    client.put_item(TableName=INTAKE, Item=intake("a", 900))
    # WHEN an attribute the index does not project changes: the entry does not
    update(client, "a", "SET note = :n", {":n": "x"})
    assert units(meter)[1] == {INDEX: 1}
    # WHEN a projected one does (a re-emission's redriven_at), with the marker set again
    # to the value it has: one write, the entry updated in place
    update(client, "a", "SET redriven_at = :t, undecided = :m", {":t": "now", ":m": "a"})
    assert units(meter) == ({"put_item": 1, "update_item": 2}, {INDEX: 1 + 1})


def test_delete_of_an_indexed_item_deletes_its_entry(metered):
    client, meter = metered
    client.put_item(TableName=INTAKE, Item=intake("a", 900))
    client.put_item(TableName=INTAKE, Item=intake("b", 900, marker=None))
    client.delete_item(TableName=INTAKE, Key=key("a"))
    client.delete_item(TableName=INTAKE, Key=key("b"))
    # 1 for a's entry put, 1 for its deletion; b never was in the index
    assert units(meter) == ({"put_item": 2, "delete_item": 2}, {INDEX: 1 + 1})


def test_batch_write_charges_each_items_entry(metered):
    client, meter = metered
    client.batch_write_item(
        RequestItems={
            INTAKE: [
                {"PutRequest": {"Item": intake("a", 900)}},
                {"PutRequest": {"Item": intake("b", 900)}},
                {"PutRequest": {"Item": intake("c", 900, marker=None)}},
            ]
        }
    )
    client.batch_write_item(RequestItems={INTAKE: [{"DeleteRequest": {"Key": key("a")}}]})
    assert units(meter) == ({"batch_write_item": 3 + 1}, {INDEX: 2 + 1})


def test_a_transaction_doubles_its_items_but_not_the_index_writes(metered):
    client, meter = metered
    client.put_item(TableName=INTAKE, Item=intake("old", 900))
    # WHEN one transaction puts a marked record and removes another's marker
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": INTAKE, "Item": intake("new", 900)}},
            {
                "Update": {
                    "TableName": INTAKE,
                    "Key": key("old"),
                    "UpdateExpression": "REMOVE undecided",
                }
            },
            {
                "ConditionCheck": {
                    "TableName": TABLE,
                    "Key": key("#EVENT"),
                    "ConditionExpression": "attribute_not_exists(signup_id)",
                }
            },
        ]
    )
    # THEN 2 x 1 per item of the transaction (three), and one index write for the entry
    # put plus one for the entry deleted, once each (the index changes after the commit)
    assert units(meter) == (
        {"put_item": 1, "transact_write_items": 2 * 3},
        {INDEX: 1 + 1 + 1},
    )


def test_a_cancelled_transaction_writes_nothing_to_the_index(metered):
    client, meter = metered
    with pytest.raises(ClientError):
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": INTAKE, "Item": intake("new", 900)}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": key("#EVENT"),
                        "ConditionExpression": "attribute_exists(signup_id)",
                    }
                },
            ]
        )
    assert units(meter) == ({"transact_write_items": 2 * 2}, {})
    # counted apart too: units charged to a write that wrote nothing
    assert meter.snapshot().failed_write_units == 2 * 2

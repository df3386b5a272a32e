"""DynamoDB's key and item limits, as AWS enforces them and moto does not (issue 24).

AWS refuses a partition key value over 2,048 bytes (UTF-8), a sort key value over 1,024
bytes and an empty string key on every operation that takes a key, reads included, and an
item over 400 KB on write. moto refuses some of it on writes only. The validator
(``turnstile_tools.local.limits``) says what AWS would; the embedded endpoint and the tests'
in-process moto (the ``aws`` fixture, ``tests.hostile.helpers.fresh_account``) enforce it,
so a read AWS would refuse is refused here too.

Producers write intake directly, with any key DynamoDB takes: an event id of 2,045 bytes is
a valid intake key but ``EVENT#`` + it is not a valid control key. Nothing turnstile keeps
for itself is keyed by an id that is not an id (``contract.ID_PATTERN``), so no reader
needs to build such a key: the audit, the sweeper, the API and the CLI never do.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.api.helpers import v2_event
from tests.helpers import decisions, put_raw_intake
from turnstile.base.contract import (
    CONTROL_TABLE,
    DUE_HOLDS_INDEX,
    INTAKE_TABLE,
    MAIN_TABLE,
    UNDECIDED_INDEX,
    Reason,
    Status,
    fits_partition_key,
    is_id,
)
from turnstile.base.errors import EventNotFoundError
from turnstile.handlers import api as api_handler
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.sweeper import Sweeper
from turnstile.storage.dynamo import default_client
from turnstile_tools import cli
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext

NOW = "2026-01-01T00:00:00.000000Z"

HASH = (
    "One or more parameter values were invalid: Size of hashkey has exceeded the maximum "
    "size limit of2048 bytes"
)
RANGE = (
    "One or more parameter values were invalid: Aggregated size of all range keys has "
    "exceeded the size limit of 1024 bytes"
)
ITEM = "Item size has exceeded the maximum allowed size"


def empty(name: str, kind: str = "string") -> str:
    return (
        "One or more parameter values are not valid. The AttributeValue for a key attribute "
        f"cannot contain an empty {kind} value. Key: {name}"
    )


def s(text: str) -> dict[str, str]:
    return {"S": text}


def intake_key(event_id: str, signup_id: str = "s1") -> dict[str, Any]:
    return {"event_id": s(event_id), "signup_id": s(signup_id)}


def control_key(pk: str, sk: str = "EVENT") -> dict[str, Any]:
    return {"pk": s(pk), "sk": s(sk)}


def sized(total: int) -> dict[str, Any]:
    """An intake item of exactly ``total`` bytes by DynamoDB's rules."""
    base = {"event_id": s("e"), "signup_id": s("s")}
    used = len("event_id") + 1 + len("signup_id") + 1 + len("d")
    return {**base, "d": s("x" * (total - used))}


# -- the validator ----------------------------------------------------------------------

#: Multi-byte characters are counted as their UTF-8 bytes: "é" is 2, "€" 3, "😀" 4.
E2, E3, E4 = "é", "€", "😀"

INTAKE = INTAKE_TABLE.name
MAIN = MAIN_TABLE.name
CONTROL = CONTROL_TABLE.name

CASES: list[tuple[str, str, dict[str, Any], str | None]] = [
    # partition key: at the limit, one past it; characters counted as bytes
    ("get-hash-2048", "GetItem", {"TableName": INTAKE, "Key": intake_key("p" * 2048)}, None),
    ("get-hash-2049", "GetItem", {"TableName": INTAKE, "Key": intake_key("p" * 2049)}, HASH),
    ("get-hash-2b-at", "GetItem", {"TableName": MAIN, "Key": intake_key(E2 * 1024)}, None),
    ("get-hash-2b-past", "GetItem", {"TableName": MAIN, "Key": intake_key(E2 * 1024 + "a")}, HASH),
    ("get-hash-3b-at", "GetItem", {"TableName": MAIN, "Key": intake_key(E3 * 682 + "ab")}, None),
    ("get-hash-3b-past", "GetItem", {"TableName": MAIN, "Key": intake_key(E3 * 683)}, HASH),
    ("get-hash-1025-chars", "GetItem", {"TableName": MAIN, "Key": intake_key(E2 * 1025)}, HASH),
    # sort key
    ("get-range-1024", "GetItem", {"TableName": INTAKE, "Key": intake_key("e", "s" * 1024)}, None),
    ("get-range-1025", "GetItem", {"TableName": INTAKE, "Key": intake_key("e", "s" * 1025)}, RANGE),
    ("get-range-4b-at", "GetItem", {"TableName": INTAKE, "Key": intake_key("e", E4 * 256)}, None),
    (
        "get-range-4b-past",
        "GetItem",
        {"TableName": INTAKE, "Key": intake_key("e", E4 * 256 + "a")},
        RANGE,
    ),
    # the control table's keys: EVENT# + an event id
    (
        "control-event-2048",
        "GetItem",
        {"TableName": CONTROL, "Key": control_key("EVENT#" + "x" * 2042)},
        None,
    ),
    (
        "control-event-2051",
        "GetItem",
        {"TableName": CONTROL, "Key": control_key("EVENT#" + "x" * 2045)},
        HASH,
    ),
    # empty keys
    ("get-empty-hash", "GetItem", {"TableName": INTAKE, "Key": intake_key("")}, empty("event_id")),
    (
        "get-empty-range",
        "GetItem",
        {"TableName": INTAKE, "Key": intake_key("e", "")},
        empty("signup_id"),
    ),
    (
        "get-empty-binary",
        "GetItem",
        {"TableName": INTAKE, "Key": {"event_id": {"B": ""}, "signup_id": s("x")}},
        empty("event_id", "binary"),
    ),
    # binary keys are sized by their bytes, not their base64 text
    (
        "get-binary-2048",
        "GetItem",
        {
            "TableName": INTAKE,
            "Key": {"event_id": {"B": "eHh4" * 682 + "eHg="}, "signup_id": s("x")},
        },
        None,
    ),
    (
        "get-binary-2049",
        "GetItem",
        {"TableName": INTAKE, "Key": {"event_id": {"B": "eHh4" * 683}, "signup_id": s("x")}},
        HASH,
    ),
    # every keyed operation
    ("delete-hash", "DeleteItem", {"TableName": INTAKE, "Key": intake_key("p" * 2049)}, HASH),
    (
        "update-range",
        "UpdateItem",
        {"TableName": MAIN, "Key": intake_key("e", "s" * 1025), "UpdateExpression": "SET a = :a"},
        RANGE,
    ),
    ("update-empty", "UpdateItem", {"TableName": MAIN, "Key": intake_key("")}, empty("event_id")),
    ("put-hash", "PutItem", {"TableName": INTAKE, "Item": intake_key("p" * 2049)}, HASH),
    ("put-range", "PutItem", {"TableName": INTAKE, "Item": intake_key("e", "s" * 1025)}, RANGE),
    (
        "put-fine",
        "PutItem",
        {"TableName": INTAKE, "Item": intake_key("p" * 2048, "s" * 1024)},
        None,
    ),
    (
        "batch-get",
        "BatchGetItem",
        {"RequestItems": {CONTROL: {"Keys": [control_key("a"), control_key("P" * 2049)]}}},
        HASH,
    ),
    (
        "batch-get-fine",
        "BatchGetItem",
        {"RequestItems": {CONTROL: {"Keys": [control_key("a"), control_key("P" * 2048)]}}},
        None,
    ),
    (
        "batch-write-delete",
        "BatchWriteItem",
        {"RequestItems": {CONTROL: [{"DeleteRequest": {"Key": control_key("a", "R" * 1025)}}]}},
        RANGE,
    ),
    (
        "batch-write-put",
        "BatchWriteItem",
        {"RequestItems": {INTAKE: [{"PutRequest": {"Item": intake_key("p" * 2049)}}]}},
        HASH,
    ),
    (
        "transact-get",
        "TransactGetItems",
        {"TransactItems": [{"Get": {"TableName": CONTROL, "Key": control_key("P" * 2049)}}]},
        HASH,
    ),
    *[
        (
            f"transact-write-{kind.lower()}",
            "TransactWriteItems",
            {
                "TransactItems": [
                    {"Put": {"TableName": MAIN, "Item": intake_key("e")}},
                    {kind: {"TableName": CONTROL, "Key": control_key("EVENT#" + "x" * 2045)}},
                ]
            },
            HASH,
        )
        for kind in ("ConditionCheck", "Update", "Delete")
    ],
    (
        "transact-write-put",
        "TransactWriteItems",
        {"TransactItems": [{"Put": {"TableName": MAIN, "Item": intake_key("e", "s" * 1025)}}]},
        RANGE,
    ),
    # Query: the partition key's equality, either way round, by name or by reference
    *[
        (
            f"query-{name}",
            "Query",
            {
                "TableName": MAIN,
                "KeyConditionExpression": expression,
                "ExpressionAttributeNames": {"#pk": "event_id", "#sk": "signup_id"},
                "ExpressionAttributeValues": {":pk": s(value), ":after": s("a")},
            },
            expected,
        )
        for name, expression, value, expected in (
            ("ref-2049", "#pk = :pk", "p" * 2049, HASH),
            ("ref-2048", "#pk = :pk", "p" * 2048, None),
            ("reversed", ":pk = #pk", "p" * 2049, HASH),
            ("plain-name", "event_id = :pk AND #sk > :after", "p" * 2049, HASH),
            ("parenthesized", "(#pk = :pk) AND (#sk > :after)", "p" * 2049, HASH),
            ("empty", "#pk = :pk", "", empty("event_id")),
        )
    ],
    (
        "query-control",
        "Query",
        {
            "TableName": CONTROL,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
            "ExpressionAttributeValues": {":pk": s("PARK#" + "x" * 2045), ":prefix": s("R#")},
        },
        HASH,
    ),
    (
        "query-key-conditions",
        "Query",
        {
            "TableName": MAIN,
            "KeyConditions": {
                "event_id": {"AttributeValueList": [s("p" * 2049)], "ComparisonOperator": "EQ"}
            },
        },
        HASH,
    ),
    (
        "query-index",
        "Query",
        {
            "TableName": CONTROL,
            "IndexName": DUE_HOLDS_INDEX.name,
            "KeyConditionExpression": "#s = :s AND #d <= :now",
            "ExpressionAttributeNames": {"#s": DUE_HOLDS_INDEX.partition_key, "#d": "hold_due_at"},
            "ExpressionAttributeValues": {":s": s("0" * 2049), ":now": {"N": "5"}},
        },
        HASH,
    ),
    (
        "query-start-key",
        "Query",
        {
            "TableName": INTAKE,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": "event_id"},
            "ExpressionAttributeValues": {":pk": s("e")},
            "ExclusiveStartKey": intake_key("e", "s" * 1025),
        },
        RANGE,
    ),
    (
        "scan-start-key",
        "Scan",
        {"TableName": CONTROL, "ExclusiveStartKey": control_key("EVENT#" + "x" * 2045)},
        HASH,
    ),
    (
        "scan-index-start-key",
        "Scan",
        {
            "TableName": INTAKE,
            "IndexName": UNDECIDED_INDEX.name,
            "ExclusiveStartKey": {**intake_key("e"), "undecided": s("u" * 2049)},
        },
        HASH,
    ),
    ("scan-fine", "Scan", {"TableName": CONTROL, "ExclusiveStartKey": control_key("a")}, None),
    # a secondary index's keys on write
    (
        "put-index-key",
        "PutItem",
        {"TableName": INTAKE, "Item": {**intake_key("e"), "undecided": s("u" * 2049)}},
        HASH,
    ),
    (
        "put-index-key-empty",
        "PutItem",
        {"TableName": INTAKE, "Item": {**intake_key("e"), "undecided": s("")}},
        "One or more parameter values are not valid. A value specified for a secondary index "
        "key is not supported. The AttributeValue for a key attribute cannot contain an empty "
        f"string value. IndexName: {UNDECIDED_INDEX.name}, IndexKey: undecided",
    ),
    # item size: 400 KB exactly is fine, a byte more is refused
    ("put-409600", "PutItem", {"TableName": INTAKE, "Item": sized(409_600)}, None),
    ("put-409601", "PutItem", {"TableName": INTAKE, "Item": sized(409_601)}, ITEM),
    (
        "batch-put-409601",
        "BatchWriteItem",
        {"RequestItems": {INTAKE: [{"PutRequest": {"Item": sized(409_601)}}]}},
        ITEM,
    ),
    (
        "transact-put-409601",
        "TransactWriteItems",
        {"TransactItems": [{"Put": {"TableName": INTAKE, "Item": sized(409_601)}}]},
        ITEM,
    ),
    # an unknown table: no key checks (its keys are unknown), the item size still counts
    ("unknown-key", "GetItem", {"TableName": "other", "Key": intake_key("p" * 3000)}, None),
    ("unknown-item", "PutItem", {"TableName": "other", "Item": sized(409_601)}, ITEM),
    # a table named by its ARN
    (
        "arn",
        "GetItem",
        {
            "TableName": f"arn:aws:dynamodb:us-east-1:123456789012:table/{CONTROL}",
            "Key": control_key("P" * 2049),
        },
        HASH,
    ),
    # what it does not read, and what it cannot read, it leaves to DynamoDB
    ("other-action", "DescribeTable", {"TableName": INTAKE}, None),
    ("malformed", "GetItem", {"TableName": INTAKE, "Key": ["not", "a", "map"]}, None),
    ("no-table", "GetItem", {"Key": intake_key("p" * 2049)}, None),
    ("typeless", "GetItem", {"TableName": INTAKE, "Key": {"event_id": {}}}, None),
]


@pytest.mark.parametrize(
    ("action", "params", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_validator_says_what_dynamodb_would(action, params, expected):
    from turnstile_tools.local import limits

    assert limits.problem(action, params) == expected


def test_the_validator_reads_the_table_names_in_force(monkeypatch):
    from turnstile_tools.local import limits

    # GIVEN the control table under another name
    monkeypatch.setenv(CONTROL_TABLE.env_var, "renamed-control")
    key = control_key("P" * 2049)
    # THEN its keys are checked under that name, and the default name is unknown
    assert limits.problem("GetItem", {"TableName": "renamed-control", "Key": key}) == HASH
    assert limits.problem("GetItem", {"TableName": "turnstile-control", "Key": key}) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("p" * 2048, True),
        ("p" * 2049, False),
        (E2 * 1024, True),
        (E2 * 1024 + "a", False),
        (E4 * 512, True),
        (E4 * 512 + "a", False),
        ("", False),
        ("\udc00", False),
        (None, False),
    ],
    ids=["2048", "2049", "2b-at", "2b-past", "4b-at", "4b-past", "empty", "surrogate", "none"],
)
def test_fits_partition_key_counts_utf8_bytes(value, expected):
    assert fits_partition_key(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("gig-2026", True),
        ("a" * 128, True),
        ("a" * 129, False),
        ("x" * 2045, False),
        ("gig\n", False),
        ("bad id", False),
        ("", False),
        (7, False),
    ],
    ids=["id", "128", "129", "2045", "newline", "space", "empty", "number"],
)
def test_is_id_is_the_full_pattern(value, expected):
    assert is_id(value) is expected


def test_the_moto_check_nests_and_is_removed_on_the_way_out():
    from moto.core.botocore_stubber import BotocoreStubber

    from turnstile_tools.local.limits import enforced_in_moto

    original = BotocoreStubber.process_request
    with enforced_in_moto():
        patched = BotocoreStubber.process_request
        assert patched is not original
        with enforced_in_moto():
            assert BotocoreStubber.process_request is patched
        assert BotocoreStubber.process_request is patched
    assert BotocoreStubber.process_request is original


# -- the embedded endpoint ---------------------------------------------------------------


def test_the_endpoint_refuses_an_over_long_key_as_aws_does(endpoint):
    client = default_client(endpoint)
    client.create_table(**INTAKE_TABLE.create_table_kwargs())
    client.create_table(**CONTROL_TABLE.create_table_kwargs())
    # WHEN a key one byte over the limit is read, with a valid one around it
    client.put_item(TableName=INTAKE, Item=intake_key("p" * 2048))
    with pytest.raises(ClientError) as refused:
        client.get_item(TableName=INTAKE, Key=intake_key("p" * 2049))
    # THEN it is refused as AWS refuses it, with AWS's status
    assert refused.value.response["Error"] == {"Code": "ValidationException", "Message": HASH}
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    with pytest.raises(ClientError, match="Aggregated size of all range keys"):
        client.query(
            TableName=CONTROL,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": s("a")},
            ExclusiveStartKey=control_key("a", "s" * 1025),
        )
    # AND the requests around it are served, bodies intact
    assert client.get_item(TableName=INTAKE, Key=intake_key("p" * 2048))["Item"] == intake_key(
        "p" * 2048
    )


def test_a_refused_request_never_reaches_moto_nor_the_log(tmp_path):
    from moto.core.base_backend import BackendDict

    from turnstile_tools.local.server import WAL_NAME, EmbeddedAws

    BackendDict.reset()
    server = EmbeddedAws("127.0.0.1", 0, state_dir=tmp_path)
    server.start()
    try:
        client = default_client(server.url)
        client.create_table(**INTAKE_TABLE.create_table_kwargs())
        logged = (tmp_path / WAL_NAME).read_bytes()
        # an UpdateItem moto itself would apply (it does not check empty keys there)
        with pytest.raises(ClientError, match=r"empty string value\. Key: event_id"):
            client.update_item(
                TableName=INTAKE,
                Key=intake_key(""),
                UpdateExpression="SET #a = :a",
                ExpressionAttributeNames={"#a": "a"},
                ExpressionAttributeValues={":a": s("x")},
            )
        assert client.scan(TableName=INTAKE)["Items"] == []
        assert (tmp_path / WAL_NAME).read_bytes() == logged
    finally:
        server.stop()
        BackendDict.reset()


def test_the_endpoint_still_enforces_the_roles_and_refuses_for_them_too(endpoint, monkeypatch):
    """A request signed by a function's local key goes through both checks: the role's
    (it read the body first) and the limits' (they read it again)."""
    from turnstile_tools.local.roles import role_session

    client = default_client(endpoint)
    client.create_table(**CONTROL_TABLE.create_table_kwargs())
    processor = default_client(endpoint, role_session("processor"))
    # allowed by its role, and served
    assert "Item" not in processor.get_item(TableName=CONTROL, Key=control_key("EVENT#gig"))
    # refused by its role first: an item it may not write
    with pytest.raises(ClientError, match="AccessDenied"):
        processor.put_item(TableName=CONTROL, Item=control_key("SWEEPER", "LEASE"))
    # allowed by its role, refused by DynamoDB's limits
    with pytest.raises(ClientError, match="maximum size limit of2048 bytes"):
        processor.get_item(TableName=CONTROL, Key=control_key("EVENT#" + "x" * 2045))


# -- the in-process moto -----------------------------------------------------------------


def test_the_aws_fixture_refuses_an_over_long_key_through_every_client(aws):
    clients = {
        "the fixture's session": aws.client("dynamodb"),
        "boto3's default session": boto3.client("dynamodb", region_name="us-east-1"),
        "a store's default client": default_client(),
    }
    for name, client in clients.items():
        with pytest.raises(ClientError) as refused:
            client.get_item(TableName=CONTROL, Key=control_key("EVENT#" + "x" * 2045))
        assert refused.value.response["Error"] == {
            "Code": "ValidationException",
            "Message": HASH,
        }, name
        # a key at the limit is read (and not found)
        assert "Item" not in client.get_item(
            TableName=CONTROL, Key=control_key("EVENT#" + "x" * 2042)
        )


def test_the_aws_fixture_refuses_an_empty_key_on_update_as_aws_does(aws):
    client = aws.client("dynamodb")
    with pytest.raises(ClientError, match=r"empty string value\. Key: event_id"):
        client.update_item(
            TableName=MAIN,
            Key=intake_key(""),
            UpdateExpression="SET #s = :s",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":s": s("x")},
        )


def test_hostile_accounts_refuse_an_over_long_key_too():
    from tests.hostile.helpers import fresh_account

    with (
        fresh_account() as account,
        pytest.raises(ClientError, match="maximum size limit of2048 bytes"),
    ):
        account.client.get_item(TableName=CONTROL, Key=control_key("EVENT#" + "x" * 2045))


# -- readers of intake never build a key out of an id that is not an id ------------------

#: Event ids a producer can write into intake whose control keys AWS refuses: ``EVENT#``
#: and ``PARK#`` make them 2,051 and 2,054 bytes (2,050 and 2,053 with ``PARK#``).
LONG_IDS = ["x" * 2045, "y" * 2048]


@pytest.mark.parametrize("event_id", LONG_IDS, ids=["2045", "2048"])
def test_the_audit_reports_a_hostile_record_with_an_over_long_event_id(client, store, event_id):
    # GIVEN a real event with a decision, and a hostile record nobody decided yet
    store.create_event("gig", 5, NOW)
    put_raw_intake(client, event_id, "s1", submitted_at={"S": NOW})
    # WHEN the whole tables are audited
    report = audit(store)
    # THEN the record is reported as what it is: pending, and past the grace
    by_id = {e.event_id: e for e in report.events}
    assert set(by_id) == {"gig", event_id}
    hostile = by_id[event_id]
    assert (hostile.pending, hostile.capacity, hostile.taken) == (1, None, None)
    assert hostile.violations and "pending past" in hostile.violations[0]
    assert by_id["gig"].violations == []
    # AND so it is when that event alone is audited
    assert audit(store, event_id).events[0].pending == 1


@pytest.mark.parametrize("event_id", LONG_IDS, ids=["2045", "2048"])
def test_the_audit_of_a_decided_hostile_record_is_clean(client, store, event_id):
    # GIVEN the record's invalid_request rejection, as the processor writes it
    put_raw_intake(client, event_id, "s1", submitted_at={"S": NOW})
    client.put_item(
        TableName=MAIN,
        Item={
            **intake_key(event_id),
            "status": s(Status.REJECTED),
            "reason": s(Reason.INVALID_REQUEST),
            "seats": {"N": "0"},
            "sequence_number": {"N": "1"},
            "decided_at": s(NOW),
        },
    )
    report = audit(store)
    assert [(e.event_id, e.status_counts, e.pending, e.violations) for e in report.events] == [
        (event_id, {"REJECTED": 1}, 0, [])
    ]


def test_the_audit_of_an_event_id_no_key_can_hold_is_not_found(store):
    with pytest.raises(EventNotFoundError):
        audit(store, "z" * 2049)
    with pytest.raises(EventNotFoundError):
        audit(store, "")


@pytest.mark.parametrize("event_id", LONG_IDS, ids=["2045", "2048"])
def test_a_sweep_run_re_emits_a_hostile_record_with_an_over_long_event_id(
    client, store, sweep_path, event_id
):
    # GIVEN a real event's undecided record, and a hostile one
    store.create_event("gig", 5, NOW)
    put_raw_intake(client, "gig", "s1", submitted_at={"S": NOW})
    put_raw_intake(client, event_id, "s1", submitted_at={"S": NOW})
    # WHEN a sweep runs
    result = Sweeper(store, owner="s", min_age_s=0).sweep("r")
    # THEN it succeeds and re-emits both
    assert (result.status, result.errors) == ("succeeded", [])
    assert (result.undecided, result.re_emitted) == (2, 2)
    # AND once decided, the hostile record's marker goes away like any other's
    client.put_item(
        TableName=MAIN,
        Item={**intake_key(event_id), "status": s(Status.REJECTED), "seats": {"N": "0"}},
    )
    again = Sweeper(store, owner="s", min_age_s=0).sweep("r2")
    assert (again.status, again.errors, again.undecided) == ("succeeded", [], 1)


# -- the API and the CLI: an event id that is not an id is a 400 or a 404 -----------------


def call_api(method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """The API's Lambda handler on one request, as API Gateway calls it."""
    path, _, query = path.partition("?")
    event = v2_event(method, path, body, query=query)
    response = api_handler.handler(event, LocalLambdaContext.api())
    return response["statusCode"], json.loads(response.get("body") or "null")


@pytest.fixture
def api(aws):
    api_handler.get_store.cache_clear()
    yield call_api
    api_handler.get_store.cache_clear()


@pytest.mark.parametrize("event_id", [*LONG_IDS, "z" * 2000, "p" * 3000], ids=len)
def test_every_api_route_that_takes_an_event_id_refuses_an_over_long_one(api, client, event_id):
    # GIVEN a hostile record under that id (when intake could hold it)
    if len(event_id) <= 2048:
        put_raw_intake(client, event_id, "s1", submitted_at={"S": NOW})
    e = quote(event_id, safe="")
    calls = [
        ("POST", "/events", {"event_id": event_id, "capacity": 5}),
        ("GET", f"/events/{e}", None),
        ("PATCH", f"/events/{e}", {"capacity": 5}),
        ("POST", f"/events/{e}/close", None),
        ("POST", f"/events/{e}/signups", {"signup_id": "s2"}),
        ("GET", f"/events/{e}/signups", None),
        ("GET", f"/events/{e}/signups?status=PENDING", None),
        ("GET", f"/events/{e}/signups/s1", None),
        ("GET", f"/events/{e}/signups/s1?wait=1", None),
        ("POST", f"/events/{e}/signups/s1/confirm", None),
        ("POST", f"/events/{e}/signups/s1/cancel", None),
    ]
    for method, path, body in calls:
        status, answer = api(method, path, body)
        assert status in (400, 404), (method, path[:40], answer)
        assert answer["error"] in ("invalid_request", "event_not_found"), answer


@pytest.mark.parametrize("event_id", ["x" * 2045, "p" * 3000], ids=len)
def test_every_cli_command_that_takes_an_event_id_refuses_an_over_long_one(
    aws, client, capsys, event_id
):
    if len(event_id) <= 2048:
        put_raw_intake(client, event_id, "s1", submitted_at={"S": NOW})
    commands = [
        ["event", "create", event_id, "--capacity", "5"],
        ["event", "show", event_id],
        ["event", "update", event_id, "--capacity", "5"],
        ["event", "close", event_id],
        ["signups", "list", event_id],
        ["submit", event_id, "s2"],
        ["status", event_id, "s1"],
        ["confirm", event_id, "s1"],
        ["cancel", event_id, "s1"],
    ]
    for argv in commands:
        code = cli.main(argv)
        _, err = capsys.readouterr()
        assert code == 2, argv
        assert "must match" in err or "no event" in err, (argv, err)
        assert "AWS error" not in err and "unexpected" not in err, (argv, err)
    # the audit of that event: its record reported if intake can hold it, else none found
    code = cli.main(["audit", event_id])
    out, err = capsys.readouterr()
    assert "AWS error" not in err and "unexpected" not in err, err
    if len(event_id) <= 2048:
        assert "1 pending" in out
    else:
        assert code == 2 and "no such event" in err


# -- the stream processor (issue 24 part 5) -----------------------------------------------


@pytest.mark.parametrize("event_id", LONG_IDS, ids=["2045", "2048"])
def test_the_processor_rejects_a_record_with_an_over_long_event_id(client, stream, event_id):
    """The record is rejected invalid_request, its event item never read (``EVENT#`` and
    the id is a key AWS refuses), and the batch fails nothing."""
    stream_handler._processor = None
    try:
        put_raw_intake(client, event_id, "s1", seats={"N": "1"}, submitted_at={"S": NOW})
        response = stream_handler.handler({"Records": stream.read_new()}, LocalLambdaContext())
    finally:
        stream_handler._processor = None
    assert response == {"batchItemFailures": []}
    decided = decisions(client)[(event_id, "s1")]
    assert (decided["status"]["S"], decided["reason"]["S"]) == (
        Status.REJECTED,
        Reason.INVALID_REQUEST,
    )


@pytest.mark.parametrize("bad", ["", "-x", "has space", "x" * 129, "p" * 2045, "é"])
def test_no_key_of_turnstile_s_own_items_is_ever_built_from_an_id_that_is_no_id(bad):
    """The last line of defence: a path that forgot to check an id fails here, loudly,
    instead of on AWS (a key DynamoDB refuses) or by naming another kind of item."""
    from turnstile.base.contract import ControlKey

    for build in (ControlKey.event, ControlKey.parking, ControlKey.wake):
        with pytest.raises(ValueError, match="not an event id"):
            build(bad)
    with pytest.raises(ValueError, match="not an event id"):
        ControlKey.parked(bad, "1")
    assert ControlKey.event("ok-1") == ("EVENT#ok-1", "EVENT")

"""The three tables as the contract defines them, with the production guards."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from turnstile.base.contract import ALL_TABLES, CONTROL_TABLE, INTAKE_TABLE, MAIN_TABLE, TableSpec

from .conftest import VARIANT_SETTINGS


def _keys(spec: TableSpec) -> dict[str, object]:
    return {
        "KeySchema": [
            {"AttributeName": spec.partition_key, "KeyType": "HASH"},
            {"AttributeName": spec.sort_key, "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": spec.partition_key, "AttributeType": "S"},
            {"AttributeName": spec.sort_key, "AttributeType": "S"},
            # An index's keys: its partition key a string, its sort key of its own type.
            *(d for i in spec.indexes for d in i.attribute_definitions()),
        ],
    }


@pytest.mark.parametrize("spec", ALL_TABLES, ids=lambda s: s.logical_id)
def test_table_keys_billing_recovery_and_encryption(template: Template, spec: TableSpec) -> None:
    # The contract's logical id is kept verbatim: the table is never replaced by a refactor.
    table = template.to_json()["Resources"][spec.logical_id]
    assert table["Type"] == "AWS::DynamoDB::Table"
    properties = table["Properties"]
    assert {k: properties[k] for k in ("KeySchema", "AttributeDefinitions")} == _keys(spec)
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    # SSEEnabled true without a key id: the AWS managed aws/dynamodb key.
    assert properties["SSESpecification"] == {"SSEEnabled": True}
    # Data of record: retained and deletion-protected unless the stack says otherwise.
    assert properties["DeletionProtectionEnabled"] is True
    assert table["DeletionPolicy"] == "Retain"
    assert table["UpdateReplacePolicy"] == "Retain"


def test_intake_streams_new_images_and_expires_by_ttl(template: Template) -> None:
    template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": _keys(INTAKE_TABLE)["KeySchema"],
            "StreamSpecification": {"StreamViewType": INTAKE_TABLE.stream_view_type},
            "TimeToLiveSpecification": {
                "AttributeName": INTAKE_TABLE.ttl_attribute,
                "Enabled": True,
            },
        },
    )
    assert INTAKE_TABLE.stream_view_type == "NEW_IMAGE"
    assert INTAKE_TABLE.ttl_attribute == "expires_at"


@pytest.mark.parametrize("spec", [MAIN_TABLE, CONTROL_TABLE], ids=lambda s: s.logical_id)
def test_main_and_control_have_no_ttl_and_only_control_a_keys_only_stream(
    variant_template: Template, spec: TableSpec
) -> None:
    """(Decisions kept for good: the variant; by default main has TTL, below.)"""
    properties = variant_template.to_json()["Resources"][spec.logical_id]["Properties"]
    assert "TimeToLiveSpecification" not in properties
    if spec is MAIN_TABLE:
        assert "StreamSpecification" not in properties
        assert "GlobalSecondaryIndexes" not in properties
    else:
        # the wake-ups' stream: keys only, never an event item's image
        assert properties["StreamSpecification"] == {"StreamViewType": "KEYS_ONLY"}


def test_intake_has_the_sparse_undecided_index_the_sweeper_reads(template: Template) -> None:
    properties = template.to_json()["Resources"][INTAKE_TABLE.logical_id]["Properties"]
    # Keyed by the marker alone (present only on undecided records: a sparse index), whose
    # value is one of 16 shards; it carries just the key and what the sweeper judges age by.
    assert properties["GlobalSecondaryIndexes"] == [
        {
            "IndexName": "undecided",
            "KeySchema": [{"AttributeName": "undecided", "KeyType": "HASH"}],
            "Projection": {
                "ProjectionType": "INCLUDE",
                "NonKeyAttributes": ["submitted_at", "redriven_at", "redrive"],
            },
        }
    ]
    assert {"AttributeName": "undecided", "AttributeType": "S"} in properties[
        "AttributeDefinitions"
    ]
    # The local stack creates the same index from the same spec.
    assert INTAKE_TABLE.create_table_kwargs()["GlobalSecondaryIndexes"] == properties[
        "GlobalSecondaryIndexes"
    ]


def test_control_has_the_sparse_due_holds_index_that_releasing_due_holds_reads(
    template: Template,
) -> None:
    properties = template.to_json()["Resources"][CONTROL_TABLE.logical_id]["Properties"]
    # Keyed by the one shard and the earliest hold's expiry (a number: sorted by time),
    # present only on event items holding seats; it carries the event and its holder.
    assert properties["GlobalSecondaryIndexes"] == [
        {
            "IndexName": "due-holds",
            "KeySchema": [
                {"AttributeName": "hold_due_shard", "KeyType": "HASH"},
                {"AttributeName": "hold_due_at", "KeyType": "RANGE"},
            ],
            "Projection": {
                "ProjectionType": "INCLUDE",
                "NonKeyAttributes": ["event_id", "hold_due_signup"],
            },
        }
    ]
    assert properties["AttributeDefinitions"][2:] == [
        {"AttributeName": "hold_due_shard", "AttributeType": "S"},
        {"AttributeName": "hold_due_at", "AttributeType": "N"},
    ]
    # The local stack creates the same index from the same spec.
    kwargs = CONTROL_TABLE.create_table_kwargs()
    assert kwargs["GlobalSecondaryIndexes"] == properties["GlobalSecondaryIndexes"]
    assert kwargs["AttributeDefinitions"] == properties["AttributeDefinitions"]


def test_control_table_keys_cannot_be_reached_from_intake_keys() -> None:
    """The control table is keyed by (pk, sk), never by (event_id, signup_id)."""
    assert (CONTROL_TABLE.partition_key, CONTROL_TABLE.sort_key) == ("pk", "sk")


def test_tables_can_be_made_disposable(variant_template: Template) -> None:
    """turnstile:retainTables=false: a test stack that `cdk destroy` removes completely."""
    tables = variant_template.find_resources(
        "AWS::DynamoDB::Table",
        {
            "Properties": {"DeletionProtectionEnabled": False},
            "DeletionPolicy": "Delete",
            "UpdateReplacePolicy": "Delete",
        },
    )
    assert sorted(tables) == sorted(spec.logical_id for spec in ALL_TABLES)
    # Still recoverable while it lives.
    variant_template.all_resources_properties(
        "AWS::DynamoDB::Table",
        {"PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True}},
    )


def test_decisions_expire_by_ttl_unless_kept(
    template: Template, variant_template: Template
) -> None:
    """By default (turnstile:decisionRetentionDays=365) the main table deletes decisions
    past expires_at; with "none" it keeps them."""
    assert VARIANT_SETTINGS.decision_retention_days is None
    kept = variant_template.to_json()["Resources"][MAIN_TABLE.logical_id]["Properties"]
    assert "TimeToLiveSpecification" not in kept
    properties = template.to_json()["Resources"][MAIN_TABLE.logical_id]["Properties"]
    assert properties["TimeToLiveSpecification"] == {
        "AttributeName": INTAKE_TABLE.ttl_attribute,
        "Enabled": True,
    }
    control = template.to_json()["Resources"][CONTROL_TABLE.logical_id]["Properties"]
    assert "TimeToLiveSpecification" not in control

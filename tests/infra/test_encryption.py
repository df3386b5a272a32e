"""turnstile:encryptionKey: the tables, log groups and log key secret under a customer
managed key when asked for (the variant stack creates one), AWS managed keys otherwise; every
role that touches a table may use the key as its access needs, and nothing more."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Template

from turnstile_cdk.encryption import LOGS_KEY_ACTIONS
from turnstile_cdk.settings import ContextKey, TurnstileSettings

from .conftest import function_by_handler, only

ENCRYPT = {"kms:Encrypt", "kms:GenerateDataKey"}


def _data_key(template: Template) -> str:
    key_id, _ = only(
        template.find_resources(
            "AWS::KMS::Key",
            {
                "Properties": {
                    "Description": "turnstile: the tables, log groups and log key "
                    "secret of this stack"
                }
            },
        )
    )
    return key_id


def _key_actions(template: Template, role_id: str, key_id: str) -> set[str]:
    """The KMS actions ``role_id``'s policies allow on the key ``key_id``."""
    actions: set[str] = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} not in policy["Properties"].get("Roles", []):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Resource"] == {"Fn::GetAtt": [key_id, "Arn"]}:
                listed = statement["Action"]
                actions |= {listed} if isinstance(listed, str) else set(listed)
    return actions


def _role(function: dict[str, Any]) -> str:
    return str(function["Properties"]["Role"]["Fn::GetAtt"][0])


def test_by_default_aws_managed_keys_and_no_key_of_its_own(template: Template) -> None:
    tables = template.find_resources("AWS::DynamoDB::Table")
    assert len(tables) == 3
    for table in tables.values():
        assert table["Properties"]["SSESpecification"] == {"SSEEnabled": True}
    for group in template.find_resources("AWS::Logs::LogGroup").values():
        assert "KmsKeyId" not in group["Properties"]
    assert "DataKeyArn" not in template.to_json().get("Outputs", {})


def test_the_tables_logs_and_secret_use_the_stack_s_key(variant_template: Template) -> None:
    key_id = _data_key(variant_template)
    key_arn = {"Fn::GetAtt": [key_id, "Arn"]}
    tables = variant_template.find_resources("AWS::DynamoDB::Table")
    assert len(tables) == 3
    for table in tables.values():
        assert table["Properties"]["SSESpecification"] == {
            "KMSMasterKeyId": key_arn,
            "SSEEnabled": True,
            "SSEType": "KMS",
        }
    groups = variant_template.find_resources("AWS::Logs::LogGroup")
    assert len(groups) == 6  # five functions' and the API's access logs
    assert all(g["Properties"]["KmsKeyId"] == key_arn for g in groups.values())
    (secret,) = variant_template.find_resources("AWS::SecretsManager::Secret").values()
    assert secret["Properties"]["KmsKeyId"] == key_arn
    variant_template.has_output("DataKeyArn", {"Value": key_arn})


def test_the_key_rotates_outlives_nothing_it_encrypts_and_serves_logs_of_this_account(
    variant_template: Template,
) -> None:
    key = variant_template.to_json()["Resources"][_data_key(variant_template)]
    assert key["Properties"]["EnableKeyRotation"] is True
    # The variant's tables are not retained, so neither is their key (a retained table's
    # key is retained with it: see the default below).
    assert key["DeletionPolicy"] == "Delete"
    (logs,) = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if '"logs.' in json.dumps(s.get("Principal", {}))
    ]
    assert set(logs["Action"]) == set(LOGS_KEY_ACTIONS)
    (condition,) = logs["Condition"]["ArnLike"].values()
    assert "kms:EncryptionContext:aws:logs:arn" in logs["Condition"]["ArnLike"]
    assert condition["Fn::Join"][1][-1] == ":log-group:*"


def test_a_created_key_is_retained_with_retained_tables() -> None:
    from aws_cdk import App

    from turnstile_cdk.stack import TurnstileStack

    app = App(context={"aws:cdk:bundling-stacks": []})
    stack = TurnstileStack(
        app, "Kept", settings=TurnstileSettings(stack_name="Kept", encryption_key="create")
    )
    template = Template.from_stack(stack)
    key = template.to_json()["Resources"][_data_key(template)]
    assert key["DeletionPolicy"] == "Retain"


@pytest.mark.parametrize(
    ("handler", "writes"),
    [
        ("turnstile.handlers.stream.handler", True),
        ("turnstile.handlers.api.handler", True),
        ("turnstile.handlers.api.waiter", False),
        ("turnstile.handlers.sweeper.handler", True),
        ("turnstile.handlers.due_holds.handler", True),
    ],
)
def test_each_role_may_use_the_key_as_its_table_access_needs(
    variant_template: Template, handler: str, writes: bool
) -> None:
    key_id = _data_key(variant_template)
    _, function = function_by_handler(variant_template, handler)
    actions = _key_actions(variant_template, _role(function), key_id)
    assert "kms:Decrypt" in actions
    assert (actions >= ENCRYPT) is writes
    assert actions <= {"kms:Decrypt", "kms:DescribeKey"} | ENCRYPT


def test_a_confined_producer_may_use_the_key(variant_template: Template) -> None:
    key_arn = {"Fn::GetAtt": [_data_key(variant_template), "Arn"]}
    policies = [
        p
        for p in variant_template.find_resources("AWS::IAM::ManagedPolicy").values()
        if "direct producer" in p["Properties"].get("Description", "")
    ]
    assert len(policies) == 2
    for policy in policies:
        (statement,) = [
            s
            for s in policy["Properties"]["PolicyDocument"]["Statement"]
            if s["Resource"] == key_arn
        ]
        assert {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"} <= set(statement["Action"])


@pytest.mark.parametrize(
    "value",
    ["yes", "alias/mine", "arn:aws:kms:eu-west-1:123:key/x", "arn:aws:s3:::bucket"],
)
def test_an_encryption_key_that_is_no_key_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match=ContextKey.ENCRYPTION_KEY):
        TurnstileSettings.from_context({ContextKey.ENCRYPTION_KEY: value}.get)


def test_a_key_of_the_operator_s_own_is_used_as_given() -> None:
    from aws_cdk import App

    from turnstile_cdk.stack import TurnstileStack

    arn = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    settings = TurnstileSettings.from_context({ContextKey.ENCRYPTION_KEY: arn}.get)
    app = App(context={"aws:cdk:bundling-stacks": []})
    template = Template.from_stack(TurnstileStack(app, "Own", settings=settings))
    assert not template.find_resources(
        "AWS::KMS::Key",
        {
            "Properties": {
                "Description": "turnstile: the tables, log groups and log key secret of this stack"
            }
        },
    )
    for table in template.find_resources("AWS::DynamoDB::Table").values():
        assert table["Properties"]["SSESpecification"]["KMSMasterKeyId"] == arn
    template.has_output("DataKeyArn", {"Value": arn})

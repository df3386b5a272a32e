"""Least privilege: every action each role may take, on which resource, and nothing else."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Template

from turnstile_cdk.permissions import (
    API_CONTROL_ACTIONS,
    API_INTAKE_ACTIONS,
    API_MAIN_ACTIONS,
    PROCESSOR_CONTROL_ACTIONS,
    PROCESSOR_INTAKE_ACTIONS,
    PROCESSOR_MAIN_ACTIONS,
    SWEEPER_CONTROL_ACTIONS,
    SWEEPER_INDEX_ACTIONS,
    SWEEPER_INTAKE_ACTIONS,
    SWEEPER_MAIN_ACTIONS,
)

from .conftest import function_by_handler, render, role_permissions

INTAKE = "${IntakeTable.Arn}"
MAIN = "${MainTable.Arn}"
CONTROL = "${ControlTable.Arn}"
STREAM = "${IntakeTable.StreamArn}"
UNDECIDED_INDEX = "${IntakeTable.Arn}/index/undecided"
XRAY = {"xray:PutTraceSegments": {"*"}, "xray:PutTelemetryRecords": {"*"}}


def _permissions(template: Template, handler: str) -> dict[str, set[str]]:
    _, function = function_by_handler(template, handler)
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    log_group = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    permissions = role_permissions(template, role_id)
    # Logging to its own group only, never logs:* on every group.
    assert permissions.pop("logs:CreateLogStream") == {f"${{{log_group}.Arn}}"}
    assert permissions.pop("logs:PutLogEvents") == {f"${{{log_group}.Arn}}"}
    for action, resources in XRAY.items():
        assert permissions.pop(action) == resources
    return permissions


def _on(actions: tuple[str, ...], resource: str) -> dict[str, set[str]]:
    return {action: {resource} for action in actions}


def _merge(*grants: dict[str, set[str]]) -> dict[str, set[str]]:
    merged: dict[str, set[str]] = {}
    for grant in grants:
        for action, resources in grant.items():
            merged.setdefault(action, set()).update(resources)
    return merged


def test_processor_reads_the_stream_and_decides_into_main_and_control(template: Template) -> None:
    queue_id = template.find_outputs("FailureQueueUrl")["FailureQueueUrl"]["Value"]["Ref"]
    queue = f"${{{queue_id}.Arn}}"
    assert _permissions(template, "turnstile.handlers.stream.handler") == _merge(
        _on(
            ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"), STREAM
        ),
        {"dynamodb:ListStreams": {"*"}},
        _on(PROCESSOR_INTAKE_ACTIONS, INTAKE),
        _on(PROCESSOR_MAIN_ACTIONS, MAIN),
        _on(PROCESSOR_CONTROL_ACTIONS, CONTROL),
        _on(("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"), queue),
    )


def test_processor_has_what_deciding_needs(template: Template) -> None:
    granted = _permissions(template, "turnstile.handlers.stream.handler")
    # Decision items: batch writes and the unknown-event transaction's conditional puts.
    assert granted["dynamodb:PutItem"] == {MAIN}
    # ... and on control, a held event's parked records: written and deleted in batches,
    # read back in arrival order.
    for action in ("Query", "BatchWriteItem"):
        assert granted[f"dynamodb:{action}"] == {MAIN, CONTROL}
    # The event item: the commit's UpdateItem and the unknown-event ConditionCheck (and the
    # hold marker's UpdateItem).
    for action in ("UpdateItem", "ConditionCheckItem"):
        assert granted[f"dynamodb:{action}"] == {CONTROL}
    assert granted["dynamodb:GetItem"] == {MAIN, INTAKE, CONTROL}
    # The event item and its hold marker in one read.
    assert granted["dynamodb:BatchGetItem"] == {MAIN, INTAKE, CONTROL}
    assert "dynamodb:DeleteItem" not in granted
    # Never a write on intake: decisions are the processor's only output.
    assert {a for a, resources in granted.items() if INTAKE in resources} == {
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
    }


def test_api_writes_intake_and_event_items_only(template: Template) -> None:
    assert _permissions(template, "turnstile.handlers.api.handler") == _merge(
        _on(API_MAIN_ACTIONS, MAIN),
        _on(API_INTAKE_ACTIONS, INTAKE),
        _on(API_CONTROL_ACTIONS, CONTROL),
    )
    assert "dynamodb:PutItem" in API_INTAKE_ACTIONS  # submit
    assert {"dynamodb:PutItem", "dynamodb:UpdateItem"} <= set(API_CONTROL_ACTIONS)  # create/close
    # Decisions are the processor's: the API only reads them.
    assert set(API_MAIN_ACTIONS) == {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"}
    assert "dynamodb:GetItem" in API_INTAKE_ACTIONS and "dynamodb:GetItem" in API_MAIN_ACTIONS


def test_sweeper_only_bumps_intake_and_keeps_its_lease_in_control(template: Template) -> None:
    assert _permissions(template, "turnstile.handlers.sweeper.handler") == _merge(
        _on(SWEEPER_INTAKE_ACTIONS, INTAKE),
        _on(SWEEPER_INDEX_ACTIONS, UNDECIDED_INDEX),
        _on(SWEEPER_MAIN_ACTIONS, MAIN),
        _on(SWEEPER_CONTROL_ACTIONS, CONTROL),
    )
    # It reads the index of undecided records whole (Scan), and only that index.
    assert SWEEPER_INDEX_ACTIONS == ("dynamodb:Scan",)
    # It never writes a decision.
    assert set(SWEEPER_MAIN_ACTIONS) == {
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
    }
    intake_writes = {
        a
        for a in SWEEPER_INTAKE_ACTIONS
        if "Get" not in a and a not in ("dynamodb:Query", "dynamodb:Scan")
    }
    assert intake_writes == {"dynamodb:UpdateItem"}
    # It finds held events and reads their parked records, but never parks or unparks one.
    assert {"dynamodb:Scan", "dynamodb:Query"} <= set(SWEEPER_CONTROL_ACTIONS)
    assert "dynamodb:BatchWriteItem" not in SWEEPER_CONTROL_ACTIONS


def test_only_the_sweeper_may_read_an_index(template: Template) -> None:
    # CDK grants index/* with every grant on a table that has an index (via the L2); the
    # index is declared on the L1 resource so only the sweeper's one statement names it.
    for handler in ("stream", "api", "sweeper"):
        granted = _permissions(template, f"turnstile.handlers.{handler}.handler")
        on_indexes = {r for resources in granted.values() for r in resources if "/index/" in r}
        assert on_indexes == ({UNDECIDED_INDEX} if handler == "sweeper" else set()), handler


def test_no_wildcard_actions_anywhere(templates: list[tuple[str, Template]]) -> None:
    for name, template in templates:
        for policy_id, policy in template.find_resources("AWS::IAM::Policy").items():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"]
                for action in [actions] if isinstance(actions, str) else actions:
                    assert "*" not in action, f"{name}/{policy_id} allows {action}"
        assert "dynamodb:*" not in json.dumps(template.to_json())


@pytest.mark.parametrize(
    "handler",
    [
        "turnstile.handlers.stream.handler",
        "turnstile.handlers.api.handler",
        "turnstile.handlers.sweeper.handler",
    ],
)
def test_only_stream_listing_and_xray_use_resource_star(template: Template, handler: str) -> None:
    granted = _permissions(template, handler)
    star = {action for action, resources in granted.items() if "*" in resources}
    assert star <= {"dynamodb:ListStreams"}
    assert all(str(render(r)).startswith("${") for rs in granted.values() for r in rs if r != "*")

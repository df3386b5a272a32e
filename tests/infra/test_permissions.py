"""Least privilege: every action each role may take, on which resource, under which
conditions, and nothing else (tests/infra/test_roles_at_work.py runs the code under them)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Template

from .conftest import function_by_handler, render

INTAKE = "${IntakeTable.Arn}"
MAIN = "${MainTable.Arn}"
CONTROL = "${ControlTable.Arn}"
STREAM = "${IntakeTable.StreamArn}"
WAKE_STREAM = "${ControlTable.StreamArn}"
UNDECIDED_INDEX = "${IntakeTable.Arn}/index/undecided"
DUE_HOLDS_INDEX = "${ControlTable.Arn}/index/due-holds"
XRAY = {("xray:PutTraceSegments", "*", "{}"), ("xray:PutTelemetryRecords", "*", "{}")}


def _log_key(template: Template) -> set:
    """Reading the key of the logs' signup references: the functions that log them."""
    (secret,) = template.find_resources("AWS::SecretsManager::Secret")
    return {
        ("secretsmanager:GetSecretValue", f"${{{secret}}}", "{}"),
        ("secretsmanager:DescribeSecret", f"${{{secret}}}", "{}"),
    }

PROCESSOR = "turnstile.handlers.stream.handler"
API = "turnstile.handlers.api.handler"
SWEEPER = "turnstile.handlers.sweeper.handler"
DUE_HOLDS = "turnstile.handlers.due_holds.handler"

#: Writes of data (a transaction's items are authorized by these actions too).
WRITES = {
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:PartiQLInsert",
    "dynamodb:PartiQLUpdate",
    "dynamodb:PartiQLDelete",
}
#: What only the stream processor may write on an event item.
PROCESSOR_OWNED = {
    "taken", "accepted", "version", "journal", "lineup", "status_counts", "hold_due_at",
    "hold_due_signup", "hold_due_shard",
}  # fmt: skip


def _canonical(conditions: dict[str, Any]) -> str:
    """Conditions as comparable text (lists sorted: IAM treats them as sets)."""
    return json.dumps(
        {
            op: {key: sorted(v) if isinstance(v, list) else v for key, v in tests.items()}
            for op, tests in conditions.items()
        },
        sort_keys=True,
    )


def _keys(*patterns: str) -> dict[str, Any]:
    return {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(patterns)},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }


def _attributes(*names: str) -> dict[str, Any]:
    return {
        "ForAllValues:StringEquals": {"dynamodb:Attributes": list(names)},
        "StringEqualsIfExists": {"dynamodb:ReturnValues": ["NONE", "UPDATED_OLD", "UPDATED_NEW"]},
        "Null": {"dynamodb:Attributes": "false"},
    }


def _both(keys: dict[str, Any], attributes: dict[str, Any]) -> dict[str, Any]:
    """Conditions on the items and on the attributes (one ``Null`` block guards both)."""
    return {**keys, **attributes, "Null": {**keys["Null"], **attributes["Null"]}}



def _on(resource: str, *actions: str, conditions: dict[str, Any] | None = None) -> set:
    return {(f"dynamodb:{a}", resource, _canonical(conditions or {})) for a in actions}


#: Waking an event: an update of its wake-up item's counter, time and reason only.
WAKES = _on(
    CONTROL,
    "UpdateItem",
    conditions=_both(
        _keys("WAKE#*"),
        _attributes("pk", "sk", "wakes", "woken_at", "reason", "hold_due_at", "hold_due_shard"),
    ),
)


def _role_statements(template: Template, handler: str) -> set[tuple[str, str, str]]:
    """(action, resource, conditions) for each action the role's policies allow, logs and
    X-Ray checked and left out."""
    _, function = function_by_handler(template, handler)
    role = {"Ref": function["Properties"]["Role"]["Fn::GetAtt"][0]}
    log_group = f"${{{function['Properties']['LoggingConfig']['LogGroup']['Ref']}.Arn}}"
    granted: set[tuple[str, str, str]] = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        if role not in policy["Properties"].get("Roles", []):
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            actions = statement["Action"]
            resources = statement["Resource"]
            for action in [actions] if isinstance(actions, str) else actions:
                for resource in resources if isinstance(resources, list) else [resources]:
                    granted.add(
                        (action, str(render(resource)), _canonical(statement.get("Condition", {})))
                    )
    logs = {(a, log_group, "{}") for a in ("logs:CreateLogStream", "logs:PutLogEvents")}
    assert logs | XRAY <= granted, "logs to its own group, X-Ray"
    return granted - logs - XRAY


#: What a submission writes on intake (keys included).
SUBMISSION = (
    "event_id", "signup_id", "seats", "submitted_at", "attributes", "owner", "expires_at",
)  # fmt: skip

#: Every attribute of a decision item: the processor's writes on main name these only.
DECISION_ATTRIBUTES = (
    "event_id", "signup_id", "status", "reason", "detail", "seats", "position", "decided_at",
    "sequence_number", "submitted_at", "attributes", "owner", "expires_at", "hold_expires_at",
    "waitlist_position", "history", "request_count", "last_refusal",
)  # fmt: skip

EVENT_CONFIG = (
    "pk", "sk", "event_id", "capacity", "min_capacity", "state", "created_at", "created_by",
    "capacity_floor", "waitlist", "hold_seconds", "max_seats", "shards",
)  # fmt: skip


def test_processor_reads_the_stream_and_alone_writes_decisions_and_counters(template: Template):
    queue_id = template.find_outputs("FailureQueueUrl")["FailureQueueUrl"]["Value"]["Ref"]
    queue = f"${{{queue_id}.Arn}}"
    assert _role_statements(template, PROCESSOR) == _log_key(template) | (
        _on(STREAM, "DescribeStream", "GetRecords", "GetShardIterator")
        # The control table's stream: its wake-ups (the second mapping's filter)
        | _on(WAKE_STREAM, "DescribeStream", "GetRecords", "GetShardIterator")
        | {("dynamodb:ListStreams", "*", "{}")}
        # Format-1 journals' items are rebuilt from intake; it never writes intake.
        | _on(INTAKE, "BatchGetItem")
        # Decisions: which exist and how (reads) ...
        | _on(MAIN, "BatchGetItem")
        # ... a first decision's put and a later move's update, a decision's fields only,
        # and nothing that deletes one (no DeleteItem, no BatchWriteItem).
        | _on(MAIN, "PutItem", "UpdateItem", conditions=_attributes(*DECISION_ATTRIBUTES))
        # Event items and parked events' records and markers, nothing else of control ...
        | _on(
            CONTROL,
            "GetItem",
            "BatchGetItem",
            "Query",
            "UpdateItem",
            "ConditionCheckItem",
            conditions=_keys("EVENT#*", "PARK#*"),
        )
        # ... and batch writes only where they are used: parking an event's records.
        | _on(CONTROL, "BatchWriteItem", conditions=_keys("PARK#*"))
        # A long lineup's pages, under a prefix of their own: read, put and deleted (in
        # the commit's transaction), never an event item.
        | _on(CONTROL, "BatchGetItem", "PutItem", "DeleteItem", conditions=_keys("LINEUP#*"))
        # A wake-up whose step failed goes in the due-holds index, to be written again.
        | _on(
            CONTROL,
            "UpdateItem",
            conditions=_both(
                _keys("WAKE#*"),
                _attributes("pk", "sk", "event_id", "hold_due_at", "hold_due_shard"),
            ),
        )
        # A shard's commit giving seats back wakes its event's shards where someone waits.
        | WAKES
        | {(f"sqs:{a}", queue, "{}") for a in ("SendMessage", "GetQueueAttributes", "GetQueueUrl")}
    )


#: What a listing of events may read of each control-table item it scans.
EVENT_LIST = (
    "pk", "sk", "event_id", "capacity", "min_capacity", "taken", "accepted", "state",
    "created_at", "created_by", "waitlist", "hold_seconds", "max_seats", "status_counts", "shards",
)  # fmt: skip


def test_api_writes_intake_and_only_the_configuration_of_event_items(template: Template):
    assert _role_statements(template, API) == _log_key(template) | (
        # Query: an event's signups, pending (intake) and decided (main); one partition.
        _on(INTAKE, "GetItem", "Query")
        # A submission puts what a submission writes, nothing else.
        | _on(INTAKE, "PutItem", conditions=_attributes(*SUBMISSION))
        # A confirm or cancel: the request on intake, a check of the decision's status.
        | _on(
            INTAKE,
            "UpdateItem",
            conditions=_attributes(
                "event_id", "signup_id", "request", "requests", "request_count", "undecided",
                "owner",
            ),
        )
        | _on(MAIN, "GetItem", "Query", "ConditionCheckItem")
        | _on(CONTROL, "GetItem", conditions=_keys("EVENT#*"))
        # Listing events scans control, projecting an event's public fields only.
        | _on(
            CONTROL,
            "Scan",
            conditions={
                "ForAllValues:StringEquals": {"dynamodb:Attributes": list(EVENT_LIST)},
                "StringEquals": {"dynamodb:Select": "SPECIFIC_ATTRIBUTES"},
                "Null": {"dynamodb:Attributes": "false"},
            },
        )
        | _on(
            CONTROL,
            "UpdateItem",
            conditions=_both(_keys("EVENT#*"), _attributes(*EVENT_CONFIG)),
        )
        # An organizer's count of the events it created (the cap), nothing else of it.
        | _on(
            CONTROL,
            "UpdateItem",
            conditions=_both(_keys("ORGANIZER#*"), _attributes("pk", "sk", "events_created")),
        )
        # A close or a capacity change wakes the event (it takes a step at once).
        | WAKES
    )
    assert not PROCESSOR_OWNED & set(EVENT_CONFIG)
    assert "journal" not in EVENT_LIST


def test_sweeper_keeps_its_lease_and_history_and_only_bumps_intake(template: Template):
    queue_id = template.find_outputs("FailureQueueUrl")["FailureQueueUrl"]["Value"]["Ref"]
    queue = f"${{{queue_id}.Arn}}"
    assert _role_statements(template, SWEEPER) == (
        # Every run scans the sparse undecided index; once a day intake itself.
        _on(INTAKE, "Scan")
        | _on(UNDECIDED_INDEX, "Scan")
        | _on(
            INTAKE,
            "UpdateItem",
            # request_count: only read, by the condition of a marker's removal (IAM counts
            # an attribute a condition names as one the request may write).
            conditions=_attributes(
                "event_id", "signup_id", "redrive", "redriven_at", "undecided", "request_count"
            ),
        )
        | _on(MAIN, "BatchGetItem")
        | _on(CONTROL, "GetItem", "Query", "Scan")
        | _on(
            CONTROL,
            "UpdateItem",
            "PutItem",
            "ConditionCheckItem",
            conditions=_keys("SWEEPER", "SWEEP-RUN"),
        )
        # Clearing an empty parking marker: its fields, conditioned on its version.
        | _on(
            CONTROL,
            "UpdateItem",
            conditions=_both(
                _keys("PARK#*"),
                _attributes(
                    "pk", "sk", "parked_since", "first_sequence_number", "error", "version",
                    "hold_due_at", "hold_due_shard",
                ),
            ),
        )
        # Setting a parked event's release off: a wake-up, no producer's record.
        | WAKES
        # The on-failure queue's notes: read (each makes a run scan intake whole) and
        # deleted once what they stand for is re-emitted; nothing else on the queue.
        | {(f"sqs:{a}", queue, "{}") for a in ("ReceiveMessage", "DeleteMessage")}
    )


def test_due_holds_reads_its_index_and_only_wakes_events(template: Template):
    assert _role_statements(template, DUE_HOLDS) == (
        # The due-holds index only: never an event item, a journal, the sweeper's items.
        _on(DUE_HOLDS_INDEX, "Query")
        # Wake-ups, turnstile's own items: it touches no intake record at all.
        | WAKES
    )


def _role_ids(template: Template, handler: str) -> dict[str, Any]:
    _, function = function_by_handler(template, handler)
    return {"Ref": function["Properties"]["Role"]["Fn::GetAtt"][0]}


def test_no_role_but_the_processor_s_has_an_unconditioned_write_on_main_or_control(
    templates: list[tuple[str, Template]],
) -> None:
    for name, template in templates:
        processor = _role_ids(template, PROCESSOR)
        checked = 0
        for policy_id, policy in template.find_resources("AWS::IAM::Policy").items():
            if processor in policy["Properties"].get("Roles", []):
                continue
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"]
                writes = WRITES & set([actions] if isinstance(actions, str) else actions)
                resources = json.dumps(render(statement["Resource"]))
                where = f"{name}/{policy_id}: {sorted(writes)} on {resources}"
                if not writes:
                    continue
                # Decisions are the processor's alone: nobody else writes main at all.
                assert "MainTable" not in resources, where
                if "ControlTable" not in resources:
                    continue
                checked += 1
                conditions = statement.get("Condition", {})
                # Every other write on control is held to some items ...
                keys = conditions.get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
                assert keys and "*" not in keys, where
                assert conditions.get("Null", {}).get("dynamodb:LeadingKeys") == "false", where
                # ... and one that reaches event items to attributes none of the processor's.
                if any(k.startswith("EVENT#") for k in keys):
                    allowed = conditions["ForAllValues:StringEquals"]["dynamodb:Attributes"]
                    assert not PROCESSOR_OWNED & set(allowed), where
                    assert "PutItem" not in json.dumps(actions), where
        assert checked >= 3, "the API's and the sweeper's writes on control were checked"


def test_every_condition_on_keys_or_attributes_requires_them(
    templates: list[tuple[str, Template]],
) -> None:
    """``ForAllValues`` holds for a request that carries no value at all: every statement
    conditioned on leading keys or attributes also says they must be there (``Null``)."""
    guarded = 0
    for name, template in templates:
        for policy_id, policy in template.find_resources("AWS::IAM::Policy").items():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                conditions = statement.get("Condition", {})
                for operator, tests in conditions.items():
                    if not operator.startswith("ForAllValues:"):
                        continue
                    for key in tests:
                        where = f"{name}/{policy_id}: {key} without its Null guard"
                        assert conditions.get("Null", {}).get(key) == "false", where
                        guarded += 1
    assert guarded >= 2 * 9, "both stacks' conditioned statements were checked"


def test_no_wildcard_actions_anywhere(templates: list[tuple[str, Template]]) -> None:
    for name, template in templates:
        for policy_id, policy in template.find_resources("AWS::IAM::Policy").items():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"]
                for action in [actions] if isinstance(actions, str) else actions:
                    assert "*" not in action, f"{name}/{policy_id} allows {action}"
        assert "dynamodb:*" not in json.dumps(template.to_json())


@pytest.mark.parametrize("handler", [PROCESSOR, API, SWEEPER, DUE_HOLDS])
def test_only_stream_listing_uses_resource_star(template: Template, handler: str) -> None:
    granted = _role_statements(template, handler)
    assert {a for a, resource, _ in granted if resource == "*"} <= {"dynamodb:ListStreams"}
    assert all(resource.startswith("${") for _, resource, _ in granted if resource != "*")


def test_the_variant_stack_grants_the_same(templates: list[tuple[str, Template]]) -> None:
    # The same, but for the use of its customer managed key (tests/infra/test_encryption.py).
    (_, default), (_, variant) = templates
    for handler in (PROCESSOR, API, SWEEPER, DUE_HOLDS):
        granted = {s for s in _role_statements(variant, handler) if not s[0].startswith("kms:")}
        assert granted == _role_statements(default, handler)

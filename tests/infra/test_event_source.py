"""The event source mapping in the template has exactly the settings the local poller uses."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from aws_cdk.assertions import Template

from turnstile.base.contract import STREAM_SOURCE, WAKE_SOURCE, EventSourceSettings
from turnstile_cdk.event_source import event_source_mapping_properties

from .conftest import function_by_handler, only

#: Wired by the stack, not taken from the settings.
WIRED = {"FunctionName", "EventSourceArn", "DestinationConfig"}
#: Settings with no AWS counterpart (AWS polls each shard four times a second).
LOCAL_ONLY = {"poll_interval_s"}


def test_pure_function_maps_every_setting() -> None:
    # GIVEN settings unlike the defaults in every field
    settings = EventSourceSettings(
        batch_size=7,
        max_batching_window_s=3,
        starting_position="LATEST",
        parallelization_factor=2,
        retry_attempts=2,
        max_record_age_s=60,
        bisect_on_error=False,
        report_batch_item_failures=False,
        filter_patterns=({"eventName": ["INSERT"]}, {"dynamodb": {"Keys": {"x": [1]}}}),
    )
    # WHEN / THEN
    assert event_source_mapping_properties(settings, metrics=False) == {
        "StartingPosition": "LATEST",
        "BatchSize": 7,
        "MaximumBatchingWindowInSeconds": 3,
        "ParallelizationFactor": 2,
        "MaximumRetryAttempts": 2,
        "MaximumRecordAgeInSeconds": 60,
        "BisectBatchOnFunctionError": False,
        "FilterCriteria": {
            "Filters": [
                {"Pattern": '{"eventName":["INSERT"]}'},
                {"Pattern": '{"dynamodb":{"Keys":{"x":[1]}}}'},
            ]
        },
    }


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return "LATEST" if value != "LATEST" else "TRIM_HORIZON"
    if isinstance(value, tuple):
        return (*value, {"eventName": ["REMOVE"]})
    raise AssertionError(f"no way to change {value!r}")


@pytest.mark.parametrize(
    "name",
    [f.name for f in dataclasses.fields(EventSourceSettings) if f.name not in LOCAL_ONLY],
)
def test_every_contract_setting_reaches_the_properties(name: str) -> None:
    """A field added to EventSourceSettings but not mapped fails here, not in production."""
    changed = dataclasses.replace(STREAM_SOURCE, **{name: _changed(getattr(STREAM_SOURCE, name))})
    assert event_source_mapping_properties(changed) != event_source_mapping_properties(
        STREAM_SOURCE
    )


def _mapping(template: Template, table: str) -> dict:
    """The event source mapping that reads ``table``'s stream."""
    return only(
        template.find_resources(
            "AWS::Lambda::EventSourceMapping",
            {"Properties": {"EventSourceArn": {"Fn::GetAtt": [table, "StreamArn"]}}},
        )
    )[1]


def test_the_processor_has_two_mappings_intake_and_wake_ups(template: Template) -> None:
    mappings = template.find_resources("AWS::Lambda::EventSourceMapping")
    sources = sorted(m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0] for m in mappings.values())
    assert sources == ["ControlTable", "IntakeTable"]


def test_the_wake_up_mapping_has_exactly_the_contract_settings(template: Template) -> None:
    """The control table's stream, filtered to wake-ups (no commit, no parked record, no
    lease ever invokes the processor), feeding the same function; no on-failure queue (a
    wake-up given up on is written again: the due-holds index keeps what is due)."""
    processor_id, _ = function_by_handler(template, "turnstile.handlers.stream.handler")
    mapping = _mapping(template, "ControlTable")
    properties = mapping["Properties"]
    expected = event_source_mapping_properties(WAKE_SOURCE)
    assert set(properties) == set(expected) | {"FunctionName", "EventSourceArn"}
    assert {key: properties[key] for key in expected} == expected
    assert properties["FunctionName"] == {"Ref": processor_id}
    patterns = [json.loads(f["Pattern"]) for f in properties["FilterCriteria"]["Filters"]]
    wake_keys = {"Keys": {"pk": {"S": [{"prefix": "WAKE#"}]}}}
    assert patterns == [{"dynamodb": wake_keys, "eventName": ["INSERT", "MODIFY"]}]
    assert any("DefaultPolicy" in dep for dep in mapping.get("DependsOn", []))


def test_template_mapping_has_exactly_the_contract_settings(template: Template) -> None:
    # GIVEN the one event source mapping in the stack
    mapping = _mapping(template, "IntakeTable")
    properties = mapping["Properties"]
    expected = event_source_mapping_properties(STREAM_SOURCE)
    # THEN nothing more, nothing less than the settings plus the wiring
    assert set(properties) == set(expected) | WIRED
    assert {key: properties[key] for key in expected} == expected


def test_template_mapping_is_the_safe_stream_configuration(template: Template) -> None:
    """The values docs/design.md relies on, spelled out (not only 'equal to the function')."""
    mapping = _mapping(template, "IntakeTable")
    properties = mapping["Properties"]
    assert properties["StartingPosition"] == "TRIM_HORIZON"
    assert properties["ParallelizationFactor"] == 1  # stream order per partition key
    assert properties["BisectBatchOnFunctionError"] is True
    assert properties["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert properties["BatchSize"] == STREAM_SOURCE.batch_size
    assert properties["MaximumBatchingWindowInSeconds"] == STREAM_SOURCE.max_batching_window_s
    # Bounded, not AWS's "-1 = forever" that blocks a shard for 24 h.
    assert 0 <= properties["MaximumRetryAttempts"] == STREAM_SOURCE.retry_attempts
    assert 0 < properties["MaximumRecordAgeInSeconds"] == STREAM_SOURCE.max_record_age_s
    patterns = [json.loads(f["Pattern"]) for f in properties["FilterCriteria"]["Filters"]]
    assert patterns == list(STREAM_SOURCE.filter_patterns)
    assert len(patterns) <= 5  # AWS's limit on filters per mapping
    assert properties["MetricsConfig"] == {"Metrics": ["EventCount"]}


def test_mapping_feeds_the_processor_from_the_intake_stream(template: Template) -> None:
    processor_id, _ = function_by_handler(template, "turnstile.handlers.stream.handler")
    outputs = template.find_outputs("FailureQueueUrl")
    queue_id = outputs["FailureQueueUrl"]["Value"]["Ref"]
    mapping = _mapping(template, "IntakeTable")
    properties = mapping["Properties"]
    assert properties["FunctionName"] == {"Ref": processor_id}
    assert properties["EventSourceArn"] == {"Fn::GetAtt": ["IntakeTable", "StreamArn"]}
    assert properties["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": [queue_id, "Arn"]}}
    }
    # Created only once the role may read the stream (CloudFormation checks at creation).
    assert any("DefaultPolicy" in dep for dep in mapping.get("DependsOn", []))


def test_failure_queue_is_encrypted_ssl_only_and_long_lived(template: Template) -> None:
    queue_id = template.find_outputs("FailureQueueUrl")["FailureQueueUrl"]["Value"]["Ref"]
    queue = template.to_json()["Resources"][queue_id]
    assert queue["Properties"]["SqsManagedSseEnabled"] is True
    assert queue["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
    _, policy = only(
        template.find_resources(
            "AWS::SQS::QueuePolicy", {"Properties": {"Queues": [{"Ref": queue_id}]}}
        )
    )
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Effect"] == "Deny"
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}

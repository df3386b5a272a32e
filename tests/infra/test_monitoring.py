"""Alarms on everything that means 'decisions are not being made', and the dashboard."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match, Template

from turnstile_cdk.monitoring import ITERATOR_AGE_THRESHOLD_MS

from .conftest import function_by_handler, only, render

HANDLERS = (
    "turnstile.handlers.stream.handler",
    "turnstile.handlers.api.handler",
    "turnstile.handlers.sweeper.handler",
)


def _topic_id(template: Template) -> str:
    topic_id, _ = only(template.find_resources("AWS::SNS::Topic"))
    return topic_id


def test_every_alarm_notifies_the_topic(template: Template) -> None:
    topic = {"Ref": _topic_id(template)}
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    assert alarms
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [topic]
        assert alarm["Properties"]["OKActions"] == [topic]
        assert alarm["Properties"]["TreatMissingData"] == "notBreaching"
        assert alarm["Properties"]["AlarmDescription"]


def test_alarm_topic_is_encrypted_with_a_key_cloudwatch_can_use(template: Template) -> None:
    key_id, key = only(template.find_resources("AWS::KMS::Key"))
    assert key["Properties"]["EnableKeyRotation"] is True
    template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]}}
    )
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    assert {
        "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
        "Effect": "Allow",
        "Principal": {"Service": "cloudwatch.amazonaws.com"},
        "Resource": "*",
    } in statements
    # SSL only.
    template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )


def test_processor_iterator_age_alarm(template: Template) -> None:
    function_id, _ = function_by_handler(template, "turnstile.handlers.stream.handler")
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/Lambda",
            "MetricName": "IteratorAge",
            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": function_id}}],
            "Statistic": "Maximum",
            "Period": 60,
            "Threshold": ITERATOR_AGE_THRESHOLD_MS,
            "EvaluationPeriods": 3,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


@pytest.mark.parametrize("metric", ["Errors", "Throttles"])
@pytest.mark.parametrize("handler", HANDLERS)
def test_function_error_and_throttle_alarms(template: Template, handler: str, metric: str) -> None:
    function_id, _ = function_by_handler(template, handler)
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/Lambda",
            "MetricName": metric,
            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": function_id}}],
            "Statistic": "Sum",
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


def test_failure_queue_not_empty_alarm(template: Template) -> None:
    queue_id = template.find_outputs("FailureQueueUrl")["FailureQueueUrl"]["Value"]["Ref"]
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/SQS",
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}],
            "Statistic": "Maximum",
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


def test_held_event_alarm(template: Template) -> None:
    # A held event's batches succeed: neither function errors nor the on-failure queue
    # tell. The processor's EventHeld says an event was held; the sweeper's EventsHeld,
    # every run, keeps the alarm on for as long as one stays held.
    def metric(name: str, stat: str) -> dict[str, object]:
        return {
            "MetricStat": {
                "Metric": {
                    "Namespace": "Turnstile",
                    "MetricName": name,
                    "Dimensions": [{"Name": "service", "Value": "turnstile"}],
                },
                "Stat": stat,
                "Period": 300,
            },
            "ReturnData": False,
        }

    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Metrics": Match.array_with(
                [
                    Match.object_like(
                        {"Expression": "FILL(failed, 0) + FILL(held, 0)", "ReturnData": True}
                    ),
                    Match.object_like({"Id": "failed", **metric("EventHeld", "Sum")}),
                    Match.object_like({"Id": "held", **metric("EventsHeld", "Maximum")}),
                ]
            ),
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


@pytest.mark.parametrize("table_id", ["IntakeTable", "MainTable"])
def test_table_throttling_alarm(template: Template, table_id: str) -> None:
    def throttle_metric(name: str) -> dict[str, object]:
        return {
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/DynamoDB",
                    "MetricName": name,
                    "Dimensions": [{"Name": "TableName", "Value": {"Ref": table_id}}],
                },
                "Stat": "Sum",
                "Period": 300,
            },
            "ReturnData": False,
        }

    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Metrics": Match.array_with(
                [
                    Match.object_like(
                        {"Expression": "FILL(reads, 0) + FILL(writes, 0)", "ReturnData": True}
                    ),
                    Match.object_like({"Id": "reads", **throttle_metric("ReadThrottleEvents")}),
                    Match.object_like({"Id": "writes", **throttle_metric("WriteThrottleEvents")}),
                ]
            ),
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


def _dashboard(template: Template) -> dict[str, object]:
    _, dashboard = only(template.find_resources("AWS::CloudWatch::Dashboard"))
    return json.loads(render(dashboard["Properties"]["DashboardBody"]))


def _widget(body: dict[str, object], title: str) -> dict[str, object]:
    (widget,) = [w for w in body["widgets"] if w["properties"].get("title") == title]
    return widget["properties"]


def test_dashboard_decisions_accepted_vs_rejected(template: Template) -> None:
    body = _dashboard(template)
    accepted = ["Turnstile", "SignupAccepted", "service", "turnstile"]
    rejected = ["Turnstile", "SignupRejected", "service", "turnstile"]
    decisions = _widget(body, "Decisions per minute")
    assert decisions["metrics"] == [
        [
            {
                "label": "decisions",
                "expression": "FILL(accepted, 0) + FILL(rejected, 0)",
                "period": 60,
            }
        ],
        [
            *accepted,
            {"label": "accepted", "id": "accepted", "visible": False, "period": 60, "stat": "Sum"},
        ],
        [
            *rejected,
            {"label": "rejected", "id": "rejected", "visible": False, "period": 60, "stat": "Sum"},
        ],
    ]
    split = _widget(body, "Accepted vs rejected (per minute)")
    assert split["stacked"] is True
    assert split["metrics"] == [
        [*accepted, {"label": "accepted", "period": 60, "stat": "Sum"}],
        [*rejected, {"label": "rejected", "period": 60, "stat": "Sum"}],
    ]


def test_dashboard_latency_percentiles_and_iterator_age(template: Template) -> None:
    processor_id, _ = function_by_handler(template, "turnstile.handlers.stream.handler")
    body = _dashboard(template)
    latency = _widget(body, "Decision latency, submitted to decided (ms)")
    assert latency["metrics"] == [
        [
            "Turnstile",
            "DecisionLatency",
            "service",
            "turnstile",
            {"label": p, "period": 60, "stat": p},
        ]
        for p in ("p50", "p99")
    ]
    age = _widget(body, "Stream iterator age (max, ms)")
    assert age["metrics"] == [
        [
            "AWS/Lambda",
            "IteratorAge",
            "FunctionName",
            f"${{{processor_id}}}",
            {"period": 60, "stat": "Maximum"},
        ]
    ]
    assert age["annotations"]["horizontal"][0]["value"] == ITERATOR_AGE_THRESHOLD_MS

"""Alarms on everything that means 'decisions are not being made', and the dashboard."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match, Template

from turnstile_cdk.monitoring import ITERATOR_AGE_THRESHOLD_MS, RUNBOOK_MARK

from .conftest import ROOT, function_by_handler, only, render

OPERATIONS_GUIDE = ROOT / "docs" / "operations.md"

HANDLERS = (
    "turnstile.handlers.stream.handler",
    "turnstile.handlers.api.handler",
    "turnstile.handlers.sweeper.handler",
)


def _topic_id(template: Template) -> str:
    topic_id, _ = only(template.find_resources("AWS::SNS::Topic"))
    return topic_id


def _alarms(template: Template) -> dict[str, dict[str, object]]:
    """Alarms by name, without the stack prefix."""
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    return {
        a["Properties"]["AlarmName"].removeprefix("Turnstile-"): a["Properties"]
        for a in alarms.values()
    }


def test_every_alarm_notifies_the_topic(template: Template) -> None:
    topic = {"Ref": _topic_id(template)}
    alarms = _alarms(template)
    assert alarms
    for name, alarm in alarms.items():
        assert alarm["AlarmActions"] == [topic]
        assert alarm["OKActions"] == [topic]
        # No data is no traffic, except for the sweeper: no data there is no sweep.
        expected = "breaching" if name == "SweeperNotSucceeding" else "notBreaching"
        assert alarm["TreatMissingData"] == expected, name


def test_every_alarm_description_is_a_runbook_line(template: Template) -> None:
    """What it means, then what to do: the e-mail a human gets is enough to start."""
    for name, alarm in _alarms(template).items():
        meaning, _, action = alarm["AlarmDescription"].partition(f" {RUNBOOK_MARK} ")
        assert len(meaning) >= 30 and len(action) >= 30, f"{name}: {alarm['AlarmDescription']}"
        assert len(alarm["AlarmDescription"]) <= 1024  # CloudWatch's limit


def test_every_alarm_is_in_the_operations_guide(template: Template) -> None:
    guide = OPERATIONS_GUIDE.read_text()
    names = _alarms(template)
    assert len(names) == 20  # WaiterErrors and WaiterThrottles among them
    assert [name for name in names if f"`{name}`" not in guide] == []


def test_alarm_names_carry_the_stack_name(variant_template: Template) -> None:
    alarms = variant_template.find_resources("AWS::CloudWatch::Alarm")
    assert all(
        a["Properties"]["AlarmName"].startswith("TurnstileVariant-") for a in alarms.values()
    )


#: CloudWatch may use the topic and its key on behalf of this account's alarms only.
CLOUDWATCH_CONDITIONS = {
    "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
    "ArnLike": {
        "aws:SourceArn": {
            "Fn::Join": [
                "",
                [
                    "arn:",
                    {"Ref": "AWS::Partition"},
                    ":cloudwatch:",
                    {"Ref": "AWS::Region"},
                    ":",
                    {"Ref": "AWS::AccountId"},
                    ":alarm:*",
                ],
            ]
        }
    },
}


def test_cloudwatch_may_publish_to_the_topic_for_this_accounts_alarms(template: Template) -> None:
    """The SSL-only topic policy replaces SNS's default one: without an explicit Allow for
    cloudwatch.amazonaws.com no alarm would ever reach a human."""
    topic_id = _topic_id(template)
    _, policy = only(template.find_resources("AWS::SNS::TopicPolicy"))
    assert policy["Properties"]["Topics"] == [{"Ref": topic_id}]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    allows = [s for s in statements if s["Effect"] == "Allow"]
    assert allows == [
        {
            "Sid": "AllowCloudWatchAlarms",
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": "sns:Publish",
            "Resource": {"Ref": topic_id},
            "Condition": CLOUDWATCH_CONDITIONS,
        }
    ]


def test_cloudwatch_may_use_the_topic_key_for_this_accounts_alarms(template: Template) -> None:
    _, key = only(template.find_resources("AWS::KMS::Key"))
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    cloudwatch = [
        s for s in statements if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert cloudwatch == [
        {
            "Sid": "AllowCloudWatchAlarms",
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
            "Resource": "*",
            "Condition": CLOUDWATCH_CONDITIONS,
        }
    ]
    # Nothing else but the account's own administration statement.
    assert len(statements) == 2


def test_alarm_topic_is_encrypted_with_a_key_cloudwatch_can_use(template: Template) -> None:
    key_id, key = only(template.find_resources("AWS::KMS::Key"))
    assert key["Properties"]["EnableKeyRotation"] is True
    template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]}}
    )
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


def test_parked_event_alarm(template: Template) -> None:
    # A parked event's batches succeed: neither function errors nor the on-failure queue
    # tell. The processor's EventParked says an event was parked; the sweeper's
    # EventsParked, every run, keeps the alarm on for as long as one stays parked.
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
                        {"Expression": "FILL(failed, 0) + FILL(parked, 0)", "ReturnData": True}
                    ),
                    Match.object_like({"Id": "failed", **metric("EventParked", "Sum")}),
                    Match.object_like({"Id": "parked", **metric("EventsParked", "Maximum")}),
                ]
            ),
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


@pytest.mark.parametrize("table_id", ["IntakeTable", "MainTable", "ControlTable"])
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


def test_api_5xx_alarm(template: Template) -> None:
    api_id = template.find_outputs("ApiUrl")["ApiUrl"]["Value"]["Fn::GetAtt"][0]
    alarm = _alarms(template)["Api5xx"]
    assert {k: alarm[k] for k in _METRIC_KEYS} == {
        "Namespace": "AWS/ApiGateway",
        "MetricName": "5xx",
        "Dimensions": [
            {"Name": "ApiId", "Value": {"Ref": api_id}},
            {"Name": "Stage", "Value": "$default"},
        ],
        "Statistic": "Sum",
        "Period": 300,
        "Threshold": 0,
        "EvaluationPeriods": 1,
        "ComparisonOperator": "GreaterThanThreshold",
    }


_METRIC_KEYS = (
    "Namespace",
    "MetricName",
    "Dimensions",
    "Statistic",
    "Period",
    "Threshold",
    "EvaluationPeriods",
    "ComparisonOperator",
)


@pytest.mark.parametrize(
    ("alarm_name", "metric", "service"),
    [
        # Emitted by handlers/stream.py (Metrics(service="turnstile")) per failed group.
        ("ProcessorGroupFailed", "GroupFailed", "turnstile"),
        # Emitted by the API (turnstile.web.api.SERVICE) with each 503.
        ("StoreUnavailable", "StoreUnavailable", "turnstile-api"),
    ],
)
def test_custom_metric_alarms(
    template: Template, alarm_name: str, metric: str, service: str
) -> None:
    alarm = _alarms(template)[alarm_name]
    assert {k: alarm[k] for k in _METRIC_KEYS} == {
        "Namespace": "Turnstile",
        "MetricName": metric,
        # Powertools' one dimension: service.
        "Dimensions": [{"Name": "service", "Value": service}],
        "Statistic": "Sum",
        "Period": 300,
        "Threshold": 0,
        "EvaluationPeriods": 1,
        "ComparisonOperator": "GreaterThanThreshold",
    }


def test_sweeper_not_succeeding_alarm(template: Template) -> None:
    """No succeeded sweep in 3 schedule periods of 5 minutes, missing data counting as none:
    the sum over 15 minutes is < 1 exactly when each 5-minute sum is."""
    alarm = _alarms(template)["SweeperNotSucceeding"]
    assert {k: alarm[k] for k in _METRIC_KEYS} == {
        "Namespace": "Turnstile",
        "MetricName": "SweepSucceeded",
        "Dimensions": [{"Name": "service", "Value": "turnstile"}],
        "Statistic": "Sum",
        "Period": 300,
        "Threshold": 1,
        "EvaluationPeriods": 3,
        "ComparisonOperator": "LessThanThreshold",
    }
    assert alarm["TreatMissingData"] == "breaching"
    assert alarm.get("DatapointsToAlarm", 3) == 3

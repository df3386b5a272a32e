"""Due holds are released every minute by a function of their own, run by EventBridge
Scheduler with an invoke-only role, alarmed on its errors."""

from __future__ import annotations

from aws_cdk.assertions import Capture, Template

from .conftest import assert_scheduler_trust, function_by_handler, role_permissions

DUE_HOLDS = "turnstile.handlers.due_holds.handler"


def test_schedule_invokes_the_due_holds_function_every_minute(template: Template) -> None:
    function_id, _ = function_by_handler(template, DUE_HOLDS)
    role = Capture()
    template.has_resource_properties(
        "AWS::Scheduler::Schedule",
        {
            "ScheduleExpression": "rate(1 minute)",
            "State": "ENABLED",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "Target": {
                "Arn": {"Fn::GetAtt": [function_id, "Arn"]},
                "RoleArn": {"Fn::GetAtt": [role, "Arn"]},
                # A missed minute is not retried: the next run re-emits what is still due.
                "RetryPolicy": {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60},
            },
        },
    )
    role_id = role.as_string()
    trust = template.to_json()["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]
    assert_scheduler_trust(trust)
    # The schedule may invoke this function (and its versions), nothing else.
    assert role_permissions(template, role_id) == {
        "lambda:InvokeFunction": {f"${{{function_id}.Arn}}", f"${{{function_id}.Arn}}:*"}
    }


def test_a_run_ends_before_the_next_begins(template: Template) -> None:
    _, function = function_by_handler(template, DUE_HOLDS)
    assert function["Properties"]["Timeout"] < 60


def test_due_holds_errors_raise_an_alarm(template: Template) -> None:
    function_id, _ = function_by_handler(template, DUE_HOLDS)
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/Lambda",
            "MetricName": "Errors",
            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": function_id}}],
            "Statistic": "Sum",
            "ComparisonOperator": "GreaterThanThreshold",
            "Threshold": 0,
        },
    )

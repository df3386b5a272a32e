"""The sweeper runs every 5 minutes from EventBridge Scheduler, with an invoke-only role."""

from __future__ import annotations

from aws_cdk.assertions import Capture, Template

from .conftest import assert_scheduler_trust, function_by_handler, role_permissions


def test_schedule_invokes_the_sweeper_every_five_minutes(template: Template) -> None:
    function_id, _ = function_by_handler(template, "turnstile.handlers.sweeper.handler")
    role = Capture()
    template.has_resource_properties(
        "AWS::Scheduler::Schedule",
        {
            "ScheduleExpression": "rate(5 minutes)",
            "State": "ENABLED",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "Target": {
                "Arn": {"Fn::GetAtt": [function_id, "Arn"]},
                "RoleArn": {"Fn::GetAtt": [role, "Arn"]},
                # A missed run is not retried: the next one is 5 minutes away.
                "RetryPolicy": {"MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 240},
                # The handler names the run after the tick, so a duplicate tick is one run.
                "Input": '{"scheduled_time":"<aws.scheduler.scheduled-time>"}',
            },
        },
    )
    role_id = role.as_string()
    trust = template.to_json()["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]
    assert_scheduler_trust(trust)
    # The schedule may invoke the sweeper (and its versions), nothing else.
    assert role_permissions(template, role_id) == {
        "lambda:InvokeFunction": {f"${{{function_id}.Arn}}", f"${{{function_id}.Arn}}:*"}
    }


def test_sweeper_errors_raise_an_alarm(template: Template) -> None:
    function_id, _ = function_by_handler(template, "turnstile.handlers.sweeper.handler")
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

"""A function run on a fixed rate by EventBridge Scheduler, through an invoke-only role."""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnResource, Duration, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from constructs import Construct

__all__ = ["SCHEDULE_GROUP", "schedule_function"]

#: The schedule group turnstile's schedules are in (a schedule without a group is in it).
SCHEDULE_GROUP = "default"


def schedule_function(
    scope: Construct,
    function: lambda_.IFunction,
    *,
    what: str,
    rate: Duration,
    max_event_age: Duration,
    target_input: scheduler.ScheduleTargetInput | None = None,
) -> tuple[scheduler.Schedule, iam.Role]:
    """``function`` invoked every ``rate`` by a schedule (``scope``'s ``Schedule``) through a
    role of its own (``ScheduleRole``) that may invoke that function only. A missed tick is
    not retried: the next one comes at the next rate. ``what`` names it in descriptions."""
    # Our own role (rather than the stack-wide one the target would create), so its one
    # permission and the reason for its shape sit with the function it invokes.
    stack = Stack.of(scope)
    role = iam.Role(
        scope,
        "ScheduleRole",
        # Only EventBridge Scheduler acting for this account's default schedule group (where
        # the schedule lives) may assume it: no other account's schedule can borrow it (the
        # confused deputy). Scheduler's condition names the group, never one schedule.
        assumed_by=iam.ServicePrincipal(
            "scheduler.amazonaws.com",
            conditions={
                "StringEquals": {
                    "aws:SourceAccount": stack.account,
                    "aws:SourceArn": stack.format_arn(
                        service="scheduler",
                        resource="schedule-group",
                        resource_name=SCHEDULE_GROUP,
                    ),
                }
            },
        ),
        description=f"turnstile {what} schedule: may invoke the {what} function only",
    )
    Validations.of(role).acknowledge(
        Acknowledgment(
            id=f"AwsSolutions-IAM5[Resource::<{_logical_id(function)}.Arn>:*]",
            reason=(
                f"lambda:InvokeFunction on the {what} function only: the ':*' suffix "
                "(added by grantInvoke) matches this one function's versions and aliases, "
                "no other function."
            ),
        )
    )
    schedule = scheduler.Schedule(
        scope,
        "Schedule",
        description=f"turnstile {what} run",
        schedule=scheduler.ScheduleExpression.rate(rate),
        target=targets.LambdaInvoke(
            function,
            role=role,
            retry_attempts=0,
            max_event_age=max_event_age,
            input=target_input,
        ),
    )
    return schedule, role


def _logical_id(function: lambda_.IFunction) -> str:
    """cdk-nag names the wildcard finding after the function's (hashed) logical id."""
    stack = Stack.of(function)
    cfn_function = function.node.default_child
    assert isinstance(cfn_function, CfnResource)
    return str(stack.resolve(stack.get_logical_id(cfn_function)))

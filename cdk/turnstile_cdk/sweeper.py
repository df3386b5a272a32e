"""The sweeper: every few minutes, re-emit intake records that never got a decision."""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnResource, Duration, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from constructs import Construct

from .functions import FunctionConstruct, FunctionConstructProps
from .permissions import SWEEPER_GRANTS

__all__ = ["SWEEP_INTERVAL", "SweeperConstruct"]

SWEEP_INTERVAL = Duration.minutes(5)
#: Every run reads the index of undecided records; a run this long after the last full scan
#: reads the whole intake table instead (the backstop for records without the marker).
FULL_SCAN_EVERY = Duration.days(1)


class SweeperConstruct(Construct):
    """Deploys the sweeper (turnstile.sweeper.Sweeper) on its schedule. The sweeper never
    decides (docs/design.md): it bumps ``redrive`` on a stale intake record, a MODIFY the
    stream filter lets through, so the processor decides it like any other record.

    Parts: ``function``, ``schedule`` and its invoke-only ``schedule_role``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: FunctionConstructProps,
        *,
        reserved_concurrency: int | None = None,
        full_scan_every: Duration = FULL_SCAN_EVERY,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = FunctionConstruct(
            self,
            "Sweeper",
            props,
            handler="turnstile.handlers.sweeper.handler",
            description="turnstile sweeper: re-emits intake records still undecided",
            # Less than the interval, so two runs rarely overlap (its lease guards the rest).
            timeout=Duration.minutes(4),
            memory_size=256,
            reserved_concurrency=reserved_concurrency,
            environment={
                "TURNSTILE_SWEEP_FULL_SCAN_EVERY_S": str(int(full_scan_every.to_seconds()))
            },
        )
        self.function = self.handler.function
        self.handler.grant_tables(SWEEPER_GRANTS)

        # Our own role (rather than the stack-wide one the target would create), so its one
        # permission and the reason for its shape sit with the sweeper.
        self.schedule_role = iam.Role(
            self,
            "ScheduleRole",
            assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"),
            description="turnstile sweeper schedule: may invoke the sweeper function only",
        )
        Validations.of(self.schedule_role).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::<{self._logical_id_of_function()}.Arn>:*]",
                reason=(
                    "lambda:InvokeFunction on the sweeper function only: the ':*' suffix "
                    "(added by grantInvoke) matches this one function's versions and aliases, "
                    "no other function."
                ),
            )
        )
        self.schedule = scheduler.Schedule(
            self,
            "Schedule",
            description="turnstile sweeper run",
            schedule=scheduler.ScheduleExpression.rate(SWEEP_INTERVAL),
            target=targets.LambdaInvoke(
                self.function,
                role=self.schedule_role,
                # The next run comes in 5 minutes: retrying a missed one only piles runs up.
                retry_attempts=0,
                max_event_age=Duration.minutes(4),
                # The tick's own time names the run: a duplicate delivery of one tick is
                # the same run, which its history stops at once.
                input=scheduler.ScheduleTargetInput.from_object(
                    {"scheduled_time": scheduler.ContextAttribute.scheduled_time}
                ),
            ),
        )

    def _logical_id_of_function(self) -> str:
        """cdk-nag names the wildcard finding after the function's (hashed) logical id."""
        stack = Stack.of(self)
        cfn_function = self.function.node.default_child
        assert isinstance(cfn_function, CfnResource)
        return str(stack.resolve(stack.get_logical_id(cfn_function)))

"""The sweeper: every few minutes, re-emit intake records that never got a decision."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from turnstile.base.contract import FUNCTION_HANDLERS, Function
from turnstile.storage.failures import FAILURE_QUEUE_URL_ENV

from .functions import FunctionConstruct, FunctionConstructProps
from .permissions import SWEEPER_GRANTS
from .schedule import schedule_function

__all__ = ["SWEEP_INTERVAL", "SweeperConstruct"]

SWEEP_INTERVAL = Duration.minutes(5)
#: Every run reads the index of undecided records; a run this long after the last full scan
#: reads the whole intake table instead (the backstop for records without the marker).
FULL_SCAN_EVERY = Duration.days(1)


class SweeperConstruct(Construct):
    """Deploys the sweeper (turnstile.jobs.sweeper.Sweeper) on its schedule. The sweeper never
    decides (docs/design.md): it bumps ``redrive`` on a stale intake record, a MODIFY the
    stream filter lets through, so the processor decides it like any other record.

    It also reads the stream processor's on-failure queue: a note there (a batch the event
    source gave up on) makes its next run read the whole intake table and re-emit what is
    undecided, then delete the note (``sqs:ReceiveMessage`` and ``sqs:DeleteMessage`` on
    that queue, nothing more).

    Parts: ``function``, ``schedule`` and its invoke-only ``schedule_role``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: FunctionConstructProps,
        *,
        failure_queue: sqs.IQueue,
        reserved_concurrency: int | None = None,
        full_scan_every: Duration = FULL_SCAN_EVERY,
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = FunctionConstruct(
            self,
            "Sweeper",
            props,
            handler=FUNCTION_HANDLERS[Function.SWEEPER],
            description="turnstile sweeper: re-emits intake records still undecided",
            # Less than the interval, so two runs rarely overlap (its lease guards the rest).
            timeout=Duration.minutes(4),
            memory_size=256,
            reserved_concurrency=reserved_concurrency,
            environment={
                "TURNSTILE_SWEEP_FULL_SCAN_EVERY_S": str(int(full_scan_every.to_seconds())),
                FAILURE_QUEUE_URL_ENV: failure_queue.queue_url,
            },
        )
        self.function = self.handler.function
        self.handler.grant_tables(SWEEPER_GRANTS)
        failure_queue.grant(self.function, "sqs:ReceiveMessage", "sqs:DeleteMessage")

        # The next run comes in 5 minutes: retrying a missed one only piles runs up.
        self.schedule, self.schedule_role = schedule_function(
            self,
            self.function,
            what="sweeper",
            rate=SWEEP_INTERVAL,
            max_event_age=Duration.minutes(4),
            # The tick's own time names the run: a duplicate delivery of one tick is the
            # same run, which its history stops at once.
            target_input=scheduler.ScheduleTargetInput.from_object(
                {"scheduled_time": scheduler.ContextAttribute.scheduled_time}
            ),
        )

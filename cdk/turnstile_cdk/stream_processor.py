"""The stream processor: intake stream -> event source mapping -> function -> main table."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Validations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from turnstile.base.contract import (
    FUNCTION_HANDLERS,
    STREAM_SOURCE,
    WAKE_SOURCE,
    EventSourceSettings,
    Function,
)

from .event_source import event_source_mapping_properties
from .functions import FunctionConstruct, FunctionConstructProps
from .permissions import PROCESSOR_GRANTS

__all__ = ["StreamProcessorConstruct"]


class StreamProcessorConstruct(Construct):
    """Deploys the stream processor (turnstile.jobs.processor.StreamProcessor), the only writer
    of decisions.

    Parts: ``function``, ``failure_queue`` (metadata of batches given up on: the input of
    ``turnstile redrive``), ``event_source_mapping`` (the intake stream, settings from
    contract.STREAM_SOURCE) and ``wake_mapping`` (the control table's stream, its wake-ups
    only: contract.WAKE_SOURCE).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: FunctionConstructProps,
        *,
        settings: EventSourceSettings = STREAM_SOURCE,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.failure_queue = sqs.Queue(
            self,
            "FailureQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            # The longest SQS allows: the records themselves stay in the intake table.
            retention_period=Duration.days(14),
        )
        Validations.of(self.failure_queue).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SQS3",
                reason=(
                    "This queue is itself the terminal on-failure destination of the stream "
                    "mapping (a dead-letter queue in all but name); an operator drains it with "
                    "'turnstile redrive'. A DLQ behind it would only hide failures further."
                ),
            )
        )
        self.handler = FunctionConstruct(
            self,
            "Processor",
            props,
            handler=FUNCTION_HANDLERS[Function.PROCESSOR],
            logs_signups=True,
            description="turnstile stream processor: decides each signup exactly once, in order",
            # A batch is up to batch_size records, one conditional commit and a few batch
            # writes per event, with retries inside the invocation; far below the age limit.
            timeout=Duration.seconds(60),
            # More memory buys proportionally more CPU: lower decision latency per batch.
            memory_size=512,
            # Keeps a flood or a bug here from taking the concurrency the API needs.
            reserved_concurrency=reserved_concurrency,
            wildcard_reasons=(
                "dynamodb:ListStreams (needed by the event source mapping to find the intake "
                "stream) is a list action that AWS only authorizes on Resource '*'.",
            ),
        )
        self.function = self.handler.function

        # Read the stream (and intake items, for crash recovery); on main exactly what
        # deciding needs; never write intake.
        props.intake.grant_stream_read(self.function)
        props.control.grant_stream_read(self.function)
        self.handler.grant_tables(PROCESSOR_GRANTS)
        self.failure_queue.grant_send_messages(self.function)

        stream_arn = props.intake.table_stream_arn
        if stream_arn is None:
            raise ValueError("the intake table has no stream")
        self.event_source_mapping = lambda_.CfnEventSourceMapping(
            self,
            "IntakeStreamMapping",
            function_name=self.function.function_name,
            event_source_arn=stream_arn,
            destination_config=lambda_.CfnEventSourceMapping.DestinationConfigProperty(
                on_failure=lambda_.CfnEventSourceMapping.OnFailureProperty(
                    destination=self.failure_queue.queue_arn
                )
            ),
        )
        # The settings-derived properties come from one pure function, verbatim, so the
        # template and the local poller cannot disagree.
        for name, value in event_source_mapping_properties(settings).items():
            self.event_source_mapping.add_property_override(name, value)
        # Wake-ups: the control table's stream, filtered to wake-up items. No on-failure
        # destination: a wake-up given up on is written again (the due-holds index keeps
        # what is due until it is done), and redrive reads intake records only.
        wake_stream = props.control.table_stream_arn
        if wake_stream is None:
            raise ValueError("the control table has no stream")
        self.wake_mapping = lambda_.CfnEventSourceMapping(
            self,
            "WakeStreamMapping",
            function_name=self.function.function_name,
            event_source_arn=wake_stream,
        )
        for name, value in event_source_mapping_properties(WAKE_SOURCE).items():
            self.wake_mapping.add_property_override(name, value)
        # Creating a mapping checks the role can read the stream: grants first.
        role_policy = self.handler.role.node.try_find_child("DefaultPolicy")
        if role_policy is not None:
            self.event_source_mapping.node.add_dependency(role_policy)
            self.wake_mapping.node.add_dependency(role_policy)

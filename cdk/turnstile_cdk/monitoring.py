"""Alarms (to an encrypted SNS topic) and the dashboard operators look at first."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from .functions import METRICS_NAMESPACE, SERVICE_NAME

__all__ = ["ITERATOR_AGE_THRESHOLD_MS", "Monitoring", "turnstile_metric"]

#: A decision more than two minutes behind its stream record means the processor is stuck
#: or failing: far more than normal batching (seconds), far less than the 6 h record age limit.
ITERATOR_AGE_THRESHOLD_MS = 120_000

_MINUTE = Duration.minutes(1)
_FIVE_MINUTES = Duration.minutes(5)


def turnstile_metric(name: str, statistic: str, *, label: str | None = None) -> cloudwatch.Metric:
    """A metric the handlers emit with Powertools (EMF): namespace Turnstile, service=turnstile."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE_NAME},
        statistic=statistic,
        period=_MINUTE,
        label=label,
    )


class Monitoring(Construct):
    """Parts: ``topic`` (alarm actions), ``alarms`` (by name), ``dashboard``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        processor: lambda_.IFunction,
        functions: Mapping[str, lambda_.IFunction],
        failure_queue: sqs.IQueue,
        tables: Mapping[str, dynamodb.ITable],
        alarm_email: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        # A customer managed key: CloudWatch alarms cannot publish to a topic encrypted with
        # the AWS managed aws/sns key, whose policy cannot grant cloudwatch.amazonaws.com.
        self.topic_key = kms.Key(
            self,
            "AlarmTopicKey",
            description="turnstile alarm topic encryption",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.topic_key.grant(
            iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*"
        )
        self.topic = sns.Topic(
            self,
            "AlarmTopic",
            display_name="turnstile alarms",
            master_key=self.topic_key,
            enforce_ssl=True,
        )
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))

        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self._alarm(
            "ProcessorIteratorAge",
            processor.metric("IteratorAge", statistic=cloudwatch.Stats.MAXIMUM, period=_MINUTE),
            threshold=ITERATOR_AGE_THRESHOLD_MS,
            evaluation_periods=3,
            description="Decisions lag the intake stream by more than 2 minutes (3 minutes in a "
            "row): the processor is failing, throttled or too slow. Check its errors and logs.",
        )
        for name, function in functions.items():
            self._alarm(
                f"{name}Errors",
                function.metric_errors(period=_FIVE_MINUTES, statistic=cloudwatch.Stats.SUM),
                threshold=0,
                description=f"The {name} function failed at least once in 5 minutes.",
            )
            self._alarm(
                f"{name}Throttles",
                function.metric_throttles(period=_FIVE_MINUTES, statistic=cloudwatch.Stats.SUM),
                threshold=0,
                description=f"The {name} function was throttled (account concurrency).",
            )
        self._alarm(
            "FailureQueueNotEmpty",
            failure_queue.metric_approximate_number_of_messages_visible(
                period=_MINUTE, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=0,
            description="A stream batch was given up on: its records have no decision yet. "
            "Run 'turnstile redrive --stack <stack>' after fixing the cause.",
        )
        self._alarm(
            "EventHeld",
            cloudwatch.MathExpression(
                expression="FILL(failed, 0) + FILL(held, 0)",
                using_metrics={
                    # the processor, as it holds an event (or fails to release one) ...
                    "failed": turnstile_metric("EventHeld", cloudwatch.Stats.SUM).with_(
                        period=_FIVE_MINUTES
                    ),
                    # ... and the sweeper, every run, for as long as any event is held
                    "held": turnstile_metric("EventsHeld", cloudwatch.Stats.MAXIMUM).with_(
                        period=_FIVE_MINUTES
                    ),
                },
                period=_FIVE_MINUTES,
                label="held events",
            ),
            threshold=0,
            description="An event's signups could not be decided and are held, parked in "
            "arrival order (its batches still succeed, so no other alarm fires). They are "
            "released once deciding works again; 'turnstile audit' shows them as held.",
        )
        for name, table in tables.items():
            self._alarm(
                f"{name}TableThrottles",
                cloudwatch.MathExpression(
                    expression="FILL(reads, 0) + FILL(writes, 0)",
                    using_metrics={
                        "reads": table.metric("ReadThrottleEvents", statistic=cloudwatch.Stats.SUM),
                        "writes": table.metric(
                            "WriteThrottleEvents", statistic=cloudwatch.Stats.SUM
                        ),
                    },
                    period=_FIVE_MINUTES,
                    label=f"{name} throttle events",
                ),
                threshold=0,
                description=f"DynamoDB throttled requests on the {name} table: a hot partition "
                "(one event taking > 1,000 writes/s) or an account limit.",
            )

        self.dashboard = self._dashboard(processor, failure_queue)

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        description: str,
        evaluation_periods: int = 1,
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            f"{name}Alarm",
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            # No data means no traffic (nothing failing), not an outage.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        action = cw_actions.SnsAction(self.topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        self.alarms[name] = alarm

    def _dashboard(
        self, processor: lambda_.IFunction, failure_queue: sqs.IQueue
    ) -> cloudwatch.Dashboard:
        accepted = turnstile_metric("SignupAccepted", cloudwatch.Stats.SUM, label="accepted")
        rejected = turnstile_metric("SignupRejected", cloudwatch.Stats.SUM, label="rejected")
        decisions = cloudwatch.MathExpression(
            expression="FILL(accepted, 0) + FILL(rejected, 0)",
            using_metrics={"accepted": accepted, "rejected": rejected},
            period=_MINUTE,
            label="decisions",
        )
        dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Decisions per minute",
                left=[decisions],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Accepted vs rejected (per minute)",
                left=[accepted, rejected],
                stacked=True,
                width=12,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Stream iterator age (max, ms)",
                left=[
                    processor.metric(
                        "IteratorAge", statistic=cloudwatch.Stats.MAXIMUM, period=_MINUTE
                    )
                ],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=ITERATOR_AGE_THRESHOLD_MS, label="alarm")
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Decision latency, submitted to decided (ms)",
                left=[
                    turnstile_metric("DecisionLatency", cloudwatch.Stats.p(50), label="p50"),
                    turnstile_metric("DecisionLatency", cloudwatch.Stats.p(99), label="p99"),
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Processor errors and throttles",
                left=[
                    processor.metric_errors(period=_MINUTE, statistic=cloudwatch.Stats.SUM),
                    processor.metric_throttles(period=_MINUTE, statistic=cloudwatch.Stats.SUM),
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="On-failure queue (batches given up on)",
                left=[
                    failure_queue.metric_approximate_number_of_messages_visible(
                        period=_MINUTE, statistic=cloudwatch.Stats.MAXIMUM
                    )
                ],
                width=12,
            ),
        )
        return dashboard

"""Alarms (to an encrypted SNS topic) and the dashboard operators look at first."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigatewayv2 as apigwv2
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

from turnstile.web.api import SERVICE as API_SERVICE

from .functions import METRICS_NAMESPACE, SERVICE_NAME
from .sweeper import SWEEP_INTERVAL

__all__ = [
    "API_SERVICE",
    "ITERATOR_AGE_THRESHOLD_MS",
    "RUNBOOK_MARK",
    "SWEEPER_MISSED_RUNS",
    "MonitoringConstruct",
    "cloudwatch_alarms_statement",
    "turnstile_metric",
]

#: A decision more than two minutes behind its stream record means the processor is stuck
#: or failing: far more than normal batching (seconds), far less than the 6 h record age limit.
ITERATOR_AGE_THRESHOLD_MS = 120_000

#: The sweeper alarms after this many schedule periods without a succeeded run.
SWEEPER_MISSED_RUNS = 3

#: Separates an alarm description's meaning from what to do about it.
RUNBOOK_MARK = "To do:"

_MINUTE = Duration.minutes(1)
_FIVE_MINUTES = Duration.minutes(5)


def turnstile_metric(
    name: str,
    statistic: str,
    *,
    label: str | None = None,
    period: Duration = _MINUTE,
    service: str = SERVICE_NAME,
) -> cloudwatch.Metric:
    """A metric the handlers emit with Powertools (EMF): namespace Turnstile, and the one
    dimension Powertools adds, ``service`` (the stream processor's and the sweeper's
    ``turnstile``, the API's ``turnstile-api``)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": service},
        statistic=statistic,
        period=period,
        label=label,
    )


def cloudwatch_alarms_statement(actions: list[str], *, resources: list[str]) -> iam.PolicyStatement:
    """Allows CloudWatch to use the alarm topic (or its key) on behalf of this account's alarms
    in this region only (the confused-deputy conditions)."""
    return iam.PolicyStatement(
        sid="AllowCloudWatchAlarms",
        principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
        actions=actions,
        resources=resources,
        conditions={
            "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
            "ArnLike": {
                "aws:SourceArn": f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:"
                f"{Aws.ACCOUNT_ID}:alarm:*"
            },
        },
    )


class MonitoringConstruct(Construct):
    """Alarms and the dashboard. Parts: ``topic`` (alarm actions), ``alarms`` (by name),
    ``dashboard``.

    Every alarm's description is its runbook line: what it means, then what to do.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        processor: lambda_.IFunction,
        functions: Mapping[str, lambda_.IFunction],
        failure_queue: sqs.IQueue,
        tables: Mapping[str, dynamodb.ITable],
        api_stage: apigwv2.HttpStage,
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
        self.topic_key.add_to_resource_policy(
            cloudwatch_alarms_statement(["kms:Decrypt", "kms:GenerateDataKey*"], resources=["*"])
        )
        self.topic = sns.Topic(
            self,
            "AlarmTopic",
            display_name="turnstile alarms",
            master_key=self.topic_key,
            enforce_ssl=True,
        )
        # enforce_ssl gives the topic a policy, which replaces SNS's default one: without
        # this statement CloudWatch could not publish, and no alarm would reach anyone.
        self.topic.add_to_resource_policy(
            cloudwatch_alarms_statement(["sns:Publish"], resources=[self.topic.topic_arn])
        )
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))

        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self._alarm(
            "ProcessorIteratorAge",
            processor.metric("IteratorAge", statistic=cloudwatch.Stats.MAXIMUM, period=_MINUTE),
            threshold=ITERATOR_AGE_THRESHOLD_MS,
            evaluation_periods=3,
            meaning="Decisions lag the intake stream by more than 2 minutes (3 minutes in a "
            "row): the processor is failing, throttled or too slow.",
            action="Look at the ProcessorErrors, ProcessorThrottles and ProcessorGroupFailed "
            "alarms and the processor's logs; records older than 6 hours go to the "
            "failure queue.",
        )
        self._alarm(
            "ProcessorGroupFailed",
            turnstile_metric("GroupFailed", cloudwatch.Stats.SUM, period=_FIVE_MINUTES),
            threshold=0,
            meaning="The processor could not decide an event's signups (DynamoDB unavailable "
            "past retries, endless commit conflicts, or a bug); the stream redelivers them "
            "from the failed record, in order.",
            action="If it clears by itself it was transient. If it stays, search the "
            "processor's logs for 'event group failed' (event_id and the exception), fix "
            "the cause; batches that exhaust their retries go to the failure queue.",
        )
        self._alarm(
            "StoreUnavailable",
            turnstile_metric(
                "StoreUnavailable", cloudwatch.Stats.SUM, period=_FIVE_MINUTES, service=API_SERVICE
            ),
            threshold=0,
            meaning="The API answered 503: DynamoDB throttled or could not be reached past "
            "the store's retries; clients were told to retry after a few seconds.",
            action="Check the TableThrottles alarms and the AWS Health Dashboard for "
            "DynamoDB; a hot event (over 1,000 signups/s) needs lower "
            "turnstile:signupRateLimit.",
        )
        self._alarm(
            "Api5xx",
            api_stage.metric_server_error(period=_FIVE_MINUTES, statistic=cloudwatch.Stats.SUM),
            threshold=0,
            meaning="The HTTP API answered 5xx: the API function failed, timed out or was "
            "throttled, or DynamoDB was unavailable (503).",
            action="Look at ApiErrors, ApiThrottles and StoreUnavailable, then the access "
            "logs (status, integrationError) and the API function's logs.",
        )
        self._alarm(
            "SweeperNotSucceeding",
            turnstile_metric("SweepSucceeded", cloudwatch.Stats.SUM, period=SWEEP_INTERVAL),
            threshold=1,
            evaluation_periods=SWEEPER_MISSED_RUNS,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            # No data is exactly what this alarm is for: a sweeper that no longer runs.
            missing_data=cloudwatch.TreatMissingData.BREACHING,
            meaning=f"No sweep succeeded in {SWEEPER_MISSED_RUNS} schedule periods "
            f"({SWEEPER_MISSED_RUNS * 5} minutes): records that missed the stream are not "
            "being re-emitted.",
            action="Check SweeperErrors and the sweeper's logs ('sweep finished': status "
            "lease_busy means another holder keeps the lease; failed runs are rerun by "
            'invoking the sweeper with {"replay_failed": true}), and that its schedule is '
            "enabled.",
        )
        for name, function in functions.items():
            self._alarm(
                f"{name}Errors",
                function.metric_errors(period=_FIVE_MINUTES, statistic=cloudwatch.Stats.SUM),
                threshold=0,
                meaning=f"The {name} function failed at least once in 5 minutes.",
                action=f"Read the {name} function's logs (errors carry the request id) and "
                "fix the cause; a failed sweep is rerun by the next one.",
            )
            self._alarm(
                f"{name}Throttles",
                function.metric_throttles(period=_FIVE_MINUTES, statistic=cloudwatch.Stats.SUM),
                threshold=0,
                meaning=f"Lambda throttled the {name} function: its reserved concurrency or "
                "the account's concurrency is used up.",
                action="Raise its reserved concurrency (turnstile:processorReservedConcurrency, "
                "turnstile:sweeperReservedConcurrency) or the account's limit, or find what "
                "else uses the account's concurrency.",
            )
        self._alarm(
            "FailureQueueNotEmpty",
            failure_queue.metric_approximate_number_of_messages_visible(
                period=_MINUTE, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=0,
            meaning="A stream batch was given up on: its records have no decision yet.",
            action="The sweeper's next run re-emits them and deletes the note. If it stays, "
            "fix the cause (processor and sweeper logs), then run "
            "'turnstile --stack <stack> redrive'.",
        )
        self._alarm(
            "EventParked",
            cloudwatch.MathExpression(
                expression="FILL(failed, 0) + FILL(parked, 0)",
                using_metrics={
                    # the processor, as it parks an event (or fails to release one) ...
                    "failed": turnstile_metric("EventParked", cloudwatch.Stats.SUM).with_(
                        period=_FIVE_MINUTES
                    ),
                    # ... and the sweeper, every run, for as long as any event is parked
                    "parked": turnstile_metric("EventsParked", cloudwatch.Stats.MAXIMUM).with_(
                        period=_FIVE_MINUTES
                    ),
                },
                period=_FIVE_MINUTES,
                label="parked events",
            ),
            threshold=0,
            meaning="An event's signups could not be decided and are parked in arrival "
            "order (its batches still succeed, so no other alarm fires).",
            action="Read the processor's 'event parked' log lines (event_id, error class) and "
            "fix the cause; the parked signups are then released in order by the next "
            "record of the event or the next sweep. 'turnstile audit' shows them as parked.",
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
                meaning=f"DynamoDB throttled requests on the {name} table: a hot partition "
                "(one event taking over 1,000 writes/s) or an account limit.",
                action="Throttled calls are retried; if it persists lower "
                "turnstile:signupRateLimit or ask AWS for a higher table limit.",
            )

        self.dashboard = self._dashboard(processor, failure_queue)

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        meaning: str,
        action: str,
        evaluation_periods: int = 1,
        comparison: cloudwatch.ComparisonOperator = (
            cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        ),
        # No data means no traffic (nothing failing), not an outage.
        missing_data: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            f"{name}Alarm",
            # The name the notification shows, and the one docs/operations.md is indexed by.
            alarm_name=f"{Stack.of(self).stack_name}-{name}",
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            comparison_operator=comparison,
            treat_missing_data=missing_data,
            alarm_description=f"{meaning} {RUNBOOK_MARK} {action}",
        )
        action_ = cw_actions.SnsAction(self.topic)
        alarm.add_alarm_action(action_)
        alarm.add_ok_action(action_)
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

"""The turnstile stack: composes the constructs and names the outputs the CLI looks up."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, CfnOutput, RemovalPolicy, Stack, Validations
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from turnstile_tools.stack_outputs import OutputKey

from .api import ApiAuth, ApiConstruct, ApiThrottling
from .due_holds import DueHoldsConstruct
from .encryption import data_key
from .functions import FunctionCommons, FunctionConstructProps
from .monitoring import MonitoringConstruct
from .producers import confined_producers
from .producers import output_key as producer_output_key
from .settings import TurnstileSettings
from .stream_processor import StreamProcessorConstruct
from .sweeper import SweeperConstruct
from .tables import TablesConstruct

__all__ = ["TurnstileStack"]


class TurnstileStack(Stack):
    """Tables, stream processor, HTTP API, sweeper, the release of due holds and
    monitoring; no resource defined here."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: TurnstileSettings | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.settings = settings = settings or TurnstileSettings()
        self.template_options.description = (
            "turnstile: decides who gets a limited resource, exactly once, in arrival order"
        )

        # turnstile:encryptionKey: none (AWS managed keys), the stack's own, or the operator's.
        self.data_key = data_key(
            Construct(self, "Encryption"), settings.encryption_key, retain=settings.retain_tables
        )
        self.tables = TablesConstruct(
            self,
            "Tables",
            retain=settings.retain_tables,
            expire_decisions=settings.decision_retention_days is not None,
            encryption_key=self.data_key,
        )
        # The key of the logs' signup references: without it a log line's reference cannot
        # be checked against a guessed e-mail address (personal_data.signup_ref).
        self.log_key = secretsmanager.Secret(
            Construct(self, "PersonalData"),
            "LogKey",
            description="turnstile: the key of signup references in logs (HMAC-SHA-256)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True
            ),
            encryption_key=self.data_key,
            removal_policy=RemovalPolicy.DESTROY,
        )
        Validations.of(self.log_key).acknowledge(
            Acknowledgment(
                id="AwsSolutions-SMG4",
                reason="A pseudonymization key, not a credential: nothing is encrypted or "
                "authenticated with it. Rotating it would only break the correlation of log "
                "lines across the rotation; an operator replaces it by hand if it leaks.",
            )
        )
        # What the three function constructs share.
        props = FunctionConstructProps(
            commons=FunctionCommons.create(
                self,
                log_level=settings.log_level,
                powertools_layer_version=settings.powertools_layer_version,
                environment=settings.retention_environment,
            ),
            intake=self.tables.intake,
            main=self.tables.main,
            control=self.tables.control,
            log_key=self.log_key,
            data_key=self.data_key,
        )
        self.processor = StreamProcessorConstruct(
            self,
            "StreamProcessor",
            props,
            reserved_concurrency=settings.processor_reserved_concurrency,
        )
        self.api = ApiConstruct(
            self,
            "Api",
            props,
            auth=ApiAuth(
                jwt_issuer=settings.jwt_issuer,
                jwt_audience=settings.jwt_audience,
                admin_principals=settings.admin_principals,
            ),
            cors_origins=settings.api_cors_origins,
            reserved_concurrency=settings.api_reserved_concurrency,
            waiter_reserved_concurrency=settings.waiter_reserved_concurrency,
            max_events_per_organizer=settings.max_events_per_organizer,
            throttling=ApiThrottling(
                default=apigwv2.ThrottleSettings(
                    rate_limit=settings.api_rate_limit, burst_limit=settings.api_burst_limit
                ),
                signups=apigwv2.ThrottleSettings(
                    rate_limit=settings.signup_rate_limit, burst_limit=settings.signup_burst_limit
                ),
                reads=apigwv2.ThrottleSettings(
                    rate_limit=settings.read_rate_limit, burst_limit=settings.read_burst_limit
                ),
                waits=apigwv2.ThrottleSettings(
                    rate_limit=settings.wait_rate_limit, burst_limit=settings.wait_burst_limit
                ),
            ),
        )
        self.sweeper = SweeperConstruct(
            self,
            "Sweeper",
            props,
            failure_queue=self.processor.failure_queue,
            reserved_concurrency=settings.sweeper_reserved_concurrency,
        )
        self.due_holds = DueHoldsConstruct(
            self,
            "DueHolds",
            props,
            reserved_concurrency=settings.due_holds_reserved_concurrency,
        )
        self.monitoring = MonitoringConstruct(
            self,
            "Monitoring",
            processor=self.processor.function,
            functions={
                "Processor": self.processor.function,
                "Api": self.api.function,
                "Waiter": self.api.waiter,
                "Sweeper": self.sweeper.function,
                "DueHolds": self.due_holds.function,
            },
            failure_queue=self.processor.failure_queue,
            tables={
                "Intake": self.tables.intake,
                "Main": self.tables.main,
                "Control": self.tables.control,
            },
            api_stage=self.api.stage,
            alarm_email=settings.alarm_email,
        )

        # Defined on the stack itself so the output keys are exactly these (no hash suffix).
        CfnOutput(
            self,
            OutputKey.INTAKE_TABLE_NAME,
            value=self.tables.intake.table_name,
            description="Producers write signups here (PutItem with attribute_not_exists).",
        )
        CfnOutput(
            self,
            OutputKey.MAIN_TABLE_NAME,
            value=self.tables.main.table_name,
            description="Decisions, one per intake record, under its own key.",
        )
        CfnOutput(
            self,
            OutputKey.CONTROL_TABLE_NAME,
            value=self.tables.control.table_name,
            description="Event items, the sweeper's lease and run history (turnstile's own).",
        )
        CfnOutput(
            self,
            OutputKey.API_URL,
            value=self.api.url,
            description="HTTP API base URL (SigV4-signed requests unless a JWT authorizer is set).",
        )
        CfnOutput(
            self,
            OutputKey.FAILURE_QUEUE_URL,
            value=self.processor.failure_queue.queue_url,
            description="Batches the stream processor gave up on: drain with 'turnstile redrive'.",
        )
        CfnOutput(
            self,
            "AlarmTopicArn",
            value=self.monitoring.topic.topic_arn,
            description="Subscribe to receive turnstile alarms.",
        )
        self.producers = confined_producers(
            self,
            dict(settings.confined_producers),
            intake=self.tables.intake,
            main=self.tables.main,
            data_key=self.data_key,
        )
        if self.data_key is not None:
            CfnOutput(
                self,
                "DataKeyArn",
                value=self.data_key.key_arn,
                description="The customer managed key of the tables and log groups: a direct "
                "producer needs kms:Encrypt, kms:Decrypt and kms:GenerateDataKey* on it.",
            )
        for name, producer in self.producers.items():
            CfnOutput(
                self,
                producer_output_key(name),
                value=producer.policy.managed_policy_arn,
                description=f"Attach to the IAM role of the direct producer {name}: intake "
                "and decisions of its own events only.",
            )
        for role, policy in self.api.caller_policies.items():
            CfnOutput(
                self,
                role.output_key,
                value=policy.managed_policy_arn,
                description=f"Attach to the IAM roles of {role.value}s: the API routes they may "
                "call.",
            )

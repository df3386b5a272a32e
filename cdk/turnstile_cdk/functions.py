"""What every turnstile Lambda function shares: code asset, runtime, Powertools layer, logging."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import Acknowledgment, Aws, Duration, RemovalPolicy, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from turnstile.base.contract import CONTROL_TABLE, INTAKE_TABLE, MAIN_TABLE
from turnstile.base.personal_data import LOG_KEY_SECRET_ENV

from .encryption import grant_data_key
from .permissions import CONTROL, INTAKE, MAIN, TableGrant

#: The table actions that write: a function granted any of them encrypts with the tables' key.
TABLE_WRITES = frozenset(
    {
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:BatchWriteItem",
    }
)

__all__ = [
    "FUNCTIONS_DIR",
    "METRICS_NAMESPACE",
    "POWERTOOLS_LAYER_ACCOUNT",
    "POWERTOOLS_VERSION",
    "SERVICE_NAME",
    "FunctionCommons",
    "FunctionConstruct",
    "FunctionConstructProps",
    "powertools_layer_arn",
    "powertools_ssm_parameter",
]

#: The repository's ``functions/`` directory: the whole Python package is the Lambda asset.
FUNCTIONS_DIR = Path(__file__).resolve().parents[2] / "functions"

#: Powertools names (the handlers emit EMF metrics with dimension service=turnstile).
SERVICE_NAME = "turnstile"
METRICS_NAMESPACE = "Turnstile"

#: Must match requirements.txt, so the code runs on Lambda with the Powertools it is tested with.
#: The layer also brings pydantic (the HTTP API's models; Powertools' extra `parser`): it is
#: built from `aws-lambda-powertools[all]==3.37.0` (Powertools' layer_v3 Dockerfile), so it
#: holds pydantic 2 within 3.37.0's bounds (>=2.4.0,<3.0.0), the 2.x current when the layer
#: was built. Powertools publishes no exact version; the tests pin 2.14.4 (requirements.txt).
POWERTOOLS_VERSION = "3.37.0"
#: The AWS account that publishes the public Powertools for AWS Lambda (Python) layers.
POWERTOOLS_LAYER_ACCOUNT = "017000801446"

RUNTIME = lambda_.Runtime.PYTHON_3_12
#: Graviton: about 20 % cheaper per GB-second than x86_64; the code is pure Python.
ARCHITECTURE = lambda_.Architecture.ARM_64
_ARCH_NAME = "arm64"
_PYTHON_TAG = "python312"  # the layer name's spelling of the runtime
_PYTHON_VERSION = "python3.12"  # the SSM parameter path's spelling

#: The asset is functions/ whole: the runtime package and nothing else (the CLI, the local
#: stack and the audit are tools/turnstile_tools; the benchmark is benchmark/turnstile_bench).
#: Left out: byte code, and what a developer's tools may leave beside it.
#: tests/infra/test_functions.py checks the asset is exactly functions/turnstile's modules.
ASSET_EXCLUDES = [
    "**/__pycache__",
    "**/*.pyc",
    "tests",
    "**/tests",
    "*.egg-info",
]


def powertools_layer_arn(layer_version: int, *, region: str = Aws.REGION) -> str:
    """The public layer's ARN in the stack's region (``region`` is a token at synth time)."""
    return (
        f"arn:{Aws.PARTITION}:lambda:{region}:{POWERTOOLS_LAYER_ACCOUNT}:layer:"
        f"AWSLambdaPowertoolsPythonV3-{_PYTHON_TAG}-{_ARCH_NAME}:{layer_version}"
    )


def powertools_ssm_parameter(version: str = POWERTOOLS_VERSION) -> str:
    """The SSM parameter in which Powertools publishes the layer ARN of ``version``, per region."""
    return f"/aws/service/powertools/python/{_ARCH_NAME}/{_PYTHON_VERSION}/{version}"


@dataclass
class FunctionCommons:
    """Built once per stack, shared by every function: one asset upload, one layer reference."""

    code: lambda_.Code
    layer: lambda_.ILayerVersion
    log_level: str
    #: Variables every function gets besides the table names and Powertools' own.
    environment: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        scope: Construct,
        *,
        log_level: str,
        powertools_layer_version: int | None,
        environment: Mapping[str, str] | None = None,
    ) -> FunctionCommons:
        if powertools_layer_version is None:
            # The layer ARN's version number is only known per release from Powertools'
            # public SSM parameter; resolving it at deploy time pins exactly POWERTOOLS_VERSION.
            arn = ssm.StringParameter.value_for_string_parameter(scope, powertools_ssm_parameter())
        else:
            arn = powertools_layer_arn(powertools_layer_version)
        return cls(
            # No bundling: boto3 comes with the runtime and Powertools with its layer.
            code=lambda_.Code.from_asset(str(FUNCTIONS_DIR), exclude=ASSET_EXCLUDES),
            layer=lambda_.LayerVersion.from_layer_version_arn(scope, "PowertoolsLayer", arn),
            log_level=log_level,
            environment=dict(environment or {}),
        )


@dataclass(frozen=True, kw_only=True)
class FunctionConstructProps:
    """What each construct running a turnstile function is given: the stream processor's,
    the API's and the sweeper's (and ``FunctionConstruct`` itself). Like the Props of AWS
    Solutions Constructs, every field says its default; a construct's own options (timeouts,
    settings, concurrency) stay keyword arguments of that construct."""

    #: The code asset, Powertools layer, log level and shared environment, built once per
    #: stack (``FunctionCommons.create``). Default: none, required.
    commons: FunctionCommons
    #: The intake table: producers append, its stream feeds the processor. Default: none,
    #: required.
    intake: dynamodb.ITable
    #: The main table: decisions only. Default: none, required.
    main: dynamodb.ITable
    #: The control table: event items, the sweeper's lease and run history. Default: none,
    #: required.
    control: dynamodb.ITable
    #: How long each function's log group keeps its logs. Default: one month.
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH
    #: The secret keying the logs' signup references (``personal_data.signup_ref``), read
    #: by the functions that log them. Default: none (each process keys its own).
    log_key: secretsmanager.ISecret | None = None
    #: The customer managed key of the tables and log groups (``turnstile:encryptionKey``).
    #: Default: none (AWS managed keys).
    data_key: kms.IKey | None = None

    @property
    def tables(self) -> dict[str, dynamodb.ITable]:
        """The tables under the names ``permissions`` grants on."""
        return {INTAKE: self.intake, MAIN: self.main, CONTROL: self.control}

    @property
    def table_names(self) -> dict[str, str]:
        """The table-name variables every function reads (contract.TableSpec.env_var)."""
        return {
            INTAKE_TABLE.env_var: self.intake.table_name,
            MAIN_TABLE.env_var: self.main.table_name,
            CONTROL_TABLE.env_var: self.control.table_name,
        }


class FunctionConstruct(Construct):
    """A Python function with its own role and log group (no managed policies, no wildcards
    beyond X-Ray's), Powertools layer and environment, and X-Ray tracing on.

    Its role starts empty: callers add exactly the grants the function needs
    (``grant_tables``), and name in ``wildcard_reasons`` why any further ``Resource: *``
    they add cannot be narrowed.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: FunctionConstructProps,
        *,
        handler: str,
        description: str,
        timeout: Duration,
        memory_size: int,
        wildcard_reasons: tuple[str, ...] = (),
        environment: Mapping[str, str] | None = None,
        reserved_concurrency: int | None = None,
        logs_signups: bool = False,
    ) -> None:
        """``logs_signups``: the function's logs name signups (by ``signup_ref``): it reads
        the stack's log key (``props.log_key``)."""
        super().__init__(scope, construct_id)
        self.props = props
        commons = props.commons
        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            retention=props.log_retention,
            # Logs expire anyway; keeping them after the stack is gone only costs money.
            removal_policy=RemovalPolicy.DESTROY,
            encryption_key=props.data_key,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"turnstile {construct_id}: least privilege, granted per table",
        )
        # Instead of AWSLambdaBasicExecutionRole (logs:* on every log group): this group only.
        self.log_group.grant_write(self.role)
        environment = {
            **props.table_names,
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            "POWERTOOLS_LOG_LEVEL": commons.log_level,
            **commons.environment,
            **(environment or {}),
        }
        if logs_signups and props.log_key is not None:
            props.log_key.grant_read(self.role)
            environment[LOG_KEY_SECRET_ENV] = props.log_key.secret_arn
        self.function = lambda_.Function(
            self,
            "Function",
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=handler,
            code=commons.code,
            layers=[commons.layer],
            environment=environment,
            timeout=timeout,
            memory_size=memory_size,
            reserved_concurrent_executions=reserved_concurrency,
            tracing=lambda_.Tracing.ACTIVE,
            role=self.role,
            log_group=self.log_group,
        )
        Validations.of(self.function).acknowledge(
            Acknowledgment(
                id="AwsSolutions-L1",
                reason=(
                    "python3.12 is pinned on purpose: it is a supported Lambda runtime, and the "
                    "Powertools layer is built per Python minor version and pinned to the "
                    "version the code is tested with. A runtime upgrade is a deliberate change "
                    "made together with the layer, not something a synth should drift into."
                ),
            )
        )
        Validations.of(self.role).acknowledge(
            Acknowledgment(
                id="AwsSolutions-IAM5[Resource::*]",
                reason=" ".join(
                    (
                        "X-Ray tracing: xray:PutTraceSegments and xray:PutTelemetryRecords "
                        "support no resource-level permissions, so AWS requires Resource '*'.",
                        *wildcard_reasons,
                    )
                ),
            )
        )

    def grant_tables(self, grants: Iterable[TableGrant]) -> None:
        """Add ``grants`` (``permissions``) on the props' tables to the role: an unconditioned
        one as the table's own grant, a conditioned one or one on an index as a statement of
        its own."""
        tables = self.props.tables
        grants = tuple(grants)
        # The tables' key, if customer managed: to decrypt what the function reads, and to
        # encrypt what it writes.
        grant_data_key(
            self.props.data_key,
            self.function,
            writes=any(set(grant.actions) & TABLE_WRITES for grant in grants),
        )
        for grant in grants:
            table = tables[grant.table]
            if not grant.conditions and not grant.index:
                table.grant(self.function, *grant.actions)
                continue
            resource = f"{table.table_arn}/index/{grant.index}" if grant.index else table.table_arn
            self.function.add_to_role_policy(
                iam.PolicyStatement(
                    actions=list(grant.actions),
                    resources=[resource],
                    conditions=grant.conditions or None,
                )
            )

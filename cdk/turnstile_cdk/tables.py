"""The intake, main and control tables, built from the contract's TableSpec (keys, stream, TTL)."""

from __future__ import annotations

from dataclasses import replace

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

from turnstile.base.contract import CONTROL_TABLE, INTAKE_TABLE, MAIN_TABLE, Attr, TableSpec

__all__ = ["TablesConstruct", "table_from_spec"]


def table_from_spec(
    scope: Construct, spec: TableSpec, *, retain: bool, encryption_key: kms.IKey | None = None
) -> dynamodb.Table:
    """One on-demand table with point-in-time recovery, keyed and streamed as ``spec`` says;
    encrypted with ``encryption_key`` when given (``turnstile:encryptionKey``)."""
    stream = dynamodb.StreamViewType(spec.stream_view_type) if spec.stream_view_type else None
    table = dynamodb.Table(
        scope,
        spec.logical_id,
        partition_key=dynamodb.Attribute(
            name=spec.partition_key, type=dynamodb.AttributeType.STRING
        ),
        sort_key=dynamodb.Attribute(name=spec.sort_key, type=dynamodb.AttributeType.STRING),
        # On demand: signups arrive in bursts (a sale opens) and cost nothing at rest.
        billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
        stream=stream,
        time_to_live_attribute=spec.ttl_attribute,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        # AWS managed key by default: key use shows in CloudTrail, no key to administer or
        # pay for; a customer managed key when the operator asks for one.
        encryption=(
            dynamodb.TableEncryption.CUSTOMER_MANAGED
            if encryption_key is not None
            else dynamodb.TableEncryption.AWS_MANAGED
        ),
        encryption_key=encryption_key,
        # The tables are the system of record (decisions are final): both guards follow the
        # one stack setting, so a test stack can still be torn down completely.
        deletion_protection=retain,
        removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
    )
    # A fixed logical id (the contract's): moving the construct in the tree can never make
    # CloudFormation replace, and so empty, a table of record.
    cfn_table = table.node.default_child
    assert isinstance(cfn_table, dynamodb.CfnTable)
    cfn_table.override_logical_id(spec.logical_id)
    if spec.indexes:
        # On the L1 resource, not through ``add_global_secondary_index``: CDK adds
        # ``index/*`` to every grant on a table with an index, and only the sweeper may
        # read the index (it is granted that one index by name).
        kwargs = spec.create_table_kwargs()
        cfn_table.add_property_override("AttributeDefinitions", kwargs["AttributeDefinitions"])
        cfn_table.add_property_override(
            "GlobalSecondaryIndexes", kwargs["GlobalSecondaryIndexes"]
        )
    return table


class TablesConstruct(Construct):
    """The three tables: ``intake`` (producers append, streamed to the processor), ``main``
    (decisions only) and ``control`` (event items, the sweeper's lease and run history: no
    producer key reaches it).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        retain: bool = True,
        expire_decisions: bool = False,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        """``expire_decisions``: decisions carry ``expires_at`` (turnstile:decisionRetentionDays)
        and the main table deletes them by TTL; otherwise they are kept. ``encryption_key``:
        the customer managed key of all three (none: AWS managed)."""
        super().__init__(scope, construct_id)
        key = {"retain": retain, "encryption_key": encryption_key}
        self.intake = table_from_spec(self, INTAKE_TABLE, **key)  # type: ignore[arg-type]
        main_spec = MAIN_TABLE
        if expire_decisions:
            main_spec = replace(MAIN_TABLE, ttl_attribute=Attr.EXPIRES_AT)
        self.main = table_from_spec(self, main_spec, **key)  # type: ignore[arg-type]
        self.control = table_from_spec(self, CONTROL_TABLE, **key)  # type: ignore[arg-type]

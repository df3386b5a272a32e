"""The stack's data key (``turnstile:encryptionKey``): a customer managed KMS key for the
tables, the log groups and the log key's secret, when the operator asks for one.

Unset, every store keeps its AWS default: the tables an AWS managed key, the log groups
CloudWatch Logs' own encryption. ``create`` makes a key with yearly rotation whose policy
lets CloudWatch Logs use it for this account's log groups in this region only; an ARN
uses a key of the operator's own (its policy must already say as much: docs/deploy.md).
Each function's role is granted the key as its table access needs (``grant_data_key``).
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from .settings import CREATE_KEY

__all__ = [
    "KEY_READ_ACTIONS",
    "KEY_WRITE_ACTIONS",
    "LOGS_KEY_ACTIONS",
    "data_key",
    "grant_data_key",
    "logs_key_statement",
]

#: What CloudWatch Logs does with a log group's key.
LOGS_KEY_ACTIONS = (
    "kms:Encrypt*",
    "kms:Decrypt*",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
    "kms:Describe*",
)


def logs_key_statement(scope: Construct) -> iam.PolicyStatement:
    """The key policy statement that lets CloudWatch Logs use the key, for log groups of
    this account and region only (the encryption context names the log group)."""
    stack = Stack.of(scope)
    return iam.PolicyStatement(
        principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
        actions=list(LOGS_KEY_ACTIONS),
        resources=["*"],  # in a key policy, "*" is this key
        conditions={
            "ArnLike": {
                "kms:EncryptionContext:aws:logs:arn": (
                    f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
                )
            }
        },
    )


def data_key(scope: Construct, setting: str | None, *, retain: bool) -> kms.IKey | None:
    """The key ``turnstile:encryptionKey`` names: none, one the stack creates, or the
    operator's. A created key is retained with the tables (``retain``): a retained table
    whose key was deleted could never be read again."""
    if setting is None:
        return None
    if setting != CREATE_KEY:
        return kms.Key.from_key_arn(scope, "DataKey", setting)
    key = kms.Key(
        scope,
        "DataKey",
        description="turnstile: the tables, log groups and log key secret of this stack",
        enable_key_rotation=True,
        alias=f"alias/{Stack.of(scope).stack_name}-data",
        removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
    )
    key.add_to_resource_policy(logs_key_statement(scope))
    return key


#: What a role that only reads the tables needs of their key; one that writes, the rest too.
#: Named one by one: no wildcard action anywhere in the stack's policies.
KEY_READ_ACTIONS = ("kms:Decrypt", "kms:DescribeKey")
KEY_WRITE_ACTIONS = ("kms:Encrypt", "kms:GenerateDataKey")


def grant_data_key(key: kms.IKey | None, grantee: iam.IGrantable, *, writes: bool) -> None:
    """What a principal needs of the tables' key: to decrypt what it reads, and to encrypt
    what it writes (``writes``). Nothing without a customer managed key."""
    if key is None:
        return
    actions = KEY_READ_ACTIONS + (KEY_WRITE_ACTIONS if writes else ())
    iam.Grant.add_to_principal(grantee=grantee, actions=list(actions), resource_arns=[key.key_arn])

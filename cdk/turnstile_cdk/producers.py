"""Direct producers confined to their own events (docs/producers.md).

A direct producer writes the intake table itself. Its IAM policy is its only limit: with a
grant on the whole table it can write, rewrite or delete any signup of any event, another
producer's included. ``ConfinedProducerPolicy`` grants a producer the intake table, and
its decisions on the main table, only where the partition key (the event id) matches one of
its patterns: IAM's ``dynamodb:LeadingKeys``, checked by DynamoDB on every item a request
touches (a batch included), and never absent (the ``Null`` guard: a Scan has no leading
key, so it is refused).

The stack makes one for each entry of ``turnstile:confinedProducers`` (a name and its
event id patterns) and outputs its ARN as ``<Name>DirectProducerPolicyArn``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

__all__ = [
    "DATA_KEY_ACTIONS",
    "INTAKE_ACTIONS",
    "MAIN_ACTIONS",
    "ConfinedProducerPolicy",
    "confined_producers",
    "confined_statements",
    "output_key",
]

#: What a producer does on intake: write its signups (and their requests), read them back.
INTAKE_ACTIONS = (
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:ConditionCheckItem",
)
#: What it needs of the tables' customer managed key (``turnstile:encryptionKey``), if any.
DATA_KEY_ACTIONS = ("kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey")
#: What it reads of the decisions of its events.
MAIN_ACTIONS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")
#: An event id pattern: an id's characters, ``*`` and ``?`` (IAM's wildcards).
_PATTERN = re.compile(r"^[A-Za-z0-9._:@*?-]{1,128}$")


def output_key(name: str) -> str:
    """The stack output of producer ``name``'s policy ARN (``ShopADirectProducerPolicyArn``)."""
    return "".join(part.title() for part in re.split(r"[^A-Za-z0-9]+", name) if part) + (
        "DirectProducerPolicyArn"
    )


def confined_statements(
    intake: dynamodb.ITable, main: dynamodb.ITable, event_ids: Sequence[str]
) -> list[iam.PolicyStatement]:
    """The statements of a producer confined to the events ``event_ids`` (patterns)."""
    bad = [p for p in event_ids if not _PATTERN.match(p)]
    if bad or not event_ids:
        raise ValueError(
            f"a confined producer's event ids must be ids or patterns of them (* and ?): "
            f"{bad or 'none given'}"
        )
    confined = {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(event_ids)},
        "Null": {"dynamodb:LeadingKeys": "false"},
    }
    return [
        iam.PolicyStatement(
            actions=list(INTAKE_ACTIONS), resources=[intake.table_arn], conditions=confined
        ),
        iam.PolicyStatement(
            actions=list(MAIN_ACTIONS), resources=[main.table_arn], conditions=confined
        ),
    ]


class ConfinedProducerPolicy(Construct):
    """A managed policy for one direct producer: its events' signups, nobody else's."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        intake: dynamodb.ITable,
        main: dynamodb.ITable,
        event_ids: Sequence[str],
        data_key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        statements = confined_statements(intake, main, event_ids)
        if data_key is not None:
            # The tables' customer managed key: to write its signups and read decisions.
            statements.append(
                iam.PolicyStatement(
                    actions=list(DATA_KEY_ACTIONS),
                    resources=[data_key.key_arn],
                )
            )
        self.policy = iam.ManagedPolicy(
            self,
            "Policy",
            description=f"turnstile direct producer {name}: intake and decisions of the "
            f"events {', '.join(event_ids)} only",
            statements=statements,
        )


def confined_producers(
    scope: Construct,
    producers: Mapping[str, Sequence[str]],
    intake: dynamodb.ITable,
    main: dynamodb.ITable,
    data_key: kms.IKey | None = None,
) -> dict[str, ConfinedProducerPolicy]:
    """One ``ConfinedProducerPolicy`` per producer of ``producers`` (name: patterns)."""
    return {
        name: ConfinedProducerPolicy(
            scope,
            output_key(name).removesuffix("Arn"),
            name=name,
            intake=intake,
            main=main,
            event_ids=patterns,
            data_key=data_key,
        )
        for name, patterns in producers.items()
    }

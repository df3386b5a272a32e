"""Exactly which DynamoDB actions each function gets on each table (no ``dynamodb:*``).

IAM has no TransactWriteItems/TransactGetItems actions: a transaction is authorized per item
by the action it performs (PutItem, UpdateItem, DeleteItem, ConditionCheckItem, GetItem).
"""

from __future__ import annotations

__all__ = [
    "API_INTAKE_ACTIONS",
    "API_MAIN_ACTIONS",
    "PROCESSOR_INTAKE_ACTIONS",
    "PROCESSOR_MAIN_ACTIONS",
    "SWEEPER_INTAKE_ACTIONS",
    "SWEEPER_MAIN_ACTIONS",
]

_POINT_READS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")

#: Decides: reads the event item (ConsistentRead), commits counters + journal with one
#: conditional UpdateItem, writes decision items with BatchWriteItem, and rejects signups
#: of unknown events in a transaction guarded by a ConditionCheck. Stream access is granted
#: with the stream itself.
PROCESSOR_MAIN_ACTIONS = (
    *_POINT_READS,
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
)

#: Reads intake items only to rebuild decision items of a journal whose writer crashed
#: (their attributes are not in the journal); it never writes intake.
PROCESSOR_INTAKE_ACTIONS = ("dynamodb:GetItem", "dynamodb:BatchGetItem")

#: Creates and closes events (the event item) and reads events and decisions.
API_MAIN_ACTIONS = (*_POINT_READS, "dynamodb:PutItem", "dynamodb:UpdateItem")
#: Submits signups (conditional PutItem) and reads them back for status and 409 checks.
API_INTAKE_ACTIONS = (*_POINT_READS, "dynamodb:PutItem")

#: Finds intake records without a decision and re-emits them by bumping ``redrive``:
#: UpdateItem is its only write on intake, and it never deletes.
SWEEPER_INTAKE_ACTIONS = (*_POINT_READS, "dynamodb:Scan", "dynamodb:UpdateItem")
#: Reads decisions, and keeps its lease and run-history items in main.
SWEEPER_MAIN_ACTIONS = (
    *_POINT_READS,
    "dynamodb:Scan",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:ConditionCheckItem",
)

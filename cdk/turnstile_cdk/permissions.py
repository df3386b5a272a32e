"""Exactly which DynamoDB actions each function gets on each table (no ``dynamodb:*``).

IAM has no TransactWriteItems/TransactGetItems actions: a transaction is authorized per item
by the action it performs (PutItem, UpdateItem, DeleteItem, ConditionCheckItem, GetItem).
"""

from __future__ import annotations

__all__ = [
    "API_CONTROL_ACTIONS",
    "API_INTAKE_ACTIONS",
    "API_MAIN_ACTIONS",
    "PROCESSOR_CONTROL_ACTIONS",
    "PROCESSOR_INTAKE_ACTIONS",
    "PROCESSOR_MAIN_ACTIONS",
    "SWEEPER_CONTROL_ACTIONS",
    "SWEEPER_INDEX_ACTIONS",
    "SWEEPER_INTAKE_ACTIONS",
    "SWEEPER_MAIN_ACTIONS",
]

_POINT_READS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query")

#: Decides: writes decision items with BatchWriteItem, and rejections of signups of unknown
#: events with conditional puts in a transaction. Reads decisions to know what is decided.
PROCESSOR_MAIN_ACTIONS = (*_POINT_READS, "dynamodb:PutItem", "dynamodb:BatchWriteItem")
#: Reads the event item (ConsistentRead), commits counters + journal with one conditional
#: UpdateItem, and checks that an unknown event still has no item (ConditionCheck). Reads
#: the event item with its hold marker in one BatchGetItem; parks and unparks a held event's
#: records with BatchWriteItem, reads them back in order with Query, and sets and clears
#: the hold marker with UpdateItem (docs/arrival-order.md). It never deletes an item alone.
PROCESSOR_CONTROL_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
)

#: Reads intake items only to rebuild decision items of a journal whose writer crashed
#: (their attributes are not in the journal); it never writes intake.
PROCESSOR_INTAKE_ACTIONS = ("dynamodb:GetItem", "dynamodb:BatchGetItem")

#: Reads decisions.
API_MAIN_ACTIONS = _POINT_READS
#: Creates and closes events (the event item) and reads them.
API_CONTROL_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
#: Submits signups (conditional PutItem) and reads them back for status and 409 checks.
API_INTAKE_ACTIONS = (*_POINT_READS, "dynamodb:PutItem")

#: Finds intake records without a decision and re-emits them by bumping ``redrive`` (and
#: setting ``undecided``); removes ``undecided`` from records it finds decided. UpdateItem is
#: its only write on intake, and it never deletes. Scan: the daily full read (the backstop).
SWEEPER_INTAKE_ACTIONS = (*_POINT_READS, "dynamodb:Scan", "dynamodb:UpdateItem")
#: On the intake table's ``undecided`` index only: every run reads it whole.
SWEEPER_INDEX_ACTIONS = ("dynamodb:Scan",)
#: Reads decisions.
SWEEPER_MAIN_ACTIONS = _POINT_READS
#: Reads event items (journals); keeps its lease (fenced by ConditionCheck) and its run
#: history. Finds held events (a filtered Scan), reads their parked records (Query) and
#: lifts a hold with nothing parked under it (UpdateItem); it never writes parked records.
SWEEPER_CONTROL_ACTIONS = (
    *_POINT_READS,
    "dynamodb:Scan",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:ConditionCheckItem",
)

"""What the hostile tests share: a fresh moto account per example, the stream fed to the real
handler as Lambda's event source mapping feeds it, and raw reads of both tables."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
from moto import mock_aws

from tests.conftest import StreamReader, create_tables
from tests.roles import functions_under_roles
from turnstile.base.contract import STREAM_SOURCE
from turnstile.handlers import stream as stream_handler
from turnstile.storage.store import SignupStore
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.poller import matches_filter

NOW = "2026-01-01T00:00:00.000000Z"


def invoke(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The real Lambda handler on one batch."""
    return stream_handler.handler({"Records": list(records)}, LocalLambdaContext())


def deliver(stream: StreamReader) -> list[dict[str, Any]]:
    """Everything new on the stream, through the handler in batches as the event source
    mapping delivers them (its filter, its batch size); returns each batch's response."""
    records = [
        r
        for r in stream.read_new()
        if any(matches_filter(p, r) for p in STREAM_SOURCE.filter_patterns)
    ]
    size = STREAM_SOURCE.batch_size
    return [invoke(records[i : i + size]) for i in range(0, len(records), size)]


def no_failures(responses: Sequence[dict[str, Any]]) -> bool:
    return all(r == {"batchItemFailures": []} for r in responses)


def key(event_id: str, signup_id: str) -> dict[str, Any]:
    return {"event_id": {"S": event_id}, "signup_id": {"S": signup_id}}


def raw_decision(store: SignupStore, event_id: str, signup_id: str) -> dict[str, Any] | None:
    """The decision item as stored (typed), read with the low-level client."""
    response = store.client.get_item(
        TableName=store.main_table, Key=key(event_id, signup_id), ConsistentRead=True
    )
    return response.get("Item")


def scan_raw(client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def decision_items(store: SignupStore) -> dict[tuple[str, str], dict[str, Any]]:
    """Decision items of the main table (items with a ``status``), typed, by key."""
    return {
        (i["event_id"]["S"], i["signup_id"]["S"]): i
        for i in scan_raw(store.client, store.main_table)
        if "status" in i
    }


def event_item_location(store: SignupStore, event_id: str) -> tuple[str, dict[str, Any]]:
    """Where an event's item lives (table, key): the control table when the store has one,
    else the main table under ``(event_id, "#EVENT")``. Operators edit it there by hand."""
    control = getattr(store, "control_table", None)
    if control:
        table = str(control)
        schema = store.client.describe_table(TableName=table)["Table"]["KeySchema"]
        names = [k["AttributeName"] for k in schema]
        for item in scan_raw(store.client, table):
            values = {v.get("S") for v in item.values() if isinstance(v, dict)}
            if "capacity" in item and event_id in values:
                return table, {n: item[n] for n in names}
        raise AssertionError(f"no item of event {event_id!r} in {table}")
    raise AssertionError(f"the store has no control table for {event_id!r}")


def operator_edit(store: SignupStore, event_id: str, **update: Any) -> None:
    """Edit the event item directly, as an operator with console access would: ``name=value``
    sets a number, ``name=None`` removes the attribute."""
    table, item_key = event_item_location(store, event_id)
    sets = {n: v for n, v in update.items() if v is not None}
    removes = [n for n, v in update.items() if v is None]
    names = {f"#a{i}": n for i, n in enumerate(update)}
    by_name = {n: f"#a{i}" for i, n in enumerate(update)}
    parts = []
    if sets:
        parts.append("SET " + ", ".join(f"{by_name[n]} = :v{by_name[n][2:]}" for n in sets))
    if removes:
        parts.append("REMOVE " + ", ".join(by_name[n] for n in removes))
    kwargs: dict[str, Any] = {
        "TableName": table,
        "Key": item_key,
        "UpdateExpression": " ".join(parts),
        "ExpressionAttributeNames": names,
    }
    if sets:
        kwargs["ExpressionAttributeValues"] = {
            f":v{by_name[n][2:]}": {"N": str(v)} for n, v in sets.items()
        }
    store.client.update_item(**kwargs)


@dataclass
class Account:
    """One fresh moto account with turnstile's tables, its stream, a store on it."""

    session: boto3.Session
    client: Any
    store: SignupStore
    stream: StreamReader

    def put(self, item: dict[str, Any]) -> None:
        self.client.put_item(TableName=self.store.intake_table, Item=item)


@contextmanager
def fresh_account() -> Iterator[Account]:
    """A new moto account (tables from the shared fixtures' ``create_tables``) and a
    stream processor that starts cold in it, under the processor's deployed role, every
    client held to DynamoDB's key and item limits (``turnstile_tools.local.limits``)."""
    from turnstile_tools.local.limits import enforced_in_moto

    with mock_aws(), enforced_in_moto():
        session = boto3.Session(region_name="us-east-1")
        create_tables(session)
        client = session.client("dynamodb")
        stream_handler._processor = None
        try:
            with functions_under_roles() as role_clients:
                yield Account(
                    session,
                    client,
                    SignupStore(client, sleep=lambda _: None),
                    StreamReader(session),
                )
            # The handler ran under the processor's role: it was refused nothing.
            assert [r for c in role_clients for r in c.denied] == []
        finally:
            stream_handler._processor = None

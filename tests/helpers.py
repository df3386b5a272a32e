"""Test helpers: raw intake writes (bad input included) and a fault-injecting client."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from turnstile.base.contract import (
    CONTROL_TABLE,
    INTAKE_TABLE,
    MAIN_TABLE,
    Attr,
    shard_of,
    undecided_shard,
)
from turnstile.storage.dynamo import to_item

#: What the ``Event`` shape shows of an event created without options, before the stream
#: processor has counted any status (docs/lifecycle.md, §1 and §10).
NO_EVENT_OPTIONS: dict[str, Any] = {
    "waitlist": 0,
    "hold_seconds": 0,
    "max_seats": None,
    "status_counts": {},
}
#: What the ``Signup`` shape shows of the lifecycle's fields before any is written.
NO_LIFECYCLE_FIELDS: dict[str, Any] = {
    "hold_expires_at": None,
    "waitlist_position": None,
    "updated_at": None,
    "request_count": None,
    "history": [],
    "last_refusal": None,
}

#: Whether ``put_raw_intake`` writes the ``undecided`` marker, as a producer that writes
#: intake directly may choose to (the ``sweep_path`` fixture turns it on).
MARK_RAW_INTAKE = False


def ids_in(shard: int, shards: int, count: int, prefix: str = "u") -> list[str]:
    """``count`` signup ids (``<prefix><n>``) that all belong to shard ``shard`` of an event
    of ``shards`` shards."""
    found = (f"{prefix}{i}" for i in itertools.count())
    return list(itertools.islice((s for s in found if shard_of(s, shards) == shard), count))


def put_raw_intake(
    client: Any, event_id: str, signup_id: str, *, marked: bool | None = None, **attrs: Any
) -> None:
    """Write an intake item as a producer that bypassed the SDK would (typed values); with
    the ``undecided`` marker if ``marked`` (default ``MARK_RAW_INTAKE``)."""
    item = {"event_id": {"S": event_id}, "signup_id": {"S": signup_id}}
    if MARK_RAW_INTAKE if marked is None else marked:
        item[Attr.UNDECIDED] = {"S": undecided_shard(event_id, signup_id)}
    item.update(attrs)
    client.put_item(TableName=INTAKE_TABLE.name, Item=item)


def put_decision(
    client: Any, event_id: str, signup_id: str, status: str, **fields: Any
) -> dict[str, Any]:
    """Write a decision item as the stream processor's lifecycle will (plain values: str,
    int, list and dict; ``None`` left out), until it does: a signup HELD, WAITLISTED ...
    Returns the item as typed values."""
    values = {Attr.EVENT_ID: event_id, Attr.SIGNUP_ID: signup_id, Attr.STATUS: status}
    values.update({k: v for k, v in fields.items() if v is not None})
    item = to_item(values)
    client.put_item(TableName=MAIN_TABLE.name, Item=item)
    return item


def table_items(client: Any, table: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Every item of a table by its key values (any key names), read consistently."""
    key_names = [
        k["AttributeName"] for k in client.describe_table(TableName=table)["Table"]["KeySchema"]
    ]
    items: dict[tuple[str, str], dict[str, Any]] = {}
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        for item in page["Items"]:
            items[(item[key_names[0]]["S"], item[key_names[1]]["S"])] = item
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def main_table_items(client: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return table_items(client, MAIN_TABLE.name)


def state_items(client: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Everything turnstile wrote: decisions (main) and event/system items (control)."""
    return {
        (table, *key): item
        for table in (MAIN_TABLE.name, CONTROL_TABLE.name)
        for key, item in table_items(client, table).items()
    }


def decisions(client: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Decision items: the main table holds nothing else."""
    return main_table_items(client)


class FaultyClient:
    """Wraps a boto3 client; ``fault(operation, kwargs)`` returns an error code to raise."""

    def __init__(self, client: Any, fault: Callable[[str, dict[str, Any]], str | None]) -> None:
        self._client = client
        self._fault = fault
        self.injected = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(**kwargs: Any) -> Any:
            code = self._fault(name, kwargs)
            if code:
                self.injected += 1
                raise ClientError({"Error": {"Code": code, "Message": "injected"}}, name)
            return attr(**kwargs)

        return call


class _TransactionErrors:
    """Wraps a boto3 client: an error of ``transact_write_items`` goes through ``_failed``
    (which raises), every other call is the client's own."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name != "transact_write_items":
            return attr

        def call(**kwargs: Any) -> Any:
            try:
                return attr(**kwargs)
            except ClientError as exc:
                self._failed(exc, kwargs)
                raise

        return call

    def _failed(self, exc: ClientError, kwargs: dict[str, Any]) -> None:
        raise NotImplementedError


class WithoutCancellationReasons(_TransactionErrors):
    """Wraps a boto3 client: a cancelled transaction says nothing about which of its items
    failed (some endpoints leave ``CancellationReasons`` out), so the store must tell by
    itself whether the sweeper's lease or a record cancelled it."""

    def _failed(self, exc: ClientError, kwargs: dict[str, Any]) -> None:
        exc.response.pop("CancellationReasons", None)


class CancelledLikeDynamoDB(_TransactionErrors):
    """Wraps a boto3 client: a transaction with an update that an item's attribute types
    refuse (``ADD`` to a counter a producer wrote as text) is cancelled as DynamoDB cancels
    it, not as moto refuses it. moto answers ``ValidationException`` for the whole call;
    DynamoDB answers ``TransactionCanceledException`` whose ``CancellationReasons`` hold
    ``ValidationError`` at that item and ``None`` at every other one (the message reads
    "... cancellation reasons for specific reasons [None, ValidationError]")."""

    def _failed(self, exc: ClientError, kwargs: dict[str, Any]) -> None:
        if exc.response["Error"]["Code"] != "ValidationException":
            return
        reasons = [self._reason(item) for item in kwargs["TransactItems"]]
        if "ValidationError" not in reasons:
            return
        codes = ", ".join(reasons)
        raise ClientError(
            {
                "Error": {
                    "Code": "TransactionCanceledException",
                    "Message": "Transaction cancelled, please refer cancellation "
                    f"reasons for specific reasons [{codes}]",
                },
                "CancellationReasons": [
                    {"Code": code}
                    if code == "None"
                    else {
                        "Code": code,
                        "Message": "An operand in the update expression has an incorrect data type",
                    }
                    for code in reasons
                ],
            },
            "transact_write_items",
        ) from exc

    def _reason(self, item: dict[str, Any]) -> str:
        """``ValidationError`` for an update that ADDs to an attribute holding no number."""
        update = item.get("Update")
        if not update or "ADD " not in update["UpdateExpression"]:
            return "None"
        names = update.get("ExpressionAttributeNames", {})
        stored = self._client.get_item(
            TableName=update["TableName"], Key=update["Key"], ConsistentRead=True
        ).get("Item", {})
        added = update["UpdateExpression"].split("ADD ", 1)[1].split()[0]
        value = stored.get(names.get(added, added))
        return "None" if value is None or "N" in value else "ValidationError"


class CallRecorder:
    """Wraps a boto3 client and records each call's operation and arguments."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            return attr(**kwargs)

        return call

    def sizes(self, operation: str, argument: str) -> list[int]:
        """How many entries ``argument`` held in each call of ``operation``."""
        return [len(kwargs[argument]) for op, kwargs in self.calls if op == operation]


def fail_everything_into_the_queue(
    aws_streams: Any, client: Any, sqs: Any, queue_url: str, tmp_path: Path
) -> Any:
    """Deliver the intake stream's new records to a processor that always fails, with no
    retry: every batch goes to the on-failure queue (a note of it, as on AWS). Returns the
    poller (its ``stats``)."""
    from dataclasses import replace

    from turnstile.base.contract import STREAM_SOURCE
    from turnstile_tools.local.poller import CheckpointStore, StreamPoller

    arn = client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]

    def broken(event: Any, context: Any) -> Any:
        raise RuntimeError("the processor is down")

    poller = StreamPoller(
        broken,
        aws_streams,
        arn,
        CheckpointStore(tmp_path / "cp.json"),
        sqs_client=sqs,
        failure_queue_url=queue_url,
        settings=replace(STREAM_SOURCE, retry_attempts=0, bisect_on_error=False),
        sleep=lambda _: None,
    )
    for _ in range(3):
        poller.poll_once()
    poller.flush()
    return poller


def unordered(typed: Any) -> Any:
    """Typed values with each set's members sorted (DynamoDB keeps no order in a set)."""
    if isinstance(typed, dict):
        return {k: sorted(v) if k in ("SS", "NS", "BS") else unordered(v) for k, v in typed.items()}
    if isinstance(typed, list):
        return [unordered(v) for v in typed]
    return typed

"""The local stack's durable state: a write-ahead log of the embedded endpoint's writes.

Every request that changes state and succeeded (2xx) is appended to ``<state-dir>/aws.wal``
and fsynced inside ``SerializedApp``'s lock, before its response leaves: a write a client
saw acknowledged survives a SIGKILL. Reads are not logged. At start the log is replayed
through the same app, one request at a time, in the original order, which rebuilds tables,
items, indexes and queues.

What replay does not reproduce: the generated values. moto's stream ARN carries the
table's creation time, shard ids and sequence numbers are random, SQS message ids and
receipt handles are uuids. The worker's checkpoints name the old stream's ARN, so after a
restart it finds no checkpoint for the new stream and reads it from TRIM_HORIZON: the
replayed stream holds every intake write again, the processor's decisions are idempotent
(a decided signup keeps its decision), and undecided ones are decided. SQS: a sent
message's id is logged with it and set again on replay; a delete is logged by message id
(resolved from the receipt handle at the time), so deletes replay exactly. Receives are
not logged: after a restart every message left in the queue is visible again, as if its
visibility timeout had ended.

Record format: 4-byte big-endian length, 4-byte CRC-32, then JSON. A torn or corrupt
tail (a crash in the middle of an append) ends the log; it is cut off at start.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["WriteAheadLog", "classify", "replay"]

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")

_DYNAMODB_WRITES = frozenset(
    {
        "CreateTable",
        "DeleteTable",
        "UpdateTable",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "UpdateTimeToLive",
        "UpdateContinuousBackups",
        "TagResource",
        "UntagResource",
        "ExecuteStatement",
        "BatchExecuteStatement",
        "ExecuteTransaction",
    }
)
_SQS_WRITES = frozenset(
    {
        "CreateQueue",
        "DeleteQueue",
        "SendMessage",
        "SendMessageBatch",
        "DeleteMessage",
        "DeleteMessageBatch",
        "PurgeQueue",
        "SetQueueAttributes",
        "TagQueue",
        "UntagQueue",
    }
)


def classify(environ: dict[str, Any], body: bytes) -> tuple[str, str] | None:
    """``(service, action)`` of a request that changes state, or None for a read."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        prefix, _, action = target.partition(".")
        if prefix.startswith("DynamoDB_") and action in _DYNAMODB_WRITES:
            return "dynamodb", action
        if prefix == "AmazonSQS" and action in _SQS_WRITES:
            return "sqs", action
        return None
    # The SQS query protocol (form-encoded, Action=...).
    from urllib.parse import parse_qs

    params = parse_qs(body.decode("latin-1")) if body else {}
    params.update(parse_qs(environ.get("QUERY_STRING", "")))
    action = (params.get("Action") or [""])[0]
    if action in _SQS_WRITES:
        return "sqs", action
    return None


class WriteAheadLog:
    """Append-only, fsynced records in one file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._valid_length = self._scan_length()
        self._file = open(path, "ab")  # noqa: SIM115 - kept open for the process's life
        if self._file.tell() != self._valid_length:
            log.warning("write-ahead log %s: torn tail cut at byte %d", path, self._valid_length)
            self._file.truncate(self._valid_length)
            self._file.seek(self._valid_length)
            os.fsync(self._file.fileno())
        self.appended = 0

    def _scan_length(self) -> int:
        end = 0
        for offset, _record in self._iter_with_offsets():
            end = offset
        return end

    def _iter_with_offsets(self) -> Iterator[tuple[int, dict[str, Any]]]:
        try:
            f = open(self.path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            return
        with f:
            offset = 0
            while True:
                header = f.read(_HEADER.size)
                if len(header) < _HEADER.size:
                    return
                length, crc = _HEADER.unpack(header)
                payload = f.read(length)
                if len(payload) < length or zlib.crc32(payload) != crc:
                    return
                offset += _HEADER.size + length
                yield offset, json.loads(payload)

    def records(self) -> Iterator[dict[str, Any]]:
        for _offset, record in self._iter_with_offsets():
            yield record

    def append(self, record: dict[str, Any]) -> None:
        payload = json.dumps(record, separators=(",", ":")).encode()
        self._file.write(_HEADER.pack(len(payload), zlib.crc32(payload)) + payload)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.appended += 1

    def close(self) -> None:
        self._file.close()


# -- recording --------------------------------------------------------------------------


def request_record(environ: dict[str, Any], body: bytes) -> dict[str, Any]:
    headers = {
        key[5:].replace("_", "-").title(): value
        for key, value in environ.items()
        if key.startswith("HTTP_") and key not in ("HTTP_CONTENT_LENGTH",)
    }
    if environ.get("CONTENT_TYPE"):
        headers["Content-Type"] = environ["CONTENT_TYPE"]
    return {
        "method": environ.get("REQUEST_METHOD", "POST"),
        "path": environ.get("PATH_INFO", "/"),
        "query": environ.get("QUERY_STRING", ""),
        "headers": headers,
        "body": base64.b64encode(body).decode(),
    }


def _sqs_queue(queue_url: str) -> Any:
    """moto's queue object for a queue URL, or None."""
    from moto.sqs.models import sqs_backends

    parts = queue_url.rstrip("/").split("/")
    if len(parts) < 2:
        return None
    account, name = parts[-2], parts[-1]
    if account not in sqs_backends:
        return None
    for backend in sqs_backends[account].values():
        queue = backend.queues.get(name)
        if queue is not None:
            return queue
    return None


def sqs_delete_record(body: bytes) -> dict[str, Any] | None:
    """A DeleteMessage(Batch) (JSON protocol) as the ids of the messages it deletes.

    Called before the request runs: receipt handles change on every receive and do not
    survive a replay, message ids do (``replay`` sets them again)."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    queue = _sqs_queue(request.get("QueueUrl", ""))
    if queue is None:
        return None
    handles = [request["ReceiptHandle"]] if "ReceiptHandle" in request else [
        entry.get("ReceiptHandle") for entry in request.get("Entries", [])
    ]
    ids = [m.id for m in queue._messages if any(m.had_receipt_handle(h) for h in handles)]
    return {"sqs_delete": {"queue_url": request["QueueUrl"], "message_ids": ids}}


def sqs_sent_ids(action: str, response: bytes) -> dict[str, str] | None:
    """The message ids a SendMessage(Batch) returned: by entry Id (a single send: "")."""
    try:
        data = json.loads(response)
    except ValueError:
        return None
    if action == "SendMessage":
        return {"": data["MessageId"]} if "MessageId" in data else None
    return {entry["Id"]: entry["MessageId"] for entry in data.get("Successful", [])}


def table_identity(response: bytes) -> dict[str, Any] | None:
    """What moto generated for a table from the clock: its creation time and stream label
    (the stream ARN ends with the label). Replay sets them again, so the stream ARN, and
    with it the worker's checkpoints, stay valid across a restart."""
    try:
        table = json.loads(response)["TableDescription"]
    except (ValueError, KeyError):
        return None
    return {
        "name": table.get("TableName"),
        "created": table.get("CreationDateTime"),
        "stream_label": table.get("LatestStreamLabel"),
    }


def _restore_table_identity(identity: dict[str, Any]) -> None:
    from datetime import UTC, datetime

    from moto.dynamodb.models import dynamodb_backends

    for account in list(dynamodb_backends):
        for backend in dynamodb_backends[account].values():
            table = backend.tables.get(identity["name"])
            if table is None:
                continue
            if identity.get("created") is not None:
                created = datetime.fromtimestamp(float(identity["created"]), UTC)
                table.created_at = created.replace(tzinfo=None)
            if identity.get("stream_label"):
                table.latest_stream_label = identity["stream_label"]


# -- replay -----------------------------------------------------------------------------


def replay(records: Iterable[dict[str, Any]], app: Callable[..., Iterable[bytes]]) -> int:
    """Run the logged requests through ``app`` again (the caller holds its lock)."""
    from werkzeug.test import EnvironBuilder

    count = 0
    for record in records:
        count += 1
        if "sqs_delete" in record:
            _replay_sqs_delete(record["sqs_delete"])
            continue
        body = base64.b64decode(record["body"])
        builder = EnvironBuilder(
            method=record["method"],
            path=record["path"],
            query_string=record["query"],
            headers=record["headers"],
            input_stream=io.BytesIO(body),
            content_length=len(body),
        )
        environ = builder.get_environ()
        status: list[str] = []

        def start_response(s: str, h: Any, e: Any = None, status: list[str] = status) -> None:
            status.append(s)

        response = b"".join(app(environ, start_response))
        if not status or not status[0].startswith("2"):
            log.warning("replay: %s answered %s", record["headers"].get("X-Amz-Target"), status)
            continue
        if record.get("table"):
            _restore_table_identity(record["table"])
        if record.get("sqs_sent"):
            _restore_sqs_ids(record, body, response)
    return count


def _restore_sqs_ids(record: dict[str, Any], body: bytes, response: bytes) -> None:
    queue = _sqs_queue(json.loads(body).get("QueueUrl", ""))
    action = record["headers"].get("X-Amz-Target", "").partition(".")[2]
    new_ids = sqs_sent_ids(action, response) or {}
    if queue is None:
        return
    by_new = {m.id: m for m in queue._messages}
    for key, old_id in record["sqs_sent"].items():
        message = by_new.get(new_ids.get(key, ""))
        if message is not None:
            message.id = old_id


def _replay_sqs_delete(spec: dict[str, Any]) -> None:
    queue = _sqs_queue(spec["queue_url"])
    if queue is None:
        return
    ids = set(spec["message_ids"])
    queue._messages = [m for m in queue._messages if m.id not in ids]

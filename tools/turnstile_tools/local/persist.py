"""The local stack's durable state: a snapshot of the embedded endpoint's state and a
write-ahead log of the writes made since.

Every request that changes state and succeeded (2xx) is appended to ``<state-dir>/aws.wal``
and fsynced inside ``SerializedApp``'s lock, before its response leaves: a write a client
saw acknowledged survives a SIGKILL. Reads are not logged, nor are writes that changed
nothing (``unchanged_probe``: a CreateQueue of a queue that exists as asked, which every
start sends). At start the snapshot (``<state-dir>/aws.snapshot``) is loaded, then the
log's records since it are replayed through the same app, one request at a time, in the
original order: a restart replays what was written since the last snapshot, not every
write ever made.

Compaction (``DurableState.compact``), when ``DurableState.compaction_due``: at start after
the restore, once the log since the snapshot is 256 KiB or a 64th of the snapshot; while
running, after an append, once it is 4 MiB (``TURNSTILE_WAL_COMPACT_BYTES``) and a
quarter of the snapshot. The whole state is written as a new snapshot and a fresh log begins:

1. the snapshot is written to ``aws.snapshot.tmp``, fsynced, renamed over
   ``aws.snapshot``, and the directory fsynced. It names the log it covers and how far
   (the log's id and byte length);
2. a new log holding only a header (its id, and the id of the snapshot it follows) is
   written to ``aws.wal.tmp``, fsynced, renamed over ``aws.wal``, the directory fsynced.

A crash before 1's rename leaves the old snapshot and the old log, which still belong
together; one between the two renames leaves the new snapshot and the old log, whose
records up to the covered length are skipped (and the start compacts again); after 2's
rename, the new pair. Leftover ``.tmp`` files are deleted at start. A snapshot and a log
that do not belong together (a log naming another snapshot, or one that is gone) or a
snapshot that fails its check stop the start with ``StateFilesError`` instead of restoring
a state nobody had (``--reset`` starts again). A log from before snapshots (no header) is
replayed whole, then compacted. A compaction while running holds the lock: requests wait
for it (about 2 s per 100,000 items, a 21 MB snapshot).

A snapshot holds, for every table: what creating it again takes (key schema, attribute
definitions, indexes, stream specification, billing, SSE, tags), its TTL and continuous
backups settings, its creation time and stream label (so the stream ARN, and with it the
worker's checkpoints, stay valid), its items, and its stream: the shard's records of the
last ``retention_s`` seconds (24 hours, DynamoDB Streams' retention;
``TURNSTILE_STREAM_RETENTION_S``) with their sequence numbers and event ids. For every
queue: its attributes, tags, timestamps and messages (ids, bodies, attributes, sent times,
receive counts, FIFO fields). Loading it puts all of that back into moto's objects
directly, not through requests: the load makes no stream records, the shard's records are
the snapshot's, numbered as they were, and the next write's record follows the last one.
A stream record older than the retention (counted from when it was first written, or
replayed from a log) is left out of the next snapshot and the shard's first sequence number
moves up: a checkpoint before it gets ``TrimmedDataAccessException``, as from DynamoDB
(the poller then reads on from the oldest record; the sweeper re-emits any undecided record
whose stream record was trimmed).

What replay and a load do not reproduce: the generated values. A replayed write makes a
new stream record with a new event id and creation time (its sequence number is the same:
moto counts them from a fixed start, and the same writes are replayed in the same order);
a snapshot's stream records keep their event ids and are given the load's time as their
creation time, as a replay gives them (the poller's maximum record age counts from the
restart, not across a time the stack was down). The table's creation time and stream label
are set back (``table_identity``), so the stream ARN is the same and the worker resumes
after its checkpoint. SQS: a sent message's id is logged with it and set again on replay
(its sent time, and the queue's creation time, are the replay's); a delete is logged by
message id (resolved from the receipt handle at the time), so deletes replay exactly.
Receives are not logged: after a restart every message left in the queue is visible again,
as if its visibility timeout had ended, with the receive count it had at the snapshot
(0 for one replayed from the log).

Record format (log): 4-byte big-endian length, 4-byte CRC-32, then JSON; the first record
is the log's header. A torn or corrupt tail (a crash in the middle of an append) ends the
log; it is cut off at start. Snapshot: one line ``turnstile-snapshot 1 <length> <crc32>``,
then that many bytes of JSON.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import logging
import os
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from turnstile.base.errors import TurnstileError

__all__ = [
    "COMPACT_BYTES_ENV",
    "SNAPSHOT_NAME",
    "STREAM_RETENTION_ENV",
    "DurableState",
    "StateFilesError",
    "WriteAheadLog",
    "capture_state",
    "classify",
    "read_snapshot",
    "replay",
    "restore_state",
    "unchanged_probe",
    "write_snapshot",
]

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">II")

#: The snapshot's file name in the state directory (the log's is ``server.WAL_NAME``).
SNAPSHOT_NAME = "aws.snapshot"
#: The log's size since the last snapshot that makes a new one while the stack runs
#: (bytes): the variable, and its default; a quarter of the snapshot's size at least (a
#: compaction costs about 2 s per 100,000 items, inside the lock: requests wait; a
#: replay about 3 s per MB of log). 0 compacts after every write (tests).
COMPACT_BYTES_ENV = "TURNSTILE_WAL_COMPACT_BYTES"
COMPACT_BYTES = 4 * 1024 * 1024
#: At start (nothing waits on the endpoint yet), a smaller log is worth compacting: at
#: least this much, and a 64th of the snapshot. A replay costs about 3 s per MB of log,
#: a snapshot load about 0.1 s per MB of snapshot.
START_COMPACT_BYTES = 256 * 1024
#: How long a stream record is kept in snapshots (seconds): the variable, and its default
#: (DynamoDB Streams keep a record 24 hours).
STREAM_RETENTION_ENV = "TURNSTILE_STREAM_RETENTION_S"
STREAM_RETENTION_S = 24 * 3600.0

_SNAPSHOT_FORMAT = 1
_SNAPSHOT_MAGIC = b"turnstile-snapshot"
_HEADER_KEY = "turnstile_wal"

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


class StateFilesError(TurnstileError):
    """The state directory's snapshot and write log cannot be restored (they do not belong
    together, or the snapshot fails its check)."""


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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` in ``path``, or (after a crash at any point) ``path`` as it was."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class WriteAheadLog:
    """Append-only, fsynced records in one file, after a header record naming the log
    (``id``) and the snapshot it follows (``base``). A log written before headers existed
    has neither (both None)."""

    def __init__(self, path: Path, base: str | None = None) -> None:
        """Open the log at ``path``, cutting a torn tail off; a new (or empty) one gets a
        header naming ``base``, the snapshot it follows."""
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.header: dict[str, Any] | None = None
        self.records_count = 0
        self._header_end = 0
        self._valid_length = self._scan()
        self._file = open(path, "ab")  # noqa: SIM115 - kept open for the process's life
        if self._file.tell() != self._valid_length:
            log.warning("write-ahead log %s: torn tail cut at byte %d", path, self._valid_length)
            self._file.truncate(self._valid_length)
            self._file.seek(self._valid_length)
            os.fsync(self._file.fileno())
        if self._valid_length == 0:
            self.header = self._header_record(base)
            self._write(self.header)
            self._header_end = self._valid_length
        self.appended = 0

    @staticmethod
    def _header_record(base: str | None) -> dict[str, Any]:
        return {_HEADER_KEY: 1, "id": uuid.uuid4().hex, "snapshot": base}

    @classmethod
    def create(cls, path: Path, base: str | None) -> WriteAheadLog:
        """A new log at ``path`` holding only its header, replacing the one there
        atomically (written beside it, fsynced, renamed over it, the directory fsynced)."""
        _write_atomically(path, _frame(cls._header_record(base)))
        return cls(path)

    @property
    def id(self) -> str | None:
        return self.header["id"] if self.header else None

    @property
    def base(self) -> str | None:
        """The id of the snapshot this log's records follow (None: none)."""
        return self.header["snapshot"] if self.header else None

    @property
    def size(self) -> int:
        """Bytes of valid records, header included."""
        return self._valid_length

    @property
    def header_end(self) -> int:
        return self._header_end

    def _scan(self) -> int:
        end = 0
        for start, offset, payload in self._frames():
            if start == 0:
                record = json.loads(payload)
                if isinstance(record, dict) and _HEADER_KEY in record:
                    self.header = record
                    self._header_end = offset
                    end = offset
                    continue
            self.records_count += 1
            end = offset
        return end

    def _frames(self) -> Iterator[tuple[int, int, bytes]]:
        """``(start, end, payload)`` of each valid record, up to the first torn one."""
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
                start, offset = offset, offset + _HEADER.size + length
                yield start, offset, payload

    def records(self, after: int = 0) -> Iterator[dict[str, Any]]:
        """The records (not the header), or those that begin at or after byte ``after``."""
        for start, _end, payload in self._frames():
            if start < max(after, self._header_end):
                continue
            if start >= self._valid_length:
                return
            yield json.loads(payload)

    def _write(self, record: dict[str, Any]) -> None:
        frame = _frame(record)
        self._file.write(frame)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._valid_length += len(frame)

    def append(self, record: dict[str, Any]) -> None:
        self._write(record)
        self.records_count += 1
        self.appended += 1

    def close(self) -> None:
        self._file.close()


def _frame(record: dict[str, Any]) -> bytes:
    payload = json.dumps(record, separators=(",", ":")).encode()
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


# -- snapshots --------------------------------------------------------------------------


def write_snapshot(path: Path, data: dict[str, Any]) -> int:
    """``data`` as the snapshot at ``path``, atomically; its size in bytes.

    Bytes anywhere in it (moto keeps nested binary values of stream images decoded) are
    written as ``{"__turnstile_bytes__": base64}``, and the snapshot then says ``binary``:
    only then does a load look for them."""
    found: list[bool] = []

    def default(value: Any) -> Any:
        if isinstance(value, bytes | bytearray):
            found.append(True)
            return {_BYTES: base64.b64encode(bytes(value)).decode()}
        raise TypeError(f"{type(value).__name__} in a snapshot")

    payload = json.dumps(data, separators=(",", ":"), default=default).encode()
    if found and not data.get("binary"):
        data = {**data, "binary": True}
        payload = json.dumps(data, separators=(",", ":"), default=default).encode()
    head = b"%s %d %d %d\n" % (_SNAPSHOT_MAGIC, _SNAPSHOT_FORMAT, len(payload), zlib.crc32(payload))
    _write_atomically(path, head + payload)
    return len(head) + len(payload)


def read_snapshot(path: Path) -> dict[str, Any] | None:
    """The snapshot at ``path``, None if there is none; ``StateFilesError`` if it fails
    its check (a snapshot is renamed into place only once whole: a failed check is damage
    after the fact, and nothing safe can be restored without it)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    head, _, payload = raw.partition(b"\n")
    parts = head.split()
    try:
        magic, version, length, crc = parts[0], int(parts[1]), int(parts[2]), int(parts[3])
    except (IndexError, ValueError):
        magic, version, length, crc = b"", 0, -1, -1
    if magic != _SNAPSHOT_MAGIC or version != _SNAPSHOT_FORMAT:
        raise StateFilesError(f"{path} is not a turnstile snapshot (format {_SNAPSHOT_FORMAT})")
    if len(payload) != length or zlib.crc32(payload) != crc:
        raise StateFilesError(
            f"{path} is damaged (its length or checksum does not match): the state cannot be "
            "restored; start with --reset to begin again"
        )
    return json.loads(payload)


_BYTES = "__turnstile_bytes__"


def _to_json(value: Any) -> Any:
    """``value`` with bytes as ``{"__turnstile_bytes__": base64}``: a JSON document (moto
    keeps some binary values decoded: message attributes, nested ones in stream images)."""
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return {_BYTES: base64.b64encode(bytes(value)).decode()}
    if isinstance(value, datetime):
        return _epoch(value)
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _BYTES in value:
            return base64.b64decode(value[_BYTES])
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def _typed(value: Any, binary: list[bool]) -> Any:
    """A moto ``DynamoType`` as DynamoDB's JSON (what ``DynamoType(...)`` takes back); a
    binary value moto holds as bytes is marked (and ``binary[0]`` set)."""
    kind, inner = value.type, value.value
    if kind == "M":
        return {"M": {k: _typed(v, binary) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_typed(v, binary) for v in inner]}
    if kind == "B" and isinstance(inner, bytes | bytearray):
        binary[0] = True
        return {"B": {_BYTES: base64.b64encode(bytes(inner)).decode()}}
    if kind == "BS" and any(isinstance(v, bytes | bytearray) for v in inner):
        binary[0] = True
        return {"BS": [_to_json(v) for v in inner]}
    return {kind: inner}


def _untyped(value: dict[str, Any]) -> dict[str, Any]:
    """``_typed``'s marks undone, by type: a map key that looks like a mark is a key."""
    ((kind, inner),) = value.items()
    if kind == "M":
        return {"M": {k: _untyped(v) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_untyped(v) for v in inner]}
    if kind in ("B", "BS"):
        return {kind: _from_json(inner)}
    return value


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _naive(iso: str | None) -> datetime | None:
    return datetime.fromisoformat(iso) if iso else None


def _naive_utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


def _epoch(moment: Any) -> float:
    if isinstance(moment, datetime):
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    if isinstance(moment, int | float):
        return float(moment)
    return time.time()


def _written_at(record: Any) -> float:
    """When a stream record was first written: kept across loads (a load gives records
    a new creation time), else its creation time."""
    at = getattr(record, "turnstile_written_at", None)
    if at is None:
        at = _epoch(record.record["dynamodb"].get("ApproximateCreationDateTime"))
    return float(at)


#: A stream record's fields moto sets alike on every record of a shard.
_STREAM_STATIC = ("eventSource", "eventVersion", "awsRegion")


def _capture_stream(shard: Any, now: float, retention_s: float) -> dict[str, Any]:
    """The shard's records of the last ``retention_s`` seconds (a prefix is dropped: the
    rest keep their sequence numbers, the first one is the shard's new start).

    A record is kept as ``[written, eventID, eventName, SizeBytes, Keys, NewImage,
    OldImage]`` (Keys None when an image holds them; the sequence number is its place
    after ``start``; the fields every record shares once, in ``static``; a record whose
    fields differ carries them as an eighth element)."""
    records = shard.items
    cutoff = now - retention_s
    first = 0
    while first < len(records) and _written_at(records[first]) < cutoff:
        first += 1
    start = shard.starting_sequence_number + first
    static: dict[str, Any] | None = None
    kept = []
    for i, record in enumerate(records[first:]):
        body = record.record
        stream = body["dynamodb"]
        shared = {k: body.get(k) for k in _STREAM_STATIC}
        shared["StreamViewType"] = stream.get("StreamViewType")
        if static is None:
            static = shared
        new, old = stream.get("NewImage"), stream.get("OldImage")
        entry = [
            int(_written_at(record)),
            body.get("eventID"),
            body.get("eventName"),
            stream.get("SizeBytes"),
            None if new is not None or old is not None else stream.get("Keys"),
            new,
            old,
        ]
        odd = {k: v for k, v in shared.items() if static.get(k) != v}
        if str(start + i) != stream.get("SequenceNumber"):
            odd["SequenceNumber"] = stream.get("SequenceNumber")
        if odd:
            entry.append(odd)
        kept.append(entry)
    return {
        "created": _iso(shard.created_on),
        "start": str(start),
        "static": static or {},
        "records": kept,
    }


def _stream_records(table: Any, stream: dict[str, Any], now: float, binary: bool) -> list[Any]:
    """``_capture_stream``'s records as moto's, created (as a replay would) at ``now``."""
    from moto.dynamodb.models.table import StreamRecord

    loaded_at = _naive_utc(now)
    static = stream["static"]
    view = static.get("StreamViewType")
    shared = {k: static.get(k) for k in _STREAM_STATIC}
    key_names = [k for k in (table.hash_key_attr, table.range_key_attr) if k is not None]
    start = int(stream["start"])
    records = []
    for i, entry in enumerate(stream["records"]):
        if binary:
            entry = _from_json(entry)
        written, event_id, event_name, size, keys, new, old = entry[:7]
        odd = entry[7] if len(entry) > 7 else {}
        image = new if new is not None else old
        if keys is None and image is not None:
            keys = {k: image[k] for k in key_names if k in image}
        dynamodb: dict[str, Any] = {
            "StreamViewType": odd.get("StreamViewType", view),
            "ApproximateCreationDateTime": loaded_at,
            "SequenceNumber": odd.get("SequenceNumber", str(start + i)),
            "SizeBytes": size,
            "Keys": keys,
        }
        if new is not None:
            dynamodb["NewImage"] = new
        if old is not None:
            dynamodb["OldImage"] = old
        record = StreamRecord.__new__(StreamRecord)
        record.record = {
            "eventID": event_id,
            "eventName": event_name,
            **{k: odd.get(k, v) for k, v in shared.items()},
            "dynamodb": dynamodb,
        }
        record.turnstile_written_at = written
        records.append(record)
    return records


def _capture_table(
    account: str, region: str, table: Any, now: float, retention_s: float
) -> dict[str, Any]:
    binary = [False]
    items = [
        {name: _typed(value, binary) for name, value in item.attrs.items()}
        for entry in table.items.values()
        for item in (entry.values() if table.range_key_attr is not None else [entry])
    ]
    stream = table.stream_shard
    return {
        "account": account,
        "region": region,
        "name": table.name,
        "schema": table.schema,
        "attr": table.attr,
        "throughput": table.throughput,
        "warm_throughput": table.warm_throughput,
        "billing_mode": table.billing_mode,
        "global_indexes": [_index(i) for i in table.global_indexes],
        "indexes": [_index(i) for i in table.indexes],
        "stream_specification": table.stream_specification,
        "sse_specification": table.sse_specification,
        "tags": table.tags,
        "deletion_protection_enabled": table.deletion_protection_enabled,
        "ttl": table.ttl,
        "continuous_backups": table.continuous_backups,
        "created": _iso(table.created_at),
        "stream_label": table.latest_stream_label,
        "items": items,
        "items_binary": binary[0],
        "stream": _capture_stream(stream, now, retention_s) if stream is not None else None,
    }


def _index(index: Any) -> dict[str, Any]:
    described = dict(index.describe())
    described.pop("IndexStatus", None)
    status = getattr(index, "status", None)
    if status is not None:
        described["status"] = status
    return described


#: Queue attributes that CreateQueue takes (the rest are counts, times and the ARN).
_QUEUE_SETTABLE = frozenset(
    {
        "DelaySeconds",
        "MaximumMessageSize",
        "MessageRetentionPeriod",
        "Policy",
        "ReceiveMessageWaitTimeSeconds",
        "VisibilityTimeout",
        "SqsManagedSseEnabled",
        "ContentBasedDeduplication",
        "DeduplicationScope",
        "FifoQueue",
        "FifoThroughputLimit",
        "KmsDataKeyReusePeriodSeconds",
        "KmsMasterKeyId",
    }
)
_MESSAGE_FIELDS = (
    "body",
    "message_attributes",
    "sender_id",
    "sent_timestamp",
    "approximate_first_receive_timestamp",
    "approximate_receive_count",
    "deduplication_id",
    "group_id",
    "sequence_number",
    "delayed_until",
    "system_attributes",
)


def _capture_queue(account: str, region: str, queue: Any) -> dict[str, Any]:
    attributes = queue.attributes
    return {
        "account": account,
        "region": region,
        "name": queue.name,
        "attributes": {k: v for k, v in attributes.items() if k in _QUEUE_SETTABLE},
        "redrive_policy": attributes.get("RedrivePolicy"),
        "tags": dict(queue.tags),
        "created": queue.created_timestamp,
        "modified": queue.last_modified_timestamp,
        "messages": [
            {"id": m.id, **{f: _to_json(getattr(m, f, None)) for f in _MESSAGE_FIELDS}}
            for m in queue._messages
        ],
    }


def _backends() -> tuple[Any, Any]:
    from moto.dynamodb.models import dynamodb_backends
    from moto.sqs.models import sqs_backends

    return dynamodb_backends, sqs_backends


def capture_state(now: float | None = None, retention_s: float = STREAM_RETENTION_S) -> dict:
    """The embedded endpoint's whole state (moto's backends) as a JSON document: tables
    (with items and streams) and queues (with messages). The caller holds the app's lock."""
    now = time.time() if now is None else now
    dynamodb, sqs = _backends()
    tables = [
        _capture_table(account, region, table, now, retention_s)
        for account in list(dynamodb)
        for region, backend in list(dynamodb[account].items())
        for table in list(backend.tables.values())
    ]
    queues = [
        _capture_queue(account, region, queue)
        for account in list(sqs)
        for region, backend in list(sqs[account].items())
        for queue in list(backend.queues.values())
    ]
    return {"tables": tables, "queues": queues}


def restore_state(state: dict[str, Any], now: float | None = None) -> int:
    """Put a ``capture_state`` document back into moto's backends (empty ones: a start);
    how many items and messages it holds."""
    now = time.time() if now is None else now
    patch_moto_stream_trim()
    dynamodb, sqs = _backends()
    count = 0
    binary = bool(state.get("binary"))
    for spec in state.get("tables", []):
        count += _restore_table(dynamodb[spec["account"]][spec["region"]], spec, now, binary)
    queues = []
    for spec in state.get("queues", []):
        backend = sqs[spec["account"]][spec["region"]]
        queues.append((backend, spec))
        count += _restore_queue(backend, spec)
    for backend, spec in queues:  # a dead-letter queue named by ARN exists now
        if spec.get("redrive_policy"):
            queue = backend.queues[spec["name"]]
            queue._setup_dlq(spec["redrive_policy"])
            queue.last_modified_timestamp = spec["modified"]
    return count


def _restore_table(backend: Any, spec: dict[str, Any], now: float, binary: bool) -> int:
    from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict

    streams = spec["stream_specification"]
    table = backend.create_table(
        spec["name"],
        schema=spec["schema"],
        throughput=spec["throughput"],
        attr=spec["attr"],
        global_indexes=spec["global_indexes"],
        indexes=spec["indexes"],
        streams=streams if streams and streams.get("StreamEnabled") else None,
        billing_mode=spec["billing_mode"],
        sse_specification=spec["sse_specification"],
        tags=spec["tags"],
        deletion_protection_enabled=spec["deletion_protection_enabled"],
        warm_throughput=spec["warm_throughput"],
    )
    for index, described in zip(table.global_indexes, spec["global_indexes"], strict=True):
        if "status" in described:
            index.status = described["status"]
    table.stream_specification = streams
    table.throughput = spec["throughput"]
    table.ttl = spec["ttl"]
    table.continuous_backups = spec["continuous_backups"]
    table.created_at = _naive(spec["created"]) or table.created_at
    table.latest_stream_label = spec["stream_label"]
    hash_attr, range_attr = table.hash_key_attr, table.range_key_attr
    decode = spec.get("items_binary", False)
    items = table.items
    for attrs in spec["items"]:
        if decode:
            attrs = {name: _untyped(value) for name, value in attrs.items()}
        item = Item.__new__(Item)
        # Checked when written: moto's per-attribute size check is skipped (it is O(n^2)).
        item.attrs = LimitedSizeDict({k: _dynamo_type(v, DynamoType) for k, v in attrs.items()})
        item.hash_key = item.attrs[hash_attr]
        if range_attr is not None:
            item.range_key = item.attrs[range_attr]
            items[item.hash_key][item.range_key] = item
        else:
            item.range_key = None
            items[item.hash_key] = item
    stream = spec.get("stream")
    if table.stream_shard is not None and stream is not None:
        shard = table.stream_shard
        shard.created_on = _naive(stream["created"]) or shard.created_on
        shard.starting_sequence_number = int(stream["start"])
        shard.items = _stream_records(table, stream, now, binary)
    return len(spec["items"])


def _dynamo_type(value: dict[str, Any], cls: Any) -> Any:
    """``DynamoType(value)``; a scalar or set built directly (what its constructor does
    for them, without its cost: it is most of a load's time)."""
    ((kind, inner),) = value.items()
    if kind in ("M", "L"):
        return cls(value)
    typed = cls.__new__(cls)
    typed.type, typed.value = kind, inner
    return typed


def _restore_queue(backend: Any, spec: dict[str, Any]) -> int:
    from moto.sqs.models import Message

    queue = backend.create_queue(spec["name"], tags=spec["tags"] or None, **spec["attributes"])
    queue.created_timestamp = spec["created"]
    queue.last_modified_timestamp = spec["modified"]
    for saved in spec["messages"]:
        message = Message(saved["id"], _from_json(saved["body"]))
        for field in _MESSAGE_FIELDS[1:]:
            if saved.get(field) is not None:
                setattr(message, field, _from_json(saved[field]))
        queue._messages.append(message)
    return len(spec["messages"])


def patch_moto_stream_trim() -> None:
    """Make moto's GetShardIterator answer ``TrimmedDataAccessException`` for a sequence
    number before the shard's oldest record (one a snapshot trimmed away), as DynamoDB
    Streams does; moto would fail on an assertion (a 500)."""
    from moto.core.exceptions import JsonRESTError
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend

    original = DynamoDBStreamsBackend.get_shard_iterator
    if getattr(original, "turnstile_patched", False):
        return

    def get_shard_iterator(
        self: Any,
        arn: str,
        shard_id: str,
        shard_iterator_type: str,
        sequence_number: str | None = None,
    ) -> Any:
        if sequence_number is not None and shard_iterator_type in (
            "AT_SEQUENCE_NUMBER",
            "AFTER_SEQUENCE_NUMBER",
        ):
            shard = self._get_table_from_arn(arn).stream_shard
            first = int(sequence_number) + (shard_iterator_type == "AFTER_SEQUENCE_NUMBER")
            if shard is not None and first < shard.starting_sequence_number:
                raise JsonRESTError(
                    "TrimmedDataAccessException",
                    f"sequence number {sequence_number} is before the trim horizon "
                    f"{shard.starting_sequence_number} of shard {shard_id}",
                )
        return original(self, arn, shard_id, shard_iterator_type, sequence_number)

    get_shard_iterator.turnstile_patched = True  # type: ignore[attr-defined]
    DynamoDBStreamsBackend.get_shard_iterator = get_shard_iterator  # type: ignore[method-assign]


# -- the state directory ----------------------------------------------------------------


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise TurnstileError(f"{name} must be a number of 0 or more, not {raw!r}")
    return value


class DurableState:
    """The state directory's snapshot and write log: what ``SerializedApp`` appends to, and
    restores from. ``restore`` and every other call run inside the app's lock."""

    def __init__(
        self,
        state_dir: Path,
        log_name: str = "aws.wal",
        compact_bytes: int | None = None,
        retention_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``compact_bytes``: the log's growth since the last snapshot that makes a new one
        (default: ``TURNSTILE_WAL_COMPACT_BYTES``, else 4 MiB); ``retention_s``: how long
        stream records are kept (default: ``TURNSTILE_STREAM_RETENTION_S``, else 24 h)."""
        self.dir = state_dir
        self.log_path = state_dir / log_name
        self.snapshot_path = state_dir / SNAPSHOT_NAME
        self.compact_bytes = int(
            compact_bytes
            if compact_bytes is not None
            else _env_float(COMPACT_BYTES_ENV, COMPACT_BYTES)
        )
        self.retention_s = (
            retention_s
            if retention_s is not None
            else _env_float(STREAM_RETENTION_ENV, STREAM_RETENTION_S)
        )
        self.clock = clock
        self.log: WriteAheadLog | None = None
        self.snapshot_id: str | None = None
        self.snapshot_bytes = 0
        #: Writes the state holds: the snapshot's, and those logged since.
        self.writes = 0
        #: What the last restore did (for the start's log line and the benchmark).
        self.restored: dict[str, Any] = {}
        #: Snapshots written by this process.
        self.compactions = 0
        self._tail_start = 0
        self._retry_at = 0

    # -- start --------------------------------------------------------------------------

    def restore(self, app: Callable[..., Iterable[bytes]]) -> int:
        """Load the snapshot, replay the log after it, compact if due; the writes the
        state now holds."""
        started = time.monotonic()
        state_dir = self.dir
        state_dir.mkdir(parents=True, exist_ok=True)
        for stale in (self.log_path, self.snapshot_path):  # a compaction cut short
            with contextlib.suppress(FileNotFoundError):
                stale.with_name(stale.name + ".tmp").unlink()
        snapshot = read_snapshot(self.snapshot_path)
        snapshot_id = snapshot["id"] if snapshot else None
        wal = WriteAheadLog(self.log_path, base=snapshot_id)
        must_compact = False
        if wal.header is not None and wal.base == snapshot_id:
            tail_from = wal.header_end  # the log follows this snapshot (or none)
        elif snapshot is not None and snapshot["covers"]["log"] == wal.id:
            # A crash between the snapshot's rename and the new log's: the log's records
            # up to the covered length are in the snapshot.
            tail_from = int(snapshot["covers"]["bytes"])
            if wal.size < tail_from:
                raise StateFilesError(
                    f"{self.log_path} is shorter than the snapshot {self.snapshot_path} says "
                    "it was: the files were changed after the fact"
                )
            must_compact = True
        elif snapshot is None and wal.header is None:
            tail_from = 0  # a log from before snapshots: all of it, then a snapshot
            must_compact = wal.records_count > 0
        else:
            wal.close()
            follows = f"snapshot {wal.base}" if wal.base else "no snapshot"
            has = f"snapshot {snapshot_id}" if snapshot_id else "none"
            raise StateFilesError(
                f"the write log {self.log_path} follows {follows}, but the state directory "
                f"has {has}: they do not belong together (restore both from one copy, or "
                "start with --reset)"
            )
        self.log = wal
        self.snapshot_id = snapshot_id
        self.snapshot_bytes = self.snapshot_path.stat().st_size if snapshot else 0
        restored = restore_state(snapshot, self.clock()) if snapshot else 0
        loaded = time.monotonic()
        replayed = replay(wal.records(after=tail_from), app)
        self._tail_start = tail_from
        self.writes = (snapshot["writes"] if snapshot else 0) + replayed
        self.restored = {
            "snapshot_items": restored,
            "snapshot_bytes": self.snapshot_bytes,
            "snapshot_s": round(loaded - started, 3),
            "log_records": replayed,
            "log_bytes": wal.size - tail_from,
            "replay_s": round(time.monotonic() - loaded, 3),
        }
        if must_compact or self.compaction_due(starting=True):
            self.compact()
        self.restored["total_s"] = round(time.monotonic() - started, 3)
        return self.writes

    # -- appending ----------------------------------------------------------------------

    @property
    def tail_bytes(self) -> int:
        """The log's bytes since the snapshot."""
        return self.log.size - self._tail_start if self.log else 0

    def records(self) -> Iterator[dict[str, Any]]:
        """The log's records since the snapshot."""
        assert self.log is not None
        return self.log.records(after=self._tail_start)

    def append(self, record: dict[str, Any]) -> None:
        """Log ``record`` (fsynced when this returns); then compact if it is due."""
        assert self.log is not None, "restore() first"
        self.log.append(record)
        self.writes += 1
        if self.compaction_due():
            try:
                self.compact()
            except Exception:  # the write is logged: the log carries on, uncompacted
                log.exception("compacting the write log failed; it is retried later")
                self._retry_at = 2 * self.tail_bytes

    def compaction_due(self, starting: bool = False) -> bool:
        """Whether the log since the snapshot is worth a new snapshot: while running, once
        it has grown past ``compact_bytes`` and a quarter of the snapshot's size (at most
        about four bytes written for each byte logged; a restart replays at most that much
        log);
        at start, past ``START_COMPACT_BYTES`` and a 64th of the snapshot. With a
        ``compact_bytes`` of 0, whenever anything was logged since the snapshot."""
        tail = self.tail_bytes
        if tail <= 0:
            return False
        if self.compact_bytes == 0:
            return True
        if starting:
            return tail >= max(
                min(START_COMPACT_BYTES, self.compact_bytes), self.snapshot_bytes // 64
            )
        return tail >= max(self.compact_bytes, self.snapshot_bytes // 4, self._retry_at)

    def compact(self) -> None:
        """Write the whole state as a new snapshot, then start a new log after it."""
        assert self.log is not None
        started = time.monotonic()
        now = self.clock()
        snapshot_id = uuid.uuid4().hex
        data = {
            "format": _SNAPSHOT_FORMAT,
            "id": snapshot_id,
            "created": now,
            "writes": self.writes,
            "covers": {"log": self.log.id, "bytes": self.log.size},
            **capture_state(now, self.retention_s),
        }
        captured = time.monotonic()
        size = write_snapshot(self.snapshot_path, data)
        # From here the snapshot is the state's base; until the next rename, with the old
        # log beside it, whose records it covers.
        self.snapshot_id, self.snapshot_bytes = snapshot_id, size
        self._tail_start = self.log.size
        new_log = WriteAheadLog.create(self.log_path, base=snapshot_id)
        self.log.close()
        self.log = new_log
        self._tail_start = new_log.header_end
        self._retry_at = 0
        self.compactions += 1
        log.info(
            "write log compacted: snapshot of %d bytes (%d writes) in %.2f s (capture %.2f s)",
            size,
            self.writes,
            time.monotonic() - started,
            captured - started,
        )

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


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


def _queues_named(name: str) -> dict[tuple[str, str], Any]:
    """Every queue of that name: its attributes and tags, by account and region."""
    _dynamodb, sqs = _backends()
    found = {}
    for account in list(sqs):
        for region, backend in list(sqs[account].items()):
            queue = backend.queues.get(name)
            if queue is not None:
                attributes = dict(queue.attributes)
                attributes.pop("LastModifiedTimestamp", None)
                found[(account, region)] = (attributes, dict(queue.tags))
    return found


def unchanged_probe(service: str, action: str, body: bytes) -> Callable[[], bool] | None:
    """For a write that may change nothing, called before it runs: a function that tells,
    after it ran, whether it changed nothing (then it is not logged); None: always log.

    A CreateQueue of a queue that exists with the same attributes and tags (what every
    start's ``ensure_resources`` sends) changes nothing."""
    if (service, action) != ("sqs", "CreateQueue"):
        return None
    try:
        name = json.loads(body)["QueueName"]
    except (ValueError, KeyError, TypeError):
        return None  # the query protocol, or no name: logged
    before = _queues_named(name)
    if not before:
        return None
    return lambda: _queues_named(name) == before


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
    handles = (
        [request["ReceiptHandle"]]
        if "ReceiptHandle" in request
        else [entry.get("ReceiptHandle") for entry in request.get("Entries", [])]
    )
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

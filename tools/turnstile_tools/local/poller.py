"""``StreamPoller``: Lambda's DynamoDB event source mapping, for the local stack.

It reads a stream through the public DynamoDB Streams API (``turnstile_tools.stream_reader``, so
it works against any endpoint), and invokes a handler the way Lambda does: batch size,
batching window and the 6 MB payload limit, filters, retries (bounded, or -1: until the
record expires), bisect on function error, partial batch failures (checkpoint before the
lowest failed record), a maximum record age, an on-failure destination (an SQS queue,
messages shaped as AWS's) and a parallelization factor. Checkpoints survive a crash, in a
file. What it does is checked against AWS's own recordings in
tests/integration/test_poller_conformance.py.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import random
import tempfile
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from turnstile.base.contract import STREAM_SOURCE, EventSourceSettings
from turnstile.base.eventfilter import matches_any, matches_filter
from turnstile.base.itemsize import typed_item_size
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.stream_reader import (
    MAX_RECORDS_PER_READ,
    error_code,
    list_shards,
    read_page,
    shard_iterator,
)

__all__ = [
    "CheckpointStore",
    "StreamPoller",
    "matches_filter",
    "to_lambda_record",
]

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]

#: The largest payload of one invocation: a batch is sent when the next record would not fit.
MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
_PAYLOAD_ENVELOPE = len(json.dumps({"Records": []}))


# -- the shape of a Lambda DynamoDB stream event ---------------------------------------


def _typed_value(value: Any) -> Any:
    """boto3 turns B/BS into bytes; the Lambda event carries them base64-encoded."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, Mapping):
        return {k: _typed_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed_value(v) for v in value]
    return value


def _size_bytes(stream: Mapping[str, Any]) -> int | None:
    """DynamoDB's size of the record's keys and images (AWS's SizeBytes)."""
    try:
        parts = ("Keys", "NewImage", "OldImage")
        return sum(typed_item_size(stream[k]) for k in parts if k in stream)
    except (ValueError, TypeError, AttributeError):
        return None


def to_lambda_record(record: Mapping[str, Any], stream_arn: str) -> dict[str, Any]:
    """A GetRecords record (as boto3 returns it) in the form Lambda delivers it.

    As recorded against AWS: ``eventVersion`` "1.1", ``ApproximateCreationDateTime`` a
    float of seconds, ``SizeBytes`` by DynamoDB's item-size rules, binary base64-encoded.
    """
    stream = dict(record.get("dynamodb", {}))
    created = stream.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        stream["ApproximateCreationDateTime"] = created.timestamp()
    elif isinstance(created, int | float):
        stream["ApproximateCreationDateTime"] = float(created)
    size = _size_bytes(stream)
    if size is not None:
        stream["SizeBytes"] = size
    for key in ("Keys", "NewImage", "OldImage"):
        if key in stream:
            stream[key] = _typed_value(stream[key])
    out = {
        "eventID": record.get("eventID"),
        "eventName": record.get("eventName"),
        "eventVersion": "1.1",
        "eventSource": record.get("eventSource", "aws:dynamodb"),
        "awsRegion": record.get("awsRegion"),
        "dynamodb": stream,
        "eventSourceARN": stream_arn,
    }
    if "userIdentity" in record:
        out["userIdentity"] = dict(record["userIdentity"])
    return out


# -- checkpoints ----------------------------------------------------------------------


class CheckpointStore:
    """The last sequence number handled per shard, in a JSON file, written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    def _write(self, data: Mapping[str, Any]) -> None:
        """A new file beside the old one, synced, then renamed over it: a crash at any
        point leaves either the old checkpoints or the new ones, never a torn file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".checkpoints")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def get(self, stream_arn: str, shard_id: str) -> str | None:
        with self._lock:
            return self._load().get(stream_arn, {}).get(shard_id)

    def put(self, stream_arn: str, shard_id: str, sequence_number: str) -> None:
        with self._lock:
            data = self._load()
            data.setdefault(stream_arn, {})[shard_id] = sequence_number
            self._write(data)

    def clear(self, stream_arn: str) -> None:
        with self._lock:
            data = self._load()
            if data.pop(stream_arn, None) is not None:
                self._write(data)


# -- the poller -----------------------------------------------------------------------


@dataclass
class PollerStats:
    invocations: int = 0
    records_delivered: int = 0
    records_filtered: int = 0
    function_errors: int = 0
    partial_failures: int = 0
    retries: int = 0
    sent_to_failure_destination: int = 0
    polls: int = 0
    #: Checkpoints found past the stream's retention (read on from the trim horizon).
    checkpoints_trimmed: int = 0


class _FunctionError(Exception):
    """The handler raised, or answered with something Lambda counts as a failure."""


class _Abandoned(Exception):
    """A batch given up on by a stop, between its invocations (a stream shard's before any,
    the stream's own before a retry): its records not yet handled stay behind the
    checkpoint (the next start delivers them again)."""


@dataclass
class _ShardState:
    shard_id: str
    iterator: str | None
    parent_id: str | None
    closed: bool = False
    ended: bool = False


@dataclass
class _Part:
    """Records on their way to the handler: how many failed invocations they have had,
    and whether the last one raised (AWS's ``functionError``)."""

    records: list[dict[str, Any]]
    attempts: int = 0
    function_error: str | None = None


def _record_bytes(record: Mapping[str, Any]) -> int:
    return len(json.dumps(record)) + 2  # and the ", " that joins it to the next


def _lane(record: Mapping[str, Any], lanes: int, partition_key: str | None = None) -> int:
    """The lane of a record: one item (its whole key) always takes the same lane; with a
    ``partition_key``, every item of one partition key value does."""
    keys = record.get("dynamodb", {}).get("Keys") or {}
    if partition_key is not None:
        keys = keys.get(partition_key)
    return zlib.crc32(json.dumps(keys, sort_keys=True).encode()) % lanes


@dataclass
class _Entry:
    """A record handed to a lane, until the lane has delivered it."""

    seq: int
    sequence_number: str
    #: A record read before it, every record up to which was resolved when it was handed:
    #: where the checkpoint may go while this one is the oldest record not delivered.
    before: str | None
    done: bool = False


@dataclass
class _Cursor:
    """A lane's own read position in a real shard while the main reader skips its records
    (the lane was full): as on AWS, where each shard is read by an iterator of its own."""

    #: The last record this cursor has passed: every record of the lane up to it is handed.
    after: str | None
    #: The first record of the lane the main reader skipped (read at it when ``after`` is
    #: None: the main reader began at the shard's start).
    first: str
    iterator: str | None = None


class _ShardLanes:
    """Emulated stream shards over one real one: a queue and a worker thread per lane.

    The reader queues each record to its lane (its partition key's); each worker takes up
    to a batch of its lane's records, in order, and delivers them as the poller delivers
    any batch (retries, bisect, the on-failure destination), independently of the other
    lanes, as Lambda works each stream shard on its own.

    A lane holds at most ``lane_limit`` records (queued or in flight). Once it is full, the
    main reader skips the lane's records and reads on for the others; the lane is
    *detached* and gets a ``_Cursor`` of its own, which reads its records again from where
    it stopped once it has room, up to what the main reader has resolved, and then hands
    the lane back to the main reader. So a stuck lane holds back only its own records, and
    memory stays bounded.

    The real shard's checkpoint moves only past records every lane is done with (never
    past a detached lane's cursor), and never backwards, so a restart never skips one.
    """

    def __init__(self, poller: StreamPoller, lanes: int, batch_size: int) -> None:
        self.poller = poller
        self.lanes = lanes
        self.batch_size = batch_size
        #: The records one lane may hold, queued or in flight: four batches.
        self.lane_limit = batch_size * 4
        self.cv = threading.Condition()
        self.queues: list[deque[tuple[str, _Entry, dict[str, Any]]]] = [
            deque() for _ in range(lanes)
        ]
        #: Per lane, its records queued or in flight.
        self.load = [0] * lanes
        #: Records queued or in flight over all lanes.
        self.pending = 0
        #: Per real shard and lane, the records handed and not yet delivered, in order.
        self.undone: dict[str, list[deque[_Entry]]] = {}
        #: Per real shard, the lanes the main reader skips: their cursors.
        self.detached: dict[str, dict[int, _Cursor]] = {}
        #: Per real shard, the last record the main reader has resolved (handed to a lane,
        #: skipped for a detached one, or filtered out): where it reads on after an error.
        self.resolved: dict[str, str] = {}
        #: Per real shard, the checkpoint last written (or found).
        self.checkpointed: dict[str, str | None] = {}
        #: Set by ``stop``: a lane whose delivery failed stops retrying it, and a lane's batch
        #: in flight is given up on before its next invocation (``_Abandoned``).
        self.stopping = False
        #: Set once ``stop`` returns: no checkpoint is written after it, and the lanes' threads
        #: end.
        self.closed = False
        self.workers = [
            threading.Thread(target=self._work, args=(i,), name=f"stream-shard-{i}", daemon=True)
            for i in range(lanes)
        ]
        for worker in self.workers:
            worker.start()

    # -- the reader's side ----------------------------------------------------------------

    def resume_after(self, shard_id: str, checkpoint: str | None) -> str | None:
        """Where the main reader (re)starts in a shard: after the last record it resolved,
        whatever is still queued in the lanes; the checkpoint when it resolved none yet."""
        with self.cv:
            if shard_id not in self.resolved and checkpoint:
                self.resolved[shard_id] = checkpoint
            return self.resolved.get(shard_id)

    def queue(self, shard_id: str, records: list[tuple[int, dict[str, Any]]]) -> None:
        """The main reader's records, in read order, each to its lane; a full lane's, and
        every later one of a detached lane, skipped (its cursor reads them again)."""
        with self.cv:
            undone = self._undone(shard_id)
            detached = self.detached.setdefault(shard_id, {})
            before = self.resolved.get(shard_id)
            for lane, record in records:
                sequence_number = record["dynamodb"]["SequenceNumber"]
                if lane not in detached:
                    if self.load[lane] < self.lane_limit:
                        self._hand(shard_id, lane, record, before, undone)
                    else:
                        detached[lane] = _Cursor(after=before, first=sequence_number)
                before = sequence_number
            if before is not None:
                self.resolved[shard_id] = before
            self._advance(shard_id)
            self.cv.notify_all()

    def resolve(self, shard_id: str, sequence_number: str) -> None:
        """The main reader is past ``sequence_number`` (records the filter dropped)."""
        with self.cv:
            resolved = self.resolved.get(shard_id)
            if resolved is None or int(sequence_number) > int(resolved):
                self.resolved[shard_id] = sequence_number
            self._advance(shard_id)

    def all_detached(self, shard_id: str) -> bool:
        with self.cv:
            return len(self.detached.get(shard_id, ())) == self.lanes

    def finished(self, shard_id: str | None = None) -> bool:
        """No lane's cursor has records left to read (in this shard, or in any)."""
        with self.cv:
            if shard_id is not None:
                return not self.detached.get(shard_id)
            return not any(self.detached.values())

    def ready(self) -> list[tuple[str, int]]:
        """The detached lanes with room for a batch: (shard, lane)."""
        with self.cv:
            return [
                (shard_id, lane)
                for shard_id, cursors in self.detached.items()
                for lane in cursors
                if self._has_room(lane)
            ]

    def cursor(self, shard_id: str, lane: int) -> _Cursor:
        with self.cv:
            return self.detached[shard_id][lane]

    def catch_up(
        self,
        shard_id: str,
        lane: int,
        records: list[tuple[str, dict[str, Any] | None]],
        next_iterator: str | None,
    ) -> None:
        """A page read by a detached lane's cursor: (sequence number, the record when it is
        the lane's and passes the filter). Its records, up to what the main reader has
        resolved, go to the lane while it has room; once there, the lane is the main
        reader's again."""
        with self.cv:
            cursor = self.detached[shard_id][lane]
            end = int(self.resolved[shard_id])
            undone = self._undone(shard_id)
            whole_page = True
            for sequence_number, record in records:
                if int(sequence_number) > end:
                    break
                if record is not None:
                    if self.load[lane] >= self.lane_limit:
                        whole_page = False  # full again: read on from ``after`` next time
                        break
                    self._hand(shard_id, lane, record, cursor.after, undone)
                cursor.after = sequence_number
            caught_up = cursor.after is not None and int(cursor.after) >= end
            if caught_up or (whole_page and next_iterator is None):
                del self.detached[shard_id][lane]
            else:
                cursor.iterator = next_iterator if whole_page else None
            self._advance(shard_id)
            self.cv.notify_all()

    def forget_iterators(self) -> None:
        """After a failed read: every cursor reads again from where it is."""
        with self.cv:
            for cursors in self.detached.values():
                for cursor in cursors.values():
                    cursor.iterator = None

    def wait(self, stop: threading.Event | None = None) -> bool:
        """Until every record is delivered and no lane is detached, or ``stop`` is set
        (True), or a detached lane has room for its cursor to read (False)."""
        with self.cv:
            while not (self._settled() or self._any_ready()):
                if stop is not None and stop.is_set():
                    return True
                self.cv.wait(None if stop is None else 0.1)
            return self._settled()

    def stop(self) -> None:
        """Drop what is queued and wait only for the batches in flight (a stop): the
        checkpoint stays behind the dropped records, so the next start delivers them."""
        with self.cv:
            self.stopping = True
            self.poller._halt.set()  # ends a lane's wait between retries at once
            for lane, queue in enumerate(self.queues):
                self.pending -= len(queue)
                self.load[lane] -= len(queue)
                queue.clear()
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.pending <= 0)
            # The batches in flight are done: their checkpoint (written again if a write
            # failed), and none after this returns, when a new worker may have read the
            # file and moved it on (a late write here would take it back).
            for shard_id in set(self.undone) | set(self.resolved):
                self._advance(shard_id)
            self.closed = True
            self.cv.notify_all()

    # -- under ``cv`` ---------------------------------------------------------------------

    def _undone(self, shard_id: str) -> list[deque[_Entry]]:
        return self.undone.setdefault(shard_id, [deque() for _ in range(self.lanes)])

    def _hand(
        self,
        shard_id: str,
        lane: int,
        record: dict[str, Any],
        before: str | None,
        undone: list[deque[_Entry]],
    ) -> None:
        sequence_number = record["dynamodb"]["SequenceNumber"]
        entry = _Entry(int(sequence_number), sequence_number, before)
        undone[lane].append(entry)
        self.queues[lane].append((shard_id, entry, record))
        self.load[lane] += 1
        self.pending += 1

    def _has_room(self, lane: int) -> bool:
        """Room for a batch: a cursor reads for its lane only then, not for every record."""
        return self.load[lane] <= self.lane_limit - self.batch_size

    def _any_ready(self) -> bool:
        return any(self._has_room(lane) for cursors in self.detached.values() for lane in cursors)

    def _settled(self) -> bool:
        return self.pending <= 0 and not any(self.detached.values())

    def _advance(self, shard_id: str) -> None:
        """Checkpoint the shard as far as every lane is done: before the oldest record not
        delivered, and no further than a detached lane's cursor; never backwards; never
        once the lanes have stopped."""
        if self.closed:
            return
        oldest: tuple[int, int] | None = None
        target = self.resolved.get(shard_id)
        for entries in self.undone.get(shard_id, ()):
            while entries and entries[0].done:
                entries.popleft()
            if entries and (oldest is None or (entries[0].seq, 0) < oldest):
                oldest, target = (entries[0].seq, 0), entries[0].before
        for cursor in self.detached.get(shard_id, {}).values():
            # just after the cursor's record (before every record it has yet to read)
            key = (int(cursor.after), 1) if cursor.after is not None else (-1, 1)
            if oldest is None or key < oldest:
                oldest, target = key, cursor.after
        if target is None:
            return
        if shard_id not in self.checkpointed:
            try:
                self.checkpointed[shard_id] = self.poller.checkpoints.get(
                    self.poller.stream_arn, shard_id
                )
            except Exception:
                # Not read (an I/O error): nothing is written until it is (the next advance
                # reads it again). Raised here, it would end a lane's thread, as a write would.
                log.exception("stream shard checkpoint file not read; read later")
                return
        last = self.checkpointed[shard_id]
        if last is not None and int(target) <= int(last):
            return
        try:
            self.poller.checkpoints.put(self.poller.stream_arn, shard_id, target)
        except Exception:
            # Not written (the state directory's disk full, say): the records are delivered,
            # and the next advance writes a checkpoint past them (a crash meanwhile delivers
            # them again). Raised here, it would end a lane's thread, its records undelivered.
            log.exception("stream shard checkpoint %s not written; written later", target)
            return
        self.checkpointed[shard_id] = target

    # -- the lanes' side --------------------------------------------------------------------

    def _stopping(self) -> bool:
        return self.stopping

    def _handled(
        self,
        lane: int,
        shard_id: str,
        taken: deque[tuple[_Entry, dict[str, Any]]],
        record: Mapping[str, Any],
    ) -> None:
        """Every record of the lane's batch ``taken`` up to ``record`` is handled (succeeded,
        or sent to the on-failure destination): done, whatever becomes of the rest, which
        alone is left in ``taken`` (delivered again if the delivery raises)."""
        number = int(record["dynamodb"]["SequenceNumber"])
        with self.cv:
            count = 0
            while taken and taken[0][0].seq <= number:
                taken.popleft()[0].done = True
                count += 1
            self.pending -= count
            self.load[lane] -= count
            self._advance(shard_id)
            self.cv.notify_all()

    def _work(self, lane: int) -> None:
        queue = self.queues[lane]
        while True:
            with self.cv:
                self.cv.wait_for(lambda: bool(queue) or self.closed)
                if not queue:
                    return  # the lanes stopped
                shard_id = queue[0][0]
                taken: deque[tuple[_Entry, dict[str, Any]]] = deque()
                size = _PAYLOAD_ENVELOPE
                while queue and queue[0][0] == shard_id and len(taken) < self.batch_size:
                    # an invocation's payload stays under Lambda's 6 MB, as the reader's does
                    grown = size + _record_bytes(queue[0][2])
                    if taken and grown > MAX_PAYLOAD_BYTES:
                        break
                    size = grown
                    _, entry, record = queue.popleft()
                    taken.append((entry, record))
            try:
                self.poller._deliver(
                    shard_id,
                    [record for _, record in taken],
                    checkpoint=False,
                    handled=functools.partial(self._handled, lane, shard_id, taken),
                    abandon=self._stopping,
                )
            except _Abandoned:
                with self.cv:
                    self.pending -= len(taken)
                    self.load[lane] -= len(taken)
                    self.cv.notify_all()
                continue
            except Exception:
                # Not done (the on-failure queue could not be reached, say): what is not yet
                # handled is delivered again before anything newer of this lane, as one
                # stream shard retries from its checkpoint; the checkpoint stays behind it.
                log.exception("stream shard %d: delivery failed; retrying it", lane)
                with self.cv:
                    if self.stopping:
                        self.pending -= len(taken)
                        self.load[lane] -= len(taken)
                        self.cv.notify_all()
                        continue
                    queue.extendleft((shard_id, e, r) for e, r in reversed(taken))
                    self.cv.notify_all()
                self.poller._halt.wait(self.poller.retry_base_delay_s)
                continue
            if taken:  # (each record was handled, and checkpointed by then: none is left)
                self._handled(lane, shard_id, taken, taken[-1][1])


class StreamPoller:
    """Feeds a DynamoDB stream to ``handler`` as Lambda's event source mapping does.

    ``settings.parallelization_factor`` above 1 (off by default, and on AWS a misconfigured
    stack: docs/design.md) runs that many batches of a shard at once, as Lambda does: each
    item's records in order in one lane ("in-order processing at the item (partition and
    sort key) level", https://docs.aws.amazon.com/lambda/latest/dg/with-ddb.html), so one
    event's signups are decided by concurrent invocations. The shard's checkpoint moves
    once every lane is done with what was read.
    """

    def __init__(
        self,
        handler: Handler,
        streams_client: Any,
        stream_arn: str,
        checkpoints: CheckpointStore,
        sqs_client: Any = None,
        failure_queue_url: str | None = None,
        settings: EventSourceSettings = STREAM_SOURCE,
        from_start: bool = False,
        retry_base_delay_s: float = 0.2,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        stream_shards: int = 1,
        partition_key: str | None = None,
    ) -> None:
        """``stream_shards`` above 1 (with the table's ``partition_key``): emulate a stream
        of that many shards over moto's one, as DynamoDB gives a table's partitions shards
        of their own. Each partition key value's records go, in order, to one of that
        many lanes, and the lanes' batches are invoked at once, one invocation per lane at
        a time, as Lambda invokes one per stream shard. Exclusive with a parallelization
        factor above 1."""
        if stream_shards > 1 and (partition_key is None or settings.parallelization_factor > 1):
            raise ValueError("stream shards need the partition key and no parallelization")
        self.handler = handler
        self.streams = streams_client
        self.stream_arn = stream_arn
        self.checkpoints = checkpoints
        self.sqs = sqs_client
        self.failure_queue_url = failure_queue_url
        self.settings = settings
        self.retry_base_delay_s = retry_base_delay_s
        #: The wait after a poll that failed before reading again (1 s by default: five
        #: first retries' delays, so a drill's shorter delay shortens it too).
        self.poll_error_delay_s = 5 * retry_base_delay_s
        #: Set when stream shards stop: it ends their waits between retries.
        self._halt = threading.Event()
        #: The stop ``run`` was given: without stream shards, it ends a wait between
        #: retries, and the batch is given up on instead of retried (``_Abandoned``).
        self._stop: threading.Event | None = None
        #: The wait between retries (by default one a stop ends).
        self._sleep = sleep if sleep is not None else self._wait_between_retries
        self._clock = clock
        self.stats = PollerStats()
        self._stats_lock = threading.Lock()
        self._shards: dict[str, _ShardState] = {}
        self._buffers: dict[str, list[dict[str, Any]]] = {}
        self._buffer_bytes: dict[str, int] = {}
        #: When each shard's batching window began: when its last invocation completed.
        self._window_start: dict[str, float] = {}
        self._started = clock()
        self._lanes = max(settings.parallelization_factor, stream_shards)
        self._partition_key = partition_key if stream_shards > 1 else None
        #: Emulated stream shards: their queues, worked each by a thread of its own.
        self._shard_lanes = (
            _ShardLanes(self, stream_shards, settings.batch_size) if stream_shards > 1 else None
        )
        self._lane_pool = (
            None
            if self._shard_lanes is not None
            else (
                ThreadPoolExecutor(self._lanes, thread_name_prefix="stream-lane")
                if self._lanes > 1
                else None
            )
        )
        if from_start:
            checkpoints.clear(stream_arn)
        self.polling = threading.Event()

    def _count(self, **increments: int) -> None:
        with self._stats_lock:
            for name, value in increments.items():
                setattr(self.stats, name, getattr(self.stats, name) + value)

    # -- shard discovery --------------------------------------------------------------

    def _refresh_shards(self) -> None:
        for shard in list_shards(self.streams, self.stream_arn):
            if shard.shard_id not in self._shards:
                self._shards[shard.shard_id] = _ShardState(
                    shard_id=shard.shard_id,
                    iterator=None,
                    parent_id=shard.parent_id,
                    closed=shard.closed,
                )

    def _iterator(self, state: _ShardState) -> str | None:
        if state.iterator is None and not state.ended:
            after = self.checkpoints.get(self.stream_arn, state.shard_id)
            if self._shard_lanes is not None:
                # after what the lanes were handed, not the checkpoint behind it: read from
                # the checkpoint, what is still queued would be queued (and delivered) twice
                after = self._shard_lanes.resume_after(state.shard_id, after)
            state.iterator = self._open_iterator(state.shard_id, after)
        return state.iterator

    def _open_iterator(self, shard_id: str, after: str | None, at: str | None = None) -> str:
        """An iterator after the record ``after`` (or at ``at``; else at the starting
        position); from the oldest record left when that one is past the retention."""
        if after:
            position, sequence_number = "AFTER_SEQUENCE_NUMBER", after
        elif at:
            position, sequence_number = "AT_SEQUENCE_NUMBER", at
        else:
            position, sequence_number = self.settings.starting_position, None
        try:
            return shard_iterator(
                self.streams, self.stream_arn, shard_id, position, sequence_number
            )
        except ClientError as exc:
            if not sequence_number or error_code(exc) != "TrimmedDataAccessException":
                raise
            # The checkpoint is older than the stream keeps (24 hours): the records
            # after it that were trimmed are gone. Read on from the oldest one left,
            # instead of asking for the trimmed position again forever.
            log.warning(
                "checkpoint %s of shard %s is past the stream's retention: records "
                "trimmed since are lost; reading on from the oldest record left",
                sequence_number,
                shard_id,
            )
            self._count(checkpoints_trimmed=1)
            return shard_iterator(self.streams, self.stream_arn, shard_id, "TRIM_HORIZON")

    # -- the loop ---------------------------------------------------------------------

    def run(self, stop: threading.Event, until_idle_s: float | None = None) -> None:
        """Poll until ``stop`` is set (or the stream was quiet for ``until_idle_s``).

        Errors talking to the endpoint are logged and retried from the checkpoint (with
        stream shards, after the last record the lanes were handed: what they still hold
        is not read, queued and delivered again). When
        the stream has been quiet for ``until_idle_s``, a batch still gathering is sent
        (its delivery is work, not quiet) before the poller stops. A stop waits for a
        batch in flight, not for its retries: a failing batch is given up on behind the
        checkpoint, as a stream shard's is.
        """
        self._stop = stop
        try:
            self._run(stop, until_idle_s)
        except _Abandoned:
            # Stopped between a batch's retries: nothing after it is delivered, so the
            # checkpoint stays before it and the next start delivers it again (a run of
            # this poller too: its shards are read again from the checkpoint).
            self._buffers.clear()
            self._buffer_bytes.clear()
            for state in self._shards.values():
                state.iterator = None
                state.ended = False
        finally:
            self._stop = None

    def _run(self, stop: threading.Event, until_idle_s: float | None) -> None:
        quiet_since = time.monotonic()
        while not stop.is_set():
            invoked = self.stats.invocations
            try:
                got = self.poll_once()
            except _Abandoned:
                raise
            except Exception:
                log.exception(
                    "stream poll failed; reading again from the checkpoint"
                    if self._shard_lanes is None
                    else "stream poll failed; reading again after what the lanes were handed"
                )
                got = 0
                for state in self._shards.values():
                    state.iterator = None
                if self._shard_lanes is not None:
                    self._shard_lanes.forget_iterators()
                self._buffers.clear()
                self._buffer_bytes.clear()
                stop.wait(self.poll_error_delay_s)
                # A stream that could not be read is not a quiet one: only polls that
                # read it count towards idleness.
                quiet_since = time.monotonic()
                continue
            # A poll that read nothing may still have delivered a buffered batch: the time
            # its handler took is work, not quiet.
            if got or self.stats.invocations != invoked:
                quiet_since = time.monotonic()
            elif until_idle_s is not None and time.monotonic() - quiet_since >= until_idle_s:
                if self._shard_lanes is None:
                    if not any(self._buffers.values()):
                        break
                    self.flush()
                elif not any(self._buffers.values()) and self._shard_lanes.finished():
                    break  # no lane has records left to read: the flush waits for them
                else:
                    # sent to the lanes, not waited for: a lane's cursor may have to read,
                    # which this loop does (its errors retried, its stop heeded)
                    self._send_buffered()
                quiet_since = time.monotonic()
            else:
                stop.wait(self.settings.poll_interval_s)
        if stop.is_set() and self._shard_lanes is not None:
            # A stop waits for the batches in flight, not for every record queued.
            self._shard_lanes.stop()
            return
        self.flush(stop)

    def poll_once(self) -> int:
        """One GetRecords per readable shard, delivering batches that are ready."""
        if not self._shards or self.stats.polls % 40 == 0:
            self._refresh_shards()
        self._count(polls=1)
        got = 0
        for state in list(self._shards.values()):
            parent = self._shards.get(state.parent_id or "")
            if state.ended or (parent is not None and not self._finished(parent)):
                continue  # a child shard waits for its parent: order per key
            got += self._poll_shard(state)
        if self._shard_lanes is not None:
            for shard_id, lane in self._shard_lanes.ready():
                got += self._catch_up(shard_id, lane)
        self.polling.set()
        return got

    def _finished(self, state: _ShardState) -> bool:
        """Read to its end, by the main reader and every lane's cursor."""
        return state.ended and (
            self._shard_lanes is None or self._shard_lanes.finished(state.shard_id)
        )

    def _poll_shard(self, state: _ShardState) -> int:
        if self._shard_lanes is not None and self._shard_lanes.all_detached(state.shard_id):
            return 0  # every lane is full: nothing read now could be handed to one
        iterator = self._iterator(state)
        if iterator is None:
            return 0
        shard_id = state.shard_id
        buffer = self._buffers.setdefault(shard_id, [])
        # With lanes, one read feeds a batch to each of them.
        capacity = self.settings.batch_size * self._lanes
        room = max(1, capacity - len(buffer))
        try:
            page = read_page(self.streams, iterator, limit=min(room, MAX_RECORDS_PER_READ))
        except ClientError as exc:
            if error_code(exc) in {"ExpiredIteratorException", "TrimmedDataAccessException"}:
                state.iterator = None
                self._buffers[shard_id] = []
                self._buffer_bytes[shard_id] = 0
                return 0
            raise
        records = page.records
        state.iterator = page.next_iterator
        if state.iterator is None:
            state.ended = True
        last_dropped: str | None = None
        for raw in records:
            record = to_lambda_record(raw, self.stream_arn)
            if not matches_any(self.settings.filter_patterns, record):
                self._count(records_filtered=1)
                last_dropped = record["dynamodb"]["SequenceNumber"]
                continue
            size = _record_bytes(record)
            if buffer and (
                _PAYLOAD_ENVELOPE + self._buffer_bytes.get(shard_id, 0) + size > MAX_PAYLOAD_BYTES
            ):
                self._dispatch(shard_id)  # this record would take the payload past 6 MB
                buffer = self._buffers[shard_id]
            buffer.append(record)
            self._buffer_bytes[shard_id] = self._buffer_bytes.get(shard_id, 0) + size
        if last_dropped and not buffer and self._shard_lanes is None:
            self.checkpoints.put(self.stream_arn, shard_id, last_dropped)
        if buffer and (len(buffer) >= capacity or self._window_over(shard_id) or state.ended):
            self._dispatch(shard_id)
        if records and self._shard_lanes is not None and not self._buffers[shard_id]:
            # every record read is handed or filtered out: read on after the last one
            self._shard_lanes.resolve(shard_id, records[-1]["dynamodb"]["SequenceNumber"])
        return len(records)

    def _catch_up(self, shard_id: str, lane: int) -> int:
        """One read by a detached lane's cursor: its records to its queue (``_ShardLanes``)."""
        lanes = self._shard_lanes
        assert lanes is not None
        cursor = lanes.cursor(shard_id, lane)
        if cursor.iterator is None:
            cursor.iterator = self._open_iterator(shard_id, cursor.after, cursor.first)
        limit = min(self.settings.batch_size * self._lanes, MAX_RECORDS_PER_READ)
        try:
            page = read_page(self.streams, cursor.iterator, limit=limit)
        except ClientError as exc:
            if error_code(exc) in {"ExpiredIteratorException", "TrimmedDataAccessException"}:
                cursor.iterator = None
                return 0
            raise
        read: list[tuple[str, dict[str, Any] | None]] = []
        for raw in page.records:
            record = to_lambda_record(raw, self.stream_arn)
            mine = _lane(record, self._lanes, self._partition_key) == lane and matches_any(
                self.settings.filter_patterns, record
            )
            read.append((record["dynamodb"]["SequenceNumber"], record if mine else None))
        lanes.catch_up(shard_id, lane, read, page.next_iterator)
        return len(page.records)

    def _window_over(self, shard_id: str) -> bool:
        """Whether the shard's batching window has run out. It begins when the previous
        invocation completes (AWS, for streams), so a record arriving after a quiet spell
        is sent by the poll that reads it, and records arriving while the function works,
        or within the window after it, are gathered; a poll that reads nothing ends
        nothing."""
        began = self._window_start.get(shard_id, self._started)
        return self._clock() - began >= self.settings.max_batching_window_s

    def _dispatch(self, shard_id: str) -> None:
        batch = self._buffers.get(shard_id) or []
        self._buffers[shard_id] = []
        self._buffer_bytes[shard_id] = 0
        if batch:
            self._deliver_read(shard_id, batch)
            self._window_start[shard_id] = self._clock()

    def _send_buffered(self) -> None:
        for shard_id, buffer in list(self._buffers.items()):
            if buffer:
                self._dispatch(shard_id)

    def flush(self, stop: threading.Event | None = None) -> None:
        """Deliver whatever is buffered (on shutdown); with stream shards, wait until every
        lane is done, its cursor's records (``_ShardLanes``) read and delivered too, or
        until ``stop`` is set: then they stop as on a stop while polling."""
        self._send_buffered()
        if self._shard_lanes is not None:
            while not self._shard_lanes.wait(stop):
                for shard_id, lane in self._shard_lanes.ready():
                    self._catch_up(shard_id, lane)
            if stop is not None and stop.is_set():
                self._shard_lanes.stop()

    # -- delivery, retries, bisect ----------------------------------------------------

    def _deliver_read(self, shard_id: str, records: list[dict[str, Any]]) -> None:
        """Deliver what was read from a shard: one batch, or with lanes one per lane, at once
        (or, emulating stream shards, queued to theirs, delivered by their workers)."""
        if self._shard_lanes is not None:
            self._shard_lanes.queue(
                shard_id,
                [(_lane(r, self._lanes, self._partition_key), r) for r in records],
            )
            return
        if self._lane_pool is None:
            self._deliver(shard_id, records)
            return
        lanes: list[list[dict[str, Any]]] = [[] for _ in range(self._lanes)]
        for record in records:
            lanes[_lane(record, self._lanes, self._partition_key)].append(record)
        futures = [
            self._lane_pool.submit(self._deliver_lane, shard_id, lane) for lane in lanes if lane
        ]
        failures = []
        for future in futures:  # every lane finishes before anything is checkpointed
            try:
                future.result()
            except BaseException as exc:
                failures.append(exc)
        if failures:
            raise failures[0]
        self._checkpoint(shard_id, records[-1])

    def _deliver_lane(self, shard_id: str, records: list[dict[str, Any]]) -> None:
        size = self.settings.batch_size
        for start in range(0, len(records), size):
            self._deliver(shard_id, records[start : start + size], checkpoint=False)

    def _invoke(self, records: Sequence[dict[str, Any]]) -> int | None:
        """Invoke once; None when every record succeeded, else the first failed index."""
        self._count(invocations=1, records_delivered=len(records))
        try:
            response = self.handler({"Records": list(records)}, LocalLambdaContext())
        except Exception as exc:
            log.warning("stream handler raised: %r", exc)
            raise _FunctionError(str(exc)) from exc
        if not self.settings.report_batch_item_failures or not response:
            return None
        failures = response.get("batchItemFailures") if isinstance(response, Mapping) else None
        if not failures:
            return None
        self._count(partial_failures=1)
        position = {r["dynamodb"]["SequenceNumber"]: i for i, r in enumerate(records)}
        indexes = []
        for failure in failures:
            identifier = failure.get("itemIdentifier") if isinstance(failure, Mapping) else None
            if not isinstance(identifier, str) or identifier not in position:
                return 0  # an empty or unknown identifier fails the whole batch, as on AWS
            indexes.append(position[identifier])
        return min(indexes)

    def _too_old(self, record: Mapping[str, Any]) -> bool:
        limit = self.settings.max_record_age_s
        if limit is None or limit < 0:
            return False
        created = record["dynamodb"].get("ApproximateCreationDateTime")
        return created is not None and time.time() - float(created) > limit

    def _expired(self, records: Sequence[dict[str, Any]]) -> int:
        """How many records at the front of a batch are past the maximum record age: AWS
        discards those (to the on-failure destination) and still delivers the fresh ones
        behind them. A shard's records are in creation order, so the expired ones lead."""
        count = 0
        while count < len(records) and self._too_old(records[count]):
            count += 1
        return count

    def _deliver(
        self,
        shard_id: str,
        records: list[dict[str, Any]],
        checkpoint: bool = True,
        handled: Callable[[Mapping[str, Any]], None] | None = None,
        abandon: Callable[[], bool] | None = None,
    ) -> None:
        """Invoke until every record succeeded or was given up on.

        As recorded against AWS (tests/integration/test_poller_conformance.py): a failure
        reported behind successful records splits the batch there, and the rest goes on as
        a batch of its own, not as a retry; a failure of the whole batch (or of its first
        record) is a retry; -1 retries means until the record expires.

        ``handled`` is told each time every record up to one is handled (succeeded or sent
        to the on-failure destination), as the checkpoint is: a stream shard's lane then
        delivers only the rest again when this raises. Once ``abandon()`` is true (a stop),
        the batch is given up on before its next invocation or send (``_Abandoned``).
        """
        pending: deque[_Part] = deque([_Part(records)])
        limit = self.settings.retry_attempts
        failed = False
        while pending:
            if abandon is not None and abandon():
                raise _Abandoned()
            if failed and abandon is None and self._stop is not None and self._stop.is_set():
                raise _Abandoned()  # a stop waits for a batch in flight, not its retries
            part = pending.popleft()
            expired = self._expired(part.records)
            if expired:
                self._send_to_failure_destination(
                    shard_id,
                    part.records[:expired],
                    "RecordAgeExceeded",
                    part,
                    checkpoint,
                    handled,
                )
                part.records = part.records[expired:]
                if not part.records:
                    continue
            try:
                failed_at = self._invoke(part.records)
                part.function_error = None
            except _FunctionError:
                failed = True
                self._count(function_errors=1)
                part.function_error = "Unhandled"
                if self.settings.bisect_on_error and len(part.records) > 1:
                    middle = len(part.records) // 2
                    # Halves go back in order; a split does not count as a retry (AWS).
                    for half in (part.records[middle:], part.records[:middle]):
                        pending.appendleft(_Part(half, part.attempts, part.function_error))
                    continue
                failed_at = 0
            if failed_at is None:
                if checkpoint:
                    self._checkpoint(shard_id, part.records[-1])
                if handled is not None:
                    handled(part.records[-1])
                continue
            failed = True
            if failed_at > 0:
                if checkpoint:
                    self._checkpoint(shard_id, part.records[failed_at - 1])
                if handled is not None:
                    handled(part.records[failed_at - 1])
                part.records = part.records[failed_at:]
                pending.appendleft(part)
                continue
            part.attempts += 1
            if 0 <= limit < part.attempts:
                self._send_to_failure_destination(
                    shard_id, part.records, "RetryAttemptsExhausted", part, checkpoint, handled
                )
                continue
            self._count(retries=1)
            backoff = self.retry_base_delay_s * min(2 ** (part.attempts - 1), 16)
            self._sleep(backoff * random.uniform(1, 1.5))
            pending.appendleft(part)

    def _wait_between_retries(self, seconds: float) -> None:
        if self._shard_lanes is None and self._stop is not None:
            self._stop.wait(seconds)
        else:
            self._halt.wait(seconds)

    def _checkpoint(self, shard_id: str, record: Mapping[str, Any]) -> None:
        self.checkpoints.put(self.stream_arn, shard_id, record["dynamodb"]["SequenceNumber"])

    def _send_to_failure_destination(
        self,
        shard_id: str,
        records: Sequence[dict[str, Any]],
        condition: str,
        part: _Part,
        checkpoint: bool,
        handled: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        """Only metadata, never the records: a redrive reads the intake table (as on AWS).
        ``part``: its failed invocations and how the last one failed; ``checkpoint``: False
        inside a lane (the lanes' batch is checkpointed once every lane is done);
        ``handled``: told once the message is sent (``_deliver``)."""
        self._count(sent_to_failure_destination=len(records))

        def arrival(record: Mapping[str, Any]) -> str:
            created = record["dynamodb"].get("ApproximateCreationDateTime") or time.time()
            return datetime.fromtimestamp(float(created), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        message = {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": LocalLambdaContext().invoked_function_arn,
                "condition": condition,
                # The failed invocations of the batch given up on (retries + 1).
                "approximateInvokeCount": part.attempts,
            },
            "responseContext": {
                "statusCode": 200,
                "executedVersion": "$LATEST",
                # "Unhandled" when the function raised; null when it reported failures.
                "functionError": part.function_error,
            },
            "version": "1.0",
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "DDBStreamBatchInfo": {
                "shardId": shard_id,
                "startSequenceNumber": records[0]["dynamodb"]["SequenceNumber"],
                "endSequenceNumber": records[-1]["dynamodb"]["SequenceNumber"],
                "approximateArrivalOfFirstRecord": arrival(records[0]),
                "approximateArrivalOfLastRecord": arrival(records[-1]),
                "batchSize": len(records),
                "streamArn": self.stream_arn,
            },
        }
        log.error("batch sent to the on-failure destination: %s", json.dumps(message))
        if self.sqs is not None and self.failure_queue_url:
            self.sqs.send_message(QueueUrl=self.failure_queue_url, MessageBody=json.dumps(message))
        if checkpoint:
            self._checkpoint(shard_id, records[-1])
        if handled is not None:
            handled(records[-1])

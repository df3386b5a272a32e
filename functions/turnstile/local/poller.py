"""``StreamPoller``: Lambda's DynamoDB event source mapping, for the local stack.

It reads a stream through the public DynamoDB Streams API (so it works against any
endpoint), and invokes a handler the way Lambda does: batch size, batching window,
filters, bounded retries, bisect on function error, partial batch failures (checkpoint at
the lowest failed sequence number), a maximum record age, and an on-failure destination
(an SQS queue, messages shaped as AWS's). Checkpoints survive a crash, in a file.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from turnstile.contract import STREAM_SOURCE, EventSourceSettings

__all__ = [
    "CheckpointStore",
    "LocalLambdaContext",
    "StreamPoller",
    "matches_filter",
    "to_lambda_record",
]

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]


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


def to_lambda_record(record: Mapping[str, Any], stream_arn: str) -> dict[str, Any]:
    """A GetRecords record (as boto3 returns it) in the form Lambda delivers it."""
    stream = dict(record.get("dynamodb", {}))
    created = stream.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        stream["ApproximateCreationDateTime"] = int(created.timestamp())
    for key in ("Keys", "NewImage", "OldImage"):
        if key in stream:
            stream[key] = _typed_value(stream[key])
    out = {
        "eventID": record.get("eventID"),
        "eventName": record.get("eventName"),
        "eventVersion": record.get("eventVersion", "1.1"),
        "eventSource": record.get("eventSource", "aws:dynamodb"),
        "awsRegion": record.get("awsRegion"),
        "dynamodb": stream,
        "eventSourceARN": stream_arn,
    }
    if "userIdentity" in record:
        out["userIdentity"] = dict(record["userIdentity"])
    return out


def matches_filter(pattern: Mapping[str, Any], value: Any) -> bool:
    """Lambda event filtering, the subset turnstile uses: exact values, ``exists``, nesting."""
    for key, expected in pattern.items():
        present = isinstance(value, Mapping) and key in value
        actual = value.get(key) if present else None
        if isinstance(expected, Mapping):
            if not present or not matches_filter(expected, actual):
                return False
            continue
        options = expected if isinstance(expected, list) else [expected]
        ok = False
        for option in options:
            if isinstance(option, Mapping) and "exists" in option:
                ok = ok or (present == bool(option["exists"]))
            elif present and actual == option:
                ok = True
        if not ok:
            return False
    return True


@dataclass
class LocalLambdaContext:
    """What Powertools and handlers read from a Lambda context object."""

    function_name: str = "turnstile-stream-processor"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    timeout_s: int = 60
    aws_request_id: str = ""
    log_group_name: str = "/aws/lambda/turnstile-stream-processor"
    log_stream_name: str = "local"

    def __post_init__(self) -> None:
        self.aws_request_id = self.aws_request_id or str(uuid.uuid4())
        self._deadline = time.monotonic() + self.timeout_s

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


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

    def get(self, stream_arn: str, shard_id: str) -> str | None:
        with self._lock:
            return self._load().get(stream_arn, {}).get(shard_id)

    def put(self, stream_arn: str, shard_id: str, sequence_number: str) -> None:
        with self._lock:
            data = self._load()
            data.setdefault(stream_arn, {})[shard_id] = sequence_number
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".checkpoints")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)

    def clear(self, stream_arn: str) -> None:
        with self._lock:
            data = self._load()
            if data.pop(stream_arn, None) is not None:
                self.path.write_text(json.dumps(data, indent=1))


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


class _FunctionError(Exception):
    """The handler raised, or answered with something Lambda counts as a failure."""


@dataclass
class _ShardState:
    shard_id: str
    iterator: str | None
    parent_id: str | None
    closed: bool = False
    ended: bool = False


class StreamPoller:
    """Feeds a DynamoDB stream to ``handler`` as Lambda's event source mapping does."""

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
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.handler = handler
        self.streams = streams_client
        self.stream_arn = stream_arn
        self.checkpoints = checkpoints
        self.sqs = sqs_client
        self.failure_queue_url = failure_queue_url
        self.settings = settings
        self.retry_base_delay_s = retry_base_delay_s
        self._sleep = sleep
        self.stats = PollerStats()
        self._shards: dict[str, _ShardState] = {}
        self._buffers: dict[str, list[dict[str, Any]]] = {}
        self._buffer_started: dict[str, float] = {}
        if from_start:
            checkpoints.clear(stream_arn)
        self.polling = threading.Event()

    # -- shard discovery --------------------------------------------------------------

    def _refresh_shards(self) -> None:
        description = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        for shard in description.get("Shards", []):
            shard_id = shard["ShardId"]
            state = self._shards.get(shard_id)
            if state is None:
                self._shards[shard_id] = _ShardState(
                    shard_id=shard_id,
                    iterator=None,
                    parent_id=shard.get("ParentShardId"),
                    closed="EndingSequenceNumber" in shard.get("SequenceNumberRange", {}),
                )

    def _iterator(self, state: _ShardState) -> str | None:
        if state.iterator is None and not state.ended:
            checkpoint = self.checkpoints.get(self.stream_arn, state.shard_id)
            kwargs: dict[str, Any] = {"StreamArn": self.stream_arn, "ShardId": state.shard_id}
            if checkpoint:
                kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=checkpoint)
            else:
                kwargs["ShardIteratorType"] = self.settings.starting_position
            state.iterator = self.streams.get_shard_iterator(**kwargs)["ShardIterator"]
        return state.iterator

    # -- the loop ---------------------------------------------------------------------

    def run(self, stop: threading.Event, until_idle_s: float | None = None) -> None:
        """Poll until ``stop`` is set (or the stream was quiet for ``until_idle_s``).

        Errors talking to the endpoint are logged and retried from the checkpoint.
        """
        quiet_since = time.monotonic()
        while not stop.is_set():
            invoked = self.stats.invocations
            try:
                got = self.poll_once()
            except Exception:
                log.exception("stream poll failed; retrying from the checkpoint")
                got = 0
                for state in self._shards.values():
                    state.iterator = None
                self._buffers.clear()
                stop.wait(1.0)
                # A stream that could not be read is not a quiet one: only polls that
                # read it count towards idleness.
                quiet_since = time.monotonic()
                continue
            # A poll that read nothing may still have delivered a buffered batch: the time
            # its handler took is work, not quiet.
            if got or self.stats.invocations != invoked:
                quiet_since = time.monotonic()
            elif until_idle_s is not None and time.monotonic() - quiet_since >= until_idle_s:
                break
            else:
                stop.wait(self.settings.poll_interval_s)
        self.flush()

    def poll_once(self) -> int:
        """One GetRecords per readable shard, delivering batches that are ready."""
        if not self._shards or self.stats.polls % 40 == 0:
            self._refresh_shards()
        self.stats.polls += 1
        got = 0
        for state in list(self._shards.values()):
            parent = self._shards.get(state.parent_id or "")
            if state.ended or (parent is not None and not parent.ended):
                continue  # a child shard waits for its parent: order per key
            got += self._poll_shard(state)
        self.polling.set()
        return got

    def _poll_shard(self, state: _ShardState) -> int:
        iterator = self._iterator(state)
        if iterator is None:
            return 0
        buffer = self._buffers.setdefault(state.shard_id, [])
        room = max(1, self.settings.batch_size - len(buffer))
        try:
            response = self.streams.get_records(ShardIterator=iterator, Limit=min(room, 1000))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in {
                "ExpiredIteratorException",
                "TrimmedDataAccessException",
            }:
                state.iterator = None
                self._buffers[state.shard_id] = []
                return 0
            raise
        records = response.get("Records", [])
        state.iterator = response.get("NextShardIterator")
        if state.iterator is None:
            state.ended = True
        last_dropped: str | None = None
        for raw in records:
            record = to_lambda_record(raw, self.stream_arn)
            if any(matches_filter(p, record) for p in self.settings.filter_patterns):
                if not buffer:
                    self._buffer_started[state.shard_id] = time.monotonic()
                buffer.append(record)
            else:
                self.stats.records_filtered += 1
                last_dropped = record["dynamodb"]["SequenceNumber"]
        if last_dropped and not buffer:
            self.checkpoints.put(self.stream_arn, state.shard_id, last_dropped)
        window_over = (
            time.monotonic() - self._buffer_started.get(state.shard_id, 0.0)
            >= self.settings.max_batching_window_s
        )
        if buffer and (
            len(buffer) >= self.settings.batch_size or window_over or state.ended or not records
        ):
            self._buffers[state.shard_id] = []
            self._deliver(state.shard_id, buffer)
        return len(records)

    def flush(self) -> None:
        """Deliver whatever is buffered (on shutdown)."""
        for shard_id, buffer in list(self._buffers.items()):
            if buffer:
                self._buffers[shard_id] = []
                self._deliver(shard_id, buffer)

    # -- delivery, retries, bisect ----------------------------------------------------

    def _invoke(self, records: Sequence[dict[str, Any]]) -> int | None:
        """Invoke once; None when every record succeeded, else the first failed index."""
        self.stats.invocations += 1
        self.stats.records_delivered += len(records)
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
        self.stats.partial_failures += 1
        position = {r["dynamodb"]["SequenceNumber"]: i for i, r in enumerate(records)}
        indexes = []
        for failure in failures:
            identifier = failure.get("itemIdentifier") if isinstance(failure, Mapping) else None
            if not identifier or identifier not in position:
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

    def _deliver(self, shard_id: str, records: list[dict[str, Any]]) -> None:
        pending: deque[tuple[list[dict[str, Any]], int]] = deque([(records, 0)])
        while pending:
            part, attempts = pending.popleft()
            expired = self._expired(part)
            if expired:
                self._send_to_failure_destination(
                    shard_id, part[:expired], "RecordAgeExceeded", attempts
                )
                part = part[expired:]
                if not part:
                    continue
            try:
                failed_at = self._invoke(part)
            except _FunctionError:
                self.stats.function_errors += 1
                if self.settings.bisect_on_error and len(part) > 1:
                    middle = len(part) // 2
                    # Halves go back in order; a split does not count as a retry (AWS).
                    pending.appendleft((part[middle:], attempts))
                    pending.appendleft((part[:middle], attempts))
                    continue
                failed_at = 0
            if failed_at is None:
                self._checkpoint(shard_id, part[-1])
                continue
            if failed_at > 0:
                self._checkpoint(shard_id, part[failed_at - 1])
            rest = part[failed_at:]
            attempts += 1
            if attempts > self.settings.retry_attempts:
                self._send_to_failure_destination(
                    shard_id, rest, "RetryAttemptsExhausted", attempts
                )
                continue
            self.stats.retries += 1
            backoff = self.retry_base_delay_s * min(2 ** (attempts - 1), 16)
            self._sleep(backoff * random.uniform(1, 1.5))
            pending.appendleft((rest, attempts))

    def _checkpoint(self, shard_id: str, record: Mapping[str, Any]) -> None:
        self.checkpoints.put(self.stream_arn, shard_id, record["dynamodb"]["SequenceNumber"])

    def _send_to_failure_destination(
        self, shard_id: str, records: Sequence[dict[str, Any]], condition: str, attempts: int
    ) -> None:
        """Only metadata, never the records: a redrive reads the intake table (as on AWS)."""
        self.stats.sent_to_failure_destination += len(records)

        def arrival(record: Mapping[str, Any]) -> str:
            created = record["dynamodb"].get("ApproximateCreationDateTime") or time.time()
            return datetime.fromtimestamp(float(created), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

        message = {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": LocalLambdaContext().invoked_function_arn,
                "condition": condition,
                # Invocations of these records so far (AWS counts invocations, not retries).
                "approximateInvokeCount": attempts,
            },
            "responseContext": {
                "statusCode": 200,
                "executedVersion": "$LATEST",
                "functionError": "Unhandled",
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
        self._checkpoint(shard_id, records[-1])

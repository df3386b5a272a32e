"""Attacks on the emulated stream shards' lanes (``StreamPoller(stream_shards=N)``,
``_ShardLanes``: a lane holds four batches, a full one is detached and read again by a
cursor of its own; commits 0a1afa2, a93bfe9, e8d610f).

Every test here runs the poller's own loop (``StreamPoller.run``) one poll at a time: its
``stop`` is a ``Stepper`` the test advances, and after each step the test waits until every
lane is either idle or inside its handler (``Harness.settle``), so what a lane is handed
never depends on timing. The stream is ``FakeStream``, one DynamoDB Streams shard in memory
(the three calls the poller makes), so a test can fail a read, hold thousands of records
and age them; a few attacks run on moto's stream as well. An ``Oracle`` watches every
invocation, every on-failure message and every checkpoint written, and holds the
properties of Lambda's per-shard processing against them as they happen:

* each invocation of a lane (and each on-failure message) is the lane's next records, in
  stream order, from its oldest record not yet handled in this run: nothing is skipped,
  reordered or handled twice, and a failed record is retried before anything after it;
  a new run (after a stop or a crash) starts from the checkpoint it finds;
* a checkpoint written is never past a record not yet handled (a crash at that moment
  loses nothing), and never behind the one before it;
* a message to the on-failure destination holds only records that failed as often as the
  retries allow (or were older than the maximum record age), each once;
* at the end every record was handled; memory held per lane stays within its bound.

A bug still open is an ``xfail`` naming its cause, not strict. The passing tests pin what
held under attack, or a bug fixed since (each shown to fail with the bug put back).
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
import threading
import time
import types
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

import turnstile_tools.local.poller as poller_module
from turnstile.base.contract import INTAKE_TABLE, STREAM_SOURCE
from turnstile_tools.local.poller import CheckpointStore, StreamPoller, _lane

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/intake/stream/2026-01-01T00:00:00.000"
SHARD = "shardId-00000001700000000000-00000001"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/turnstile-stream-failures"
#: Long enough for any wait on a busy machine; a test that waits this long has failed.
PATIENCE_S = 30.0


def lane_of(key: str, lanes: int) -> int:
    return _lane({"dynamodb": {"Keys": {"event_id": {"S": key}}}}, lanes, "event_id")


def keys_by_lane(lanes: int, per_lane: int) -> list[list[str]]:
    """``per_lane`` partition keys in each of ``lanes`` lanes."""
    found: list[list[str]] = [[] for _ in range(lanes)]
    for i in itertools.count():
        key = f"ev{i}"
        lane = lane_of(key, lanes)
        if len(found[lane]) < per_lane:
            found[lane].append(key)
        if all(len(k) == per_lane for k in found):
            return found
    raise AssertionError("unreachable")


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Until ``condition`` holds; a failure after PATIENCE_S (never a timing decision)."""
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {PATIENCE_S:.0f} s"
        time.sleep(0.001)


# -- the world: a clock, a stream, the on-failure queue -------------------------------------


class Clock:
    """The wall clock the poller ages records by (``time.time`` in poller.py): the real one,
    moved on by ``advance``."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@contextmanager
def poller_clock(clock: Clock) -> Iterator[None]:
    shim = types.SimpleNamespace(
        time=clock.time, monotonic=time.monotonic, sleep=time.sleep, clock=clock
    )
    saved = poller_module.time
    poller_module.time = shim  # type: ignore[assignment]
    try:
        yield
    finally:
        poller_module.time = saved


class FakeStream:
    """A DynamoDB stream in memory, as DescribeStream, GetShardIterator and GetRecords serve
    it: sequence numbers of 21 digits, growing; records written to the open shard; ``split``
    closes it and opens a child (a closed shard's last page has no next iterator).
    ``fail_reads`` GetRecords to come fail (the service's InternalServerError, or
    ``fail_code``), and so do the reads numbered in ``fail_at`` (``reads`` counts them)."""

    arn = ARN

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        #: Per shard, in order: its id, parent, whether closed, records and their numbers.
        self.shards: list[dict[str, Any]] = []
        self.shard_of: dict[int, str] = {}
        self.written = 0
        self.fail_reads = 0
        self.fail_code = "InternalServerError"
        #: Reads (by their number: ``reads`` once they are counted) that fail.
        self.fail_at: set[int] = set()
        self.reads = 0
        self._open(None)

    def _open(self, parent: str | None) -> None:
        shard_id = f"shardId-{17 + len(self.shards):011d}000000000-{len(self.shards):08x}"
        self.shards.append(
            {"id": shard_id, "parent": parent, "closed": False, "records": [], "numbers": []}
        )

    @property
    def shard_id(self) -> str:
        """The first shard's (a stream that never splits has no other)."""
        return str(self.shards[0]["id"])

    def split(self) -> None:
        with self.lock:
            self.shards[-1]["closed"] = True
            self._open(self.shards[-1]["id"])

    def write(self, key: str, signup: str, kind: str = "keep", blob: int = 0) -> int:
        with self.lock:
            number = 100_000_000_000_000_000_000 + 7 * self.written
            self.written += 1
            keys = {"event_id": {"S": key}, "signup_id": {"S": signup}}
            image = {**keys, "kind": {"S": kind}}
            if blob:
                image["blob"] = {"S": "x" * blob}
            shard = self.shards[-1]
            shard["records"].append(
                {
                    "eventID": f"e{self.written}",
                    "eventName": "INSERT",
                    "eventVersion": "1.1",
                    "eventSource": "aws:dynamodb",
                    "awsRegion": "us-east-1",
                    "dynamodb": {
                        "ApproximateCreationDateTime": datetime.fromtimestamp(
                            self.clock.time(), UTC
                        ),
                        "Keys": keys,
                        "NewImage": image,
                        "SequenceNumber": str(number),
                        "SizeBytes": 40 + blob,
                        "StreamViewType": "NEW_AND_OLD_IMAGES",
                    },
                }
            )
            shard["numbers"].append(number)
            self.shard_of[number] = shard["id"]
            return number

    def _shard(self, shard_id: str) -> dict[str, Any]:
        return next(s for s in self.shards if s["id"] == shard_id)

    def describe_stream(self, StreamArn: str) -> dict[str, Any]:
        with self.lock:
            shards = []
            for shard in self.shards:
                numbers = shard["numbers"] or [100_000_000_000_000_000_000]
                described: dict[str, Any] = {
                    "ShardId": shard["id"],
                    "SequenceNumberRange": {"StartingSequenceNumber": str(numbers[0])},
                }
                if shard["closed"]:
                    described["SequenceNumberRange"]["EndingSequenceNumber"] = str(numbers[-1])
                if shard["parent"]:
                    described["ParentShardId"] = shard["parent"]
                shards.append(described)
        return {"StreamDescription": {"Shards": shards}}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        kind = kwargs["ShardIteratorType"]
        with self.lock:
            numbers = self._shard(kwargs["ShardId"])["numbers"]
            if kind == "TRIM_HORIZON":
                at = 0
            elif kind == "LATEST":
                at = len(numbers)
            elif kind == "AT_SEQUENCE_NUMBER":
                at = bisect.bisect_left(numbers, int(kwargs["SequenceNumber"]))
            elif kind == "AFTER_SEQUENCE_NUMBER":
                at = bisect.bisect_right(numbers, int(kwargs["SequenceNumber"]))
            else:
                raise AssertionError(kind)
        return {"ShardIterator": f"{kwargs['ShardId']}|{at}"}

    def get_records(self, ShardIterator: str, Limit: int = 1000) -> dict[str, Any]:
        shard_id, at_text = ShardIterator.split("|")
        at = int(at_text)
        with self.lock:
            self.reads += 1
            if self.fail_reads or self.reads in self.fail_at:
                self.fail_reads -= self.fail_reads > 0
                raise ClientError(
                    {"Error": {"Code": self.fail_code, "Message": "injected"}}, "GetRecords"
                )
            shard = self._shard(shard_id)
            page = shard["records"][at : at + Limit]
            end = at + len(page)
            if shard["closed"] and end >= len(shard["records"]):
                return {"Records": page}
        return {"Records": page, "NextShardIterator": f"{shard_id}|{end}"}


class MotoStream:
    """moto's intake stream (the ``aws`` fixture's), written with PutItem; reads counted,
    and failed as FakeStream's are."""

    def __init__(self, aws: Any) -> None:
        from turnstile_tools.stream_reader import list_shards, read_page, shard_iterator

        self._read_page = read_page
        self.client = aws.client("dynamodb")
        self.streams = aws.client("dynamodbstreams")
        table = self.client.describe_table(TableName=INTAKE_TABLE.name)["Table"]
        self.arn = table["LatestStreamArn"]
        self.shard_id = list_shards(self.streams, self.arn)[0].shard_id
        self._iterator = shard_iterator(self.streams, self.arn, self.shard_id, "TRIM_HORIZON")
        self.lock = threading.Lock()
        self.fail_reads = 0
        self.fail_at: set[int] = set()
        self.reads = 0
        self.shard_of: dict[int, str] = {}

    def write(self, key: str, signup: str, kind: str = "keep", blob: int = 0) -> int:
        item = {"event_id": {"S": key}, "signup_id": {"S": signup}, "kind": {"S": kind}}
        if blob:
            item["blob"] = {"S": "x" * blob}
        self.client.put_item(TableName=INTAKE_TABLE.name, Item=item)
        page = self._read_page(self.streams, self._iterator)
        self._iterator = page.next_iterator
        assert len(page.records) == 1, page.records
        number = int(page.records[0]["dynamodb"]["SequenceNumber"])
        self.shard_of[number] = self.shard_id
        return number

    def describe_stream(self, **kwargs: Any) -> Any:
        return self.streams.describe_stream(**kwargs)

    def get_shard_iterator(self, **kwargs: Any) -> Any:
        return self.streams.get_shard_iterator(**kwargs)

    def get_records(self, **kwargs: Any) -> Any:
        with self.lock:
            self.reads += 1
            if self.fail_reads or self.reads in self.fail_at:
                self.fail_reads -= self.fail_reads > 0
                raise ClientError(
                    {"Error": {"Code": "InternalServerError", "Message": "injected"}},
                    "GetRecords",
                )
        return self.streams.get_records(**kwargs)


# -- what happened, and the properties held against it --------------------------------------


class Oracle:
    """Every record written, and what one run after another (a generation: a poller from
    its start to its stop or crash) did with them; ``violations`` each property broken."""

    def __init__(self, lanes: int, retry_attempts: int, max_record_age_s: int) -> None:
        self.lanes = lanes
        self.retry_attempts = retry_attempts
        self.max_record_age_s = max_record_age_s
        self.lock = threading.Lock()
        self.lane: dict[int, int] = {}
        self.key: dict[int, str] = {}
        self.created: dict[int, float] = {}
        self.order: list[list[int]] = [[] for _ in range(lanes)]
        self.position: dict[int, int] = {}
        #: Each record's stream shard (a real one), and each shard's records in order.
        self.shard: dict[int, str] = {}
        self.in_shard: dict[str, list[int]] = {}
        #: Records the filter drops: never delivered, handled as written.
        self.filtered: set[int] = set()
        self.handled_ever: set[int] = set()
        self.violations: list[str] = []
        self.generation = 0
        #: Per shard, the checkpoint the generation started from.
        self.start: dict[str, int] = {}
        self.handled: set[int] = set()
        self.next_index = [0] * lanes  # where each lane's oldest record not handled is
        self.failures: Counter[int] = Counter()
        self.invocations: list[tuple[int, int, list[int], Any]] = []
        self.messages: list[tuple[int, str, list[int]]] = []
        self.puts: list[int] = []
        self.last_put: dict[str, int] = {}

    def written(
        self, number: int, key: str, created: float, shard: str, passes: bool = True
    ) -> None:
        with self.lock:
            lane = lane_of(key, self.lanes)
            self.lane[number], self.key[number], self.created[number] = lane, key, created
            self.shard[number] = shard
            self.in_shard.setdefault(shard, []).append(number)
            if not passes:
                self.filtered.add(number)
                self.handled_ever.add(number)
                return
            self.position[number] = len(self.order[lane])
            self.order[lane].append(number)

    def _before_start(self, number: int) -> bool:
        start = self.start.get(self.shard[number])
        return start is not None and number <= start

    def last_written(self) -> int | None:
        with self.lock:
            return max(self.lane, default=None)

    def new_generation(self, checkpoints: dict[str, str]) -> None:
        """A new run, from ``checkpoints`` (the file's, per shard)."""
        with self.lock:
            self.generation += 1
            self.start = {shard: int(number) for shard, number in checkpoints.items()}
            assert self.start == self.last_put, (self.start, self.last_put)
            self.handled = set()
            self.failures = Counter()
            self.next_index = [0] * self.lanes
            for lane in range(self.lanes):
                self._skip_handled(lane)

    def _skip_handled(self, lane: int) -> None:
        order = self.order[lane]
        i = self.next_index[lane]
        while i < len(order) and (order[i] in self.handled or self._before_start(order[i])):
            i += 1
        self.next_index[lane] = i

    def _next_run(self, what: str, numbers: list[int]) -> bool:
        """Whether ``numbers`` are their lane's next records from its oldest not handled."""
        lane = self.lane[numbers[0]]
        self._skip_handled(lane)
        i = self.next_index[lane]
        expected = self.order[lane][i : i + len(numbers)]
        if numbers != expected:
            self.violations.append(
                f"generation {self.generation}: {what} {self._names(numbers)} in lane {lane},"
                f" whose next records are {self._names(expected)}"
            )
            return False
        return True

    def _names(self, numbers: list[int]) -> str:
        return "[" + ", ".join(f"{self.key.get(n, '?')}#{n % 100_000}" for n in numbers) + "]"

    def invoked(self, numbers: list[int], outcome: Any) -> None:
        """An invocation answered ``outcome``: "ok", "raise", or the index of the first
        record reported failed (every record before it succeeded)."""
        with self.lock:
            self.invocations.append((self.generation, self.lane[numbers[0]], numbers, outcome))
            self._next_run("an invocation of", numbers)
            succeeded = len(numbers) if outcome == "ok" else 0 if outcome == "raise" else outcome
            for number in numbers[:succeeded]:
                self.handled.add(number)
                self.handled_ever.add(number)
            for number in numbers[succeeded:]:
                self.failures[number] += 1

    def sent(self, message: dict[str, Any]) -> None:
        """A message the on-failure destination received."""
        info = message["DDBStreamBatchInfo"]
        condition = message["requestContext"]["condition"]
        with self.lock:
            first, last = int(info["startSequenceNumber"]), int(info["endSequenceNumber"])
            lane = self.lane[first]
            order = self.order[lane]
            numbers = order[self.position[first] : self.position[last] + 1]
            self.messages.append((self.generation, condition, numbers))
            if len(numbers) != info["batchSize"]:
                self.violations.append(f"a message of {info['batchSize']} for {numbers}")
            self._next_run(f"a message ({condition}) for", numbers)
            for number in numbers:
                if condition == "RetryAttemptsExhausted":
                    if self.failures[number] < self.retry_attempts + 1:
                        self.violations.append(
                            f"{self._names([number])} sent after {self.failures[number]}"
                            " failed invocations"
                        )
                elif condition == "RecordAgeExceeded":
                    age = poller_module.time.time() - self.created[number]
                    if age <= self.max_record_age_s:
                        self.violations.append(f"{self._names([number])} sent at age {age}")
                else:
                    self.violations.append(f"a message's condition {condition}")
                self.handled.add(number)
                self.handled_ever.add(number)

    def checkpointed(self, shard: str, number: int) -> None:
        """A shard's checkpoint about to be written: neither past a record of the shard not
        handled (a crash now would lose it) nor behind the last one."""
        with self.lock:
            self.puts.append(number)
            last = self.last_put.get(shard)
            if last is not None and number < last:
                self.violations.append(f"the checkpoint went back: {last} to {number}")
            self.last_put[shard] = number
            numbers = self.in_shard.get(shard, [])
            lost = [
                n
                for n in numbers[: bisect.bisect_right(numbers, number)]
                if n not in self.handled_ever
            ]
            if lost:
                self.violations.append(
                    f"generation {self.generation}: checkpoint {number % 100_000} past"
                    f" {self._names(sorted(lost))}, never handled"
                )

    def unhandled(self, lanes: Any = None) -> list[int]:
        """Records (of ``lanes``, or any) handled neither in this run nor before its start."""
        with self.lock:
            return [
                n
                for lane, numbers in enumerate(self.order)
                if lanes is None or lane in lanes
                for n in numbers
                if n not in self.handled and not self._before_start(n)
            ]

    def assert_held(self) -> None:
        with self.lock:
            assert self.violations == [], "\n".join(self.violations[:20])


class OracleCheckpoints(CheckpointStore):
    """The checkpoint file, each write shown to the oracle first. ``refuse`` writes to come
    fail (the disk full: -1, every one), ``unreadable`` reads fail; once ``frozen`` (its
    process crashed) nothing more is written."""

    def __init__(self, path: Path, oracle: Oracle) -> None:
        super().__init__(path)
        self.oracle = oracle
        self.guard = threading.Lock()
        self.refuse = 0
        self.refused = 0
        self.unreadable = False
        self.frozen = False

    def get(self, stream_arn: str, shard_id: str) -> str | None:
        if self.unreadable:
            raise OSError(5, "Input/output error")
        return super().get(stream_arn, shard_id)

    def put(self, stream_arn: str, shard_id: str, sequence_number: str) -> None:
        with self.guard:
            if self.frozen:
                return
            if self.refuse:
                self.refuse -= self.refuse > 0
                self.refused += 1
                raise OSError(28, "No space left on device")
            self.oracle.checkpointed(shard_id, int(sequence_number))
            super().put(stream_arn, shard_id, sequence_number)


class FailureQueue:
    """The on-failure destination (SQS SendMessage): while ``down``, every send fails."""

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle
        self._down = False
        self.frozen = False
        self.refused = 0
        #: The lanes refused since the queue last went down (or up).
        self.refused_lanes: set[int] = set()

    @property
    def down(self) -> bool:
        return self._down

    @down.setter
    def down(self, down: bool) -> None:
        self.refused_lanes = set()
        self._down = down

    def send_message(self, QueueUrl: str, MessageBody: str) -> dict[str, Any]:
        if self.frozen:
            return {"MessageId": "lost"}
        if self.down:
            self.refused += 1
            first = int(json.loads(MessageBody)["DDBStreamBatchInfo"]["startSequenceNumber"])
            self.refused_lanes.add(self.oracle.lane[first])
            raise ConnectionError("the queue's endpoint did not answer")
        self.oracle.sent(json.loads(MessageBody))
        return {"MessageId": "m"}


class Gate:
    """The lanes' handler. An invocation of a ``held`` lane waits in ``waiting`` until the
    test answers it (``answer``) or lets the lane go; any other is answered by ``policy``
    at once. Once ``dead`` (its process crashed) an invocation does nothing."""

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle
        self.cv = threading.Condition()
        self.held: set[int] = set()
        self.waiting: dict[int, list[int]] = {}
        self.answers: dict[int, Any] = {}
        self.policy: Callable[[int, list[int]], Any] = lambda lane, numbers: "ok"
        self.dead = False
        self.calls = 0
        self.largest_payload = 0

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        records = event["Records"]
        numbers = [int(r["dynamodb"]["SequenceNumber"]) for r in records]
        lane = self.oracle.lane[numbers[0]]
        size = len(json.dumps(event))
        with self.cv:
            self.calls += 1
            self.largest_payload = max(self.largest_payload, size)
            if self.dead:
                return {"batchItemFailures": []}
            assert lane not in self.waiting, f"two invocations of lane {lane} at once"
            self.waiting[lane] = numbers
            self.cv.notify_all()
            self.cv.wait_for(
                lambda: self.dead or lane in self.answers or lane not in self.held,
                PATIENCE_S,
            )
            del self.waiting[lane]
            self.cv.notify_all()
            if self.dead:
                return {"batchItemFailures": []}
            if lane in self.answers:
                outcome = self.answers.pop(lane)
            elif lane in self.held:
                raise AssertionError(f"lane {lane} held for {PATIENCE_S} s")
            else:
                outcome = self.policy(lane, numbers)
            self.oracle.invoked(numbers, outcome)
        if outcome == "raise":
            raise RuntimeError("the function failed")
        if outcome == "ok":
            return {"batchItemFailures": []}
        return {
            "batchItemFailures": [
                {"itemIdentifier": records[outcome]["dynamodb"]["SequenceNumber"]}
            ]
        }

    def hold(self, *lanes: int) -> None:
        with self.cv:
            self.held.update(lanes)

    def let_go(self, *lanes: int) -> None:
        with self.cv:
            self.held.difference_update(lanes)
            self.cv.notify_all()

    def let_all_go(self) -> None:
        with self.cv:
            self.held.clear()
            self.cv.notify_all()

    def answer(self, lane: int, outcome: Any) -> None:
        with self.cv:
            assert lane in self.waiting, lane
            self.answers[lane] = outcome
            self.cv.notify_all()
            self.cv.wait_for(lambda: lane not in self.answers, PATIENCE_S)

    def kill(self) -> None:
        with self.cv:
            self.dead = True
            self.cv.notify_all()


class Stepper:
    """``StreamPoller.run``'s ``stop``: the loop waits on it after each poll, here until the
    test allows the next one (``step``); ``set`` stops the loop, as a stop does."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.stopped = False
        self.polls = 0
        self.permits = 0

    def is_set(self) -> bool:
        return self.stopped

    def set(self) -> None:
        with self.cv:
            self.stopped = True
            self.cv.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        with self.cv:
            self.polls += 1
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.stopped or self.permits >= self.polls)
            return self.stopped

    def step(self) -> None:
        with self.cv:
            self.permits += 1
            self.cv.notify_all()
            assert self.cv.wait_for(lambda: self.polls > self.permits, PATIENCE_S), "no poll"


class Harness:
    """A poller of ``lanes`` stream shards over a FakeStream (or moto's), run a poll at a
    time; ``restart`` and ``crash`` begin a new generation on the same checkpoint file.
    ``real_backoff``: the poller's own sleep between retries (else none), of
    ``retry_base_delay_s``."""

    def __init__(
        self,
        tmp_path: Path,
        lanes: int,
        batch_size: int = 2,
        retry_attempts: int = 2,
        max_record_age_s: int = 3600,
        clock: Clock | None = None,
        stream: Any = None,
        real_backoff: bool = False,
        retry_base_delay_s: float = 0,
        filtered: bool = False,
        window_s: int = 0,
        **source: Any,
    ) -> None:
        self.path = tmp_path / "checkpoints.json"
        self.lanes = lanes
        # the clock the poller ages records by (the ``clock`` fixture's), if it has one
        self.clock = clock or getattr(poller_module.time, "clock", None) or Clock()
        self.stream = stream if stream is not None else FakeStream(self.clock)
        self.shard_id = self.stream.shard_id
        self.real_backoff = real_backoff
        self.retry_base_delay_s = retry_base_delay_s
        self.oracle = Oracle(lanes, retry_attempts, max_record_age_s)
        #: ``filtered``: records written with a kind other than "keep" are filtered out.
        self.filtered = filtered
        keep = ({"dynamodb": {"NewImage": {"kind": {"S": ["keep"]}}}},)
        self.settings = replace(
            STREAM_SOURCE,
            filter_patterns=keep if filtered else (),
            max_batching_window_s=window_s,
            batch_size=batch_size,
            retry_attempts=retry_attempts,
            max_record_age_s=max_record_age_s,
            **source,
        )
        #: The poller's monotonic clock (its batching window's), moved on by the test.
        self.now = 0.0
        #: How far ``now`` moves on at each poll.
        self.tick = 0.0
        self.poller: StreamPoller
        self.thread: threading.Thread | None = None
        self._begin()

    def _begin(self) -> None:
        self.checkpoints = OracleCheckpoints(self.path, self.oracle)
        self.oracle.new_generation(CheckpointStore(self.path)._load().get(self.stream.arn, {}))
        self.gate = Gate(self.oracle)
        self.queue = FailureQueue(self.oracle)
        self.stepper = Stepper()
        sleep: dict[str, Any] = {} if self.real_backoff else {"sleep": lambda _: None}
        self.poller = StreamPoller(
            self.gate,
            self.stream,
            self.stream.arn,
            self.checkpoints,
            sqs_client=self.queue,
            failure_queue_url=QUEUE_URL,
            settings=self.settings,
            retry_base_delay_s=self.retry_base_delay_s,
            stream_shards=self.lanes,
            partition_key="event_id",
            clock=lambda: self.now,
            **sleep,
        )
        self.thread = None

    @property
    def shard_lanes(self) -> Any:
        return self.poller._shard_lanes

    def write(self, key: str, count: int = 1, kind: str = "keep", blob: int = 0) -> list[int]:
        numbers = []
        for _ in range(count):
            created = self.clock.time()
            number = self.stream.write(key, f"s{len(self.oracle.lane)}", kind, blob)
            passes = kind == "keep" or not self.filtered
            self.oracle.written(number, key, created, self.stream.shard_of[number], passes)
            numbers.append(number)
        return numbers

    def detached(self, shard_id: str | None = None) -> set[int]:
        with self.shard_lanes.cv:
            return set(self.shard_lanes.detached.get(shard_id or self.shard_id, {}))

    def settle(self) -> None:
        """Until every lane is idle or inside its handler (or, while the on-failure queue
        is down, was refused by it); then check the memory each lane holds."""
        lanes, gate, queue = self.shard_lanes, self.gate, self.queue

        def settled() -> bool:
            with lanes.cv, gate.cv:
                return all(
                    lanes.load[lane] == 0
                    or lane in gate.waiting
                    or (queue.down and lane in queue.refused_lanes)
                    for lane in range(self.lanes)
                )

        wait_until(settled, "the lanes settled")
        with lanes.cv:
            assert max(lanes.load) <= lanes.lane_limit, lanes.load
            for entries in lanes.undone.values():
                assert max(len(e) for e in entries) <= lanes.lane_limit, [len(e) for e in entries]
            assert all(len(cursors) <= self.lanes for cursors in lanes.detached.values())
        capacity = self.settings.batch_size * self.lanes
        assert all(len(b) <= capacity for b in self.poller._buffers.values())

    def poll(self, times: int = 1) -> None:
        """``times`` polls of the run loop, the lanes settled after each."""
        for _ in range(times):
            if self.thread is None:
                self.thread = threading.Thread(target=self.poller.run, args=(self.stepper,))
                self.thread.daemon = True
                self.thread.start()
                wait_until(lambda: self.stepper.polls >= 1, "the first poll")
            else:
                self.stepper.step()
            self.settle()
            self.now += self.tick

    def answer(self, lane: int, outcome: Any) -> None:
        self.gate.answer(lane, outcome)
        self.settle()

    def drained(self, stuck: set[int] | frozenset[int] = frozenset()) -> bool:
        """No lane but ``stuck`` busy or able to read, and the main reader at the stream's
        last record (or every lane detached: it reads nothing)."""
        lanes = self.shard_lanes
        with self.oracle.lock:
            last = {shard: numbers[-1] for shard, numbers in self.oracle.in_shard.items()}
        with lanes.cv:
            busy = any(lanes.load[lane] for lane in range(self.lanes) if lane not in stuck)
            ready = any(lane not in stuck for _, lane in lanes.ready())
            reader_done = all(
                int(lanes.resolved.get(shard) or 0) >= number or lanes.all_detached(shard)
                for shard, number in last.items()
            )
        return not busy and not ready and reader_done

    def drain(self, stuck: set[int] | frozenset[int] = frozenset(), polls: int = 3000) -> int:
        """Poll, every lane but ``stuck`` answered by the policy at once, until it is
        ``drained``; how many polls it took."""
        self.gate.hold(*stuck)
        self.gate.let_go(*(set(range(self.lanes)) - set(stuck)))
        for n in range(1, polls + 1):
            self.poll()
            if self.drained(stuck):
                return n
        raise AssertionError(f"not drained in {polls} polls")

    def stop(self, outcome: Any = "ok") -> float:
        """Stop the run (what is in flight answered ``outcome``); how long the stop took."""
        self.gate.policy = lambda lane, numbers: outcome
        began = time.monotonic()
        self.stepper.set()
        self.gate.let_all_go()
        if self.thread is None:  # stopped before its first poll: the loop runs, and stops
            self.thread = threading.Thread(target=self.poller.run, args=(self.stepper,))
            self.thread.start()
        self.thread.join(PATIENCE_S)
        assert not self.thread.is_alive(), "the stop did not return"
        took = time.monotonic() - began
        for worker in self.shard_lanes.workers:  # a stopped poller leaves no thread behind
            worker.join(PATIENCE_S)
            assert not worker.is_alive(), f"{worker.name} still runs after the stop"
        return took

    def restart(self) -> None:
        """A stop, and a new worker on the same checkpoint file."""
        self.stop()
        self._begin()

    def crash(self) -> None:
        """The process dies now: nothing more of this run is written, sent or counted; a
        new worker starts on the checkpoint file as it is."""
        with self.checkpoints.guard:
            self.checkpoints.frozen = True
        self.queue.frozen = True
        self.gate.kill()
        self.stop()
        self._begin()

    def finish(self) -> None:
        """Everything let go and drained: every record handled, the checkpoint at the last
        record (one more is written, so that a checkpoint is written after it), and every
        property held all along."""
        self.queue.down = False
        self.checkpoints.refuse = 0
        self.checkpoints.unreadable = False
        self.gate.policy = lambda lane, numbers: "ok"
        self.write("ev-last")
        self.drain()
        unhandled = self.oracle.unhandled()
        assert unhandled == [], self.oracle._names(unhandled)
        self.oracle.assert_held()
        assert self.oracle.puts[-1:] == [self.oracle.last_written()], "the checkpoint"
        assert self.stop() < PATIENCE_S
        self.oracle.assert_held()


@pytest.fixture
def clock() -> Iterator[Clock]:
    clock = Clock()
    with poller_clock(clock):
        yield clock


# -- lanes stuck ------------------------------------------------------------------------------


def test_premise_the_keys_fall_in_the_lanes_chosen():
    for lanes in (2, 3, 4, 64):
        for lane, keys in enumerate(keys_by_lane(lanes, 2)):
            assert {lane_of(k, lanes) for k in keys} == {lane}


def test_every_lane_but_one_stuck_holds_back_only_its_own_records(tmp_path, clock):
    h = Harness(tmp_path, lanes=4, batch_size=2)
    keys = keys_by_lane(4, 2)
    limit = h.shard_lanes.lane_limit
    # GIVEN three of four lanes stuck in their first invocation, each with a backlog of
    # three times what it holds, the free lane's records among them
    h.gate.hold(0, 1, 2)
    for i in range(3 * limit):
        for lane in range(4):
            h.write(keys[lane][i % 2])
    # WHEN the worker polls until nothing more can move
    h.drain(stuck={0, 1, 2})
    # THEN the free lane's records are all handled, and the stuck ones hold their bound
    assert h.oracle.unhandled({3}) == []
    assert h.detached() == {0, 1, 2}
    assert max(h.shard_lanes.load) <= limit
    h.oracle.assert_held()  # (the checkpoint never past the stuck lanes' records)
    # AND once they go on, every record comes once, in order, the checkpoint at the last
    h.finish()


def test_every_lane_stuck_stops_the_reader_and_a_restart_loses_nothing(tmp_path, clock):
    h = Harness(tmp_path, lanes=3, batch_size=2)
    keys = keys_by_lane(3, 1)
    limit = h.shard_lanes.lane_limit
    h.gate.hold(0, 1, 2)
    for _i in range(2 * limit + 3):
        for lane in range(3):
            h.write(keys[lane][0])
    h.drain(stuck={0, 1, 2})
    # every lane full and detached: the reader reads no more (nothing could be handed)
    assert h.detached() == {0, 1, 2}
    reads = h.stream.reads
    h.poll(5)
    assert h.stream.reads == reads
    assert h.oracle.puts == []
    # WHEN the worker is stopped (the batches in flight end) and started again
    assert h.stop() < PATIENCE_S
    h._begin()
    # THEN the rest comes, from the checkpoint, in order
    h.finish()


def test_every_lane_stuck_then_a_crash_loses_nothing(tmp_path, clock):
    h = Harness(tmp_path, lanes=3, batch_size=2)
    keys = keys_by_lane(3, 1)
    h.gate.hold(0, 1, 2)
    for i in range(3 * h.shard_lanes.lane_limit):
        h.write(keys[i % 3][0])
    h.drain(stuck={0, 1, 2})
    for lane in (2, 0):  # two in-flight batches end; then the process dies
        h.answer(lane, "ok")
    h.crash()
    h.finish()


def test_a_lane_stuck_and_let_go_again_and_again(tmp_path, clock):
    """A lane alternately stuck and free: detached, caught up and handed back over and over
    while the other lanes flow; each time its records come in order, once."""
    h = Harness(tmp_path, lanes=3, batch_size=2)
    keys = keys_by_lane(3, 2)
    limit = h.shard_lanes.lane_limit
    detached_rounds = 0
    for round_ in range(6):
        h.gate.hold(0)
        for i in range(limit + 2 * round_ + 1):
            for lane in range(3):
                h.write(keys[lane][(i + round_) % 2])
        h.drain(stuck={0})
        assert h.oracle.unhandled({1, 2}) == []
        detached_rounds += 0 in h.detached()
        # let go for only a few polls: it may still be detached when it is stuck again
        h.gate.let_go(0)
        h.poll(round_ % 3)
    assert detached_rounds == 6
    h.finish()


def test_records_of_many_keys_interleaved_densely_keep_each_keys_order(tmp_path, clock):
    """Nine keys over three lanes, written round robin, while one lane answers only now and
    then and another fails part of each batch."""
    h = Harness(tmp_path, lanes=3, batch_size=3, retry_attempts=3)
    keys = [k for lane in keys_by_lane(3, 3) for k in lane]
    for i in range(150):
        h.write(keys[i % len(keys)])
    h.gate.hold(0, 1)
    for n in range(120):
        h.poll()
        with h.gate.cv:
            waiting = dict(h.gate.waiting)
        if 0 in waiting and n % 3 == 0:
            h.answer(0, "ok")
        if 1 in waiting:
            numbers = waiting[1]
            h.answer(1, len(numbers) - 1 if len(numbers) > 1 and n % 2 else "ok")
    h.oracle.assert_held()
    h.finish()
    # the keys' order, as the handler saw them (first handlings)
    seen: dict[str, list[int]] = {}
    for _, _, numbers, outcome in h.oracle.invocations:
        done = len(numbers) if outcome == "ok" else 0 if outcome == "raise" else outcome
        for number in numbers[:done]:
            seen.setdefault(h.oracle.key[number], []).append(number)
    for key, numbers in seen.items():
        assert numbers == sorted(set(numbers)), key


# -- failures inside a lane -------------------------------------------------------------------


def test_partial_batch_failures_while_the_lane_is_detached(tmp_path, clock):
    h = Harness(tmp_path, lanes=2, batch_size=3, retry_attempts=2)
    keys = keys_by_lane(2, 1)
    h.gate.hold(0)
    for i in range(5 * h.shard_lanes.lane_limit):
        h.write(keys[i % 3 == 2][0])
    h.drain(stuck={0})
    assert h.detached() == {0}
    # WHEN the detached lane's batches fail: a record in the middle, the first, the whole
    outcomes = itertools.cycle([1, 0, "raise", 2, "ok", 0, 0, 0])
    for _ in range(60):
        with h.gate.cv:
            numbers = h.gate.waiting.get(0)
        if numbers is None:
            h.poll()
            continue
        outcome = next(outcomes)
        if isinstance(outcome, int) and outcome >= len(numbers):
            outcome = "ok"
        h.answer(0, outcome)
    # THEN each failed record was retried before anything after it, none lost or twice,
    # and those whose retries ran out went to the on-failure queue, each once
    h.finish()
    assert any(c == "RetryAttemptsExhausted" for _, c, _ in h.oracle.messages)


def test_a_failed_send_to_the_on_failure_queue_redelivers_nothing_already_handled(tmp_path, clock):
    """A lane's batch partly handled when the on-failure queue cannot be reached: only
    what was not handled is delivered again (one stream shard's checkpoint would have
    passed the rest), and no record goes to the queue twice."""
    h = Harness(tmp_path, lanes=2, batch_size=2, retry_attempts=1)
    key = keys_by_lane(2, 1)[0][0]
    h.gate.hold(0)
    a, b, _, _ = h.write(key, 4)
    h.poll()
    # GIVEN [a, b]: a succeeds, b fails twice (its retries run out) and the queue is down
    h.queue.down = True
    h.answer(0, 1)
    h.answer(0, 0)
    h.answer(0, 0)
    assert h.queue.refused_lanes == {0}
    # WHEN the queue is back: b fails again until it is sent
    h.queue.down = False
    h.gate.policy = lambda lane, numbers: 0 if numbers[0] == b else "ok"
    h.drain()
    h.oracle.assert_held()  # (a was not delivered again)
    # GIVEN [e, f], both failing: bisected, e runs out and is sent; then the queue is down
    # when f runs out
    e, f = h.write(key, 2)
    h.gate.hold(0)
    h.poll()
    for _ in range(3):
        h.answer(0, "raise")  # [e, f] bisected; [e] fails twice and is sent
    h.queue.down = True
    h.answer(0, "raise")
    h.answer(0, "raise")  # [f] runs out: its send fails
    h.queue.down = False
    h.gate.policy = lambda lane, numbers: "raise" if f in numbers else "ok"
    h.drain()
    # THEN nothing handled was delivered again (the oracle), no record was sent twice,
    # and a, handled by the first invocation, was neither delivered again nor sent
    h.finish()
    sent = [n for _, _, numbers in h.oracle.messages for n in numbers]
    assert sorted(sent) == sorted(set(sent)), h.oracle._names(sent)
    assert {b, e, f} <= set(sent) and a not in sent, h.oracle._names(sent)
    assert [n for _, _, numbers, _ in h.oracle.invocations for n in numbers].count(a) == 1


# -- reads that fail, stops, restarts, crashes ------------------------------------------------


def test_reads_that_fail_while_a_lane_is_detached_deliver_nothing_twice(tmp_path, clock):
    """The main reader's read fails, then a detached lane's cursor's, then both in a row,
    while the lane's skipped records wait to be read again."""
    h = Harness(tmp_path, lanes=3, batch_size=2)
    keys = keys_by_lane(3, 2)
    limit = h.shard_lanes.lane_limit
    h.gate.hold(0)
    for i in range(3 * limit):
        for lane in range(3):
            h.write(keys[lane][i % 2])
    h.drain(stuck={0})
    assert h.detached() == {0}
    # WHEN the main reader's next read fails (more records written meanwhile)
    h.stream.fail_reads = 1
    for lane in range(3):
        h.write(keys[lane][0], 3)
    h.poll(2)
    # ... and then the cursor's (the second read of a poll, once the lane has room)
    h.answer(0, "ok")
    h.answer(0, "ok")
    assert 0 in {lane for _, lane in h.shard_lanes.ready()}
    failing = h.stream.reads + 2  # the main reader's read, then the cursor's
    h.stream.fail_at = {failing}
    h.poll()
    assert h.stream.reads == failing
    h.stream.fail_reads = 2
    h.poll(3)
    h.oracle.assert_held()
    h.drain(stuck={0})
    assert h.oracle.unhandled({1, 2}) == []
    # THEN once the lane goes on, every record came once, in order
    h.finish()


@pytest.mark.parametrize("how", ["restart", "crash"])
def test_a_stop_or_a_crash_while_lanes_are_detached_loses_nothing(tmp_path, clock, how):
    h = Harness(tmp_path, lanes=4, batch_size=2)
    keys = keys_by_lane(4, 2)
    limit = h.shard_lanes.lane_limit
    h.gate.hold(0, 2)
    for i in range(2 * limit + 1):
        for lane in range(4):
            h.write(keys[lane][i % 2])
    h.drain(stuck={0, 2})
    assert h.detached() == {0, 2}
    h.answer(2, "ok")  # one of them has room again, its cursor not yet read
    assert 2 in h.detached()
    getattr(h, how)()
    # a second generation stuck again, then stopped or crashed again
    h.gate.hold(0)
    h.write(keys[0][0], limit)
    h.drain(stuck={0})
    getattr(h, how)()
    h.finish()


def test_a_restart_while_a_lane_retries_a_failed_batch(tmp_path, clock):
    """Stopped while a lane's batch fails (retried, not handled): the next run delivers it
    again first, then what came after it."""
    h = Harness(tmp_path, lanes=2, batch_size=2, retry_attempts=5)
    key = keys_by_lane(2, 1)[0][0]
    h.gate.hold(0)
    h.write(key, 3 * h.shard_lanes.lane_limit)
    h.drain(stuck={0})
    h.answer(0, 1)
    h.answer(0, "raise")
    h.stop(outcome="raise")  # in flight as the stop comes: it fails once more
    h._begin()
    h.finish()


# -- the maximum record age -------------------------------------------------------------------


def test_records_a_detached_lane_skipped_expire_to_the_on_failure_queue(tmp_path, clock):
    """Records older than the maximum record age when their lane gets to them go to the
    on-failure queue (RecordAgeExceeded), exactly those: the ones its cursor reads again
    after the age passed, and the ones it held; the fresher ones are delivered."""
    h = Harness(tmp_path, lanes=2, batch_size=2, max_record_age_s=600)
    key, other = (k[0] for k in keys_by_lane(2, 1))
    limit = h.shard_lanes.lane_limit
    h.gate.hold(0)
    old = h.write(key, 2 * limit)
    h.write(other, 3)
    h.drain(stuck={0})
    assert h.detached() == {0}
    with h.gate.cv:
        in_flight = list(h.gate.waiting[0])
    # WHEN the lane's records get older than the maximum age, and fresh ones come
    clock.advance(601)
    fresh = h.write(key, 3)
    h.write(other, 3)
    h.answer(0, "ok")  # the batch in flight was invoked before: it is handled
    h.finish()
    # THEN the old records not yet invoked went to the on-failure queue, each once, as
    # old; the batch in flight and the fresh ones were delivered
    expired = [
        n for _, c, numbers in h.oracle.messages if c == "RecordAgeExceeded" for n in numbers
    ]
    assert expired == [n for n in old if n not in in_flight], h.oracle._names(expired)
    delivered = {n for _, _, numbers, out in h.oracle.invocations if out == "ok" for n in numbers}
    assert set(in_flight) | set(fresh) <= delivered
    assert not delivered & set(expired)


# -- the checkpoint file ----------------------------------------------------------------------


def test_checkpoint_writes_that_fail_again_and_again_stop_no_lane(tmp_path, clock):
    """Every write of the checkpoint fails for a long while (the disk full) while the lanes
    flow and one is detached: no lane stops, nothing is written past a record not handled,
    and once writes work the checkpoint catches up."""
    h = Harness(tmp_path, lanes=3, batch_size=2)
    keys = keys_by_lane(3, 2)
    h.checkpoints.refuse = -1
    h.gate.hold(0)
    for i in range(3 * h.shard_lanes.lane_limit):
        for lane in range(3):
            h.write(keys[lane][i % 2])
    h.drain(stuck={0})
    assert h.oracle.unhandled({1, 2}) == []
    h.drain()
    assert h.oracle.unhandled() == []
    assert h.checkpoints.refused > 10 and h.oracle.puts == []
    # WHEN writes work again: the next record moves the checkpoint to the end
    h.checkpoints.refuse = 0
    h.finish()


def test_a_checkpoint_file_that_cannot_be_read_stops_no_lane(tmp_path, clock):
    """The checkpoint file unreadable a while (an I/O error) after the reader opened its
    iterator: the lane that first needs the checkpoint written goes on delivering."""
    h = Harness(tmp_path, lanes=2, batch_size=2)
    key = keys_by_lane(2, 1)[0][0]
    h.gate.hold(0)
    h.write(key, 6)
    h.poll()  # the reader opened its iterator; the lane's first batch is in its handler
    h.checkpoints.unreadable = True
    h.answer(0, "ok")  # the lane's worker wants to write the checkpoint after it
    h.checkpoints.unreadable = False
    h.gate.let_go(0)
    h.finish()


# -- many lanes -------------------------------------------------------------------------------


def test_64_lanes_with_batches_of_one_and_a_quarter_of_them_stuck(tmp_path, clock):
    h = Harness(tmp_path, lanes=64, batch_size=1, retry_attempts=1)
    keys = [k[0] for k in keys_by_lane(64, 1)]
    stuck = set(range(0, 64, 4))
    h.gate.hold(*stuck)
    for _i in range(8):
        for key in keys:
            h.write(key)
    h.gate.policy = lambda lane, numbers: "raise" if numbers[0] % 5 == 0 else "ok"
    h.drain(stuck=stuck)
    assert h.oracle.unhandled(set(range(64)) - stuck) == []
    assert h.detached() == stuck
    h.oracle.assert_held()
    h.finish()


def test_64_lanes_on_motos_stream(aws, tmp_path, clock):
    """The same on moto's stream, end to end (every lane's records, one lane stuck)."""
    h = Harness(tmp_path, lanes=64, batch_size=1, stream=MotoStream(aws))
    keys = [k[0] for k in keys_by_lane(64, 1)]
    h.gate.hold(7)
    for _i in range(3):
        for key in keys:
            h.write(key)
    h.write(keys[7], 6)
    h.drain(stuck={7})
    assert h.oracle.unhandled(set(range(64)) - {7}) == []
    assert h.detached() == {7}
    h.finish()


# -- a stop comes within seconds --------------------------------------------------------------


def test_a_stop_ends_a_lanes_backoff_between_retries(tmp_path, clock):
    """A lane waits a minute before retrying its failed batch (the poller's own sleep):
    a stop does not wait for it, nor retries at once; the batch, not handled, is the next
    run's first."""
    h = Harness(tmp_path, lanes=2, batch_size=1, real_backoff=True, retry_base_delay_s=60)
    key = keys_by_lane(2, 1)[0][0]
    h.gate.hold(0)
    h.write(key, 4)
    h.poll()
    with h.gate.cv:
        h.gate.answers[0] = "raise"
        h.gate.cv.notify_all()
    # the lane now waits 60 to 90 s before invoking again
    wait_until(lambda: h.oracle.invocations != [], "the failed invocation")
    calls = h.gate.calls
    assert h.stop(outcome="raise") < PATIENCE_S / 2
    # ... and gives its batch up: no retry comes at once instead (nor goes to the queue)
    assert h.gate.calls == calls and h.oracle.messages == []
    h._begin()
    h.finish()


def test_a_stop_ends_a_lanes_wait_for_the_on_failure_queue(tmp_path, clock):
    """A lane whose send to the on-failure queue failed waits (the retry delay) before it
    delivers the batch again: a stop does not wait for it."""
    h = Harness(tmp_path, lanes=2, batch_size=1, retry_attempts=0, retry_base_delay_s=60)
    key = keys_by_lane(2, 1)[0][0]
    h.write(key, 2)
    h.queue.down = True
    h.gate.policy = lambda lane, numbers: "raise"
    h.poll()
    assert h.queue.refused_lanes == {0}
    assert h.stop() < PATIENCE_S / 2
    h._begin()
    h.finish()


# -- a randomized schedule against the oracle -------------------------------------------------

MODEL_LANES = 3
MODEL_KEYS = [k for lane in keys_by_lane(MODEL_LANES, 2) for k in lane]
OUTCOMES = st.one_of(st.sampled_from(["ok", "ok", "raise"]), st.integers(0, 2))
WRITE = st.tuples(st.just("write"), st.integers(0, len(MODEL_KEYS) - 1), st.integers(1, 12))
ANSWER = st.tuples(st.just("answer"), st.integers(0, MODEL_LANES - 1), OUTCOMES, st.booleans())
STEPS = st.one_of(
    WRITE,
    WRITE,
    ANSWER,
    ANSWER,
    ANSWER,
    st.tuples(st.just("poll"), st.integers(1, 3)),
    st.tuples(st.just("hold"), st.integers(0, MODEL_LANES - 1)),
    st.tuples(st.just("hold"), st.integers(0, MODEL_LANES - 1)),
    st.tuples(st.just("let go"), st.integers(0, MODEL_LANES - 1)),
    st.tuples(st.just("read error"), st.integers(1, 2)),
    st.tuples(st.just("refuse checkpoints"), st.integers(1, 8)),
    st.tuples(st.just("age")),
    st.tuples(st.just("restart")),
    st.tuples(st.just("crash")),
    st.tuples(st.just("drain the free lanes")),
)


def random_steps(rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    """A schedule as STEPS draws them, from a seeded generator (long ones, cheaply)."""
    steps: list[tuple[Any, ...]] = []
    for _ in range(count):
        roll = rng.random()
        lane = rng.randrange(MODEL_LANES)
        if roll < 0.25:
            steps.append(("write", rng.randrange(len(MODEL_KEYS)), rng.randint(1, 12)))
        elif roll < 0.55:
            outcome = rng.choice(["ok", "ok", "raise", 0, 1, 2])
            steps.append(("answer", lane, outcome, rng.random() < 0.2))
        elif roll < 0.65:
            steps.append(("poll", rng.randint(1, 3)))
        elif roll < 0.75:
            steps.append(("hold", lane))
        elif roll < 0.82:
            steps.append(("let go", lane))
        elif roll < 0.86:
            steps.append(("read error", rng.randint(1, 2)))
        elif roll < 0.89:
            steps.append(("refuse checkpoints", rng.randint(1, 8)))
        elif roll < 0.91:
            steps.append(("age",))
        elif roll < 0.93:
            steps.append(("restart",))
        elif roll < 0.95:
            steps.append(("crash",))
        else:
            steps.append(("drain the free lanes",))
    return steps


def run_schedule(h: Harness, steps: list[tuple[Any, ...]]) -> None:
    for step in steps:
        kind = step[0]
        if kind == "write":
            h.write(MODEL_KEYS[step[1]], step[2])
        elif kind == "poll":
            h.poll(step[1])
        elif kind == "hold":
            h.gate.hold(step[1])
        elif kind == "let go":
            h.gate.let_go(step[1])
            h.settle()
        elif kind == "answer":
            with h.gate.cv:
                waiting = sorted(h.gate.waiting.items())
            if not waiting:
                h.poll()
                continue
            lane, numbers = waiting[step[1] % len(waiting)]
            outcome = step[2] if not isinstance(step[2], int) else step[2] % len(numbers)
            h.queue.down = step[3]  # the on-failure queue unreachable meanwhile
            h.answer(lane, outcome)
            h.queue.down = False
            h.settle()
        elif kind == "read error":
            h.stream.fail_reads = step[1]
            h.poll(step[1] + 1)
        elif kind == "refuse checkpoints":
            h.checkpoints.refuse = step[1]
        elif kind == "age":
            h.clock.advance(h.settings.max_record_age_s + 1)
        elif kind == "restart":
            h.restart()
        elif kind == "crash":
            h.crash()
        elif kind == "drain the free lanes":
            h.oracle.assert_held()
            with h.gate.cv:
                stuck = set(h.gate.held)
            h.drain(stuck=stuck)
            free = set(range(h.lanes)) - stuck
            unhandled = h.oracle.unhandled(free)
            assert unhandled == [], f"free lanes {free}: {h.oracle._names(unhandled)}"
        else:
            raise AssertionError(step)


_examples = itertools.count()


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(STEPS, min_size=20, max_size=60))
def test_a_random_schedule_of_lanes_stuck_failing_and_restarted_keeps_lambdas_order(
    steps, tmp_path, clock
):
    """Records written, polls, lanes held and let go, invocations answered ok, failed, or
    failed from a record on (the on-failure queue down meanwhile or not), reads failing,
    checkpoint writes failing, records aged past the maximum age, stops, crashes, and the
    free lanes drained while the others are held: the oracle's properties hold all along,
    and in the end every record is handled, the checkpoint at the last."""
    note("\n".join(map(repr, steps)))
    directory = tmp_path / f"example-{next(_examples)}"
    directory.mkdir()
    h = Harness(directory, lanes=MODEL_LANES, batch_size=2, retry_attempts=1, max_record_age_s=600)
    try:
        run_schedule(h, steps)
        h.oracle.assert_held()
        h.finish()
    finally:
        h.gate.kill()
        h.stepper.set()


@pytest.mark.parametrize("seed", range(6))
def test_a_long_seeded_schedule_keeps_lambdas_order(seed, tmp_path, clock):
    """The same, 250 steps a schedule, from fixed seeds."""
    steps = random_steps(random.Random(seed), 250)
    h = Harness(tmp_path, lanes=MODEL_LANES, batch_size=2, retry_attempts=1, max_record_age_s=600)
    try:
        run_schedule(h, steps)
        h.oracle.assert_held()
        h.finish()
    finally:
        h.gate.kill()
        h.stepper.set()


def test_a_stop_while_the_worker_waits_for_the_lanes_at_the_end_of_an_idle_run(tmp_path, clock):
    """``run(stop, until_idle_s)``: the stream quiet, the worker waits for the lanes to
    finish (``flush``) while one waits a minute before retrying its failed batch; a stop
    then does not wait for it either."""
    h = Harness(tmp_path, lanes=2, batch_size=1, real_backoff=True, retry_base_delay_s=60)
    key = keys_by_lane(2, 1)[0][0]
    h.write(key)
    h.gate.policy = lambda lane, numbers: "raise"
    lanes = h.shard_lanes
    flushing = threading.Event()
    wait = lanes.wait

    def waiting(*args: Any, **kwargs: Any) -> Any:
        flushing.set()
        return wait(*args, **kwargs)

    lanes.wait = waiting
    stop = threading.Event()
    thread = threading.Thread(target=h.poller.run, args=(stop, 0), daemon=True)
    thread.start()
    wait_until(lambda: flushing.is_set() and h.oracle.invocations != [], "the idle run's end")
    began = time.monotonic()
    stop.set()
    thread.join(PATIENCE_S / 2)
    assert not thread.is_alive(), "the stop did not return"
    assert time.monotonic() - began < PATIENCE_S / 2
    h._begin()
    h.finish()


def test_nothing_is_written_once_a_stop_has_returned(tmp_path, clock):
    """The batch in flight at a stop ends, and its checkpoint, refused once, is written
    before the stop returns: never after it, when a new worker may have read the file and
    written past it (the file would go back). A lane's thread that writes again waits
    here until the stop has returned."""
    h = Harness(tmp_path, lanes=2, batch_size=2)
    key = keys_by_lane(2, 1)[0][0]
    h.gate.hold(0)
    numbers = h.write(key, 4)
    h.poll()
    assert h.thread is not None
    stopped = threading.Event()
    put = h.checkpoints.put
    calls = []

    def lane_waits_for_the_stop(*args: Any) -> None:
        calls.append(threading.current_thread())
        if len(calls) > 1 and threading.current_thread() is not h.thread:
            stopped.wait(PATIENCE_S)
        put(*args)

    h.checkpoints.put = lane_waits_for_the_stop  # type: ignore[method-assign]
    h.checkpoints.refuse = 1  # the batch's checkpoint write fails once
    try:
        # the batch in flight let go once the stop reached the lanes (it takes no other)
        h.stepper.set()
        wait_until(lambda: h.shard_lanes.stopping, "the stop at the lanes")
        h.gate.let_all_go()
        h.thread.join(PATIENCE_S)
        assert not h.thread.is_alive(), "the stop did not return"
        written = list(h.oracle.puts)
    finally:
        stopped.set()
    worker = h.shard_lanes.workers[0]
    worker.join(PATIENCE_S)  # (a stopped lane's thread ends)
    assert not worker.is_alive()
    assert h.oracle.puts == written, "written after the stop returned"
    assert written == [numbers[1]]


# -- records the filter drops, a batching window, iterators that expire, large payloads ------


def test_records_the_filter_drops_while_a_lane_is_detached(tmp_path, clock):
    """Records the filter drops among a detached lane's and the others': they are passed
    (by the reader and by the cursor), and the checkpoint goes past them to the last one."""
    h = Harness(tmp_path, lanes=3, batch_size=2, filtered=True)
    keys = keys_by_lane(3, 1)
    h.gate.hold(0)
    for i in range(6 * h.shard_lanes.lane_limit):
        lane = i % 3
        h.write(keys[lane][0], kind="keep" if i % 4 else "drop")
    h.drain(stuck={0})
    assert h.detached() == {0}
    h.drain()
    for _ in range(3):  # the stream ends with records the filter drops
        h.write(keys[1][0], kind="drop")
    h.drain()
    assert h.oracle.puts[-1] == h.oracle.last_written()
    h.finish()
    assert not {n for _, _, numbers, _ in h.oracle.invocations for n in numbers} & (
        h.oracle.filtered
    )


def test_a_batching_window_while_a_lane_is_detached_and_reads_fail(tmp_path, clock):
    """A batching window of 5 s: the reader gathers records (a read error drops what it
    gathered: it reads them again), while one lane is detached."""
    h = Harness(tmp_path, lanes=3, batch_size=3, window_s=5)
    keys = keys_by_lane(3, 1)
    h.gate.hold(0)
    h.tick = 0.5  # the poller's clock: the window runs out every ten polls
    for i in range(5 * h.shard_lanes.lane_limit):
        h.write(keys[i % 3][0])
        if i % 7 == 0:
            h.poll()
    h.drain(stuck={0})
    assert h.detached() == {0}
    # WHEN a batch was just sent (the window begins), records come and are gathered
    h.tick = 0
    h.write(keys[1][0])
    h.now += 10
    h.poll()
    for i in range(5):
        h.write(keys[i % 3][0])
    h.poll()
    assert sum(map(len, h.poller._buffers.values())) == 5
    # ... and a read fails: what was gathered is dropped, read again, gathered again
    h.stream.fail_reads = 1
    h.poll(2)
    assert sum(map(len, h.poller._buffers.values())) == 5
    h.tick = 1.0
    h.drain(stuck={0})
    assert h.oracle.unhandled({1, 2}) == []
    h.finish()


def test_iterators_that_expire_while_a_lane_is_detached(tmp_path, clock):
    """GetRecords answers ExpiredIteratorException: to the main reader, then to a detached
    lane's cursor; each opens a new iterator where it was."""
    h = Harness(tmp_path, lanes=3, batch_size=2)
    keys = keys_by_lane(3, 1)
    h.gate.hold(0)
    for _ in range(3 * h.shard_lanes.lane_limit):
        for lane in range(3):
            h.write(keys[lane][0])
    h.drain(stuck={0})
    h.stream.fail_code = "ExpiredIteratorException"
    h.stream.fail_reads = 1
    for lane in range(3):
        h.write(keys[lane][0], 2)
    h.poll(2)
    h.answer(0, "ok")
    h.answer(0, "ok")
    assert 0 in {lane for _, lane in h.shard_lanes.ready()}
    h.stream.fail_at = {h.stream.reads + 2}  # the cursor's read
    h.poll(3)
    h.finish()


def test_payloads_near_6_mb_while_a_lane_is_detached(tmp_path, clock):
    """Records of 350 KB: a lane's invocations stay under 6 MB, the ones its cursor reads
    again too."""
    h = Harness(tmp_path, lanes=2, batch_size=20)
    key, other = (k[0] for k in keys_by_lane(2, 1))
    h.gate.hold(0)
    h.write(key, h.shard_lanes.lane_limit + 10, blob=350_000)
    h.write(other, 3)
    h.drain(stuck={0})
    assert h.detached() == {0}
    h.finish()
    assert 5 * 1024 * 1024 < h.gate.largest_payload <= 6 * 1024 * 1024


# -- a stream whose shard closes and has a child ----------------------------------------------


def test_a_shard_that_closes_while_lanes_are_detached_keeps_each_keys_order(tmp_path, clock):
    """The real shard closes twice (its child read after it): each key's records come in
    order across the shards, each shard's checkpoint held to its own records, through a
    stop and a crash."""
    h = Harness(tmp_path, lanes=3, batch_size=2)
    keys = keys_by_lane(3, 1)
    limit = h.shard_lanes.lane_limit
    h.gate.hold(0)
    for i in range(2 * limit):
        h.write(keys[i % 3][0], 2)
    h.drain(stuck={0})
    h.gate.let_go(0)
    h.poll(2)
    h.stream.split()
    for i in range(limit):
        h.write(keys[i % 3][0], 2)
    h.restart()
    h.gate.hold(1)
    h.drain(stuck={1})
    h.stream.split()
    for i in range(limit):
        h.write(keys[i % 3][0], 2)
    h.crash()
    h.finish()
    assert len(h.poller._shards) == 3


@pytest.mark.xfail(
    strict=False,
    reason="StreamPoller.poll_once reads a child shard only once its parent is _finished: "
    "read to its end by the main reader AND no lane detached in it "
    "(_ShardLanes.finished(parent)); a stuck lane that is detached when the real shard "
    "closes keeps every other lane from reading on into the child, so one stuck lane stops "
    "them all at each shard rollover (moto never closes its shard; a real stream closes "
    "shards every few hours)",
)
def test_a_stuck_lane_detached_as_the_shard_closes_holds_back_no_other_lane(tmp_path, clock):
    h = Harness(tmp_path, lanes=2, batch_size=2)
    key, other = (k[0] for k in keys_by_lane(2, 1))
    h.gate.hold(0)
    h.write(key, 2 * h.shard_lanes.lane_limit)
    h.write(other, 2)
    h.drain(stuck={0})
    assert h.detached() == {0}
    # WHEN the real shard closes, and both keys go on in its child
    h.stream.split()
    h.write(other, 4)
    h.write(key, 4)
    h.drain(stuck={0}, polls=100)
    # THEN the free lane's records in the child are delivered meanwhile
    assert h.oracle.unhandled({1}) == []
    # ... and the stuck one's, once it goes on, after its records in the parent (reading
    # the child as soon as the parent is read to its end would deliver them before)
    h.finish()


def seeded_outcomes(seed: int) -> Callable[[int, list[int]], Any]:
    """A gate policy: each invocation's outcome a function of the seed, its first record
    and how often that record came first (ok, a failure, a failure from one record on)."""
    seen: Counter[int] = Counter()

    def outcome(lane: int, numbers: list[int]) -> Any:
        seen[numbers[0]] += 1
        roll = zlib.crc32(f"{seed}:{numbers[0]}:{seen[numbers[0]]}".encode()) % 10
        if roll < 6:
            return "ok"
        return "raise" if roll < 8 else roll % len(numbers)

    return outcome


@pytest.mark.parametrize("seed", range(4))
def test_a_seeded_schedule_across_shard_splits(seed, tmp_path, clock):
    """Lanes that run free, their invocations failing now and then (seeded), while the
    real shard closes and has a child again and again, reads and checkpoint writes fail,
    the on-failure queue is down a while, records age, and the worker stops or crashes."""
    rng = random.Random(seed)
    h = Harness(tmp_path, lanes=MODEL_LANES, batch_size=2, retry_attempts=1, max_record_age_s=600)
    h.gate.policy = seeded_outcomes(seed)
    try:
        for _ in range(120):
            roll = rng.random()
            if roll < 0.35:
                h.write(rng.choice(MODEL_KEYS), rng.randint(1, 9))
            elif roll < 0.6:
                h.poll(rng.randint(1, 4))
            elif roll < 0.68:
                h.stream.split()
            elif roll < 0.74:
                h.stream.fail_reads = rng.randint(1, 2)
                h.poll(3)
            elif roll < 0.8:
                h.checkpoints.refuse = rng.randint(1, 6)
            elif roll < 0.84:
                h.queue.down = True
                h.poll(2)
                h.queue.down = False
                h.settle()
            elif roll < 0.87:
                h.clock.advance(601)
            elif roll < 0.92:
                h.restart()
                h.gate.policy = seeded_outcomes(seed)
            else:
                h.crash()
                h.gate.policy = seeded_outcomes(seed)
        h.oracle.assert_held()
        h.finish()
        assert len(h.stream.shards) > 3
    finally:
        h.gate.kill()
        h.stepper.set()


def test_memory_stays_bounded_while_a_lane_is_stuck_and_the_stream_flows(tmp_path, clock):
    """3,000 records read past a stuck lane: what the lanes hold (queues, entries not yet
    delivered, cursors, the reader's buffer) stays within four batches a lane."""
    h = Harness(tmp_path, lanes=4, batch_size=5)
    keys = [k for lane in keys_by_lane(4, 2) for k in lane]
    h.gate.hold(0)
    lanes = h.shard_lanes
    bound = 4 * lanes.lane_limit

    def held() -> int:
        with lanes.cv:
            queued = sum(len(q) for q in lanes.queues)
            entries = sum(len(d) for per_shard in lanes.undone.values() for d in per_shard)
            cursors = sum(len(c) for c in lanes.detached.values())
        return queued + entries + cursors + sum(map(len, h.poller._buffers.values()))

    for round_ in range(10):
        for i in range(300):
            h.write(keys[(i * 7 + round_) % len(keys)])
        h.drain(stuck={0})
        assert held() <= 2 * bound, held()
    assert h.oracle.unhandled({1, 2, 3}) == []
    assert h.detached() == {0}
    h.finish()

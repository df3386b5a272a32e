"""Five ways to decide the same signups, each run against its own fresh local endpoint.

* ``naive``: read how many seats are taken (a Query over the event's decisions), write the
  decision if it fits. Concurrent producers oversell: the write skew itself.
* ``optimistic``: a conditional update of a versioned counter on the event item, retried
  on conflict (an optimistic lock on a counter item), then the decision item.
* ``transactional`` and ``slots`` (``turnstile_bench.lock_targets``): a counter item per
  event in a table of its own, or one item per seat made when the event is, changed in
  the same transaction as the decision's put.
* ``turnstile``: producers only write the intake record; a ``StreamPoller`` in a thread
  feeds the intake stream to the real stream handler, and each producer's signup is
  done when a consistent read sees its decision.

Latency is always submit -> final status readable: for the synchronous ways, until the
decision item is written; for turnstile, until a strongly consistent read returns it.

After each run the same recount checks every way (``census``): seats accepted beyond
capacity (oversold), signups without a decision or seats held for nobody (lost), and
decisions made twice or seats given out that the way's lock target does not hold
(doubled).
"""

from __future__ import annotations

import contextlib
import io
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from turnstile.base.contract import STREAM_SOURCE, Attr, ControlKey, Function, Reason, Status
from turnstile.jobs.due_holds import release_due_holds
from turnstile.jobs.processor import BatchResult, StreamProcessor, StreamRecord, utc_now
from turnstile.jobs.sweeper import SLOT_S, Sweeper, SweepResult, run_id_for
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import Decision
from turnstile.storage.store import SignupStore
from turnstile_bench.accounting import (
    Floor,
    commit_floor,
    decision_floor,
    event_items,
    scan_items,
)
from turnstile_bench.endpoint import LocalEndpoint, quiet_handler_environment
from turnstile_bench.metering import (
    ItemSizes,
    Meter,
    MeteredClient,
    MeterSnapshot,
    item_size,
    write_units,
)
from turnstile_bench.progress import Progress
from turnstile_bench.workload import Signup, Workload, dynamodb_values, event_capacities

__all__ = [
    "DECISION_PATH",
    "TURNSTILE_PARTS",
    "CountingProcessor",
    "Holdings",
    "Housekeeping",
    "StrategyRun",
    "TableCensus",
    "census",
    "create_events",
    "quiet",
]

#: The stream processor's chunk and the event source's batch size (the issue's setting).
BATCH_SIZE = 100


@dataclass
class Holdings:
    """What a way's lock target holds once its run is over, to check the decisions against.

    ``by_event``: seats held per event (a counter's ``taken``, or the slots owned);
    ``by_signup``: seats held per signup, where the lock target knows its holder (slots).
    """

    target: str
    by_event: dict[str, int] = field(default_factory=dict)
    by_signup: dict[tuple[str, str], int] | None = None


@dataclass
class TableCensus:
    """A recount of a strategy's tables after the run (the way ``turnstile audit`` counts)."""

    decided: int = 0
    accepted: int = 0
    rejected: int = 0
    accepted_seats: dict[str, int] = field(default_factory=dict)
    oversold_seats: int = 0
    #: Signups submitted that have no decision item.
    lost_signups: int = 0
    #: Seats the lock target holds that no accepted decision has.
    lost_seats: int = 0
    #: Decision items beyond one per submitted signup (for a signup never submitted, or
    #: a second one under another event).
    doubled_decisions: int = 0
    #: Seats accepted decisions have that the lock target does not hold for them: nothing
    #: stops the next signup from being given them too.
    doubled_seats: int = 0
    #: The way's lock target, as ``Holdings.target`` names it (None: it has none).
    lock_target: str | None = None
    decision_sizes: list[int] = field(default_factory=list)
    #: The same sizes by the decision's status (a way may write them differently).
    decision_sizes_by_status: dict[str, list[int]] = field(default_factory=dict)
    intake_sizes: list[int] = field(default_factory=list)
    #: Sampled items whose metered size differs from their real one (0: metering is exact).
    size_mismatches: int = 0

    @property
    def lost(self) -> int:
        return self.lost_signups + self.lost_seats

    @property
    def doubled(self) -> int:
        return self.doubled_decisions + self.doubled_seats


@dataclass
class StrategyRun:
    """Everything measured for one way of deciding."""

    name: str
    signups: int
    wall_s: float
    latencies_s: list[float]
    census: TableCensus
    #: Meters by role; ``cost_roles`` are the ones whose units are the cost of deciding.
    meters: dict[str, MeterSnapshot]
    cost_roles: tuple[str, ...]
    conflicts: int = 0
    retries: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    #: What creating the events cost (slots: one item per seat), apart from deciding.
    setup: MeterSnapshot | None = None
    events: int = 0
    #: The fewest write units the way's contract needs for these decisions
    #: (``turnstile_bench.accounting``).
    floor: Floor | None = None


class _Producers:
    """Threads that take the next signup from one shared queue (arrival order) and run it."""

    def __init__(self, signups: Sequence[Signup], threads: int, progress: Progress) -> None:
        self.signups = signups
        self.threads = threads
        self.progress = progress
        self._next = 0
        self._lock = threading.Lock()
        self.errors: list[BaseException] = []

    def _take(self) -> Signup | None:
        with self._lock:
            if self._next >= len(self.signups):
                return None
            self._next += 1
            return self.signups[self._next - 1]

    def run(self, work: Callable[[Signup], None], advance: bool = True) -> None:
        def loop() -> None:
            try:
                while (signup := self._take()) is not None:
                    work(signup)
                    if advance:
                        self.progress.advance()
            except BaseException as exc:  # reported after join, not lost in a thread
                self.errors.append(exc)

        workers = [
            threading.Thread(target=loop, name=f"producer-{i}", daemon=True)
            for i in range(self.threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if self.errors:
            raise RuntimeError(f"a producer failed: {self.errors[0]!r}") from self.errors[0]


def _typed_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Numbers as Decimal, as the stream hands them to the processor."""
    return dict(dynamodb_values(dict(attributes)))


class _DecisionWriter:
    """Builds decision items exactly like the processor's, for the two synchronous ways.

    They have no stream: ``sequence_number`` is a 22-digit counter, the length of a
    stream sequence number, so their items weigh what turnstile's do.
    """

    def __init__(self, store: SignupStore) -> None:
        self.store = store
        self._counter = 10**21
        self._lock = threading.Lock()

    def item(
        self, signup: Signup, submitted_at: str, status: str, position: int | None
    ) -> dict[str, Any]:
        with self._lock:
            self._counter += 1
            sequence = str(self._counter)
        decision = Decision(
            signup_id=signup.signup_id,
            sequence_number=sequence,
            status=status,
            seats=signup.seats,
            reason=Reason.CAPACITY_FULL if status == Status.REJECTED else None,
            position=position,
        )
        request = IntakeRecord(
            event_id=signup.event_id,
            signup_id=signup.signup_id,
            sequence_number=sequence,
            seats=signup.seats,
            attributes=_typed_attributes(signup.attributes),
            submitted_at=submitted_at,
        )
        return self.store.decision_item(signup.event_id, decision, utc_now(), request)

    def put(self, client: Any, item: dict[str, Any]) -> None:
        client.put_item(
            TableName=self.store.main_table,
            Item=item,
            ConditionExpression="attribute_not_exists(#sk)",
            ExpressionAttributeNames={"#sk": Attr.SIGNUP_ID},
        )


def _event_key(event_id: str) -> dict[str, Any]:
    """The key of turnstile's event item (control table), which every way reads capacity from."""
    pk, sk = ControlKey.event(event_id)
    return {ControlKey.PK: {"S": pk}, ControlKey.SK: {"S": sk}}


def create_events(
    endpoint: LocalEndpoint, workload: Workload, sizes: ItemSizes, meter: Meter | None = None
) -> SignupStore:
    """Create the events through a metered client: its units (``meter``) are the set-up
    cost, reported apart from the cost of deciding."""
    store = SignupStore(
        MeteredClient(endpoint.client, meter or Meter("setup"), sizes),
        intake_table=endpoint.intake_table,
        main_table=endpoint.main_table,
        control_table=endpoint.control_table,
    )
    now = utc_now()
    for event_id, capacity in event_capacities(workload).items():
        store.create_event(event_id, capacity, now)
    return store


# -- naive --------------------------------------------------------------------------------


def run_naive(
    endpoint: LocalEndpoint, workload: Workload, signups: Sequence[Signup], progress: Progress
) -> StrategyRun:
    """Count, then write: nothing stops two producers from counting the same seats."""
    sizes = ItemSizes()
    setup = Meter("setup")
    store = create_events(endpoint, workload, sizes, setup)
    meter = Meter("producers")
    client = MeteredClient(endpoint.client, meter, sizes)
    writer = _DecisionWriter(store)
    capacities: dict[str, int] = {}
    latencies: list[float] = []

    def capacity(event_id: str) -> int:
        # Capacity never changes: one eventually consistent read per event, then cached.
        if event_id not in capacities:
            item = client.get_item(TableName=store.control_table, Key=_event_key(event_id))["Item"]
            capacities[event_id] = int(item[Attr.CAPACITY]["N"])
        return capacities[event_id]

    def decide(signup: Signup) -> None:
        started = time.perf_counter()
        submitted_at = utc_now()
        query: dict[str, Any] = {
            "TableName": store.main_table,
            "KeyConditionExpression": "#pk = :pk",
            "FilterExpression": "#status = :accepted",
            "ProjectionExpression": "#seats",
            "ExpressionAttributeNames": {
                "#pk": Attr.EVENT_ID,
                "#status": Attr.STATUS,
                "#seats": Attr.SEATS,
            },
            "ExpressionAttributeValues": {
                ":pk": {"S": signup.event_id},
                ":accepted": {"S": Status.ACCEPTED},
            },
            "ConsistentRead": True,
        }
        taken = accepted = 0
        while True:
            page = client.query(**query)
            taken += sum(int(i[Attr.SEATS]["N"]) for i in page.get("Items", []))
            accepted += len(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        if taken + signup.seats <= capacity(signup.event_id):
            item = writer.item(signup, submitted_at, Status.ACCEPTED, accepted + 1)
        else:
            item = writer.item(signup, submitted_at, Status.REJECTED, None)
        writer.put(client, item)
        latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    _Producers(signups, workload.producers, progress).run(decide)
    wall = time.perf_counter() - started
    recount = census(endpoint, workload, sizes, signups=signups)
    return StrategyRun(
        name="naive",
        signups=len(signups),
        wall_s=wall,
        latencies_s=latencies,
        census=recount,
        meters={"producers": meter.snapshot()},
        cost_roles=("producers",),
        setup=setup.snapshot(),
        events=workload.events,
        floor=counter_floor(recount),
    )


# -- optimistic ---------------------------------------------------------------------------


def run_optimistic(
    endpoint: LocalEndpoint, workload: Workload, signups: Sequence[Signup], progress: Progress
) -> StrategyRun:
    """Read the counter, update it only if its version did not move, retry if it did."""
    sizes = ItemSizes()
    setup = Meter("setup")
    store = create_events(endpoint, workload, sizes, setup)
    meter = Meter("producers")
    client = MeteredClient(endpoint.client, meter, sizes)
    writer = _DecisionWriter(store)
    latencies: list[float] = []
    counts = {"conflicts": 0}
    lock = threading.Lock()
    rng = random.Random(workload.seed)

    def decide(signup: Signup) -> None:
        started = time.perf_counter()
        submitted_at = utc_now()
        attempt = 0
        while True:
            event = client.get_item(
                TableName=store.control_table, Key=_event_key(signup.event_id), ConsistentRead=True
            )["Item"]
            # The counters are absent until the first commit: they read as 0.
            capacity, taken, accepted, version = (
                int(event.get(name, {"N": "0"})["N"])
                for name in (Attr.CAPACITY, Attr.TAKEN, Attr.ACCEPTED, Attr.VERSION)
            )
            if signup.seats > capacity - taken:
                # taken only grows: "full" read from any version is final.
                item = writer.item(signup, submitted_at, Status.REJECTED, None)
                break
            try:
                client.update_item(
                    TableName=store.control_table,
                    Key=_event_key(signup.event_id),
                    UpdateExpression="SET #taken = :taken, #accepted = :accepted, #version = :next",
                    ConditionExpression=(
                        "#version = :expected"
                        if version
                        else "(attribute_not_exists(#version) OR #version = :expected)"
                    ),
                    ExpressionAttributeNames={
                        "#taken": Attr.TAKEN,
                        "#accepted": Attr.ACCEPTED,
                        "#version": Attr.VERSION,
                    },
                    ExpressionAttributeValues={
                        ":taken": {"N": str(taken + signup.seats)},
                        ":accepted": {"N": str(accepted + 1)},
                        ":next": {"N": str(version + 1)},
                        ":expected": {"N": str(version)},
                    },
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise
                with lock:
                    counts["conflicts"] += 1
                attempt += 1
                # A little jitter so the losers do not collide again in lockstep.
                time.sleep(rng.uniform(0, 0.002 * min(attempt, 5)))
                continue
            item = writer.item(signup, submitted_at, Status.ACCEPTED, accepted + 1)
            break
        writer.put(client, item)
        latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    _Producers(signups, workload.producers, progress).run(decide)
    wall = time.perf_counter() - started
    recount = census(
        endpoint, workload, sizes, signups=signups, holdings=event_item_holdings(endpoint)
    )
    return StrategyRun(
        name="optimistic",
        signups=len(signups),
        wall_s=wall,
        latencies_s=latencies,
        census=recount,
        meters={"producers": meter.snapshot()},
        cost_roles=("producers",),
        conflicts=counts["conflicts"],
        retries=counts["conflicts"],
        setup=setup.snapshot(),
        events=workload.events,
        floor=counter_floor(
            recount, event_items(scan_items(endpoint.client, endpoint.control_table))
        ),
    )


def counter_floor(
    recount: TableCensus,
    counters: Sequence[Mapping[str, Any]] = (),
    transactional: bool = False,
) -> Floor:
    """The floor of a way that writes each decision once and, per accepted signup, updates
    its event's counter (``counters``: the counter items, whose ``version`` counts those
    updates; none for naive). ``transactional``: the accepted signup's counter update and
    decision are one transaction, at twice the units of each."""
    doubled = (Status.ACCEPTED,) if transactional else ()
    units, writes = decision_floor(recount.decision_sizes_by_status, doubled)
    parts, counts = {"decisions": units}, {"decisions": writes}
    contract = "a decision write per decision"
    if counters:
        parts["counter updates"], counts["counter updates"] = commit_floor(
            counters, transactional=transactional
        )
        contract += " + a counter update per accepted signup"
        if transactional:
            contract += ", the two in one transaction (x2)"
    return Floor(contract=contract, write_units=parts, writes=counts)


# -- turnstile ----------------------------------------------------------------------------


class CountingProcessor(StreamProcessor):
    """The real ``StreamProcessor``, adding up what its batches report."""

    def __init__(self, store: SignupStore, **kwargs: Any) -> None:
        super().__init__(store, **kwargs)
        self.batches = 0
        self.decided = 0
        self.conflicts = 0
        self.failed_groups = 0
        self._count_lock = threading.Lock()

    def process(self, records: Iterable[StreamRecord]) -> BatchResult:
        result = super().process(records)
        with self._count_lock:
            self.batches += 1
            self.decided += len(result.decided)
            self.conflicts += result.conflicts
            self.failed_groups += len(result.failures)
        return result


class _StatusWatcher:
    """Finds when each submitted signup's decision becomes readable.

    Reads the decision items with strongly consistent BatchGetItem (the batch form of
    GetItem, 100 keys a request) over everything still pending, round after round, and
    stamps each signup the moment a read returns its decision.
    """

    def __init__(self, client: Any, table: str, expected: int, progress: Progress) -> None:
        self.client = client
        self.table = table
        self.expected = expected
        self.progress = progress
        self.latencies: list[float] = []
        self.rounds = 0
        self._incoming: list[tuple[tuple[str, str], float]] = []
        self._pending: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self.done = threading.Event()

    def submitted(self, event_id: str, signup_id: str, started: float) -> None:
        with self._lock:
            self._incoming.append(((event_id, signup_id), started))

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set() and len(self.latencies) < self.expected:
            with self._lock:
                self._pending.update(self._incoming)
                self._incoming.clear()
            if not self._pending:
                stop.wait(0.01)
                continue
            self.rounds += 1
            found = 0
            keys = list(self._pending)
            for start in range(0, len(keys), BATCH_SIZE):
                found += self._read(keys[start : start + BATCH_SIZE])
            if not found:
                stop.wait(0.02)
        self.done.set()

    def _read(self, keys: list[tuple[str, str]]) -> int:
        response = self.client.batch_get_item(
            RequestItems={
                self.table: {
                    "Keys": [{Attr.EVENT_ID: {"S": e}, Attr.SIGNUP_ID: {"S": s}} for e, s in keys],
                    "ConsistentRead": True,
                    "ProjectionExpression": "#pk, #sk, #status",
                    "ExpressionAttributeNames": {
                        "#pk": Attr.EVENT_ID,
                        "#sk": Attr.SIGNUP_ID,
                        "#status": Attr.STATUS,
                    },
                }
            }
        )
        seen = time.perf_counter()
        found = 0
        for item in response.get("Responses", {}).get(self.table, []):
            if Attr.STATUS not in item:
                continue
            key = (item[Attr.EVENT_ID]["S"], item[Attr.SIGNUP_ID]["S"])
            started = self._pending.pop(key, None)
            if started is not None:
                self.latencies.append(seen - started)
                found += 1
        if found:
            self.progress.advance(found)
        return found


def run_turnstile(
    endpoint: LocalEndpoint, workload: Workload, signups: Sequence[Signup], progress: Progress
) -> StrategyRun:
    """Producers append to intake; the stream handler decides; a reader sees the result."""
    quiet_handler_environment()
    from turnstile.handlers import stream as stream_module
    from turnstile_tools.local.poller import CheckpointStore, StreamPoller

    sizes = ItemSizes()
    setup = Meter("setup")
    create_events(endpoint, workload, sizes, setup)
    roles = ("producers", "processor", "status_reads", "stream", "sweeper", "releaser")
    meters = {name: Meter(name) for name in roles}
    # The sweeper as deployed has run before: its first run, a full scan of the (empty)
    # intake table, recorded one, so the run after the decisions reads the index.
    housekeeping = Housekeeping(endpoint, sizes)
    housekeeping.first_sweep(Meter("sweeper, before the signups"))
    # The processor as deployed, under its role (and the event source mapping reading the
    # stream for it); producers and the clients polling for decisions are users.
    processor = CountingProcessor(
        SignupStore(
            MeteredClient(
                endpoint.client_as(Function.PROCESSOR),
                meters["processor"],
                sizes,
                observer=endpoint.client,
            ),
            intake_table=endpoint.intake_table,
            main_table=endpoint.main_table,
            control_table=endpoint.control_table,
        ),
        chunk_size=BATCH_SIZE,
    )
    watcher = _StatusWatcher(
        MeteredClient(endpoint.client, meters["status_reads"], sizes),
        endpoint.main_table,
        len(signups),
        progress,
    )
    producer_store = SignupStore(
        MeteredClient(endpoint.client, meters["producers"], sizes),
        intake_table=endpoint.intake_table,
        main_table=endpoint.main_table,
        control_table=endpoint.control_table,
    )
    stop = threading.Event()
    printed_before = EMF_SINK.lines
    previous = stream_module._processor
    stream_module._processor = processor  # the handler's per-container processor
    # The event source mapping as deployed (its batching window), at the bench's batch size.
    source = replace(STREAM_SOURCE, batch_size=BATCH_SIZE)
    with tempfile.TemporaryDirectory(prefix="turnstile-bench-") as state:
        timings: list[float] = []

        def timed(event: dict[str, Any], context: Any) -> Any:
            started = time.perf_counter()
            try:
                return quiet(stream_module.handler)(event, context)
            finally:
                timings.append(time.perf_counter() - started)

        poller = StreamPoller(
            handler=timed,
            streams_client=MeteredClient(
                endpoint.client_as(Function.PROCESSOR, "dynamodbstreams"), meters["stream"]
            ),
            stream_arn=endpoint.stream_arn(),
            checkpoints=CheckpointStore(Path(state) / "checkpoints.json"),
            settings=source,
        )
        threads = [
            threading.Thread(target=poller.run, args=(stop,), name="bench-poller", daemon=True),
            threading.Thread(target=watcher.run, args=(stop,), name="bench-status", daemon=True),
        ]
        for thread in threads:
            thread.start()

        def submit(signup: Signup) -> None:
            started = time.perf_counter()
            producer_store.put_intake(
                signup.event_id, signup.signup_id, signup.seats, signup.attributes, utc_now()
            )
            watcher.submitted(signup.event_id, signup.signup_id, started)

        started = time.perf_counter()
        try:
            _Producers(signups, workload.producers, progress).run(submit, advance=False)
            # Generous: on a slow machine moto, not turnstile, sets the pace.
            watcher.done.wait(timeout=120 + len(signups) / 10)
            wall = time.perf_counter() - started
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
            stream_module._processor = previous
    # The intake items as the producers wrote them (no marker: a first put carries none).
    intake_as_written = list(sizes.sizes(endpoint.intake_table).values())
    # What turnstile does after the decisions, metered like the rest: the sweeper's next
    # run (past the minimum age), which finds nothing undecided and no marker to remove,
    # and the due-holds releaser's.
    progress.phase("turnstile: sweeper and due-holds releaser", 1)
    swept = housekeeping.sweep(meters["sweeper"], Meter("sweeper, idle run"))
    released = housekeeping.release(meters["releaser"])
    progress.advance()
    refuse_denials(endpoint)
    poller_stats = poller.stats
    recount = census(
        endpoint,
        workload,
        sizes,
        intake=True,
        signups=signups,
        holdings=event_item_holdings(endpoint),
    )
    recount.intake_sizes = intake_as_written
    return StrategyRun(
        name="turnstile",
        signups=len(signups),
        wall_s=wall,
        latencies_s=watcher.latencies,
        census=recount,
        meters={name: meter.snapshot() for name, meter in meters.items()},
        setup=setup.snapshot(),
        events=workload.events,
        # Every part turnstile runs for a decision: all in.
        cost_roles=TURNSTILE_PARTS,
        floor=turnstile_floor(endpoint, recount),
        conflicts=processor.conflicts,
        retries=processor.conflicts + processor.store.retries + poller_stats.retries,
        extra={
            "batches": processor.batches,
            "mean_batch_records": round(
                poller_stats.records_delivered / max(1, poller_stats.invocations), 1
            ),
            "failed_groups": processor.failed_groups,
            "handler_s_per_batch": round(sum(timings) / max(1, len(timings)), 4),
            # What the poller fed the handler by: why turnstile answers a batch later.
            "stream_source": {
                "batch_size": source.batch_size,
                "max_batching_window_s": source.max_batching_window_s,
                "poll_interval_s": source.poll_interval_s,
            },
            "event_item_bytes_max": max(
                sizes.largest((endpoint.control_table, *ControlKey.event(e)))
                for e in event_capacities(workload)
            ),
            "status_read_rounds": watcher.rounds,
            "emf_lines_printed": EMF_SINK.lines - printed_before,
            "sweeper": swept,
            "releaser": released,
            "audit": _audit(endpoint),
        },
    )


#: turnstile's parts, each on a meter of its own: together, all it does per decision.
TURNSTILE_PARTS = ("producers", "processor", "sweeper", "releaser")
#: What the decision path alone costs (the figure reported before the sweeper was counted).
DECISION_PATH = ("producers", "processor")


class Housekeeping:
    """The sweeper and the due-holds releaser as deployed, over a run's tables.

    Each is the project's own code (``turnstile.jobs.sweeper.Sweeper`` with the deployed
    handler's settings, ``turnstile.jobs.due_holds.release_due_holds``) on a client that
    signs as its function's role, metered on the run's shared ``ItemSizes``. The sweeper's
    clock runs ``min_age_s`` (and a second) ahead of the real one, so the run after the
    decisions is the one that, deployed, would come at least that long after the last
    submission: it finds every record decided and, first puts carrying no marker, nothing
    to unmark. (It reads no on-failure queue: the benchmark's batches are never given up.)
    """

    OWNER = "bench-sweeper"

    def __init__(self, endpoint: LocalEndpoint, sizes: ItemSizes) -> None:
        self.endpoint = endpoint
        self.sizes = sizes

    def _store(self, function: str, meter: Meter) -> SignupStore:
        return SignupStore(
            MeteredClient(
                self.endpoint.client_as(function),
                meter,
                self.sizes,
                # Reads back what an update left (to size it) with every right: the
                # function's own requests stay exactly as deployed.
                observer=self.endpoint.client,
            ),
            intake_table=self.endpoint.intake_table,
            main_table=self.endpoint.main_table,
            control_table=self.endpoint.control_table,
        )

    def _sweeper(self, meter: Meter, ahead_s: float) -> Sweeper:
        # The deployed handler's settings: the defaults of TURNSTILE_SWEEP_MIN_AGE_S and
        # TURNSTILE_SWEEP_FULL_SCAN_EVERY_S are Sweeper's own.
        return Sweeper(
            self._store(Function.SWEEPER, meter),
            owner=self.OWNER,
            clock=lambda: time.time() + ahead_s,
        )

    def _run(self, meter: Meter, ahead_s: float) -> SweepResult:
        sweeper = self._sweeper(meter, ahead_s)
        result = sweeper.sweep(run_id_for(datetime.fromtimestamp(sweeper.clock(), UTC)))
        if result.status != "succeeded":
            raise RuntimeError(f"the sweeper's run did not succeed: {result.to_dict()}")
        return result

    def first_sweep(self, meter: Meter) -> None:
        """The run before the signups: a full scan of the empty intake table, recorded."""
        result = self._run(meter, 0.0)
        if not result.full_scan:
            raise RuntimeError("the sweeper's first run did not read intake whole")

    def sweep(self, meter: Meter, idle: Meter) -> dict[str, Any]:
        """The sweeper's run after the decisions (on ``meter``: a part of the cost), then
        one more a schedule period later, which finds nothing (on ``idle``: what every run
        costs whatever it finds, reported apart)."""
        probe = self._sweeper(Meter("probe"), 0.0)
        ahead = probe.min_age_s + 1.0
        result = self._run(meter, ahead)
        idle_result = self._run(idle, ahead + SLOT_S)
        snap, idle_snap = meter.snapshot(), idle.snapshot()
        return {
            "note": (
                "the project's sweeper, with the deployed handler's settings, under its role, "
                f"run {ahead:.0f} s (its minimum age) after the decisions, through the index "
                "of marked records; its units are the sweeper part of the cost"
            ),
            "min_age_s": probe.min_age_s,
            "full_scan_every_s": probe.full_scan_every_s,
            "status": result.status,
            "full_scan": result.full_scan,
            "unmarked": result.unmarked,
            "undecided_found": result.undecided,
            "re_emitted": result.re_emitted,
            "write_units": snap.total_write_units,
            "index_write_units": snap.total_index_write_units,
            "read_units": snap.total_read_units,
            "requests": snap.total_requests,
            "failed_conditional_writes": snap.failed_conditional_writes,
            "requests_by_operation": dict(sorted(snap.requests.items())),
            "write_units_by_operation": dict(sorted(snap.write_units.items())),
            "read_units_by_operation": dict(sorted(snap.read_units.items())),
            "idle_run": {
                "note": (
                    "the next run, which finds nothing: the lease, the run history, the "
                    "index and the parked events read; what each run costs (at rest, "
                    "docs/cost.md), part of the run above too, not added again"
                ),
                "unmarked": idle_result.unmarked,
                "write_units": idle_snap.total_write_units,
                "read_units": idle_snap.total_read_units,
                "requests": idle_snap.total_requests,
            },
        }

    def release(self, meter: Meter) -> dict[str, Any]:
        """One run of the due-holds releaser (every minute deployed) after the decisions."""
        holds = sum(
            1
            for item in scan_items(self.endpoint.client, self.endpoint.control_table)
            if Attr.HOLD_DUE_AT in item
        )
        woken = release_due_holds(self._store(Function.DUE_HOLDS, meter), int(time.time() * 1000))
        snap = meter.snapshot()
        return {
            "note": (
                "one run of the project's due-holds releaser, under its role, after the "
                "decisions; events of this preset hold no seats, so it finds nothing due"
                if not holds
                else "one run of the project's due-holds releaser, under its role"
            ),
            "events_holding_seats": holds,
            "woken": woken,
            "write_units": snap.total_write_units,
            "read_units": snap.total_read_units,
            "requests": snap.total_requests,
        }


def turnstile_floor(endpoint: LocalEndpoint, recount: TableCensus) -> Floor:
    """turnstile's floor, from the run's items: each intake record written once (without
    the optional marker), each decision item once, and each commit the run made (an event
    item's ``version``) sized on the event item's counters, without the journal."""
    intake = [
        {k: v for k, v in item.items() if k != Attr.UNDECIDED}
        for item in scan_items(endpoint.client, endpoint.intake_table)
    ]
    decisions, decision_writes = decision_floor(recount.decision_sizes_by_status)
    commits, commit_writes = commit_floor(
        event_items(scan_items(endpoint.client, endpoint.control_table))
    )
    return Floor(
        contract=(
            "an intake write per signup + a decision write per decision + a commit per event "
            "per batch (the event item's counters, without the journal)"
        ),
        write_units={
            "intake": float(sum(write_units(item_size(i)) for i in intake)),
            "decisions": decisions,
            "commits": commits,
        },
        writes={"intake": len(intake), "decisions": decision_writes, "commits": commit_writes},
    )


def refuse_denials(endpoint: LocalEndpoint) -> None:
    """A run in which the endpoint refused a function's role anything counts for nothing:
    the grant is missing on AWS too."""
    refused = endpoint.denials()
    if refused:
        raise RuntimeError(f"the endpoint refused turnstile's own functions: {refused[:3]}")


class _LineCounter(io.TextIOBase):
    """A stdout that counts lines and keeps none."""

    def __init__(self) -> None:
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)


#: What the handler printed although the benchmark disables Powertools metrics.
EMF_SINK = _LineCounter()


def quiet(handler: Callable[[dict[str, Any], Any], Any]) -> Callable[[dict[str, Any], Any], Any]:
    """The handler with its stdout swallowed (and counted).

    Powertools prints an EMF document whenever one metric reaches 100 values, even with
    POWERTOOLS_METRICS_DISABLED; the handler records up to 100 latencies per batch.
    """

    def call(event: dict[str, Any], context: Any) -> Any:
        with contextlib.redirect_stdout(EMF_SINK):
            return handler(event, context)

    return call


def _audit(endpoint: LocalEndpoint) -> dict[str, Any]:
    """``turnstile audit`` on the run's tables: invariants 1-4."""
    from turnstile_tools.audit import audit

    report = audit(
        SignupStore(
            endpoint.client,
            intake_table=endpoint.intake_table,
            main_table=endpoint.main_table,
            control_table=endpoint.control_table,
        )
    )
    return {"ok": report.ok, **report.totals}


# -- the recount ----------------------------------------------------------------------------

#: Items fetched whole to check the metered sizes (moto serializes big items slowly).
SIZE_CHECK_SAMPLE = 100


def _size_check(client: Any, table: str, known: Mapping[tuple[str, str], int]) -> int:
    """Fetch a sample of items whole; count those whose metered size is not their size."""
    keys = sorted(known)
    sample = keys[:: max(1, len(keys) // SIZE_CHECK_SAMPLE)][:SIZE_CHECK_SAMPLE]
    if not sample:
        return 0
    response = client.batch_get_item(
        RequestItems={
            table: {
                "Keys": [{Attr.EVENT_ID: {"S": e}, Attr.SIGNUP_ID: {"S": s}} for e, s in sample],
                "ConsistentRead": True,
            }
        }
    )
    items = response.get("Responses", {}).get(table, [])
    mismatches = len(sample) - len(items)
    for item in items:
        key = (item[Attr.EVENT_ID]["S"], item[Attr.SIGNUP_ID]["S"])
        mismatches += int(known.get(key) != item_size(item))
    return mismatches


def event_item_holdings(endpoint: LocalEndpoint) -> Holdings:
    """Seats each event item's counter says are taken (optimistic's and turnstile's lock
    target), read consistently and unmetered."""
    held: dict[str, int] = {}
    names = (ControlKey.PK, ControlKey.SK, Attr.TAKEN)
    for item in scan_items(endpoint.client, endpoint.control_table, names):
        pk = item[ControlKey.PK]["S"]
        is_event = item[ControlKey.SK]["S"] == ControlKey.EVENT_SK
        if pk.startswith(ControlKey.EVENT_PREFIX) and is_event:
            event_id = pk[len(ControlKey.EVENT_PREFIX) :]
            held[event_id] = int(item.get(Attr.TAKEN, {"N": "0"})["N"])
    return Holdings("event item's taken (control table)", held)


def census(
    endpoint: LocalEndpoint,
    workload: Workload,
    sizes: ItemSizes,
    intake: bool = False,
    signups: Sequence[Signup] | None = None,
    holdings: Holdings | None = None,
) -> TableCensus:
    """Recount the decisions from the tables (unmetered), check them against what was
    submitted and what the lock target holds, and check the metered sizes.

    Every way is held to the same invariants, all counted from the items themselves:
    oversold seats are accepted seats beyond capacity, per event, whatever any counter
    says; lost are ``signups`` without a decision, and seats the lock target (``holdings``)
    holds for no accepted decision; doubled are decision items beyond one per submitted
    signup, and seats accepted decisions have that the lock target does not hold.
    """
    result = TableCensus()
    capacities = event_capacities(workload)
    known = sizes.sizes(endpoint.main_table)
    wanted = (Attr.EVENT_ID, Attr.SIGNUP_ID, Attr.STATUS, Attr.SEATS)
    decided: dict[tuple[str, str], int] = {}  # (event, signup) -> seats if accepted, else 0
    for item in scan_items(endpoint.client, endpoint.main_table, wanted):
        event_id, signup_id = item[Attr.EVENT_ID]["S"], item[Attr.SIGNUP_ID]["S"]
        if Attr.STATUS not in item:
            continue
        result.decided += 1
        size = known.get((event_id, signup_id), 0)
        result.decision_sizes.append(size)
        result.decision_sizes_by_status.setdefault(item[Attr.STATUS]["S"], []).append(size)
        if item[Attr.STATUS]["S"] == Status.ACCEPTED:
            result.accepted += 1
            seats = int(item[Attr.SEATS]["N"])
            result.accepted_seats[event_id] = result.accepted_seats.get(event_id, 0) + seats
            decided[(event_id, signup_id)] = seats
        else:
            result.rejected += 1
            decided[(event_id, signup_id)] = 0
    result.oversold_seats = sum(
        max(0, seats - capacities.get(event_id, 0))
        for event_id, seats in result.accepted_seats.items()
    )
    if signups is not None:
        submitted = {(s.event_id, s.signup_id) for s in signups}
        result.lost_signups = len(submitted - decided.keys())
        result.doubled_decisions = len(decided.keys() - submitted)
    if holdings is not None:
        result.lock_target = holdings.target
        if holdings.by_signup is not None:
            for key in decided.keys() | holdings.by_signup.keys():
                held, given = holdings.by_signup.get(key, 0), decided.get(key, 0)
                result.lost_seats += max(0, held - given)
                result.doubled_seats += max(0, given - held)
        else:
            for event_id in capacities.keys() | holdings.by_event.keys():
                held = holdings.by_event.get(event_id, 0)
                given = result.accepted_seats.get(event_id, 0)
                result.lost_seats += max(0, held - given)
                result.doubled_seats += max(0, given - held)
    result.size_mismatches = _size_check(endpoint.client, endpoint.main_table, known)
    if intake:
        known_intake = sizes.sizes(endpoint.intake_table)
        result.intake_sizes = list(known_intake.values())
        result.size_mismatches += _size_check(endpoint.client, endpoint.intake_table, known_intake)
    return result

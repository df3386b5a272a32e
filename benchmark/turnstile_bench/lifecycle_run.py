"""``turnstile bench --lifecycle``: holds, confirmations, cancellations and a waitlist,
end to end through the real stream handler, and what each transition costs.

One or a few events with holds and a waitlist (docs/lifecycle.md). Producers submit the
signups at a steady rate (``rate``; a burst would back the stream up for longer than a short
hold lasts, so every confirm would come too late); a watcher polls every signup's decision item
(strongly consistent BatchGetItem) and acts as the signup's producer would, by a fate drawn
up front (seeded): of the signups it sees HELD, ``confirm_share`` confirm and the others let
the hold lapse; of those it sees ACCEPTED, ``cancel_share`` cancel. A request is the
producer's update of its own intake item (docs/lifecycle.md §10, "Requests"). Waitlisted
signups are promoted by the processor as seats come back. Due holds are released by the
due-holds scheduler's own code (``turnstile.jobs.due_holds.release_due_holds``), every second as
``turnstile local`` runs it.

Every transition the processor commits is counted from its batches (the engine's moves, by
cause); units and requests are metered per role (processor, producers' signups, producers'
requests, releaser, the bench's own polling). Per transition, "processor only" is what the
stream processor writes (the event item's commits and the decision items), and "with the
requests" adds the producers' request writes (their intake updates); the releaser's
wake-ups are reported apart. Batches are sorted by what they carried (first decisions
only, later moves only, both), so the first decisions' figures stand beside the moves'.

At the end a recount from the tables (unmetered): every item's status and history follow
``lifecycle.ALLOWED_TRANSITIONS`` and end at its status; the history holds exactly the moves
the processor reported for it (nothing doubled); every intake record has a decision and
every request an answer (nothing lost); the seats of HELD and ACCEPTED signups add up to the
event's ``taken``, at most its capacity; no hold outlived the run, no waiting signup fits
in the free seats; the event's ``status_counts`` match the items; ``turnstile audit`` is ok.
"""

from __future__ import annotations

import queue
import random
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from turnstile.base.contract import (
    STREAM_SOURCE,
    WAKE_SOURCE,
    Attr,
    ControlKey,
    Function,
    RequestKind,
    Status,
)
from turnstile.jobs.processor import BatchResult, StreamRecord, utc_now
from turnstile.storage.store import SignupStore
from turnstile_bench.endpoint import LocalEndpoint, quiet_handler_environment
from turnstile_bench.metering import ItemSizes, Meter, MeteredClient, MeterSnapshot, combine
from turnstile_bench.progress import Progress
from turnstile_bench.report import cell
from turnstile_bench.workload import Signup, Workload, event_ids, generate, sizes_of

__all__ = [
    "LIFECYCLE",
    "LifecycleWorkload",
    "recount",
    "render_lifecycle",
    "run_lifecycle",
]

BATCH_SIZE = 100
#: The seated statuses: their seats are the event's ``taken``.
SEATED = (Status.HELD, Status.ACCEPTED)
#: Quiet this long (nothing held, every request answered) and the run is over: time for
#: a promotion's item to land after the release's.
SETTLE_S = 2.0
#: The goal for write units per transition, processor only (the issue's).
WRITE_UNITS_PER_TRANSITION_GOAL = 1.2


@dataclass(frozen=True)
class LifecycleWorkload:
    """The knobs of a lifecycle run."""

    events: int = 1
    capacity: int = 100
    waitlist: int = 50
    #: Short enough that holds lapse during the run, long enough for a confirm to make it:
    #: a confirm takes the stream's batching window (1 s), a batch and a poll, 2 to 3 s on
    #: moto, so holds of 3 s see many confirms refused ``hold_expired``.
    hold_seconds: int = 5
    signups: int = 400
    producers: int = 16
    #: Signups submitted per second (0: all at once). A burst backs the stream up behind
    #: the signups for longer than a short hold, and every confirm then comes too late.
    rate: float = 40.0
    #: Of the signups seen HELD, the share that confirm (the rest let the hold lapse).
    confirm_share: float = 0.7
    #: Of the signups seen ACCEPTED, the share that cancel.
    cancel_share: float = 0.2
    seats: tuple[tuple[int, float], ...] = ((1, 0.7), (2, 0.2), (4, 0.1))
    intake_bytes: tuple[int, int] = (350, 900)
    seed: int = 6
    #: How often the releaser looks for due holds (``turnstile local``'s period).
    release_period_s: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seats"] = {str(s): w for s, w in self.seats}
        out["intake_bytes"] = list(self.intake_bytes)
        return out

    def signups_workload(self) -> Workload:
        return Workload(
            events=self.events,
            capacity=self.capacity,
            signups=self.signups,
            producers=self.producers,
            seats=self.seats,
            hot_share=1.0 / self.events,
            intake_bytes=self.intake_bytes,
            seed=self.seed,
        )


#: The preset: one event of 100 seats, a waitlist of 50, 5-second holds, 400 signups at
#: 40 a second.
LIFECYCLE = LifecycleWorkload()


@dataclass(frozen=True)
class Fate:
    """What a signup's producer does: confirm a hold (else let it lapse); cancel once
    accepted."""

    confirms: bool
    cancels: bool


# -- the processor, counting transitions per batch ---------------------------------------


class _ByTable:
    """A client that meters the control table's requests (the event item's commits and
    reads) on one client and everything else (decision items, intake) on another."""

    def __init__(self, control_table: str, control: Any, other: Any) -> None:
        self._control_table = control_table
        self._control = control
        self._other = other

    def __getattr__(self, operation: str) -> Any:
        def call(**kwargs: Any) -> Any:
            target = (
                self._control if kwargs.get("TableName") == self._control_table else self._other
            )
            return getattr(target, operation)(**kwargs)

        return call


@dataclass
class BatchCount:
    """One batch: its transitions by cause, and what the processor spent on it."""

    causes: Counter[str]
    refusals: int
    write_units: float
    read_units: float
    requests: int

    @property
    def kind(self) -> str:
        firsts = self.causes.get("signup", 0)
        moves = sum(self.causes.values()) - firsts
        if not firsts and not moves:
            return "nothing"
        if not moves:
            return "first_decisions"
        return "moves" if not firsts else "mixed"


class _TimedStore(SignupStore):
    """The processor's store, noting when its last commit landed."""

    last_commit_at = 0.0

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        journal = super().commit(*args, **kwargs)
        self.last_commit_at = time.perf_counter()
        return journal


def _processor_class() -> Any:
    from turnstile_bench.strategies import CountingProcessor

    class LifecycleProcessor(CountingProcessor):
        """The real processor; keeps every move it committed, when, and per batch."""

        def __init__(self, store: _TimedStore, meters: Sequence[Meter], **kwargs: Any) -> None:
            super().__init__(store, **kwargs)
            self.meters = meters
            self.batch_counts: list[BatchCount] = []
            #: (event_id, transition, commit time) of every committed move and refusal.
            self.moves: list[tuple[str, Any, float]] = []

        def _decide_chunk(
            self, event_id: str, chunk: Any, result: BatchResult, *args: Any, **kwargs: Any
        ) -> Any:
            before = len(result.transitions)
            out = super()._decide_chunk(event_id, chunk, result, *args, **kwargs)
            at = self.store.last_commit_at
            self.moves.extend((e, t, at) for e, t in result.transitions[before:])
            return out

        def process(self, records: Iterable[StreamRecord]) -> BatchResult:
            start = combine(m.snapshot() for m in self.meters)
            result = super().process(records)
            end = combine(m.snapshot() for m in self.meters)
            applied = [t for _, t in result.transitions if not t.refused]
            self.batch_counts.append(
                BatchCount(
                    causes=Counter(t.cause for t in applied),
                    refusals=sum(1 for _, t in result.transitions if t.refused),
                    write_units=end.total_write_units - start.total_write_units,
                    read_units=end.total_read_units - start.total_read_units,
                    requests=end.total_requests - start.total_requests,
                )
            )
            return result

    return LifecycleProcessor


# -- the producers' side: watch, confirm, cancel -----------------------------------------


class _Watcher:
    """Polls every signup's decision item until the run settles, and acts on what it sees
    as the signup's producer would (``Fate``), through ``requester``."""

    def __init__(
        self,
        client: Any,
        table: str,
        fates: Mapping[tuple[str, str], Fate],
        requester: _Requester,
        progress: Progress,
    ) -> None:
        self.client = client
        self.table = table
        self.fates = fates
        self.requester = requester
        self.progress = progress
        self.submitted: dict[tuple[str, str], float] = {}
        self.status: dict[tuple[str, str], str] = {}
        self.answered: dict[tuple[str, str], int] = {}
        #: The first time each (signup, status) was read.
        self.seen: dict[tuple[tuple[str, str], str], float] = {}
        self.first_decision_s: list[float] = []
        self.rounds = 0
        self._lock = threading.Lock()
        self.settled = threading.Event()

    def submit(self, key: tuple[str, str], started: float) -> None:
        with self._lock:
            self.submitted[key] = started

    def _open(self) -> list[tuple[str, str]]:
        """Signups whose story may still move: undecided, HELD, a request unanswered, or
        ACCEPTED with a cancel to come."""
        with self._lock:
            keys = list(self.submitted)
        out = []
        for key in keys:
            if self._may_move(key):
                out.append(key)
        return out

    def _may_move(self, key: tuple[str, str]) -> bool:
        status = self.status.get(key)
        if status is None or status == Status.HELD:
            return True
        if self.answered.get(key, 0) < self.requester.sent(key):
            return True
        cancel_to_come = not self.requester.sent(key, RequestKind.CANCEL)
        return status == Status.ACCEPTED and self.fates[key].cancels and cancel_to_come

    def waiting(self) -> list[tuple[str, str]]:
        return [k for k, s in self.status.items() if s == Status.WAITLISTED]

    def run(self, stop: threading.Event, expected: int, idle_s: float) -> None:
        """Poll until every signup is decided and nothing more can move: no hold left, no
        request unanswered (the waitlist moves only when one of those does)."""
        quiet_since: float | None = None
        while not stop.is_set():
            open_keys = self._open()
            if len(self.submitted) == expected and not open_keys:
                # Quiet for a moment more: a promotion may still be on its way.
                quiet_since = quiet_since or time.perf_counter()
                if time.perf_counter() - quiet_since >= idle_s:
                    break
                keys = self.waiting()
            else:
                quiet_since = None
                keys = open_keys + self.waiting()
            if not keys:
                stop.wait(0.02)
                continue
            self.rounds += 1
            changed = 0
            for start in range(0, len(keys), BATCH_SIZE):
                changed += self._read(keys[start : start + BATCH_SIZE])
            if not changed:
                stop.wait(0.02)
        self.settled.set()

    def _read(self, keys: list[tuple[str, str]]) -> int:
        response = self.client.batch_get_item(
            RequestItems={
                self.table: {
                    "Keys": [{Attr.EVENT_ID: {"S": e}, Attr.SIGNUP_ID: {"S": s}} for e, s in keys],
                    "ConsistentRead": True,
                    "ProjectionExpression": "#pk, #sk, #status, #rc",
                    "ExpressionAttributeNames": {
                        "#pk": Attr.EVENT_ID,
                        "#sk": Attr.SIGNUP_ID,
                        "#status": Attr.STATUS,
                        "#rc": Attr.REQUEST_COUNT,
                    },
                }
            }
        )
        seen = time.perf_counter()
        changed = 0
        for item in response.get("Responses", {}).get(self.table, []):
            if Attr.STATUS not in item:
                continue
            key = (item[Attr.EVENT_ID]["S"], item[Attr.SIGNUP_ID]["S"])
            status = item[Attr.STATUS]["S"]
            answered = int(item.get(Attr.REQUEST_COUNT, {"N": "0"})["N"])
            if answered != self.answered.get(key, 0):
                self.answered[key] = answered
                changed += 1
            before = self.status.get(key)
            if status == before:
                continue
            changed += 1
            self.status[key] = status
            self.seen.setdefault((key, status), seen)
            if before is None:
                self.first_decision_s.append(seen - self.submitted[key])
                self.progress.advance()
            fate = self.fates[key]
            if status == Status.HELD and fate.confirms:
                self.requester.ask(key, RequestKind.CONFIRM)
            elif status == Status.ACCEPTED and fate.cancels:
                self.requester.ask(key, RequestKind.CANCEL)
        return changed


class _Requester:
    """Producers' requests: each an update of the signup's own intake item (docs/lifecycle.md
    §10), sent by a few threads so the watcher never waits on them."""

    def __init__(self, store: SignupStore, threads: int) -> None:
        self.store = store
        self._queue: queue.Queue[tuple[tuple[str, str], str] | None] = queue.Queue()
        self._sent: Counter[tuple[tuple[str, str], str]] = Counter()
        self._lock = threading.Lock()
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._loop, name=f"bench-request-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def sent(self, key: tuple[str, str], kind: str | None = None) -> int:
        with self._lock:
            if kind is not None:
                return self._sent[(key, kind)]
            return sum(n for (k, _), n in self._sent.items() if k == key)

    def counts(self) -> Counter[str]:
        with self._lock:
            out: Counter[str] = Counter()
            for (_, kind), n in self._sent.items():
                out[kind] += n
            return out

    def ask(self, key: tuple[str, str], kind: str) -> None:
        with self._lock:
            if self._sent[(key, kind)]:
                return  # a producer asks once
            self._sent[(key, kind)] += 1
        self._queue.put((key, kind))

    def _loop(self) -> None:
        from turnstile.base.contract import undecided_shard

        while (job := self._queue.get()) is not None:
            (event_id, signup_id), kind = job
            try:
                self.store.dynamo.call(
                    "update_item",
                    TableName=self.store.intake_table,
                    Key={Attr.EVENT_ID: {"S": event_id}, Attr.SIGNUP_ID: {"S": signup_id}},
                    UpdateExpression=(
                        "SET #request = :kind, #undecided = :shard ADD #request_count :one"
                    ),
                    ExpressionAttributeNames={
                        "#request": Attr.REQUEST,
                        "#undecided": Attr.UNDECIDED,
                        "#request_count": Attr.REQUEST_COUNT,
                    },
                    ExpressionAttributeValues={
                        ":kind": {"S": kind},
                        ":shard": {"S": undecided_shard(event_id, signup_id)},
                        ":one": {"N": "1"},
                    },
                )
            except BaseException as exc:  # reported at the end, not lost in a thread
                self.errors.append(exc)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=10)


class _Releaser:
    """The due-holds scheduler, as ``turnstile local`` runs it: every ``period_s``,
    ``turnstile.jobs.due_holds.release_due_holds`` reads the control table's due-holds index and
    wakes each due event (its wake-up item: a tick on the control table's stream; the
    step's expiry does the rest)."""

    def __init__(self, store: SignupStore, period_s: float) -> None:
        self.store = store
        self.period_s = period_s
        self.wake_ups = 0

    def run(self, stop: threading.Event) -> None:
        from turnstile.jobs.due_holds import release_due_holds

        while not stop.wait(self.period_s):
            self.wake_ups += release_due_holds(self.store, int(time.time() * 1000))


# -- the run ------------------------------------------------------------------------------


def _fates(workload: LifecycleWorkload, signups: Sequence[Signup]) -> dict[tuple[str, str], Fate]:
    rng = random.Random(workload.seed + 1)
    return {
        (s.event_id, s.signup_id): Fate(
            confirms=rng.random() < workload.confirm_share,
            cancels=rng.random() < workload.cancel_share,
        )
        for s in signups
    }


def _set_options(client: Any, control_table: str, event_id: str, w: LifecycleWorkload) -> None:
    """The event's lifecycle options, on its item (as an organizer's creation writes them)."""
    pk, sk = ControlKey.event(event_id)
    client.update_item(
        TableName=control_table,
        Key={ControlKey.PK: {"S": pk}, ControlKey.SK: {"S": sk}},
        UpdateExpression="SET #w = :w, #h = :h",
        ExpressionAttributeNames={"#w": Attr.WAITLIST, "#h": Attr.HOLD_SECONDS},
        ExpressionAttributeValues={
            ":w": {"N": str(w.waitlist)},
            ":h": {"N": str(w.hold_seconds)},
        },
    )


def run_lifecycle(workload: LifecycleWorkload, progress: Progress) -> dict[str, Any]:
    """Run the lifecycle workload on a fresh endpoint; the whole result document."""
    import warnings

    from turnstile_bench.report import machine
    from turnstile_bench.strategies import quiet

    warnings.filterwarnings("ignore", message="No application metrics to publish")
    quiet_handler_environment()
    from turnstile.handlers import stream as stream_module
    from turnstile_tools.local.poller import CheckpointStore, StreamPoller

    started_run = time.perf_counter()
    signups = generate(workload.signups_workload())
    fates = _fates(workload, signups)
    events = event_ids(workload.events)
    progress.phase("lifecycle: first decisions", len(signups))
    with LocalEndpoint("lifecycle") as endpoint:
        sizes = ItemSizes()
        roles = (
            "setup",
            "event_item",
            "decision_items",
            "signups",
            "requests",
            "releaser",
            "status_reads",
            "stream",
        )
        meters = {name: Meter(name) for name in roles}

        def store(role: str, function: str | None = None) -> Any:
            """A store metered as ``role``, signing as ``function``'s deployed role (None:
            a user's, with every right)."""
            if function is None:
                metered = MeteredClient(endpoint.client, meters[role], sizes)
            else:
                metered = MeteredClient(
                    endpoint.client_as(function), meters[role], sizes, observer=endpoint.client
                )
            return SignupStore(
                metered,
                intake_table=endpoint.intake_table,
                main_table=endpoint.main_table,
                control_table=endpoint.control_table,
            )

        setup = store("setup")
        now = utc_now()
        for event_id in events:
            setup.create_event(event_id, workload.capacity, now)
            _set_options(setup.dynamo.client, endpoint.control_table, event_id, workload)
        processor_role = endpoint.client_as(Function.PROCESSOR)
        processor_client = _ByTable(
            endpoint.control_table,
            MeteredClient(processor_role, meters["event_item"], sizes),
            MeteredClient(
                processor_role, meters["decision_items"], sizes, observer=endpoint.client
            ),
        )
        processor = _processor_class()(
            _TimedStore(
                processor_client,
                intake_table=endpoint.intake_table,
                main_table=endpoint.main_table,
                control_table=endpoint.control_table,
            ),
            (meters["event_item"], meters["decision_items"]),
            chunk_size=BATCH_SIZE,
        )
        # Requests are the producers' own updates of their intake items (users' rights).
        requester = _Requester(store("requests"), threads=4)
        watcher = _Watcher(
            MeteredClient(endpoint.client, meters["status_reads"], sizes),
            endpoint.main_table,
            fates,
            requester,
            progress,
        )
        releaser = _Releaser(store("releaser", Function.DUE_HOLDS), workload.release_period_s)
        producers = store("signups")
        stop = threading.Event()
        previous = stream_module._processor
        stream_module._processor = processor
        with tempfile.TemporaryDirectory(prefix="turnstile-bench-") as state:
            timings: list[float] = []
            handler = quiet(stream_module.handler)
            one_at_a_time = threading.Lock()  # one container for both mappings

            def timed(event: dict[str, Any], context: Any) -> Any:
                with one_at_a_time:
                    began = time.perf_counter()
                    try:
                        return handler(event, context)
                    finally:
                        timings.append(time.perf_counter() - began)

            streams = MeteredClient(
                endpoint.client_as(Function.PROCESSOR, "dynamodbstreams"), meters["stream"]
            )
            checkpoints = CheckpointStore(Path(state) / "checkpoints.json")
            poller = StreamPoller(
                handler=timed,
                streams_client=streams,
                stream_arn=endpoint.stream_arn(),
                checkpoints=checkpoints,
                settings=replace(STREAM_SOURCE, batch_size=BATCH_SIZE),
            )
            # The releaser's wake-ups reach the processor on the control table's stream.
            wake_poller = StreamPoller(
                handler=timed,
                streams_client=streams,
                stream_arn=endpoint.stream_arn(endpoint.control_table),
                checkpoints=checkpoints,
                settings=WAKE_SOURCE,
            )
            threads = [
                threading.Thread(target=poller.run, args=(stop,), name="bench-poller"),
                threading.Thread(target=wake_poller.run, args=(stop,), name="bench-wakes"),
                threading.Thread(target=releaser.run, args=(stop,), name="bench-releaser"),
            ]
            watch = threading.Thread(
                target=watcher.run,
                args=(stop, len(signups), SETTLE_S),
                name="bench-watcher",
            )
            for thread in (*threads, watch):
                thread.daemon = True
                thread.start()
            from turnstile_bench.strategies import _Producers, refuse_denials

            slot = {s.signup_id: i for i, s in enumerate(signups)}

            def submit(signup: Signup) -> None:
                if workload.rate > 0:
                    # Paced arrivals: signup i is submitted i / rate seconds in.
                    due = started + slot[signup.signup_id] / workload.rate
                    time.sleep(max(0.0, due - time.perf_counter()))
                started_at = time.perf_counter()
                producers.put_intake(
                    signup.event_id, signup.signup_id, signup.seats, signup.attributes, utc_now()
                )
                watcher.submit((signup.event_id, signup.signup_id), started_at)

            started = time.perf_counter()
            try:
                _Producers(signups, workload.producers, progress).run(submit, advance=False)
                # Generous: on a loaded machine moto, not turnstile, sets the pace.
                settled = watcher.settled.wait(timeout=60 + len(signups) / 5)
                wall = time.perf_counter() - started
            finally:
                stop.set()
                for thread in (*threads, watch):
                    thread.join(timeout=30)
                requester.close()
                stream_module._processor = previous
        progress.finish()
        refuse_denials(endpoint)
        if requester.errors:
            raise RuntimeError(f"a request failed: {requester.errors[0]!r}")
        tables = _read_tables(endpoint)
        audit_report = _audit(endpoint)
    snapshots = {name: m.snapshot() for name, m in meters.items()}
    snapshots["processor"] = combine((snapshots["event_item"], snapshots["decision_items"]))
    doc: dict[str, Any] = {
        "bench": "turnstile",
        "schema": 1,
        "mode": "lifecycle",
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "lifecycle_workload": workload.to_dict(),
        "processor": {"batch_size": BATCH_SIZE, "chunk_size": BATCH_SIZE},
        "settled": settled,
        "wall_s": round(wall, 3),
        "batches": len(timings),
        "handler_s_per_batch": round(sum(timings) / max(1, len(timings)), 4),
        "handler_s_total": round(sum(timings), 2),
        "mean_batch_records": round(
            poller.stats.records_delivered / max(1, poller.stats.invocations), 1
        ),
    }
    doc.update(
        figures(
            processor.moves,
            processor.batch_counts,
            snapshots,
            watcher,
            requester.counts(),
            releaser.wake_ups,
            sizes,
            endpoint.main_table,
            wall,
        )
    )
    doc["decision_item_growth"] = item_growth(tables, sizes.sizes(endpoint.main_table), signups)
    commits = doc["per_transition"]["commits"]
    doc["event_item"] = {
        "bytes_max": max(
            sizes.largest((endpoint.control_table, *ControlKey.event(e))) for e in events
        ),
        "write_units_per_commit": _per(snapshots["event_item"].total_write_units, commits),
    }
    doc["recount"] = recount(tables, workload, processor.moves, requester)
    doc["audit"] = audit_report
    doc["checks"] = lifecycle_checks(doc)
    doc["duration_s"] = round(time.perf_counter() - started_run, 1)
    return doc


def _audit(endpoint: LocalEndpoint) -> dict[str, Any]:
    from turnstile_tools.audit import audit

    report = audit(
        SignupStore(
            endpoint.client,
            intake_table=endpoint.intake_table,
            main_table=endpoint.main_table,
            control_table=endpoint.control_table,
        )
    )
    violations = [v for e in report.events for v in e.violations]
    return {"ok": report.ok, **report.totals, "violations_listed": violations[:10]}


@dataclass
class Tables:
    """The run's items, read whole and unmetered after it (plain values)."""

    intake: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    events: dict[str, dict[str, Any]] = field(default_factory=dict)


def _read_tables(endpoint: LocalEndpoint) -> Tables:
    store = SignupStore(
        endpoint.client,
        intake_table=endpoint.intake_table,
        main_table=endpoint.main_table,
        control_table=endpoint.control_table,
    )
    tables = Tables(list(store.intake_items()), list(store.decision_items()))
    for event_id in {i[Attr.EVENT_ID] for i in tables.intake}:
        pk, sk = ControlKey.event(event_id)
        item = endpoint.client.get_item(
            TableName=endpoint.control_table,
            Key={ControlKey.PK: {"S": pk}, ControlKey.SK: {"S": sk}},
            ConsistentRead=True,
            ProjectionExpression="#c, #t, #s, #counts",
            ExpressionAttributeNames={
                "#c": Attr.CAPACITY,
                "#t": Attr.TAKEN,
                "#s": Attr.STATE,
                "#counts": Attr.STATUS_COUNTS,
            },
        ).get("Item", {})
        from turnstile.storage.dynamo import from_item

        tables.events[event_id] = from_item(item)
    return tables


# -- the figures ---------------------------------------------------------------------------


def _per(value: float, n: int) -> float | None:
    return round(value / n, 4) if n else None


def figures(
    moves: Sequence[tuple[str, Any, float]],
    batches: Sequence[BatchCount],
    meters: Mapping[str, MeterSnapshot],
    watcher: _Watcher,
    requests_sent: Mapping[str, int],
    wake_ups: int,
    sizes: ItemSizes,
    main_table: str,
    wall_s: float,
) -> dict[str, Any]:
    """Transitions by cause, units and requests per transition, promotions, latencies."""
    from turnstile_bench.report import percentile

    applied = [(e, t, at) for e, t, at in moves if not t.refused]
    causes = Counter(t.cause for _, t, _ in applied)
    firsts = Counter(t.to_status for _, t, _ in applied if t.cause == "signup")
    refusals = Counter(t.reason for _, t, _ in moves if t.refused)
    n = len(applied)
    processor, requests, releaser = meters["processor"], meters["requests"], meters["releaser"]
    request_writes = requests.total_write_units
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in ("first_decisions", "moves", "mixed"):
        chosen = [b for b in batches if b.kind == kind]
        count = sum(sum(b.causes.values()) for b in chosen)
        by_kind[kind] = {
            "batches": len(chosen),
            "transitions": count,
            "processor_write_units_per_transition": _per(sum(b.write_units for b in chosen), count),
            "processor_requests_per_transition": _per(sum(b.requests for b in chosen), count),
            "processor_read_units_per_transition": _per(sum(b.read_units for b in chosen), count),
        }
    # Promotions: from the release's commit (the same step) to the item read promoted.
    promoted_s = []
    for event_id, t, at in applied:
        if t.cause != "promotion":
            continue
        key = (event_id, t.signup_id)
        seen = [watcher.seen[(key, s)] for s in SEATED if (key, s) in watcher.seen]
        if seen and at:
            promoted_s.append(min(seen) - at)
    promotions = causes.get("promotion", 0)
    promotion_times = sorted(at for _, t, at in applied if t.cause == "promotion")
    span = promotion_times[-1] - promotion_times[0] if len(promotion_times) > 1 else 0.0
    decision_sizes = list(sizes.sizes(main_table).values())
    return {
        "transitions": {
            "all": n,
            "by_cause": dict(sorted(causes.items())),
            "first_decisions_by_status": dict(sorted(firsts.items())),
            "refused": dict(sorted(refusals.items())),
        },
        "requests_sent": dict(sorted(requests_sent.items())),
        "wake_ups": wake_ups,
        "per_transition": {
            "note": (
                "processor only: the stream processor's writes (the event item's commits, "
                "the decision items' puts and updates); with requests: plus the producers' "
                "request writes (the intake updates of confirms and cancels, and their "
                "undecided index entries); the signups' own intake puts and the releaser's "
                "wake-ups are reported apart"
            ),
            "processor_write_units": _per(processor.total_write_units, n),
            "write_units_with_requests": _per(processor.total_write_units + request_writes, n),
            "processor_requests": _per(processor.total_requests, n),
            "requests_with_requests": _per(processor.total_requests + requests.total_requests, n),
            "processor_read_units": _per(processor.total_read_units, n),
            "event_item_write_units": _per(meters["event_item"].total_write_units, n),
            "decision_item_write_units": _per(meters["decision_items"].total_write_units, n),
            "decision_item_writes": _per(
                sum(
                    meters["decision_items"].requests.get(op, 0)
                    for op in ("put_item", "update_item")
                ),
                n,
            ),
            "commits": meters["event_item"].requests.get("update_item", 0),
            "due_holds_index_write_units": _per(meters["event_item"].total_index_write_units, n),
            "by_batch": by_kind,
        },
        "producers": {
            "signup_write_units_per_signup": _per(
                meters["signups"].total_write_units, watcher_total(watcher)
            ),
            "request_write_units_per_request": _per(request_writes, sum(requests_sent.values())),
            "request_index_write_units": requests.total_index_write_units,
        },
        "releaser": {
            "note": "the due-holds scheduler's part: Query of the due-holds index, wake-ups",
            "wake_ups": wake_ups,
            "write_units_per_expiry": _per(releaser.total_write_units, causes.get("expiry", 0)),
            "requests": releaser.total_requests,
            "read_units": round(releaser.total_read_units, 2),
        },
        "promotions": {
            "count": promotions,
            "per_s_of_run": round(promotions / wall_s, 2) if wall_s else None,
            "per_s_while_promoting": round((promotions - 1) / span, 2) if span else None,
            "release_to_readable_p50_s": round(percentile(promoted_s, 50), 4),
            "release_to_readable_p95_s": round(percentile(promoted_s, 95), 4),
            "release_to_readable_max_s": round(max(promoted_s, default=float("nan")), 4),
            "measured": len(promoted_s),
        },
        "first_decision_p50_s": round(percentile(watcher.first_decision_s, 50), 4),
        "first_decision_p95_s": round(percentile(watcher.first_decision_s, 95), 4),
        "transitions_per_s": round(n / wall_s, 1) if wall_s else None,
        "decision_item_bytes": {
            "max": max(decision_sizes, default=None),
            "over_1kb": sum(1 for s in decision_sizes if s > 1024),
        },
        "status_reads": {
            "note": "the bench's own polling; not in the cost above",
            "requests": meters["status_reads"].total_requests,
            "rounds": watcher.rounds,
        },
        "units": {
            name: {
                "requests": m.total_requests,
                "write_units": m.total_write_units,
                "index_write_units_by_index": dict(sorted(m.index_write_units.items())),
                "write_units_by_operation": dict(sorted(m.write_units.items())),
                "read_units": round(m.total_read_units, 2),
                "failed_conditional_writes": m.failed_conditional_writes,
            }
            for name, m in meters.items()
            if name != "stream"
        },
        "cost_roles_total": asdict_snapshot(
            combine(meters[r] for r in ("processor", "requests", "releaser"))
        ),
    }


def watcher_total(watcher: _Watcher) -> int:
    return len(watcher.submitted)


def asdict_snapshot(snapshot: MeterSnapshot) -> dict[str, Any]:
    return {
        "requests": snapshot.total_requests,
        "write_units": snapshot.total_write_units,
        "read_units": round(snapshot.total_read_units, 2),
    }


def item_growth(
    tables: Tables, decision_sizes: Mapping[tuple[str, str], int], signups: Sequence[Signup]
) -> dict[str, Any]:
    """Decision item bytes beyond the intake item's (as submitted), by how many
    transitions the signup made: the room a lifecycle item needs to stay within 1 KB."""
    intake = {
        (s.event_id, s.signup_id): size for s, size in zip(signups, sizes_of(signups), strict=True)
    }
    from turnstile.storage.items import history_of

    by_moves: dict[int, list[tuple[int, int]]] = {}
    for item in tables.decisions:
        key = (item[Attr.EVENT_ID], item[Attr.SIGNUP_ID])
        if key in intake and key in decision_sizes:
            moves = len(history_of(item))
            by_moves.setdefault(moves, []).append((decision_sizes[key], intake[key]))
    out = {}
    for moves, pairs in sorted(by_moves.items()):
        growth = [d - i for d, i in pairs]
        out[str(moves)] = {
            "items": len(pairs),
            "growth_bytes_max": max(growth),
            "growth_bytes_mean": round(sum(growth) / len(growth)),
            "over_1kb": sum(1 for d, _ in pairs if d > 1024),
            "one_unit_for_intake_up_to_bytes": 1024 - max(growth),
        }
    return out


# -- the recount --------------------------------------------------------------------------


def recount(
    tables: Tables,
    workload: LifecycleWorkload,
    moves: Sequence[tuple[str, Any, float]],
    requester: _Requester | None = None,
) -> dict[str, Any]:
    """Check the tables after the run; every problem found, by kind (empty lists: clean)."""
    from turnstile.engine.lifecycle import ALLOWED_TRANSITIONS
    from turnstile.storage.items import history_of

    problems: dict[str, list[str]] = {
        "history": [],
        "doubled": [],
        "lost": [],
        "seats": [],
        "holds": [],
        "waitlist": [],
        "status_counts": [],
        "requests": [],
    }
    reported: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for event_id, t, _ in moves:
        if not t.refused:
            reported.setdefault((event_id, t.signup_id), []).append((t.from_status, t.to_status))
    intake = {(i[Attr.EVENT_ID], i[Attr.SIGNUP_ID]): i for i in tables.intake}
    decisions: dict[tuple[str, str], dict[str, Any]] = {}
    for item in tables.decisions:
        key = (item[Attr.EVENT_ID], item[Attr.SIGNUP_ID])
        if key in decisions:
            problems["doubled"].append(f"{key}: two decision items")
        decisions[key] = item
    for key in intake.keys() - decisions.keys():
        problems["lost"].append(f"{key}: an intake record without a decision")
    for key in decisions.keys() - intake.keys():
        problems["doubled"].append(f"{key}: a decision for no intake record")
    statuses: Counter[str] = Counter()
    per_event: dict[str, Counter[str]] = {}
    seated: Counter[str] = Counter()
    waiting: dict[str, list[int]] = {}
    for key, item in decisions.items():
        status = item.get(Attr.STATUS)
        statuses[status] += 1
        per_event.setdefault(key[0], Counter())[status] += 1
        history = history_of(item)
        path = [(h.get("from"), h.get("to")) for h in history]
        current = Status.PENDING
        for step in path:
            if step not in ALLOWED_TRANSITIONS:
                problems["history"].append(f"{key}: {step[0]} -> {step[1]} is not allowed")
            if step[0] != current:
                problems["history"].append(f"{key}: from {step[0]}, but it was {current}")
            current = step[1]
        if current != status:
            problems["history"].append(f"{key}: the history ends at {current}, status {status}")
        if len(set(path)) != len(path):
            problems["doubled"].append(f"{key}: a transition twice in its history")
        if path != reported.get(key, []):
            problems["doubled" if len(path) > len(reported.get(key, [])) else "lost"].append(
                f"{key}: history {path}, the processor committed {reported.get(key, [])}"
            )
        if status in SEATED:
            seated[key[0]] += int(item.get(Attr.SEATS, 0))
        if status == Status.HELD:
            problems["holds"].append(f"{key}: still HELD after the run")
        if status == Status.WAITLISTED:
            waiting.setdefault(key[0], []).append(int(item.get(Attr.SEATS, 0)))
        if requester is not None:
            sent = requester.sent(key)
            answered = int(item.get(Attr.REQUEST_COUNT) or 0)
            asked = int(intake.get(key, {}).get(Attr.REQUEST_COUNT) or 0)
            if not sent == asked == answered:
                problems["requests"].append(
                    f"{key}: {sent} requests sent, {asked} on intake, {answered} answered"
                )
    events = {}
    for event_id, event in tables.events.items():
        capacity, taken = int(event.get(Attr.CAPACITY, 0)), int(event.get(Attr.TAKEN, 0))
        if seated[event_id] != taken:
            problems["seats"].append(
                f"{event_id}: HELD + ACCEPTED hold {seated[event_id]} seats, taken is {taken}"
            )
        if taken > capacity:
            problems["seats"].append(f"{event_id}: taken {taken} above capacity {capacity}")
        free = capacity - taken
        if event.get(Attr.STATE, "OPEN") == "OPEN" and any(
            s <= free for s in waiting.get(event_id, [])
        ):
            problems["waitlist"].append(f"{event_id}: a waiting signup fits in {free} free seats")
        counts = {k: int(v) for k, v in (event.get(Attr.STATUS_COUNTS) or {}).items() if int(v)}
        recounted = {k: v for k, v in per_event.get(event_id, Counter()).items() if v}
        if counts != recounted:
            problems["status_counts"].append(
                f"{event_id}: status_counts {counts}, items {recounted}"
            )
        events[event_id] = {
            "capacity": capacity,
            "taken": taken,
            "seated_recounted": seated[event_id],
            "waiting": len(waiting.get(event_id, [])),
        }
    return {
        "signups": len(intake),
        "decided": len(decisions),
        "statuses": dict(sorted((k, v) for k, v in statuses.items() if k)),
        "events": events,
        "problems": {k: v[:10] for k, v in problems.items()},
        "problem_counts": {k: len(v) for k, v in problems.items()},
        "clean": not any(problems.values()),
    }


def lifecycle_checks(doc: Mapping[str, Any]) -> dict[str, bool]:
    """What a lifecycle run must show; the command exits 1 unless all hold."""
    recount_ = doc["recount"]
    counts = recount_["problem_counts"]
    by_cause = doc["transitions"]["by_cause"]
    return {
        "settled": bool(doc["settled"]),
        "histories_follow_the_allowed_transitions": counts["history"] == 0,
        "never_oversold_taken_is_held_plus_accepted": counts["seats"] == 0,
        "nothing_lost": counts["lost"] == 0 and recount_["decided"] == recount_["signups"],
        "nothing_doubled": counts["doubled"] == 0,
        "every_request_answered": counts["requests"] == 0,
        "every_hold_ended": counts["holds"] == 0,
        "no_waiting_signup_fits": counts["waitlist"] == 0,
        "status_counts_match": counts["status_counts"] == 0,
        "audit_ok": bool(doc["audit"]["ok"]),
        # The workload reached every kind of move (a run that made none measured nothing).
        "every_kind_of_move_made": all(
            by_cause.get(c, 0) > 0 for c in ("signup", "confirm", "cancel", "expiry", "promotion")
        ),
    }


# -- the terminal table ---------------------------------------------------------------------


_f = cell


def render_lifecycle(doc: Mapping[str, Any]) -> str:
    """The summary a person reads at the end of ``turnstile bench --lifecycle``."""
    w = doc["lifecycle_workload"]
    t = doc["transitions"]
    per = doc["per_transition"]
    p = doc["promotions"]
    lines = [
        f"turnstile bench (lifecycle): {w['signups']} signups, {w['events']} event(s) x "
        f"{w['capacity']} seats, waitlist {w['waitlist']}, holds of {w['hold_seconds']} s, "
        f"{_f(float(w['rate']), 0) + ' signups/s' if w['rate'] else 'all at once'}; "
        f"of those held {w['confirm_share']:.0%} confirm, the rest lapse; "
        f"{w['cancel_share']:.0%} of the accepted cancel",
        "endpoint: embedded moto, one request at a time: absolute speeds are moto's; "
        "compare ratios and units",
        "",
        "transitions: "
        + ", ".join(f"{c} {n}" for c, n in t["by_cause"].items())
        + f" = {t['all']} (first decisions: "
        + ", ".join(f"{s} {n}" for s, n in t["first_decisions_by_status"].items())
        + "); refused: "
        + (", ".join(f"{r} {n}" for r, n in t["refused"].items()) or "none"),
        "requests sent: "
        + (", ".join(f"{k} {n}" for k, n in doc["requests_sent"].items()) or "none")
        + f"; wake-ups of due holds: {doc['wake_ups']}",
        "",
        f"{'batches of':<18}{'batches':>8}{'transitions':>12}{'proc WU/tr':>11}"
        f"{'proc req/tr':>12}{'proc RU/tr':>11}",
    ]
    for kind, label in (
        ("first_decisions", "first decisions"),
        ("moves", "later moves"),
        ("mixed", "both"),
    ):
        b = per["by_batch"][kind]
        lines.append(
            f"{label:<18}{b['batches']:>8}{b['transitions']:>12}"
            f"{_f(b['processor_write_units_per_transition']):>11}"
            f"{_f(b['processor_requests_per_transition']):>12}"
            f"{_f(b['processor_read_units_per_transition']):>11}"
        )
    lines += [
        f"{'all':<18}{'':>8}{t['all']:>12}{_f(per['processor_write_units']):>11}"
        f"{_f(per['processor_requests']):>12}{_f(per['processor_read_units']):>11}",
        f"per transition, with the producers' request writes: "
        f"{_f(per['write_units_with_requests'])} WU, {_f(per['requests_with_requests'])} req "
        f"(processor only: {_f(per['processor_write_units'])} WU, "
        f"{_f(per['processor_requests'])} req; goal <= {WRITE_UNITS_PER_TRANSITION_GOAL})",
        f"processor WU per transition: event item {_f(per['event_item_write_units'])} "
        f"({per['commits']} commits; of which its due-holds index entry "
        f"{_f(per['due_holds_index_write_units'])}) + decision items "
        f"{_f(per['decision_item_write_units'])} "
        f"({_f(per['decision_item_writes'])} writes); the event item up to "
        f"{doc['event_item']['bytes_max']} B, {_f(doc['event_item']['write_units_per_commit'], 1)}"
        " WU per commit",
        f"releaser (due holds): {doc['releaser']['wake_ups']} wake-ups, "
        f"{_f(doc['releaser']['write_units_per_expiry'])} WU per expiry, "
        f"{doc['releaser']['requests']} requests; decision items up to "
        f"{doc['decision_item_bytes']['max']} B "
        f"({doc['decision_item_bytes']['over_1kb']} over 1 KB)",
        "decision item bytes beyond its intake item's, by transitions made: "
        + ", ".join(
            f"{n}: +{g['growth_bytes_max']} B max ({g['over_1kb']} of {g['items']} over 1 KB)"
            for n, g in doc["decision_item_growth"].items()
        ),
        f"promotions: {p['count']}, {_f(p['per_s_of_run'], 2)}/s over the run "
        f"({_f(p['per_s_while_promoting'], 2)}/s from the first to the last); release to "
        f"readable p50 {_f(p['release_to_readable_p50_s'])} s, p95 "
        f"{_f(p['release_to_readable_p95_s'])} s (of {p['measured']})",
        f"first decisions readable p50 {_f(doc['first_decision_p50_s'])} s, p95 "
        f"{_f(doc['first_decision_p95_s'])} s; {_f(doc['transitions_per_s'], 1)} transitions/s;"
        f" run {_f(doc['wall_s'], 1)} s; {doc['batches']} batches of {doc['mean_batch_records']}"
        f" records, handler {_f(doc['handler_s_per_batch'])} s each",
    ]
    r = doc["recount"]
    lines.append(
        "recount: "
        + ", ".join(f"{s} {n}" for s, n in r["statuses"].items())
        + "; "
        + "; ".join(
            f"{e}: taken {v['taken']} = held+accepted {v['seated_recounted']} <= {v['capacity']}"
            for e, v in r["events"].items()
        )
    )
    bad = {k: v for k, v in r["problems"].items() if v}
    for kind, found in bad.items():
        lines.append(f"  {kind}: {r['problem_counts'][kind]}, e.g. {found[0]}")
    lines.append(f"audit: {'OK' if doc['audit']['ok'] else 'BROKEN'}")
    lines.append(
        "checks: " + "; ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in doc["checks"].items())
    )
    return "\n".join(lines)

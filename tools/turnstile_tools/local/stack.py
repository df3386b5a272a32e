"""The whole system on one machine: endpoint, tables, queue, stream worker and HTTP API."""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import boto3

from turnstile.base.contract import (
    ALL_TABLES,
    CONTROL_TABLE,
    FAILURE_QUEUE_NAME,
    INTAKE_TABLE,
    STREAM_SOURCE,
    WAKE_SOURCE,
    Attr,
    EventSourceSettings,
    Function,
    TableSpec,
    split_shard_key,
)
from turnstile.base.errors import TurnstileError
from turnstile.base.personal_data import LOG_KEY_ENV
from turnstile_tools.local.api_server import ApiServer
from turnstile_tools.local.faults import FaultInjectingClient
from turnstile_tools.local.persist import SNAPSHOT_NAME
from turnstile_tools.local.poller import CheckpointStore, StreamPoller
from turnstile_tools.local.roles import DENIALS_PATH, role_client, role_session
from turnstile_tools.local.server import WAL_NAME, EmbeddedAws, ListenError, StateDirLock
from turnstile_tools.local.throughput import PartitionThroughput

__all__ = [
    "DUE_HOLDS_INTERVAL_ENV",
    "DUE_HOLDS_INTERVAL_S",
    "ListenError",
    "LocalStack",
    "TableCounts",
    "Worker",
    "count_tables",
    "ensure_resources",
    "local_aws_environment",
    "local_event_source",
    "sweep_has_work",
]

log = logging.getLogger(__name__)

#: How often ``turnstile local`` releases due holds (seconds): the variable and its default.
DUE_HOLDS_INTERVAL_ENV = "TURNSTILE_DUE_HOLDS_INTERVAL_S"
DUE_HOLDS_INTERVAL_S = 1.0


def local_aws_environment(endpoint_url: str) -> dict[str, str]:
    """The environment that points boto3 (and the AWS CLI) at the embedded endpoint."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        # botocore 1.44 resolves account-based endpoints for streams calls otherwise.
        "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
    }


def _ensure_table(client: Any, spec: TableSpec) -> None:
    existing = client.list_tables()["TableNames"]
    if spec.name in existing:
        _ensure_indexes(client, spec)
        return
    client.create_table(**spec.create_table_kwargs())
    client.get_waiter("table_exists").wait(TableName=spec.name)
    if spec.ttl_attribute:
        client.update_time_to_live(
            TableName=spec.name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute},
        )


def _ensure_indexes(client: Any, spec: TableSpec) -> None:
    """Add the spec's stream and indexes that a table made by an older version lacks."""
    table = client.describe_table(TableName=spec.name)["Table"]
    if spec.stream_view_type and not table.get("LatestStreamArn"):
        client.update_table(
            TableName=spec.name,
            StreamSpecification={"StreamEnabled": True, "StreamViewType": spec.stream_view_type},
        )
    have = {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])}
    for index in spec.indexes:
        if index.name not in have:
            client.update_table(
                TableName=spec.name,
                AttributeDefinitions=index.attribute_definitions(),
                GlobalSecondaryIndexUpdates=[{"Create": index.create_kwargs()}],
            )


def ensure_resources(session: boto3.Session | None = None) -> dict[str, str]:
    """Create the tables (from the same specs as the CDK stack) and the on-failure queue."""
    session = session or boto3.Session()
    dynamodb = session.client("dynamodb")
    for spec in ALL_TABLES:
        _ensure_table(dynamodb, spec)
    queue_url = session.client("sqs").create_queue(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
    return {"failure_queue_url": queue_url}


@dataclass
class DecisionStats:
    """What the worker's processor did, for the worker's closing summary (drills read it)."""

    decided: int = 0
    failed_groups: int = 0
    conflicts: int = 0
    #: Wall-clock time of the first and the last batch handed to the processor.
    first_batch_at: float | None = None
    last_batch_at: float | None = None


#: One lock for every counting processor of a worker (one per emulated stream shard).
_COUNTING_LOCK = threading.Lock()


def counting_processor(
    store: Any, stats: DecisionStats, on_decided: Callable[[Any], None] | None = None
) -> Any:
    """The stream processor, counting decisions, failed groups and version conflicts.

    ``on_decided`` is called with each decision (a ``DecidedSignup``) the processor has
    committed, in the order it decided them: the decisions it made, never one it found
    made already.
    """
    from turnstile.base.contract import Status
    from turnstile.base.personal_data import decision_retention_days
    from turnstile.jobs.processor import BatchResult, MovedSignup, StreamProcessor, StreamRecord

    lock = _COUNTING_LOCK  # lanes and stream shards' processors count at once

    class CountingProcessor(StreamProcessor):
        def process(self, records: Iterable[StreamRecord]) -> BatchResult:
            with lock:
                stats.first_batch_at = stats.first_batch_at or time.time()
            result = super().process(records)
            with lock:
                stats.last_batch_at = time.time()
                stats.decided += len(result.decided)
                stats.failed_groups += len(result.failures)
                stats.conflicts += result.conflicts
            if on_decided is not None:
                # first decisions, then the later moves and refusals (the lifecycle's)
                later = [
                    MovedSignup(event_id, t)
                    for event_id, t in result.transitions
                    if t.from_status != Status.PENDING
                ]
                for decided in [*result.decided, *later]:
                    try:
                        on_decided(decided)
                    except Exception:  # committed already: a report must not fail the batch
                        log.exception("reporting a decision failed")
            return result

    # The same settings as the Lambda's processor (TURNSTILE_DECISION_RETENTION_DAYS).
    return CountingProcessor(store, decision_retention_days=decision_retention_days())


def _env_int(name: str, low: int, high: int) -> int | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise TurnstileError(f"{name} must be a whole number from {low} to {high}, not {raw!r}")
    return value


#: Drills: the first retry's delay of a failed batch, in milliseconds (doubling to 16 times
#: as much), and a fifth of the wait after a failed poll. Lambda does not document its
#: backoff; the poller's default is 200 ms (1 s after a failed poll).
RETRY_DELAY_ENV = "TURNSTILE_RETRY_BASE_DELAY_MS"

#: How many stream shards the worker emulates over the intake stream's one (1: none).
STREAM_SHARDS_ENV = "TURNSTILE_STREAM_SHARDS"
MAX_STREAM_SHARDS = 64


def local_event_source(base: EventSourceSettings = STREAM_SOURCE) -> EventSourceSettings:
    """The stack's event source settings (``base``: the intake stream's, or the wake-ups'),
    with the local stack's own options:

    * ``TURNSTILE_BATCHING_WINDOW_S``: the batching window (default: the stack's);
    * ``TURNSTILE_PARALLELIZATION_FACTOR``: concurrent batches per shard, 1 to 10 (default
      1, as deployed; above 1 runs the stream as a misconfigured stack would);
    * ``TURNSTILE_MAX_RECORD_AGE_S``: drills shorten it, so records age out while the
      worker is down.
    """
    overrides: dict[str, int] = {}
    for name, field_name, low, high in (
        ("TURNSTILE_BATCHING_WINDOW_S", "max_batching_window_s", 0, 300),
        ("TURNSTILE_PARALLELIZATION_FACTOR", "parallelization_factor", 1, 10),
        ("TURNSTILE_MAX_RECORD_AGE_S", "max_record_age_s", -1, 604_800),
    ):
        value = _env_int(name, low, high)
        if value is not None:
            overrides[field_name] = value
    return replace(base, **overrides)


def local_retry_delay() -> dict[str, float]:
    """The pollers' retry delay from ``TURNSTILE_RETRY_BASE_DELAY_MS`` (0 to 60,000), as
    ``StreamPoller`` keyword arguments; none when unset (the poller's own)."""
    delay_ms = _env_int(RETRY_DELAY_ENV, 0, 60_000)
    return {} if delay_ms is None else {"retry_base_delay_s": delay_ms / 1000}


def on_local_endpoint() -> bool:
    """Whether the AWS configuration points at an endpoint of its own (``turnstile local``
    or another emulator), not at AWS."""
    return bool(os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"))


#: How long a stop waits for the worker's batch in flight: a Ctrl-C ends in seconds.
WORKER_STOP_WAIT_S = 8.0


class Worker:
    """The stream worker: two ``StreamPoller``s (the event source mappings: the intake
    stream, and the control table's wake-ups) feeding the real stream handler, all as the
    processor's role, as deployed: a mapping reads its stream and writes the on-failure
    queue with the function's role. The handler takes one batch at a time, as one Lambda
    container does."""

    def __init__(
        self,
        state_dir: Path,
        from_start: bool = False,
        session: boto3.Session | None = None,
        handler: Any = None,
        on_decided: Callable[[Any], None] | None = None,
    ) -> None:
        """``session``: the credentials of the function's calls; by default the processor
        role's local key on a local endpoint (``turnstile_tools.local.roles``), the caller's own
        on AWS. ``on_decided``: called with each decision the worker's processor commits
        (see ``counting_processor``); not with a ``handler`` of the caller's own."""
        #: Whose rights the worker uses, in words (its first line says so).
        self.identity = "your own credentials"
        if session is None and on_local_endpoint():
            session = role_session(Function.PROCESSOR)
            self.identity = "the stream processor's role"
        if on_local_endpoint():
            os.environ.setdefault(LOG_KEY_ENV, local_log_key(state_dir))
        session = session or boto3.Session()
        streams = session.client("dynamodbstreams")
        self.faults: list[FaultInjectingClient] = []
        self.decisions = DecisionStats()
        stream_shards = _env_int(STREAM_SHARDS_ENV, 1, MAX_STREAM_SHARDS) or 1
        lane_handler: Callable[[dict[str, Any], Any], Any] | None = None
        self._lane_stores: list[Any] = []
        self.store: Any = None
        fault_rate = float(os.environ.get("TURNSTILE_FAULT_RATE") or 0)
        stuck_event = os.environ.get("TURNSTILE_FAULT_STUCK_EVENT") or None
        gate = os.environ.get("TURNSTILE_FAULT_COMMIT_GATE") or None
        if handler is None:
            from turnstile.handlers import stream as stream_module
            from turnstile.storage.dynamo import default_client
            from turnstile.storage.store import SignupStore

            def store_client() -> Any:
                """A DynamoDB client for a store; in drills, one that injects faults:
                throttling and 5xx on a share of its calls, or its first commit held."""
                client = default_client(session=session)
                if fault_rate or stuck_event or gate:
                    client = FaultInjectingClient(
                        client,
                        fault_rate,
                        stuck_event=stuck_event,
                        commit_gate=Path(gate) if gate else None,
                    )
                    self.faults.append(client)
                return client

            main_client = store_client()
            if fault_rate or stuck_event or gate:
                streams = FaultInjectingClient(streams, fault_rate)
                self.faults.append(streams)
            store_kwargs: dict[str, Any] = {}
            if os.environ.get("TURNSTILE_STORE_MAX_ATTEMPTS"):
                # Drills: a smaller retry budget, so faults reach failed groups and retries.
                store_kwargs["max_attempts"] = int(os.environ["TURNSTILE_STORE_MAX_ATTEMPTS"])
            self.store = SignupStore(main_client, **store_kwargs)
            own = stream_module._processor = counting_processor(
                self.store, self.decisions, on_decided
            )

            def own_container(event: dict[str, Any], context: Any) -> Any:
                # A container too (the wake-ups', and every record's without lanes): its
                # log lines carry its own invocation's request id, never a lane's.
                return stream_module.in_container(own, event, context)

            handler = own_container
            if stream_shards > 1:
                # A container per emulated shard: a processor (and a store) of its own.
                containers = threading.local()

                def lane_handler(event: dict[str, Any], context: Any) -> Any:
                    processor = getattr(containers, "processor", None)
                    if processor is None:
                        # a client of its own, as a container has: the lanes' decision
                        # writes would overflow one client's connection pool
                        store = SignupStore(store_client(), **store_kwargs)
                        with _COUNTING_LOCK:
                            self._lane_stores.append(store)
                        processor = containers.processor = counting_processor(
                            store, self.decisions, on_decided
                        )
                    return stream_module.in_container(processor, event, context)

        settings = local_event_source()
        if stream_shards > 1 and settings.parallelization_factor > 1:
            raise TurnstileError(
                f"{STREAM_SHARDS_ENV} and TURNSTILE_PARALLELIZATION_FACTOR cannot both be above "
                "1: a stream shard's records go to one invocation at a time"
            )
        # What deploying configures the mappings with: read with the caller's rights.
        deployer = boto3.Session().client("dynamodb")
        stream_arn, wake_arn = (
            deployer.describe_table(TableName=spec.name)["Table"].get("LatestStreamArn")
            for spec in (INTAKE_TABLE, CONTROL_TABLE)
        )
        if not stream_arn or not wake_arn:
            raise RuntimeError("the intake and control tables must have streams")
        lock = threading.Lock()
        function = handler

        def handler(event: dict[str, Any], context: Any) -> Any:
            with lock:  # one container: one invocation at a time
                return function(event, context)

        sqs = session.client("sqs")
        queue_url = os.environ.get("TURNSTILE_FAILURE_QUEUE_URL")
        if not queue_url:
            try:
                queue_url = sqs.get_queue_url(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
            except Exception:
                queue_url = None
        checkpoints = CheckpointStore(state_dir / "checkpoints.json")
        sharded = stream_shards > 1 and lane_handler is not None
        retry = local_retry_delay()
        self.stream_shards = stream_shards if sharded else 1
        self.poller = StreamPoller(
            handler=lane_handler if sharded else handler,
            streams_client=streams,
            stream_arn=stream_arn,
            checkpoints=checkpoints,
            sqs_client=sqs,
            failure_queue_url=queue_url,
            from_start=from_start,
            settings=settings,
            stream_shards=self.stream_shards,
            partition_key="event_id" if sharded else None,
            **retry,
        )
        self.wake_poller = StreamPoller(
            handler=handler,
            streams_client=streams,
            stream_arn=wake_arn,
            checkpoints=checkpoints,
            from_start=from_start,
            settings=local_event_source(WAKE_SOURCE),
            **retry,
        )
        self.stop_event = threading.Event()
        self._wake_stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self, until_idle_s: float | None = None) -> None:
        """Poll both streams until stopped (or the intake stream was quiet for
        ``until_idle_s``: the wake-ups' poller stops with it)."""
        wakes = threading.Thread(
            target=self.wake_poller.run, args=(self._wake_stop,), name="wake-poller", daemon=True
        )
        wakes.start()
        try:
            self.poller.run(self.stop_event, until_idle_s)
        finally:
            self._wake_stop.set()
            wakes.join(timeout=WORKER_STOP_WAIT_S)

    def summary(self) -> dict[str, Any]:
        """The poller's counters, the processor's, the store's retries and injected faults."""
        return {
            **asdict(self.poller.stats),
            **asdict(self.decisions),
            "wake_invocations": self.wake_poller.stats.invocations,
            "store_retries": sum(
                store.retries for store in [self.store, *self._lane_stores] if store is not None
            ),
            "faults_injected": sum(f.injected for f in self.faults),
            "calls": sum(f.calls for f in self.faults),
        }

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="stream-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; a batch still running after ``WORKER_STOP_WAIT_S`` is left to end
        with the process (its checkpoint was not moved: the next start delivers it again,
        and deciding it again changes nothing)."""
        self.stop_event.set()
        self._wake_stop.set()
        if self._thread:
            self._thread.join(timeout=WORKER_STOP_WAIT_S)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def _check_port(server: str, host: str, port: int) -> None:
    """Raise ``ListenError`` now if ``host:port`` cannot be listened on, before slow work."""
    if port == 0:
        return
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        in_use = exc.errno == errno.EADDRINUSE
        raise ListenError(
            server, host, port, exc, by_turnstile=in_use and _turnstile_at(server, host, port)
        ) from exc


def _turnstile_at(server: str, host: str, port: int) -> bool:
    """Whether what listens on ``host:port`` answers as a ``turnstile local``'s AWS endpoint
    (its denials list) or HTTP API (its health check) does."""
    import urllib.error
    import urllib.request

    path = DENIALS_PATH if server == "aws" else "/health"
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            body = json.loads(answer.read())
    except urllib.error.HTTPError as exc:  # an unhealthy stack answers 503 with its checks
        try:
            body = json.loads(exc.read())
        except ValueError:
            return False
    except (OSError, ValueError):
        return False
    return isinstance(body, dict) and ("denials" in body if server == "aws" else "tables" in body)


class LocalStack:
    """``turnstile local``: everything on 127.0.0.1, no AWS account, no Docker."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 4566,
        api_port: int = 8080,
        worker: bool = True,
        state_dir: Path | None = None,
        in_memory: bool = False,
        reset: bool = False,
        on_decided: Callable[[Any], None] | None = None,
        cors_origins: tuple[str, ...] = (),
        throughput_scale: float = 1.0,
    ) -> None:
        """``on_decided``: called with each decision the worker commits (``Worker``).
        ``throughput_scale``: the endpoint's per-partition throughput limit, as a share of
        AWS's rates (0: none; ``turnstile_tools.local.throughput``)."""
        self.host, self.port, self.api_port = host, port, api_port
        self.throughput_scale = throughput_scale
        self.on_decided = on_decided
        self.cors_origins = cors_origins
        self.in_memory, self.reset = in_memory, reset
        self.with_worker = worker
        self.state_dir = state_dir or Path(".turnstile")
        self.aws: EmbeddedAws | None = None
        self.api: ApiServer | None = None
        self.worker: Worker | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._sweeper_thread: threading.Thread | None = None
        self._due_holds_thread: threading.Thread | None = None
        self._lock: StateDirLock | None = None
        #: Periods the background jobs ended (the sweeper's: looked for work, swept if
        #: there was any) and sweeps run: tests wait for periods, not for time.
        self.sweep_periods = 0
        self.sweeps = 0
        self.due_holds_periods = 0

    @functools.cached_property
    def api_store(self) -> Any:
        """The HTTP API's store, signing as the API's role; built on the first request,
        after the endpoint is up and the environment points at it."""
        from turnstile.storage.store import SignupStore

        return SignupStore(role_client(Function.API))

    def _api_store(self) -> Any:
        return self.api_store

    @functools.cached_property
    def waiter_store(self) -> Any:
        """The waiting reads' store, signing as the waiter's role (a function of its own)."""
        from turnstile.storage.store import SignupStore

        return SignupStore(role_client(Function.WAITER))

    def _waiter_store(self) -> Any:
        return self.waiter_store

    def health(self) -> dict[str, bool]:
        checks = {"tables": self._ready.is_set()}
        if self.with_worker:
            checks["worker"] = bool(
                self.worker and self.worker.alive and self.worker.poller.polling.is_set()
            )
        return checks

    def start(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request
        # Both ports first: replaying the saved state can take a while, and a stack that
        # cannot listen leaves its state directory untouched.
        _check_port("aws", self.host, self.port)
        _check_port("api", self.host, self.api_port)
        if not self.in_memory:
            # One turnstile local per state directory: the write log has one writer.
            self._lock = StateDirLock(self.state_dir)
            self._lock.acquire()
        if self.reset:
            # The snapshot first: a crash in between leaves a log that names a snapshot
            # that is gone, which stops the next start instead of restoring half a state.
            for name in (SNAPSHOT_NAME, WAL_NAME, "checkpoints.json"):
                (self.state_dir / name).unlink(missing_ok=True)
        self.aws = EmbeddedAws(
            self.host,
            self.port,
            state_dir=None if self.in_memory else self.state_dir,
            throughput=PartitionThroughput(self.throughput_scale),
        )
        if self.aws.replayed:
            restored = self.aws.app.wal.restored
            log.info(
                "restored %d writes from %s: a snapshot of %d items and messages (%.2f s), "
                "then %d logged writes (%.2f s)",
                self.aws.replayed,
                self.state_dir,
                restored.get("snapshot_items", 0),
                restored.get("snapshot_s", 0.0),
                restored.get("log_records", 0),
                restored.get("replay_s", 0.0),
            )
        self.aws.start()
        os.environ.update(local_aws_environment(self.aws.url))
        # The key of the logs' signup references, kept with the state (deployed: a secret).
        os.environ.setdefault(
            LOG_KEY_ENV, local_log_key(None if self.in_memory else self.state_dir)
        )
        # The handlers run in this process: quiet Powertools' per-invocation EMF output.
        # (Their logs: turnstile_tools.local.console.configure_logging.)
        os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
        resources = ensure_resources()
        os.environ["TURNSTILE_FAILURE_QUEUE_URL"] = resources["failure_queue_url"]
        self._ready.set()
        new_instance = _api_instances(self._api_store)
        extra = (
            {
                "new_instance": new_instance,
                "new_waiter": _api_instances(self._waiter_store, waiter=True),
            }
            if new_instance
            else {}
        )
        self.api = ApiServer(
            self.host, self.api_port, self.health, cors_origins=self.cors_origins, **extra
        )
        self.api.start()
        if self.with_worker:
            # A restored endpoint has the same streams (ARNs, shard ids, sequence numbers:
            # turnstile_tools.local.persist): the worker resumes after its checkpoints, and the
            # records after them (written while it was down) are delivered. A checkpoint
            # older than the records a snapshot kept (24 hours) reads on from the oldest one,
            # and the sweeper re-emits what was trimmed undecided; a new endpoint's streams
            # have no checkpoint and are read from TRIM_HORIZON. Decisions already made are
            # kept (idempotent), undecided signups are decided.
            self.worker = Worker(self.state_dir, on_decided=self.on_decided)
            self.worker.start()
            self._sweeper_thread = threading.Thread(
                target=self._sweep_forever, name="sweeper", daemon=True
            )
            self._sweeper_thread.start()
            self._due_holds_thread = threading.Thread(
                target=self._release_due_holds_forever, name="due-holds", daemon=True
            )
            self._due_holds_thread.start()

    def _release_due_holds_forever(self) -> None:
        """The local stand-in for the CDK stack's due-holds schedule (every minute there):
        every ``TURNSTILE_DUE_HOLDS_INTERVAL_S`` seconds (default 1), re-emit the holding
        signup of each event whose earliest hold is due (``turnstile.jobs.due_holds``)."""
        from turnstile.jobs.due_holds import release_due_holds
        from turnstile.storage.store import SignupStore

        interval = float(os.environ.get(DUE_HOLDS_INTERVAL_ENV, DUE_HOLDS_INTERVAL_S))
        store = SignupStore(role_client(Function.DUE_HOLDS))
        while not self._stop.wait(interval):
            try:
                release_due_holds(store, int(time.time() * 1000))
            except Exception as exc:
                if not self._stop.is_set():  # (the endpoint may be going away with us)
                    log.error("releasing due holds failed (the next period retries): %s", exc)
            self.due_holds_periods += 1

    def _sweep_forever(self) -> None:
        """The local stand-in for the CDK stack's schedule: a sweep every interval, when
        there is anything to sweep (``sweep_has_work``): an idle stack writes nothing."""
        from turnstile.jobs.sweeper import Sweeper
        from turnstile.storage.failures import FAILURE_QUEUE_URL_ENV, FailureQueue
        from turnstile.storage.store import SignupStore

        interval = float(os.environ.get("TURNSTILE_SWEEP_INTERVAL_S", "60"))
        min_age = float(os.environ.get("TURNSTILE_SWEEP_MIN_AGE_S", "300"))
        full_every = float(os.environ.get("TURNSTILE_SWEEP_FULL_SCAN_EVERY_S", "86400"))
        sweeper = Sweeper(
            SignupStore(role_client(Function.SWEEPER)),
            owner="turnstile-local",
            min_age_s=min_age,
            full_scan_every_s=full_every,
            failures=FailureQueue(
                role_session(Function.SWEEPER).client("sqs"), os.environ[FAILURE_QUEUE_URL_ENV]
            ),
        )
        looked = _SweepLook()
        while not self._stop.wait(interval):
            try:
                if sweep_has_work(sweeper, time.time(), looked):
                    result = sweeper.sweep()
                    self.sweeps += 1
                    if result.re_emitted:
                        log.warning("sweeper re-emitted %d undecided signups", result.re_emitted)
            except Exception:
                log.exception("sweep failed; the next one retries")
            self.sweep_periods += 1

    def stop(self, count_budget_s: float = 0.0) -> TableCounts | None:
        """Stop the worker and the API, then the endpoint.

        With ``count_budget_s``, what the tables hold is counted in between (nothing
        changes them any more) and returned; None if that took longer than the budget or
        failed.
        """
        self._stop.set()
        if self._due_holds_thread:
            self._due_holds_thread.join(timeout=5)  # a period in progress ends first
        if self.worker:
            self.worker.stop()
        if self.api:
            self.api.stop()
        counts = None
        if self.aws and self._ready.is_set() and count_budget_s > 0:
            try:
                counts = count_tables(count_budget_s)
            except Exception as exc:
                log.warning("could not count what the tables hold: %s", exc)
        if self.aws:
            self.aws.stop()
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        return counts


@dataclass
class _SweepLook:
    """What the sweep loop remembers between periods: when its last look at the whole
    intake table (a due full scan's) found nothing."""

    full_read_at: float | None = None


def sweep_has_work(sweeper: Any, now: float, looked: _SweepLook | None = None) -> bool:
    """Whether a sweep now would do anything beyond its own bookkeeping, read-only.

    A sweep takes the lease (a write that bumps its fencing token), starts a run in the
    history and appends its outcome, whatever it finds: every period, on a stack with
    nothing to do, and each of those writes grew the write log. A sweep is worth its
    writes when: an event is parked (its release to set off); the on-failure queue holds a
    note (a look that leaves it visible); an intake record the sweep
    would re-emit exists (``find_undecided``, old enough, no decision; from the index of
    marked records, or from the whole table when a full scan is due); or a decided record
    is still marked (the sweep removes the mark). A due full scan that found nothing is
    not recorded (that is a write): ``looked`` remembers it, and the whole table is read
    again only ``full_scan_every_s`` later.
    """
    from turnstile.jobs.sweeper import find_undecided

    looked = looked if looked is not None else _SweepLook()
    if sweeper.store.parking_markers():
        return True
    if sweeper.failures is not None and sweeper.failures.receive(1, 0):
        return True
    full = sweeper.full_scan_due(now) and (
        looked.full_read_at is None or now - looked.full_read_at >= sweeper.full_scan_every_s
    )
    marked: dict[tuple[str, str], Any] = {}
    found = find_undecided(
        sweeper.store,
        sweeper.min_age_s,
        now,
        from_index=not full,
        ledger=sweeper.ledger,
        decided_marked=marked,
    )
    if next(iter(found), None) is not None or marked:
        return True
    if full:
        looked.full_read_at = now
    return False


@dataclass(frozen=True)
class TableCounts:
    """What the tables hold: events, decided signups, intake records with no decision."""

    events: int
    decided: int
    pending: int


class _OverBudget(Exception):
    pass


def count_tables(budget_s: float, session: boto3.Session | None = None) -> TableCounts | None:
    """Count events, decisions and undecided intake records, reading keys only; None when
    it would take longer than ``budget_s`` seconds (a big table: ``turnstile audit``
    counts per event, however long it takes).

    Pending is exact: an intake record with neither a decision item nor a row in its
    event's last journal (a commit not yet written out as items).
    """
    from turnstile.storage.store import SignupStore

    session = session or boto3.Session()
    client = session.client("dynamodb")
    store = SignupStore(client)
    deadline = time.monotonic() + budget_s

    def keys(table: str) -> set[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        kwargs: dict[str, Any] = {
            "TableName": table,
            "ConsistentRead": True,
            "ProjectionExpression": "#e, #s",
            "ExpressionAttributeNames": {"#e": Attr.EVENT_ID, "#s": Attr.SIGNUP_ID},
        }
        while True:
            if time.monotonic() > deadline:
                raise _OverBudget
            page = client.scan(**kwargs)
            for item in page.get("Items", []):
                found.add((item[Attr.EVENT_ID]["S"], item[Attr.SIGNUP_ID]["S"]))
            if "LastEvaluatedKey" not in page:
                return found
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    try:
        intake, decided = keys(store.intake_table), keys(store.main_table)
        events = 0
        for record in store.scan_events():
            # a sharded event is one event, whatever its shards' items
            events += split_shard_key(record.event.event_id) is None
            if record.journal is not None:
                decided |= {(record.event.event_id, d.signup_id) for d in record.journal.decisions}
    except _OverBudget:
        return None
    return TableCounts(events=events, decided=len(decided), pending=len(intake - decided))


def _api_instances(store: Callable[[], Any], waiter: bool = False) -> Any:
    """A factory of the HTTP API's Lambda handler (one per concurrent request, as Lambda
    instances) on ``store``, served over real HTTP by ``ApiServer``; with ``waiter``, of
    the waiter function's (the waiting reads)."""
    try:
        from turnstile.handlers.api import new_instance, new_waiter_instance
    except ImportError:  # the API is optional for the stream worker
        return None
    return functools.partial(new_waiter_instance if waiter else new_instance, store=store)


def local_log_key(state_dir: Path | None) -> str:
    """The key of ``personal_data.signup_ref`` for a local stack: kept in ``state_dir``
    (``log-key``, made on first use, readable by its owner only) so references stay the same
    across restarts; a new one each run without a state directory."""
    if state_dir is None:
        return secrets.token_hex(32)
    path = state_dir / "log-key"
    try:
        return path.read_text().strip() or _new_log_key(path)
    except FileNotFoundError:
        return _new_log_key(path)


def _new_log_key(path: Path) -> str:
    key = secrets.token_hex(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key)
    return key

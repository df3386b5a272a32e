"""The whole system on one machine: endpoint, tables, queue, stream worker and HTTP API."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import boto3

from turnstile.contract import (
    ALL_TABLES,
    FAILURE_QUEUE_NAME,
    INTAKE_TABLE,
    STREAM_SOURCE,
    EventSourceSettings,
    TableSpec,
)
from turnstile.errors import TurnstileError
from turnstile.local.api_server import ApiServer
from turnstile.local.faults import FaultInjectingClient
from turnstile.local.poller import CheckpointStore, StreamPoller
from turnstile.local.server import WAL_NAME, EmbeddedAws

__all__ = [
    "LocalStack",
    "Worker",
    "ensure_resources",
    "local_aws_environment",
    "local_event_source",
]

log = logging.getLogger(__name__)


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
    """Add the spec's indexes that a table made by an older version lacks."""
    table = client.describe_table(TableName=spec.name)["Table"]
    have = {i["IndexName"] for i in table.get("GlobalSecondaryIndexes", [])}
    for index in spec.indexes:
        if index.name not in have:
            client.update_table(
                TableName=spec.name,
                AttributeDefinitions=[{"AttributeName": index.partition_key, "AttributeType": "S"}],
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


def counting_processor(store: Any, stats: DecisionStats) -> Any:
    """The stream processor, counting decisions, failed groups and version conflicts."""
    from turnstile.processor import BatchResult, IntakeRecord, StreamProcessor

    lock = threading.Lock()  # lanes (a parallelization factor) count at once

    class CountingProcessor(StreamProcessor):
        def process(self, records: Iterable[IntakeRecord]) -> BatchResult:
            with lock:
                stats.first_batch_at = stats.first_batch_at or time.time()
            result = super().process(records)
            with lock:
                stats.last_batch_at = time.time()
                stats.decided += len(result.decided)
                stats.failed_groups += len(result.failures)
                stats.conflicts += result.conflicts
            return result

    return CountingProcessor(store)


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


def local_event_source() -> EventSourceSettings:
    """The stack's event source settings, with the local stack's own options:

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
    return replace(STREAM_SOURCE, **overrides)


class Worker:
    """The stream worker: a ``StreamPoller`` feeding the real stream handler."""

    def __init__(
        self,
        state_dir: Path,
        from_start: bool = False,
        session: boto3.Session | None = None,
        handler: Any = None,
    ) -> None:
        session = session or boto3.Session()
        dynamodb = session.client("dynamodb")
        streams = session.client("dynamodbstreams")
        self.faults: list[FaultInjectingClient] = []
        self.decisions = DecisionStats()
        self.store: Any = None
        fault_rate = float(os.environ.get("TURNSTILE_FAULT_RATE") or 0)
        stuck_event = os.environ.get("TURNSTILE_FAULT_STUCK_EVENT") or None
        if handler is None:
            from turnstile.handlers import stream as stream_module
            from turnstile.store import SignupStore, default_client

            store_client = default_client()
            if fault_rate or stuck_event:
                # Drills: throttling and 5xx on a share of the worker's DynamoDB calls.
                store_client = FaultInjectingClient(
                    store_client, fault_rate, stuck_event=stuck_event
                )
                streams = FaultInjectingClient(streams, fault_rate)
                self.faults = [store_client, streams]
            store_kwargs: dict[str, Any] = {}
            if os.environ.get("TURNSTILE_STORE_MAX_ATTEMPTS"):
                # Drills: a smaller retry budget, so faults reach failed groups and retries.
                store_kwargs["max_attempts"] = int(os.environ["TURNSTILE_STORE_MAX_ATTEMPTS"])
            self.store = SignupStore(store_client, **store_kwargs)
            stream_module._processor = counting_processor(self.store, self.decisions)
            handler = stream_module.handler
        settings = local_event_source()
        stream_arn = dynamodb.describe_table(TableName=INTAKE_TABLE.name)["Table"].get(
            "LatestStreamArn"
        )
        if not stream_arn:
            raise RuntimeError(f"table {INTAKE_TABLE.name} has no stream")
        sqs = session.client("sqs")
        queue_url = os.environ.get("TURNSTILE_FAILURE_QUEUE_URL")
        if not queue_url:
            try:
                queue_url = sqs.get_queue_url(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
            except Exception:
                queue_url = None
        self.poller = StreamPoller(
            handler=handler,
            streams_client=streams,
            stream_arn=stream_arn,
            checkpoints=CheckpointStore(state_dir / "checkpoints.json"),
            sqs_client=sqs,
            failure_queue_url=queue_url,
            from_start=from_start,
            settings=settings,
        )
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self, until_idle_s: float | None = None) -> None:
        self.poller.run(self.stop_event, until_idle_s)

    def summary(self) -> dict[str, Any]:
        """The poller's counters, the processor's, the store's retries and injected faults."""
        return {
            **asdict(self.poller.stats),
            **asdict(self.decisions),
            "store_retries": self.store.retries if self.store is not None else 0,
            "faults_injected": sum(f.injected for f in self.faults),
            "calls": sum(f.calls for f in self.faults),
        }

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="stream-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self._thread:
            self._thread.join(timeout=30)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


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
    ) -> None:
        self.host, self.port, self.api_port = host, port, api_port
        self.in_memory, self.reset = in_memory, reset
        self.with_worker = worker
        self.state_dir = state_dir or Path(".turnstile")
        self.aws: EmbeddedAws | None = None
        self.api: ApiServer | None = None
        self.worker: Worker | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._sweeper_thread: threading.Thread | None = None

    def health(self) -> dict[str, bool]:
        checks = {"tables": self._ready.is_set()}
        if self.with_worker:
            checks["worker"] = bool(
                self.worker and self.worker.alive and self.worker.poller.polling.is_set()
            )
        return checks

    def start(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request
        if self.reset:
            for name in (WAL_NAME, "checkpoints.json"):
                (self.state_dir / name).unlink(missing_ok=True)
        self.aws = EmbeddedAws(
            self.host, self.port, state_dir=None if self.in_memory else self.state_dir
        )
        if self.aws.replayed:
            log.info("restored %d logged writes from %s", self.aws.replayed, self.state_dir)
        self.aws.start()
        os.environ.update(local_aws_environment(self.aws.url))
        # The handlers run in this process: quiet Powertools' per-invocation EMF output.
        os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
        os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
        resources = ensure_resources()
        os.environ["TURNSTILE_FAILURE_QUEUE_URL"] = resources["failure_queue_url"]
        self._ready.set()
        app_handler = _api_handler()
        extra = {"app_handler": app_handler} if app_handler else {}
        self.api = ApiServer(self.host, self.api_port, self.health, **extra)
        self.api.start()
        if self.with_worker:
            # A new endpoint has new streams, a restored one too (replay makes a new stream
            # ARN): checkpoints are keyed by stream ARN, so the old ones are ignored and the
            # new stream is read from TRIM_HORIZON; decisions already made are kept
            # (idempotent), undecided signups are decided.
            self.worker = Worker(self.state_dir)
            self.worker.start()
            self._sweeper_thread = threading.Thread(
                target=self._sweep_forever, name="sweeper", daemon=True
            )
            self._sweeper_thread.start()

    def _sweep_forever(self) -> None:
        """The local stand-in for the CDK stack's schedule: a sweep every interval."""
        from turnstile.store import SignupStore
        from turnstile.sweeper import Sweeper

        interval = float(os.environ.get("TURNSTILE_SWEEP_INTERVAL_S", "60"))
        min_age = float(os.environ.get("TURNSTILE_SWEEP_MIN_AGE_S", "300"))
        full_every = float(os.environ.get("TURNSTILE_SWEEP_FULL_SCAN_EVERY_S", "86400"))
        sweeper = Sweeper(
            SignupStore(),
            owner="turnstile-local",
            min_age_s=min_age,
            full_scan_every_s=full_every,
        )
        while not self._stop.wait(interval):
            try:
                result = sweeper.sweep()
                if result.re_emitted:
                    log.warning("sweeper re-emitted %d undecided signups", result.re_emitted)
            except Exception:
                log.exception("sweep failed; the next one retries")

    def stop(self) -> None:
        self._stop.set()
        if self.worker:
            self.worker.stop()
        if self.api:
            self.api.stop()
        if self.aws:
            self.aws.stop()


def _api_handler() -> Any:
    """The HTTP API's Lambda handler, served over real HTTP by ``ApiServer``."""
    try:
        from turnstile.handlers.api import handler
    except ImportError:  # the API is optional for the stream worker
        return None
    return handler

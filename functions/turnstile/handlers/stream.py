"""Lambda entry point of the stream processor: parse the batch, one call, report failures."""

from __future__ import annotations

import base64
import gc
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.lambda_context import build_lambda_context_model
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.shared.dynamodb_deserializer import TypeDeserializer
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent, event_source
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from turnstile.base.clock import parse_timestamp
from turnstile.base.contract import Status
from turnstile.base.personal_data import decision_retention_days, signup_ref
from turnstile.handlers.threads import metrics_per_thread
from turnstile.jobs.processor import BatchResult, StreamProcessor, StreamRecord
from turnstile.storage.store import SignupStore

logger = Logger(service="turnstile")
metrics = Metrics(namespace="Turnstile", service="turnstile")


def _traced(function: Callable[..., Any]) -> Callable[..., Any]:
    """Powertools Tracer around the handler, when TURNSTILE_XRAY_SDK is on.

    Importing the X-Ray SDK costs 50 to 150 ms of cold start (it builds a botocore client for
    sampling at import; `turnstile bench` measures it); X-Ray active tracing on the function
    records every invocation without it. Turn the SDK on for subsegments per DynamoDB call.
    """
    if os.environ.get("TURNSTILE_XRAY_SDK", "").lower() not in {"1", "true", "yes"}:
        return function
    from aws_lambda_powertools import Tracer

    return Tracer(service="turnstile").capture_lambda_handler(capture_response=False)(function)


_processor: StreamProcessor | None = None
#: A processor of this thread's own (``in_container``): the local stack's and the
#: benchmark's concurrent invocations, each in a container of its own, as on Lambda.
_container = threading.local()


def get_processor() -> StreamProcessor:
    """One processor per container: its store client and journal cache outlive a batch."""
    own = getattr(_container, "processor", None)
    if own is not None:
        return own
    global _processor
    if _processor is None:
        _processor = StreamProcessor(
            SignupStore(), decision_retention_days=decision_retention_days()
        )
    return _processor


class LambdaEventDeserializer(TypeDeserializer):
    """Powertools' deserializer, except that B and BS come back as bytes: a Lambda event
    carries them as base64 text, which Powertools hands on as text (stored, it would be S)."""

    def deserialize(self, value: dict) -> Any:
        """Powertools' rules, with the types an image is mostly made of (text, maps,
        numbers, lists) answered before its look-up of a method by name: the same values
        (``tests/unit/test_dynamo_codec.py`` holds it to Powertools'), less CPU a record."""
        if type(value) is dict and len(value) == 1:
            ((kind, raw),) = value.items()
            if kind == "S":
                return raw
            if kind == "M":
                return {k: self.deserialize(v) for k, v in raw.items()}
            if kind == "N":
                return self._deserialize_n(raw)
            if kind == "L":
                return [self.deserialize(v) for v in raw]
        return super().deserialize(value)

    def _deserialize_b(self, value: str | bytes) -> bytes:
        return base64.b64decode(value, validate=True) if isinstance(value, str) else value


_deserializer = LambdaEventDeserializer()


def _new_image(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The NewImage as plain Python values: numbers as Decimal, binary as bytes."""
    return {k: _deserializer.deserialize(v) for k, v in raw.items()}


def to_stream_record(record: DynamoDBRecord) -> StreamRecord:
    """The parts of a stream record the processor needs; a broken image stays broken."""
    stream = record.dynamodb
    name = record.event_name.name if record.event_name else ""
    if stream is None:
        return StreamRecord(sequence_number="", event_name=name, keys={})
    try:
        raw_image = stream.get("NewImage")
        image: dict[str, Any] | None = _new_image(raw_image) if raw_image else None
    except Exception:  # an image that does not deserialize is decided as invalid
        image = None
    return StreamRecord(
        sequence_number=stream.sequence_number or "",
        event_name=name,
        keys=stream.keys,
        new_image=image,
    )


def _latency_ms(submitted_at: str | None, decided_at: str) -> float | None:
    """Milliseconds from a producer's ``submitted_at`` (any clock, naive or junk) to the
    decision; None when it is no time. Never raises: this runs after the commit."""
    start, end = parse_timestamp(submitted_at), parse_timestamp(decided_at)
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds() * 1000)


def record_metrics(result: BatchResult, received: int) -> None:
    accepted = sum(1 for d in result.decided if d.decision.status == Status.ACCEPTED)
    rejected = len(result.decided) - accepted
    if accepted:
        metrics.add_metric(name="SignupAccepted", unit=MetricUnit.Count, value=accepted)
    if rejected:
        metrics.add_metric(name="SignupRejected", unit=MetricUnit.Count, value=rejected)
    if result.failures:
        metrics.add_metric(name="GroupFailed", unit=MetricUnit.Count, value=len(result.failures))
    if result.conflicts:
        metrics.add_metric(name="CommitConflicted", unit=MetricUnit.Count, value=result.conflicts)
    later = [t for _, t in result.transitions if t.from_status != Status.PENDING]
    for name, count in (
        ("SignupMoved", sum(1 for t in later if not t.refused)),
        ("RequestRefused", sum(1 for t in later if t.refused)),
        ("HoldExpired", sum(1 for t in later if t.to_status == Status.EXPIRED)),
        ("SignupPromoted", sum(1 for t in later if t.cause == "promotion")),
    ):
        if count:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=count)
    # Always one metric, so a batch of replays alone does not log "no metrics to publish".
    metrics.add_metric(name="RecordsReceived", unit=MetricUnit.Count, value=received)
    latencies = [_latency_ms(d.submitted_at, d.decided_at) for d in result.decided]
    values = [v for v in latencies if v is not None]
    # Powertools flushes a document early at 100 values of one metric: stay below, with an
    # even sample of the batch, so the percentiles still see its spread.
    step = max(1, -(-len(values) // 99))
    for value in values[::step]:
        metrics.add_metric(
            name="DecisionLatency", unit=MetricUnit.Milliseconds, value=round(value, 1)
        )


def record_parking_metrics(result: BatchResult) -> None:
    """Parked events (docs/arrival-order.md): the batch succeeds, so only these tell."""
    for event_id, error in result.parked_events:
        logger.warning("event parked", event_id=event_id, error=error)
    if result.parked_events:
        events = len(result.parked_events)
        metrics.add_metric(name="EventParked", unit=MetricUnit.Count, value=events)
    if result.parked:
        metrics.add_metric(name="RecordsParked", unit=MetricUnit.Count, value=result.parked)
    if result.released:
        metrics.add_metric(name="RecordsReleased", unit=MetricUnit.Count, value=result.released)


#: Whether the container's own objects are frozen out of the garbage collector's walks.
_frozen = False


def _freeze_container() -> None:
    """Once, after the container's first batch: what is alive then is the container's own
    (the modules, the boto3 client and its service models, the processor), about 70,000
    objects that every full collection of the garbage collector would walk again, batch
    after batch, to free none of them (about 60 µs a decision at batch 100, docs/cost.md).
    Frozen (``gc.freeze``), they are never walked nor collected: they live as long as the
    container anyway. So, once, does what the first batch's event still holds then (the
    runtime keeps it until the call returns: at most Lambda's 6 MB payload)."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


#: The processors ``in_container`` ran an invocation with: their containers are warm.
_warm: weakref.WeakSet[StreamProcessor] = weakref.WeakSet()


def in_container(
    processor: StreamProcessor, event: dict[str, Any], context: LambdaContext
) -> dict[str, Any]:
    """``handler`` with ``processor`` as its container's (this thread's, for this call): how
    one process runs concurrent invocations, each with a processor of its own, as Lambda
    runs them in containers of their own (never two calls on one processor at once).

    Its log lines carry its own invocation's context (request id, ...) and its container's
    cold start, as Powertools' thread-safe keys of this thread: they win over the keys
    ``inject_lambda_context`` appends to the one formatter every container of the process
    shares, which another container's invocation may have replaced meanwhile."""
    metrics_per_thread(metrics)
    _container.processor = processor
    cold_start = processor not in _warm
    _warm.add(processor)
    logger.thread_safe_append_keys(
        cold_start=cold_start, **build_lambda_context_model(context).__dict__
    )
    try:
        return handler(event, context)
    finally:
        logger.thread_safe_clear_keys()
        _container.processor = None


def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: decide the batch; ``batchItemFailures`` for failed groups."""
    try:
        return _handle(event, context)
    finally:
        if is_metrics_disabled():
            # Powertools keeps metrics it did not publish; left alone they pile up across
            # invocations and are printed by its 100-value auto-flush despite the switch.
            metrics.clear_metrics()
        _freeze_container()


@metrics.log_metrics
@_traced
@logger.inject_lambda_context
@event_source(data_class=DynamoDBStreamEvent)
def _handle(event: DynamoDBStreamEvent, context: LambdaContext) -> dict[str, Any]:
    records = [to_stream_record(r) for r in event.records]
    result = get_processor().process(records)
    record_metrics(result, received=len(records))
    record_parking_metrics(result)
    for decided in result.decided:
        logger.debug(
            "signup decided",
            event_id=decided.event_id,
            signup_ref=signup_ref(decided.event_id, decided.decision.signup_id),
            status=decided.decision.status,
            reason=decided.decision.reason,
        )
    for event_id, t in result.transitions:
        if t.from_status == Status.PENDING:
            continue  # a first decision: logged above
        logger.debug(
            "request refused" if t.refused else "signup moved",
            event_id=event_id,
            signup_ref=signup_ref(event_id, t.signup_id),
            from_status=t.from_status,
            to_status=t.to_status,
            cause=t.cause,
            reason=t.reason,
        )
    logger.info(
        "batch processed",
        records=len(records),
        decided=len(result.decided),
        ignored=result.ignored,
        failed_groups=len(result.failures),
        conflicts=result.conflicts,
    )
    return {"batchItemFailures": [{"itemIdentifier": seq} for seq in result.failures]}

"""The stream processor driven directly, metered: cost per decision as one event grows.

Going through producers and the stream, 100,000 signups would take the local endpoint
(moto, ~400 requests/s, one at a time) far too long. Here the real stream handler gets
synthetic records shaped exactly as Lambda delivers them (INSERT, NEW_IMAGE, typed
values, growing sequence numbers), in batches of 100, against the embedded endpoint. The
producers' intake writes are not made; their units follow from the intake items (marked
``undecided``, as ``SignupStore.put_intake`` writes them) by the same rules, the entry each
puts into the marker's index included (the full run measures them for real).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnstile.base.contract import INTAKE_TABLE, Attr, ControlKey
from turnstile.jobs.processor import utc_now
from turnstile.storage.store import SignupStore
from turnstile_bench.endpoint import LocalEndpoint, quiet_handler_environment
from turnstile_bench.metering import (
    ItemSizes,
    Meter,
    MeteredClient,
    MeterSnapshot,
    index_entry,
    index_write_units,
    item_size,
    write_units,
)
from turnstile_bench.prices import Prices
from turnstile_bench.progress import Progress
from turnstile_bench.strategies import (
    BATCH_SIZE,
    CountingProcessor,
    census,
    create_events,
    quiet,
)
from turnstile_bench.workload import Signup, Workload, event_capacities, generate, intake_item

__all__ = ["DirectRun", "events_summary", "lambda_record", "run_direct", "scale_summary"]

METHOD = (
    "stream processor driven directly through the real stream handler with synthetic "
    "Lambda-shaped INSERT records in batches of 100, against the embedded endpoint, "
    "metered; intake writes not made, their units computed from the intake items (no "
    "undecided index entry: a first put carries no marker)"
)


@dataclass
class DirectRun:
    """One processor-only run over a single event."""

    signups: int
    capacity: int
    intake_bytes: tuple[int, int]
    wall_s: float
    processor: MeterSnapshot
    intake_write_units: float
    #: The entries the intake writes put into intake's sparse ``undecided`` index.
    intake_index_write_units: float = 0.0
    decision_sizes: list[int] = field(default_factory=list)
    intake_sizes: list[int] = field(default_factory=list)
    decided: int = 0
    accepted: int = 0
    oversold_seats: int = 0
    failed_groups: int = 0
    conflicts: int = 0
    size_mismatches: int = 0
    #: The most a decision item weighs over its intake item (status, reason or position,
    #: decided_at, sequence_number).
    max_decision_overhead_bytes: int = 0
    events: int = 1
    #: The event item at its largest: counters plus the journal of one commit.
    event_item_bytes_max: int = 0

    def per_decision(self, prices: Prices) -> dict[str, Any]:
        """The figures of this run, per decision."""
        n = max(1, self.decided)
        processor_w = self.processor.total_write_units / n
        processor_r = self.processor.total_read_units / n
        intake_w = self.intake_write_units / n
        index_w = self.intake_index_write_units / n
        writes = processor_w + intake_w + index_w
        return {
            "signups": self.signups,
            "events": self.events,
            "capacity_per_event": self.capacity,
            "decided": self.decided,
            "accepted": self.accepted,
            "oversold_seats": self.oversold_seats,
            "failed_groups": self.failed_groups,
            "conflicts": self.conflicts,
            "processor_decisions_per_s": round(self.decided / self.wall_s, 1),
            "processor_requests_per_decision": round(self.processor.total_requests / n, 4),
            "processor_write_units_per_decision": round(processor_w, 4),
            "processor_read_units_per_decision": round(processor_r, 4),
            "intake_write_units_per_decision": round(intake_w, 4),
            "intake_index_write_units_per_decision": round(index_w, 4),
            "write_units_per_decision": round(writes, 4),
            "read_units_per_decision": round(processor_r, 4),
            "cost_per_million_usd": round(prices.per_million_decisions_usd(writes, processor_r), 4),
            "event_item_bytes_max": self.event_item_bytes_max,
            "decision_item_bytes_max": max(self.decision_sizes, default=0),
            "decision_item_bytes_mean": round(
                sum(self.decision_sizes) / max(1, len(self.decision_sizes)), 1
            ),
            "decisions_over_1kb": sum(1 for s in self.decision_sizes if s > 1024),
            "intake_item_bytes_max": max(self.intake_sizes, default=0),
            "max_decision_overhead_bytes": self.max_decision_overhead_bytes,
            "largest_intake_bytes_for_one_unit": 1024 - self.max_decision_overhead_bytes,
            "size_mismatches": self.size_mismatches,
            "processor_units_by_operation": {
                "write": self.processor.write_units,
                "read": self.processor.read_units,
                "requests": self.processor.requests,
            },
        }


def lambda_record(item: dict[str, Any], sequence_number: str, stream_arn: str) -> dict[str, Any]:
    """A DynamoDB stream INSERT record as Lambda delivers it (typed JSON values)."""
    keys = {k: item[k] for k in ("event_id", "signup_id")}
    return {
        "eventID": uuid.uuid4().hex,
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": int(time.time()),
            "Keys": keys,
            "NewImage": item,
            "SequenceNumber": sequence_number,
            "SizeBytes": 0,
            "StreamViewType": "NEW_IMAGE",
        },
        "eventSourceARN": stream_arn,
    }


def _batches(
    signups: Sequence[Signup], stream_arn: str, seed: int
) -> Iterator[list[dict[str, Any]]]:
    """Lambda-shaped batches of 100. Sequence numbers grow by irregular steps, 28 digits
    like AWS's, so the journal compresses no better than it would there."""
    rng = random.Random(seed)
    sequence = 4_421_584_500_000_000_017_450_439_091
    for start in range(0, len(signups), BATCH_SIZE):
        batch = []
        for s in signups[start : start + BATCH_SIZE]:
            sequence += rng.randint(1, 10_000_000)
            item = intake_item(s.event_id, s.signup_id, s.seats, s.attributes, utc_now())
            batch.append(lambda_record(item, str(sequence), stream_arn))
        yield batch


def run_direct(
    label: str,
    signups: int,
    progress: Progress,
    intake_bytes: tuple[int, int] = Workload.intake_bytes,
    seed: int = Workload.seed,
    events: int = 1,
) -> DirectRun:
    """Decide ``signups`` signups spread evenly over ``events`` events through the handler.

    Each event's capacity is half its share of the seats asked, so some are accepted and
    the rest rejected, as when an event sells out.
    """
    quiet_handler_environment()
    from turnstile.handlers import stream as stream_module
    from turnstile_tools.local.context import LocalLambdaContext

    workload = Workload(
        events=events,
        signups=signups,
        capacity=max(1, signups // events // 2),
        intake_bytes=intake_bytes,
        seed=seed,
        hot_share=1.0 / events,
    )
    progress.phase(label, signups)
    items = generate(workload)
    intake_sizes: dict[str, int] = {}
    index_units = 0.0
    with LocalEndpoint(label.split(":")[0].replace(" ", "-")) as endpoint:
        sizes = ItemSizes()
        create_events(endpoint, workload, sizes)
        meter = Meter("processor")
        processor = CountingProcessor(
            SignupStore(
                MeteredClient(endpoint.client, meter, sizes),
                intake_table=endpoint.intake_table,
                main_table=endpoint.main_table,
                control_table=endpoint.control_table,
            ),
            chunk_size=BATCH_SIZE,
        )
        previous = stream_module._processor
        stream_module._processor = processor
        handler = quiet(stream_module.handler)
        arn = endpoint.stream_arn()
        failed = 0
        event_item = 0
        ids = list(event_capacities(workload))
        started = time.perf_counter()
        try:
            for batch in _batches(items, arn, seed):
                response = handler({"Records": batch}, LocalLambdaContext())
                failed += len(response.get("batchItemFailures", []))
                event_item = max(
                    event_item,
                    max(sizes.largest((endpoint.control_table, *ControlKey.event(e))) for e in ids),
                )
                for record in batch:
                    image = record["dynamodb"]["NewImage"]
                    intake_sizes[image["signup_id"]["S"]] = item_size(image)
                    for index in INTAKE_TABLE.indexes:  # a new item: its entry put
                        entry = index_entry(image, index, (Attr.EVENT_ID, Attr.SIGNUP_ID))
                        index_units += index_write_units(index, None, entry)
                progress.advance(len(batch))
            wall = time.perf_counter() - started
        finally:
            stream_module._processor = previous
        counted = census(endpoint, workload, sizes)
        overhead = max(
            (
                size - intake_sizes[signup_id]
                for (_, signup_id), size in sizes.sizes(endpoint.main_table).items()
                if signup_id in intake_sizes
            ),
            default=0,
        )
    progress.finish()
    return DirectRun(
        signups=signups,
        capacity=workload.capacity,
        intake_bytes=intake_bytes,
        wall_s=wall,
        processor=meter.snapshot(),
        intake_write_units=float(sum(write_units(s) for s in intake_sizes.values())),
        intake_index_write_units=index_units,
        decision_sizes=counted.decision_sizes,
        intake_sizes=list(intake_sizes.values()),
        decided=counted.decided,
        accepted=counted.accepted,
        oversold_seats=counted.oversold_seats,
        failed_groups=failed + processor.failed_groups,
        conflicts=processor.conflicts,
        size_mismatches=counted.size_mismatches,
        max_decision_overhead_bytes=overhead,
        events=events,
        event_item_bytes_max=event_item,
    )


def scale_summary(
    runs: Sequence[DirectRun], prices: Prices, tolerance: float = 0.05
) -> dict[str, Any]:
    """Cost per decision at each size, and whether it stays within ``tolerance`` of the
    smallest run's."""
    points = [r.per_decision(prices) for r in runs]
    base = points[0]["cost_per_million_usd"] if points else 0.0
    deviations = [
        abs(p["cost_per_million_usd"] - base) / base * 100 if base else 0.0 for p in points
    ]
    for point, deviation in zip(points, deviations, strict=True):
        point["cost_deviation_pct"] = round(deviation, 2)
    worst = max(deviations, default=0.0)
    return {
        "method": METHOD,
        "points": points,
        "max_cost_deviation_pct": round(worst, 2),
        "flat_within_pct": tolerance * 100,
        "flat": worst <= tolerance * 100,
    }


def events_summary(runs: Sequence[DirectRun], prices: Prices) -> dict[str, Any]:
    """Processor units per decision as one batch spans more events (a commit per event)."""
    return {
        "method": METHOD,
        "note": (
            "each batch commits once per event it holds: processor write units per decision "
            "~ 1 + (events per batch x event item units) / batch size"
        ),
        "points": [r.per_decision(prices) for r in runs],
    }

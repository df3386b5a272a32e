"""``turnstile bench --drop``: one hot event, far more signups than seats, as fast as the
producers can send them, under a simulated per-partition throughput limit.

The same drop is run with the event in one shard (``K = 1``: today's layout, every signup in
one intake partition, one stream of decisions, one partition of the main table) and spread
over ``K`` shards (docs/hot-events.md). The embedded endpoint enforces DynamoDB's
per-partition limits scaled down (``scale``: 1,000 write units/s per partition times it), so
that moto, not the limit, is never what sets the pace of the unsharded run, and the
ceiling a partition puts on one event shows as it does on AWS.

Producers write intake directly (each signup under ``contract.signup_key``, as the client's
helper computes it), retrying what the limit throttles, for ``duration_s``; the stream
handler decides under the processor's deployed role, through the local poller. Then
everything submitted is left to be decided, and the tables are read back:

* **decisions/s (plateau)**: first decisions committed while the producers were sending,
  per second, the first seconds left out (the stream's start);
* **throttled**: requests the limit refused (producers' and processor's), and items it left
  unprocessed in batches;
* **p50 / p99**: from a producer's put being acknowledged to its decision being committed;
* **write units per decision**: every write of the run (producers' puts, the processor's
  commits, decision items and escrow moves, failed conditional writes), by DynamoDB's rules
  (``turnstile_bench.metering``), over the first decisions;
* **oversold / undersold**: seats given past the capacity; seats never given while a signup
  was refused ``capacity_full``;
* **inversions**: seats given to signups acknowledged after the first signup refused
  ``capacity_full`` (a later signup given a seat while an earlier one was refused), as a
  share of the seats given.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from turnstile.base.contract import STREAM_SOURCE, Function, Reason, Status, signup_key
from turnstile.jobs.processor import BatchResult, StreamProcessor, StreamRecord, utc_now
from turnstile.storage.store import SignupStore
from turnstile_bench.endpoint import LocalEndpoint, quiet_handler_environment
from turnstile_bench.metering import ItemSizes, Meter, MeteredClient, combine
from turnstile_bench.progress import Progress
from turnstile_bench.report import cell
from turnstile_bench.strategies import EMF_SINK

__all__ = ["DROP", "QUICK_DROP", "DropWorkload", "render_drop", "run_drop"]

EVENT_ID = "drop"
#: The processor's store retries a throttled request this many times (8 in a deployment):
#: a partition slowed to ``scale`` of its rate makes a throttled write wait as much longer,
#: and its retries must wait with it (16: about 12 s, against about 3 s).
PROCESSOR_ATTEMPTS = 16
#: Seconds at the start of the producers' window left out of the plateau.
WARM_UP_S = 2.0
#: The goals of the drop (the issue's): K shards decide this many times as fast as one...
SPEEDUP_GOAL = 10.0
#: ... with at most this share of the seats given out of arrival order ...
INVERSIONS_GOAL = 0.03
#: ... and write units per decision within this much of the unsharded event's.
WRITE_UNITS_GOAL = 0.10


@dataclass(frozen=True)
class DropWorkload:
    capacity: int = 2_000
    shard_counts: tuple[int, ...] = (1, 16)
    #: Producer threads, each sending as fast as it can. More, and on two cores they take
    #: the CPU the sixteen shards' processors need to keep up (and a backlog that grows
    #: makes the shards' lag, and so the inversions, grow with it).
    producers: int = 8
    duration_s: float = 40.0
    #: The intake stream's shards, as the local poller emulates them over moto's one (each
    #: partition key's records in one, in order; one invocation per shard at a time, each
    #: in a container of its own): a pre-warmed table has a partition, and so a stream
    #: shard, per hot key, and Lambda decides each shard on its own.
    stream_shards: int = 16
    #: The stream's batch size. A scaled-down partition must take a batch as a real one
    #: does: 100 decisions are a tenth of a second of an AWS partition, but 5 s of one at
    #: 1/50 of its rate, longer than the store's retries wait; 20 are one second of it.
    batch_size: int = 20
    #: The per-partition limit as a share of AWS's (1,000 WU/s, 3,000 RU/s per partition).
    #: Lower, and the per-batch reads and writes (a shard's pool read when sold out, a
    #: batch's decisions to one partition) no longer fit a scaled partition as they fit a
    #: real one: the figures would show the scaling, not the design.
    scale: float = 0.02


DROP = DropWorkload()
QUICK_DROP = DropWorkload(capacity=600, duration_s=20.0)


class _TimedProcessor(StreamProcessor):
    """The stream processor, noting in ``decided_at`` (shared by every container) when
    each first decision was committed."""

    lock = threading.Lock()

    def __init__(self, store: SignupStore, decided_at: dict[str, float], **kwargs: Any) -> None:
        super().__init__(store, **kwargs)
        self.decided_at = decided_at

    def process(self, records: Sequence[StreamRecord]) -> BatchResult:
        result = super().process(records)
        now = time.perf_counter()
        with self.lock:
            for d in result.decided:
                self.decided_at.setdefault(d.decision.signup_id, now)
        return result


def _throttled(exc: BaseException) -> bool:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
    return code in ("ThrottlingException", "ProvisionedThroughputExceededException") or (
        "throughput" in str(exc).lower() or "throttl" in str(exc).lower()
    )


def run_drop(workload: DropWorkload, progress: Progress) -> dict[str, Any]:
    """Each shard count's run on a fresh endpoint; the whole result document."""
    import warnings

    from turnstile_bench.report import machine

    warnings.filterwarnings("ignore", message="No application metrics to publish")
    quiet_handler_environment()
    runs = {}
    for shards in workload.shard_counts:
        progress.phase(f"drop: {shards} shard{'s' if shards > 1 else ''}", 1)
        # Powertools prints its metrics documents to stdout (turnstile_bench.strategies.quiet);
        # swallowed here, once, around the whole run: a redirect per invocation would race
        # with the other containers' (stdout is one for the process).
        with contextlib.redirect_stdout(EMF_SINK):
            runs[str(shards)] = _run_one(workload, shards)
        progress.advance(1)
    progress.finish()
    doc: dict[str, Any] = {
        "kind": "drop",
        "machine": machine(),
        "workload": asdict(workload),
        "runs": runs,
    }
    doc["goals"] = goals(doc)
    doc["checks"] = {
        f"drop_k{k}_never_oversold_or_undersold": r["oversold"] == 0 and r["undersold"] == 0
        for k, r in runs.items()
    }
    return doc


def _run_one(workload: DropWorkload, shards: int) -> dict[str, Any]:
    from turnstile.handlers import stream as stream_module
    from turnstile_tools.local.poller import CheckpointStore, StreamPoller

    with LocalEndpoint(f"drop{shards}", throughput_scale=workload.scale) as endpoint:
        sizes = ItemSizes()
        meters = {name: Meter(name) for name in ("producers", "processor")}

        def store(client: Any, max_attempts: int = 8) -> SignupStore:
            return SignupStore(
                client,
                intake_table=endpoint.intake_table,
                main_table=endpoint.main_table,
                control_table=endpoint.control_table,
                max_attempts=max_attempts,
            )

        store(endpoint.client).create_event(EVENT_ID, workload.capacity, utc_now(), shards=shards)
        decided_at: dict[str, float] = {}
        containers = threading.local()
        processor_role = endpoint.client_as(Function.PROCESSOR)

        def container(event: dict[str, Any], context: Any) -> Any:
            """An invocation in this thread's container (its own processor), as Lambda
            runs concurrent invocations in containers of their own."""
            processor = getattr(containers, "processor", None)
            if processor is None:
                metered = MeteredClient(
                    processor_role, meters["processor"], sizes, observer=endpoint.client
                )
                processor = containers.processor = _TimedProcessor(
                    store(metered, PROCESSOR_ATTEMPTS), decided_at, chunk_size=workload.batch_size
                )
            return stream_module.in_container(processor, event, context)

        producers = store(MeteredClient(endpoint.client, meters["producers"], sizes))
        stop = threading.Event()
        acked: dict[str, float] = {}
        throttled_puts = [0]
        lock = threading.Lock()
        with tempfile.TemporaryDirectory(prefix="turnstile-drop-") as state:
            poller = StreamPoller(
                handler=container,
                streams_client=endpoint.client_as(Function.PROCESSOR, "dynamodbstreams"),
                stream_arn=endpoint.stream_arn(),
                checkpoints=CheckpointStore(Path(state) / "checkpoints.json"),
                settings=replace(STREAM_SOURCE, batch_size=workload.batch_size),
                stream_shards=workload.stream_shards,
                partition_key="event_id",
            )
            polling = threading.Thread(target=poller.run, args=(stop,), daemon=True)
            polling.start()
            started = time.perf_counter()
            deadline = started + workload.duration_s

            def produce(n: int) -> None:
                i = 0
                while time.perf_counter() < deadline:
                    sid = f"fan-{n:02d}-{i:06d}"
                    try:
                        producers.put_intake(
                            signup_key(EVENT_ID, sid, shards), sid, 1, None, utc_now()
                        )
                    except Exception as exc:
                        if not _throttled(exc):
                            raise
                        with lock:
                            throttled_puts[0] += 1
                        time.sleep(0.05)
                        continue  # the same signup again, as a producer would
                    with lock:
                        acked[sid] = time.perf_counter()
                    i += 1

            threads = [
                threading.Thread(target=produce, args=(n,), daemon=True)
                for n in range(workload.producers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sending = time.perf_counter() - started
            # Everything submitted is decided before the tables are read.
            settle_by = time.perf_counter() + 120 + len(acked) / 5
            while time.perf_counter() < settle_by:
                with _TimedProcessor.lock:
                    if len(decided_at) >= len(acked):
                        break
                time.sleep(0.2)
            stop.set()
            polling.join(timeout=30)
        assert endpoint.server is not None
        limit = endpoint.server.throughput.stats
        rows = _decisions(endpoint)
    snapshot = combine(m.snapshot() for m in meters.values())
    return figures(
        workload,
        shards,
        acked,
        decided_at,
        rows,
        started,
        sending,
        write_units=snapshot.total_write_units,
        throttled=sum(limit.refused.values()) + sum(limit.unprocessed.values()),
        throttled_puts=throttled_puts[0],
    )


def _decisions(endpoint: LocalEndpoint) -> dict[str, tuple[str, str | None]]:
    """Every decision of the event (any shard): signup -> (status, reason)."""
    rows: dict[str, tuple[str, str | None]] = {}
    pages = endpoint.client.get_paginator("scan").paginate(
        TableName=endpoint.main_table, ConsistentRead=True
    )
    for page in pages:
        for item in page["Items"]:
            key = item["event_id"]["S"]
            if key == EVENT_ID or key.startswith(f"{EVENT_ID}#"):
                reason = item.get("reason", {}).get("S")
                rows[item["signup_id"]["S"]] = (item["status"]["S"], reason)
    return rows


def figures(
    workload: DropWorkload,
    shards: int,
    acked: Mapping[str, float],
    decided_at: Mapping[str, float],
    rows: Mapping[str, tuple[str, str | None]],
    started: float,
    sending: float,
    *,
    write_units: float,
    throttled: int,
    throttled_puts: int,
) -> dict[str, Any]:
    """One run's figures (pure: the tests feed it made-up runs)."""
    per_second: dict[int, int] = {}
    for at in decided_at.values():
        if at - started <= sending:
            second = int(at - started)
            per_second[second] = per_second.get(second, 0) + 1
    # Decisions come a batch at a time: the rate is their mean over the producers' window,
    # its first seconds left out.
    in_window = sum(1 for at in decided_at.values() if WARM_UP_S <= at - started <= sending)
    span = sending - WARM_UP_S
    latencies = sorted(decided_at[s] - acked[s] for s in decided_at if s in acked)
    given = sum(1 for status, _ in rows.values() if status in (Status.ACCEPTED, Status.HELD))
    refused_full = [
        acked[s]
        for s, (status, reason) in rows.items()
        if status == Status.REJECTED and reason == Reason.CAPACITY_FULL and s in acked
    ]
    first_refused = min(refused_full, default=None)
    inversions = (
        0
        if first_refused is None
        else sum(
            1
            for s, (status, _) in rows.items()
            if status in (Status.ACCEPTED, Status.HELD) and acked.get(s, 0.0) > first_refused
        )
    )
    decisions = len(rows)
    return {
        "shards": shards,
        # What the partitions allow: one write unit a signup in intake, one a decision in
        # the main table, each shard a partition of its own in both.
        "partition_ceiling_per_s": shards * 1000 * workload.scale,
        "submitted": len(acked),
        "decided": decisions,
        "lost": len(set(acked) - set(rows)),
        "decisions_per_s": in_window / span if span > 0 else 0.0,
        "timeline": [per_second.get(s, 0) for s in range(max(int(sending), 1))],
        "throttled_requests": throttled,
        "throttled_puts": throttled_puts,
        "p50_s": _quantile(latencies, 0.50),
        "p99_s": _quantile(latencies, 0.99),
        "write_units_per_decision": write_units / decisions if decisions else None,
        "given": given,
        "oversold": max(0, given - workload.capacity),
        "undersold": workload.capacity - given if refused_full and given < workload.capacity else 0,
        "inversions": inversions,
        "inversions_share": inversions / given if given else 0.0,
    }


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(q * len(values)))]


def goals(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The drop's goals, each as measured: the last shard count against the first."""
    runs = doc["runs"]
    one, many = runs[min(runs, key=int)], runs[max(runs, key=int)]
    speedup = many["decisions_per_s"] / one["decisions_per_s"] if one["decisions_per_s"] else None
    one_wu, many_wu = one["write_units_per_decision"], many["write_units_per_decision"]
    wu_ratio = many_wu / one_wu if one_wu and many_wu else None
    return {
        "speedup": speedup,
        "speedup_met": speedup is not None and speedup >= SPEEDUP_GOAL,
        "exact_met": all(r["oversold"] == 0 and r["undersold"] == 0 for r in runs.values()),
        "inversions_met": many["inversions_share"] <= INVERSIONS_GOAL,
        "write_units_ratio": wu_ratio,
        "write_units_met": wu_ratio is not None and abs(wu_ratio - 1) <= WRITE_UNITS_GOAL,
    }


_f = cell


def render_drop(doc: Mapping[str, Any]) -> str:
    """The drop's table: one column per shard count, and the goals."""
    runs = doc["runs"]
    w = doc["workload"]
    names = list(runs)
    rows = [
        ("ceiling of the partitions (signups/s)", "partition_ceiling_per_s", 0),
        ("decisions/s (plateau)", "decisions_per_s", 1),
        ("signups acknowledged", "submitted", 0),
        ("decided", "decided", 0),
        ("lost", "lost", 0),
        ("throttled requests", "throttled_requests", 0),
        ("producers' puts throttled (after retries)", "throttled_puts", 0),
        ("submit to decision p50 (s)", "p50_s", 2),
        ("submit to decision p99 (s)", "p99_s", 2),
        ("write units per decision", "write_units_per_decision", 3),
        ("seats given", "given", 0),
        ("oversold", "oversold", 0),
        ("undersold", "undersold", 0),
        ("inversions (seats)", "inversions", 0),
        ("inversions (share of seats given)", "inversions_share", 4),
    ]
    head = "| | " + " | ".join(f"K = {n}" for n in names) + " |"
    lines = [
        f"drop: one event of {w['capacity']} seats, {w['producers']} producers for "
        f"{w['duration_s']:.0f} s, per-partition limit x{w['scale']:g} "
        f"({1000 * w['scale']:g} WU/s, {3000 * w['scale']:g} RU/s a partition)",
        "",
        head,
        "|" + "---|" * (len(names) + 1),
    ]
    for label, key, digits in rows:
        lines.append(f"| {label} | " + " | ".join(_f(runs[n][key], digits) for n in names) + " |")
    g = doc["goals"]
    lines += [
        "",
        "A run throttled 0 times ran at this machine's ceiling (moto, the producers and the "
        "processors in one process), not the partitions': its figure is a floor.",
        f"speedup K={names[-1]} / K={names[0]}: {_f(g['speedup'], 1)}x "
        f"(goal >= {SPEEDUP_GOAL:g}x: {'met' if g['speedup_met'] else 'NOT met'})",
        f"exact (0 oversold, 0 undersold): {'met' if g['exact_met'] else 'NOT met'}",
        f"inversions <= {INVERSIONS_GOAL:.0%} of seats given: "
        f"{'met' if g['inversions_met'] else 'NOT met'}",
        f"write units per decision, K={names[-1]} / K={names[0]}: "
        f"{_f(g['write_units_ratio'], 3)} (goal within {WRITE_UNITS_GOAL:.0%}: "
        f"{'met' if g['write_units_met'] else 'NOT met'})",
    ]
    return "\n".join(lines)


def plot_drop(doc: Mapping[str, Any], path: Path) -> None:
    """Decisions per second over the drop, one line per shard count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, run in doc["runs"].items():
        (line,) = ax.plot(range(len(run["timeline"])), run["timeline"], label=f"K = {name}")
        ceiling = run.get("partition_ceiling_per_s")
        if ceiling:
            ax.axhline(
                ceiling,
                color=line.get_color(),
                linestyle="--",
                linewidth=0.8,
                label=f"K = {name}: the partitions' ceiling",
            )
    w = doc["workload"]
    ax.set_title(
        f"One event, {w['capacity']} seats, {w['producers']} producers, "
        f"partition limit x{w['scale']:g}"
    )
    ax.set_xlabel("seconds since the drop began")
    ax.set_ylabel("first decisions per second")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

"""``turnstile bench`` from options to document: what runs, in which order, and the checks."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from turnstile_bench.prices import ON_DEMAND_US_EAST_1, Prices
from turnstile_bench.progress import Progress
from turnstile_bench.report import (
    PROCESSOR_WRITE_UNITS_BOUND,
    SPREAD_WRITE_UNITS_BOUND,
    machine,
    strategy_figures,
)
from turnstile_bench.workload import Workload, generate

__all__ = [
    "DEMO",
    "FULL",
    "HOT",
    "PRESETS",
    "QUICK",
    "SAFE_WAYS",
    "WAYS",
    "BenchOptions",
    "demo_description",
    "run_bench",
]

#: The five ways, in the order the tables and the figure show them.
WAYS = ("naive", "optimistic", "transactional", "slots", "turnstile")
#: Every way but naive must never oversell, lose or double anything.
SAFE_WAYS = ("optimistic", "transactional", "slots", "slots:order", "turnstile")

#: Per-decision figures summed over parts, each rounded to 4 places.
ALL_IN_KEYS = ("write_units_per_decision", "read_units_per_decision", "requests_per_decision")
ROUNDING = 1e-4

#: Intake items just under 1 KB: the worst case of "signups of at most 1 KB".
BOUNDARY_INTAKE_BYTES = (1000, 1024)


@dataclass(frozen=True)
class BenchOptions:
    """What one ``turnstile bench`` run does."""

    mode: str
    workload: Workload
    strategies: tuple[str, ...] = WAYS
    scale_sizes: tuple[int, ...] = (1_000, 3_000, 10_000)
    boundary_signups: int = 500
    #: Signups spread over this many events, to show a commit per event per batch.
    spread_events: tuple[int, ...] = (1, 10, 25, 50, 100)
    spread_signups: int = 1_000
    import_runs: int = 5
    cpu_batches: int = 30
    run_strategies: bool = True
    run_scale: bool = True
    run_cold_start: bool = True
    prices: Prices = field(default=ON_DEMAND_US_EAST_1)


#: Fits in 3 minutes on 2 cores: the issue's ``--quick``.
QUICK = BenchOptions(
    mode="quick",
    workload=Workload(events=6, capacity=60, signups=600, producers=16, hot_share=0.4),
    spread_signups=300,
)

#: Where the designs differ most: one event, 32 producers, capacity far below demand
#: (895 seats asked for 100). Only the ways, plus slots claimed lowest first.
HOT = BenchOptions(
    mode="hot",
    workload=Workload(events=1, capacity=100, signups=600, producers=32, hot_share=1.0),
    strategies=(*WAYS, "slots:order"),
    run_scale=False,
    run_cold_start=False,
)

#: The issue's full run: a bigger workload, and one event grown to 100,000 signups.
FULL = BenchOptions(
    mode="full",
    workload=Workload(events=8, capacity=200, signups=2400, producers=16, hot_share=0.4),
    scale_sizes=(1_000, 10_000, 100_000),
    boundary_signups=1_000,
    spread_signups=3_000,
    import_runs=11,
    cpu_batches=100,
)

#: The point in under two minutes on 2 cores: every way (slots claimed lowest first too) on
#: one event of 40 seats that 240 signups ask about 360 seats of, 16 producers at once. Big
#: enough that naive oversells and the ways' costs part; no scale run, no cold start.
DEMO = BenchOptions(
    mode="demo",
    workload=Workload(events=1, capacity=40, signups=240, producers=16, hot_share=1.0),
    strategies=(*WAYS, "slots:order"),
    run_scale=False,
    run_cold_start=False,
)


def demo_description(options: BenchOptions = DEMO) -> str:
    """What ``--demo`` runs, in words (its help text, and what the docs quote)."""
    w = options.workload
    events = "one event" if w.events == 1 else f"{w.events} events"
    return (
        f"{events} of {w.capacity} seats, {w.signups} signups, {w.producers} producers, "
        f"every way ({', '.join(options.strategies)}); no scale run, no cold start"
    )


PRESETS = {"quick": QUICK, "hot": HOT, "full": FULL, "demo": DEMO}


def _checks(doc: dict[str, Any]) -> dict[str, bool]:
    checks: dict[str, bool] = {}
    ways = doc.get("strategies") or {}
    for name in SAFE_WAYS:
        figures = ways.get(name)
        if figures is not None:
            # The same invariants for every way, recounted from its tables after its run.
            checks[f"{name}_never_oversold_lost_or_doubled"] = (
                figures["oversold_seats"] == 0
                and figures["lost"] == 0
                and figures["doubled"] == 0
                and figures["pending"] == 0
            )
    for name, figures in ways.items():
        all_in = figures.get("all_in") or {}
        if "floor_write_units_per_decision" in all_in:
            checks[f"{name}_floor_at_most_all_in"] = (
                all_in["floor_write_units_per_decision"] <= all_in["write_units_per_decision"]
            )
    turnstile = ways.get("turnstile")
    if turnstile:
        all_in = turnstile.get("all_in") or {}
        parts = (all_in.get("parts") or {}).values()
        checks["turnstile_all_in_is_the_sum_of_its_parts"] = bool(parts) and all(
            math.isclose(all_in[key], sum(p[key] for p in parts), abs_tol=ROUNDING * len(parts))
            for key in ALL_IN_KEYS
        )
        swept = turnstile.get("sweeper") or {}
        # The sweeper ran as deployed (the index, no full scan) and found nothing: no
        # record undecided, no marker to remove (a first put carries none).
        checks["turnstile_sweeper_found_nothing_left"] = (
            swept.get("status") == "succeeded"
            and swept.get("full_scan") is False
            and swept.get("unmarked") == 0
            and swept.get("undecided_found") == 0
        )
        checks["turnstile_never_oversold"] = (
            turnstile["oversold_seats"] == 0
            and turnstile["pending"] == 0
            and bool(turnstile.get("audit", {}).get("ok"))
        )
        if doc["workload"]["events"] > 1:  # the bound of batches spread over events
            checks["processor_write_units_at_most_1.25_over_6_events"] = (
                turnstile["processor_write_units_per_decision"] <= SPREAD_WRITE_UNITS_BOUND
            )
    scale = doc.get("scale")
    if scale:
        checks["scale_never_oversold"] = all(p["oversold_seats"] == 0 for p in scale["points"])
        checks["scale_cost_flat_within_5pct"] = bool(scale["flat"])
        checks["scale_processor_write_units_at_most_1.1"] = all(
            p["processor_write_units_per_decision"] <= PROCESSOR_WRITE_UNITS_BOUND
            for p in scale["points"]
        )
    cold = doc.get("cold_start")
    if cold:
        checks["handler_import_at_most_300ms"] = bool(cold["within_target"])
    return checks


def run_bench(options: BenchOptions, progress: Progress) -> dict[str, Any]:
    """Run what ``options`` asks for and return the whole result document."""
    from turnstile_bench.coldstart import measure_cold_start
    from turnstile_bench.cpu import measure_cpu
    from turnstile_bench.scale import events_summary, run_direct, scale_summary
    from turnstile_bench.ways import run_strategy

    # Powertools warns on every batch that decided nothing new (all replays): noise here.
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    started = time.perf_counter()
    prices = options.prices
    doc: dict[str, Any] = {
        "bench": "turnstile",
        "schema": 1,
        "mode": options.mode,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "workload": options.workload.to_dict(),
        "prices": prices.to_dict(),
        "prices_text": prices.describe(),
        "processor": {"batch_size": 100, "chunk_size": 100},
    }
    if options.run_strategies:
        signups = generate(options.workload)
        doc["seats_asked"] = sum(s.seats for s in signups)
        doc["strategies"] = {
            name: strategy_figures(run_strategy(name, options.workload, signups, progress), prices)
            for name in options.strategies
        }
    if options.run_scale:
        seed = options.workload.seed
        runs = [
            run_direct(f"scale: {n} signups, one event", n, progress, seed=seed)
            for n in options.scale_sizes
        ]
        doc["scale"] = scale_summary(runs, prices)
        boundary = run_direct(
            "size boundary: ~1 KB intake",
            options.boundary_signups,
            progress,
            intake_bytes=BOUNDARY_INTAKE_BYTES,
            seed=seed,
        )
        doc["events_per_batch"] = events_summary(
            [
                run_direct(
                    f"spread: {k} events", options.spread_signups, progress, seed=seed, events=k
                )
                for k in options.spread_events
            ],
            prices,
        )
        doc["item_size_boundary"] = {
            "intake_bytes": list(BOUNDARY_INTAKE_BYTES),
            **boundary.per_decision(prices),
        }
    if options.run_cold_start:
        doc["cold_start"] = measure_cold_start(options.import_runs, progress).to_dict()
        progress.phase("cpu: handler without I/O", 1)
        doc["cpu"] = measure_cpu(options.cpu_batches).to_dict()
        progress.finish()
    doc["checks"] = _checks(doc)
    doc["duration_s"] = round(time.perf_counter() - started, 1)
    return doc


def with_knobs(options: BenchOptions, **knobs: Any) -> BenchOptions:
    """``options`` with the workload knobs given (None: keep)."""
    given = {k: v for k, v in knobs.items() if v is not None}
    return replace(options, workload=replace(options.workload, **given))

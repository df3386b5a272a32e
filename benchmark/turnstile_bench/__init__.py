"""``turnstile bench``: five ways of deciding the same workload, side by side.

A package of its own, beside the runtime package ``turnstile`` and never in the Lambda asset;
its dependencies are the ``bench`` extra. This module only registers the command: everything
heavy (moto, matplotlib, the stream handler) is imported when the command runs, so the CLI
stays quick to start.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from turnstile_bench.options import rate, share, whole

__all__ = ["cmd_bench", "register"]


def _intake_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    pair = (int(low), int(high or low))
    if not 0 < pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH bytes, got {text!r}")
    return pair


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 0:
        raise argparse.ArgumentTypeError(f"expected counts like 10000,100000, got {text!r}")
    return counts


def _seats(text: str) -> tuple[tuple[int, float], ...]:
    from turnstile_bench.workload import parse_seats

    try:
        return parse_seats(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def register(subparsers: Any) -> None:
    """Add ``bench`` to the CLI's subcommands (``func`` runs it)."""
    p = subparsers.add_parser(
        "bench",
        help="benchmark five ways of deciding signups on the embedded local endpoint",
        description=(
            "Runs one workload five ways (naive, optimistic, transactional, slots, turnstile) "
            "on a fresh embedded endpoint each, checks every way's tables for oversold, lost "
            "and doubled seats, and reports throughput, latency, conflicts, requests and "
            "capacity units per decision, and on-demand cost. Local speeds are moto's: "
            "compare ratios and units."
        ),
    )
    preset = p.add_mutually_exclusive_group()
    preset.add_argument(
        "--quick",
        action="store_true",
        help="the standard run: 6 events, 16 producers, plus the scale check and cold start",
    )
    preset.add_argument(
        "--hot",
        action="store_true",
        help="one event, 32 producers, capacity far below demand: only the ways (and slots "
        "claimed lowest first, slots:order)",
    )
    preset.add_argument(
        "--demo",
        action="store_true",
        # The text of turnstile_bench.runner.demo_description(), kept here so the CLI starts
        # without importing the benchmark (tests/bench/test_demo.py checks they agree).
        help="the point in under two minutes: one event of 40 seats, 240 signups, 16 "
        "producers, every way (naive, optimistic, transactional, slots, turnstile, "
        "slots:order); no scale run, no cold start; with --plot, a figure that leads with "
        "oversold seats, then the cost of the correct ways, then latency",
    )
    preset.add_argument(
        "--lifecycle",
        action="store_true",
        help="holds, confirmations, cancellations and a waitlist through the stream "
        "processor: one event of 100 seats, a waitlist of 50, 5-second holds, 400 signups at 40/s; "
        "of those held 70%% confirm and the rest lapse, 20%% of the accepted cancel; write "
        "units and requests per transition, promotions, and a recount of every history",
    )
    p.add_argument(
        "--drop",
        action="store_true",
        help="one hot event, far more signups than seats, producers as fast as they can "
        "under a simulated per-partition limit (1/200 of AWS's): the event in 1 shard "
        "against 16 (decisions/s, throttled requests, p50/p99, write units per decision, "
        "oversold, undersold, inversions); with --quick, a shorter and smaller drop; with "
        "--plot, decisions per second over the drop",
    )
    p.add_argument(
        "--lineup",
        action="store_true",
        help="what a commit costs as one event's lineup grows to 50,000 holds and a waitlist "
        "of 10,000 (2,000 entries if --quick), batches of 100 through the stream processor, "
        "with pages and with pages switched off (to 1,000 entries): write units, requests "
        "and CPU per decision, the event item's size, and a batch of confirms and cancels "
        "on the full lineup",
    )
    p.add_argument(
        "--scale",
        action="store_true",
        help="only the scale check (one event growing: 1,000, 10,000 and 100,000 signups, "
        "or 1,000, 3,000 and 10,000 if --quick)",
    )
    p.add_argument("--no-scale", action="store_true", help="skip the scale check")
    p.add_argument(
        "--sweeper",
        action="store_true",
        help="only the sweeper's units: N decided + 100 undecided intake records, a full "
        "scan (as before the index) against the index (N: 10,000 and 100,000, or 10,000 "
        "if --quick; or --sweeper-decided)",
    )
    p.add_argument(
        "--sweeper-decided",
        type=_counts,
        metavar="N[,N...]",
        help="decided intake records for --sweeper, e.g. 10000,100000",
    )
    p.add_argument(
        "--cpu",
        action="store_true",
        help="only the stream processor's CPU per decision (batches of 100 records for one "
        "event, an in-memory store): the median of 5 runs, and the profile's top five "
        "(10 batches if --quick, else 50)",
    )
    p.add_argument("--no-cold-start", action="store_true", help="skip import time and CPU")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw oversold seats, the cost per decision of the ways that never oversold, "
        "latency, conflicts and scale (a panel only where the run has its data; python -m "
        "turnstile_bench.plot draws the quick and hot runs' JSON files in one figure)",
    )
    p.add_argument(
        "--strategies",
        metavar="WAY[,WAY...]",
        help="comma-separated ways to run, of naive, optimistic, transactional, slots, "
        "turnstile and slots:order (slots claimed lowest first); default the five, "
        "and slots:order too with --hot and --demo",
    )
    knobs = p.add_argument_group("workload knobs (defaults depend on --quick)")
    knobs.add_argument("--events", type=whole(1, "1 event or more"), help="events signed up for")
    knobs.add_argument("--capacity", type=whole(1, "1 seat or more"), help="seats per event")
    knobs.add_argument("--signups", type=whole(1, "1 signup or more"), help="signups in all")
    knobs.add_argument(
        "--producers", type=whole(1, "1 producer or more"), help="concurrent producer threads"
    )
    knobs.add_argument("--seats", type=_seats, help='seats per signup, weighted: "1:70,2:20,4:10"')
    knobs.add_argument("--hot-share", type=share, help="share of signups on the first event")
    knobs.add_argument(
        "--intake-bytes", type=_intake_range, help="intake item size range, e.g. 350-900"
    )
    knobs.add_argument("--seed", type=int, help="seed of the random workload")
    knobs.add_argument(
        "--waitlist", type=whole(0, "0 signups or more"), help="--lifecycle: signups that may wait"
    )
    knobs.add_argument(
        "--hold-seconds",
        type=whole(1, "1 second or more"),
        help="--lifecycle: seconds a hold lasts unconfirmed",
    )
    knobs.add_argument(
        "--rate", type=rate, help="--lifecycle: signups submitted per second (0: a burst)"
    )
    knobs.add_argument(
        "--confirm-share", type=share, help="--lifecycle: share of the held that confirm"
    )
    knobs.add_argument(
        "--cancel-share", type=share, help="--lifecycle: share of the accepted that cancel"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_bench)


def _check_extra(args: argparse.Namespace) -> None:
    """Before a run of minutes: the bench extra's modules are there (one line if not)."""
    from turnstile_tools.extras import needs_extra

    # moto for the embedded endpoint (the local extra, which bench includes); matplotlib draws.
    for module in ("moto", "werkzeug", *(("matplotlib",) if args.plot else ())):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise needs_extra("bench", "bench", exc) from exc


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table, write the files; exit 1 if a way other than
    naive oversold, lost or doubled anything."""
    _check_extra(args)
    from turnstile_bench.progress import Progress
    from turnstile_bench.report import render_table
    from turnstile_bench.runner import DEMO, FULL, HOT, QUICK, with_knobs
    from turnstile_bench.ways import STRATEGIES

    runs = [
        f"--{name}"
        for name in ("hot", "demo", "lifecycle", "drop", "lineup", "cpu", "sweeper", "scale")
        if getattr(args, name)
    ]
    if len(runs) > 1:
        print(
            f"turnstile: {' and '.join(runs)} are runs of their own: give one (with --quick "
            "for a shorter one)",
            file=sys.stderr,
        )
        return 2
    if args.sweeper:
        return _sweeper(args, Progress(enabled=not args.quiet))
    if args.lifecycle:
        return _lifecycle(args, Progress(enabled=not args.quiet))
    if args.cpu:
        return _cpu(args)
    if args.drop:
        return _drop(args, Progress(enabled=not args.quiet))
    if args.lineup:
        return _lineup(args, Progress(enabled=not args.quiet))

    options = DEMO if args.demo else HOT if args.hot else QUICK if args.quick else FULL
    options = with_knobs(
        options,
        events=args.events,
        capacity=args.capacity,
        signups=args.signups,
        producers=args.producers,
        seats=args.seats,
        hot_share=args.hot_share,
        intake_bytes=args.intake_bytes,
        seed=args.seed,
    )
    if args.strategies is None:
        names = options.strategies
    else:
        names = tuple(n.strip() for n in args.strategies.split(",") if n.strip())
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown or not names:
        known = ", ".join(STRATEGIES)
        what = f"unknown strategy {unknown[0]!r}" if unknown else "no strategy given"
        print(f"turnstile: {what} (known: {known})", file=sys.stderr)
        return 2
    options = replace(
        options,
        strategies=names,
        run_strategies=not args.scale,
        run_scale=(options.run_scale or args.scale) and not args.no_scale,
        run_cold_start=options.run_cold_start and not (args.no_cold_start or args.scale),
    )
    from turnstile_bench.runner import run_bench

    doc = run_bench(options, Progress(enabled=not args.quiet))
    print(render_table(doc))
    if args.json:
        _write_json(Path(args.json), doc)
    if args.plot:
        try:
            from turnstile_bench.plot import plot

            plot(doc, Path(args.plot))
        except ImportError as exc:  # matplotlib is a benchmark-only dependency
            print(f"turnstile: cannot draw {args.plot}: {exc}", file=sys.stderr)
            return 2
    return 0 if safe(doc) else 1


def safe(doc: dict[str, Any]) -> bool:
    """No way but naive oversold, lost or doubled anything (nor the scale run oversold)."""
    checks = doc.get("checks", {})
    return all(
        ok
        for name, ok in checks.items()
        if name.endswith("_never_oversold_lost_or_doubled")
        or name in ("turnstile_never_oversold", "scale_never_oversold")
    )


def _write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def _sweeper(args: argparse.Namespace, progress: Any) -> int:
    """``--sweeper``: the sweeper's units as intake grows, as a markdown table."""
    from turnstile_bench.endpoint import quiet_handler_environment
    from turnstile_bench.sweep import render_markdown, run_sweeper_scale

    quiet_handler_environment()
    counts = args.sweeper_decided or ((10_000,) if args.quick else (10_000, 100_000))
    doc = run_sweeper_scale(counts, undecided=100, progress=progress)
    print(render_markdown(doc))
    if args.json:
        _write_json(Path(args.json), doc)
    return 0


def _cpu(args: argparse.Namespace) -> int:
    """``--cpu``: the processor's CPU per decision, median of 5, and the profile's top five."""
    from turnstile_bench.cpu import cpu_report, render_cpu

    doc = cpu_report(batches=10 if args.quick else 50)
    print(render_cpu(doc))
    if args.json:
        _write_json(Path(args.json), doc)
    return 0


def _lineup(args: argparse.Namespace, progress: Any) -> int:
    """``--lineup``: the commit's cost by lineup size, as a table (and JSON); exit 1 if a
    check failed (the lineup read back is not what the decisions say, or oversold)."""
    from turnstile_bench.lineups import LINEUP, QUICK_LINEUP, render_lineup, run_lineup

    workload = QUICK_LINEUP if args.quick else LINEUP
    doc = run_lineup(workload, progress)
    print(render_lineup(doc))
    if args.json:
        _write_json(Path(args.json), doc)
    return 0 if all(doc["checks"].values()) else 1


def _drop(args: argparse.Namespace, progress: Any) -> int:
    """``--drop``: the drop's table (and JSON, figure); exit 1 if a run oversold or
    undersold (the other goals are figures, reported as met or not)."""
    from turnstile_bench.drop import DROP, QUICK_DROP, plot_drop, render_drop, run_drop

    workload = replace(
        QUICK_DROP if args.quick else DROP,
        **{
            k: v
            for k, v in {"capacity": args.capacity, "producers": args.producers}.items()
            if v is not None
        },
    )
    doc = run_drop(workload, progress)
    print(render_drop(doc))
    if args.json:
        _write_json(Path(args.json), doc)
    if args.plot:
        try:
            plot_drop(doc, Path(args.plot))
        except ImportError as exc:
            print(f"turnstile: cannot draw {args.plot}: {exc}", file=sys.stderr)
            return 2
    return 0 if all(doc["checks"].values()) else 1


def _lifecycle(args: argparse.Namespace, progress: Any) -> int:
    """``--lifecycle``: the lifecycle workload, its table and JSON; exit 1 if a check
    failed (the recount, the audit, or a run that never settled)."""
    from turnstile_bench.lifecycle_run import LIFECYCLE, render_lifecycle, run_lifecycle

    knobs = {
        "events": args.events,
        "capacity": args.capacity,
        "signups": args.signups,
        "producers": args.producers,
        "seats": args.seats,
        "intake_bytes": args.intake_bytes,
        "seed": args.seed,
        "waitlist": args.waitlist,
        "hold_seconds": args.hold_seconds,
        "rate": args.rate,
        "confirm_share": args.confirm_share,
        "cancel_share": args.cancel_share,
    }
    workload = replace(LIFECYCLE, **{k: v for k, v in knobs.items() if v is not None})
    if workload.events < 1 or workload.signups < 1 or workload.hold_seconds < 1:
        print(
            "turnstile: --lifecycle needs events, signups and --hold-seconds of 1 or more",
            file=sys.stderr,
        )
        return 2
    doc = run_lifecycle(workload, progress)
    print(render_lifecycle(doc))
    if args.json:
        _write_json(Path(args.json), doc)
    return 0 if all(doc["checks"].values()) else 1

"""The benchmark's figures: per-way summaries, the JSON document, and the terminal table."""

from __future__ import annotations

import math
import platform
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from turnstile_bench.accounting import all_in_figures
from turnstile_bench.metering import MeterSnapshot, combine
from turnstile_bench.prices import Prices
from turnstile_bench.strategies import DECISION_PATH, StrategyRun

__all__ = ["machine", "percentile", "render_table", "setup_figures", "strategy_figures"]

#: The stream processor's own write units per decision, one event per batch (the scale run).
PROCESSOR_WRITE_UNITS_BOUND = 1.1
#: The same with the quick workload's batches spread over 6 events: each event in a batch
#: is one commit, and since journal format 2 each commit carries the copied fields too.
SPREAD_WRITE_UNITS_BOUND = 1.25


def cell(value: Any, digits: int = 3) -> str:
    """A figure as a table cell: ``-`` for none (or NaN), a float to ``digits`` places."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _sizes(values: Sequence[int]) -> dict[str, Any]:
    return {
        "mean": round(sum(values) / len(values), 1) if values else None,
        "max": max(values, default=None),
        "min": min(values, default=None),
        "over_1kb": sum(1 for v in values if v > 1024),
    }


def strategy_figures(run: StrategyRun, prices: Prices) -> dict[str, Any]:
    """One way's figures; units and requests are per decision, latencies in seconds."""
    census = run.census
    n = max(1, census.decided)
    cost = combine(run.meters[role] for role in run.cost_roles)
    writes = cost.total_write_units / n
    reads = cost.total_read_units / n
    latencies = run.latencies_s
    out: dict[str, Any] = {
        "signups": run.signups,
        "decided": census.decided,
        "accepted": census.accepted,
        "rejected": census.rejected,
        "pending": run.signups - census.decided,
        "wall_s": round(run.wall_s, 3),
        "decisions_per_s": round(census.decided / run.wall_s, 1) if run.wall_s else None,
        "p50_s": round(percentile(latencies, 50), 4),
        "p95_s": round(percentile(latencies, 95), 4),
        "p99_s": round(percentile(latencies, 99), 4),
        "latency_max_s": round(max(latencies, default=math.nan), 4),
        "oversold_seats": census.oversold_seats,
        "lost": census.lost,
        "doubled": census.doubled,
        "invariants": {
            "oversold_seats": census.oversold_seats,
            "lost_signups": census.lost_signups,
            "lost_seats": census.lost_seats,
            "doubled_decisions": census.doubled_decisions,
            "doubled_seats": census.doubled_seats,
            "lock_target": census.lock_target,
        },
        "conflicts": run.conflicts,
        "retries": run.retries,
        "failed_conditional_writes": cost.failed_conditional_writes,
        # Charged to writes that wrote nothing: failed conditions, cancelled transactions.
        "failed_write_units_per_decision": round(cost.failed_write_units / n, 4),
        "requests_per_decision": round(cost.total_requests / n, 4),
        "read_units_per_decision": round(reads, 4),
        "write_units_per_decision": round(writes, 4),
        "cost_per_million_usd": round(prices.per_million_decisions_usd(writes, reads), 4),
        "decision_item_bytes": _sizes(census.decision_sizes),
        "requests_by_operation": dict(sorted(cost.requests.items())),
        "write_units_by_operation": dict(sorted(cost.write_units.items())),
        "index_write_units_by_index": dict(sorted(cost.index_write_units.items())),
        "read_units_by_operation": dict(sorted(cost.read_units.items())),
        "metering": {
            "sampled_size_mismatches": census.size_mismatches,
            "estimated_query_pages": cost.estimated_reads,
            "unmetered_sizing_requests": cost.unmetered_requests,
        },
    }
    # The headline: per first decision, every part of the way, and the floor beside it.
    out["all_in"] = all_in_figures(run.meters, run.cost_roles, census.decided, prices, run.floor)
    if run.floor is not None:
        out["floor"] = run.floor.to_dict(census.decided)
    if "processor" in run.meters:
        processor = run.meters["processor"]
        producers = run.meters["producers"]
        status = run.meters["status_reads"]
        stream = run.meters["stream"]
        path = all_in_figures(run.meters, DECISION_PATH, census.decided, prices)
        for part in ("sweeper", "releaser"):
            if part in run.meters:
                snapshot = run.meters[part]
                out[f"{part}_write_units_per_decision"] = round(snapshot.total_write_units / n, 4)
                out[f"{part}_read_units_per_decision"] = round(snapshot.total_read_units / n, 4)
                out[f"{part}_requests_per_decision"] = round(snapshot.total_requests / n, 4)
        out.update(
            {
                # What the figures left out before the sweeper and the releaser were
                # counted: the producers and the processor alone.
                "decision_path": {
                    "note": "the producers and the stream processor only: without the "
                    "sweeper's run nor the releaser's (not all in)",
                    "roles": list(DECISION_PATH),
                    **{k: v for k, v in path.items() if k not in ("note", "parts")},
                },
                "processor_write_units_per_decision": round(processor.total_write_units / n, 4),
                "processor_read_units_per_decision": round(processor.total_read_units / n, 4),
                "processor_requests_per_decision": round(processor.total_requests / n, 4),
                "intake_write_units_per_decision": round(producers.table_write_units / n, 4),
                # The intake item's entry in the sparse ``undecided`` index, if it carried
                # the marker (a first put carries none: 0).
                "intake_index_write_units_per_decision": round(
                    producers.total_index_write_units / n, 4
                ),
                "intake_item_bytes": _sizes(census.intake_sizes),
                "status_reads": {
                    "note": (
                        "the benchmark's own polling for decisions (consistent BatchGetItem "
                        "over everything pending, round after round); not in the cost above"
                    ),
                    "requests_per_decision": round(status.total_requests / n, 4),
                    "read_units_per_decision": round(status.total_read_units / n, 4),
                },
                "stream_requests": {
                    "note": "GetRecords by a Lambda trigger are free; not in the cost above",
                    **stream.requests,
                },
            }
        )
    if run.setup is not None:
        out["setup"] = setup_figures(run.setup, run.events, prices)
    out.update(run.extra)
    out["latencies_s"] = [round(v, 4) for v in latencies]
    return out


def setup_figures(setup: MeterSnapshot, events: int, prices: Prices) -> dict[str, Any]:
    """What creating the events cost, once per event, apart from the cost of deciding."""
    per = max(1, events)
    return {
        "note": "creating the events (slots: one item per seat); not in the cost per decision",
        "events": events,
        "requests_per_event": round(setup.total_requests / per, 2),
        "write_units_per_event": round(setup.total_write_units / per, 2),
        "read_units_per_event": round(setup.total_read_units / per, 2),
        "cost_per_million_events_usd": round(
            prices.per_million_decisions_usd(
                setup.total_write_units / per, setup.total_read_units / per
            ),
            4,
        ),
        "requests_by_operation": dict(sorted(setup.requests.items())),
    }


def machine() -> dict[str, Any]:
    """What ran the benchmark."""
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    import os

    versions = {}
    for package in ("boto3", "botocore", "moto", "aws-lambda-powertools", "aws-xray-sdk"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "packages": versions,
        "endpoint": (
            "EmbeddedAws: moto's server in-process, one request at a time (~400 requests/s "
            "on this kind of machine); absolute speeds are moto's, compare ratios and units"
        ),
    }


# -- the terminal table -----------------------------------------------------------------


def _f(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _invariant_lines(strategies: Mapping[str, Any]) -> list[str]:
    """Below the table: the recount of every way, its set-up cost, why transactions were
    cancelled."""
    lines = []
    recount = ", ".join(
        f"{name} {s['oversold_seats']}/{s.get('lost', '-')}/{s.get('doubled', '-')}"
        for name, s in strategies.items()
    )
    lines.append(f"recounted from each way's tables, oversold/lost/doubled: {recount}")
    setups = [
        f"{name} {_f(s['setup']['requests_per_event'], 0)} req, "
        f"{_f(s['setup']['write_units_per_event'], 0)} WU"
        for name, s in strategies.items()
        if s.get("setup")
    ]
    if setups:
        lines.append("set-up per event, not in the cost above: " + ", ".join(setups))
    failed = [
        f"{name} {_f(s['failed_write_units_per_decision'])}"
        for name, s in strategies.items()
        if s.get("failed_write_units_per_decision")
    ]
    if failed:
        lines.append(
            "of WU/dec, charged to writes that wrote nothing (failed conditions, cancelled"
            " transactions): " + ", ".join(failed)
        )
    reasons = [
        f"{name} "
        + (", ".join(f"{code} {n}" for code, n in s["cancellation_reasons"].items()) or "none")
        for name, s in strategies.items()
        if "cancellation_reasons" in s
    ]
    if reasons:
        picks = ", ".join(
            f"{name} {s['slot_pick']}" for name, s in strategies.items() if "slot_pick" in s
        )
        lines.append(
            "cancelled transactions by reason: "
            + "; ".join(reasons)
            + (f" (slots picked: {picks})" if picks else "")
        )
    return lines


#: What each part of turnstile does, as the headline's rows say it.
PART_LABELS = {
    "producers": "intake put (no undecided marker, no index entry)",
    "processor": "decision items + commits",
    "sweeper": "one run: lease, history, index look",
    "releaser": "due-holds index read; wake-ups",
}


def _all_in_lines(strategies: Mapping[str, Any]) -> list[str]:
    """The headline: per first decision, every way all in, its floor beside it, and
    turnstile part by part."""
    rows = {n: s["all_in"] for n, s in strategies.items() if s.get("all_in")}
    if not rows:
        return []
    lines = [
        "per first decision, all in: every write and read of every part of each way, as"
        " DynamoDB bills them (index entries, failed conditions, cancelled transactions);"
        " floor: the write units its contract needs at the least",
    ]
    header = (
        f"{'way':<16}{'WU all in':>11}{'RU all in':>11}{'req/dec':>9}{'floor WU':>10}"
        f"{'above floor':>13}{'$/M all in':>12}"
    )
    lines += [header, "-" * len(header)]
    for name, a in rows.items():
        floor = a.get("floor_write_units_per_decision")
        above = a.get("above_floor_write_units_per_decision")
        lines.append(
            f"{name:<16}{_f(a['write_units_per_decision']):>11}"
            f"{_f(a['read_units_per_decision']):>11}{_f(a['requests_per_decision']):>9}"
            f"{_f(floor):>10}{_f(above):>13}{_f(a['cost_per_million_usd'], 3):>12}"
        )
        if len(a["parts"]) > 1:
            for part, p in a["parts"].items():
                label = f"  {part}"
                lines.append(
                    f"{label:<16}{_f(p['write_units_per_decision']):>11}"
                    f"{_f(p['read_units_per_decision']):>11}{_f(p['requests_per_decision']):>9}"
                    f"   {PART_LABELS.get(part, '')}"
                )
    floors = [
        f"  {name}: {s['floor']['contract']}" for name, s in strategies.items() if s.get("floor")
    ]
    if floors:
        lines.append("floor of each way, from the run's own item sizes and writes:")
        lines.extend(floors)
    t = strategies.get("turnstile") or {}
    swept = t.get("sweeper")
    if swept:
        idle = swept["idle_run"]
        lines.append(
            f"turnstile's sweeper: one run through the index {swept['min_age_s']:.0f} s after"
            f" the decisions removed {swept['unmarked']} markers"
            f" ({_f(swept['write_units'], 0)} WU, {_f(swept['read_units'], 0)} RU,"
            f" {swept['requests']} requests); a run that finds nothing costs"
            f" {_f(idle['write_units'], 0)} WU, {_f(idle['read_units'], 1)} RU (lease, run"
            " history, the scan for parked events: in the run above once)"
        )
    path = t.get("decision_path")
    if path:
        lines.append(
            f"turnstile without the sweeper and the releaser (producers + processor, the"
            f" figure reported before): {_f(path['write_units_per_decision'])} WU,"
            f" {_f(path['read_units_per_decision'])} RU per decision"
        )
    return lines


def render_table(doc: Mapping[str, Any]) -> str:
    """The summary a person reads at the end of ``turnstile bench``."""
    lines: list[str] = []
    w = doc["workload"]
    seats = " ".join(f"{k}:{v:.2f}" for k, v in w["seats"].items())
    lines.append(
        f"turnstile bench ({doc['mode']}): {w['signups']} signups, {w['events']} events x "
        f"{w['capacity']} seats, {w['producers']} producers, hot event share "
        f"{w['hot_share']:.2f}, seats {seats}, intake items {w['intake_bytes'][0]}-"
        f"{w['intake_bytes'][1]} B"
    )
    lines.append(
        "endpoint: embedded moto, one request at a time: absolute speeds are moto's; "
        "compare ratios and units"
    )
    lines.append(f"prices: {doc['prices_text']}")
    strategies = doc.get("strategies") or {}
    if strategies:
        lines.append("")
        lines.extend(_all_in_lines(strategies))
        lines.append("")
        header = (
            f"{'way':<14}{'dec/s':>8}{'p50 s':>8}{'p95 s':>8}{'p99 s':>8}{'oversold':>9}"
            f"{'conflicts':>10}{'retries':>8}{'req/dec':>8}{'RU/dec':>8}{'WU/dec':>8}"
            f"{'$/M signups':>12}"
        )
        lines.append(header)
        lines.append("-" * len(header))
        for name, s in strategies.items():
            lines.append(
                f"{name:<14}{_f(s['decisions_per_s'], 1):>8}{_f(s['p50_s'], 3):>8}"
                f"{_f(s['p95_s'], 3):>8}{_f(s['p99_s'], 3):>8}{s['oversold_seats']:>9}"
                f"{s['conflicts']:>10}{s['retries']:>8}{_f(s['requests_per_decision']):>8}"
                f"{_f(s['read_units_per_decision']):>8}{_f(s['write_units_per_decision']):>8}"
                f"{_f(s['cost_per_million_usd'], 3):>12}"
            )
        lines.extend(_invariant_lines(strategies))
        t = strategies.get("turnstile")
        if t:
            processor_w = _f(t["processor_write_units_per_decision"], 3)
            intake_w = _f(t["intake_write_units_per_decision"], 3)
            index_w = _f(t["intake_index_write_units_per_decision"], 3)
            processor_r = _f(t["processor_read_units_per_decision"], 3)
            audit_ok = "OK" if t.get("audit", {}).get("ok") else "BROKEN"
            sweeper_w = _f(t.get("sweeper_write_units_per_decision"), 3)
            lines.append(
                f"turnstile write units/decision: processor {processor_w} (decisions +"
                f" counters) + intake {intake_w} + its undecided index entry {index_w}"
                f" + sweeper {sweeper_w};"
                f" processor reads {processor_r} RU/decision;"
                f" mean batch {t.get('mean_batch_records')} records; audit {audit_ok}"
            )
            d, i = t["decision_item_bytes"], t["intake_item_bytes"]
            lines.append(
                f"item sizes: intake mean {_f(i['mean'], 0)} B, max {i['max']} B; decision mean"
                f" {_f(d['mean'], 0)} B, max {d['max']} B ({d['over_1kb']} over 1 KB)"
            )
            sr = t["status_reads"]
            lines.append(
                f"not in the cost: the bench's status polling ({_f(sr['requests_per_decision'])}"
                f" req, {_f(sr['read_units_per_decision'])} RU per decision), stream reads (free)"
            )
    scale = doc.get("scale")
    if scale:
        lines.append("")
        lines.append(f"scale, one event ({scale['method']}):")
        lines.append(
            f"{'signups':>9}{'proc WU/dec':>13}{'proc RU/dec':>13}{'req/dec':>9}"
            f"{'$/M signups':>13}{'vs first':>10}{'oversold':>10}"
        )
        for p in scale["points"]:
            lines.append(
                f"{p['signups']:>9}{_f(p['processor_write_units_per_decision'], 3):>13}"
                f"{_f(p['processor_read_units_per_decision'], 3):>13}"
                f"{_f(p['processor_requests_per_decision'], 3):>9}"
                f"{_f(p['cost_per_million_usd'], 3):>13}{_f(p['cost_deviation_pct'], 2):>9}%"
                f"{p['oversold_seats']:>10}"
            )
    spread = (doc.get("events_per_batch") or {}).get("points") or []
    if spread:
        rows = ", ".join(
            f"{p['events']} -> {_f(p['processor_write_units_per_decision'], 3)} WU"
            f" / {_f(p['processor_read_units_per_decision'], 3)} RU"
            for p in spread
        )
        lines.append(
            f"{spread[0]['signups']} signups spread over N events (a commit per event per"
            f" batch), processor per decision: {rows}"
        )
    boundary = doc.get("item_size_boundary")
    if boundary:
        lines.append(
            f"intake items of {boundary['intake_bytes'][0]}-{boundary['intake_bytes'][1]} B"
            f" (just under 1 KB): decision items up to {boundary['decision_item_bytes_max']} B,"
            f" processor {_f(boundary['processor_write_units_per_decision'], 3)} WU/decision;"
            f" decisions stay within 1 KB for intake items up to"
            f" {boundary['largest_intake_bytes_for_one_unit']} B"
        )
    cold = doc.get("cold_start")
    if cold:
        m = cold["medians_ms"]
        lines.append("")
        lines.append(
            f"cold start: import turnstile.handlers.stream {_f(cold['handler_import_ms'], 0)} ms"
            f" (median of {cold['runs']}, Lambda-like environment; target"
            f" {cold['target_ms']:.0f} ms); outside Lambda {_f(m['handler_outside_lambda'], 0)}"
            f" ms; with the X-Ray SDK on {_f(m['handler_xray_sdk_on'], 0)} ms"
        )
        lines.append(
            f"  a Powertools Tracer built at import costs {_f(cold['tracer_cost_ms'], 0)} ms"
            f" ({_f(cold['tracer_botocore_only_cost_ms'], 0)} ms patching botocore only);"
            f" boto3 alone {_f(m['boto3_only'], 0)} ms; the first boto3 client"
            f" {cold['first_boto3_client_ms']} ms more on the first invocation"
        )
    cpu = doc.get("cpu")
    if cpu:
        lines.append(
            f"CPU per decision (no I/O): engine {cpu['engine_us_per_decision']} us, whole handler"
            f" {cpu['handler_us_per_decision']} us ({cpu['handler_ms_per_batch']} ms per batch"
            " of 100)"
        )
    checks = doc.get("checks") or {}
    if checks:
        lines.append("")
        lines.append(
            "checks: "
            + "; ".join(f"{name} {'PASS' if ok else 'FAIL'}" for name, ok in checks.items())
        )
    return "\n".join(lines)

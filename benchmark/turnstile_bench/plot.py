"""The benchmark's figure: what matters first, and only panels the run has data for.

One figure for one run or for several (the quick and the hot preset side by side), in this
order:

1. full width: oversold seats per way, recounted from each way's tables (naive > 0, the
   correct ways 0);
2. the cost per decision of every correct way side by side: $ per million decisions, its
   write units (those of failed writes apart) and read units per decision, as the metering
   counts them (every function of the way, every index entry, every failed write);
3. latency (submit -> decision readable, moto's seconds), with a note on the figure saying
   why turnstile's is higher: it batches, and the batching window is the run's own
   (``stream_source`` in turnstile's figures);
4. then conflicts per decision, and the stream processor's units as one event grows and as
   the signups spread over more events, each only if the run has them (``--no-scale``
   draws no scale panels, rather than empty ones).

Every axis is linear and every bar carries its value. matplotlib is imported here only, so
``turnstile bench`` without ``--plot`` (and the Lambda code) never needs it.
``python -m turnstile_bench.plot QUICK.json HOT.json --out bench.png`` draws saved runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["COLORS", "correct_ways", "figure", "latency_note", "main", "plot"]

COLORS = {
    "naive": "#d62728",
    "optimistic": "#ff7f0e",
    "transactional": "#9467bd",
    "slots": "#2ca02c",
    "slots:order": "#98df8a",
    "turnstile": "#1f77b4",
}
#: Hatches tell the presets apart where their bars stand side by side.
HATCHES = ("", "//", "..", "xx")
MUTED = "#888888"


def _ways(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every way any run has: the known ones in ``COLORS``' order (a variant beside its
    way), then any other in the order met."""
    names: list[str] = []
    for doc in docs:
        for name in doc.get("strategies") or {}:
            if name not in names:
                names.append(name)
    order = list(COLORS)
    return sorted(names, key=lambda n: order.index(n) if n in order else len(order))


def _preset_label(doc: Mapping[str, Any]) -> str:
    w = doc["workload"]
    events = "1 event" if w["events"] == 1 else f"{w['events']} events"
    return (
        f"{doc.get('mode')}: {w['signups']} signups, {events} x {w['capacity']} seats, "
        f"{w['producers']} producers"
    )


def _grouped(
    ax: Any,
    docs: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    value: Any,
    fmt: str,
) -> None:
    """One bar per way and run, runs side by side, the value written on each bar (an
    absent way: no bar). ``value(figures)`` is what a bar shows."""
    width = 0.8 / max(1, len(docs))
    for i, doc in enumerate(docs):
        ways = doc.get("strategies") or {}
        for x, name in enumerate(names):
            if name not in ways:
                continue
            v = value(ways[name])
            pos = x - 0.4 + width * (i + 0.5)
            ax.bar(
                pos,
                v,
                width=width * 0.92,
                color=COLORS.get(name, MUTED),
                hatch=HATCHES[i % len(HATCHES)],
                edgecolor="white" if i else COLORS.get(name, MUTED),
            )
            ax.annotate(
                format(v, fmt) if v else "0",
                (pos, v),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=9,
                fontweight="bold" if v else "normal",
            )
    ax.set_xticks(range(len(names)), names)
    ax.margins(y=0.2)
    ax.set_ylim(bottom=0)


def _preset_legend(ax: Any, docs: Sequence[Mapping[str, Any]], loc: str = "upper right") -> None:
    from matplotlib.patches import Patch

    if len(docs) < 2:
        return
    handles = [
        Patch(facecolor="#bbbbbb", edgecolor="white", hatch=HATCHES[i % len(HATCHES)])
        for i in range(len(docs))
    ]
    ax.legend(handles, [_preset_label(d) for d in docs], loc=loc, fontsize=8)


def _oversold(ax: Any, docs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    _grouped(ax, docs, names, lambda s: s["oversold_seats"], "d")
    top = max(
        (s["oversold_seats"] for d in docs for s in (d.get("strategies") or {}).values()),
        default=0,
    )
    ax.set_ylim(0, max(4, top * 1.3))
    ax.set_ylabel("seats accepted beyond capacity")
    clean = all(
        s.get("lost", 0) == 0 and s.get("doubled", 0) == 0
        for d in docs
        for s in (d.get("strategies") or {}).values()
    )
    ax.set_title(
        "Oversold seats per way, recounted from each way's tables after its run"
        + ("  (lost and doubled: 0 for every way)" if clean else ""),
        fontsize=12,
        fontweight="bold",
    )
    ax.grid(True, axis="y", alpha=0.3)
    _preset_legend(ax, docs)


def correct_ways(doc: Mapping[str, Any]) -> list[str]:
    """The ways this run found correct: a passing ``<way>_never_oversold_lost_or_doubled``
    check (naive has none: it is not meant to be); in a run without that check, a way
    other than naive whose recount found nothing oversold, lost, doubled or pending."""
    checks = doc.get("checks") or {}
    out = []
    for name, s in (doc.get("strategies") or {}).items():
        check = checks.get(f"{name}_never_oversold_lost_or_doubled")
        if check is None:
            check = name != "naive" and not any(
                s.get(k, 0) for k in ("oversold_seats", "lost", "doubled", "pending")
            )
        if check:
            out.append(name)
    return out


def _conflicts(ax: Any, docs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    _grouped(ax, docs, names, lambda s: s["conflicts"] / max(1, s["decided"]), ".2f")
    ax.tick_params(axis="x", labelsize=9, labelrotation=25)
    ax.set_ylabel("conflicts per decision")
    ax.set_title(
        "Conflicts per decision: failed conditions and\ncancelled transactions, each retried",
        fontsize=10,
    )
    ax.grid(True, axis="y", alpha=0.3)


def _cost(ax: Any, docs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """$ per million decisions of the correct ways: successful writes, failed writes
    (hatched) and reads (light) stacked, units per decision written on the bar."""
    prices = docs[0]["prices"]
    width = 0.8 / max(1, len(docs))
    top = 0.0
    for i, doc in enumerate(docs):
        ways = doc.get("strategies") or {}
        correct = set(correct_ways(doc))
        for x, name in enumerate(names):
            if name not in correct:
                continue
            s = ways[name]
            wu, ru = s["write_units_per_decision"], s["read_units_per_decision"]
            failed_wu = s.get("failed_write_units_per_decision", 0.0)
            failed = failed_wu * prices["write_per_million_usd"]
            writes = wu * prices["write_per_million_usd"] - failed
            reads = ru * prices["read_per_million_usd"]
            pos = x - 0.4 + width * (i + 0.5)
            color = COLORS.get(name, MUTED)
            hatch = HATCHES[i % len(HATCHES)]
            bar = {"width": width * 0.92, "color": color, "edgecolor": "white"}
            ax.bar(pos, writes, hatch=hatch, **bar)
            if failed:
                ax.bar(pos, failed, bottom=writes, alpha=0.75, hatch="xxx", **bar)
            ax.bar(pos, reads, bottom=writes + failed, alpha=0.4, hatch=hatch, **bar)
            total = writes + failed + reads
            top = max(top, total)
            ax.annotate(
                f"\\${total:.2f}\n{wu:.2f} WU\n{ru:.2f} RU",
                (pos, total),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=8 if len(docs) == 1 else 7,
                fontweight="bold" if len(docs) == 1 else "normal",
            )
    ax.set_xticks(range(len(names)), names)
    ax.tick_params(axis="x", labelsize=9)
    ax.set_ylim(0, top * 1.45 if top else 1)
    ax.set_ylabel("\\$ per million decisions")
    ax.set_title(
        "Cost per decision of the ways that never oversold: \\$ per million decisions, and\n"
        "write units (WU; cross-hatched: writes that failed) + read units (RU, light) per "
        "decision,\ncounting every function of the way, every index entry, every failed "
        f"write (\\${prices['write_per_million_usd']:g}/M WU, "
        f"\\${prices['read_per_million_usd']:g}/M RU)",
        fontsize=10,
    )
    ax.grid(True, axis="y", alpha=0.3)


def latency_note(docs: Sequence[Mapping[str, Any]]) -> str | None:
    """Why turnstile's latency is higher, from the runs' own figures (its batching window,
    batch size, batches); None if no run has turnstile."""
    runs = [d for d in docs if "turnstile" in (d.get("strategies") or {})]
    if not runs:
        return None
    sources = {
        tuple(sorted((d["strategies"]["turnstile"].get("stream_source") or {}).items()))
        for d in runs
    }
    lines = ["Why turnstile's is higher: it batches."]
    lines.append("A producer only writes its intake record; the stream")
    if len(sources) == 1 and (source := dict(next(iter(sources)))):
        lines.append(
            f"hands the processor up to {source['batch_size']} records at a time, gathered"
        )
        lines.append(
            f"for up to its batching window of {source['max_batching_window_s']:g} s "
            f"(polled every {source['poll_interval_s']:g} s);"
        )
    else:
        windows = {
            str(d.get("mode")): (d["strategies"]["turnstile"].get("stream_source") or {}).get(
                "max_batching_window_s"
            )
            for d in runs
        }
        if set(windows.values()) == {None}:
            said = "not recorded in this JSON"
        else:
            said = ", ".join(
                f"{mode} " + ("not recorded" if w is None else f"{w:g} s")
                for mode, w in windows.items()
            )
        lines.append("hands the processor batches gathered for up to its")
        lines.append(f"batching window ({said});")
    lines.append("the answer is readable once that batch is decided and committed.")
    for d in runs:
        t = d["strategies"]["turnstile"]
        if t.get("batches") is not None:
            prefix = f"{d.get('mode')}: " if len(runs) > 1 else "Here: "
            lines.append(
                f"{prefix}{t['batches']} batches of {t.get('mean_batch_records', 0):g} records, "
                f"the handler {t.get('handler_s_per_batch', 0):.2f} s each"
            )
    return "\n".join(lines)


def _latency(ax: Any, docs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """p50 (bars) and p99 (ticks) in moto's seconds, and why turnstile's is higher."""
    width = 0.8 / max(1, len(docs))
    top = 0.0
    turnstile_at: tuple[float, float] | None = None
    for i, doc in enumerate(docs):
        ways = doc.get("strategies") or {}
        for x, name in enumerate(names):
            if name not in ways:
                continue
            p50, p99 = ways[name]["p50_s"], ways[name]["p99_s"]
            pos = x - 0.4 + width * (i + 0.5)
            color = COLORS.get(name, MUTED)
            ax.bar(
                pos,
                p50,
                width=width * 0.92,
                color=color,
                alpha=0.85,
                hatch=HATCHES[i % len(HATCHES)],
                edgecolor="white" if i else color,
            )
            ax.plot([pos], [p99], marker="_", markersize=14, mew=2, color="#333333")
            ax.annotate(
                f"{p50:.1f}\n{p99:.1f}" if len(docs) == 1 else f"{p50:.1f}",
                (pos, max(p50, p99)),
                xytext=(0, 4),
                textcoords="offset points",
                ha="center",
                fontsize=7.5,
            )
            top = max(top, p50, p99)
            if name == "turnstile" and turnstile_at is None:
                turnstile_at = (pos, p50)
    ax.set_xticks(range(len(names)), names, fontsize=8, rotation=25)
    ax.set_ylabel("seconds on moto (bar: p50, tick: p99)")
    ax.set_title(
        "Latency, submit -> decision readable (moto's seconds,\none request at a time: "
        "compare ratios, not seconds)",
        fontsize=10,
    )
    ax.set_ylim(0, (top or 1) * 2.1)
    ax.grid(True, axis="y", alpha=0.3)
    note = latency_note(docs)
    if note and turnstile_at is not None:
        ax.annotate(
            note,
            turnstile_at,
            xytext=(0.02, 0.97),
            textcoords="axes fraction",
            ha="left",
            va="top",
            fontsize=8,
            bbox={"boxstyle": "round,pad=0.4", "facecolor": "#eef4fb", "edgecolor": "#1f77b4"},
            arrowprops={"arrowstyle": "->", "color": COLORS["turnstile"], "lw": 1.2},
        )


def _label_points(ax: Any, xs: Sequence[float], ys: Sequence[float], fmt: str, dy: int) -> None:
    for x, y in zip(xs, ys, strict=True):
        ax.annotate(
            format(y, fmt),
            (x, y),
            xytext=(0, dy),
            textcoords="offset points",
            ha="center",
            fontsize=8,
        )


def _scale_points(doc: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list(((doc or {}).get("scale") or {}).get("points") or [])


def _spread_points(doc: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list(((doc or {}).get("events_per_batch") or {}).get("points") or [])


def _scale(ax: Any, points: Sequence[Mapping[str, Any]]) -> None:
    sizes = [p["signups"] for p in points]
    writes = [p["processor_write_units_per_decision"] for p in points]
    reads = [p["processor_read_units_per_decision"] for p in points]
    ax.set_title("Processor units per decision as one event grows", fontsize=10)
    ax.plot(sizes, writes, marker="o", color=COLORS["turnstile"], label="write units")
    ax.plot(sizes, reads, marker="s", color=COLORS["turnstile"], alpha=0.45, label="read units")
    _label_points(ax, sizes, writes, ".3f", 6)
    _label_points(ax, sizes, reads, ".3f", -13)
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.set_xlabel("signups in the event (one batch of 100 at a time)")
    ax.set_ylabel("units per decision (processor)")
    ax.set_ylim(0, max(writes + reads) * 1.4)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)


def _events_per_batch(ax: Any, points: Sequence[Mapping[str, Any]]) -> None:
    """Processor write units per decision as the same signups spread over more events."""
    events = [p["events"] for p in points]
    writes = [p["processor_write_units_per_decision"] for p in points]
    ax.set_title("... and as the signups spread over more events", fontsize=10)
    ax.plot(events, writes, marker="o", color=COLORS["turnstile"], label="write units")
    _label_points(ax, events, writes, ".2f", 6)
    ax.set_xticks(events, [str(e) for e in events])
    ax.set_xlabel(
        f"events {points[0]['signups']} signups are spread over\n(each batch of 100 commits "
        "once per event it holds)",
        fontsize=9,
    )
    ax.set_ylabel("write units per decision (processor)")
    ax.set_ylim(0, max(writes) * 1.3)
    ax.grid(True, alpha=0.3)


def _headline(doc: Mapping[str, Any]) -> str:
    """One line of what the run shows: who oversold, and what the correct ways cost."""
    ways = doc.get("strategies") or {}
    oversold = [
        f"{n} oversold {s['oversold_seats']}" for n, s in ways.items() if s["oversold_seats"]
    ]
    correct = correct_ways(doc)
    asked = doc.get("seats_asked")
    w = doc["workload"]
    parts = [
        (", ".join(oversold) or "no way oversold")
        + (f" of {w['events'] * w['capacity']} seats" if oversold else "")
        + (f" ({asked} asked)" if asked else "")
    ]
    if correct:
        costs = sorted((ways[n]["cost_per_million_usd"], n) for n in correct)
        parts.append(
            f"{len(correct)} correct ways oversold 0, from \\${costs[0][0]:.2f} ({costs[0][1]}) "
            f"to \\${costs[-1][0]:.2f} ({costs[-1][1]}) per million decisions"
        )
    return f"{doc.get('mode')}: " + "; ".join(parts)


def figure(docs: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Any:
    """The figure of one run, or of several side by side (a matplotlib ``Figure``; its
    axes in the order drawn: oversold, cost, latency, conflicts, scale, spread, each only
    where some run has its data)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file is all we want
    import matplotlib.pyplot as plt

    runs: list[Mapping[str, Any]] = [docs] if isinstance(docs, Mapping) else list(docs)
    with_ways = [d for d in runs if d.get("strategies")]
    names = _ways(with_ways)
    correct = [n for n in names if any(n in correct_ways(d) for d in with_ways)]
    scaled = next((d for d in runs if _scale_points(d)), None)
    spread = next((d for d in runs if _spread_points(d)), None)

    # The last row: conflicts (if there are ways) and the scale panels the runs have.
    last = [
        *(["conflicts"] if with_ways else []),
        *(["scale"] if scaled else []),
        *(["spread"] if spread else []),
    ]
    rows: list[list[str]] = []
    if with_ways:
        rows.append(["oversold"])
        rows.append(["cost", "latency"] if correct else ["latency"])
    if last:
        rows.append(last)
    heights = {"oversold": 0.8, "cost": 1.25, "latency": 1.25, "conflicts": 0.8}
    ratios = [max(heights.get(p, 1.0) for p in row) for row in rows] or [1.0]
    lines = ["turnstile bench: " + "; ".join(_preset_label(d) for d in runs)]
    lines.extend(_headline(d) for d in with_ways)
    lines.append("local moto endpoint: seats, conflicts and units are exact; seconds are moto's")
    height = 4.2 * sum(ratios) + 1.0
    fig = plt.figure(figsize=(15, height))
    fig.suptitle("\n".join(lines), fontsize=11, y=1 - 0.1 / height, va="top")
    if not rows:  # nothing to draw: say so rather than leave an empty axis
        fig.text(0.5, 0.5, "this run has no figures to draw", ha="center", color=MUTED)
        return fig
    grid = fig.add_gridspec(
        len(rows),
        12,
        height_ratios=ratios,
        hspace=0.5,
        wspace=2.2,
        top=1 - (0.2 * len(lines) + 0.55) / height,
        bottom=0.6 / height,
    )
    for r, row in enumerate(rows):
        spans = [7, 5] if row == ["cost", "latency"] else [12 // len(row)] * len(row)
        col = 0
        for panel, span in zip(row, spans, strict=True):
            ax = fig.add_subplot(grid[r, col : col + span])
            col += span
            if panel == "oversold":
                _oversold(ax, with_ways, names)
            elif panel == "cost":
                _cost(ax, with_ways, correct)
            elif panel == "latency":
                _latency(ax, with_ways, names)
            elif panel == "conflicts":
                _conflicts(ax, with_ways, names)
            elif panel == "scale":
                _scale(ax, _scale_points(scaled))
            else:
                _events_per_batch(ax, _spread_points(spread))
    return fig


def plot(docs: Mapping[str, Any] | Sequence[Mapping[str, Any]], path: Path) -> None:
    """Write the figure of one run, or of several side by side, to ``path`` (PNG)."""
    import matplotlib.pyplot as plt

    fig = figure(docs)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m turnstile_bench.plot",
        description="Draw saved `turnstile bench --json` runs in one figure.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN.json")
    parser.add_argument("--out", required=True, metavar="FILE.png")
    args = parser.parse_args(argv)
    docs = []
    for name in args.runs:
        try:
            docs.append(json.loads(Path(name).read_text()))
        except (OSError, ValueError) as exc:
            print(f"turnstile_bench.plot: cannot read {name}: {exc}", file=sys.stderr)
            return 2
    plot(docs, Path(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

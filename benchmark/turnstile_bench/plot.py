"""The benchmark's figure: oversold seats first, then conflicts, cost, and scale.

One figure for one run or for several (the quick and the hot preset side by side):

* the headline, full width: oversold seats per way, recounted from each way's tables;
* conflicts per decision, and cost per million signups split into writes and reads;
* the stream processor's units per decision as one event grows, and as the signups spread
  over more events (from the run that has them);
* small and grey, last: latency in moto's seconds, which measure the local endpoint (one
  request at a time) more than the ways.

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

__all__ = ["COLORS", "main", "plot"]

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
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order)))


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
    """$ per million signups, writes below and reads on top, units written on the bar."""
    prices = docs[0]["prices"]
    width = 0.8 / max(1, len(docs))
    top = 0.0
    for i, doc in enumerate(docs):
        ways = doc.get("strategies") or {}
        for x, name in enumerate(names):
            if name not in ways:
                continue
            s = ways[name]
            writes = s["write_units_per_decision"] * prices["write_per_million_usd"]
            reads = s["read_units_per_decision"] * prices["read_per_million_usd"]
            pos = x - 0.4 + width * (i + 0.5)
            color = COLORS.get(name, MUTED)
            hatch = HATCHES[i % len(HATCHES)]
            ax.bar(pos, writes, width=width * 0.92, color=color, hatch=hatch, edgecolor="white")
            ax.bar(
                pos,
                reads,
                bottom=writes,
                width=width * 0.92,
                color=color,
                alpha=0.45,
                hatch=hatch,
                edgecolor="white",
            )
            top = max(top, writes + reads)
            ax.annotate(
                f"${writes + reads:.2f}\nW {s['write_units_per_decision']:.2f}"
                f"\nR {s['read_units_per_decision']:.2f}",
                (pos, writes + reads),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, top * 1.45 if top else 1)
    ax.set_ylabel("$ per million signups")
    ax.set_title(
        "$ per million signups: write units (solid, W per decision) and read units (light, R)",
        fontsize=10,
    )
    ax.grid(True, axis="y", alpha=0.3)


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


def _scale(ax: Any, doc: Mapping[str, Any] | None) -> None:
    points = ((doc or {}).get("scale") or {}).get("points") or []
    ax.set_title("Processor units per decision as one event grows", fontsize=10)
    if not points:
        ax.text(0.5, 0.5, "no scale run", ha="center", transform=ax.transAxes, color=MUTED)
        return
    sizes = [p["signups"] for p in points]
    writes = [p["processor_write_units_per_decision"] for p in points]
    reads = [p["processor_read_units_per_decision"] for p in points]
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


def _events_per_batch(ax: Any, doc: Mapping[str, Any] | None) -> None:
    """Processor write units per decision as the same signups spread over more events."""
    spread = (doc or {}).get("events_per_batch") or {}
    points = spread.get("points") or []
    ax.set_title("... and as the signups spread over more events", fontsize=10)
    if not points:
        ax.text(0.5, 0.5, "no spread run", ha="center", transform=ax.transAxes, color=MUTED)
        return
    events = [p["events"] for p in points]
    writes = [p["processor_write_units_per_decision"] for p in points]
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


def _latency(ax: Any, docs: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """Secondary: p50 and p99 in moto's seconds, grey, small."""
    doc = docs[0]
    ways = doc.get("strategies") or {}
    shown = [n for n in names if n in ways]
    xs = range(len(shown))
    p50 = [ways[n]["p50_s"] for n in shown]
    p99 = [ways[n]["p99_s"] for n in shown]
    ax.bar([x - 0.2 for x in xs], p50, width=0.4, color="#bbbbbb", label="p50")
    ax.bar([x + 0.2 for x in xs], p99, width=0.4, color="#dddddd", label="p99")
    for x, a, b in zip(xs, p50, p99, strict=True):
        for dx, v in ((-0.2, a), (0.2, b)):
            ax.annotate(
                f"{v:.1f}",
                (x + dx, v),
                xytext=(0, 1),
                textcoords="offset points",
                ha="center",
                fontsize=6.5,
                color="#555555",
            )
    ax.set_xticks(list(xs), shown, fontsize=7, rotation=30)
    ax.tick_params(axis="y", labelsize=7, colors="#555555")
    ax.set_ylabel("seconds on moto", fontsize=8, color="#555555")
    ax.set_title(
        f"secondary: submit -> status readable ({doc.get('mode')}),\nmoto's seconds, one "
        "request at a time; turnstile waits for its batch",
        fontsize=8,
        color="#555555",
    )
    ax.legend(fontsize=7, loc="upper left")
    ax.margins(y=0.2)
    for spine in ax.spines.values():
        spine.set_color("#bbbbbb")


def plot(docs: Mapping[str, Any] | Sequence[Mapping[str, Any]], path: Path) -> None:
    """Write the figure of one run, or of several side by side, to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file is all we want
    import matplotlib.pyplot as plt

    runs: list[Mapping[str, Any]] = [docs] if isinstance(docs, Mapping) else list(docs)
    with_ways = [d for d in runs if d.get("strategies")]
    names = _ways(with_ways)
    scaled = next((d for d in runs if d.get("scale") or d.get("events_per_batch")), None)

    fig = plt.figure(figsize=(15, 13))
    grid = fig.add_gridspec(3, 12, height_ratios=[1.0, 1.1, 1.0], hspace=0.45, wspace=2.2)
    if with_ways:
        _oversold(fig.add_subplot(grid[0, :]), with_ways, names)
        _conflicts(fig.add_subplot(grid[1, :5]), with_ways, names)
        _cost(fig.add_subplot(grid[1, 5:]), with_ways, names)
    _scale(fig.add_subplot(grid[2, :4]), scaled)
    _events_per_batch(fig.add_subplot(grid[2, 4:8]), scaled)
    if with_ways:
        _latency(fig.add_subplot(grid[2, 8:]), with_ways, names)

    title = "turnstile bench: " + "; ".join(_preset_label(d) for d in runs)
    fig.suptitle(
        title + "\nlocal moto endpoint: seats, conflicts and units are exact; seconds are moto's",
        fontsize=11,
        y=0.95,
    )
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

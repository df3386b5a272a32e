"""The benchmark's figure: latency and throughput side by side, units, and scale.

matplotlib is imported here only, so ``turnstile bench`` without ``--plot`` (and the
Lambda code) never needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["COLORS", "plot"]

COLORS = {"naive": "#d62728", "optimistic": "#ff7f0e", "turnstile": "#1f77b4"}


def plot(doc: Mapping[str, Any], path: Path) -> None:
    """Write a 2x2 PNG: latency CDFs, decisions/s, units and cost per decision, scale."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file is all we want
    import matplotlib.pyplot as plt

    strategies: Mapping[str, Any] = doc.get("strategies") or {}
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    latency, throughput, units, scale = axes.flat

    for name, s in strategies.items():
        values = sorted(s["latencies_s"])
        if not values:
            continue
        share = [(i + 1) / len(values) for i in range(len(values))]
        latency.step(values, share, where="post", color=COLORS.get(name), label=name)
        latency.axvline(s["p99_s"], color=COLORS.get(name), linestyle=":", linewidth=1)
    latency.set_xscale("log")
    latency.set_xlabel("submit -> final status readable (s, log)")
    latency.set_ylabel("share of signups")
    latency.set_title("End-to-end latency (dotted: p99)")
    latency.grid(True, which="both", alpha=0.3)
    if strategies:
        latency.legend(loc="lower right")

    names = list(strategies)
    rates = [strategies[n]["decisions_per_s"] or 0 for n in names]
    bars = throughput.bar(names, rates, color=[COLORS.get(n) for n in names])
    for bar, name in zip(bars, names, strict=True):
        s = strategies[name]
        throughput.annotate(
            f"{s['decisions_per_s']:.0f}/s\noversold {s['oversold_seats']}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    throughput.set_ylabel("decisions per second (moto's speed)")
    throughput.set_title("Throughput, same workload")
    throughput.margins(y=0.25)

    writes = [strategies[n]["write_units_per_decision"] for n in names]
    reads = [strategies[n]["read_units_per_decision"] for n in names]
    positions = range(len(names))
    units.bar([p - 0.2 for p in positions], writes, width=0.4, label="write units", color="#555")
    units.bar([p + 0.2 for p in positions], reads, width=0.4, label="read units", color="#aaa")
    if "turnstile" in strategies:
        # The producer's intake write and its undecided index entry, inside turnstile's
        # write bar.
        p = names.index("turnstile")
        t = strategies["turnstile"]
        intake = t["intake_write_units_per_decision"] + t.get(
            "intake_index_write_units_per_decision", 0.0
        )
        units.bar(
            p - 0.2,
            intake,
            width=0.4,
            color="none",
            edgecolor="white",
            hatch="//",
            label="of which intake write + index entry",
        )
    for p, name in zip(positions, names, strict=True):
        s = strategies[name]
        top = max(s["write_units_per_decision"], s["read_units_per_decision"])
        units.annotate(
            f"${s['cost_per_million_usd']:.2f}/M\n{s['requests_per_decision']:.2f} req",
            (p, top),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    units.set_xticks(list(positions), names)
    units.set_yscale("symlog", linthresh=1)
    units.set_ylabel("request units per decision (symlog)")
    units.set_title("Capacity units and on-demand cost per decision")
    handles, labels = units.get_legend_handles_labels()
    if "turnstile" in strategies:
        # The hatched overlay is see-through: show it on the write units' colour.
        from matplotlib.patches import Patch

        handles[-1] = Patch(facecolor="#555", edgecolor="white", hatch="//")
    units.legend(handles, labels, loc="upper right")
    units.margins(y=0.3)

    points = (doc.get("scale") or {}).get("points") or []
    if points:
        sizes = [p["signups"] for p in points]
        scale.plot(
            sizes,
            [p["cost_per_million_usd"] for p in points],
            marker="o",
            color=COLORS["turnstile"],
            label="turnstile $/M signups (intake + index entry + processor)",
        )
        scale.plot(
            sizes,
            [p["processor_write_units_per_decision"] for p in points],
            marker="s",
            color="#555",
            label="processor write units / decision",
        )
        scale.plot(
            sizes,
            [p["processor_read_units_per_decision"] for p in points],
            marker="^",
            color="#aaa",
            label="processor read units / decision",
        )
        scale.set_xscale("log")
        scale.set_ylim(bottom=0)
        spread = (doc.get("events_per_batch") or {}).get("points") or []
        if spread:
            rows = [(p["events"], p["processor_write_units_per_decision"]) for p in spread]
            text = "\n".join(f"{e:>3} events: {wu:.2f} WU/decision" for e, wu in rows)
            scale.text(
                0.02,
                0.04,
                "processor, signups spread over\n(one commit per event per batch):\n" + text,
                transform=scale.transAxes,
                fontsize=8,
                family="monospace",
                va="bottom",
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "#ccc"},
            )
        scale.legend(loc="lower right", fontsize=8)
    scale.set_xlabel("signups in one event (log)")
    scale.set_title("Cost per decision as one event grows (processor driven directly)")
    scale.grid(True, which="both", alpha=0.3)

    fig.suptitle(
        f"turnstile bench ({doc.get('mode')}): {doc['workload']['signups']} signups; local moto "
        "endpoint, compare ratios and units, not seconds",
        fontsize=11,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

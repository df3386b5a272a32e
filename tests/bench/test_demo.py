"""``turnstile bench --demo`` and the figure it leads with.

The preset is what its help text, the Makefile and results/README.md say; the figure puts
oversold seats first, then the correct ways' cost per decision, then latency with a note
naming the run's own batching window, and draws no panel without data. No timing is
asserted: one scaled-down demo runs end to end, the figure's tests draw made-up runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from turnstile.base.contract import STREAM_SOURCE
from turnstile_bench import register
from turnstile_bench.runner import DEMO, PRESETS, WAYS, demo_description
from turnstile_bench.ways import STRATEGIES
from turnstile_bench.workload import generate

REPO = Path(__file__).resolve().parents[2]
PRICES = {"write_per_million_usd": 0.625, "read_per_million_usd": 0.125}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="turnstile")
    register(p.add_subparsers(dest="command", required=True))
    return p


def run_cli(*argv: str) -> int:
    args = parser().parse_args(["bench", *argv])
    return int(args.func(args))


def bench_help() -> dict[str, str]:
    """Every ``turnstile bench`` option's help text, by option."""
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[
        "bench"
    ]
    return {o: a.help or "" for a in sub._actions for o in a.option_strings}


def flat(text: str) -> str:
    return " ".join(text.split())


def has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


needs_matplotlib = pytest.mark.skipif(not has_matplotlib(), reason="matplotlib: bench extra")


# -- the preset -----------------------------------------------------------------------------


def test_the_demo_preset_is_one_hot_event_every_way_and_nothing_else():
    w = DEMO.workload
    assert DEMO.mode == "demo" and PRESETS["demo"] is DEMO
    assert (w.events, w.capacity, w.signups, w.producers, w.hot_share) == (1, 40, 240, 16, 1.0)
    # every way the benchmark has, the variant too, in the tables' order
    assert set(DEMO.strategies) == set(STRATEGIES)
    assert DEMO.strategies[: len(WAYS)] == WAYS
    assert not DEMO.run_scale and not DEMO.run_cold_start
    # far more asked than seats: naive has something to oversell
    asked = sum(s.seats for s in generate(w))
    assert asked >= 5 * w.events * w.capacity


def test_the_demo_preset_is_the_one_documented():
    described = demo_description()
    assert described == (
        "one event of 40 seats, 240 signups, 16 producers, every way (naive, optimistic, "
        "transactional, slots, turnstile, slots:order); no scale run, no cold start"
    )
    # --demo's help text says it (the CLI does not import the runner to build it)
    assert described in flat(bench_help()["--demo"])
    # results/README.md quotes it, with the command and the reference files
    readme = flat((REPO / "results" / "README.md").read_text())
    assert described in readme
    for text in ("turnstile bench --demo", "demo.png", "demo.json", "make bench-demo"):
        assert text in readme


def test_make_bench_demo_runs_the_demo_into_the_ignored_folder():
    text = (REPO / "Makefile").read_text()
    recipe = text.split("\nbench-demo:", 1)[1].split("\n\n", 1)[0]
    assert "turnstile bench --demo" in recipe
    assert "$(BENCH_OUT)/demo.json" in recipe and "$(BENCH_OUT)/demo.png" in recipe
    assert "results/demo" not in recipe  # never over the committed reference


def test_the_cli_runs_the_demo_preset(monkeypatch):
    import turnstile_bench.runner as runner

    seen = []

    def run_bench(options: Any, progress: Any) -> dict[str, Any]:
        seen.append(options)
        return {
            "mode": options.mode,
            "workload": options.workload.to_dict(),
            "prices_text": "prices",
            "checks": {},
        }

    monkeypatch.setattr(runner, "run_bench", run_bench)
    assert run_cli("--demo", "--quiet") == 0
    (options,) = seen
    assert options.mode == "demo"
    assert options.workload == DEMO.workload
    assert options.strategies == DEMO.strategies
    assert options.run_strategies and not options.run_scale and not options.run_cold_start
    # the knobs still apply on top of it
    assert run_cli("--demo", "--quiet", "--signups=30") == 0
    assert seen[-1].workload.signups == 30 and seen[-1].workload.capacity == 40


# -- the figure -------------------------------------------------------------------------------


def way(
    oversold: int = 0,
    wu: float = 1.0,
    ru: float = 1.0,
    failed_wu: float = 0.0,
    p50: float = 0.2,
    p99: float = 1.0,
    conflicts: int = 0,
) -> dict[str, Any]:
    return {
        "decided": 100,
        "oversold_seats": oversold,
        "lost": 0,
        "doubled": 0,
        "pending": 0,
        "conflicts": conflicts,
        "p50_s": p50,
        "p99_s": p99,
        "write_units_per_decision": wu,
        "read_units_per_decision": ru,
        "failed_write_units_per_decision": failed_wu,
        "cost_per_million_usd": wu * 0.625 + ru * 0.125,
    }


def run_doc(
    mode: str = "demo", scale: bool = False, window: float = 1, ways: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A made-up run with the figures the plot reads (``scale``: and the scale runs')."""
    strategies = {
        "naive": way(oversold=12, wu=1.0, ru=26.4, p50=0.9, p99=1.6),
        "optimistic": way(wu=1.58, ru=1.51, failed_wu=0.51, conflicts=50),
        "transactional": way(wu=3.45, ru=1.56, failed_wu=2.23, conflicts=56),
        "slots": way(wu=3.01, ru=1.03, failed_wu=1.65, conflicts=26),
        "turnstile": {
            **way(wu=3.09, ru=1.03, p50=2.5, p99=2.9),
            "stream_source": {
                "batch_size": 100,
                "max_batching_window_s": window,
                "poll_interval_s": 0.25,
            },
            "batches": 3,
            "mean_batch_records": 100.0,
            "handler_s_per_batch": 1.16,
        },
        "slots:order": way(wu=8.39, ru=1.05, failed_wu=7.06, conflicts=160),
    }
    if ways:
        strategies = {n: s for n, s in strategies.items() if n in ways}
    doc: dict[str, Any] = {
        "mode": mode,
        "workload": {"events": 1, "capacity": 40, "signups": 100, "producers": 16},
        "prices": PRICES,
        "seats_asked": 150,
        "strategies": strategies,
        "checks": {f"{n}_never_oversold_lost_or_doubled": True for n in strategies if n != "naive"},
    }
    if scale:
        doc["scale"] = {
            "points": [
                {
                    "signups": n,
                    "processor_write_units_per_decision": 1.09,
                    "processor_read_units_per_decision": 1.04,
                }
                for n in (1000, 3000)
            ]
        }
        doc["events_per_batch"] = {
            "points": [
                {"events": k, "signups": 300, "processor_write_units_per_decision": 1 + k / 100}
                for k in (1, 10)
            ]
        }
    return doc


def draw(docs: Any) -> list[Any]:
    import matplotlib.pyplot as plt

    from turnstile_bench.plot import figure

    fig = figure(docs)
    axes = list(fig.axes)
    plt.close(fig)
    return axes


def empty(axes: list[Any]) -> list[str]:
    return [ax.get_title() or repr(ax) for ax in axes if not ax.has_data()]


@needs_matplotlib
@pytest.mark.parametrize(
    ("docs", "panels"),
    [
        (run_doc(), 4),  # --demo, --hot, --no-scale: no scale panels at all
        (run_doc(mode="quick", scale=True), 6),
        ([run_doc(mode="quick", scale=True), run_doc(mode="hot")], 6),  # make bench
        ([run_doc(mode="quick"), run_doc(mode="hot")], 4),
    ],
    ids=["demo", "quick", "quick+hot", "no-scale"],
)
def test_every_panel_has_data_and_the_first_three_tell_the_story(docs, panels):
    axes = draw(docs)
    assert len(axes) == panels
    assert empty(axes) == []
    titles = [ax.get_title().lower() for ax in axes]
    assert "oversold" in titles[0]
    assert "cost per decision" in titles[1]
    assert "latency" in titles[2]
    assert "conflicts" in titles[3]


@needs_matplotlib
def test_a_scale_only_run_draws_only_its_scale_panels():
    doc = run_doc(mode="full", scale=True)
    del doc["strategies"], doc["checks"]
    axes = draw(doc)
    assert len(axes) == 2 and empty(axes) == []


@needs_matplotlib
def test_the_cost_panel_shows_every_correct_way_and_only_those():
    doc = run_doc()
    cost = draw(doc)[1]
    shown = [t.get_text() for t in cost.get_xticklabels()]
    assert shown == ["optimistic", "transactional", "slots", "slots:order", "turnstile"]
    # a way that failed its recount is not a correct way, whatever its name
    doc["checks"]["slots_never_oversold_lost_or_doubled"] = False
    shown = [t.get_text() for t in draw(doc)[1].get_xticklabels()]
    assert "slots" not in shown and "naive" not in shown


@needs_matplotlib
def test_the_cost_bars_add_up_to_every_unit_metered():
    doc = run_doc()
    cost = draw(doc)[1]
    heights: dict[float, float] = {}
    for bar in cost.patches:
        x = round(bar.get_x() + bar.get_width() / 2, 6)
        heights[x] = heights.get(x, 0.0) + bar.get_height()
    names = [t.get_text() for t in cost.get_xticklabels()]
    for x, name in enumerate(names):
        s = doc["strategies"][name]
        # all write units (failed ones included, index entries included) and all reads
        assert heights[round(float(x), 6)] == pytest.approx(s["cost_per_million_usd"])
        label = next(
            t.get_text() for t in cost.texts if f"{s['cost_per_million_usd']:.2f}" in t.get_text()
        )
        assert f"{s['write_units_per_decision']:.2f} WU" in label
        assert f"{s['read_units_per_decision']:.2f} RU" in label
    # the failed writes' share drawn apart (cross-hatched), for the ways that had any
    failed = sorted(round(b.get_height(), 6) for b in cost.patches if b.get_hatch() == "xxx")
    expected = sorted(
        round(s["failed_write_units_per_decision"] * 0.625, 6)
        for n, s in doc["strategies"].items()
        if n in names and s["failed_write_units_per_decision"]
    )
    assert failed == expected and len(failed) == 4


@needs_matplotlib
def test_with_two_runs_a_way_is_costed_only_where_its_run_found_it_correct():
    quick, hot = run_doc(mode="quick"), run_doc(mode="hot")
    hot["checks"]["slots_never_oversold_lost_or_doubled"] = False
    cost = draw([quick, hot])[1]
    x = [t.get_text() for t in cost.get_xticklabels()].index("slots")
    # slots: quick's bar only (its segments left of the tick), none on hot's side
    at = [b.get_x() + b.get_width() / 2 for b in cost.patches]
    assert any(x - 0.4 < a < x for a in at)
    assert not any(x < a < x + 0.4 for a in at)


@needs_matplotlib
def test_only_naive_leaves_no_cost_panel_rather_than_an_empty_one():
    axes = draw(run_doc(ways=("naive",)))
    assert empty(axes) == []
    assert not any("cost" in ax.get_title().lower() for ax in axes)


def latency_texts(docs: Any) -> str:
    latency = next(ax for ax in draw(docs) if "latency" in ax.get_title().lower())
    return "\n".join(t.get_text() for t in latency.texts)


@needs_matplotlib
@pytest.mark.parametrize("window", [1, 7, 0.5])
def test_the_latency_note_names_the_runs_own_batching_window(window):
    text = latency_texts(run_doc(window=window))
    assert "it batches" in text
    assert f"batching window of {window:g} s" in text
    assert "up to 100 records" in text
    assert "3 batches of 100 records" in text
    # no other window is claimed
    for other in {1, 7, 0.5} - {window}:
        assert f"batching window of {other:g} s" not in text


@needs_matplotlib
def test_a_run_without_its_window_says_so_and_one_without_turnstile_has_no_note():
    doc = run_doc()
    del doc["strategies"]["turnstile"]["stream_source"]
    assert "not recorded" in latency_texts(doc)
    assert "batches" not in latency_texts(run_doc(ways=("naive", "optimistic")))


# -- one scaled-down demo, end to end ----------------------------------------------------------


@pytest.fixture(scope="module")
def small_demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("demo")
    plot = ["--plot", str(out / "demo.png")] if has_matplotlib() else []
    code = run_cli(
        "--demo",
        "--quiet",
        "--signups=30",
        "--capacity=5",
        "--producers=6",
        "--json",
        str(out / "demo.json"),
        *plot,
    )
    doc = json.loads((out / "demo.json").read_text())
    return {"doc": doc, "code": code, "png": out / "demo.png" if plot else None}


def test_a_small_demo_runs_every_way_and_records_the_batching_window(small_demo):
    doc = small_demo["doc"]
    assert small_demo["code"] == 0
    assert doc["mode"] == "demo"
    assert list(doc["strategies"]) == list(DEMO.strategies)
    assert "scale" not in doc and "cold_start" not in doc
    assert doc["seats_asked"] > doc["workload"]["capacity"]
    source = doc["strategies"]["turnstile"]["stream_source"]
    # what the poller ran with: the deployed window, the bench's batch size
    assert source["max_batching_window_s"] == STREAM_SOURCE.max_batching_window_s
    assert source["batch_size"] == 100


@needs_matplotlib
def test_a_small_demo_draws_its_figure_with_the_windows_note(small_demo):
    from turnstile_bench.plot import latency_note

    assert small_demo["png"].stat().st_size > 10_000
    doc = small_demo["doc"]
    window = doc["strategies"]["turnstile"]["stream_source"]["max_batching_window_s"]
    assert f"batching window of {window:g} s" in (latency_note([doc]) or "")
    assert empty(draw(doc)) == []

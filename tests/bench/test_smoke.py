"""A tiny ``turnstile bench`` of each way, end to end on the embedded endpoint.

No timing is asserted (a benchmark is not a timed test): only that every figure is there,
that turnstile never oversells, and that the numbers are sane.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from turnstile.contract import INTAKE_TABLE
from turnstile.store import SignupStore
from turnstile_bench import register
from turnstile_bench.cpu import measure_cpu
from turnstile_bench.prices import ON_DEMAND_US_EAST_1
from turnstile_bench.progress import Progress
from turnstile_bench.report import render_table
from turnstile_bench.scale import run_direct, scale_summary
from turnstile_bench.workload import Workload, generate, intake_item

REQUIRED = (
    "decisions_per_s",
    "p50_s",
    "p95_s",
    "p99_s",
    "oversold_seats",
    "retries",
    "requests_per_decision",
    "read_units_per_decision",
    "write_units_per_decision",
    "cost_per_million_usd",
)
SIGNUPS = 36


def run_cli(*argv: str) -> int:
    """``turnstile bench ...`` through the same argparse wiring the CLI uses."""
    parser = argparse.ArgumentParser(prog="turnstile")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *argv])
    return int(args.func(args))


def has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench")
    plot = ["--plot", str(out / "bench.png")] if has_matplotlib() else []
    code = run_cli(
        "--quick",
        "--quiet",
        "--no-scale",
        "--no-cold-start",
        f"--signups={SIGNUPS}",
        "--events=2",
        "--capacity=6",
        "--producers=4",
        "--json",
        str(out / "bench.json"),
        *plot,
    )
    assert code == 0
    if plot:
        assert (out / "bench.png").stat().st_size > 10_000
    return json.loads((out / "bench.json").read_text())


def test_every_way_reports_every_figure(bench):
    assert set(bench["strategies"]) == {"naive", "optimistic", "turnstile"}
    for name, figures in bench["strategies"].items():
        missing = [k for k in REQUIRED if k not in figures]
        assert not missing, f"{name} lacks {missing}"
    turnstile = bench["strategies"]["turnstile"]
    assert "processor_write_units_per_decision" in turnstile
    assert "intake_write_units_per_decision" in turnstile
    for key in ("workload", "machine", "prices"):
        assert bench[key]
    assert bench["prices"]["write_per_million_usd"] == 0.625
    assert bench["prices"]["read_per_million_usd"] == 0.125


def test_turnstile_never_oversells_and_decides_everything(bench):
    turnstile = bench["strategies"]["turnstile"]
    assert turnstile["oversold_seats"] == 0
    assert turnstile["decided"] == SIGNUPS
    assert turnstile["pending"] == 0
    assert turnstile["audit"]["ok"]
    assert bench["checks"]["turnstile_never_oversold"]


def test_the_versioned_counter_does_not_oversell_either(bench):
    assert bench["strategies"]["optimistic"]["oversold_seats"] == 0


@pytest.mark.parametrize("name", ["naive", "optimistic", "turnstile"])
def test_numbers_are_sane(bench, name):
    s = bench["strategies"][name]
    assert s["decided"] == SIGNUPS
    assert s["accepted"] + s["rejected"] == SIGNUPS
    assert 0 < s["p50_s"] <= s["p95_s"] <= s["p99_s"]
    assert s["decisions_per_s"] > 0
    # Every decision is at least one item of at most 1 KB written, and one request.
    assert s["write_units_per_decision"] >= 1.0
    assert s["requests_per_decision"] >= 1.0
    assert s["read_units_per_decision"] > 0
    expected = s["write_units_per_decision"] * 0.625 + s["read_units_per_decision"] * 0.125
    assert s["cost_per_million_usd"] == pytest.approx(expected, abs=1e-3)
    assert s["metering"]["sampled_size_mismatches"] == 0
    assert s["decision_item_bytes"]["over_1kb"] == 0


def test_turnstile_units_split_into_intake_and_processor(bench):
    t = bench["strategies"]["turnstile"]
    # GIVEN intake items of at most 1 KB: one write unit each, and one more for each
    # one's entry in the undecided index (put_intake writes the marker)
    assert t["intake_item_bytes"]["max"] <= 1024
    assert t["intake_write_units_per_decision"] == 1.0
    assert t["intake_index_write_units_per_decision"] == 1.0
    # THEN the processor's decision items plus commits, and the total adds up
    assert 1.0 < t["processor_write_units_per_decision"] < 2.0
    assert t["write_units_per_decision"] == pytest.approx(
        t["processor_write_units_per_decision"]
        + t["intake_write_units_per_decision"]
        + t["intake_index_write_units_per_decision"],
        abs=1e-3,
    )


def test_the_table_names_every_way_and_the_prices(bench):
    table = render_table(bench)
    for name in ("naive", "optimistic", "turnstile", "$0.625", "$0.125"):
        assert name in table


def test_processor_driven_directly_meters_one_write_per_small_decision():
    # GIVEN two batches of one event, intake items well under 1 KB
    run = run_direct("smoke", 200, Progress(enabled=False))
    point = run.per_decision(ON_DEMAND_US_EAST_1)
    # THEN every signup decided once, never oversold, a unit per decision plus commits
    assert point["decided"] == 200
    assert point["oversold_seats"] == 0
    assert 1.0 < point["processor_write_units_per_decision"] <= 1.1
    assert point["size_mismatches"] == 0
    # and each intake write, not made here, counted with its undecided index entry
    assert point["intake_write_units_per_decision"] == 1.0
    assert point["intake_index_write_units_per_decision"] == 1.0
    summary = scale_summary([run, run], ON_DEMAND_US_EAST_1)
    assert summary["flat"]


def test_cpu_profile_measures_engine_and_handler():
    profile = measure_cpu(batches=2).to_dict()
    assert profile["decisions"] == 200
    # Both measured (each a run of its own: their ratio is a figure for the report, not
    # something to assert on a shared machine, where one run can be slowed down alone).
    assert profile["engine_us_per_decision"] > 0
    assert profile["handler_us_per_decision"] > 0
    assert profile["handler_ms_per_batch"] > 0


def test_unknown_strategy_is_refused(capsys):
    assert run_cli("--quick", "--strategies", "pessimistic") == 2
    assert "pessimistic" in capsys.readouterr().err


def test_the_workloads_intake_item_is_what_put_intake_writes(aws):
    # GIVEN a signup of the workload, submitted as the turnstile way's producers do
    client = aws.client("dynamodb")
    signup = generate(Workload(events=1, signups=1))[0]
    at = "2026-01-01T00:00:00.000000Z"
    SignupStore(client).put_intake(
        signup.event_id, signup.signup_id, signup.seats, signup.attributes, at
    )
    key = {"event_id": {"S": signup.event_id}, "signup_id": {"S": signup.signup_id}}
    stored = client.get_item(TableName=INTAKE_TABLE.name, Key=key)["Item"]
    # THEN the scale run's and the sweeper bench's items are the same, marker included
    expected = intake_item(signup.event_id, signup.signup_id, signup.seats, signup.attributes, at)
    assert stored == expected

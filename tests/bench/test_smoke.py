"""A tiny ``turnstile bench`` of each way, end to end on the embedded endpoint.

No timing is asserted (a benchmark is not a timed test): only that every figure is there,
that no way but naive oversells, loses or doubles anything, and that the numbers are sane.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from turnstile.base.contract import INTAKE_TABLE, MAIN_TABLE
from turnstile.storage.store import SignupStore
from turnstile_bench import register
from turnstile_bench.cpu import measure_cpu
from turnstile_bench.lock_targets import (
    CONFLICT_REASONS,
    claim_slots,
    create_lock_table,
    create_slots,
    is_conflict,
)
from turnstile_bench.prices import ON_DEMAND_US_EAST_1
from turnstile_bench.progress import Progress
from turnstile_bench.report import render_table
from turnstile_bench.scale import run_direct, scale_summary
from turnstile_bench.workload import Workload, generate, intake_item

REPO = Path(__file__).resolve().parents[2]
WAYS = {"naive", "optimistic", "transactional", "slots", "turnstile"}
SAFE = sorted(WAYS - {"naive"})
REQUIRED = (
    "decisions_per_s",
    "p50_s",
    "p95_s",
    "p99_s",
    "oversold_seats",
    "lost",
    "doubled",
    "conflicts",
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
    if plot:
        assert (out / "bench.png").stat().st_size > 10_000
    # The exit code is checked by a test of its own, after those that say what broke.
    return {**json.loads((out / "bench.json").read_text()), "exit_code": code}


@pytest.fixture(scope="module")
def hot(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The hot preset at a tiny size: one event, many producers, few seats."""
    out = tmp_path_factory.mktemp("hot") / "bench-hot.json"
    code = run_cli(
        "--hot",
        "--quiet",
        "--signups=24",
        "--capacity=5",
        "--producers=8",
        "--strategies=transactional,slots:order",
        "--json",
        str(out),
    )
    return {**json.loads(out.read_text()), "exit_code": code}


def test_every_way_reports_every_figure(bench):
    assert set(bench["strategies"]) == WAYS
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


@pytest.mark.parametrize("name", SAFE)
def test_no_way_but_naive_oversells_loses_or_doubles(bench, name):
    # Recounted from the way's own tables after its run, not assumed.
    s = bench["strategies"][name]
    assert s["oversold_seats"] == 0
    assert s["invariants"] == {
        "oversold_seats": 0,
        "lost_signups": 0,
        "lost_seats": 0,
        "doubled_decisions": 0,
        "doubled_seats": 0,
        "lock_target": s["invariants"]["lock_target"],
    }
    assert s["invariants"]["lock_target"]  # each safe way's lock target is checked too
    assert bench["checks"][f"{name}_never_oversold_lost_or_doubled"]


def test_the_run_exits_0_when_no_safe_way_broke(bench, hot):
    assert bench["exit_code"] == 0
    assert hot["exit_code"] == 0


def test_naive_is_recounted_the_same_way(bench):
    naive = bench["strategies"]["naive"]
    assert naive["lost"] == naive["doubled"] == 0
    assert naive["invariants"]["lock_target"] is None  # nothing to hold seats
    assert "naive_never_oversold_lost_or_doubled" not in bench["checks"]


@pytest.mark.parametrize("name", ["transactional", "slots"])
def test_lock_target_ways_write_in_transactions_and_count_why_they_were_cancelled(bench, name):
    s = bench["strategies"][name]
    # Every accepted signup is one transaction: the lock target and the decision together.
    assert s["requests_by_operation"]["transact_write_items"] >= s["accepted"]
    assert s["write_units_by_operation"]["transact_write_items"] >= 4 * s["accepted"]
    # A conflict is a cancelled transaction, retried; its reasons are counted.
    assert s["retries"] >= s["conflicts"]
    assert set(s["cancellation_reasons"]) <= set(CONFLICT_REASONS)
    assert sum(s["cancellation_reasons"].values()) >= s["conflicts"]


def test_set_up_is_reported_apart(bench):
    capacity = bench["workload"]["capacity"]
    setups = {n: s["setup"] for n, s in bench["strategies"].items()}
    # the event item; transactional also its counter; slots also one item per seat
    assert setups["naive"]["write_units_per_event"] == 1
    assert setups["transactional"]["write_units_per_event"] == 2
    assert setups["slots"]["write_units_per_event"] == 1 + capacity
    assert bench["strategies"]["slots"]["slot_pick"] == "random"
    table = render_table(bench)
    assert "set-up per event" in table
    assert "oversold/lost/doubled" in table


def test_the_hot_preset_is_one_event_many_producers_few_seats(hot):
    assert hot["mode"] == "hot"
    w = hot["workload"]
    assert (w["events"], w["capacity"], w["producers"], w["hot_share"]) == (1, 5, 8, 1.0)
    assert "scale" not in hot and "cold_start" not in hot  # only the ways
    assert set(hot["strategies"]) == {"transactional", "slots:order"}
    assert hot["strategies"]["slots:order"]["slot_pick"] == "order"
    for name, s in hot["strategies"].items():
        assert s["decided"] == 24
        assert s["accepted"] >= 1
        assert (s["oversold_seats"], s["lost"], s["doubled"]) == (0, 0, 0), name
        assert hot["checks"][f"{name}_never_oversold_lost_or_doubled"]


@pytest.mark.parametrize("name", ["naive", "optimistic", "transactional", "slots", "turnstile"])
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


def test_turnstile_units_split_into_intake_processor_and_sweeper(bench):
    t = bench["strategies"]["turnstile"]
    # GIVEN intake items of at most 1 KB: one write unit each, and no entry in the
    # undecided index (put_intake writes no marker)
    assert t["intake_item_bytes"]["max"] <= 1024
    assert t["intake_write_units_per_decision"] == 1.0
    assert t["intake_index_write_units_per_decision"] == 0.0
    # THEN the processor's decision items plus commits, the sweeper's run (its lease and
    # history only: no marker to remove), and the total, all in, adds up
    # (tests/bench/test_all_in.py checks the parts in detail)
    assert 1.0 < t["processor_write_units_per_decision"] < 2.0
    assert 0.0 < t["sweeper_write_units_per_decision"] * t["decided"] <= 10
    assert t["write_units_per_decision"] == pytest.approx(
        t["processor_write_units_per_decision"]
        + t["intake_write_units_per_decision"]
        + t["intake_index_write_units_per_decision"]
        + t["sweeper_write_units_per_decision"]
        + t["releaser_write_units_per_decision"],
        abs=1e-3,
    )


def test_the_table_names_every_way_and_the_prices(bench):
    table = render_table(bench)
    for name in (*WAYS, "$0.625", "$0.125"):
        assert name in table


@pytest.mark.skipif(not has_matplotlib(), reason="matplotlib is in the bench extra")
def test_saved_runs_are_drawn_in_one_figure(bench, hot, tmp_path):
    from turnstile_bench.plot import main

    quick, hot_json = tmp_path / "quick.json", tmp_path / "hot.json"
    quick.write_text(json.dumps(bench))
    hot_json.write_text(json.dumps(hot))
    assert main([str(quick), str(hot_json), "--out", str(tmp_path / "bench.png")]) == 0
    assert (tmp_path / "bench.png").stat().st_size > 10_000
    assert main([str(tmp_path / "missing.json"), "--out", str(tmp_path / "x.png")]) == 2


def test_make_bench_leaves_the_committed_reference_run_alone():
    # GIVEN the bench target of the Makefile
    text = (REPO / "Makefile").read_text()
    recipe = text.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    out = next(
        line.split(":=", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("BENCH_OUT :=")
    )
    # THEN both presets run, into a folder git ignores, never over results/bench.*
    assert "--quick" in recipe and "--hot" in recipe and "--lifecycle" in recipe
    assert "results/bench" not in recipe
    assert recipe.count("$(BENCH_OUT)/") >= 4
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", f"{out}/bench.json"], cwd=REPO, check=False
    )
    assert ignored.returncode == 0, f"{out}/ is not ignored by git"


def test_processor_driven_directly_meters_one_write_per_small_decision():
    # GIVEN two batches of one event, intake items well under 1 KB
    run = run_direct("smoke", 200, Progress(enabled=False))
    point = run.per_decision(ON_DEMAND_US_EAST_1)
    # THEN every signup decided once, never oversold, a unit per decision plus commits
    assert point["decided"] == 200
    assert point["oversold_seats"] == 0
    assert 1.0 < point["processor_write_units_per_decision"] <= 1.1
    assert point["size_mismatches"] == 0
    # and each intake write, not made here, counted (no undecided index entry: no marker)
    assert point["intake_write_units_per_decision"] == 1.0
    assert point["intake_index_write_units_per_decision"] == 0.0
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


def test_cpu_report_is_the_median_of_its_runs_and_the_profiles_top(monkeypatch):
    """``turnstile bench --cpu``: each figure is the median of the runs (faked here, so the
    median is known), and the profile names the functions the handler spent most in."""
    import turnstile_bench.cpu as cpu

    real = cpu.measure_cpu
    handler_us = iter([50.0, 10.0, 20.0, 40.0])  # median of the first three 20, mean 26.7

    def fake(batches, profiler=None):
        profile = real(batches, profiler)
        if profiler is not None:
            return profile
        return replace(profile, handler_us_per_decision=next(handler_us))

    monkeypatch.setattr(cpu, "measure_cpu", fake)
    doc = cpu.cpu_report(batches=1, runs=3, top=5)
    assert doc["handler_us_per_decision"] == 20.0
    assert doc["handler_us_per_decision_runs"] == [50.0, 10.0, 20.0]
    assert doc["decisions"] == 100 and doc["runs"] == 3
    shares = [row["own_share"] for row in doc["top"]]
    assert len(shares) == 5 and shares == sorted(shares, reverse=True)
    assert 0 < sum(shares) <= 1
    assert all(row["calls"] > 0 and "(" in row["function"] for row in doc["top"])
    text = cpu.render_cpu(doc)
    assert "median of 3 runs" in text and "20.0 us" in text
    assert doc["top"][0]["function"] in text


def test_unknown_strategy_is_refused(capsys):
    assert run_cli("--quick", "--strategies", "pessimistic") == 2
    err = capsys.readouterr().err
    assert "pessimistic" in err
    assert "transactional" in err and "slots" in err  # the known ones are named


@pytest.mark.parametrize(
    ("reasons", "conflict"),
    [
        (["ConditionalCheckFailed", "None"], True),  # the counter moved
        (["None", "TransactionConflict", "None"], True),  # another transaction on a slot
        (["None", "None", "TransactionConflict"], True),
        (["None", "ConditionalCheckFailed"], False),  # the decision was made already
        (["ValidationError", "None"], False),
        (["ThrottlingError", "None"], False),
        (["None", "None"], False),
    ],
)
def test_only_contention_is_a_conflict_to_retry(reasons, conflict):
    assert is_conflict(reasons) is conflict


def test_a_slot_is_claimed_once_and_a_lost_claim_writes_nothing(aws):
    # GIVEN an event of 3 slots, and alice holding slots 1 and 2
    client = aws.client("dynamodb")
    table = create_lock_table(client, "slots")
    create_slots(client, table, {"ev": 3})
    main = MAIN_TABLE.name  # made by the fixture, as turnstile's contract says

    def decision(signup_id: str) -> dict[str, Any]:
        return {"event_id": {"S": "ev"}, "signup_id": {"S": signup_id}}

    claim_slots(client, table, main, "ev", "alice", [1, 2], decision("alice"))
    # WHEN bob claims 2 and 3, and carol claims 4, which was never made
    with pytest.raises(ClientError) as bob:
        claim_slots(client, table, main, "ev", "bob", [2, 3], decision("bob"))
    with pytest.raises(ClientError) as carol:
        claim_slots(client, table, main, "ev", "carol", [4], decision("carol"))
    # THEN both are cancelled, saying which slot, and wrote nothing
    codes = [r["Code"] for r in bob.value.response["CancellationReasons"]]
    assert codes == ["ConditionalCheckFailed", "None", "None"]
    carol_codes = [r["Code"] for r in carol.value.response["CancellationReasons"]]
    assert carol_codes == ["ConditionalCheckFailed", "None"]
    owners = {
        item["sk"]["S"]: item.get("owner", {}).get("S")
        for item in client.scan(TableName=table)["Items"]
    }
    assert owners == {"slot#0001": "alice", "slot#0002": "alice", "slot#0003": None}
    decided = {i["signup_id"]["S"] for i in client.scan(TableName=main)["Items"]}
    assert decided == {"alice"}


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
    # THEN the scale run's and the sweeper bench's items are the same: no marker
    expected = intake_item(signup.event_id, signup.signup_id, signup.seats, signup.attributes, at)
    assert stored == expected

"""Per first decision, all in: every part a way runs is counted, and the floor beside it.

One tiny run of turnstile and of optimistic on the embedded endpoint (a few seconds), then
the accounting checked against what must hold whatever the machine: the headline is the
sum of the parts; the sweeper's run is one of them; the floor, computed
from the run's own items, is below everything. No timing is asserted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from turnstile_bench.accounting import (
    Floor,
    all_in_figures,
    commit_floor,
    decision_floor,
    event_items,
)
from turnstile_bench.metering import MeterSnapshot
from turnstile_bench.prices import ON_DEMAND_US_EAST_1
from turnstile_bench.progress import Progress
from turnstile_bench.report import render_table
from turnstile_bench.runner import QUICK, _checks, run_bench
from turnstile_bench.workload import Workload

SIGNUPS = 24
PARTS = ("producers", "processor", "sweeper", "releaser")
PER_DECISION = ("write_units_per_decision", "read_units_per_decision", "requests_per_decision")


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    """turnstile and optimistic, 24 signups over two events of 5 seats, 4 producers."""
    options = replace(
        QUICK,
        workload=Workload(events=2, capacity=5, signups=SIGNUPS, producers=4, hot_share=0.5),
        strategies=("optimistic", "turnstile"),
        run_scale=False,
        run_cold_start=False,
    )
    return run_bench(options, Progress(enabled=False))


@pytest.fixture(scope="module")
def turnstile(doc: dict[str, Any]) -> dict[str, Any]:
    figures = doc["strategies"]["turnstile"]
    assert figures["decided"] == SIGNUPS  # everything decided before anything is counted
    return figures


def test_turnstile_all_in_is_every_part_and_the_headline(turnstile):
    all_in = turnstile["all_in"]
    # GIVEN turnstile's four parts, each on a meter of its own
    assert tuple(all_in["parts"]) == PARTS
    # THEN all in is their sum, per decision, and it is the headline figure (the table's
    # WU/dec and RU/dec, the cost, the figure's bars)
    for key in PER_DECISION:
        parts = sum(p[key] for p in all_in["parts"].values())
        assert all_in[key] == pytest.approx(parts, abs=1e-3), key
    assert turnstile["write_units_per_decision"] == all_in["write_units_per_decision"]
    assert turnstile["read_units_per_decision"] == all_in["read_units_per_decision"]
    assert turnstile["cost_per_million_usd"] == all_in["cost_per_million_usd"]
    # and the decision path alone (producers and processor) is all in less the sweeper and
    # the releaser
    path = turnstile["decision_path"]["write_units_per_decision"]
    later = sum(all_in["parts"][p]["write_units_per_decision"] for p in ("sweeper", "releaser"))
    assert all_in["write_units_per_decision"] == pytest.approx(path + later, abs=1e-3)


def test_the_sweeper_finds_nothing_left_and_its_run_is_counted(turnstile):
    sweeper = turnstile["all_in"]["parts"]["sweeper"]
    swept = turnstile["sweeper"]
    # GIVEN every intake record written as put_intake writes it: no marker, no index entry
    producers = turnstile["all_in"]["parts"]["producers"]
    assert producers["index_write_units_per_decision"] == 0.0
    assert turnstile["index_write_units_by_index"].get("undecided", 0) == 0
    # WHEN the sweeper ran after the decisions, through the index, as deployed
    assert swept["status"] == "succeeded" and swept["full_scan"] is False
    # THEN it found nothing undecided and no marker to remove: no intake write at all
    assert swept["unmarked"] == swept["undecided_found"] == swept["re_emitted"] == 0
    assert sweeper["index_write_units_per_decision"] == 0.0
    # and its run's own bookkeeping (lease, history, the empty index) is counted, once:
    # a few units in all, not one per decision
    assert 0 < sweeper["write_units"] <= 10 and 0 < sweeper["read_units"] <= 10
    assert doc_checks(turnstile)


def doc_checks(turnstile: dict[str, Any]) -> bool:
    return _checks({"workload": {"events": 1}, "strategies": {"turnstile": turnstile}})[
        "turnstile_sweeper_found_nothing_left"
    ]


def test_the_releaser_ran_and_is_counted_even_with_nothing_due(turnstile):
    released = turnstile["releaser"]
    part = turnstile["all_in"]["parts"]["releaser"]
    # GIVEN a preset whose events hold no seats
    assert released["events_holding_seats"] == 0 and released["woken"] == 0
    # THEN its run is one read of the due-holds index, in its part
    assert released["requests"] >= 1
    assert part["requests"] == released["requests"]
    assert part["read_units"] == released["read_units"] > 0


def test_the_floor_of_turnstile_is_one_intake_write_one_decision_write_and_its_commits(
    turnstile,
):
    floor = turnstile["floor"]
    n = turnstile["decided"]
    # GIVEN items under 1 KB (a unit per write)
    assert turnstile["intake_item_bytes"]["max"] <= 1024
    assert turnstile["decision_item_bytes"]["over_1kb"] == 0
    # THEN the floor writes each intake record and each decision once
    assert floor["writes"]["intake"] == floor["writes"]["decisions"] == n
    assert floor["write_units"]["intake"] == floor["write_units"]["decisions"] == n
    # and commits one per event per batch: at least one per event, at most one per
    # event per batch, each a unit (the counters, not the journal)
    commits = floor["writes"]["commits"]
    assert 2 <= commits <= 2 * turnstile["batches"]
    assert floor["write_units"]["commits"] == commits
    # and it is below all in, by what the design pays beyond it (marker, sweeper, journal)
    all_in = turnstile["all_in"]
    assert all_in["floor_write_units_per_decision"] == floor["write_units_per_decision"]
    assert floor["write_units_per_decision"] == pytest.approx((2 * n + commits) / n, abs=1e-3)
    assert floor["write_units_per_decision"] < all_in["write_units_per_decision"]


def test_every_way_has_a_floor_at_most_its_all_in(doc):
    for name, figures in doc["strategies"].items():
        all_in = figures["all_in"]
        assert all_in["floor_write_units_per_decision"] >= 1.0, name
        assert all_in["floor_write_units_per_decision"] <= all_in["write_units_per_decision"]
        assert doc["checks"][f"{name}_floor_at_most_all_in"]
    # optimistic: a decision write each, and a counter update per accepted signup
    optimistic = doc["strategies"]["optimistic"]
    floor = optimistic["floor"]
    assert floor["writes"] == {
        "decisions": optimistic["decided"],
        "counter updates": optimistic["accepted"],
    }
    # its failed conditions are in its all in, never in its floor
    assert (
        optimistic["all_in"]["failed_write_units_per_decision"]
        == (optimistic["failed_write_units_per_decision"])
    )


def test_the_run_checks_its_own_accounting(doc):
    assert doc["checks"]["turnstile_all_in_is_the_sum_of_its_parts"]
    assert doc["checks"]["turnstile_sweeper_found_nothing_left"]
    # GIVEN the same run with the sweeper's part left out of the sum
    broken = {**doc, "strategies": {**doc["strategies"]}}
    t = broken["strategies"]["turnstile"] = dict(doc["strategies"]["turnstile"])
    t["all_in"] = {
        **t["all_in"],
        "write_units_per_decision": t["decision_path"]["write_units_per_decision"],
    }
    # THEN the check says so
    assert not _checks(broken)["turnstile_all_in_is_the_sum_of_its_parts"]


def test_the_table_leads_with_all_in_part_by_part_and_the_floor(doc, turnstile):
    table = render_table(doc)
    # the all-in table comes first, before speeds and contention
    assert table.index("per first decision, all in") < table.index("WU all in")
    assert table.index("WU all in") < table.index("dec/s")
    for part in PARTS:
        assert f"\n  {part} " in table
    assert "floor WU" in table and f"turnstile: {turnstile['floor']['contract']}" in table
    # turnstile's row of the all-in table: all in, then its floor
    row = next(line for line in table.splitlines() if line.startswith("turnstile  "))
    assert f"{turnstile['all_in']['write_units_per_decision']:.2f}" in row
    assert f"{turnstile['floor']['write_units_per_decision']:.2f}" in row


# -- the arithmetic, without an endpoint ---------------------------------------------------


def test_a_commit_is_floored_on_the_counters_without_the_journal():
    # GIVEN an event item committed 3 times, whose journal makes it 9 KB
    item = {
        "pk": {"S": "EVENT#ev"},
        "sk": {"S": "EVENT"},
        "version": {"N": "3"},
        "taken": {"N": "40"},
        "journal": {"B": b"x" * 9000},
    }
    other = {"pk": {"S": "LEASE"}, "sk": {"S": "SWEEPER"}, "version": {"N": "9"}}
    events = event_items([item, other])
    # THEN only the event item counts, a unit per commit; twice in a transaction
    assert events == [item]
    assert commit_floor(events) == (3.0, 3)
    assert commit_floor(events, transactional=True) == (6.0, 3)
    assert commit_floor([{"pk": {"S": "EVENT#new"}, "sk": {"S": "EVENT"}}]) == (0.0, 0)


def test_a_decision_is_floored_on_its_size_and_doubled_only_in_a_transaction():
    sizes = {"ACCEPTED": [500, 1500], "REJECTED": [900]}
    assert decision_floor(sizes) == (1 + 2 + 1, 3)
    assert decision_floor(sizes, transactional_statuses=("ACCEPTED",)) == (2 + 4 + 1, 3)


def test_all_in_adds_every_part_and_keeps_failed_writes():
    # GIVEN three parts: one with a failed condition, one with an index entry, one reading
    parts = {
        "a": MeterSnapshot(
            requests={"put_item": 2},
            write_units={"put_item": 2.0},
            failed_write_units=1.0,
            failed_conditional_writes=1,
        ),
        "b": MeterSnapshot(
            requests={"update_item": 1},
            write_units={"update_item": 1.0},
            index_write_units={"undecided": 1.0},
        ),
        "c": MeterSnapshot(requests={"batch_get_item": 1}, read_units={"batch_get_item": 2.0}),
    }
    floor = Floor("one write", write_units={"writes": 2.0}, writes={"writes": 2})
    figures = all_in_figures(parts, ("a", "b", "c"), 2, ON_DEMAND_US_EAST_1, floor)
    # THEN every unit is in, per decision, and the floor sits beside it
    assert figures["write_units_per_decision"] == 2.0  # (2 + 1 + 1 index) / 2
    assert figures["read_units_per_decision"] == 1.0
    assert figures["requests_per_decision"] == 2.0
    assert figures["failed_write_units_per_decision"] == 0.5
    assert figures["parts"]["b"]["index_write_units_per_decision"] == 0.5
    assert figures["floor_write_units_per_decision"] == 1.0
    assert figures["above_floor_write_units_per_decision"] == 1.0
    assert figures["cost_per_million_usd"] == pytest.approx(2.0 * 0.625 + 1.0 * 0.125)
    # and a part left out of the roles is left out of the sum
    assert (
        all_in_figures(parts, ("a", "c"), 2, ON_DEMAND_US_EAST_1)["write_units_per_decision"] == 1.0
    )

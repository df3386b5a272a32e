"""A tiny ``turnstile bench --lifecycle``, end to end on the embedded endpoint.

No timing is asserted: only that the recount of the tables is clean, that every kind of
transition happened and is counted, and that the figures are there and sane.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from turnstile.base.contract import Attr, Status
from turnstile.engine.lifecycle import Transition
from turnstile.storage.items import history_of
from turnstile_bench import register
from turnstile_bench.lifecycle_run import LIFECYCLE, Tables, recount, render_lifecycle

SIGNUPS = 30
CAUSES = ("signup", "confirm", "cancel", "expiry", "promotion")


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="turnstile")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", *argv])
    return int(args.func(args))


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("lifecycle") / "bench-lifecycle.json"
    code = run_cli(
        "--lifecycle",
        "--quiet",
        f"--signups={SIGNUPS}",
        "--capacity=8",
        "--waitlist=6",
        "--hold-seconds=3",
        "--producers=4",
        "--rate=20",
        "--cancel-share=0.5",
        "--json",
        str(out),
    )
    return {**json.loads(out.read_text()), "exit_code": code}


def test_the_recount_is_clean_and_the_run_exits_0(lifecycle):
    r = lifecycle["recount"]
    assert r["problems"] == {k: [] for k in r["problems"]}
    assert r["clean"]
    assert r["decided"] == r["signups"] == SIGNUPS
    for event in r["events"].values():
        assert event["taken"] == event["seated_recounted"] <= event["capacity"]
    assert lifecycle["audit"]["ok"]
    failed = [k for k, ok in lifecycle["checks"].items() if not ok]
    assert not failed
    assert lifecycle["exit_code"] == 0


def test_every_kind_of_transition_happened_and_is_counted(lifecycle):
    t = lifecycle["transitions"]
    assert all(t["by_cause"].get(c, 0) > 0 for c in CAUSES), t["by_cause"]
    assert t["by_cause"]["signup"] == SIGNUPS
    assert sum(t["first_decisions_by_status"].values()) == SIGNUPS
    assert sum(t["by_cause"].values()) == t["all"]
    # Every request sent was answered: applied, or refused with a reason.
    sent = lifecycle["requests_sent"]
    refused = sum(t["refused"].values())
    assert sum(sent.values()) == t["by_cause"]["confirm"] + t["by_cause"]["cancel"] + refused
    # The releaser read the due-holds index all along (whether a hold lapsed before the
    # next record of its event did is the machine's timing; every_hold_ended is checked).
    assert lifecycle["releaser"]["requests"] > 0


def test_the_figures_per_transition_are_there_and_sane(lifecycle):
    per = lifecycle["per_transition"]
    # Each transition is one decision item write (two of one signup in one step share it).
    assert 0.5 < per["decision_item_writes"] <= 1.0
    assert per["commits"] >= 1
    # Commits that move the earliest hold also write the event's due-holds index entry.
    assert 0 < per["due_holds_index_write_units"] < per["event_item_write_units"]
    assert lifecycle["event_item"]["bytes_max"] > 0
    assert lifecycle["event_item"]["write_units_per_commit"] >= 1
    assert per["processor_write_units"] == pytest.approx(
        per["event_item_write_units"] + per["decision_item_write_units"], abs=1e-3
    )
    assert 0.9 <= per["processor_write_units"] < 3.0
    assert per["write_units_with_requests"] > per["processor_write_units"]
    assert per["requests_with_requests"] > per["processor_requests"] > 0
    kinds = per["by_batch"]
    assert sum(k["transitions"] for k in kinds.values()) == lifecycle["transitions"]["all"]
    # A decision item is bigger than its intake item, and grows with every move it makes.
    growth = lifecycle["decision_item_growth"]
    assert growth["1"]["growth_bytes_max"] > 0
    most = max(growth, key=int)
    assert int(most) >= 2
    assert growth[most]["growth_bytes_mean"] > growth["1"]["growth_bytes_mean"]
    p = lifecycle["promotions"]
    assert p["count"] == lifecycle["transitions"]["by_cause"]["promotion"]
    assert p["measured"] == p["count"]  # every promoted item was seen promoted
    assert 0 <= p["release_to_readable_p50_s"] <= p["release_to_readable_p95_s"]
    assert p["per_s_of_run"] > 0


def test_the_table_says_what_is_what(lifecycle):
    table = render_lifecycle(lifecycle)
    for text in (
        "first decisions",
        "later moves",
        "processor only",
        "request writes",
        "promotions:",
        "release to readable",
        "recount:",
        "audit: OK",
    ):
        assert text in table
    assert "FAIL" not in table


# -- the recount finds what is wrong (no endpoint) ------------------------------------------


def _item(signup: str, status: str, seats: int, history: list[tuple[str, str]]) -> dict[str, Any]:
    """A decision item whose transitions are ``history``: as turnstile stores it, the first
    (its decision) is read off the item, the later moves are its ``history``."""
    return {
        Attr.EVENT_ID: "ev",
        Attr.SIGNUP_ID: signup,
        Attr.STATUS: status,
        Attr.SEATS: seats,
        Attr.HISTORY: [{"from": f, "to": t} for f, t in history[1:]],
    }


def _moves(items: list[dict[str, Any]]) -> list[tuple[str, Transition, float]]:
    return [
        ("ev", Transition(i[Attr.SIGNUP_ID], h["from"], h["to"], 0, "1", "signup", 1), 0.0)
        for i in items
        for h in history_of(i)
    ]


def _tables(items: list[dict[str, Any]], taken: int, counts: dict[str, int]) -> Tables:
    intake = [{Attr.EVENT_ID: "ev", Attr.SIGNUP_ID: i[Attr.SIGNUP_ID]} for i in items]
    event = {Attr.CAPACITY: 2, Attr.TAKEN: taken, Attr.STATUS_COUNTS: counts}
    return Tables(intake, items, {"ev": event})


GOOD = [
    _item("a", Status.ACCEPTED, 1, [(Status.PENDING, Status.HELD), (Status.HELD, Status.ACCEPTED)]),
    _item("b", Status.EXPIRED, 1, [(Status.PENDING, Status.HELD), (Status.HELD, Status.EXPIRED)]),
    _item(
        "c",
        Status.HELD,
        1,
        [(Status.PENDING, Status.WAITLISTED), (Status.WAITLISTED, Status.HELD)],
    ),
]


def test_a_clean_run_is_clean_but_for_a_hold_left():
    counts = {Status.ACCEPTED: 1, Status.EXPIRED: 1, Status.HELD: 1}
    r = recount(_tables(GOOD, 2, counts), LIFECYCLE, _moves(GOOD))
    assert {k for k, n in r["problem_counts"].items() if n} == {"holds"}


def test_the_recount_finds_each_kind_of_problem():
    counts = {Status.ACCEPTED: 1, Status.EXPIRED: 1, Status.HELD: 1}
    moves = _moves(GOOD)
    # a change never materialized: the item still says HELD, the processor moved it on
    stale = [GOOD[0] | {Attr.STATUS: Status.HELD, Attr.HISTORY: []}]
    r = recount(_tables(stale + GOOD[1:], 2, counts), LIFECYCLE, moves)
    assert r["problem_counts"]["lost"] and r["problem_counts"]["status_counts"]
    # a transition not allowed, and a history that does not end at the status
    bad = [
        _item(
            "a",
            Status.ACCEPTED,
            1,
            [(Status.PENDING, Status.ACCEPTED), (Status.ACCEPTED, Status.EXPIRED)],
        )
    ]
    r = recount(_tables(bad, 1, {Status.ACCEPTED: 1}), LIFECYCLE, _moves(bad))
    assert r["problem_counts"]["history"] == 2
    # seats: taken off the items' seats, and a waiting signup that fits in the free seats
    waiting = [*GOOD[:2], _item("w", Status.WAITLISTED, 1, [(Status.PENDING, Status.WAITLISTED)])]
    waiting_counts = {Status.ACCEPTED: 1, Status.EXPIRED: 1, Status.WAITLISTED: 1}
    r = recount(_tables(waiting, 1, waiting_counts), LIFECYCLE, _moves(waiting))
    assert r["problem_counts"]["waitlist"] == 1 and r["problem_counts"]["seats"] == 0
    r = recount(_tables(waiting, 2, waiting_counts), LIFECYCLE, _moves(waiting))
    assert r["problem_counts"]["seats"] == 1 and r["problem_counts"]["waitlist"] == 0
    # a decision for nothing submitted, and an intake record without one
    tables = _tables(GOOD, 2, counts)
    tables.intake[0] = {Attr.EVENT_ID: "ev", Attr.SIGNUP_ID: "zz"}
    r = recount(tables, LIFECYCLE, moves)
    assert r["problem_counts"]["lost"] == 1 and r["problem_counts"]["doubled"] == 1
    # a history entry written twice
    twice = [GOOD[0] | {Attr.HISTORY: GOOD[0][Attr.HISTORY] * 2}]
    r = recount(_tables(twice, 1, {Status.ACCEPTED: 1}), LIFECYCLE, _moves(GOOD[:1]))
    assert r["problem_counts"]["doubled"] >= 1

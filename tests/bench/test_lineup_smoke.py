"""``turnstile bench --lineup``: a small lineup end to end, through the CLI.

No timing is asserted: what must hold whatever the machine's speed is checked (the
lineup read back is what the decision items say, nothing oversold, the confirms
accepted), and what pages are for: once the lineup is in pages, a commit costs no more
write units than the same commit with the lineup on the event item.
"""

from __future__ import annotations

import json

import pytest

from turnstile_bench import lineups
from turnstile_bench.lineups import LineupWorkload, render_lineup
from turnstile_tools.cli import main

SMALL = LineupWorkload(
    capacity=400, waitlist=100, sizes=(0, 300, 400), inline_up_to=500, requests=10
)


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("lineup") / "lineup.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lineups, "QUICK_LINEUP", SMALL)
        assert main(["bench", "--lineup", "--quick", "--quiet", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_the_lineup_read_back_is_what_the_decisions_say_and_nothing_is_oversold(doc):
    assert doc["checks"] == {
        "grown_lineup_is_what_the_decisions_say": True,
        "never_oversold": True,
        "confirms_accepted": True,
        "processor_role_refused_nothing": True,
    }
    final = doc["final"]
    # 5 confirms, 5 cancels: each cancel's seat went to the first waiter
    assert (final["ACCEPTED"], final["CANCELLED"], final["taken"]) == (5, 5, 400)
    assert (final["lineup_holds"], final["lineup_waiting"]) == (395, 95)


def test_a_paged_lineup_costs_a_commit_no_more_than_the_item_does(doc):
    inline = {row["entries_before"]: row for row in doc["inline"]}
    paged = {row["entries_before"]: row for row in doc["paged"]}
    assert sorted(inline) == sorted(paged) == [0, 300, 400]
    # short lineups stay on the item, in both runs, and cost the same
    assert inline[0]["pages"] == paged[0]["pages"] == 0
    assert inline[0]["commit_wu_per_decision"] == paged[0]["commit_wu_per_decision"]
    # past 8 KB the lineup is in pages (never with pages switched off), and a commit
    # writes only what it touches: fewer units than the whole lineup on the item
    assert inline[400]["pages"] == 0 and paged[400]["pages"] > 0
    assert paged[400]["event_item_bytes"] < inline[400]["event_item_bytes"]
    assert paged[400]["commit_wu_per_decision"] < inline[400]["commit_wu_per_decision"]
    # every decision item is one unit and more: the processor's figure includes them
    for row in [*inline.values(), *paged.values()]:
        assert row["processor_wu_per_decision"] >= 1 + row["commit_wu_per_decision"] - 0.001
    requests = doc["requests_on_the_full_lineup"]
    assert requests["requests"] == 10 and requests["commit_wu_per_request"] > 0


def test_the_table_shows_both_runs_side_by_side(doc):
    table = render_lineup(doc)
    assert "on the item" in table and "in pages" in table
    assert "10 confirms and cancels on the full lineup" in table
    assert "never_oversold PASS" in table


@pytest.mark.parametrize(
    "runs", [("--lineup", "--hot"), ("--drop", "--cpu"), ("--lifecycle", "--lineup")]
)
def test_two_runs_of_their_own_are_one_usage_line_not_one_run_ignoring_the_other(runs, capsys):
    assert main(["bench", *runs]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("turnstile: --") and "are runs of their own: give one" in err
    assert len(err.splitlines()) == 1

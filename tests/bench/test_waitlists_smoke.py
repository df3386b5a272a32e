"""``python -m turnstile_bench.waitlists`` on a small workload: both runs are made, and what
must hold holds (the figures themselves are the benchmark's, never asserted here)."""

from __future__ import annotations

import json

from turnstile_bench.waitlists import WaitlistWorkload, main, render, run_waitlists


def test_a_small_run_measures_both_and_the_checks_hold():
    doc = run_waitlists(
        WaitlistWorkload(shards=3, capacity=9, waitlist=6, signups=45, cancels=5, batch=4)
    )
    without, with_ = doc["runs"]
    assert (without["waitlist"], with_["waitlist"]) == (0, 6)
    for run in doc["runs"]:
        assert run["checks"] == {
            "oversold": 0,
            "pool_counts_who_waits": True,
            "waiting_for_a_free_seat": 0,
        }
        # every signup's first decision, and its moves (cancels, promotions) besides
        assert run["transitions"] > sum(run["statuses"].values())
        assert run["write_units"] > 0 and run["requests"] > 0
    # the same signups and cancels: the waitlist's run seats its line from the seats given
    # back, so it gives every seat; the other leaves the cancelled seats free
    assert without["statuses"]["CANCELLED"] == with_["statuses"]["CANCELLED"] == 5
    assert with_["statuses"]["ACCEPTED"] == 9 and without["statuses"]["ACCEPTED"] == 4
    assert with_["wakes"] > 0 and without["wakes"] == 0
    assert "waiting beside a free seat" in render(doc)


def test_main_prints_the_table_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "waitlists.json"
    argv = ["--shards", "2", "--capacity", "4", "--waitlist", "2", "--signups", "12"]
    assert main([*argv, "--cancels", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("waitlists: one event of 4 seats over 2 shards")
    assert json.loads(out.read_text())["workload"]["capacity"] == 4

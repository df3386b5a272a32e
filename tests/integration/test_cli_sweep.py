"""`turnstile sweep` by hand: a run of its own, not the scheduled sweeper's current slot."""

from __future__ import annotations

import json

from turnstile.jobs.sweeper import Sweeper, run_id_for
from turnstile.storage.store import SignupStore
from turnstile_tools import cli


def sweep(capsys, *argv: str) -> list[dict]:
    assert cli.main(["sweep", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_a_manual_sweep_runs_after_the_scheduled_sweep_of_the_same_slot(aws, capsys):
    # GIVEN the background (or scheduled) sweeper has run for the current five-minute slot
    scheduled = Sweeper(SignupStore()).sweep()
    assert (scheduled.run_id, scheduled.status) == (run_id_for(), "succeeded")
    # WHEN the user sweeps by hand, twice
    first, second = sweep(capsys), sweep(capsys)
    # THEN both run, each under its own run id
    assert [first[0]["status"], second[0]["status"]] == ["succeeded", "succeeded"]
    assert first[0]["run_id"].startswith("manual-")
    assert len({scheduled.run_id, first[0]["run_id"], second[0]["run_id"]}) == 3


def test_a_run_id_given_runs_once(aws, capsys):
    assert sweep(capsys, "--run-id", "by-hand")[0]["status"] == "succeeded"
    again = sweep(capsys, "--run-id", "by-hand")[0]
    assert (again["run_id"], again["status"]) == ("by-hand", "already_ran")

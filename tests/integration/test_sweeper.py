"""The sweeper: lease with fencing, immutable run history, re-emission through the stream."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.helpers import (
    CallRecorder,
    CancelledLikeDynamoDB,
    FaultyClient,
    WithoutCancellationReasons,
    decisions,
    put_raw_intake,
)
from turnstile.base.clock import utc_now
from turnstile.base.contract import STREAM_SOURCE
from turnstile.base.errors import DuplicateRunError, LeaseLostError
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile.jobs.sweeper import Sweeper, find_undecided
from turnstile.storage.ledger import Ledger
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.poller import matches_filter

NOW = "2026-01-01T00:00:00.000000Z"

#: Every test here runs on both ways a run finds records: the index and the full scan.
pytestmark = pytest.mark.usefixtures("sweep_path")


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def ledger(store):
    return Ledger.beside(store)


@pytest.fixture(params=["reasons", "no-reasons"])
def fenced(request, client):
    """A ledger whose cancelled transactions name the failed item (DynamoDB) or do not (it
    then reads the lease to tell): every fencing test runs against both."""
    if request.param == "no-reasons":
        client = WithoutCancellationReasons(client)
    return Ledger(client, sleep=lambda _: None)


def test_lease_is_exclusive_until_it_expires_and_tokens_grow(store, ledger):
    assert ledger.acquire_lease("a", 60, now=1000.0) == 1
    assert ledger.acquire_lease("b", 60, now=1030.0) is None  # held by a
    assert ledger.acquire_lease("a", 60, now=1030.0) == 2  # a renews: a new token
    assert ledger.acquire_lease("b", 60, now=1091.0) == 3  # expired: b takes it over


def test_a_sweeper_whose_lease_lapsed_cannot_write(fenced, store, client):
    put_raw_intake(client, "gig", "u1")
    token_a = fenced.acquire_lease("a", 60, now=1000.0)
    assert fenced.fenced_re_emit_many("a", token_a, 1010.0, [("gig", "u1")]) == 1
    fenced.acquire_lease("b", 60, now=1100.0)  # a's lease lapsed, b holds it now
    with pytest.raises(LeaseLostError):
        fenced.fenced_re_emit_many("a", token_a, 1101.0, [("gig", "u1")])
    item = store.get_intake("gig", "u1")
    assert item is not None and int(item["redrive"]) == 1  # only a's write in time landed


def test_a_lease_is_nobody_elses_up_to_its_last_instant(store, ledger):
    # Its holder may still write at lease_until (the fence checks until >= now): taking it
    # over at that same instant would let two sweepers write at once.
    assert ledger.acquire_lease("a", 60, now=1000.0) == 1
    assert ledger.acquire_lease("b", 60, now=1060.0) is None
    assert ledger.acquire_lease("b", 60, now=1060.5) == 2


def test_a_token_from_before_a_renewal_cannot_write(fenced, store, client):
    # GIVEN a sweeper that renewed its own lease: same owner, a new token
    put_raw_intake(client, "gig", "u1")
    old = fenced.acquire_lease("a", 60, now=1000.0)
    new = fenced.acquire_lease("a", 60, now=1010.0)
    assert old is not None and new is not None and new > old
    # WHEN a write still carries the token from before the renewal THEN it is refused
    with pytest.raises(LeaseLostError, match=f"'a' \\(token {old}\\) lapsed"):
        fenced.fenced_re_emit_many("a", old, 1011.0, [("gig", "u1")])
    assert fenced.fenced_re_emit_many("a", new, 1011.0, [("gig", "u1")]) == 1
    item = store.get_intake("gig", "u1")
    assert item is not None and (item["redrive"], item["redriven_at"]) == (1, 1011)


def test_a_stranger_with_the_current_token_cannot_write(fenced, store, client):
    put_raw_intake(client, "gig", "u1")
    token = fenced.acquire_lease("a", 60, now=1000.0)
    assert token is not None
    with pytest.raises(LeaseLostError, match=f"'b' \\(token {token}\\) lapsed"):
        fenced.fenced_re_emit_many("b", token, 1001.0, [("gig", "u1")])
    assert "redrive" not in store.get_intake("gig", "u1")


def test_an_expired_lease_nobody_took_cannot_write(fenced, store, client):
    # GIVEN a lease of 60 s that nobody took over after it ran out
    put_raw_intake(client, "gig", "u1")
    token = fenced.acquire_lease("a", 60, now=1000.0)
    assert token is not None
    # THEN its holder writes up to the last instant, and not after it
    assert fenced.fenced_re_emit_many("a", token, 1060.0, [("gig", "u1")]) == 1
    with pytest.raises(LeaseLostError, match="'a'"):
        fenced.fenced_re_emit_many("a", token, 1060.5, [("gig", "u1")])
    assert int(store.get_intake("gig", "u1")["redrive"]) == 1


def test_releasing_frees_the_lease_only_for_its_holder_and_token(store, ledger):
    token = ledger.acquire_lease("a", 60, now=1000.0)
    assert token is not None
    ledger.release_lease("b", token)  # not b's
    ledger.release_lease("a", token - 1)  # a stale token of a's
    assert ledger.acquire_lease("b", 60, now=1001.0) is None  # still a's
    ledger.release_lease("a", token)
    assert ledger.acquire_lease("b", 60, now=1001.0) == token + 1  # free before it expired


def test_run_history_is_immutable_and_a_run_happens_once(store, ledger):
    seq = ledger.start_run("r1", NOW)
    assert seq == 1
    assert ledger.start_run("r1", NOW) is None  # started: a second start stops at once
    ledger.finish_run("r1", seq, "succeeded", NOW, {})
    assert ledger.start_run("r1", NOW) is None
    assert ledger.start_run("r1", NOW, replay=True) is None  # succeeded runs never replay
    assert [i["exec_status"] for i in ledger.run_history("r1")] == ["started", "succeeded"]


def test_a_duplicate_concurrent_start_is_caught_by_the_atomic_counter(store, ledger, monkeypatch):
    # GIVEN two starters that both read an empty history (they ran at the same instant)
    monkeypatch.setattr(ledger, "run_history", lambda run_id=None: [])
    assert ledger.start_run("r1", NOW) == 1
    # THEN the second one's increment returns 2 and it stops
    with pytest.raises(DuplicateRunError):
        ledger.start_run("r1", NOW)


def delivered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream records the event source mapping's filter lets through to the processor."""
    return [r for r in records if any(matches_filter(p, r) for p in STREAM_SOURCE.filter_patterns)]


def test_sweep_re_emits_old_undecided_records_and_the_stream_decides_them(
    store, client, stream, sweep_path
):
    # GIVEN decided and undecided signups (the stream dropped some: we never deliver them)
    store.create_event("gig", 2, NOW)
    put_raw_intake(client, "gig", "kept", submitted_at={"S": "2026-01-01T00:00:00Z"})
    handled = stream.read_new()
    stream_handler._processor = StreamProcessor(store)
    stream_handler.handler({"Records": handled}, LocalLambdaContext())
    put_raw_intake(client, "gig", "lost1", submitted_at={"S": "2026-01-01T00:00:00Z"})
    put_raw_intake(client, "gig", "lost2", submitted_at={"S": "2026-01-01T00:00:00Z"})
    put_raw_intake(client, "gig", "fresh", submitted_at={"S": utc_now()})
    stream.read_new()  # ... and lost
    # WHEN the sweeper runs
    result = Sweeper(store, owner="s", min_age_s=300).sweep("run-1")
    # THEN exactly the old undecided ones are re-emitted, as MODIFY records
    assert (result.status, result.undecided, result.re_emitted) == ("succeeded", 2, 2)
    written = stream.read_new()
    records = delivered(written)
    assert sorted((r["eventName"], r["dynamodb"]["Keys"]["signup_id"]["S"]) for r in records) == [
        ("MODIFY", "lost1"),
        ("MODIFY", "lost2"),
    ]
    # ... and the decided one lost its marker (if it had one), a MODIFY the filter drops
    assert result.unmarked == (1 if sweep_path == "index" else 0)
    assert len(written) - len(records) == result.unmarked
    assert "undecided" not in store.get_intake("gig", "kept")
    stream_handler.handler({"Records": records}, LocalLambdaContext())
    assert {k[1] for k in decisions(client)} == {"kept", "lost1", "lost2"}
    # and a second sweep right after finds only the fresh one, too young to touch
    assert list(find_undecided(store, min_age_s=300)) == []
    assert audit(store, pending_grace_s=10**9).ok
    stream_handler._processor = None


def test_replay_failed_reruns_only_failed_runs(store, ledger, client, caplog):
    put_raw_intake(client, "gig", "u1")
    calls = {"scan": 0}

    def fail_first_scan(operation: str, kwargs: dict[str, Any]) -> str | None:
        if operation == "scan":
            calls["scan"] += 1
            return "InternalServerError" if calls["scan"] == 1 else None
        return None

    flaky = SignupStore(FaultyClient(client, fail_first_scan), sleep=lambda _: None, max_attempts=1)
    sweeper = Sweeper(flaky, owner="s", min_age_s=0)
    with caplog.at_level(logging.ERROR, logger="turnstile.jobs.sweeper"):
        failed = sweeper.sweep("run-ok-later")
    [logged] = caplog.records
    assert (logged.getMessage(), logged.run_id) == ("sweep run failed", "run-ok-later")
    # A failed run is not run again by the schedule, only by a replay
    assert Sweeper(store, owner="s", min_age_s=0).sweep("run-ok-later").status == "already_ran"
    assert failed.status == "failed"
    assert failed.errors == ["StoreUnavailableError('scan still failing after 1 attempts: "
                             "InternalServerError')"]
    Sweeper(store, owner="s", min_age_s=0).sweep("run-fine")
    # WHEN failed runs are replayed
    results = Sweeper(store, owner="s", min_age_s=0).replay_failed()
    # THEN only the failed one ran again, and it succeeded
    assert [(r.run_id, r.status) for r in results] == [("run-ok-later", "succeeded")]
    assert [i["exec_status"] for i in ledger.run_history("run-ok-later")] == [
        "started",
        "failed",
        "started",
        "succeeded",
    ]
    assert Sweeper(store, owner="s").replay_failed() == []


def test_only_one_sweeper_at_a_time(store, ledger):
    clock = Clock()
    first = Sweeper(store, owner="one", lease_s=60, clock=clock)
    assert ledger.acquire_lease("one", 60, clock()) is not None
    second = Sweeper(store, owner="two", lease_s=60, clock=clock)
    assert second.sweep("r").status == "lease_busy"
    clock.t += 61
    assert second.sweep("r").status == "succeeded"
    assert first.sweep("r").status == "already_ran"


def test_the_scheduled_handler_names_the_run_after_its_tick(store, monkeypatch):
    from turnstile.handlers import sweeper as sweeper_handler

    class Context:
        aws_request_id = "req-1"
        function_name = "sweeper"
        memory_limit_in_mb = 256
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:sweeper"

    tick = {"scheduled_time": "2026-11-21T22:07:00Z"}
    first = sweeper_handler.handler(tick, Context())
    again = sweeper_handler.handler(tick, Context())  # the same tick delivered twice
    assert [r["run_id"] for r in first["runs"]] == ["2026-11-21T22:05:00Z"]
    assert [(r["status"]) for r in first["runs"] + again["runs"]] == ["succeeded", "already_ran"]


def slow_ledger(client, clock: Clock, seconds_per_record: float) -> Ledger:
    class SlowLedger(Ledger):
        def fenced_re_emit_many(self, owner, token, now, keys):  # type: ignore[override]
            clock.t += seconds_per_record * len(keys)
            return super().fenced_re_emit_many(owner, token, now, keys)

    return SlowLedger(client)


def test_a_long_run_renews_its_lease_and_writes_with_the_new_token(store, ledger, client):
    for i in range(5):
        put_raw_intake(client, "gig", f"u{i}")
    clock = Clock()
    # Each re-emission takes half a minute of a 60 s lease: without renewal the third
    # would be refused by the lease's condition.
    sweeper = Sweeper(
        store, owner="s", lease_s=60, min_age_s=0, clock=clock,
        ledger=slow_ledger(client, clock, 30)
    )
    sweeper.chunk = 1
    result = sweeper.sweep("long")
    assert (result.status, result.re_emitted, result.errors) == ("succeeded", 5, [])
    assert result.lease_token is not None and result.lease_token > 1  # renewed on the way
    # ... and gave up its lease, with the token it last held, when it was done
    assert ledger.acquire_lease("next", 60, clock()) is not None


def test_a_lease_is_renewed_once_a_third_of_it_has_passed(store, client):
    # GIVEN re-emissions 10 s apart under a 60 s lease: at 0, 10, 20, 30 and 40 s
    for i in range(5):
        put_raw_intake(client, "gig", f"u{i}")
    clock = Clock()
    sweeper = Sweeper(
        store, owner="s", lease_s=60, min_age_s=0, clock=clock,
        ledger=slow_ledger(client, clock, 10)
    )
    sweeper.chunk = 1
    result = sweeper.sweep("thirds")
    # THEN it renews once, at 30 s (more than 20 s after taking it), and not at 40 s
    assert (result.status, result.lease_token) == ("succeeded", 2)


def test_a_lease_taken_over_mid_run_stops_it_and_is_left_to_its_holder(store, ledger, client):
    for i in range(3):
        put_raw_intake(client, "gig", f"u{i}")
    clock = Clock()

    class TakenOver(Ledger):
        def fenced_re_emit_many(self, owner, token, now, keys):  # type: ignore[override]
            done = super().fenced_re_emit_many(owner, token, now, keys)
            clock.t += 70  # a stall past the lease: another sweeper takes it over
            assert self.acquire_lease("other", 60, clock()) is not None
            return done

    sweeper = Sweeper(
        store, owner="s", lease_s=60, min_age_s=0, clock=clock, ledger=TakenOver(client)
    )
    sweeper.chunk = 1
    result = sweeper.sweep("lost")
    assert (result.status, result.re_emitted) == ("failed", 1)
    assert result.errors == ["sweeper lease of 's' was taken over"]
    assert [i["exec_status"] for i in ledger.run_history("lost")] == ["started", "failed"]
    assert ledger.acquire_lease("third", 60, clock()) is None  # still the other's


def test_a_run_re_emits_at_most_its_limit_and_records_what_it_did(store, ledger, client):
    for i in range(5):
        put_raw_intake(client, "gig", f"u{i}")
    sweeper = Sweeper(store, owner="s", min_age_s=0, max_re_emits=3)
    sweeper.chunk = 2
    result = sweeper.sweep("capped")
    assert (result.status, result.undecided, result.re_emitted) == ("succeeded", 5, 3)
    started, finished = ledger.run_history("capped")
    assert (finished["exec_status"], json.loads(finished["detail"])["re_emitted"]) == (
        "succeeded",
        3,
    )
    assert started["created_at"] <= finished["created_at"]  # both stamped, in order


def test_a_run_stops_at_its_time_budget_and_leaves_the_rest(store, client):
    for i in range(4):
        put_raw_intake(client, "gig", f"u{i}")
    clock = Clock()
    sweeper = Sweeper(
        store, owner="s", min_age_s=0, max_run_s=15, clock=clock,
        ledger=slow_ledger(client, clock, 10)
    )
    sweeper.chunk = 1
    result = sweeper.sweep("budget")
    assert (result.undecided, result.re_emitted) == (4, 2)


def test_a_run_may_start_a_re_emission_at_the_end_of_its_budget(store, client):
    for i in range(4):
        put_raw_intake(client, "gig", f"u{i}")
    clock = Clock()
    sweeper = Sweeper(
        store, owner="s", min_age_s=0, max_run_s=20, clock=clock,
        ledger=slow_ledger(client, clock, 10)
    )
    sweeper.chunk = 1
    result = sweeper.sweep("budget")
    assert (result.undecided, result.re_emitted) == (4, 3)  # at 0, 10 and 20 s, not 30


def test_a_run_re_emits_in_chunks(client):
    recorder = CallRecorder(client)
    store = SignupStore(recorder, sleep=lambda _: None)
    for i in range(5):
        put_raw_intake(client, "gig", f"u{i}")
    sweeper = Sweeper(store, owner="s", min_age_s=0)
    sweeper.chunk = 2
    assert sweeper.sweep("chunks").re_emitted == 5
    assert recorder.sizes("transact_write_items", "TransactItems") == [3, 3, 2]


#: The re-emission tests below find nothing (they hand the ledger its keys): one way of
#: finding is enough, the one whose records carry no marker before their re-emission.
ONE_SWEEP_PATH = pytest.mark.parametrize("sweep_path", ["full-scan"], indirect=True)


@ONE_SWEEP_PATH
def test_re_emission_is_batched_and_skips_records_that_vanished(fenced, store, client):
    # A full transaction of 99 records, then one of 6 and a record that vanished: that one
    # is cancelled and re-emitted a record at a time, the vanished one skipped.
    for i in range(105):
        put_raw_intake(client, "gig", f"u{i}")
    token = fenced.acquire_lease("s", 60, now=1000.0)
    assert token is not None
    keys = [("gig", f"u{i}") for i in range(105)] + [("gig", "never-written")]
    assert fenced.fenced_re_emit_many("s", token, 1001.0, keys) == 105
    assert all(int(store.get_intake("gig", f"u{i}")["redrive"]) == 1 for i in (0, 98, 99, 104))


# -- aging: no clock a producer writes hides a record ------------------------------------


@pytest.mark.parametrize(
    ("label", "attrs", "found"),
    [
        ("no submitted_at", {}, True),
        ("unparsable", {"submitted_at": {"S": "last tuesday"}}, True),
        ("not a string", {"submitted_at": {"N": "1"}}, True),
        ("far future", {"submitted_at": {"S": "9999-01-01T00:00:00Z"}}, True),
        ("an hour ahead", {"submitted_at": {"S": "2027-01-15T09:00:00Z"}}, True),
        ("naive and old", {"submitted_at": {"S": "2027-01-15T07:00:00"}}, True),
        ("naive and young", {"submitted_at": {"S": "2027-01-15T07:59:00"}}, False),
        ("young", {"submitted_at": {"S": "2027-01-15T07:59:00Z"}}, False),
        # redriven_at is the sweeper's own "re-emitted, wait" guard; junk in it is no guard
        ("re-emitted just now", {"redriven_at": {"N": "1800000000"}}, False),
        ("redriven_at junk", {"redriven_at": {"S": "soon"}}, True),
        ("redriven_at in the future", {"redriven_at": {"N": "99999999999"}}, True),
        ("redriven_at not finite", {"redriven_at": {"N": "1E+125"}}, True),
        # the bounds: exactly the minimum age is old enough, whichever clock says it
        ("exactly the minimum age", {"submitted_at": {"S": "2027-01-15T07:55:00Z"}}, True),
        ("re-emitted exactly the minimum age ago", {"redriven_at": {"N": "1799999700"}}, True),
        # a re-emission a clock's skew ahead is "just now"; further ahead, no guard
        ("re-emitted within the skew ahead", {"redriven_at": {"N": "1800000060"}}, False),
        ("re-emitted past the skew ahead", {"redriven_at": {"N": "1800000061"}}, True),
    ],
)
def test_find_undecided_counts_unknown_and_future_ages_as_old(
    store, client, sweep_path, label, attrs, found
):
    # GIVEN an undecided record; the sweeper's clock reads 2027-01-15T08:00:00Z
    now = 1_800_000_000.0
    put_raw_intake(client, "gig", "u1", **attrs)
    # WHEN the sweeper looks for records undecided over 5 minutes (in the index, whose
    # entries carry just the attributes it projects, or in the table)
    index = sweep_path == "index"
    got = [u.signup_id for u in find_undecided(store, 300.0, now=now, from_index=index)]
    # THEN only a record known to be young, or just re-emitted, is left to wait
    assert got == (["u1"] if found else []), label




@ONE_SWEEP_PATH
def test_re_emission_fills_each_transaction_to_the_limit(client):
    # GIVEN 198 undecided records: exactly two transactions of 99 records and a lease check
    recorder = CallRecorder(client)
    store = SignupStore(recorder, sleep=lambda _: None)
    ledger = Ledger.beside(store)
    for i in range(198):
        put_raw_intake(client, "gig", f"u{i:03d}")
    token = ledger.acquire_lease("s", 60, now=1000.0)
    assert token is not None
    keys = [("gig", f"u{i:03d}") for i in range(198)]
    assert ledger.fenced_re_emit_many("s", token, 1001.0, keys) == 198
    assert recorder.sizes("transact_write_items", "TransactItems") == [100, 100]


def test_a_vanished_record_at_the_lease_s_last_instant_is_not_a_lost_lease(client):
    # Where the cancellation names no item, the store reads the lease: at its last instant
    # it is still ours, so the record alone is skipped.
    store = SignupStore(WithoutCancellationReasons(client), sleep=lambda _: None)
    ledger = Ledger.beside(store)
    put_raw_intake(client, "gig", "u1")
    token = ledger.acquire_lease("s", 60, now=1000.0)
    assert token is not None
    keys = [("gig", "u1"), ("gig", "never-written")]
    assert ledger.fenced_re_emit_many("s", token, 1060.0, keys) == 1


def test_a_cancellation_that_names_its_item_needs_no_read_of_the_lease(client):
    recorder = CallRecorder(client)
    store = SignupStore(recorder, sleep=lambda _: None)
    ledger = Ledger.beside(store)
    put_raw_intake(client, "gig", "u1")
    token = ledger.acquire_lease("s", 60, now=1000.0)
    assert token is not None
    keys = [("gig", "u1"), ("gig", "never-written")]
    assert ledger.fenced_re_emit_many("s", token, 1001.0, keys) == 1
    assert [op for op, _ in recorder.calls if op.startswith(("get_", "query", "scan"))] == []


def test_a_sweep_judges_age_by_its_own_clock(store, client):
    # GIVEN a record submitted ten seconds before the sweeper's clock reads
    put_raw_intake(client, "gig", "u1", submitted_at={"S": "2026-01-01T00:00:00Z"})
    clock = Clock(datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC).timestamp())
    # THEN it is too young to re-emit, whatever the wall clock says
    result = Sweeper(store, owner="s", min_age_s=300, clock=clock).sweep("young")
    assert (result.status, result.undecided) == ("succeeded", 0)
    clock.t += 300
    assert Sweeper(store, owner="s", min_age_s=300, clock=clock).sweep("old").undecided == 1


def test_a_record_whose_counter_is_text_is_re_emitted_in_one_transaction(client):
    # GIVEN an undecided record whose producer wrote ``redrive`` as text (ADD refuses it)
    put_raw_intake(client, "gig", "odd", redrive={"S": "x"})
    recorder = CallRecorder(client)
    store = SignupStore(recorder, sleep=lambda _: None)
    # WHEN a sweep re-emits it
    result = Sweeper(store, owner="s", min_age_s=0).sweep("odd")
    # THEN it is re-emitted by its redriven_at alone, in one transaction with the lease
    # check: the sweep knew the counter for text, so no ADD was tried and refused first
    assert (result.status, result.undecided, result.re_emitted) == ("succeeded", 1, 1)
    assert recorder.sizes("transact_write_items", "TransactItems") == [2]
    record = store.get_intake("gig", "odd")
    assert record["redrive"] == "x" and record["redriven_at"] > 0


@pytest.mark.parametrize(("junk", "sizes"), [(99, [100]), (100, [100, 2])])
def test_records_known_to_have_a_text_counter_fill_transactions_of_their_own(
    client, junk, sizes
):
    # GIVEN records whose ``redrive`` a producer wrote as text, known as such, and two plain
    for i in range(junk):
        put_raw_intake(client, "gig", f"j{i:03d}", redrive={"S": "x"})
    put_raw_intake(client, "gig", "p0")
    put_raw_intake(client, "gig", "p1")
    recorder = CallRecorder(client)
    store = SignupStore(recorder, sleep=lambda _: None)
    ledger = Ledger.beside(store)
    token = ledger.acquire_lease("s", 60, now=1000.0)
    assert token is not None
    odd = [("gig", f"j{i:03d}") for i in range(junk)]
    keys = [("gig", "p0"), *odd, ("gig", "p1")]
    # WHEN they are re-emitted together
    done = ledger.fenced_re_emit_many("s", token, 1001.0, keys, junk_counters=set(odd))
    # THEN all are, the plain ones in one transaction, the others by their redriven_at
    # alone, 99 and a lease check per transaction, none tried with ADD first
    assert done == junk + 2
    assert recorder.sizes("transact_write_items", "TransactItems") == [3, *sizes]
    assert int(store.get_intake("gig", "p0")["redrive"]) == 1
    odd_one = store.get_intake("gig", f"j{junk - 1:03d}")
    assert odd_one["redrive"] == "x" and odd_one["redriven_at"] == 1001.0


@pytest.mark.parametrize("answer", ["moto", "dynamodb"])
def test_a_text_counter_nobody_knew_of_is_found_and_re_emitted_by_its_time_alone(
    client, answer
):
    # GIVEN two plain records, one whose ``redrive`` a producer wrote as text (the caller
    # does not know it) and one that vanished; the refused ADD answered as moto answers it
    # (ValidationException) or as DynamoDB does (cancelled, ValidationError at that item)
    put_raw_intake(client, "gig", "p0")
    put_raw_intake(client, "gig", "odd", redrive={"S": "x"})
    put_raw_intake(client, "gig", "p1")
    recorder = CallRecorder(client if answer == "moto" else CancelledLikeDynamoDB(client))
    store = SignupStore(recorder, sleep=lambda _: None)
    ledger = Ledger.beside(store)
    token = ledger.acquire_lease("s", 60, now=1000.0)
    assert token is not None
    keys = [("gig", "p0"), ("gig", "odd"), ("gig", "gone"), ("gig", "p1")]
    # WHEN they are re-emitted together
    done = ledger.fenced_re_emit_many("s", token, 1001.0, keys)
    # THEN the three records are: the chunk was refused, then each record went alone; the
    # text counter once more by its redriven_at alone; the vanished record was tried once
    assert done == 3
    assert recorder.sizes("transact_write_items", "TransactItems") == [5, 2, 2, 2, 2, 2]
    assert [int(store.get_intake("gig", s)["redrive"]) for s in ("p0", "p1")] == [1, 1]
    odd = store.get_intake("gig", "odd")
    assert (odd["redrive"], odd["redriven_at"]) == ("x", 1001.0)
    assert store.get_intake("gig", "gone") is None


def test_known_text_counters_beside_a_vanished_record_are_never_tried_with_add(client):
    # GIVEN two records known to have a text counter, and a third known so that vanished
    put_raw_intake(client, "gig", "odd0", redrive={"S": "x"})
    put_raw_intake(client, "gig", "odd1", redrive={"S": "x"})
    recorder = CallRecorder(client)
    store = SignupStore(recorder, sleep=lambda _: None)
    ledger = Ledger.beside(store)
    token = ledger.acquire_lease("s", 60, now=1000.0)
    assert token is not None
    keys = [("gig", "odd0"), ("gig", "gone"), ("gig", "odd1")]
    # WHEN they are re-emitted: the chunk is cancelled by the vanished record
    done = ledger.fenced_re_emit_many("s", token, 1001.0, keys, junk_counters=set(keys))
    # THEN each record then goes alone, still by its redriven_at alone: one call each
    assert done == 2
    assert recorder.sizes("transact_write_items", "TransactItems") == [4, 2, 2, 2]
    updates = [
        item["Update"]["UpdateExpression"]
        for op, kwargs in recorder.calls
        if op == "transact_write_items"
        for item in kwargs["TransactItems"]
        if "Update" in item
    ]
    assert not [u for u in updates if "ADD" in u]


@pytest.mark.parametrize(
    ("label", "redriven_ago", "found"),
    [
        ("re-emitted half a second ago", 0.5, False),
        ("re-emitted a second ago", 1.0, True),
        ("re-emitted a second ahead", -1.0, False),
    ],
)
def test_a_re_emission_guards_for_exactly_the_minimum_age(
    store, client, sweep_path, label, redriven_ago, found
):
    # GIVEN an undecided record the sweeper re-emitted ``redriven_ago`` seconds ago
    now = 1_800_000_000.0
    put_raw_intake(client, "gig", "u1", redriven_at={"N": repr(now - redriven_ago)})
    # WHEN a sweeper whose minimum age is one second looks for undecided records
    index = sweep_path == "index"
    got = [u.signup_id for u in find_undecided(store, 1.0, now=now, from_index=index)]
    # THEN it waits exactly one second (a re-emission ahead of the clock is "just now")
    assert got == (["u1"] if found else []), label


def test_a_recent_re_emission_or_a_young_record_does_not_hide_the_ones_after_it(
    store, client, sweep_path
):
    # GIVEN, in read order, a record re-emitted just now, a young one, then an old one
    now = 1_800_000_000.0
    put_raw_intake(client, "gig", "u1", redriven_at={"N": repr(now)})
    put_raw_intake(client, "gig", "u2", submitted_at={"S": "2027-01-15T07:59:59Z"})
    put_raw_intake(client, "gig", "u3", submitted_at={"S": "2027-01-15T07:00:00Z"})
    # WHEN the sweeper looks for records undecided over 5 minutes
    index = sweep_path == "index"
    found = list(find_undecided(store, 300.0, now=now, from_index=index))
    # THEN the old one is found, with its age
    assert [(u.signup_id, u.age_s) for u in found] == [("u3", 3600.0)]


def test_by_default_the_whole_table_is_read(store, client):
    # GIVEN an undecided record whose producer left the ``undecided`` marker out
    put_raw_intake(client, "gig", "u1", marked=False)
    # THEN the default read (the whole table, not the index of marked records) finds it
    assert [u.signup_id for u in find_undecided(store, 0.0)] == ["u1"]


def test_ages_are_judged_in_utc_whatever_the_machine_s_time_zone(store, client, monkeypatch):
    # GIVEN a machine whose local time is nine hours ahead of UTC, and a record submitted
    # ten seconds before the sweeper's clock reads (in UTC)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        now = 1_800_000_000.0
        put_raw_intake(client, "gig", "u1", submitted_at={"S": "2027-01-15T07:59:50Z"})
        # THEN it is ten seconds old, too young to re-emit
        assert list(find_undecided(store, 300.0, now=now)) == []
        assert [u.age_s for u in find_undecided(store, 0.0, now=now)] == [10.0]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_the_index_is_read_through_the_ledger_a_sweep_is_given(store, client, sweep_path):
    # GIVEN a marked, undecided record and a ledger of the sweeper's own (on a client that
    # records its calls), not the one a store would give it by default
    put_raw_intake(client, "gig", "u1", marked=True)
    recorder = CallRecorder(client)
    ledger = Ledger(recorder, sleep=lambda _: None)
    # WHEN the index of undecided records is read, alone or by a sweep
    found = [u.signup_id for u in find_undecided(store, 0.0, from_index=True, ledger=ledger)]
    Sweeper(store, owner="s", min_age_s=0, ledger=ledger).sweep("own")
    # THEN both read it through that ledger (the sweep when its run reads the index)
    index_reads = [kw for op, kw in recorder.calls if op == "scan" and "IndexName" in kw]
    assert found == ["u1"]
    assert len(index_reads) == (2 if sweep_path == "index" else 1)

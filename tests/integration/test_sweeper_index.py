"""The sweeper's two ways of finding undecided records: the sparse ``undecided`` index every
run, and the full scan of intake as the backstop for records written without the marker."""

from __future__ import annotations

import math
from dataclasses import replace
from decimal import Decimal

import pytest

from tests.helpers import CallRecorder, put_raw_intake
from turnstile.base.contract import STREAM_SOURCE, Attr, undecided_shard
from turnstile.jobs.sweeper import Sweeper, find_undecided
from turnstile.storage.items import Decision, Outcome
from turnstile.storage.ledger import Ledger
from turnstile.storage.store import SignupStore
from turnstile_tools.local.poller import matches_filter

NOW = "2026-01-01T00:00:00.000000Z"
OLD = {"submitted_at": {"S": "2026-01-01T00:00:00Z"}}
DAY = 86_400.0


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def ledger(store):
    return Ledger.beside(store)


def decide(store: SignupStore, event_id: str, signup_id: str) -> None:
    """A decision item, as the processor materializes one."""
    decision = Decision(signup_id, "1", "REJECTED", 1, reason="unknown_event")
    item = store.decision_item(event_id, decision, NOW, None)
    store.client.put_item(TableName=store.main_table, Item=item)


def found(store: SignupStore, from_index: bool) -> set[str]:
    return {u.signup_id for u in find_undecided(store, 0, from_index=from_index)}


def test_the_index_holds_marked_records_only_and_the_full_scan_finds_the_rest(store, client):
    # GIVEN a record with the marker, and one whose producer left it out
    put_raw_intake(client, "gig", "marked", marked=True)
    put_raw_intake(client, "gig", "unmarked", marked=False)
    # THEN the index finds only the first; the full scan finds both
    assert found(store, from_index=True) == {"marked"}
    assert found(store, from_index=False) == {"marked", "unmarked"}


def test_a_record_without_the_marker_is_found_by_the_daily_full_scan_then_by_the_index(
    store, client
):
    # GIVEN a sweeper that scanned intake fully a moment ago (nothing there then)
    clock = Clock()
    sweeper = Sweeper(store, owner="s", min_age_s=0, clock=clock)
    assert sweeper.sweep("r0").full_scan is True  # none recorded yet: the first run scans
    # WHEN a producer writes a record without the marker
    put_raw_intake(client, "gig", "u1", marked=False)
    # THEN runs within a day read the index and do not see it
    clock.t += DAY - 1
    assert (sweeper.sweep("r1").full_scan, sweeper.sweep("r1b").undecided) == (False, 0)
    # and the first run a day after the last full scan reads intake whole and re-emits it
    clock.t += 1
    result = sweeper.sweep("r2")
    assert (result.full_scan, result.undecided, result.re_emitted) == (True, 1, 1)
    # ... marking it: from now on the index finds it, until it is decided
    assert store.get_intake("gig", "u1")[Attr.UNDECIDED] == undecided_shard("gig", "u1")
    clock.t += 1
    result = sweeper.sweep("r3")
    assert (result.full_scan, result.undecided, result.re_emitted) == (False, 1, 1)


@pytest.mark.parametrize(
    ("last", "due"),
    [
        (None, True),  # never scanned
        (-DAY - 1, True),
        (-DAY, True),
        (-DAY + 1, False),
        (+3600, True),  # in the future: no guard
    ],
)
def test_a_full_scan_is_due_a_day_after_the_last_one(store, ledger, last, due):
    now = 1_800_000_000.0
    token = ledger.acquire_lease("s", 60, now)
    assert token is not None
    if last is not None:
        assert ledger.note_full_scan("s", token, now + last)
    assert Sweeper(store, owner="s").full_scan_due(now) is due


def test_full_scan_every_zero_scans_every_run_and_infinity_never(store):
    assert Sweeper(store, full_scan_every_s=0).full_scan_due(1.0) is True
    assert Sweeper(store, full_scan_every_s=math.inf).full_scan_due(1.0) is False


def test_a_full_scan_that_left_records_for_later_is_not_recorded(store, client):
    # GIVEN three unmarked records and a run that may re-emit only two
    for i in range(3):
        put_raw_intake(client, "gig", f"u{i}", marked=False)
    clock = Clock()
    first = Sweeper(store, owner="s", min_age_s=0, max_re_emits=2, clock=clock).sweep("r1")
    assert (first.full_scan, first.undecided, first.re_emitted) == (True, 3, 2)
    # THEN the next run scans intake whole again: the third has no marker yet
    clock.t += 1
    second = Sweeper(store, owner="s", min_age_s=0, clock=clock).sweep("r2")
    assert (second.full_scan, second.re_emitted) == (True, 3)
    # and once all were re-emitted, the scan is recorded and the index suffices
    clock.t += 1
    assert Sweeper(store, owner="s", min_age_s=0, clock=clock).sweep("r3").full_scan is False


def test_a_run_removes_the_marker_of_decided_records_once(client):
    recorder = CallRecorder(client)
    store = SignupStore(recorder, sleep=lambda _: None)
    # GIVEN decided records, one marked and one not, and an undecided marked one
    put_raw_intake(client, "gig", "done-marked", marked=True, **OLD)
    put_raw_intake(client, "gig", "done-plain", marked=False, **OLD)
    put_raw_intake(client, "gig", "open", marked=True, **OLD)
    decide(store, "gig", "done-marked")
    decide(store, "gig", "done-plain")
    sweeper = Sweeper(store, owner="s", min_age_s=300, full_scan_every_s=0)
    # WHEN a run (a full scan: it sees every record) finds them
    result = sweeper.sweep("r1")
    # THEN only the decided record that carried the marker is updated, and the marker goes
    assert (result.undecided, result.unmarked) == (1, 1)
    unmarks = [kw for op, kw in recorder.calls if op == "update_item" and "REMOVE" in str(kw)]
    assert [kw["Key"]["signup_id"]["S"] for kw in unmarks] == ["done-marked"]
    assert Attr.UNDECIDED not in store.get_intake("gig", "done-marked")
    assert Attr.UNDECIDED in store.get_intake("gig", "open")
    # and a later run has nothing left to unmark
    assert sweeper.sweep("r2").unmarked == 0


def test_removing_a_marker_never_creates_a_record(store, ledger, client):
    # GIVEN a decided record that a producer deleted after the sweeper read it
    put_raw_intake(client, "gig", "gone", marked=True)
    put_raw_intake(client, "gig", "plain", marked=False)
    # WHEN the sweeper removes the markers THEN only records that carry one are touched
    keys = [("gig", "gone"), ("gig", "plain"), ("gig", "never")]
    assert ledger.clear_undecided(dict.fromkeys(keys, 0)) == 1
    assert store.get_intake("gig", "never") is None
    assert store.get_intake("gig", "plain") == {"event_id": "gig", "signup_id": "plain"}


def test_a_decision_only_in_the_journal_keeps_the_marker(store, client):
    # A commit whose decision items are not written yet: the record counts as decided (not
    # re-emitted) but keeps its marker until its decision item exists.
    store.create_event("gig", 5, NOW)
    put_raw_intake(client, "gig", "u1", marked=True, **OLD)
    expected = store.get_event("gig").event
    decision = Decision("u1", "1", "ACCEPTED", 1, position=1)
    outcome = Outcome((decision,), replace(expected, taken=1, accepted=1))
    store.commit(expected, outcome, NOW, {})
    marked: dict[tuple[str, str], Decimal] = {}
    assert list(find_undecided(store, 0, from_index=True, decided_marked=marked)) == []
    assert marked == {}


def test_put_intake_writes_no_marker_and_returns_none_of_a_later_one(store, ledger):
    # A first put costs no index entry (nor its later removal): three write units a signup.
    record, created = store.put_intake("gig", "u1", 1, None, NOW)
    assert created and Attr.UNDECIDED not in record
    assert Attr.UNDECIDED not in store.get_intake("gig", "u1")
    assert list(ledger.undecided_marked()) == []
    # Re-emitted, it is marked; the same body again still answers without the marker.
    assert store.re_emit("gig", "u1")
    assert store.get_intake("gig", "u1")[Attr.UNDECIDED] == undecided_shard("gig", "u1")
    again, created = store.put_intake("gig", "u1", 1, None, NOW)
    assert not created and Attr.UNDECIDED not in again


def test_markers_spread_over_sixteen_shards():
    shards = {undecided_shard("gig", f"user-{i}") for i in range(1000)}
    assert shards == {format(i, "x") for i in range(16)}


def test_every_re_emission_marks_the_record(store, ledger, client):
    put_raw_intake(client, "gig", "a", marked=False)
    put_raw_intake(client, "gig", "b", marked=False)
    put_raw_intake(client, "gig", "c", marked=False, redrive={"S": "junk"})
    assert store.re_emit("gig", "a")
    token = ledger.acquire_lease("s", 60, 1000.0)
    assert token is not None
    assert ledger.fenced_re_emit_many("s", token, 1001.0, [("gig", "b"), ("gig", "c")]) == 2
    for signup_id in "abc":
        marker = store.get_intake("gig", signup_id)[Attr.UNDECIDED]
        assert marker == undecided_shard("gig", signup_id), signup_id


def _stream_record(event_name: str, image: dict[str, object]) -> dict[str, object]:
    return {"eventName": event_name, "dynamodb": {"NewImage": image}}


@pytest.mark.parametrize(
    ("event_name", "image", "passes"),
    [
        ("INSERT", {}, True),  # a new record, marker or not
        ("INSERT", {"undecided": {"S": "3"}}, True),
        ("MODIFY", {"undecided": {"S": "3"}, "redrive": {"N": "1"}}, True),  # a re-emission
        ("MODIFY", {"redrive": {"N": "1"}}, False),  # the marker's removal, or a rewrite
        ("REMOVE", {}, True),  # TTL or a delete: noted (its record may be put again)
    ],
)
def test_the_stream_filter_passes_new_re_emitted_and_removed_records_only(
    event_name, image, passes
):
    record = _stream_record(event_name, image)
    assert any(matches_filter(p, record) for p in STREAM_SOURCE.filter_patterns) is passes


class OnePerPage:
    """Wraps a boto3 client: every Scan returns one item per page, as a big index does."""

    def __init__(self, client) -> None:
        self._client = client

    def __getattr__(self, name: str):
        attr = getattr(self._client, name)
        return (lambda **kwargs: attr(**kwargs, Limit=1)) if name == "scan" else attr


def test_the_index_is_read_whole_page_by_page(client):
    for i in range(4):
        put_raw_intake(client, "gig", f"m{i}", marked=True, **OLD)
    put_raw_intake(client, "gig", "plain", marked=False)
    store = SignupStore(OnePerPage(client), sleep=lambda _: None)
    ledger = Ledger.beside(store)
    entries = list(ledger.undecided_marked())
    assert sorted(e["signup_id"] for e in entries) == ["m0", "m1", "m2", "m3"]
    assert {e["submitted_at"] for e in entries} == {"2026-01-01T00:00:00Z"}
    assert found(store, from_index=True) == {"m0", "m1", "m2", "m3"}


@pytest.mark.parametrize("workers", [1, 8])
def test_removing_many_markers_counts_those_that_carried_one(store, ledger, client, workers):
    keys = [("gig", f"u{i}") for i in range(10)]
    for i, (_, signup_id) in enumerate(keys):
        put_raw_intake(client, "gig", signup_id, marked=i % 2 == 0)
    assert ledger.clear_undecided(dict.fromkeys(keys, 0), workers=workers) == 5
    assert all(Attr.UNDECIDED not in store.get_intake(*k) for k in keys)
    assert ledger.clear_undecided(dict.fromkeys(keys, 0), workers=workers) == 0
    assert ledger.clear_undecided({}, workers=workers) == 0


def test_a_full_scan_is_recorded_only_by_the_lease_holder_with_its_token(store, ledger):
    token = ledger.acquire_lease("s", 60, 1000.0)
    assert token is not None
    assert ledger.note_full_scan("other", token, 1001.0) is False
    assert ledger.note_full_scan("s", token + 1, 1001.0) is False
    assert "full_scan_at" not in ledger.get_lease()
    assert ledger.note_full_scan("s", token, 1001.5) is True
    assert ledger.get_lease()["full_scan_at"] == 1001.5


def test_each_decided_record_is_unmarked_once(client):
    recorder = CallRecorder(client)
    store = SignupStore(recorder, sleep=lambda _: None)
    for i in range(3):
        put_raw_intake(client, "gig", f"d{i}", marked=True, **OLD)
        decide(store, "gig", f"d{i}")
    result = Sweeper(store, owner="s", min_age_s=300, full_scan_every_s=0).sweep("r1")
    assert result.unmarked == 3
    unmarks = [kw for op, kw in recorder.calls if op == "update_item" and "REMOVE" in str(kw)]
    assert sorted(kw["Key"]["signup_id"]["S"] for kw in unmarks) == ["d0", "d1", "d2"]


def test_a_run_removes_markers_up_to_the_last_instant_of_its_budget(store, client):
    put_raw_intake(client, "gig", "done", marked=True, **OLD)
    decide(store, "gig", "done")
    # a clock that stands still: the run is exactly at the end of a budget of 0 s
    sweeper = Sweeper(store, owner="s", min_age_s=300, max_run_s=0, clock=Clock())
    assert sweeper.sweep("r1").unmarked == 1


def test_a_full_scan_out_of_time_for_unmarking_is_still_recorded(client, ledger):
    # GIVEN a full scan that re-emits everything it found, and runs out of time while
    # reading decisions, before removing the markers of decided records
    clock = Clock()

    class SlowReads(SignupStore):
        def get_decisions(self, event_id, signup_ids):  # type: ignore[override]
            clock.t += 1000
            return super().get_decisions(event_id, signup_ids)

    store = SlowReads(client, sleep=lambda _: None)
    put_raw_intake(client, "gig", "done", marked=True, **OLD)
    decide(store, "gig", "done")
    result = Sweeper(store, owner="s", min_age_s=300, full_scan_every_s=0, clock=clock).sweep("r1")
    # THEN the marker is left for a later run, and the full scan is recorded all the same
    assert (result.full_scan, result.unmarked) == (True, 0)
    assert ledger.get_lease()["full_scan_at"] == Clock().t


def test_markers_are_removed_chunk_by_chunk_and_all_counted(store, client, monkeypatch):
    from turnstile.jobs import sweeper as sweeper_module

    monkeypatch.setattr(sweeper_module, "UNMARK_CHUNK", 2)
    for i in range(5):
        put_raw_intake(client, "gig", f"d{i}", marked=True, **OLD)
        decide(store, "gig", f"d{i}")
    result = Sweeper(store, owner="s", min_age_s=300, full_scan_every_s=0).sweep("r1")
    assert result.unmarked == 5
    assert all(Attr.UNDECIDED not in store.get_intake("gig", f"d{i}") for i in range(5))

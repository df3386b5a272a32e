"""``audit()`` over real tables (moto): what it reads, and what it leaves out."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from turnstile.base.clock import utc_now
from turnstile.engine.lifecycle import Event
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import Decision, Outcome
from turnstile.storage.ledger import Ledger
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit

NOW = "2026-01-01T00:00:00.000000Z"
LATER = datetime(2026, 1, 1, 0, 10, 0, tzinfo=UTC)  # 600 s after NOW


def accept(store: SignupStore, event_id: str, signup_id: str, seq: str, write_out: bool):
    """Commit one acceptance; write its decision item out, or leave it in the journal."""
    record = store.get_event(event_id)
    assert record is not None
    before = record.event
    decision = Decision(signup_id, seq, "ACCEPTED", 1, position=before.accepted + 1)
    after = Event(
        event_id,
        before.capacity,
        taken=before.taken + 1,
        accepted=before.accepted + 1,
        version=before.version,
    )
    journal = store.commit(before, Outcome((decision,), after), NOW, {})
    if write_out:
        store.materialize(event_id, journal, {signup_id: IntakeRecord(event_id, signup_id, seq)})


def test_audit_uses_the_current_time_by_default(store):
    store.create_event("gig", 5, NOW)
    store.put_intake("gig", "old", 1, None, NOW)  # long ago
    assert audit(store).events[0].violations != []


def test_audit_reads_every_event_and_only_events(store):
    # GIVEN an event with one decision written out and one still only in the journal
    store.create_event("gig", 5, NOW)
    for signup_id in ("a", "b", "late"):
        store.put_intake("gig", signup_id, 1, None, NOW)
    accept(store, "gig", "a", "100", write_out=True)
    accept(store, "gig", "b", "101", write_out=False)
    # an unknown event with a signup, and the sweeper's own items beside them
    store.put_intake("ghost", "x", 1, None, NOW)
    ledger = Ledger.beside(store)
    ledger.acquire_lease("sweeper", 60, now=1.0)
    ledger.start_run("run-1", NOW)
    # WHEN the tables are audited ten minutes later
    report = audit(store, now=LATER)
    # THEN both events are reported, the sweeper's items are not
    by_id = {e.event_id: e for e in report.events}
    assert sorted(by_id) == ["ghost", "gig"]
    gig = by_id["gig"]
    assert (gig.capacity, gig.taken, gig.status_counts, gig.unmaterialized) == (
        5,
        2,
        {"ACCEPTED": 1},
        1,
    )
    # b is decided (in the journal, written out 600 s ago: past the grace), "late" is
    # pending past the default grace of 300 s
    assert (gig.pending, gig.oldest_pending_s) == (1, 600.0)
    assert gig.violations == [
        "unmaterialized journal: 1 decisions of the last commit have no decision item for "
        "600 s (more than 300 s)",
        "1 of 1 pending past the 300 s grace (the oldest known for 600 s)",
    ]
    ghost = by_id["ghost"]
    assert (ghost.capacity, ghost.pending) == (None, 1)
    assert ghost.violations == ["1 of 1 pending past the 300 s grace (the oldest known for 600 s)"]
    assert report.totals == {
        "events": 2,
        "taken": 2,
        "status_counts": {"ACCEPTED": 1},
        "pending": 2,
        "parked": 0,
        "violations": 3,
        "inconclusive": 0,
    }
    assert not report.ok


def test_audit_of_one_event_reads_only_its_partition(store):
    store.create_event("gig", 5, NOW)
    store.create_event("other", 1, NOW)
    store.put_intake("other", "x", 1, None, NOW)
    report = audit(store, "gig", pending_grace_s=0, now=LATER)
    assert [(e.event_id, e.capacity, e.pending) for e in report.events] == [("gig", 5, 0)]
    assert report.ok


def test_an_event_with_no_signup_yet_is_audited_with_the_rest(store):
    # GIVEN an event with nothing but its event item, beside one with signups
    store.create_event("quiet", 3, NOW)
    store.create_event("gig", 5, NOW)
    store.put_intake("gig", "a", 1, None, NOW)
    accept(store, "gig", "a", "100", write_out=True)
    # WHEN every event is audited THEN the quiet one is too
    report = audit(store, now=LATER)
    assert [(e.event_id, e.capacity, e.taken) for e in report.events] == [
        ("gig", 5, 1),
        ("quiet", 3, 0),
    ]
    assert report.ok


@pytest.fixture
def machine_far_east_of_utc(monkeypatch):
    """The machine's local time zone 14 hours ahead of UTC (a POSIX rule: no tz data)."""
    monkeypatch.setenv("TZ", "XST-14")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_default_time_is_utc_whatever_the_machine_s_zone(store, machine_far_east_of_utc):
    # GIVEN a signup submitted just now, by the one clock turnstile writes (UTC)
    store.create_event("gig", 5, NOW)
    store.put_intake("gig", "a", 1, None, utc_now())
    # WHEN audited at the current time THEN it is pending within an hour's grace: its age is
    # not the machine's 14 hours of offset
    [gig] = audit(store, "gig", pending_grace_s=3600).events
    assert (gig.pending, gig.violations) == (1, [])


def test_a_decision_of_the_last_commit_gone_past_its_retention_is_no_lost_write(store):
    """TTL deletes the decisions of an event's last commit once their retention passed:
    the audit must not take that for a commit never written out."""
    store.create_event("gig", 5, NOW)
    record = store.get_event("gig")
    assert record is not None
    decision = Decision("late", "100", "REJECTED", 1, reason="invalid_request")
    expires_at = int(LATER.timestamp())  # retention ends ten minutes after the decision
    journal = store.commit(
        record.event, Outcome((decision,), record.event), NOW, {}, expires_at=expires_at
    )
    store.materialize("gig", journal, {"late": IntakeRecord("gig", "late", "100")})
    # WHEN TTL deletes the decision (its intake record is long gone)
    store.client.delete_item(
        TableName=store.main_table,
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "late"}},
    )
    # THEN past the retention nothing is missing; before it, the missing item is a violation
    after = datetime.fromtimestamp(expires_at + 1, tz=UTC)
    assert audit(store, now=after).events[0].violations == []
    before = datetime.fromtimestamp(expires_at - 1, tz=UTC)
    assert audit(store, now=before).events[0].unmaterialized == 1

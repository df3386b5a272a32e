"""``audit()`` over real tables (moto): what it reads, and what it leaves out."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from turnstile.audit import audit
from turnstile.domain import Decision, EventSnapshot, Outcome, SignupRequest
from turnstile.store import SignupStore

NOW = "2026-01-01T00:00:00.000000Z"
LATER = datetime(2026, 1, 1, 0, 10, 0, tzinfo=UTC)  # 600 s after NOW


@pytest.fixture
def store(aws):
    return SignupStore(aws.client("dynamodb"), sleep=lambda _: None)


def accept(store: SignupStore, event_id: str, signup_id: str, seq: str, write_out: bool):
    """Commit one acceptance; write its decision item out, or leave it in the journal."""
    record = store.get_event(event_id)
    assert record is not None
    before = record.snapshot
    decision = Decision(signup_id, seq, "ACCEPTED", 1, position=before.accepted + 1)
    after = EventSnapshot(
        event_id, before.capacity, before.taken + 1, before.accepted + 1, version=before.version
    )
    journal = store.commit(before, Outcome((decision,), after), NOW, {})
    if write_out:
        store.materialize(event_id, journal, {signup_id: SignupRequest(event_id, signup_id, seq)})


def test_audit_uses_the_current_time_by_default(store):
    store.create_event("gig", 5, NOW)
    store.put_intake("gig", "old", 1, None, NOW)  # long ago
    assert audit(store).events[0].violations != []

"""The store: error translation with botocore's Stubber, idempotent intake against moto."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from turnstile.domain import Decision, EventSnapshot, Outcome
from turnstile.errors import (
    CommitConflictError,
    EventExistsError,
    SignupConflictError,
    StoreUnavailableError,
)
from turnstile.store import Journal, SignupStore

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def stubbed():
    client = boto3.client("dynamodb", region_name="us-east-1")
    with Stubber(client) as stubber:
        yield SignupStore(client, sleep=lambda _: None, max_attempts=3), stubber
        stubber.assert_no_pending_responses()


def one_acceptance() -> tuple[EventSnapshot, Outcome]:
    before = EventSnapshot(event_id="e1", capacity=2, version=4)
    decision = Decision("s1", "100", "ACCEPTED", 1, position=1)
    return before, Outcome((decision,), EventSnapshot("e1", 2, taken=1, accepted=1, version=4))


def test_commit_conflict_becomes_a_domain_error(stubbed):
    store, stubber = stubbed
    stubber.add_client_error("update_item", service_error_code="ConditionalCheckFailedException")
    before, outcome = one_acceptance()
    with pytest.raises(CommitConflictError):
        store.commit(before, outcome, NOW)


def accept(snapshot: EventSnapshot, *seats: int) -> Outcome:
    """An outcome accepting these seats on top of ``snapshot`` (the engine is not the
    point here: these outcomes may also be ones the engine would never produce)."""
    decisions = tuple(
        Decision(f"s{snapshot.accepted + i}", str(100 + i), "ACCEPTED", n, position=i + 1)
        for i, n in enumerate(seats)
    )
    state = EventSnapshot(
        snapshot.event_id,
        snapshot.capacity,
        taken=snapshot.taken + sum(seats),
        accepted=snapshot.accepted + len(seats),
        version=snapshot.version,
    )
    return Outcome(decisions, state)


@pytest.fixture
def gig(aws):
    """A moto store with an event of capacity 3, and a reader of its committed state."""
    store = SignupStore(aws.client("dynamodb"))
    store.create_event("gig", 3, NOW)

    def snapshot() -> EventSnapshot:
        record = store.get_event("gig")
        assert record is not None
        return record.snapshot

    return store, snapshot


def test_a_commit_stores_counters_version_and_journal(gig):
    store, snapshot = gig
    outcome = accept(snapshot(), 1, 2)
    journal = store.commit(snapshot(), outcome, NOW)
    record = store.get_event("gig")
    assert record is not None
    assert record.snapshot == EventSnapshot("gig", 3, taken=3, accepted=2, version=1)
    assert record.journal == journal == Journal(1, NOW, outcome.decisions)


def test_a_commit_on_a_stale_version_is_refused_and_changes_nothing(gig):
    # GIVEN two processors that read version 0; the first commits
    store, snapshot = gig
    before = snapshot()
    store.commit(before, accept(before, 1), NOW)
    after_first = store.get_event("gig")
    # WHEN the second commits on the version it read THEN it conflicts, and nothing moved
    with pytest.raises(CommitConflictError):
        store.commit(before, accept(before, 2), "later")
    assert store.get_event("gig") == after_first


def test_a_commit_that_would_oversell_is_refused_even_on_the_right_version(gig):
    store, snapshot = gig
    before = snapshot()
    with pytest.raises(CommitConflictError):
        store.commit(before, accept(before, 2, 2), NOW)  # 4 seats of 3
    assert snapshot() == before
    # Exactly full is allowed.
    store.commit(before, accept(before, 2, 1), NOW)
    assert (snapshot().taken, snapshot().version) == (3, 1)


def test_throttling_is_retried_then_becomes_store_unavailable(stubbed):
    store, stubber = stubbed
    for _ in range(3):
        stubber.add_client_error("get_item", service_error_code="ThrottlingException")
    with pytest.raises(StoreUnavailableError):
        store.get_event("e1")
    assert store.retries == 2


def test_throttling_then_success(stubbed):
    store, stubber = stubbed
    stubber.add_client_error(
        "get_item", service_error_code="ProvisionedThroughputExceededException"
    )
    stubber.add_response("get_item", {})
    assert store.get_event("e1") is None
    assert store.retries == 1


def test_other_errors_are_not_retried(stubbed):
    store, stubber = stubbed
    stubber.add_client_error("get_item", service_error_code="ValidationException")
    with pytest.raises(Exception) as info:
        store.get_event("e1")
    assert "ValidationException" in str(info.value)
    assert store.retries == 0


def test_rejection_without_event_conflicts_when_the_event_appears(stubbed):
    store, stubber = stubbed
    stubber.add_client_error(
        "transact_write_items",
        service_error_code="TransactionCanceledException",
        response_meta={},
    )
    with pytest.raises(CommitConflictError):
        store.reject_without_event(
            "e1", [Decision("s1", "1", "REJECTED", 1, "unknown_event")], {}, NOW
        )


def test_journal_round_trips_and_is_compact():
    decisions = tuple(
        Decision(f"user-{i:06d}@example.com", str(10**21 + i), "ACCEPTED", 1, position=i + 1)
        for i in range(100)
    )
    journal = Journal(version=3, decided_at=NOW, decisions=decisions)
    blob = journal.encode()
    assert Journal.decode(blob) == journal
    # 100 decisions fit in a few KB: the commit stays a few write units per batch.
    assert len(blob) < 2500


def test_create_event_twice_is_an_error(aws):
    store = SignupStore(aws.client("dynamodb"))
    store.create_event("gig", 3, NOW)
    with pytest.raises(EventExistsError):
        store.create_event("gig", 5, NOW)


def test_intake_is_idempotent_per_body(aws):
    store = SignupStore(aws.client("dynamodb"))
    _, created = store.put_intake("gig", "u1", 2, {"name": "Ada", "n": 1.5}, NOW)
    assert created
    again, created_again = store.put_intake("gig", "u1", 2, {"name": "Ada", "n": 1.5}, "later")
    assert not created_again and again["submitted_at"] == NOW
    with pytest.raises(SignupConflictError):
        store.put_intake("gig", "u1", 3, {"name": "Ada", "n": 1.5}, NOW)

"""The store: error translation with botocore's Stubber, idempotent intake against moto."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import ANY, Stubber

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
        store.commit(before, outcome, NOW, {})


def test_commit_guards_on_version_and_capacity(stubbed):
    store, stubber = stubbed
    before, outcome = one_acceptance()
    stubber.add_response(
        "update_item",
        {},
        {
            "TableName": "turnstile-control",
            "Key": {"pk": {"S": "EVENT#e1"}, "sk": {"S": "EVENT"}},
            "UpdateExpression": ANY,
            "ConditionExpression": "#version = :expected AND #capacity >= :taken",
            "ExpressionAttributeNames": ANY,
            "ExpressionAttributeValues": {
                ":taken": {"N": "1"},
                ":accepted": {"N": "1"},
                ":next": {"N": "5"},
                ":expected": {"N": "4"},
                ":j": ANY,
            },
        },
    )
    journal = store.commit(before, outcome, NOW, {})
    assert journal.version == 5 and journal.decisions == outcome.decisions


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
    journal = Journal.build("e1", 3, NOW, decisions, {})
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

"""The store: error translation with botocore's Stubber, idempotent intake against moto."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import ANY, Stubber

from tests.helpers import CallRecorder
from turnstile.base.errors import (
    CommitConflictError,
    EventExistsError,
    JournalTooLargeError,
    SignupConflictError,
    StoreUnavailableError,
)
from turnstile.engine.lifecycle import Event
from turnstile.storage.dynamo import event_key
from turnstile.storage.events import EventRecord
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import MAX_DECISION_ITEM_BYTES, Decision, Outcome
from turnstile.storage.journal import Journal
from turnstile.storage.store import SignupStore

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture
def stubbed():
    client = boto3.client("dynamodb", region_name="us-east-1")
    with Stubber(client) as stubber:
        yield SignupStore(client, sleep=lambda _: None, max_attempts=3), stubber
        stubber.assert_no_pending_responses()


def one_acceptance() -> tuple[Event, Outcome]:
    before = Event(event_id="e1", capacity=2, version=4)
    decision = Decision("s1", "100", "ACCEPTED", 1, position=1)
    return before, Outcome((decision,), Event("e1", 2, taken=1, accepted=1, version=4))


def test_commit_conflict_becomes_a_domain_error(stubbed):
    store, stubber = stubbed
    stubber.add_client_error("update_item", service_error_code="ConditionalCheckFailedException")
    before, outcome = one_acceptance()
    with pytest.raises(CommitConflictError):
        store.commit(before, outcome, NOW, {})


def accept(snapshot: Event, *seats: int) -> Outcome:
    """An outcome accepting these seats on top of ``snapshot`` (the engine is not the
    point here: these outcomes may also be ones the engine would never produce)."""
    decisions = tuple(
        Decision(f"s{snapshot.accepted + i}", str(100 + i), "ACCEPTED", n, position=i + 1)
        for i, n in enumerate(seats)
    )
    state = Event(
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

    def snapshot() -> Event:
        record = store.get_event("gig")
        assert record is not None
        return record.event

    return store, snapshot


def test_a_commit_stores_counters_version_and_journal(gig):
    store, snapshot = gig
    outcome = accept(snapshot(), 1, 2)
    journal = store.commit(snapshot(), outcome, NOW, {})
    record = store.get_event("gig")
    assert record is not None
    assert record.event == Event("gig", 3, taken=3, accepted=2, version=1)
    # stored as it encodes: copied fields as their digests
    assert record.journal == Journal.decode(journal.encode())
    assert (journal.version, journal.decided_at, journal.decisions) == (1, NOW, outcome.decisions)


def test_a_commit_on_a_stale_version_is_refused_and_changes_nothing(gig):
    # GIVEN two processors that read version 0; the first commits
    store, snapshot = gig
    before = snapshot()
    store.commit(before, accept(before, 1), NOW, {})
    after_first = store.get_event("gig")
    # WHEN the second commits on the version it read THEN it conflicts, and nothing moved
    with pytest.raises(CommitConflictError) as conflict:
        store.commit(before, accept(before, 2), "later", {})
    assert str(conflict.value) == (
        "event 'gig' moved past version 0 (or its capacity or state changed)"
    )
    assert store.get_event("gig") == after_first


def test_a_commit_that_would_oversell_is_refused_even_on_the_right_version(gig):
    store, snapshot = gig
    before = snapshot()
    with pytest.raises(CommitConflictError):
        store.commit(before, accept(before, 2, 2), NOW, {})  # 4 seats of 3
    assert snapshot() == before
    # Exactly full is allowed.
    store.commit(before, accept(before, 2, 1), NOW, {})
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
    decisions += (Decision("bad", "7", "REJECTED", 0, "invalid_request", detail="seats"),)
    journal = Journal.build("e1", 3, NOW, decisions, {})
    blob = journal.encode()
    decoded = Journal.decode(blob)
    assert decoded.decisions == journal.decisions and decoded.digests == (None,) * 101
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


def test_rejections_of_an_unknown_event_carry_their_request(aws):
    store = SignupStore(aws.client("dynamodb"))
    request = IntakeRecord("nope", "u1", "5", 2, {"k": "v"}, "2026-01-01T00:00:00Z")
    rejection = Decision("u1", "5", "REJECTED", 2, "unknown_event")
    store.reject_without_event("nope", [rejection], {"u1": request}, NOW)
    item = store.get_decision("nope", "u1")
    assert item is not None
    assert (item["reason"], item["attributes"], item["submitted_at"], item["decided_at"]) == (
        "unknown_event",
        {"k": "v"},
        "2026-01-01T00:00:00Z",
        NOW,
    )


def test_rejections_of_an_unknown_event_fill_each_transaction_to_the_limit(aws):
    recorder = CallRecorder(aws.client("dynamodb"))
    store = SignupStore(recorder)
    rejections = [Decision(f"u{i}", str(i), "REJECTED", 1, "unknown_event") for i in range(100)]
    store.reject_without_event("nope", rejections, {}, NOW)
    # a ConditionCheck on the missing event item and 99 rejections, then the last one
    assert recorder.sizes("transact_write_items", "TransactItems") == [100, 2]
    assert len(store.get_decisions("nope", [f"u{i}" for i in range(100)])) == 100


def test_rejection_conflict_says_what_happened(stubbed):
    store, stubber = stubbed
    stubber.add_client_error(
        "transact_write_items", service_error_code="TransactionCanceledException"
    )
    with pytest.raises(CommitConflictError, match="'e1' appeared, or a signup was decided"):
        store.reject_without_event(
            "e1", [Decision("s1", "1", "REJECTED", 1, "unknown_event")], {}, NOW
        )


def unprocessed(store: SignupStore, journal: Journal) -> dict:
    """What DynamoDB hands back when it wrote none of the journal's items."""
    items = [store.decision_item("e1", d, journal.decided_at, None) for d in journal.decisions]
    return {"turnstile-main": [{"PutRequest": {"Item": i}} for i in items]}


def test_unprocessed_items_of_a_batch_write_are_written_again_until_none_is_left(stubbed):
    store, stubber = stubbed
    journal = Journal.build("gig", 1, NOW, (Decision("s1", "1", "ACCEPTED", 1, position=1),), {})
    left = unprocessed(store, journal)
    # Twice nothing written (within the store's 3 attempts), then everything.
    stubber.add_response("batch_write_item", {"UnprocessedItems": left}, {"RequestItems": ANY})
    stubber.add_response("batch_write_item", {"UnprocessedItems": left}, {"RequestItems": left})
    stubber.add_response("batch_write_item", {"UnprocessedItems": {}}, {"RequestItems": left})
    store.dynamo.put_all("turnstile-main", store.journal_items("e1", journal))
    assert store.retries == 2


def test_items_a_batch_write_never_writes_make_the_store_unavailable(stubbed):
    store, stubber = stubbed
    journal = Journal.build("gig", 1, NOW, (Decision("s1", "1", "ACCEPTED", 1, position=1),), {})
    left = unprocessed(store, journal)
    for _ in range(3):
        stubber.add_response("batch_write_item", {"UnprocessedItems": left})
    with pytest.raises(StoreUnavailableError, match="batch_write_item left unprocessed items"):
        store.dynamo.put_all("turnstile-main", store.journal_items("e1", journal))


def test_a_decision_item_write_is_conditional_and_a_false_condition_is_no_error(stubbed):
    """Materializing writes each first decision only where no item exists: an item that is
    there already (written before, or moved on since) is left as it is."""
    store, stubber = stubbed
    journal = Journal.build("gig", 1, NOW, (Decision("s1", "1", "ACCEPTED", 1, position=1),), {})
    [item] = store.journal_items("e1", journal)
    expected = {
        "TableName": "turnstile-main",
        "Item": item,
        "ConditionExpression": "attribute_not_exists(#sk)",
        "ExpressionAttributeNames": {"#sk": "signup_id"},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    stubber.add_client_error(
        "put_item",
        service_error_code="ProvisionedThroughputExceededException",
        expected_params=expected,
    )
    stubber.add_client_error(
        "put_item",
        service_error_code="ConditionalCheckFailedException",
        expected_params=expected,
    )
    assert store.materialize("e1", journal) == []  # the refusal names no item: not void
    assert store.retries == 1
    stubber.assert_no_pending_responses()


def test_an_event_item_reads_missing_counters_as_a_fresh_open_event():
    """A hand-written event item may carry only its capacity."""
    record = EventRecord.from_values({"event_id": "gig", "capacity": 3})
    assert record.event == Event("gig", 3, taken=0, accepted=0, state="OPEN", version=0)
    assert (record.created_at, record.journal) == (None, None)
    assert EventRecord.from_values({"event_id": "gig"}).event.capacity == 0
    full = EventRecord.from_values(
        {
            "event_id": "gig",
            "capacity": 9,
            "taken": 4,
            "accepted": 3,
            "state": "CLOSED",
            "version": 7,
            "created_at": NOW,
        }
    )
    assert full.event == Event("gig", 9, taken=4, accepted=3, state="CLOSED", version=7)
    assert full.created_at == NOW


def test_a_commit_bounds_each_decision_item_by_its_own_event_id_to_the_byte(aws):
    # GIVEN an event with a long id, and a request whose decision item would be one byte over
    from tests.unit.test_journal import LONG_EVENT, _item_at

    store = SignupStore(aws.client("dynamodb"))
    store.create_event(LONG_EVENT, 3, NOW)
    record = store.get_event(LONG_EVENT)
    assert record is not None
    before = record.event
    outcome = Outcome(
        (Decision("u1", "100", "ACCEPTED", 1, position=1),),
        Event(LONG_EVENT, 3, taken=1, accepted=1, version=0),
    )
    over = _item_at(MAX_DECISION_ITEM_BYTES + 1)
    # WHEN it is committed and materialized
    journal = store.commit(before, outcome, NOW, {"u1": over})
    store.materialize(LONG_EVENT, journal)
    # THEN the copies were dropped (counted with this event's id), in the journal and the item
    assert journal.copies == ({},)
    item = store.get_decision(LONG_EVENT, "u1")
    assert item is not None and "attributes" not in item and "submitted_at" not in item
    assert "item over 65536 bytes" in item["detail"]


def test_a_journal_of_exactly_the_bound_commits_and_one_byte_more_does_not(gig, monkeypatch):
    import turnstile.storage.store as store_module

    store, snapshot = gig
    before = snapshot()
    outcome = accept(before, 1, 1)
    blob = Journal.build("gig", 1, NOW, outcome.decisions, {}).encode()
    one = Journal.build("gig", 1, NOW, outcome.decisions[:1], {}).encode()
    # WHEN the bound is one byte under the journal THEN nothing is written, and it says why
    monkeypatch.setattr(store_module, "MAX_JOURNAL_BYTES", len(blob) - 1)
    with pytest.raises(JournalTooLargeError) as too_big:
        store.commit(before, outcome, NOW, {})
    assert str(too_big.value) == (
        f"event 'gig': a journal of 2 decisions is {len(blob)} bytes; 1 fit in {len(blob) - 1}"
    )
    assert too_big.value.fits == 1 and len(one) <= len(blob) - 1
    assert snapshot() == before
    # WHEN the bound is exactly its size THEN it commits
    monkeypatch.setattr(store_module, "MAX_JOURNAL_BYTES", len(blob))
    store.commit(before, outcome, NOW, {})
    assert snapshot().version == 1


def test_expires_at_is_fixed_by_the_commit_and_carried_to_every_item(gig):
    # GIVEN decisions committed with a TTL time (the retention of decision items)
    store, snapshot = gig
    before = snapshot()
    expires = 1_900_000_000
    journal = store.commit(before, accept(before, 1, 1), NOW, {}, expires)
    # THEN the stored journal keeps it (read back, decoded) ...
    record = store.get_event("gig")
    assert record is not None and record.journal is not None
    assert record.journal.expires_at == expires == journal.expires_at
    # ... and every item written from it carries it, as DynamoDB's TTL reads it: a number
    store.materialize("gig", record.journal)
    for signup_id in ("s0", "s1"):
        item = store.get_decision("gig", signup_id)
        assert item is not None and item["expires_at"] == expires
    # a journal without one writes items without one
    later = snapshot()
    bare = store.commit(later, accept(later, 1), NOW, {})
    assert bare.expires_at is None
    assert "expires_at" not in store.journal_items("gig", bare)[0]


def test_rejections_of_an_unknown_event_carry_their_expiry(aws):
    store = SignupStore(aws.client("dynamodb"))
    rejected = Decision("u1", "100", "REJECTED", 1, "unknown_event")
    store.reject_without_event("nope", [rejected], {}, NOW, 1_900_000_000)
    item = store.get_decision("nope", "u1")
    assert item is not None and item["expires_at"] == 1_900_000_000


@pytest.mark.parametrize(
    ("written", "seats"),
    [
        ({}, ()),  # no capacity (reads as 0), no state: only rejections to commit
        ({"capacity": {"N": "2"}}, (1,)),  # a capacity, no state (reads as OPEN)
    ],
)
def test_a_commit_on_an_event_item_written_by_hand_without_capacity_or_state(aws, written, seats):
    # GIVEN an event item written by other means than turnstile: no version, and no
    # capacity or no state, which read as 0 and OPEN
    client = aws.client("dynamodb")
    store = SignupStore(client)
    client.put_item(
        TableName=store.control_table,
        Item={**event_key("hand"), "event_id": {"S": "hand"}, **written},
    )
    record = store.get_event("hand")
    assert record is not None
    before = record.event
    assert before.state == "OPEN" and before.version == 0
    # WHEN a group is committed on what was read THEN the absent attributes match what
    # they read as, and it commits
    rejected = Decision("r1", "100", "REJECTED", 1, "capacity_full")
    outcome = accept(before, *seats) if seats else Outcome((rejected,), before)
    store.commit(before, outcome, NOW, {})
    after = store.get_event("hand")
    assert after is not None and after.event.version == 1
    assert after.event.taken == sum(seats)


def test_an_event_record_reads_who_created_it_only_as_text():
    base = {"event_id": "gig", "capacity": 5}
    assert EventRecord.from_values({**base, "created_by": "cli:ana"}).created_by == "cli:ana"
    assert EventRecord.from_values({**base, "created_by": 7}).created_by is None
    assert EventRecord.from_values(base).created_by is None

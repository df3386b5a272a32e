"""The stream processor on its own (moto store): what it reports, conflicts, the journal cache.

The stream handler's tests drive it through Lambda-shaped events; these pin what the
handler, the metrics and the local worker read from a ``BatchResult``, and how often the
processor writes a journal out (each write costs write units, never a decision).
"""

from __future__ import annotations

import logging
from decimal import Decimal

import pytest

from tests.helpers import CallRecorder
from turnstile.base.contract import Reason, Status, main_table_name
from turnstile.base.errors import CommitConflictError, JournalTooLargeError
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.store import SignupStore

NOW = "2026-01-01T00:00:00.000000Z"


def insert(event_id: str, signup_id: str, seq: int, seats: int = 1) -> StreamRecord:
    """A signup's record, its intake item long gone by TTL (a decision's retention then
    counts from the decision alone)."""
    keys = {"event_id": event_id, "signup_id": signup_id}
    image = {
        **keys,
        "seats": Decimal(seats),
        "submitted_at": "2026-01-01T00:00:00Z",
        "expires_at": Decimal(1),
    }
    return StreamRecord(str(seq), "INSERT", keys, image)


@pytest.fixture
def recorder(aws):
    return CallRecorder(aws.client("dynamodb"))


@pytest.fixture
def store(recorder):
    return SignupStore(recorder, sleep=lambda _: None)


def processor(store: SignupStore, **kwargs) -> StreamProcessor:
    return StreamProcessor(store, clock=lambda: NOW, **kwargs)


def test_results_name_their_event_time_and_request(store):
    store.create_event("gig", 1, NOW)
    result = processor(store).process([insert("gig", "a", 1), insert("nope", "b", 2)])
    got = [
        (d.event_id, d.decision.signup_id, d.decision.status, d.decided_at, d.submitted_at)
        for d in result.decided
    ]
    assert got == [
        ("gig", "a", Status.ACCEPTED, NOW, "2026-01-01T00:00:00Z"),
        ("nope", "b", Status.REJECTED, NOW, "2026-01-01T00:00:00Z"),
    ]
    # ... and the items carry the same decision time
    items = [store.get_decision("gig", "a"), store.get_decision("nope", "b")]
    assert [i["decided_at"] for i in items if i] == [NOW, NOW]


def test_a_record_without_an_image_is_rejected_by_its_keys(store):
    store.create_event("gig", 5, NOW)
    records = [
        StreamRecord("1", "MODIFY", {"event_id": "gig", "signup_id": "a"}, None),
        StreamRecord("2", "MODIFY", {"event_id": "gig", "signup_id": "-bad"}, None),
    ]
    result = processor(store).process(records)
    got = [
        (d.event_id, d.decision.signup_id, d.decision.reason, d.decision.detail)
        for d in result.decided
    ]
    assert got == [
        ("gig", "a", Reason.INVALID_REQUEST, "record has no new image"),
        (
            "gig",
            "-bad",
            Reason.INVALID_REQUEST,
            "signup_id must match ^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$; record has no new image",
        ),
    ]


def test_removals_are_counted_and_skipped_not_a_stop(store):
    store.create_event("gig", 5, NOW)
    removal = StreamRecord("1", "REMOVE", {"event_id": "gig", "signup_id": "old"})
    result = processor(store).process([removal, removal, insert("gig", "a", 3)])
    assert result.ignored == 2
    assert [d.decision.signup_id for d in result.decided] == ["a"]


def test_an_unknown_event_redelivered_decides_nothing_new(store):
    first = processor(store).process([insert("nope", "a", 1)])
    again = processor(store).process([insert("nope", "a", 1), insert("nope", "b", 2)])
    assert [d.decision.reason for d in first.decided] == [Reason.UNKNOWN_EVENT]
    assert ([d.decision.signup_id for d in again.decided], again.failures) == (["b"], [])


class ConflictingStore(SignupStore):
    """A store whose first ``conflicts`` commits lose to another processor."""

    def __init__(self, *args, conflicts: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.conflicts_left = conflicts

    def commit(self, expected, outcome, decided_at, requests, expires_at=None, **kwargs):
        if self.conflicts_left:
            self.conflicts_left -= 1
            raise CommitConflictError("another processor committed first")
        return super().commit(expected, outcome, decided_at, requests, expires_at, **kwargs)


def test_conflicts_are_counted_and_the_loser_decides_again(aws):
    store = ConflictingStore(aws.client("dynamodb"), conflicts=2)
    store.create_event("gig", 5, NOW)
    result = processor(store, max_conflicts=3).process([insert("gig", "a", 1)])
    assert (result.conflicts, result.failures) == (2, [])
    assert [d.decision.position for d in result.decided] == [1]


def test_a_conflict_storm_parks_the_group_and_says_so(aws, caplog):
    store = ConflictingStore(aws.client("dynamodb"), conflicts=10)
    store.create_event("gig", 5, NOW)
    with caplog.at_level(logging.ERROR, logger="turnstile.jobs.processor"):
        result = processor(store, max_conflicts=3).process([insert("gig", "a", 7)])
    # Nothing decided, nothing failed back: the event is parked with its record.
    assert (result.conflicts, result.failures, result.decided) == (3, [], [])
    assert [r.sequence_number for r in store.parked_records("gig")] == ["7"]
    [record] = caplog.records
    assert (record.getMessage(), record.event_id) == ("event group failed", "gig")
    assert "event 'gig': 3 conflicts in a row" in caplog.text


def writes(recorder: CallRecorder) -> int:
    """Writes of decision items: each is one conditional PutItem or UpdateItem."""
    return sum(
        1
        for op, kwargs in recorder.calls
        if op in ("put_item", "update_item") and kwargs["TableName"] == main_table_name()
    )


def test_each_journal_is_written_out_once_per_process(store, recorder):
    # GIVEN a processor that committed and wrote out journal 1
    store.create_event("gig", 5, NOW)
    warm = processor(store)
    warm.process([insert("gig", "a", 1)])
    assert writes(recorder) == 1
    # WHEN it decides more THEN it does not write journal 1 again: one write, journal 2's
    warm.process([insert("gig", "b", 2)])
    assert writes(recorder) == 2
    # A cold processor does not know journal 2 was written: it writes it once, then never
    cold = processor(store)
    cold.process([insert("gig", "b", 2)])  # a redelivery: nothing new to decide
    assert writes(recorder) == 3
    cold.process([insert("gig", "b", 2)])
    assert writes(recorder) == 3


def test_the_journal_cache_forgets_the_least_recently_used_event(store, recorder):
    p = processor(store, journal_cache_size=2)
    for event_id in ("A", "B", "C"):
        store.create_event(event_id, 5, NOW)
        p.process([insert(event_id, "a", 1)])
    before = writes(recorder)
    # A, the oldest, was forgotten (its journal is written again); C was not
    p.process([insert("A", "a", 1)])
    assert writes(recorder) == before + 1
    p.process([insert("C", "a", 1)])
    assert writes(recorder) == before + 1


def test_a_cache_of_one_remembers_one(store, recorder):
    store.create_event("gig", 5, NOW)
    p = processor(store, journal_cache_size=1)
    p.process([insert("gig", "a", 1)])
    p.process([insert("gig", "a", 1)])  # redelivered: journal 1 is known to be written
    assert writes(recorder) == 1


def test_a_journal_another_processor_left_unwritten_is_written_before_deciding(store):
    # GIVEN a warm processor that wrote out event A's journal 1
    store.create_event("A", 5, NOW)
    store.create_event("B", 5, NOW)
    warm = processor(store)
    warm.process([insert("A", "a", 1)])
    # and event B's journal 1, committed by a processor that died before writing its items
    dead = processor(SignupStore(store.client))
    dead.store.materialize = lambda *args, **kwargs: None  # type: ignore[method-assign]
    dead.process([insert("B", "x", 2)])
    assert store.get_decision("B", "x") is None
    # WHEN the warm processor decides for B THEN B's journal 1 is written first
    warm.process([insert("B", "y", 3)])
    assert store.get_decision("B", "x") is not None
    assert store.get_decision("B", "y") is not None


class SplittingStore(SignupStore):
    """A store whose first commit of more than one decision is too large for one journal."""

    split = False

    def commit(self, expected, outcome, decided_at, requests, expires_at=None, **kwargs):
        if not self.split and len(outcome.decisions) > 1:
            self.split = True
            raise JournalTooLargeError("too large", fits=1)
        return super().commit(expected, outcome, decided_at, requests, expires_at, **kwargs)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("days", [None, 30])
def test_every_decision_item_expires_after_the_retention_from_its_decision_time(
    recorder, days, split
):
    # GIVEN a processor keeping decisions ``days`` days (None: for ever), an event and a
    # stream with two signups of it and one of an event that does not exist (and, split,
    # a first journal too large: the prefix that fits is committed on its own)
    store = (SplittingStore if split else SignupStore)(recorder, sleep=lambda _: None)
    store.create_event("gig", 1, NOW)
    result = processor(store, decision_retention_days=days).process(
        [insert("gig", "a", 1), insert("gig", "c", 2), insert("nope", "b", 3)]
    )
    assert len(result.decided) == 3
    assert getattr(store, "split", split) is split
    # THEN every item (the commits' and the unknown event's rejection) expires exactly
    # ``days`` after NOW, or carries no expiry at all
    expected = None if days is None else 1_767_225_600 + days * 86_400
    for event_id, signup_id in (("gig", "a"), ("gig", "c"), ("nope", "b")):
        item = store.get_decision(event_id, signup_id)
        assert item is not None
        assert item.get("expires_at") == expected

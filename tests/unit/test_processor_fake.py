"""The stream processor against ``FakeStore``: fast, no moto.

The fake keeps the real store's semantics (tests/contract holds it to them), so these pin
what the processor does with what the store says: grouping by event, stream order,
conflicts, journals too large, parked events released in arrival order,
redeliveries, the unknown-event path. Where it makes sense the result is compared with
the oracle (``tests.oracle.decide``) run serially over the same requests: the processor may
split, retry and park, but the decisions must come out as if one loop had decided
everything in order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from botocore.exceptions import ClientError

import turnstile.storage.store as store_module
from tests.fakes import FakeStore
from tests.oracle import decide
from turnstile.base.contract import MAIN_TABLE, Reason, Status
from turnstile.base.errors import CommitConflictError, JournalTooLargeError, StoreUnavailableError
from turnstile.engine.lifecycle import Event
from turnstile.engine.rules import id_problem
from turnstile.jobs.processor import BatchResult, StreamProcessor, StreamRecord
from turnstile.storage.intake import IntakeRecord, parse_intake
from turnstile.storage.items import Decision
from turnstile.storage.journal import Journal

NOW = "2026-01-01T00:00:00.000000Z"


def insert(event_id: str, signup_id: str, seq: int, seats: int = 1, **image: Any) -> StreamRecord:
    keys = {"event_id": event_id, "signup_id": signup_id}
    full = {**keys, "seats": Decimal(seats), "submitted_at": "2026-01-01T00:00:00Z", **image}
    return StreamRecord(str(seq), "INSERT", keys, full)


def requests_of(records: Sequence[StreamRecord], event_id: str) -> list[IntakeRecord]:
    return [
        parse_intake(r.new_image, r.sequence_number, r.keys)
        for r in records
        if r.event_id == event_id
    ]


def serial(capacity: int | None, records: Sequence[StreamRecord], event_id: str) -> list[Decision]:
    """What one loop over the event's requests, in stream order, decides."""
    event = Event(event_id, capacity) if capacity is not None else None
    return list(decide(event, requests_of(records, event_id)).decisions)


def decided(result: BatchResult, event_id: str | None = None) -> list[Decision]:
    return [d.decision for d in result.decided if event_id in (None, d.event_id)]


def stored(fake: FakeStore, event_id: str) -> dict[str, dict[str, Any]]:
    """The decision items of an event, as plain values, by signup id."""
    ids = [k[1] for k in fake.tables[MAIN_TABLE.name] if k[0] == event_id]
    return fake.get_decisions(event_id, ids)


def parked_ids(fake: FakeStore, event_id: str) -> list[str]:
    return [r.signup_id for r in fake.parked_records(event_id)]


@pytest.fixture
def fake() -> FakeStore:
    return FakeStore()


def processor(fake: FakeStore, **kwargs: Any) -> StreamProcessor:
    return StreamProcessor(fake, clock=lambda: NOW, **kwargs)


# -- grouping and order -----------------------------------------------------------------


def test_each_event_is_decided_on_its_own_in_stream_order(fake):
    # GIVEN two events and a batch that interleaves their records
    fake.create_event("A", 3, NOW)
    fake.create_event("B", 2, NOW)
    records = [
        insert("A", "a1", 1, 2),
        insert("B", "b1", 2),
        insert("A", "a2", 3, 2),
        insert("B", "b2", 4),
        insert("A", "a3", 5),
        insert("B", "b3", 6),
        insert("A", "a4", 7),
    ]
    # WHEN processed in one batch
    result = processor(fake).process(records)
    # THEN each event's decisions are what one loop over its records decides, in stream
    # order, and the groups come out in the order their events first appeared
    assert decided(result) == serial(3, records, "A") + serial(2, records, "B")
    assert [(d.signup_id, d.status, d.position) for d in decided(result, "A")] == [
        ("a1", Status.ACCEPTED, 1),
        ("a2", Status.REJECTED, None),
        ("a3", Status.ACCEPTED, 2),
        ("a4", Status.REJECTED, None),
    ]
    # one commit per event, whose counters are the decisions'
    assert (fake.count("commit", "A"), fake.count("commit", "B")) == (1, 1)
    a, b = fake.get_event("A").event, fake.get_event("B").event
    assert (a.taken, a.accepted, a.version) == (3, 2, 1)
    assert (b.taken, b.accepted, b.version) == (2, 2, 1)
    # and every decision is an item
    assert {s: i["status"] for s, i in stored(fake, "A").items()} == {
        d.signup_id: d.status for d in decided(result, "A")
    }
    assert (result.failures, result.parked_events, result.conflicts, result.parked) == (
        [],
        [],
        0,
        0,
    )


def test_chunks_decide_what_one_loop_decides(fake):
    fake.create_event("gig", 4, NOW)
    records = [insert("gig", f"s{i}", i, seats=1 + i % 3) for i in range(1, 10)]
    result = processor(fake, chunk_size=2).process(records)
    assert decided(result) == serial(4, records, "gig")
    assert fake.count("commit") == 5  # ceil(9 / 2)
    assert fake.get_event("gig").event.version == 5


def test_removals_are_skipped_and_a_record_without_an_image_is_rejected_by_its_keys(fake):
    fake.create_event("gig", 5, NOW)
    result = processor(fake).process(
        [
            StreamRecord("1", "REMOVE", {"event_id": "gig", "signup_id": "old"}),
            StreamRecord("2", "MODIFY", {"event_id": "gig", "signup_id": "a"}, None),
            StreamRecord("3", "MODIFY", {"event_id": "gig", "signup_id": "-x"}, None),
            insert("gig", "b", 4),
        ]
    )
    assert result.ignored == 1
    assert [(d.signup_id, d.reason, d.detail) for d in decided(result)] == [
        ("a", Reason.INVALID_REQUEST, "record has no new image"),
        ("-x", Reason.INVALID_REQUEST, f"{id_problem('-x', 'signup_id')}; record has no new image"),
        ("b", None, None),
    ]
    assert "old" not in stored(fake, "gig")


def test_decisions_carry_the_retention_and_the_time_they_were_made(fake):
    fake.create_event("gig", 5, NOW)
    record = insert("gig", "a", 1)
    intake_gone = 1767225600 - 7 * 86400  # TTL deletes its intake record a week earlier
    record = replace(record, new_image={**record.new_image, "expires_at": Decimal(intake_gone)})
    result = processor(fake, decision_retention_days=2).process([record])
    assert [(d.decided_at, d.submitted_at) for d in result.decided] == [
        (NOW, "2026-01-01T00:00:00Z")
    ]
    item = stored(fake, "gig")["a"]
    assert (item["decided_at"], item["expires_at"]) == (NOW, 1767225600 + 2 * 86400)


# -- conflicts --------------------------------------------------------------------------------


def test_a_commit_lost_to_another_processor_is_counted_and_decided_again(fake):
    # GIVEN an event of 3 seats, and another processor that commits "o" (2 seats) just
    # before this one commits
    fake.create_event("gig", 3, NOW)
    other = [insert("gig", "o", 50, 2)]
    fake.before_next("commit", lambda: processor(fake).process(other))
    records = [insert("gig", "a", 100), insert("gig", "b", 101)]
    # WHEN this one decides a and b
    result = processor(fake).process(records)
    # THEN its first commit conflicted, and it decided again from the new state: as if
    # o had come first
    assert result.conflicts == 1
    assert decided(result) == serial(3, other + records, "gig")[1:]
    assert [(d.signup_id, d.status) for d in decided(result)] == [
        ("a", Status.ACCEPTED),
        ("b", Status.REJECTED),
    ]
    assert fake.get_event("gig").event.taken == 3
    assert sorted(stored(fake, "gig")) == ["a", "b", "o"]


def test_a_commit_that_lands_after_a_close_is_decided_again_as_closed(fake):
    fake.create_event("gig", 3, NOW)
    fake.before_next("commit", lambda: fake.close_event("gig"))
    result = processor(fake).process([insert("gig", "a", 1)])
    assert result.conflicts == 1
    assert [(d.status, d.reason) for d in decided(result)] == [
        (Status.REJECTED, Reason.EVENT_CLOSED)
    ]
    assert fake.get_event("gig").event.taken == 0


@pytest.mark.parametrize("conflicts", [1, 4])
def test_conflicts_short_of_the_limit_are_counted_and_the_group_decided(fake, conflicts):
    fake.create_event("gig", 5, NOW)
    fake.fail_next("commit", times=conflicts, error=CommitConflictError)
    result = processor(fake, max_conflicts=5).process([insert("gig", "a", 1)])
    assert (result.conflicts, result.parked_events, result.failures) == (conflicts, [], [])
    assert [d.position for d in decided(result)] == [1]
    assert fake.count("commit") == conflicts + 1


def test_a_conflict_storm_parks_the_group_and_other_events_carry_on(fake):
    # GIVEN hot, whose every commit conflicts, and calm
    fake.create_event("hot", 5, NOW)
    fake.create_event("calm", 5, NOW)
    fake.fail_next("commit", times=None, error=CommitConflictError, event_id="hot")
    records = [insert("hot", "h0", 1), insert("calm", "c0", 2), insert("hot", "h1", 3)]
    # WHEN processed with at most 3 conflicts in a row
    result = processor(fake, max_conflicts=3).process(records)
    # THEN hot tried 3 times, then its records were parked in arrival order and it is
    # parked; calm was decided; the batch reports no failure
    assert result.conflicts == 3 and fake.count("commit", "hot") == 3
    assert result.parked_events == [("hot", "CommitConflictError")]
    assert (result.parked, result.failures) == (2, [])
    assert parked_ids(fake, "hot") == ["h0", "h1"]
    assert fake.get_parking("hot")["error"] == "CommitConflictError"
    assert decided(result) == serial(5, records, "calm")
    assert stored(fake, "hot") == {}


# -- journals too large ----------------------------------------------------------------------


def _bulky(signup_id: str) -> dict[str, str]:
    """Attributes that bzip2 cannot shrink much (hex of hashes)."""
    text = "".join(hashlib.sha256(f"{signup_id}{i}".encode()).hexdigest() for i in range(30))
    return {"note": text}


def test_a_journal_too_large_commits_the_prefix_that_fits_and_then_the_rest(fake, monkeypatch):
    # GIVEN a bound on journals that two of these decisions fit, and not three
    fake.create_event("gig", 4, NOW)
    ids = ["a", "a", "b", "c", "d", "e"]  # a repeated: the prefix is counted in decisions
    records = [insert("gig", s, i, attributes=_bulky(s)) for i, s in enumerate(ids, 1)]
    requests: dict[str, IntakeRecord] = {}
    for r in requests_of(records, "gig"):
        requests.setdefault(r.signup_id, r)
    first_two = decide(Event("gig", 4), list(requests.values())[:2]).decisions
    bound = len(Journal.build("gig", 1, NOW, first_two, requests).encode())
    monkeypatch.setattr(store_module, "MAX_JOURNAL_BYTES", bound)
    journals: list[Journal] = []
    commit = fake.commit
    monkeypatch.setattr(
        fake, "commit", lambda *a, **k: journals.append(commit(*a, **k)) or journals[-1]
    )
    # WHEN processed in one chunk
    result = processor(fake).process(records)
    # THEN every decision is what one loop decides, committed in journals within the
    # bound, the first of them the two that fit
    assert decided(result) == serial(4, records, "gig")
    assert (result.failures, result.parked_events, result.conflicts) == ([], [], 0)
    assert [d for j in journals for d in j.decisions] == decided(result)
    assert [d.signup_id for d in journals[0].decisions] == ["a", "b"]
    assert all(len(j.encode()) <= bound for j in journals) and len(journals) >= 3
    assert fake.get_event("gig").event.version == len(journals)
    assert sorted(stored(fake, "gig")) == ["a", "b", "c", "d", "e"]
    assert stored(fake, "gig")["e"]["reason"] == Reason.CAPACITY_FULL


def test_a_journal_too_large_commits_the_decisions_that_fit_then_the_rest(fake):
    fake.create_event("gig", 5, NOW)
    fake.fail_next("commit", error=JournalTooLargeError("too big", fits=1))
    records = [insert("gig", s, i) for i, s in enumerate("abc", 1)]
    result = processor(fake).process(records)
    assert decided(result) == serial(5, records, "gig")
    # one refused commit, then a prefix of one, then the rest in the next round
    assert fake.count("commit") == 3
    journal = fake.get_event("gig").journal
    assert (journal.version, [d.signup_id for d in journal.decisions]) == (2, ["b", "c"])


# -- failures are per event ------------------------------------------------------------------


def test_a_group_whose_store_is_down_is_parked_and_other_events_are_decided(fake):
    fake.create_event("hot", 5, NOW)
    fake.create_event("calm", 5, NOW)
    fake.fail_next("get_event_and_parking", error=StoreUnavailableError, event_id="hot")
    records = [insert("hot", "h0", 1), insert("calm", "c0", 2), insert("hot", "h1", 3)]
    result = processor(fake).process(records)
    # hot was never decided: parked whole, its marker naming the error's class
    assert result.parked_events == [("hot", "StoreUnavailableError")]
    assert parked_ids(fake, "hot") == ["h0", "h1"] and fake.count("commit", "hot") == 0
    assert decided(result) == serial(5, records, "calm")
    assert result.failures == []


def test_a_group_that_can_be_neither_decided_nor_parked_fails_from_its_first_record(fake):
    fake.create_event("hot", 5, NOW)
    fake.create_event("calm", 5, NOW)
    fake.fail_next("commit", times=None, error=StoreUnavailableError, event_id="hot")
    fake.fail_next("park", times=None, error=StoreUnavailableError)
    records = [insert("hot", "h0", 7), insert("calm", "c0", 8), insert("hot", "h1", 9)]
    result = processor(fake).process(records)
    assert result.failures == ["7"]
    assert (result.parked_events, result.parked) == ([], 0)
    assert decided(result) == serial(5, records, "calm")


def test_a_failure_in_a_later_chunk_parks_from_there_and_keeps_what_was_committed(fake):
    fake.create_event("gig", 5, NOW)
    records = [insert("gig", s, i) for i, s in enumerate("abcde", 1)]
    fake.before_next(
        "get_event", lambda: fake.fail_next("commit", times=None, error=StoreUnavailableError)
    )
    result = processor(fake, chunk_size=2).process(records)
    # the first chunk (a, b) was decided; c, d, e parked from c on, in order
    assert [d.signup_id for d in decided(result)] == ["a", "b"]
    assert parked_ids(fake, "gig") == ["c", "d", "e"]
    assert fake.get_parking("gig")["first_sequence_number"] == "3"
    assert result.parked_events == [("gig", "StoreUnavailableError")] and result.parked == 3


def test_a_later_chunk_that_can_be_neither_decided_nor_parked_fails_from_that_chunk(fake):
    fake.create_event("gig", 5, NOW)
    records = [insert("gig", s, i) for i, s in enumerate("abcde", 1)]
    fake.before_next(
        "get_event", lambda: fake.fail_next("commit", times=None, error=StoreUnavailableError)
    )
    fake.fail_next("park", times=None, error=StoreUnavailableError)
    result = processor(fake, chunk_size=2).process(records)
    # the event source redelivers from c: a and b are decided
    assert result.failures == ["3"]
    assert [d.signup_id for d in decided(result)] == ["a", "b"]


def test_a_failure_dynamodb_refuses_as_invalid_is_not_parked_but_failed(fake):
    fake.create_event("gig", 5, NOW)
    invalid = ClientError({"Error": {"Code": "ValidationException", "Message": "m"}}, "Update")
    fake.fail_next("commit", error=invalid)
    result = processor(fake).process([insert("gig", "a", 11), insert("gig", "b", 12)])
    assert result.failures == ["11"]
    assert fake.get_parking("gig") is None and parked_ids(fake, "gig") == []


# -- parked events: released in arrival order ----------------------------------------------


def test_a_parked_event_parks_later_records_and_releases_all_in_arrival_order(fake):
    # GIVEN hot parked with h0, h1 (its commits failed), capacity 2
    fake.create_event("hot", 2, NOW)
    fake.create_event("calm", 5, NOW)
    fake.fail_next("commit", times=None, error=StoreUnavailableError, event_id="hot")
    first = [insert("hot", "h0", 10), insert("calm", "c0", 11), insert("hot", "h1", 12)]
    processor(fake).process(first)
    assert parked_ids(fake, "hot") == ["h0", "h1"]
    fake.clear_faults()
    # WHEN later records arrive for hot (one 2-seat request that fits if decided first)
    second = [insert("hot", "h2", 1000, 2), insert("hot", "h3", 1001), insert("calm", "c1", 1002)]
    result = processor(fake).process(second)
    # THEN they are parked behind h0, h1, all released in arrival order, and the marker cleared
    everything = first + second
    assert decided(result, "hot") == serial(2, everything, "hot")
    assert [(d.signup_id, d.status) for d in decided(result, "hot")] == [
        ("h0", Status.ACCEPTED),
        ("h1", Status.ACCEPTED),
        ("h2", Status.REJECTED),
        ("h3", Status.REJECTED),
    ]
    assert (result.parked, result.released, result.parked_events) == (2, 4, [])
    assert fake.get_parking("hot") is None and parked_ids(fake, "hot") == []
    assert decided(result, "calm") == serial(5, everything, "calm")[1:]


def test_a_record_parked_during_a_release_keeps_the_event_parked(fake):
    fake.create_event("gig", 5, NOW)
    version = fake.park("gig", [IntakeRecord("gig", "a", "10")], NOW, "StoreUnavailableError")
    late = IntakeRecord("gig", "late", "20")
    fake.before_next("clear_parking", lambda: fake.park("gig", [late], NOW, None))
    p = processor(fake)
    assert p.release("gig") is False
    assert fake.get_parking("gig")["version"] == version + 1
    assert parked_ids(fake, "gig") == ["late"] and "a" in stored(fake, "gig")
    assert p.release("gig") is True
    assert fake.get_parking("gig") is None and "late" in stored(fake, "gig")


def test_a_release_decides_at_most_max_release_records(fake):
    fake.create_event("gig", 9, NOW)
    fake.park("gig", [IntakeRecord("gig", f"s{i}", str(i)) for i in range(1, 6)], NOW, None)
    p = processor(fake, max_release=3, chunk_size=2)
    result = BatchResult()
    assert p.release("gig", result) is False
    assert (result.released, parked_ids(fake, "gig")) == (3, ["s4", "s5"])
    assert fake.get_parking("gig") is not None
    assert p.release("gig") is True
    assert [stored(fake, "gig")[f"s{i}"]["position"] for i in range(1, 6)] == [1, 2, 3, 4, 5]


def test_a_failed_release_leaves_the_rest_parked_and_says_so(fake):
    fake.create_event("gig", 9, NOW)
    fake.park("gig", [IntakeRecord("gig", f"s{i}", str(i)) for i in range(1, 5)], NOW, None)
    fake.fail_next("unpark", error=StoreUnavailableError)
    result = BatchResult()
    assert processor(fake, chunk_size=2).release("gig", result) is False
    assert result.parked_events == [("gig", "StoreUnavailableError")] and result.released == 0
    assert parked_ids(fake, "gig") == ["s1", "s2", "s3", "s4"]
    # the next release decides nothing twice
    again = BatchResult()
    assert processor(fake, chunk_size=2).release("gig", again) is True
    assert [d.signup_id for d in decided(again)] == ["s3", "s4"]
    assert again.released == 4
    assert [stored(fake, "gig")[f"s{i}"]["position"] for i in range(1, 5)] == [1, 2, 3, 4]


def test_a_release_that_meets_a_journal_too_large_unparks_and_counts_what_it_decided(
    fake, monkeypatch
):
    fake.create_event("gig", 9, NOW)
    fake.park("gig", [IntakeRecord("gig", f"s{i}", str(i)) for i in range(1, 4)], NOW, None)
    fake.fail_next("commit", error=JournalTooLargeError("too big", fits=1))
    unparked: list[list[str]] = []
    unpark = fake.unpark
    monkeypatch.setattr(fake, "unpark", lambda e, s: unparked.append(list(s)) or unpark(e, s))
    result = BatchResult()
    assert processor(fake).release("gig", result) is True
    assert unparked == [["1"], ["2", "3"]]
    assert result.released == 3
    assert [d.signup_id for d in decided(result)] == ["s1", "s2", "s3"]


def test_a_release_of_an_event_not_parked_does_nothing(fake):
    assert processor(fake).release("gig") is True
    assert fake.count("parked_records") == 0


def test_a_parked_events_group_that_cannot_be_parked_fails_from_its_first_record(fake):
    fake.create_event("gig", 5, NOW)
    fake.park("gig", [IntakeRecord("gig", "a", "1")], NOW, None)
    fake.fail_next("park", error=StoreUnavailableError)
    result = processor(fake).process([insert("gig", "b", 5), insert("gig", "c", 6)])
    assert result.failures == ["5"]
    assert decided(result) == [] and parked_ids(fake, "gig") == ["a"]


# -- redelivery decides nothing twice --------------------------------------------------------


def test_a_redelivered_batch_decides_nothing_and_writes_nothing(fake):
    fake.create_event("gig", 2, NOW)
    records = [insert("gig", s, i) for i, s in enumerate("abc", 1)] + [insert("nope", "x", 9)]
    first = processor(fake).process(records)
    state = {t: fake.items(t) for t in fake.tables}
    for p in (processor(fake), processor(fake)):  # a cold one, then another
        again = p.process(records)
        assert (again.decided, again.failures, again.conflicts) == ([], [], 0)
    assert {t: fake.items(t) for t in fake.tables} == state
    assert decided(first, "gig") == serial(2, records, "gig")
    # redelivered with a new record: only the new one is decided
    more = processor(fake).process([*records, insert("gig", "d", 20)])
    assert [(d.signup_id, d.reason) for d in decided(more)] == [("d", Reason.CAPACITY_FULL)]


def test_a_commit_whose_answer_was_lost_decides_nothing_twice(fake):
    # GIVEN a commit that landed but whose answer was lost: the group is parked
    fake.create_event("gig", 1, NOW)
    fake.fail_next("commit", error=StoreUnavailableError, after=True)
    records = [insert("gig", "a", 1), insert("gig", "b", 2)]
    first = processor(fake).process(records)
    assert first.parked_events == [("gig", "StoreUnavailableError")] and first.decided == []
    assert [d.signup_id for d in fake.get_event("gig").journal.decisions] == ["a", "b"]
    # WHEN the event's next record arrives (a fresh processor)
    result = processor(fake).process([insert("gig", "c", 3)])
    # THEN the journal is written out, a and b are not decided again, c is
    assert [d.signup_id for d in decided(result)] == ["c"]
    assert fake.get_event("gig").event.version == 2
    got = stored(fake, "gig")
    assert (got["a"]["position"], got["b"]["reason"], got["c"]["reason"]) == (
        1,
        Reason.CAPACITY_FULL,
        Reason.CAPACITY_FULL,
    )
    assert fake.get_parking("gig") is None


def test_a_journal_left_unwritten_is_written_before_anything_new_is_decided(fake):
    fake.create_event("gig", 5, NOW)
    fake.fail_next("materialize", error=StoreUnavailableError)
    processor(fake).process([insert("gig", "a", 1)])  # committed, then parked
    assert stored(fake, "gig") == {} and fake.get_event("gig").event.version == 1
    fake.calls.clear()
    processor(fake).release("gig")
    # the release wrote journal 1 out first, decided nothing again, and cleared the marker
    methods = [m for m, _ in fake.calls]
    assert methods.count("materialize") == 1
    assert methods.index("materialize") < methods.index("get_decisions")
    assert fake.count("commit") == 0 and fake.get_event("gig").event.version == 1
    assert stored(fake, "gig")["a"]["position"] == 1 and fake.get_parking("gig") is None


def test_a_journal_another_processor_left_unwritten_is_written_by_a_warm_one(fake):
    # GIVEN a warm processor that wrote out journal 1 of gig
    fake.create_event("gig", 5, NOW)
    warm = processor(fake)
    warm.process([insert("gig", "a", 1)])
    # and journal 2, committed by another processor that failed to write it out (its
    # first write was journal 1 again: it had not written that one itself)
    fake.fail_next("materialize", error=StoreUnavailableError, skip=1)
    processor(fake).process([insert("gig", "x", 2)])
    assert "x" not in stored(fake, "gig") and fake.get_event("gig").event.version == 2
    # WHEN the warm processor decides the next record of gig
    warm.process([insert("gig", "y", 3)])
    # THEN journal 2 was written out too: nothing decided is left without its item
    assert {s: i["position"] for s, i in stored(fake, "gig").items()} == {"a": 1, "x": 2, "y": 3}


def test_a_release_never_uses_an_event_read_by_a_group_that_failed(fake):
    # GIVEN a parked event whose group could not be parked (its event was read with the marker)
    fake.create_event("gig", 5, NOW)
    fake.park("gig", [IntakeRecord("gig", "a", "1")], NOW, None)
    p = processor(fake)
    fake.fail_next("park", error=StoreUnavailableError)
    assert p.process([insert("gig", "b", 5)]).failures == ["5"]
    # and a commit of another processor since
    fake.clear_parking("gig", 1)
    processor(fake).process([insert("gig", "c", 6)])
    fake.park("gig", [IntakeRecord("gig", "a", "1")], NOW, None)
    # WHEN the first one releases the event THEN it reads it afresh: no conflict
    result = BatchResult()
    assert p.release("gig", result) is True
    assert (result.conflicts, [d.position for d in decided(result)]) == (0, [2])


def test_a_warm_processor_writes_each_journal_out_once(fake):
    fake.create_event("gig", 5, NOW)
    warm = processor(fake)
    warm.process([insert("gig", "a", 1)])
    warm.process([insert("gig", "b", 2)])
    warm.process([insert("gig", "b", 2)])
    assert fake.count("materialize") == 2
    processor(fake).process([insert("gig", "b", 2)])  # cold: writes journal 2 once more
    assert fake.count("materialize") == 3


def test_a_warm_processor_decodes_no_journal_it_wrote_out_itself(fake, monkeypatch):
    """Deciding needs the last journal's version alone, which is the event's: a journal is
    decoded only to be written out (a cold processor), never on every read of the event."""
    from turnstile.storage.journal import Journal

    decoded: list[int] = []
    decode = Journal.decode.__func__  # type: ignore[attr-defined]

    def counting(cls, blob):
        journal = decode(cls, blob)
        decoded.append(journal.version)
        return journal

    monkeypatch.setattr(Journal, "decode", classmethod(counting))
    fake.create_event("gig", 5, NOW)
    warm = processor(fake)
    for seq, signup in enumerate("abcd", start=1):
        warm.process([insert("gig", signup, seq)])
    assert decoded == []
    processor(fake).process([insert("gig", "e", 5)])  # cold: writes journal 4 out again
    assert decoded == [4]
    assert fake.count("materialize") == 6


def test_a_journal_left_unwritten_on_an_event_item_written_again_is_written_out(fake):
    """An event item without ``created_at``, deleted and written again by hand, starts its
    versions again: a warm processor that wrote out version 1 before must still write out
    another processor's version 1, which a crash left unwritten (journals are told apart
    by their bytes, not their version)."""
    from turnstile.base.contract import Attr, ControlKey, EventState

    def hand_written() -> None:
        key = fake._event_key("gig")
        fake.control[key] = {
            ControlKey.PK: {"S": key[0]},
            ControlKey.SK: {"S": key[1]},
            Attr.EVENT_ID: {"S": "gig"},
            Attr.CAPACITY: {"N": "5"},
            Attr.STATE: {"S": EventState.OPEN},
        }

    hand_written()
    warm = processor(fake)
    warm.process([insert("gig", "a", 1)])  # version 1, written out
    hand_written()  # deleted and written again: version 0
    fake.fail_next("materialize", error=SystemExit)  # killed between commit and items
    with pytest.raises(SystemExit):
        processor(fake).process([insert("gig", "b", 2)])  # its own version 1
    warm.process([insert("gig", "c", 3)])
    assert set(stored(fake, "gig")) == {"a", "b", "c"}


# -- events that do not exist ----------------------------------------------------------------


def test_signups_of_an_unknown_event_are_rejected_once(fake):
    records = [insert("nope", "a", 1), insert("nope", "b", 2), insert("nope", "a", 3)]
    result = processor(fake).process(records)
    assert decided(result) == serial(None, records, "nope")
    assert [d.reason for d in decided(result)] == [Reason.UNKNOWN_EVENT] * 2
    assert fake.count("commit") == 0 and fake.get_event("nope") is None
    again = processor(fake).process([*records, insert("nope", "c", 4)])
    assert [d.signup_id for d in decided(again)] == ["c"]


def test_an_event_created_during_the_rejection_is_decided_against_it(fake):
    fake.before_next("reject_without_event", lambda: fake.create_event("gig", 1, NOW))
    records = [insert("gig", "a", 1), insert("gig", "b", 2)]
    result = processor(fake).process(records)
    assert result.conflicts == 1
    assert decided(result) == serial(1, records, "gig")
    assert stored(fake, "gig")["a"]["status"] == Status.ACCEPTED


def test_an_id_no_event_can_have_is_rejected_invalid_without_reading_a_marker(fake):
    records = [insert("-bad", "a", 1)]
    result = processor(fake).process(records)
    assert [d.reason for d in decided(result)] == [Reason.INVALID_REQUEST]
    assert fake.count("get_event_and_parking") == 0
    # and when it cannot be written, it is never parked under that id: the group fails
    fake.fail_next("reject_without_event", error=StoreUnavailableError)
    failed = processor(fake).process([insert("-bad", "b", 2)])
    assert failed.failures == ["2"] and fake.count("park") == 0


# -- "already decided?" is read only for signups that can be -----------------------------
#
# A fresh INSERT above the event's high-water mark was never committed: its decision is
# not read. A redelivery (at or below the mark), a MODIFY, a parked record, and every record
# of an event whose intake records may be put again (``ParkAttr.MAY_REPEAT``, noted by a
# REMOVE or by a rejection without an event item) are read (docs/design.md, section 4).


def remove(event_id: str, signup_id: str, seq: int) -> StreamRecord:
    """A REMOVE of an intake item (TTL's or anyone's): keys only, no image."""
    return StreamRecord(str(seq), "REMOVE", {"event_id": event_id, "signup_id": signup_id})


def modify(event_id: str, signup_id: str, seq: int, **image: Any) -> StreamRecord:
    record = insert(event_id, signup_id, seq, **image)
    return replace(record, event_name="MODIFY")


def counters(fake: FakeStore, event_id: str) -> tuple[Any, ...]:
    """What a decision made twice would move: the event's counters, version and counts."""
    record = fake.get_event(event_id)
    assert record is not None
    e = record.event
    return e.taken, e.accepted, e.version, record.status_counts, e.holds, e.waiting


def test_fresh_inserts_are_decided_without_reading_a_decision(fake):
    # GIVEN a new event and two batches of fresh INSERTs, the second in chunks
    fake.create_event("gig", 3, NOW)
    first = [insert("gig", f"s{i}", i) for i in range(1, 6)]
    later = [insert("gig", f"t{i}", i) for i in range(10, 15)]
    # WHEN a processor decides the first, and a cold one the second, two records a chunk
    assert len(decided(processor(fake).process(first))) == 5
    assert fake.get_event("gig").high_water == 5
    assert len(decided(processor(fake, chunk_size=2).process(later))) == 5
    # THEN no decision item was read, and the mark is the last record's number
    assert fake.count("get_decisions") == 0
    assert fake.get_event("gig").high_water == 14


@pytest.mark.parametrize("between", [None, "above", "below"])
@pytest.mark.parametrize("written_out", [True, False])
def test_a_redelivered_batch_is_read_and_decides_nothing_twice(fake, written_out, between):
    # GIVEN a batch committed, its journal written out or not (the process died after the
    # commit and the batch went back to the event source: nothing could park it either)
    fake.create_event("gig", 2, NOW)
    batch = [insert("gig", "a", 100), insert("gig", "b", 101), insert("gig", "c", 102)]
    if not written_out:
        fake.fail_next("materialize", error=StoreUnavailableError)
        fake.fail_next("park", error=StoreUnavailableError)
    first = processor(fake).process(batch)
    assert first.failures == ([] if written_out else ["100"])
    # and, maybe, another commit of the event in between: later records, or records of
    # lower numbers (another shard's), its journal left unwritten as well
    if between is not None:
        numbers = (200, 201) if between == "above" else (50, 51)
        if not written_out:
            fake.fail_next("materialize", error=StoreUnavailableError, skip=1)
            fake.fail_next("park", error=StoreUnavailableError)
        processor(fake).process([insert("gig", "d", numbers[0]), insert("gig", "e", numbers[1])])
    assert fake.get_event("gig").high_water == (201 if between == "above" else 102)
    before = counters(fake, "gig")
    # WHEN the batch is delivered again, to a cold processor and to a warm one
    fake.calls.clear()
    warm = processor(fake)
    for p in (warm, warm):
        again = p.process(batch)
        # THEN it is read, and nothing is decided again: counters, version and items stay
        assert (again.decided, again.failures, again.conflicts) == ([], [], 0)
    assert fake.count("get_decisions") == 2 and fake.count("commit") == 0
    assert counters(fake, "gig") == before
    items = stored(fake, "gig")
    assert [items[s].get("position") for s in "ab"] == [1, 2]
    assert items["c"]["reason"] == Reason.CAPACITY_FULL


@pytest.mark.parametrize("cold", [False, True])
@pytest.mark.parametrize("same_batch", [True, False])
def test_an_intake_record_deleted_and_put_again_keeps_its_first_decision(fake, same_batch, cold):
    # GIVEN a and b accepted
    fake.create_event("gig", 3, NOW)
    p = processor(fake)
    p.process([insert("gig", "a", 1), insert("gig", "b", 2)])
    before, items = counters(fake, "gig"), stored(fake, "gig")
    # WHEN a's intake item is deleted (TTL, or a producer) and put again: a new INSERT,
    # with a higher number; b's is deleted only, and a fresh c arrives
    deletions = [remove("gig", "a", 3), remove("gig", "b", 4)]
    puts = [insert("gig", "a", 5, seats=2)]
    batches = [deletions + puts] if same_batch else [deletions, puts]
    for batch in batches:
        result = (processor(fake) if cold else p).process(batch)
        # THEN nothing is decided: a keeps its first decision, the counters do not move
        assert (result.decided, result.failures, result.ignored) == (
            [],
            [],
            sum(r.event_name == "REMOVE" for r in batch),
        )
    assert counters(fake, "gig") == before and stored(fake, "gig") == items
    # and the note is written once; records of the event are read from then on
    assert fake.count("note_may_repeat") == 1
    fake.calls.clear()
    assert [d.signup_id for d in decided(processor(fake).process([insert("gig", "c", 9)]))] == ["c"]
    assert fake.count("get_decisions") == 1 and fake.count("note_may_repeat") == 0


@pytest.mark.parametrize(
    "how", ["redelivered", "put-again-deleted-before", "put-again-deleted-after", "older-version"]
)
def test_a_signup_rejected_before_its_event_existed_stays_rejected_once_it_does(fake, how):
    # GIVEN a signup rejected unknown_event, its event created afterwards
    record = insert("early", "a", 1)
    if how == "older-version":  # rejected by a version that noted nothing: only its item
        fake._put_decisions([fake._items.decision_item("early", unknown(record), NOW, None)])
    else:
        assert [d.reason for d in decided(processor(fake).process([record]))] == [
            Reason.UNKNOWN_EVENT
        ]
    if how in ("put-again-deleted-before", "older-version"):
        processor(fake).process([remove("early", "a", 2)])  # no event item to note it on
    fake.create_event("early", 5, NOW)
    # WHEN its record is delivered again, or put again as a new INSERT
    if how == "put-again-deleted-after":
        processor(fake).process([remove("early", "a", 2)])
    again = [record] if how == "redelivered" else [insert("early", "a", 3)]
    result = processor(fake).process(again)
    # THEN it keeps its rejection, and the event counts nothing
    assert (result.decided, result.failures) == ([], [])
    assert stored(fake, "early")["a"]["reason"] == Reason.UNKNOWN_EVENT
    assert counters(fake, "early")[:3] == (0, 0, 0)


def test_an_unknown_event_is_noted_once_before_its_first_rejection(fake):
    # the note comes first: a rejection that lands is always under it
    fake.fail_next("note_may_repeat", error=StoreUnavailableError)
    fake.fail_next("park", error=StoreUnavailableError)
    assert processor(fake).process([insert("early", "a", 1)]).failures == ["1"]
    assert stored(fake, "early") == {}
    warm = processor(fake)
    for batch in ([insert("early", "a", 1)], [insert("early", "b", 2)]):
        assert [d.reason for d in decided(warm.process(batch))] == [Reason.UNKNOWN_EVENT]
    processor(fake).process([insert("early", "c", 3)])  # a cold one reads it with the marker
    assert fake.count("note_may_repeat") == 2  # the one that failed, and one
    assert fake.get_event_and_parking("early") == (None, None, True)


def unknown(record: StreamRecord) -> Decision:
    return Decision(
        signup_id=record.keys["signup_id"],
        sequence_number=record.sequence_number,
        status=Status.REJECTED,
        seats=1,
        reason=Reason.UNKNOWN_EVENT,
    )


def test_a_removal_costs_no_write_once_noted(fake):
    fake.create_event("gig", 5, NOW)
    warm = processor(fake)
    warm.process([insert("gig", "a", 1)])
    # the first removal notes it (one write on the event's marker item, none on the event)
    warm.process([remove("gig", "a", 2)])
    assert fake.count("note_may_repeat") == 1 and fake.count("commit") == 1
    # a warm processor knows it: no read, no write
    fake.calls.clear()
    warm.process([remove("gig", "b", 3)])
    assert fake.calls == []
    # a cold one reads the marker item (with the event item), and writes nothing
    processor(fake).process([remove("gig", "c", 4)])
    assert fake.calls == [("get_event_and_parking", "gig")]
    # nor does a group of the event that also carries records
    fake.calls.clear()
    result = processor(fake).process([remove("gig", "d", 5), insert("gig", "e", 6)])
    assert [d.signup_id for d in decided(result)] == ["e"]
    assert fake.count("note_may_repeat") == 0 and fake.count("get_event_and_parking") == 1
    # an id no event can have is noted nowhere
    fake.calls.clear()
    assert processor(fake).process([remove("-bad", "x", 7)]).ignored == 1
    assert fake.calls == []


def test_a_removal_that_cannot_be_noted_goes_back_and_its_group_is_read(fake):
    # GIVEN a accepted
    fake.create_event("gig", 2, NOW)
    processor(fake).process([insert("gig", "a", 1)])
    before = counters(fake, "gig")
    # WHEN a's deletion cannot be noted, in a batch that puts a again and brings b
    fake.fail_next("note_may_repeat", error=StoreUnavailableError)
    batch = [remove("gig", "a", 2), insert("gig", "a", 3), insert("gig", "b", 4)]
    result = processor(fake).process(batch)
    # THEN the deletion goes back to the event source; the rest is decided, a not again
    assert result.failures == ["2"]
    assert [(d.signup_id, d.position) for d in decided(result)] == [("b", 2)]
    assert counters(fake, "gig")[:2] == (before[0] + 1, before[1] + 1)
    # and the event source's retry notes it, and decides nothing again
    retry = processor(fake).process(batch)
    assert (retry.decided, retry.failures) == ([], [])
    assert fake.get_event_and_parking("gig")[2] is True


def test_a_modify_of_a_decided_signup_is_read_and_changes_nothing(fake):
    fake.create_event("gig", 2, NOW)
    processor(fake).process([insert("gig", "a", 1)])
    before, items = counters(fake, "gig"), stored(fake, "gig")
    fake.calls.clear()
    # a re-emission (the sweeper's, a redrive), far above the mark
    result = processor(fake).process([modify("gig", "a", 50, redrive=Decimal(1))])
    assert (result.decided, result.failures) == ([], [])
    assert fake.count("get_decisions") == 1
    assert counters(fake, "gig") == before and stored(fake, "gig") == items


def test_an_event_committed_before_it_kept_a_mark_reads_every_signup_and_never_begins_one(fake):
    from turnstile.base.contract import Attr, ControlKey

    # GIVEN a committed at 1000 by a version that kept no mark
    fake.create_event("gig", 3, NOW)
    processor(fake).process([insert("gig", "a", 1000)])
    del fake.control[ControlKey.event("gig")][Attr.HIGH_WATER]
    # WHEN a record of a lower number (another shard's) is committed, then a redelivered
    result = processor(fake).process([insert("gig", "b", 5)])
    assert [d.signup_id for d in decided(result)] == ["b"]
    before = counters(fake, "gig")
    again = processor(fake).process([insert("gig", "a", 1000)])
    # THEN a is not decided again: the event keeps no mark, and reads every signup
    assert (again.decided, counters(fake, "gig")) == ([], before)
    assert fake.get_event("gig").high_water is None
    assert fake.count("get_decisions") == 2


def test_a_wake_up_never_moves_the_mark(fake):
    from turnstile.base.contract import Attr, ControlKey

    fake.create_event("gig", 1, NOW)
    fake.control[ControlKey.event("gig")][Attr.HOLD_SECONDS] = {"N": "30"}
    now = [NOW]
    p = StreamProcessor(fake, clock=lambda: now[0])
    p.process([insert("gig", "a", 7)])
    assert stored(fake, "gig")["a"]["status"] == Status.HELD
    # WHEN the event is woken after the hold lapsed (a record of the control table's
    # stream, whose numbers are its own)
    now[0] = "2026-01-01T00:01:00.000000Z"
    wake = StreamRecord("99999999", "MODIFY", {"pk": "WAKE#gig", "sk": "WAKE"})
    p.process([wake])
    # THEN the hold lapsed in a commit that kept the mark at the intake records'
    assert stored(fake, "gig")["a"]["status"] == Status.EXPIRED
    assert fake.get_event("gig").event.version == 2
    assert fake.get_event("gig").high_water == 7

""" "Already decided?" is read only for signups that can be: the stream handler against moto.

A fresh INSERT above its event's high-water mark was never committed, so the processor
reads no decision for it; a redelivery (at or below the mark), a MODIFY, and every INSERT
of an event whose intake records may be put again (a REMOVE reached the processor, or a
signup was rejected before the event existed) are read (docs/design.md, section 4). Every
batch goes through the event source's filter (``STREAM_SOURCE.filter_patterns``) first,
and the processor's reads of the main table are counted on its own client.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

import pytest

from tests.helpers import CallRecorder, decisions, put_raw_intake, state_items
from turnstile.base.contract import (
    CONTROL_TABLE,
    INTAKE_TABLE,
    MAIN_TABLE,
    STREAM_SOURCE,
    RequestKind,
    Status,
)
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.dynamo import event_key, signup_key
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.poller import matches_filter

NOW = "2026-01-01T00:00:00.000000Z"
TTL = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


@pytest.fixture(autouse=True)
def fresh_processor(aws):
    stream_handler._processor = None
    yield
    stream_handler._processor = None


@pytest.fixture
def recorder(client) -> CallRecorder:
    return CallRecorder(client)


def cold_start(recorder: CallRecorder, store_class: type[SignupStore] = SignupStore) -> None:
    """A new container, whose store's calls ``recorder`` counts."""
    store = store_class(recorder, sleep=lambda _: None)
    stream_handler._processor = StreamProcessor(store)


def deliver(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One batch through the event source's filter and the real handler (JSON, as Lambda
    sends it)."""
    passed = [
        r for r in records if any(matches_filter(p, r) for p in STREAM_SOURCE.filter_patterns)
    ]
    event = json.loads(json.dumps({"Records": passed}))
    return stream_handler.handler(event, LocalLambdaContext())


def main_reads(recorder: CallRecorder) -> list[int]:
    """The processor's reads of decision items since the last call: keys per request."""
    reads = []
    for op, kwargs in recorder.calls:
        if op == "batch_get_item" and MAIN_TABLE.name in kwargs["RequestItems"]:
            reads.append(len(kwargs["RequestItems"][MAIN_TABLE.name]["Keys"]))
        elif op in ("get_item", "query", "scan") and kwargs["TableName"] == MAIN_TABLE.name:
            reads.append(1)
    recorder.calls.clear()
    return reads


def submit(client, event_id: str, *signup_ids: str) -> None:
    for signup_id in signup_ids:
        put_raw_intake(
            client, event_id, signup_id, seats={"N": "1"}, submitted_at={"S": "2026-01-01"}
        )


def counters(store: SignupStore, event_id: str) -> tuple[Any, ...]:
    """What a signup decided twice would move."""
    record = store.get_event(event_id)
    assert record is not None
    e = record.event
    return e.taken, e.accepted, e.version, record.status_counts, e.holds, e.waiting


def test_fresh_inserts_read_no_decision_and_everything_that_may_repeat_is_read(
    client, store, stream, recorder
):
    # GIVEN a new event and 150 fresh signups: two batches, as the event source sends them
    store.create_event("gig", 120, NOW)
    submit(client, "gig", *(f"u{i:03}" for i in range(150)))
    records = stream.read_new()
    cold_start(recorder)
    # WHEN they are decided
    for start in (0, 100):
        assert deliver(records[start : start + 100]) == {"batchItemFailures": []}
    # THEN no decision item was read, and every signup was decided once
    assert main_reads(recorder) == []
    assert len(decisions(client)) == 150 and audit(store).ok
    mark = store.get_event("gig").high_water
    assert mark == int(records[-1]["dynamodb"]["SequenceNumber"])
    before, items = counters(store, "gig"), decisions(client)
    # WHEN the first batch is delivered again (a retry, or the records after a lower
    # failed one), to this processor and to a cold one
    assert deliver(records[:100]) == {"batchItemFailures": []}
    cold_start(recorder)
    assert deliver(records[:100]) == {"batchItemFailures": []}
    # THEN it is read (one request of 100 keys each time), and nothing is decided again
    assert main_reads(recorder) == [100, 100]
    assert (counters(store, "gig"), decisions(client)) == (before, items)
    # and a re-emission (a MODIFY) is read and changes nothing
    assert store.re_emit("gig", "u007")
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    assert main_reads(recorder) == [1]
    assert (counters(store, "gig"), decisions(client)) == (before, items)


@pytest.mark.parametrize("same_batch", [True, False])
@pytest.mark.parametrize("deleted_by", ["ttl", "producer"])
def test_an_intake_record_deleted_and_put_again_keeps_its_first_decision(
    client, store, stream, recorder, deleted_by, same_batch
):
    # GIVEN a and b accepted, the event full
    store.create_event("gig", 2, NOW)
    submit(client, "gig", "a", "b")
    cold_start(recorder)
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    before, items = counters(store, "gig"), decisions(client)
    # WHEN a's intake item is deleted (by TTL: the REMOVE's userIdentity is the service;
    # or by a producer), then put again: a new INSERT, numbered above the mark
    client.delete_item(TableName=store.intake_table, Key=signup_key("gig", "a"))
    removal = stream.read_new()
    assert [r["eventName"] for r in removal] == ["REMOVE"]
    if deleted_by == "ttl":
        removal[0]["userIdentity"] = TTL
    submit(client, "gig", "a")
    put_again = stream.read_new()
    assert [r["eventName"] for r in put_again] == ["INSERT"]
    assert int(put_again[0]["dynamodb"]["SequenceNumber"]) > store.get_event("gig").high_water
    batches = [removal + put_again] if same_batch else [removal, put_again]
    for batch in batches:
        cold_start(recorder)
        assert deliver(batch) == {"batchItemFailures": []}
    # THEN a keeps its first decision, to the byte, and the counters do not move
    assert (counters(store, "gig"), decisions(client)) == (before, items)
    assert audit(store).ok
    # the put was read; the removal wrote its note once, on the event's marker item only
    assert main_reads(recorder) == [1]
    marker = store.get_event_and_parking("gig")
    assert marker[1:] == (None, True)
    # and a second removal, even by a cold processor, writes nothing
    state = state_items(client)
    client.delete_item(TableName=store.intake_table, Key=signup_key("gig", "b"))
    cold_start(recorder)
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    assert state_items(client) == state
    assert [op for op, _ in recorder.calls] == ["batch_get_item"]


def crash_after_commit(version: int) -> type[SignupStore]:
    """A store whose process dies between the commit of ``version`` and its decision items
    (it writes out an earlier journal it finds): the invocation fails whole, and the event
    source delivers the batch again."""

    class CrashAfterCommit(SignupStore):
        def materialize(self, event_id, journal, requests=None):  # type: ignore[override]
            if journal.version == version:
                raise SystemExit("process killed")
            return super().materialize(event_id, journal, requests)

    return CrashAfterCommit


@pytest.mark.parametrize("between", [False, True])
def test_a_batch_delivered_again_after_a_crash_after_its_commit_decides_nothing_twice(
    client, store, stream, recorder, between
):
    # GIVEN a batch committed by a processor that died before writing its decision items
    store.create_event("gig", 3, NOW)
    submit(client, "gig", "a", "b", "c", "d")
    batch = stream.read_new()
    cold_start(recorder, crash_after_commit(1))
    with pytest.raises(SystemExit):
        deliver(batch)
    assert decisions(client) == {} and store.get_event("gig").event.version == 1
    # and, maybe, another commit of the event in between (a later record, by a processor
    # that wrote the first journal out, then died before its own items)
    if between:
        submit(client, "gig", "e")
        cold_start(recorder, crash_after_commit(2))
        with pytest.raises(SystemExit):
            deliver(stream.read_new())
        assert set(decisions(client)) == {("gig", s) for s in "abcd"}
        assert store.get_event("gig").event.version == 2
    # WHEN the batch is delivered again, to a cold processor
    main_reads(recorder)
    cold_start(recorder)
    assert deliver(batch) == {"batchItemFailures": []}
    # THEN the last journal is written out first, the batch is read, nothing is decided
    # again, and the counts hold
    assert main_reads(recorder) == [4]
    assert store.get_event("gig").event.version == (2 if between else 1)
    got = decisions(client)
    assert {s for _, s in got} == set("abcde" if between else "abcd")
    assert [got[("gig", s)].get("position", {}).get("N") for s in "abcd"] == ["1", "2", "3", None]
    assert store.get_event("gig").event.taken == 3
    assert audit(store).ok


@pytest.mark.parametrize("again", ["redelivered", "put-again"])
def test_a_signup_rejected_before_its_event_existed_stays_rejected_once_it_does(
    client, store, stream, recorder, again
):
    # GIVEN a signup rejected unknown_event
    submit(client, "early", "a")
    first = stream.read_new()
    cold_start(recorder)
    assert deliver(first) == {"batchItemFailures": []}
    item = decisions(client)[("early", "a")]
    assert item["reason"] == {"S": "unknown_event"}
    # WHEN its event is created, and its record is delivered again, or deleted and put again
    store.create_event("early", 5, NOW)
    if again == "redelivered":
        batch = first
    else:
        client.delete_item(TableName=store.intake_table, Key=signup_key("early", "a"))
        submit(client, "early", "a")
        batch = stream.read_new()
    cold_start(recorder)
    assert deliver(batch) == {"batchItemFailures": []}
    # THEN it keeps its rejection, and the event counts nothing
    assert decisions(client)[("early", "a")] == item
    assert counters(store, "early")[:3] == (0, 0, 0)
    assert audit(store).ok


def test_requests_are_read_and_answered(client, store, stream, recorder):
    # GIVEN an event that holds seats, and a fresh signup held (nothing read)
    store.create_event("gig", 1, NOW, waitlist=1, hold_seconds=600)
    submit(client, "gig", "a", "b")
    cold_start(recorder)
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    assert main_reads(recorder) == []
    held = store.get_decision("gig", "a")
    assert (held["status"], store.get_decision("gig", "b")["status"]) == (
        Status.HELD,
        Status.WAITLISTED,
    )
    # WHEN a's holder confirms, then cancels (MODIFYs of intake)
    store.request_transition("gig", "a", RequestKind.CONFIRM, NOW)
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    store.request_transition("gig", "a", RequestKind.CANCEL, NOW)
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    # THEN each was read and applied: a cancelled, b promoted into its seat (b's item is
    # read too: the engine moved it)
    assert main_reads(recorder) == [1, 1, 1]
    assert store.get_decision("gig", "a")["status"] == Status.CANCELLED
    assert store.get_decision("gig", "b")["status"] == Status.HELD
    item = client.get_item(TableName=CONTROL_TABLE.name, Key=event_key("gig"), ConsistentRead=True)[
        "Item"
    ]
    number, version = item["high_water"]["S"].split("@")
    assert number.isdigit() and version == item["version"]["N"]


class BeforeTheMark(SignupStore):
    """A processor of the version before the mark (a mixed deployment, a rollback): its
    commits write no mark, and it notes no deletion."""

    def commit(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("high_water", None)
        return super().commit(*args, **kwargs)

    def note_may_repeat(self, event_id: str) -> None:
        return None


def test_a_commit_that_did_not_raise_the_mark_voids_it_for_good(client, store, stream):
    # GIVEN an event with a mark, then a commit by a processor that keeps none, and a
    # deletion only it saw
    store.create_event("gig", 3, NOW)
    stream_handler._processor = StreamProcessor(store)
    put_raw_intake(client, "gig", "a", seats={"N": "1"}, submitted_at={"S": NOW})
    deliver(stream.read_new())
    assert store.get_event("gig").high_water is not None
    stream_handler._processor = StreamProcessor(BeforeTheMark(client, sleep=lambda _: None))
    put_raw_intake(client, "gig", "b", seats={"N": "1"}, submitted_at={"S": NOW})
    deliver(stream.read_new())
    client.delete_item(TableName=store.intake_table, Key=signup_key("gig", "b"))
    deliver(stream.read_new())
    # WHEN this version decides again, and b is put again
    stream_handler._processor = StreamProcessor(store)
    assert store.get_event("gig").high_water is None  # behind the version: not trusted
    put_raw_intake(client, "gig", "b", seats={"N": "1"}, submitted_at={"S": NOW})
    deliver(stream.read_new())
    # THEN b keeps its one decision: two seats taken, not three
    event = store.get_event("gig").event
    assert (event.taken, event.accepted) == (2, 2)
    assert audit(store).ok


# -- a deletion that never reached the processor --------------------------------------
#
# The event source gave up on the batch of a REMOVE (its note goes to the on-failure
# queue; here the record is simply never delivered): nothing noted that the key may come
# again, so its put again is decided unread, above the mark, and its commit counts a
# first decision that cannot be written (the item holds the first one). The processor
# finds it writing the items out (the refused put's old item names another record) and
# takes it back out of the event in one more commit, which keeps no mark.


def lost_deletion(client, stream, signup_id: str) -> None:
    client.delete_item(TableName=INTAKE_TABLE.name, Key=signup_key("gig", signup_id))
    assert [r["eventName"] for r in stream.read_new()] == ["REMOVE"]  # never delivered


@pytest.mark.parametrize(
    ("capacity", "waitlist", "void_status"),
    [(3, 0, Status.ACCEPTED), (2, 2, Status.WAITLISTED), (2, 0, Status.REJECTED)],
)
def test_a_put_again_whose_deletion_was_lost_is_taken_back_and_decided_once(
    client, store, stream, recorder, capacity, waitlist, void_status
):
    # GIVEN a and b accepted
    store.create_event("gig", capacity, NOW, waitlist=waitlist)
    submit(client, "gig", "a", "b")
    cold_start(recorder)
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    before, items = counters(store, "gig"), decisions(client)
    # WHEN a's intake item is deleted, the deletion lost, and a put again
    lost_deletion(client, stream, "a")
    submit(client, "gig", "a")
    main_reads(recorder)
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    # THEN it was decided unread (as void_status), found void, and taken back: the counts
    # are as before, a keeps its first decision, and the event keeps no mark any more
    assert main_reads(recorder) == [], "decided unread: the case under test"
    taken, accepted, version, counts, holds, waiting = counters(store, "gig")
    assert (taken, counts, holds, waiting) == (before[0], before[3], before[4], before[5])
    assert accepted == before[1] + (1 if void_status == Status.ACCEPTED else 0)  # a gap
    assert version == before[2] + 2
    assert decisions(client) == items
    assert store.get_event("gig").high_water is None
    assert audit(store).ok
    # and from now on every signup of the event is read
    submit(client, "gig", "z")
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    assert main_reads(recorder) == [1]


def test_seats_a_void_decision_held_go_down_the_waitlist_at_once(client, store, stream):
    # GIVEN a accepted, of two seats and a waitlist
    store.create_event("gig", 2, NOW, waitlist=2)
    stream_handler._processor = StreamProcessor(store)
    submit(client, "gig", "a")
    deliver(stream.read_new())
    # WHEN a's deletion is lost, and a is put again in one batch with c and d: a takes the
    # last seat (void), c and d wait
    lost_deletion(client, stream, "a")
    submit(client, "gig", "a", "c", "d")
    deliver(stream.read_new())
    # THEN a's seat comes back and goes to c, first in line; d waits
    got = decisions(client)
    assert got[("gig", "a")]["position"]["N"] == "1"
    assert got[("gig", "c")]["status"]["S"] == Status.ACCEPTED
    assert got[("gig", "d")]["status"]["S"] == Status.WAITLISTED
    event = store.get_event("gig").event
    assert event.taken == 2 and [w.signup_id for w in event.waiting] == ["d"]
    assert audit(store).ok


def test_a_void_decision_left_unwritten_by_a_crash_is_taken_back_by_the_next_processor(
    client, store, stream, recorder
):
    # GIVEN a accepted, its deletion lost, and the commit of its put again made by a
    # processor that died before writing the items out
    store.create_event("gig", 3, NOW)
    submit(client, "gig", "a")
    cold_start(recorder)
    deliver(stream.read_new())
    lost_deletion(client, stream, "a")
    submit(client, "gig", "a", "b")
    batch = stream.read_new()
    cold_start(recorder, crash_after_commit(2))
    with pytest.raises(SystemExit):
        deliver(batch)
    assert store.get_event("gig").event.taken == 3
    # WHEN the batch is delivered again, to a cold processor
    cold_start(recorder)
    assert deliver(batch) == {"batchItemFailures": []}
    # THEN it writes the last journal out, finds a void, takes it back, and decides again
    event = store.get_event("gig").event
    assert event.taken == 2 and event.version == 3
    assert {s for _, s in decisions(client)} == {"a", "b"}
    assert audit(store).ok


def test_a_void_decision_found_by_two_processors_is_taken_back_once(client, store, stream):
    # GIVEN a accepted, of three seats, and its deletion lost
    store.create_event("gig", 3, NOW)
    stream_handler._processor = StreamProcessor(store)
    submit(client, "gig", "a")
    deliver(stream.read_new())
    lost_deletion(client, stream, "a")
    submit(client, "gig", "a")
    batch = stream.read_new()

    class SecondProcessorFirst(SignupStore):
        """Finds the void first, then lets a second processor, given the same batch (a
        redelivery), write the journal out and take it back before this one does."""

        def materialize(self, event_id, journal, requests=None):  # type: ignore[override]
            voids = super().materialize(event_id, journal, requests)
            if voids and stream_handler._processor is first:
                stream_handler._processor = StreamProcessor(store)
                assert deliver(batch) == {"batchItemFailures": []}
                stream_handler._processor = first
            return voids

    first = StreamProcessor(SecondProcessorFirst(client, sleep=lambda _: None))
    stream_handler._processor = first
    # WHEN both go through
    assert deliver(batch) == {"batchItemFailures": []}
    # THEN the seat was taken back once: one seat taken, by a
    event = store.get_event("gig").event
    assert (event.taken, event.version) == (1, 3)
    assert audit(store).ok


@pytest.mark.parametrize("real", [Status.WAITLISTED, Status.HELD])
def test_a_put_again_of_a_signup_in_the_lineup_is_read_and_keeps_its_place(
    client, store, stream, recorder, real
):
    # GIVEN a in the lineup (waiting behind x, or holding its seat), its deletion lost
    if real == Status.WAITLISTED:
        store.create_event("gig", 1, NOW, waitlist=5)
        submit(client, "gig", "x", "a")
    else:
        store.create_event("gig", 2, NOW, hold_seconds=600)
        submit(client, "gig", "a")
    cold_start(recorder)
    deliver(stream.read_new())
    before, items = counters(store, "gig"), decisions(client)
    assert items[("gig", "a")]["status"]["S"] == real
    lost_deletion(client, stream, "a")
    # WHEN a is put again, above the mark
    submit(client, "gig", "a")
    main_reads(recorder)
    assert deliver(stream.read_new()) == {"batchItemFailures": []}
    # THEN it is read all the same (the lineup names it), and nothing moves: a keeps its
    # place, to be promoted or to lapse in time
    assert main_reads(recorder) == [1]
    assert (counters(store, "gig"), decisions(client)) == (before, items)
    assert audit(store).ok


def test_taking_back_is_refused_while_the_lineup_cannot_be_read(client, store, stream):
    """A take-back from an event whose lineup does not read (a newer format after a
    rollback) would commit an empty lineup: the event is parked instead, as for any step."""
    store.create_event("gig", 3, NOW, waitlist=5)
    stream_handler._processor = StreamProcessor(store)
    submit(client, "gig", "a", "b")
    deliver(stream.read_new())
    lost_deletion(client, stream, "a")
    submit(client, "gig", "a", "c", "d", "e")  # a void, taking the third seat; c, d, e wait
    batch = stream.read_new()
    stream_handler._processor = StreamProcessor(crash_after_commit(2)(client, sleep=lambda _: None))
    with pytest.raises(SystemExit):
        deliver(batch)
    assert [w.signup_id for w in store.get_event("gig").event.waiting] == ["c", "d", "e"]
    client.update_item(
        TableName=CONTROL_TABLE.name,
        Key=event_key("gig"),
        UpdateExpression="SET lineup = :l",
        ExpressionAttributeValues={":l": {"B": zlib.compress(b'{"f": 99, "h": [], "w": []}')}},
    )
    stream_handler._processor = StreamProcessor(store)
    deliver(batch)
    record = store.get_event("gig")
    assert record.event.version == 2 and record.lineup_error is not None
    assert store.get_parking("gig") is not None

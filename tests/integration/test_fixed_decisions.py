"""Decisions are fixed to the byte at commit, binary stays binary, and no intake record is
too big to decide: the stream handler and the store against moto."""

from __future__ import annotations

import json
import random
import string
from typing import Any

import pytest

from tests.helpers import decisions, put_raw_intake, unordered
from tests.oracle import decide
from tests.unit.test_journal import V1_DECISIONS, V1_JOURNAL
from turnstile.base.contract import Reason, Status
from turnstile.base.errors import JournalTooLargeError
from turnstile.base.itemsize import typed_item_size
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.dynamo import TRANSACTION_BYTES, event_key, signup_key
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import MAX_DECISION_ITEM_BYTES, Decision
from turnstile.storage.journal import Journal
from turnstile.storage.store import MAX_JOURNAL_BYTES, SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext

NOW = "2026-01-01T00:00:00.000000Z"
SUBMITTED = {"S": "2026-01-01T00:00:00Z"}


@pytest.fixture(autouse=True)
def fresh_processor(aws):
    stream_handler._processor = None
    yield
    stream_handler._processor = None


def invoke(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The handler, given the batch as Lambda gives it: JSON, binary as base64 text."""
    event = json.loads(json.dumps({"Records": records}))
    return stream_handler.handler(event, LocalLambdaContext())


def cold_start(store: SignupStore) -> None:
    """A new container: no memory of which journals were written out."""
    stream_handler._processor = StreamProcessor(store)


class CrashAfterCommit(SignupStore):
    def materialize(self, event_id, journal, requests=None):  # type: ignore[override]
        raise RuntimeError("process killed")


def typed_attributes(name: str) -> dict[str, Any]:
    return {
        "M": {
            "name": {"S": name},
            "photo": {"B": b"\x00\xff\xfe binary \x80"},
            "keys": {"BS": [b"\x01\x02", b"\xff"]},
            "tags": {"SS": ["vip", "early"]},
            "price": {"N": "12.50"},
            "nested": {"L": [{"B": b"\x10"}, {"NULL": True}, {"M": {"n": {"N": "-0.001"}}}]},
        }
    }


# -- fixed to the byte ------------------------------------------------------------------


def test_rewriting_or_deleting_intake_never_changes_a_decision(client, store, stream):
    # GIVEN two signups decided, their items written
    store.create_event("gig", 5, NOW)
    put_raw_intake(client, "gig", "a", attributes=typed_attributes("Ada"), submitted_at=SUBMITTED)
    put_raw_intake(client, "gig", "b", attributes=typed_attributes("Bo"), submitted_at=SUBMITTED)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    before = decisions(client)
    # WHEN a producer rewrites one intake record and the other is deleted (TTL), and a cold
    # processor, which writes the last journal out again, decides a new signup
    put_raw_intake(client, "gig", "a", attributes={"M": {"name": {"S": "Mallory"}}})
    client.delete_item(TableName=store.intake_table, Key=signup_key("gig", "b"))
    stream.read_new()  # the MODIFY and REMOVE change nothing anyway; skip them
    put_raw_intake(client, "gig", "c", submitted_at=SUBMITTED)
    cold_start(store)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN the decisions of a and b are the same, byte for byte
    after = decisions(client)
    assert after[("gig", "a")] == before[("gig", "a")]
    assert after[("gig", "b")] == before[("gig", "b")]
    assert ("gig", "c") in after


def test_a_crash_after_commit_recovers_the_decision_as_it_was_committed(client, store, stream):
    # GIVEN a processor that dies between its commit and the decision items
    store.create_event("gig", 1, NOW)
    put_raw_intake(client, "gig", "a", attributes=typed_attributes("Ada"), submitted_at=SUBMITTED)
    put_raw_intake(client, "gig", "b", submitted_at=SUBMITTED)
    records = stream.read_new()
    stream_handler._processor = StreamProcessor(CrashAfterCommit(client))
    invoke(records)  # the crash: the group is parked (or failed back), its journal committed
    assert decisions(client) == {}
    # WHEN the producer rewrites a's intake record, then a cold processor gets b's record
    put_raw_intake(client, "gig", "a", attributes={"M": {"name": {"S": "Mallory"}}})
    cold_start(store)
    assert invoke(records[1:]) == {"batchItemFailures": []}
    # THEN a's item carries what was committed, binary as binary, and the counts hold
    item = decisions(client)[("gig", "a")]
    assert item["status"] == {"S": Status.ACCEPTED}
    assert item["attributes"]["M"]["name"] == {"S": "Ada"}
    assert item["attributes"]["M"]["photo"] == {"B": b"\x00\xff\xfe binary \x80"}
    assert decisions(client)[("gig", "b")]["reason"] == {"S": Reason.CAPACITY_FULL}
    assert audit(store).ok


class LosesItsItems(SignupStore):
    """A processor whose decision items never get written (killed right after its commit,
    with nothing parked: the next processor finds the journal unwritten)."""

    def materialize(self, event_id, journal, requests=None):  # type: ignore[override]
        return None


def test_a_journal_left_unwritten_copies_only_what_its_digests_say_was_committed(
    client, store, stream
):
    # GIVEN a commit of a and b whose items were never written
    store.create_event("gig", 5, NOW)
    put_raw_intake(client, "gig", "a", attributes=typed_attributes("Ada"), submitted_at=SUBMITTED)
    put_raw_intake(client, "gig", "b", attributes=typed_attributes("Bo"), submitted_at=SUBMITTED)
    stream_handler._processor = StreamProcessor(LosesItsItems(client))
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    assert decisions(client) == {}
    # WHEN a producer rewrites a's record, and a cold processor decides a new signup c
    put_raw_intake(client, "gig", "a", attributes={"M": {"name": {"S": "Mallory"}}})
    stream.read_new()  # (a MODIFY without the marker: filtered out on AWS)
    put_raw_intake(client, "gig", "c", submitted_at=SUBMITTED)
    cold_start(store)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN b's item is as committed (read from intake, its digest the journal's: binary as
    # binary, sets as sets), and a's is committed ACCEPTED without anything from the
    # rewritten record, saying so
    got = decisions(client)
    b_item = got[("gig", "b")]
    assert unordered(b_item["attributes"]) == unordered(typed_attributes("Bo"))
    assert b_item["submitted_at"] == SUBMITTED
    a_item = got[("gig", "a")]
    assert a_item["status"] == {"S": Status.ACCEPTED} and a_item["position"] == {"N": "1"}
    assert "attributes" not in a_item and "submitted_at" not in a_item
    assert a_item["detail"]["S"].endswith(
        "the intake record changed after the decision was committed"
    )
    assert ("gig", "c") in got
    assert audit(store).ok


# -- binary stays binary ----------------------------------------------------------------


def test_binary_and_binary_sets_stay_binary_from_the_lambda_event_to_the_item(
    client, store, stream
):
    # GIVEN a signup with binary, a binary set and nested binary, as a producer writes it
    store.create_event("gig", 5, NOW)
    attributes = typed_attributes("Ada")
    put_raw_intake(client, "gig", "a", attributes=attributes, submitted_at=SUBMITTED)
    records = stream.read_new()
    # (the Lambda event carries binary as base64 text)
    assert isinstance(records[0]["dynamodb"]["NewImage"]["attributes"]["M"]["photo"]["B"], str)
    # WHEN the handler decides it
    assert invoke(records) == {"batchItemFailures": []}
    # THEN the decision item holds the same typed attributes: B as B, BS as BS
    item = decisions(client)[("gig", "a")]
    stored = item["attributes"]["M"]
    assert stored["photo"] == {"B": b"\x00\xff\xfe binary \x80"}
    assert sorted(stored["keys"]["BS"]) == [b"\x01\x02", b"\xff"]
    assert stored["nested"]["L"][0] == {"B": b"\x10"}
    assert stored["price"] == {"N": "12.50"}
    assert sorted(stored["tags"]["SS"]) == ["early", "vip"]
    # and the same as the in-process path (the store's own intake read) writes
    intake = store.get_intake("gig", "a")
    assert store.decision_item(
        "gig",
        Decision("a", item["sequence_number"]["S"], Status.ACCEPTED, 1, position=1),
        item["decided_at"]["S"],
        intake,
    ) == {k: v for k, v in item.items()}
    # WHEN a cold processor writes the journal out again
    put_raw_intake(client, "gig", "b", submitted_at=SUBMITTED)
    cold_start(store)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN not a byte changed
    assert decisions(client)[("gig", "a")] == item


# -- no record too big to decide --------------------------------------------------------


def test_an_intake_item_at_the_size_limit_is_decided_and_blocks_nothing(client, store, stream):
    # GIVEN an intake record just under the item size limit (moto's: 405,000 bytes) between
    # two ordinary ones, in one batch: copied whole, its decision item would be over it
    store.create_event("gig", 5, NOW)
    put_raw_intake(client, "gig", "a", submitted_at=SUBMITTED)
    put_raw_intake(client, "gig", "huge", submitted_at={"S": "9" * 404_900})
    put_raw_intake(client, "gig", "c", attributes=typed_attributes("Cy"), submitted_at=SUBMITTED)
    # WHEN the batch is delivered
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN every signup has its decision item, the huge one bounded
    got = decisions(client)
    assert {k[1] for k in got} == {"a", "huge", "c"}
    assert all(typed_item_size(item) <= MAX_DECISION_ITEM_BYTES for item in got.values())
    assert (
        got[("gig", "c")]["attributes"]
        == store.decision_item(
            "gig", Decision("c", "1", Status.ACCEPTED, 1), NOW, store.get_intake("gig", "c")
        )["attributes"]
    )
    event = store.get_event("gig")
    assert event is not None and event.event.taken == 3
    assert audit(store).ok


def oversized_request(signup_id: str, n: int) -> IntakeRecord:
    return IntakeRecord(
        "gig",
        signup_id,
        f"{n:021d}",
        attributes={"blob": random.Random(n).randbytes(390_000), "note": "x" * 5000},
        submitted_at="9" * 300_000,
    )


def test_oversized_requests_built_directly_still_commit_and_materialize(client, store):
    # GIVEN requests far past any validator's bound (attributes and submitted_at ~390 KB)
    record = store.create_event("gig", 2, NOW)
    requests = [oversized_request(f"u{i}", i) for i in range(3)]
    outcome = decide(record.event, requests)
    # WHEN they are committed and materialized
    journal = store.commit(record.event, outcome, NOW, {r.signup_id: r for r in requests})
    store.materialize("gig", journal)
    # THEN the journal is bounded, every decision is an item, and says what it dropped
    assert len(journal.encode()) <= MAX_JOURNAL_BYTES
    got = decisions(client)
    assert [got[("gig", f"u{i}")]["status"]["S"] for i in range(3)] == [
        Status.ACCEPTED,
        Status.ACCEPTED,
        Status.REJECTED,
    ]
    for item in got.values():
        assert "attributes" not in item and "submitted_at" not in item
        assert "not stored" in item["detail"]["S"]


#: A journal holds digests, not copied fields: a hundred rows take about 2 KB, so a bound
#: this small stands in for a journal pressed by a big lineup (MAX_JOURNAL_AND_LINEUP_BYTES).
SMALL_JOURNAL_BYTES = 700


@pytest.fixture
def small_journals(monkeypatch):
    from turnstile.storage import store as store_module

    monkeypatch.setattr(store_module, "MAX_JOURNAL_BYTES", SMALL_JOURNAL_BYTES)
    return SMALL_JOURNAL_BYTES


def test_a_hundred_big_decisions_commit_in_several_journals_and_all_materialize(
    client, store, stream, small_journals
):
    # GIVEN 100 signups of ~4 KB incompressible binary attributes each, in one batch
    store.create_event("gig", 60, NOW)
    rng = random.Random(3)
    for i in range(100):
        put_raw_intake(
            client,
            "gig",
            f"u{i:03d}",
            attributes={"M": {"blob": {"B": rng.randbytes(3900)}}},
            submitted_at=SUBMITTED,
        )
    records = stream.read_new()
    assert len(records) == 100
    # WHEN the batch is delivered
    assert invoke(records) == {"batchItemFailures": []}
    # THEN it took several commits, each journal within bounds
    event = store.get_event("gig")
    assert event is not None and event.journal is not None
    assert event.event.version >= 2
    assert len(event.journal.encode()) <= small_journals
    # and every decision is an item with its attributes, in stream order
    got = decisions(client)
    assert len(got) == 100
    assert all(len(item["attributes"]["M"]["blob"]["B"]) == 3900 for item in got.values())
    positions = [got[("gig", f"u{i:03d}")].get("position", {}).get("N") for i in range(100)]
    assert positions == [str(i) for i in range(1, 61)] + [None] * 40
    assert audit(store).ok


def test_unknown_event_rejections_of_big_signups_fit_their_transactions(client, store):
    # GIVEN 99 rejections whose items are ~60 KB each (~6 MB: past a transaction's 4 MB)
    calls: list[int] = []
    original = client.transact_write_items

    def counting(**kwargs):
        calls.append(sum(typed_item_size(a["Put"]["Item"]) for a in kwargs["TransactItems"][1:]))
        return original(**kwargs)

    client.transact_write_items = counting
    requests = {
        f"u{i}": IntakeRecord("nope", f"u{i}", str(i), submitted_at="9" * 60_000) for i in range(99)
    }
    outcome = decide(None, list(requests.values()))
    # WHEN they are written
    store.reject_without_event("nope", outcome.decisions, requests, NOW)
    # THEN in several transactions, each within the limit, and every one written
    assert len(calls) > 1
    assert all(size <= TRANSACTION_BYTES for size in calls)
    assert len(decisions(client)) == 99


# -- journals written before format 2 ---------------------------------------------------


def test_a_format_1_journal_still_takes_the_copied_fields_from_intake(client, store):
    # GIVEN a journal written by the previous encoder, and its signups' intake records
    binary = {"M": {"k": {"B": b"\x01"}}}
    put_raw_intake(client, "gig", "u0", attributes=binary, submitted_at=SUBMITTED)
    put_raw_intake(client, "gig", "u1", submitted_at=SUBMITTED)
    journal = Journal.decode(V1_JOURNAL)
    # WHEN it is written out (no requests at hand)
    store.materialize("gig", journal)
    # THEN its items are the decisions, with attributes and submitted_at read from intake
    got = decisions(client)
    assert {k[1] for k in got} == {d.signup_id for d in V1_DECISIONS}
    assert got[("gig", "u0")]["attributes"] == binary
    assert got[("gig", "u0")]["submitted_at"] == SUBMITTED
    assert got[("gig", "u0")]["position"] == {"N": "5"}
    assert "attributes" not in got[("gig", "u2")]


def test_a_format_1_journal_takes_the_requests_at_hand_and_intake_for_the_rest(client, store):
    # GIVEN a format-1 journal whose processor died before writing its items, and intake
    put_raw_intake(client, "gig", "u0", attributes={"M": {"name": {"S": "Ada"}}})
    put_raw_intake(client, "gig", "u1", attributes={"M": {"via": {"S": "intake"}}})
    journal = Journal.decode(V1_JOURNAL)
    # WHEN another processor writes them out, knowing the request of u1 only
    u1 = IntakeRecord("gig", "u1", "2", 1, {"via": "request"}, "2026-01-01T00:00:02Z")
    store.materialize("gig", journal, {"u1": u1})
    # THEN u0's item is completed from intake, u1's from its request, at the journal's time
    got = decisions(client)
    assert got[("gig", "u0")]["attributes"] == {"M": {"name": {"S": "Ada"}}}
    assert "submitted_at" not in got[("gig", "u0")]
    assert got[("gig", "u1")]["attributes"] == {"M": {"via": {"S": "request"}}}
    assert got[("gig", "u1")]["submitted_at"] == {"S": "2026-01-01T00:00:02Z"}
    assert {got[("gig", s)]["decided_at"]["S"] for s in ("u0", "u1", "u2")} == {NOW}


def test_a_format_1_journal_copies_only_well_formed_intake(client, store):
    # GIVEN intake written by hand: attributes not a map, or empty; a time that is a number
    put_raw_intake(client, "gig", "u0", attributes={"S": "x"}, submitted_at={"N": "5"})
    put_raw_intake(client, "gig", "u1", attributes={"M": {}}, submitted_at={"S": "2026"})
    # WHEN a format-1 journal is written out from intake alone
    store.materialize("gig", Journal.decode(V1_JOURNAL))
    # THEN only what is well formed is copied
    got = decisions(client)
    u0, u1 = got[("gig", "u0")], got[("gig", "u1")]
    assert ("attributes" in u0, u0.get("submitted_at")) == (False, None)
    assert ("attributes" in u1, u1.get("submitted_at")) == (False, {"S": "2026"})


# -- journals too large: the processor commits the longest prefix that fits ---------------


def big_records(first: int, last: int) -> list[StreamRecord]:
    """Intake records u<first>..u<last - 1> of "gig", each with ~3 KB of compressed text."""
    rng = random.Random(7)
    texts = ["".join(rng.choices(string.ascii_letters, k=4000)) for _ in range(last)]
    records = []
    for i in range(first, last):
        keys = {"event_id": "gig", "signup_id": f"u{i:03d}"}
        image = {**keys, "seats": 1, "attributes": {"blob": texts[i]}}
        records.append(StreamRecord(str(1000 + i), "INSERT", keys, image))
    return records


class CountingCommits(SignupStore):
    """Records, per commit tried, how many decisions it carried and how many would fit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tries: list[tuple[int, int | None]] = []

    def commit(self, expected, outcome, decided_at, requests, expires_at=None, **kwargs):  # type: ignore[override]
        try:
            journal = super().commit(expected, outcome, decided_at, requests, expires_at, **kwargs)
        except JournalTooLargeError as too_big:
            self.tries.append((len(outcome.decisions), too_big.fits))
            raise
        self.tries.append((len(outcome.decisions), None))
        return journal


def test_a_journal_too_large_commits_exactly_the_decisions_that_fit(client, small_journals):
    store = CountingCommits(client, sleep=lambda _: None)
    store.create_event("gig", 60, NOW)
    # WHEN 100 big signups are decided in one chunk
    result = StreamProcessor(store, clock=lambda: NOW, chunk_size=100).process(big_records(0, 100))
    # THEN each commit refused as too large is followed by one of exactly the decisions
    # that fit (not fewer), and every signup is decided once, in stream order
    refused = [(i, fits) for i, (_, fits) in enumerate(store.tries) if fits is not None]
    assert refused
    for i, fits in refused:
        assert store.tries[i + 1] == (fits, None)
    assert [d.decision.signup_id for d in result.decided] == [f"u{i:03d}" for i in range(100)]
    assert [d.decision.position for d in result.decided] == [*range(1, 61)] + [None] * 40
    assert audit(store).ok


def test_a_journal_too_large_never_decides_again_what_was_decided(client, small_journals):
    store = CountingCommits(client, sleep=lambda _: None)
    store.create_event("gig", 60, NOW)
    processor = StreamProcessor(store, clock=lambda: NOW, chunk_size=100)
    # GIVEN the first 20 decided
    processor.process(big_records(0, 20))
    # WHEN all 100 arrive in one chunk (the 20 redelivered), 80 new: too many for one journal
    store.tries.clear()
    result = processor.process(big_records(0, 100))
    assert any(fits is not None for _, fits in store.tries)
    # THEN only the 80 new ones are decided: no signup twice, no seat given twice
    assert [d.decision.signup_id for d in result.decided] == [f"u{i:03d}" for i in range(20, 100)]
    event = store.get_event("gig")
    assert (event.event.taken, event.event.accepted) == (60, 60)
    got = decisions(client)
    assert len(got) == 100
    assert audit(store).ok


def test_a_format_1_journal_left_unwritten_takes_the_copied_fields_from_the_batch(client, store):
    # GIVEN an event whose last commit left a journal of format 1 unwritten (u0..u2, the
    # previous encoder), and u1's intake record since deleted
    store.create_event("gig", 10, NOW)
    client.update_item(
        TableName=store.control_table,
        Key=event_key("gig"),
        UpdateExpression="SET #j = :j, #v = :v, #t = :t, #a = :a",
        ExpressionAttributeNames={
            "#j": "journal",
            "#v": "version",
            "#t": "taken",
            "#a": "accepted",
        },
        ExpressionAttributeValues={
            ":j": {"B": V1_JOURNAL},
            ":v": {"N": "7"},
            ":t": {"N": "2"},
            ":a": {"N": "1"},
        },
    )
    # WHEN a processor gets u1 redelivered (with its attributes) and a new u3
    keys = {"event_id": "gig", "signup_id": "u1"}
    u1 = StreamRecord(
        "49600000000000000000000000002",
        "MODIFY",
        keys,
        {**keys, "seats": 1, "attributes": {"via": "record"}},
    )
    keys3 = {"event_id": "gig", "signup_id": "u3"}
    u3 = StreamRecord("49600000000000000000000000004", "INSERT", keys3, {**keys3, "seats": 1})
    StreamProcessor(store, clock=lambda: NOW).process([u1, u3])
    # THEN the journal is written out first, u1's item with the fields of the record at hand
    got = decisions(client)
    assert got[("gig", "u1")]["attributes"] == {"M": {"via": {"S": "record"}}}
    assert got[("gig", "u1")]["reason"]["S"] == Reason.CAPACITY_FULL
    assert ("gig", "u3") in got

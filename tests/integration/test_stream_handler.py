"""The stream handler against moto: ordering, redelivery, failures, throttling, bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers import FaultyClient, decisions, put_raw_intake, state_items
from turnstile.base.contract import CONTROL_TABLE, Reason, Status
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.dynamo import signup_key
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture(autouse=True)
def fresh_processor(aws):
    stream_handler._processor = None
    yield
    stream_handler._processor = None


def use_processor(processor: StreamProcessor) -> None:
    stream_handler._processor = processor


def invoke(records: list[dict[str, Any]]) -> dict[str, Any]:
    return stream_handler.handler({"Records": records}, LocalLambdaContext())


def submit(client, event_id: str, signup_id: str, seats: int = 1) -> None:
    put_raw_intake(
        client,
        event_id,
        signup_id,
        seats={"N": str(seats)},
        submitted_at={"S": "2026-01-01T00:00:00Z"},
    )


def status_of(client, event_id: str, signup_id: str) -> tuple[str, str | None]:
    item = decisions(client)[(event_id, signup_id)]
    return item["status"]["S"], item.get("reason", {}).get("S")


def test_decides_a_batch_in_stream_order(client, store, stream):
    # GIVEN an event with three seats and five single-seat signups
    store.create_event("gig", 3, NOW)
    for i in range(5):
        submit(client, "gig", f"u{i}")
    # WHEN the batch is delivered
    response = invoke(stream.read_new())
    # THEN the first three are accepted in order, the rest rejected full, nothing failed
    assert response == {"batchItemFailures": []}
    got = decisions(client)
    positions = [got[("gig", f"u{i}")].get("position", {}).get("N") for i in range(5)]
    assert positions == ["1", "2", "3", None, None]
    assert [status_of(client, "gig", f"u{i}")[1] for i in (3, 4)] == [Reason.CAPACITY_FULL] * 2
    event = store.get_event("gig")
    assert event is not None and (event.event.taken, event.event.accepted) == (3, 3)
    assert audit(store).ok


def test_redelivered_batch_changes_nothing(client, store, stream):
    store.create_event("gig", 2, NOW)
    for i in range(4):
        submit(client, "gig", f"u{i}")
    records = stream.read_new()
    invoke(records)
    before = state_items(client)
    # WHEN the same batch arrives again, twice, and then a later half of it
    assert invoke(records) == {"batchItemFailures": []}
    invoke(records)
    invoke(records[2:])
    # THEN not a byte of the main table changed
    assert state_items(client) == before


def test_failure_mid_batch_keeps_order_and_other_events_go_on(client, store, stream):
    # GIVEN two events whose records interleave, a commit on event A that keeps failing, and
    # parking A's records failing too (the last resort: the event source retries the group)
    store.create_event("A", 10, NOW)
    store.create_event("B", 10, NOW)
    for i in range(6):
        submit(client, "A", f"a{i}")
        submit(client, "B", f"b{i}")
    records = stream.read_new()
    commits = {"A": 0}

    def fault(operation: str, kwargs: dict[str, Any]) -> str | None:
        if operation == "update_item" and kwargs["Key"]["pk"]["S"] == "EVENT#A":
            commits["A"] += 1
            return "InternalServerError" if commits["A"] >= 2 else None
        if operation == "batch_write_item" and CONTROL_TABLE.name in kwargs["RequestItems"]:
            return "InternalServerError"
        return None

    faulty = SignupStore(FaultyClient(client, fault), sleep=lambda _: None, max_attempts=3)
    use_processor(StreamProcessor(faulty, chunk_size=2))
    # WHEN the batch is processed
    response = invoke(records)
    # THEN A's first chunk is decided, A's third record is reported, nothing after it decided
    a_seqs = [
        r["dynamodb"]["SequenceNumber"]
        for r in records
        if r["dynamodb"]["Keys"]["event_id"]["S"] == "A"
    ]
    assert response == {"batchItemFailures": [{"itemIdentifier": a_seqs[2]}]}
    got = decisions(client)
    assert {k[1] for k in got if k[0] == "A"} == {"a0", "a1"}
    # and every record of B is decided
    assert {k[1] for k in got if k[0] == "B"} == {f"b{i}" for i in range(6)}
    # WHEN Lambda redelivers from the failed record and the fault is gone
    use_processor(StreamProcessor(store))
    failed_at = next(
        i for i, r in enumerate(records) if r["dynamodb"]["SequenceNumber"] == a_seqs[2]
    )
    assert invoke(records[failed_at:]) == {"batchItemFailures": []}
    # THEN A is decided in stream order and the tables are consistent
    got = decisions(client)
    assert [got[("A", f"a{i}")]["position"]["N"] for i in range(6)] == [
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
    ]
    assert audit(store).ok


def test_throttling_on_commit_is_retried_inside_the_invocation(client, stream):
    store_client_calls = {"n": 0}

    def fault(operation: str, kwargs: dict[str, Any]) -> str | None:
        if operation in {"update_item", "batch_write_item"}:
            store_client_calls["n"] += 1
            if store_client_calls["n"] <= 3:
                return "ThrottlingException"
        return None

    faulty = SignupStore(FaultyClient(client, fault), sleep=lambda _: None)
    faulty.create_event("gig", 5, NOW)  # consumes one update-free put
    for i in range(3):
        submit(client, "gig", f"u{i}")
    use_processor(StreamProcessor(faulty))
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    assert faulty.retries == 3
    assert {k[1] for k in decisions(client)} == {"u0", "u1", "u2"}


def test_throttling_past_the_retries_fails_only_that_group(client, store, stream):
    store.create_event("A", 5, NOW)
    store.create_event("B", 5, NOW)
    submit(client, "A", "a0")
    submit(client, "B", "b0")

    def fault(operation: str, kwargs: dict[str, Any]) -> str | None:
        key = kwargs.get("Key", {}).get("pk", {}).get("S")
        parking = operation == "batch_write_item" and CONTROL_TABLE.name in kwargs["RequestItems"]
        return (
            "ProvisionedThroughputExceededException"
            if (key == "EVENT#A" and operation == "update_item") or parking
            else None
        )

    use_processor(StreamProcessor(SignupStore(FaultyClient(client, fault), sleep=lambda _: None)))
    records = stream.read_new()
    response = invoke(records)
    assert response == {
        "batchItemFailures": [{"itemIdentifier": records[0]["dynamodb"]["SequenceNumber"]}]
    }
    assert set(decisions(client)) == {("B", "b0")}


BAD_INPUTS = {
    "seats-zero": {"seats": {"N": "0"}},
    "seats-negative": {"seats": {"N": "-3"}},
    "seats-fraction": {"seats": {"N": "1.5"}},
    "seats-string": {"seats": {"S": "two"}},
    "seats-list": {"seats": {"L": [{"N": "1"}]}},
    "seats-bool": {"seats": {"BOOL": True}},
    "attributes-string": {"attributes": {"S": "not a map"}},
    "attributes-list": {"attributes": {"L": []}},
}


def test_every_bad_input_is_rejected_and_blocks_nothing(client, store, stream):
    # GIVEN good signups around every kind of bad one, in one event
    store.create_event("gig", 100, NOW)
    submit(client, "gig", "first")
    for name, attrs in BAD_INPUTS.items():
        put_raw_intake(client, "gig", name, **attrs)
    put_raw_intake(client, "gig", "-bad-id", seats={"N": "1"})
    put_raw_intake(client, "gig", "x" * 200)
    put_raw_intake(client, "bad event id!", "s1")
    put_raw_intake(client, "no-such-event", "s1")
    submit(client, "gig", "last")
    # WHEN delivered
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN each bad one is REJECTED invalid_request, the unknown event unknown_event
    for name in [*BAD_INPUTS, "-bad-id", "x" * 200]:
        assert status_of(client, "gig", name) == (Status.REJECTED, Reason.INVALID_REQUEST), name
    assert status_of(client, "bad event id!", "s1") == (Status.REJECTED, Reason.INVALID_REQUEST)
    assert status_of(client, "no-such-event", "s1") == (Status.REJECTED, Reason.UNKNOWN_EVENT)
    # and the good ones around them are accepted in order
    got = decisions(client)
    assert got[("gig", "first")]["position"]["N"] == "1"
    assert got[("gig", "last")]["position"]["N"] == "2"
    assert "detail" in got[("gig", "seats-fraction")]
    assert audit(store).ok


def test_modify_of_a_decided_signup_changes_nothing(client, store, stream):
    store.create_event("gig", 1, NOW)
    submit(client, "gig", "a")
    submit(client, "gig", "b")
    invoke(stream.read_new())
    before = state_items(client)
    # WHEN a producer rewrites decided intake records (MODIFY), seats and all
    put_raw_intake(client, "gig", "b", seats={"N": "1"}, attributes={"M": {"x": {"S": "y"}}})
    store.re_emit("gig", "a")
    records = stream.read_new()
    assert [r["eventName"] for r in records] == ["MODIFY", "MODIFY"]
    assert invoke(records) == {"batchItemFailures": []}
    # THEN decisions are unchanged
    assert state_items(client) == before


def test_remove_records_from_ttl_decide_nothing_and_note_once_that_records_may_repeat(
    client, store, stream
):
    store.create_event("gig", 1, NOW)
    submit(client, "gig", "a")
    invoke(stream.read_new())
    client.delete_item(TableName=store.intake_table, Key=signup_key("gig", "a"))
    records = stream.read_new()
    records[0]["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    before = state_items(client)
    assert invoke(records) == {"batchItemFailures": []}
    # nothing but the event's marker item, which now says its INSERTs may repeat a signup
    after = state_items(client)
    marker = after.pop((CONTROL_TABLE.name, "PARK#gig", "PARKED"))
    assert after == before
    assert marker == {
        "pk": {"S": "PARK#gig"},
        "sk": {"S": "PARKED"},
        "event_id": {"S": "gig"},
        "may_repeat": {"BOOL": True},
    }
    # and a cold processor given the removal again writes nothing
    use_processor(StreamProcessor(store))
    assert invoke(records) == {"batchItemFailures": []}
    assert state_items(client) == {**before, (CONTROL_TABLE.name, "PARK#gig", "PARKED"): marker}


def test_a_crash_between_commit_and_items_is_recovered_from_the_journal(client, store, stream):
    # GIVEN a processor that dies right after its commit, before writing decision items
    store.create_event("gig", 2, NOW)
    for i in range(3):
        submit(client, "gig", f"u{i}", seats=1)
    records = stream.read_new()

    class CrashAfterCommit(SignupStore):
        def materialize(self, event_id, journal, requests=None):  # type: ignore[override]
            raise RuntimeError("process killed")

    use_processor(StreamProcessor(CrashAfterCommit(client)))
    first = invoke(records)
    assert first == {"batchItemFailures": []}  # the group failed: parked, and the event with it
    assert store.get_parking("gig") is not None
    assert decisions(client) == {}
    assert store.get_event("gig").event.taken == 2  # committed, not materialized
    # WHEN a fresh processor (a cold start) receives only the LAST record
    use_processor(StreamProcessor(store))
    assert invoke(records[2:]) == {"batchItemFailures": []}
    # THEN the journal was materialized first (it carries every field) and counts hold
    got = decisions(client)
    assert {k[1] for k in got} == {"u0", "u1", "u2"}
    assert status_of(client, "gig", "u2") == (Status.REJECTED, Reason.CAPACITY_FULL)
    assert audit(store).ok


def test_unknown_event_rejection_loses_to_an_event_created_meanwhile(client, store, stream):
    submit(client, "late", "a")
    records = stream.read_new()
    original_read = SignupStore.get_event_and_parking

    class CreatedMeanwhile(SignupStore):
        def get_event_and_parking(self, event_id):  # type: ignore[override]
            record, marker, may_repeat = original_read(self, event_id)
            if record is None and not hasattr(self, "_created"):
                self._created = True
                store.create_event(event_id, 1, NOW)  # lands between read and write
            return record, marker, may_repeat

    use_processor(StreamProcessor(CreatedMeanwhile(client)))
    assert invoke(records) == {"batchItemFailures": []}
    # The rejection's ConditionCheck failed, the processor reloaded and accepted.
    assert status_of(client, "late", "a") == (Status.ACCEPTED, None)
    assert audit(store).ok


def test_emits_emf_metrics_for_the_dashboard(client, store, stream, monkeypatch, capsys):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    store.create_event("gig", 1, NOW)
    for i in range(150):  # more latency values than one EMF document may hold
        submit(client, "gig", f"u{i}")
    capsys.readouterr()
    invoke(stream.read_new())
    documents = [
        json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line
    ]
    assert len(documents) == 1, "one EMF document per batch, not an early flush"
    [doc] = documents
    names = {m["Name"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"SignupAccepted", "SignupRejected", "DecisionLatency", "RecordsReceived"} <= names
    assert (doc["SignupAccepted"], doc["SignupRejected"], doc["RecordsReceived"]) == (
        [1.0],
        [149.0],
        [150.0],
    )
    assert 50 <= len(doc["DecisionLatency"]) < 100
    assert doc["service"] == "turnstile"


@pytest.mark.parametrize(
    "submitted_at",
    [
        {"S": "2026-01-01T00:00:00"},  # naive, as datetime.utcnow().isoformat() writes it
        {"S": "2026-01-01T09:00:00+09:00"},
        {"S": "9999-12-31T23:59:59Z"},  # the future: latency 0, not negative
        {"S": "yesterday"},
        {"N": "1767225600"},
    ],
    ids=["naive", "offset", "future", "junk", "number"],
)
def test_any_submitted_at_decides_and_never_fails_the_batch(
    client, store, stream, monkeypatch, capsys, submitted_at
):
    # GIVEN metrics on, and a signup whose submitted_at a producer wrote with its own clock
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    store.create_event("gig", 1, NOW)
    put_raw_intake(client, "gig", "u1", seats={"N": "1"}, submitted_at=submitted_at)
    capsys.readouterr()
    # WHEN the batch is delivered (the latency metric is computed after the commit)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN it is decided, and any latency published is a number of at least 0
    assert status_of(client, "gig", "u1") == (Status.ACCEPTED, None)
    [doc] = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"_aws"' in x]
    latency = doc.get("DecisionLatency", [])
    assert all(v >= 0 for v in (latency if isinstance(latency, list) else [latency]))


def test_fields_copied_from_intake_are_bounded_on_the_decision(client, store, stream):
    # GIVEN a valid signup whose producer wrote 100 KB of submitted_at
    store.create_event("gig", 1, NOW)
    put_raw_intake(client, "gig", "u1", submitted_at={"S": "2026-01-01T00:00:00Z" * 5000})
    # WHEN decided
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN it is accepted (a bad submitted_at is no reason to reject), the decision item
    # does not carry it, and its detail says it was dropped
    item = decisions(client)[("gig", "u1")]
    assert item["status"]["S"] == Status.ACCEPTED
    assert "submitted_at" not in item
    assert "submitted_at dropped" in item["detail"]["S"]

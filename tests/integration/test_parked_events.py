"""Arrival order when an event's group keeps failing: the event is parked, its records parked
in arrival order and released in that order (docs/arrival-order.md)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from tests.conftest import StreamReader, create_tables
from tests.helpers import FaultyClient, decisions, put_raw_intake, state_items
from tests.integration.test_processor import ConflictingStore
from tests.oracle import decide
from turnstile.base.contract import (
    ALL_TABLES,
    CONTROL_TABLE,
    FAILURE_QUEUE_NAME,
    INTAKE_TABLE,
    STREAM_SOURCE,
    WAKE_SOURCE,
    ControlKey,
    Reason,
    Status,
)
from turnstile.engine.lifecycle import Event
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import BatchResult, StreamProcessor, StreamRecord
from turnstile.jobs.sweeper import Sweeper
from turnstile.storage.dynamo import default_client
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.poller import CheckpointStore, StreamPoller, matches_filter
from turnstile_tools.redrive import redrive_queue

NOW = "2026-01-01T00:00:00.000000Z"


class Outage:
    """Every commit of one event fails (InternalServerError) while ``on``."""

    def __init__(self, event_id: str) -> None:
        self.key = ControlKey.event(event_id)[0]
        self.on = True

    def __call__(self, operation: str, kwargs: dict[str, Any]) -> str | None:
        key = kwargs.get("Key", {}).get(ControlKey.PK, {}).get("S")
        if self.on and operation == "update_item" and key == self.key:
            return "InternalServerError"
        return None


@pytest.fixture(autouse=True)
def fresh_processor():
    stream_handler._processor = None
    yield
    stream_handler._processor = None


def processor_for(client, fault=None, **kwargs: Any) -> StreamProcessor:
    wrapped = FaultyClient(client, fault) if fault else client
    store = SignupStore(wrapped, sleep=lambda _: None, max_attempts=2)
    processor = StreamProcessor(store, clock=lambda: NOW, **kwargs)
    stream_handler._processor = processor
    return processor


def invoke(records: list[dict[str, Any]]) -> dict[str, Any]:
    return stream_handler.handler({"Records": records}, LocalLambdaContext())


def submit(client, event_id: str, signup_id: str, seats: int = 1) -> None:
    put_raw_intake(
        client,
        event_id,
        signup_id,
        seats={"N": str(seats)},
        submitted_at={"S": "2026-01-01T00:00:00Z"},
        attributes={"M": {"team": {"S": signup_id.upper()}}},
    )


def arrivals(records: list[dict[str, Any]]) -> dict[str, str]:
    """signup_id -> the sequence number of its first stream record (its arrival)."""
    first: dict[str, str] = {}
    for r in records:
        first.setdefault(r["dynamodb"]["Keys"]["signup_id"]["S"], r["dynamodb"]["SequenceNumber"])
    return first


def parked_ids(store: SignupStore, event_id: str) -> list[str]:
    return [r.signup_id for r in store.parked_records(event_id)]


def park_outage(client, store, stream, capacity: int = 2) -> tuple[Outage, list[dict[str, Any]]]:
    """GIVEN event "hot" (``capacity`` seats) whose commits keep failing, and a healthy
    "calm", with h0, h1 and c0, c1 delivered in one batch: hot is parked."""
    store.create_event("hot", capacity, NOW)
    store.create_event("calm", 10, NOW)
    for i in range(2):
        submit(client, "hot", f"h{i}")
        submit(client, "calm", f"c{i}")
    outage = Outage("hot")
    processor_for(client, outage)
    records = stream.read_new()
    assert invoke(records) == {"batchItemFailures": []}
    return outage, records


def test_a_group_that_keeps_failing_is_parked_and_the_batch_succeeds(client, store, stream):
    # GIVEN/WHEN a batch whose "hot" group cannot commit (the store's retries are spent)
    _, records = park_outage(client, store, stream)
    # THEN the batch reported no failure (the shard moves on), calm is decided,
    got = decisions(client)
    assert set(got) == {("calm", "c0"), ("calm", "c1")}
    # and hot's records are parked in arrival order under their own sequence numbers
    parked = store.parked_records("hot")
    assert [(r.signup_id, r.sequence_number) for r in parked] == [
        ("h0", arrivals(records)["h0"]),
        ("h1", arrivals(records)["h1"]),
    ]
    assert parked[0].attributes == {"team": "H0"} and parked[0].seats == 1
    marker = store.get_parking("hot")
    assert marker is not None
    assert (marker["first_sequence_number"], marker["error"]) == (
        arrivals(records)["h0"],
        "StoreUnavailableError",
    )
    assert store.get_parking("calm") is None
    assert store.get_event("hot").event.taken == 0


def test_a_parked_event_parks_later_records_and_releases_them_in_arrival_order(
    client, store, stream
):
    # GIVEN hot (2 seats) parked, with h0 and h1
    outage, _ = park_outage(client, store, stream, capacity=2)
    # WHEN later signups of hot arrive while the outage lasts
    for i in range(2, 4):
        submit(client, "hot", f"h{i}")
    submit(client, "calm", "c2")
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN they are parked behind h0 and h1, not decided; calm goes on
    assert parked_ids(store, "hot") == ["h0", "h1", "h2", "h3"]
    assert {k for k in decisions(client) if k[0] == "hot"} == set()
    assert ("calm", "c2") in decisions(client)

    # WHEN the outage ends and the next record of hot arrives
    outage.on = False
    submit(client, "hot", "h4")
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN everything is decided in arrival order: the two seats go to h0 and h1, and
    # exactly the later ones are rejected capacity_full
    got = decisions(client)
    first_seen = arrivals(stream.history)
    for i, signup in enumerate(["h0", "h1"], start=1):
        assert got[("hot", signup)]["status"]["S"] == Status.ACCEPTED
        assert got[("hot", signup)]["position"]["N"] == str(i)
    for signup in ("h2", "h3", "h4"):
        assert got[("hot", signup)]["reason"]["S"] == Reason.CAPACITY_FULL
    # each decision carries its arrival sequence number, and the attributes it came with
    for signup in ("h0", "h1", "h2", "h3", "h4"):
        assert got[("hot", signup)]["sequence_number"]["S"] == first_seen[signup]
    assert got[("hot", "h0")]["attributes"] == {"M": {"team": {"S": "H0"}}}
    # and the event is released: no marker, nothing parked
    assert store.get_parking("hot") is None
    assert store.parked_records("hot") == []
    assert audit(store).ok

    # WHEN the whole stream is replayed, twice
    before = state_items(client)
    assert invoke(stream.history) == {"batchItemFailures": []}
    assert invoke(stream.history) == {"batchItemFailures": []}
    # THEN not a byte changed
    assert state_items(client) == before


def test_the_sweeper_sets_off_the_release_of_an_event_with_no_more_traffic(
    client, store, stream, wakes
):
    outage, records = park_outage(client, store, stream)
    outage.on = False
    wakes.read_new()
    # WHEN the sweeper runs (even one that re-emits every undecided record at once)
    result = Sweeper(store, owner="s", min_age_s=0).sweep("run-1")
    # THEN it decided nothing, re-emitted no parked record as "undecided", and set off
    # the release by waking hot (its own wake-up item: no producer's record needed)
    assert (result.status, result.parked_events, result.releases_triggered) == (
        "succeeded",
        1,
        1,
    )
    assert (result.undecided, result.re_emitted) == (0, 0)
    assert {k for k in decisions(client) if k[0] == "hot"} == set()
    assert stream.read_new() == []
    trigger = [r for r in wakes.read_new() if r["dynamodb"]["Keys"]["pk"]["S"] == "WAKE#hot"]
    assert trigger
    # WHEN the wake-ups' mapping delivers it
    assert invoke(trigger) == {"batchItemFailures": []}
    # THEN hot is released in arrival order, under the original sequence numbers
    got = decisions(client)
    assert [got[("hot", s)]["position"]["N"] for s in ("h0", "h1")] == ["1", "2"]
    assert got[("hot", "h0")]["sequence_number"]["S"] == arrivals(records)["h0"]
    assert store.get_parking("hot") is None
    # and the next sweep finds nothing parked
    assert Sweeper(store, owner="s", min_age_s=0).sweep("run-2").parked_events == 0
    assert audit(store).ok


def test_a_crash_between_a_releases_commit_and_unparking_decides_nothing_twice(
    client, store, stream
):
    outage, _ = park_outage(client, store, stream, capacity=1)
    outage.on = False

    class CrashAfterCommit(SignupStore):
        def materialize(self, event_id, journal, requests):  # type: ignore[override]
            raise RuntimeError("process killed")

    # WHEN a release commits its decisions and dies before writing them out or unparking
    stream_handler._processor = StreamProcessor(CrashAfterCommit(client), clock=lambda: NOW)
    submit(client, "hot", "h2")
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    committed = store.get_event("hot")
    assert committed.event.taken == 1 and committed.journal is not None
    assert [d.signup_id for d in committed.journal.decisions] == ["h0", "h1", "h2"]
    assert store.get_parking("hot") is not None and parked_ids(store, "hot") == ["h0", "h1", "h2"]
    # THEN a fresh processor's next release writes the journal out and decides nothing again
    processor_for(client)
    submit(client, "hot", "h3")
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    got = decisions(client)
    assert got[("hot", "h0")]["position"]["N"] == "1"
    assert [got[("hot", s)]["reason"]["S"] for s in ("h1", "h2", "h3")] == [
        Reason.CAPACITY_FULL
    ] * 3
    after = store.get_event("hot")
    assert (after.event.taken, after.event.accepted) == (1, 1)
    assert after.event.version == committed.event.version + 1  # h3's commit only
    assert store.get_parking("hot") is None and store.parked_records("hot") == []
    assert audit(store).ok


def test_a_record_parked_during_a_release_keeps_the_event_parked(client, store, stream):
    outage, _ = park_outage(client, store, stream)
    outage.on = False
    late = IntakeRecord(event_id="hot", signup_id="late", sequence_number="9" * 30)

    class ParkedMeanwhile(SignupStore):
        def unpark(self, event_id, sequence_numbers):  # type: ignore[override]
            super().unpark(event_id, sequence_numbers)
            if not hasattr(self, "_done"):
                self._done = True  # another processor parks a record of hot right now
                store.park("hot", [late], NOW, None)

    # WHEN a release runs while another record is parked under it
    processor = StreamProcessor(ParkedMeanwhile(client), clock=lambda: NOW)
    assert processor.release("hot") is False
    # THEN what it read is decided, and the event stays parked for the record parked since
    assert {k[1] for k in decisions(client) if k[0] == "hot"} == {"h0", "h1"}
    assert store.get_parking("hot") is not None and parked_ids(store, "hot") == ["late"]
    # and the next release takes it
    assert StreamProcessor(store, clock=lambda: NOW).release("hot") is True
    assert store.get_parking("hot") is None
    assert ("hot", "late") in decisions(client)


def test_records_dynamodb_refuses_are_not_parked_but_left_to_the_event_source(
    client, store, stream
):
    # GIVEN a commit of hot that DynamoDB refuses as invalid (the records are at fault)
    store.create_event("hot", 2, NOW)
    store.create_event("calm", 2, NOW)
    submit(client, "hot", "h0")
    submit(client, "calm", "c0")

    def refused(operation: str, kwargs: dict[str, Any]) -> str | None:
        key = kwargs.get("Key", {}).get(ControlKey.PK, {}).get("S")
        return "ValidationException" if key == "EVENT#hot" else None

    processor_for(client, refused)
    records = stream.read_new()
    # WHEN delivered
    response = invoke(records)
    # THEN hot is not parked (that would block it behind records that can never be
    # decided): the group is reported, for the event source's retries, bisect and queue
    assert response == {"batchItemFailures": [{"itemIdentifier": arrivals(records)["h0"]}]}
    assert store.get_parking("hot") is None and store.parked_records("hot") == []
    assert set(decisions(client)) == {("calm", "c0")}


def test_a_stale_release_cannot_clear_a_marker_placed_after_it(store):
    request = IntakeRecord(event_id="gig", signup_id="a", sequence_number="100")
    first = store.park("gig", [request], NOW, "StoreUnavailableError")
    assert store.clear_parking("gig", first) is True
    assert store.get_parking("gig") is None
    # WHEN the event is parked again, and a release that read the first marker tries to clear
    second = store.park("gig", [replace(request, sequence_number="200")], NOW, None)
    # THEN the version moved on (it never restarts), so the stale clear fails
    assert second > first
    assert store.clear_parking("gig", first) is False
    assert store.get_parking("gig") is not None


def test_the_audit_accounts_for_parked_records_and_flags_an_old_parking(client, store, stream):
    park_outage(client, store, stream)
    submit(client, "hot", "h2")
    invoke(stream.read_new())
    # WHEN audited within the grace period
    fresh = audit(store, pending_grace_s=300, now=datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    # THEN the records are reported parked (waiting in order), not pending, and OK
    [hot] = [e for e in fresh.events if e.event_id == "hot"]
    assert (hot.parked, hot.pending, hot.violations) == (3, 0, [])
    assert fresh.ok and fresh.totals["parked"] == 3
    # WHEN the event has been parked for longer than the grace period
    late = audit(store, pending_grace_s=300, now=datetime(2026, 1, 1, 1, 0, tzinfo=UTC))
    [hot] = [e for e in late.events if e.event_id == "hot"]
    # THEN it is a violation that says for how long, since which record and why
    assert not late.ok
    [violation] = hot.violations
    assert violation.startswith("parked for 3600 s (more than 300 s): 3 records since")
    assert violation.endswith("last error StoreUnavailableError")


def test_parked_records_a_commit_decided_are_not_counted_parked(client, store, stream):
    # GIVEN a release that committed h0..h2 (parked) and died before writing them out or
    # unparking them: the marker and the parked records are still there
    outage, _ = park_outage(client, store, stream, capacity=1)
    outage.on = False

    class CrashAfterCommit(SignupStore):
        def materialize(self, event_id, journal, requests):  # type: ignore[override]
            raise RuntimeError("process killed")

    stream_handler._processor = StreamProcessor(CrashAfterCommit(client), clock=lambda: NOW)
    submit(client, "hot", "h2")
    invoke(stream.read_new())
    assert store.get_parking("hot") is not None and parked_ids(store, "hot") == ["h0", "h1", "h2"]
    # WHEN audited THEN they are decided (in the journal, being written out), none is
    # counted parked
    report = audit(store, pending_grace_s=300, now=datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    [hot] = [e for e in report.events if e.event_id == "hot"]
    assert (hot.parked, hot.parked_for_s, hot.pending, hot.unmaterialized) == (0, None, 0, 3)
    # and an hour later only the journal left unwritten is a violation, not the marker
    late = audit(store, pending_grace_s=300, now=datetime(2026, 1, 1, 1, 0, tzinfo=UTC))
    [hot] = [e for e in late.events if e.event_id == "hot"]
    assert (hot.parked, hot.parked_for_s) == (0, None)
    assert [v.split(":")[0] for v in hot.violations] == ["unmaterialized journal"]


def test_a_decided_signup_replayed_into_a_parked_event_is_not_counted_parked(client, store, stream):
    # GIVEN h0 and h1 decided in two commits (the last journal names h1 only)
    store.create_event("hot", 5, NOW)
    processor_for(client)
    submit(client, "hot", "h0")
    first = stream.read_new()
    invoke(first)
    submit(client, "hot", "h1")
    invoke(stream.read_new())
    # WHEN hot is parked with h2, and h0's record is delivered again (a replay)
    processor_for(client, Outage("hot"))
    submit(client, "hot", "h2")
    invoke(stream.read_new())
    invoke(first)
    assert parked_ids(store, "hot") == ["h0", "h2"]
    # THEN the audit counts only h2 as waiting: h0 is decided, its parked copy is not a signup
    report = audit(store, pending_grace_s=300, now=datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    [hot] = report.events
    assert (hot.parked, hot.pending, hot.status_counts, hot.violations) == (
        1,
        0,
        {"ACCEPTED": 2},
        [],
    )


def test_parked_events_emit_metrics_and_a_warning_without_signup_ids(
    client, store, stream, monkeypatch, capsys, caplog
):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    capsys.readouterr()
    park_outage(client, store, stream)
    lines = capsys.readouterr().out.splitlines()
    [doc] = [json.loads(line) for line in lines if '"_aws"' in line]
    assert (doc["EventParked"], doc["RecordsParked"]) == ([1.0], [2.0])
    [warning] = [r for r in caplog.records if r.getMessage() == "event parked"]
    assert warning.levelname == "WARNING"
    assert (warning.event_id, warning.error) == ("hot", "StoreUnavailableError")
    assert not {"h0", "h1", "H0", "H1"} & {str(v) for v in vars(warning).values()}


def test_every_sweep_counts_the_parked_events_for_the_alarm(
    client, store, stream, monkeypatch, capsys
):
    from turnstile.handlers import sweeper as sweeper_handler

    park_outage(client, store, stream)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    capsys.readouterr()
    sweeper_handler.handler({"scheduled_time": "2026-01-01T00:05:00Z"}, LocalLambdaContext())
    [doc] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert doc["EventsParked"] == [1.0]


# -- the drill: give-up and order, through the real poller ----------------------


def test_give_up_and_order_the_final_decisions_follow_arrival_exactly(endpoint, tmp_path):
    """The worker (the real poller and handler, on the embedded endpoint) with every commit
    of one event failing for long enough to exhaust the event source's retries, later
    signups of that event written meanwhile, then recovery by the sweeper and redrive."""
    client = default_client(endpoint)
    for spec in ALL_TABLES:
        client.create_table(**spec.create_table_kwargs())
    sqs = boto3.client("sqs", endpoint_url=endpoint)
    queue_url = sqs.create_queue(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
    streams = boto3.client("dynamodbstreams", endpoint_url=endpoint)
    arn = client.describe_table(TableName=INTAKE_TABLE.name)["Table"]["LatestStreamArn"]
    store = SignupStore(client, sleep=lambda _: None)
    store.create_event("hot", 3, NOW)
    store.create_event("calm", 50, NOW)
    outage = Outage("hot")
    faulty = FaultyClient(default_client(endpoint), outage)
    stream_handler._processor = StreamProcessor(
        SignupStore(faulty, sleep=lambda _: None, max_attempts=2)
    )
    settings = replace(STREAM_SOURCE, batch_size=4, max_batching_window_s=0, retry_attempts=2)
    poller = StreamPoller(
        stream_handler.handler,
        streams,
        arn,
        CheckpointStore(tmp_path / "checkpoints.json"),
        sqs_client=sqs,
        failure_queue_url=queue_url,
        settings=settings,
        sleep=lambda _: None,
    )

    def drain(_: float = 0.0) -> None:
        for _ in range(6):
            poller.poll_once()
        poller.flush()

    # The outage: hot's first signups (among calm's) fail past the event source's retries.
    for i in range(3):
        submit(client, "hot", f"h{i}")
        submit(client, "calm", f"c{i}")
    drain()
    assert faulty.injected > settings.retry_attempts + 1
    # It ends, and later signups of hot, written meanwhile, reach the worker first.
    outage.on = False
    for i in range(3, 8):
        submit(client, "hot", f"h{i}")
    drain()
    # Recovery: the sweeper runs, and redrive drains the on-failure queue.
    Sweeper(store, owner="ops", min_age_s=0).sweep("recovery")
    drain()
    redrive = redrive_queue(store, sqs, queue_url, streams, wait_s=5, sleep=drain)
    assert redrive.kept == 0

    # THEN the decisions follow arrival order exactly: the first three of hot are accepted,
    # in that order, every later one is rejected capacity_full, each decision carries the
    # sequence number at which its signup first arrived, and the audit agrees.
    iterator = streams.get_shard_iterator(
        StreamArn=arn,
        ShardId=streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"],
        ShardIteratorType="TRIM_HORIZON",
    )["ShardIterator"]
    first_seen = arrivals(streams.get_records(ShardIterator=iterator, Limit=1000)["Records"])
    got = {k[1]: v for k, v in decisions(client).items() if k[0] == "hot"}
    assert len(got) == 8
    accepted = sorted(
        (s for s, d in got.items() if d["status"]["S"] == Status.ACCEPTED),
        key=lambda s: int(got[s]["position"]["N"]),
    )
    assert accepted == ["h0", "h1", "h2"]
    assert {s: got[s].get("reason", {}).get("S") for s in got if s not in accepted} == {
        f"h{i}": Reason.CAPACITY_FULL for i in range(3, 8)
    }
    assert {s: d["sequence_number"]["S"] for s, d in got.items()} == {s: first_seen[s] for s in got}
    assert poller.stats.sent_to_failure_destination == 0
    assert store.get_parking("hot") is None and store.parked_records("hot") == []
    assert audit(store).ok


# -- a property: whatever the outages, the decisions are those of arrival order ---------

EVENTS = {"e0": 3, "e1": 5}
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from(sorted(EVENTS)), st.integers(1, 3)),
        st.tuples(st.just("deliver")),
        st.tuples(st.just("outage"), st.sampled_from(sorted(EVENTS)), st.booleans()),
        st.tuples(st.just("sweep")),
    ),
    max_size=30,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_any_outage_schedule_ends_in_the_decisions_of_arrival_order(steps):
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        create_tables(session)
        client = session.client("dynamodb")
        store = SignupStore(client, sleep=lambda _: None)
        stream = StreamReader(session)
        wakes = StreamReader(session, CONTROL_TABLE.name)

        def woken() -> list[dict[str, Any]]:
            """The wake-ups on the control table's stream, as their mapping delivers them."""
            return [
                r
                for r in wakes.read_new()
                if any(matches_filter(p, r) for p in WAKE_SOURCE.filter_patterns)
            ]

        for event_id, capacity in EVENTS.items():
            store.create_event(event_id, capacity, NOW)
        down: set[str] = set()

        def fault(operation: str, kwargs: dict[str, Any]) -> str | None:
            key = kwargs.get("Key", {}).get(ControlKey.PK, {}).get("S", "")
            return "InternalServerError" if key.removeprefix("EVENT#") in down else None

        processor_for(client, fault)
        sweeps = 0
        for n, step in enumerate(steps):
            if step[0] == "submit":
                submit(client, step[1], f"s{n}", seats=step[2])
            elif step[0] == "deliver":
                assert invoke(stream.read_new()) == {"batchItemFailures": []}
                invoke(woken())  # a wake-up of an event still down fails: it is retried
            elif step[0] == "outage":
                (down.add if step[2] else down.discard)(step[1])
            else:
                sweeps += 1
                Sweeper(store, owner="s", min_age_s=0).sweep(f"run-{sweeps}")
        # Recovery: the outages end, the streams are delivered, a sweep releases the rest
        # (it wakes each parked event).
        down.clear()
        invoke(stream.read_new())
        Sweeper(store, owner="s", min_age_s=0).sweep("recovery")
        invoke(stream.read_new())
        invoke(woken())

        got = decisions(client)
        first_seen = arrivals(stream.history)
        inserts = [r for r in stream.history if r["eventName"] == "INSERT"]
        for event_id, capacity in EVENTS.items():
            # THEN each event's decisions are exactly those of its signups decided one by
            # one in arrival order, each under its arrival sequence number
            requests = [
                IntakeRecord(
                    event_id=event_id,
                    signup_id=r["dynamodb"]["Keys"]["signup_id"]["S"],
                    sequence_number=r["dynamodb"]["SequenceNumber"],
                    seats=int(r["dynamodb"]["NewImage"]["seats"]["N"]),
                )
                for r in inserts
                if r["dynamodb"]["Keys"]["event_id"]["S"] == event_id
            ]
            expected = decide(Event(event_id, capacity), requests).decisions
            actual = {k[1]: v for k, v in got.items() if k[0] == event_id}
            assert {d.signup_id: (d.status, d.position, d.sequence_number) for d in expected} == {
                s: (
                    v["status"]["S"],
                    int(v["position"]["N"]) if "position" in v else None,
                    v["sequence_number"]["S"],
                )
                for s, v in actual.items()
            }
            assert all(first_seen[s] == v["sequence_number"]["S"] for s, v in actual.items())
            assert store.get_parking(event_id) is None
        assert audit(store).ok


# -- the processor's own paths: a first read that fails, parking that fails, a release ----


def intake(event_id: str, signup_id: str, seq: int) -> StreamRecord:
    keys = {"event_id": event_id, "signup_id": signup_id}
    image = {**keys, "seats": 1, "submitted_at": "2026-01-01T00:00:00Z"}
    return StreamRecord(str(seq), "INSERT", keys, image)


def failing(*operations: str, events: tuple[str, ...] = ("hot", "warm")):
    """A fault: ``operations`` fail (InternalServerError) when they name one of ``events``."""

    def fault(operation: str, kwargs: dict[str, Any]) -> str | None:
        if operation in operations and any(f"#{e}" in json.dumps(kwargs) for e in events):
            return "InternalServerError"
        return None

    return fault


def test_a_group_whose_first_read_fails_is_parked_whole_and_not_decided(client, store, caplog):
    # GIVEN two events whose first read (event item and parking marker) keeps failing
    for event_id in ("hot", "warm", "calm"):
        store.create_event(event_id, 5, NOW)
    processor = processor_for(client, failing("batch_get_item"))
    batch = [intake("hot", "h0", 11), intake("hot", "h1", 12), intake("warm", "w0", 13)]
    # WHEN a batch of them and a healthy event is processed
    with caplog.at_level(logging.ERROR, logger="turnstile.jobs.processor"):
        result = processor.process([*batch, intake("calm", "c0", 14)])
    # THEN nothing of theirs is decided or failed back: every record is parked (all three
    # counted), each event parked with the error that parked it; calm is decided
    assert (result.failures, result.parked) == ([], 3)
    assert result.parked_events == [
        ("hot", "StoreUnavailableError"),
        ("warm", "StoreUnavailableError"),
    ]
    assert [d.decision.signup_id for d in result.decided] == ["c0"]
    assert set(decisions(client)) == {("calm", "c0")}
    assert [(r.signup_id, r.sequence_number) for r in store.parked_records("hot")] == [
        ("h0", "11"),
        ("h1", "12"),
    ]
    assert store.get_parking("hot")["error"] == "StoreUnavailableError"
    # and each failure is logged, with its traceback, under the event it is about
    assert [(r.getMessage(), r.event_id, r.exc_info is not None) for r in caplog.records] == [
        ("event group failed", "hot", True),
        ("event group failed", "warm", True),
    ]


def test_a_group_that_can_be_neither_read_nor_parked_fails_back_from_its_first_record(
    client, store, caplog
):
    for event_id in ("hot", "calm"):
        store.create_event(event_id, 5, NOW)
    processor = processor_for(client, failing("batch_get_item", "batch_write_item"))
    batch = [intake("hot", "h0", 11), intake("hot", "h1", 12), intake("calm", "c0", 14)]
    with caplog.at_level(logging.ERROR, logger="turnstile.jobs.processor"):
        result = processor.process(batch)
    # THEN the event source gets hot's first record back (it redelivers from there), and
    # nothing of hot is parked or decided
    assert (result.failures, result.parked, result.parked_events) == (["11"], 0, [])
    assert store.get_parking("hot") is None and store.parked_records("hot") == []
    assert set(decisions(client)) == {("calm", "c0")}
    assert [(r.getMessage(), r.event_id) for r in caplog.records] == [
        ("event group failed", "hot"),
        ("parking failed", "hot"),
    ]
    assert all(r.exc_info is not None for r in caplog.records)


def test_a_parked_events_group_that_cannot_be_parked_fails_back_from_its_first_record(
    client, store
):
    # GIVEN hot parked (one record), and parking failing from now on
    store.create_event("hot", 5, NOW)
    store.park("hot", [IntakeRecord("hot", "h0", sequence_number="10")], NOW, None)
    processor = processor_for(client, failing("batch_write_item"))
    # WHEN two more records of hot arrive
    result = processor.process([intake("hot", "h1", 11), intake("hot", "h2", 12)])
    # THEN they go back to the event source from the first, nothing is decided or released
    assert (result.failures, result.parked, result.released, result.decided) == (
        ["11"],
        0,
        0,
        [],
    )
    assert parked_ids(store, "hot") == ["h0"] and store.get_parking("hot") is not None


def test_a_parked_events_group_is_parked_then_released_with_the_counts_in_the_batch_result(
    client, store
):
    # GIVEN hot parked, with two records
    store.create_event("hot", 1, NOW)
    store.park(
        "hot",
        [IntakeRecord("hot", f"h{i}", sequence_number=str(10 + i)) for i in range(2)],
        NOW,
        None,
    )
    # WHEN a batch with two more of hot arrives (chunks of two: the release takes two rounds)
    processor = processor_for(client, chunk_size=2)
    result = processor.process([intake("hot", "h2", 12), intake("hot", "h3", 13)])
    # THEN they are parked behind, and the release decides all four in arrival order
    assert (result.failures, result.parked, result.released) == ([], 2, 4)
    assert [(d.decision.signup_id, d.decision.status) for d in result.decided] == [
        ("h0", Status.ACCEPTED),
        ("h1", Status.REJECTED),
        ("h2", Status.REJECTED),
        ("h3", Status.REJECTED),
    ]
    assert store.get_parking("hot") is None and store.parked_records("hot") == []


@pytest.mark.parametrize("waiting", [2, 3])
def test_a_release_decides_at_most_max_release_records_and_says_whether_it_finished(
    client, store, waiting
):
    # GIVEN hot parked, with ``waiting`` records, a release taking at most 2 a run
    store.create_event("hot", 5, NOW)
    parked = [IntakeRecord("hot", f"h{i}", sequence_number=str(10 + i)) for i in range(waiting)]
    store.park("hot", parked, NOW, None)
    processor = processor_for(client, max_release=2, chunk_size=1)
    # WHEN released
    result = BatchResult()
    done = processor.release("hot", result)
    # THEN the first two are decided, one chunk at a time, and the marker is cleared only if
    # nothing is left
    assert result.released == 2
    assert {k[1] for k in decisions(client)} == {"h0", "h1"}
    assert done is (waiting == 2)
    assert (store.get_parking("hot") is None) is (waiting == 2)
    assert parked_ids(store, "hot") == [f"h{i}" for i in range(2, waiting)]


def test_a_release_of_an_event_not_parked_has_nothing_to_do(client, store):
    store.create_event("hot", 5, NOW)
    assert processor_for(client).release("hot") is True


def test_a_failed_release_says_so_and_leaves_the_rest_parked(client, store, caplog):
    store.create_event("hot", 5, NOW)
    store.park("hot", [IntakeRecord("hot", "h0", sequence_number="10")], NOW, None)
    processor = processor_for(client, failing("batch_get_item", "query", events=("hot",)))
    result = BatchResult()
    with caplog.at_level(logging.ERROR, logger="turnstile.jobs.processor"):
        assert processor.release("hot", result) is False
    assert result.parked_events == [("hot", "StoreUnavailableError")]
    assert [(r.getMessage(), r.event_id, r.exc_info is not None) for r in caplog.records] == [
        ("release failed", "hot", True)
    ]
    assert parked_ids(store, "hot") == ["h0"] and store.get_parking("hot") is not None


def test_a_release_that_loses_a_commit_counts_the_conflict_and_decides_again(client, store):
    store.create_event("hot", 5, NOW)
    store.park("hot", [IntakeRecord("hot", "h0", sequence_number="10")], NOW, None)
    processor = StreamProcessor(ConflictingStore(client, conflicts=1), clock=lambda: NOW)
    result = BatchResult()
    assert processor.release("hot", result) is True
    assert (result.conflicts, result.parked_events, result.released) == (1, [], 1)
    assert ("hot", "h0") in decisions(client)


def test_records_parked_behind_an_unfinished_release_stay_parked(client, store):
    # GIVEN hot parked, with two records, a release taking one a run
    store.create_event("hot", 5, NOW)
    parked = [IntakeRecord("hot", f"h{i}", sequence_number=str(10 + i)) for i in range(2)]
    store.park("hot", parked, NOW, None)
    # WHEN a new record of hot arrives
    result = processor_for(client, max_release=1).process([intake("hot", "h2", 12)])
    # THEN only the first parked record is decided: h1 and the new h2 wait, in that order
    assert [d.decision.signup_id for d in result.decided] == ["h0"]
    assert {k[1] for k in decisions(client)} == {"h0"}
    assert parked_ids(store, "hot") == ["h1", "h2"] and store.get_parking("hot") is not None


# -- the sweeper and parked events -------------------------------------------------------


def test_a_sweep_clears_every_marker_with_nothing_parked_under_it(client, store):
    # GIVEN two parked events with no record parked any more (a release unparked everything
    # and died before clearing the marker), and a third with a record still parked
    for event_id in ("a", "b", "c"):
        store.park(event_id, [IntakeRecord(event_id, "s", "100")], NOW, None)
    store.unpark("a", ["100"])
    store.unpark("b", ["100"])
    store.park("b", [IntakeRecord("b", "t", "101")], NOW, None)
    store.unpark("b", ["101"])  # b's marker is at version 2
    # WHEN a sweep runs
    result = Sweeper(store, owner="s", min_age_s=0).sweep("clear")
    # THEN the two empty markers are cleared (each at its version), the third stays and is
    # woken for its release
    assert (result.status, result.parked_events, result.releases_triggered) == (
        "succeeded",
        3,
        3,
    )
    assert store.get_parking("a") is None and store.get_parking("b") is None
    assert store.get_parking("c") is not None


def test_a_sweep_wakes_each_parked_event_and_re_emits_none_of_the_parked(
    client, store, stream, wakes
):
    # GIVEN two parked events, each with two undecided records parked, and undecided records
    # of a third event that is not parked
    for event_id in ("a", "b"):
        submit(client, event_id, f"{event_id}0")
        submit(client, event_id, f"{event_id}1")
    for i in range(3):
        submit(client, "calm", f"c{i}")
    records = stream.read_new()
    for event_id in ("a", "b"):
        store.park(
            event_id,
            [
                IntakeRecord(
                    event_id,
                    r["dynamodb"]["Keys"]["signup_id"]["S"],
                    r["dynamodb"]["SequenceNumber"],
                )
                for r in records
                if r["dynamodb"]["Keys"]["event_id"]["S"] == event_id
            ],
            NOW,
            None,
        )
    # WHEN a sweep runs
    result = Sweeper(store, owner="s", min_age_s=0).sweep("parked")
    # THEN each parked event's release is set off by a wake-up of the event, the parked
    # records are not re-emitted as undecided, the others are
    assert (result.parked_events, result.releases_triggered) == (2, 2)
    assert (result.undecided, result.re_emitted) == (3, 3)
    emitted = sorted(r["dynamodb"]["Keys"]["signup_id"]["S"] for r in stream.read_new())
    assert emitted == ["c0", "c1", "c2"]
    woken = {r["dynamodb"]["Keys"]["pk"]["S"] for r in wakes.read_new()}
    assert {"WAKE#a", "WAKE#b"} <= woken and "WAKE#calm" not in woken


def test_a_release_that_did_not_use_the_event_read_with_the_marker_never_uses_it_later(
    client, store
):
    # GIVEN hot parked, with one record, and a processor whose releases take nothing
    # (max_release 0): its group's event item, read with the parking marker, goes unused
    store.create_event("hot", 5, NOW)
    store.park("hot", [IntakeRecord("hot", "h0", sequence_number="10")], NOW, None)
    processor = processor_for(client, max_release=0)
    first = processor.process([intake("hot", "h1", 11)])
    assert (first.parked, first.released) == (1, 0)
    # WHEN another processor releases hot (the event item moves on) and a record is parked
    # again, then the first processor releases hot directly (as the sweeper asks it to)
    assert processor_for(client).release("hot") is True
    store.park("hot", [IntakeRecord("hot", "h2", sequence_number="12")], NOW, None)
    processor.max_release = 5_000
    result = BatchResult()
    assert processor.release("hot", result) is True
    # THEN it read the event afresh: no commit on the stale read it had, so no conflict
    assert (result.conflicts, result.released) == (0, 1)
    assert {k[1] for k in decisions(client)} == {"h0", "h1", "h2"}

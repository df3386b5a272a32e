"""The sweeper and the on-failure queue: a first put carries no ``undecided`` marker, so a
record whose batch the event source gave up on is found through the queue's note of it.

A note makes the next run read the whole intake table and re-emit every undecided record
whatever its age (the note says the event source has moved past those records); the run
deletes the notes once it re-emitted everything it found, and keeps them otherwise. The
deployed handler reads the queue its environment names, under its role (ReceiveMessage and
DeleteMessage on that queue: a test takes each grant away).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from tests.helpers import decisions, fail_everything_into_the_queue
from tests.roles import CheckedClient, roles_without
from turnstile.base.contract import FAILURE_QUEUE_NAME, INTAKE_TABLE, Attr, Function
from turnstile.handlers import stream as stream_handler
from turnstile.handlers import sweeper as sweeper_handler
from turnstile.jobs.processor import StreamProcessor
from turnstile.jobs.sweeper import Sweeper
from turnstile.storage.failures import FAILURE_QUEUE_URL_ENV, FailureQueue
from turnstile.storage.ledger import Ledger
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext

T0 = 1_800_000_000.0
#: Submitted the instant the sweep runs: young by its own clock.
NOW = datetime.fromtimestamp(T0, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
QUEUE_ARN = "${StreamProcessorFailureQueue6F2DFDBC.Arn}"


@pytest.fixture
def world(aws, tmp_path, stream):
    client = aws.client("dynamodb")
    sqs = aws.client("sqs")
    queue_url = sqs.create_queue(QueueName=FAILURE_QUEUE_NAME)["QueueUrl"]
    store = SignupStore(client, sleep=lambda _: None)
    stream_handler._processor = StreamProcessor(store)
    yield client, sqs, queue_url, store
    stream_handler._processor = None


def submitted_and_failed(aws, client, sqs, queue_url, store, tmp_path, stream, n=3) -> None:
    """``n`` signups submitted as the API submits them (no marker), whose batch the event
    source gave up on: a note in the on-failure queue, no decision."""
    store.create_event("gig", 2, NOW)
    for i in range(n):
        store.put_intake("gig", f"u{i}", 1, None, NOW)
    stream.read_new()  # the test's own reader (the "Lambda" below) sits past them
    poller = fail_everything_into_the_queue(
        aws.client("dynamodbstreams"), client, sqs, queue_url, tmp_path
    )
    assert poller.stats.sent_to_failure_destination == n
    assert decisions(client) == {}


def deliver(stream) -> None:
    records = stream.read_new()
    if records:
        stream_handler.handler({"Records": records}, LocalLambdaContext())


def queue_counts(sqs, queue_url) -> tuple[int, int]:
    """(visible, hidden) messages of the queue."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return (
        int(attributes["ApproximateNumberOfMessages"]),
        int(attributes["ApproximateNumberOfMessagesNotVisible"]),
    )


def sweeper(store, sqs=None, queue_url=None, now=T0, **kwargs) -> Sweeper:
    failures = FailureQueue(sqs, queue_url) if sqs is not None else None
    return Sweeper(
        store,
        min_age_s=300,
        full_scan_every_s=math.inf,  # only a note can make a run read the whole table
        clock=lambda: now,
        failures=failures,
        **kwargs,
    )


def test_a_note_makes_the_next_run_re_emit_every_undecided_record_at_once(
    aws, world, tmp_path, stream
):
    client, sqs, queue_url, store = world
    # GIVEN three signups submitted without the marker, their batch given up on
    submitted_and_failed(aws, client, sqs, queue_url, store, tmp_path, stream)
    # ... a run that does not read the queue finds nothing (no marker, no full scan due)
    blind = sweeper(store).sweep("run-blind")
    assert (blind.status, blind.full_scan, blind.re_emitted) == ("succeeded", False, 0)
    # WHEN a run reads the queue
    result = sweeper(store, sqs, queue_url).sweep("run-1")
    # THEN it read the whole table and re-emitted all three (young as they are), deleted
    # the note, and the records are marked: the index follows them from now on
    assert (result.status, result.full_scan, result.failure_notes) == ("succeeded", True, 1)
    assert (result.re_emitted, result.failure_notes_deleted) == (3, 1)
    assert queue_counts(sqs, queue_url) == (0, 0)
    marked = {e["signup_id"] for e in Ledger.beside(store).undecided_marked()}
    assert marked == {"u0", "u1", "u2"}
    # ... and the stream delivers them to the processor, which decides them
    deliver(stream)
    assert {k[1] for k in decisions(client)} == {"u0", "u1", "u2"}
    assert audit(store).ok
    # ... a later run (past the re-emissions' minimum age) reads no note: the index only,
    # and it clears the markers
    later = sweeper(store, sqs, queue_url, now=T0 + 301).sweep("run-2")
    assert (later.full_scan, later.failure_notes, later.unmarked) == (False, 0, 3)


def test_a_run_that_leaves_records_for_later_keeps_the_note(aws, world, tmp_path, stream):
    client, sqs, queue_url, store = world
    submitted_and_failed(aws, client, sqs, queue_url, store, tmp_path, stream)
    # WHEN a run may re-emit only one record
    result = sweeper(store, sqs, queue_url, max_re_emits=1).sweep("run-1")
    # THEN it re-emitted one, left two, and kept the note (hidden while the run lasted; it
    # comes back for the next run), and recorded no full scan
    assert (result.status, result.re_emitted, result.undecided) == ("succeeded", 1, 3)
    assert (result.failure_notes, result.failure_notes_deleted) == (1, 0)
    assert queue_counts(sqs, queue_url) == (0, 1)
    re_emitted = [s for s in ("u0", "u1", "u2") if Attr.RE_EMITS in store.get_intake("gig", s)]
    assert len(re_emitted) == 1


def test_a_run_without_notes_keeps_its_minimum_age(aws, world, tmp_path, stream):
    _, sqs, queue_url, store = world
    # GIVEN young unmarked records and a full scan due, but no note
    store.create_event("gig", 2, NOW)
    store.put_intake("gig", "u0", 1, None, NOW)
    runner = sweeper(store, sqs, queue_url)
    runner.full_scan_every_s = 0.0
    # WHEN the run reads the whole table
    result = runner.sweep("run-1")
    # THEN the record is too young to re-emit: only a note makes ages not count
    assert (result.full_scan, result.failure_notes, result.re_emitted) == (True, 0, 0)


def send_note(sqs, queue_url) -> None:
    info = {"shardId": "shardId-1", "startSequenceNumber": "1", "endSequenceNumber": "2"}
    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps({"DDBStreamBatchInfo": info}))


def test_the_deployed_handler_reads_the_queue_its_environment_names(world, monkeypatch):
    _, sqs, queue_url, store = world
    # GIVEN an unmarked record and a note in the queue the environment names
    store.create_event("gig", 2, NOW)
    store.put_intake("gig", "u0", 1, None, NOW)
    send_note(sqs, queue_url)
    monkeypatch.setenv(FAILURE_QUEUE_URL_ENV, queue_url)
    # WHEN the scheduled handler runs (under the sweeper's deployed role: the ``aws``
    # fixture fails the test on any request the role is refused)
    out = sweeper_handler.handler({"scheduled_time": "2026-01-01T00:05:00Z"}, LocalLambdaContext())
    # THEN it re-emitted the record and deleted the note
    (run,) = out["runs"]
    assert (run["status"], run["failure_notes"], run["re_emitted"]) == ("succeeded", 1, 1)
    assert run["failure_notes_deleted"] == 1
    assert queue_counts(sqs, queue_url) == (0, 0)


@pytest.mark.parametrize("action", ["sqs:ReceiveMessage", "sqs:DeleteMessage"])
def test_the_queue_is_read_and_emptied_only_with_the_sweeper_s_grants(world, action):
    _, sqs, queue_url, store = world
    # GIVEN an unmarked record, a note, and the sweeper's role without one of its grants
    store.create_event("gig", 2, NOW)
    store.put_intake("gig", "u0", 1, None, NOW)
    send_note(sqs, queue_url)
    roles = roles_without(Function.SWEEPER, action, QUEUE_ARN)
    failures = FailureQueue(CheckedClient(sqs, Function.SWEEPER, roles=roles), queue_url)
    # WHEN a run goes
    runner = sweeper(store)
    runner.failures = failures
    result = runner.sweep("run-1")
    # THEN the run failed on IAM's refusal, and the note is still there
    assert result.status == "failed" and "AccessDenied" in result.errors[0]
    assert [r.action for r in failures.sqs.denied] == [action]
    visible, hidden = queue_counts(sqs, queue_url)
    assert visible + hidden == 1
    # ... and a note that could not be received re-emitted nothing
    re_emitted = Attr.RE_EMITS in store.get_intake("gig", "u0")
    assert re_emitted == (action == "sqs:DeleteMessage")


def test_a_look_at_the_queue_leaves_the_note_visible(world):
    _, sqs, queue_url, _ = world
    send_note(sqs, queue_url)
    queue = FailureQueue(sqs, queue_url)
    assert len(queue.receive(1, 0)) == 1
    assert queue_counts(sqs, queue_url) == (1, 0)
    notes = queue.receive(100, 60)
    assert len(notes) == 1 and queue_counts(sqs, queue_url) == (0, 1)
    assert queue.delete(notes) == 1 and queue_counts(sqs, queue_url) == (0, 0)


def test_a_producers_re_emission_time_hides_no_record_from_a_note(world):
    _, sqs, queue_url, store = world
    # GIVEN an unmarked first put whose producer wrote a re-emission time of just now (only
    # the sweeper's re-emissions, which mark the record, may make it wait), and a note
    store.create_event("gig", 2, NOW)
    store.put_intake("gig", "victim", 1, None, NOW)
    store.client.update_item(
        TableName=INTAKE_TABLE.name,
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "victim"}},
        UpdateExpression="SET redriven_at = :t",
        ExpressionAttributeValues={":t": {"N": str(int(T0))}},
    )
    send_note(sqs, queue_url)
    # WHEN a run answers the note
    result = sweeper(store, sqs, queue_url).sweep("run-1")
    # THEN the record was re-emitted (and so marked) before the note was deleted
    assert (result.re_emitted, result.failure_notes_deleted) == (1, 1)
    assert Attr.UNDECIDED in store.get_intake("gig", "victim")


def test_runs_that_never_get_through_a_whole_scan_still_reach_every_event_in_turn(
    aws, world, stream, monkeypatch
):
    import random

    from turnstile.jobs import sweeper as sweeper_module

    _, sqs, queue_url, store = world
    # GIVEN four events with an unmarked record each that the stream never got decided, a
    # note, and reads of an event's decisions so slow (70 s) that a run (180 s) gets
    # through two events (a third is read, but the run is out of time to re-emit it)
    for e in range(4):
        store.create_event(f"e{e}", 5, NOW)
        store.put_intake(f"e{e}", "u", 1, None, NOW)
    stream.read_new()  # given up on: never delivered
    send_note(sqs, queue_url)
    clock = {"t": T0}

    class Slow(SignupStore):
        def get_decisions(self, event_id, signup_ids):  # type: ignore[override]
            clock["t"] += 70
            return super().get_decisions(event_id, signup_ids)

    class ShownAgain(FailureQueue):
        """A note kept comes back for the next run at once (its visibility timeout)."""

        def receive(self, limit, hide_s):  # type: ignore[override]
            return super().receive(limit, 0)

    monkeypatch.setattr(sweeper_module.random, "shuffle", random.Random(5).shuffle)
    slow = Slow(store.client, sleep=lambda _: None)
    runs = []
    for run in range(8):
        result = Sweeper(
            slow,
            min_age_s=300,
            full_scan_every_s=math.inf,
            max_run_s=180,
            clock=lambda: clock["t"],
            failures=ShownAgain(sqs, queue_url),
        ).sweep(f"run-{run}")
        runs.append((result.re_emitted, result.failure_notes_deleted))
        deliver(stream)
        clock["t"] += 300
    # THEN each run left what it had no time for, the next ones took the events in another
    # order, and every record was re-emitted and decided; the note stays (and with it the
    # queue's alarm) while no run gets through the whole table: `turnstile redrive` has no
    # time budget
    assert runs[0] == (2, 0)
    assert all(deleted == 0 for _, deleted in runs)
    assert sum(re_emitted for re_emitted, _ in runs) >= 4
    for e in range(4):
        assert Attr.RE_EMITS in store.get_intake(f"e{e}", "u"), (e, runs)
    assert {k[0] for k in decisions(store.client)} == {"e0", "e1", "e2", "e3"}
    assert audit(store).ok

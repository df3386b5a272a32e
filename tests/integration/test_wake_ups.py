"""Wake-ups: whatever makes an event take a step goes through turnstile's own item (the
event's wake-up item in the control table, ``EventItems.wake``), never a producer's
record. Its record on the control table's stream reaches the same handler as intake's
records (the second event source mapping, ``contract.WAKE_SOURCE``) and is one tick of the
event: lapsed holds end, seats given back or added reach the waitlist, a close is acted
on, a parked event is released.

Each case here is one the review found broken: it is run through the real handler, the
intake stream and the wake-ups' stream delivered as the event source mappings deliver
them, the processor's clock moved by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import StreamReader
from tests.helpers import put_raw_intake
from turnstile.base.clock import iso_of_ms, ms_of
from turnstile.base.contract import INTAKE_TABLE, STREAM_SOURCE, WAKE_SOURCE, Reason, Status
from turnstile.base.errors import RequestRefusedError
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.due_holds import release_due_holds
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.store import SignupStore
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.poller import matches_filter

T0 = "2026-01-01T00:00:00.000000Z"
HOLD_S = 60


class Clock:
    def __init__(self) -> None:
        self.ms = ms_of(T0)

    def __call__(self) -> str:
        return iso_of_ms(self.ms)

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


class Scene:
    """The store, both streams, the processor on a clock of its own, and delivery."""

    def __init__(self, aws: Any, stream: StreamReader, wakes: StreamReader) -> None:
        self.client = aws.client("dynamodb")
        self.store = SignupStore(self.client, sleep=lambda _: None)
        self.stream, self.wakes = stream, wakes
        self.clock = Clock()
        stream_handler._processor = StreamProcessor(self.store, clock=self.clock)

    def deliver(self) -> None:
        """Every new record of both streams through the handler, as their mappings
        filter and deliver them; no batch may fail."""
        for reader, source in ((self.stream, STREAM_SOURCE), (self.wakes, WAKE_SOURCE)):
            records = [
                r
                for r in reader.read_new()
                if any(matches_filter(p, r) for p in source.filter_patterns)
            ]
            if records:
                answer = stream_handler.handler({"Records": records}, LocalLambdaContext())
                assert answer == {"batchItemFailures": []}

    def signup(self, event_id: str, *signup_ids: str) -> None:
        for signup_id in signup_ids:
            put_raw_intake(self.client, event_id, signup_id, submitted_at={"S": T0})
        self.deliver()

    def status(self, event_id: str, signup_id: str) -> tuple[str, Any]:
        item = self.store.get_decision(event_id, signup_id) or {}
        return item.get("status"), item.get("reason")

    def release_due(self) -> int:
        """The due-holds release at the processor's clock, then the wake-ups delivered."""
        woken = release_due_holds(self.store, self.clock.ms)
        self.deliver()
        return woken


@pytest.fixture
def scene(aws, stream, wakes) -> Any:
    yield Scene(aws, stream, wakes)
    stream_handler._processor = None


@pytest.mark.parametrize("spoil", ["deleted", "junk-redrive", "list-redrive", "huge-item"])
def test_a_holder_cannot_stop_the_holds_of_its_event_from_ending(scene, spoil):
    # GIVEN an event of one seat held a minute, a waitlist of one: a holds, b waits
    scene.store.create_event("gig", 1, T0, waitlist=1, hold_seconds=HOLD_S)
    scene.signup("gig", "a", "b")
    assert scene.status("gig", "a") == (Status.HELD, None)
    assert scene.status("gig", "b") == (Status.WAITLISTED, None)
    # ... and the holder spoils its own intake record, as only a producer can
    key = {"event_id": {"S": "gig"}, "signup_id": {"S": "a"}}
    if spoil == "deleted":
        scene.client.delete_item(TableName=INTAKE_TABLE.name, Key=key)
    elif spoil == "huge-item":
        scene.client.put_item(
            TableName=INTAKE_TABLE.name, Item={**key, "pad": {"S": "x" * 399_000}}
        )
    else:
        junk = {"S": "x"} if spoil == "junk-redrive" else {"L": [{"N": "1"}]}
        scene.client.update_item(
            TableName=INTAKE_TABLE.name,
            Key=key,
            UpdateExpression="SET redrive = :junk",
            ExpressionAttributeValues={":junk": junk},
        )
    scene.deliver()  # (a rewrite of a decided signup's record changes nothing)
    # WHEN its hold lapses, with no other traffic, and the due-holds release runs
    scene.clock.advance(HOLD_S)
    assert scene.release_due() == 1
    # THEN the hold ended and the seat went to the one waiting
    assert scene.status("gig", "a") == (Status.EXPIRED, None)
    assert scene.status("gig", "b") == (Status.HELD, None)
    # ... and nothing more is due until b's own hold lapses
    assert release_due_holds(scene.store, scene.clock.ms) == 0


def test_a_promoted_signup_whose_intake_record_expired_is_still_promoted_and_ends(scene):
    """The waitlisted signup's intake record gone (TTL) before its promotion: it is
    promoted all the same, and its hold ends when due."""
    scene.store.create_event("gig", 1, T0, waitlist=1, hold_seconds=HOLD_S)
    scene.signup("gig", "a", "b")
    scene.client.delete_item(
        TableName=INTAKE_TABLE.name, Key={"event_id": {"S": "gig"}, "signup_id": {"S": "b"}}
    )
    scene.clock.advance(HOLD_S)
    scene.release_due()
    assert scene.status("gig", "b") == (Status.HELD, None)
    scene.clock.advance(HOLD_S)
    scene.release_due()
    assert scene.status("gig", "b") == (Status.EXPIRED, None)


def test_raising_the_capacity_promotes_the_waitlist_at_once(scene):
    scene.store.create_event("gig", 1, T0, waitlist=2)
    scene.signup("gig", "a", "b", "c")
    assert [scene.status("gig", s)[0] for s in "abc"] == [
        Status.ACCEPTED,
        Status.WAITLISTED,
        Status.WAITLISTED,
    ]
    # WHEN the organizer raises the capacity, and nothing else happens to the event
    scene.store.update_capacity("gig", 2)
    scene.deliver()
    # THEN the first in line has the seat, the next still waits
    assert scene.status("gig", "b") == (Status.ACCEPTED, None)
    assert scene.status("gig", "c") == (Status.WAITLISTED, None)


def test_closing_an_event_rejects_its_waitlist_at_once(scene):
    scene.store.create_event("gig", 1, T0, waitlist=2)
    scene.signup("gig", "a", "b", "c")
    # WHEN the organizer closes it, and nothing else happens to the event
    record, closed_now = scene.store.close_event("gig")
    assert closed_now and record is not None
    scene.deliver()
    # THEN nobody waits on a closed event; the seat given stays given
    assert scene.status("gig", "a") == (Status.ACCEPTED, None)
    assert scene.status("gig", "b") == (Status.REJECTED, Reason.EVENT_CLOSED)
    assert scene.status("gig", "c") == (Status.REJECTED, Reason.EVENT_CLOSED)


def test_closing_again_wakes_again(scene):
    """A close that failed before its wake-up (a crash) is made good by closing again."""
    scene.store.create_event("gig", 1, T0, waitlist=1)
    scene.signup("gig", "a", "b")
    scene.wakes.read_new()
    scene.store.dynamo.call(  # closed by a call that died before waking the event
        "update_item",
        TableName=scene.store.control_table,
        Key={"pk": {"S": "EVENT#gig"}, "sk": {"S": "EVENT"}},
        UpdateExpression="SET #s = :c",
        ExpressionAttributeNames={"#s": "state"},
        ExpressionAttributeValues={":c": {"S": "CLOSED"}},
    )
    scene.deliver()
    assert scene.status("gig", "b") == (Status.WAITLISTED, None)
    assert scene.store.close_event("gig")[1] is False
    scene.deliver()
    assert scene.status("gig", "b") == (Status.REJECTED, Reason.EVENT_CLOSED)


class CrashAfterCommit(SignupStore):
    """Writing a commit's changes out fails, once: the commit landed, its items did not."""

    crash = False

    def materialize(self, event_id, journal, requests=None):  # type: ignore[override]
        if self.crash and journal.updates:
            self.crash = False
            raise RuntimeError("crash between commit and materialization")
        super().materialize(event_id, journal, requests)


def test_a_commit_left_half_applied_is_written_out_at_the_next_wake_up(aws, stream, wakes):
    scene = Scene(aws, stream, wakes)
    store = CrashAfterCommit(scene.client, sleep=lambda _: None)
    stream_handler._processor = StreamProcessor(store, clock=scene.clock)
    try:
        store.create_event("gig", 1, T0, waitlist=1, hold_seconds=HOLD_S)
        scene.signup("gig", "a", "b")
        # WHEN a's cancel is committed (b promoted) and writing it out fails
        store.crash = True
        store.request_transition("gig", "a", "cancel", scene.clock())
        scene.deliver()
        # THEN the event is parked, its records with it, and due for a release at once
        assert store.get_parking("gig") is not None
        assert scene.status("gig", "b") == (Status.WAITLISTED, None)  # not written yet
        # WHEN the due-holds release runs (every second locally, every minute on AWS)
        assert scene.release_due() == 1
        # THEN the commit is written out and the event released
        assert scene.status("gig", "a") == (Status.CANCELLED, None)
        assert scene.status("gig", "b") == (Status.HELD, None)
        assert store.get_parking("gig") is None
    finally:
        stream_handler._processor = None


def test_a_wake_up_of_an_event_that_does_not_exist_changes_nothing(scene):
    scene.store.wake("nowhere", "hold_due")
    scene.deliver()
    assert scene.store.get_event("nowhere") is None
    assert list(scene.store.decision_items("nowhere")) == []


def test_a_request_is_judged_against_the_commit_it_will_be_applied_to(aws, stream, wakes):
    """A promoted signup whose item is not written yet (the commit landed, writing it out
    failed) reads WAITLISTED; its confirm is recorded all the same, judged against the
    event's last commit, and applied once the commit is written out."""
    scene = Scene(aws, stream, wakes)
    store = CrashAfterCommit(scene.client, sleep=lambda _: None)
    stream_handler._processor = StreamProcessor(store, clock=scene.clock)
    try:
        store.create_event("gig", 1, T0, waitlist=1, hold_seconds=HOLD_S)
        scene.signup("gig", "a", "b")
        store.crash = True
        store.request_transition("gig", "a", "cancel", scene.clock())
        scene.deliver()
        assert scene.status("gig", "b") == (Status.WAITLISTED, None)  # the item lags
        # WHEN b confirms its hold, which only the event's last commit knows of
        recorded = store.request_transition("gig", "b", "confirm", scene.clock())
        assert recorded.request == "confirm"
        # ... while a's confirm, which its lagging item (HELD) allows and the commit (a
        # cancelled) does not, is recorded and left to the processor to refuse
        store.request_transition("gig", "a", "confirm", scene.clock())
        # THEN once woken (the release), b's hold is confirmed, a's confirm refused
        scene.release_due()
        scene.deliver()
        assert scene.status("gig", "b") == (Status.ACCEPTED, None)
        refusal = store.get_decision("gig", "a")["last_refusal"]
        assert (refusal["request"], refusal["status"]) == ("confirm", Status.CANCELLED)
        # ... and a request refused by the written state is refused at once, with it
        with pytest.raises(RequestRefusedError) as refused:
            store.request_transition("gig", "a", "cancel", scene.clock())
        assert refused.value.status == Status.CANCELLED
    finally:
        stream_handler._processor = None


def test_requests_lost_from_the_stream_are_each_answered_in_order(scene):
    """The intake item keeps every request in order (``requests``): recovered from intake
    (its stream records lost), "cancel, then confirm" is a cancel, then a refused confirm;
    never collapsed into the latest."""
    scene.store.create_event("gig", 2, T0, hold_seconds=HOLD_S)
    scene.signup("gig", "a")
    assert scene.status("gig", "a") == (Status.HELD, None)
    # GIVEN two requests whose stream records are lost (read past, never delivered)
    scene.store.request_transition("gig", "a", "cancel", scene.clock())
    scene.store.request_transition("gig", "a", "confirm", scene.clock())
    scene.stream.read_new()
    # WHEN the record is recovered from intake (the sweeper's re-emission)
    assert scene.store.re_emit("gig", "a")
    scene.deliver()
    # THEN both requests are answered, in the order they were made
    item = scene.store.get_decision("gig", "a")
    assert item["status"] == Status.CANCELLED
    assert item["request_count"] == 2
    assert item["last_refusal"]["request"] == "confirm"
    assert item["last_refusal"]["status"] == Status.CANCELLED


class FailsSteps(SignupStore):
    """Deciding an event fails while ``down`` (DynamoDB unavailable for it)."""

    down = False

    def get_event_and_parking(self, event_id):  # type: ignore[override]
        if self.down:
            raise RuntimeError("unavailable")
        return super().get_event_and_parking(event_id)


def test_a_wake_up_whose_step_fails_is_written_again_until_it_is_done(aws, stream, wakes):
    """A close's wake-up whose step fails (past the event source's retries, even) is not
    lost: the processor puts it in the due-holds index, and the release of due holds
    writes it again."""
    scene = Scene(aws, stream, wakes)
    store = FailsSteps(scene.client, sleep=lambda _: None)
    stream_handler._processor = StreamProcessor(store, clock=scene.clock)
    try:
        store.create_event("gig", 1, T0, waitlist=1)
        scene.signup("gig", "a", "b")
        # WHEN the organizer closes the event while deciding it fails
        store.down = True
        store.close_event("gig")
        records = [r for r in wakes.read_new() if r["dynamodb"]["Keys"]["pk"]["S"] == "WAKE#gig"]
        answer = stream_handler.handler({"Records": records}, LocalLambdaContext())
        assert answer["batchItemFailures"]  # the event source would retry, then give up
        assert scene.status("gig", "b") == (Status.WAITLISTED, None)
        # THEN the wake-up is due in the index; once deciding works, it is written again
        store.down = False
        scene.clock.advance(10)
        assert release_due_holds(store, scene.clock.ms) == 1
        scene.deliver()
        assert scene.status("gig", "b") == (Status.REJECTED, Reason.EVENT_CLOSED)
        # ... and, written, it is due no more
        assert release_due_holds(store, scene.clock.ms) == 0
    finally:
        stream_handler._processor = None


def test_a_parked_event_with_nothing_parked_is_released_and_its_due_holds_still_end(scene):
    """A worker killed between unparking the last records and clearing the parking marker
    leaves the marker with no record under it. Its wake-up clears the marker and is still
    the event's tick: a hold due by then ends (the release alone decides no record, so
    takes no step)."""
    from turnstile.storage.intake import IntakeRecord

    scene.store.create_event("gig", 1, T0, waitlist=1, hold_seconds=HOLD_S)
    scene.signup("gig", "a", "b")
    assert scene.status("gig", "a") == (Status.HELD, None)
    # GIVEN the event parked, its one parked record unparked and the marker left in place
    stray = IntakeRecord("gig", "c", "9" * 21, submitted_at=T0)
    scene.store.park("gig", [stray], scene.clock(), "worker killed")
    scene.store.unpark("gig", [stray.sequence_number])
    assert scene.store.get_parking("gig") is not None
    assert scene.store.parked_records("gig") == []
    # WHEN a's hold lapses and the due-holds release wakes the event
    scene.clock.advance(HOLD_S)
    scene.release_due()
    # THEN the parking marker is cleared, a's hold ended and the seat went to the one waiting
    assert scene.store.get_parking("gig") is None
    assert scene.status("gig", "a") == (Status.EXPIRED, None)
    assert scene.status("gig", "b") == (Status.HELD, None)

"""Capacity changes and hand-edited event items, through the store and the real stream
handler against moto: nothing an operator does to an event item blocks its stream."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import decisions, put_raw_intake
from turnstile.base.contract import Reason, Status
from turnstile.base.errors import CapacityBelowTakenError, CommitConflictError, EventNotFoundError
from turnstile.handlers import stream as stream_handler
from turnstile.storage.dynamo import event_key
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture(autouse=True)
def fresh_processor(aws):
    stream_handler._processor = None
    yield
    stream_handler._processor = None


def invoke(records: list[dict[str, Any]]) -> dict[str, Any]:
    return stream_handler.handler({"Records": records}, LocalLambdaContext())


def submit(client, signup_id: str, seats: int = 1, event_id: str = "gig") -> None:
    put_raw_intake(client, event_id, signup_id, seats={"N": str(seats)}, submitted_at={"S": NOW})


def status_of(client, signup_id: str, event_id: str = "gig") -> tuple[str, str | None]:
    item = decisions(client)[(event_id, signup_id)]
    return item["status"]["S"], item.get("reason", {}).get("S")


def put_event_by_hand(client, store, **attrs: dict[str, str]) -> None:
    """An event item written with the console or the AWS CLI, not with turnstile."""
    item = {"pk": {"S": "EVENT#gig"}, "sk": {"S": "EVENT"}, "event_id": {"S": "gig"}, **attrs}
    client.put_item(TableName=store.control_table, Item=item)


# -- commits on event items an operator wrote or edited --------------------------------


def test_an_event_item_without_version_is_committable(client, store, stream):
    # GIVEN an event item written by hand: capacity and state, no version, no counters
    put_event_by_hand(client, store, capacity={"N": "2"}, state={"S": "OPEN"})
    for name in ("a", "b", "c"):
        submit(client, name)
    # WHEN the stream delivers
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN the signups are decided and the event item now has a version
    assert [status_of(client, s) for s in "abc"] == [
        (Status.ACCEPTED, None),
        (Status.ACCEPTED, None),
        (Status.REJECTED, Reason.CAPACITY_FULL),
    ]
    event = store.get_event("gig")
    assert event is not None
    assert (event.event.taken, event.event.version) == (2, 1)
    assert audit(store).ok


def test_capacity_edited_below_taken_still_lets_rejections_through(client, store, stream):
    # GIVEN an event with 2 seats taken, then an operator's edit to capacity 1
    store.create_event("gig", 2, NOW)
    submit(client, "a")
    submit(client, "b")
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    client.update_item(
        TableName=store.control_table,
        Key=event_key("gig"),
        UpdateExpression="SET #capacity = :one",
        ExpressionAttributeNames={"#capacity": "capacity"},
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    # WHEN more signups arrive
    submit(client, "c")
    submit(client, "d", seats=2)
    # THEN they are rejected capacity_full, and the batch does not fail (it used to fail
    # every time: the commit's condition capacity >= taken could never hold)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    assert status_of(client, "c") == (Status.REJECTED, Reason.CAPACITY_FULL)
    assert status_of(client, "d") == (Status.REJECTED, Reason.CAPACITY_FULL)
    assert store.get_event("gig").event.taken == 2


# -- update_capacity --------------------------------------------------------------------


def test_raising_capacity_lets_later_signups_in(client, store, stream):
    store.create_event("gig", 1, NOW)
    submit(client, "a")
    submit(client, "b")
    invoke(stream.read_new())
    assert status_of(client, "b") == (Status.REJECTED, Reason.CAPACITY_FULL)
    # WHEN capacity is raised
    record = store.update_capacity("gig", 3)
    assert (record.event.capacity, record.event.taken) == (3, 1)
    submit(client, "c", seats=2)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    # THEN the later signup is accepted, b stays rejected, and the audit is clean (b was
    # rejected while capacity was 1: no false "rejected although it fitted")
    assert status_of(client, "c") == (Status.ACCEPTED, None)
    assert status_of(client, "b") == (Status.REJECTED, Reason.CAPACITY_FULL)
    report = audit(store)
    assert report.ok, [e.violations for e in report.events]


def test_lowering_capacity_goes_down_to_taken_and_no_further(client, store, stream):
    store.create_event("gig", 5, NOW)
    submit(client, "a", seats=2)
    invoke(stream.read_new())
    # WHEN lowered below what is taken
    with pytest.raises(CapacityBelowTakenError) as caught:
        store.update_capacity("gig", 1)
    # THEN a domain error names what is taken, and nothing changed
    assert (caught.value.taken, caught.value.capacity) == (2, 1)
    assert "2" in str(caught.value)
    assert store.get_event("gig").event.capacity == 5
    # WHEN lowered to exactly what is taken
    assert store.update_capacity("gig", 2).event.capacity == 2
    submit(client, "b")
    invoke(stream.read_new())
    assert status_of(client, "b") == (Status.REJECTED, Reason.CAPACITY_FULL)
    assert audit(store).ok


def test_update_capacity_of_an_unknown_event_is_not_found(store):
    with pytest.raises(EventNotFoundError):
        store.update_capacity("nope", 3)


def test_update_capacity_of_a_hand_written_event_without_version(client, store):
    put_event_by_hand(client, store, capacity={"N": "2"})
    record = store.update_capacity("gig", 4)
    # The version is the processor's: a capacity change leaves it alone.
    assert (record.event.capacity, record.event.version) == (4, 0)


def test_a_capacity_change_makes_an_in_flight_commit_re_decide(client, store):
    from tests.oracle import decide
    from turnstile.storage.intake import IntakeRecord

    # GIVEN a processor that read the event (capacity 1) and decided against it
    store.create_event("gig", 1, NOW)
    before = store.get_event("gig")
    assert before is not None
    requests = [IntakeRecord("gig", "a", "1"), IntakeRecord("gig", "b", "2")]
    outcome = decide(before.event, requests)
    # WHEN capacity changes before its commit lands (the version does not move)
    assert store.update_capacity("gig", 2).event.version == before.event.version
    # THEN its commit conflicts (it must reload and decide b again, with 2 seats)
    with pytest.raises(CommitConflictError):
        store.commit(before.event, outcome, NOW, {r.signup_id: r for r in requests})


class StaleRead(SignupStore):
    """A store whose first event read is the one it made before a commit landed."""

    def __init__(self, *args: Any, stale: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stale = stale

    def get_event(self, event_id: str, consistent: bool = True):
        if self.stale is not None:
            stale, self.stale = self.stale, None
            return stale
        return super().get_event(event_id, consistent)


def test_lowering_capacity_below_seats_a_racing_commit_took_is_refused(client, store, stream):
    # GIVEN an event of 5 seats, read by an organizer while nothing was taken
    store.create_event("gig", 5, NOW)
    read_before = store.get_event("gig")
    # ... and a commit that takes 3 seats before the organizer's write lands
    submit(client, "a", seats=3)
    assert invoke(stream.read_new()) == {"batchItemFailures": []}
    racing = StaleRead(client, sleep=lambda _: None, stale=read_before)
    # WHEN the organizer lowers capacity to 2, by what it read (0 taken)
    with pytest.raises(CapacityBelowTakenError) as caught:
        racing.update_capacity("gig", 2)
    # THEN the write is refused by the floor the commit left, and capacity stays 5: the
    # API may not read taken in its condition (IAM), so it reads capacity_floor instead
    assert (caught.value.taken, caught.value.capacity) == (3, 2)
    assert store.get_event("gig").event.capacity == 5
    assert audit(store).ok


def test_a_close_that_lands_before_a_commit_makes_it_reject_event_closed(client, store, stream):
    from turnstile.jobs.processor import StreamProcessor

    # GIVEN a processor that read the OPEN event, and a close that lands before its commit
    store.create_event("gig", 5, NOW)
    submit(client, "a")
    records = stream.read_new()

    class CloseBeforeCommit(SignupStore):
        closed = False

        def commit(self, *args: Any, **kwargs: Any):
            if not self.closed:
                self.closed = True
                assert store.close_event("gig")[1]
            return super().commit(*args, **kwargs)

    stream_handler._processor = StreamProcessor(CloseBeforeCommit(client, sleep=lambda _: None))
    # WHEN the batch is decided
    assert invoke(records) == {"batchItemFailures": []}
    # THEN the signup is not accepted after the close: the commit was conditioned on
    # state OPEN (the close leaves version alone), conflicted, and decided again
    assert status_of(client, "a") == (Status.REJECTED, Reason.EVENT_CLOSED)
    event = store.get_event("gig")
    assert (event.event.state, event.event.taken) == ("CLOSED", 0)

"""Hostile intake, case by case: each record a producer with PutItem/UpdateItem on the intake
table can write, and what must (not) follow from it.

Every intake record gets exactly one decision under its own key, and nothing else changes:
not the event items, not the sweeper's lease or history, not a decision already made, not
the order or the liveness of the records behind it.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from tests.api.helpers import v2_event
from tests.hostile.helpers import (
    NOW,
    decision_items,
    deliver,
    invoke,
    key,
    operator_edit,
    raw_decision,
)
from tests.hostile.strategies import MAX_DECISION_BYTES, item_size
from turnstile.base.contract import EventState, Reason, Status
from turnstile.handlers import stream as stream_handler
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.jobs.sweeper import Sweeper, find_undecided
from turnstile.storage.dynamo import from_item
from turnstile.storage.store import SignupStore
from turnstile.web.api import create_app
from turnstile_tools import cli
from turnstile_tools.audit import audit
from turnstile_tools.local.context import LocalLambdaContext

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def cold_processor(aws) -> Iterator[None]:
    stream_handler._processor = None
    yield
    stream_handler._processor = None


def utc_iso(when: datetime | None = None) -> str:
    return (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def put(client: Any, event_id: str, signup_id: str, **attrs: Any) -> dict[str, Any]:
    """A producer's put_item (typed values), no condition: whatever DynamoDB accepts."""
    item = {**key(event_id, signup_id), **attrs}
    client.put_item(TableName="turnstile-intake", Item=item)
    return item


def signup(client: Any, event_id: str, signup_id: str, seats: int = 1, **attrs: Any) -> None:
    """A signup that keeps the contract."""
    put(
        client,
        event_id,
        signup_id,
        seats={"N": str(seats)},
        submitted_at={"S": utc_iso()},
        **attrs,
    )


def status_of(store: SignupStore, event_id: str, signup_id: str) -> tuple[str, str | None]:
    decision = store.get_decision(event_id, signup_id)
    assert decision is not None, f"no decision for {(event_id, signup_id)!r}"
    assert "status" in decision, f"not a decision under {(event_id, signup_id)!r}: {decision}"
    return decision["status"], decision.get("reason")


def event_state(store: SignupStore, event_id: str) -> tuple[int, int, int, str]:
    record = store.get_event(event_id)
    assert record is not None, f"event {event_id!r} is gone"
    s = record.event
    return s.capacity, s.taken, s.accepted, s.state


def violations(store: SignupStore, **kwargs: Any) -> list[str]:
    return [v for e in audit(store, **kwargs).events for v in e.violations]


# -- reserved keys as signups ------------------------------------------------------------


def test_event_sort_key_as_a_signup_is_only_rejected_and_the_event_is_intact(client, store, stream):
    # GIVEN an event with two seats
    store.create_event("concert", 2, NOW)
    version = store.get_event("concert").event.version
    # WHEN a producer writes a signup whose id is the event item's sort key
    signup(client, "concert", "#EVENT")
    assert deliver(stream) == [{"batchItemFailures": []}]
    # THEN it is rejected under its own key, and the event is untouched
    assert status_of(store, "concert", "#EVENT") == (Status.REJECTED, Reason.INVALID_REQUEST)
    assert event_state(store, "concert") == (2, 0, 0, EventState.OPEN)
    assert store.get_event("concert").event.version >= version
    # and a valid signup after it is accepted
    signup(client, "concert", "alice")
    assert deliver(stream) == [{"batchItemFailures": []}]
    assert status_of(store, "concert", "alice") == (Status.ACCEPTED, None)
    assert event_state(store, "concert") == (2, 1, 1, EventState.OPEN)
    assert store.get_event("concert").event.version > version
    # and the sweeper and the audit count the "#EVENT" signup as decided, like any other
    assert list(find_undecided(store, min_age_s=0)) == []
    report = audit(store, pending_grace_s=0)
    assert report.ok and report.totals["pending"] == 0


def test_event_sort_key_of_an_unknown_event_is_decided_and_blocks_nothing(client, store, stream):
    # GIVEN no event 'no-such-event', and two records for it, the first keyed "#EVENT"
    signup(client, "no-such-event", "#EVENT")
    signup(client, "no-such-event", "after")
    # WHEN delivered
    responses = deliver(stream)
    # THEN the batch does not fail, and both are decided
    assert responses == [{"batchItemFailures": []}]
    status, reason = status_of(store, "no-such-event", "#EVENT")
    assert status == Status.REJECTED and reason in (Reason.INVALID_REQUEST, Reason.UNKNOWN_EVENT)
    assert status_of(store, "no-such-event", "after") == (Status.REJECTED, Reason.UNKNOWN_EVENT)
    assert store.get_event("no-such-event") is None
    assert list(find_undecided(store, min_age_s=0)) == []
    assert audit(store, pending_grace_s=0).totals["pending"] == 0


@pytest.mark.parametrize("sweep_first", [False, True], ids=["no-lease-yet", "lease-exists"])
def test_sweeper_keys_as_signups_leave_the_sweeper_working(client, store, stream, sweep_first):
    # GIVEN (or not) a sweeper that already ran: its lease and history exist
    if sweep_first:
        assert Sweeper(store).sweep(run_id="r0").status == "succeeded"
    # WHEN producers write signups keyed like the sweeper's own items
    signup(client, "#sweeper", "#lease")
    signup(client, "#sweeper-runs", "x")
    signup(client, "#sweeper-runs", "r0#000003")
    assert deliver(stream) == [{"batchItemFailures": []}]
    # THEN each is rejected under its own key
    for k in [("#sweeper", "#lease"), ("#sweeper-runs", "x"), ("#sweeper-runs", "r0#000003")]:
        assert status_of(store, *k)[0] == Status.REJECTED
    # and the sweeper still takes its lease, runs, and replays without error
    result = Sweeper(store).sweep(run_id="r1")
    assert result.status == "succeeded", result
    assert Sweeper(store).replay_failed() == []


# -- submitted_at: any size, any clock ------------------------------------------------------


def test_a_390_kb_submitted_at_is_bounded_and_the_batch_is_decided(client, store, stream):
    # GIVEN signups around one whose submitted_at is 390 KB
    store.create_event("gig", 5, NOW)
    signup(client, "gig", "before")
    put(client, "gig", "big", seats={"N": "1"}, submitted_at={"S": utc_iso() + "x" * 390_000})
    signup(client, "gig", "after")
    # WHEN delivered
    assert deliver(stream) == [{"batchItemFailures": []}]
    # THEN every decision is materialized, the big one in a bounded form
    got = decision_items(store)
    assert {s for (e, s) in got if e == "gig"} == {"before", "big", "after"}
    big = got[("gig", "big")]
    assert len(big.get("submitted_at", {}).get("S", "")) <= 64
    assert item_size(big) <= MAX_DECISION_BYTES
    report = audit(store)
    assert report.ok and report.totals["pending"] == 0


def test_an_intake_item_at_the_size_limit_gets_a_bounded_decision_and_blocks_nothing(
    client, store, stream
):
    # GIVEN the largest intake item DynamoDB takes (moto counts names and values, up to
    # 405,000 bytes): its decision, with decided_at, position, ..., would not fit
    store.create_event("gig", 5, NOW)
    base = {**key("gig", "edge"), "seats": {"N": "1"}, "attributes": {"M": {"a": {"S": "x"}}}}
    room = 405_000 - sum(len(n) + len(json.dumps(v)) for n, v in base.items()) - 12
    while True:
        try:
            item = {**base, "submitted_at": {"S": "t" * room}}
            client.put_item(TableName="turnstile-intake", Item=item)
            break
        except client.exceptions.ClientError:
            room -= 16
    assert room > 404_000
    signup(client, "gig", "after")
    # WHEN delivered
    responses = deliver(stream)
    # THEN nothing fails, both are decided, the big one's decision bounded
    assert responses == [{"batchItemFailures": []}]
    edge = raw_decision(store, "gig", "edge")
    assert edge is not None and item_size(edge) <= MAX_DECISION_BYTES
    assert status_of(store, "gig", "after")[0] == Status.ACCEPTED
    # and so is a signup in a later batch (the event is not blocked)
    signup(client, "gig", "later")
    assert deliver(stream) == [{"batchItemFailures": []}]
    assert status_of(store, "gig", "later")[0] == Status.ACCEPTED


def naive_utc(shift: timedelta = timedelta(0)) -> str:
    """What ``datetime.utcnow().isoformat()`` returns: UTC without an offset."""
    return (datetime.now(UTC) + shift).replace(tzinfo=None).isoformat()


def test_a_naive_submitted_at_fails_nothing_and_the_audit_runs(client, store, stream):
    # GIVEN a decided signup and a lost one (never delivered), both with naive timestamps
    store.create_event("gig", 5, NOW)
    put(client, "gig", "naive", seats={"N": "1"}, submitted_at={"S": naive_utc()})
    # WHEN delivered
    responses = deliver(stream)
    put(client, "gig", "lost", seats={"N": "1"}, submitted_at={"S": naive_utc()})
    # THEN the handler reports no failure, the signup is decided, and the audit runs
    assert responses == [{"batchItemFailures": []}]
    assert status_of(store, "gig", "naive") == (Status.ACCEPTED, None)
    report = audit(store)
    assert report.totals["pending"] == 1


LOST_CLOCKS = {
    "missing": None,
    "year-2999": {"S": "2999-01-01T00:00:00Z"},
    "yesterday": {"S": "yesterday"},
    "naive-10-min-ago": "naive",
    "a-number": {"N": "1"},
}


@pytest.mark.parametrize("clock", list(LOST_CLOCKS), ids=list(LOST_CLOCKS))
def test_a_lost_record_with_any_clock_is_swept_and_flagged(client, store, clock):
    # GIVEN an intake record that no processor ever saw (its stream record was lost)
    store.create_event("gig", 5, NOW)
    value = LOST_CLOCKS[clock]
    if value == "naive":
        value = {"S": naive_utc(-timedelta(minutes=10))}
    attrs = {"seats": {"N": "1"}} | ({"submitted_at": value} if value else {})
    put(client, "gig", "lost", **attrs)
    # THEN the sweeper finds it (an unknown or future age counts as old)
    found = {(u.event_id, u.signup_id) for u in find_undecided(store, min_age_s=60)}
    assert ("gig", "lost") in found
    # and the audit flags it as pending too long
    report = audit(store, pending_grace_s=60)
    [gig] = [e for e in report.events if e.event_id == "gig"]
    assert gig.pending == 1
    assert not report.ok and any("pending" in v for v in gig.violations), gig.violations


@pytest.fixture
def west_coast_clock() -> Iterator[None]:
    """The machine's local time zone at UTC-8 (a POSIX TZ string: no zone files needed)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "PST8"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_a_naive_submitted_at_is_utc_whatever_the_local_zone(client, store, west_coast_clock):
    # GIVEN a lost record stamped naive UTC ten minutes before "now"
    store.create_event("gig", 5, NOW)
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    stamp = (now - timedelta(minutes=10)).replace(tzinfo=None).isoformat()
    put(client, "gig", "lost", seats={"N": "1"}, submitted_at={"S": stamp})
    # THEN the sweeper sees it ten minutes old, not eight hours in the future
    [undecided] = find_undecided(store, min_age_s=300, now=now.timestamp())
    assert undecided.signup_id == "lost" and undecided.age_s == pytest.approx(600)
    # and so does the audit
    report = audit(store, pending_grace_s=300, now=now)
    [gig] = report.events
    assert gig.oldest_pending_s == pytest.approx(600) and not report.ok


# -- decisions fixed to the byte ------------------------------------------------------------


class CrashAfterCommit(SignupStore):
    """A processor killed between its commit and writing the decision items of that commit
    (a cold processor first writes out the event's last journal again: that one goes
    through, or the crash would come before the commit)."""

    def __init__(self, client, crash_on: frozenset[str]) -> None:
        super().__init__(client)
        self.crash_on = crash_on

    def materialize(self, event_id, journal, requests):  # type: ignore[override]
        if {d.signup_id for d in journal.decisions} & self.crash_on:
            raise RuntimeError("process killed")
        return super().materialize(event_id, journal, requests)


def test_a_cold_start_never_rewrites_a_decision_from_a_rewritten_intake_item(client, store, stream):
    # GIVEN a decided signup with attributes {"a": "x"}
    store.create_event("gig", 5, NOW)
    signup(client, "gig", "s1", attributes={"M": {"a": {"S": "x"}}})
    assert deliver(stream) == [{"batchItemFailures": []}]
    before = raw_decision(store, "gig", "s1")
    assert before is not None and before["attributes"] == {"M": {"a": {"S": "x"}}}
    # WHEN a producer rewrites its intake item, and a cold-started processor gets new work
    put(client, "gig", "s1", seats={"N": "1"}, attributes={"M": {"a": {"S": "EVIL"}}})
    stream_handler._processor = None
    signup(client, "gig", "s2")
    assert deliver(stream) == [{"batchItemFailures": []}]
    # THEN the decision is exactly as it was
    assert raw_decision(store, "gig", "s1") == before
    assert status_of(store, "gig", "s2") == (Status.ACCEPTED, None)


def test_a_committed_decision_keeps_its_data_when_intake_changes_before_it_is_written(
    client, store, stream
):
    # GIVEN one decided signup, then two whose commit landed but whose items were not written
    store.create_event("gig", 5, NOW)
    signup(client, "gig", "s1", attributes={"M": {"a": {"S": "x"}}})
    assert deliver(stream) == [{"batchItemFailures": []}]
    first = raw_decision(store, "gig", "s1")
    original = {
        "s2": put(
            client,
            "gig",
            "s2",
            seats={"N": "1"},
            submitted_at={"S": utc_iso()},
            attributes={"M": {"a": {"S": "y"}}},
        ),
        "s3": put(
            client,
            "gig",
            "s3",
            seats={"N": "1"},
            submitted_at={"S": utc_iso()},
            attributes={"M": {"a": {"S": "z"}}},
        ),
    }
    stream_handler._processor = StreamProcessor(CrashAfterCommit(client, frozenset({"s2", "s3"})))
    invoke(stream.read_new())  # the crash: the group is parked, its journal committed
    assert raw_decision(store, "gig", "s2") is None
    event = store.get_event("gig")
    assert event is not None and event.journal is not None
    assert {d.signup_id for d in event.journal.decisions} == {"s2", "s3"}  # committed
    # WHEN a producer rewrites one intake item and deletes the other
    put(client, "gig", "s2", seats={"N": "1"}, attributes={"M": {"a": {"S": "EVIL"}}})
    client.delete_item(TableName="turnstile-intake", Key=key("gig", "s3"))
    # and a fresh processor (a cold start) processes what comes next
    stream_handler._processor = None
    signup(client, "gig", "s4")
    assert deliver(stream) == [{"batchItemFailures": []}]
    # THEN every decision carries the data it was decided with
    assert raw_decision(store, "gig", "s1") == first
    for sid, item in original.items():
        decision = raw_decision(store, "gig", sid)
        assert decision is not None, sid
        assert decision.get("attributes") == item["attributes"], sid
        assert decision.get("submitted_at") == item["submitted_at"], sid
    assert status_of(store, "gig", "s4") == (Status.ACCEPTED, None)


BINARY = {"M": {"blob": {"B": b"\x00\xff"}, "set": {"BS": [b"\x00", b"\xff"]}}}


def _binary_attributes(decision: dict[str, Any] | None) -> dict[str, Any]:
    assert decision is not None
    attrs = decision["attributes"]["M"]
    return {"blob": attrs["blob"], "set": {k: sorted(v) for k, v in attrs["set"].items()}}


def test_binary_attributes_stay_binary_through_the_lambda_path(client, store, stream):
    store.create_event("gig", 5, NOW)
    signup(client, "gig", "bin", attributes=BINARY)
    assert deliver(stream) == [{"batchItemFailures": []}]
    assert _binary_attributes(raw_decision(store, "gig", "bin")) == {
        "blob": {"B": b"\x00\xff"},
        "set": {"BS": [b"\x00", b"\xff"]},
    }


def test_binary_attributes_stay_binary_through_the_in_process_path(client, store):
    # The processor fed images as boto3 deserializes them (the local tools' path).
    store.create_event("gig", 5, NOW)
    signup(client, "gig", "bin", attributes=BINARY)
    raw = client.get_item(TableName="turnstile-intake", Key=key("gig", "bin"))["Item"]
    record = StreamRecord(
        "1" * 21, "INSERT", {"event_id": "gig", "signup_id": "bin"}, from_item(raw)
    )
    result = StreamProcessor(store).process([record])
    assert result.failures == []
    assert _binary_attributes(raw_decision(store, "gig", "bin")) == {
        "blob": {"B": b"\x00\xff"},
        "set": {"BS": [b"\x00", b"\xff"]},
    }


def test_a_4_kb_binary_attribute_is_within_the_limit(client, store, stream):
    # 4,000 bytes of binary are 4,000 bytes in DynamoDB (base64 is only the wire form)
    store.create_event("gig", 5, NOW)
    signup(client, "gig", "bin", attributes={"M": {"b": {"B": b"\x01" * 4000}}})
    assert deliver(stream) == [{"batchItemFailures": []}]
    assert status_of(store, "gig", "bin") == (Status.ACCEPTED, None)


def test_a_full_batch_of_4_kb_incompressible_attributes_is_decided(client, store, stream):
    # 100 signups in one batch, each with just under 4 KB of random bytes (4,085 bytes in
    # DynamoDB, 4,095 counting the name "attributes"): 408 KB in all, more than one item
    # holds, so whatever a commit carries about them must not be all of it
    store.create_event("gig", 100, NOW)
    rng = random.Random(10)
    for i in range(100):
        blob = rng.randbytes(4080)
        signup(client, "gig", f"u{i}", attributes={"M": {"b": {"B": blob}}})
    assert deliver(stream) == [{"batchItemFailures": []}]
    got = decision_items(store)
    assert sum(1 for (e, _), d in got.items() if d["status"]["S"] == Status.ACCEPTED) == 100
    assert event_state(store, "gig") == (100, 100, 100, EventState.OPEN)


# -- an operator edited the event item by hand ----------------------------------------------


def test_capacity_edited_below_taken_still_decides_later_signups(client, store, stream):
    # GIVEN three accepted signups, then an operator setting the capacity to 1 in the table
    store.create_event("gig", 5, NOW)
    for i in range(3):
        signup(client, "gig", f"u{i}")
    assert deliver(stream) == [{"batchItemFailures": []}]
    operator_edit(store, "gig", capacity=1)
    # WHEN a new signup arrives
    signup(client, "gig", "late")
    # THEN it is rejected capacity_full, and the batch does not fail
    assert deliver(stream) == [{"batchItemFailures": []}]
    assert status_of(store, "gig", "late") == (Status.REJECTED, Reason.CAPACITY_FULL)


def test_an_event_item_without_version_still_decides_later_signups(client, store, stream):
    store.create_event("gig", 5, NOW)
    signup(client, "gig", "u0")
    assert deliver(stream) == [{"batchItemFailures": []}]
    operator_edit(store, "gig", version=None)
    signup(client, "gig", "late")
    assert deliver(stream) == [{"batchItemFailures": []}]
    assert status_of(store, "gig", "late")[0] in (Status.ACCEPTED, Status.REJECTED)


# -- the API and the processor apply one rule -----------------------------------------------


def submit_via_api(store: SignupStore, event_id: str, body: dict[str, Any]) -> int:
    app = create_app(store=lambda: store)
    event = v2_event("POST", f"/events/{event_id}/signups", body)
    response = app.resolve(event, LocalLambdaContext.api())
    return int(response["statusCode"])


def test_api_and_processor_agree_on_1300_empty_maps(client, store, stream):
    store.create_event("gig", 5, NOW)
    body = {"signup_id": "s1", "attributes": {"l": [{}] * 1300}}
    status = submit_via_api(store, "gig", body)
    assert status in (202, 400, 413)
    assert deliver(stream) == ([{"batchItemFailures": []}] if status == 202 else [])
    if status == 202:
        assert status_of(store, "gig", "s1")[1] != Reason.INVALID_REQUEST


_json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.text(max_size=30),
)
_json_values = st.recursive(
    _json_leaves,
    lambda c: st.lists(c, max_size=30) | st.dictionaries(st.text(min_size=1, max_size=4), c),
    max_leaves=200,
)
# Many small values: where sizing JSON text and sizing a DynamoDB item differ most (an
# empty map is 3 bytes of JSON with its comma and 4 in an item: 1,024 to 1,365 of them
# differ; a digit is 2 and 3: 1,366 to 2,048 of them).
_many_small = st.builds(
    lambda leaf, n: {"l": [leaf] * n},
    st.sampled_from([{}, [], 0, 7, "", "é", True, None]),
    st.integers(min_value=1000, max_value=2100) | st.integers(min_value=0, max_value=3000),
)
_json_attributes = _many_small | st.dictionaries(
    st.text(min_size=1, max_size=6), _json_values, max_size=4
)


# No shrinking: every example shares one account whose stream grows, and shrinking a
# disagreement took minutes; ``note`` prints the example's shape instead.
@settings(
    max_examples=60,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(attributes=_json_attributes)
def test_api_and_processor_agree_on_any_attributes(client, store, stream, attributes):
    # Whatever the API answers 202, the processor does not reject as invalid_request.
    note(f"attributes as JSON: {len(json.dumps(attributes))} bytes, {json.dumps(attributes)[:300]}")
    if store.get_event("gig") is None:
        store.create_event("gig", 10**6, NOW)
    signup_id = f"s{time.monotonic_ns()}"
    status = submit_via_api(store, "gig", {"signup_id": signup_id, "attributes": attributes})
    assert status in (202, 400, 413)  # accepted, or refused (413: body over 16 KB)
    responses = deliver(stream)
    assert all(r == {"batchItemFailures": []} for r in responses)
    if status == 202:
        assert status_of(store, "gig", signup_id)[1] != Reason.INVALID_REQUEST


def test_cli_audit_of_an_unknown_event_fails(aws, capsys):
    code = cli.main(["audit", "no-such-event"])
    _, err = capsys.readouterr()
    assert code != 0
    assert "Traceback" not in err


# -- producer-written fields the sweeper reads ----------------------------------------------


def test_a_junk_redriven_at_does_not_stop_the_sweeper(client, store, stream):
    # GIVEN two lost records, one carrying a redriven_at that is not a number
    store.create_event("gig", 5, NOW)
    put(client, "gig", "junk", seats={"N": "1"}, redriven_at={"S": "junk"})
    signup(client, "gig", "lost")
    stream.read_new()  # both stream records are lost
    # WHEN the sweeper runs
    result = Sweeper(store, min_age_s=0).sweep()
    # THEN it succeeds and re-emits the lost records; the stream then decides them
    assert result.status == "succeeded", result
    assert deliver(stream) == [{"batchItemFailures": []}]
    assert status_of(store, "gig", "lost")[0] == Status.ACCEPTED
    assert store.get_decision("gig", "junk") is not None


def test_a_future_redriven_at_does_not_hide_a_record_from_the_sweeper(client, store, stream):
    store.create_event("gig", 5, NOW)
    put(client, "gig", "hidden", seats={"N": "1"}, redriven_at={"N": "1e100"})
    stream.read_new()  # lost
    found = {(u.event_id, u.signup_id) for u in find_undecided(store, min_age_s=60)}
    assert ("gig", "hidden") in found


def test_a_string_redrive_counter_does_not_stop_the_sweeper(client, store, stream):
    # GIVEN two lost records, one whose redrive counter a producer set to a string
    store.create_event("gig", 5, NOW)
    put(client, "gig", "odd", seats={"N": "1"}, redrive={"S": "x"})
    signup(client, "gig", "lost")
    stream.read_new()  # lost
    # WHEN the sweeper runs
    result = Sweeper(store, min_age_s=0).sweep()
    # THEN it succeeds, and both records reach the stream and get decided
    assert result.status == "succeeded", result
    assert deliver(stream) == [{"batchItemFailures": []}]
    assert store.get_decision("gig", "odd") is not None
    assert status_of(store, "gig", "lost")[0] == Status.ACCEPTED


def test_a_lost_record_in_a_hash_partition_is_flagged_by_the_audit(client, store):
    # '#'-prefixed event ids are just invalid signups: the audit sees them like any other
    put(client, "#hidden", "x", seats={"N": "1"})
    report = audit(store, pending_grace_s=60)
    assert report.totals["pending"] == 1
    assert not report.ok

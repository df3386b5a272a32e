"""Parked events in the store, against moto: the parking marker, parking, unparking,
clearing the marker; read page by page and through DynamoDB's unprocessed items, as a busy
table answers (docs/arrival-order.md)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.helpers import CallRecorder, put_raw_intake
from turnstile.base.contract import CONTROL_TABLE, ControlKey
from turnstile.base.errors import StoreUnavailableError
from turnstile.storage.dynamo import control_key, refused_as_invalid
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.ledger import Ledger
from turnstile.storage.parking import MAX_PARKING_ERROR_CHARS
from turnstile.storage.store import SignupStore

NOW = "2026-01-01T00:00:00.000000Z"
LATER = "2026-01-01T00:05:00.000000Z"


class Busy:
    """Wraps a boto3 client the way a busy table answers: every Scan and Query returns one
    item per page, and every batch call is first handed back whole as unprocessed."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name in ("scan", "query"):
            return lambda **kwargs: attr(**kwargs, Limit=1)
        if name in ("batch_get_item", "batch_write_item"):
            unprocessed = "UnprocessedKeys" if name == "batch_get_item" else "UnprocessedItems"

            def refuse_first(**kwargs: Any) -> Any:
                if self.refused % 2 == 0:
                    self.refused += 1
                    return {unprocessed: kwargs["RequestItems"]}
                self.refused += 1
                return attr(**kwargs)

            return refuse_first
        return attr


class Refusing:
    """Wraps a boto3 client: the next ``times`` batch calls are handed back whole as
    unprocessed, then they go through."""

    def __init__(self, client: Any, times: int) -> None:
        self._client = client
        self.times = times

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in ("batch_get_item", "batch_write_item"):
            return attr
        unprocessed = "UnprocessedKeys" if name == "batch_get_item" else "UnprocessedItems"

        def refuse(**kwargs: Any) -> Any:
            if self.times > 0:
                self.times -= 1
                return {unprocessed: kwargs["RequestItems"]}
            return attr(**kwargs)

        return refuse


@pytest.fixture
def busy(client):
    return SignupStore(Busy(client), sleep=lambda _: None)


def request(signup_id: str, sequence_number: str, **fields: Any) -> IntakeRecord:
    return IntakeRecord(
        event_id="gig", signup_id=signup_id, sequence_number=sequence_number, **fields
    )


def control_item(client, key: tuple[str, str]) -> dict[str, Any] | None:
    response = client.get_item(
        TableName=CONTROL_TABLE.name, Key=control_key(key), ConsistentRead=True
    )
    return response.get("Item")


def test_parked_records_come_back_whole_in_arrival_order_page_by_page(store, busy):
    # GIVEN records parked out of order, of every shape a record can have
    store.park(
        "gig",
        [
            request("late", "1000", seats=3, attributes={"team": "L", "n": 2}),
            request("bad", "99", seats=0, problem="seats must be a whole number"),
            request("first", "98", submitted_at="2026-01-01T00:00:00Z"),
        ],
        NOW,
        "StoreUnavailableError",
    )
    store.park("other", [IntakeRecord("other", "x", "97")], NOW, None)
    # WHEN read back one item per page
    parked = busy.parked_records("gig")
    # THEN every record of the event and nothing else (no parking marker, no other event's),
    # in arrival order (by number, not text), each exactly as it was parked
    assert parked == [
        request("first", "98", submitted_at="2026-01-01T00:00:00Z"),
        request("bad", "99", seats=0, problem="seats must be a whole number"),
        request("late", "1000", seats=3, attributes={"team": "L", "n": 2}),
    ]
    assert busy.parked_records("nobody") == []


def test_parking_markers_finds_every_parked_event_page_by_page_and_nothing_else(
    store, busy, client
):
    # GIVEN three parked events, one released, and other items of the control table beside them
    for event_id in ("a", "b", "c", "done"):
        store.park(event_id, [IntakeRecord(event_id, "s", "100")], NOW, None)
    assert store.clear_parking("done", 1)
    store.create_event("a", 5, NOW)
    Ledger.beside(store).acquire_lease("sweeper", 60, 0)
    # WHEN every marker is read, one item per page
    markers = busy.parking_markers()
    # THEN exactly the parked events, each with its marker
    assert sorted(markers) == ["a", "b", "c"]
    assert markers["b"]["event_id"] == "b" and markers["b"]["parked_since"] == NOW
    assert markers["b"]["first_sequence_number"] == "100" and markers["b"]["version"] == 1
    # and one event's marker is read by its key
    assert busy.parking_markers("c") == {"c": markers["c"]}
    assert busy.parking_markers("done") == {} and busy.parking_markers("nobody") == {}


def test_the_event_and_its_marker_are_read_together_through_unprocessed_keys(store, busy):
    # GIVEN an event without a marker, then parked, then released
    store.create_event("gig", 5, NOW)
    assert busy.get_event_and_parking("gig") == (store.get_event("gig"), None, False)
    version = store.park("gig", [request("a", "100")], NOW, "StoreUnavailableError")
    # WHEN both are read while DynamoDB first leaves every key unprocessed
    event, marker, may_repeat = busy.get_event_and_parking("gig")
    # THEN both come back, each for what it is
    assert event == store.get_event("gig") and event.event.capacity == 5
    assert marker == store.get_parking("gig")
    assert (marker["version"], marker["error"], marker["parked_since"]) == (
        version,
        "StoreUnavailableError",
        NOW,
    )
    assert busy.retries == 2 and may_repeat is False
    # and a released marker is no marker; an event that does not exist is None
    assert store.clear_parking("gig", version)
    assert busy.get_event_and_parking("gig") == (event, None, False)
    assert busy.get_event_and_parking("nobody") == (None, None, False)


def test_unparking_deletes_exactly_those_records_in_batches_of_25_through_unprocessed_items(
    store, client
):
    # GIVEN 60 parked records
    numbers = [str(100 + i) for i in range(60)]
    store.park("gig", [request(f"s{n}", n) for n in numbers], NOW, None)
    recorder = CallRecorder(Busy(client))
    busy = SignupStore(recorder, sleep=lambda _: None)
    # WHEN 52 of them are unparked, some named twice, while DynamoDB first hands every
    # batch back unprocessed
    busy.unpark("gig", numbers[:52] + numbers[:3])
    # THEN those 52 are gone and the rest are still parked, in order
    assert [r.sequence_number for r in store.parked_records("gig")] == numbers[52:]
    # in three batches (25, 25, 2), each sent again once
    assert recorder.sizes("batch_write_item", "RequestItems") == [1] * 6
    sent = [len(kw["RequestItems"][CONTROL_TABLE.name]) for _, kw in recorder.calls]
    assert sent == [25, 25, 25, 25, 2, 2]
    assert busy.retries == 3
    # and the marker is still there (unparking never clears it)
    assert store.get_parking("gig") is not None


def test_parking_marks_the_event_from_its_earliest_record_and_keeps_when_and_why(store, client):
    # WHEN records are parked whose numbers differ in length (compared as numbers)
    first = store.park("gig", [request("b", "10000"), request("a", "9999")], NOW, "X" * 500)
    # THEN the marker names the earliest, the time and the error (cut to 400 characters)
    marker = store.get_parking("gig")
    assert (marker["version"], marker["first_sequence_number"]) == (first, "9999")
    assert (marker["parked_since"], marker["error"]) == (NOW, "X" * MAX_PARKING_ERROR_CHARS)
    # WHEN more are parked later, without an error
    second = store.park("gig", [request("c", "5")], LATER, None)
    # THEN the version moves on, and since when and since which record it is parked stay
    marker = store.get_parking("gig")
    assert second == first + 1 == marker["version"]
    assert (marker["parked_since"], marker["first_sequence_number"]) == (NOW, "9999")
    assert marker["error"] == "X" * MAX_PARKING_ERROR_CHARS
    # WHEN a new error parks it again THEN the last error is the one kept
    store.park("gig", [request("d", "6")], LATER, "StoreUnavailableError")
    assert store.get_parking("gig")["error"] == "StoreUnavailableError"


def test_parking_a_record_twice_writes_one_item(store):
    store.park("gig", [request("a", "100"), request("a", "100")], NOW, None)
    store.park("gig", [request("a", "100")], NOW, None)
    assert store.parked_records("gig") == [request("a", "100")]


def test_clearing_a_parking_marker_keeps_its_version(store, client):
    version = store.park("gig", [request("a", "100")], NOW, "StoreUnavailableError")
    # WHEN cleared at a version it no longer has THEN it stays
    assert store.clear_parking("gig", version + 1) is False
    assert store.get_parking("gig") is not None
    # WHEN cleared at its version THEN only the version is left on the marker
    assert store.clear_parking("gig", version) is True
    item = control_item(client, ControlKey.parking("gig"))
    assert {k: v for k, v in item.items() if k not in ("pk", "sk")} == {
        "version": {"N": str(version)},
        "event_id": {"S": "gig"},
    }
    # and parked again, it is parked since then, from its new first record
    store.park("gig", [request("b", "200")], LATER, None)
    marker = store.get_parking("gig")
    assert (marker["parked_since"], marker["first_sequence_number"]) == (LATER, "200")
    assert "error" not in marker


def _client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "UpdateItem")


def test_only_dynamodb_refusing_a_request_as_invalid_counts_as_refused():
    assert refused_as_invalid(_client_error("ValidationException")) is True
    assert refused_as_invalid(_client_error("InternalServerError")) is False
    assert refused_as_invalid(ValueError("ValidationException")) is False
    assert refused_as_invalid(None) is False


@pytest.mark.parametrize("attempts", [2, 3])
def test_unprocessed_answers_are_retried_up_to_the_stores_attempts(store, client, attempts):
    # GIVEN a parked event and a store allowed ``attempts`` calls per request, against a table
    # that hands back ``attempts - 1`` answers in a row unprocessed (each read and write)
    store.create_event("gig", 5, NOW)
    store.park("gig", [request("a", "100"), request("b", "101")], NOW, None)
    refusing = Refusing(client, 0)
    patient = SignupStore(refusing, sleep=lambda _: None, max_attempts=attempts)
    # WHEN the event and its marker are read, and a record unparked
    refusing.times = attempts - 1
    event, marker, _ = patient.get_event_and_parking("gig")
    refusing.times = attempts - 1
    patient.unpark("gig", ["100"])
    # THEN each went through on its last attempt
    assert (event.event.event_id, marker["version"]) == ("gig", 1)
    assert [r.signup_id for r in store.parked_records("gig")] == ["b"]
    assert patient.retries == 2 * (attempts - 1)


@pytest.mark.parametrize("operation", ["batch_get_item", "batch_write_item"])
def test_answers_left_unprocessed_past_the_stores_attempts_make_it_unavailable(
    store, client, operation
):
    store.park("gig", [request("a", "100")], NOW, None)
    patient = SignupStore(Refusing(client, 3), sleep=lambda _: None, max_attempts=3)
    with pytest.raises(StoreUnavailableError, match=f"^{operation} left unprocessed items after 3"):
        if operation == "batch_get_item":
            patient.get_event_and_parking("gig")
        else:
            patient.unpark("gig", ["100"])
    assert patient.retries == 2


def test_every_read_of_a_parking_marker_is_strongly_consistent(store, client):
    # A marker read stale (eventually consistent) could miss a parking begun a moment ago
    # and let later records be decided before the parked ones: arrival order lost.
    store.create_event("gig", 5, NOW)
    store.park("gig", [request("a", "100")], NOW, None)
    recorder = CallRecorder(client)
    reader = SignupStore(recorder, sleep=lambda _: None)
    reader.get_event_and_parking("gig")
    reader.get_parking("gig")
    reader.parking_markers()
    reader.parked_records("gig")
    consistent = [
        kwargs.get("ConsistentRead")
        if operation != "batch_get_item"
        else kwargs["RequestItems"][CONTROL_TABLE.name].get("ConsistentRead")
        for operation, kwargs in recorder.calls
    ]
    assert [op for op, _ in recorder.calls] == ["batch_get_item", "get_item", "scan", "query"]
    assert consistent == [True] * 4


class HalfProcessed:
    """Wraps a boto3 client: every BatchGetItem reads only the first half of its keys (at
    least one) and hands the rest back as unprocessed, as DynamoDB may."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name != "batch_get_item":
            return attr

        def half(**kwargs: Any) -> Any:
            self.calls += 1
            [(table, request)] = kwargs["RequestItems"].items()
            keys = request["Keys"]
            cut = max(1, len(keys) // 2)
            response = attr(RequestItems={table: {**request, "Keys": keys[:cut]}})
            if keys[cut:]:
                response["UnprocessedKeys"] = {table: {**request, "Keys": keys[cut:]}}
            return response

        return half


def test_a_batch_read_keeps_what_each_round_found(client):
    # GIVEN four intake records, read by a client that answers half of each batch read
    for signup_id in ("a", "b", "c", "d"):
        put_raw_intake(client, "gig", signup_id)
    half = HalfProcessed(client)
    store = SignupStore(half, sleep=lambda _: None)
    # WHEN they are read together
    found = store.get_intakes("gig", ["a", "b", "c", "d"])
    # THEN every round's items are kept: all four, in three rounds (2, 1, 1)
    assert sorted(found) == ["a", "b", "c", "d"]
    assert half.calls == 3

"""Sharded events through the HTTP API (docs/hot-events.md): the API places each signup.

A caller names a sharded event by its own id, always; the API keeps each signup under its
shard's key (``contract.signup_key``), where the stream processor decides it, and reads it
back from there. Every answer names the event by its own id. The processor here is the
real stream handler (its deployed role, the event source's filter), fed the intake stream.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from tests.api.helpers import Invoke, v2_event
from tests.conftest import StreamReader
from tests.helpers import ids_in
from turnstile.base.contract import (
    MAX_SHARDS,
    STREAM_SOURCE,
    Status,
    shard_key,
    shard_of,
    signup_key,
)
from turnstile.handlers import api as api_handler
from turnstile.handlers import stream as stream_handler
from turnstile.service import usecases
from turnstile.storage.store import SignupStore
from turnstile_tools.local.context import LocalLambdaContext
from turnstile_tools.local.poller import matches_filter

ME = {"jwt": {"claims": {"sub": "producer-1"}}}
OTHER = {"jwt": {"claims": {"sub": "producer-2"}}}


@pytest.fixture(autouse=True)
def fresh(aws):
    stream_handler._processor = None
    usecases.forget_known_shards()
    yield
    stream_handler._processor = None
    usecases.forget_known_shards()


def decide(stream: StreamReader) -> None:
    """The stream processor decides what intake's stream has delivered since last time."""
    records = stream.read_new()
    passed = [
        r for r in records if any(matches_filter(p, r) for p in STREAM_SOURCE.filter_patterns)
    ]
    if passed:
        event = json.loads(json.dumps({"Records": passed}))
        assert stream_handler.handler(event, LocalLambdaContext()) == {"batchItemFailures": []}


def create(invoke: Invoke, event_id: str, capacity: int, **options: Any) -> Any:
    body = {"event_id": event_id, "capacity": capacity, **options}
    return invoke("POST", "/events", body, authorizer=ME)


def submit(invoke: Invoke, event_id: str, signup_ids: Sequence[str], **kwargs: Any) -> None:
    for sid in signup_ids:
        answer = invoke(
            "POST", f"/events/{event_id}/signups", {"signup_id": sid}, authorizer=ME, **kwargs
        )
        assert answer.status == 202, answer.body
        assert answer.body["event_id"] == event_id
        assert answer.headers["location"].endswith(f"/events/{event_id}/signups/{sid}")


def intake_keys(store: SignupStore) -> dict[str, str]:
    """Every intake record's event key, by signup id."""
    return {i["signup_id"]: i["event_id"] for i in store.intake_items()}


# -- creating -------------------------------------------------------------------------------


def test_a_sharded_event_is_created_with_its_shards_and_shows_them(
    invoke: Invoke, store: SignupStore
):
    answer = create(invoke, "hot", 10, shards=4)
    assert answer.status == 201, answer.body
    assert answer.body["shards"] == 4
    assert (answer.body["taken"], answer.body["remaining"]) == (0, 10)
    # THEN the store holds the event and each of its shards' items
    assert store.get_event("hot").shards == 4
    assert all(store.get_event(shard_key("hot", k)) is not None for k in range(4))
    assert store.get_event(shard_key("hot", 4)) is None
    # the same body again: 200, the same event; other shards: a conflict naming them
    again = create(invoke, "hot", 10, shards=4)
    assert (again.status, again.body) == (200, answer.body)
    other = create(invoke, "hot", 10, shards=2)
    assert other.status == 409
    assert "shards 4" in other.body["message"] and "not shards 2" in other.body["message"]
    # GET shows it too
    shown = invoke("GET", "/events/hot")
    assert shown.body == answer.body


def test_an_event_of_one_shard_answers_as_it_always_did(invoke: Invoke, store: SignupStore):
    for body in (
        {"event_id": "plain", "capacity": 3},
        {"event_id": "one", "capacity": 3, "shards": 1},
    ):
        answer = invoke("POST", "/events", body)
        assert answer.status == 201
        assert "shards" not in answer.body
        assert store.get_event(body["event_id"]).shards == 1
    assert store.get_event(shard_key("one", 0)) is None


@pytest.mark.parametrize("shards", [0, MAX_SHARDS + 1, "4", 2.0, None, True, -1])
def test_shards_outside_1_to_32_are_refused(invoke: Invoke, store: SignupStore, shards: Any):
    answer = create(invoke, "bad", 10, shards=shards)
    assert answer.status == 400
    assert answer.body == {
        "error": "invalid_request",
        "message": f"shards must be an integer from 1 to {MAX_SHARDS}",
    }
    assert store.get_event("bad") is None


def test_a_sharded_event_keeps_one_waitlist_option_on_its_pool_and_every_shard(
    invoke: Invoke, store: SignupStore
):
    answer = create(invoke, "wl", 10, shards=2, waitlist=5)
    assert answer.status == 201
    assert (answer.body["waitlist"], answer.body["shards"]) == (5, 2)
    for key in ("wl", "wl#00", "wl#01"):
        record = store.get_event(key)
        assert record is not None and record.event.waitlist == 5


# -- submitting and deciding ----------------------------------------------------------------


def test_signups_go_to_their_shards_and_are_read_back_by_the_event_id(
    invoke: Invoke, store: SignupStore, stream: StreamReader
):
    # GIVEN 5 seats over 4 shards, and 12 signups through the API
    assert create(invoke, "drop", 5, shards=4).status == 201
    fans = [f"fan{i}" for i in range(12)]
    submit(invoke, "drop", fans)
    # THEN each intake record is under its shard's key, none under the event's own id
    assert intake_keys(store) == {sid: signup_key("drop", sid, 4) for sid in fans}
    assert len(set(intake_keys(store).values())) > 1
    # and each reads back PENDING by the event's own id
    pending = invoke("GET", "/events/drop/signups/fan3", authorizer=ME)
    assert (pending.status, pending.body["status"], pending.body["event_id"]) == (
        200,
        Status.PENDING,
        "drop",
    )
    # WHEN the stream processor decides them
    decide(stream)
    # THEN exactly 5 were accepted, and every status reads by the event's own id
    got = Counter()
    for sid in fans:
        answer = invoke("GET", f"/events/drop/signups/{sid}", authorizer=ME)
        assert answer.status == 200 and answer.body["event_id"] == "drop"
        assert answer.body["reason"] in (None, "capacity_full"), answer.body
        got[answer.body["status"]] += 1
    assert got == {Status.ACCEPTED: 5, Status.REJECTED: 7}
    waited = invoke("GET", "/events/drop/signups/fan0/decision", query="wait=1", authorizer=ME)
    assert waited.status == 200 and waited.body["status"] in (Status.ACCEPTED, Status.REJECTED)
    assert waited.body["event_id"] == "drop"
    # and the event's view sums its shards
    event = invoke("GET", "/events/drop").body
    assert (event["capacity"], event["taken"], event["remaining"]) == (5, 5, 0)
    assert event["positions_given"] == 5
    assert event["shards"] == 4


def test_the_waiter_finds_a_signup_in_its_shard(invoke: Invoke, stream: StreamReader):
    # GIVEN a decided signup of a sharded event, and a waiter that has not read the event
    assert create(invoke, "wait", 2, shards=4).status == 201
    submit(invoke, "wait", ["w1"])
    decide(stream)
    usecases.forget_known_shards()
    # WHEN the waiting read is served by the waiter function's own app
    event = v2_event("GET", "/events/wait/signups/w1/decision", query="wait=1", authorizer=ME)
    response = api_handler.waiter(event, LocalLambdaContext.api())
    # THEN it reads the decision in the signup's shard, named by the event's own id
    body = json.loads(response["body"])
    assert response["statusCode"] == 200, body
    assert (body["event_id"], body["status"]) == ("wait", Status.ACCEPTED)


def test_status_counts_are_summed_over_the_shards(
    invoke: Invoke, store: SignupStore, stream: StreamReader
):
    # GIVEN holds, so the processor counts statuses; signups in both shards
    assert create(invoke, "cnt", 3, shards=2, hold_seconds=600).status == 201
    zero, one = ids_in(0, 2, 2, "z"), ids_in(1, 2, 2, "o")
    submit(invoke, "cnt", zero + one)
    decide(stream)
    event = invoke("GET", "/events/cnt").body
    # THEN 3 HELD and 1 REJECTED, counted across both shards
    assert event["status_counts"].get(Status.HELD) == 3
    assert event["status_counts"].get(Status.REJECTED) == 1
    assert event["taken"] == 3
    shard_counts = [store.get_event(shard_key("cnt", k)).status_counts or {} for k in (0, 1)]
    assert all(sum(c.values()) > 0 for c in shard_counts)  # both shards decided some


def test_a_resubmission_is_idempotent_and_a_conflict_names_the_event(
    invoke: Invoke, store: SignupStore
):
    assert create(invoke, "idem", 5, shards=3).status == 201
    submit(invoke, "idem", ["ada"])
    # the same body again: 202, still one record
    submit(invoke, "idem", ["ada"])
    assert list(intake_keys(store).items()) == [("ada", signup_key("idem", "ada", 3))]
    # another body: 409, naming the event by its own id
    other = invoke("POST", "/events/idem/signups", {"signup_id": "ada", "seats": 2}, authorizer=ME)
    assert other.status == 409 and other.body["error"] == "signup_conflict"
    assert "of event 'idem'" in other.body["message"] and "#" not in other.body["message"]
    # another caller: 409 too
    theirs = invoke("POST", "/events/idem/signups", {"signup_id": "ada"}, authorizer=OTHER)
    assert theirs.status == 409
    # and another caller cannot read it
    assert invoke("GET", "/events/idem/signups/ada", authorizer=OTHER).status == 404


def test_an_unknown_signup_of_a_sharded_event_is_not_found_by_the_event_id(invoke: Invoke):
    assert create(invoke, "nf", 5, shards=2).status == 201
    answer = invoke("GET", "/events/nf/signups/ghost", authorizer=ME)
    assert answer.status == 404
    assert answer.body["message"] == "no signup 'ghost' for event 'nf'"
    confirm = invoke("POST", "/events/nf/signups/ghost/confirm", authorizer=ME)
    assert confirm.status == 404
    assert confirm.body["message"] == "no signup 'ghost' for event 'nf'"


# -- confirm and cancel -----------------------------------------------------------------


def test_confirm_and_cancel_reach_the_signups_shard(
    invoke: Invoke, store: SignupStore, stream: StreamReader
):
    # GIVEN a sharded event with holds, and a held signup in each shard
    assert create(invoke, "hold", 4, shards=2, hold_seconds=600).status == 201
    (zero,), (one,) = ids_in(0, 2, 1, "k"), ids_in(1, 2, 1, "k")
    submit(invoke, "hold", [zero, one])
    decide(stream)
    for sid in (zero, one):
        held = invoke("GET", f"/events/hold/signups/{sid}", authorizer=ME).body
        assert held["status"] == Status.HELD, held
    # WHEN one is confirmed and the other cancelled, by the event's own id
    confirmed = invoke("POST", f"/events/hold/signups/{zero}/confirm", authorizer=ME)
    assert confirmed.status == 202, confirmed.body
    assert confirmed.body == {"event_id": "hold", "signup_id": zero, "request": "confirm"}
    cancelled = invoke("POST", f"/events/hold/signups/{one}/cancel", authorizer=ME)
    assert cancelled.status == 202, cancelled.body
    assert cancelled.body == {"event_id": "hold", "signup_id": one, "request": "cancel"}
    # THEN each request is on the signup's intake record, under its shard's key
    assert store.get_intake(shard_key("hold", 0), zero)["request"] == "confirm"
    assert store.get_intake(shard_key("hold", 1), one)["request"] == "cancel"
    # and the processor applies them
    decide(stream)
    assert invoke("GET", f"/events/hold/signups/{zero}", authorizer=ME).body["status"] == (
        Status.ACCEPTED
    )
    assert invoke("GET", f"/events/hold/signups/{one}", authorizer=ME).body["status"] == (
        Status.CANCELLED
    )
    # and a request its status refuses is refused naming the event by its own id
    refused = invoke("POST", f"/events/hold/signups/{one}/confirm", authorizer=ME)
    assert refused.status == 409
    assert refused.body["event_id"] == "hold"
    assert refused.body["status"] == Status.CANCELLED
    assert "of event 'hold'" in refused.body["message"]
    event = invoke("GET", "/events/hold").body
    assert event["taken"] == 1 and event["status_counts"].get(Status.ACCEPTED) == 1


# -- listing ----------------------------------------------------------------------------


def test_signups_are_listed_across_the_shards_page_by_page(
    invoke: Invoke, store: SignupStore, stream: StreamReader
):
    # GIVEN 11 signups over 3 shards, 4 seats
    assert create(invoke, "many", 4, shards=3).status == 201
    fans = [f"f{i:02}" for i in range(11)]
    submit(invoke, "many", fans)
    decide(stream)
    late = ["zz1", "zz2"]
    submit(invoke, "many", late)  # pending

    def listed(limit: int, status: str | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        query = f"limit={limit}" + (f"&status={status}" if status else "")
        pages = 0
        while True:
            page = invoke("GET", "/events/many/signups", query=query, authorizer=ME)
            assert page.status == 200, page.body
            rows += page.body["signups"]
            pages += 1
            assert pages < 50
            if page.body["next"] is None:
                return rows
            query = f"limit={limit}&next={page.body['next']}" + (
                f"&status={status}" if status else ""
            )

    for limit in (1, 2, 3, 5, 100):
        rows = listed(limit)
        # THEN every signup once, named by the event's own id, shard by shard
        assert sorted(r["signup_id"] for r in rows) == sorted(fans + late), limit
        assert {r["event_id"] for r in rows} == {"many"}
        order = [(shard_of(r["signup_id"], 3), r["signup_id"]) for r in rows]
        assert order == sorted(order)
    accepted = listed(2, Status.ACCEPTED)
    assert len(accepted) == 4
    assert {r["status"] for r in accepted} == {Status.ACCEPTED}
    pending = listed(1, Status.PENDING)
    assert sorted(r["signup_id"] for r in pending) == late


def test_a_listing_token_of_one_event_is_refused_for_another(invoke: Invoke):
    assert create(invoke, "sa", 4, shards=2).status == 201
    assert create(invoke, "pl", 4).status == 201
    submit(invoke, "sa", [f"a{i}" for i in range(6)])
    token = invoke("GET", "/events/sa/signups", query="limit=1", authorizer=ME).body["next"]
    assert token
    answer = invoke("GET", "/events/pl/signups", query=f"next={token}", authorizer=ME)
    assert answer.status == 400


def test_shards_are_no_events_of_their_own_in_the_list(invoke: Invoke):
    assert create(invoke, "lst", 4, shards=3).status == 201
    assert create(invoke, "flat", 4).status == 201
    answer = invoke("GET", "/events")
    assert answer.status == 200, answer.body
    assert sorted(e["event_id"] for e in answer.body["events"]) == ["flat", "lst"]


# -- organizing -------------------------------------------------------------------------


def test_closing_a_sharded_event_closes_its_shards(
    invoke: Invoke, store: SignupStore, stream: StreamReader
):
    assert create(invoke, "shut", 10, shards=2).status == 201
    closed = invoke("POST", "/events/shut/close", authorizer=ME)
    assert closed.status == 200 and closed.body["closed_now"] is True
    assert closed.body["shards"] == 2
    assert all(store.get_event(shard_key("shut", k)).event.state == "CLOSED" for k in (0, 1))
    # a signup after the close is rejected event_closed, whichever its shard
    submit(invoke, "shut", ["late0", "late1", "late2"])
    decide(stream)
    for sid in ("late0", "late1", "late2"):
        body = invoke("GET", f"/events/shut/signups/{sid}", authorizer=ME).body
        assert (body["status"], body["reason"]) == (Status.REJECTED, "event_closed")


def test_a_sharded_events_capacity_goes_down_to_what_its_shards_were_dealt(
    invoke: Invoke, store: SignupStore, stream: StreamReader
):
    assert create(invoke, "cap", 40, shards=2).status == 201
    submit(invoke, "cap", ["a", "b", "c"])
    decide(stream)
    dealt = store.get_event("cap").dealt
    assert 3 <= dealt < 40
    up = invoke("PATCH", "/events/cap", {"capacity": 50}, authorizer=ME)
    assert up.status == 200, up.body
    # the answer sums the shards: 3 seats taken of 50
    assert (up.body["capacity"], up.body["taken"], up.body["remaining"]) == (50, 3, 47)
    assert up.body["shards"] == 2
    below = invoke("PATCH", "/events/cap", {"capacity": dealt - 1}, authorizer=ME)
    assert below.status == 400 and below.body["error"] == "capacity_below_taken"
    assert "#" not in below.body["message"]
    down = invoke("PATCH", "/events/cap", {"capacity": dealt}, authorizer=ME)
    assert down.status == 200 and down.body["remaining"] == dealt - 3

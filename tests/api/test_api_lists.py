"""Lists (GET /events, GET /events/{id}/signups) and waiting status reads (.../decision), through
the Lambda handler with v2 events, against moto."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.helpers import Invoke, decide_pending, v2_event
from turnstile.handlers import api as api_handler
from turnstile.storage import listing
from turnstile.storage.store import SignupStore
from turnstile_tools.local.context import LocalLambdaContext

NOW = "2026-11-21T21:00:00.000000Z"


class Recording:
    """A DynamoDB client that records (operation, table, arguments) of every call."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(**kwargs: Any) -> Any:
            self.calls.append((name, kwargs.get("TableName", ""), kwargs))
            return attr(**kwargs)

        return call


@pytest.fixture
def recorded(store: SignupStore, monkeypatch: pytest.MonkeyPatch) -> Recording:
    """The handler's own store, its client recording every call."""
    handler_store = api_handler.get_store()
    recording = Recording(handler_store.client)
    monkeypatch.setattr(handler_store.dynamo, "client", recording)
    return recording


@pytest.fixture
def gig(invoke: Invoke, store: SignupStore) -> str:
    """Capacity 2: u1, u2 accepted; u3, u4, u5 rejected; u0 and u6 pending."""
    assert invoke("POST", "/events", {"event_id": "gig", "capacity": 2}).status == 201
    for n in range(1, 6):
        assert invoke("POST", "/events/gig/signups", {"signup_id": f"u{n}"}).status == 202
        time.sleep(0.002)  # decide_pending orders by submitted_at
    decide_pending(store, "gig")
    for signup in ("u6", "u0"):
        assert invoke("POST", "/events/gig/signups", {"signup_id": signup}).status == 202
    return "gig"


def ids(page: dict[str, Any]) -> list[str]:
    return [s["signup_id"] for s in page["signups"]]


def all_pages(invoke: Invoke, path: str, query: str = "") -> Iterator[dict[str, Any]]:
    token = None
    while True:
        parts = [q for q in (query, f"next={token}" if token else "") if q]
        answer = invoke("GET", path, query="&".join(parts))
        assert answer.status == 200, answer.body
        yield answer.body
        token = answer.body["next"]
        if token is None:
            return


# -- signups --------------------------------------------------------------------------


def test_signups_come_in_signup_id_order_page_by_page(invoke: Invoke, gig: str):
    pages = list(all_pages(invoke, f"/events/{gig}/signups", "limit=3"))
    assert [ids(p) for p in pages] == [["u0", "u1", "u2"], ["u3", "u4", "u5"], ["u6"]]
    # each one exactly what GET /events/{id}/signups/{id} answers
    for signup in (s for page in pages for s in page["signups"]):
        assert invoke("GET", f"/events/{gig}/signups/{signup['signup_id']}").body == signup


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("ACCEPTED", ["u1", "u2"]),
        ("REJECTED", ["u3", "u4", "u5"]),
        ("PENDING", ["u0", "u6"]),
    ],
)
def test_signups_by_status(invoke: Invoke, gig: str, status: str, expected: list[str]):
    answer = invoke("GET", f"/events/{gig}/signups", query=f"status={status}")
    assert answer.status == 200
    assert (ids(answer.body), answer.body["next"]) == (expected, None)
    assert {s["status"] for s in answer.body["signups"]} == {status}
    # one at a time, the same
    pages = list(all_pages(invoke, f"/events/{gig}/signups", f"status={status}&limit=1"))
    assert [sid for page in pages for sid in ids(page)] == expected


def test_a_decided_signup_whose_intake_record_expired_is_still_listed(
    invoke: Invoke, gig: str, store: SignupStore
):
    # GIVEN TTL deleted u1's intake record (its decision stays)
    store.client.delete_item(
        TableName=store.intake_table, Key={"event_id": {"S": gig}, "signup_id": {"S": "u1"}}
    )
    # THEN it is listed from its decision
    assert "u1" in ids(invoke("GET", f"/events/{gig}/signups").body)
    assert ids(invoke("GET", f"/events/{gig}/signups", query="status=ACCEPTED").body) == [
        "u1",
        "u2",
    ]


def test_decided_signups_are_a_query_of_main_only(invoke: Invoke, gig: str, recorded: Recording):
    # WHEN accepted signups are listed
    assert invoke("GET", f"/events/{gig}/signups", query="status=ACCEPTED").status == 200
    # THEN one partition of main was queried, strongly consistent; nothing scanned
    reads = [(op, table) for op, table, _ in recorded.calls if op != "get_item"]
    assert reads == [("query", "turnstile-main")]
    _, _, query = next(c for c in recorded.calls if c[0] == "query")
    assert query["ExpressionAttributeValues"][":pk"] == {"S": gig}
    assert query["ConsistentRead"] is True


def test_pending_and_all_signups_query_both_partitions(
    invoke: Invoke, gig: str, recorded: Recording
):
    for query in ("status=PENDING", ""):
        recorded.calls.clear()
        assert invoke("GET", f"/events/{gig}/signups", query=query).status == 200
        reads = {(op, table) for op, table, _ in recorded.calls if op != "get_item"}
        assert reads == {("query", "turnstile-main"), ("query", "turnstile-intake")}


def test_a_page_ends_early_past_what_it_may_read(
    invoke: Invoke, gig: str, monkeypatch: pytest.MonkeyPatch
):
    # GIVEN a page may read 2 signups: the pending ones are far apart (u0 ... u6)
    monkeypatch.setattr(listing, "MAX_EXAMINED", 2)
    pages = list(all_pages(invoke, f"/events/{gig}/signups", "status=PENDING&limit=10"))
    # THEN pages come short (even empty) with a token, and together have them all
    assert len(pages) > 2
    assert any(not page["signups"] and page["next"] for page in pages)
    assert [sid for page in pages for sid in ids(page)] == ["u0", "u6"]


def test_signups_of_an_unknown_event_answer_404(invoke: Invoke):
    answer = invoke("GET", "/events/nope/signups")
    assert (answer.status, answer.body["error"]) == (404, "event_not_found")


@pytest.mark.parametrize(
    "query",
    [
        "status=accepted",
        "status=DECIDED",
        "status=",
        "status=PENDING&status=ACCEPTED",
        "limit=0",
        "limit=101",
        "limit=-1",
        "limit=1.5",
        "limit=ten",
        "limit=",
    ],
)
def test_bad_list_parameters_answer_400(invoke: Invoke, gig: str, query: str):
    answer = invoke("GET", f"/events/{gig}/signups", query=query)
    assert (answer.status, answer.body["error"]) == (400, "invalid_request")
    assert ("status" in answer.body["message"]) == query.startswith("status")


def _flip(token: str, at: int) -> str:
    replacement = "A" if token[at] != "A" else "B"
    return token[:at] + replacement + token[at + 1 :]


def _unchecked(payload: dict[str, Any]) -> str:
    """A token of the right shape whose check value was not computed from it."""
    data = json.dumps(payload).encode() + b"\0" * 8
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def test_a_tampered_or_foreign_token_answers_400(invoke: Invoke, gig: str):
    first = invoke("GET", f"/events/{gig}/signups", query="status=REJECTED&limit=1").body
    token = first["next"]
    assert (
        invoke("GET", f"/events/{gig}/signups", query=f"status=REJECTED&next={token}").status == 200
    )
    assert invoke("POST", "/events", {"event_id": "other", "capacity": 1}).status == 201
    events_token = invoke("GET", "/events", query="limit=1").body["next"]
    refused = [
        (gig, f"status=REJECTED&next={_flip(token, 5)}"),  # a character changed
        (gig, f"status=REJECTED&next={_flip(token, len(token) - 1)}"),  # the check value
        (gig, f"status=REJECTED&next={token[:-3]}"),  # cut short
        (gig, f"status=REJECTED&next={token}!"),  # another spelling
        (gig, f"status=ACCEPTED&next={token}"),  # another status's listing
        (gig, f"next={token}"),  # the unfiltered listing
        ("other", f"status=REJECTED&next={token}"),  # another event's
        (gig, f"next={events_token}"),  # a page of events
        (gig, "next=" + _unchecked({"v": 1, "k": "signups", "e": gig, "s": None, "a": "u3"})),
        (gig, "next=%00%FF"),
    ]
    for event_id, query in refused:
        answer = invoke("GET", f"/events/{event_id}/signups", query=query)
        assert (answer.status, answer.body["error"]) == (400, "invalid_request"), query
        assert answer.body["message"].startswith("next is not a token this listing gave out")


# -- events ---------------------------------------------------------------------------


def test_events_come_page_by_page_each_once(invoke: Invoke, store: SignupStore):
    for n in range(5):
        assert invoke("POST", "/events", {"event_id": f"e{n}", "capacity": n}).status == 201
    # and items of the control table that are not events: a parking marker, the lease
    for pk, sk in (("PARK#e1", "PARKED"), ("SWEEPER", "LEASE"), ("SWEEP-RUN", "r1#000001")):
        store.client.put_item(
            TableName=store.control_table, Item={"pk": {"S": pk}, "sk": {"S": sk}}
        )
    pages = list(all_pages(invoke, "/events", "limit=2"))
    listed = [event for page in pages for event in page["events"]]
    assert sorted(e["event_id"] for e in listed) == [f"e{n}" for n in range(5)]
    assert all(len(page["events"]) <= 2 for page in pages)
    for event in listed:
        assert invoke("GET", f"/events/{event['event_id']}").body == event


def test_events_are_a_projected_scan_of_control(
    invoke: Invoke, store: SignupStore, recorded: Recording
):
    assert invoke("POST", "/events", {"event_id": "e1", "capacity": 1}).status == 201
    recorded.calls.clear()
    assert invoke("GET", "/events").status == 200
    ((op, table, kwargs),) = recorded.calls
    assert (op, table) == ("scan", "turnstile-control")
    assert kwargs["Select"] == "SPECIFIC_ATTRIBUTES"
    names = set(kwargs["ExpressionAttributeNames"].values())
    assert "journal" not in names and "attributes" not in names


def test_no_events_is_an_empty_last_page(invoke: Invoke):
    answer = invoke("GET", "/events")
    assert (answer.status, answer.body) == (200, {"events": [], "next": None})


def test_a_signups_token_is_no_events_token(invoke: Invoke, gig: str):
    token = invoke("GET", f"/events/{gig}/signups", query="limit=1").body["next"]
    answer = invoke("GET", "/events", query=f"next={token}")
    assert (answer.status, answer.body["error"]) == (400, "invalid_request")


# -- waiting status reads ----------------------------------------------------------------


@pytest.mark.parametrize(
    "wait", ["0", "-1", "10.001", "21", "x", "nan", "inf", "1e9", "", "1,2", "0x10", "1_0"]
)
def test_a_wait_outside_0_to_10_seconds_answers_400(invoke: Invoke, wait: str):
    # even for a signup that does not exist: the request is refused as such
    answer = invoke("GET", "/events/nope/signups/ghost/decision", query=f"wait={wait}")
    assert (answer.status, answer.body["error"]) == (400, "invalid_request")
    assert "wait must be" in answer.body["message"]


@pytest.mark.parametrize("wait", ["5", "0", "x"])
def test_the_status_route_does_not_wait_and_names_the_one_that_does(
    invoke: Invoke, gig: str, wait: str
):
    # A wait there would hold an instance of the API function: refused, and nothing read.
    answer = invoke("GET", f"/events/{gig}/signups/u6", query=f"wait={wait}")
    assert (answer.status, answer.body["error"]) == (400, "invalid_request")
    assert "/events/{event_id}/signups/{signup_id}/decision?wait=" in answer.body["message"]


def test_the_waiter_serves_the_waiting_read_and_nothing_else(gig: str):
    # The waiter function's app (its own function, with read-only grants) answers the
    # waiting read, and 404 to anything else, writes included.
    def call(method: str, path: str, body: Any = None, query: str = "") -> tuple[int, Any]:
        event = v2_event(method, path, body, query=query)
        response = api_handler.waiter(event, LocalLambdaContext.api())
        return response["statusCode"], json.loads(response["body"])

    status, body = call("GET", f"/events/{gig}/signups/u1/decision", query="wait=1")
    assert (status, body["status"]) == (200, "ACCEPTED")
    for method, path, body in (
        ("GET", f"/events/{gig}/signups/u1", None),
        ("POST", f"/events/{gig}/signups", {"signup_id": "sneak"}),
        ("POST", f"/events/{gig}/close", None),
        ("GET", "/events", None),
    ):
        assert call(method, path, body)[0] == 404, (method, path)
    assert call("POST", f"/events/{gig}/signups/u1/decision")[0] == 405


def test_waiting_for_an_unknown_signup_answers_404_at_once(invoke: Invoke, gig: str):
    started = time.monotonic()
    answer = invoke("GET", f"/events/{gig}/signups/ghost/decision", query="wait=5")
    assert answer.status == 404
    assert time.monotonic() - started < 2


def test_waiting_for_a_decided_signup_answers_at_once(invoke: Invoke, gig: str):
    started = time.monotonic()
    answer = invoke("GET", f"/events/{gig}/signups/u1/decision", query="wait=5")
    assert (answer.status, answer.body["status"]) == (200, "ACCEPTED")
    assert time.monotonic() - started < 2


def test_a_wait_answers_as_soon_as_the_signup_is_decided(
    invoke: Invoke, gig: str, store: SignupStore
):
    # GIVEN pending signups that the processor decides 0.5 s from now
    decider = threading.Timer(0.5, decide_pending, args=(store, gig))
    started = time.monotonic()
    decider.start()
    try:
        # WHEN a client waits up to 10 s
        answer = invoke("GET", f"/events/{gig}/signups/u6/decision", query="wait=10")
    finally:
        decider.join()
    # THEN it gets the decision soon after it is made, not at the end of the wait
    elapsed = time.monotonic() - started
    assert (answer.status, answer.body["status"]) == (200, "REJECTED")
    assert answer.body == invoke("GET", f"/events/{gig}/signups/u6").body
    assert 0.5 <= elapsed < 3


def test_a_wait_ends_pending_after_its_seconds(invoke: Invoke, gig: str):
    started = time.monotonic()
    answer = invoke("GET", f"/events/{gig}/signups/u6/decision", query="wait=0.6")
    elapsed = time.monotonic() - started
    assert (answer.status, answer.body["status"]) == (200, "PENDING")
    assert answer.body == invoke("GET", f"/events/{gig}/signups/u6").body
    assert 0.6 <= elapsed < 2


@pytest.mark.parametrize("query", ["wait=10", ""])
def test_a_wait_ends_before_the_invocation_would_time_out(gig: str, query: str):
    # GIVEN an invocation with 2.8 s left, and a wait of 10 s asked for (or the default)
    context = LocalLambdaContext.api(timeout_s=2.8)
    started = time.monotonic()
    response = api_handler.waiter(
        v2_event("GET", f"/events/{gig}/signups/u6/decision", query=query), context
    )
    # THEN it answers (PENDING) with the margin to spare, not a timeout
    elapsed = time.monotonic() - started
    assert response["statusCode"] == 200
    assert json.loads(response["body"])["status"] == "PENDING"
    assert 0.5 <= elapsed < 2.0


@pytest.mark.parametrize(
    "key",
    [
        ["EVENT#e1", "\U0001f600" * 300],  # 1,200 bytes: longer than a sort key may be
        ["", "EVENT"],
        ["EVENT#e1"],
        ["EVENT#e1", 7],
        ["EVENT#e1", "\ud800"],
        "EVENT#e1",
    ],
    ids=["too long", "empty", "one part", "a number", "lone surrogate", "a string"],
)
def test_a_made_up_events_token_is_refused_not_a_500(invoke: Invoke, key: Any):
    # A token with a right check value (the code is public): what it names is checked too,
    # or DynamoDB would refuse the start key and the API answer 500.
    token = listing.encode_token({"k": "events", "a": key})
    answer = invoke("GET", "/events", query=f"next={token}")
    assert (answer.status, answer.body["error"]) == (400, "invalid_request")


def test_a_made_up_token_reaches_nothing_a_listing_would_not(invoke: Invoke, store: SignupStore):
    # GIVEN a token naming a key of the sweeper's: the page goes on from there, and still
    # shows events only
    assert invoke("POST", "/events", {"event_id": "e1", "capacity": 1}).status == 201
    token = listing.encode_token({"k": "events", "a": ["SWEEPER", "LEASE"]})
    answer = invoke("GET", "/events", query=f"next={token}")
    assert answer.status == 200
    assert all(set(e) >= {"event_id", "capacity", "state"} for e in answer.body["events"])

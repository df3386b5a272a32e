"""The sweeper and requests (docs/lifecycle.md §10): a decided intake record is answered
only when its decision item's ``request_count`` (absent: 0) reaches the record's own.
Until then it keeps its ``undecided`` marker and, once old enough, is re-emitted like any
undecided record; whatever a producer writes in ``request_count`` (a string, a negative, a
huge number) never keeps a record marked that the processor could not answer."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.helpers import put_raw_intake, table_items
from turnstile.base.contract import INTAKE_TABLE, MAIN_TABLE, Attr
from turnstile.jobs.sweeper import Sweeper
from turnstile.storage.ledger import Ledger
from turnstile.storage.store import SignupStore

#: Every test here runs on both ways a run finds records: the index and the full scan.
pytestmark = pytest.mark.usefixtures("sweep_path")

OLD = {"submitted_at": {"S": "2020-01-01T00:00:00Z"}}
T0 = 1_800_000_000.0


def signup(
    client: Any,
    signup_id: str,
    *,
    requests: dict[str, Any] | None = None,
    answered: dict[str, Any] | None = None,
    decided: bool = True,
    **intake: Any,
) -> None:
    """A marked intake record (old unless told) with ``request_count`` = ``requests``, and
    its decision item with ``request_count`` = ``answered`` (typed values; None: absent)."""
    attrs = {**OLD, **intake}
    if requests is not None:
        attrs[Attr.REQUEST_COUNT] = requests
    put_raw_intake(client, "gig", signup_id, marked=True, **attrs)
    if decided:
        item = {
            "event_id": {"S": "gig"},
            "signup_id": {"S": signup_id},
            "status": {"S": "HELD"},
            "seats": {"N": "1"},
        }
        if answered is not None:
            item[Attr.REQUEST_COUNT] = answered
        client.put_item(TableName=MAIN_TABLE.name, Item=item)


def intake(client: Any) -> dict[str, dict[str, Any]]:
    return {sid: item for (_, sid), item in table_items(client, INTAKE_TABLE.name).items()}


def re_emitted(client: Any) -> set[str]:
    return {sid for sid, item in intake(client).items() if "redrive" in item}


def marked(client: Any) -> set[str]:
    return {sid for sid, item in intake(client).items() if Attr.UNDECIDED in item}


def sweep(store: SignupStore, now: float = T0, run: str = "r1"):
    return Sweeper(store, min_age_s=300, clock=lambda: now).sweep(run)


def test_a_request_not_answered_is_undecided_and_re_emitted(store, client):
    store.create_event("gig", 5, "2020-01-01T00:00:00Z")
    signup(client, "asked", requests={"N": "1"})  # answered: absent, 0
    signup(client, "asked-twice", requests={"N": "2"}, answered={"N": "1"})
    signup(client, "answered", requests={"N": "2"}, answered={"N": "2"})
    signup(client, "never-asked")
    # WHEN the sweeper runs
    result = sweep(store)
    # THEN the records whose request is unanswered were re-emitted and keep their marker
    assert re_emitted(client) == {"asked", "asked-twice"}
    assert marked(client) == {"asked", "asked-twice"}
    assert (result.undecided, result.unanswered, result.re_emitted) == (2, 2, 2)
    # ... the answered ones lost theirs
    assert result.unmarked == 2


def test_once_answered_the_marker_goes_and_nothing_more_is_re_emitted(store, client):
    signup(client, "asked", requests={"N": "1"})
    assert sweep(store).unanswered == 1
    # GIVEN the processor answered it (its decision's request_count reached the record's)
    client.update_item(
        TableName=MAIN_TABLE.name,
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "asked"}},
        UpdateExpression="SET request_count = :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    # WHEN the sweeper runs again, once the re-emission is old enough
    result = sweep(store, T0 + 301, "r2")
    # THEN it unmarked it and re-emitted nothing
    assert (result.undecided, result.unanswered, result.unmarked) == (0, 0, 1)
    assert marked(client) == set()
    assert intake(client)["asked"]["redrive"] == {"N": "1"}


@pytest.mark.parametrize(
    ("requests", "answered", "unanswered"),
    [
        ({"S": "9"}, None, False),  # a string: no request the processor can answer
        ({"N": "-3"}, None, False),  # a negative: at or below 0
        ({"B": b"\x01"}, None, False),
        ({"M": {"n": {"N": "5"}}}, None, False),
        ({"NS": ["1", "2"]}, None, False),
        ({"N": "1" + "0" * 37}, None, True),  # a huge count, not answered ...
        ({"N": "1" + "0" * 37}, {"N": "1" + "0" * 37}, False),  # ... and answered
        ({"N": "1"}, {"S": "junk"}, True),  # a decision's count that is no number: 0
    ],
)
def test_what_a_producer_writes_in_request_count(store, client, requests, answered, unanswered):
    signup(client, "x", requests=requests, answered=answered)
    result = sweep(store)
    assert result.unanswered == int(unanswered)
    assert re_emitted(client) == ({"x"} if unanswered else set())
    assert marked(client) == ({"x"} if unanswered else set())


def test_an_unanswered_request_waits_for_the_age_rules(store, client):
    # A record submitted a moment ago, and one the sweeper re-emitted a moment ago.
    signup(client, "young", requests={"N": "1"}, submitted_at={"S": "2027-01-15T08:00:00Z"})
    signup(client, "re-emitted", requests={"N": "1"}, redriven_at={"N": str(T0 - 10)})
    result = sweep(store, T0)
    assert (result.undecided, result.unanswered) == (0, 0)
    assert re_emitted(client) == set()
    assert marked(client) == {"young", "re-emitted"}


def test_an_undecided_record_with_a_request_is_re_emitted_once(store, client):
    signup(client, "fresh", requests={"N": "1"}, decided=False)
    result = sweep(store)
    assert (result.undecided, result.unanswered, result.re_emitted) == (1, 0, 1)
    assert intake(client)["fresh"]["redrive"] == {"N": "1"}


def test_removing_a_marker_is_conditioned_on_the_record_s_requests(store, client):
    """The condition, not the sweeper's read, decides: a request made after the read keeps
    the marker, and the record comes back as unanswered."""
    ledger = Ledger.beside(store)
    for signup_id, requests in (("a", "2"), ("b", "1"), ("c", None)):
        signup(client, signup_id, requests={"N": requests} if requests else None)
    unanswered: list[tuple[str, str]] = []
    answered = {("gig", "a"): Decimal(1), ("gig", "b"): Decimal(1), ("gig", "c"): Decimal(0)}
    answered[("gig", "gone")] = Decimal(0)
    assert ledger.clear_undecided(answered, unanswered=unanswered) == 2
    # ... "gone" too: a record that is gone fails the condition (its re-emission, a no-op)
    assert sorted(unanswered) == [("gig", "a"), ("gig", "gone")]
    assert marked(client) == {"a"}
    assert ("gig", "gone") not in table_items(client, INTAKE_TABLE.name)


def test_a_request_made_without_the_marker_is_found_by_the_full_scan(store, client, sweep_path):
    # A producer asked without setting the marker (the contract's update sets it).
    signup(client, "asked", requests={"N": "1"})
    client.update_item(
        TableName=INTAKE_TABLE.name,
        Key={"event_id": {"S": "gig"}, "signup_id": {"S": "asked"}},
        UpdateExpression="REMOVE undecided",
    )
    result = sweep(store)
    # The backstop reads it whole and re-emits it (which marks it); the index cannot see it.
    found = sweep_path == "full-scan"
    assert (result.undecided, result.unanswered) == (int(found), int(found))
    assert re_emitted(client) == marked(client) == ({"asked"} if found else set())

"""Releasing due holds (``turnstile.due_holds``): the control table's sparse ``due-holds``
index finds the events whose earliest hold has lapsed, and the holding signup's intake
record is re-emitted (a MODIFY the processor passes as a tick), once per event."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.helpers import put_raw_intake, table_items
from turnstile.contract import (
    CONTROL_TABLE,
    DUE_HOLDS_INDEX,
    DUE_HOLDS_SHARD,
    INTAKE_TABLE,
    STREAM_SOURCE,
    Attr,
    undecided_shard,
)
from turnstile.due_holds import due_events, release_due_holds
from turnstile.local.poller import matches_filter
from turnstile.personal_data import signup_ref
from turnstile.store import SignupStore

NOW_MS = 1_800_000_000_000
SUBMITTED = {"submitted_at": {"S": "2026-01-01T00:00:00Z"}}


@pytest.fixture
def client(aws):
    return aws.client("dynamodb")


@pytest.fixture
def store(client):
    return SignupStore(client, sleep=lambda _: None)


def put_event(
    client: Any,
    event_id: str,
    due_at: int | None,
    signup_id: Any = "holder",
    shard: str = DUE_HOLDS_SHARD,
    pk: str | None = None,
) -> None:
    """An event item as the processor leaves it: holding seats (``hold_due_*``) or not."""
    item: dict[str, Any] = {
        "pk": {"S": pk or f"EVENT#{event_id}"},
        "sk": {"S": "EVENT"},
        "event_id": {"S": event_id},
        "capacity": {"N": "5"},
        "state": {"S": "OPEN"},
        "version": {"N": "3"},
    }
    if due_at is not None:
        item[Attr.HOLD_DUE_AT] = {"N": str(due_at)}
        item[Attr.HOLD_DUE_SHARD] = {"S": shard}
        item[Attr.HOLD_DUE_SIGNUP] = signup_id if isinstance(signup_id, dict) else {"S": signup_id}
    client.put_item(TableName=CONTROL_TABLE.name, Item=item)


def re_emits(client: Any) -> dict[tuple[str, str], int]:
    """Each intake record's ``redrive`` counter (0 when never re-emitted)."""
    return {
        key: int(item["redrive"].get("N", 0)) if "redrive" in item else 0
        for key, item in table_items(client, INTAKE_TABLE.name).items()
    }


def test_the_control_table_has_the_sparse_due_holds_index():
    (index,) = CONTROL_TABLE.create_table_kwargs()["GlobalSecondaryIndexes"]
    assert index == {
        "IndexName": "due-holds",
        "KeySchema": [
            {"AttributeName": "hold_due_shard", "KeyType": "HASH"},
            {"AttributeName": "hold_due_at", "KeyType": "RANGE"},
        ],
        "Projection": {
            "ProjectionType": "INCLUDE",
            "NonKeyAttributes": ["event_id", "hold_due_signup"],
        },
    }
    definitions = CONTROL_TABLE.create_table_kwargs()["AttributeDefinitions"]
    assert {"AttributeName": "hold_due_at", "AttributeType": "N"} in definitions
    assert {"AttributeName": "hold_due_shard", "AttributeType": "S"} in definitions
    assert DUE_HOLDS_INDEX.name == "due-holds"


def test_only_events_due_by_now_are_found_earliest_first(store, client):
    put_event(client, "late", NOW_MS - 5)
    put_event(client, "later", NOW_MS - 1)
    put_event(client, "exactly-now", NOW_MS)  # due: a hold lapses at hold_expires_at
    put_event(client, "future", NOW_MS + 1)
    put_event(client, "no-holds", None)
    found = [e["event_id"] for e in due_events(store, NOW_MS)]
    assert found == ["late", "later", "exactly-now"]


def test_the_holding_signup_of_each_due_event_is_re_emitted_and_passes_the_filter(
    store, client, stream
):
    for event_id in ("due", "future", "no-holds"):
        put_raw_intake(client, event_id, "holder", **SUBMITTED)
        put_raw_intake(client, event_id, "other", **SUBMITTED)
    put_event(client, "due", NOW_MS - 1000)
    put_event(client, "future", NOW_MS + 1000)
    put_event(client, "no-holds", None)
    stream.read_new()
    # WHEN due holds are released
    assert release_due_holds(store, NOW_MS) == 1
    # THEN only the due event's holding signup was bumped, and marked
    counts = re_emits(client)
    assert {k for k, n in counts.items() if n} == {("due", "holder")}
    intake = table_items(client, INTAKE_TABLE.name)
    assert intake[("due", "holder")][Attr.UNDECIDED] == {"S": undecided_shard("due", "holder")}
    # ... a MODIFY on the stream that the event source lets through
    (record,) = stream.read_new()
    assert record["eventName"] == "MODIFY"
    assert record["dynamodb"]["NewImage"]["redrive"] == {"N": "1"}
    assert any(matches_filter(p, record) for p in STREAM_SOURCE.filter_patterns)
    # ... and once more per period while it stays due (each is one tick)
    assert release_due_holds(store, NOW_MS + 1000) == 2
    assert re_emits(client)[("due", "holder")] == 2
    assert re_emits(client)[("future", "holder")] == 1


def test_a_signup_id_that_is_not_an_id_is_never_re_emitted(store, client, caplog):
    # GIVEN intake records a producer wrote under keys that are not ids ...
    bad_ids = ["has space", "-dash-first", "x" * 129, "ümlaut"]
    for n, bad in enumerate(bad_ids):
        put_raw_intake(client, f"ev{n}", bad, **SUBMITTED)
        put_event(client, f"ev{n}", NOW_MS - 10, signup_id=bad)
    # ... an entry whose signup is not a string, one whose event item claims another event
    put_event(client, "num", NOW_MS - 10, signup_id={"N": "7"})
    put_raw_intake(client, "victim", "holder", **SUBMITTED)
    put_event(client, "victim", NOW_MS - 10, pk="EVENT#elsewhere")
    # ... and one good entry among them
    put_raw_intake(client, "good", "holder", **SUBMITTED)
    put_event(client, "good", NOW_MS - 10)
    # WHEN due holds are released
    with caplog.at_level(logging.WARNING, logger="turnstile.due_holds"):
        assert release_due_holds(store, NOW_MS) == 1
    # THEN only the good one was re-emitted, and each skip said so in one line
    assert {k for k, n in re_emits(client).items() if n} == {("good", "holder")}
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == len(bad_ids) + 2
    assert all("due hold skipped" in m and "\n" not in m for m in skipped)


def test_a_gone_record_or_a_junk_counter_is_skipped_and_the_rest_go_on(store, client, caplog):
    # GIVEN a due event whose holding signup's intake record is gone (TTL, a producer) ...
    put_event(client, "a-gone", NOW_MS - 30)
    # ... one whose producer wrote its re-emissions' counter as a string (ADD refuses it)
    put_raw_intake(client, "b-junk", "holder", redrive={"S": "x"}, **SUBMITTED)
    put_event(client, "b-junk", NOW_MS - 20)
    # ... and a sound one, due last
    put_raw_intake(client, "c-good", "holder", **SUBMITTED)
    put_event(client, "c-good", NOW_MS - 10)
    # WHEN due holds are released
    with caplog.at_level(logging.WARNING, logger="turnstile.due_holds"):
        assert release_due_holds(store, NOW_MS) == 1
    # THEN the gone record was not created by the update, the sound one was re-emitted
    intake = table_items(client, INTAKE_TABLE.name)
    assert ("a-gone", "holder") not in intake
    assert re_emits(client)[("c-good", "holder")] == 1
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    # ... each skip said so, naming the signup by its reference, never by its id
    assert f"a-gone ({signup_ref('a-gone', 'holder')})" in messages[0] and "gone" in messages[0]
    assert f"b-junk ({signup_ref('b-junk', 'holder')})" in messages[1]
    assert not any("holder" in m for m in messages)


def test_limit_bounds_the_re_emissions(store, client):
    for event_id in ("a", "b", "c"):
        put_raw_intake(client, event_id, "holder", **SUBMITTED)
        put_event(client, event_id, NOW_MS - 1)
    assert release_due_holds(store, NOW_MS, limit=2) == 2
    assert sum(re_emits(client).values()) == 2


def test_pages_of_the_index_are_all_read(store, client, monkeypatch):
    for n in range(5):
        put_raw_intake(client, f"e{n}", "holder", **SUBMITTED)
        put_event(client, f"e{n}", NOW_MS - n)
    pages: list[int] = []
    query = client.query

    def two_at_a_time(**kwargs: Any) -> dict[str, Any]:
        page = query(**kwargs, Limit=2)
        pages.append(len(page["Items"]))
        return page

    monkeypatch.setattr(client, "query", two_at_a_time)
    assert release_due_holds(store, NOW_MS) == 5
    assert len(pages) >= 3


def test_the_local_stack_adds_the_index_to_a_control_table_made_without_it(aws):
    """A state directory from before the index: ``ensure_resources`` adds it (with its
    numeric sort key), and the due event is found through it."""
    from dataclasses import replace

    from turnstile.local.stack import _ensure_table

    client = aws.client("dynamodb")
    client.delete_table(TableName=CONTROL_TABLE.name)
    client.create_table(**replace(CONTROL_TABLE, indexes=()).create_table_kwargs())
    _ensure_table(client, CONTROL_TABLE)
    table = client.describe_table(TableName=CONTROL_TABLE.name)["Table"]
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["due-holds"]
    assert {"AttributeName": "hold_due_at", "AttributeType": "N"} in table["AttributeDefinitions"]
    put_event(client, "due", NOW_MS - 1)
    store = SignupStore(client, sleep=lambda _: None)
    assert [e["event_id"] for e in due_events(store, NOW_MS)] == ["due"]


def test_the_handler_releases_what_is_due_by_its_clock(client, monkeypatch):
    from turnstile.handlers import due_holds as handler_module
    from turnstile.local.context import LocalLambdaContext

    put_raw_intake(client, "due", "holder", **SUBMITTED)
    put_event(client, "due", NOW_MS - 1)
    put_raw_intake(client, "later", "holder", **SUBMITTED)
    put_event(client, "later", NOW_MS + 60_000)
    monkeypatch.setattr(handler_module.time, "time", lambda: NOW_MS / 1000)
    answer = handler_module.handler({}, LocalLambdaContext())
    assert answer == {"re_emitted": 1, "now_ms": NOW_MS}
    assert {k for k, n in re_emits(client).items() if n} == {("due", "holder")}

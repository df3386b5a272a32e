"""Releasing due holds (``turnstile.jobs.due_holds``): the control table's sparse ``due-holds``
index finds the events whose earliest hold has lapsed, and the parked events whose release
is due; each is woken once, by a write of its own wake-up item (turnstile's, in the control
table), whose record on the control table's stream the processor takes as a step."""

from __future__ import annotations

import logging
from typing import Any

from tests.helpers import put_raw_intake, table_items
from turnstile.base.contract import (
    CONTROL_TABLE,
    DUE_HOLDS_INDEX,
    DUE_HOLDS_SHARD,
    INTAKE_TABLE,
    WAKE_SOURCE,
    Attr,
    WakeAttr,
    WakeReason,
)
from turnstile.jobs.due_holds import due_events, release_due_holds
from turnstile.storage.store import SignupStore
from turnstile_tools.local.poller import matches_filter

NOW_MS = 1_800_000_000_000
SUBMITTED = {"submitted_at": {"S": "2026-01-01T00:00:00Z"}}


def put_event(
    client: Any,
    event_id: str,
    due_at: int | None,
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
        item[Attr.HOLD_DUE_SIGNUP] = {"S": "holder"}
    client.put_item(TableName=CONTROL_TABLE.name, Item=item)


def woken(client: Any) -> dict[str, tuple[int, str]]:
    """Each wake-up item's event: how many wake-ups, and the last one's reason."""
    return {
        pk.removeprefix("WAKE#"): (int(item[WakeAttr.WAKES]["N"]), item[WakeAttr.REASON]["S"])
        for (pk, _), item in table_items(client, CONTROL_TABLE.name).items()
        if pk.startswith("WAKE#")
    }


def test_the_control_table_has_the_sparse_due_holds_index_and_a_keys_only_stream():
    kwargs = CONTROL_TABLE.create_table_kwargs()
    (index,) = kwargs["GlobalSecondaryIndexes"]
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
    assert {"AttributeName": "hold_due_at", "AttributeType": "N"} in kwargs["AttributeDefinitions"]
    assert DUE_HOLDS_INDEX.name == "due-holds"
    # an event item is never streamed whole: the wake-ups need only their keys
    assert kwargs["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"}


def test_only_events_due_by_now_are_found_earliest_first(store, client):
    put_event(client, "late", NOW_MS - 5)
    put_event(client, "later", NOW_MS - 1)
    put_event(client, "exactly-now", NOW_MS)  # due: a hold lapses at hold_expires_at
    put_event(client, "future", NOW_MS + 1)
    put_event(client, "no-holds", None)
    found = [e["event_id"] for e in due_events(store, NOW_MS)]
    assert found == ["late", "later", "exactly-now"]


def test_each_due_event_is_woken_through_its_own_item_and_the_wake_passes_the_filter(
    store, client, stream, wakes
):
    for event_id in ("due", "future", "no-holds"):
        put_raw_intake(client, event_id, "holder", **SUBMITTED)
    put_event(client, "due", NOW_MS - 1000)
    put_event(client, "future", NOW_MS + 1000)
    put_event(client, "no-holds", None)
    stream.read_new()
    wakes.read_new()
    # WHEN due holds are released
    assert release_due_holds(store, NOW_MS) == 1
    # THEN the due event was woken, and no intake record was touched
    assert woken(client) == {"due": (1, WakeReason.HOLD_DUE)}
    assert stream.read_new() == []
    # ... by a record of the control table's stream that the wake-ups' mapping lets through
    # (moto streams an upsert twice; DynamoDB once)
    records = wakes.read_new()
    assert records
    for record in records:
        assert record["dynamodb"]["Keys"] == {"pk": {"S": "WAKE#due"}, "sk": {"S": "WAKE"}}
        assert any(matches_filter(p, record) for p in WAKE_SOURCE.filter_patterns)
    # ... and once more per period while it stays due (each is one tick)
    assert release_due_holds(store, NOW_MS + 1000) == 2
    assert woken(client) == {"due": (2, "hold_due"), "future": (1, "hold_due")}


def test_a_commit_or_a_parked_record_never_passes_the_wake_ups_filter(store, client, wakes):
    store.create_event("gig", 5, "2026-01-01T00:00:00.000000Z")
    put_event(client, "other", NOW_MS)
    records = wakes.read_new()
    assert records and not any(
        matches_filter(p, r) for p in WAKE_SOURCE.filter_patterns for r in records
    )


def test_a_parked_event_due_for_its_release_is_woken(store, client):
    # GIVEN an event whose deciding failed: its records parked, its marker due at once
    from turnstile.storage.intake import IntakeRecord

    store.park(
        "parked", [IntakeRecord("parked", "a", "1" * 21)], "2026-01-01T00:00:00.000000Z", "X"
    )
    # WHEN due holds are released
    assert release_due_holds(store, NOW_MS) == 1
    # THEN it was woken for a release
    assert woken(client) == {"parked": (1, WakeReason.RETRY)}
    # ... and once its parking marker is cleared, it is due no more
    version = int(store.get_parking("parked")["version"])
    store.unpark("parked", ["1" * 21])
    assert store.clear_parking("parked", version)
    assert list(due_events(store, NOW_MS)) == []


def test_a_holder_that_deletes_or_spoils_its_intake_record_cannot_stop_the_wake_up(store, client):
    """Nothing of intake is read or written: an event with a hold due is woken whatever
    its producers did to their records (issue: one producer stopped every hold of an
    event from ending by deleting its record, or writing a junk ``redrive``)."""
    put_event(client, "a-gone", NOW_MS - 30)  # the holder's record deleted
    put_raw_intake(client, "b-junk", "holder", redrive={"S": "x"}, **SUBMITTED)
    put_event(client, "b-junk", NOW_MS - 20)
    assert release_due_holds(store, NOW_MS) == 2
    assert set(woken(client)) == {"a-gone", "b-junk"}
    assert ("a-gone", "holder") not in table_items(client, INTAKE_TABLE.name)


def test_an_entry_that_names_no_event_is_skipped_and_the_rest_go_on(store, client, caplog):
    # GIVEN entries under event ids that are not ids, one whose item claims another event
    bad_ids = ["has space", "-dash-first", "x" * 129, "ümlaut"]
    for bad in bad_ids:
        put_event(client, bad, NOW_MS - 10)
    put_event(client, "victim", NOW_MS - 10, pk="EVENT#elsewhere")
    # ... and one good entry among them
    put_event(client, "good", NOW_MS - 10)
    with caplog.at_level(logging.WARNING, logger="turnstile.jobs.due_holds"):
        assert release_due_holds(store, NOW_MS) == 1
    # THEN only the good one was woken, and each skip said so in one line
    assert set(woken(client)) == {"good"}
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == len(bad_ids) + 1
    assert all("due entry skipped" in m and "\n" not in m for m in skipped)


def test_limit_bounds_the_wake_ups(store, client):
    for event_id in ("a", "b", "c"):
        put_event(client, event_id, NOW_MS - 1)
    assert release_due_holds(store, NOW_MS, limit=2) == 2
    assert len(woken(client)) == 2


def test_pages_of_the_index_are_all_read(store, client, monkeypatch):
    for n in range(5):
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


def test_the_local_stack_adds_the_index_and_the_stream_to_an_older_control_table(aws):
    """A state directory from before the index and the wake-ups: ``ensure_resources`` adds
    them (the index with its numeric sort key), and the due event is found through it."""
    from dataclasses import replace

    from turnstile_tools.local.stack import _ensure_table

    client = aws.client("dynamodb")
    client.delete_table(TableName=CONTROL_TABLE.name)
    old = replace(CONTROL_TABLE, indexes=(), stream_view_type=None)
    client.create_table(**old.create_table_kwargs())
    _ensure_table(client, CONTROL_TABLE)
    table = client.describe_table(TableName=CONTROL_TABLE.name)["Table"]
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["due-holds"]
    assert {"AttributeName": "hold_due_at", "AttributeType": "N"} in table["AttributeDefinitions"]
    assert table["StreamSpecification"]["StreamViewType"] == "KEYS_ONLY"
    put_event(client, "due", NOW_MS - 1)
    store = SignupStore(client, sleep=lambda _: None)
    assert [e["event_id"] for e in due_events(store, NOW_MS)] == ["due"]


def test_the_handler_wakes_what_is_due_by_its_clock(client, monkeypatch):
    from turnstile.handlers import due_holds as handler_module
    from turnstile_tools.local.context import LocalLambdaContext

    put_event(client, "due", NOW_MS - 1)
    put_event(client, "later", NOW_MS + 60_000)
    monkeypatch.setattr(handler_module.time, "time", lambda: NOW_MS / 1000)
    answer = handler_module.handler({}, LocalLambdaContext())
    assert answer == {"woken": 1, "now_ms": NOW_MS}
    assert set(woken(client)) == {"due"}

"""A long lineup in pages of its own, through the stream processor and the store (moto):
past ``INLINE_BYTES`` encoded (small here) the holds and the waitlist leave the event item
for page items,
each commit rewrites only the pages its changes touch, a processor that did not write them
reads them (and only those rewritten since it last did), the lineup read back is always
the one the decision items say, and a lineup that shrinks comes back to the item with no
page left behind."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_lifecycle_processor import Clock, Feed, make_event, statuses
from turnstile.base.contract import Attr, ControlKey, Status
from turnstile.base.errors import CommitConflictError
from turnstile.engine import lineup as lineup_module
from turnstile.engine.lineup import PAGE_ENTRIES
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.dynamo import event_key
from turnstile.storage.lineups import PAGED_LINEUP
from turnstile.storage.store import SignupStore


@pytest.fixture(autouse=True)
def small_bound(monkeypatch):
    """Lineups of a few hundred short ids go to pages (8 KB would take thousands)."""
    monkeypatch.setattr(lineup_module, "INLINE_BYTES", 1024)


def page_items(store: SignupStore) -> dict[str, dict[str, Any]]:
    """The lineup page items of the control table, as stored (typed)."""
    items = store.dynamo.call("scan", TableName=store.control_table, ConsistentRead=True)
    return {
        f"{i[ControlKey.PK]['S']} {i[ControlKey.SK]['S']}": i
        for i in items["Items"]
        if i[ControlKey.PK]["S"].startswith(ControlKey.LINEUP_PREFIX)
    }


def event_item(store: SignupStore, event_id: str) -> dict[str, Any]:
    """The event item, as stored (typed)."""
    return store.dynamo.call(
        "get_item", TableName=store.control_table, Key=event_key(event_id), ConsistentRead=True
    )["Item"]


def agrees(store: SignupStore, event_id: str) -> tuple[int, int]:
    """The lineup as a cold store reads it is what the decision items say: every HELD
    signup holds, every WAITLISTED one waits (in arrival order), and ``taken`` counts the
    seats of HELD and ACCEPTED ones."""
    cold = SignupStore(store.dynamo.client, sleep=lambda _: None)
    record = cold.load_lineup(cold.get_event(event_id))
    assert record.lineup_error is None
    items = list(store.dynamo.items("scan", TableName=store.main_table, ConsistentRead=True))
    mine = [i for i in items if i[Attr.EVENT_ID] == event_id]
    held = {i[Attr.SIGNUP_ID] for i in mine if i[Attr.STATUS] == Status.HELD}
    waiting = sorted(
        (i for i in mine if i[Attr.STATUS] == Status.WAITLISTED),
        key=lambda i: int(i[Attr.SEQUENCE_NUMBER]),
    )
    assert {h.signup_id for h in record.event.holds} == held
    assert [w.signup_id for w in record.event.waiting] == [i[Attr.SIGNUP_ID] for i in waiting]
    seated = sum(
        int(i[Attr.SEATS]) for i in mine if i[Attr.STATUS] in (Status.HELD, Status.ACCEPTED)
    )
    assert record.event.taken == seated
    return len(record.event.holds), len(record.event.waiting)


def test_a_long_lineup_lives_in_pages_and_comes_back(store):
    clock, feed = Clock(), Feed()
    make_event(store, "big", 400, hold_seconds=600, waitlist=200)
    # two processors, as two containers: each decides some batches, reading what the
    # other wrote
    one = StreamProcessor(store, clock=clock)
    other = StreamProcessor(SignupStore(store.dynamo.client, sleep=lambda _: None), clock=clock)
    signups = [f"s{i:03d}" for i in range(700)]
    for n, start in enumerate(range(0, 700, 100)):
        (one if n % 2 else other).process(
            [feed.signup("big", s) for s in signups[start : start + 100]]
        )
    assert agrees(store, "big") == (400, 200)
    item = event_item(store, "big")
    # the item keeps the directory, and a lineup no older processor can read
    assert Attr.LINEUP_PAGES in item and bytes(item[Attr.LINEUP]["B"]) == PAGED_LINEUP
    pages = page_items(store)
    assert len(pages) == 400 // PAGE_ENTRIES + 200 // PAGE_ENTRIES
    # the item is small: its journal and a directory, not 600 entries
    assert len(bytes(item[Attr.LINEUP_PAGES]["B"])) < 200

    # confirms and cancels spread over the holds; each cancel's seat goes to a waiter
    requests = [feed.request("big", signups[i], "confirm") for i in range(0, 400, 4)]
    requests += [feed.request("big", signups[i], "cancel") for i in range(1, 400, 8)]
    for n, start in enumerate(range(0, len(requests), 50)):
        (one if n % 2 else other).process(requests[start : start + 50])
    assert agrees(store, "big") == (400 - 100 - 50 + 50, 200 - 50)

    # every hold lapses: the waiters get them, then those lapse too
    clock.advance(601)
    one.process([feed.signup("big", "late-1")])
    _, waiting = agrees(store, "big")
    assert waiting == 0 and Attr.LINEUP_PAGES in event_item(store, "big")  # still in pages
    clock.advance(601)
    other.process([feed.signup("big", "late-2")])
    assert agrees(store, "big") == (1, 0)  # late-2 holds; the lineup is back on the item
    item = event_item(store, "big")
    assert Attr.LINEUP_PAGES not in item and bytes(item[Attr.LINEUP]["B"]) != PAGED_LINEUP
    assert page_items(store) == {}


def test_a_commit_rewrites_the_pages_it_touches_only(store):
    clock, feed = Clock(), Feed()
    make_event(store, "tail", 900, hold_seconds=600)
    processor = StreamProcessor(store, clock=clock)
    for start in range(0, 800, 100):
        processor.process([feed.signup("tail", f"s{i:03d}") for i in range(start, start + 100)])
    version = store.get_event("tail").event.version
    # a batch of ten more: the tail page alone is written at the new version
    processor.process([feed.signup("tail", f"t{i}") for i in range(10)])
    pages = page_items(store)
    rewritten = [k for k, p in pages.items() if int(p["v"]["N"]) > version]
    assert len(pages) == -(-810 // PAGE_ENTRIES) and len(rewritten) == 1, rewritten
    # a confirm in the middle: that page alone
    version = store.get_event("tail").event.version
    processor.process([feed.request("tail", "s250", "confirm")])
    rewritten = [k for k, p in page_items(store).items() if int(p["v"]["N"]) > version]
    page = 250 // PAGE_ENTRIES * PAGE_ENTRIES + 1  # s250 holds position 251
    assert len(rewritten) == 1 and rewritten[0].endswith(f"h#{page:040d}"), rewritten
    assert agrees(store, "tail") == (809, 0)


def test_a_page_at_another_version_than_the_directory_is_never_decided_from(store):
    clock, feed = Clock(), Feed()
    make_event(store, "torn", 300, hold_seconds=600)
    processor = StreamProcessor(store, clock=clock)
    for start in (0, 100, 200):
        processor.process([feed.signup("torn", f"s{i:03d}") for i in range(start, start + 100)])
    # a page as a later commit would leave it, under an item that names the earlier one
    key = next(iter(page_items(store).values()))
    store.dynamo.call(
        "update_item",
        TableName=store.control_table,
        Key={"pk": key["pk"], "sk": key["sk"]},
        UpdateExpression="SET v = v + :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    cold = SignupStore(store.dynamo.client, sleep=lambda _: None)
    with pytest.raises(CommitConflictError, match="lineup page"):
        cold.load_lineup(cold.get_event("torn"))
    # a processor reading it cold decides nothing from it: the event is parked, as when a
    # lineup cannot be read, until it reads whole again
    result = StreamProcessor(cold, clock=clock).process([feed.signup("torn", "more")])
    assert result.parked_events == [("torn", "CommitConflictError")]
    assert store.get_decision("torn", "more") is None


def test_a_commit_past_a_transactions_items_is_decided_in_shorter_chunks(store, monkeypatch):
    clock, feed = Clock(), Feed()
    make_event(store, "wide", 900, hold_seconds=600)
    processor = StreamProcessor(store, clock=clock)
    for start in range(0, 800, 100):
        processor.process([feed.signup("wide", f"s{i:03d}") for i in range(start, start + 100)])
    # a transaction of three items at most (the event item and two pages), on the
    # endpoint as in the store: as DynamoDB refuses one of more than 100
    monkeypatch.setattr("turnstile.storage.store.MAX_TRANSACTION_ITEMS", 3)
    client = store.dynamo.client
    transact = client.transact_write_items

    def at_most_three(**kwargs: Any) -> Any:
        if len(kwargs["TransactItems"]) > 3:
            raise client.exceptions.ClientError(
                {"Error": {"Code": "ValidationException", "Message": "too many items"}},
                "TransactWriteItems",
            )
        return transact(**kwargs)

    monkeypatch.setattr(client, "transact_write_items", at_most_three)
    confirms = [feed.request("wide", f"s{i:03d}", "confirm") for i in (10, 250, 450, 650)]
    result = processor.process(confirms)
    assert result.failures == [] and result.parked_events == []
    assert statuses(store, "wide", "s010", "s250", "s450", "s650") == [Status.ACCEPTED] * 4
    assert agrees(store, "wide") == (796, 0)

"""Attacks on paged lineups (``turnstile.engine.lineup``, ``turnstile.storage.lineups``, the
paged commit of ``turnstile.storage.store``): a reviewer's tests, on moto and on the page
planner alone.

Most attacks run at a small scale: pages of a few entries (``PAGE_ENTRIES``), a small
``INLINE_BYTES``, and, where a transaction's size is the point, a transaction of a few
items refused by the endpoint as DynamoDB refuses one past 100 (``scaled``). Each says
what it stands for at the real scale.

FOUND AND FIXED (each test failed before its fix):

* a lineup thinned out (most entries of each page confirmed, cancelled or lapsed: a
  page left for each straggler), once short enough for the event item, tried to delete
  every page in the commit that brought it back: past a transaction's 100 items, that
  commit could never be written, nor any later one, and the event stayed parked for good
  (at the real scale: a hundred stragglers in a hundred pages, under 4 KB encoded). A
  short lineup now stays in pages until the pages fit the transaction
  (``test_found_a_thinned_lineup_short_enough_for_the_item_could_never_leave_its_pages``);
* pages never merged: a thinned lineup kept a page per straggler, so one cancel freeing
  seats for waiters spread over as many pages touched more pages than a transaction holds
  (the cancel's promotions are not bounded: parked for good), and the directory could grow
  to a page per entry (60,000 pages: a 450 KB directory, past the event item's 400 KB).
  Two neighbouring pages that fit one are merged now, whenever one of them changes
  (``test_found_a_cancel_promoting_waiters_over_thinned_pages_parked_its_event_for_good``,
  ``test_found_thinned_pages_were_never_merged``);
* a page past its size was cut at keys of its own entries: waiting signups decided out of
  stream order (two processors, a split partition: docs/arrival-order.md) with arrivals
  below the first page's key made the cut name that key twice, and the first page's
  entries were silently dropped from the lineup while their items said WAITLISTED
  (``test_found_waiters_arriving_below_the_first_pages_key_were_lost``);
* a warm processor kept a waitlist joined out of arrival order in the order it joined,
  while every read of the pages gives arrival order: which signup a freed seat went to
  depended on which container decided
  (``test_found_a_warm_and_a_cold_processor_promoted_different_waiters``);
* a page missing (or older than the directory names) under an event item still at the
  version read was taken for a later commit: read again 20 times, then parked as a
  ``CommitConflictError``; it is parked at once now, as ``LineupPageError``
  (``test_found_a_missing_page_was_read_again_twenty_times_as_a_conflict``);
* a warm processor took the pages it held of an event deleted and created again (by hand:
  its versions start again) for the new one's, at the same keys and versions: it decided
  from the old lineup and left a confirmed signup holding in the pages; the pages it holds
  are forgotten when the event's creation changes, as its journal cache already was
  (``test_found_a_warm_processor_decided_a_recreated_event_from_the_old_ones_pages``);
* a step whose lapses and promotions, as many of each, made a commit too big (past a
  transaction's items, or a journal's bytes) failed for good: the processor halved its
  bound from both kinds' sum, which is no fewer of either, and gave up; it halves the
  most of one kind now
  (``test_found_lapses_and_as_many_promotions_too_big_for_a_commit_failed_the_step``).

FIXED in the engine: a cancel freeing more seats than a journal holds promotions parked its
event for good (its promotions were not bounded by ``max_lapses``); they are bounded now,
the step stopping after that record and steps of no record promoting the rest.

HELD (attacks the code withstands; they pass and pin what holds): every ``test_held_*``:
hostile intake (ids at every bound, page-key-like, ``#``, unicode, 1,024 bytes; seats at
and past every bound; a 350 KB item; requests of signups not holding; replays of old
records; deleted and rewritten intake items, and one put again unseen: a void hold taken
back out of the pages; an event id naming the pages' partition), two processors
interleaved on one paged event (pages read at v while the other commits v+1, and while it
brings the lineup back to the item and pages it again), the commit and its pages as one
transaction (a failed transaction leaves nothing; a crash after it, before the items are
written, is written out by the next processor), a store forgetting the pages it held
between commits (its bounds reached), deleted, corrupted and foreign pages
and a corrupted directory (never decided from: not one of its holds lapsed, its wake-up
failing alone, its next record parking it; the other event decided and woken), crossing
``INLINE_BYTES`` up and down, pages of exactly ``PAGE_ENTRIES``, a transaction of exactly
100 items, the 60,000-entry bound, capacity changes and a close on a paged event, holds
lapsing across many pages, a sharded event's paged shards; and, against the planner, any
run of grants, ends, thinning, joins in and out of order and promotions.

Invariants checked after each attack (``sound``): the lineup a cold store reads is what the
decision items say (every HELD signup holds, every WAITLISTED one waits, in arrival order),
``taken`` is the seats of HELD and ACCEPTED items and never above capacity, no page item the
directory does not name, and the audit finds nothing (positions given once, histories
allowed).
"""

from __future__ import annotations

import hashlib
import random
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import ids_in
from tests.integration.test_lifecycle_processor import Clock, make_event, statuses
from tests.integration.test_lineup_pages import agrees
from turnstile.base.clock import iso_of_ms
from turnstile.base.contract import (
    MAX_LINEUP_ENTRIES,
    Attr,
    ControlKey,
    Reason,
    Status,
    shard_key,
)
from turnstile.engine import lineup as lineup_module
from turnstile.engine.lifecycle import Hold, Waiting
from turnstile.engine.lineup import (
    Page,
    Pages,
    decode_page,
    encode_lineup,
    encode_page,
    entry_key,
    is_paged,
    joined,
    plan_pages,
)
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.dynamo import event_key
from turnstile.storage.events import lineup_problem
from turnstile.storage.store import SignupStore
from turnstile_tools.audit import audit

T0_MS = Clock().ms

# -- the scale, the feed, the checks -------------------------------------------------------


def scaled(
    store: SignupStore,
    monkeypatch: pytest.MonkeyPatch,
    page: int = 4,
    inline: int = 600,
    items: int = 100,
) -> None:
    """Pages of ``page`` entries, lineups paged past ``inline`` bytes, and transactions of
    at most ``items`` items, in the store's bound and on the endpoint alike (moto itself
    refuses past 100, as DynamoDB does)."""
    monkeypatch.setattr(lineup_module, "PAGE_ENTRIES", page)
    monkeypatch.setattr(lineup_module, "INLINE_BYTES", inline)
    if items >= 100:
        return
    monkeypatch.setattr("turnstile.storage.store.MAX_TRANSACTION_ITEMS", items)
    client = store.dynamo.client
    transact = client.transact_write_items

    def at_most(**kwargs: Any) -> Any:
        if len(kwargs["TransactItems"]) > items:
            raise client.exceptions.ClientError(
                {"Error": {"Code": "ValidationException", "Message": "too many items"}},
                "TransactWriteItems",
            )
        return transact(**kwargs)

    monkeypatch.setattr(client, "transact_write_items", at_most)


def uid(n: int, prefix: str = "") -> str:
    """A signup id that compresses as badly as a uuid's digits do."""
    return prefix + hashlib.sha1(f"{prefix}{n}".encode()).hexdigest()[:12]


class Feed:
    """Intake records as the stream delivers them; ``at`` sets the next sequence number
    (records decided out of stream order, as two processors or a split partition do)."""

    def __init__(self) -> None:
        self.seq = 1000
        self.counts: dict[tuple[str, str], int] = {}

    def at(self, seq: int) -> Feed:
        self.seq = seq - 1
        return self

    def _next(self) -> str:
        self.seq += 1
        return str(self.seq)

    def signup(self, event_id: str, signup_id: str, seats: Any = 1, **extra: Any) -> StreamRecord:
        keys = {"event_id": event_id, "signup_id": signup_id}
        image = {
            **keys,
            "seats": Decimal(seats) if type(seats) is int else seats,
            "submitted_at": "2026-01-01T00:00:00Z",
            "expires_at": Decimal(1),
            **extra,
        }
        return StreamRecord(self._next(), "INSERT", keys, image)

    def request(self, event_id: str, signup_id: str, kind: str) -> StreamRecord:
        key = (event_id, signup_id)
        self.counts[key] = self.counts.get(key, 0) + 1
        keys = {"event_id": event_id, "signup_id": signup_id}
        image = {
            **keys,
            "seats": Decimal(1),
            "request": kind,
            "request_count": Decimal(self.counts[key]),
            "undecided": "0",
            "expires_at": Decimal(1),
        }
        return StreamRecord(self._next(), "MODIFY", keys, image)

    def remove(self, event_id: str, signup_id: str) -> StreamRecord:
        return StreamRecord(self._next(), "REMOVE", {"event_id": event_id, "signup_id": signup_id})

    def wake(self, event_id: str) -> StreamRecord:
        pk, sk = ControlKey.wake(event_id)
        return StreamRecord(self._next(), "MODIFY", {"pk": pk, "sk": sk})


def ok(result: Any) -> Any:
    assert not result.failures and not result.parked_events, result
    return result


def pages_of(store: SignupStore, event_id: str) -> dict[str, int]:
    """The event's page items: sort key -> version."""
    pk = ControlKey.lineup_page(event_id, "h", 0)[0]
    response = store.dynamo.call(
        "query",
        TableName=store.control_table,
        ConsistentRead=True,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": pk}},
    )
    return {i["sk"]["S"]: int(i["v"]["N"]) for i in response["Items"]}


def directory(store: SignupStore, event_id: str) -> Pages | None:
    record = store.get_event(event_id)
    assert record is not None
    return record.pages


def sound(
    store: SignupStore, event_id: str, clock: Clock, stream_order: bool = True
) -> tuple[int, int]:
    """Every invariant of a paged lineup, from a cold read: (holds, waiting).
    ``stream_order``: whether the audit's check of positions against arrival applies
    (not to two processors deciding one event at once: docs/arrival-order.md)."""
    counts = agrees(store, event_id)
    record = store.get_event(event_id)
    assert record is not None
    assert record.event.taken <= record.event.capacity
    pages = record.pages.all() if record.pages is not None else ()
    named = {ControlKey.lineup_page(event_id, p.kind, p.first)[1]: p.version for p in pages}
    assert pages_of(store, event_id) == named
    report = audit(store, event_id, now=datetime.fromtimestamp(clock.ms / 1000, UTC))
    for event in report.events:
        if not stream_order:
            event.violations = [v for v in event.violations if "out of stream order" not in v]
    assert report.ok, report.to_dict()
    return counts


def hold_all(proc: StreamProcessor, feed: Feed, event_id: str, ids: list[str]) -> None:
    for start in range(0, len(ids), 100):
        ok(proc.process([feed.signup(event_id, s) for s in ids[start : start + 100]]))


def fresh(store: SignupStore, clock: Clock, **kwargs: Any) -> StreamProcessor:
    """A processor in a container of its own: a cold store on the same client."""
    return StreamProcessor(
        SignupStore(store.dynamo.client, sleep=lambda _: None), clock=clock, **kwargs
    )


# =====================================================================================
# FOUND AND FIXED
# =====================================================================================


def test_found_a_thinned_lineup_short_enough_for_the_item_could_never_leave_its_pages(
    store, monkeypatch
):
    """25 pages of one straggler each (at the real scale: 100 or more), then the lineup is
    short enough for the item (under half ``INLINE_BYTES``): the commit bringing it back
    deleted every page, past the transaction's 16 items (100), and failed every time. The
    pages were thinned as a version without merging left them (an event thinned before
    this one was deployed), then merging is back on."""
    scaled(store, monkeypatch, page=4, inline=600, items=16)
    merge = lineup_module._merge
    monkeypatch.setattr(lineup_module, "_merge", lambda *args: None)
    clock, feed = Clock(), Feed()
    make_event(store, "thin", 100, hold_seconds=600)
    proc = StreamProcessor(store, clock=clock)
    ids = [uid(i) for i in range(100)]
    hold_all(proc, feed, "thin", ids)
    ok(proc.process([feed.request("thin", s, "confirm") for i, s in enumerate(ids) if i % 4]))
    assert len(pages_of(store, "thin")) == 25  # a page for each of 25 stragglers
    monkeypatch.setattr(lineup_module, "_merge", merge)
    stragglers = ids[::4]
    encoded = len(encode_lineup(store.load_lineup(store.get_event("thin")).event.holds[8:], ()))
    assert encoded <= 300  # short enough for the item once 8 more are confirmed
    ok(proc.process([feed.request("thin", s, "confirm") for s in stragglers[:8]]))
    assert sound(store, "thin", clock) == (17, 0)
    # every other hold lapses: back on the item, no page left
    clock.advance(601)
    ok(fresh(store, clock).process([feed.wake("thin")]))
    assert sound(store, "thin", clock) == (0, 0)
    assert directory(store, "thin") is None and pages_of(store, "thin") == {}


def test_found_a_cancel_promoting_waiters_over_thinned_pages_parked_its_event_for_good(
    store, monkeypatch
):
    """A waitlist thinned by cancels to one waiter a page (at the real scale: a hundred
    pages), then a signup holding 40 seats cancels: its promotions (not bounded: they are
    the cancel's own) emptied 25 pages in one commit, past the transaction's 16 items
    (100), however short the chunk: the event was parked, and every release failed alike.
    Pages merged as they thin, the same waiters span a few pages."""
    scaled(store, monkeypatch, page=4, inline=600, items=16)
    clock, feed = Clock(), Feed()
    make_event(store, "wl", 40, waitlist=200)
    proc = StreamProcessor(store, clock=clock)
    ok(proc.process([feed.signup("wl", "group", seats=40)]))
    waiters = [uid(i) for i in range(100)]
    ok(proc.process([feed.signup("wl", w) for w in waiters]))
    ok(proc.process([feed.request("wl", w, "cancel") for i, w in enumerate(waiters) if i % 4]))
    left = waiters[::4]
    assert sound(store, "wl", clock) == (0, 25)
    assert len(pages_of(store, "wl")) <= 2 * 25 // 5 + 1  # no two neighbours fit one page
    ok(fresh(store, clock).process([feed.request("wl", "group", "cancel")]))
    assert statuses(store, "wl", *left) == [Status.ACCEPTED] * 25
    assert sound(store, "wl", clock) == (0, 0)


def _thinning_plan() -> list[int]:
    """Pages left after each round of a long lineup thinned out and refilled (the planner
    alone, at the real page size): 60 rounds of 1,000 holds joining, then 99 of every
    100 of each page confirmed."""
    position = 0
    holds: tuple[Hold, ...] = ()
    pages: Pages | None = None
    contents: dict[tuple[str, int], tuple[Any, ...]] = {}
    counts = []
    for version in range(1, 61):
        new = tuple(Hold(f"s{position + i}", 1, position + i + 1, T0_MS) for i in range(1000))
        position += 1000
        for after in ((*holds, *new), None):
            if after is None:  # the thinning: all but the first of each page go
                assert pages is not None
                keep = {p.first for p in pages.holds}
                after = tuple(h for h in holds if h.position in keep)
            plan = plan_pages(
                pages,
                (holds, ()),
                (after, ()),
                version,
                contents=lambda p: contents.get((p.kind, p.first)),
            )
            for page in plan.deletes:
                contents.pop((page.kind, page.first))
            for page, blob in plan.writes:
                contents[(page.kind, page.first)] = decode_page(page.kind, blob)
            pages, holds = plan.pages, after
        assert pages is not None
        counts.append(len(pages.holds))
    return counts


def test_found_thinned_pages_were_never_merged(monkeypatch):
    """Thinned and refilled, a lineup kept a page for each straggler: ten more a round, 600
    pages of one entry after 60 rounds, on to a directory as long as the lineup (at 60,000
    entries, a 450 KB directory: past the event item's 400 KB). Merged, the stragglers of
    each round fit one page."""
    assert _thinning_plan() == [1] * 60
    monkeypatch.setattr(lineup_module, "_merge", lambda *args: None)
    assert _thinning_plan() == list(range(10, 610, 10))  # what it was
    # the worst directory, a page for each of 60,000 entries, passes the item's bound
    rng = random.Random(7)
    worst = Pages(tuple(Page("h", 100 * i + 1, rng.randrange(1, 10**6)) for i in range(60_000)))
    assert len(worst.encode()) > 300 * 1024


def test_found_waiters_arriving_below_the_first_pages_key_were_lost(store, monkeypatch):
    """The waitlist's one page starts at arrival 5000; four waiters decided after it arrived
    before it (1001 to 1004: another processor's, or a split partition's, records). The
    page, past its size, was cut at its entries' keys, one of them its own first key: the
    four were dropped from the lineup, waiting for good while their items say WAITLISTED."""
    scaled(store, monkeypatch, page=4, inline=300)
    clock, feed = Clock(), Feed()
    make_event(store, "late", 30, hold_seconds=600, waitlist=50)
    proc = StreamProcessor(store, clock=clock)
    hold_all(proc, feed.at(100), "late", [uid(i) for i in range(30)])
    ok(proc.process([feed.at(5000).signup("late", "w-first")]))
    feed.at(1001)
    ok(proc.process([feed.signup("late", f"w-low-{i}") for i in range(4)]))
    assert sound(store, "late", clock) == (30, 5)
    # more of them, and more again, in every order: none lost, pages within their size
    ok(proc.process([feed.at(900 + 7 * i).signup("late", f"w-more-{i}") for i in range(9)]))
    ok(proc.process([feed.at(6000).signup("late", "w-last")]))
    assert sound(store, "late", clock) == (30, 15)
    cold = SignupStore(store.dynamo.client, sleep=lambda _: None)
    record = cold.load_lineup(cold.get_event("late"))
    assert [int(w.arrival) for w in record.event.waiting] == sorted(
        int(w.arrival) for w in record.event.waiting
    )
    # the seats come back: promoted in arrival order, the lowest first
    clock.advance(601)
    ok(proc.process([feed.wake("late")]))
    assert sound(store, "late", clock) == (15, 0)


def test_found_a_warm_and_a_cold_processor_promoted_different_waiters(store, monkeypatch):
    """x (arrival 9000) was decided before y (8000): another processor's records, or a split
    partition's. The warm processor kept them in the order they joined, every read of the
    pages gives arrival order: a freed seat went to x if the container was warm, to y if
    cold. Both give it to y now, as the pages say."""
    scaled(store, monkeypatch, page=4, inline=300)
    clock, feed = Clock(), Feed()
    promoted = {}
    for event_id, warm in (("warm", True), ("cold", False)):
        make_event(store, event_id, 2, waitlist=100)
        proc = StreamProcessor(store, clock=clock)
        ok(proc.process([feed.at(100).signup(event_id, "seat"), feed.signup(event_id, "seat2")]))
        feed.at(200)
        ok(proc.process([feed.signup(event_id, uid(i), seats=2) for i in range(30)]))
        ok(proc.process([feed.at(9000).signup(event_id, "x")]))
        ok(proc.process([feed.at(8000).signup(event_id, "y")]))
        assert directory(store, event_id) is not None
        deciding = proc if warm else fresh(store, clock)
        ok(deciding.process([feed.at(9500).request(event_id, "seat", "cancel")]))
        promoted[event_id] = [
            s for s in ("x", "y") if statuses(store, event_id, s)[0] == Status.ACCEPTED
        ]
        sound(store, event_id, clock)
    assert promoted == {"warm": ["y"], "cold": ["y"]}


def test_found_a_missing_page_was_read_again_twenty_times_as_a_conflict(store, monkeypatch):
    """A page deleted under its directory (by hand; no commit leaves one so): the event is
    parked at once as ``LineupPageError``, not read again 20 times and parked as a
    conflict (an operator would look for contention); the others are decided; put back,
    the event is released and decided from the whole lineup."""
    scaled(store, monkeypatch, page=4, inline=300)
    clock, feed = Clock(), Feed()
    make_event(store, "torn", 40, hold_seconds=600)
    make_event(store, "fine", 5)
    proc = StreamProcessor(store, clock=clock)
    hold_all(proc, feed, "torn", [uid(i) for i in range(30)])
    pages = pages_of(store, "torn")
    sk = sorted(pages)[1]
    pk = ControlKey.lineup_page("torn", "h", 0)[0]
    key = {"pk": {"S": pk}, "sk": {"S": sk}}
    saved = store.dynamo.call(
        "get_item", TableName=store.control_table, Key=key, ConsistentRead=True
    )["Item"]
    store.dynamo.call("delete_item", TableName=store.control_table, Key=key)
    cold = fresh(store, clock)
    result = cold.process([feed.signup("torn", "next"), feed.signup("fine", "other")])
    assert result.parked_events == [("torn", "LineupPageError")]
    assert result.conflicts == 0
    assert statuses(store, "torn", "next") + statuses(store, "fine", "other") == [
        None,
        Status.ACCEPTED,
    ]
    # put back: released, in order, from the whole lineup
    store.dynamo.call("put_item", TableName=store.control_table, Item=saved)
    ok(cold.process([feed.wake("torn")]))
    assert statuses(store, "torn", "next") == [Status.HELD]
    assert sound(store, "torn", clock) == (31, 0)


def test_found_a_warm_processor_decided_a_recreated_event_from_the_old_ones_pages(
    store, monkeypatch
):
    """An event item deleted and created again under the same id (by hand: its versions
    start again) and paged by another processor at the same versions and first keys as
    the old one: a warm processor took the pages it held of the old event for the new
    one's (same key, same version), confirmed a hold the stale lineup did not have, and
    left it in the pages: at its lapse, the seat of an accepted signup would have been
    given again (oversold by one). The journal's cache knew the event by its creation; the
    pages' did not. Now they are forgotten when it changes."""
    scaled(store, monkeypatch, page=4, inline=300)
    clock, feed = Clock(), Feed()
    store.create_event("again", 40, iso_of_ms(T0_MS), hold_seconds=600)
    warm = StreamProcessor(store, clock=clock)
    hold_all(warm, feed, "again", [uid(i, "old") for i in range(30)])
    old = directory(store, "again")
    store.dynamo.call("delete_item", TableName=store.control_table, Key=event_key("again"))
    store.create_event("again", 40, iso_of_ms(T0_MS + 1000), hold_seconds=600)
    new = [uid(i, "new") for i in range(30)]
    hold_all(fresh(store, clock), feed, "again", new)
    assert directory(store, "again") == old  # the same keys at the same versions
    ok(warm.process([feed.request("again", new[3], "confirm")]))
    assert statuses(store, "again", new[3]) == [Status.ACCEPTED]
    cold = SignupStore(store.dynamo.client, sleep=lambda _: None)
    record = cold.load_lineup(cold.get_event("again"))
    assert {h.signup_id for h in record.event.holds} == set(new) - {new[3]}
    assert record.event.taken == 30


def test_found_lapses_and_as_many_promotions_too_big_for_a_commit_failed_the_step(
    store, monkeypatch
):
    """12 holds lapse and free the seats of 12 waiters: the step's lapses (3 pages), the
    waiters' pages (3) and their new holds' (3) pass a transaction of 8 items (100). The
    processor halved its bound to half the step's bounded moves (24 // 2 = 12): no fewer
    lapses nor promotions, so it gave up, and every wake-up of the event failed alike
    (equally with a journal too big for as many lapses as promotions). It halves the most
    of one kind now: 6 lapse, then 6 are promoted, then the rest."""
    scaled(store, monkeypatch, page=4, inline=200, items=8)
    clock, feed = Clock(), Feed()
    make_event(store, "even", 12, hold_seconds=60, waitlist=12)
    proc = StreamProcessor(store, clock=clock)
    ids = [uid(i) for i in range(12)]
    waiters = [uid(i, "w") for i in range(12)]
    hold_all(proc, feed, "even", ids)
    ok(proc.process([feed.signup("even", w) for w in waiters]))
    assert sound(store, "even", clock) == (12, 12)
    clock.advance(61)
    ok(fresh(store, clock, max_lapses=30).process([feed.wake("even")]))
    assert statuses(store, "even", *ids) == [Status.EXPIRED] * 12
    assert statuses(store, "even", *waiters) == [Status.HELD] * 12
    assert sound(store, "even", clock) == (12, 0)


# -- the planner, whatever a lineup goes through -------------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(["grant", "end", "thin", "join", "join-early", "leave", "promote"]),
        st.integers(1, 40),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(OPS, st.sampled_from([1, 3, 8]))
def test_held_pages_read_back_merge_and_split_whatever_the_lineup_goes_through(ops, size):
    """Against the planner alone (pages of ``size`` entries): grants, ends, thinning,
    waiting signups joining in and out of arrival order, leaving and promoted. After every
    commit: the pages read back as the lineup; none is left the directory does not name;
    a page past its size holds only entries keyed at or below the first page's key; no
    two neighbours fit one page if either changed; and regrouping only the touched pages
    plans what regrouping all of them plans."""
    old = lineup_module.PAGE_ENTRIES, lineup_module.INLINE_BYTES
    lineup_module.PAGE_ENTRIES, lineup_module.INLINE_BYTES = size, 120
    try:
        _run_ops(ops, size)
    finally:
        lineup_module.PAGE_ENTRIES, lineup_module.INLINE_BYTES = old


def _run_ops(ops: list[tuple[str, int]], size: int) -> None:
    rng = random.Random(len(ops) * 1000 + size)
    items: dict[tuple[str, int], tuple[int, bytes]] = {}
    pages: Pages | None = None
    holds: tuple[Hold, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    position, arrival = 0, 10**20
    for version, (op, n) in enumerate(ops, start=1):
        before = (holds, waiting)
        if op == "grant":
            holds = (
                *holds,
                *(Hold(f"h{position + i}", 1, position + i + 1, T0_MS + version) for i in range(n)),
            )
            position += n
        elif op == "end":
            gone = set(rng.sample(range(len(holds)), min(n, len(holds))))
            holds = tuple(h for i, h in enumerate(holds) if i not in gone)
        elif op == "thin":
            holds = tuple(h for i, h in enumerate(holds) if i % (n + 1) == 0)
        elif op == "join":
            waiting = (
                *waiting,
                *(Waiting(f"w{arrival + i}", 1, str(arrival + i + 1)) for i in range(n)),
            )
            arrival += n + 1
        elif op == "join-early":  # decided now, arrived before (another shard's records)
            early = [
                Waiting(f"e{version}-{i}", 1, str(10**20 - 1000 * version + i)) for i in range(n)
            ]
            waiting = joined((), (*waiting, *early))[1]
        elif op == "leave":
            gone = set(rng.sample(range(len(waiting)), min(n, len(waiting))))
            waiting = tuple(w for i, w in enumerate(waiting) if i not in gone)
        else:  # promote: the first n waiting become holds
            moved = waiting[:n]
            waiting = waiting[n:]
            holds = (
                *holds,
                *(
                    Hold(w.signup_id, 1, position + i + 1, T0_MS + version)
                    for i, w in enumerate(moved)
                ),
            )
            position += len(moved)
        held = {
            (p.kind, p.first): decode_page(p.kind, items[(p.kind, p.first)][1])
            for p in (pages.all() if pages else ())
        }
        encoded = len(encode_lineup(holds, waiting) or b"")
        paged = is_paged(pages, encoded)
        whole = plan_pages(pages, before, (holds, waiting), version, paged)
        touched = plan_pages(
            pages,
            before,
            (holds, waiting),
            version,
            paged,
            contents=lambda p, held=held: held.get((p.kind, p.first)),
        )
        assert touched == whole
        for page in whole.deletes:
            del items[(page.kind, page.first)]
        for page, blob in whole.writes:
            assert (page.kind, page.first) not in {(d.kind, d.first) for d in whole.deletes}
            items[(page.kind, page.first)] = (page.version, blob)
        pages = whole.pages
        if pages is None:
            assert items == {}
            continue
        assert set(items) == {(p.kind, p.first) for p in pages.all()}
        read: dict[str, list[Any]] = {"h": [], "w": []}
        by_page = []
        for page in pages.all():
            version_of, blob = items[(page.kind, page.first)]
            assert version_of == page.version
            entries = decode_page(page.kind, blob)
            read[page.kind] += entries
            by_page.append((page, entries))
        assert joined(read["h"], read["w"]) == joined(holds, waiting)
        for kind, kind_pages in (("h", pages.holds), ("w", pages.waiting)):
            mine = [(p, e) for p, e in by_page if p.kind == kind]
            for i, (page, entries) in enumerate(mine):
                # only the first page holds keys below its own; past its size, only those
                assert i == 0 or all(entry_key(e) >= page.first for e in entries)
                assert len([e for e in entries if entry_key(e) > page.first]) <= size
                if i and (page.version == version or mine[i - 1][0].version == version):
                    assert len(entries) + len(mine[i - 1][1]) > size, (kind_pages, i)


# =====================================================================================
# A cancel that moves more than a journal holds (fixed in the engine)
# =====================================================================================


@pytest.mark.parametrize("then_a_signup", [False, True], ids=["cancel-last", "signup-after"])
def test_held_a_cancel_freeing_more_seats_than_a_journal_holds_promotions_promotes_them_all(
    store, monkeypatch, then_a_signup
):
    """At a small scale: a journal of about 40 promotions, a group of 60 seats cancelled
    with 60 waiting (a paged waitlist), the cancel the batch's last record or followed by
    a signup. A cancel's promotions are bounded as the step's own are (``max_lapses``):
    the step stops after the cancel, the processor commits it, and the next steps promote
    the rest (steps of no record when the cancel was last, without waiting for a wake-up)
    before the later signup is decided (it waits: the seats were the waiters'). Before,
    the cancel's promotions were not bounded, its commit never fitted, and the event
    stayed parked."""
    scaled(store, monkeypatch, page=8, inline=300)
    clock, feed = Clock(), Feed()
    make_event(store, "grp", 60, waitlist=61)
    proc = StreamProcessor(store, clock=clock, max_lapses=10)
    ok(proc.process([feed.signup("grp", "group", seats=60)]))
    waiters = [uid(i, "w") for i in range(60)]
    ok(proc.process([feed.signup("grp", w) for w in waiters]))
    assert directory(store, "grp") is not None
    monkeypatch.setattr("turnstile.storage.store.MAX_JOURNAL_BYTES", 700)
    late = [feed.signup("grp", "late")] if then_a_signup else []
    ok(proc.process([feed.request("grp", "group", "cancel"), *late]))
    assert statuses(store, "grp", *waiters) == [Status.ACCEPTED] * 60
    assert statuses(store, "grp", "group") == [Status.CANCELLED]
    if then_a_signup:
        assert statuses(store, "grp", "late") == [Status.WAITLISTED]
    sound(store, "grp", clock)


# =====================================================================================
# HELD
# =====================================================================================


def test_held_hostile_intake_against_a_paged_event(store, monkeypatch):
    scaled(store, monkeypatch, page=4, inline=300)
    clock, feed = Clock(), Feed()
    make_event(store, "gig", 40, hold_seconds=600, waitlist=20)
    proc = StreamProcessor(store, clock=clock)
    holders = [uid(i) for i in range(30)]
    hold_all(proc, feed, "gig", holders)
    before = pages_of(store, "gig")
    assert len(before) > 1
    longest = "L" * 128  # the longest id the contract takes
    odd = ["h#" + "0" * 39 + "1", "LINEUP#gig", "x" * 129, "é" * 512, "s" + "\n", "w#1", " "]
    records = [feed.signup("gig", s) for s in odd]
    records += [
        feed.signup("gig", "seats-" + str(i), seats=s)
        for i, s in enumerate(
            [Decimal(10**6), Decimal(10**38), Decimal("1.5"), Decimal(0), Decimal(-3), "2", True]
        )
    ]
    # a 350 KB item: refused (its attributes past the contract's bound), never lined up
    records.append(feed.signup("gig", "big-item", attributes={"blob": "z" * 350_000}))
    records.append(feed.signup("gig", longest))
    # requests of signups not holding: unknown, rejected, invalid; an event id naming the
    # pages' partition, and a shard key of an unsharded event
    records += [
        feed.request("gig", "nobody", "confirm"),
        feed.request("gig", "seats-0", "cancel"),
        feed.request("gig", "h#" + "0" * 39 + "1", "cancel"),
        feed.signup("LINEUP#gig", "x"),
        feed.signup("gig#00", "y"),
        feed.request(ControlKey.lineup_page("gig", "h", 1)[0], "s", "confirm"),
    ]
    proc.process(records)
    for sid in odd:
        item = store.get_decision("gig", sid) if len(sid.encode()) <= 1024 else None
        assert item is None or item[Attr.REASON] == Reason.INVALID_REQUEST
    seats = [store.get_decision("gig", f"seats-{i}") for i in range(7)]
    assert seats[0][Attr.REASON] == Reason.CAPACITY_FULL  # a million seats: never lined up
    assert all(s[Attr.REASON] == Reason.INVALID_REQUEST for s in seats[1:]), seats
    assert store.get_decision("gig", "big-item")[Attr.REASON] == Reason.INVALID_REQUEST
    assert statuses(store, "gig", longest) == [Status.HELD]
    # the holders' pages are as they were: only the tail took the new holds
    after = pages_of(store, "gig")
    assert all(after[k] == v for k, v in before.items() if k != max(before)), (before, after)
    assert sound(store, "gig", clock) == (32, 0)

    # replays of old records (a signup's and a request's), a holder's intake item deleted
    # and put again, rewritten with other seats, a confirm, a confirm again
    version = store.get_event("gig").event.version
    replay_signup = StreamRecord(
        "1001",
        "INSERT",
        {"event_id": "gig", "signup_id": holders[0]},
        feed.signup("gig", holders[0]).new_image,
    )
    proc.process([replay_signup])
    assert store.get_event("gig").event.version == version  # decided nothing: no commit
    confirm = feed.request("gig", holders[1], "confirm")
    ok(proc.process([confirm]))
    ok(proc.process([confirm, replay_signup]))  # the same records again
    # an accepted signup's intake item put again, its deletion never seen: decided unread
    # (above the high-water mark) as a new hold, found void when written out, and taken
    # back out of the paged lineup
    version = store.get_event("gig").event.version
    result = ok(proc.process([feed.signup("gig", holders[1], seats=2)]))
    assert store.get_event("gig").event.version == version + 2  # committed, taken back
    assert statuses(store, "gig", holders[1]) == [Status.ACCEPTED]
    assert [d.decision.signup_id for d in result.decided] == []
    assert sound(store, "gig", clock) == (31, 0)
    ok(proc.process([feed.remove("gig", holders[2]), feed.signup("gig", holders[2], seats=3)]))
    ok(proc.process([feed.signup("gig", holders[3], seats=7)]))  # rewritten: a tick
    ok(proc.process([feed.request("gig", holders[1], "confirm")]))  # refused: accepted
    assert statuses(store, "gig", *holders[:4]) == [
        Status.HELD,
        Status.ACCEPTED,
        Status.HELD,
        Status.HELD,
    ]
    assert int(store.get_decision("gig", holders[2])[Attr.SEATS]) == 1
    assert sound(store, "gig", clock) == (31, 0)


def test_held_two_processors_interleaved_on_a_paged_event(store, monkeypatch):
    """P1 reads the event item at v; before it reads the pages, P2 commits v+1 (rewriting a
    page P1 has to read, then one P1 holds already, then bringing the lineup back to the
    item and paging it again): P1 reads again every time, and decides from one version."""
    scaled(store, monkeypatch, page=4, inline=400)
    clock, feed = Clock(), Feed()
    make_event(store, "duel", 80, hold_seconds=600, waitlist=40)
    p1 = fresh(store, clock)
    p2 = fresh(store, clock)
    ids = [uid(i) for i in range(60)]
    hold_all(p2, feed, "duel", ids)
    moves: list[list[StreamRecord]] = [
        [feed.request("duel", ids[5], "confirm")],  # a page P1 reads cold
        [feed.request("duel", ids[45], "cancel")],  # a page P1 holds after its first read
        [feed.request("duel", s, "confirm") for s in ids[6:45] + ids[46:58]],  # to the item
        [feed.signup("duel", uid(i, "p2-")) for i in range(40)],  # and paged again
    ]
    real = p1.store.load_lineup
    loads = {"n": 0}
    paged: list[bool] = []

    def interleaved(record: Any) -> Any:
        # P1 has read the event item at v; P2 commits v+1 before P1 reads the pages
        if record.event.event_id == "duel" and moves and loads["n"] % 2 == 0:
            ok(p2.process(moves.pop(0)))
            paged.append(directory(store, "duel") is not None)
        loads["n"] += 1
        return real(record)

    monkeypatch.setattr(p1.store, "load_lineup", interleaved)
    for i in range(4):
        result = ok(p1.process([feed.signup("duel", uid(i, "p1-"))]))
        assert result.conflicts >= 1
    assert moves == [] and paged == [True, True, False, True]
    monkeypatch.setattr(p1.store, "load_lineup", real)
    ok(p1.process([feed.signup("duel", "last")]))
    holds, waiting = sound(store, "duel", clock, stream_order=False)
    accepted = 52  # ids[5], then 51 more
    # 105 signups, one cancelled: 80 seated (accepted or held), the rest waiting
    assert holds == 80 - accepted and waiting == 60 + 40 + 4 + 1 - 1 - 80
    assert all(statuses(store, "duel", *[uid(i, "p1-") for i in range(4)]))


def test_held_a_commit_and_its_pages_are_one_transaction(store, monkeypatch):
    """Every page put and delete is in the transaction of its event item's update, whose
    version condition covers them all; a transaction that fails (not a conflict: the
    endpoint down) writes neither, and the event is decided again later from what is
    stored. There is no moment between the pages and the item for a crash to fall in."""
    scaled(store, monkeypatch, page=4, inline=300)
    clock, feed = Clock(), Feed()
    make_event(store, "atom", 60, hold_seconds=600)
    proc = StreamProcessor(store, clock=clock)
    client = store.dynamo.client
    seen: list[str] = []
    transact = client.transact_write_items
    fail = {"on": False}

    def watched(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def run(**kwargs: Any) -> Any:
            text = repr(kwargs)
            if "LINEUP#" in text:
                seen.append(name)
            return call(**kwargs)

        return run

    def transaction(**kwargs: Any) -> Any:
        actions = kwargs["TransactItems"]
        pages = [a for a in actions if "LINEUP#" in repr(a)]
        if pages:
            seen.append("transaction")
            events = [a for a in actions if "Update" in a and "EVENT#" in repr(a["Update"]["Key"])]
            assert (
                len(events) == 1
                and "#version = :expected" in events[0]["Update"]["ConditionExpression"]
            )
            if fail["on"]:
                raise client.exceptions.ClientError(
                    {"Error": {"Code": "InternalServerError", "Message": "down"}},
                    "TransactWriteItems",
                )
        return transact(**kwargs)

    for name in ("put_item", "delete_item", "update_item", "batch_write_item"):
        monkeypatch.setattr(client, name, watched(name, getattr(client, name)))
    monkeypatch.setattr(client, "transact_write_items", transaction)
    ids = [uid(i) for i in range(40)]
    hold_all(proc, feed, "atom", ids)
    assert set(seen) == {"transaction"}
    pages, version = pages_of(store, "atom"), store.get_event("atom").event.version
    fail["on"] = True  # the endpoint fails every attempt
    result = proc.process([feed.request("atom", ids[9], "confirm")])
    fail["on"] = False
    assert result.parked_events == [("atom", "StoreUnavailableError")]
    assert (pages_of(store, "atom"), store.get_event("atom").event.version) == (pages, version)
    ok(proc.process([feed.wake("atom")]))  # released: decided from what is stored
    assert statuses(store, "atom", ids[9]) == [Status.ACCEPTED]
    assert set(seen) == {"transaction"}
    assert sound(store, "atom", clock) == (39, 0)


def test_held_a_crash_after_a_paged_commit_before_its_items_are_written(store, monkeypatch):
    """The commit (event item and pages) lands, the processor dies before writing its
    decision items out: another processor, cold, writes the journal out first and decides
    from the pages as that commit left them."""
    scaled(store, monkeypatch, page=4, inline=300)
    clock, feed = Clock(), Feed()
    make_event(store, "crash", 40, hold_seconds=600, waitlist=10)
    proc = StreamProcessor(store, clock=clock)
    ids = [uid(i) for i in range(30)]
    hold_all(proc, feed, "crash", ids)
    real = proc.store.materialize

    def dies(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the container died")

    monkeypatch.setattr(proc.store, "materialize", dies)
    records = [feed.request("crash", ids[2], "cancel"), feed.signup("crash", "after")]
    records += [feed.signup("crash", uid(i, "w")) for i in range(12)]
    result = proc.process(records)
    assert result.parked_events == [("crash", "RuntimeError")]
    monkeypatch.setattr(proc.store, "materialize", real)
    assert statuses(store, "crash", ids[2], "after") == [Status.HELD, None]  # not written
    ok(fresh(store, clock).process([feed.wake("crash")]))  # written out, then released
    assert statuses(store, "crash", ids[2], "after") == [Status.CANCELLED, Status.HELD]
    assert sound(store, "crash", clock) == (40, 2)  # 10 of the 12 hold, 2 wait


def test_held_a_store_that_forgets_its_pages_between_commits_decides_alike(store, monkeypatch):
    """A store holding at most 3 pages and one whole lineup (4,096 and 64), two paged events
    interleaved: it reads pages again, regroups every entry when it no longer holds a page
    a commit touches, and decides as a store that holds them all."""
    scaled(store, monkeypatch, page=4, inline=300)
    monkeypatch.setattr("turnstile.storage.lineups.MAX_PAGES_HELD", 3)
    monkeypatch.setattr("turnstile.storage.lineups.MAX_LINEUPS_HELD", 1)
    clock, feed = Clock(), Feed()
    proc = StreamProcessor(store, clock=clock)
    ids = {e: [uid(i, e) for i in range(36)] for e in ("one", "two")}
    for event_id in ids:
        make_event(store, event_id, 30, hold_seconds=600, waitlist=10)
    for start in range(0, 36, 12):
        for event_id, mine in ids.items():
            ok(proc.process([feed.signup(event_id, s) for s in mine[start : start + 12]]))
    for i in range(0, 30, 4):
        for event_id, mine in ids.items():
            kind = "confirm" if i % 8 else "cancel"
            ok(
                proc.process(
                    [feed.request(event_id, mine[i], kind), feed.signup(event_id, f"x{i}")]
                )
            )
    for event_id in ids:  # 4 confirmed, 4 cancelled and their seats to 4 waiters
        assert sound(store, event_id, clock) == (30 - 4 - 4 + 4, 6 - 4 + 8)


def _corrupt_blob(store: SignupStore, key: dict[str, Any]) -> None:
    store.dynamo.call(
        "update_item",
        TableName=store.control_table,
        Key=key,
        UpdateExpression="SET page = :junk",
        ExpressionAttributeValues={":junk": {"B": b"not zlib"}},
    )


def _foreign_rows(store: SignupStore, key: dict[str, Any]) -> None:
    blob = encode_page([Waiting("w", 1, "5")])  # a waiting page's rows under a holds key
    store.dynamo.call(
        "update_item",
        TableName=store.control_table,
        Key=key,
        UpdateExpression="SET page = :b",
        ExpressionAttributeValues={":b": {"B": blob}},
    )


def _no_version(store: SignupStore, key: dict[str, Any]) -> None:
    store.dynamo.call(
        "update_item", TableName=store.control_table, Key=key, UpdateExpression="REMOVE v"
    )


def _older(store: SignupStore, key: dict[str, Any]) -> None:
    store.dynamo.call(
        "update_item",
        TableName=store.control_table,
        Key=key,
        UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"N": "0"}},
    )


def _bad_directory(store: SignupStore, key: dict[str, Any]) -> None:
    blob = zlib.compress(b'{"f": 1, "h": [["x", 1]], "w": []}')
    store.dynamo.call(
        "update_item",
        TableName=store.control_table,
        Key=event_key("torn"),
        UpdateExpression="SET lineup_pages = :b",
        ExpressionAttributeValues={":b": {"B": blob}},
    )


@pytest.mark.parametrize(
    "spoil", [_corrupt_blob, _foreign_rows, _no_version, _older, _bad_directory]
)
def test_held_a_spoiled_page_or_directory_parks_its_event_alone(store, monkeypatch, spoil):
    """Whatever spoils a page (junk bytes, another kind's rows, no version, an older one)
    or the directory: not one hold of the event lapses from what is left, its wake-up fails
    alone (retried, the other event's steps), and its next record parks it; the other
    event of each batch is decided."""
    scaled(store, monkeypatch, page=4, inline=300)
    clock, feed = Clock(), Feed()
    make_event(store, "torn", 40, hold_seconds=60)
    make_event(store, "fine", 5, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    hold_all(proc, feed, "torn", [uid(i) for i in range(30)])
    ok(proc.process([feed.signup("fine", "f1")]))
    sk = sorted(pages_of(store, "torn"))[0]
    spoil(store, {"pk": {"S": ControlKey.lineup_page("torn", "h", 0)[0]}, "sk": {"S": sk}})
    cold = fresh(store, clock)
    clock.advance(61)  # every hold due: a wake-up of each event
    wake = feed.wake("torn")
    result = cold.process([wake, feed.wake("fine")])
    assert result.failures == [wake.sequence_number]
    assert statuses(store, "fine", "f1") == [Status.EXPIRED]
    assert store.get_event("torn").event.taken == 30  # not one lapsed from a torn lineup
    result = cold.process([feed.signup("torn", "next"), feed.signup("fine", "f2")])
    assert [event for event, _ in result.parked_events] == ["torn"]
    assert statuses(store, "torn", "next") + statuses(store, "fine", "f2") == [None, Status.HELD]
    assert store.get_event("torn").event.taken == 30 and store.get_parking("torn") is not None


def test_held_crossing_the_bound_up_and_down_never_thrashes(store, monkeypatch):
    """A lineup above ``INLINE_BYTES`` goes to pages; it comes back only at half of it, so
    one moving around either bound changes nothing but its entries."""
    scaled(store, monkeypatch, page=8, inline=600)
    clock, feed = Clock(), Feed()
    make_event(store, "tide", 200, hold_seconds=600)
    proc = StreamProcessor(store, clock=clock)
    live: list[str] = []
    where: list[bool] = []
    n = 0

    def size() -> int:
        holds = store.load_lineup(store.get_event("tide")).event.holds
        return len(encode_lineup(holds, ()) or b"")

    def grow(count: int) -> None:
        nonlocal n
        new = [uid(n + i) for i in range(count)]
        n += count
        live.extend(new)
        ok(proc.process([feed.signup("tide", s) for s in new]))
        where.append(directory(store, "tide") is not None)

    def shrink(count: int) -> None:
        gone = [live.pop(0) for _ in range(count)]
        ok(proc.process([feed.request("tide", s, "confirm") for s in gone]))
        where.append(directory(store, "tide") is not None)

    grow(40)  # under 600 bytes: on the item
    assert size() <= 600 and where == [False]
    for _ in range(3):  # across the upper bound and back under it: paged once, for good
        grow(12)
        assert size() > 600
        shrink(12)
        assert 300 < size() <= 600
    assert where == [False] + [True] * 6
    shrink(len(live) - 20)  # half the bound: back on the item
    assert size() <= 300 and where[-1] is False and pages_of(store, "tide") == {}
    for _ in range(3):  # across half the bound and back: on the item all along
        grow(12)
        assert 300 < size() <= 600
        shrink(12)
    assert not any(where[-6:])
    sound(store, "tide", clock)


def test_held_pages_of_exactly_page_entries_and_a_transaction_of_exactly_100_items(
    store, monkeypatch
):
    """Pages at the real size: 100 entries make one page, the 101st starts the next. Then,
    with pages of one entry, 99 confirms in one chunk are one transaction of exactly 100
    items (DynamoDB's limit, which moto holds to): written whole, not cut."""
    size = lineup_module.PAGE_ENTRIES
    holds = tuple(Hold(f"s{i}", 1, i + 1, T0_MS) for i in range(2 * size + 1))
    plan = plan_pages(None, ((), ()), (holds[:size], ()), 1)
    assert [len(decode_page("h", b)) for _, b in plan.writes] == [size]
    plan2 = plan_pages(plan.pages, (holds[:size], ()), (holds[: size + 1], ()), 2)
    assert [p.first for p in plan2.pages.holds] == [1, size + 1] and len(plan2.writes) == 1
    plan3 = plan_pages(plan2.pages, (holds[: size + 1], ()), (holds[: 2 * size], ()), 3)
    assert [p.first for p in plan3.pages.holds] == [1, size + 1]

    scaled(store, monkeypatch, page=1, inline=600)
    clock, feed = Clock(), Feed()
    make_event(store, "edge", 120, hold_seconds=600)
    proc = StreamProcessor(store, clock=clock)
    ids = [uid(i) for i in range(120)]
    hold_all(proc, feed, "edge", ids)
    assert len(pages_of(store, "edge")) == 120
    sizes: list[int] = []
    client = store.dynamo.client
    transact = client.transact_write_items

    def counted(**kwargs: Any) -> Any:
        sizes.append(len(kwargs["TransactItems"]))
        return transact(**kwargs)

    monkeypatch.setattr(client, "transact_write_items", counted)
    ok(proc.process([feed.request("edge", s, "confirm") for s in ids[:99]]))
    assert sizes == [100]
    assert sound(store, "edge", clock) == (21, 0)


def test_held_the_60000_entry_bound(monkeypatch):
    """The options bound the lineup to 60,000 entries; at that size, in pages of uuid-like
    ids and 21-digit arrivals: 600 pages, each far under 400 KB, a directory that leaves the
    journal its whole bound on the item. Thinned to one entry in a hundred, its pages merge
    to a handful."""
    assert lineup_problem(50_000, 10_000, 60) is None
    assert lineup_problem(50_001, 10_000, 60) is not None
    assert lineup_problem(0, MAX_LINEUP_ENTRIES + 1, 0) is not None
    rng = random.Random(3)
    holds = tuple(
        Hold(f"{rng.getrandbits(128):032x}"[:36], 1, i + 1, T0_MS + i) for i in range(50_000)
    )
    arrival = 10**20
    waiting = []
    for _ in range(10_000):
        arrival += rng.randrange(10**6, 10**9)
        waiting.append(Waiting(f"{rng.getrandbits(128):032x}", 1, str(arrival)))
    plan = plan_pages(None, ((), ()), (holds, tuple(waiting)), 7)
    assert plan.pages is not None and len(plan.pages.all()) == 600
    assert max(len(blob) for _, blob in plan.writes) * 4 / 3 < 20 * 1024
    from turnstile.storage.store import MAX_JOURNAL_AND_LINEUP_BYTES, MAX_JOURNAL_BYTES

    assert MAX_JOURNAL_AND_LINEUP_BYTES - len(plan.pages.encode()) >= MAX_JOURNAL_BYTES
    contents = {(p.kind, p.first): decode_page(p.kind, b) for p, b in plan.writes}
    thinned = tuple(h for i, h in enumerate(holds) if i % 100 == 0)
    plan2 = plan_pages(
        plan.pages,
        (holds, tuple(waiting)),
        (thinned, tuple(waiting)),
        8,
        contents=lambda p: contents.get((p.kind, p.first)),
    )
    assert len(plan2.pages.holds) <= 5  # 500 stragglers in 5 pages, not 500


def test_held_capacity_changes_and_a_close_on_a_paged_event(store, monkeypatch):
    scaled(store, monkeypatch, page=4, inline=300)
    clock, feed = Clock(), Feed()
    make_event(store, "org", 20, hold_seconds=600, waitlist=40)
    proc = StreamProcessor(store, clock=clock, max_lapses=7)
    ids = [uid(i) for i in range(50)]
    hold_all(proc, feed, "org", ids)
    assert sound(store, "org", clock) == (20, 30)
    store.update_capacity("org", 35)  # 15 more seats: promotions in steps of 7
    ok(proc.process([feed.wake("org")]))
    assert sound(store, "org", clock) == (35, 15)
    ok(proc.process([feed.request("org", ids[0], "cancel")]))
    assert sound(store, "org", clock) == (35, 14)
    store.close_event("org")
    ok(fresh(store, clock, max_lapses=3).process([feed.wake("org")]))
    assert sound(store, "org", clock) == (35, 0)
    assert statuses(store, "org", *ids[36:]) == [Status.REJECTED] * 14
    clock.advance(601)
    ok(proc.process([feed.wake("org")]))
    assert sound(store, "org", clock) == (0, 0) and pages_of(store, "org") == {}


def test_held_holds_lapsing_across_many_pages_in_bounded_steps(store, monkeypatch):
    """Stragglers of many pages (after thinning) and their waiters: a wake-up lapses them in
    steps of at most ``max_lapses``, each a transaction within its items, the waiters get
    the seats in arrival order, and the lineup ends on the item."""
    scaled(store, monkeypatch, page=4, inline=500, items=12)
    clock, feed = Clock(), Feed()
    make_event(store, "lapse", 60, hold_seconds=60, waitlist=12)
    proc = StreamProcessor(store, clock=clock, max_lapses=30)
    ids = [uid(i) for i in range(60)]
    hold_all(proc, feed, "lapse", ids)
    waiters = [uid(i, "w") for i in range(12)]
    ok(proc.process([feed.signup("lapse", w) for w in waiters]))
    ok(proc.process([feed.request("lapse", s, "confirm") for i, s in enumerate(ids) if i % 3]))
    assert sound(store, "lapse", clock) == (20, 12)
    clock.advance(61)
    ok(fresh(store, clock, max_lapses=30).process([feed.wake("lapse")]))
    assert statuses(store, "lapse", *waiters) == [Status.HELD] * 12
    assert sound(store, "lapse", clock) == (12, 0)


def test_held_a_sharded_events_shards_page_their_holds(store, monkeypatch):
    """Two shards, each a paged lineup of its own (a sharded event has no waitlist), one
    taking the other's slack in the commit that writes its pages; holds lapse; nothing is
    oversold across the shards."""
    scaled(store, monkeypatch, page=4, inline=150)
    clock, feed = Clock(), Feed()
    store.create_event("hot", 60, iso_of_ms(T0_MS), shards=2, hold_seconds=60)
    proc = StreamProcessor(store, clock=clock)
    first = ids_in(0, 2, 45, "a")
    second = ids_in(1, 2, 20, "b")
    key0, key1 = shard_key("hot", 0), shard_key("hot", 1)
    hold_all(proc, feed, key0, first)
    hold_all(fresh(store, clock), feed, key1, second)
    seated = sum(1 for s in first if statuses(store, key0, s)[0] == Status.HELD)
    seated += sum(1 for s in second if statuses(store, key1, s)[0] == Status.HELD)
    assert seated == 60
    assert directory(store, key0) is not None
    clock.advance(61)
    ok(proc.process([feed.wake(key0), feed.wake(key1)]))
    late = ids_in(1, 2, 50, "late")
    hold_all(proc, feed, key1, late)
    assert statuses(store, key1, *late) == [Status.HELD] * 50  # 35 of them taken from shard 0
    assert directory(store, key1) is not None
    for key in (key0, key1):
        sound(store, key, clock)
    report = audit(store, "hot", now=datetime.fromtimestamp(clock.ms / 1000, UTC))
    assert report.ok, report.to_dict()
    assert sum(store.get_event(k).event.taken for k in (key0, key1)) <= 60

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

Invariants checked after each attack (``sound``): the lineup a cold store reads is what the
decision items say (every HELD signup holds, every WAITLISTED one waits, in arrival order),
``taken`` is the seats of HELD and ACCEPTED items and never above capacity, no page item the
directory does not name, and the audit finds nothing (positions given once, histories
allowed).
"""

from __future__ import annotations

import hashlib
import random
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.test_lifecycle_processor import Clock, make_event, statuses
from tests.integration.test_lineup_pages import agrees
from turnstile.base.clock import iso_of_ms
from turnstile.base.contract import (
    ControlKey,
    Status,
)
from turnstile.engine import lineup as lineup_module
from turnstile.engine.lifecycle import Hold, Waiting
from turnstile.engine.lineup import (
    Page,
    Pages,
    decode_page,
    encode_lineup,
    entry_key,
    is_paged,
    joined,
    plan_pages,
)
from turnstile.jobs.processor import StreamProcessor, StreamRecord
from turnstile.storage.dynamo import event_key
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

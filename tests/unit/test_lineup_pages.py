"""A long lineup in pages (``turnstile.engine.lineup.plan_pages``): whatever the lineup
goes through, the pages a commit leaves behind read back as exactly the new lineup, no
page is left that the directory does not name, and a commit writes only the pages whose
entries changed (appending to a long lineup writes its tail, not the whole of it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnstile.engine import lineup as lineup_module
from turnstile.engine.lifecycle import Hold, Waiting
from turnstile.engine.lineup import (
    PAGE_ENTRIES,
    Page,
    Pages,
    decode_page,
    encode_lineup,
    is_paged,
    joined,
    plan_pages,
)

#: The bound the tests page at: small, so a few hundred entries pass it.
INLINE = 400


@pytest.fixture(autouse=True)
def small_bound(monkeypatch):
    monkeypatch.setattr(lineup_module, "INLINE_BYTES", INLINE)


def encoded(holds, waiting) -> int:
    return len(encode_lineup(holds, waiting) or b"")


class PageTable:
    """The page items as the table would keep them, and the directory on the event item."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, int], tuple[int, bytes]] = {}
        self.pages: Pages | None = None
        self.lineup: tuple[tuple[Hold, ...], tuple[Waiting, ...]] = ((), ())
        self.version = 0
        self.written = 0

    def commit(self, holds: tuple[Hold, ...], waiting: tuple[Waiting, ...]) -> None:
        self.version += 1
        paged = is_paged(self.pages, encoded(holds, waiting))
        plan = plan_pages(self.pages, self.lineup, (holds, waiting), self.version, paged)
        for page in plan.deletes:
            del self.items[(page.kind, page.first)]
        for page, blob in plan.writes:
            self.items[(page.kind, page.first)] = (page.version, blob)
        self.written += len(plan.writes)
        self.pages = plan.pages
        self.lineup = (holds, waiting)

    def read(self) -> tuple[tuple[Hold, ...], tuple[Waiting, ...]]:
        assert self.pages is not None
        holds: list[Hold] = []
        waiting: list[Waiting] = []
        for page in self.pages.all():
            version, blob = self.items[(page.kind, page.first)]
            assert version == page.version, page
            (holds if page.kind == "h" else waiting).extend(decode_page(page.kind, blob))  # type: ignore[arg-type]
        return joined(holds, waiting)


NOW = 1_800_000_000_000


def holds_of(positions: list[int]) -> tuple[Hold, ...]:
    return joined([Hold(f"s{p}", 1 + p % 3, p, NOW + 1000 * (p % 7) + p) for p in positions], [])[0]


def waiting_of(arrivals: list[int]) -> tuple[Waiting, ...]:
    return tuple(Waiting(f"w{a}", 1 + a % 2, str(10**20 + a)) for a in sorted(arrivals))


lineups = st.lists(
    st.tuples(
        st.sets(st.integers(1, 3 * PAGE_ENTRIES), max_size=3 * PAGE_ENTRIES),
        st.sets(st.integers(1, 2 * PAGE_ENTRIES), max_size=2 * PAGE_ENTRIES),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(lineups)
def test_pages_read_back_as_the_lineup_and_leave_nothing_behind(steps):
    table = PageTable()
    for positions, arrivals in steps:
        holds, waiting = holds_of(sorted(positions)), waiting_of(sorted(arrivals))
        table.commit(holds, waiting)
        if table.pages is None:
            # back on the event item: no page is left
            assert encoded(holds, waiting) <= INLINE and table.items == {}
            continue
        assert table.read() == (holds, waiting)
        assert set(table.items) == {(p.kind, p.first) for p in table.pages.all()}


def test_appending_to_a_long_lineup_writes_its_tail_only():
    table = PageTable()
    positions = list(range(1, 5 * PAGE_ENTRIES + 1))
    table.commit(holds_of(positions), ())
    assert table.written == 5  # five full pages
    for _ in range(10):  # ten commits of ten new holds each
        start = positions[-1] + 1
        positions += range(start, start + 10)
        table.commit(holds_of(positions), ())
    # one page a commit: the tail (a new one when the last is full), never the rest
    assert table.written == 5 + 10
    assert table.read()[0] == holds_of(positions)
    # a confirm in the middle rewrites that page alone
    written = table.written
    positions.remove(3 * PAGE_ENTRIES // 2)
    table.commit(holds_of(positions), ())
    assert table.written == written + 1


def test_a_lineup_goes_back_to_the_event_item_at_half_the_bound():
    def longest(limit: int) -> int:  # the most holds whose encoding is within limit
        n = 1
        while encoded(holds_of(list(range(1, n + 2))), ()) <= limit:
            n += 1
        return n

    table = PageTable()
    table.commit(holds_of(list(range(1, longest(INLINE) + 2))), ())
    assert table.pages is not None and table.items
    table.commit(holds_of(list(range(1, longest(INLINE // 2) + 2))), ())
    assert table.pages is not None  # still paged above half
    table.commit(holds_of(list(range(1, longest(INLINE // 2) + 1))), ())
    assert table.pages is None and table.items == {}


def test_the_directory_round_trips():
    pages = Pages((Page("h", 1, 3), Page("h", 201, 9)), (Page("w", 10**24, 9),))
    assert Pages.decode(pages.encode()) == pages


def test_a_page_emptied_in_the_middle_is_deleted():
    table = PageTable()
    positions = list(range(1, 4 * PAGE_ENTRIES + 1))
    table.commit(holds_of(positions), ())
    # every hold of the second page ends (confirmed, cancelled or lapsed)
    positions = [p for p in positions if not PAGE_ENTRIES < p <= 2 * PAGE_ENTRIES]
    table.commit(holds_of(positions), ())
    assert table.pages is not None
    assert [p.first for p in table.pages.holds] == [1, 2 * PAGE_ENTRIES + 1, 3 * PAGE_ENTRIES + 1]
    assert set(table.items) == {("h", p.first) for p in table.pages.holds}
    assert table.read()[0] == holds_of(positions)


operations = st.lists(
    st.tuples(st.sampled_from(["grant", "end", "join", "leave"]), st.integers(1, 150)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_regrouping_only_the_touched_pages_plans_what_regrouping_all_plans(ops):
    """A commit regroups only the pages entries left or joined (the store's way, with the
    pages it holds): the same pages written, kept and deleted as regrouping every entry."""
    table = PageTable()
    holds: tuple[Hold, ...] = holds_of(list(range(1, 301)))
    waiting: tuple[Waiting, ...] = waiting_of(list(range(1, 201)))
    table.commit(holds, waiting)
    position, arrival = 300, 200
    for op, n in ops:
        # the engine keeps the entries it does not change: the same objects
        if op == "grant":
            holds = joined([*holds, *holds_of(list(range(position + 1, position + n + 1)))], [])[0]
            position += n
        elif op == "end":
            holds = tuple(h for i, h in enumerate(holds) if i % max(1, 150 // n) != 1)
        elif op == "join":
            waiting = (*waiting, *waiting_of(list(range(arrival + 1, arrival + n + 1))))
            arrival += n
        else:
            waiting = waiting[n:]
        assert table.pages is not None
        held = {
            (p.kind, p.first): decode_page(p.kind, table.items[(p.kind, p.first)][1])
            for p in table.pages.all()
        }
        version = table.version + 1
        whole = plan_pages(table.pages, table.lineup, (holds, waiting), version)
        touched = plan_pages(
            table.pages,
            table.lineup,
            (holds, waiting),
            version,
            contents=lambda page, held=held: held.get((page.kind, page.first)),
        )
        assert touched == whole
        table.commit(holds, waiting)
        if table.pages is None:
            break
        assert table.read() == (holds, waiting)

"""The lineup: an event's current holds and its waitlist, as stored on the event item.

The stream processor's commit writes it (``Attr.LINEUP``) with the counters, in the same
conditional write, so the lifecycle engine (``turnstile.engine.lifecycle``) finds the event's
whole state in one read. It is zlib-compressed JSON with a format tag:

    {"f": 1, "h": [[signup, seats, position, expires_at_ms], ...],
             "w": [[signup, seats, arrival_sequence_number], ...]}

holds in (expiry, position) order, the waitlist in waitlist order. An event with neither
has no lineup. Its size is bounded by the event's options (``MAX_LINEUP_ENTRIES``).
"""

from __future__ import annotations

import bisect
import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from turnstile.engine.lifecycle import Hold, Waiting

__all__ = [
    "INLINE_BYTES",
    "MAX_ENCODED_ENTRIES",
    "PAGE_ENTRIES",
    "Page",
    "PagePlan",
    "Pages",
    "decode_lineup",
    "decode_page",
    "encode_lineup",
    "encode_page",
    "is_paged",
    "joined",
    "plan_pages",
]

FORMAT = 1


def encode_lineup(holds: tuple[Hold, ...], waiting: tuple[Waiting, ...]) -> bytes | None:
    """The stored lineup, or None when there is nothing to store."""
    if not holds and not waiting:
        return None
    doc = {
        "f": FORMAT,
        "h": [[h.signup_id, h.seats, h.position, h.expires_at] for h in holds],
        "w": [[w.signup_id, w.seats, w.arrival] for w in waiting],
    }
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    return zlib.compress(text.encode("utf-8"), 9)


def decode_lineup(blob: Any) -> tuple[tuple[Hold, ...], tuple[Waiting, ...]]:
    """The holds and the waitlist of a stored lineup (None: both empty)."""
    if blob is None:
        return (), ()
    doc = json.loads(zlib.decompress(bytes(blob)).decode("utf-8"))
    if doc.get("f") != FORMAT:
        raise ValueError(f"lineup format {doc.get('f')!r} is not one this code reads")
    holds = tuple(Hold(str(s), int(n), int(p), int(e)) for s, n, p, e in doc["h"])
    waiting = tuple(Waiting(str(s), int(n), str(a)) for s, n, a in doc["w"])
    return holds, waiting


# -- a long lineup, in pages --------------------------------------------------------------
#
# A lineup longer than ``INLINE_BYTES`` encoded lives in page items of its own: each
# holds the entries of one kind ("h": holds, by position; "w": the waitlist, by arrival
# sequence number) whose keys start at the page's ``first``, up to the next page's. New
# entries take the greatest keys, so they join the last page, and a new page starts once
# it holds ``PAGE_ENTRIES``: a commit rewrites the pages its changes touch (the tail, and
# the pages a confirm, a cancel or a lapse took an entry from), never the whole lineup.
# A page left small is merged with a neighbour when the two fit one page, so a lineup
# thinned out keeps few pages, not one for each entry left (``_merge``); a page past its
# size is cut (``_split``): the tail, or one that entries joined out of key order.
# The event item keeps the directory (``Pages``): each page's first key and the version of
# the commit that wrote it, which is how a reader knows a page it holds is current.

#: A lineup whose encoding (``encode_lineup``) is at most this many bytes stays on the
#: event item, as every lineup did before pages; a paged one comes back once its encoding
#: is down to half of it. Below it, writing the lineup with the item costs less than a
#: transaction of the item and a page (twice the write units of each).
INLINE_BYTES = 8192
#: A lineup of more entries than this is not even encoded whole: it is paged.
MAX_ENCODED_ENTRIES = 2000
#: The most entries a page is given (at the tail; a middle page shrinks, or takes its
#: neighbour's entries when they fit).
PAGE_ENTRIES = 100
HOLDS, WAITING = "h", "w"


@dataclass(frozen=True)
class Page:
    """One page of a paged lineup: its kind, its first key, and the event version whose
    commit wrote it."""

    kind: str
    first: int
    version: int


@dataclass(frozen=True)
class Pages:
    """A paged lineup's directory, as the event item keeps it (``Attr.LINEUP_PAGES``)."""

    holds: tuple[Page, ...] = ()
    waiting: tuple[Page, ...] = ()

    def all(self) -> tuple[Page, ...]:
        return self.holds + self.waiting

    def encode(self) -> bytes:
        doc = {
            "f": FORMAT,
            HOLDS: [[p.first, p.version] for p in self.holds],
            WAITING: [[p.first, p.version] for p in self.waiting],
        }
        return zlib.compress(json.dumps(doc, separators=(",", ":")).encode("ascii"), 9)

    @classmethod
    def decode(cls, blob: Any) -> Pages:
        doc = json.loads(zlib.decompress(bytes(blob)).decode("ascii"))
        if doc.get("f") != FORMAT:
            raise ValueError(f"lineup pages format {doc.get('f')!r} is not one this code reads")
        return cls(
            holds=tuple(Page(HOLDS, int(f), int(v)) for f, v in doc[HOLDS]),
            waiting=tuple(Page(WAITING, int(f), int(v)) for f, v in doc[WAITING]),
        )


def entry_key(entry: Hold | Waiting) -> int:
    """What orders an entry into its page: a hold's position, a waiting signup's arrival."""
    return entry.position if isinstance(entry, Hold) else int(entry.arrival)


def encode_page(entries: Sequence[Hold | Waiting]) -> bytes:
    """A page's entries, as its item keeps them (zlib-compressed JSON)."""
    rows = [
        [e.signup_id, e.seats, e.position, e.expires_at]
        if isinstance(e, Hold)
        else [e.signup_id, e.seats, e.arrival]
        for e in entries
    ]
    text = json.dumps({"f": FORMAT, "e": rows}, separators=(",", ":"), ensure_ascii=False)
    return zlib.compress(text.encode("utf-8"), 6)


def decode_page(kind: str, blob: Any) -> tuple[Hold, ...] | tuple[Waiting, ...]:
    doc = json.loads(zlib.decompress(bytes(blob)).decode("utf-8"))
    if doc.get("f") != FORMAT:
        raise ValueError(f"lineup page format {doc.get('f')!r} is not one this code reads")
    if kind == HOLDS:
        return tuple(Hold(str(s), int(n), int(p), int(e)) for s, n, p, e in doc["e"])
    return tuple(Waiting(str(s), int(n), str(a)) for s, n, a in doc["e"])


def joined(
    holds: Sequence[Hold], waiting: Sequence[Waiting]
) -> tuple[tuple[Hold, ...], tuple[Waiting, ...]]:
    """A paged lineup's entries, every page's together, in the engine's orders: holds by
    (expiry, position), the waitlist by arrival (the order it is joined in: the stream's)."""
    return (
        tuple(sorted(holds, key=lambda h: (h.expires_at, h.position))),
        tuple(sorted(waiting, key=lambda w: int(w.arrival))),
    )


@dataclass(frozen=True)
class PagePlan:
    """What a commit writes of its lineup when it is paged, or stops being."""

    #: The directory after the commit (None: the lineup is back on the event item).
    pages: Pages | None
    #: The pages written (every page whose entries changed, at the commit's version).
    writes: tuple[tuple[Page, bytes], ...] = ()
    #: The pages deleted (emptied, or all of them when the lineup goes back).
    deletes: tuple[Page, ...] = ()


def is_paged(before: Pages | None, inline_bytes: int | None) -> bool:
    """Whether a lineup whose encoding is ``inline_bytes`` long (None: too long to encode)
    lives in pages after a commit (``before``: its directory before it, None when it was
    on the event item)."""
    if inline_bytes is None:
        return True
    return inline_bytes > (INLINE_BYTES // 2 if before is not None else INLINE_BYTES)


def plan_pages(
    before: Pages | None,
    old: tuple[Sequence[Hold], Sequence[Waiting]],
    new: tuple[Sequence[Hold], Sequence[Waiting]],
    version: int,
    paged: bool = True,
    contents: Callable[[Page], Sequence[Any] | None] | None = None,
) -> PagePlan:
    """The pages a commit at ``version`` writes and deletes for the lineup to go from
    ``old`` (as ``before`` pages it; ignored when ``before`` is None) to ``new``, in pages
    if ``paged`` (``is_paged``), else back on the event item.

    ``contents``: each page's entries as ``before`` has them (None for one it cannot
    tell). Given, only the pages that entries left or joined are regrouped (what a commit
    of a long lineup changes), not the whole lineup; else every entry is."""
    if not paged:
        return PagePlan(None, (), before.all() if before is not None else ())
    writes: list[tuple[Page, bytes]] = []
    deletes: list[Page] = []
    directory: dict[str, tuple[Page, ...]] = {}
    for kind, was, now, pages in (
        (HOLDS, old[0], new[0], before.holds if before else ()),
        (WAITING, old[1], new[1], before.waiting if before else ()),
    ):
        touched = _touched(pages, was, now, contents) if pages and contents else None
        if touched is None:
            old_pages = _assigned(pages, was) if pages else {}
            new_pages = _split(_assigned(pages, now) if pages else {}, now, pages)
        else:
            old_pages, new_pages = touched
        if pages:
            _merge(pages, old_pages, new_pages, contents if touched is not None else None)
        kept: list[Page] = []
        for page in pages:
            if touched is not None and page.first not in new_pages and page.first in old_pages:
                continue  # emptied: deleted below
            if touched is not None and page.first not in old_pages:
                kept.append(page)  # untouched
        for first in sorted(new_pages):
            entries = new_pages[first]
            previous = next((p for p in pages if p.first == first), None)
            if previous is not None and old_pages.get(first) == entries:
                kept.append(previous)
                continue
            page = Page(kind, first, version)
            kept.append(page)
            writes.append((page, encode_page(entries)))
        if touched is None:
            deletes += [p for p in pages if p.first not in new_pages]
        else:
            deletes += [p for p in pages if p.first in old_pages and p.first not in new_pages]
        directory[kind] = tuple(sorted(kept, key=lambda p: p.first))
    return PagePlan(Pages(directory[HOLDS], directory[WAITING]), tuple(writes), tuple(deletes))


def _touched(
    pages: Sequence[Page],
    was: Sequence[Any],
    now: Sequence[Any],
    contents: Callable[[Page], Sequence[Any] | None],
) -> tuple[dict[int, list[Any]], dict[int, list[Any]]] | None:
    """The pages entries left or joined: their entries before and after (a page emptied is
    absent after), each cut as ``_split`` cuts a page past its size; None when ``contents``
    cannot tell a touched page's entries. An entry the engine kept is the same object
    before and after, so what changed is found without hashing every entry."""
    kept_ids = {id(e) for e in now}
    was_ids = {id(e) for e in was}
    left = [e for e in was if id(e) not in kept_ids]
    joined_ = [e for e in now if id(e) not in was_ids]
    if not left and not joined_:
        return {}, {}
    firsts = [p.first for p in pages]
    by_first = {p.first: p for p in pages}

    def page_of(entry: Any) -> int:
        return firsts[max(bisect.bisect_right(firsts, entry_key(entry)) - 1, 0)]

    gone = set(left)
    before: dict[int, list[Any]] = {}
    after: dict[int, list[Any]] = {}
    for first in {page_of(e) for e in left} | {page_of(e) for e in joined_}:
        held = contents(by_first[first])
        if held is None:
            return None
        before[first] = sorted(held, key=entry_key)
        after[first] = [e for e in before[first] if e not in gone]
    for entry in joined_:
        after[page_of(entry)].append(entry)
    for first in after:
        after[first].sort(key=entry_key)
    after = _split(after, (), pages)
    return before, {first: entries for first, entries in after.items() if entries}


def _assigned(pages: Sequence[Page], entries: Sequence[Any]) -> dict[int, list[Any]]:
    """``entries`` by the page each belongs to (the greatest first key not above its own,
    else the first page), each page's in key order; pages left empty are not there."""
    firsts = [p.first for p in pages]
    out: dict[int, list[Any]] = {}
    for entry in sorted(entries, key=entry_key):
        at = bisect.bisect_right(firsts, entry_key(entry)) - 1
        out.setdefault(firsts[max(at, 0)], []).append(entry)
    return out


def _split(
    assigned: dict[int, list[Any]], entries: Sequence[Any], pages: Sequence[Page]
) -> dict[int, list[Any]]:
    """``entries`` in pages of ``PAGE_ENTRIES`` when there were no pages before; else the
    pages of ``assigned`` (each page's entries, in key order) with each one past
    ``PAGE_ENTRIES`` cut into pages of that many: the tail, where new entries join, or any
    page entries joined out of key order (a waiting signup whose arrival is below the last
    page's first key: records of one event decided out of stream order). The cut pages
    start at keys above the page's own first key, so no key names two pages: the entries
    keyed at or below it (only the first page has any below) stay in the page."""
    if not pages:
        ordered = sorted(entries, key=entry_key)
        return {
            entry_key(ordered[i]): ordered[i : i + PAGE_ENTRIES]
            for i in range(0, len(ordered), PAGE_ENTRIES)
        }
    out = dict(assigned)
    for first, held in assigned.items():
        if len(held) <= PAGE_ENTRIES:
            continue
        low = [e for e in held if entry_key(e) <= first]
        rest = [e for e in held if entry_key(e) > first]
        room = max(PAGE_ENTRIES - len(low), 0)
        out[first] = low + rest[:room]
        for i in range(room, len(rest), PAGE_ENTRIES):
            out[entry_key(rest[i])] = rest[i : i + PAGE_ENTRIES]
    return out


def _merge(
    pages: Sequence[Page],
    old_pages: dict[int, list[Any]],
    new_pages: dict[int, list[Any]],
    contents: Callable[[Page], Sequence[Any] | None] | None,
) -> None:
    """Merge, in place, each two neighbouring pages whose entries fit one page
    (``PAGE_ENTRIES``) when one of them changed, or a page emptied between them: the right
    one's entries join the left one (whose key range they continue), and the right one is
    deleted. Without it, a lineup thinned out (confirms, cancels, lapses taking most of
    each page) would keep a page for each entry left: a directory as long as the lineup,
    and a commit touching as many pages as entries (past a transaction's 100 items). With
    it, no two neighbours fit one page: at most about two pages for each ``PAGE_ENTRIES``
    entries.

    ``old_pages``/``new_pages``: the entries before and after of the pages the commit
    touched (every page, when ``contents`` is None); an untouched page a merge takes part
    in is added to both. ``contents``: an untouched page's entries (None when it cannot
    tell: that page takes part in no merge)."""
    changed = {
        first
        for first in old_pages.keys() | new_pages.keys()
        if old_pages.get(first) != new_pages.get(first)
    }
    if not changed:
        return
    by_first = {p.first: p for p in pages}
    gone = sorted(first for first in changed if first not in new_pages)
    surviving = sorted({p.first for p in pages if p.first not in changed} | set(new_pages))

    def entries_of(first: int) -> list[Any] | None:
        if first in new_pages:
            return new_pages[first]
        held = contents(by_first[first]) if contents is not None else None
        return None if held is None else sorted(held, key=entry_key)

    left: int | None = None
    for first in surviving:
        if left is not None and (
            left in changed
            or first in changed
            or bisect.bisect_left(gone, left) != bisect.bisect_left(gone, first)
        ):
            a, b = entries_of(left), entries_of(first)
            if a is not None and b is not None and len(a) + len(b) <= PAGE_ENTRIES:
                if left in by_first:
                    old_pages.setdefault(left, a)
                if first in by_first:
                    old_pages.setdefault(first, b)
                new_pages[left] = sorted([*a, *b], key=entry_key)
                new_pages.pop(first, None)
                changed.add(left)
                continue
        left = first

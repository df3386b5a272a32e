"""A long lineup in page items of its own: read for the processor, written by its commit.

An event's holds and waitlist live on its event item (``Attr.LINEUP``) while they are
short. Past ``INLINE_BYTES`` encoded they live in pages (``turnstile.engine.lineup``: which
entries each page holds, and which pages a commit rewrites), items of the control table
under ``ControlKey.lineup_page``, and the event item keeps their directory
(``Attr.LINEUP_PAGES``). A commit writes the pages its changes touch in the same
transaction as the event item, so the directory and the pages always agree at every
version; each page keeps the version that wrote it.

Reading (``load_lineup``): a processor keeps the pages it read or wrote, by their key and
version, so a warm one reads only the pages another processor rewrote since. A page found
at another version than the directory names was rewritten by a later commit: the event is
read again (``CommitConflictError``), never decided from a lineup of two versions.

An event item written by this code with pages also carries ``PAGED_LINEUP`` as its
``Attr.LINEUP``: a processor of a version before pages cannot read it, so it parks the
event (as for any lineup it cannot read) rather than deciding from an empty lineup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any

from turnstile.base.contract import Attr, ControlKey
from turnstile.base.errors import CommitConflictError
from turnstile.engine.lifecycle import Event, Hold, Waiting
from turnstile.engine.lineup import (
    HOLDS,
    Page,
    PagePlan,
    Pages,
    decode_page,
    is_paged,
    joined,
    plan_pages,
)
from turnstile.storage.dynamo import control_key, event_key
from turnstile.storage.events import EventRecord

__all__ = ["MAX_PAGES_HELD", "PAGED_LINEUP", "LineupPageError", "LineupPages", "LineupWrite"]

#: ``Attr.LINEUP`` of an event item whose lineup is in pages: not a lineup any version
#: reads (``decode_lineup`` refuses it), so an older processor parks the event.
PAGED_LINEUP = b"paged"
#: The most pages one store keeps read (beyond it, it forgets them all and reads again).
MAX_PAGES_HELD = 4096
#: The most events whose whole paged lineup one store keeps joined.
MAX_LINEUPS_HELD = 64
#: Attributes of a page item.
PAGE_VERSION = "v"
PAGE_ENTRIES_ATTR = "page"


class LineupWrite:
    """What a commit writes of its event's lineup: the event item's lineup attributes and
    the page items to put and delete in its transaction."""

    def __init__(self, event_id: str, plan: PagePlan | None, lineup: bytes | None) -> None:
        self.event_id = event_id
        #: None: the lineup is (and was) on the item alone.
        self.plan = plan
        #: ``Attr.LINEUP`` to set (None: remove it).
        self.lineup = lineup

    @property
    def pages(self) -> bytes | None:
        """``Attr.LINEUP_PAGES`` to set (None: remove it)."""
        return self.plan.pages.encode() if self.plan and self.plan.pages else None

    def actions(self, table: str) -> list[dict[str, Any]]:
        """The transaction's page puts and deletes."""
        if self.plan is None:
            return []
        out: list[dict[str, Any]] = []
        for page, blob in self.plan.writes:
            key = control_key(ControlKey.lineup_page(self.event_id, page.kind, page.first))
            item = {
                **key,
                PAGE_VERSION: {"N": str(page.version)},
                PAGE_ENTRIES_ATTR: {"B": blob},
            }
            out.append({"Put": {"TableName": table, "Item": item}})
        for page in self.plan.deletes:
            key = control_key(ControlKey.lineup_page(self.event_id, page.kind, page.first))
            out.append({"Delete": {"TableName": table, "Key": key}})
        return out


class LineupPages:
    """The page items of long lineups; a part of ``SignupStore`` (``dynamo``,
    ``control_table``)."""

    dynamo: Any
    control_table: str

    def _held_pages(self) -> dict[tuple[str, str, int], tuple[int, tuple[Any, ...]]]:
        held = self.__dict__.get("_lineup_pages_held")
        if held is None or len(held) > MAX_PAGES_HELD:
            held = self.__dict__["_lineup_pages_held"] = {}
        return held

    def _directories(self) -> dict[str, tuple[int, Pages | None]]:
        """Each event's directory as last read or committed here, with its version."""
        return self.__dict__.setdefault("_lineup_directories", {})

    def load_lineup(self, record: EventRecord) -> EventRecord:
        """``record`` with its lineup whole (``ports.ProcessorStore.load_lineup``)."""
        event_id, version = record.event.event_id, record.event.version
        self._directories()[event_id] = (version, record.pages)
        created = self.__dict__.setdefault("_lineup_created", {})
        if event_id in created and created[event_id] != record.created_at:
            # an event item written again (deleted and created anew) starts its versions
            # again: a page held from before is no page of this one, whatever its version
            self._forget_lineup(event_id)
        created[event_id] = record.created_at
        if record.pages is None:
            return record
        held = self._held_pages()
        wanted = [
            p
            for p in record.pages.all()
            if held.get((event_id, p.kind, p.first), (None,))[0] != p.version
        ]
        if wanted:
            keys = [control_key(ControlKey.lineup_page(event_id, p.kind, p.first)) for p in wanted]
            found = {
                (item[ControlKey.SK]["S"]): item
                for item in self.dynamo.batch_get(self.control_table, keys)
            }
            for page in wanted:
                sk = ControlKey.lineup_page(event_id, page.kind, page.first)[1]
                item = found.get(sk)
                written = _page_version(item)
                if written != page.version:
                    raise self._torn(event_id, version, sk, written, page.version)
                try:
                    entries = decode_page(page.kind, item[PAGE_ENTRIES_ATTR]["B"])
                except Exception as exc:
                    raise LineupPageError(
                        f"event {event_id!r}: lineup page {sk} (version {written}) cannot "
                        f"be read ({type(exc).__name__}: {exc})"[:512]
                    ) from exc
                held[(event_id, page.kind, page.first)] = (page.version, entries)
        key = _directory_key(record.pages)
        last = self._joined().get(event_id)
        if last is not None and last[0] == key:
            whole = last[1]  # the lineup this store last read or committed, as it was
        else:
            holds: list[Hold] = []
            waiting: list[Waiting] = []
            for page in record.pages.all():
                entries = held[(event_id, page.kind, page.first)][1]
                (holds if page.kind == HOLDS else waiting).extend(entries)
            whole = joined(holds, waiting)
            self._remember_joined(event_id, key, whole)
        event = replace(record.event, holds=whole[0], waiting=whole[1])
        return replace(record, event=event, lineup_error=None)

    def _forget_lineup(self, event_id: str) -> None:
        """Forget every page and the whole lineup held of ``event_id``."""
        held = self._held_pages()
        for key in [k for k in held if k[0] == event_id]:
            del held[key]
        self._joined().pop(event_id, None)

    def _torn(
        self, event_id: str, version: int, sk: str, written: int | None, named: int
    ) -> Exception:
        """What a page found at another version than the directory read names (``written``;
        None: no such page, or no version) means. A later commit rewrote it, or emptied and
        deleted it: the event is read again (``CommitConflictError``), never decided from
        a lineup of two versions. But a page older than named, or missing, while the event
        item is still at the version read, is one no commit left so (deleted or written by
        hand): ``LineupPageError``, and the event is parked at once, not read again until
        the processor gives up."""
        if written is None or written < named:
            current = self.dynamo.get(self.control_table, event_key(event_id))
            moved = current is None or _whole(current.get(Attr.VERSION, 0)) != version
            if not moved:
                what = "missing" if written is None else f"at version {written}"
                return LineupPageError(
                    f"event {event_id!r}: lineup page {sk} is {what}, where the event item, "
                    f"still at version {version}, names version {named}: no commit left it so"
                )
        return CommitConflictError(
            f"event {event_id!r}: lineup page {sk} is at version {written}, the "
            f"event item read names {named}: a later commit"
        )

    def _joined(
        self,
    ) -> dict[str, tuple[tuple[Any, ...], tuple[tuple[Hold, ...], tuple[Waiting, ...]]]]:
        """Per event, the whole lineup last read or committed here, by its directory."""
        return self.__dict__.setdefault("_lineup_joined", {})

    def _remember_joined(
        self,
        event_id: str,
        key: tuple[Any, ...],
        whole: tuple[tuple[Hold, ...], tuple[Waiting, ...]],
    ) -> None:
        remembered = self._joined()
        if len(remembered) >= MAX_LINEUPS_HELD and event_id not in remembered:
            remembered.clear()
        remembered[event_id] = (key, whole)

    def _lineup_write(
        self,
        expected: Event,
        after: Event,
        lifecycle: Mapping[str, Any],
        version: int,
        room: int | None = None,
    ) -> LineupWrite:
        """What the commit at ``version`` of ``expected`` writes of the lineup ``after``
        leaves: on the item while short (``lifecycle``'s own, as before pages), else the
        pages it changes. ``room``: the page puts and deletes the commit's transaction has
        room for (None: no bound); a short lineup whose pages are more than that many
        stays in pages (a commit that deleted them all could never be written) until its
        own changes have emptied enough of them."""
        read = self._directories().get(expected.event_id)
        before = read[1] if read is not None and read[0] == expected.version else None
        lineup = lifecycle.get(Attr.LINEUP)
        encoded = None if lifecycle.get(Attr.LINEUP_PAGES) else len(lineup or b"")
        if not is_paged(before, encoded):
            if before is None:
                return LineupWrite(expected.event_id, None, lineup)
            if room is None or len(before.all()) <= room:  # back on the item: every page goes
                return LineupWrite(expected.event_id, PagePlan(None, (), before.all()), lineup)
        held = self._held_pages()
        event_id = expected.event_id

        def contents(page: Page) -> Sequence[Any] | None:
            found = held.get((event_id, page.kind, page.first))
            return found[1] if found is not None and found[0] == page.version else None

        plan = plan_pages(
            before,
            (expected.holds, expected.waiting),
            (after.holds, after.waiting),
            version,
            contents=contents,
        )
        return LineupWrite(expected.event_id, plan, PAGED_LINEUP)

    def _committed_lineup(self, write: LineupWrite, after: Event) -> None:
        """After the commit: the pages it wrote are held, the ones it deleted forgotten (the
        next read of the event names them at the versions written), and the lineup it left
        is the one a read of that directory gives."""
        if write.plan is None:
            return
        if write.plan.pages is not None:
            # as a read of these pages joins it: a waitlist joined out of arrival order (an
            # event's records decided out of stream order) is in arrival order once paged,
            # whichever processor decides next, warm or cold
            waiting = after.waiting
            if any(int(a.arrival) > int(b.arrival) for a, b in pairwise(waiting)):
                waiting = joined((), waiting)[1]
            whole = (after.holds, waiting)
            self._remember_joined(write.event_id, _directory_key(write.plan.pages), whole)
        held = self._held_pages()
        for page in write.plan.deletes:
            held.pop((write.event_id, page.kind, page.first), None)
        for page, blob in write.plan.writes:
            held[(write.event_id, page.kind, page.first)] = (
                page.version,
                decode_page(page.kind, blob),
            )


class LineupPageError(ValueError):
    """A lineup page no commit left as it is (missing, older than its directory names, or
    unreadable): the processor parks the event rather than decide from it."""


def _page_version(item: Mapping[str, Any] | None) -> int | None:
    """A page item's version (typed), None when there is no item or no number."""
    value = (item or {}).get(PAGE_VERSION)
    number = value.get("N") if isinstance(value, Mapping) else None
    return _whole(number)


def _whole(value: Any) -> int | None:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError, ArithmeticError):
        return None


def _directory_key(pages: Pages) -> tuple[Any, ...]:
    """What names one state of a paged lineup: every page with the version that wrote it."""
    return tuple((p.kind, p.first, p.version) for p in pages.all())


def page_keys(event_id: str, pages: Sequence[Page]) -> list[dict[str, Any]]:
    """The keys of ``pages`` of ``event_id`` (the audit's and the tests')."""
    return [control_key(ControlKey.lineup_page(event_id, p.kind, p.first)) for p in pages]

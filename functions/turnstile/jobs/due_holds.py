"""Releasing due holds: wake every event that has a step due.

The lifecycle engine lapses a hold only when a step of its event runs (docs/lifecycle.md
§5). An event with no traffic would keep a lapsed hold's seats. So every commit of an event
that holds seats writes, on its event item, ``hold_due_at`` (the earliest
``hold_expires_at``, epoch ms) and ``hold_due_shard`` (``DUE_HOLDS_SHARD``): the key of the
control table's sparse ``due-holds`` index. A parked event's marker (an event whose
deciding failed, its records parked) is in the same index, due when its release should be tried.
``release_due_holds`` reads the index for what is due by ``now_ms`` and wakes each event:
a write of its wake-up item (``ControlKey.wake``), turnstile's own, whose record on the
control table's stream the processor takes as a tick of the event (or a release, if the
event is parked). It decides nothing itself, and touches nothing a producer wrote.

Run every second by ``turnstile local`` and every minute on AWS
(``turnstile.handlers.due_holds``). Waking twice is harmless: the second is one more tick.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from turnstile.base.contract import (
    DUE_HOLDS_INDEX,
    DUE_HOLDS_SHARD,
    Attr,
    ControlKey,
    WakeReason,
    is_event_key,
)

if TYPE_CHECKING:
    from turnstile.storage.store import SignupStore

__all__ = ["due_events", "release_due_holds"]

log = logging.getLogger(__name__)


def due_events(store: SignupStore, now_ms: int) -> Iterator[dict[str, Any]]:
    """The ``due-holds`` index's entries due by ``now_ms``, earliest first, page by page.

    One Query of the one shard (``hold_due_at <= :now``); eventually consistent, as an index
    is: an event whose hold was granted a moment ago may be missing, and is not due anyway;
    one whose hold lapsed or was confirmed a moment ago may still be there, and costs one
    tick.
    """
    return store.dynamo.items(
        "query",
        TableName=store.control_table,
        IndexName=DUE_HOLDS_INDEX.name,
        KeyConditionExpression="#shard = :shard AND #due <= :now",
        ExpressionAttributeNames={
            "#shard": DUE_HOLDS_INDEX.partition_key,
            "#due": Attr.HOLD_DUE_AT,
        },
        ExpressionAttributeValues={
            ":shard": {"S": DUE_HOLDS_SHARD},
            ":now": {"N": str(int(now_ms))},
        },
    )


def _due(entry: dict[str, Any]) -> tuple[str, str] | None:
    """The entry's event and why it is due: an event item whose earliest hold lapsed, a
    parked event's marker (a release to try), or a wake-up whose step failed (to write
    again). None when the entry is none of these, or its event
    id is not an id: the item is the processor's, but the id came from intake, and an id
    that is neither an id nor a shard key never names an item."""
    event_id = entry.get(Attr.EVENT_ID)
    if not is_event_key(event_id):
        return None
    key = (entry.get(ControlKey.PK), entry.get(ControlKey.SK))
    if key == ControlKey.event(event_id):
        return event_id, WakeReason.HOLD_DUE
    if key in (ControlKey.parking(event_id), ControlKey.wake(event_id)):
        return event_id, WakeReason.RETRY
    return None


def release_due_holds(store: SignupStore, now_ms: int, limit: int | None = None) -> int:
    """Wake every event whose earliest hold is due at ``now_ms`` (epoch milliseconds), and
    every parked event whose release is due; how many it woke.

    A wake-up is a write of the event's own wake-up item in the control table
    (``SignupStore.wake``), which no producer can reach: nothing written to intake, and
    no intake record deleted or rewritten, can keep an event from its step. An entry that
    names no event is skipped, with one log line. A failure raises: the caller's next
    period tries again. ``limit``: at most this many wake-ups.
    """
    due: dict[str, str] = {}
    for entry in due_events(store, now_ms):
        found = _due(entry)
        if found is None:
            log.warning(
                "due entry skipped: not an event item or a parking marker with a valid id "
                "(pk %.80r)",
                entry.get(ControlKey.PK),
            )
            continue
        due.setdefault(*found)
    woken = 0
    for event_id, reason in due.items():
        if limit is not None and woken >= limit:
            break
        store.wake(event_id, reason)
        woken += 1
    return woken

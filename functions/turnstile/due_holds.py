"""Releasing due holds: make a step of every event whose earliest hold has lapsed.

The lifecycle engine lapses a hold only when a step of its event runs, and a step runs only
when a record of the event arrives (docs/lifecycle.md §5). An event with no traffic would
keep a lapsed hold's seats. So every commit of an event that holds seats writes, on its
event item, ``hold_due_at`` (the earliest ``hold_expires_at``, epoch ms), the signup that
holds it (``hold_due_signup``) and ``hold_due_shard`` (``DUE_HOLDS_SHARD``): the key of the
control table's sparse ``due-holds`` index. ``release_due_holds`` reads that index for the
events due by ``now_ms`` and re-emits the intake record of each one's holding signup
(``SignupStore.re_emit``: the bump of ``redrive`` and the ``undecided`` marker, a MODIFY the
stream filter lets through). The processor passes it as a tick, and the step's expiry
releases every hold due at the processor's own clock. It decides nothing itself.

Run every second by ``turnstile local`` and every minute on AWS
(``turnstile.handlers.due_holds``). Re-emitting twice is harmless: the second is one more
tick.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from turnstile.contract import DUE_HOLDS_INDEX, DUE_HOLDS_SHARD, ID_PATTERN, Attr, ControlKey
from turnstile.dynamo import AccessDenied
from turnstile.personal_data import signup_ref

if TYPE_CHECKING:
    from turnstile.store import SignupStore

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


def _ids(entry: dict[str, Any]) -> tuple[str, str] | None:
    """The entry's event and holding signup, or None when either is not an id (or the
    entry is not an event item's): the item is the processor's, but its ids came from
    intake, and an id outside ``ID_PATTERN`` is never used to name an item."""
    event_id = entry.get(Attr.EVENT_ID)
    signup_id = entry.get(Attr.HOLD_DUE_SIGNUP)
    if not isinstance(event_id, str) or not isinstance(signup_id, str):
        return None
    if not ID_PATTERN.match(event_id) or not ID_PATTERN.match(signup_id):
        return None
    if (entry.get(ControlKey.PK), entry.get(ControlKey.SK)) != ControlKey.event(event_id):
        return None
    return event_id, signup_id


def release_due_holds(store: SignupStore, now_ms: int, limit: int | None = None) -> int:
    """Re-emit the holding signup's intake record of every event whose ``hold_due_at`` is
    at or before ``now_ms`` (epoch milliseconds); how many it re-emitted.

    An entry is skipped, with one log line, when its ids are not ids, its signup has no
    intake record any more, or the re-emission fails (a producer wrote ``redrive`` as
    something ``ADD`` refuses); it never raises for one entry. A Query that fails raises:
    the caller's next period tries again. ``limit``: at most this many re-emissions.
    """
    re_emitted = 0
    for entry in due_events(store, now_ms):
        if limit is not None and re_emitted >= limit:
            break
        ids = _ids(entry)
        if ids is None:
            log.warning(
                "due hold skipped: not an event item with valid ids (pk %.80r)",
                entry.get(ControlKey.PK),
            )
            continue
        event_id, signup_id = ids
        # Logs name a signup by its reference, never its id (personal data).
        ref = signup_ref(event_id, signup_id)
        try:
            found = store.re_emit(event_id, signup_id)
        except AccessDenied:
            raise  # a missing grant is no bad entry: fail the run, loudly
        except Exception as exc:  # one bad entry never stops the others
            log.warning("due hold of %s (%s) not re-emitted: %s", event_id, ref, str(exc)[:200])
            continue
        if not found:
            log.warning(
                "due hold of %s (%s) not re-emitted: its intake record is gone", event_id, ref
            )
            continue
        re_emitted += 1
    return re_emitted

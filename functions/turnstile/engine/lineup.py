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

import json
import zlib
from typing import Any

from turnstile.engine.lifecycle import Hold, Waiting

__all__ = ["decode_lineup", "encode_lineup"]

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

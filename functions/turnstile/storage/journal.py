"""The journal: the decisions of one commit, fixed to the byte, and the bounds on them.

A commit (``SignupStore.commit``) stores the event's new counters and a *journal* of
exactly the decisions it made on the event item, in one conditional write; the decision
items are then *materialized* from the journal. So the journal must fix every byte of
every decision item, whatever a producer wrote into intake:

* It carries the fields a decision copies from intake (``attributes``, ``submitted_at``)
  in DynamoDB's typed form, so materializing never reads intake: a producer who rewrites
  or deletes an intake record later cannot change a decision, and binary stays binary.
* Nothing a producer writes can make an item too big to write. A decision item over
  ``MAX_DECISION_ITEM_BYTES`` (by DynamoDB's item-size rules, ``turnstile.base.itemsize``) is
  stored without its copied fields (``detail`` says so), and so is one whose journal row
  would be over ``MAX_JOURNAL_ROW_BYTES``: one decision always fits a journal.
* It is stored bzip2-compressed, as JSON with a format tag (``"f"``): ``Journal.FORMAT``
  is written, and every format written before is still read (format 1, zlib-compressed,
  has no copied fields). A new kind of row is a new format, never a change to an old one.
* Format 3 (the lifecycle, docs/lifecycle.md §10) adds to a first decision's row the
  attributes its item has beyond format 2's (a hold's expiry, a place in line, a history
  when it moved on within the commit), and a list of changes (``"u"``) to items decided
  by earlier commits, each applied only while the item's status is the one it was
  decided from.

The bound on a whole journal (``store.MAX_JOURNAL_BYTES``) is the commit's: the journal
only says how many of its decisions fit (``Journal.longest_prefix``).
"""

from __future__ import annotations

import bz2
import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from turnstile.base.contract import Attr, Status
from turnstile.storage.dynamo import typed_json, typed_json_hook
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import (
    Decision,
    ItemUpdate,
    base_item,
    bounded_copies,
    retained,
)

__all__ = ["Journal", "journal_digest"]


@dataclass(frozen=True)
class Journal:
    """The decisions of the last commit on an event item, to be materialized as items.

    ``copies`` holds, per decision, the fields its item copies from intake, in DynamoDB's
    typed form as fixed at commit time. It is None only for a journal of format 1 (written
    before journals carried them), whose items take those fields from intake.
    """

    version: int
    decided_at: str
    decisions: tuple[Decision, ...]
    copies: tuple[Mapping[str, Any], ...] | None
    #: ``copies`` as JSON, when ``build`` has it already.
    copies_json: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    #: When TTL deletes the decision items (epoch seconds); None: they are kept. Fixed at
    #: commit like every other byte of the items (header key "e", absent when None).
    expires_at: int | None = None

    #: Format 3: the lifecycle's rows (below). Format 2: rows carry the copied fields.
    #: Format 1 (no "f"): rows without them.
    FORMAT = 3
    #: Format 3: a first decision's row may end with its item's other attributes, and
    #: the journal may change items decided before (``updates``).
    extras: tuple[Mapping[str, Any] | None, ...] | None = None
    updates: tuple[ItemUpdate, ...] = ()

    _STATUS = {
        Status.ACCEPTED: "A",
        Status.REJECTED: "R",
        Status.HELD: "H",
        Status.WAITLISTED: "W",
        Status.CANCELLED: "C",
        Status.EXPIRED: "X",
    }
    _STATUS_BACK = {v: k for k, v in _STATUS.items()}

    @classmethod
    def build(
        cls,
        event_id: str,
        version: int,
        decided_at: str,
        decisions: Sequence[Decision],
        requests: Mapping[str, IntakeRecord | Mapping[str, Any]],
        expires_at: int | None = None,
        extras: Sequence[Mapping[str, Any] | None] | None = None,
        updates: Sequence[ItemUpdate] = (),
    ) -> Journal:
        """The journal of ``decisions``, each with its copied fields (bounded) fixed now,
        its ``extras`` (the lifecycle's attributes, by position) and the ``updates`` of
        items decided before."""
        more: Sequence[Mapping[str, Any] | None] = extras or [None] * len(decisions)
        bounded = [
            bounded_copies(event_id, d, decided_at, requests.get(d.signup_id), expires_at, x)
            for d, x in zip(decisions, more, strict=True)
        ]
        return cls(
            version=version,
            decided_at=decided_at,
            decisions=tuple(d for d, _, _ in bounded),
            copies=tuple(c for _, c, _ in bounded),
            copies_json=tuple(j for _, _, j in bounded),
            expires_at=expires_at,
            extras=tuple(dict(x) if x else None for x in more),
            updates=tuple(updates),
        )

    def items(self, event_id: str) -> list[dict[str, Any]]:
        """The decision items of the first decisions (a journal of format 2 or 3). A
        signup still in the event's lineup (HELD, WAITLISTED) has no ``expires_at``: TTL
        must not delete an item the event still counts on (``retained``)."""
        if self.copies is None:
            raise ValueError("a journal of format 1 takes its copied fields from intake")
        extras = self.extras or (None,) * len(self.decisions)
        return [
            {**base_item(event_id, d, self.decided_at, retained(d.status, self.expires_at), x), **c}
            for d, c, x in zip(self.decisions, self.copies, extras, strict=True)
        ]

    def retained_updates(self) -> tuple[ItemUpdate, ...]:
        """The changes, each with the item's retention as its new status asks: a move out
        of the lineup sets ``expires_at`` (this commit's: retention counts from the last
        move), a move into it removes it."""
        out = []
        for u in self.updates:
            status = u.set.get(Attr.STATUS, {}).get("S")
            if status is None:
                out.append(u)
            elif retained(status, self.expires_at) is None:
                out.append(replace(u, remove=(*u.remove, Attr.EXPIRES_AT)))
            else:
                when = {"N": str(int(self.expires_at or 0))}
                out.append(replace(u, set={**u.set, Attr.EXPIRES_AT: when}))
        return tuple(out)

    @cached_property
    def _rows(self) -> tuple[str, ...]:
        if self.copies is None:
            raise ValueError("a journal without copied fields is format 1: decode only")
        texts = self.copies_json or tuple(typed_json(c) for c in self.copies)
        extras = self.extras or (None,) * len(self.decisions)
        return tuple(
            typed_json(
                [
                    d.signup_id,
                    self._STATUS[d.status],
                    d.reason,
                    d.seats,
                    d.position,
                    d.sequence_number,
                    d.detail,
                ]
            )[:-1]
            + f",{text}"
            + (f",{typed_json(x)}]" if x else "]")
            for d, text, x in zip(self.decisions, texts, extras, strict=True)
        )

    @cached_property
    def _update_rows(self) -> tuple[str, ...]:
        return tuple(
            typed_json([u.signup_id, u.from_status, dict(u.set), list(u.remove), u.request_count])
            for u in self.updates
        )

    @cached_property
    def encoded(self) -> bytes:
        """The whole journal as stored on the event item (``encode()``, made once)."""
        return self.encode()

    def encode(self, count: int | None = None) -> bytes:
        """The journal (or its first ``count`` decisions) as stored on the event item."""
        if count is None and "encoded" in self.__dict__:
            return self.__dict__["encoded"]  # type: ignore[no-any-return]
        rows = self._rows if count is None else self._rows[:count]
        header: dict[str, Any] = {"f": self.FORMAT, "v": self.version, "t": self.decided_at}
        if self.expires_at is not None:
            header["e"] = self.expires_at
        head = typed_json(header)
        updates = f',"u":[{",".join(self._update_rows)}]' if self.updates else ""
        doc = f'{head[:-1]},"d":[{",".join(rows)}]{updates}}}'
        # bzip2: copied fields (text, mostly) come out ~30% smaller than with zlib, and
        # every KB of journal is a write unit per commit; the CPU is a few ms per commit.
        return bz2.compress(doc.encode("utf-8", "surrogatepass"), 9)

    def longest_prefix(self, limit: int) -> int:
        """How many leading decisions encode within ``limit`` bytes (at least one: a row
        is bounded by ``MAX_JOURNAL_ROW_BYTES``)."""
        if len(self.encode()) <= limit:
            return len(self.decisions)
        fits, too_many = 1, len(self.decisions)
        while too_many - fits > 1:
            middle = (fits + too_many) // 2
            if len(self.encode(middle)) <= limit:
                fits = middle
            else:
                too_many = middle
        return fits

    @classmethod
    def decode(cls, blob: bytes) -> Journal:
        """Any journal this code or an earlier one wrote (format 1 is zlib-compressed)."""
        raw = bz2.decompress(blob) if blob[:3] == b"BZh" else zlib.decompress(blob)
        # Unescaped, '"B":"' and '"BS":[' occur only in a typed binary: skip the hook if absent.
        has_binary = b'"B":"' in raw or b'"BS":[' in raw
        doc = json.loads(raw, object_hook=typed_json_hook if has_binary else None)
        fmt = doc.get("f", 1)
        if fmt not in (1, 2, cls.FORMAT):
            raise ValueError(f"journal format {fmt!r} is newer than this code")
        decisions: list[Decision] = []
        copies: list[dict[str, Any]] = []
        extras: list[dict[str, Any] | None] = []
        for row in doc["d"]:
            sid, st, reason, seats, position, seq, detail = row[:7]
            decisions.append(
                Decision(
                    signup_id=sid,
                    status=cls._STATUS_BACK[st],
                    reason=reason,
                    seats=seats,
                    position=position,
                    sequence_number=seq,
                    detail=detail,
                )
            )
            if fmt != 1:
                copies.append(row[7])
            extras.append(row[8] if len(row) > 8 else None)
        updates = tuple(
            ItemUpdate(
                signup_id=sid, from_status=st, set=fields, remove=tuple(rm), request_count=rc
            )
            for sid, st, fields, rm, rc in doc.get("u", ())
        )
        expires_at = doc.get("e")
        return cls(
            version=int(doc["v"]),
            decided_at=doc["t"],
            decisions=tuple(decisions),
            copies=tuple(copies) if fmt != 1 else None,
            expires_at=int(expires_at) if expires_at is not None else None,
            extras=tuple(extras) if fmt == 3 else None,
            updates=updates,
        )


def journal_digest(blob: bytes) -> bytes:
    """A stored journal's fingerprint: two journals of one event item with the same bytes
    are the same decisions (the version alone is not enough: an event item deleted and
    written again by hand starts its versions again)."""
    return hashlib.blake2b(blob, digest_size=16).digest()

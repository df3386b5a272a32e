"""The journal: the decisions of one commit, fixed to the byte, and the bounds on them.

A commit (``SignupStore.commit``) stores the event's new counters and a *journal* of
exactly the decisions it made on the event item, in one conditional write; the decision
items are then *materialized* from the journal. So the journal must fix every byte of
every decision item, whatever a producer wrote into intake:

* It fixes the fields a decision copies from intake (``attributes``, ``submitted_at``,
  ``owner``), in DynamoDB's typed form: a producer who rewrites or deletes an intake
  record later cannot change a decision, and binary stays binary. Formats 2 and 3 carry
  the fields; format 4 a digest of them (below).
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
* Format 4 (written now) keeps a *digest* of each decision's copied fields in place of
  the fields: they are most of a journal's bytes, and every KB of it is a write unit per
  commit. The processor that commits has the records in hand and writes the items from
  them (``Journal.copies``, in memory only). One that finds a journal left unwritten (a
  crash between the commit and its items) takes the copied fields from the records at
  hand or from intake, and copies them only if their digest is the journal's: a record
  rewritten since the commit is told, and its item is written without them, with a note
  in its ``detail``. Status, reason, seats, place, sequence number and the lifecycle's
  attributes are in the row itself, fixed to the byte as before.

The bound on a whole journal (``store.MAX_JOURNAL_BYTES``) is the commit's: the journal
only says how many of its decisions fit (``Journal.longest_prefix``).
"""

from __future__ import annotations

import base64
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
    copied_fields,
    retained,
    without_copies,
)

__all__ = ["COPIES_DIGEST_BYTES", "Journal", "copies_digest", "journal_digest"]

#: A digest of a decision's copied fields in a format-4 row: 8 bytes of BLAKE2b (11
#: characters). A rewrite is told unless it was made to collide, which only the producer
#: that wrote both versions can do, and which gives it no field it could not write itself.
COPIES_DIGEST_BYTES = 8

#: A typed set's members come in no fixed order: sorted before a digest.
_SETS = frozenset({"SS", "NS", "BS"})
_SET_TAGS = tuple(f'"{tag}":' for tag in sorted(_SETS))


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: sorted(v) if k in _SETS and isinstance(v, list) else _canonical(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def copies_digest(copies: Mapping[str, Any], text: str | None = None) -> str | None:
    """The fingerprint of a decision's copied fields (typed, as ``copied_fields`` gives
    them), whatever order DynamoDB lists a map's keys or a set's members in; None when
    there are none. ``text``: the fields' typed JSON when the caller has it, which tells
    when no set needs sorting (a key ``"SS"``, ``"NS"`` or ``"BS"`` can only be a type tag
    or a map's key: either way the slow path is taken, and gives the same digest)."""
    if not copies:
        return None
    plain = text is not None and not any(tag in text for tag in _SET_TAGS)
    text = json.dumps(
        dict(copies) if plain else _canonical(dict(copies)),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=lambda b: base64.b64encode(bytes(b)).decode("ascii"),
    )
    raw = hashlib.blake2b(
        text.encode("utf-8", "surrogatepass"), digest_size=COPIES_DIGEST_BYTES
    ).digest()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


@dataclass(frozen=True)
class Journal:
    """The decisions of the last commit on an event item, to be materialized as items.

    ``copies`` holds, per decision, the fields its item copies from intake, in DynamoDB's
    typed form as fixed at commit time: a journal built by this process, or one of format 2
    or 3 read back. A journal of format 4 read back has ``digests`` instead (one per
    decision, None where it copies nothing), and one of format 1 neither: their items take
    those fields from the records at hand or from intake (``items_from``).
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

    #: Format 4: rows carry a digest of the copied fields. Format 3: the lifecycle's rows
    #: (below), with the copied fields. Format 2: rows carry the copied fields. Format 1
    #: (no "f"): rows without them.
    FORMAT = 4
    #: Format 3 and 4: a first decision's row may end with its item's other attributes,
    #: and the journal may change items decided before (``updates``).
    extras: tuple[Mapping[str, Any] | None, ...] | None = None
    updates: tuple[ItemUpdate, ...] = ()
    #: Format 4 read back: per decision, the digest of its copied fields (None: none).
    digests: tuple[str | None, ...] | None = None

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
        """The decision items of the first decisions (a journal that holds its copied
        fields: built here, or of format 2 or 3). A signup still in the event's lineup
        (HELD, WAITLISTED) has no ``expires_at``: TTL must not delete an item the event
        still counts on (``retained``)."""
        if self.copies is None:
            raise ValueError("this journal takes its copied fields from intake: items_from")
        extras = self.extras or (None,) * len(self.decisions)
        return [
            {**base_item(event_id, d, self.decided_at, retained(d.status, self.expires_at), x), **c}
            for d, c, x in zip(self.decisions, self.copies, extras, strict=True)
        ]

    def items_from(
        self, event_id: str, sources: Mapping[str, IntakeRecord | Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The decision items of a format-4 journal read back, their copied fields taken
        from ``sources`` (the records at hand, else intake items, by signup id) where they
        are what the commit fixed (their digest is the row's); otherwise without them, and
        the item's ``detail`` says so."""
        if self.digests is None:
            raise ValueError("only a journal of format 4 is checked by digests")
        extras = self.extras or (None,) * len(self.decisions)
        items = []
        for d, digest, x in zip(self.decisions, self.digests, extras, strict=True):
            copies: dict[str, Any] = {}
            if digest is not None:
                copies = copied_fields(sources.get(d.signup_id)) or {}
                if copies_digest(copies) != digest:
                    why = "the intake record changed after the decision was committed"
                    d, copies = without_copies(d, why), {}
            base = base_item(event_id, d, self.decided_at, retained(d.status, self.expires_at), x)
            items.append({**base, **copies})
        return items

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
        if self.copies is not None:
            texts = self.copies_json or (None,) * len(self.copies)
            digests = tuple(copies_digest(c, t) for c, t in zip(self.copies, texts, strict=True))
        elif self.digests is not None:
            digests = self.digests
        else:
            raise ValueError("a journal without copied fields is format 1: decode only")
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
            + (f',"{digest}"' if digest is not None else ",null")
            + (f",{typed_json(x)}]" if x else "]")
            for d, digest, x in zip(self.decisions, digests, extras, strict=True)
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
        # bzip2: rows (ids, sequence numbers, digests) come out smaller than with zlib, and
        # every KB of journal is a write unit per commit.
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
        if fmt not in (1, 2, 3, cls.FORMAT):
            raise ValueError(f"journal format {fmt!r} is newer than this code")
        decisions: list[Decision] = []
        copies: list[dict[str, Any]] = []
        digests: list[str | None] = []
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
            if fmt == cls.FORMAT:
                digests.append(row[7])
            elif fmt != 1:
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
            copies=tuple(copies) if fmt in (2, 3) else None,
            expires_at=int(expires_at) if expires_at is not None else None,
            extras=tuple(extras) if fmt >= 3 else None,
            updates=updates,
            digests=tuple(digests) if fmt == cls.FORMAT else None,
        )


def journal_digest(blob: bytes) -> bytes:
    """A stored journal's fingerprint: two journals of one event item with the same bytes
    are the same decisions (the version alone is not enough: an event item deleted and
    written again by hand starts its versions again)."""
    return hashlib.blake2b(blob, digest_size=16).digest()

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
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from turnstile.base.contract import Attr, Status
from turnstile.base.itemsize import text_size, typed_item_size
from turnstile.engine.domain import Decision, ItemUpdate, SignupRequest
from turnstile.storage.dynamo import to_item, typed_json, typed_json_hook

__all__ = [
    "COPIED_FIELDS",
    "MAX_DECISION_ITEM_BYTES",
    "MAX_JOURNAL_ROW_BYTES",
    "Journal",
    "base_item",
    "bounded_decision",
    "decision_item",
]

#: A decision item over this (DynamoDB's item size) is stored without its copied fields.
MAX_DECISION_ITEM_BYTES = 64 * 1024
#: So is one whose journal row (JSON) would be longer than this: one decision then always
#: fits a journal, whatever its characters cost in JSON.
MAX_JOURNAL_ROW_BYTES = 128 * 1024
#: The attributes a decision item copies from its intake record.
COPIED_FIELDS = (Attr.SUBMITTED_AT, Attr.ATTRIBUTES)


#: Statuses of signups the event's lineup still holds: their items never expire.
IN_LINEUP = (Status.HELD, Status.WAITLISTED)


def retained(status: str, expires_at: int | None) -> int | None:
    """The ``expires_at`` of a decision item in ``status``: none while the signup holds
    seats or waits for them (the event's lineup names it; TTL must not delete it)."""
    return None if status in IN_LINEUP else expires_at


def _check_storable(value: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` for what the serializer accepts and DynamoDB refuses."""
    (kind, raw), *_ = value.items()
    if kind in ("SS", "NS", "BS") and not raw:
        raise ValueError("an empty set")
    if kind == "M":
        for v in raw.values():
            _check_storable(v)
    elif kind == "L":
        for v in raw:
            _check_storable(v)


def _copied_values(request: SignupRequest | Mapping[str, Any] | None) -> dict[str, Any]:
    """The copied fields of a request (or of an intake item, plain values), if present."""
    if isinstance(request, SignupRequest):
        attributes: Any = request.attributes or None
        submitted_at = request.submitted_at
        owner = request.owner
    elif request is not None:
        raw_attrs = request.get(Attr.ATTRIBUTES)
        attributes = raw_attrs if isinstance(raw_attrs, Mapping) and raw_attrs else None
        raw_sub = request.get(Attr.SUBMITTED_AT)
        submitted_at = raw_sub if isinstance(raw_sub, str) else None
        raw_owner = request.get(Attr.OWNER)
        owner = raw_owner if isinstance(raw_owner, str) and raw_owner else None
    else:
        attributes, submitted_at, owner = None, None, None
    return {Attr.SUBMITTED_AT: submitted_at, Attr.ATTRIBUTES: attributes, Attr.OWNER: owner}


def _without_copies(decision: Decision, why: str) -> Decision:
    note = f"attributes and submitted_at not stored: {why}"
    return replace(decision, detail=f"{decision.detail}; {note}" if decision.detail else note)


def base_item(
    event_id: str,
    decision: Decision,
    decided_at: str,
    expires_at: int | None = None,
    extras: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The decision item without its copied fields, typed (what ``to_item`` would give,
    built directly: this runs for every decision). ``expires_at``: when TTL deletes it."""
    item: dict[str, Any] = {
        Attr.EVENT_ID: {"S": event_id},
        Attr.SIGNUP_ID: {"S": decision.signup_id},
        Attr.STATUS: {"S": decision.status},
    }
    if decision.reason is not None:
        item[Attr.REASON] = {"S": decision.reason}
    if decision.detail is not None:
        item[Attr.DETAIL] = {"S": decision.detail}
    item[Attr.SEATS] = {"N": str(int(decision.seats))}
    if decision.position is not None:
        item[Attr.POSITION] = {"N": str(int(decision.position))}
    item[Attr.DECIDED_AT] = {"S": decided_at}
    item[Attr.SEQUENCE_NUMBER] = {"S": decision.sequence_number}
    if expires_at is not None:
        item[Attr.EXPIRES_AT] = {"N": str(int(expires_at))}
    if extras:
        item.update(extras)
    return item


def _bounded(
    event_id: str,
    decision: Decision,
    decided_at: str,
    request: SignupRequest | Mapping[str, Any] | None,
    expires_at: int | None = None,
    extras: Mapping[str, Any] | None = None,
) -> tuple[Decision, dict[str, Any], str]:
    """``bounded_decision``, and the copied fields as journal JSON."""
    try:
        copies = to_item(_copied_values(request))
        for value in copies.values():
            _check_storable(value)
    except (TypeError, ValueError, ArithmeticError) as exc:
        return _without_copies(decision, f"not storable in DynamoDB ({exc})"), {}, "{}"
    text = typed_json(copies)
    if not copies:
        return decision, copies, text
    # The JSON is never shorter than the item size (tags, quotes, base64): the exact size
    # is needed only when the JSON alone would go over.
    json_bytes = text_size(text)
    base = typed_item_size(base_item(event_id, decision, decided_at, expires_at, extras))
    if base + json_bytes > MAX_DECISION_ITEM_BYTES:
        if base + typed_item_size(copies) > MAX_DECISION_ITEM_BYTES:
            why = f"item over {MAX_DECISION_ITEM_BYTES} bytes"
            return _without_copies(decision, why), {}, "{}"
        if json_bytes > MAX_JOURNAL_ROW_BYTES - 1024:
            why = f"journal row over {MAX_JOURNAL_ROW_BYTES} bytes"
            return _without_copies(decision, why), {}, "{}"
    return decision, copies, text


def bounded_decision(
    event_id: str,
    decision: Decision,
    decided_at: str,
    request: SignupRequest | Mapping[str, Any] | None,
    expires_at: int | None = None,
) -> tuple[Decision, dict[str, Any]]:
    """The decision and its copied fields (typed), fixed now; bounded whatever the input.

    Copied fields that DynamoDB would refuse, or that would make the decision item larger
    than ``MAX_DECISION_ITEM_BYTES`` (or its journal row than ``MAX_JOURNAL_ROW_BYTES``),
    are dropped, and the decision's ``detail`` says so.
    """
    decision, copies, _ = _bounded(event_id, decision, decided_at, request, expires_at)
    return decision, copies


def decision_item(
    event_id: str,
    decision: Decision,
    decided_at: str,
    request: SignupRequest | Mapping[str, Any] | None,
    expires_at: int | None = None,
) -> dict[str, Any]:
    """The decision item exactly as the contract describes it (typed for the client),
    bounded as ``bounded_decision`` says."""
    decision, copies = bounded_decision(event_id, decision, decided_at, request, expires_at)
    return {**base_item(event_id, decision, decided_at, expires_at), **copies}


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
        requests: Mapping[str, SignupRequest | Mapping[str, Any]],
        expires_at: int | None = None,
        extras: Sequence[Mapping[str, Any] | None] | None = None,
        updates: Sequence[ItemUpdate] = (),
    ) -> Journal:
        """The journal of ``decisions``, each with its copied fields (bounded) fixed now,
        its ``extras`` (the lifecycle's attributes, by position) and the ``updates`` of
        items decided before."""
        more: Sequence[Mapping[str, Any] | None] = extras or [None] * len(decisions)
        bounded = [
            _bounded(event_id, d, decided_at, requests.get(d.signup_id), expires_at, x)
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

    def encode(self, count: int | None = None) -> bytes:
        """The journal (or its first ``count`` decisions) as stored on the event item."""
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

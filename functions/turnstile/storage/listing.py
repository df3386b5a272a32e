"""Pages of events and of an event's signups, read from DynamoDB; the page tokens.

The reads of ``usecases.list_events`` and ``usecases.list_signups`` (kept out of
``store``; they page through ``Dynamo.pages``, the one paginator, retries and all). What
each costs:

* An event's signups live in one partition of each of two tables, sorted by ``signup_id``:
  its decisions in main, its intake records in intake. A page is a ``Query`` on each
  partition from the page's start (``signup_id > :after``), merged by ``signup_id``; never
  a Scan. ``ACCEPTED``/``REJECTED`` read main only; ``PENDING`` (an intake record without a
  decision) and all read both. A filter reads the items it skips, so a page reads at most
  ``MAX_EXAMINED`` signups; past that it ends early, with a token to go on.
* Each event item is its own partition of the control table, so listing events is a
  ``Scan`` of that table, which holds a few other items too (parked events' records, the
  sweeper's lease and run history): it reads them and skips them. A projection keeps
  the events' journals out of the answer (DynamoDB charges them all the same), and the
  API's role may read nothing else of the table (``permissions.API_GRANTS``).

Every read is strongly consistent: a page shows what was written before it was read.

A token is the last key the page examined, with what the listing was (kind, event,
status), and a check value: a token that was changed or cut, or that belongs to another
listing, is refused (``InvalidRequestError``). The check value proves the token came from
this code, not who asked for it: a made-up token can only start a listing of the same
kind elsewhere, which the caller could reach by paging anyway.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from turnstile.base.contract import EVENT_LIST_ATTRIBUTES, ID_PATTERN, Attr, ControlKey, Status
from turnstile.base.errors import InvalidRequestError
from turnstile.storage.dynamo import from_item
from turnstile.storage.store import SignupStore

__all__ = [
    "MAX_EXAMINED",
    "TOKEN_REFUSED",
    "Page",
    "decode_token",
    "encode_token",
    "event_items",
    "signup_rows",
    "valid_control_key",
    "valid_signup_cursor",
]

#: The most signups (or control-table items) one page reads past its start.
MAX_EXAMINED = 1000
#: A filtered page reads ahead at least this many items per query (fewer round trips).
_MIN_BATCH = 100
_TOKEN_VERSION = 1
_MAX_TOKEN_CHARS = 4096
_CHECK_BYTES = 8
#: Not a secret: the check value catches changed tokens, it does not authenticate them.
_CHECK_KEY = b"turnstile page token"
TOKEN_REFUSED = "next is not a token this listing gave out (changed, cut or from another one)"


@dataclass
class Page:
    """Rows of one page, and the token of the next (None: this was the last)."""

    rows: list[Any] = field(default_factory=list)
    next: str | None = None


# -- tokens ---------------------------------------------------------------------------


def encode_token(payload: Mapping[str, Any]) -> str:
    raw = json.dumps({"v": _TOKEN_VERSION, **payload}, separators=(",", ":"), sort_keys=True)
    data = raw.encode("utf-8")
    check = hashlib.blake2b(data, key=_CHECK_KEY, digest_size=_CHECK_BYTES).digest()
    return base64.urlsafe_b64encode(data + check).decode("ascii").rstrip("=")


def decode_token(token: str, kind: str) -> dict[str, Any]:
    """The payload of a token of this ``kind``; ``InvalidRequestError`` for anything else."""
    if not isinstance(token, str) or not token or len(token) > _MAX_TOKEN_CHARS:
        raise InvalidRequestError([TOKEN_REFUSED])
    try:
        blob = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequestError([TOKEN_REFUSED]) from exc
    data, check = blob[:-_CHECK_BYTES], blob[-_CHECK_BYTES:]
    expected = hashlib.blake2b(data, key=_CHECK_KEY, digest_size=_CHECK_BYTES).digest()
    # The base64 must be the one we wrote, too: another spelling of the same bytes is
    # a changed token.
    if len(blob) <= _CHECK_BYTES or not hmac.compare_digest(check, expected):
        raise InvalidRequestError([TOKEN_REFUSED])
    if base64.urlsafe_b64encode(blob).decode("ascii").rstrip("=") != token:
        raise InvalidRequestError([TOKEN_REFUSED])
    try:
        payload = json.loads(data)
    except ValueError as exc:  # pragma: no cover - we only sign what we wrote
        raise InvalidRequestError([TOKEN_REFUSED]) from exc
    if (
        not isinstance(payload, dict)
        or payload.get("v") != _TOKEN_VERSION
        or payload.get("k") != kind
    ):
        raise InvalidRequestError([TOKEN_REFUSED])
    return payload


# -- reading --------------------------------------------------------------------------


class _Reader:
    """Items of one DynamoDB read (Query or Scan), page by page, only as far as asked:
    ``pages`` (``Dynamo.pages``) reads a page only when the one before is used up."""

    def __init__(self, pages: Iterator[dict[str, Any]]) -> None:
        self._pages = pages
        self._buffer: deque[dict[str, Any]] = deque()
        self._done = False

    def peek(self) -> dict[str, Any] | None:
        while not self._buffer and not self._done:
            page = next(self._pages)
            self._buffer.extend(page.get("Items", []))
            self._done = "LastEvaluatedKey" not in page
        return self._buffer[0] if self._buffer else None

    def pop(self) -> dict[str, Any]:
        return self._buffer.popleft()

    @property
    def more(self) -> bool:
        """Whether anything may follow what was taken, known without another read."""
        return bool(self._buffer) or not self._done


def _partition(
    store: SignupStore, table: str, event_id: str, after: str | None, batch: int
) -> _Reader:
    """An event's items of ``table`` (intake or main) in ``signup_id`` order, after ``after``."""

    kwargs: dict[str, Any] = {
        "TableName": table,
        "ConsistentRead": True,
        "Limit": batch,
        "KeyConditionExpression": "#pk = :pk",
        "ExpressionAttributeNames": {"#pk": Attr.EVENT_ID},
        "ExpressionAttributeValues": {":pk": {"S": event_id}},
    }
    if after is not None:
        kwargs["KeyConditionExpression"] += " AND #sk > :after"
        kwargs["ExpressionAttributeNames"]["#sk"] = Attr.SIGNUP_ID
        kwargs["ExpressionAttributeValues"][":after"] = {"S": after}
    return _Reader(store.dynamo.pages("query", **kwargs))


def _signup_id(raw: Mapping[str, Any]) -> str:
    return str(raw[Attr.SIGNUP_ID]["S"])


def signup_rows(
    store: SignupStore,
    event_id: str,
    status: str | None,
    limit: int,
    after: str | None,
) -> tuple[list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]], str | None, bool]:
    """Up to ``limit`` signups of the event after ``after`` with this ``status`` (None: any),
    as ``(signup_id, decision, intake)`` in ``signup_id`` order; the last ``signup_id``
    examined; and whether more may follow."""
    filtered = status is not None
    batch = min(MAX_EXAMINED, max(limit + 1, _MIN_BATCH)) if filtered else limit + 1
    decisions = _partition(store, store.main_table, event_id, after, batch)
    # ACCEPTED and REJECTED are decisions: intake is not read at all.
    needs_intake = status in (None, Status.PENDING)
    intake = _partition(store, store.intake_table, event_id, after, batch) if needs_intake else None
    rows: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
    last = after
    examined = 0
    while len(rows) < limit and examined < MAX_EXAMINED:
        decided = decisions.peek()
        recorded = intake.peek() if intake is not None else None
        if decided is None and recorded is None:
            break
        ids = [_signup_id(i) for i in (decided, recorded) if i is not None]
        signup_id = min(ids)
        decision = (
            from_item(decisions.pop())
            if decided is not None and _signup_id(decided) == signup_id
            else None
        )
        record = (
            from_item(intake.pop())  # type: ignore[union-attr]
            if recorded is not None and _signup_id(recorded) == signup_id
            else None
        )
        examined += 1
        last = signup_id
        current = decision.get(Attr.STATUS, Status.PENDING) if decision else Status.PENDING
        if status is None or current == status:
            rows.append((signup_id, decision, record))
    more = decisions.more or (intake is not None and intake.more)
    return rows, last, more


def event_items(
    store: SignupStore, limit: int, after: tuple[str, str] | None
) -> tuple[list[dict[str, Any]], tuple[str, str] | None, bool]:
    """Up to ``limit`` event items (the ``EVENT_LIST_ATTRIBUTES`` of each) in the control
    table's order after the key ``after``; the last key examined; whether more may follow."""
    names = {f"#a{n}": name for n, name in enumerate(EVENT_LIST_ATTRIBUTES)}
    batch = min(MAX_EXAMINED, max(limit + 1, _MIN_BATCH))

    kwargs: dict[str, Any] = {
        "TableName": store.control_table,
        "ConsistentRead": True,
        "Limit": batch,
        # The API's role may Scan only for these (dynamodb:Select, dynamodb:Attributes).
        "Select": "SPECIFIC_ATTRIBUTES",
        "ProjectionExpression": ", ".join(names),
        "ExpressionAttributeNames": names,
    }
    if after is not None:
        kwargs["ExclusiveStartKey"] = {
            ControlKey.PK: {"S": after[0]},
            ControlKey.SK: {"S": after[1]},
        }
    reader = _Reader(store.dynamo.pages("scan", **kwargs))
    items: list[dict[str, Any]] = []
    last = after
    examined = 0
    while len(items) < limit and examined < MAX_EXAMINED:
        raw = reader.peek()
        if raw is None:
            break
        reader.pop()
        examined += 1
        key = (str(raw[ControlKey.PK]["S"]), str(raw[ControlKey.SK]["S"]))
        last = key
        if key[0].startswith(ControlKey.EVENT_PREFIX) and key[1] == ControlKey.EVENT_SK:
            item = from_item(raw)
            # An event item written by hand may lack event_id; its key names it.
            item.setdefault(Attr.EVENT_ID, key[0].removeprefix(ControlKey.EVENT_PREFIX))
            items.append(item)
    return items, last, reader.more


def valid_signup_cursor(value: Any) -> bool:
    """A signup id, as every key of intake and main is (a cursor names the last one read)."""
    return isinstance(value, str) and ID_PATTERN.match(value) is not None


def valid_control_key(value: Any) -> bool:
    """A key DynamoDB takes as ExclusiveStartKey: two strings of 1 to 1,024 UTF-8 bytes."""
    if not isinstance(value, list) or len(value) != 2:
        return False
    try:
        sizes = [len(part.encode("utf-8")) for part in value if isinstance(part, str)]
    except UnicodeEncodeError:  # a lone surrogate, from a "\udXXX" escape
        return False
    return len(sizes) == 2 and all(0 < size <= 1024 for size in sizes)

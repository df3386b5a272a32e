"""Requests and capacity units, counted by wrapping boto3 clients.

Units follow DynamoDB's published on-demand rules, computed from the items themselves:

* item size = the UTF-8 bytes of every attribute name plus the size of its value;
* a write unit per 1 KB of item (rounded up, at least 1); a read unit per 4 KB (rounded up,
  at least 1), half of it for an eventually consistent read; both doubled inside
  transactions;
* PutItem, UpdateItem and DeleteItem are charged on the larger of the item before and
  after; a write whose condition fails still costs the existing item's units (at least 1);
* BatchWriteItem and BatchGetItem are charged item by item; a key that is not there still
  costs a minimum read (AWS: "a read operation on an item that does not exist consumes
  one read capacity unit", half when eventually consistent);
* Query and Scan are charged on the total size of the items read, before any filter or
  projection, rounded up to 4 KB per page;
* a write also costs write units on each global secondary index it changes (the DynamoDB
  Developer Guide, "Provisioned throughput considerations for Global Secondary Indexes",
  write capacity units): putting an entry into the index (a new item with the index key, or
  an update that sets it) one write, changing the key's value two (a delete and a put),
  removing the key attribute (or deleting the item) one, changing only projected attributes
  one, and nothing when the item is in the index neither before nor after. Each is a write
  unit per 1 KB of the index entry (the table's key, the index key and the projected
  attributes), at least one. Indexes change after a transaction completes, so an index write
  made by a transaction is counted once, not doubled like the transaction's own items.
  Index definitions come from ``turnstile.base.contract`` (the intake table's ``undecided``).

moto's ``ConsumedCapacity`` is deliberately not used: it does not follow these rules.

Item sizes before a write, and the size of items a filtered or projected read touched,
come from ``ItemSizes``: every item written through a metered client, by key. On the
benchmark's fresh tables, where every writer is metered, it is authoritative, so metering
costs no extra request to the endpoint (whose requests per second are the bottleneck); the
benchmark checks it against a full scan at the end.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from turnstile.base.contract import ALL_TABLES, Attr, ControlKey, IndexSpec
from turnstile.base.itemsize import typed_item_size, typed_value_size

__all__ = [
    "READ_BLOCK_BYTES",
    "WRITE_BLOCK_BYTES",
    "ItemSizes",
    "Meter",
    "MeterSnapshot",
    "MeteredClient",
    "attribute_value_size",
    "combine",
    "contract_indexes",
    "index_entry",
    "index_write_units",
    "item_size",
    "read_units",
    "write_units",
]

WRITE_BLOCK_BYTES = 1024
READ_BLOCK_BYTES = 4096


# -- sizes and units --------------------------------------------------------------------


#: Sizes come from the one calculator the validators use too.
attribute_value_size = typed_value_size
item_size = typed_item_size


def write_units(size: int, transactional: bool = False) -> int:
    """Write request units for an item of ``size`` bytes: one per 1 KB, at least one."""
    units = max(1, math.ceil(size / WRITE_BLOCK_BYTES))
    return units * 2 if transactional else units


def read_units(size: int, consistent: bool = True, transactional: bool = False) -> float:
    """Read request units for ``size`` bytes read: one per 4 KB (at least one block).

    Eventually consistent reads cost half; transactional reads double.
    """
    blocks = max(1, math.ceil(size / READ_BLOCK_BYTES))
    units = float(blocks) if consistent else blocks / 2
    return units * 2 if transactional else units


Item = Mapping[str, Mapping[str, Any]]


def index_entry(item: Item | None, index: IndexSpec, table_keys: tuple[str, str]) -> Item | None:
    """An item's entry in a global secondary index: the table's key, the index key and the
    projected attributes; None when the item is absent or lacks an attribute of the index
    key (sparse: an item is in the index only with its partition and sort key)."""
    keys = _index_keys(index)
    if item is None or any(k not in item for k in keys):
        return None
    if index.projection_type == "ALL":
        return dict(item)
    kept = {*table_keys, *keys}
    if index.projection_type == "INCLUDE":
        kept |= set(index.non_key_attributes)
    return {k: v for k, v in item.items() if k in kept}


def _index_keys(index: IndexSpec) -> tuple[str, ...]:
    return (index.partition_key, index.sort_key) if index.sort_key else (index.partition_key,)


def index_write_units(index: IndexSpec, before: Item | None, after: Item | None) -> int:
    """Write units one index consumes for a table write that turns its entry ``before``
    into ``after`` (None: the item is not in the index), by the rules above."""
    if before is None and after is None:
        return 0
    if before is None:
        assert after is not None
        return write_units(item_size(after))  # put into the index
    if after is None:
        return write_units(item_size(before))  # deleted from the index
    if any(before[k] != after[k] for k in _index_keys(index)):
        # The key moved (its partition or its sort key): the old entry deleted, the new
        # one put.
        return write_units(item_size(before)) + write_units(item_size(after))
    if before == after:
        return 0  # the index does not change
    return write_units(max(item_size(before), item_size(after)))  # projected values updated


def contract_indexes() -> dict[str, tuple[IndexSpec, ...]]:
    """The contract's global secondary indexes by the table names in force now (the
    environment's, as the benchmark's endpoint sets them)."""
    return {spec.name: spec.indexes for spec in ALL_TABLES if spec.indexes}


# -- the size index ---------------------------------------------------------------------

ItemKey = tuple[str, str, str]


class ItemSizes:
    """The size of every item written through a metered client, by (table, pk, sk).

    ``authoritative`` means every writer of these tables is metered, so an unknown key is
    an absent item; otherwise a metered client asks the endpoint (unmetered) instead.
    ``indexes``: the global secondary indexes by table name (default: the contract's, by
    the table names in force when it is built); for their tables the index entries of every
    item are kept too, so a write's index units need no read either.
    """

    def __init__(
        self,
        authoritative: bool = True,
        partition_key: str = Attr.EVENT_ID,
        sort_key: str = Attr.SIGNUP_ID,
        indexes: Mapping[str, Iterable[IndexSpec]] | None = None,
    ) -> None:
        self.authoritative = authoritative
        self.partition_key = partition_key
        self.sort_key = sort_key
        chosen = contract_indexes() if indexes is None else indexes
        self.indexes: dict[str, tuple[IndexSpec, ...]] = {t: tuple(i) for t, i in chosen.items()}
        self._entries: dict[ItemKey, dict[str, Item]] = {}
        self._sizes: dict[ItemKey, int] = {}
        self._largest: dict[ItemKey, int] = {}
        self._partitions: dict[tuple[str, str], list[int]] = {}  # [items, bytes]
        self._lock = threading.Lock()
        #: Key attribute names per table: the control table is keyed by (pk, sk).
        self._names: dict[str, tuple[str, str]] = {}

    def key_names(self, table: str) -> tuple[str, str]:
        return self._names.get(table, (self.partition_key, self.sort_key))

    def key(self, table: str, key_or_item: Mapping[str, Mapping[str, Any]]) -> ItemKey:
        names = self._names.get(table)
        if names is None:
            control = (ControlKey.PK, ControlKey.SK)
            names = control if all(n in key_or_item for n in control) else self.key_names(table)
            self._names[table] = names
        pk = key_or_item[names[0]]
        sk = key_or_item[names[1]]
        return table, str(next(iter(pk.values()))), str(next(iter(sk.values())))

    def get(self, key: ItemKey) -> int | None:
        with self._lock:
            return self._sizes.get(key)

    def entries(self, key: ItemKey) -> dict[str, Item]:
        """The item's entries in its table's indexes, by index name (absent: not in it)."""
        with self._lock:
            return dict(self._entries.get(key, {}))

    def entries_of(self, table: str, item: Item | None) -> dict[str, Item]:
        """What ``item`` would put into ``table``'s indexes, by index name."""
        names = self.key_names(table)
        out: dict[str, Item] = {}
        for index in self.indexes.get(table, ()):
            entry = index_entry(item, index, names)
            if entry is not None:
                out[index.name] = entry
        return out

    def set(self, key: ItemKey, size: int | None, item: Item | None = None) -> None:
        """Record an item's size after a write (None: the item is gone), and ``item``'s
        index entries (the whole item after the write) if its table has indexes."""
        if key[0] in self.indexes:
            entries = self.entries_of(key[0], item if size is not None else None)
            with self._lock:
                if entries:
                    self._entries[key] = entries
                else:
                    self._entries.pop(key, None)
        with self._lock:
            old = self._sizes.pop(key, None)
            part = self._partitions.setdefault((key[0], key[1]), [0, 0])
            if old is not None:
                part[0] -= 1
                part[1] -= old
            if size is not None:
                self._sizes[key] = size
                self._largest[key] = max(size, self._largest.get(key, 0))
                part[0] += 1
                part[1] += size

    def largest(self, key: ItemKey) -> int:
        """The largest size an item ever had (0 if never written)."""
        with self._lock:
            return self._largest.get(key, 0)

    def partition(self, table: str, pk: str) -> tuple[int, int]:
        """(items, bytes) of one partition key's items."""
        with self._lock:
            items, size = self._partitions.get((table, pk), [0, 0])
            return items, size

    def table(self, table: str) -> tuple[int, int]:
        """(items, bytes) of a whole table."""
        with self._lock:
            parts = [v for (t, _), v in self._partitions.items() if t == table]
            return sum(p[0] for p in parts), sum(p[1] for p in parts)

    def sizes(self, table: str) -> dict[tuple[str, str], int]:
        """Every known item size of a table, by (pk, sk)."""
        with self._lock:
            return {(k[1], k[2]): v for k, v in self._sizes.items() if k[0] == table}


# -- the meter ------------------------------------------------------------------------


@dataclass(frozen=True)
class MeterSnapshot:
    """What a meter counted: requests and units by operation, plus bookkeeping.

    ``write_units`` are the tables' own, by operation; ``index_write_units`` the global
    secondary indexes', by index name. ``total_write_units`` is both: what is billed.
    """

    requests: dict[str, int] = field(default_factory=dict)
    read_units: dict[str, float] = field(default_factory=dict)
    write_units: dict[str, float] = field(default_factory=dict)
    index_write_units: dict[str, float] = field(default_factory=dict)
    failed_conditional_writes: int = 0
    retry_attempts: int = 0
    unmetered_requests: int = 0
    estimated_reads: int = 0
    #: Of ``write_units``, those charged to writes whose condition failed (a cancelled
    #: transaction: every item it named), which wrote nothing.
    failed_write_units: float = 0.0

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def total_read_units(self) -> float:
        return sum(self.read_units.values())

    @property
    def table_write_units(self) -> float:
        return sum(self.write_units.values())

    @property
    def total_index_write_units(self) -> float:
        return sum(self.index_write_units.values())

    @property
    def total_write_units(self) -> float:
        return self.table_write_units + self.total_index_write_units

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": dict(sorted(self.requests.items())),
            "read_units": dict(sorted(self.read_units.items())),
            "write_units": dict(sorted(self.write_units.items())),
            "index_write_units": dict(sorted(self.index_write_units.items())),
            "failed_conditional_writes": self.failed_conditional_writes,
            "retry_attempts": self.retry_attempts,
            "unmetered_requests": self.unmetered_requests,
            "estimated_reads": self.estimated_reads,
            "failed_write_units": self.failed_write_units,
        }


class Meter:
    """Thread-safe counters shared by every client of one role (producers, processor...)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._requests: Counter[str] = Counter()
        self._read: Counter[str] = Counter()
        self._write: Counter[str] = Counter()
        self._index_write: Counter[str] = Counter()
        self._failed_conditional = 0
        self._retries = 0
        self._unmetered = 0
        self._estimated = 0
        self._failed_write = 0.0

    def record(
        self,
        operation: str,
        read: float = 0.0,
        write: float = 0.0,
        failed_conditional: bool = False,
        retries: int = 0,
        index_write: Mapping[str, float] | None = None,
    ) -> None:
        with self._lock:
            self._requests[operation] += 1 + retries
            if read:
                self._read[operation] += read
            if write:
                self._write[operation] += write
            for index, units in (index_write or {}).items():
                if units:
                    self._index_write[index] += units
            self._failed_conditional += int(failed_conditional)
            if failed_conditional:
                self._failed_write += write
            self._retries += retries

    def note_unmetered(self) -> None:
        with self._lock:
            self._unmetered += 1

    def note_estimate(self) -> None:
        with self._lock:
            self._estimated += 1

    def snapshot(self) -> MeterSnapshot:
        with self._lock:
            return MeterSnapshot(
                requests=dict(self._requests),
                read_units=dict(self._read),
                write_units=dict(self._write),
                index_write_units=dict(self._index_write),
                failed_conditional_writes=self._failed_conditional,
                retry_attempts=self._retries,
                unmetered_requests=self._unmetered,
                estimated_reads=self._estimated,
                failed_write_units=self._failed_write,
            )


# -- the wrapper ----------------------------------------------------------------------


def _retries(response: Mapping[str, Any] | None) -> int:
    meta = (response or {}).get("ResponseMetadata") or {}
    return int(meta.get("RetryAttempts", 0) or 0)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _partition_only(kwargs: Mapping[str, Any]) -> str | None:
    """The partition key value of a Query whose key condition names nothing else."""
    expression = str(kwargs.get("KeyConditionExpression") or "")
    if not expression or " and " in f" {expression.lower()} " or "between" in expression.lower():
        return None
    if "begins_with" in expression:
        return None
    values = kwargs.get("ExpressionAttributeValues") or {}
    placeholders = [p for p in values if p in expression]
    if len(placeholders) != 1:
        return None
    return str(next(iter(values[placeholders[0]].values())))


class MeteredClient:
    """A boto3 DynamoDB (or DynamoDB Streams) client that meters what goes through it.

    Every other attribute passes through, so it can stand in for the client anywhere
    (``SignupStore``, ``StreamPoller``). ``sizes`` is shared by all clients writing the
    same tables; ``None`` meters requests only (the streams client).

    To size an update it asks the item back (``ReturnValues=ALL_NEW``) where the caller
    asked for nothing. A function's role may not allow that (its attribute-restricted
    updates may return only what they name): given an ``observer`` (a client with every
    right), it sends the caller's request unchanged and reads the item back through the
    observer instead, unmetered, as the function's own requests stay exactly as deployed.
    """

    def __init__(
        self, client: Any, meter: Meter, sizes: ItemSizes | None = None, observer: Any = None
    ) -> None:
        self._client = client
        self.meter = meter
        self.sizes = sizes
        self.observer = observer

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_") or not callable(attr):
            return attr
        metered = getattr(self, f"_m_{name}", None)
        if metered is not None and self.sizes is not None:
            return metered

        def counted(**kwargs: Any) -> Any:
            response = attr(**kwargs)
            self.meter.record(name, retries=_retries(response))
            return response

        return counted

    # -- helpers ------------------------------------------------------------------------

    @property
    def _index(self) -> ItemSizes:
        assert self.sizes is not None
        return self.sizes

    def _size_before(self, table: str, key: Mapping[str, Any]) -> int:
        """An item's size now (0 when absent), from the index or an unmetered read."""
        item_key = self._index.key(table, key)
        known = self._index.get(item_key)
        if known is not None or self._index.authoritative:
            return known or 0
        self.meter.note_unmetered()
        reader = self.observer or self._client  # (the function's role may not read it)
        response = reader.get_item(TableName=table, Key=dict(key), ConsistentRead=True)
        if "Item" not in response:
            return 0
        # Known from now on, with its index entries (a write about to change it needs them).
        self._index.set(item_key, item_size(response["Item"]), response["Item"])
        return item_size(response["Item"])

    def _index_units(
        self, key: ItemKey, before: Mapping[str, Item], after: Item | None
    ) -> dict[str, float]:
        """Write units on each index of ``key``'s table for a write that leaves the item as
        ``after`` (None: deleted), its entries before the write being ``before``."""
        indexes = self._index.indexes.get(key[0], ())
        if not indexes:
            return {}
        now = self._index.entries_of(key[0], after)
        return {
            i.name: float(index_write_units(i, before.get(i.name), now.get(i.name)))
            for i in indexes
        }

    # -- single-item operations -----------------------------------------------------------

    def _m_get_item(self, **kwargs: Any) -> Any:
        response = self._client.get_item(**kwargs)
        table, key = kwargs["TableName"], kwargs["Key"]
        item = response.get("Item")
        if item is None:
            size = 0
        elif "ProjectionExpression" in kwargs or "AttributesToGet" in kwargs:
            size = self._size_before(table, key) or item_size(item)
        else:
            size = item_size(item)
        units = read_units(size, consistent=bool(kwargs.get("ConsistentRead")))
        self.meter.record("get_item", read=units, retries=_retries(response))
        return response

    def _m_put_item(self, **kwargs: Any) -> Any:
        table, item = kwargs["TableName"], kwargs["Item"]
        key = self._index.key(table, item)
        before = self._size_before(table, item)
        entries = self._index.entries(key)
        after = item_size(item)
        try:
            response = self._client.put_item(**kwargs)
        except ClientError as exc:
            self._failed_write("put_item", exc, before)
            raise
        self._index.set(key, after, item)
        self.meter.record(
            "put_item",
            write=write_units(max(before, after)),
            retries=_retries(response),
            index_write=self._index_units(key, entries, item),
        )
        return response

    def _m_update_item(self, **kwargs: Any) -> Any:
        table, key = kwargs["TableName"], kwargs["Key"]
        before = self._size_before(table, key)
        item_key = self._index.key(table, key)
        entries = self._index.entries(item_key)
        asked = kwargs.get("ReturnValues", "NONE")
        call = dict(kwargs)
        if asked == "NONE" and self.observer is None:
            # The item after the update sizes the write; the caller never sees it.
            call["ReturnValues"] = "ALL_NEW"
        try:
            response = self._client.update_item(**call)
        except ClientError as exc:
            self._failed_write("update_item", exc, before)
            raise
        if call.get("ReturnValues") == "ALL_NEW":
            new_item = response.get("Attributes") or {}
        else:
            self.meter.note_unmetered()
            reader = self.observer or self._client
            got = reader.get_item(TableName=table, Key=key, ConsistentRead=True)
            new_item = got.get("Item") or {}
        after = item_size(new_item)
        self._index.set(item_key, after, new_item)
        self.meter.record(
            "update_item",
            write=write_units(max(before, after)),
            retries=_retries(response),
            index_write=self._index_units(item_key, entries, new_item),
        )
        if asked == "NONE" and self.observer is None:
            response = {k: v for k, v in response.items() if k != "Attributes"}
        return response

    def _m_delete_item(self, **kwargs: Any) -> Any:
        table, key = kwargs["TableName"], kwargs["Key"]
        before = self._size_before(table, key)
        item_key = self._index.key(table, key)
        entries = self._index.entries(item_key)
        try:
            response = self._client.delete_item(**kwargs)
        except ClientError as exc:
            self._failed_write("delete_item", exc, before)
            raise
        self._index.set(item_key, None)
        self.meter.record(
            "delete_item",
            write=write_units(before),
            retries=_retries(response),
            index_write=self._index_units(item_key, entries, None),
        )
        return response

    def _failed_write(self, operation: str, exc: ClientError, before: int) -> None:
        """A failed condition still costs the existing item's write units; other errors
        (throttling, validation) are counted as requests without units."""
        failed = _code(exc) == "ConditionalCheckFailedException"
        self.meter.record(
            operation,
            write=write_units(before) if failed else 0.0,
            failed_conditional=failed,
            retries=_retries(exc.response),
        )

    # -- batches ------------------------------------------------------------------------

    def _m_batch_write_item(self, **kwargs: Any) -> Any:
        response = self._client.batch_write_item(**kwargs)
        unprocessed = response.get("UnprocessedItems") or {}
        units = 0.0
        index_units: Counter[str] = Counter()
        for table, requests in kwargs["RequestItems"].items():
            skipped = [self._request_key(table, r) for r in unprocessed.get(table, [])]
            for request in requests:
                key = self._request_key(table, request)
                if key in skipped:
                    continue  # not written, not charged: the caller sends it again
                before = self._size_before(table, self._key_dict(key))
                entries = self._index.entries(key)
                if "PutRequest" in request:
                    item = request["PutRequest"]["Item"]
                    after = item_size(item)
                    units += write_units(max(before, after))
                    self._index.set(key, after, item)
                else:
                    item = None
                    units += write_units(before)
                    self._index.set(key, None)
                index_units.update(self._index_units(key, entries, item))
        self.meter.record(
            "batch_write_item",
            write=units,
            retries=_retries(response),
            index_write=index_units,
        )
        return response

    def _request_key(self, table: str, request: Mapping[str, Any]) -> ItemKey:
        if "PutRequest" in request:
            return self._index.key(table, request["PutRequest"]["Item"])
        return self._index.key(table, request["DeleteRequest"]["Key"])

    def _key_dict(self, key: ItemKey) -> dict[str, Any]:
        pk, sk = self._index.key_names(key[0])
        return {pk: {"S": key[1]}, sk: {"S": key[2]}}

    def _m_batch_get_item(self, **kwargs: Any) -> Any:
        response = self._client.batch_get_item(**kwargs)
        unprocessed = response.get("UnprocessedKeys") or {}
        units = 0.0
        for table, spec in kwargs["RequestItems"].items():
            projected = "ProjectionExpression" in spec or "AttributesToGet" in spec
            returned = response.get("Responses", {}).get(table, [])
            # A projection may leave the keys out: then sizes come from the index.
            found = {} if projected else {self._index.key(table, i): i for i in returned}
            skipped = {
                self._index.key(table, k) for k in unprocessed.get(table, {}).get("Keys", [])
            }
            consistent = bool(spec.get("ConsistentRead"))
            for raw_key in spec["Keys"]:
                key = self._index.key(table, raw_key)
                if key in skipped:
                    continue
                item = found.get(key)
                if item is not None:
                    size = item_size(item)
                elif projected:
                    size = self._size_before(table, raw_key)
                else:
                    size = 0  # not there: it still costs a minimum read
                units += read_units(size, consistent=consistent)
        self.meter.record("batch_get_item", read=units, retries=_retries(response))
        return response

    # -- queries --------------------------------------------------------------------------

    def _m_query(self, **kwargs: Any) -> Any:
        response = self._client.query(**kwargs)
        self.meter.record(
            "query",
            read=self._read_size_units("query", kwargs, response),
            retries=_retries(response),
        )
        return response

    def _m_scan(self, **kwargs: Any) -> Any:
        response = self._client.scan(**kwargs)
        self.meter.record(
            "scan", read=self._read_size_units("scan", kwargs, response), retries=_retries(response)
        )
        return response

    def _read_size_units(
        self, operation: str, kwargs: Mapping[str, Any], response: Mapping[str, Any]
    ) -> float:
        """Units of one Query/Scan page: the bytes of every item it read, pre-filter."""
        table = kwargs["TableName"]
        consistent = bool(kwargs.get("ConsistentRead"))
        items = response.get("Items", [])
        scanned = int(response.get("ScannedCount", len(items)))
        whole = (
            "ExclusiveStartKey" not in kwargs
            and "LastEvaluatedKey" not in response
            and "Segment" not in kwargs
        )
        full_items = (
            "ProjectionExpression" not in kwargs
            and "FilterExpression" not in kwargs
            and kwargs.get("Select", "ALL_ATTRIBUTES") == "ALL_ATTRIBUTES"
        )
        if full_items:
            return read_units(sum(item_size(i) for i in items), consistent)
        if whole and self._index.authoritative:
            pk = _partition_only(kwargs) if operation == "query" else None
            if operation == "scan" or pk is not None:
                count, size = (
                    self._index.table(table) if pk is None else self._index.partition(table, pk)
                )
                if count == scanned:
                    return read_units(size, consistent)
        # A page of a filtered or projected read that the index cannot pin down (a write
        # landed between the read and the index): the mean item size times what DynamoDB
        # says it scanned.
        self.meter.note_estimate()
        pk = _partition_only(kwargs) if operation == "query" else None
        count, size = self._index.table(table) if pk is None else self._index.partition(table, pk)
        mean = size / count if count else 0
        return read_units(round(mean * scanned), consistent)

    # -- transactions -----------------------------------------------------------------------

    def _m_transact_write_items(self, **kwargs: Any) -> Any:
        actions = kwargs["TransactItems"]
        # kind, key, size before, the item after (a Put's), its index entries before
        plans: list[tuple[str, ItemKey, int, Item | None, dict[str, Item]]] = []
        for action in actions:
            (kind, spec), *_ = action.items()
            table = spec["TableName"]
            target = spec["Item"] if kind == "Put" else spec["Key"]
            before = self._size_before(table, target)
            key = self._index.key(table, target)
            after_item = spec["Item"] if kind == "Put" else None
            plans.append((kind, key, before, after_item, self._index.entries(key)))
        error: ClientError | None = None
        try:
            response: Any = self._client.transact_write_items(**kwargs)
        except ClientError as exc:
            # A cancelled transaction is still charged for what it touched.
            error, response = exc, exc.response
        units = 0.0
        index_units: Counter[str] = Counter()
        for kind, key, before, after_item, entries in plans:
            if kind == "Update" and error is None:
                # Transactions return no values: read the item back to size it.
                self.meter.note_unmetered()
                got = (self.observer or self._client).get_item(
                    TableName=key[0], Key=self._key_dict(key), ConsistentRead=True
                )
                after_item = got.get("Item") or {}
            after = item_size(after_item) if after_item is not None else 0
            # ConditionCheck and Delete are sized on the item as it stands.
            units += write_units(max(before, after), transactional=True)
            if error is not None or kind == "ConditionCheck":
                continue  # nothing written: no index changes
            if kind in ("Put", "Update"):
                self._index.set(key, after, after_item)
                index_units.update(self._index_units(key, entries, after_item))
            elif kind == "Delete":
                self._index.set(key, None)
                index_units.update(self._index_units(key, entries, None))
        self.meter.record(
            "transact_write_items",
            write=units,
            failed_conditional=error is not None,
            retries=_retries(response),
            index_write=index_units,
        )
        if error is not None:
            raise error
        return response

    def _m_transact_get_items(self, **kwargs: Any) -> Any:
        response = self._client.transact_get_items(**kwargs)
        units = 0.0
        for action, got in zip(
            kwargs["TransactItems"], response.get("Responses", []), strict=False
        ):
            spec = action["Get"]
            item = got.get("Item")
            size = self._size_before(spec["TableName"], spec["Key"]) if item else 0
            units += read_units(size, consistent=True, transactional=True)
        self.meter.record("transact_get_items", read=units, retries=_retries(response))
        return response


def combine(snapshots: Iterable[MeterSnapshot]) -> MeterSnapshot:
    """One snapshot that adds several up (a strategy's roles together)."""
    requests: Counter[str] = Counter()
    reads: Counter[str] = Counter()
    writes: Counter[str] = Counter()
    index_writes: Counter[str] = Counter()
    failed = retries = unmetered = estimated = 0
    failed_units = 0.0
    for s in snapshots:
        requests.update(s.requests)
        reads.update(s.read_units)
        writes.update(s.write_units)
        index_writes.update(s.index_write_units)
        failed += s.failed_conditional_writes
        retries += s.retry_attempts
        unmetered += s.unmetered_requests
        estimated += s.estimated_reads
        failed_units += s.failed_write_units
    return MeterSnapshot(
        requests=dict(requests),
        read_units=dict(reads),
        write_units=dict(writes),
        index_write_units=dict(index_writes),
        failed_conditional_writes=failed,
        retry_attempts=retries,
        unmetered_requests=unmetered,
        estimated_reads=estimated,
        failed_write_units=failed_units,
    )

"""DynamoDB's per-partition throughput, enforced as AWS enforces it: the local stack's and
(when asked) the tests' moto accept any request rate.

On AWS one partition serves at most 3,000 read units and 1,000 write units a second, in
either capacity mode, and burst capacity does not lift that ceiling ("Burst capacity can't
alleviate partition-level throttling": AWS re:Post, dynamodb-spiky-workloads-short-intervals;
the developer guide's throttling-key-range-limit-exceeded-mitigation page). A partition
here is one partition key value of a table, or of an index for a Query on it, with a token
bucket each for reads and for writes:

* refilled at ``scale`` times AWS's rate (``scale`` 0: not enforced);
* holding at most one second of it (``BURST_S``): an idle partition takes a second's worth
  at once, and no more (the 300 s of burst a provisioned table keeps is the table's, not a
  partition's);
* a request is admitted when its bucket holds its cost, or is full (a request costing more
  than a second's worth, at a small scale, still goes through after a quiet second, and
  leaves the bucket in debt); what it consumed is then taken out.

Units, by DynamoDB's rules (sizes from ``turnstile.base.itemsize``): a write costs
ceil(KB) of the larger of the item before and after it (1 at least); a read ceil(4 KB) of
the item (or, for a Query, of all the items it returns together), half that eventually
consistent; a transaction's action twice as much. A write that fails its condition still
consumes its units, as on AWS.

What a refused request gets, as DynamoDB answers it:

* GetItem, PutItem, UpdateItem, DeleteItem, Query, and a batch none of which could be
  done: HTTP 400, by the table's capacity mode (the one table of cancellation reasons AWS
  publishes, TransactWriteItems' API reference, maps them: ``ProvisionedThroughputExceeded``
  on a provisioned table, ``ThrottlingError`` on an on-demand one, with these messages, and
  AWS answers single-item requests so: a PutItem on an on-demand table,
  praetorian-inc/chariot-ui#684; a provisioned one, apache/hadoop#1814):

  - provisioned: ``ProvisionedThroughputExceededException``, "The level of configured
    provisioned throughput for the table was exceeded. Consider increasing your
    provisioning level with the UpdateTable API.";
  - on-demand (turnstile's tables): ``ThrottlingException``, "Throughput exceeds the
    current capacity of your table or index. DynamoDB is automatically scaling ...";

  each with its ``ThrottlingReasons`` (``throttlingReasons`` on ThrottlingException, as
  the API model spells it): ``TableWriteKeyRangeThroughputExceeded`` (or ``Read``, or
  ``Index...`` for an index) and the ARN of the table or index (the developer guide's
  throttling-diagnosing-workflow page). botocore retries both by itself.
* BatchWriteItem, BatchGetItem: what is over the limit comes back in ``UnprocessedItems``
  / ``UnprocessedKeys``, the rest is done ("When individual items within a BatchWriteItem
  request are throttled, DynamoDB does not propagate these throttling errors ... returns
  information about the unprocessed items").
* TransactWriteItems, TransactGetItems: ``TransactionCanceledException``, with the
  cancellation reason ``ThrottlingError`` (on-demand) or ``ProvisionedThroughputExceeded``
  (provisioned) for each throttled action and ``None`` for the others; nothing is done.

Not modelled (docs/local-stack.md): writes to an index's partitions (an item written
costs its table's partition only), Scan, adaptive capacity and split for heat, the
on-demand table's own ceiling (twice its previous peak) and account quotas.

``PartitionThroughput.serve`` is the one entry point: the embedded endpoint calls it with
each request (``server.SerializedApp``), ``enforced_in_moto`` from in-process moto's hook.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from turnstile.base.itemsize import typed_item_size
from turnstile_tools.local.limits import TARGET_PREFIX, _partition_values

__all__ = [
    "BURST_S",
    "ON_DEMAND_MESSAGE",
    "PROVISIONED_MESSAGE",
    "READ_UNITS_PER_S",
    "SCALE_ENV",
    "WRITE_UNITS_PER_S",
    "MotoTables",
    "PartitionThroughput",
    "TableView",
    "TokenBucket",
    "enforced_in_moto",
    "parse_scale",
    "read_units",
    "write_units",
]

#: AWS's ceiling of one partition, in units a second.
WRITE_UNITS_PER_S = 1000.0
READ_UNITS_PER_S = 3000.0
#: How many seconds of its rate a partition's bucket holds.
BURST_S = 1.0
#: ``turnstile local``'s environment variable for ``--partition-throughput-scale``.
SCALE_ENV = "TURNSTILE_PARTITION_THROUGHPUT_SCALE"
MAX_SCALE = 1000.0

PROVISIONED_MESSAGE = (
    "The level of configured provisioned throughput for the table was exceeded. "
    "Consider increasing your provisioning level with the UpdateTable API."
)
ON_DEMAND_MESSAGE = (
    "Throughput exceeds the current capacity of your table or index. DynamoDB is "
    "automatically scaling your table or index so please try again shortly. If exceptions "
    "persist, check if you have a hot key: "
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html"
)
PROVISIONED_TYPE = "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
THROTTLING_TYPE = "com.amazon.coral.availability#ThrottlingException"
CANCELED_TYPE = "com.amazonaws.dynamodb.v20120810#TransactionCanceledException"
CANCELED_MESSAGE = "Transaction cancelled, please refer cancellation reasons for specific reasons"

READ, WRITE = "Read", "Write"
#: Buckets kept before idle (full) ones are dropped.
_PRUNE_AT = 10_000

Response = tuple[int, dict[str, str], bytes]


def parse_scale(text: str) -> float:
    """``--partition-throughput-scale``'s value: 0 (off) or a share of AWS's rates above 0
    and at most ``MAX_SCALE``; ValueError, in words, for anything else."""
    try:
        scale = float(text)
    except (TypeError, ValueError):
        scale = math.nan
    if not (scale == 0 or 0 < scale <= MAX_SCALE):
        raise ValueError(
            f"not a throughput scale (0 for off, or a number above 0 and at most "
            f"{MAX_SCALE:g}, such as 0.02 for a fiftieth of AWS's rates): {text!r}"
        )
    return scale


def write_units(size: int) -> float:
    """Write units of an item of ``size`` bytes: one per KB begun, one at least."""
    return float(max(1, math.ceil(size / 1024)))


def read_units(size: int, consistent: bool) -> float:
    """Read units of ``size`` bytes read: one per 4 KB begun (one at least), half that
    eventually consistent."""
    units = float(max(1, math.ceil(size / 4096)))
    return units if consistent else units / 2


class TokenBucket:
    """Units a partition may still consume: ``rate`` a second, ``capacity`` at most."""

    __slots__ = ("capacity", "rate", "tokens", "updated")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.capacity = rate * BURST_S
        self.tokens = self.capacity
        self.updated = now

    def level(self, now: float) -> float:
        if now > self.updated:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
            self.updated = now
        return self.tokens

    def admits(self, units: float, now: float) -> bool:
        """Whether a request of ``units`` may go now (it fits, or the bucket is full)."""
        return self.level(now) >= min(units, self.capacity) - 1e-9

    def take(self, units: float, now: float) -> None:
        self.level(now)
        self.tokens -= units


# -- the tables -----------------------------------------------------------------------------


class TableView(Protocol):
    """What the limit needs of a table."""

    name: str
    hash_key: str
    range_key: str | None
    on_demand: bool
    arn: str
    #: Each index's partition key attribute, by index name.
    index_hash_keys: Mapping[str, str]

    def item_size(self, key: Mapping[str, Any]) -> int | None:
        """The stored item's size in bytes (DynamoDB's rules), None if there is none."""
        ...


class Tables(Protocol):
    def table(self, region: str, name: str) -> TableView | None: ...


@dataclass
class _MotoTable:
    table: Any

    @property
    def name(self) -> str:
        return str(self.table.name)

    @property
    def hash_key(self) -> str:
        return str(self.table.hash_key_attr)

    @property
    def range_key(self) -> str | None:
        return self.table.range_key_attr

    @property
    def on_demand(self) -> bool:
        return self.table.billing_mode != "PROVISIONED"

    @property
    def arn(self) -> str:
        return str(self.table.table_arn)

    @property
    def index_hash_keys(self) -> dict[str, str]:
        found = {}
        for index in [*self.table.global_indexes, *self.table.indexes]:
            for element in index.schema:
                if element["KeyType"] == "HASH":
                    found[index.name] = element["AttributeName"]
        return found

    def item_size(self, key: Mapping[str, Any]) -> int | None:
        from moto.dynamodb.models.dynamo_type import DynamoType

        try:
            hash_value = DynamoType(key[self.hash_key])
            held = self.table.items.get(hash_value)
            if held is not None and self.range_key is not None:
                held = held.get(DynamoType(key[self.range_key]))
        except (KeyError, TypeError, AttributeError):
            return None
        if held is None:
            return None
        return typed_item_size(held.to_json()["Attributes"])


class MotoTables:
    """The tables of this process's moto (the embedded endpoint's, or ``mock_aws``'s)."""

    def table(self, region: str, name: str) -> TableView | None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        if name.startswith("arn:") and ":table/" in name:
            name = name.split(":table/", 1)[1].split("/", 1)[0]
        try:
            table = dynamodb_backends[DEFAULT_ACCOUNT_ID][region].tables.get(name)
        except (KeyError, TypeError):
            return None
        return _MotoTable(table) if table is not None else None


# -- the limit ------------------------------------------------------------------------------


@dataclass
class _Refused:
    table: TableView
    operation: str
    index: str | None = None


@dataclass
class _Charge:
    """Units a request consumes on one partition."""

    bucket: TokenBucket
    units: float


@dataclass
class Stats:
    """What the limit refused: requests answered with an error, items left unprocessed."""

    refused: Counter[str] = field(default_factory=Counter)
    unprocessed: Counter[str] = field(default_factory=Counter)


class PartitionThroughput:
    """Token buckets per (table, index, partition key value), for reads and for writes.

    ``clock``: seconds, monotonic (tests give a fake one); ``tables``: where tables and
    their items are read (moto's by default). Not thread-safe: the caller serializes
    requests (the embedded endpoint holds its lock around ``serve``).
    """

    def __init__(
        self,
        scale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        tables: Tables | None = None,
    ) -> None:
        self.scale = scale
        self.clock = clock
        self.tables: Tables = tables if tables is not None else MotoTables()
        self.buckets: dict[tuple[str, str | None, str, str], TokenBucket] = {}
        self.stats = Stats()

    @property
    def enabled(self) -> bool:
        return self.scale > 0

    def bucket(self, table: str, index: str | None, operation: str, value: Any) -> TokenBucket:
        """The bucket of one partition key value (a typed value: ``{"S": "gig"}``)."""
        key = (table, index, operation, json.dumps(value, sort_keys=True))
        found = self.buckets.get(key)
        if found is None:
            if len(self.buckets) >= _PRUNE_AT:
                self._prune()
            per_s = WRITE_UNITS_PER_S if operation == WRITE else READ_UNITS_PER_S
            found = self.buckets[key] = TokenBucket(per_s * self.scale, self.clock())
        return found

    def _prune(self) -> None:
        now = self.clock()
        for key, bucket in list(self.buckets.items()):
            if bucket.level(now) >= bucket.capacity:
                del self.buckets[key]

    # -- serving ------------------------------------------------------------------------

    def serve(
        self,
        target: str,
        body: bytes,
        region: str,
        call: Callable[[bytes], Response],
    ) -> Response:
        """Answer one request: ``call`` serves a body (the request's, or the part of a
        batch that is admitted) as moto would; a refusal is answered here, as AWS does."""
        action = target.removeprefix(TARGET_PREFIX) if target.startswith(TARGET_PREFIX) else ""
        handler = _HANDLERS.get(action)
        if handler is None or not self.enabled:
            return call(body)
        try:
            params = json.loads(body)
            if not isinstance(params, dict):
                return call(body)
            plan = handler(self, params, region)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError):
            return call(body)  # malformed: DynamoDB (moto) says what is wrong with it
        return plan(action, params, body, call)

    # -- single items -------------------------------------------------------------------

    def _single(self, params: dict[str, Any], region: str) -> _Plan:
        table = self.tables.table(region, params["TableName"])
        if table is None:
            return _passthrough
        return _SinglePlan(self, table, params)

    def _query(self, params: dict[str, Any], region: str) -> _Plan:
        table = self.tables.table(region, params["TableName"])
        if table is None:
            return _passthrough
        index = params.get("IndexName")
        hash_key = table.index_hash_keys.get(index) if index else table.hash_key
        if hash_key is None:
            return _passthrough
        value = next(iter(_partition_values(params, hash_key)), None)
        if value is None:
            return _passthrough
        consistent = bool(params.get("ConsistentRead")) and not index
        bucket = self.bucket(table.name, index, READ, value)
        now = self.clock()
        if not bucket.admits(read_units(0, consistent), now):
            return _refusal(self, _Refused(table, READ, index))

        def after(status: int, response: dict[str, Any]) -> None:
            if status < 300:
                size = sum(typed_item_size(item) for item in response.get("Items") or [])
                bucket.take(read_units(size, consistent), self.clock())

        return _Serve(after)

    def _batch_write(self, params: dict[str, Any], region: str) -> _Plan:
        return self._batch(params, region, "UnprocessedItems", self._write_request)

    def _batch_get(self, params: dict[str, Any], region: str) -> _Plan:
        return self._batch(params, region, "UnprocessedKeys", self._get_request)

    def _write_request(self, table: TableView, request: Mapping[str, Any]) -> _Charge:
        if "PutRequest" in request:
            item = request["PutRequest"]["Item"]
            size = max(typed_item_size(item), table.item_size(item) or 0)
            key = item
        else:
            key = request["DeleteRequest"]["Key"]
            size = table.item_size(key) or 0
        bucket = self.bucket(table.name, None, WRITE, key[table.hash_key])
        return _Charge(bucket, write_units(size))

    def _get_request(self, table: TableView, entry: Mapping[str, Any], key: Any) -> _Charge:
        bucket = self.bucket(table.name, None, READ, key[table.hash_key])
        size = table.item_size(key) or 0
        return _Charge(bucket, read_units(size, bool(entry.get("ConsistentRead"))))

    def _batch(
        self,
        params: dict[str, Any],
        region: str,
        unprocessed_field: str,
        charge_of: Callable[..., _Charge],
    ) -> _Plan:
        now = self.clock()
        admitted: dict[str, Any] = {}
        left: dict[str, Any] = {}
        charges: list[_Charge] = []
        refused_table: TableView | None = None
        writes = unprocessed_field == "UnprocessedItems"
        for name, entry in params["RequestItems"].items():
            table = self.tables.table(region, name)
            requests = list(entry) if writes else list(entry["Keys"])
            if table is None:
                admitted[name] = entry
                continue
            kept, over = [], []
            for request in requests:
                charge = charge_of(table, request) if writes else charge_of(table, entry, request)
                if charge.bucket.admits(charge.units, now):
                    charge.bucket.take(charge.units, now)  # a later item of the batch sees it
                    charges.append(charge)
                    kept.append(request)
                else:
                    over.append(request)
                    refused_table = refused_table or table
            if kept:
                admitted[name] = kept if writes else {**entry, "Keys": kept}
            if over:
                left[name] = over if writes else {**entry, "Keys": over}
        if not left:
            return _Serve(_refund_unless_done(charges, self.clock))
        count = sum(len(v) if writes else len(v["Keys"]) for v in left.values())
        if not admitted:
            assert refused_table is not None
            return _refusal(self, _Refused(refused_table, WRITE if writes else READ))
        self.stats.unprocessed[unprocessed_field] += count
        refund = _refund_unless_done(charges, self.clock)

        def after(status: int, response: dict[str, Any]) -> None:
            refund(status, response)
            if status < 300:
                merged = response.setdefault(unprocessed_field, {})
                for name, rest in left.items():
                    if writes:
                        merged.setdefault(name, []).extend(rest)
                    elif name in merged:
                        merged[name]["Keys"].extend(rest["Keys"])
                    else:
                        merged[name] = rest

        return _Serve(after, {**params, "RequestItems": admitted})

    # -- transactions -------------------------------------------------------------------

    def _transact(self, params: dict[str, Any], region: str) -> _Plan:
        writes = "Get" not in (params["TransactItems"][0] if params["TransactItems"] else {})
        now = self.clock()
        wanted: dict[int, float] = defaultdict(float)  # by bucket: what the whole asks
        actions: list[tuple[TableView | None, TokenBucket | None, float, Mapping[str, Any]]] = []
        for action in params["TransactItems"]:
            ((kind, request),) = action.items()
            table = self.tables.table(region, request["TableName"])
            if table is None:
                actions.append((None, None, 0.0, {}))
                continue
            key = request["Item"] if kind == "Put" else request["Key"]
            old = table.item_size(key) or 0
            if writes:
                new = typed_item_size(request["Item"]) if kind == "Put" else 0
                units = 2 * write_units(max(old, new))
            else:
                units = 2 * read_units(old, True)
            bucket = self.bucket(table.name, None, WRITE if writes else READ, key[table.hash_key])
            wanted[id(bucket)] += units
            actions.append((table, bucket, units, key))
        throttled = [
            table is not None and bucket is not None and not bucket.admits(wanted[id(bucket)], now)
            for table, bucket, _, _ in actions
        ]
        if any(throttled):
            return _canceled(self, [a[0] for a in actions], throttled)

        def after(status: int, response: dict[str, Any]) -> None:
            if status >= 300:
                return
            done = self.clock()
            for table, bucket, units, key in actions:
                if table is None or bucket is None:
                    continue
                if writes:  # an update's item as it is now
                    units = max(units, 2 * write_units(table.item_size(key) or 0))
                bucket.take(units, done)

        return _Serve(after)


# -- plans: what to do with a request ------------------------------------------------------

_Plan = Callable[[str, dict[str, Any], bytes, Callable[[bytes], Response]], Response]


def _passthrough(
    action: str, params: dict[str, Any], body: bytes, call: Callable[[bytes], Response]
) -> Response:
    return call(body)


def _refund_unless_done(
    charges: list[_Charge], clock: Callable[[], float]
) -> Callable[[int, dict[str, Any]], None]:
    def refund(status: int, response: dict[str, Any]) -> None:
        if status >= 300:  # moto refused the request itself: nothing was consumed
            now = clock()
            for charge in charges:
                charge.bucket.take(-charge.units, now)

    return refund


class _Serve:
    """Serve the request (or ``params`` in its place), then ``after`` sees the answer and
    may change it (a batch's unprocessed part)."""

    def __init__(
        self,
        after: Callable[[int, dict[str, Any]], None],
        params: dict[str, Any] | None = None,
    ) -> None:
        self.after, self.params = after, params

    def __call__(
        self, action: str, params: dict[str, Any], body: bytes, call: Callable[[bytes], Response]
    ) -> Response:
        if self.params is not None:
            body = json.dumps(self.params).encode()
        status, headers, payload = call(body)
        try:
            response = json.loads(payload) if payload else {}
        except ValueError:
            return status, headers, payload
        if not isinstance(response, dict):
            return status, headers, payload
        before = json.dumps(response, sort_keys=True)
        self.after(status, response)
        if json.dumps(response, sort_keys=True) != before:
            payload = json.dumps(response).encode()
            headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
            headers["Content-Length"] = str(len(payload))
        return status, headers, payload


class _SinglePlan:
    """GetItem, PutItem, UpdateItem, DeleteItem on one partition."""

    def __init__(self, limit: PartitionThroughput, table: TableView, params: dict[str, Any]):
        self.limit, self.table, self.params = limit, table, params

    def __call__(
        self, action: str, params: dict[str, Any], body: bytes, call: Callable[[bytes], Response]
    ) -> Response:
        limit, table = self.limit, self.table
        key = params["Item"] if action == "PutItem" else params["Key"]
        old = table.item_size(key) or 0
        if action == "GetItem":
            operation = READ
            units = read_units(old, bool(params.get("ConsistentRead")))
        else:
            operation = WRITE
            new = typed_item_size(params["Item"]) if action == "PutItem" else 0
            units = write_units(max(old, new))
        bucket = limit.bucket(table.name, None, operation, key[table.hash_key])
        if not bucket.admits(units, limit.clock()):
            return _refusal(limit, _Refused(table, operation))(action, params, body, call)
        status, headers, payload = call(body)
        if status < 300 or b"ConditionalCheckFailedException" in payload:
            if action == "UpdateItem":  # the larger of the item before and after
                units = max(units, write_units(table.item_size(key) or 0))
            bucket.take(units, limit.clock())
        return status, headers, payload


def _headers() -> dict[str, str]:
    return {
        "Content-Type": "application/x-amz-json-1.0",
        "x-amzn-RequestId": uuid.uuid4().hex.upper(),
    }


def _reason(refused: _Refused) -> dict[str, str]:
    resource = refused.table.arn
    kind = "Table"
    if refused.index:
        resource, kind = f"{resource}/index/{refused.index}", "Index"
    return {
        "reason": f"{kind}{refused.operation}KeyRangeThroughputExceeded",
        "resource": resource,
    }


def refusal_body(refused: _Refused) -> dict[str, Any]:
    """AWS's answer to a request over a partition's limit, by the table's capacity mode."""
    if refused.table.on_demand:
        return {
            "__type": THROTTLING_TYPE,
            "message": ON_DEMAND_MESSAGE,
            "throttlingReasons": [_reason(refused)],
        }
    return {
        "__type": PROVISIONED_TYPE,
        "message": PROVISIONED_MESSAGE,
        "ThrottlingReasons": [_reason(refused)],
    }


def _refusal(limit: PartitionThroughput, refused: _Refused) -> _Plan:
    def plan(
        action: str, params: dict[str, Any], body: bytes, call: Callable[[bytes], Response]
    ) -> Response:
        limit.stats.refused[action] += 1
        return 400, _headers(), json.dumps(refusal_body(refused)).encode()

    return plan


def _canceled(
    limit: PartitionThroughput, tables: list[TableView | None], throttled: list[bool]
) -> _Plan:
    reasons: list[dict[str, str]] = []
    for table, over in zip(tables, throttled, strict=True):
        if not over or table is None:
            reasons.append({"Code": "None"})
        elif table.on_demand:
            reasons.append({"Code": "ThrottlingError", "Message": ON_DEMAND_MESSAGE})
        else:
            reasons.append(
                {"Code": "ProvisionedThroughputExceeded", "Message": PROVISIONED_MESSAGE}
            )
    message = f"{CANCELED_MESSAGE} [{', '.join(r['Code'] for r in reasons)}]"

    def plan(
        action: str, params: dict[str, Any], body: bytes, call: Callable[[bytes], Response]
    ) -> Response:
        limit.stats.refused[action] += 1
        payload = {"__type": CANCELED_TYPE, "CancellationReasons": reasons, "Message": message}
        return 400, _headers(), json.dumps(payload).encode()

    return plan


_HANDLERS: dict[str, Callable[[PartitionThroughput, dict[str, Any], str], _Plan]] = {
    "GetItem": PartitionThroughput._single,
    "PutItem": PartitionThroughput._single,
    "UpdateItem": PartitionThroughput._single,
    "DeleteItem": PartitionThroughput._single,
    "Query": PartitionThroughput._query,
    "BatchWriteItem": PartitionThroughput._batch_write,
    "BatchGetItem": PartitionThroughput._batch_get,
    "TransactWriteItems": PartitionThroughput._transact,
    "TransactGetItems": PartitionThroughput._transact,
}


# -- in-process moto ------------------------------------------------------------------------

_PATCHED = "turnstile_throughput"


def region_of(authorization: str, default: str = "us-east-1") -> str:
    """The region a SigV4 ``Authorization`` header's credential scope names."""
    _, found, rest = authorization.partition("Credential=")
    parts = rest.split("/")
    return parts[2] if found and len(parts) > 3 else default


@contextmanager
def enforced_in_moto(
    scale: float = 1.0, clock: Callable[[], float] = time.monotonic
) -> Iterator[PartitionThroughput]:
    """While inside, in-process moto (``mock_aws``) holds every DynamoDB request to the
    per-partition limit at ``scale``, whatever session or client sent it (the check runs
    where moto's botocore hook takes each request). Yields the limit (its buckets, its
    ``stats``). Not re-entrant: an inner one replaces the outer one until it ends."""
    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.process_request
    inner = getattr(original, "__wrapped__", original) if getattr(original, _PATCHED, 0) else None
    below = inner or original
    limit = PartitionThroughput(scale, clock)

    def process_request(self: Any, request: Any) -> Any:
        target = request.headers.get("X-Amz-Target") or ""
        if isinstance(target, bytes):  # botocore's prepared headers hold bytes
            target = target.decode("latin-1")
        body = request.body
        if not str(target).startswith(TARGET_PREFIX) or not isinstance(body, bytes | str):
            return below(self, request)
        authorization = request.headers.get("Authorization") or ""
        if isinstance(authorization, bytes):
            authorization = authorization.decode("latin-1")

        def call(sent: bytes) -> Response:
            request.body = sent
            request.headers["Content-Length"] = str(len(sent))
            answered = below(self, request)
            if answered is None:  # not moto's: cannot happen for DynamoDB
                raise RuntimeError("moto did not serve a DynamoDB request")
            status, headers, payload = answered
            if isinstance(payload, str):
                payload = payload.encode()
            return int(status), dict(headers), payload

        raw = body.encode() if isinstance(body, str) else body
        return limit.serve(str(target), raw, region_of(str(authorization)), call)

    setattr(process_request, _PATCHED, True)
    process_request.__wrapped__ = below  # type: ignore[attr-defined]
    BotocoreStubber.process_request = process_request  # type: ignore[method-assign]
    try:
        yield limit
    finally:
        BotocoreStubber.process_request = original  # type: ignore[method-assign]

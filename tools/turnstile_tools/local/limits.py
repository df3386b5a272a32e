"""DynamoDB's key and item limits, refused as AWS refuses them: the local stack's and the
tests' moto does not, on reads.

AWS answers ``ValidationException`` (HTTP 400) for

* a partition key value over 2,048 bytes, or a sort key value over 1,024 (a string's
  UTF-8, a binary's raw bytes; numbers are not sized), on every operation that takes a key:
  GetItem, PutItem, UpdateItem, DeleteItem, BatchGetItem, BatchWriteItem,
  TransactGetItems, TransactWriteItems (each action), Query's equality on the partition
  key, and the ExclusiveStartKey of a Query or a Scan; a secondary index's key attributes
  of an item written are held to the same limits;
* an empty string (or binary) key value, there too;
* an item over 400 KB (409,600 bytes, ``turnstile.base.itemsize``) written whole (PutItem,
  BatchWriteItem's PutRequest, TransactWriteItems' Put).

moto 5 refuses over-long keys on PutItem only, empty keys on some operations, items over
405,000 bytes by its own count (stricter than AWS), and an UpdateItem that would grow an
item past that (``Item size to update has exceeded the maximum allowed size``: the one
limit that needs the stored item, so it is left to moto).

``problem`` is the pure validator: an action's wire name and its JSON parameters in, AWS's
message (or None) out. Key names come from ``turnstile.base.contract.ALL_TABLES`` under the
table names in force; a table it does not know has its keys left unchecked. What it
cannot read it leaves to DynamoDB (and moto) to answer. ``wsgi_refusal`` answers for it in
the embedded endpoint (``server.SerializedApp``), ``enforced_in_moto`` in the in-process
moto of the tests.

AWS's messages, word for word (the hash key's lacks a space before 2048), as AWS's own
answers quote them in public reports (Query: facebook/ThreatExchange#1324; PutItem:
amazon-archives/dynamodb-janusgraph-storage-backend#296; PutItem's item size:
forta-network/starter-kits#252) and as dynalite's and moto's tests, recorded against AWS,
assert them on GetItem, PutItem and BatchWriteItem.
"""

from __future__ import annotations

import base64
import io
import json
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from turnstile.base.contract import (
    ALL_TABLES,
    MAX_ITEM_BYTES,
    MAX_PARTITION_KEY_BYTES,
    MAX_SORT_KEY_BYTES,
)
from turnstile.base.itemsize import text_size, typed_item_size

__all__ = [
    "ERROR_TYPE",
    "HASH_KEY_TOO_LONG",
    "ITEM_TOO_LARGE",
    "RANGE_KEY_TOO_LONG",
    "TARGET_PREFIX",
    "KeyNames",
    "empty_index_key",
    "empty_key",
    "enforced_in_moto",
    "problem",
    "refusal",
    "table_keys",
    "wsgi_refusal",
]

#: The X-Amz-Target prefix of DynamoDB's JSON protocol (Streams has its own).
TARGET_PREFIX = "DynamoDB_20120810."
#: The ``__type`` of AWS's answer; botocore reads the code after the ``#``.
ERROR_TYPE = "com.amazon.coral.validate#ValidationException"

HASH_KEY_TOO_LONG = (
    "One or more parameter values were invalid: Size of hashkey has exceeded the maximum "
    f"size limit of{MAX_PARTITION_KEY_BYTES} bytes"
)
RANGE_KEY_TOO_LONG = (
    "One or more parameter values were invalid: Aggregated size of all range keys has "
    f"exceeded the size limit of {MAX_SORT_KEY_BYTES} bytes"
)
ITEM_TOO_LARGE = "Item size has exceeded the maximum allowed size"


def empty_key(name: str, kind: str = "string") -> str:
    """AWS's message for an empty key value (``kind``: ``string`` or ``binary``)."""
    return (
        "One or more parameter values are not valid. The AttributeValue for a key attribute "
        f"cannot contain an empty {kind} value. Key: {name}"
    )


def empty_index_key(index: str, name: str, kind: str = "string") -> str:
    """AWS's message for an item written with an empty value for an index's key."""
    return (
        "One or more parameter values are not valid. A value specified for a secondary index "
        "key is not supported. The AttributeValue for a key attribute cannot contain an "
        f"empty {kind} value. IndexName: {index}, IndexKey: {name}"
    )


@dataclass(frozen=True)
class KeyNames:
    """A table's (or an index's) key attribute names, and its indexes' by index name."""

    hash_key: str
    range_key: str | None = None
    indexes: Mapping[str, KeyNames] = field(default_factory=dict)

    def sized(self) -> Iterator[tuple[str, int, str]]:
        """(attribute, most bytes, message past them) of each key attribute."""
        yield self.hash_key, MAX_PARTITION_KEY_BYTES, HASH_KEY_TOO_LONG
        if self.range_key:
            yield self.range_key, MAX_SORT_KEY_BYTES, RANGE_KEY_TOO_LONG


def table_keys() -> dict[str, KeyNames]:
    """turnstile's tables' key names, by the table name in force (``TableSpec.name``)."""
    return {
        spec.name: KeyNames(
            spec.partition_key,
            spec.sort_key,
            {i.name: KeyNames(i.partition_key, i.sort_key) for i in spec.indexes},
        )
        for spec in ALL_TABLES
    }


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def problem(action: str, params: Mapping[str, Any]) -> str | None:
    """What DynamoDB answers ``action`` (its wire name: ``GetItem``) with ``params`` (its
    JSON parameters, typed values) when they break a key or item limit; None when they
    break none, or when it cannot tell (unknown action, parameters it cannot read)."""
    check = _CHECKS.get(action)
    if check is None or not isinstance(params, Mapping):
        return None
    try:
        check(params, table_keys())
    except _Refused as refused:
        return refused.message
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None  # malformed: DynamoDB says what is wrong with it
    return None


# -- values ------------------------------------------------------------------------------


def _sized_value(value: Mapping[str, Any]) -> tuple[str, int] | None:
    """(``string`` or ``binary``, bytes) of a key value; None for a number."""
    ((kind, raw),) = value.items()
    if kind == "S":
        if not isinstance(raw, str):
            raise TypeError("not a string")
        return "string", text_size(raw)
    if kind == "B":
        if isinstance(raw, bytes | bytearray):
            return "binary", len(raw)
        return "binary", len(base64.b64decode(raw))
    return None


def _check_value(
    value: Mapping[str, Any], most: int, too_long: str, empty: Callable[[str], str]
) -> None:
    sized = _sized_value(value)
    if sized is None:
        return
    kind, size = sized
    if size == 0:
        raise _Refused(empty(kind))
    if size > most:
        raise _Refused(too_long)


def _check_key(keys: KeyNames | None, key: Mapping[str, Any]) -> None:
    """A key (GetItem's ``Key``...): each of the table's key attributes it has."""
    if keys is None:
        return
    if not isinstance(key, Mapping):
        raise TypeError("a key is a map")
    for name, most, too_long in keys.sized():
        if name in key:
            _check_value(key[name], most, too_long, lambda kind, n=name: empty_key(n, kind))


def _check_item(keys: KeyNames | None, item: Mapping[str, Any]) -> None:
    """An item written whole: its table's keys, its indexes' keys, its size."""
    if not isinstance(item, Mapping):
        raise TypeError("an item is a map")
    if keys is not None:
        _check_key(keys, item)
        for index_name, index in keys.indexes.items():
            for name, most, too_long in index.sized():
                if name in item:
                    _check_value(
                        item[name],
                        most,
                        too_long,
                        lambda kind, i=index_name, n=name: empty_index_key(i, n, kind),
                    )
    if typed_item_size(item) > MAX_ITEM_BYTES:
        raise _Refused(ITEM_TOO_LARGE)


def _check_start_key(keys: KeyNames | None, index: KeyNames | None, key: Any) -> None:
    """A Query's or a Scan's ``ExclusiveStartKey``: the table's keys and the index's."""
    if keys is None or key is None:
        return
    _check_key(keys, key)
    if index is not None:
        _check_key(index, key)


# -- tables -------------------------------------------------------------------------------


def _table(name: Any, tables: Mapping[str, KeyNames]) -> KeyNames | None:
    """The keys of the table ``name`` (a name or a table's ARN), if turnstile's."""
    if not isinstance(name, str):
        raise TypeError("no table name")
    if name.startswith("arn:") and ":table/" in name:
        name = name.split(":table/", 1)[1].split("/", 1)[0]
    return tables.get(name)


def _index(keys: KeyNames | None, name: Any) -> KeyNames | None:
    if keys is None or name is None:
        return None
    return keys.indexes.get(name)


# -- operations ---------------------------------------------------------------------------


def _keyed(params: Mapping[str, Any], tables: Mapping[str, KeyNames]) -> None:
    """GetItem, UpdateItem, DeleteItem."""
    _check_key(_table(params["TableName"], tables), params["Key"])


def _put(params: Mapping[str, Any], tables: Mapping[str, KeyNames]) -> None:
    _check_item(_table(params["TableName"], tables), params["Item"])


def _batch_get(params: Mapping[str, Any], tables: Mapping[str, KeyNames]) -> None:
    for name, request in params["RequestItems"].items():
        keys = _table(name, tables)
        for key in request["Keys"]:
            _check_key(keys, key)


def _batch_write(params: Mapping[str, Any], tables: Mapping[str, KeyNames]) -> None:
    for name, requests in params["RequestItems"].items():
        keys = _table(name, tables)
        for request in requests:
            if "PutRequest" in request:
                _check_item(keys, request["PutRequest"]["Item"])
            if "DeleteRequest" in request:
                _check_key(keys, request["DeleteRequest"]["Key"])


def _transact_get(params: Mapping[str, Any], tables: Mapping[str, KeyNames]) -> None:
    for action in params["TransactItems"]:
        get = action["Get"]
        _check_key(_table(get["TableName"], tables), get["Key"])


def _transact_write(params: Mapping[str, Any], tables: Mapping[str, KeyNames]) -> None:
    for action in params["TransactItems"]:
        for kind, request in action.items():
            keys = _table(request["TableName"], tables)
            if kind == "Put":
                _check_item(keys, request["Item"])
            else:  # Update, Delete, ConditionCheck
                _check_key(keys, request["Key"])


#: ``a = b`` in a key condition: names (``#ref`` or plain) and value references (``:ref``).
_EQUALITY = re.compile(r"([#:]?[A-Za-z0-9_]+)\s*=\s*([#:]?[A-Za-z0-9_]+)")


def _partition_values(params: Mapping[str, Any], hash_key: str) -> Iterator[Mapping[str, Any]]:
    """The values a Query's key condition sets its partition key equal to."""
    names = params.get("ExpressionAttributeNames") or {}
    values = params.get("ExpressionAttributeValues") or {}
    expression = params.get("KeyConditionExpression")
    if isinstance(expression, str):
        for left, right in _EQUALITY.findall(expression):
            if left.startswith(":") and not right.startswith(":"):
                left, right = right, left
            if left.startswith(":") or not right.startswith(":"):
                continue
            name = names.get(left) if left.startswith("#") else left
            if name == hash_key and right in values:
                yield values[right]
    for name, condition in (params.get("KeyConditions") or {}).items():
        if name == hash_key and condition.get("ComparisonOperator") == "EQ":
            yield condition["AttributeValueList"][0]


def _query(params: Mapping[str, Any], tables: Mapping[str, KeyNames]) -> None:
    keys = _table(params["TableName"], tables)
    index = _index(keys, params.get("IndexName"))
    target = index if params.get("IndexName") is not None else keys
    if target is not None:
        for value in _partition_values(params, target.hash_key):
            _check_value(
                value,
                MAX_PARTITION_KEY_BYTES,
                HASH_KEY_TOO_LONG,
                lambda kind: empty_key(target.hash_key, kind),
            )
    _check_start_key(keys, index, params.get("ExclusiveStartKey"))


def _scan(params: Mapping[str, Any], tables: Mapping[str, KeyNames]) -> None:
    keys = _table(params["TableName"], tables)
    _check_start_key(keys, _index(keys, params.get("IndexName")), params.get("ExclusiveStartKey"))


_CHECKS: dict[str, Callable[[Mapping[str, Any], Mapping[str, KeyNames]], None]] = {
    "GetItem": _keyed,
    "UpdateItem": _keyed,
    "DeleteItem": _keyed,
    "PutItem": _put,
    "BatchGetItem": _batch_get,
    "BatchWriteItem": _batch_write,
    "TransactGetItems": _transact_get,
    "TransactWriteItems": _transact_write,
    "Query": _query,
    "Scan": _scan,
}


# -- the answer ---------------------------------------------------------------------------


def refusal(target: str, body: bytes | str) -> tuple[int, dict[str, str], bytes] | None:
    """AWS's answer (status, headers, body) to a DynamoDB JSON request (its X-Amz-Target
    and body) that breaks a limit; None for anything else, DynamoDB's or not."""
    if not target.startswith(TARGET_PREFIX):
        return None
    try:
        params = json.loads(body)
    except (TypeError, ValueError):
        return None
    message = problem(target.removeprefix(TARGET_PREFIX), params)
    if message is None:
        return None
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "x-amzn-RequestId": uuid.uuid4().hex.upper(),
    }
    payload = json.dumps({"__type": ERROR_TYPE, "message": message}).encode()
    return 400, headers, payload


def wsgi_refusal(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes] | None:
    """The embedded endpoint's check: answers a DynamoDB request that breaks a limit, as
    AWS does, before moto sees it; None to serve it. The body it reads is put back."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if not target.startswith(TARGET_PREFIX):
        return None
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if length <= 0:
        return None
    body = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)
    refused = refusal(target, body)
    if refused is None:
        return None
    status, headers, payload = refused
    start_response(f"{status} Bad Request", list(headers.items()))
    return [payload]


_PATCHED = "turnstile_limits"


@contextmanager
def enforced_in_moto() -> Iterator[None]:
    """While inside, in-process moto (``mock_aws``) answers every DynamoDB request that
    breaks a limit as AWS does, whatever session or client sent it: the check runs where
    moto's botocore hook takes each request, before any backend sees it. Re-entrant."""
    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.process_request
    if getattr(original, _PATCHED, False):
        yield
        return

    def process_request(self: Any, request: Any) -> Any:
        target = request.headers.get("X-Amz-Target") or ""
        if isinstance(target, bytes):  # botocore's prepared headers hold bytes
            target = target.decode("latin-1")
        body = request.body
        if isinstance(body, bytes | bytearray | str):
            refused = refusal(str(target), body)
            if refused is not None:
                return refused
        return original(self, request)

    setattr(process_request, _PATCHED, True)
    BotocoreStubber.process_request = process_request  # type: ignore[method-assign]
    try:
        yield
    finally:
        BotocoreStubber.process_request = original  # type: ignore[method-assign]

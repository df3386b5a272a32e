"""DynamoDB plumbing: the client, the typed codec, errors, retries, batches and pages.

Nothing here knows about signups, events or the sweeper; ``store``, ``events``, ``parking``
and ``ledger`` say what to read and write, and this module how:

* ``Dynamo.call`` is the one way to call the client: it retries throttling and 5xx answers
  with capped, jittered backoff (``max_attempts`` in all, then ``StoreUnavailableError``),
  and raises the errors callers branch on as types of their own (``ConditionFailed``,
  ``TransactionCancelled``, ``AccessDenied``; all still ``ClientError``s).
* ``Dynamo.get`` reads one item; ``Dynamo.batch_get`` and ``Dynamo.batch_write`` split a
  request into DynamoDB's chunks and ask again, with backoff, for what DynamoDB left
  unprocessed.
* ``Dynamo.pages`` and ``Dynamo.items`` are the one paginator for Scan and Query.
* ``to_item``/``from_item`` convert between plain values and DynamoDB's typed form;
  ``typed_json`` and ``typed_json_hook`` carry typed values (binary included) through JSON.
* ``Tables`` is a connection to turnstile's three tables: a ``Dynamo`` and the names.
"""

from __future__ import annotations

import base64
import json
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Context, Decimal
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.config import Config
from botocore.exceptions import ClientError

from turnstile.base.contract import CONTROL_TABLE, INTAKE_TABLE, MAIN_TABLE, Attr, ControlKey
from turnstile.base.errors import StoreUnavailableError
from turnstile.base.itemsize import typed_item_size

if TYPE_CHECKING:  # the stubs are the dev extra's, never needed to run
    from mypy_boto3_dynamodb.client import DynamoDBClient

__all__ = [
    "BATCH_GET_LIMIT",
    "BATCH_WRITE_LIMIT",
    "RETRYABLE_CODES",
    "TRANSACTION_BYTES",
    "TRANSACTION_LIMIT",
    "AccessDenied",
    "ConditionFailed",
    "Dynamo",
    "Tables",
    "TransactionCancelled",
    "chunks",
    "chunks_within",
    "control_key",
    "default_client",
    "error_code",
    "error_text",
    "event_key",
    "from_item",
    "refused_as_invalid",
    "signup_key",
    "to_item",
    "typed_json",
    "typed_json_hook",
]

T = TypeVar("T")

#: Error codes that mean "try again shortly".
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
        "TransactionInProgressException",
    }
)
#: DynamoDB's per-request limits.
BATCH_WRITE_LIMIT = 25
BATCH_GET_LIMIT = 100
TRANSACTION_LIMIT = 100
#: A transaction's items together; DynamoDB's limit is 4 MB.
TRANSACTION_BYTES = 3 * 1024 * 1024


def number_text(value: int) -> str:
    """A whole number as DynamoDB's ``N`` text: exact, with trailing zeros as an exponent.

    DynamoDB holds 38 significant digits and magnitudes up to 1e125, so 10**125 is a
    number it stores (a producer may write ``request_count`` = 1E+125), but its 126
    digits written out are refused (boto3 raises ``Rounded``). ``1E+125`` is the same
    number in 1 digit; a number that really needs more than 38 still fails when written.
    """
    text = str(value)
    if len(text.lstrip("-")) <= 38:
        return text
    return str(Decimal(value).normalize(Context(prec=len(text))))


class _Serializer(TypeSerializer):
    """boto3's serializer, with whole numbers beyond 38 digits written as ``number_text``
    does (when they are exact in 38 significant digits).

    ``serialize`` answers the plain types a record's image holds (text, maps, numbers,
    lists, booleans, null, bytes) by their exact type, without boto3's chain of checks,
    and hands every other value (sets, tuples, ``Binary``, subclasses, floats) to boto3:
    the same typed values either way (``tests/unit/test_dynamo_codec.py`` holds it to
    boto3's), at a fraction of the CPU (copied fields are typed for every decision)."""

    def serialize(self, value: Any) -> dict[str, Any]:
        kind = type(value)
        if kind is str:
            return {"S": value}
        if kind is dict:
            return {"M": {k: self.serialize(v) for k, v in value.items()}}
        if kind is Decimal or kind is int:
            return {"N": self._serialize_n(value)}
        if kind is list:
            return {"L": [self.serialize(v) for v in value]}
        if kind is bool:
            return {"BOOL": value}
        if value is None:
            return {"NULL": True}
        if kind is bytes:
            return {"B": value}
        return super().serialize(value)

    def _serialize_n(self, value: Any) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = Decimal(number_text(value))
        return super()._serialize_n(value)


_serializer = _Serializer()
_deserializer = TypeDeserializer()


def default_client(endpoint_url: str | None = None, session: Any = None) -> DynamoDBClient:
    """A DynamoDB client (of ``session``, default boto3's); our own loop retries
    throttling, so botocore retries little."""
    return (session or boto3).client(
        "dynamodb",
        endpoint_url=endpoint_url,
        config=Config(retries={"mode": "standard", "total_max_attempts": 2}),
    )


# -- the typed codec --------------------------------------------------------------------


def to_item(values: Mapping[str, Any]) -> dict[str, Any]:
    """Plain values as a typed item; None values are left out."""
    return {k: _serializer.serialize(v) for k, v in values.items() if v is not None}


def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A typed item as plain values (numbers as ``Decimal``, binary as ``Binary``)."""
    return {k: _deserializer.deserialize(v) for k, v in item.items()}


def _base64_text(value: Any) -> str:
    """JSON for the bytes in a typed value: base64 text, as on DynamoDB's own wire."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


#: What ``json.dumps`` would build on every call with these options: the encoder keeps
#: only its options (each ``encode`` makes its own state), so one serves every call.
_typed_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_base64_text)


def typed_json(value: Any) -> str:
    """Compact JSON of typed values, binary as base64 text (``typed_json_hook`` reads it):
    ``json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=...)``."""
    return _typed_encoder.encode(value)


def typed_json_hook(obj: dict[str, Any]) -> dict[str, Any]:
    """``json.loads`` hook: a one-key ``{"B": text}`` or ``{"BS": [text]}`` is a typed binary
    (a map's value is always an object, so no map can look like one)."""
    if len(obj) == 1:
        if isinstance(obj.get("B"), str):
            return {"B": base64.b64decode(obj["B"])}
        if isinstance(obj.get("BS"), list):
            return {"BS": [base64.b64decode(v) for v in obj["BS"]]}
    return obj


# -- keys -----------------------------------------------------------------------------


def signup_key(event_id: str, signup_id: str) -> dict[str, Any]:
    """The key of an intake record or of its decision."""
    return {Attr.EVENT_ID: {"S": event_id}, Attr.SIGNUP_ID: {"S": signup_id}}


def control_key(key: tuple[str, str]) -> dict[str, Any]:
    """A control-table key, as built by ``ControlKey``."""
    return {ControlKey.PK: {"S": key[0]}, ControlKey.SK: {"S": key[1]}}


def event_key(event_id: str) -> dict[str, Any]:
    """The key of an event item."""
    return control_key(ControlKey.event(event_id))


# -- errors ---------------------------------------------------------------------------


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class AccessDenied(ClientError):
    """IAM refused the request (``AccessDeniedException``): the role lacks a grant. Never
    transient: retrying cannot help, and the message names the role and the action."""

    @property
    def message(self) -> str:
        return str(self.response.get("Error", {}).get("Message", ""))

    @property
    def summary(self) -> str:
        """``AccessDenied: <principal> may not <action> on <resource>`` (from AWS's
        message), as a parked event's error names it."""
        found = _DENIAL.search(self.message)
        if found is None:
            return f"AccessDenied: {self.message}"
        principal, action, resource = found.groups()
        return f"AccessDenied: {principal} may not {action} on {resource}"


#: AWS's message for an IAM refusal.
_DENIAL = re.compile(r"User: (\S+) is not authorized to perform: (\S+) on resource: (\S+)")


def error_text(error: BaseException) -> str:
    """What a failure is called where an operator reads it (a parked event's error, the
    audit): its class, or for an IAM refusal who was refused what."""
    return error.summary if isinstance(error, AccessDenied) else type(error).__name__


class ConditionFailed(ClientError):
    """A write's condition was false (``ConditionalCheckFailedException``): nothing written."""


class TransactionCancelled(ClientError):
    """A transaction was cancelled (``TransactionCanceledException``): nothing written."""

    @property
    def reasons(self) -> list[str | None]:
        """The code of each action, in order (``None`` for one that was fine); empty when
        the endpoint names none."""
        return [r.get("Code") for r in self.response.get("CancellationReasons") or []]


_TYPED: dict[str, type[ClientError]] = {
    "AccessDeniedException": AccessDenied,
    "ConditionalCheckFailedException": ConditionFailed,
    "TransactionCanceledException": TransactionCancelled,
}


def _typed(exc: ClientError) -> ClientError:
    """``exc`` as its own type, if callers branch on it."""
    kind = _TYPED.get(error_code(exc))
    if kind is None or isinstance(exc, kind):
        return exc
    return kind(exc.response, exc.operation_name).with_traceback(exc.__traceback__)


def refused_as_invalid(error: BaseException | None) -> bool:
    """Whether DynamoDB refused a request as invalid (ValidationException): the request
    itself is at fault, so trying it again, however late, cannot help."""
    return isinstance(error, ClientError) and error_code(error) == "ValidationException"


# -- chunks ---------------------------------------------------------------------------


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def chunks_within(
    items: Sequence[dict[str, Any]], count: int, size: int
) -> Iterator[Sequence[dict[str, Any]]]:
    """Consecutive runs of at most ``count`` typed items and ``size`` bytes (at least one)."""
    start, total = 0, 0
    for index, item in enumerate(items):
        item_bytes = typed_item_size(item)
        if index > start and (index - start == count or total + item_bytes > size):
            yield items[start:index]
            start, total = index, 0
        total += item_bytes
    if start < len(items):
        yield items[start:]


# -- the transport --------------------------------------------------------------------


class Dynamo:
    """A DynamoDB client with turnstile's retry budget. Pass ``client`` to use a stubbed or
    local one; ``sleep`` to test the backoff."""

    def __init__(
        self,
        client: DynamoDBClient | Any = None,
        max_attempts: int = 8,
        base_delay_s: float = 0.05,
        max_delay_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client or default_client()
        self.max_attempts = max_attempts
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self._sleep = sleep
        #: Calls retried after throttling or a 5xx, for metrics and the benchmark.
        self.retries = 0

    def call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        """Call a client operation, retrying throttling and 5xx with capped full jitter."""
        method = getattr(self.client, operation)
        for attempt in range(1, self.max_attempts + 1):
            try:
                return method(**kwargs)
            except ClientError as exc:
                code = error_code(exc)
                if code == "TransactionCanceledException":
                    reasons = {r.get("Code") for r in exc.response.get("CancellationReasons", [])}
                    if "ConditionalCheckFailed" in reasons:
                        raise _typed(exc) from None
                    retryable = bool(reasons & {"ThrottlingError", "TransactionConflict"})
                else:
                    retryable = code in RETRYABLE_CODES
                if not retryable:
                    raise _typed(exc) from None
                if attempt == self.max_attempts:
                    raise StoreUnavailableError(
                        f"{operation} still failing after {attempt} attempts: {code}"
                    ) from exc
                self.retries += 1
                cap = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
                self._sleep(random.uniform(0, cap))
        raise AssertionError("unreachable")  # pragma: no cover

    def get(
        self, table: str, key: Mapping[str, Any], consistent: bool = True
    ) -> dict[str, Any] | None:
        """The item of ``key`` as plain values, read strongly consistent unless
        ``consistent`` is False; None if there is none."""
        response = self.call("get_item", TableName=table, Key=key, ConsistentRead=consistent)
        return from_item(response["Item"]) if "Item" in response else None

    def pages(self, operation: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every page of a ``scan`` or ``query``, each read when the one before is used."""
        while True:
            page = self.call(operation, **kwargs)
            yield page
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def items(self, operation: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every item a ``scan`` or ``query`` finds, as plain values, page by page."""
        for page in self.pages(operation, **kwargs):
            for raw in page.get("Items", []):
                yield from_item(raw)

    def batch_get(self, table: str, keys: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The items of ``keys`` that exist (typed, in no order), read strongly consistent,
        ``BATCH_GET_LIMIT`` keys a request; keys left unprocessed are asked for again."""
        found: list[dict[str, Any]] = []
        for chunk in chunks(keys, BATCH_GET_LIMIT):
            request: dict[str, Any] = {table: {"Keys": list(chunk), "ConsistentRead": True}}
            attempt = 0
            while request:
                response = self.call("batch_get_item", RequestItems=request)
                found += response.get("Responses", {}).get(table, [])
                request = response.get("UnprocessedKeys") or {}
                attempt = self._backoff_unprocessed(request, attempt, "batch_get_item")
        return found

    def batch_write(self, table: str, requests: Sequence[dict[str, Any]]) -> None:
        """BatchWriteItem of put or delete requests, ``BATCH_WRITE_LIMIT`` at a time;
        requests left unprocessed are sent again."""
        for chunk in chunks(requests, BATCH_WRITE_LIMIT):
            pending: dict[str, Any] = {table: list(chunk)}
            attempt = 0
            while pending:
                response = self.call("batch_write_item", RequestItems=pending)
                pending = response.get("UnprocessedItems") or {}
                attempt = self._backoff_unprocessed(pending, attempt, "batch_write_item")

    def put_all(self, table: str, items: Sequence[dict[str, Any]]) -> None:
        """Put typed items (``batch_write``)."""
        self.batch_write(table, [{"PutRequest": {"Item": item}} for item in items])

    def _backoff_unprocessed(self, pending: Mapping[str, Any], attempt: int, op: str) -> int:
        if not pending:
            return 0
        attempt += 1
        if attempt >= self.max_attempts:
            raise StoreUnavailableError(f"{op} left unprocessed items after {attempt} tries")
        self.retries += 1
        self._sleep(random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt)))
        return attempt


class Tables:
    """A connection to turnstile's three tables: a ``Dynamo`` and the tables' names (the
    contract's unless given). ``SignupStore`` and the sweeper's ``Ledger`` are both."""

    def __init__(
        self,
        client: DynamoDBClient | Any = None,
        intake_table: str | None = None,
        main_table: str | None = None,
        control_table: str | None = None,
        max_attempts: int = 8,
        base_delay_s: float = 0.05,
        max_delay_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        *,
        dynamo: Dynamo | None = None,
    ) -> None:
        #: ``dynamo``: another's connection, to share its retry budget and count.
        self.dynamo = dynamo or Dynamo(client, max_attempts, base_delay_s, max_delay_s, sleep)
        self.intake_table = intake_table or INTAKE_TABLE.name
        self.main_table = main_table or MAIN_TABLE.name
        self.control_table = control_table or CONTROL_TABLE.name

    @property
    def client(self) -> DynamoDBClient | Any:
        return self.dynamo.client

    @property
    def retries(self) -> int:
        """Calls retried after throttling or a 5xx (``Dynamo.retries``)."""
        return self.dynamo.retries

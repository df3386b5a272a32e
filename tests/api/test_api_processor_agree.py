"""One validator: whatever the API answers 202 for, the stream processor never rejects as
``invalid_request``. The same bodies go to both: the API through its Lambda handler, the
processor through the stream record of the intake item the API wrote, parsed as the
stream handler parses it."""

from __future__ import annotations

import itertools
import json
from decimal import Decimal
from typing import Any

from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.api.helpers import Invoke
from tests.conftest import StreamReader
from turnstile.base.contract import MAX_ATTRIBUTES_BYTES, Reason
from turnstile.handlers.stream import to_stream_record
from turnstile.jobs.processor import StreamProcessor
from turnstile.storage.store import SignupStore

EVENT = "agree"
_ids = itertools.count()

numbers = (
    st.integers(min_value=-(10**40), max_value=10**40)
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.floats(allow_nan=False, allow_infinity=False)
)
scalars = st.none() | st.booleans() | st.text(max_size=30) | numbers
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner, max_size=6)
    ),
    max_leaves=40,
)
# Near the size limit, where counting JSON bytes and DynamoDB bytes disagree most.
near_limit = st.one_of(
    st.integers(MAX_ATTRIBUTES_BYTES - 40, MAX_ATTRIBUTES_BYTES + 40).map(lambda n: {"s": "x" * n}),
    st.integers(900, 1400).map(lambda n: {"l": [{}] * n}),
    st.integers(1500, 2100).map(lambda n: {"l": [1] * n}),
    st.integers(300, 500).map(lambda n: {f"k{i}": i for i in range(n)}),
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "seats": st.integers(-2, 3) | st.integers(999_999, 1_000_001) | scalars,
        "attributes": st.dictionaries(st.text(max_size=6), json_values, max_size=6)
        | near_limit
        | json_values,
    },
)


def to_json(value: Any) -> str:
    """JSON text of ``value``, Decimals written as the number literals they are."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    return json.dumps(value)


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=bodies)
@example(body={"attributes": {"l": [{}] * 1300}})  # 3,906 bytes as JSON, 5,208 in DynamoDB
@example(body={"attributes": {"n": [Decimal("1" * 38)] * 200}})
def test_what_the_api_accepts_the_processor_never_rejects_as_invalid(
    invoke: Invoke, store: SignupStore, stream: StreamReader, body: dict[str, Any]
):
    if store.get_event(EVENT) is None:
        store.create_event(EVENT, 10**6, "2026-01-01T00:00:00Z")
    stream.read_new()
    signup_id = f"u{next(_ids)}"
    # WHEN the API takes the body
    answer = invoke("POST", f"/events/{EVENT}/signups", to_json({"signup_id": signup_id, **body}))
    assert answer.status in (202, 400), answer.body
    if answer.status != 202:
        return
    # THEN the stream record of the intake item it wrote, through the handler's parsing and
    # the processor, is decided, and never as invalid_request
    [record] = stream.read_new()
    result = StreamProcessor(store).process([to_stream_record(DynamoDBRecord(record))])
    [decided] = result.decided
    assert decided.decision.reason != Reason.INVALID_REQUEST, decided.decision.detail

"""The codecs' fast paths change nothing: the typed codec's serializer is boto3's, and the
stream handler's deserializer Powertools', value for value, error for error."""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

from aws_lambda_powertools.shared.dynamodb_deserializer import TypeDeserializer
from boto3.dynamodb.types import Binary, TypeSerializer
from hypothesis import given, settings
from hypothesis import strategies as st

from turnstile.handlers.stream import _deserializer
from turnstile.storage.dynamo import number_text, to_item


class _Reference(TypeSerializer):
    """boto3's serializer with turnstile's one change (whole numbers past 38 digits), and
    nothing else: what ``to_item`` typed before its fast path."""

    def _serialize_n(self, value: Any) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = Decimal(number_text(value))
        return super()._serialize_n(value)


REFERENCE = _Reference()

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.integers(min_value=-(10**45), max_value=10**45),
    st.decimals(allow_nan=True, allow_infinity=True, places=None),
    st.floats(allow_nan=False, width=32),
    st.binary(max_size=8),
    st.binary(max_size=8).map(bytearray),
    st.binary(max_size=8).map(Binary),
)
sets = st.one_of(
    st.frozensets(st.text(max_size=4), max_size=3),
    st.sets(st.integers(-5, 5), max_size=3),
    st.sets(st.binary(max_size=3), max_size=3),
    st.sets(st.one_of(st.integers(0, 3), st.text(max_size=2)), max_size=3),
)
values = st.recursive(
    st.one_of(scalars, sets),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
    ),
    max_leaves=12,
)


def fast(value: Any) -> Any:
    """``to_item``'s typing of one value (inside a list: ``to_item`` leaves out a None)."""
    return to_item({"x": [value]})["x"]["L"][0]


def typed(serialize: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", serialize(value)
    except Exception as exc:  # the same error, of the same type, for the same value
        return type(exc).__name__, str(exc)


@settings(max_examples=400, deadline=None)
@given(value=values)
def test_every_value_is_typed_as_boto3_types_it(value):
    assert typed(fast, value) == typed(REFERENCE.serialize, value)


def test_the_fast_path_and_boto3_agree_on_the_edges():
    for value in (
        True,
        0,
        10**40,  # past 38 digits, exact: written as number_text does
        10**40 + 1,  # not exact in 38 digits: boto3's Inexact
        Decimal("1e126"),  # past DynamoDB's range: boto3's Overflow
        Decimal("12.50"),
        "",
        b"",
        {"a": [1, "b", None, {"c": b"\x00"}]},
        1.5,  # floats are refused
    ):
        assert typed(fast, value) == typed(REFERENCE.serialize, value)


class _PowertoolsReference(TypeDeserializer):
    """Powertools' deserializer with the stream handler's one change (B and BS as bytes)."""

    def _deserialize_b(self, value: Any) -> Any:
        return base64.b64decode(value, validate=True) if isinstance(value, str) else value


POWERTOOLS = _PowertoolsReference()

typed_scalars = st.one_of(
    st.fixed_dictionaries({"S": st.text(max_size=6)}),
    st.fixed_dictionaries({"N": st.sampled_from(["0", "12.50", "-1E+3", "1" * 40, "", ".", "x"])}),
    st.fixed_dictionaries({"B": st.sampled_from(["AA==", "/w==", "not base64", ""])}),
    st.fixed_dictionaries({"BOOL": st.booleans()}),
    st.just({"NULL": True}),
    st.fixed_dictionaries({"SS": st.lists(st.text(max_size=3), max_size=3)}),
    st.fixed_dictionaries({"NS": st.lists(st.sampled_from(["1", "2.5"]), max_size=3)}),
    st.fixed_dictionaries({"BS": st.lists(st.sampled_from(["AA==", "AQ=="]), max_size=2)}),
    st.sampled_from([{}, {"S": "a", "N": "1"}, {"s": "lower"}, {"Q": 1}, {"M": []}]),
)
typed_values = st.recursive(
    typed_scalars,
    lambda inner: st.one_of(
        st.fixed_dictionaries({"L": st.lists(inner, max_size=3)}),
        st.fixed_dictionaries({"M": st.dictionaries(st.text(max_size=3), inner, max_size=3)}),
    ),
    max_leaves=10,
)


@settings(max_examples=400, deadline=None)
@given(value=typed_values)
def test_every_image_value_is_read_as_powertools_reads_it(value):
    assert typed(_deserializer.deserialize, value) == typed(POWERTOOLS.deserialize, value)

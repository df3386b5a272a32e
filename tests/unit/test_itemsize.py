"""The one item-size calculator: DynamoDB's published rules, on plain and typed values."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import Binary, TypeSerializer
from hypothesis import given
from hypothesis import strategies as st

from turnstile.base.itemsize import item_size, number_size, typed_item_size, value_size


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("hello", 5),
        ("山田", 6),  # UTF-8 bytes, not characters
        ("", 0),
        (Decimal("123"), 3),  # ceil(3 significant digits / 2) + 1
        (123456, 4),
        (Decimal("100"), 2),  # trailing zeros trimmed
        (Decimal("1E+2"), 2),  # the same number, another spelling
        (Decimal("-0.0015"), 2),  # sign, point and leading zeros do not count
        (0, 1),
        (Decimal("1.50"), 2),
        (b"\x00\x01\x02", 3),  # raw bytes
        (Binary(b"\x00\x01"), 2),
        (True, 1),
        (None, 1),
        ({}, 3),  # an empty map: the 3 bytes of overhead alone
        ([], 3),
        ({"k": "v"}, 3 + (1 + 1 + 1)),  # overhead + (name + value + element byte)
        (["ab", Decimal(1)], 3 + (2 + 1) + (2 + 1)),
        ({"l": [{}] * 1300}, 3 + 1 + (3 + 1300 * (3 + 1)) + 1),  # 5,208 bytes; 3,906 as JSON
        ({"a", "bc"}, 3),  # a set: the sum of its elements, no overhead
        ({Decimal(1), Decimal(22)}, 4),
        # The engine sizes attributes by these (domain.attributes_problem, the 4 KB limit).
        ("abc", 3),
        ("\u00e9", 2),
        (b"ab", 2),
        (Decimal("12345"), 4),  # ceil(significant digits / 2) + 1
        (Decimal("-1.5"), 2),  # sign and point do not count
        ({"a": "xy"}, 7),  # 3 + (name + value + 1) per entry
        (["x", Decimal(1)], 8),  # 3 + (value + 1) per element
        ({"a": {"b": None}}, 3 + 1 + (3 + 1 + 1 + 1) + 1),
    ],
    # A set's repr follows the hash seed, which differs between processes (the test
    # workers): sorted, its id is the same in each.
    ids=lambda v: repr(sorted(v, key=str)) if isinstance(v, set | frozenset) else repr(v),
)
def test_value_sizes_follow_dynamodb_rules(value: Any, size: int):
    assert value_size(value) == size


def test_item_size_counts_names_and_values():
    # GIVEN an item of two strings and a number: 8 + 2, 9 + 5, 5 + 2
    assert item_size({"event_id": "e1", "signup_id": "alice", "seats": 1}) == 31


def test_number_size_ignores_exponent_and_sign():
    assert number_size("-1.2345E-7") == number_size("12345") == 4


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.text(max_size=20)
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.decimals(allow_nan=False, allow_infinity=False, places=4, min_value=-1e20, max_value=1e20)
    | st.binary(max_size=10).map(Binary),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)


@given(json_like)
def test_plain_and_typed_views_agree(value: Any):
    # The validators size plain values, the metering sizes wire items: same rules.
    typed = TypeSerializer().serialize(value)
    assert value_size(value) == typed_item_size({"a": typed}) - 1

"""The stream processor's CPU fast paths change nothing: each answers as the slow path it
stands in for, value for value, problem for problem, error for error.

* ``attributes_problem`` walks the attributes once (``_checked_size``: their values and
  their size together); the rule is the two walks it replaced (``_value_problem``, then
  ``value_size``), kept as ``_two_walks``.
* ``typed_json`` encodes with one encoder made once; the rule is ``json.dumps`` with its
  options, called each time.
* ``bounded_copies`` walks the typed fields for an empty set only where their JSON holds
  a ``[]``; the rule is the walk every time (``reference_bounded_copies``, below).
"""

from __future__ import annotations

import base64
import json
from collections import OrderedDict
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import Binary
from hypothesis import given, settings
from hypothesis import strategies as st

from turnstile.base.contract import MAX_ATTRIBUTES_BYTES
from turnstile.base.itemsize import text_size, typed_item_size, value_size
from turnstile.engine.rules import (
    MAX_ATTRIBUTES_DEPTH,
    _checked_size,
    _Refused,
    _two_walks,
    _value_problem,
    attributes_problem,
)
from turnstile.storage.dynamo import to_item, typed_json
from turnstile.storage.intake import IntakeRecord
from turnstile.storage.items import (
    MAX_BASE_ITEM_BYTES,
    MAX_DECISION_ITEM_BYTES,
    MAX_JOURNAL_ROW_BYTES,
    Decision,
    _check_storable,
    _copied_values,
    base_item,
    bounded_copies,
    without_copies,
)


def answer(function: Any, value: Any) -> tuple[str, Any]:
    """What ``function`` makes of ``value``: its result, or its error's type and text."""
    try:
        return "ok", function(value)
    except Exception as exc:  # the same error, of the same type, for the same value
        return type(exc).__name__, str(exc)


class _Text(str):
    """Text of a subclass (sized by ``str()``, which it changes)."""

    def __str__(self) -> str:
        return "changed"


class Binary2(Binary):
    pass


class _NoValue:
    """Named as boto3's binary wrapper, with no ``.value``: valid, but no size."""


_NoValue.__name__ = "Binary"

texts = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["", "a", "\u00e9", "\u5c71\u7530", "\ud800", "x\udfff", "\U0001f600"]),
    # near the 4 KB limit, alone or a few together
    st.integers(MAX_ATTRIBUTES_BYTES - 16, MAX_ATTRIBUTES_BYTES + 2).map(lambda n: "x" * n),
    st.integers(1000, 1400).map(lambda n: "\u00e9" * n),
    st.integers(2040, 2050).map(lambda n: "\u00e9" * n),
)
numbers = st.one_of(
    st.integers(-(10**45), 10**45),
    st.decimals(allow_nan=True, allow_infinity=True, places=None),
    st.sampled_from(
        [Decimal("1e-130"), Decimal("1e-131"), Decimal("9" * 38 + "e88"), Decimal("1e126")]
    ),
    st.sampled_from([Decimal("-0"), Decimal("0.00"), Decimal("1500"), Decimal("1.50E+3")]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    texts,
    numbers,
    st.floats(allow_nan=False, width=32),
    st.binary(max_size=6),
    st.binary(max_size=6).map(bytearray),
    st.binary(max_size=6).map(Binary),
    st.binary(max_size=6).map(Binary2),
    st.just(_NoValue()),
    st.text(max_size=3).map(_Text),
    st.just(object()),
)
sets = st.one_of(
    st.frozensets(st.text(max_size=4), max_size=3),
    st.sets(st.integers(-5, 5), max_size=3),
    st.sets(st.binary(max_size=3), max_size=3),
)
keys = st.one_of(
    st.text(max_size=4),
    st.sampled_from(["", "\u00e9", "\ud800", "k"]),
    st.text(max_size=3).map(_Text),
    st.integers(0, 3),
)
values = st.recursive(
    st.one_of(scalars, sets),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
        st.dictionaries(keys, inner, max_size=3).map(OrderedDict),
    ),
    max_leaves=14,
)


def nested(value: Any, depth: int, through_lists: bool) -> Any:
    for _ in range(depth):
        value = [value] if through_lists else {"n": value}
    return value


attributes = st.one_of(
    st.dictionaries(keys, values, max_size=5),
    st.dictionaries(keys, values, max_size=4).map(OrderedDict),
    # around the depth limit, a problem in it or after it
    st.builds(
        lambda leaf, depth, lists, after: {"d": nested(leaf, depth, lists), "z": after},
        values,
        st.integers(MAX_ATTRIBUTES_DEPTH - 3, MAX_ATTRIBUTES_DEPTH + 1),
        st.booleans(),
        values,
    ),
    values,  # not always a map
)


@settings(max_examples=1000, deadline=None)
@given(value=attributes)
def test_one_walk_finds_what_the_two_walks_find(value):
    assert answer(attributes_problem, value) == answer(two_walks, value)


@settings(max_examples=1000, deadline=None)
@given(value=attributes)
def test_the_one_walk_sizes_as_value_size_does(value):
    # Where the one walk raises anything but a problem, attributes_problem walks twice.
    try:
        fused: tuple[str, Any] = ("size", _checked_size(value, 1))
    except _Refused as refused:
        fused = ("refused", refused.problem)
    except Exception:
        return
    problem = _value_problem(value, 1)
    assert fused == (("refused", problem) if problem else ("size", value_size(value)))


def two_walks(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return "attributes must be a map (a JSON object)"
    return _two_walks(value)


def test_one_walk_and_two_walks_agree_on_the_edges():
    for value in (
        {"b": "x" * (MAX_ATTRIBUTES_BYTES - 5)},  # exactly at the limit
        {"b": "x" * (MAX_ATTRIBUTES_BYTES - 4)},  # one byte over
        {"a": {"b": [Decimal("NaN")]}, "c": "\ud800"},  # the first problem in order
        {"a": _NoValue(), "c": "\ud800"},  # an error of the size, after it a problem
        {"a": _NoValue()},  # an error of the size alone: raised, as before
        {"a": _Text("abc")},  # sized by str(): "changed"
        {_Text("k"): 1},
        {"s": {"a", "b"}, "t": ("x", Decimal(1)), "w": Binary(b"\xff")},
        nested("x", MAX_ATTRIBUTES_DEPTH - 1, through_lists=True),
        nested("x", MAX_ATTRIBUTES_DEPTH, through_lists=False),
        nested([], MAX_ATTRIBUTES_DEPTH - 1, through_lists=False),
    ):
        assert answer(attributes_problem, value) == answer(two_walks, value), value


# -- typed_json ------------------------------------------------------------------------


def _base64_text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def reference_json(value: Any) -> str:
    """``typed_json`` as it was: ``json.dumps`` with its options, each call."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_base64_text)


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.text(max_size=6),
        st.integers(),
        st.floats(),  # NaN and infinities too: allowed, as json.dumps allows them
        st.decimals(allow_nan=False, places=2),  # no JSON type: refused alike
        st.binary(max_size=6),
        st.binary(max_size=6).map(bytearray),
        st.builds(object),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), inner, max_size=4),
        st.dictionaries(st.tuples(st.integers(0, 1)), inner, min_size=1, max_size=2),
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(value=json_values)
def test_typed_json_is_json_dumps_with_its_options(value):
    assert answer(typed_json, value) == answer(reference_json, value)


def test_typed_json_refuses_a_cycle_as_json_dumps_does():
    cycle: list[Any] = []
    cycle.append(cycle)
    assert answer(typed_json, cycle) == answer(reference_json, cycle)
    assert answer(typed_json, {"a": [1]}) == ("ok", '{"a":[1]}')  # and goes on after it


# -- bounded_copies --------------------------------------------------------------------


def reference_bounded_copies(
    event_id: str,
    decision: Decision,
    decided_at: str,
    request: Any,
    expires_at: int | None = None,
    extras: Any = None,
) -> tuple[Decision, dict[str, Any], str]:
    """``bounded_copies`` as it was: every typed field walked for an empty set."""
    try:
        copies = to_item(_copied_values(request))
        for value in copies.values():
            _check_storable(value)
    except (TypeError, ValueError, ArithmeticError) as exc:
        return without_copies(decision, f"not storable in DynamoDB ({exc})"), {}, "{}"
    text = reference_json(copies)
    if not copies:
        return decision, copies, text
    json_bytes = text_size(text)
    if not extras and json_bytes <= MAX_DECISION_ITEM_BYTES - MAX_BASE_ITEM_BYTES:
        return decision, copies, text
    base = typed_item_size(base_item(event_id, decision, decided_at, expires_at, extras))
    if base + json_bytes > MAX_DECISION_ITEM_BYTES:
        if base + typed_item_size(copies) > MAX_DECISION_ITEM_BYTES:
            why = f"item over {MAX_DECISION_ITEM_BYTES} bytes"
            return without_copies(decision, why), {}, "{}"
        if json_bytes > MAX_JOURNAL_ROW_BYTES - 1024:
            why = f"journal row over {MAX_JOURNAL_ROW_BYTES} bytes"
            return without_copies(decision, why), {}, "{}"
    return decision, copies, text


empty_sets = st.sampled_from([set(), frozenset(), {"a"}, {Decimal(1)}, {b"\x00"}])
copied = st.recursive(
    st.one_of(scalars, sets, empty_sets, st.just([]), st.just("[]"), st.just({})),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(keys, inner, max_size=3),
        st.dictionaries(st.tuples(st.integers(0, 1)), inner, min_size=1, max_size=2),  # no JSON
    ),
    max_leaves=10,
)
requests = st.one_of(
    st.none(),
    st.builds(
        lambda attributes, submitted_at, owner: IntakeRecord(
            "e1", "s1", "1", attributes=attributes, submitted_at=submitted_at, owner=owner
        ),
        st.dictionaries(keys, copied, max_size=4),
        st.one_of(st.none(), st.text(max_size=4)),
        st.one_of(st.none(), st.text(max_size=4)),
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "attributes": st.one_of(copied, st.dictionaries(keys, copied, max_size=4)),
            "submitted_at": copied,
            "owner": copied,
        },
    ),
)
decisions = st.builds(
    Decision,
    signup_id=st.just("s1"),
    sequence_number=st.just("1"),
    status=st.sampled_from(["ACCEPTED", "REJECTED", "HELD"]),
    seats=st.integers(1, 3),
    detail=st.one_of(st.none(), st.just("a note")),
)


@settings(max_examples=1000, deadline=None)
@given(
    decision=decisions,
    request=requests,
    extras=st.one_of(st.none(), st.just({"hold_expires_at": {"S": "x" * 60_000}})),
)
def test_bounded_copies_answers_as_the_walk_every_time(decision, request, extras):
    args = ("e1", decision, "2026-01-01T00:00:00Z", request, 1_800_000_000, extras)
    assert answer(lambda a: bounded_copies(*a), args) == answer(
        lambda a: reference_bounded_copies(*a), args
    )

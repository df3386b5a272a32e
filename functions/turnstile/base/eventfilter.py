"""Lambda event filtering: the FilterCriteria patterns of an event source mapping.

The rules are EventBridge's event-pattern rules, the subset Lambda accepts
(https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html,
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-create-pattern.html and
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-create-pattern-operators.html):

* A pattern is a JSON object whose fields mirror the record's. A field maps either to a
  nested pattern or to the JSON array of what its value may match (a bare value is refused
  when the mapping is created: "the value to match is in a JSON array").
* The fields of a pattern must all match (AND); the entries of an array, any one (OR);
  the patterns of a mapping, any one (OR). No patterns at all: every record is delivered.
* Matching is on leaves: strings, numbers, booleans and null. A field whose value is an
  object has no value of its own: ``["x"]`` and ``{"exists": true}`` do not match it and
  ``{"exists": false}`` does. An array in the record matches if any of its items does.
* Operators: ``prefix``, ``suffix``, ``equals-ignore-case``, ``anything-but`` (a value, a
  list, or ``prefix``/``suffix``/``equals-ignore-case``), ``numeric`` (``=``, or up to two
  of ``<``, ``<=``, ``>``, ``>=``) and ``exists``. ``numeric`` matches numbers only: a
  DynamoDB ``N`` travels as a string, so it never matches one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

__all__ = [
    "InvalidFilterPattern",
    "check_pattern",
    "matches_any",
    "matches_filter",
    "parse_pattern",
]

_COMPARISONS = {"=", "<", "<=", ">", ">="}
_OPERATORS = ("prefix", "suffix", "equals-ignore-case", "anything-but", "numeric", "exists")


class InvalidFilterPattern(ValueError):
    """A pattern AWS refuses when the event source mapping is created."""

    def __init__(self, why: str) -> None:
        # AWS's own words first (InvalidParameterValueException), then what is wrong.
        super().__init__(f"Invalid filter pattern definition: {why}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | bool) or _is_number(value)


# -- checking a pattern, as CreateEventSourceMapping does --------------------------------


def parse_pattern(pattern: Mapping[str, Any] | str) -> dict[str, Any]:
    """The pattern as an object, checked; JSON text (the API's ``Pattern``) is parsed first."""
    if isinstance(pattern, str):
        try:
            pattern = json.loads(pattern)
        except json.JSONDecodeError as exc:
            raise InvalidFilterPattern(f"not JSON ({exc.msg})") from None
    check_pattern(pattern)
    return dict(pattern)  # type: ignore[arg-type]


def check_pattern(pattern: Any) -> None:
    """Raise ``InvalidFilterPattern`` for a pattern AWS would refuse."""
    if not isinstance(pattern, Mapping):
        raise InvalidFilterPattern(f"a pattern is a JSON object, not {type(pattern).__name__}")
    _check_fields(pattern, "")


def _check_fields(pattern: Mapping[str, Any], path: str) -> None:
    for key, value in pattern.items():
        where = f"{path}.{key}" if path else str(key)
        if not isinstance(key, str):
            raise InvalidFilterPattern(f"field names are strings: {key!r}")
        if isinstance(value, Mapping):
            _check_fields(value, where)
        elif isinstance(value, list):
            for matcher in value:
                _check_matcher(matcher, where)
        else:
            raise InvalidFilterPattern(
                f"{where}: the value to match must be in a JSON array, as [{json.dumps(value)}]"
            )


def _check_matcher(matcher: Any, where: str) -> None:
    if _is_scalar(matcher):
        if isinstance(matcher, float) and not math.isfinite(matcher):
            raise InvalidFilterPattern(f"{where}: {matcher} is not a JSON number")
        return
    if not isinstance(matcher, Mapping) or len(matcher) != 1:
        raise InvalidFilterPattern(f"{where}: {json.dumps(matcher)} is not a value or an operator")
    ((operator, argument),) = matcher.items()
    if operator == "exists":
        if not isinstance(argument, bool):
            raise InvalidFilterPattern(f"{where}: exists takes true or false")
    elif operator in ("prefix", "suffix"):
        if isinstance(argument, Mapping) and set(argument) == {"equals-ignore-case"}:
            argument = argument["equals-ignore-case"]
        if not isinstance(argument, str):
            raise InvalidFilterPattern(f"{where}: {operator} takes a string")
    elif operator == "equals-ignore-case":
        if not isinstance(argument, str):
            raise InvalidFilterPattern(f"{where}: equals-ignore-case takes a string")
    elif operator == "anything-but":
        _check_anything_but(argument, where)
    elif operator == "numeric":
        _check_numeric(argument, where)
    else:
        known = ", ".join(_OPERATORS)
        raise InvalidFilterPattern(f"{where}: unknown operator {operator!r} (known: {known})")


def _check_anything_but(argument: Any, where: str) -> None:
    if isinstance(argument, Mapping):
        if len(argument) != 1 or next(iter(argument)) not in (
            "prefix",
            "suffix",
            "equals-ignore-case",
        ):
            raise InvalidFilterPattern(f"{where}: anything-but takes prefix, suffix or a value")
        (inner,) = argument.values()
        values = inner if isinstance(inner, list) else [inner]
        if not values or not all(isinstance(v, str) for v in values):
            raise InvalidFilterPattern(f"{where}: anything-but {next(iter(argument))} takes text")
        return
    values = argument if isinstance(argument, list) else [argument]
    if not values or not all(isinstance(v, str) or _is_number(v) for v in values):
        raise InvalidFilterPattern(f"{where}: anything-but takes strings or numbers")


def _check_numeric(argument: Any, where: str) -> None:
    if not isinstance(argument, list) or len(argument) not in (2, 4):
        raise InvalidFilterPattern(f"{where}: numeric takes [op, n] or [op, n, op, n]")
    ops, bounds = argument[0::2], argument[1::2]
    if not all(op in _COMPARISONS for op in ops) or not all(_is_number(n) for n in bounds):
        raise InvalidFilterPattern(f"{where}: numeric takes =, <, <=, > or >= and numbers")
    if len(ops) == 2 and not (
        ops[0] in (">", ">=") and ops[1] in ("<", "<=") and bounds[0] < bounds[1]
    ):
        raise InvalidFilterPattern(f"{where}: a numeric range is [>/>=, low, </<=, high]")


# -- matching ---------------------------------------------------------------------------


def matches_any(patterns: Sequence[Mapping[str, Any]], record: Mapping[str, Any]) -> bool:
    """Whether Lambda delivers ``record``: no patterns deliver everything."""
    return not patterns or any(matches_filter(p, record) for p in patterns)


def matches_filter(pattern: Mapping[str, Any], record: Any) -> bool:
    """Whether ``record`` (a Lambda-shaped record) matches one pattern."""
    return _matches_fields(pattern, record, ())


def _matches_fields(pattern: Mapping[str, Any], record: Any, path: tuple[str, ...]) -> bool:
    for key, expected in pattern.items():
        where = (*path, key)
        if isinstance(expected, Mapping):
            if not _matches_fields(expected, record, where):
                return False
        else:
            leaves = list(_leaves(record, where))
            if not any(_matches(matcher, leaves) for matcher in expected):
                return False
    return True


def _leaves(node: Any, path: Sequence[str]) -> Iterator[Any]:
    """The leaf values at ``path``: arrays are looked through, objects are not leaves."""
    if isinstance(node, list):
        for item in node:
            yield from _leaves(item, path)
        return
    if not path:
        if not isinstance(node, Mapping):
            yield node
        return
    if isinstance(node, Mapping) and path[0] in node:
        yield from _leaves(node[path[0]], path[1:])


def _equal(expected: Any, actual: Any) -> bool:
    if _is_number(expected) and _is_number(actual):
        return Decimal(str(expected)) == Decimal(str(actual))
    if isinstance(expected, bool) or isinstance(actual, bool) or expected is None:
        return type(expected) is type(actual) and expected == actual
    return isinstance(actual, str) and isinstance(expected, str) and expected == actual


def _matches(matcher: Any, leaves: Iterable[Any]) -> bool:
    leaves = list(leaves)
    if not isinstance(matcher, Mapping):
        return any(_equal(matcher, leaf) for leaf in leaves)
    ((operator, argument),) = matcher.items()
    if operator == "exists":
        return bool(leaves) is argument
    return any(_leaf_matches(operator, argument, leaf) for leaf in leaves)


def _leaf_matches(operator: str, argument: Any, leaf: Any) -> bool:
    if operator in ("prefix", "suffix", "equals-ignore-case"):
        if not isinstance(leaf, str):
            return False
        text, wanted = leaf, argument
        if isinstance(wanted, Mapping):  # {"prefix": {"equals-ignore-case": "x"}}
            text, wanted = leaf.casefold(), wanted["equals-ignore-case"].casefold()
        if operator == "prefix":
            return text.startswith(wanted)
        if operator == "suffix":
            return text.endswith(wanted)
        return text.casefold() == wanted.casefold()
    if operator == "anything-but":
        if isinstance(argument, Mapping):
            ((kind, inner),) = argument.items()
            values = inner if isinstance(inner, list) else [inner]
            if not isinstance(leaf, str):
                return False
            return not any(_leaf_matches(kind, v, leaf) for v in values)
        values = argument if isinstance(argument, list) else [argument]
        return not any(_equal(v, leaf) for v in values)
    if operator == "numeric":
        if not _is_number(leaf):
            return False
        value = Decimal(str(leaf))
        pairs = zip(argument[0::2], argument[1::2], strict=True)
        return all(_compare(value, op, Decimal(str(bound))) for op, bound in pairs)
    return False  # an unknown operator: refused at creation, never matched


def _compare(value: Decimal, op: str, bound: Decimal) -> bool:
    return {
        "=": value == bound,
        "<": value < bound,
        "<=": value <= bound,
        ">": value > bound,
        ">=": value >= bound,
    }[op]

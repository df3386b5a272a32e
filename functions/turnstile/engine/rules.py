"""The rules of valid input: pure, no I/O.

The limits every input is held to (seats, capacity, ids, attributes, the length of a
decision's detail) and the one validator of a signup (``signup_problems``), which the
API, ``turnstile submit`` and the stream processor share: whatever the first two take,
the third never rejects as invalid. Each rule says what is wrong rather than raising.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from turnstile.base.contract import ID_PATTERN, MAX_ATTRIBUTES_BYTES, is_event_key
from turnstile.base.itemsize import number_size, text_size, value_size

__all__ = [
    "MAX_ATTRIBUTES_DEPTH",
    "MAX_CAPACITY",
    "MAX_DETAIL_CHARS",
    "MAX_SEATS",
    "MAX_SUBMITTED_AT_CHARS",
    "attributes_problem",
    "bounded",
    "capacity_problem",
    "id_problem",
    "seat_count",
    "seats_problem",
    "signup_problems",
]

#: The largest seat count one signup may ask for; bigger numbers are bad input, not "full".
MAX_SEATS = 1_000_000
#: The largest capacity: the largest integer every JSON parser represents exactly (2**53 - 1).
MAX_CAPACITY = 2**53 - 1
#: DynamoDB allows 32 levels of nesting in an item; this leaves room around attributes.
MAX_ATTRIBUTES_DEPTH = 16
#: ``submitted_at`` is copied onto the decision only up to this length (ISO-8601 needs 32).
MAX_SUBMITTED_AT_CHARS = 64
#: A decision's ``detail`` never grows past this, whatever the intake record held.
MAX_DETAIL_CHARS = 512


def id_problem(value: Any, name: str) -> str | None:
    """Rule: an id is a string matching ``ID_PATTERN`` in full (no trailing newline)."""
    if not isinstance(value, str) or ID_PATTERN.fullmatch(value) is None:
        return f"{name} must match {ID_PATTERN.pattern}"
    return None


def event_key_problem(value: Any) -> str | None:
    """Rule: a signup's ``event_id`` is an event's id, or one of a sharded event's shard keys
    (``<event id>#<shard, 00 to 31>``: ``SHARD_KEY_PATTERN``; whether it is the signup's own
    shard is the processor's to check, from the event's shards)."""
    if is_event_key(value):
        return None
    return f"event_id must match {ID_PATTERN.pattern} (or, for a sharded event, <event_id>#<00-31>)"


def seat_count(raw: Any) -> tuple[int, str | None]:
    """Rule: seats is optional (default 1) and must be a whole number from 1 to MAX_SEATS."""
    if raw is None:
        return 1, None
    if isinstance(raw, bool) or not isinstance(raw, int | Decimal):
        return 0, f"seats must be a number, got {type(raw).__name__}"
    if isinstance(raw, Decimal) and (not raw.is_finite() or raw != raw.to_integral_value()):
        return 0, "seats must be a whole number"
    if raw < 1:
        return 0, "seats must be at least 1"
    if raw > MAX_SEATS:
        return 0, f"seats must be at most {MAX_SEATS}"
    return int(raw), None


def seats_problem(raw: Any) -> str | None:
    """Rule: see ``seat_count``; None when ``raw`` is a valid seat count (or absent)."""
    return seat_count(raw)[1]


def capacity_problem(value: Any) -> str | None:
    """Rule: a capacity is a whole number from 0 to MAX_CAPACITY (seats)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CAPACITY:
        return f"capacity must be an integer from 0 to {MAX_CAPACITY}"
    return None


def _text_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, from "\udXXX" escapes
        return "attributes must be valid Unicode text"
    return None


def _number_problem(number: int | Decimal) -> str | None:
    """DynamoDB numbers: 38 significant digits, magnitude 1e-130 to under 1e126, or 0."""
    value = Decimal(number)
    if not value.is_finite():
        return "attributes hold a number that is not finite"
    if value.is_zero():
        return None
    if len(value.as_tuple().digits) > 38 or not -130 <= value.adjusted() <= 125:
        return "attributes hold a number DynamoDB cannot store (38 digits, 1e-130 to 1e125)"
    return None


def _value_problem(value: Any, depth: int) -> str | None:
    """The first thing in an attribute value that DynamoDB or the contract refuses."""
    if depth > MAX_ATTRIBUTES_DEPTH:
        return f"attributes are nested more than {MAX_ATTRIBUTES_DEPTH} levels deep"
    if type(value) is str and value.isascii():  # the most common value: no surrogate in it
        return None
    if value is None or isinstance(value, bool | bytes | bytearray):
        return None
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, int | Decimal):
        return _number_problem(value)
    if type(value).__name__ == "Binary":  # boto3's wrapper of binary values
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str) or not key:
                return "attribute names must be non-empty strings"
            problem = _text_problem(key) or _value_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list | tuple | set | frozenset):
        for item in value:
            problem = _value_problem(item, depth + 1)
            if problem:
                return problem
        return None
    return f"attributes hold a {type(value).__name__}, which DynamoDB cannot store exactly"


class _Refused(Exception):
    """The first problem of a value, found by ``_checked_size``'s walk."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _checked_size(value: Any, depth: int) -> int:
    """``value_size(value)``, raising ``_Refused`` with the problem ``_value_problem`` finds
    first: both walks in one, visiting values in their order.

    The plain types of an image (text, maps, lists, numbers, booleans, null, bytes) are
    answered by their exact type; any other value (a subclass, a tuple, a set, ``Binary``)
    is walked by ``_value_problem`` then sized by ``value_size``, as before. The same
    problem or size either way (``tests/unit/test_fast_paths_cpu.py`` holds it to the two
    walks)."""
    if depth > MAX_ATTRIBUTES_DEPTH:
        raise _Refused(f"attributes are nested more than {MAX_ATTRIBUTES_DEPTH} levels deep")
    kind = type(value)
    if kind is str:
        if value.isascii():
            return len(value)
        try:
            return len(value.encode("utf-8"))
        except UnicodeEncodeError:  # lone surrogates, from "\udXXX" escapes
            raise _Refused("attributes must be valid Unicode text") from None
    if kind is dict:
        size = 3
        inner = depth + 1
        leaves = inner <= MAX_ATTRIBUTES_DEPTH  # an ASCII text in it is answered here
        for key, item in value.items():
            if type(key) is str and key and key.isascii():
                if leaves and type(item) is str and item.isascii():
                    size += len(key) + len(item) + 1
                else:
                    size += len(key) + _checked_size(item, inner) + 1
                continue
            if not isinstance(key, str) or not key:
                raise _Refused("attribute names must be non-empty strings")
            problem = _text_problem(key)
            if problem:
                raise _Refused(problem)
            size += text_size(str(key)) + _checked_size(item, inner) + 1
        return size
    if kind is Decimal or kind is int:
        problem = _number_problem(value)
        if problem:
            raise _Refused(problem)
        return number_size(str(value))
    if kind is list:
        inner = depth + 1
        return 3 + sum(_checked_size(item, inner) + 1 for item in value)
    if kind is bool or value is None:
        return 1
    if kind is bytes:
        return len(value)
    problem = _value_problem(value, depth)
    if problem:
        raise _Refused(problem)
    return value_size(value)


def _two_walks(value: Mapping[str, Any]) -> str | None:
    """``attributes_problem`` as two walks: the values, then their size."""
    problem = _value_problem(value, 1)
    if problem:
        return problem
    return _size_problem(value_size(value))


def _size_problem(size: int) -> str | None:
    if size > MAX_ATTRIBUTES_BYTES:
        return (
            f"attributes are {size} bytes by DynamoDB's item-size rules, "
            f"over {MAX_ATTRIBUTES_BYTES}"
        )
    return None


def attributes_problem(value: Any) -> str | None:
    """Rule: attributes are a map, nested at most ``MAX_ATTRIBUTES_DEPTH`` levels, with
    non-empty names, valid text and numbers DynamoDB can hold, and at most
    ``MAX_ATTRIBUTES_BYTES`` by DynamoDB's item-size rules (they are copied onto the
    decision item, so an unbounded map could push it past DynamoDB's 400 KB).

    One walk (``_checked_size``); if anything in it raises, the two walks again, whose
    answer (or error) is the rule's."""
    if not isinstance(value, Mapping):
        return "attributes must be a map (a JSON object)"
    try:
        size = _checked_size(value, 1)
    except _Refused as refused:
        return refused.problem
    except Exception:  # whatever the two walks make of it (an error too) is the answer
        return _two_walks(value)
    return _size_problem(size)


def signup_problems(
    event_id: Any, signup_id: Any, seats: Any = None, attributes: Any = None
) -> list[str]:
    """Every way a signup breaks the contract; empty when it is valid.

    The one validator: the API and ``turnstile submit`` refuse what it flags, the stream
    processor rejects it ``invalid_request``, so whatever the first two take the third
    never rejects as invalid. ``seats`` and ``attributes`` may be None (absent).
    """
    problems = [
        p
        for p in (
            event_key_problem(event_id),
            id_problem(signup_id, "signup_id"),
            seats_problem(seats),
            None if attributes is None else attributes_problem(attributes),
        )
        if p
    ]
    return problems


def bounded(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """``text`` cut to ``limit`` characters (the last one an ellipsis) if longer."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"

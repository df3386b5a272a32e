"""Item sizes by DynamoDB's published rules: the one calculator turnstile uses.

DynamoDB's rules ("DynamoDB item sizes and formats"): an item is the UTF-8 bytes of its
attribute names plus the size of each value, where

* a string is its UTF-8 bytes; a binary value its raw bytes (not its base64 text);
* a number is about one byte per two significant digits, plus one (sign, decimal point,
  exponent and leading or trailing zeros do not count);
* null and boolean are one byte;
* a list or a map is 3 bytes plus, per element, one byte and the element's size (a map
  element also counts its name's UTF-8 bytes);
* a set is the sum of its elements' sizes.

Two views of the same rules: ``value_size`` for plain Python values (what boto3's
``TypeDeserializer`` returns and ``TypeSerializer`` takes, plus ints from JSON), and
``typed_value_size`` for wire-format values (``{"S": "..."}``). Validation (the API, the
CLI and the stream processor) and the benchmark's metering all size through here.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = [
    "item_size",
    "number_size",
    "text_size",
    "typed_item_size",
    "typed_value_size",
    "value_size",
]


def text_size(text: str) -> int:
    """Bytes of a string: its UTF-8."""
    if text.isascii():  # one byte a character: most names and values
        return len(text)
    # surrogatepass: a lone surrogate is sized, not raised on (validation refuses it apart).
    return len(text.encode("utf-8", "surrogatepass"))


def number_size(text: str) -> int:
    """Bytes of a number given as text (``"-0.0015"``, ``"1E+2"``): significant digits only."""
    mantissa = text.strip().lstrip("+-").lower().partition("e")[0]
    significant = mantissa.replace(".", "").strip("0")
    return math.ceil(len(significant) / 2) + 1


def _binary_size(value: Any) -> int:
    raw = getattr(value, "value", value)  # boto3's Binary wraps its bytes in .value
    if isinstance(raw, bytes | bytearray | memoryview):
        return len(raw)
    # A base64 string, as binary travels in JSON (Lambda events, the wire format).
    return len(base64.b64decode(raw))


def value_size(value: Any) -> int:
    """Bytes a plain Python value takes as a DynamoDB attribute value.

    Raises ``TypeError`` for a value DynamoDB has no type for (validation checks types
    first, so it never gets here with one).
    """
    kind = type(value)  # the plain types of an image first, by their exact type
    if kind is str:
        return text_size(value)
    if kind is dict:
        return 3 + sum(text_size(str(k)) + value_size(v) + 1 for k, v in value.items())
    if kind is Decimal or kind is int:
        return number_size(str(value))
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, str):
        return text_size(value)
    if isinstance(value, int | Decimal):
        return number_size(str(value))
    if isinstance(value, float):
        return number_size(repr(value))
    if isinstance(value, bytes | bytearray | memoryview) or hasattr(value, "value"):
        return _binary_size(value)
    if isinstance(value, Mapping):
        return 3 + sum(text_size(str(k)) + value_size(v) + 1 for k, v in value.items())
    if isinstance(value, list | tuple):
        return 3 + sum(value_size(v) + 1 for v in value)
    if isinstance(value, set | frozenset):
        return sum(value_size(v) for v in value)
    raise TypeError(f"no DynamoDB type for {type(value).__name__}")


def item_size(values: Mapping[str, Any]) -> int:
    """Bytes of an item given as plain Python values: every name plus its value."""
    return sum(text_size(name) + value_size(v) for name, v in values.items())


def typed_value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one wire-format value (``{"S": ...}``, ``{"M": {...}}`` ...)."""
    (kind, raw), *_ = value.items()
    if kind == "S":
        return text_size(str(raw))
    if kind == "N":
        return number_size(str(raw))
    if kind == "B":
        return _binary_size(raw)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(text_size(str(v)) for v in raw)
    if kind == "NS":
        return sum(number_size(str(v)) for v in raw)
    if kind == "BS":
        return sum(_binary_size(v) for v in raw)
    if kind == "L":
        return 3 + sum(typed_value_size(v) + 1 for v in raw)
    if kind == "M":
        return 3 + sum(text_size(k) + typed_value_size(v) + 1 for k, v in raw.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def typed_item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes of a wire-format item: every attribute name plus its value."""
    return sum(text_size(name) + typed_value_size(v) for name, v in item.items())

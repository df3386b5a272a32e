"""DynamoDB's Python values as plain JSON values: the one rendering the API and the CLI share."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

__all__ = ["plain"]


def plain(value: Any) -> Any:
    """Decimal as int or float, sets as sorted lists, binary (bytes or boto3's ``Binary``)
    as base64 text, as DynamoDB's own JSON wire format carries it; maps and lists deeply."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((plain(v) for v in value), key=str)
    raw = getattr(value, "value", value)  # boto3's Binary wraps bytes in .value
    if isinstance(raw, bytes | bytearray):
        return base64.b64encode(bytes(raw)).decode()
    return value

"""How the ``turnstile`` command prints what it prints: ``--output json|table|text``.

``json`` is what the HTTP API answers, indented (the default of most commands, and what
scripts read); ``table`` lines a list of rows (or one record, field by field) up in
aligned columns, long cells cut short; ``text`` is plain ``key: value`` lines, whole.
Values are first made plain (``turnstile.base.jsonable.plain``: Decimal as a number, sets as
lists, binary as base64), so the three agree on what they show.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from turnstile.base.jsonable import plain

__all__ = ["FORMATS", "cell", "render", "table", "to_json", "to_table", "to_text"]

#: The values of ``--output``.
FORMATS = ("json", "table", "text")

#: What a missing value (JSON null) shows as in a table or in text.
NONE = "-"
#: What an empty list or map shows as in a table or in text.
EMPTY = "(none)"
#: A table cell longer than this is cut short (ending ``...``): the table stays readable,
#: ``--output text`` and ``json`` show it whole.
MAX_CELL = 48


def _json_default(value: Any) -> Any:
    converted = plain(value)
    return converted if converted is not value else str(value)


def to_json(value: Any) -> str:
    """Indented JSON, as the command has always printed it."""
    return json.dumps(plain(value), indent=2, default=_json_default)


def cell(value: Any) -> str:
    """One value as a table cell or after ``key: ``: null as ``-``, booleans as JSON
    writes them, a list of scalars comma-separated, anything nested as compact JSON."""
    value = plain(value)
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping | list) and not value:
        return EMPTY
    if isinstance(value, list) and not any(isinstance(v, Mapping | list) for v in value):
        return ", ".join(cell(v) for v in value)
    if isinstance(value, Mapping | list):
        return json.dumps(value, separators=(", ", ": "), default=_json_default)
    return str(value)


def _short(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 3] + "..."


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Rows (maps) as aligned columns under a header: numbers right-aligned, the rest
    left. ``columns``: which keys, in order (default every key, in first-seen order)."""
    if columns is None:
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row))
        columns = list(seen)
    plain_rows = [{k: plain(row.get(k)) for k in columns} for row in rows]
    cells = [[_short(cell(row[k])) for k in columns] for row in plain_rows]
    right = [
        any(_numeric(row[k]) for row in plain_rows)
        and all(_numeric(row[k]) or row[k] is None for row in plain_rows)
        for k in columns
    ]
    widths = [max([len(k), *(len(r[i]) for r in cells)]) for i, k in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        padded = (
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        )
        return "  ".join(padded).rstrip()

    return "\n".join([line(columns), *(line(r) for r in cells)])


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, Mapping) for v in value)


def to_table(value: Any) -> str:
    """A list of rows as a table; a map's lists of rows (a page: ``events``, ``signups``)
    each as a table, its other fields as ``key: value`` lines after them; any other map
    as two columns, field and value."""
    value = plain(value)
    if _is_rows(value):
        return table(value) if value else EMPTY
    if isinstance(value, list):
        return table([{"value": v} for v in value]) if value else EMPTY
    if not isinstance(value, Mapping):
        return cell(value)
    listed = [k for k, v in value.items() if _is_rows(v)]
    if not listed:
        return table([{"field": k, "value": v} for k, v in value.items()]) if value else EMPTY
    parts = []
    for key in listed:
        rows = value[key]
        parts.append(f"{key}:\n{table(rows)}" if len(listed) > 1 and rows else to_table(rows))
    rest = [f"{k}: {cell(v)}" for k, v in value.items() if k not in listed]
    return "\n".join([*parts, *rest])


def _text_lines(value: Any, indent: str) -> list[str]:
    lines: list[str] = []
    for key, item in value.items():
        if isinstance(item, Mapping) and item:
            lines.append(f"{indent}{key}:")
            lines += _text_lines(item, indent + "  ")
        elif _is_rows(item) and item:
            lines.append(f"{indent}{key}:")
            for row in item:
                block = _text_lines(row, indent + "    ") or [f"{indent}    {EMPTY}"]
                lines.append(f"{indent}  - {block[0].lstrip()}")
                lines += block[1:]
        elif isinstance(item, list) and item:
            lines.append(f"{indent}{key}:")
            lines += [f"{indent}  - {cell(v)}" for v in item]
        else:
            lines.append(f"{indent}{key}: {cell(item)}")
    return lines


def to_text(value: Any) -> str:
    """``key: value`` lines; a nested map indented under its key, a list as ``- `` items
    under it; a list of records (sweep's runs) as blocks apart by a blank line."""
    value = plain(value)
    if isinstance(value, Mapping):
        return "\n".join(_text_lines(value, "")) or EMPTY
    if _is_rows(value):
        return "\n\n".join(to_text(v) for v in value) if value else EMPTY
    return cell(value)


def render(value: Any, fmt: str) -> str:
    """``value`` in the ``--output`` format ``fmt`` (one of ``FORMATS``)."""
    if fmt == "json":
        return to_json(value)
    if fmt == "table":
        return to_table(value)
    if fmt == "text":
        return to_text(value)
    raise ValueError(f"not an output format: {fmt!r} (one of {', '.join(FORMATS)})")

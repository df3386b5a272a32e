"""Hypothesis strategies for anything a producer with PutItem on the intake table can write.

Items are in DynamoDB's typed form (``{"S": ...}``, ``{"N": ...}``, ...), as a producer that
bypasses the SDK sends them: any key (1 to 2,048 bytes for the partition key, 1 to 1,024 for
the sort key, ``#``-prefixed, reserved, unicode, spaces, the ids of the test's real events),
``seats``, ``attributes`` and ``submitted_at`` of any type, nesting and size. Every item is
kept under DynamoDB's 400 KB item limit (``put_item`` would refuse it otherwise), by the
sizing rules below, which over-estimate both DynamoDB's and moto's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from hypothesis import strategies as st

from turnstile.base.contract import ID_PATTERN

__all__ = [
    "MAX_DECISION_BYTES",
    "MAX_ITEM_BYTES",
    "RESERVED_KEYS",
    "clearly_invalid",
    "hostile_items",
    "item_size",
    "partition_keys",
    "rewrites",
    "sort_keys",
    "typed_values",
    "valid_body",
]

#: DynamoDB refuses items over 400 KB (409,600 bytes); moto over 405,000 by its own count.
MAX_DECISION_BYTES = 400 * 1024
#: What an example's item may take, with room under both limits.
MAX_ITEM_BYTES = 400_000
MAX_PARTITION_KEY_BYTES = 2048
MAX_SORT_KEY_BYTES = 1024

#: Keys turnstile uses (or used) for its own items.
RESERVED_KEYS = ("#EVENT", "#sweeper", "#lease", "#sweeper-runs")


# -- sizes ---------------------------------------------------------------------------------


def value_size(typed: Mapping[str, Any]) -> int:
    """Bytes of one typed value by DynamoDB's rules, rounded up (numbers by their text)."""
    [(kind, value)] = typed.items()
    if kind == "S":
        return len(value.encode())
    if kind == "N":
        return len(value) + 1
    if kind == "B":
        return len(value)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(v.encode()) for v in value)
    if kind == "NS":
        return sum(len(v) + 1 for v in value)
    if kind == "BS":
        return sum(len(v) for v in value)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in value)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in value.items())
    raise ValueError(f"not a DynamoDB type: {kind}")


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes of a typed item: attribute names plus values."""
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def _cut(text: str, max_bytes: int) -> str:
    """``text`` shortened to at most ``max_bytes`` of UTF-8, never splitting a character."""
    return text.encode()[:max_bytes].decode(errors="ignore")


def _repeat(seed: str, n_bytes: int) -> str:
    """A string of about ``n_bytes`` UTF-8 bytes built from ``seed`` (cheap to generate)."""
    if not seed or n_bytes <= 0:
        return ""
    per = len(seed.encode())
    return _cut(seed * (n_bytes // per + 1), n_bytes)


# -- keys ----------------------------------------------------------------------------------

_texts = st.text(min_size=1, max_size=40)
_unicode = st.text(
    alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF), min_size=1, max_size=12
)


def _long_key(max_bytes: int) -> st.SearchStrategy[str]:
    return st.builds(
        _repeat, st.text(min_size=1, max_size=6), st.integers(min_value=1, max_value=max_bytes)
    ).filter(bool)


def partition_keys(event_ids: Sequence[str] = ()) -> st.SearchStrategy[str]:
    """Any partition key a producer can write, the test's real events often."""
    known = [*event_ids, *RESERVED_KEYS, "no-such-event", "#", "#EVENT#x", " concert"]
    return st.one_of(
        st.sampled_from(known),
        st.sampled_from(known),
        _texts,
        _unicode,
        _texts.map(lambda t: "#" + t),
        st.builds(lambda e, t: f"{e} {t}", st.sampled_from(known), _texts),
        _long_key(MAX_PARTITION_KEY_BYTES),
        st.just("p" * MAX_PARTITION_KEY_BYTES),
    ).map(lambda k: _cut(k, MAX_PARTITION_KEY_BYTES) or "#")


def sort_keys() -> st.SearchStrategy[str]:
    """Any sort key; never ``v-…`` or ``late-…`` (the property's valid signups own those)."""
    return (
        st.one_of(
            st.sampled_from([*RESERVED_KEYS, "x", "#event", "#EVENT ", "EVENT", "-x", "a" * 129]),
            st.sampled_from(RESERVED_KEYS),
            _texts,
            _unicode,
            _texts.map(lambda t: "#" + t),
            st.from_regex(ID_PATTERN, fullmatch=True),
            _long_key(MAX_SORT_KEY_BYTES),
            st.just("s" * MAX_SORT_KEY_BYTES),
        )
        .map(lambda k: _cut(k, MAX_SORT_KEY_BYTES) or "#")
        .filter(lambda k: not k.startswith(("v-", "late-")))
    )


# -- values of any type --------------------------------------------------------------------

_numbers = st.one_of(
    st.integers(min_value=-(10**37), max_value=10**37).map(str),
    st.sampled_from(
        [
            "1e125",
            "-1e125",
            "9.9999999999999999999999999999999999999E+125",
            "1E-130",
            "-1E-130",
            "0",
            "-0",
            "1.0",
            "1.5",
            "0.1",
            "1000001",
            "12345678901234567890123456789012345678",
        ]
    ),
    st.builds(
        lambda whole, frac: f"{whole}.{frac}",
        st.integers(min_value=-(10**6), max_value=10**6),
        st.integers(min_value=0, max_value=10**9),
    ),
)


def _sets(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    if kind == "SS":
        return st.sets(st.text(min_size=1, max_size=10), min_size=1, max_size=5).map(
            lambda s: {"SS": sorted(s)}
        )
    if kind == "NS":
        return st.sets(st.integers(-(10**6), 10**6), min_size=1, max_size=5).map(
            lambda s: {"NS": [str(n) for n in sorted(s)]}
        )
    return st.sets(st.binary(min_size=1, max_size=10), min_size=1, max_size=5).map(
        lambda s: {"BS": sorted(s)}
    )


_scalars = st.one_of(
    st.text(max_size=20).map(lambda s: {"S": s}),
    _numbers.map(lambda n: {"N": n}),
    st.binary(max_size=20).map(lambda b: {"B": b}),
    st.booleans().map(lambda b: {"BOOL": b}),
    st.just({"NULL": True}),
    _sets("SS"),
    _sets("NS"),
    _sets("BS"),
)

_names = st.text(min_size=1, max_size=8)


def typed_values(max_leaves: int = 12) -> st.SearchStrategy[dict[str, Any]]:
    """Any DynamoDB value: scalars, sets, lists and maps nested a few levels."""
    return st.recursive(
        _scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4).map(lambda v: {"L": v}),
            st.dictionaries(_names, children, max_size=4).map(lambda v: {"M": v}),
        ),
        max_leaves=max_leaves,
    )


def _deep(value: dict[str, Any], levels: Sequence[bool]) -> dict[str, Any]:
    for as_list in levels:
        value = {"L": [value]} if as_list else {"M": {"d": value}}
    return value


# ``attributes`` is already one level down; DynamoDB allows 32 levels in all.
_deep_values = st.builds(_deep, _scalars, st.lists(st.booleans(), min_size=1, max_size=28))

_ISO = "%Y-%m-%dT%H:%M:%S"


def _at(shift: timedelta, naive: bool = False, zulu: bool = False) -> st.SearchStrategy[Any]:
    """A timestamp ``shift`` from the moment of drawing, as a typed string."""

    def build() -> dict[str, Any]:
        when = datetime.now(UTC) + shift
        if zulu:
            return {"S": when.strftime(_ISO) + "Z"}
        return {"S": (when.replace(tzinfo=None) if naive else when).isoformat()}

    return st.builds(build)


def _submitted_at_values() -> st.SearchStrategy[dict[str, Any] | None]:
    return st.one_of(
        st.none(),  # missing
        _at(timedelta(0), naive=True),  # datetime.utcnow().isoformat()
        _at(timedelta(hours=-1), zulu=True),
        _at(timedelta(hours=-1)),
        st.just({"S": "2999-01-01T00:00:00Z"}),
        _at(timedelta(days=1), naive=True),
        st.sampled_from(["yesterday", "", "T", "2026-13-45T99:99:99Z", "0000-00-00", "NaN"]).map(
            lambda s: {"S": s}
        ),
        st.datetimes().map(lambda d: {"S": d.isoformat()}),
        st.text(max_size=30).map(lambda s: {"S": s}),
        st.just({"S": "2026-01-01T00:00:00Z" + "x" * 10_000}),
        typed_values(max_leaves=4),
    )


def _seats_values() -> st.SearchStrategy[dict[str, Any] | None]:
    return st.one_of(
        st.none(),
        st.sampled_from(["1", "2", "0", "-1", "1.5", "1e125", "-1e125", "1E-130", "1000001"]).map(
            lambda n: {"N": n}
        ),
        _numbers.map(lambda n: {"N": n}),
        st.sampled_from(["1", "two", ""]).map(lambda s: {"S": s}),
        typed_values(max_leaves=4),
    )


def _attributes_values() -> st.SearchStrategy[dict[str, Any] | None]:
    return st.one_of(
        st.none(),
        typed_values(),
        st.dictionaries(_names, typed_values(max_leaves=6), max_size=5).map(lambda v: {"M": v}),
        _deep_values.map(lambda v: {"M": {"deep": v}}),
        st.just({"M": {"blob": {"B": b"\x00\xff"}, "set": {"BS": [b"\x00", b"\xff"]}}}),
        st.just({"M": {"l": {"L": [{"M": {}}] * 1300}}}),
    )


#: Attributes a producer may add that turnstile itself reads or writes somewhere.
_EXTRA_NAMES = [
    "redrive",
    "redriven_at",
    "expires_at",
    "status",
    "reason",
    "position",
    "journal",
    "capacity",
    "taken",
    "version",
    "sequence_number",
    "decided_at",
]


_SEATS = _seats_values()
_SUBMITTED_AT = _submitted_at_values()
_ATTRIBUTES = _attributes_values()
_EXTRAS = st.dictionaries(st.sampled_from(_EXTRA_NAMES), typed_values(4), max_size=2)


@st.composite
def hostile_items(draw: st.DrawFn, event_ids: Sequence[str] = ()) -> dict[str, Any]:
    """One intake item as any producer may write it, at most ``MAX_ITEM_BYTES``."""
    item: dict[str, Any] = {
        "event_id": {"S": draw(partition_keys(event_ids))},
        "signup_id": {"S": draw(sort_keys())},
    }
    for name, values in (
        ("seats", _SEATS),
        ("submitted_at", _SUBMITTED_AT),
        ("attributes", _ATTRIBUTES),
    ):
        value = draw(values)
        if value is not None:
            item[name] = value
    extras = draw(_EXTRAS)
    for name, value in extras.items():
        item.setdefault(name, value)
    if item_size(item) > MAX_ITEM_BYTES:
        item.pop("submitted_at", None)  # the 10 KB one with 2 KB keys: keep the keys
    # One field, sometimes, padded toward the item limit: the size is drawn, the bytes are not.
    where = draw(st.sampled_from([None, None, "submitted_at", "attributes", "pad", "seats"]))
    if where is not None:
        room = MAX_ITEM_BYTES - item_size(item) - 64
        size = draw(st.integers(min_value=0, max_value=max(room, 0)))
        seed = draw(st.text(min_size=1, max_size=4))
        if where == "attributes":
            binary = draw(st.booleans())
            leaf = {"B": b"\xab" * size} if binary else {"S": _repeat(seed, size)}
            item["attributes"] = {"M": {"pad": leaf}}
        else:
            item[where] = {"S": _repeat(seed, size)}
    assert item_size(item) <= MAX_ITEM_BYTES, item_size(item)
    return item


def valid_body(seats: int, attributes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The non-key attributes of a signup that keeps the contract, typed."""
    body: dict[str, Any] = {
        "seats": {"N": str(seats)},
        "submitted_at": {"S": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
    }
    if attributes:
        body["attributes"] = {"M": {k: {"S": str(v)} for k, v in attributes.items()}}
    return body


def rewrites() -> st.SearchStrategy[dict[str, Any]]:
    """A producer's rewrite of an existing item's body: often a valid one turned invalid."""
    return st.one_of(
        st.just({"seats": {"S": "1"}}),
        st.just({"seats": {"N": "1e125"}, "attributes": {"S": "EVIL"}}),
        st.just({"attributes": {"M": {"a": {"S": "EVIL"}}}, "seats": {"N": "1"}}),
        st.just({"submitted_at": {"S": "2999-01-01T00:00:00Z"}}),
        st.just({}),
        st.dictionaries(
            st.sampled_from(["seats", "attributes", "submitted_at", "redrive", "redriven_at"]),
            typed_values(6),
            max_size=3,
        ),
    )


# -- an oracle for what is certainly invalid -----------------------------------------------


def _whole_seats(raw: Mapping[str, Any] | None) -> bool:
    if raw is None:
        return True
    if set(raw) != {"N"}:
        return False
    try:
        seats = Decimal(raw["N"])
    except InvalidOperation:
        return False
    return seats == seats.to_integral_value() and seats >= 1


def clearly_invalid(item: Mapping[str, Any]) -> bool:
    """True where the contract is certainly broken: a bad id, seats that are not a whole
    number of at least 1, or attributes that are not a map. (Other rules are left to the
    code: the property asserts only what no reading of the contract disputes.)"""
    ids_ok = all(ID_PATTERN.fullmatch(item[k]["S"]) for k in ("event_id", "signup_id"))
    attributes = item.get("attributes")
    return not ids_ok or not _whole_seats(item.get("seats")) or (
        attributes is not None and "M" not in attributes
    )

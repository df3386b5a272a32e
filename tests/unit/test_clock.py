"""Clocks: the format turnstile writes, and reading whatever a producer wrote."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnstile.base.clock import MAX_CLOCK_SKEW_S, age_s, parse_timestamp, utc_now

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_utc_now_is_iso_utc_with_microseconds():
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", utc_now())
    assert parse_timestamp(utc_now()) is not None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-01T12:00:00Z", NOW),
        ("2026-01-01T12:00:00.000000Z", NOW),
        ("2026-01-01T13:00:00+01:00", NOW),
        # naive, as datetime.utcnow().isoformat() writes it: taken as UTC
        ("2026-01-01T12:00:00", NOW),
        ("2026-01-01T12:00:00.123456", NOW + timedelta(microseconds=123456)),
        (" 2026-01-01T12:00:00Z ", NOW),
    ],
)
def test_parse_timestamp_gives_aware_utc(text: str, expected: datetime):
    parsed = parse_timestamp(text)
    assert parsed == expected
    assert parsed is not None and parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "junk",
    [
        None,
        "",
        "yesterday",
        "2026-13-01T00:00:00Z",
        "2026-01-01T00:00:00Z" * 10,  # too long to be a timestamp
        "0001-01-01T00:00:00+01:00",  # out of range once in UTC
        "9999-12-31T23:59:59-01:00",
        Decimal("1767268800"),
        1767268800,
        ["2026-01-01T00:00:00Z"],
        {"S": "2026-01-01T00:00:00Z"},
        b"2026-01-01T00:00:00Z",
    ],
    ids=repr,
)
def test_parse_timestamp_gives_none_for_junk(junk: Any):
    assert parse_timestamp(junk) is None


@given(st.text(max_size=80) | st.binary() | st.integers() | st.none() | st.floats())
def test_parse_timestamp_never_raises(value: Any):
    parsed = parse_timestamp(value)
    assert parsed is None or parsed.utcoffset() == timedelta(0)


@given(st.datetimes(timezones=st.none() | st.just(UTC) | st.just(timezone(timedelta(hours=5)))))
def test_age_never_raises_and_is_never_negative(when: datetime):
    age = age_s(when.isoformat(), NOW)
    assert age is None or age >= 0


@pytest.mark.parametrize(
    ("value", "age"),
    [
        ("2026-01-01T11:59:00Z", 60.0),
        ("2026-01-01T11:59:00", 60.0),  # naive: UTC
        ((NOW + timedelta(seconds=MAX_CLOCK_SKEW_S / 2)).isoformat(), 0.0),  # skew: age 0
        ((NOW + timedelta(seconds=MAX_CLOCK_SKEW_S + 1)).isoformat(), None),  # the future
        ("9999-01-01T00:00:00Z", None),
        ("garbage", None),
        (None, None),
    ],
)
def test_age_is_unknown_for_junk_and_the_future(value: Any, age: float | None):
    assert age_s(value, NOW) == age

"""Checks of the benchmark's numeric options, for argparse: a count below its least, a share
outside 0 to 1, a rate or a number of seconds that is negative, nan or inf is a usage error
naming the option (exit 2) before anything runs."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["positive_seconds", "rate", "seconds", "share", "whole"]


def whole(low: int, what: str) -> Callable[[str], int]:
    """A whole number of at least ``low`` (``what`` names it in the error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what  # argparse names a type's failure by it
    return parse


def _number(text: str, fits: Callable[[float], bool], expected: str) -> float:
    """``text`` as a number that ``fits`` (nan, inf and words never do unless it says so)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not fits(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def share(text: str) -> float:
    """A share, from 0 to 1."""
    return _number(text, lambda v: 0 <= v <= 1, "a share from 0 to 1")


def rate(text: str) -> float:
    """Signups a second: 0 (a burst) or more, finite."""
    return _number(text, lambda v: 0 <= v < math.inf, "signups a second, 0 or more")


def seconds(text: str) -> float:
    """A number of seconds: 0 or more, finite."""
    return _number(text, lambda v: 0 <= v < math.inf, "seconds, 0 or more")


def positive_seconds(text: str) -> float:
    """A number of seconds above 0, finite (a span a figure is divided by)."""
    return _number(text, lambda v: 0 < v < math.inf, "seconds, more than 0")

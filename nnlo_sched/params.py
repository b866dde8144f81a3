"""Click parameter types shared by every command: numbers that are finite.

Why: ``float("nan")``, ``float("inf")`` and ``float("1e999")`` all parse, and click's own ``float`` and
``FloatRange`` take them (``nan`` passes every range check, since every comparison with it is false). A
non-finite value then travels into layouts, sleeps, JSON records and fractions and fails far from the option
that brought it. Every numeric option of every command uses :data:`FINITE_FLOAT` or :func:`finite_range`,
so such a value is refused where it is typed, as one line naming the option.
"""
from __future__ import annotations

import math
from typing import Any

import click


def finite(value: float, what: str) -> float:
    """``value`` if it is a finite number; else ValueError naming ``what`` (an option, a key)."""
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {value!r}")
    return value


def parse_finite(text: Any) -> float:
    """A finite float from ``text`` (``"1e999"``, ``"nan"``, ``"inf"`` and non-numbers are ValueError)."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a number")
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number (nan, inf and numbers beyond 1e308 are refused)")
    return value


class FiniteFloat(click.ParamType):
    """A float that is finite and, optionally, within ``[min, max]`` (``min_open``: strictly above ``min``)."""

    name = "number"

    def __init__(self, min: float | None = None, max: float | None = None, min_open: bool = False) -> None:
        self.min, self.max, self.min_open = min, max, min_open

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float) and math.isfinite(value) and self._inside(value):
            return value
        try:
            number = parse_finite(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)
        if not self._inside(number):
            self.fail(f"{number:g} is not {self._describe()}", param, ctx)
        return number

    def _inside(self, value: float) -> bool:
        if self.min is not None and (value <= self.min if self.min_open else value < self.min):
            return False
        return self.max is None or value <= self.max

    def _describe(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f"{'>' if self.min_open else '>='} {self.min:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        return "a number " + " and ".join(parts)

    def __repr__(self) -> str:
        return f"FiniteFloat(min={self.min}, max={self.max})"


#: any finite number
FINITE_FLOAT = FiniteFloat()


def finite_range(min: float | None = None, max: float | None = None, *, min_open: bool = False) -> FiniteFloat:
    """A finite number within ``[min, max]`` (``min_open``: strictly greater than ``min``)."""
    return FiniteFloat(min, max, min_open)

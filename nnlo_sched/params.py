"""Click parameter types and callbacks shared by every command: finite numbers, walltimes, GPUs, block sizes;
and :class:`TypedCommand`, a command that keeps its arguments as the user typed them.

Why finite: ``float("nan")``, ``float("inf")`` and ``float("1e999")`` all parse, and click's own ``float`` and
``FloatRange`` take them (``nan`` passes every range check, since every comparison with it is false). A
non-finite value then travels into layouts, sleeps, JSON records and fractions and fails far from the option
that brought it. Every numeric option of every command uses :data:`FINITE_FLOAT` or :func:`finite_range`,
so such a value is refused where it is typed, as one line naming the option.
"""
from __future__ import annotations

import math
from typing import Any

import click

from nnlo.errors import ConfigError
from nnlo.roles import RoleError, parse_block_sizes
from nnlo_sched.walltime import parse_walltime


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


def parse_walltime_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Click callback: a walltime in any accepted form -> seconds (``nnlo layout``, ``nnlo submit``)."""
    if value is None:
        return None
    try:
        return parse_walltime(value)
    except ConfigError as e:
        raise click.BadParameter(str(e)) from None


def parse_gpus(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """Click callback: ``1``, ``2``, ``0.5``, ``1/4`` -> a number of GPUs per worker rank (finite, >= 0)."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        if "/" in text:
            num, den = text.split("/", 1)
            gpus = parse_finite(int(num) / int(den))
        else:
            gpus = parse_finite(text)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise click.BadParameter(f"{value!r} is not a number of GPUs; use e.g. 1, 2, 0.5 or 1/4") from None
    if not math.isfinite(gpus) or gpus < 0:
        raise click.BadParameter(f"{value!r} is not a number of GPUs; use e.g. 1, 2, 0.5, 1/4 or 0 (CPU only)")
    return gpus


def parse_block_sizes_option(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    """Click callback: ``6,6,3,3`` -> (6, 6, 3, 3) (``nnlo layout``, ``nnlo optimize``)."""
    if value is None:
        return None
    try:
        return parse_block_sizes(value)
    except RoleError as e:
        raise click.BadParameter(str(e)) from None


#: where :class:`TypedCommand` keeps the arguments as typed (``ctx.meta``)
_TYPED = "nnlo.typed_args"


def keep_typed(ctx: click.Context, args: list[str]) -> None:
    """Remember ``args`` as the user typed them (the first call wins: before any rewriting)."""
    ctx.meta.setdefault(_TYPED, list(args))


def typed_args(ctx: click.Context) -> list[str]:
    """The arguments of ``ctx``'s command as the user typed them (to show them, or a corrected command line)."""
    return list(ctx.meta.get(_TYPED, ()))


class TypedCommand(click.Command):
    """A click command that keeps its arguments as typed (:func:`typed_args`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        keep_typed(ctx, args)
        return super().parse_args(ctx, args)

"""Walltimes as users type them and as clocks print them: pure text <-> seconds, used by every layer.

``parse_walltime`` reads what ``--walltime``/``-t`` and the profiles' queue limits take; ``format_hms`` is the
plain ``HH:MM:SS`` clock. How a batch system's directive spells a walltime is its scheduler's business
(:meth:`nnlo_sched.schedulers.base.Scheduler.walltime_directive`).
"""
from __future__ import annotations

import re

from nnlo.errors import ConfigError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_CLOCK = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_UNIT = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_walltime(text: str | int) -> int:
    """Seconds from a walltime: ``MM``, ``HH:MM:SS``, ``D-HH:MM:SS``, ``90m``, ``2h``, ``1.5h``, ``45s``.

    A bare number is minutes (as in Slurm's ``--time`` and LSF's ``-W``). Two fields, ``A:B``, are refused:
    LSF reads them as hours:minutes and Slurm as minutes:seconds, so either reading would be a silent guess
    that costs someone a job of the wrong length; the error names both readings in a form that is not
    ambiguous.
    """
    if isinstance(text, int):
        s = text
    else:
        t = str(text).strip().lower()
        m = _UNIT.match(t)
        c = _CLOCK.match(t)
        if m:
            s = round(float(m.group(1)) * _UNITS[m.group(2)])
        elif c:
            days, a, b, d = c.groups()
            if days is not None and d is None:  # D-HH:MM:SS only
                raise _bad_walltime(text)
            if b is None:  # MM
                s = int(a) * 60
            elif d is None:  # A:B: hours:minutes (LSF) or minutes:seconds (Slurm)
                raise _ambiguous(text, int(a), int(b))
            else:  # HH:MM:SS
                s = int(a) * 3600 + _sixty(b, text) * 60 + _sixty(d, text)
            if days is not None:
                s += int(days) * 86400
        else:
            raise _bad_walltime(text)
    if s <= 0:
        raise ConfigError(f"walltime {text!r} is not positive; give e.g. 2h or 01:30:00")
    return s


def _sixty(part: str, text: str) -> int:
    v = int(part)
    if v >= 60:
        raise _bad_walltime(text)
    return v


def _bad_walltime(text: object) -> ConfigError:
    return ConfigError(
        f"walltime {text!r} is malformed; use MM, HH:MM:SS, D-HH:MM:SS, 90m, 2h or 1.5h"
    )


def _ambiguous(text: object, a: int, b: int) -> ConfigError:
    """``A:B``, with the unambiguous spelling of each reading that is a valid walltime."""
    readings = []
    if b < 60:
        readings.append(f"{a}:{b:02d}:00 for {a} h {b} min")
        if a < 60:
            readings.append(f"0:{a:02d}:{b:02d} for {a} min {b} s")
    return ConfigError(f"walltime {text!r} is ambiguous (hours:minutes to LSF, minutes:seconds to Slurm); write "
                       f"{' or '.join(readings) or 'H:MM:SS'}, or use a unit: 90m, 1.5h, 45s")


def format_hms(seconds: int) -> str:
    """``HH:MM:SS`` with hours unbounded."""
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h:02d}:{m:02d}:{s:02d}"


def format_hours_minutes(minutes: int) -> str:
    """``[H:]MM`` from whole minutes (``45``, ``2:00``)."""
    h, m = divmod(int(minutes), 60)
    return f"{h}:{m:02d}" if h else f"{m}"


#: A run's walltime where none is given (``nnlo submit -t``, :func:`nnlo_sched.api.spec`, a ``RunSpec``).
DEFAULT_WALLTIME = "1h"
#: The same, in seconds.
DEFAULT_WALLTIME_S = parse_walltime(DEFAULT_WALLTIME)

"""What the hierarchy tests read from a run: the rank map the runtime logged, the losses of its history."""
from __future__ import annotations

import re

from tests.helpers.runtime import Run

RANK_MAP = re.compile(r"training (.+?): \d+ worker|all-reduce training: (.+?), engine")


def rank_map_logged(run: Run) -> str:
    """The rank map the runtime logged (``0 master | 1 worker | ...``)."""
    for line in (run.err + run.out).splitlines():
        m = RANK_MAP.search(line)
        if m:
            return m.group(1) or m.group(2)
    raise AssertionError(f"no rank map in the output:\n{run.err[-2000:]}")


def losses(history: dict, key: str = "loss") -> list[float]:
    return [e[key] for e in history["history"]]


"""Fixtures for the hierarchy tests: the runtime's tiny data set and real ``nnlo train`` runs under mpirun."""
from __future__ import annotations

import re
from pathlib import Path

from tests.runtime.conftest import MODELS, Run, blobs, run_train, write_blobs  # noqa: F401 - fixtures

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


__all__ = ["MODELS", "Path", "losses", "rank_map_logged", "write_blobs"]

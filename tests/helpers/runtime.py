"""The runtime tests' tiny data set (``bench/blobs.py``, shared with the benchmarks), their test models, and a
training run's result."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.blobs import write_blobs
from tests.helpers.env import RUNTIME_MODELS as MODELS

#: Seconds a real launch of a tiny run may take on a busy 2-core machine (they take seconds).
TIMEOUT = 240

__all__ = ["MODELS", "TIMEOUT", "Run", "write_blobs"]


@dataclass
class Run:
    """A finished ``nnlo train``: exit status, output, and its run directory."""

    rc: int
    out: str
    err: str
    out_dir: Path

    @property
    def history(self) -> dict[str, Any]:
        return json.loads((self.out_dir / "history.json").read_text())

    def error_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.startswith("nnlo: error:")]

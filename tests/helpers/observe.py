"""Helpers for the observability tests: the traced MPI job, reading PNGs and traces."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from tests.helpers.env import REPO

JOB = REPO / "tests" / "observe" / "traced_job.py"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk; fails the test unless the file is a PNG."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def non_blank_fraction(path: Path) -> float:
    """Fraction of pixels that are not (almost) white: a plot with curves has plenty."""
    import matplotlib.image as mpimg

    img = mpimg.imread(str(path))
    rgb = img[..., :3]
    return float((rgb.min(axis=-1) < 0.9).mean())


def load_trace(path: Path) -> dict[str, Any]:
    def reject(constant: str) -> None:
        raise AssertionError(f"{path}: {constant} is not valid JSON for browsers (chrome://tracing, Perfetto)")

    data = json.loads(Path(path).read_text(), parse_constant=reject)
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    return data

"""Fixtures for the observability tests."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.observe import JOB


@pytest.fixture
def run_traced_job(mpirun: str, nnlo_env: dict[str, str]):
    def run(out: Path, np_: int = 3, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [mpirun, "-np", str(np_), sys.executable, str(JOB), "--out", str(out), *extra],
            env=nnlo_env, capture_output=True, text=True, timeout=240,
        )

    return run

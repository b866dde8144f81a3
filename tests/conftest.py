"""Shared test fixtures: the virtual environment's tools and a subprocess environment that finds nnlo."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

# Scheduler queries retry with backoff (0.5, 1, 2 s); tests that break a scheduler on purpose need not wait.
os.environ.setdefault("NNLO_SCHED_RETRY_DELAY", "0.05")


def tool(name: str) -> str | None:
    """A program from this interpreter's environment first (mpirun, nnlo), else from PATH."""
    local = BIN / name
    return str(local) if local.exists() else shutil.which(name)


@pytest.fixture(scope="session")
def mpirun() -> str:
    path = tool("mpirun")
    if path is None:
        if os.environ.get("NNLO_REQUIRE_MPI"):
            pytest.fail("mpirun not found but NNLO_REQUIRE_MPI is set (run scripts/setup.sh torch,mpi)")
        pytest.skip("mpirun not found: pip install mpich (scripts/setup.sh does)")
    return path


@pytest.fixture(scope="session")
def nnlo_env() -> dict[str, str]:
    """Environment for subprocesses: this venv first on PATH, the checkout importable."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env

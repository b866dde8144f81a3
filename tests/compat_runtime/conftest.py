"""Fixtures for the upstream-user runtime tests: a user's project folder (tests/helpers/projects.py) and the
``nnlo`` console script run in it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.env import tool
from tests.helpers.projects import Result, write_project

TIMEOUT = 120


@pytest.fixture
def project(tmp_path: Path) -> dict[str, Any]:
    return write_project(tmp_path / "project")


@pytest.fixture
def nnlo_cli(nnlo_env: dict[str, str], request: pytest.FixtureRequest):
    """nnlo_cli(args, cwd, mpirun_np=None) -> Result: the ``nnlo`` console script (not ``python -m``, which
    would put the working directory on sys.path by itself), or, with ``mpirun_np``, the command as the ranks of an
    external ``mpirun -np N nnlo ...`` run it (in the warm MPI world, whose ranks have no working directory of
    theirs on sys.path either)."""
    script = tool("nnlo")
    if script is None:
        pytest.skip("the nnlo console script is not installed in this environment")

    def run(args: list[str], cwd: Path, mpirun_np: int | None = None) -> Result:
        if mpirun_np is not None:
            done = request.getfixturevalue("mpi_world").run(mpirun_np, args, env=nnlo_env, cwd=cwd, timeout=TIMEOUT)
            return Result(done.returncode, done.stdout, done.stderr)
        proc = subprocess.run([script, *args], cwd=cwd, env=nnlo_env, capture_output=True, text=True, timeout=TIMEOUT)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def clean_path():
    """Undo what importing a model module does to sys.path and sys.modules, for the next test."""
    path, modules = list(sys.path), set(sys.modules)
    cwd = os.getcwd()
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:  # the user's modules only (never a framework's)
        if name.startswith("nnlo_user_model_") or name in ("mymodels", "site_settings"):
            del sys.modules[name]
    os.chdir(cwd)

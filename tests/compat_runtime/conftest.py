"""Fixtures for the upstream-user runtime tests: a user's project folder (tests/helpers/projects.py) and the
``nnlo`` console script run in it."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.env import BIN, REPO, subprocess_env, tool
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


@dataclass(frozen=True)
class EditableInstall:
    """A venv holding this checkout as the README's set-up installs it (``pip install -e``), and the
    environment of a user who activated it: no ``PYTHONPATH`` (the suite's own, tests/conftest.py, would put the
    checkout first on every process's path and hide how an installed nnlo imports itself)."""

    bin: Path
    env: dict[str, str]

    def nnlo(self, args: list[str], cwd: Path, timeout: float = TIMEOUT) -> Result:
        proc = subprocess.run([str(self.bin / "nnlo"), *args], cwd=cwd, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def python_m(self, args: list[str], cwd: Path, stdin: str = "") -> Result:
        proc = subprocess.run([str(self.bin / "python"), "-m", *args], cwd=cwd, env=self.env, input=stdin,
                              capture_output=True, text=True, timeout=TIMEOUT)
        return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="session")
def editable_install(tmp_path_factory: pytest.TempPathFactory) -> EditableInstall:
    """One per session: a venv over this one's packages (a path entry to its site-packages, whose own ``.pth``
    files - its install of nnlo among them - are not read; its MPI library linked into the venv's ``lib/``, where
    mpi4py looks) with ``pip install --no-deps -e`` of this checkout."""
    venv = tmp_path_factory.mktemp("editable") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    python = venv / "bin" / "python"
    env = {k: v for k, v in subprocess_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join((str(venv / "bin"), str(BIN), env.get("PATH", "")))
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          env=env, capture_output=True, text=True, check=True, timeout=TIMEOUT).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "_nnlo_test_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    for lib in (Path(sys.prefix) / "lib").iterdir():  # the MPI library the mpich wheel put beside Python's
        if not lib.name.startswith("python") and not (venv / "lib" / lib.name).exists():
            (venv / "lib" / lib.name).symlink_to(lib)
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e",
                          str(REPO)], env=env, cwd=venv, capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-3000:]
    where = subprocess.run([str(python), "-c", "import nnlo_sched, nnlo; print(nnlo.__file__)"], env=env,
                           cwd=venv, capture_output=True, text=True, timeout=TIMEOUT)
    assert where.stdout.strip() == str(REPO / "nnlo" / "__init__.py"), where.stdout + where.stderr
    return EditableInstall(venv / "bin", env)

"""The suite's shared fixtures (tests/conftest.py makes them visible everywhere): the venv's mpirun, the
environment of a test's subprocesses, the warm MPI world, the session's private Slurm.

Each process-starting fixture belongs to a marker (:data:`tests.helpers.markers.FIXTURE_MARKERS`): a test that
uses it without the marker fails at collection, so ``scripts/test.sh --fast`` never starts a process.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.private_slurm import SlurmCluster, SlurmUnavailable
from tests.helpers.env import subprocess_env, tool
from tests.helpers.runtime import MODELS, TIMEOUT, Run, write_blobs
from tests.helpers.world import MpiWorld, WorldRun


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
    return subprocess_env()


@pytest.fixture(scope="session")
def mpi_world(mpirun: str, nnlo_env: dict[str, str]) -> Iterator[MpiWorld]:
    """The session's warm MPI world (tests/helpers/world.py), started at its first run."""
    world = MpiWorld(mpirun, nnlo_env)
    try:
        yield world
    finally:
        world.close()


def world_runner(world: MpiWorld, mpirun: str, nnlo_env: dict[str, str]) -> Callable[..., WorldRun]:
    """``run(np, *argv, env=None, cwd=None, timeout=240, real=False)``: what ``mpirun -np NP python -m
    nnlo_sched ARGV`` gives (exit status, stdout, stderr), run in ``world`` (``env``: the whole environment,
    default the tests' subprocess one; ``cwd``: default this process's). ``real=True``, or more ranks than the
    world has, starts the real ``mpirun`` instead: for what only a launch shows (a failure ending the job, a kill,
    the launch itself). ARGV may start with a ``.py`` program instead of nnlo's command line."""

    def run(np_: int, *argv: str | Path, env: dict[str, str] | None = None, cwd: str | Path | None = None,
            timeout: float = TIMEOUT, real: bool = False) -> WorldRun:
        args = [str(a) for a in argv]
        if real or np_ > world.size:
            program = args if args[0].endswith(".py") else ["-m", "nnlo_sched", *args]
            proc = subprocess.run([mpirun, "-np", str(np_), sys.executable, *program], env=env or nnlo_env, cwd=cwd,
                                  capture_output=True, text=True, timeout=timeout)
            return WorldRun(proc.returncode, proc.stdout, proc.stderr)
        return world.run(np_, args, env=env or nnlo_env, cwd=cwd, timeout=timeout)

    return run


@pytest.fixture
def nnlo_mpi(mpi_world: MpiWorld, mpirun: str, nnlo_env: dict[str, str]) -> Callable[..., WorldRun]:
    """:func:`world_runner` on the session's warm world (torch and nnlo imported)."""
    return world_runner(mpi_world, mpirun, nnlo_env)


#: Ranks of the TensorFlow world: the Keras runs are 3-rank (a master and two workers).
KERAS_WORLD_SIZE = 3


@pytest.fixture(scope="session")
def keras_world(mpirun: str, nnlo_env: dict[str, str]) -> Iterator[MpiWorld]:
    """The session's warm MPI world with TensorFlow and Keras imported too (``warm="keras"``), of
    :data:`KERAS_WORLD_SIZE` ranks, started at its first run: only a session that runs a Keras world test pays for
    it. Its tests carry ``pytest.mark.xdist_group("keras")``, so that one pytest-xdist worker starts it."""
    world = MpiWorld(mpirun, nnlo_env, size=KERAS_WORLD_SIZE, warm="keras")
    try:
        yield world
    finally:
        world.close()


@pytest.fixture
def nnlo_keras(keras_world: MpiWorld, mpirun: str, nnlo_env: dict[str, str]) -> Callable[..., WorldRun]:
    """:func:`world_runner` on the TensorFlow world (:func:`keras_world`)."""
    return world_runner(keras_world, mpirun, nnlo_env)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The session's one private Slurm, with accounting (sacct) where its packages are there (skip with the
    reason where it cannot run, fail in CI: ``NNLO_REQUIRE_SLURM=1``)."""
    try:
        try:
            cluster = SlurmCluster.start(accounting=True)
        except SlurmUnavailable:
            cluster = SlurmCluster.start()
    except SlurmUnavailable as e:
        if os.environ.get("NNLO_REQUIRE_SLURM") == "1":
            pytest.fail(f"NNLO_REQUIRE_SLURM=1 but the test Slurm cannot start: {e}")
        pytest.skip(f"no private test Slurm: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def blobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The runtime tests' tiny data set (tests/helpers/runtime.py), written once per session."""
    return write_blobs(tmp_path_factory.mktemp("blobs"))


@pytest.fixture
def run_train(mpi_world: MpiWorld, mpirun: str, nnlo_env: dict[str, str], blobs: dict[str, Path], tmp_path: Path):
    """``run_train(np, *args, env=None, launcher="world"|"mpirun"|"-n", data=True, out_dir=None, model="tiny.py")``
    -> :class:`~tests.helpers.runtime.Run`: ``nnlo train`` on the tiny data set.

    ``launcher``: ``"world"`` (default) runs it in the warm MPI world; ``"mpirun"`` starts ``mpirun -np N python
    -m nnlo_sched train``, ``"-n"`` starts ``nnlo train -n N`` - real launches, for what only they show (a rank's
    failure ending the job, the launch itself)."""
    counter = iter(range(1000))

    def run(np_: int, *args: str, env: dict[str, str] | None = None, launcher: str = "world",
            data: bool = True, out_dir: Path | None = None, model: str | None = "tiny.py") -> Run:
        out = out_dir or tmp_path / f"run{next(counter)}"
        argv = ["train"]
        if model is not None:
            argv += ["--model", str(MODELS / model) if not Path(model).is_absolute() else model]
        if data:
            argv += ["--train", str(blobs["train"]), "--val", str(blobs["val"])]
        argv += ["--checkpoint", str(out), *args]
        full_env = {**nnlo_env, **(env or {})}
        if launcher == "world":
            done = mpi_world.run(np_, argv, env=full_env, timeout=TIMEOUT)
            return Run(done.returncode, done.stdout, done.stderr, out)
        if launcher == "mpirun":
            cmd = [mpirun, "-np", str(np_), sys.executable, "-m", "nnlo_sched", *argv]
        elif launcher == "-n":
            cmd = [sys.executable, "-m", "nnlo_sched", *argv, "-n", str(np_)]
        else:
            raise ValueError(f"launcher {launcher!r}: world, mpirun or -n")
        proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=TIMEOUT)
        return Run(proc.returncode, proc.stdout, proc.stderr, out)

    return run


@pytest.fixture
def probe_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model-and-data probe run in this process instead of a fresh interpreter: the same ``probe()``, its
    errors as the same one-line ConfigError. The subprocess itself (its time limit, a valid run through it) is
    tested by tests/sched/test_checks.py: test_a_valid_run_renders_and_its_checks_pass and
    test_a_hanging_import_is_stopped_by_the_time_limit."""
    import contextlib

    from nnlo.errors import ConfigError, NnloError
    from nnlo_sched import checks

    def in_process(config, search, cwd):  # type: ignore[no-untyped-def]
        with contextlib.chdir(cwd):
            try:
                return checks.probe(config, search)
            except NnloError as e:
                raise ConfigError(str(e)) from None

    monkeypatch.setattr(checks, "_probe", in_process)

"""Fixtures of the chain tests: test cluster profiles, a private runs home, the stand-in payload, Slurm.

The profiles (written per test into a temporary ``NNLO_CLUSTERS`` folder) use ``fake_python.sh`` as their
interpreter: the chain code (``nnlo job start/end``) runs for real, and the job's payload is the quick
stand-in ``payload.py`` unless a test asks for the real ``nnlo train``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/slurm_harness.py

from slurm_harness import SlurmCluster, SlurmUnavailable  # noqa: E402

FAKE_PYTHON = HERE / "fake_python.sh"
BIN = Path(sys.executable).parent

PROFILES = {
    "testlocal": f'extends = "local"\npython = "{FAKE_PYTHON}"\n',
    "testslurm": (f'scheduler = "slurm"\nlauncher = "srun"\nlauncher_flags = ["--mpi=pmi2"]\ncores_per_node = 8\n'
                  f'nodes = 1\npython = "{FAKE_PYTHON}"\nsignal = "USR2"\nsignal_lead_s = 20\n'),
    "testlsf": (f'scheduler = "lsf"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 8\n'
                f'nodes = 1\npython = "{FAKE_PYTHON}"\nsignal = "USR1"\nsignal_lead_s = 60\n'),  # hydra forwards USR1, not USR2
    "testpbs": (f'scheduler = "pbs"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 8\n'
                f'nodes = 1\npython = "{FAKE_PYTHON}"\n'),
}


@pytest.fixture
def chain_env(monkeypatch: pytest.MonkeyPatch):
    """A fresh runs home and the test profiles, in this process's environment (jobs inherit it).

    Not under pytest's ``tmp_path``: pytest prunes old base folders of the same user at the start of every
    session, and on a shared machine another session could delete a folder that a background job of this
    test still writes to.
    """
    tmp_path = Path(tempfile.mkdtemp(prefix="nnlo-chain-"))
    try:
        yield from _chain_env(tmp_path, monkeypatch)
    finally:
        if not os.environ.get("NNLO_KEEP_TEST_RUNS"):
            shutil.rmtree(tmp_path, ignore_errors=True)


def _chain_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    clusters = tmp_path / "clusters"
    clusters.mkdir()
    for name, text in PROFILES.items():
        (clusters / f"{name}.toml").write_text(text)
    monkeypatch.setenv("NNLO_CLUSTERS", str(clusters))
    monkeypatch.setenv("NNLO_HOME", str(tmp_path / "runs"))
    monkeypatch.setenv("NNLO_TEST_REAL_PYTHON", sys.executable)
    monkeypatch.setenv("NNLO_LOCAL_KILL_WAIT", "3")
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("PYTHONPATH", str(HERE.parent.parent))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def make_spec(cluster: str, *, epochs: int = 4, epoch_s: float = 0.3, model: str = "model.py",
              walltime_s: int = 60, max_resubmits: int = 10, name: str = "t", epochs_per_job: int = 0,
              hold_at_epoch: int = 0, **kw: Any):
    """A stand-in training's spec (payload.py): ``epochs_per_job`` forces a walltime stop after that many epochs
    of each job, ``hold_at_epoch`` makes the job that reaches that epoch wait there for a stop signal or a kill."""
    from nnlo_sched.spec import RunSpec

    args = ["--model", model, "--epochs", str(epochs), "--model-arg", f"epoch_seconds={epoch_s}"]
    for knob, value in (("epochs_per_job", epochs_per_job), ("hold_at_epoch", hold_at_epoch)):
        if value:
            args += ["--model-arg", f"{knob}={value}"]
    return RunSpec(kind="train", args=args, cluster=cluster, name=name, walltime_s=walltime_s,
                   max_resubmits=max_resubmits, workers=1, workdir=os.getcwd(), **kw)


def submit(spec) -> Any:
    from nnlo_sched.profiles import load_profile
    from nnlo_sched.runs import submit_run

    return submit_run(spec, load_profile(spec.cluster))


def wait_for(what: str, ready: Callable[[], Any], timeout: float = 180.0, every: float = 0.2) -> Any:
    """Poll until ``ready()`` is truthy; fail (not hang) after a generous ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(every)


def run_state(run) -> str:
    return run.state.state


def nnlo(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess (the environment is the test's)."""
    proc = subprocess.run([sys.executable, "-m", "nnlo_sched", *args], capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"nnlo {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def status_json(run) -> dict[str, Any]:
    return json.loads(nnlo("status", run.id, "--json").stdout)


def epochs_done(run) -> list[int]:
    hist = json.loads((run.dir / "history.json").read_text())["history"]
    return [e["epoch"] for e in hist]


@pytest.fixture(scope="session")
def slurm_cluster():
    """A private single-node Slurm for the session (skip with the reason where it cannot run, fail in CI)."""
    try:
        cluster = SlurmCluster.start()
    except SlurmUnavailable as e:
        if os.environ.get("NNLO_REQUIRE_SLURM") == "1":
            pytest.fail(f"NNLO_REQUIRE_SLURM=1 but the test Slurm cannot start: {e}")
        pytest.skip(f"no private test Slurm: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster, chain_env, monkeypatch: pytest.MonkeyPatch):
    """The session's Slurm, reachable from this test's environment (sbatch, squeue, nnlo, the jobs)."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    return slurm_cluster

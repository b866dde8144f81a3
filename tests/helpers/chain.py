"""What the chain tests share: their test cluster profiles, the stand-in payload's spec, submitting, waiting, and
the real CLI in a subprocess.

The profiles (written per test into a temporary ``NNLO_CLUSTERS`` folder by tests/chain/conftest.py's
``chain_env``) use ``fake_python.sh`` as their interpreter: the chain code (``nnlo job start/end``) runs for real,
and the job's payload is the quick stand-in ``payload.py`` unless a test asks for the real ``nnlo train``.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers.env import REPO

CHAIN = REPO / "tests" / "chain"
FAKE_PYTHON = CHAIN / "fake_python.sh"

PROFILES = {
    "testlocal": f'extends = "local"\npython = "{FAKE_PYTHON}"\n',
    "testslurm": (f'scheduler = "slurm"\nlauncher = "srun"\nlauncher_flags = ["--mpi=pmi2"]\ncores_per_node = 8\n'
                  f'nodes = 1\npython = "{FAKE_PYTHON}"\nsignal = "USR2"\nsignal_lead_s = 20\n'),
    "testlsf": (f'scheduler = "lsf"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 8\n'
                f'nodes = 1\npython = "{FAKE_PYTHON}"\nsignal = "USR1"\nsignal_lead_s = 60\n'),  # hydra forwards USR1, not USR2
    "testpbs": (f'scheduler = "pbs"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 8\n'
                f'nodes = 1\npython = "{FAKE_PYTHON}"\n'),
    "testpbspro": (f'scheduler = "pbspro"\nlauncher = "mpirun"\nlauncher_command = "auto"\ncores_per_node = 8\n'
                   f'nodes = 1\npython = "{FAKE_PYTHON}"\nfilesystems = "home:flare"\n'),
    "testflux": (f'scheduler = "flux"\nlauncher = "flux"\ncores_per_node = 8\nnodes = 1\n'
                 f'python = "{FAKE_PYTHON}"\nsignal = "USR2"\nsignal_lead_s = 60\n'),
}


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
    return RunSpec.from_argv(kind="train", args=args, cluster=cluster, name=name, walltime_s=walltime_s,
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


def nnlo(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess (the environment is the test's)."""
    proc = subprocess.run([sys.executable, "-m", "nnlo_sched", *args], capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"nnlo {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def nnlo_here(*args: str) -> subprocess.CompletedProcess:
    """The real CLI run in this process (the environment is the test's), for a read-only command a test polls
    many times (``status``): a subprocess per poll costs an interpreter and nnlo's imports each time, and
    ``nnlo status`` has subprocess tests of its own (the tables, ``--watch``, a failing scheduler query)."""
    from nnlo_sched.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return subprocess.CompletedProcess(["nnlo", *args], code, out.getvalue(), err.getvalue())


def status_view(run_id: str) -> dict[str, Any]:
    """``nnlo status RUN --json``, in this process."""
    proc = nnlo_here("status", run_id, "--json")
    if proc.returncode != 0:
        raise AssertionError(f"nnlo status {run_id} --json exited {proc.returncode}: {proc.stderr}")
    return json.loads(proc.stdout)


def status_json(run) -> dict[str, Any]:
    return status_view(run.id)


def epochs_done(run) -> list[int]:
    hist = json.loads((run.dir / "history.json").read_text())["history"]
    return [e["epoch"] for e in hist]

"""A rank SIGKILLed under a real ``srun`` on the private Slurm ends its step within seconds (issue 31).

``srun`` itself would wait ``--wait=120`` s after the first task ended (or, before that option, the walltime):
the ranks left end the step themselves (:mod:`nnlo.liveness`). The step is launched with the srun launcher's own
argument list (``nnlo_sched.launchers.srun``) plus ``--mpi=pmi2``, as a Slurm site with pip's MPICH runs it.

On this single-host test Slurm pip's MPICH needs two settings to get through ``MPI_Init`` under srun (its
shared-memory and UCX address exchange fail otherwise: "failed to unpack address", "message truncated"):
``MPIR_CVAR_NOLOCAL=1`` and ``UCX_TLS=tcp,self``; a real site's MPI needs neither. Even so, a training's step
there stalled before its first epoch in one run of five (MPICH's UCX transport over TCP, before any kill), so the
test runs only when asked: ``NNLO_TEST_SRUN=1`` (docs/reliability.md has the times it measured); the same
mechanism under mpirun, every role, is ``test_dead_rank_mpi.py``, in every run of the suite. The rank is killed
once the job works, never at a guessed time; the wait is the suite's hang limit, not a measured time (printed).
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
import uuid
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from nnlo.rankfate import fate_line
from nnlo_sched.launchers.base import LaunchPlan
from nnlo_sched.launchers.srun import Srun
from nnlo_sched.profiles import load_profile
from tests.helpers.faults import HANG_LIMIT_S, KILL_CASES, error_lines, killable_run, start, subprocess_env, wait_until

pytestmark = [pytest.mark.slurm,
              pytest.mark.skipif(os.environ.get("NNLO_TEST_SRUN") != "1",
                                 reason="srun MPI steps of pip MPICH on the one-host test Slurm: NNLO_TEST_SRUN=1")]


def _srun_ranks(tag: str) -> dict[int, int]:
    """{rank: pid} of the Python ranks of the step whose environment holds ``tag`` (they are slurmstepd's
    children, not srun's)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            env = dict(e.split(b"=", 1) for e in (entry / "environ").read_bytes().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if comm.startswith("python") and env.get(b"NNLO_TEST_STEP") == tag.encode() and b"SLURM_PROCID" in env:
            found[int(env[b"SLURM_PROCID"])] = int(entry.name)
    return found


@pytest.mark.parametrize("case", list(KILL_CASES))
def test_a_killed_rank_ends_its_srun_step(case: str, slurm_cluster, blobs, tmp_path: Path) -> None:
    args, size, victim, words = KILL_CASES[case]
    out = tmp_path / "run"
    args, working = killable_run(args, blobs, out)
    srun = Srun(replace(load_profile("cscs"), launcher_flags=("--mpi=pmi2",)))
    launch = srun.argv(LaunchPlan(ranks=size, nodes=1, ranks_per_node=size, cores_per_rank=1,
                                  gpus_per_rank=Fraction(0)))
    assert "--wait=120" in launch and "--kill-on-bad-exit" not in " ".join(launch)
    tag = uuid.uuid4().hex
    env = {**subprocess_env(BRANIN_SLEEP="0.3", MPIR_CVAR_NOLOCAL="1", UCX_TLS="tcp,self", NNLO_TEST_STEP=tag),
           "SLURM_CONF": slurm_cluster.env["SLURM_CONF"]}
    job = start([*launch, "--time=5", sys.executable, "-m", "nnlo_sched", *args], tmp_path, env=env,
                name=case.replace(" ", "-"))
    wait_until(f"the {case}'s step to work", lambda: working(job), job=job)
    pids = wait_until("every rank's process", lambda: (lambda p: p if len(p) == size else None)(_srun_ranks(tag)),
                      job=job)
    killed_at = time.monotonic()
    os.kill(pids[victim], signal.SIGKILL)  # type: ignore[index]
    rc = job.wait_or_hang(HANG_LIMIT_S, what=f"the srun step after its {case} (rank {victim}) was killed")
    took = time.monotonic() - killed_at
    print(f"srun, {case}: the step ended {took:.1f} s after the kill, rc {rc} (load {os.getloadavg()[0]:.1f})")
    output = job.output()
    assert rc != 0 and "DUE TO TIME LIMIT" not in output, output[-3000:]
    # the ranks left said who died, and so does the chain's reading of the job's log (nnlo job end)
    lines = [ln for ln in error_lines(output) if " died: " in ln]
    assert lines and all(f"rank {victim} ({words}" in ln and f"on {socket.gethostname()}" in ln for ln in lines), \
        output[-3000:]
    fate = fate_line(output, out / "ranks")
    assert fate is not None and fate.startswith(f"rank {victim} ({words}"), (fate, output[-3000:])

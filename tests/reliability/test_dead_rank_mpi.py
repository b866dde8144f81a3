"""A rank SIGKILLed where the launcher does not end the job (``srun``, and ``jsrun``/``aprun`` by default): the
ranks left end it themselves (:mod:`nnlo.liveness`), in a training and in a shared search (issue 31).

Each rank runs below ``hide_death.sh``, a shell that stays alive when its rank is killed, so MPICH's ``mpirun``
sees no death - as ``srun`` (which waits for ``--wait``) sees none the job would end for. (Under a real ``srun``
on the private test Slurm: ``test_dead_rank_srun.py``, on request; docs/reliability.md.)
The rank is killed once the job works, never at a guessed time; the job must end with the contract's
rank-died status and one line naming the rank, its role and its node, and a search must give the dead
trial back to the pool. The wait is the suite's hang limit, not a measured time (the times are printed).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from nnlo.contract import EXIT_RANK_DIED
from tests.helpers.faults import (
    HANG_LIMIT_S,
    KILL_CASES,
    descendants,
    error_lines,
    killable_run,
    nnlo_argv,
    start,
    subprocess_env,
    wait_until,
)

pytestmark = [pytest.mark.mpi]
HIDE = Path(__file__).with_name("hide_death.sh")


def _python_ranks(root: int) -> dict[int, int]:
    """{rank: pid} of the Python rank processes below ``root`` (not their hide_death.sh shells)."""
    found = {}
    for pid in descendants(root):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        rank = next((int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"PMI_RANK=")), None)
        if comm.startswith("python") and rank is not None:
            found[rank] = pid
    return found


@pytest.mark.parametrize("case", list(KILL_CASES))
def test_a_killed_rank_the_launcher_does_not_see_ends_the_job(case: str, blobs, tmp_path: Path, mpirun: str) -> None:
    args, size, victim, words = KILL_CASES[case]
    out = tmp_path / "run"
    args, working = killable_run(args, blobs, out)
    env = subprocess_env(BRANIN_SLEEP="0.3")
    job = start([mpirun, "-np", str(size), "bash", str(HIDE), *nnlo_argv(*args)],
                tmp_path, env=env, name=case.replace(" ", "-"))
    wait_until(f"the {case}'s job to work", lambda: working(job), job=job)
    pids = wait_until("every rank's process", lambda: (lambda p: p if len(p) == size else None)(_python_ranks(
        job.proc.pid)), job=job)
    killed_at = time.monotonic()
    os.kill(pids[victim], signal.SIGKILL)  # type: ignore[index]
    rc = job.wait_or_hang(HANG_LIMIT_S, what=f"the job after its {case} (rank {victim}) was killed")
    print(f"{case}: the job ended {time.monotonic() - killed_at:.1f} s after the kill (load {os.getloadavg()[0]:.1f})")
    output = job.output()
    assert rc == EXIT_RANK_DIED, output[-3000:]
    lines = [ln for ln in error_lines(output) if " died: " in ln]
    assert lines and all(f"rank {victim} ({words}" in ln and f"on {socket.gethostname()}" in ln for ln in lines), \
        output[-3000:]
    if args[0] == "optimize" and victim != 0:  # the coordinator lived: it gave the dead block's trial back
        from nnlo.optimize.journal import read_journal

        records = read_journal(out)[0]
        done = {r["id"] for r in records if r["kind"] == "result"}
        open_ = [r["id"] for r in records if r["kind"] == "propose" and r["id"] not in done]
        released = [r["id"] for r in records if r["kind"] == "release"]
        assert open_ and released == open_, json.dumps(records[-6:])

"""A script of one's own in a chain and the batch system's walltime warning (issue 44, "Scripts that a
preemption never kills"): ``nnlo.stop_requested()``, and a script that never asks.

Each test runs one job of a script run the way a batch job's ranks do (``python -m nnlo_sched run RUN_DIR``,
one process, no MPI), between the chain's own ``job start`` and ``job end`` (in this process). The warning is
forced: the script sends SIGUSR1 to itself, as the batch system would; the deadline is given, never raced."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from nnlo.contract import ENV_DEADLINE, ENV_RUN_DIR, EXIT_RESUMABLE, SPEC_FILE
from nnlo_sched.chain import job_end, job_start
from nnlo_sched.inner import SCRIPT, parse_inner
from nnlo_sched.spec import RunSpec
from nnlo_sched.state import JobRecord, RunState, read_state, write_state

ASKING = '''
import json, os, signal, sys
from pathlib import Path
import nnlo

state = Path(nnlo.run_dir()) / "my-state.json"
step = json.loads(state.read_text())["step"] if state.exists() else 0
while not nnlo.stop_requested():  # the script's own training loop
    step += 1
    if step == 3:
        os.kill(os.getpid(), signal.SIGUSR1)  # the batch system's warning before the walltime, forced
state.write_text(json.dumps({"step": step}))
nnlo.checkpointed(state)
sys.exit(nnlo.EXIT_RESUMABLE)
'''

IGNORING = '''
import os, signal, time
os.kill(os.getpid(), signal.SIGUSR1)  # the batch system's warning, forced
while True:  # trains by itself and never asks
    time.sleep(0.01)
'''


def one_job(tmp_path, text: str, deadline: float, nnlo_env: dict[str, str]):
    """A script run whose job 1 runs ``text`` with job 2 queued behind it; the job's process and the run's
    state after the chain's ``job end``."""
    script = tmp_path / "mine.py"
    script.write_text(text)
    run = tmp_path / "run"
    run.mkdir()
    words = [str(script)]
    (run / SPEC_FILE).write_text(RunSpec.of(parse_inner(SCRIPT, words), words, "local",
                                            workdir=str(tmp_path)).to_json())
    write_state(run, RunState(run_id="mine", name="mine", cluster="local", scheduler="local", state="queued",
                              jobs=[JobRecord(job_id="1", submitted_at=1.0),
                                    JobRecord(job_id="2", submitted_at=1.0, depends_on="1")]))
    assert job_start(run, "1", submit_successor=False).ok
    env = {**nnlo_env, ENV_RUN_DIR: str(run), ENV_DEADLINE: str(int(deadline))}
    done = subprocess.run([sys.executable, "-m", "nnlo_sched", "run", str(run)], env=env, capture_output=True,
                          text=True, timeout=120)
    job_end(run, "1", done.returncode)
    return done, run, read_state(run)


@pytest.mark.slow
def test_a_script_that_asks_checkpoints_on_the_warning_and_the_chain_goes_on(tmp_path, nnlo_env):
    """Before: nnlo.stop_requested did not exist, and the warning's default action killed a script's loop."""
    done, run, st = one_job(tmp_path, ASKING, time.time() + 3600, nnlo_env)
    assert done.returncode == EXIT_RESUMABLE, done.stderr
    assert json.loads((run / "my-state.json").read_text()) == {"step": 3}  # stopped at the warning's step
    assert st.state == "resubmitting" and [j.status for j in st.jobs] == ["walltime", "queued"]


@pytest.mark.slow
def test_a_script_that_never_asks_is_ended_at_its_deadline_as_at_the_walltime(tmp_path, nnlo_env):
    """Before: the warning killed it (signal 10), which the chain took for a failure. Now it runs on to its
    deadline (here already passed, so at once), says it ignored the warning, and the chain counts a walltime
    without a checkpoint: it stops with that reason, no rank death, no retry."""
    done, run, st = one_job(tmp_path, IGNORING, time.time() - 1, nnlo_env)
    assert done.returncode == EXIT_RESUMABLE, done.stderr
    assert "nnlo: the script ignored the walltime warning SIGUSR1" in done.stderr
    assert "nnlo.stop_requested()" in done.stderr and "Traceback" not in done.stderr
    assert st.state == "failed" and st.jobs[0].status == "no-checkpoint"
    assert "without writing a new checkpoint" in st.error and "died" not in st.error

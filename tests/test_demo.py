"""The README's main job, ``scripts/demo.sh``, as a new user runs it from the clone (its set-up skipped: the
clone is set up): its chain is exercised by ``nnlo preempt`` whatever the machine's speed, and the hint it
prints at the end works as printed, from where the script was started."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def test_demo_is_preempted_resumed_done_and_its_hint_works():
    env = {k: v for k, v in os.environ.items() if k != "NNLO_HOME"}  # the default home, as a new user has it
    for knob in ("EPOCHS", "WALLTIME", "MIN_ACCURACY"):  # the README's main job exactly: its own defaults
        env.pop(knob, None)
    env.update(SETUP="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    run_dir = None
    try:
        proc = subprocess.run(["scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        m = re.search(r"^submitted run (\S+) as job", proc.stdout, re.M)
        assert m, proc.stdout + proc.stderr
        run_dir = ROOT / "nnlo-runs" / m.group(1)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"preempted job 1 of run {m.group(1)}" in proc.stdout
        # the first job preempted; on a busy machine later jobs may also stop at their walltime and be resumed
        counts = re.search(r"(\d+) job\(s\), (\d+) stopped with a checkpoint and resumed by the next \((\d+) "
                           r"preempted, (\d+) at the walltime\)", proc.stdout)
        assert counts, proc.stdout[-2000:]
        jobs, stopped, preempted, walltime = map(int, counts.groups())
        assert preempted == 1 and stopped == preempted + walltime == jobs - 1
        hint = re.search(r"^demo: OK \(logs: (.+?); status: ", proc.stdout, re.M)
        assert hint, proc.stdout[-2000:]
        logs = subprocess.run(hint.group(1), shell=True, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert logs.returncode == 0, logs.stderr
        assert "==> logs/job-1.out <==" in logs.stdout and "==> logs/job-2.out <==" in logs.stdout
    finally:
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)

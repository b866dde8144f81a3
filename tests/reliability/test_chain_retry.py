"""A rank killed inside a chained job: the job ends, and the chain goes on from the newest checkpoint.

Real local chain (render, submit, ``nnlo job start``, mpirun, ``nnlo job end``); the payload is the chain tests'
stand-in trainer (epochs are sleeps, checkpoints are real). Rank 0 is SIGKILLed after two checkpoints (the job
waits there for it, so the kill comes mid-run on any machine), as if a node lost a process: MPICH ends the job
with the signal's number as exit status.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.faults import wait_until

FINAL = ("done", "failed", "cancelled")


def _state(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def _payload_pid(run_dir: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(c.endswith(b"payload.py") for c in cmd) and str(run_dir).encode() in cmd:
                return int(entry.name)
    return None


@pytest.mark.mpi
def test_a_killed_rank_in_a_chain_is_retried_from_the_newest_checkpoint(local_chain, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "nnlo_sched", "submit", "-c", "chainlocal", "--name", "kill",
                           "--run-dir", str(run_dir), "-t", "10m", "--workers", "1", "--max-resubmits", "3",
                           "--no-check", "train", "--model", "model.py", "--epochs", "6", "--model-arg",
                           "epoch_seconds=0.2", "--model-arg", "hold_at_epoch=2"], cwd=tmp_path, env=local_chain,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    wait_until("two checkpoints", lambda: len(list((run_dir / "checkpoints").glob("ckpt-*"))) >= 2, limit=180)
    pid = wait_until("the payload process", lambda: _payload_pid(run_dir), limit=60)
    os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
    wait_until("the killed job's end to be recorded",
               lambda: any(j.get("rc") not in (None, 0) for j in _state(run_dir).get("jobs", [])), limit=90)
    final = wait_until("the chain to end", lambda: _state(run_dir).get("state") in FINAL and _state(run_dir),
                       limit=180)
    assert final["state"] == "done", final.get("error")  # type: ignore[union-attr]
    history = json.loads((run_dir / "history.json").read_text())["history"]
    assert [e["epoch"] for e in history] == [1, 2, 3, 4, 5, 6]
    statuses = [j["status"] for j in final["jobs"]]  # type: ignore[index]
    assert statuses.count("rank-died") == 1 and statuses.count("finished") == 1, statuses
    shown = subprocess.run([sys.executable, "-m", "nnlo_sched", "status", str(run_dir)], cwd=tmp_path,
                           env=local_chain, capture_output=True, text=True, timeout=120)
    assert "1 of 2 retries after a rank death used" in shown.stdout, shown.stdout + shown.stderr

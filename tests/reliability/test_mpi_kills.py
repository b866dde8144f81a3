"""Real MPI jobs killed from outside: a walltime (TERM to every process, KILL after a grace time) at random
moments, then resumed until done; and one rank SIGKILLed (worker, master, coordinator, block member).

The walltime cycle is what a batch system does at the end of an allocation; the run must always resume from a
complete checkpoint and finish with every epoch exactly once. A killed rank must end the whole job (no idle
allocation): a job still running :data:`tests.helpers.faults.HANG_LIMIT_S` after the kill fails the test as a hang.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.faults import (BRANIN, COMM_LIMIT, HANG_LIMIT_S, RUNTIME_MODELS, Job, error_lines, nnlo_argv, rank_pids, rng, start,
                         subprocess_env, wait_until)
from nnlo.checkpoint import list_checkpoints, read_manifest
from nnlo.roles import Shape, describe

pytestmark = [pytest.mark.mpi]

TRAIN_ARGS = ["--model", str(RUNTIME_MODELS / "tiny.py"), "--mode", "downpour", "--batch", "4",
              "--checkpoint-interval", "1"]


def _mpi_trials() -> int:
    value = os.environ.get("NNLO_FAULT_MPI_TRIALS", "")
    return int(value) if value.isdigit() and int(value) > 0 else 2


EPOCHS = max(6, 2 * _mpi_trials())  # enough work left for every kill cycle to land inside training


def _train(blobs: dict[str, Path], out: Path, *extra: str, name: str) -> Job:
    argv = nnlo_argv("train", "-n", "3", *TRAIN_ARGS, "--train", str(blobs["train"]), "--val", str(blobs["val"]),
                     "--checkpoint", str(out / "run"), *extra)
    return start(argv, out, name=name)


def _completed(run: Path) -> bool:
    """The run's history says every epoch was trained (written before the processes begin to exit)."""
    try:
        history = json.loads((run / "history.json").read_text())
    except (OSError, ValueError):
        return False
    return history.get("stopped_reason") == "completed" and history.get("epochs_done") == EPOCHS


def test_walltime_kills_at_random_moments_then_resume_finishes(blobs, tmp_path: Path) -> None:
    r = rng("walltime-mpi")
    outcomes = []
    for cycle in range(_mpi_trials()):
        job = _train(blobs, tmp_path, "--epochs", str(EPOCHS), "--restore", "auto", name=f"cycle{cycle}")
        wait_until("training to start", lambda: "epoch " in job.err or job.proc.poll() is not None, job=None)
        if job.proc.poll() is not None:  # the earlier cycles left little to do: it finished before its kill
            assert job.proc.returncode == 0, job.err[-3000:]
            outcomes.append(("finished before the kill", None))
            break
        time.sleep(r.uniform(0.0, 2.0))
        os.killpg(job.proc.pid, signal.SIGTERM)  # every process of the step, as Slurm does at the walltime
        time.sleep(r.choice([0.0, r.uniform(0.0, 0.5), r.uniform(0.5, 3.0)]))
        ended = job.proc.poll()  # 75: checkpointed and stopped within the grace time; None: KILLed below
        job.kill_group()
        job.wait_or_hang(what=f"walltime cycle {cycle}")
        ckpts = list_checkpoints(tmp_path / "run" / "checkpoints")
        outcomes.append((ended if ended is not None else "KILL", [read_manifest(c)["epoch"] for c in ckpts]))
        if ended in (15, 143) and _completed(tmp_path / "run"):
            break  # on a fast machine the SIGTERM can land after the last epoch, while the processes exit
        # 9/137: Hydra, SIGTERMed with the ranks, SIGKILLed those still checkpointing - a kill like the one below
        assert ended in (None, 0, 75, 9, 137), job.err[-3000:]
        assert "Traceback" not in job.err, job.err[-3000:]
    print("walltime cycles (rc, checkpoint epochs):", outcomes)
    final = _train(blobs, tmp_path, "--epochs", str(EPOCHS), "--restore", "auto", name="final")
    rc = final.wait_or_hang(limit=300, what="the final resumed run")
    assert rc == 0, final.err[-3000:]
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert history["epochs_done"] == EPOCHS and history["stopped_reason"] == "completed"
    assert [e["epoch"] for e in history["history"]] == list(range(1, EPOCHS + 1))
    assert [e["samples"] for e in history["history"]] == [240] * EPOCHS


def _rank_of(role: str, world: int, shape: Shape, last: bool = False) -> int:
    """The rank holding ``role`` in nnlo's own role map (never a hard-coded guess)."""
    ranks = [r.rank for r in describe(world, shape).ranks if r.role.value == role]
    return ranks[-1] if last else ranks[0]


# -- one rank killed ------------------------------------------------------------------------------------
CASES = {
    # role: (command, world size, rank to kill, words an error line must hold, extra options)
    "worker": ("train", 3, 2, "worker", []),
    "master": ("train", 3, 0, "master", []),
    "sub-master": ("train", 5, _rank_of("master", 5, Shape(n_masters=3), last=True), "master",
                   ["--n-masters", "3"]),
    "coordinator": ("optimize", 5, 0, "coordinator", []),
    "block member": ("optimize", 5, 3, "block", []),
}


def _killed_rank_job(role: str, blobs: dict[str, Path], folder: Path) -> tuple[int, str]:
    """Start the job as a user does, SIGKILL one rank once it works, return (rc, output)."""
    command, size, rank, _, extra = CASES[role]
    if command == "train":
        args = ["train", *TRAIN_ARGS, *extra, "--epochs", "100000", "--train", str(blobs["train"]), "--val",
                str(blobs["val"]), "--checkpoint", str(folder / "run")]
        env = subprocess_env()
        started = lambda job: "epoch " in job.err  # noqa: E731
    else:
        args = ["optimize", "--model", str(BRANIN), "--block-size", "2", "--hyper-opt", "random",
                "--num-iterations", "100000", "--output", str(folder / "run")]
        env = subprocess_env(BRANIN_SLEEP="0.2")
        started = lambda job: (folder / "run" / "trials.json").exists()  # noqa: E731
    # as a user starts it: `nnlo train|optimize -n N` (the relaunch wrapper watches mpirun and names the dead rank)
    job = start(nnlo_argv(args[0], "-n", str(size), *args[1:]), folder, env=env, name=role.replace(" ", "-"))
    wait_until(f"the {role}'s job to start working", lambda: started(job), job=job)
    pids = wait_until("every rank's process", lambda: (lambda p: p if len(p) == size else None)(rank_pids(job.proc.pid)),
                      job=job)
    os.kill(pids[rank], signal.SIGKILL)  # type: ignore[index]
    rc = job.wait_or_hang(HANG_LIMIT_S, what=f"the job after its {role} (rank {rank}) was killed")
    return rc, job.output()


@pytest.mark.parametrize("role", list(CASES))
def test_a_killed_rank_ends_the_whole_job_with_one_line_naming_it(role: str, blobs, tmp_path: Path,
                                                                  mpirun: str) -> None:
    """One launch per role carries what used to be three tests' assertions (each launched the same job):
    the job ends (no hang: :data:`HANG_LIMIT_S`), exit status 1, and the error line names the rank.

    A training names the killed rank and its role. A search - known limit (docs/reliability.md, 2b): in a
    5-rank search the process that vanishes first is often one Hydra killed in its teardown, not the one
    killed here, so the named rank is not asserted: one line naming a recorded rank and its role (and the
    signal where its exit status could be read), never only Hydra's banner."""
    rc, output = _killed_rank_job(role, blobs, tmp_path)
    assert rc != 0, output[-2000:]  # the whole job ended
    command, _, rank, word, _ = CASES[role]
    if command == "train":
        lines = error_lines(output)
        assert any(f"rank {rank}" in ln and word in ln for ln in lines), output[-2000:]
    else:
        lines = [ln for ln in error_lines(output) if "was killed by" in ln]
        roles = ("coordinator", "block 0 master", "block 0 worker", "block 1 master", "block 1 worker")
        assert len(lines) == 1 and re.search(r"rank [0-4] \((" + "|".join(roles) + r")", lines[0]), output[-2000:]
    assert rc == 1, output[-2000:]


def test_a_frozen_worker_ends_the_job_through_the_watchdog(blobs, tmp_path: Path, mpirun: str) -> None:
    """SIGSTOP, not SIGKILL: the rank stays alive, so the launcher sees nothing; nnlo's watchdog must end it."""
    args = ["train", *TRAIN_ARGS, "--epochs", "100000", "--train", str(blobs["train"]), "--val", str(blobs["val"]),
            "--checkpoint", str(tmp_path / "run")]
    # the limit bounds every wait, the ranks' start-up included: long enough for a start-up on a busy machine
    job = start([mpirun, "-np", "3", *nnlo_argv(*args)], tmp_path, env=subprocess_env(NNLO_COMM_TIMEOUT=COMM_LIMIT),
                name="frozen")
    wait_until("training to start", lambda: "epoch " in job.err, job=job)
    pids = wait_until("every rank's process", lambda: (lambda p: p if len(p) == 3 else None)(rank_pids(job.proc.pid)),
                      job=job)
    os.kill(pids[2], signal.SIGSTOP)  # type: ignore[index]
    try:
        rc = job.wait_or_hang(HANG_LIMIT_S, what=f"the job after a worker froze (NNLO_COMM_TIMEOUT={COMM_LIMIT})")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pids[2], signal.SIGKILL)  # type: ignore[index]
    assert rc != 0
    lines = error_lines(job.output())
    assert lines and "a peer died or hangs" in lines[0], job.output()[-3000:]

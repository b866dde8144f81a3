"""Stop signals on every launch path, with real runs: each ends the run with exit 75 and a fresh checkpoint.

SIGTERM, SIGUSR1, SIGUSR2 and SIGINT (:data:`nnlo.contract.STOP_SIGNALS`) all mean "checkpoint now and stop",
wherever they land:

* ``nnlo train -n 2``: the nnlo process's group gets it (as from a terminal's Ctrl-C or a process manager);
* ``mpirun -np 2 python -m nnlo_sched train`` started by hand: mpirun gets it, relayed the way the batch
  script and ``-n`` relay it (:meth:`Mpirun.relay`: MPICH's Hydra dies on SIGUSR2, so it gets SIGUSR1);
* a batch job of the local scheduler (``nnlo submit --cluster local``): the batch shell gets it (Slurm's
  ``--signal=B:``, LSF's warning action), SIGTERM its whole process group (the scheduler at the walltime);
* ``nnlo optimize -n 5``: the search saves its state and stops.

Training runs a paced model (``tests/chain/paced_mlp.py``) with no periodic checkpoints, so the only
checkpoint is the one the stop wrote, and it must hold the epoch the run stopped in. The signal is sent once
the first epoch is logged. Also here: the :class:`nnlo.stop.Stop` class itself and the ``-n`` relay.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.faults import BRANIN, REPO, Job, nnlo_argv, start, subprocess_env, wait_until
from nnlo.checkpoint import find_latest, list_checkpoints, read_manifest
from nnlo.contract import EXIT_RESUMABLE, STOP_SIGNALS
from nnlo.stop import INSIST_AFTER_S, Stop
from nnlo_sched.launchers import Mpirun
from nnlo_sched.profiles import load_profile

PACED = REPO / "tests" / "chain" / "paced_mlp.py"
EPOCHS = 1000  # never reached: every run here is stopped by its signal
SIGNALS = ["SIGTERM", "SIGUSR1", "SIGUSR2", "SIGINT"]
#: 1 master + 1 worker: every rank of the job gets the signal and writes its part of the stop's checkpoint; a
#: second worker reaches no other code of the signal path (a stop's checkpoint of two workers and its exact
#: resume: tests/runtime/test_runtime_restore_mpi.py, through the same SIGUSR1 handling)
RANKS = "2"
LIMIT_S = 240.0  # a healthy run here takes seconds; this only separates "slow on a busy machine" from "hung"


def _relayed(name: str) -> str:
    """The signal the ranks get when ``name`` goes through the local profile's launcher."""
    return "SIG" + Mpirun(load_profile("local")).relay(name.removeprefix("SIG"))


def _train_args(blobs: dict[str, Path]) -> list[str]:
    return ["--model", str(PACED), "--model-arg", "n_inputs=8", "--model-arg", "n_classes=3",
            "--model-arg", "pause_s=0.02", "--train", str(blobs["train"]), "--val", str(blobs["val"]),
            "--epochs", str(EPOCHS), "--batch", "16", "--checkpoint-interval", "0"]


def _assert_stopped_with_checkpoint(out: Path, output: str, name: str) -> None:
    """Stopped by the signal, and the one checkpoint is complete and holds the epoch it stopped in."""
    assert f"received {_relayed(name)}" in output, output[-3000:]
    history = json.loads((out / "history.json").read_text())
    assert history["stopped_reason"] == "signal", history
    assert 1 <= history["epochs_done"] < EPOCHS
    latest = find_latest(out)
    assert latest is not None, f"no complete checkpoint in {out}"
    assert list_checkpoints(out / "checkpoints") == [latest]  # no periodic ones: this is the stop's
    manifest = read_manifest(latest)
    assert manifest["stopped_reason"] == "signal"
    assert manifest["epoch"] == history["epochs_done"]
    assert {"master.pkl", "worker-0.pkl"} <= {p.name for p in latest.iterdir()}


def _wait_for_training(job: Job) -> None:
    wait_until("the first epoch", lambda: "epoch 1/" in job.err, limit=LIMIT_S, job=job)


# -- (a) nnlo train -n 2 ----------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("name", SIGNALS)
def test_nnlo_train_n_stops_with_a_checkpoint(name: str, blobs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    job = start(nnlo_argv("train", "-n", RANKS, *_train_args(blobs), "--checkpoint", str(out)), tmp_path)
    _wait_for_training(job)
    os.killpg(job.proc.pid, signal.Signals[name])  # nnlo's whole process group, as a terminal's Ctrl-C
    assert job.wait_or_hang(LIMIT_S, f"nnlo train -n {RANKS} after {name}") == EXIT_RESUMABLE, job.err[-3000:]
    _assert_stopped_with_checkpoint(out, job.err, name)


# -- (b) mpirun started by hand -----------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("name", SIGNALS)
def test_mpirun_train_stops_with_a_checkpoint(name: str, blobs: dict[str, Path], tmp_path: Path,
                                              mpirun: str) -> None:
    out = tmp_path / "run"
    job = start([mpirun, "-np", RANKS, *nnlo_argv("train", *_train_args(blobs), "--checkpoint", str(out))], tmp_path)
    _wait_for_training(job)
    os.kill(job.proc.pid, signal.Signals[_relayed(name)])  # as the batch script's trap relays it
    assert job.wait_or_hang(LIMIT_S, f"mpirun after {name}") == EXIT_RESUMABLE, job.err[-3000:]
    _assert_stopped_with_checkpoint(out, job.err, name)


# -- (c) a local batch job ------------------------------------------------------------------------------------
def _queued_job(run: Path) -> dict[str, Any]:
    try:
        return json.loads((run / "local" / "queue.json").read_text())["jobs"][0]
    except (OSError, ValueError, IndexError):
        return {}


@pytest.mark.mpi
@pytest.mark.parametrize("name", SIGNALS)
def test_local_batch_job_stops_with_a_checkpoint(name: str, blobs: dict[str, Path], tmp_path: Path) -> None:
    env = subprocess_env(NNLO_HOME=str(tmp_path / "home"), NNLO_LOCAL_KILL_WAIT="30")
    submitted = subprocess.run(
        nnlo_argv("submit", "--cluster", "local", "--name", "sig", "-t", "10m", "--workers", str(int(RANKS) - 1),
                  "--max-resubmits", "0", "train", *_train_args(blobs)),
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert submitted.returncode == 0, submitted.stderr
    (run,) = (tmp_path / "home").iterdir()
    log = run / "logs" / "job-1.out"
    try:
        wait_until("the job's first epoch", lambda: log.exists() and "epoch 1/" in log.read_text()
                   or _queued_job(run).get("rc") is not None, limit=LIMIT_S)
        job = _queued_job(run)
        assert job.get("rc") is None, log.read_text()[-3000:]
        if name == "SIGTERM":  # the scheduler at the limit: the batch shell and mpirun, which shares its group
            os.killpg(job["pid"], signal.SIGTERM)
        else:  # the warning signal to the batch shell alone
            os.kill(job["pid"], signal.Signals[name])
        wait_until("the job to end", lambda: _queued_job(run).get("rc") is not None, limit=LIMIT_S)
    finally:
        pid = _queued_job(run).get("pid")
        if _queued_job(run).get("rc") is None and pid:
            os.killpg(pid, signal.SIGKILL)
    output = log.read_text()
    assert _queued_job(run)["rc"] == EXIT_RESUMABLE, output[-3000:]
    state = json.loads((run / "state.json").read_text())
    assert state["jobs"][0]["rc"] == EXIT_RESUMABLE  # what `nnlo job end` recorded
    _assert_stopped_with_checkpoint(run, output, name)


# -- nnlo optimize -n 5 ----------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("name", ["SIGUSR2", "SIGTERM"])
def test_nnlo_optimize_n_saves_the_search_and_stops(name: str, tmp_path: Path) -> None:
    out = tmp_path / "search"
    job = start(nnlo_argv("optimize", "-n", "5", "--block-size", "2", "--model", str(BRANIN), "--hyper-opt",
                          "random", "--num-iterations", "400", "--output", str(out)),
                tmp_path, env=subprocess_env(BRANIN_SLEEP="0.5"))

    def finished() -> int:
        try:
            return len(json.loads((out / "trials.json").read_text()))
        except (OSError, ValueError):
            return 0

    wait_until("two finished trials", lambda: finished() >= 2, limit=LIMIT_S, job=job)
    os.killpg(job.proc.pid, signal.Signals[name])
    assert job.wait_or_hang(LIMIT_S, f"nnlo optimize -n 5 after {name}") == EXIT_RESUMABLE, job.err[-3000:]
    assert f"stopping (signal {_relayed(name)})" in job.err and "resubmit to resume" in job.err
    done = json.loads((out / "trials.json").read_text())
    assert 2 <= len(done) < 400  # a budget no machine finishes before the signal
    state = json.loads((out / "optimizer-state.json").read_text())
    assert [t["id"] for t in state["finished"]] == [t["id"] for t in done]


# -- the Stop class ------------------------------------------------------------------------------------------
def test_stop_records_the_first_signal_and_puts_the_handlers_back() -> None:
    def mine(signum: int, frame: object) -> None:
        raise AssertionError("the previous handler must not run while a Stop is installed")

    before = {sig: signal.signal(sig, mine) for sig in STOP_SIGNALS}
    try:
        for sig in STOP_SIGNALS:
            with Stop() as stop:
                assert not stop.raised
                os.kill(os.getpid(), sig)
                os.kill(os.getpid(), signal.SIGUSR1 if sig != signal.SIGUSR1 else signal.SIGUSR2)
                assert stop.signal_name == sig.name  # the first one counts
            assert all(signal.getsignal(s) is mine for s in STOP_SIGNALS)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_stop_inside_another_shares_its_signal() -> None:
    with Stop() as outer:
        with Stop() as inner:  # a trial's training inside a search block
            os.kill(os.getpid(), signal.SIGUSR2)
            assert inner.signal_name == "SIGUSR2" and not outer.raised
        assert outer.signal_name == "SIGUSR2"  # handed back on close
        with Stop() as later:
            assert later.raised  # the next training starts stopped: the process was asked to stop


def test_a_stop_outside_the_main_thread_installs_nothing() -> None:
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    seen: dict[signal.Signals, Any] = {}

    def install() -> None:
        with Stop():
            seen.update({sig: signal.getsignal(sig) for sig in STOP_SIGNALS})

    t = threading.Thread(target=install)
    t.start()
    t.join()
    assert seen == before


CHILD = """
import os, signal, sys, time
from nnlo.stop import INSIST_AFTER_S, Stop
sig = signal.Signals[sys.argv[1]]
stop = Stop().install()
os.kill(os.getpid(), sig)
os.kill(os.getpid(), sig)  # the same event twice (a scheduler and a relay): not insisting
print("after the repeat:", stop.signal_name, flush=True)
time.sleep(INSIST_AFTER_S + 0.2)
os.kill(os.getpid(), sig)
time.sleep(2)
print("still running", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", SIGNALS)
def test_a_second_sigterm_or_sigint_ends_the_process_at_once(name: str) -> None:
    child = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True, timeout=60,
                           check=False, env=subprocess_env())
    assert f"after the repeat: {name}" in child.stdout, child.stderr
    if name in ("SIGTERM", "SIGINT"):
        assert child.returncode == 128 + signal.Signals[name] and "still running" not in child.stdout
    else:
        assert child.returncode == 0 and "still running" in child.stdout, child.stderr
    assert INSIST_AFTER_S <= 1.0  # a person's second Ctrl-C must not have to wait long


# -- the -n relay and the batch scripts -------------------------------------------------------------------------
class _Recorder:
    def __init__(self) -> None:
        self.sent: list[signal.Signals] = []

    def send_signal(self, sig: signal.Signals) -> None:
        self.sent.append(sig)


def test_the_n_relay_passes_each_signal_once_through_the_launcher() -> None:
    from nnlo_sched.launchers.local_launch import _Relay

    relay = _Relay(Mpirun(load_profile("local")))
    proc = _Recorder()
    relay._handle(signal.SIGUSR2, None)  # before the launcher runs: passed on once it does
    relay.start(proc)  # type: ignore[arg-type]
    assert proc.sent == [signal.SIGUSR1]  # Hydra dies on SIGUSR2
    relay._handle(signal.SIGUSR2, None)  # the same event again
    relay._handle(signal.SIGINT, None)
    assert proc.sent == [signal.SIGUSR1, signal.SIGINT] and relay.insisted is None
    relay._first[signal.SIGINT] -= INSIST_AFTER_S  # a person's second Ctrl-C, a moment later
    relay._handle(signal.SIGINT, None)
    assert proc.sent[-1] == signal.SIGINT and relay.insisted == signal.SIGINT


def test_every_batch_script_relays_every_stop_signal() -> None:
    golden = sorted((REPO / "tests" / "sched" / "golden").glob("*.sh"))
    assert golden
    for script in golden:
        trapped = {line.rsplit(" ", 1)[-1] for line in script.read_text().splitlines() if line.startswith("trap ")}
        assert {sig.name.removeprefix("SIG") for sig in STOP_SIGNALS} <= trapped, script.name


def test_srun_gets_sigterm_for_a_sigint_it_would_only_answer_with_a_status_report() -> None:
    from nnlo_sched.launchers.srun import Srun

    srun = Srun(load_profile("cscs"))
    assert [srun.relay(s) for s in ("INT", "TERM", "USR1", "USR2")] == ["TERM", "TERM", "USR1", "USR2"]
    script = (REPO / "tests" / "sched" / "golden" / "cscs_train.sh").read_text()
    assert "trap 'forward TERM' INT" in script

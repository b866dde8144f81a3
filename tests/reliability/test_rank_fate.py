"""Naming a rank killed by a signal from a launcher's report, and telling a rank death from a Python failure.

In-process and fast: the launchers' own report formats (MPICH Hydra's banner as a real ``mpirun`` printed it,
srun's task lines) against real rank records on disk; and the chain's classification of a failed job's log,
which decides between a retry from the newest checkpoint and stopping the chain. The real kills are in
``test_mpi_kills.py`` (the ``-n`` wrapper) and ``test_chain_retry.py`` (a local chain).
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from nnlo import rankfate
from nnlo_sched.chain import rank_death
from nnlo_sched.spec import RunSpec

# as MPICH 4's mpirun printed it for a rank SIGKILLed on host "vm"
HYDRA = """
===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 30801 RUNNING AT vm
=   EXIT CODE: 9
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)
"""


def _records(folder: Path, *rows: tuple[int, str, str, int]) -> Path:
    for rank, role, host, pid in rows:
        rankfate.write_json(folder / f"rank-{rank}.json", {"rank": rank, "role": role, "host": host, "pid": pid})
    return folder


def test_hydra_banner_names_the_rank_by_its_pid(tmp_path: Path) -> None:
    folder = _records(tmp_path, (0, "master", "vm", 30800), (1, "worker:w1", "vm", 30801), (2, "worker:w2", "vm", 1))
    line = rankfate.fate_line(HYDRA, folder)
    assert line == "rank 1 (worker:w1) on vm was killed by SIGKILL (signal 9); the job was ended"


def test_hydra_banner_without_records_still_gives_the_pid_and_signal(tmp_path: Path) -> None:
    line = rankfate.fate_line(HYDRA.replace("EXIT CODE: 9", "EXIT CODE: 139"), tmp_path / "none")
    assert line == "a rank (pid 30801) on vm was killed by SIGSEGV (signal 11); the job was ended"


def test_a_python_exit_code_in_the_banner_is_no_fate() -> None:
    assert rankfate.fate_line(HYDRA.replace("EXIT CODE: 9", "EXIT CODE: 1")) is None
    assert rankfate.fate_line("nnlo: error: rank 2 (worker:w2): loss is NaN\n") is None


@pytest.mark.parametrize("report, rank, signame", [
    ("srun: error: nid00012: task 3: Killed", 3, "SIGKILL (signal 9)"),
    ("srun: error: nid00012: tasks 2-3: Segmentation fault (core dumped)", 2, "SIGSEGV (signal 11)"),
    ("srun: error: nid00012: task 4: Out Of Memory", 4, "SIGKILL (signal 9)"),
])
def test_srun_task_lines_name_the_rank_from_its_record(report: str, rank: int, signame: str, tmp_path: Path) -> None:
    folder = _records(tmp_path, *((r, "worker" if r else "coordinator", "nid00012", 100 + r) for r in range(5)))
    line = rankfate.fate_line(f"epoch 3\n{report}\nsrun: error: nid00012: task 0: Killed\n", folder)
    assert line == f"rank {rank} (worker) on nid00012 was killed by {signame}; the job was ended"


@pytest.mark.parametrize("report, host", [
    # Cray PMI under aprun (the format of HPE's messages; no live system here): the host from the rank's record
    ("_pmiu_daemon(SIGCHLD): [NID 00012] [c0-0c0s3n0] [Thu Nov 26 10:00:00 2026] PE RANK 3 exit signal Killed",
     "nid00012"),
    # Open MPI's mpirun (jsrun's relatives)
    ("mpirun noticed that process rank 3 with PID 4711 on node nid00012 exited on signal 9 (Killed).", "nid00012"),
])
def test_aprun_and_open_mpi_reports_name_the_rank(report: str, host: str, tmp_path: Path) -> None:
    folder = _records(tmp_path, *((r, "worker" if r else "master", "nid00012", 4708 + r) for r in range(4)))
    line = rankfate.fate_line(f"epoch 3\n{report}\n", folder)
    assert line == f"rank 3 (worker) on {host} was killed by SIGKILL (signal 9); the job was ended"


def test_an_error_or_a_stop_before_a_death_is_the_cause(tmp_path: Path) -> None:
    folder = _records(tmp_path, *((r, "worker", "nid00012", 100 + r) for r in range(4)))
    kill = "srun: error: nid00012: task 3: Killed\n"
    assert rankfate.fate_line("nnlo: error: rank 0 (master): loss is NaN at epoch 2\n" + kill, folder) is None
    assert rankfate.fate_line("WARNING received SIGTERM: writing a checkpoint and stopping\n" + kill, folder) is None
    assert rankfate.fate_line(kill + "nnlo: error: rank 0 (master): loss is NaN\n", folder) is not None


def test_record_rank_writes_the_out_dir_and_the_wrappers_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(rankfate.RECORDS_ENV, str(tmp_path / "wrapper"))
    written = rankfate.record_rank(3, "block 1 master", tmp_path / "out")
    assert written == [tmp_path / "out" / "ranks" / "rank-3.json", tmp_path / "wrapper" / "rank-3.json"]
    for folder in (tmp_path / "out" / "ranks", tmp_path / "wrapper"):
        assert rankfate.read_records(folder) == [
            rankfate.RankRecord(3, "block 1 master", socket.gethostname(), os.getpid())]


# -- the chain's decision: retry (a rank death) or stop (a Python failure, bad input) ----------------------
def _run_dir(tmp_path: Path, log: str) -> Path:
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "spec.json").write_text(RunSpec.from_argv(kind="train", args=["--model", "m.py"], cluster="local").to_json())
    (run / "logs" / "job-7.out").write_text(log)
    return run


#: the line the peers of a dead rank print (nnlo.liveness), as a job log holds it
_PEERS = f"nnlo: error: {rankfate.died_line(2, 'block 0 worker:w0', 'nid01')}\n"


@pytest.mark.parametrize("log, rc, death", [
    (HYDRA, 9, "a rank (pid 30801) on vm was killed by SIGKILL (signal 9); the job was ended"),
    ("nnlo: error: rank 1 (worker:w1) on vm was killed by SIGKILL (signal 9); the job was ended\n", 1,
     "rank 1 (worker:w1) on vm was killed by SIGKILL (signal 9); the job was ended"),
    ("epoch 2\n", 137, "a rank was killed by a signal (exit 137)"),
    ("nnlo: error: rank 0 (master): loss is NaN at epoch 2\n", 1, None),
    ("nnlo: error: --epochs must be positive\n", 2, None),
    ("Traceback (most recent call last):\nValueError: bad\n", 1, None),
    ("nnlo: error: rank 2 (worker:w2): MPI error\n", 9, None),
    # the peers' line under srun (nnlo.liveness), then srun's own report of the ranks the abort ended
    (_PEERS + "srun: error: nid01: tasks 0-1: Exited with exit code 69\nsrun: error: nid01: task 3: Killed\n",
     69, _PEERS.split("nnlo: error: ", 1)[1].strip()),
    (_PEERS, 1, _PEERS.split("nnlo: error: ", 1)[1].strip()),  # the abort's fallback exit (nnlo.abort)
    # a walltime's SIGKILL takes the ranks one after another: a peer's line after it is the teardown
    ("slurmstepd: error: *** JOB 12 ON nid01 CANCELLED AT 2026-11-26T10:00:00 DUE TO TIME LIMIT ***\n" + _PEERS,
     137, None),
])
def test_rank_death_or_python_failure(log: str, rc: int, death: str | None, tmp_path: Path) -> None:
    assert rank_death(_run_dir(tmp_path, log), RunSpec.from_json(
        (tmp_path / "run" / "spec.json").read_text()), "7", rc) == death


@pytest.mark.slow
def test_the_first_process_to_vanish_is_the_cause_not_the_teardown(tmp_path: Path) -> None:
    """Real processes: rank 2 is killed first, ranks 0-1 a moment later (Hydra's teardown); the watcher
    names rank 2 even though the launcher's banner may name any of them."""
    import subprocess

    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        _records(tmp_path, *((r, f"role{r}", socket.gethostname(), p.pid) for r, p in enumerate(procs)))
        watch = rankfate.FirstDeath(tmp_path)
        watch.start()
        _wait("the watcher to watch every rank", lambda: watch.watching == {p.pid for p in procs})
        procs[2].kill()
        procs[2].wait()
        watch.join(timeout=10)  # it ends by itself once it has seen a death
        for p in procs[:2]:
            p.kill()
        fate = watch.fate()
        host = socket.gethostname()
        banner = HYDRA.replace("30801", str(procs[0].pid)).replace("RUNNING AT vm", f"RUNNING AT {host}")
        line = rankfate.launcher_fate(banner, tmp_path, fate)
        assert fate is not None and fate.rank == 2
        assert line is not None and line.startswith(f"rank 2 (role2) on {socket.gethostname()} was killed by")
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _chain_run(tmp_path: Path, log: str, *, retried: int = 0, max_retries: int = 2, checkpoint: bool = True) -> Path:
    """A run whose job "9" is running with a successor "10" queued; ``retried`` earlier jobs died and were retried;
    job 9 wrote a checkpoint after its start unless ``checkpoint`` is False."""
    import json

    from nnlo_sched.state import JobRecord, RunState, write_state

    run = tmp_path / "chain"
    (run / "logs").mkdir(parents=True)
    (run / "spec.json").write_text(RunSpec.from_argv(kind="train", args=["--model", "m.py"], cluster="local",
                                           max_retries=max_retries, workdir=str(tmp_path)).to_json())
    jobs = [JobRecord(job_id=str(i), submitted_at=1.0, started_at=2.0, ended_at=3.0, rc=9, status="rank-died")
            for i in range(1, retried + 1)]
    jobs += [JobRecord(job_id="9", submitted_at=1.0, started_at=2.0, status="running"),
             JobRecord(job_id="10", submitted_at=2.0, depends_on="9")]
    write_state(run, RunState(run_id="r1", name="r", cluster="local", scheduler="local", state="running", jobs=jobs))
    if checkpoint:
        ckpt = run / "checkpoints" / "ckpt-e0002-u00000000"
        ckpt.mkdir(parents=True)
        (ckpt / "manifest.json").write_text(json.dumps({"format": 1, "epoch": 2, "updates": 0, "parts": []}))
    (run / "logs" / "job-9.out").write_text(log)
    return run


@pytest.mark.parametrize("log, rc, retried, max_retries, checkpoint, state, status, words", [
    (HYDRA, 9, 0, 2, True, "resubmitting", "rank-died", "retry 1 of 2"),
    (_PEERS, 69, 0, 2, True, "resubmitting", "rank-died", "rank 2 (block 0 worker:w0) on nid01 died"),
    (_PEERS, 69, 2, 2, True, "failed", "failed", "rank 2 (block 0 worker:w0) on nid01 died"),
    (HYDRA, 9, 2, 2, True, "failed", "failed", "--max-retries 2 reached"),
    (HYDRA, 9, 0, 2, False, "failed", "failed", "it left no new checkpoint"),
    ("nnlo: error: rank 0 (master): loss is NaN at epoch 2\n", 1, 0, 2, True, "failed", "failed", "loss is NaN"),
])
def test_job_end_retries_a_rank_death_and_stops_on_anything_else(
        log: str, rc: int, retried: int, max_retries: int, checkpoint: bool, state: str, status: str, words: str,
        tmp_path: Path) -> None:
    from nnlo_sched.chain import job_end
    from nnlo_sched.state import read_state

    run = _chain_run(tmp_path, log, retried=retried, max_retries=max_retries, checkpoint=checkpoint)
    assert job_end(run, "9", rc) == state
    st = read_state(run)
    assert st.job("9").status == status  # type: ignore[union-attr]
    assert words in (st.error or ""), st.error
    assert st.job("10").alive == (state == "resubmitting")  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_rank_leaving_through_pythons_exit_is_not_the_cause(tmp_path: Path) -> None:
    """Rank 0 ends by itself (its record marked at exit), then rank 1 is killed: rank 1 is named."""
    import subprocess
    import sys

    code = ("import sys, time; from nnlo import rankfate; rankfate.record_rank(int(sys.argv[1]), 'r' + sys.argv[1]);"
            "time.sleep(float(sys.argv[2]))")
    env = dict(os.environ, **{rankfate.RECORDS_ENV: str(tmp_path)})
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r), s], env=env) for r, s in ((0, "1"), (1, "60"))]
    try:
        watch = rankfate.FirstDeath(tmp_path)
        watch.start()
        assert procs[0].wait(timeout=60) == 0
        _wait("the watcher to see rank 0 leave", lambda: procs[0].pid in watch.left)
        assert watch.first is None and [r.exited for r in rankfate.read_records(tmp_path)] == [True, False]
        procs[1].kill()
        watch.join(timeout=10)
        assert watch.fate() is not None and watch.fate().rank == 1  # type: ignore[union-attr]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _wait(what: str, ready, limit: float = 60.0) -> None:
    """Poll ``ready()`` (the watcher thread's progress) until true; fail, never hang, after ``limit`` s."""
    import time

    end = time.monotonic() + limit
    while not ready():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)

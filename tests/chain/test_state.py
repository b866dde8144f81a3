"""State records: atomic replacement, no lost update when processes race, stale locks broken, one-line errors."""
from __future__ import annotations

import json
import multiprocessing
import os
import socket
import time

import pytest

from nnlo_sched.state import (
    LOCK_DIR, JobRecord, RunState, StateError, locked, read_state, update_state, write_state)


def _bump(run_dir: str, n: int) -> None:
    for _ in range(n):
        with update_state(run_dir) as st:
            st.resumes += 1
            st.jobs.append(JobRecord(job_id=f"{os.getpid()}-{st.resumes}", submitted_at=time.time()))


def test_concurrent_updates_from_processes_lose_nothing(tmp_path):
    write_state(tmp_path, RunState(run_id="r", name="n", cluster="local", scheduler="local"))
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_bump, args=(str(tmp_path), 40)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    st = read_state(tmp_path)
    assert st.resumes == 160
    assert len(st.jobs) == 160 and len(set(st.job_ids)) == 160
    assert not (tmp_path / LOCK_DIR).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_round_trip_ignores_unknown_keys_from_newer_versions(tmp_path):
    st = RunState(run_id="r", name="n", cluster="c", scheduler="slurm",
                  jobs=[JobRecord(job_id="1", submitted_at=1.0, status="running")])
    write_state(tmp_path, st)
    data = json.loads((tmp_path / "state.json").read_text())
    data["future"] = 1
    data["jobs"][0]["future"] = 2
    (tmp_path / "state.json").write_text(json.dumps(data))
    back = read_state(tmp_path)
    assert back.jobs[0].job_id == "1" and back.jobs[0].alive and back.scheduler == "slurm"


def test_lock_of_a_dead_process_is_broken(tmp_path):
    write_state(tmp_path, RunState(run_id="r", name="n", cluster="c", scheduler="local"))
    lock = tmp_path / LOCK_DIR
    lock.mkdir()
    dead = multiprocessing.get_context("fork").Process(target=lambda: None)
    dead.start()
    dead.join()
    (lock / "owner").write_text(f"{socket.gethostname()} {dead.pid} {time.time()}\n")
    with update_state(tmp_path) as st:
        st.error = "x"
    assert read_state(tmp_path).error == "x"


def test_a_held_lock_times_out_with_one_line_naming_the_holder(tmp_path):
    write_state(tmp_path, RunState(run_id="r", name="n", cluster="c", scheduler="local"))
    with locked(tmp_path):
        with pytest.raises(StateError) as e:
            with locked(tmp_path, timeout=0.3):
                pass
    msg = str(e.value)
    assert "\n" not in msg and f"pid {os.getpid()}" in msg and "retry" in msg


def test_missing_and_corrupt_records_are_one_line_errors(tmp_path):
    with pytest.raises(StateError, match="not an nnlo run directory"):
        read_state(tmp_path)
    (tmp_path / "state.json").write_text("{half")
    with pytest.raises(StateError, match="cannot be read"):
        read_state(tmp_path)


def test_an_old_lock_from_another_host_is_broken_a_fresh_one_is_not(tmp_path):
    write_state(tmp_path, RunState(run_id="r", name="n", cluster="c", scheduler="slurm"))
    lock = tmp_path / LOCK_DIR
    lock.mkdir()
    (lock / "owner").write_text(f"compute-node-17 4242 {time.time() - 3600}\n")  # killed at its walltime
    with update_state(tmp_path) as st:
        st.error = "after"
    assert read_state(tmp_path).error == "after"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(LOCK_DIR)] == []
    lock.mkdir()
    (lock / "owner").write_text(f"compute-node-17 4242 {time.time()}\n")  # alive elsewhere, just taken
    with pytest.raises(StateError, match="pid 4242 on compute-node-17"):
        with locked(tmp_path, timeout=0.3):
            pass

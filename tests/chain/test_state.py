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


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_every_field_of_the_record_is_checked_for_its_type():
    """One table of checks covers every field (a new field without a check fails here)."""
    import dataclasses

    from nnlo_sched import state as mod

    assert set(mod._RUN_FIELDS) | {"jobs"} == {f.name for f in dataclasses.fields(RunState)}
    assert set(mod._JOB_FIELDS) == {f.name for f in dataclasses.fields(JobRecord)}


@pytest.mark.parametrize("change, needle", [
    (lambda d: d["jobs"][0].update(job_id=123), "'jobs[0].job_id' must be a non-empty string, got the number 123"),
    (lambda d: d["jobs"][0].update(started_at="noon"), "'jobs[0].started_at' must be a finite number or null"),
    (lambda d: d["jobs"][0].update(submitted_at=None), "'jobs[0].submitted_at' must be a finite number, got null"),
    (lambda d: d.update(created_at=[1]), "'created_at' must be a finite number, got an array"),
    (lambda d: d.update(jobs={"a": 1}), "'jobs' must be a list of job records, got an object"),
    (lambda d: d["jobs"].append("7"), "jobs[1] must be an object, got the string '7'"),
    (lambda d: d.pop("scheduler"), "key 'scheduler' is missing"),
    (lambda d: d["jobs"][0].pop("job_id"), "key 'jobs[0].job_id' is missing"),
    (lambda d: d.update(resumes=-1), "'resumes' must be a whole number >= 0"),
    (lambda d: d.update(resumes=True), "'resumes' must be a whole number >= 0, got the boolean true"),
    (lambda d: d.update(env={"PATH": 5}), "'env' must be an object of environment variable names to strings"),
    (lambda d: d.update(state="sleeping"), "'state' must be one of queued"),
    (lambda d: d.update(chain_start=5), "'chain_start' 5 is past the 1 job(s)"),
])
def test_a_field_of_the_wrong_type_is_a_one_line_error_naming_it(tmp_path, change, needle):
    write_state(tmp_path, RunState(run_id="r", name="n", cluster="c", scheduler="slurm",
                                   jobs=[JobRecord(job_id="1", submitted_at=1.0)]))
    data = json.loads((tmp_path / "state.json").read_text())
    change(data)
    (tmp_path / "state.json").write_text(json.dumps(data))
    with pytest.raises(StateError) as e:
        read_state(tmp_path)
    assert needle in str(e.value) and "\n" not in str(e.value) and "remove the run directory" in str(e.value)


@pytest.mark.parametrize("raw", [b"", b"[]", b"null", b'"x"', b"{\"run_id\": 1", b"\xff\xfe{}", b"[" * 100000,
                                 b'{"created_at": NaN}'])
def test_torn_undecodable_and_absurd_records_are_one_line_errors(tmp_path, raw):
    (tmp_path / "state.json").write_bytes(raw)
    with pytest.raises(StateError) as e:
        read_state(tmp_path)
    assert "\n" not in str(e.value) and "state.json" in str(e.value)


@pytest.mark.parametrize("log, says", [
    ("nnlo job start: job 7 started\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
     "ModuleNotFoundError: No module named 'nnlo.optimize.options'\n",
     "ModuleNotFoundError: No module named 'nnlo.optimize.options'; fix that, then `nnlo resume r`"),
    ("", "`nnlo resume r` continues from the newest checkpoint"),
])
def test_a_job_gone_without_bookkeeping_is_reported_with_the_error_its_log_ends_with(tmp_path, log, says):
    """A chain job that died before ``nnlo job end`` (an import error in its first second) reads "ended
    (COMPLETED) without nnlo's bookkeeping": the run's error names the cause its log holds, and resuming comes
    after fixing it."""
    from nnlo_sched.chain import log_path, reconcile
    from nnlo_sched.schedulers.base import JobInfo
    from nnlo_sched.spec import RunSpec

    (tmp_path / "spec.json").write_text(json.dumps(RunSpec.from_argv("train", ["--model", "m.py"], "local").to_dict()))
    write_state(tmp_path, RunState(run_id="r", name="n", cluster="local", scheduler="slurm", state="running",
                                   jobs=[JobRecord("7", 1.0, status="running", started_at=2.0)]))
    log_path(tmp_path, "7").parent.mkdir()
    log_path(tmp_path, "7").write_text(log)
    st = reconcile(tmp_path, {"7": JobInfo("7", "COMPLETED", native="COMPLETED")})
    assert st.state == "failed" and says in st.error and "\n" not in st.error, st.error

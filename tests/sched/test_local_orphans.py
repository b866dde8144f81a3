"""The local scheduler after its supervisor died, and a job's process known by its pid and start time.

Process-free: the queue file is written as a supervisor that died would have left it (no supervisor holds its
lock), and the "job processes" are this process (alive; its true start time, or another one: a pid reused) or
a pid no process holds.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from nnlo_sched.schedulers import get_scheduler, local
from nnlo_sched.schedulers.local import ORPHAN_NOTE, PID_MAX, _boot_id, _start_time


def _queue(run: Path, *jobs: dict[str, object]) -> None:
    (run / "local").mkdir(parents=True, exist_ok=True)
    (run / "local" / "queue.json").write_text(json.dumps({"next_id": len(jobs) + 1, "jobs": list(jobs)}))


def _job(jid: str, state: str, **kw: object) -> dict[str, object]:
    return {"id": jid, "state": state, "pid": None, "depends_on": None, "submitted": 1.0, "started": 2.0,
            "ended": None, "cancel_at": None, "walltime_s": 60, "script": "/bin/true", "cwd": "/", "env": {}, **kw}


def _unused_pid() -> int:
    """A pid no process holds now (the highest free one: the kernel hands pids out from low to high)."""
    top = min(int(Path("/proc/sys/kernel/pid_max").read_text()), PID_MAX + 1) - 1
    return next(p for p in range(top, 2, -1) if not Path(f"/proc/{p}").exists())


def _states(run: Path) -> dict[str, str]:
    return {j["id"]: j["state"] for j in json.loads((run / "local" / "queue.json").read_text())["jobs"]}


@pytest.fixture
def caught():
    """SIGUSR1 caught in this process, so that a signal sent to it is seen instead of ending the test run."""
    got: list[int] = []
    old = signal.signal(signal.SIGUSR1, lambda sig, _frame: got.append(sig))
    yield got
    signal.signal(signal.SIGUSR1, old)


@pytest.mark.parametrize("identity", [
    {"pid_start": "other"},  # the pid is this process's, the start time another's: the job's process ended
    {},  # a record with a pid alone
])
def test_a_pid_that_is_not_the_jobs_process_is_never_signalled(tmp_path, caught, identity):
    me = os.getpid()
    start = _start_time(me)
    assert start is not None
    ident = {k: (start + 1 if v == "other" else v) for k, v in identity.items()}
    _queue(tmp_path, _job("1", "RUNNING", pid=me, boot=_boot_id(), **ident))
    get_scheduler("local", tmp_path).signal(["1"], signal.SIGUSR1)  # what `nnlo preempt` does
    assert caught == []
    # the control: the same record with the process's own start time is signalled
    _queue(tmp_path, _job("1", "RUNNING", pid=me, boot=_boot_id(), pid_start=start))
    get_scheduler("local", tmp_path).signal(["1"], signal.SIGUSR1)
    assert caught == [signal.SIGUSR1]


def test_a_dead_supervisors_jobs_end_can_be_cancelled_and_resumed(tmp_path):
    dead = _unused_pid()
    _queue(tmp_path,
           _job("1", "RUNNING", pid=dead, pid_start=12345, boot=_boot_id()),  # its process is gone
           _job("2", "PENDING", depends_on="1", started=None),  # the chain's successor: nothing will run it
           _job("3", "RUNNING", pid=dead, pid_start=12345, boot=_boot_id()))
    sched = get_scheduler("local", tmp_path)
    sched.cancel(["3"])  # a cancel ends it at once (nothing is left to signal), and every other one gone too
    assert _states(tmp_path) == {"1": "FAILED", "2": "PENDING", "3": "CANCELLED"}
    got = sched.query(["1", "2"])
    assert (got["1"].state, got["1"].reason) == ("FAILED", ORPHAN_NOTE)  # not "unknown" for ever
    assert (got["2"].state, got["2"].reason) == ("UNKNOWN", "local supervisor is not running")
    sched.cancel(["2"])
    assert _states(tmp_path) == {"1": "FAILED", "2": "CANCELLED", "3": "CANCELLED"}
    assert not any(i.alive or i.state == "UNKNOWN" for i in sched.query(["1", "2", "3"]).values())  # resumable


def test_a_job_from_another_boot_is_not_taken_for_alive(tmp_path):
    me = os.getpid()
    _queue(tmp_path, _job("1", "RUNNING", pid=me, pid_start=_start_time(me), boot="another-boot"))
    assert get_scheduler("local", tmp_path).query(["1"])["1"].state == "FAILED"


def test_a_live_job_of_a_dead_supervisor_is_shown_running(tmp_path):
    me = os.getpid()
    _queue(tmp_path, _job("1", "RUNNING", pid=me, pid_start=_start_time(me), boot=_boot_id()))
    got = get_scheduler("local", tmp_path).query(["1"])["1"]
    assert (got.state, got.reason) == ("RUNNING", "its local supervisor is not running; nothing enforces its "
                                                  "walltime")


def test_a_queue_that_cannot_be_written_is_answered_all_the_same(tmp_path, monkeypatch):
    _queue(tmp_path, _job("1", "RUNNING", pid=_unused_pid(), pid_start=12345, boot=_boot_id()))
    before = (tmp_path / "local" / "queue.json").read_text()

    def refused(_folder):
        raise PermissionError(13, "Permission denied", str(tmp_path / "local"))

    monkeypatch.setattr(local, "locked", refused)  # another user's run: readable, not writable
    got = get_scheduler("local", tmp_path).query(["1"])["1"]
    assert (got.state, got.reason) == ("FAILED", ORPHAN_NOTE)
    assert (tmp_path / "local" / "queue.json").read_text() == before

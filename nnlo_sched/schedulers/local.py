"""The local scheduler: batch jobs on this machine, with a queue, dependencies and an enforced walltime.

Why: the whole checkpoint-restart cycle (deadline, checkpoint, resubmission, resume, cancel, status, logs)
must be usable and testable with no batch system at all. Each run has its own queue, kept as a file in the
run directory (``<run>/local/queue.json``), and a small *supervisor* process that works through it: it
starts the next job once its dependency has ended (any state, like ``afterany``), stops a job at its limit
the way Slurm does (SIGTERM to the job's process group, SIGKILL ``NNLO_LOCAL_KILL_WAIT`` seconds later,
default 30; state ``TIMEOUT``), records the exit status, and exits when nothing is left to run. No daemon
outlives the run: a later submit starts a new supervisor when none is alive (an ``flock`` on
``supervisor.lock`` guarantees at most one per run). Job ids are ``1``, ``2``, ... within the run; job
output goes to ``<run>/logs/job-<id>.out`` as on the clusters.

A job's process is known by its pid *and* its start time (``/proc/PID/stat``, with the boot's id): a pid alone
may name another process once the job's has ended, so nothing is signalled, and no job is taken for alive, on
its pid alone. When the supervisor dies (killed, out of memory) its jobs are not lost to the queue: a running
job whose process has ended is settled by the next query or cancel (``FAILED``, or ``CANCELLED``/``TIMEOUT``
where it was being stopped; its exit status unknown), and the next supervisor - started by a cancel that
leaves a job running, or by a submit - adopts a running job it did not start: it enforces its limit and ends
its record once its process is gone. Intervals (the walltime, the wait between SIGTERM and SIGKILL) run on
the monotonic clock, which all processes of one boot share; the wall-clock times in the queue are for people.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from nnlo.contract import ENV_JOB_ID, ENV_LOCAL_KILL_WAIT, EXIT_DONE, LOG_DIR, STOP_SIGNALS, job_log, signal_status
from nnlo.errors import NnloError
from nnlo_sched.schedulers.base import (
    CANCELLED,
    COMPLETED,
    ENDED,
    FAILED,
    PENDING,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobInfo,
    Scheduler,
    SchedulerError,
)
from nnlo_sched.state import locked, write_json_atomic

QUEUE_DIR = "local"
#: What a job's record says when its supervisor was gone as its process ended
ORPHAN_NOTE = "ended while its local supervisor was not running (exit status unknown)"
QUEUE_FILE = "queue.json"
SUPERVISOR_LOCK = "supervisor.lock"
POLL_S = 0.25
#: Seconds between SIGTERM and SIGKILL where ENV_LOCAL_KILL_WAIT is unset
KILL_WAIT_S = 30.0
FINAL = (COMPLETED, FAILED, TIMEOUT, CANCELLED)


def kill_wait_s() -> float:
    """Seconds between SIGTERM and SIGKILL at the limit or on cancel (Slurm's ``KillWait``)."""
    try:
        return float(os.environ.get(ENV_LOCAL_KILL_WAIT, "") or KILL_WAIT_S)
    except ValueError:
        return KILL_WAIT_S


class LocalScheduler(Scheduler):
    """The local queue of one run directory."""

    name = "local"
    job_id_vars = (ENV_JOB_ID,)
    job_id_syntax = re.compile(r"[1-9][0-9]*")  # 1, 2, ... within the run
    # directive_prefix stays "#": nothing reads directives here, extra ones are plain comments
    warns_before_walltime = False  # the supervisor sends SIGTERM at the limit, no warning before it

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.qdir = self.run_dir / QUEUE_DIR

    # -- the Scheduler interface ------------------------------------------------------------------
    def submit(self, script: Path, *, depends_on: str | None, walltime_s: int, cwd: Path | None = None,
               env: Mapping[str, str] | None = None) -> str:
        """Queue ``bash SCRIPT`` after ``depends_on`` ends; start the supervisor if none is alive."""
        if depends_on is not None:
            self.check_job_id(depends_on)
        self.qdir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / LOG_DIR).mkdir(exist_ok=True)
        with self._queue() as q:
            job_id = str(q["next_id"])
            q["next_id"] += 1
            q["jobs"].append({
                "id": job_id, "script": str(script), "depends_on": depends_on, "walltime_s": int(walltime_s),
                "cwd": str(cwd or self.run_dir), "env": dict(env or {}), "state": PENDING,
                "submitted": time.time(), "started": None, "ended": None, "pid": None, "rc": None,
                "cancel_at": None,
            })
            if not self._supervisor_alive():
                self._spawn_supervisor()
        return job_id

    def submit_argv(self, script: Path, depends_on: str | None = None) -> list[str]:
        """``/bin/bash SCRIPT``: what the supervisor runs, detached, once job ``depends_on`` has ended (the
        dependency lives in the queue, not on this command line)."""
        if depends_on is not None:
            self.check_job_id(depends_on)
        return ["/bin/bash", str(script)]

    def _query(self, job_ids: list[str]) -> dict[str, JobInfo]:
        try:
            queue = _read(self.qdir)
            if any(j["state"] == RUNNING for j in queue["jobs"]) and not self._supervisor_alive():
                try:
                    with self._queue() as q:  # the supervisor died: settle the jobs whose process has ended
                        if not self._supervisor_alive():  # (none started meanwhile: it would wait for this lock)
                            _settle(q)
                        queue = q
                except SchedulerError:
                    raise
                except (OSError, NnloError):  # a queue this user may read but not write: settle the answer only
                    _settle(queue)
        except SchedulerError as e:
            return self.unknown(job_ids, str(e))
        jobs = {j["id"]: j for j in queue["jobs"]}
        out = {}
        for jid in job_ids:
            j = jobs.get(jid)
            out[jid] = (JobInfo(jid, j["state"], j["state"], str(j.get("note") or "")) if j else
                        JobInfo(jid, ENDED, "", "not in local queue"))
        if any(i.alive for i in out.values()) and not self._supervisor_alive():
            # the supervisor died (machine rebooted, killed): nothing will ever run a queued job; a running one
            # whose process lives (pid and start time) runs on, with nothing to enforce its limit
            return {jid: (JobInfo(jid, RUNNING, i.native, "its local supervisor is not running; nothing enforces "
                                                         "its walltime")
                          if i.state == RUNNING and _alive(jobs[jid]) else
                          JobInfo(jid, UNKNOWN, i.native, "local supervisor is not running")) if i.alive else i
                    for jid, i in out.items()}
        return out

    def check_cancel(self, job_ids: Sequence[str]) -> None:
        """Every id well formed and the queue readable (a damaged queue is refused before anything changes)."""
        super().check_cancel(job_ids)
        if job_ids:
            _read(self.qdir)

    def signal(self, job_ids: Sequence[str], sig: signal.Signals) -> None:
        """Send ``sig`` to the batch shell of each running job of ``job_ids``, the leader of the job's process
        group, as Slurm's ``scancel --batch`` does: its traps relay it through the launcher (MPICH's Hydra
        dies on a SIGUSR2 of its own). Queued and ended jobs are left alone."""
        ids = list(dict.fromkeys(job_ids))
        self.check_cancel(ids)  # every id well formed, or nothing is signalled
        if not ids or not (self.qdir / QUEUE_FILE).exists():
            return
        with self._queue() as q:
            running = [dict(j) for j in q["jobs"] if j["id"] in ids and j["state"] == RUNNING and j["pid"]]
        for j in running:
            _signal_process(j, sig)  # only the job's own process: its pid and its start time

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.check_cancel(job_ids)
        if not (self.qdir / QUEUE_FILE).exists():
            return
        with self._queue() as q:
            for j in q["jobs"]:
                if j["id"] not in job_ids:
                    continue
                if j["state"] == PENDING:
                    j["state"], j["ended"] = CANCELLED, time.time()
                elif j["state"] == RUNNING:
                    if j["cancel_at"] is None:
                        j["cancel_at"], j["cancel_mono"] = time.time(), time.monotonic()
                    _signal_job(j, signal.SIGTERM)
            if any(j["state"] == RUNNING for j in q["jobs"]) and not self._supervisor_alive():
                # no supervisor to follow the SIGTERM with a SIGKILL and to record the end: what has ended is
                # settled now, and a new supervisor adopts what still runs
                _settle(q)
                if any(j["state"] == RUNNING for j in q["jobs"]):
                    self._spawn_supervisor()

    # -- queue file -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _queue(self) -> Iterator[dict[str, Any]]:
        with locked(self.qdir):
            q = _read(self.qdir)
            yield q
            write_json_atomic(self.qdir / QUEUE_FILE, q)

    def _supervisor_alive(self) -> bool:
        path = self.qdir / SUPERVISOR_LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def _spawn_supervisor(self) -> None:
        try:
            with open(self.qdir / "supervisor.log", "ab") as log:
                # the first child forks the supervisor and exits at once, so it is nobody's zombie
                subprocess.run([sys.executable, "-m", "nnlo_sched.schedulers.local", str(self.run_dir)],
                               stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                               check=True, timeout=60)
        except (subprocess.SubprocessError, OSError) as e:
            raise SchedulerError(f"cannot start the local scheduler for {self.run_dir}: {e}") from None


def _read(qdir: Path) -> dict[str, Any]:
    """The queue, checked: SchedulerError (one line) if it is unreadable or not a queue this module wrote."""
    path = qdir / QUEUE_FILE
    try:
        queue = json.loads(path.read_text())
    except FileNotFoundError:
        return {"next_id": 1, "jobs": []}
    except (OSError, ValueError, RecursionError) as e:
        raise SchedulerError(f"local queue {path} cannot be read ({' '.join(str(e).split())[:160]}); the run "
                             f"directory is damaged") from None
    problem = _queue_problem(queue)
    if problem:
        raise SchedulerError(f"local queue {path} is damaged: {problem}")
    return dict(queue)


def _queue_problem(queue: Any) -> str:
    """What is wrong with a decoded queue ("" if nothing): every field the scheduler reads, with its type."""
    if not isinstance(queue, dict):
        return "not a JSON object"
    if not _whole(queue.get("next_id"), 1) or not isinstance(queue.get("jobs"), list):
        return "'next_id' must be a whole number >= 1 and 'jobs' a list"
    for j in queue["jobs"]:
        if not isinstance(j, dict) or not isinstance(j.get("id"), str) or j.get("state") not in (PENDING, RUNNING,
                                                                                                  *FINAL):
            return "a job is not an object with a string 'id' and a known 'state'"
        # a pid is signalled: 0 or 1 (own process group, init) or a negative one must never be
        if j.get("pid") is not None and not _pid(j["pid"]):
            return f"job {j['id']!r} has pid {j.get('pid')!r}, not a process id"
        if not all(j.get(k) is None or _number(j[k]) for k in ("cancel_at", "submitted", "started", "ended",
                                                                "started_mono", "cancel_mono")):
            return f"job {j['id']!r} has a time that is not a number"
        if j.get("pid_start") is not None and not _whole(j["pid_start"], 0):
            return f"job {j['id']!r} has a 'pid_start' that is not a process start time"
        if j.get("depends_on") is not None and not isinstance(j["depends_on"], str):
            return f"job {j['id']!r} has a 'depends_on' that is not a job id"
    return ""


def _whole(v: Any, minimum: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= minimum


#: Linux's largest possible pid (PID_MAX_LIMIT)
PID_MAX = 4_194_304


def _pid(v: Any) -> TypeGuard[int]:
    """A process id that may be signalled: 0 is our own process group, 1 init's; negative ones are not
    process groups, and past PID_MAX none exists."""
    return _whole(v, 2) and v <= PID_MAX


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")


def _default_stop_signals() -> None:
    """In a batch shell about to start: the stop signals at their default disposition. A shell cannot trap a
    signal that was ignored when it started, and a `nnlo submit` run from a background shell (`cmd &`,
    nohup, CI runners) passes SIGINT/SIGQUIT ignored down to the supervisor and its jobs; a real batch system
    starts its job shells with default dispositions, and so does this one."""
    for sig in (*STOP_SIGNALS, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _signal_group(pid: int, sig: int) -> None:
    """``sig`` to process group ``pid``: only for a group whose leader is known to hold that pid (the caller's
    own child, unreaped, or a process just checked by :func:`_signal_job`)."""
    if not _pid(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# -- a job's process: its pid and its start time -------------------------------------------------------
def _boot_id() -> str:
    """This boot's id (a pid and a start time repeat across reboots); "" where the kernel does not say."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> int | None:
    """When the living process ``pid`` started (clock ticks after boot: ``/proc/PID/stat``'s 22nd field), or
    None when no process of that pid lives (an ended one that is not yet reaped included)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # after the command name, which may hold spaces
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def _identity(pid: int) -> dict[str, Any]:
    """What tells the process ``pid`` (running now) from any later process given the same pid."""
    return {"pid": pid, "pid_start": _start_time(pid), "boot": _boot_id()}


def _alive(j: dict[str, Any]) -> bool:
    """Whether job ``j``'s own process lives: its pid, with the start time and boot recorded when it started (a
    record without them, or a pid another process now holds, is not taken for the job's)."""
    pid, start = j.get("pid"), j.get("pid_start")
    if not _pid(pid) or start is None or j.get("boot", "") != _boot_id():
        return False
    return bool(_start_time(pid) == start)


def _signal_process(j: dict[str, Any], sig: int) -> bool:
    """``sig`` to job ``j``'s batch shell if it is still the job's process (pid and start time); True if sent.
    Through a pidfd where the kernel has them: the check and the signal then name one process, whatever
    happens to the pid in between."""
    pid = j.get("pid")
    if not _pid(pid):
        return False
    try:
        fd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (OSError, AttributeError):
        fd = None  # no pidfd (kernel < 5.3): the check, then the signal
    try:
        if not _alive(j):
            return False
        if fd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if fd is not None:
            os.close(fd)


def _signal_job(j: dict[str, Any], sig: int) -> None:
    """``sig`` to job ``j``'s process group (its batch shell leads it) if its leader is still the job's process."""
    if _alive(j):
        _signal_group(j["pid"], sig)


def _mono(j: dict[str, Any], wall_key: str, mono_key: str) -> float:
    """A job's time on the monotonic clock: as recorded in this boot, else from its wall-clock record."""
    mono = j.get(mono_key)
    if mono is not None and j.get("boot", "") == _boot_id():
        return float(mono)
    return time.monotonic() - (time.time() - float(j[wall_key]))


def _settle(q: dict[str, Any], own: Mapping[str, Any] | None = None) -> None:
    """End the record of every running job whose process is gone and that no supervisor watches (not in
    ``own``, the calling supervisor's children): its supervisor died before it could. How it ended is not
    known; a job being stopped is ``CANCELLED`` or ``TIMEOUT``, any other ``FAILED``."""
    now = time.time()
    for j in q["jobs"]:
        if j["state"] != RUNNING or j["id"] in (own or {}) or _alive(j):
            continue
        state = TIMEOUT if j.get("timeout") else CANCELLED if j["cancel_at"] is not None else FAILED
        j.update(state=state, ended=now, note=ORPHAN_NOTE)


# -- the supervisor ------------------------------------------------------------------------------
class Supervisor:
    """Runs a run's local queue job after job; one per run directory, gone when the queue is empty."""

    def __init__(self, run_dir: Path, lock_fd: int) -> None:
        self.sched = LocalScheduler(run_dir)
        self.lock_fd = lock_fd
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def loop(self) -> None:
        with self.sched._queue() as q:
            q["supervisor_pid"] = os.getpid()
        while True:
            with self.sched._queue() as q:
                self._reap(q)
                _settle(q, own=self.procs)  # adopted jobs (of a supervisor that died) whose process ended
                self._enforce(q)
                self._start_ready(q)
                if not any(j["state"] in (PENDING, RUNNING) for j in q["jobs"]):
                    # give up the supervisor lock while still holding the queue lock: a submit that
                    # comes next then sees no supervisor and starts one
                    fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
                    return
            time.sleep(POLL_S)

    def _start_ready(self, q: dict[str, Any]) -> None:
        states = {j["id"]: j["state"] for j in q["jobs"]}
        for j in q["jobs"]:
            if j["state"] != PENDING:
                continue
            dep = j["depends_on"]
            if dep and states.get(dep) in (PENDING, RUNNING):
                continue
            self._start(j)

    def _start(self, j: dict[str, Any]) -> None:
        log_path = self.sched.run_dir / LOG_DIR / job_log(j["id"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **j["env"], ENV_JOB_ID: j["id"]}
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(["/bin/bash", j["script"]], cwd=j["cwd"], env=env, stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=_default_stop_signals)
            except OSError as e:
                log.write(f"nnlo local scheduler: cannot start job: {e}\n".encode())
                j.update(state=FAILED, rc=127, started=time.time(), ended=time.time())
                return
        self.procs[j["id"]] = proc
        # the child is not reaped before _reap: its pid cannot name another process while this is read
        j.update(state=RUNNING, **_identity(proc.pid), started=time.time(), started_mono=time.monotonic())

    def _enforce(self, q: dict[str, Any]) -> None:
        """The limit of every running job (its own and adopted ones), on the monotonic clock."""
        now = time.monotonic()
        for j in q["jobs"]:
            if j["state"] != RUNNING or not j["pid"]:
                continue
            if j["cancel_at"] is None and now >= _mono(j, "started", "started_mono") + j["walltime_s"]:
                j["timeout"] = True
                j["cancel_at"], j["cancel_mono"] = time.time(), now
                _signal_job(j, signal.SIGTERM)
            if j["cancel_at"] is not None and now >= _mono(j, "cancel_at", "cancel_mono") + kill_wait_s():
                _signal_job(j, signal.SIGKILL)

    def _reap(self, q: dict[str, Any]) -> None:
        for j in q["jobs"]:
            proc = self.procs.get(j["id"])
            if j["state"] != RUNNING or proc is None:
                continue
            # ended? (not reaped yet: while the shell is a zombie its pid, and so its group's, is no one else's)
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                continue
            # what is left of the job's process group (a launcher's stray children) goes with it
            _signal_group(j["pid"], signal.SIGKILL)
            proc.wait()
            rc = proc.returncode if proc.returncode >= 0 else signal_status(-proc.returncode)
            if j.get("timeout"):
                state = TIMEOUT
            elif j["cancel_at"] is not None:
                state = CANCELLED
            else:
                state = COMPLETED if rc == 0 else FAILED
            j.update(state=state, rc=rc, ended=time.time())
            del self.procs[j["id"]]


def _supervise(run_dir: Path) -> None:
    sched = LocalScheduler(run_dir)
    fd = os.open(sched.qdir / SUPERVISOR_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another supervisor runs this queue
    try:
        Supervisor(run_dir, fd).loop()
    finally:
        os.close(fd)


def main(argv: list[str]) -> None:
    run_dir = Path(argv[0]).resolve()
    if os.fork():  # the caller waits only for this first process
        os._exit(EXIT_DONE)
    with contextlib.suppress(OSError):
        os.setsid()
    _supervise(run_dir)


if __name__ == "__main__":
    main(sys.argv[1:])

"""A run's state record (``state.json``): written atomically, changed only under a lock.

Why both: a batch job (``nnlo job start/end`` on a compute node) and a user command (``nnlo cancel`` on a
login node) may touch the same run at the same moment, often over a network filesystem (GPFS, Lustre,
NFS). Every change is read-modify-write under :func:`locked` and lands with write-temp, fsync, rename, so a
reader sees either the old record or the new one, never half of one, and no update is lost.

The lock is a directory made with ``os.mkdir`` (atomic on every shared filesystem, unlike ``flock`` on
some NFS set-ups) holding an ``owner`` file (host, pid, time). A lock whose owner is a dead process on this
host, or that is older than :data:`STALE_AFTER_S` (a process killed at its walltime while holding it), is
broken. Holders keep it for milliseconds, so both rules are safe.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nnlo.atomic import write_json
from nnlo.contract import STATE_FILE
from nnlo.errors import NnloError

LOCK_DIR = ".state.lock"
STALE_AFTER_S = 60.0
LOCK_TIMEOUT_S = 30.0

# Run states, as ``nnlo status`` shows them.
QUEUED, RUNNING, RESUBMITTING = "queued", "running", "resubmitting"
DONE, FAILED, CANCELLED = "done", "failed", "cancelled"
ACTIVE_STATES = (QUEUED, RUNNING, RESUBMITTING)
FINAL_STATES = (DONE, FAILED, CANCELLED)

# Job outcomes (how one job of the chain ended).
QUEUED_JOB, RUNNING_JOB = "queued", "running"
FINISHED, WALLTIME, JOB_FAILED, JOB_CANCELLED, NO_CHECKPOINT, SKIPPED = (
    "finished", "walltime", "failed", "cancelled", "no-checkpoint", "skipped")
#: A successor queued behind the job that finished the run: the chain took it back before it started (it was
#: never needed; not a cancellation, which is the user's).
NOT_NEEDED = "not-needed"
#: A job stopped with a checkpoint by ``nnlo preempt`` (its successor continues), not by its walltime.
PREEMPTED = "preempted"


class StateError(NnloError):
    """A run's state record is missing, corrupt or locked for too long."""


@dataclass
class JobRecord:
    """One batch job of a run's chain."""

    job_id: str
    submitted_at: float
    depends_on: str | None = None
    status: str = QUEUED_JOB  # queued, running, or an outcome: finished, walltime, failed, ...
    started_at: float | None = None
    ended_at: float | None = None
    rc: int | None = None
    host: str | None = None
    checkpoint_at_start: str | None = None  # newest complete checkpoint when the job started
    preempted_at: float | None = None  # when `nnlo preempt` sent it the chain's warning signal

    @property
    def alive(self) -> bool:
        return self.status in (QUEUED_JOB, RUNNING_JOB)


@dataclass
class RunState:
    """Everything the chain knows about a run; one JSON object in ``<run>/state.json``."""

    run_id: str
    name: str
    cluster: str
    scheduler: str
    state: str = QUEUED
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    jobs: list[JobRecord] = field(default_factory=list)
    error: str | None = None
    resumes: int = 0  # times ``nnlo resume`` restarted the chain (each gives a fresh max_resubmits budget)
    chain_start: int = 0  # index in ``jobs`` where the current chain (after the last resume) begins
    env: dict[str, str] = field(default_factory=dict)  # profile search path etc. needed inside jobs
    # -- one search across many jobs (docs/chains.md, "Many jobs, one search") -----------------------------
    #: a search run: the names of its chains, each an ordinary run directory under ``chains/``; its own
    #: ``jobs`` stay empty (the chains hold them)
    chains: list[str] = field(default_factory=list)
    #: a chain of a search run: that run's directory (the search's shared ``--output``) ...
    search_dir: str | None = None
    #: ... and the participant name its jobs run as (``NNLO_PARTICIPANT``)
    participant: str | None = None

    @property
    def is_search(self) -> bool:
        """A run of many chains sharing one search (``nnlo submit --jobs K``)."""
        return bool(self.chains)

    @property
    def ref(self) -> str:
        """The run id a user gives ``nnlo resume|cancel|status`` for this run: a search's chain (``c1``, no run
        of its own under the runs home) is resumed, cancelled and shown through its search's id."""
        return Path(self.search_dir).name if self.search_dir else self.run_id

    def job(self, job_id: str) -> JobRecord | None:
        for j in self.jobs:
            if j.job_id == job_id:
                return j
        return None

    @property
    def alive_jobs(self) -> list[JobRecord]:
        return [j for j in self.jobs if j.alive]

    @property
    def job_ids(self) -> list[str]:
        return [j.job_id for j in self.jobs]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> RunState:
        """The record in ``data`` (decoded JSON), every field checked for its type; RecordError names the first
        field that is missing or of the wrong type. Unknown keys (from a newer version) are ignored."""
        values = _checked(data, _RUN_FIELDS, "")
        jobs = data.get("jobs", [])
        if not isinstance(jobs, list):
            raise RecordError(f"'jobs' must be a list of job records, got {_kind(jobs)}")
        values["jobs"] = [JobRecord(**_checked(j, _JOB_FIELDS, f"jobs[{i}].")) for i, j in enumerate(jobs)]
        if values.get("state", QUEUED) not in (*ACTIVE_STATES, *FINAL_STATES):
            raise RecordError(f"'state' must be one of {', '.join((*ACTIVE_STATES, *FINAL_STATES))}, "
                              f"got {values['state']!r}")
        if values.get("chain_start", 0) > len(values["jobs"]):
            raise RecordError(f"'chain_start' {values['chain_start']} is past the {len(values['jobs'])} job(s)")
        return cls(**values)


class RecordError(ValueError):
    """A state record's field is missing or of the wrong type (the message names it)."""


def _kind(value: Any) -> str:
    """How JSON would call ``value``'s type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return "an array" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_env(v: Any) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(x, str) and "\0" not in x for k, x in v.items())


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a chain's folder name under a search run's ``chains/`` (never a path: no ``/``, never ``.`` or ``..``)
CHAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
# field -> (check, what it must be, required); one table per record, so every reader gets the same rules
_Check = tuple[Callable[[Any], bool], str, bool]
_STR: _Check = (lambda v: isinstance(v, str), "a string", True)
_TEXT: _Check = (lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string", True)
_OPT_STR: _Check = (lambda v: v is None or isinstance(v, str), "a string or null", False)
_NUM: _Check = (_is_number, "a finite number", True)
_OPT_NUM: _Check = (lambda v: v is None or _is_number(v), "a finite number or null", False)
_COUNT: _Check = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number >= 0", False)
_OPT_INT: _Check = (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)), "an integer or null",
                    False)
_RUN_FIELDS: dict[str, _Check] = {
    "run_id": _TEXT, "name": _STR, "cluster": _TEXT, "scheduler": _TEXT,
    "state": (_STR[0], _STR[1], False), "created_at": (_NUM[0], _NUM[1], False),
    "updated_at": (_NUM[0], _NUM[1], False), "error": _OPT_STR, "resumes": _COUNT, "chain_start": _COUNT,
    "env": (_is_env, "an object of environment variable names to strings", False),
    "chains": (lambda v: isinstance(v, list) and all(isinstance(c, str) and CHAIN_NAME.fullmatch(c) for c in v),
               "a list of chain names (letters, digits, _ . -)", False),
    "search_dir": _OPT_STR, "participant": _OPT_STR,
}
_JOB_FIELDS: dict[str, _Check] = {
    "job_id": _TEXT, "submitted_at": _NUM, "depends_on": _OPT_STR, "status": (_TEXT[0], _TEXT[1], False),
    "started_at": _OPT_NUM, "ended_at": _OPT_NUM, "rc": _OPT_INT, "host": _OPT_STR, "checkpoint_at_start": _OPT_STR,
    "preempted_at": _OPT_NUM,
}


def _checked(data: Any, spec: dict[str, _Check], where: str) -> dict[str, Any]:
    """The known fields of the object ``data``, each checked against ``spec``."""
    if not isinstance(data, dict):
        raise RecordError(f"{where.rstrip('.') or 'the record'} must be an object, got {_kind(data)}")
    out = {}
    for name, (ok, what, required) in spec.items():
        if name not in data:
            if required:
                raise RecordError(f"key '{where}{name}' is missing")
            continue
        if not ok(data[name]):
            raise RecordError(f"'{where}{name}' must be {what}, got {_kind(data[name])}")
        out[name] = data[name]
    return out


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` atomically (see :mod:`nnlo.atomic`)."""
    write_json(path, data, indent=2, sort_keys=True)


def read_state(run_dir: Path) -> RunState:
    """The run's current record (no lock needed: writes are atomic renames)."""
    path = Path(run_dir) / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise StateError(f"{run_dir} is not an nnlo run directory (no {STATE_FILE})") from None
    except (ValueError, OSError, RecursionError) as e:  # torn, not UTF-8, not JSON, nested past all reason
        raise StateError(f"{path} cannot be read ({_one_line(e)}); the run record is damaged: restore it "
                         f"or remove the run directory") from None
    try:
        return RunState.from_dict(data)
    except RecordError as e:
        raise StateError(f"{path} is corrupt: {e}; restore it or remove the run directory") from None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__


def write_state(run_dir: Path, state: RunState) -> None:
    state.updated_at = time.time()
    write_json_atomic(Path(run_dir) / STATE_FILE, state.to_dict())


@contextlib.contextmanager
def locked(run_dir: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the run's lock (a directory) for the body; breaks stale locks, raises StateError on timeout."""
    lock = Path(run_dir) / LOCK_DIR
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            os.mkdir(lock)
            break
        except FileExistsError:
            seen = _owner_text(lock)
            if _stale(lock):
                _break_stale(lock, seen)
                continue
            if time.monotonic() > deadline:
                raise StateError(f"run {Path(run_dir).name} is locked by {_owner(lock) or 'another process'}; "
                                 f"retry, or remove {lock} if no nnlo command is running") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        except FileNotFoundError:
            raise StateError(f"run directory {run_dir} does not exist") from None
    with contextlib.suppress(OSError):
        (lock / "owner").write_text(f"{socket.gethostname()} {os.getpid()} {time.time():.3f}\n")
    try:
        yield
    finally:
        _break(lock)


@contextlib.contextmanager
def update_state(run_dir: Path) -> Iterator[RunState]:
    """Read-modify-write the record under the lock: ``with update_state(d) as st: st.state = DONE``."""
    with locked(run_dir):
        state = read_state(run_dir)
        yield state
        write_state(run_dir, state)


def _owner(lock: Path) -> str | None:
    try:
        host, pid, _ = (lock / "owner").read_text().split()
        return f"pid {pid} on {host}"
    except (OSError, ValueError):
        return None


def _stale(lock: Path) -> bool:
    try:
        text = (lock / "owner").read_text().split()
        host, pid, stamp = text[0], int(text[1]), float(text[2])
    except (OSError, ValueError, IndexError):
        # no owner yet: just made by a live process, or its maker died in between; judge by age
        try:
            return time.time() - lock.stat().st_mtime > STALE_AFTER_S
        except OSError:
            return False
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
    return time.time() - stamp > STALE_AFTER_S


def _owner_text(lock: Path) -> str | None:
    try:
        return (lock / "owner").read_text()
    except OSError:
        return None


def _break_stale(lock: Path, seen: str | None) -> None:
    """Take a stale lock away by renaming it (atomic), then make sure it was the stale one: if its owner
    changed in between (another process broke it and took it anew), give it back."""
    tomb = lock.with_name(f"{lock.name}.stale.{socket.gethostname()}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        os.rename(lock, tomb)
    except OSError:
        return  # gone already: someone else broke it
    if _owner_text(tomb) != seen:
        with contextlib.suppress(OSError):
            os.rename(tomb, lock)
            return
    shutil.rmtree(tomb, ignore_errors=True)


def _break(lock: Path) -> None:
    with contextlib.suppress(OSError):
        (lock / "owner").unlink()
    with contextlib.suppress(OSError):
        os.rmdir(lock)

"""The checkpoint-restart chain: what a job does at its start and end, and what cancel/resume/status change.

Every job of a run runs the same batch script::

    nnlo job start "$NNLO_RUN_DIR" || exit 0     # job_start(): go / no-go, queue the successor
    <launcher> python -m nnlo_sched run "$NNLO_RUN_DIR"
    nnlo job end "$NNLO_RUN_DIR" "$rc"           # job_end(): done, resubmitting or failed

Why a successor is queued at the *start* of each job (with the scheduler's after-any dependency on it)
rather than submitted at its end: a job killed at its walltime may never reach its end, and a pre-queued
successor starts within seconds of the predecessor's end, where a requeue waits minutes. So exactly one
successor is queued behind the running job at any time; the end of the chain cancels it.

Rules (each keeps allocations from being burnt in a loop):

* a successor that starts on a finished, failed or cancelled run exits at once;
* a job whose predecessor ended without writing a new checkpoint stops the chain (``failed``);
* a job that failed for another reason than its walltime (rc not 0/75, and not SIGTERM/SIGKILL with a
  fresh checkpoint) stops the chain and records the tail of its log;
* a job whose rank died by a signal (a lost node, the OOM killer, a segfault: a launcher exit status from a
  signal or a rank-fate line, see :mod:`nnlo.rankfate`) and that left a checkpoint newer than its start is
  retried from it, at most ``max_retries`` times per chain; a Python error (``nnlo: error:``, exit 1) or
  bad input (exit 2) is deterministic and stops the chain as before;
* ``max_resubmits`` bounds the jobs after the first; ``nnlo resume`` starts a new chain from the newest
  checkpoint.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from nnlo.checkpoint import find_latest
from nnlo.contract import (
    EXIT_BAD_INPUT,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_RESUMABLE,
    LOG_DIR,
    MANIFEST_FILE,
    RANKS_DIR,
    job_log,
    signal_status,
    status_signal,
)
from nnlo.errors import NnloError
from nnlo.job import progress_marker
from nnlo.observe.timeline import find_trace_dirs, merge_run
from nnlo.rankfate import fate_line
from nnlo_sched.inner import SCRIPT
from nnlo_sched.runs import change_inner_options, load_profile_for, search_done, submit_job
from nnlo_sched.schedulers import JobInfo, get_scheduler
from nnlo_sched.spec import RunSpec, checkpoint_dir, load_spec
from nnlo_sched.state import (
    ACTIVE_STATES,
    CANCELLED,
    DONE,
    FAILED,
    FINAL_STATES,
    FINISHED,
    JOB_CANCELLED,
    JOB_FAILED,
    NOT_NEEDED,
    NO_CHECKPOINT,
    PREEMPTED,
    QUEUED,
    RESUBMITTING,
    RUNNING,
    RUNNING_JOB,
    SKIPPED,
    WALLTIME,
    JobRecord,
    RunState,
    read_state,
    update_state,
)
from nnlo_sched.walltime import format_hms

#: How bash reports a job ended at its limit: by the batch system's SIGTERM/SIGKILL or a warning SIGUSR1/SIGUSR2.
KILLED_AT_LIMIT = tuple(signal_status(s) for s in (signal.SIGTERM, signal.SIGKILL, signal.SIGUSR1, signal.SIGUSR2))
#: A job ended by a rank's death and retried from its checkpoint (a job status beside state.py's outcomes).
RETRIED = "rank-died"
#: Exit statuses MPICH's Hydra reports for a rank killed by a signal (the signal's number: ABRT, BUS, KILL,
#: SEGV, TERM); nnlo's own ranks exit 0, 1, 2 or 75.
HYDRA_SIGNAL_CODES = tuple(int(s) for s in (signal.SIGABRT, signal.SIGBUS, signal.SIGKILL, signal.SIGSEGV,
                                             signal.SIGTERM))


class ChainError(NnloError):
    """A chain operation cannot be done in the run's present state (the message says why and what to do)."""


@dataclass(frozen=True)
class Decision:
    """The answer of ``job start``: go (``ok``) or stop, and why."""

    ok: bool
    message: str


# -- checkpoints ---------------------------------------------------------------------------------------
def checkpoint_marker(run_dir: Path, spec: RunSpec) -> str | None:
    """A string that changes whenever the run writes a new complete checkpoint (None: none yet).

    Training: the newest complete checkpoint folder and its manifest time. Optimization: the count of trial
    results and schedule stages the search has recorded, as its every save notes it in the run's progress
    record (:func:`nnlo.job.progress_marker`; the search saves its state at every job's start, so the time of
    its state file says nothing). A script: whatever its job saved, as :mod:`nnlo.job` noted it.
    """
    if spec.kind in (SCRIPT, "optimize"):
        return progress_marker(run_dir)
    latest = find_latest(checkpoint_dir(run_dir, spec))
    if latest is None:
        return None
    try:
        mtime = (latest / MANIFEST_FILE).stat().st_mtime_ns
    except OSError:
        mtime = 0
    return f"{latest.name}@{mtime}"


def _new_checkpoint(run_dir: Path, spec: RunSpec, job: JobRecord) -> bool:
    now = checkpoint_marker(run_dir, spec)
    return now is not None and now != job.checkpoint_at_start


#: how a job whose end nnlo never recorded (its batch shell killed with it) ended, in the chain's words
KILLED_WITH_SHELL = "was killed at its time limit (or with its node)"


def no_progress(spec: RunSpec, run_id: str, job_id: str, how: str) -> str:
    """Why the chain stops after job ``job_id`` ended (``how``: :data:`KILLED_WITH_SHELL`, "stopped (exit 75)")
    with nothing to resume from, and what to change (``run_id``: the id the user resumes, ``RunState.ref``): a
    search that finished no trial and no stage in a whole job has a walltime too short for one trial of its
    model."""
    if spec.kind == "optimize":
        return (f"job {job_id} {how} without finishing a trial or a stage of the search: the walltime "
                f"({format_hms(spec.walltime_s)}) is too short for one trial of this model; give a longer -t "
                f"(--walltime) or fewer --epochs (--min-epochs under a schedule), then `nnlo resume {run_id}`")
    return (f"job {job_id} {how} without writing a new checkpoint; the chain stops (give a longer --walltime or "
            f"checkpoint more often; see its log; `nnlo resume {run_id}` retries)")


# -- job start and end ---------------------------------------------------------------------------------
def _chain(st: RunState) -> list[JobRecord]:
    return st.jobs[st.chain_start:]


def job_start(run_dir: Path, job_id: str | None, *, submit_successor: bool = True) -> Decision:
    """Bookkeeping at the start of a job; ``ok`` False means: exit now, do not run."""
    run_dir = Path(run_dir)
    spec = load_spec(run_dir)
    job_id = job_id or f"pid{os.getpid()}"
    now = time.time()
    want_successor = False
    with update_state(run_dir) as st:
        rec = st.job(job_id)
        if rec is None:  # started before the submitter recorded it, or submitted by hand
            rec = JobRecord(job_id=job_id, submitted_at=now)
            st.jobs.append(rec)
        if st.state in FINAL_STATES:
            rec.status, rec.ended_at = SKIPPED, now
            return Decision(False, f"run {st.run_id} is {st.state}; job {job_id} exits without running")
        if st.search_dir and search_done(Path(st.search_dir)):  # another chain finished the shared search
            rec.status, rec.ended_at = SKIPPED, now
            st.state, st.error = DONE, None
            return Decision(False, f"the search {Path(st.search_dir).name} is done; job {job_id} of its chain "
                                   f"{st.run_id} exits without running")
        chain = _chain(st)
        started = [j for j in chain if j is not rec and j.started_at is not None]
        prev = started[-1] if started else None
        if prev is not None and prev.status == RUNNING_JOB:
            # its end was never recorded: killed with its batch shell (walltime, node failure)
            prev.ended_at = now
            if _new_checkpoint(run_dir, spec, prev):
                prev.status = WALLTIME
            else:
                prev.status = NO_CHECKPOINT
                rec.status, rec.ended_at = SKIPPED, now
                st.state = FAILED
                st.error = no_progress(spec, st.ref, prev.job_id, KILLED_WITH_SHELL)
                return Decision(False, st.error)
        if len(started) > spec.max_resubmits:
            rec.status, rec.ended_at = SKIPPED, now
            st.state = FAILED
            st.error = (f"stopped after {spec.max_resubmits} resubmission(s) (--max-resubmits); "
                        f"`nnlo resume {st.ref}` continues from the newest checkpoint")
            return Decision(False, st.error)
        rec.status, rec.started_at = RUNNING_JOB, now
        rec.host = socket.gethostname()
        rec.checkpoint_at_start = checkpoint_marker(run_dir, spec)
        st.state, st.error = RUNNING, None
        queued = [j for j in st.jobs if j.alive and j is not rec]
        want_successor = submit_successor and len(started) < spec.max_resubmits and not queued
        run_id, env, cluster = st.run_id, dict(st.env), st.cluster
    if want_successor:
        try:
            profile = load_profile_for(run_dir, cluster, env)
            succ = submit_job(run_dir, spec, profile, depends_on=job_id)
        except NnloError as e:
            note = f"could not queue the successor job ({e}); this job runs, but the run will not resubmit itself"
            print(f"nnlo: warning: run {run_id}: {note}", file=sys.stderr)
            with update_state(run_dir) as st:
                st.error = note
        else:
            with update_state(run_dir) as st:
                cancelled = st.state in FINAL_STATES
            if cancelled:  # `nnlo cancel` came in between: take the successor back
                get_scheduler(st.scheduler, run_dir).cancel([succ])
    return Decision(True, f"run {run_id}: job {job_id} started")


def job_end(run_dir: Path, job_id: str | None, rc: int) -> str:
    """Bookkeeping at the end of a job that exited with ``rc``; returns the run's new state."""
    run_dir = Path(run_dir)
    spec = load_spec(run_dir)
    job_id = job_id or f"pid{os.getpid()}"
    now = time.time()
    with update_state(run_dir) as st:
        rec = st.job(job_id)
        if rec is None:
            rec = JobRecord(job_id=job_id, submitted_at=now, started_at=now)
            st.jobs.append(rec)
        rec.ended_at, rec.rc = now, rc
        successors = [j for j in st.jobs if j.alive and j is not rec]
        fresh = _new_checkpoint(run_dir, spec, rec)
        stop = True
        if st.state == CANCELLED:
            rec.status = JOB_CANCELLED
        elif rc == EXIT_DONE:
            rec.status, st.state, st.error = FINISHED, DONE, None
        elif rc == EXIT_RESUMABLE or (rc in KILLED_AT_LIMIT and fresh):
            if not fresh:
                rec.status, st.state = NO_CHECKPOINT, FAILED
                st.error = no_progress(spec, st.ref, job_id, f"stopped (exit {rc})")
            elif successors:
                rec.status, st.state, stop = PREEMPTED if rec.preempted_at else WALLTIME, RESUBMITTING, False
            else:
                rec.status, st.state = WALLTIME, FAILED
                st.error = (f"stopped at the walltime of job {job_id} with no successor queued "
                            f"(--max-resubmits {spec.max_resubmits} reached or submission failed); "
                            f"`nnlo resume {st.ref}` continues")
        else:
            death = rank_death(run_dir, spec, job_id, rc)
            retried = retries(st)
            if death is not None and fresh and successors and retried < spec.max_retries:
                rec.status, st.state, stop = RETRIED, RESUBMITTING, False
                st.error = (f"job {job_id}: {death}; retry {retried + 1} of {spec.max_retries} "
                            "(--max-retries) from the newest checkpoint")
            elif death is not None:
                rec.status, st.state = JOB_FAILED, FAILED
                why = ("it left no new checkpoint" if not fresh else
                       f"--max-retries {spec.max_retries} reached" if retried >= spec.max_retries else
                       "no successor job is queued")
                st.error = (f"job {job_id} failed (exit {rc}): {death}; not retried: {why}; "
                            f"`nnlo resume {st.ref}` continues from the newest checkpoint")
            else:
                rec.status, st.state = JOB_FAILED, FAILED
                st.error = f"job {job_id} failed (exit {rc}): {log_error_line(run_dir, job_id)}"
        for j in successors if stop else []:
            j.status, j.ended_at = NOT_NEEDED if st.state == DONE else JOB_CANCELLED, now
        state, scheduler = st.state, st.scheduler
    merge_timeline(run_dir, spec)
    if stop and successors:
        get_scheduler(scheduler, run_dir).cancel([j.job_id for j in successors])
    return state


def retries(st: RunState) -> int:
    """Jobs of the present chain retried after a rank death (what ``--max-retries`` bounds)."""
    return sum(1 for j in _chain(st) if j.status == RETRIED)


def rank_death(run_dir: Path, spec: RunSpec, job_id: str, rc: int) -> str | None:
    """Why a failed job's rank died by a signal (a rank-fate line), or None for any other failure.

    The log's first event decides (:func:`nnlo.rankfate.first_event`): a rank's death - a line printed by
    ``nnlo ... -n`` or by the peers of a dead rank (:mod:`nnlo.liveness`), or built here from Hydra's banner or
    srun's ``task N: Killed`` and the rank records - whatever the exit status; the batch system ending the job
    (a walltime, a cancel) or a rank's own ``nnlo: error:`` first means what followed was the teardown. Else an
    exit status from a signal (128+n through a shell, or Hydra's bare signal number) is a death without a
    name.
    """
    tail = log_tail(run_dir, job_id, 200)
    folders = [Path(run_dir) / RANKS_DIR, checkpoint_dir(run_dir, spec) / RANKS_DIR]
    line = fate_line("\n".join(tail), *folders)  # the log's first event, if a death: whatever the exit status
    if line is not None:
        return line
    if rc in (EXIT_FAILED, EXIT_BAD_INPUT) or any("nnlo: error:" in ln for ln in tail):
        return None  # nnlo's own error exit, bad input, or a rank's own error before any death
    if status_signal(rc) is not None or rc in HYDRA_SIGNAL_CODES:
        return f"a rank was killed by a signal (exit {rc})"
    return None


def merge_timeline(run_dir: Path, spec: RunSpec) -> Path | None:
    """Merge the per-rank traces of a ``--timeline`` run into ``timeline.json``; the file, or None.

    Why here: a job killed at its walltime never reaches the runtime's own merge, but its ``nnlo job end``
    still runs, so every job of a chain leaves a valid Chrome trace. A failed merge (a torn or unreadable
    trace) is reported on stderr and never changes the job's outcome.
    """
    root = Path(run_dir) if spec.kind == "optimize" else checkpoint_dir(run_dir, spec)
    try:
        if not find_trace_dirs(root):
            return None
        return Path(merge_run(root).path)
    except Exception as e:  # noqa: BLE001 - the job's bookkeeping is done; the trace stays as rank files
        print(f"nnlo: warning: cannot merge the timeline of {root} ({e}); the per-rank traces stay in "
              f"{root}; merge them later with `nnlo timeline {root}`", file=sys.stderr)
        return None


def log_path(run_dir: Path, job_id: str) -> Path:
    """Where Slurm, LSF and the local scheduler put a job's output (the scripts' ``-o``/``--output``)."""
    return Path(run_dir) / LOG_DIR / job_log(job_id)


def job_logs(run_dir: Path, job_id: str) -> list[Path]:
    """A job's log files: ``logs/job-<id>.out``, or Torque's ``<name>.o<seq>``/``.e<seq>`` in ``logs/``.

    Torque copies a job's output into the ``-o`` folder only when the job ends, so a PBS job's own
    ``nnlo job end`` cannot quote it; ``nnlo status``/``logs`` later can.
    """
    first = log_path(run_dir, job_id)
    if first.exists():
        return [first]
    seq = job_id.split(".")[0]
    logs = Path(run_dir) / LOG_DIR
    found = [p for p in (logs / job_log(seq),) if p.exists()]
    found += sorted(logs.glob(f"*.o{seq}")) + sorted(logs.glob(f"*.e{seq}"))
    return found


def log_tail(run_dir: Path, job_id: str, lines: int = 20) -> list[str]:
    text = ""
    for path in job_logs(run_dir, job_id):
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                text += f.read().decode(errors="replace") + "\n"
        except OSError:
            continue
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]


_LAUNCHER_NOISE = ("srun:", "slurmstepd:", "jsrun", "aprun:", "mpirun", "mpiexec", "===", "application called",
                   "nnlo job ", "BAD TERMINATION", "YOUR APPLICATION", "Terminated", "CLEANING UP")


def log_error_line(run_dir: Path, job_id: str) -> str:
    """The most telling line of a failed job's log: nnlo's own error line, else the last error-looking line
    that is not the launcher's report of the exit (``srun: error: ... Exited with exit code 1``)."""
    tail = log_tail(run_dir, job_id, 60)
    error = _error_in(tail)
    if error is not None:
        return error
    rest = [ln for ln in tail if not ln.strip().startswith(_LAUNCHER_NOISE) and "BAD TERMINATION" not in ln] or tail
    return rest[-1].strip()[:300] if rest else f"no log yet (see `nnlo logs` or {Path(run_dir) / LOG_DIR})"


def _error_in(tail: list[str]) -> str | None:
    """nnlo's own error line of a log's tail, else its last error-looking line that is not the launcher's
    report of the exit; None: the tail holds no error."""
    own = [ln for ln in tail if "nnlo: error:" in ln]
    if own:
        return own[-1].strip()[:300]
    useful = [ln for ln in tail if not ln.strip().startswith(_LAUNCHER_NOISE) and "BAD TERMINATION" not in ln]
    for line in reversed(useful):
        low = line.lower()
        if "error" in low or "exception" in low or "killed" in low:
            return line.strip()[:300]
    return None


# -- user commands -------------------------------------------------------------------------------------
def cancel_run(run_dir: Path) -> list[str]:
    """Cancel the run's whole chain (running and queued jobs); returns the job ids cancelled."""
    run_dir = Path(run_dir)
    now = time.time()
    with update_state(run_dir) as st:
        if st.state == DONE:
            raise ChainError(f"run {st.run_id} is already done; nothing to cancel")
        alive = [j for j in st.jobs if j.alive]
        for j in alive:
            if j.started_at is None:
                j.status, j.ended_at = JOB_CANCELLED, now
        st.state, st.error = CANCELLED, "cancelled by the user"
        scheduler = st.scheduler
    ids = [j.job_id for j in alive]
    if ids:
        try:
            get_scheduler(scheduler, run_dir).cancel(ids)
        except NnloError as e:
            raise ChainError(f"run {run_dir.name} is marked cancelled (its queued jobs exit as soon as they start), "
                             f"but the scheduler refused: {e}; cancel job(s) {', '.join(ids)} by hand") from None
    return ids


class Preemptable(NamedTuple):
    """What ``nnlo preempt`` finds in a run: the job it would stop now, or None and why not (``later``: waiting
    could change that, e.g. a job still starting)."""

    job: JobRecord | None
    why: str = ""
    later: bool = False


def preemptable(run_dir: Path, st: RunState) -> Preemptable:
    """The job ``nnlo preempt`` would stop now (:class:`Preemptable`).

    A job is preempted only once training is under way in it (it has written a checkpoint of its own, so its
    stop is a resumption, never a lost start) and while its successor is queued (so the chain goes on)."""
    if st.state in FINAL_STATES:
        return Preemptable(None, f"run {st.run_id} is {st.state}; there is no job to preempt")
    running = [j for j in _chain(st) if j.status == RUNNING_JOB]
    if not running:
        return Preemptable(None, f"run {st.run_id} has no running job yet ({st.state})", later=True)
    job = running[-1]
    if job.preempted_at is not None:
        return Preemptable(None, f"run {st.run_id}: job {job.job_id} was already preempted; it is writing its "
                                 "checkpoint")
    if not _new_checkpoint(run_dir, load_spec(run_dir), job):
        return Preemptable(None, f"job {job.job_id} of run {st.run_id} has not written a checkpoint yet",
                           later=True)
    if not any(j.alive for j in st.jobs if j is not job):
        return Preemptable(None, f"run {st.run_id}: job {job.job_id} has no successor queued (--max-resubmits "
                                 f"reached?); preempting it would end the chain: `nnlo cancel {st.ref}` stops it")
    return Preemptable(job)


def preempt_run(run_dir: Path) -> str:
    """Send the running job of the run the chain's own warning signal (the profile's ``signal``, else SIGUSR1),
    as the batch system does before the walltime: it checkpoints, exits 75 and its queued successor resumes.
    Returns the job id; ChainError (one line) when no job can be preempted now (:func:`preemptable`)."""
    run_dir = Path(run_dir)
    st = read_state(run_dir)
    profile = load_profile_for(run_dir, st.cluster, st.env)  # before any write: a refused preempt changes nothing
    sig = signal.Signals["SIG" + (profile.signal or "USR1").removeprefix("SIG")]
    with update_state(run_dir) as st:
        job, why, _ = preemptable(run_dir, st)
        if job is None:
            raise ChainError(why)
        job.preempted_at = time.time()
        job_id, scheduler = job.job_id, st.scheduler
    try:
        get_scheduler(scheduler, run_dir).signal([job_id], sig)
    except NnloError as e:
        with update_state(run_dir) as st:
            rec = st.job(job_id)
            if rec is not None:
                rec.preempted_at = None
        raise ChainError(f"run {st.run_id}: could not signal job {job_id}: {e}") from None
    return job_id


def resume_run(run_dir: Path, *, force: bool = False, options: list[str] | None = None) -> str:
    """Start a new chain for a stopped run (failed or cancelled) from its newest checkpoint; returns the job id.

    ``options`` (inner-command options) are appended to the run's command first, see
    :func:`nnlo_sched.runs.change_inner_options`.
    """
    run_dir = Path(run_dir)
    st = read_state(run_dir)
    alive = alive_jobs(run_dir, st)
    if alive:
        raise ChainError(f"run {st.run_id} still has job(s) {', '.join(alive)} queued or running; "
                         f"`nnlo cancel {st.ref}` first")
    if st.state == DONE and not force:
        raise ChainError(f"run {st.run_id} is done; pass --force to run it again from its last checkpoint")
    profile = load_profile_for(run_dir, st.cluster, st.env)  # before any write: a refused resume changes nothing
    spec = change_inner_options(run_dir, options) if options else load_spec(run_dir)
    now = time.time()
    with update_state(run_dir) as st:
        for j in st.jobs:
            if j.alive:  # the scheduler says it is gone; its end was never recorded
                j.status, j.ended_at = JOB_CANCELLED if st.state == CANCELLED else JOB_FAILED, now
        st.state, st.error = QUEUED, None
        st.resumes += 1
        st.chain_start = len(st.jobs)
    try:
        return submit_job(run_dir, spec, profile, depends_on=None)
    except NnloError as e:
        with update_state(run_dir) as st:
            st.state, st.error = FAILED, f"resume: {e}"
        raise


def alive_jobs(run_dir: Path, st: RunState) -> list[str]:
    """Jobs the state thinks alive that the scheduler confirms as pending or running (or cannot tell)."""
    ids = [j.job_id for j in st.jobs if j.alive]
    if not ids:
        return []
    infos = get_scheduler(st.scheduler, run_dir).query(ids)
    return [i for i in ids if infos.get(i) is None or infos[i].alive or infos[i].state == "UNKNOWN"]


def reconcile(run_dir: Path, infos: dict[str, JobInfo]) -> RunState:
    """Bring an active run's state in line with what the scheduler says; returns the (new) state.

    A run that the record calls active but that has no job pending or running any more (its last job was
    killed with its batch shell, or cancelled outside nnlo) is marked failed with the reason, so that it
    never shows "running" forever. Unknown scheduler answers change nothing.
    """
    st = read_state(run_dir)
    mine = [j for j in st.jobs if j.alive]
    if st.state not in ACTIVE_STATES or not mine:
        return st
    answers = [infos.get(j.job_id) for j in mine]
    if any(a is None or a.alive or a.state == "UNKNOWN" for a in answers):
        return st
    spec = load_spec(run_dir)
    now = time.time()
    with update_state(run_dir) as st:
        if st.state not in ACTIVE_STATES:
            return st
        for j in st.jobs:
            if not j.alive:
                continue
            info = infos.get(j.job_id)
            native = info.native if info else ""
            j.ended_at = j.ended_at or now
            if j.started_at is None:
                j.status = JOB_CANCELLED
            elif _new_checkpoint(run_dir, spec, j):
                j.status = WALLTIME
            else:
                j.status = JOB_FAILED
            last = j
        st.state = FAILED
        ended = f"job {last.job_id} ended ({native or 'gone from the queue'}) without nnlo's bookkeeping"
        cause = _error_in(log_tail(run_dir, last.job_id, 60))  # a job that died in its first second says why
        st.error = (f"{ended}: {cause}; fix that, then `nnlo resume {st.ref}` continues from the newest "
                    f"checkpoint" if cause else
                    f"{ended} and no job is queued; `nnlo resume {st.ref}` continues from the newest checkpoint")
    return st


__all__ = ["Decision", "ChainError", "checkpoint_marker", "job_start", "job_end",
           "cancel_run", "resume_run", "reconcile", "alive_jobs", "log_tail", "log_path", "job_logs",
           "RESUBMITTING", "RUNNING", "QUEUED"]

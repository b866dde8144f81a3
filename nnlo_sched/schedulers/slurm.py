"""Slurm: ``sbatch --parsable`` (dependency ``--dependency=afterany:ID``), ``squeue``/``sacct`` for state,
``scancel``.

Status asks ``squeue -t all`` once for every job id; jobs it no longer knows (purged after ``MinJobAge``)
are asked of ``sacct`` in one more call when accounting exists, and are otherwise ``ENDED`` - a job absent
from squeue is certainly neither pending nor running, which is all the chain needs to know.

Absence only means "ended" when the answer was readable: if squeue or sacct prints a line that is not in the
format asked for (a maintenance banner, an HTML error page from a REST proxy), the jobs not found in it are
``UNKNOWN`` - garbage must never make ``nnlo status`` mark a live run as failed.
"""
from __future__ import annotations

import re
import signal as signals
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

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
    one_line,
    query_capture,
)
from nnlo_sched.walltime import format_hms

_STATES = {
    "PENDING": PENDING, "CONFIGURING": PENDING, "REQUEUED": PENDING, "REQUEUE_HOLD": PENDING,
    "REQUEUE_FED": PENDING, "RESV_DEL_HOLD": PENDING, "SUSPENDED": PENDING, "STOPPED": PENDING,
    "RUNNING": RUNNING, "COMPLETING": RUNNING, "SIGNALING": RUNNING, "STAGE_OUT": RUNNING,
    "RESIZING": RUNNING, "COMPLETED": COMPLETED, "TIMEOUT": TIMEOUT, "DEADLINE": TIMEOUT,
    "CANCELLED": CANCELLED, "FAILED": FAILED, "NODE_FAIL": FAILED, "BOOT_FAIL": FAILED,
    "OUT_OF_MEMORY": FAILED, "PREEMPTED": FAILED, "SPECIAL_EXIT": FAILED, "REVOKED": CANCELLED,
}
#: one line of ``squeue -o %i|%T|%r`` or ``sacct -P -o JobID,State`` ("CANCELLED by 1234", "FAILED+")
_LINE = re.compile(r"^(?P<id>[^|\s]+)\|(?P<state>[A-Z_]+\+?(?: by \d+)?)(?:\|(?P<reason>.*))?$")
_SUBMITTED = re.compile(r"^\s*(?:Submitted batch job\s+)?(\d+(?:_\d+)?)(?:;\S+)?\s*$", re.MULTILINE)
#: ``123`` or an array task ``123_4``; Slurm's ids start at 1
_JOB_ID = re.compile(r"[1-9][0-9]*(?:_[0-9]+)?")


def normalise(native: str) -> str:
    word = native.split()[0].rstrip("+") if native.strip() else ""
    return _STATES.get(word, UNKNOWN)


_PARTITION_FIX = ("the job asks more than any node of its partition holds (tasks or CPUs per node, memory, GPUs) "
                  "or more nodes than it has: lower cores_per_node, gpus_per_node or nodes in the cluster profile "
                  "(`sinfo -o '%P %c %m %G %D'` shows what the partitions hold), or name another partition")
_LIMIT_FIX = ("the job exceeds a limit of its {what}: give a shorter --walltime or fewer nodes, or another "
              "partition, account or QOS (`scontrol show partition`, `sacctmgr show qos`)")


class SlurmScheduler(Scheduler):
    name = "slurm"
    # squeue's %r words that no waiting ends (Slurm's squeue(1) "JOB REASON CODES"): the job must be cancelled
    # (`nnlo cancel`) and submitted again with the change
    never_reasons: ClassVar[dict[str, str]] = {
        "PartitionConfig": _PARTITION_FIX,
        "PartitionNodeLimit": _PARTITION_FIX,
        "BadConstraints": ("no node has the requested features: correct the constraint (--directive or the "
                           "profile's constraint; `sinfo -o '%N %f'` lists the features)"),
        "PartitionTimeLimit": _LIMIT_FIX.format(what="partition (its MaxTime)"),
        "QOSMaxWallDurationPerJobLimit": _LIMIT_FIX.format(what="QOS (its MaxWall)"),
        "AssocMaxWallDurationLimit": _LIMIT_FIX.format(what="association (its MaxWall)"),
        "InvalidAccount": "the account is not valid here: correct the profile's account (`sacctmgr show assoc`)",
        "InvalidQOS": "the QOS is not valid for this account: correct it (`sacctmgr show assoc format=qos`)",
    }
    job_id_vars = ("SLURM_JOB_ID", "SLURM_JOBID")
    job_id_syntax = _JOB_ID
    submit_program, submit_pattern = "sbatch", _SUBMITTED
    cancel_program, cancel_harmless = "scancel", ('already completed', 'Invalid job id', 'Job/step already')
    directive_prefix, account_flag, takes_constraint = "#SBATCH", "--account", True
    log_id_placeholder, array_log_id_placeholder = "%j", "%A_%a"
    signal_program = "scancel"
    # sbatch --array=0-K-1; a task is JOBID_IDX, and --dependency=afterany:JOBID_IDX waits for that task alone
    has_arrays, array_first_index, array_index_var = True, 0, "SLURM_ARRAY_TASK_ID"
    array_job_id_expr = "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
    array_env_vars = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
                      "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP")

    def array_task_id(self, array_id: str, index: int) -> str:
        return self.check_job_id(f"{array_id}_{index}")

    def _array_job_id(self, environ: Mapping[str, str]) -> str | None:
        job, task = environ.get("SLURM_ARRAY_JOB_ID", ""), environ.get("SLURM_ARRAY_TASK_ID", "")
        return f"{job}_{task}" if job and task else None

    @classmethod
    def walltime_directive(cls, seconds: int) -> str:
        """``--time``'s ``[D-]HH:MM:SS``."""
        days, rest = divmod(int(seconds), 86400)
        hms = format_hms(rest)
        return f"{days}-{hms}" if days else hms

    def signal_argv(self, job_ids: Sequence[str], sig: signals.Signals) -> list[str]:
        """``scancel --signal=USR1 --batch ID ...``: the batch shell only, as ``--signal=B:`` sends the warning."""
        return ["scancel", f"--signal={sig.name.removeprefix('SIG')}", "--batch", *job_ids]

    def submit_argv(self, script: Path, depends_on: str | None = None) -> list[str]:
        """``sbatch --parsable [--dependency=afterany:ID] SCRIPT`` (prints ``ID`` or ``ID;cluster``)."""
        dep = [f"--dependency=afterany:{self.check_job_id(depends_on)}"] if depends_on is not None else []
        return ["sbatch", "--parsable", *dep, str(script)]

    def _query(self, ids: list[str]) -> dict[str, JobInfo]:
        try:
            proc = query_capture(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(ids), "-o", "%i|%T|%r"],
                                 what="query jobs", answers=("Invalid job id",))
        except SchedulerError as e:
            return self.unknown(ids, str(e))
        if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
            return self.unknown(ids, f"squeue failed: {one_line(proc.stderr)}")
        found, garbage = _parse(proc.stdout, ids)
        missing = [j for j in ids if j not in found]
        if missing and garbage:
            found.update(self.unknown(missing, f"squeue printed unreadable output: {one_line(garbage, 120)!r}"))
        elif missing:
            found.update(self._sacct(missing))
        return found

    def _sacct(self, ids: list[str]) -> dict[str, JobInfo]:
        """Jobs squeue forgot: sacct when accounting exists (one call), else ENDED (gone from the queue)."""
        try:
            proc = query_capture(["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", "JobID,State"],
                                 what="query ended jobs", answers=("accounting storage is disabled",))
        except SchedulerError:
            proc = None
        if proc is None or proc.returncode != 0:
            return {j: JobInfo(j, ENDED, "", "not in squeue; no accounting") for j in ids}
        found, garbage = _parse(proc.stdout, ids)
        for j in ids:
            if j not in found:
                found[j] = (JobInfo(j, UNKNOWN, "", f"sacct printed unreadable output: {one_line(garbage, 120)!r}")
                            if garbage else JobInfo(j, ENDED, "", "not in squeue or sacct"))
        return found


def _parse(text: str, ids: Sequence[str]) -> tuple[dict[str, JobInfo], str]:
    """The jobs of ``ids`` found in squeue/sacct output, and the first line that is not in the format (or "")."""
    found: dict[str, JobInfo] = {}
    garbage = ""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _LINE.match(line)
        if m is None:
            garbage = garbage or line
        elif m.group("id") in ids:
            native = m.group("state")
            found[m.group("id")] = JobInfo(m.group("id"), normalise(native), native, m.group("reason") or "")
    return found, garbage

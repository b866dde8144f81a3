"""PBS/Torque (Titan): ``qsub`` (dependency ``-W depend=afterany:ID``), ``qstat``, ``qdel``.

``qstat ID ...`` answers for many jobs at once in its classic table (``Job ID  Name  User  Time Use S
Queue``) and prints ``Unknown Job Id`` for jobs the server has forgotten: those have ended. Torque keeps
finished jobs a while in state ``C``; PBS Pro's ``F`` is the same. Lines that are not job rows (a banner,
an error page) make the jobs missing from the table ``UNKNOWN``, never ``ENDED``.
"""
from __future__ import annotations

import re
import signal as signals
from collections.abc import Sequence
from pathlib import Path

from nnlo_sched.schedulers.base import (
    ENDED,
    PENDING,
    RUNNING,
    UNKNOWN,
    JobInfo,
    Scheduler,
    SchedulerError,
    one_line,
    query_capture,
)

_STATES = {"Q": PENDING, "H": PENDING, "W": PENDING, "T": PENDING, "S": PENDING, "R": RUNNING,
           "E": RUNNING, "B": RUNNING, "C": ENDED, "F": ENDED, "X": ENDED}
_SUBMITTED = re.compile(r"^\s*(\d+(?:\[\])?(?:\.[\w.-]+)?)\s*$", re.MULTILINE)
#: ``123``, ``123.server``, an array ``123[].server`` or its element ``123[4].server`` (Torque counts from 0);
#: never ``all``, which qdel takes for every job
_JOB_ID = re.compile(r"[0-9]+(?:\[[0-9]*\])?(?:\.[A-Za-z0-9_.-]+)?")


def short_id(job_id: str) -> str:
    """``123.titan-batch`` -> ``123``: qstat prints the id shortened (and sometimes truncated)."""
    return job_id.split(".")[0]


class PbsScheduler(Scheduler):
    name = "pbs"
    # Slurm's Torque wrappers (slurm-wlm-torque) run PBS scripts as Slurm jobs and leave PBS_JOBID empty
    job_id_vars: tuple[str, ...] = ("PBS_JOBID", "SLURM_JOB_ID")
    job_id_syntax = _JOB_ID
    submit_program, submit_pattern = "qsub", _SUBMITTED
    cancel_program = "qdel"
    cancel_harmless: tuple[str, ...] = ('Unknown Job Id', 'already', 'finished')
    # no signal before the walltime: the runtime's clock is what stops the job in time
    directive_prefix, account_flag, warns_before_walltime, job_name_max = "#PBS", "#PBS -A", False, 15
    # PBS Pro: -J 1-K (at least two tasks); qsub prints 123[].server, a subjob is 123[4].server and its
    # PBS_JOBID says so; PBS_ARRAY_INDEX is its index
    has_arrays, array_first_index, array_min_tasks, array_index_var = True, 1, 2, "PBS_ARRAY_INDEX"
    signal_program = "qsig"
    array_job_id_expr = "${PBS_JOBID}"
    array_env_vars = ("PBS_ARRAY_INDEX", "PBS_ARRAY_ID")

    def array_task_id(self, array_id: str, index: int) -> str:
        head, _, server = array_id.partition(".")
        return self.check_job_id(f"{head.removesuffix('[]')}[{index}]" + (f".{server}" if server else ""))

    def signal_argv(self, job_ids: Sequence[str], sig: signals.Signals) -> list[str]:
        """``qsig -s USR1 ID ...`` (PBS signals the job's batch shell)."""
        return ["qsig", "-s", sig.name.removeprefix("SIG"), *job_ids]

    def submit_argv(self, script: Path, depends_on: str | None = None) -> list[str]:
        """``qsub [-W depend=afterany:ID] SCRIPT`` with the full id (prints ``ID.server``)."""
        dep = ["-W", f"depend=afterany:{self.check_job_id(depends_on)}"] if depends_on is not None else []
        return ["qsub", *dep, str(script)]

    @classmethod
    def job_name(cls, name: str) -> str:
        """PBS job names start with a letter and have at most 15 characters."""
        clean = super().job_name(name)
        return (clean if clean[0].isalpha() else "n" + clean)[:cls.job_name_max]

    def _query(self, ids: list[str]) -> dict[str, JobInfo]:
        try:
            proc = query_capture(["qstat", *ids], what="query jobs", answers=("Unknown Job Id",))
        except SchedulerError as e:
            return self.unknown(ids, str(e))
        out = proc.stdout
        if proc.returncode != 0 and not out.strip() and "Unknown Job Id" not in proc.stderr:
            return self.unknown(ids, f"qstat failed: {one_line(proc.stderr)}")
        by_short = {short_id(j): j for j in ids}
        found: dict[str, JobInfo] = {}
        garbage = ""
        for line in out.splitlines():
            cols = line.split()
            if not cols or cols[0].startswith(("Job", "---")):
                continue
            if len(cols) < 5 or not cols[0][:1].isdigit():
                garbage = garbage or line.strip()  # a banner or an error page: absence proves nothing
                continue
            full = by_short.get(short_id(cols[0]))
            if full is not None:
                state = cols[-2]
                found[full] = JobInfo(full, _STATES.get(state, UNKNOWN), state)
        for j in ids:
            found.setdefault(j, JobInfo(j, UNKNOWN, "", f"qstat printed unreadable output: {one_line(garbage, 120)!r}")
                             if garbage else JobInfo(j, ENDED, "", "unknown to qstat"))
        return found

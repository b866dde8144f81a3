"""IBM Spectrum LSF (Summit): ``bsub`` (dependency ``-w 'ended(ID)'``), ``bjobs``, ``bkill``.

``bsub`` reads ``#BSUB`` lines only from a script given on standard input, so the submit command line is
``sh -c 'exec bsub "$@" < "$0"' SCRIPT [-w 'ended(ID)']``: it runs as is, no stdin plumbing needed.
Job ids are positive: ``bkill 0`` means every job of the user.

``bjobs -a -w ID ...`` answers for many jobs in one call with its classic table (``JOBID USER STAT QUEUE
FROM_HOST EXEC_HOST JOB_NAME SUBMIT_TIME``) and says ``Job <ID> is not found`` on stderr for ids it has
forgotten (``CLEAN_PERIOD``): those jobs have ended - unless the table held lines that are not job rows (a
banner, an error page), in which case jobs missing from it are ``UNKNOWN``.
"""
from __future__ import annotations

import re
import signal as signals
from collections.abc import Mapping, Sequence
from pathlib import Path

from nnlo_sched.schedulers.base import (
    COMPLETED,
    ENDED,
    FAILED,
    PENDING,
    RUNNING,
    UNKNOWN,
    JobInfo,
    Scheduler,
    SchedulerError,
    one_line,
    query_capture,
)
from nnlo_sched.walltime import format_hours_minutes

_STATES = {"PEND": PENDING, "PSUSP": PENDING, "WAIT": PENDING, "RUN": RUNNING, "USUSP": RUNNING,
           "SSUSP": RUNNING, "PROV": RUNNING, "DONE": COMPLETED, "EXIT": FAILED, "UNKWN": UNKNOWN,
           "ZOMBI": UNKNOWN}
_SUBMITTED = re.compile(r"Job <(\d+)> is submitted")
_ELEMENT = re.compile(r"\[([1-9][0-9]*)\]$")
#: ``123`` or an array element ``123[4]``; 0 is not a job but "all of the user's jobs" to bkill
_JOB_ID = re.compile(r"[1-9][0-9]*(?:\[[1-9][0-9]*\])?")


class LsfScheduler(Scheduler):
    name = "lsf"
    job_id_vars = ("LSB_JOBID",)
    job_id_syntax = _JOB_ID
    submit_program, submit_pattern = "bsub", _SUBMITTED
    cancel_program, cancel_harmless = "bkill", ('already finished', 'No matching job', 'is not found')
    directive_prefix, account_flag = "#BSUB", "bsub -P"
    log_id_placeholder, array_log_id_placeholder = "%J", "%J_%I"
    warning_lead_unit_s, signal_program = 60, "bkill"
    # -J "name[1-K]"; an element is JOBID[IDX] (bkill, bjobs and -w 'ended(JOBID[IDX])' take it); LSB_JOBINDEX
    # is 0 outside an array
    has_arrays, array_first_index, array_index_var = True, 1, "LSB_JOBINDEX"
    array_job_id_expr = "${LSB_JOBID}[${LSB_JOBINDEX}]"
    array_env_vars = ("LSB_JOBINDEX", "LSB_JOBINDEX_END", "LSB_JOBINDEX_STEP")

    def array_task_id(self, array_id: str, index: int) -> str:
        return self.check_job_id(f"{array_id}[{index}]")

    def _array_job_id(self, environ: Mapping[str, str]) -> str | None:
        job, index = environ.get("LSB_JOBID", ""), environ.get("LSB_JOBINDEX", "")
        return f"{job}[{index}]" if job and index not in ("", "0") else None

    @classmethod
    def walltime_directive(cls, seconds: int) -> str:
        """``-W [hours:]minutes``, rounded up to a whole minute so the job never gets less than asked."""
        return format_hours_minutes(-(-int(seconds) // 60))

    @classmethod
    def lead_directive(cls, seconds: int) -> str:
        """``-wt [hours:]minutes``."""
        return format_hours_minutes(-(-int(seconds) // 60))

    def signal_argv(self, job_ids: Sequence[str], sig: signals.Signals) -> list[str]:
        """``bkill -s USR2 ID ...`` (LSF sends it to the job's batch script, as its ``-wa`` warning)."""
        return ["bkill", "-s", sig.name.removeprefix("SIG"), *job_ids]

    def submit_argv(self, script: Path, depends_on: str | None = None) -> list[str]:
        """``sh -c 'exec bsub "$@" < "$0"' SCRIPT [-w 'ended(ID)']`` (prints ``Job <ID> is submitted ...``)."""
        dep = ["-w", f"ended({self.check_job_id(depends_on)})"] if depends_on is not None else []
        return ["sh", "-c", 'exec bsub "$@" < "$0"', str(script), *dep]

    def _query(self, ids: list[str]) -> dict[str, JobInfo]:
        try:
            proc = query_capture(["bjobs", "-a", "-w", *ids], what="query jobs", answers=("is not found",))
        except SchedulerError as e:
            return self.unknown(ids, str(e))
        out = proc.stdout
        if proc.returncode != 0 and not out.strip() and "is not found" not in proc.stderr:
            return self.unknown(ids, f"bjobs failed: {one_line(proc.stderr)}")
        found: dict[str, JobInfo] = {}
        lines = out.splitlines()
        header = lines[0].split() if lines and lines[0].startswith("JOBID") else ["JOBID", "USER", "STAT"]
        try:
            i_id, i_stat = header.index("JOBID"), header.index("STAT")
        except ValueError:
            return self.unknown(ids, "bjobs printed an unexpected header")
        garbage = ""
        for line in lines[1:] if lines and lines[0].startswith("JOBID") else lines:
            cols = line.split()
            if not cols:
                continue
            if len(cols) <= max(i_id, i_stat) or not self.job_id_syntax.fullmatch(cols[i_id]):
                garbage = garbage or line.strip()  # a banner or an error page: absence proves nothing
            else:
                key = cols[i_id]
                # the name column moves left when EXEC_HOST is blank (a pending job): look past STAT
                element = next((m for c in cols[i_stat + 1:] if (m := _ELEMENT.search(c))), None)
                if element is not None and f"{key}[{element.group(1)}]" in ids:
                    key = f"{key}[{element.group(1)}]"  # an array element: JOBID 123, JOB_NAME name[4]
                if key in ids:
                    found[key] = JobInfo(key, _STATES.get(cols[i_stat], UNKNOWN), cols[i_stat])
        for j in ids:
            found.setdefault(j, JobInfo(j, UNKNOWN, "", f"bjobs printed unreadable output: {one_line(garbage, 120)!r}")
                             if garbage else JobInfo(j, ENDED, "", "not found by bjobs"))
        return found

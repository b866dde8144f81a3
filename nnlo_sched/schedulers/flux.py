"""Flux (LLNL El Capitan, Tuolumne): ``flux batch`` (``--dependency=afterany:ID``), ``flux jobs`` for state,
``flux cancel``, ``flux job kill -s SIG``.

The directives are ``#flux:`` lines (flux-batch(1) SUBMISSION DIRECTIVES; templates/flux.sh): ``-N``, ``-t``
(minutes), ``-q``, ``--bank``, ``--exclusive``, ``--output``, ``--job-name`` and the warning
``--signal=SIG@TIME``, which Flux delivers to the batch script *and* its running jobs before the time limit.

A batch script is the initial program of a Flux instance of its own: a ``flux`` command run inside it talks to
that instance. The chain's commands inside a job (queueing the successor, asking for state) must reach the
system instance the job was submitted to, so they run as ``flux --parent ...`` there (LLNL's tutorial:
``flux --parent batch`` resubmits to the system queue); outside a job, as plain ``flux ...``.

Job ids come in two forms that every flux command takes: F58 as ``flux batch`` prints it (``ƒ2Ykd4k8Xm``, or
``f2Ykd4k8Xm`` under ``FLUX_F58_FORCE_ASCII``) and decimal (``123456789``); ``flux jobs -o`` prints both,
so a record in either form is found. Anything else (``all``, an option) is refused before a program runs.
Flux has no job arrays.
"""
from __future__ import annotations

import os
import re
import signal as signals
from collections.abc import Mapping, Sequence
from pathlib import Path

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
    cancel_tolerant,
    one_line,
    query_capture,
)

#: ``flux jobs``' status word (its ``{status}`` field: the state, or the result of an inactive job)
_STATES = {"NEW": PENDING, "DEPEND": PENDING, "PRIORITY": PENDING, "SCHED": PENDING, "RUN": RUNNING,
           "CLEANUP": RUNNING, "COMPLETED": COMPLETED, "FAILED": FAILED, "CANCELED": CANCELLED,
           "TIMEOUT": TIMEOUT}
_F58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
#: a decimal id (never 0) or an F58 one with its prefix (``ƒ``, or ``f`` in ASCII)
_JOB_ID = re.compile(rf"[1-9][0-9]*|[ƒf][{_F58}]+")
_SUBMITTED = re.compile(rf"^\s*([ƒf][{_F58}]+|[1-9][0-9]*)\s*$", re.MULTILINE)
_ROW = re.compile(r"^(?P<dec>[0-9]+)\|(?P<f58>\S+)\|(?P<status>[A-Z]+)$")
#: what ``flux jobs`` prints for each job: both id forms and the status word
ROW_FORMAT = "{id.dec}|{id.f58}|{status}"


def flux_command(environ: Mapping[str, str] | None = None) -> list[str]:
    """``flux --parent`` inside a Flux job (its batch script is an instance of its own), else ``flux``."""
    environ = os.environ if environ is None else environ
    return ["flux", "--parent"] if environ.get("FLUX_JOB_ID") else ["flux"]


def parse_jobs(text: str, ids: Sequence[str]) -> dict[str, JobInfo]:
    """The jobs of ``ids`` (either form) in ``flux jobs -n -o ROW_FORMAT`` output; absent ones have ended,
    unless a line is not in the format (then they are ``UNKNOWN``). Pure."""
    rows: dict[str, str] = {}
    garbage = ""
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = _ROW.match(line)
        if m is None:
            garbage = garbage or line
            continue
        rows[m.group("dec")] = rows[m.group("f58")] = m.group("status")
        rows["f" + m.group("f58")[1:]] = m.group("status")  # the ASCII spelling of the F58 form
    found: dict[str, JobInfo] = {}
    for j in ids:
        status = rows.get(j)
        if status is not None:
            found[j] = JobInfo(j, _STATES.get(status, UNKNOWN), status)
        elif garbage:
            found[j] = JobInfo(j, UNKNOWN, "", f"flux jobs printed unreadable output: {one_line(garbage, 120)!r}")
        else:
            found[j] = JobInfo(j, ENDED, "", "unknown to flux jobs")
    return found


class FluxScheduler(Scheduler):
    name = "flux"
    job_id_vars = ("FLUX_JOB_ID",)
    job_id_syntax = _JOB_ID
    submit_program, submit_pattern = "flux", _SUBMITTED
    cancel_program, cancel_harmless = "flux", ("job is inactive", "unknown job id", "inactive")
    directive_prefix, account_flag = "#flux:", "--bank"
    signal_program = "flux"
    job_name_max = 64
    # --output's mustache template: the job's id as flux batch prints it (F58)
    log_id_placeholder = "{{id}}"

    @classmethod
    def walltime_directive(cls, seconds: int) -> str:
        """``-t``'s minutes with their unit (``90m``), rounded up so the job never gets less than asked."""
        return f"{-(-int(seconds) // 60)}m"

    @classmethod
    def lead_directive(cls, seconds: int) -> str:
        """``--signal=SIG@TIME``'s time in Flux standard duration (``300s``)."""
        return f"{int(seconds)}s"

    def submit_argv(self, script: Path, depends_on: str | None = None) -> list[str]:
        """``flux [--parent] batch [--dependency=afterany:ID] SCRIPT`` (prints the job's F58 id)."""
        dep = [f"--dependency=afterany:{self.check_job_id(depends_on)}"] if depends_on is not None else []
        return [*flux_command(), "batch", *dep, str(script)]

    def signal_argv(self, job_ids: Sequence[str], sig: signals.Signals) -> list[str]:
        """``flux [--parent] job kill -s USR1 ID ...``."""
        return [*flux_command(), "job", "kill", "-s", sig.name.removeprefix("SIG"), *job_ids]

    def cancel(self, job_ids: Sequence[str]) -> None:
        """``flux [--parent] cancel ID ...`` (one call; jobs already inactive are no error)."""
        ids = list(dict.fromkeys(job_ids))
        self.check_cancel(ids)
        if ids:
            cancel_tolerant([*flux_command(), "cancel"], ids, self.cancel_harmless)

    def _query(self, ids: list[str]) -> dict[str, JobInfo]:
        try:
            proc = query_capture([*flux_command(), "jobs", "-a", "-n", "-o", ROW_FORMAT, *ids], what="query jobs",
                                 answers=("unknown job id", "job not found"))
        except SchedulerError as e:
            return self.unknown(ids, str(e))
        if proc.returncode != 0 and not proc.stdout.strip() and not any(
                w in proc.stderr.lower() for w in ("unknown job id", "not found")):
            return self.unknown(ids, f"flux jobs failed: {one_line(proc.stderr)}")
        return parse_jobs(proc.stdout, ids)

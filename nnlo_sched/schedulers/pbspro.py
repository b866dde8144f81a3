"""PBS Pro (ALCF Aurora and Polaris): ``qsub`` (``-W depend=afterany:ID``), ``qstat -x -f -F json``, ``qdel``,
``qsig -s``.

The directives are ALCF's (templates/pbspro.sh): ``-l select=N[:system=NAME]`` (one chunk per whole node),
``-l place=scatter``, ``-l walltime=HH:MM:SS``, ``-l filesystems=home:flare`` (mandatory at ALCF), ``-A``, ``-q``,
``-k doe`` (enforced: output is written where it ends up). Job ids are ``NNNN.server`` as qsub prints them
(``NNNN[].server`` for an array, ``NNNN[I].server`` its subjob); anything else is refused before a program
runs.

Status asks ``qstat -x -f -F json ID ...`` once for every job: the ``Jobs`` object holds each job the server
still knows, finished ones included (``-x``: state ``F`` with its ``Exit_status``; 0 done, -29 the walltime,
others failed); ids it no longer knows it names on standard error (``Unknown Job Id``): those have ended.
Output that is not that JSON makes every job ``UNKNOWN``, never ended.

No signal comes before the walltime at ALCF (only ``qsig`` by hand): these profiles stop on the runtime's own
clock (``NNLO_DEADLINE`` with its margin), and ``warns_before_walltime`` is False.
"""
from __future__ import annotations

import json
import re
from typing import Any

from nnlo_sched.schedulers.base import (
    COMPLETED,
    ENDED,
    FAILED,
    PENDING,
    RUNNING,
    TIMEOUT,
    UNKNOWN,
    JobInfo,
    SchedulerError,
    one_line,
    query_capture,
)
from nnlo_sched.schedulers.pbs import PbsScheduler

#: PBS Pro's job states (qstat(1B)); ``F`` and ``X`` (a finished subjob) are read with the exit status
_STATES = {"Q": PENDING, "H": PENDING, "W": PENDING, "T": PENDING, "S": PENDING, "U": PENDING, "M": PENDING,
           "R": RUNNING, "E": RUNNING, "B": RUNNING}
#: PBS Pro's exit status of a job killed at its walltime (JOB_EXEC_KILL_WALLTIME)
EXIT_WALLTIME = -29
#: ``123.server``, an array ``123[].server`` or its subjob ``123[4].server``: the server part is required
_JOB_ID = re.compile(r"[0-9]+(?:\[[0-9]*\])?\.[A-Za-z0-9][A-Za-z0-9_.-]*")


def ended_state(exit_status: Any) -> str:
    """A finished job's normalised state from its ``Exit_status``. Pure."""
    if isinstance(exit_status, int) and not isinstance(exit_status, bool):
        if exit_status == 0:
            return COMPLETED
        return TIMEOUT if exit_status == EXIT_WALLTIME else FAILED
    return ENDED


class PbsProScheduler(PbsScheduler):
    name = "pbspro"
    job_id_vars: tuple[str, ...] = ("PBS_JOBID",)
    job_id_syntax = _JOB_ID
    cancel_harmless: tuple[str, ...] = ("Unknown Job Id", "Job has finished", "already", "finished")

    def _query(self, ids: list[str]) -> dict[str, JobInfo]:
        try:
            proc = query_capture(["qstat", "-x", "-f", "-F", "json", *ids], what="query jobs",
                                 answers=("Unknown Job Id",))
        except SchedulerError as e:
            return self.unknown(ids, str(e))
        if proc.returncode != 0 and not proc.stdout.strip() and "Unknown Job Id" not in proc.stderr:
            return self.unknown(ids, f"qstat failed: {one_line(proc.stderr)}")
        return parse_qstat_json(proc.stdout, ids)


def parse_qstat_json(text: str, ids: list[str]) -> dict[str, JobInfo]:
    """The jobs of ``ids`` in ``qstat -f -F json`` output; ids it lacks have ended, unless the output was not
    that JSON (then every one is ``UNKNOWN``). Pure."""
    jobs: Any = {}
    if text.strip():
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        jobs = data.get("Jobs", {}) if isinstance(data, dict) else None
        if not isinstance(jobs, dict):
            why = f"qstat printed unreadable output: {one_line(text, 120)!r}"
            return {j: JobInfo(j, UNKNOWN, reason=why) for j in ids}
    found: dict[str, JobInfo] = {}
    for j in ids:
        info = jobs.get(j)
        if not isinstance(info, dict):
            found[j] = JobInfo(j, ENDED, "", "unknown to qstat")
            continue
        native = str(info.get("job_state", ""))
        state = ended_state(info.get("Exit_status")) if native in ("F", "X") else _STATES.get(native, UNKNOWN)
        found[j] = JobInfo(j, state, native, str(info.get("comment", "")))
    return found

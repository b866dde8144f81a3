"""Functions the plugin tests submit (importable in the jobs: this folder is on their PYTHONPATH)."""
from __future__ import annotations

import os
import time

from submitit import helpers


def add(a: int, b: int) -> int:
    print(f"adding {a} and {b} in job {os.environ.get('LSB_JOBID') or os.environ.get('PBS_JOBID')}")
    return a + b


def fail(message: str) -> None:
    raise ValueError(message)


def sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke up"


def job_id() -> str:
    return os.environ.get("LSB_JOBID") or os.environ.get("PBS_JOBID") or os.environ.get("SLURM_JOB_ID") or "?"


class Counter(helpers.Checkpointable):
    """Counts to ``n``, one step every ``step_s``; checkpointed (with its count) before the walltime."""

    def __init__(self) -> None:
        self.count = 0
        self.jobs: list[str] = []

    def __call__(self, n: int, step_s: float) -> tuple[int, list[str]]:
        self.jobs.append(job_id())
        open(f"started-{job_id()}", "w").close()  # the job's signal handlers are in place
        while self.count < n:
            time.sleep(step_s)
            self.count += 1
        return self.count, self.jobs

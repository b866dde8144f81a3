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
    """Counts to ``n``, one step every ``step_s``, and returns once it has run in ``min_jobs`` jobs; the count
    and the steps each job did are its state, which ``checkpoint()`` pickles before the walltime."""

    def __init__(self) -> None:
        self.count = 0
        self.jobs: list[str] = []
        self.steps: list[int] = []  # steps done in each job

    def __call__(self, n: int, step_s: float, min_jobs: int = 1, hold_at: int = 0) -> tuple[int, list[str], list[int]]:
        """``hold_at``: the first job stops counting at that count (and says so in ``held-JOBID``) until its
        checkpoint signal ends it: a test interrupts it mid-count on a machine of any speed."""
        self.jobs.append(job_id())
        self.steps.append(0)
        open(f"started-{job_id()}", "w").close()  # the job's signal handlers are in place
        while self.count < n or len(self.jobs) < min_jobs:
            time.sleep(step_s)
            if len(self.jobs) == 1 and hold_at and self.count >= hold_at:
                open(f"held-{job_id()}", "w").close()
                continue
            if self.count < n:
                self.count += 1
                self.steps[-1] += 1
        return self.count, self.jobs, self.steps

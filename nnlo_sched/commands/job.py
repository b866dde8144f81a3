"""``nnlo job start RUN_DIR`` / ``nnlo job end RUN_DIR RC``: the chain's bookkeeping inside a batch job.

Hidden: only the batch script calls these (see :mod:`nnlo_sched.chain`). ``start`` exits non-zero when
the job must not run (the script then exits 0 at once); ``end`` records how the job ended and exits 0 so
that the job's own exit status is what the scheduler reports.
"""
from __future__ import annotations

from pathlib import Path

import click

from nnlo.contract import EXIT_FAILED
from nnlo_sched.chain import job_end, job_start
from nnlo_sched.schedulers import get_scheduler
from nnlo_sched.state import FAILED, read_state


def _job_id(run_dir: Path) -> str | None:
    return get_scheduler(read_state(run_dir).scheduler, run_dir).current_job_id()


@click.group("job")
def job_command() -> None:
    """Chain bookkeeping inside a batch job (internal; called by the job script)."""


@job_command.command("start")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--job-id", default=None, help="This job's id (default: from the scheduler's environment).")
def start(run_dir: Path, job_id: str | None) -> None:
    """Mark this job running and queue its successor; exit 1 if the run must not go on."""
    decision = job_start(run_dir, job_id or _job_id(run_dir))
    click.echo(f"nnlo job start: {decision.message}", err=True)
    if not decision.ok:
        raise SystemExit(EXIT_FAILED)


@job_command.command("end")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("rc", type=int)
@click.option("--job-id", default=None, help="This job's id (default: from the scheduler's environment).")
def end(run_dir: Path, rc: int, job_id: str | None) -> None:
    """Record that this job exited with RC: done, resubmitting or failed."""
    state = job_end(run_dir, job_id or _job_id(run_dir), rc)
    why = read_state(run_dir).error if state == FAILED else None  # the job's log says why the chain stops
    click.echo(f"nnlo job end: exit status {rc}; run is {state}" + (f": {why}" if why else ""), err=True)


command = job_command

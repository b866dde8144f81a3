"""``nnlo cancel RUN``, ``nnlo preempt RUN``, ``nnlo logs RUN [-f]``, ``nnlo resume RUN``: control a run's chain
of jobs.

RUN is a run id (or a unique prefix of one) under ``$NNLO_HOME``/``./nnlo-runs``, or a run directory. The
commands that change a run (cancel, preempt, resume) take a prefix only of at least
:data:`nnlo_sched.runs.MIN_PREFIX` characters, never an empty or blank one, and say which run they act on
before they act.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from nnlo.contract import ARRAY_LOG, EXIT_FAILED, JOB_LOG, LOG_DIR, STATE_FILE
from nnlo_sched import api
from nnlo_sched.chain import job_logs, resume_run
from nnlo_sched.params import finite_range
from nnlo_sched.runs import chain_runs, find_run
from nnlo_sched.search import resume_search, search_state
from nnlo_sched.state import ACTIVE_STATES, read_state


@click.command("cancel")
@click.argument("run")
def cancel_command(run: str) -> None:
    """Cancel RUN's whole chain: the running job (it checkpoints on SIGTERM) and the queued successor.

    RUN is a whole run id, a run directory, or at least 4 characters of a run id that name only one run.
    """
    r = api.check_cancel(run)
    if api.is_search(r):
        click.echo(f"cancelling search {r.id} and all its chains ({r.dir})")
        ids = api.cancel(r)
        click.echo(f"cancelled search {r.id}" + (f" (job {', '.join(ids)})" if ids else
                                                 " (no job was queued or running)"))
        return
    click.echo(f"cancelling run {r.id} ({r.dir})")
    ids = api.cancel(r)
    click.echo(f"cancelled run {r.id}" + (f" (job {', '.join(ids)})" if ids else " (no job was queued or running)"))


@click.command("preempt")
@click.argument("run")
@click.option("--wait", "wait_s", type=finite_range(min=0), default=None, metavar="SECONDS",
              help="Wait up to this long for a job to preempt (running, with a checkpoint of its own and its "
                   "successor queued) instead of refusing at once.")
def preempt_command(run: str, wait_s: float | None) -> None:
    """Stop RUN's running job now as its walltime would: it gets the chain's warning signal, writes a
    checkpoint and exits 75, and the queued successor resumes from it (to move a run, free its nodes, or
    try the chain).

    RUN is a whole run id, a run directory, or at least 4 characters of a run id that name only one run.
    """
    r = api.find(run, changes=True)
    click.echo(f"preempting run {r.id} ({r.dir})")
    try:
        job = api.preempt(r.dir, wait=0.0 if wait_s is None else wait_s)
    except api.WaitTimeout as e:
        click.echo(f"nnlo: error: {e}", err=True)
        raise SystemExit(EXIT_FAILED) from None
    click.echo(f"preempted job {job} of run {r.id}: it checkpoints and stops; its successor resumes "
               f"(`nnlo wait {r.id}` follows the chain)")


def _log_files(run_dir: Path) -> list[Path]:
    """The run's job logs in chain order (the state's job order; stray files after, by time); for a search,
    every chain's in turn, then the job array's own logs."""
    st = read_state(run_dir)
    if st.is_search:
        found = [p for c in chain_runs(run_dir, st) if (c.dir / STATE_FILE).exists() for p in _log_files(c.dir)]
        return found + sorted((run_dir / LOG_DIR).glob(ARRAY_LOG.format(job_id="*")), key=lambda p: p.stat().st_mtime)
    ordered = [p for j in st.jobs for p in job_logs(run_dir, j.job_id)]
    seen = set(ordered)
    extra = sorted((p for p in (run_dir / LOG_DIR).glob(JOB_LOG.format(job_id="*")) if p not in seen),
                   key=lambda p: p.stat().st_mtime)
    return ordered + extra


def _copy(path: Path, offset: int) -> int:
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    if data:
        sys.stdout.write(data.decode(errors="replace"))
        sys.stdout.flush()
    return offset + len(data)


@click.command("logs")
@click.argument("run")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the jobs write, until the run ends.")
@click.option("--job", "job_id", default=None, help="Only this job's log (default: every job of the chain).")
@click.option("--interval", type=finite_range(min=0.0, min_open=True), default=1.0, show_default=True, hidden=True)
def logs_command(run: str, follow: bool, job_id: str | None, interval: float) -> None:
    """Show RUN's job logs, oldest job first (each under a header); -f follows them as the chain goes on."""
    r = find_run(run)
    job_dir = r.dir  # the run directory holding --job's log (a search: that job's chain)
    if job_id is not None:
        known = _job_ids(r.dir)
        job_dir = known.get(job_id, r.dir)
        if job_id not in known:
            raise click.UsageError(f"run {r.id} has no job {job_id!r}; its jobs: {', '.join(known) or 'none yet'}")

    def is_active() -> bool:
        if read_state(r.dir).is_search:
            return search_state(r.dir)[0] in ACTIVE_STATES
        return read_state(r.dir).state in ACTIVE_STATES
    offsets: dict[Path, int] = {}
    current: Path | None = None

    def show_new() -> None:
        nonlocal current
        files = job_logs(job_dir, job_id) if job_id else _log_files(r.dir)
        for p in files:
            if not p.exists():
                continue
            size = p.stat().st_size
            if size > offsets.get(p, 0) or p not in offsets:
                if p != current:
                    click.echo(f"==> {p.relative_to(r.dir)} <==")
                    current = p
                offsets[p] = _copy(p, offsets.get(p, 0))

    show_new()
    if job_id and not job_logs(job_dir, job_id) and not follow:
        raise click.UsageError(f"run {r.id} has no log for job {job_id} (yet)")
    if not offsets and not follow:
        click.echo(f"run {r.id} has no job log yet (state {read_state(r.dir).state})", err=True)
    while follow:
        active = is_active()
        time.sleep(interval)
        show_new()
        if not active:
            return


def _job_ids(run_dir: Path) -> dict[str, Path]:
    """Every job id of the run (a search: of all its chains) -> the run directory that holds its log."""
    st = read_state(run_dir)
    if not st.is_search:
        return {j: run_dir for j in st.job_ids}

    return {j: c.dir for c in chain_runs(run_dir, st) if (c.dir / STATE_FILE).exists()
            for j in read_state(c.dir).job_ids}


@click.command("resume", context_settings=dict(ignore_unknown_options=True))
@click.argument("run")
@click.option("--force", is_flag=True, help="Also resume a run that is done (runs its command again from "
                                            "the newest checkpoint).")
@click.argument("options", nargs=-1, type=click.UNPROCESSED)
def resume_command(run: str, force: bool, options: tuple[str, ...]) -> None:
    """Resubmit a stopped (failed or cancelled) RUN; it continues from its newest checkpoint.

    OPTIONS of the run's train/optimize command given after RUN change it from now on, e.g.
    `nnlo resume RUN --epochs 50` (more epochs) or `--target-metric val_accuracy,>,0.99`; options that
    change the run's shape (ranks, masters, blocks) need a new submission.
    """
    r = find_run(run, changes=True)
    if api.is_search(r):
        click.echo(f"resuming search {r.id} ({r.dir})")
        for chain, job in resume_search(r.dir, options=list(options)):
            click.echo(f"resumed chain {chain} as job {job}")
        return
    click.echo(f"resuming run {r.id} ({r.dir})")
    job = resume_run(r.dir, force=force, options=list(options))
    if options:
        click.echo(f"run {r.id}: its {r.spec.kind} command now ends with {' '.join(options)}")
    click.echo(f"resumed run {r.id} as job {job}")

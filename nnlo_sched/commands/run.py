"""``python -m nnlo_sched run RUN_DIR``: a run's payload, started by the launcher on every rank.

A batch job's script starts it for every job of the chain; ``nnlo train|optimize -n`` starts it with
``--as-given`` on the spec it wrote (the run's options as they are). It reads the run's typed spec and runs it
in this MPI world, in-process (no second interpreter, no ``mpirun`` inside ``srun``): see
:mod:`nnlo_sched.payload`.

Exit status: the run's (0 finished, 75 checkpointed before the deadline, 1 failed, 2 bad input).
"""
from __future__ import annotations

from pathlib import Path

import click

from nnlo_sched.payload import run_spec


@click.command("run")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--as-given", is_flag=True,
              help="Run the spec's options as they are (nnlo train|optimize -n), not as a job of its chain.")
def run_command(run_dir: Path, as_given: bool) -> int:
    """Run RUN_DIR's train/optimize spec in this allocation (called on every rank by the job script)."""
    return run_spec(run_dir.resolve(), as_given=as_given)

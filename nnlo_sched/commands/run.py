"""``python -m nnlo_sched run RUN_DIR``: the job's payload, started by the launcher on every rank.

It reads the run's typed spec (the inner command parsed at submission, see :mod:`nnlo_sched.inner`) and runs
it in this MPI world, in-process (no second interpreter, no ``mpirun`` inside ``srun``). A training run
checkpoints into the run's checkpoint folder and, when a complete checkpoint is already there (a
resubmitted job), restores from it: that is how each job of a chain continues where the previous one
stopped. An optimization keeps its search state in the run directory (``NNLO_RUN_DIR``) and resumes it by
itself. The deadline comes from ``NNLO_DEADLINE`` (set by the job script) unless the inner command gave one.

Exit status: the inner command's (0 finished, 75 checkpointed before the deadline, 1 failed, 2 bad input).
"""
from __future__ import annotations

import os
from pathlib import Path

import click

from nnlo.config import TrainConfig, deadline_from_env
from nnlo.contract import ENV_RUN_DIR


def job_config(run_dir: Path) -> TrainConfig:
    """The training options of this job of the run: checkpoint into the run, restore its newest checkpoint.

    A restore the user asked for (``--restore DIR``) is replaced: a chain resumes from its own checkpoints
    only, and only from a complete one. The deadline is the job's (``$NNLO_DEADLINE``) unless the inner
    command gave one explicitly.
    """
    from nnlo.checkpoint import find_latest
    from nnlo_sched.chain import checkpoint_dir
    from nnlo_sched.runs import load_spec

    spec = load_spec(run_dir)
    config = spec.train.replace(deadline=deadline_from_env(spec.train.deadline))
    if spec.kind == "train":
        ckpt = checkpoint_dir(run_dir, spec)
        config = config.replace(checkpoint=str(ckpt), restore=str(ckpt) if find_latest(ckpt) else None)
    return config


@click.command("run")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def run_command(run_dir: Path) -> int:
    """Run RUN_DIR's train/optimize command in this allocation (called by the job script on every rank)."""
    from nnlo_sched.runs import load_spec

    run_dir = run_dir.resolve()
    os.environ[ENV_RUN_DIR] = str(run_dir)
    spec = load_spec(run_dir)
    config = job_config(run_dir)
    if spec.workdir and Path(spec.workdir).is_dir():
        os.chdir(spec.workdir)  # relative paths in the inner options mean what they meant at submission
    if spec.kind == "train":
        from nnlo_sched.commands.train import run_training

        return run_training(config)
    from nnlo_sched.commands.optimize import run_in_world

    search = spec.search
    assert search is not None  # an optimize spec always has its search options
    return run_in_world(lambda: (config, search), config.log_level)


command = run_command

"""``python -m nnlo_sched run RUN_DIR``: the job's payload, started by the launcher on every rank.

It reads the run's spec and runs the inner ``train``/``optimize`` command in this MPI world, in-process
(no second interpreter, no ``mpirun`` inside ``srun``). A training run checkpoints into the run's
checkpoint folder and, when a complete checkpoint is already there (a resubmitted job), restores from it:
that is how each job of a chain continues where the previous one stopped. An optimization keeps its
search state in the run directory (``NNLO_RUN_DIR``) and resumes it by itself. The deadline comes from
``NNLO_DEADLINE`` (set by the job script), which the runtime reads.

Exit status: the inner command's (0 finished, 75 checkpointed before the deadline, 1 failed, 2 bad input).
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path

import click

_VALUE_OPTIONS = ("--checkpoint", "--restore")


def inner_argv(run_dir: Path) -> tuple[str, list[str]]:
    """The inner command's name and argv for this job of the run (checkpoint and restore added)."""
    from nnlo.checkpoint import find_latest
    from nnlo_sched.chain import checkpoint_dir
    from nnlo_sched.runs import load_spec

    spec = load_spec(run_dir)
    args = list(spec.args)
    if spec.kind == "train":
        ckpt = checkpoint_dir(run_dir, spec)
        args = _without(args, _VALUE_OPTIONS) + ["--checkpoint", str(ckpt)]
        if find_latest(ckpt) is not None:
            args += ["--restore", str(ckpt)]
    return spec.kind, args


def _without(args: list[str], options: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in options:
            skip = True
            continue
        if a.startswith(tuple(f"{o}=" for o in options)):
            continue
        out.append(a)
    return out


@click.command("run", hidden=True)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def run_command(run_dir: Path) -> int:
    """Run RUN_DIR's train/optimize command in this allocation (called by the job script on every rank)."""
    run_dir = run_dir.resolve()
    os.environ["NNLO_RUN_DIR"] = str(run_dir)
    kind, args = inner_argv(run_dir)
    from nnlo_sched.runs import load_spec

    workdir = load_spec(run_dir).workdir
    if workdir and Path(workdir).is_dir():
        os.chdir(workdir)  # relative paths in the inner options mean what they meant at submission
    module = importlib.import_module(f"nnlo_sched.commands.{kind}")
    command = getattr(module, f"{kind}_command")
    rv = command.main(args=args, prog_name=f"nnlo {kind}", standalone_mode=False)
    return rv if isinstance(rv, int) else 0


command = run_command

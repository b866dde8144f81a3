"""``nnlo train``: train one model with a master and workers, on this machine or inside a batch job.

Its options are the run option table's (:mod:`nnlo_sched.options`; ``nnlo optimize`` has them too). With
``-n N`` outside an MPI launch the command line is parsed once into the typed run, checked, and started on N
ranks as the payload a batch job runs (:func:`nnlo_sched.payload.start_here`); inside an MPI launch every
rank trains in that world (:func:`nnlo_sched.payload.run_training`). Nothing heavy is imported at module
level: MPI and the runtime come with the payload.

Exit status: 0 finished (all epochs, early stopping or target reached); 75 stopped early on the deadline or
a signal with a fresh complete checkpoint (resubmit with ``--restore auto`` and it resumes); 1 a rank
failed; 2 bad input.
"""
from __future__ import annotations

import sys
from typing import Any

import click

from nnlo_sched.inner import inner_from_context
from nnlo_sched.launchers.local_launch import inside_mpi_launch
from nnlo_sched.options import command, config_from_params
from nnlo_sched.params import typed_args
from nnlo_sched.payload import run_training, start_here


@click.pass_context
def _train(ctx: click.Context, np_: int | None, no_check: bool, **params: Any) -> None:
    """Train one model with 1 master and N-1 workers (Downpour, EASGD, GEM or synchronous), or deeper
    hierarchies: --n-masters M (uber-master above M-1 masters), --n-processes K (workers of K ranks that
    all-reduce), --mode allreduce (no master; every rank a replica). -n 1: one rank trains alone.

    \b
    Example:
      nnlo train -n 3 --model examples/digits_torch.py --train examples/data/digits/train.list \\
          --val examples/data/digits/val.list --mode gem

    Writes history.json, config.json, the model (model.pt for torch, model.keras for Keras) and logs/ into
    the run directory (--checkpoint DIR, else nnlo-runs/NAME). Exit status: 0 done, 75 stopped on
    deadline/signal with a checkpoint (resumable), 1 a rank failed, 2 bad input.
    """
    if np_ is not None and not inside_mpi_launch():
        sys.exit(start_here(inner_from_context("train", ctx, submitted=False), typed_args(ctx)))
    sys.exit(run_training(config_from_params(params), np_))


train_command = command("train", _train)

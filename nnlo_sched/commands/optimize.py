"""``nnlo optimize``: hyperparameter search with a coordinator and blocks inside one allocation.

It takes every training option of ``nnlo train`` (the blocks train with them; a trial's hyperparameters
override some, see docs/optimization.md) plus the search options (:mod:`nnlo_sched.options`). ``-n N``
outside an MPI launch checks the run and starts it on N ranks of this machine as the payload a batch job
runs (:func:`nnlo_sched.payload.start_here`), exactly like ``nnlo train``; inside an allocation (``srun``,
``jsrun``, ``aprun``, ``mpirun``) it runs in that world. torch and mpi4py are imported only when it runs.

Exit codes: 0 the search finished, 75 stopped at the deadline/signal with its state saved (resubmit and it
resumes), 1 a failure, 2 bad input.
"""
from __future__ import annotations

import sys
from typing import Any

import click

from nnlo_sched.inner import inner_from_context
from nnlo_sched.launchers.local_launch import inside_mpi_launch
from nnlo_sched.options import command, config_from_params, search_from_params
from nnlo_sched.params import typed_args
from nnlo_sched.payload import run_search, start_here


@click.pass_context
def _optimize(ctx: click.Context, np_: int | None, no_check: bool, **params: Any) -> None:
    """Search hyperparameters: rank 0 coordinates, the other ranks form blocks that train trials.

    \b
    Example (1 coordinator + 2 blocks of 2 ranks, 20 trials):
      nnlo optimize -n 5 --block-size 2 --model examples/branin.py --num-iterations 20
    Upstream shape (1 coordinator + 2 blocks x 2 folds x (1 master + 2 workers)):
      mpirun -np 13 nnlo optimize --block-size 6 --n-fold 2 --model examples/digits_torch.py \\
          --train examples/data/digits/train.list
    """
    if np_ is not None and not inside_mpi_launch():
        sys.exit(start_here(inner_from_context("optimize", ctx, submitted=False), typed_args(ctx)))
    sys.exit(run_search(lambda: (config_from_params(params), search_from_params(params)), params["log_level"]))


optimize_command = command("optimize", _optimize)

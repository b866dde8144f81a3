"""``nnlo optimize``: hyperparameter search with a coordinator and blocks inside one allocation.

It takes every training option of ``nnlo train`` (the blocks train with them; a trial's hyperparameters
override some, see docs/optimization.md) plus the search options. ``-n N`` outside an MPI launch starts
``mpirun -np N`` on this machine, exactly like ``nnlo train``; inside an allocation (``srun``, ``jsrun``,
``aprun``, ``mpirun``) it runs in that world. torch and mpi4py are imported only when the command runs.

Exit codes: 0 the search finished, 75 stopped at the deadline/signal with its state saved (resubmit and it
resumes), 1 a failure, 2 bad input.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import click

from nnlo.abort import abort_job
from nnlo.contract import EXIT_FAILED, LEASE_TIMEOUT_S
from nnlo.errors import NnloError
from nnlo_sched.params import FINITE_FLOAT, finite_range
from nnlo_sched.upstream import UpstreamCommand


def _training_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The training options of ``nnlo train`` (one shared decorator, owned by the training command)."""
    from nnlo_sched.commands.train import training_options

    return training_options(f)


def _block_sizes(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Checked, kept as canonical text (``6,6,3,3``): ``-n`` re-launches the command line from these values."""
    from nnlo.roles import sizes_text
    from nnlo_sched.commands.layout import parse_block_sizes_option

    sizes = parse_block_sizes_option(ctx, param, value)
    return None if sizes is None else sizes_text(sizes)


def _search_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for decorator in reversed([
        click.option("-n", "--np", "np_", type=click.IntRange(min=1), metavar="N", default=None,
                     help="Start N ranks with mpirun on this machine (1 coordinator + blocks). Ignored inside "
                          "an existing MPI launch (mpirun/srun/jsrun/aprun), which sets the ranks itself."),
        click.option("--block-size", type=click.IntRange(min=1), default=None,
                     help="Ranks per block (each block trains one parameter set at a time). Default: the "
                          "smallest block, n-fold x (1 master + 1 worker)."),
        click.option("--block-sizes", default=None, callback=_block_sizes,
                     help="Heterogeneous blocks: the ranks of each block, e.g. 6,6,3,3 (instead of "
                          "--block-size); the world is 1 coordinator + proposers + their sum."),
        click.option("--proposers", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Processes that propose trials: 1 = the coordinator; P > 1 adds P proposer ranks "
                          "after it, asking concurrently so many blocks never wait for the optimizer."),
        click.option("--assign", type=click.Choice(["auto", "fifo", "hardware-aware"]), default="auto",
                     show_default=True,
                     help="Which proposal an idle block gets: fifo (the next one), hardware-aware (expensive "
                          "trials to fast blocks, cheap ones to slow blocks); auto = hardware-aware when the "
                          "block sizes differ, else fifo."),
        click.option("--n-fold", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Fold groups per block (k-fold cross-validation on the --train samples); the "
                          "block reports the mean figure of merit over folds."),
        click.option("--num-iterations", type=click.IntRange(min=1), default=10, show_default=True,
                     help="Trials in total (failed ones count)."),
        click.option("--hyper-opt", type=click.Choice(["bayesian", "genetic", "random"]), default="bayesian",
                     show_default=True, help="Search engine."),
        click.option("--estimator", type=click.Choice(["GP", "RF", "ET"], case_sensitive=False), default="GP",
                     show_default=True, help="Surrogate of the Bayesian engine: Gaussian process, random "
                                             "forest or extra trees."),
        click.option("--n-initial-points", type=click.IntRange(min=1), default=None,
                     help="Random trials before the Bayesian model is used (default: min(10, trials/3))."),
        click.option("--ga-populations", type=click.IntRange(min=2), default=10, show_default=True,
                     help="Population size of the genetic engine (individuals kept and bred from)."),
        click.option("--fom", default="val_loss", show_default=True,
                     help="Figure of merit: a final validation metric, NAME[:min|max] "
                          "(e.g. val_accuracy:max; *acc* metrics default to max)."),
        click.option("--target-objective", type=FINITE_FLOAT, default=None,
                     help="Stop once a trial's figure of merit reaches this value."),
        click.option("--space", "space_file", type=click.Path(dir_okay=False), default=None,
                     help="TOML search space (one [name] table per parameter); default: the model "
                          "module's get_model.parameter_range."),
        click.option("--opt-restore", is_flag=True,
                     help="Resume the search saved in --output (finished trials kept, running ones re-run)."),
        click.option("--output", "output", type=click.Path(file_okay=False), default=None,
                     help="Run directory for trials.json/csv, best.json, optimizer-state.json and "
                          "trials/<id>/fold-<f>/. Default: $NNLO_RUN_DIR, else ./optimize-<model>."),
        click.option("--shared", is_flag=True,
                     help="Join the search kept in --output's journal (search-journal.jsonl), which any number "
                          "of jobs may run at once: one search across many jobs (needs flock on that file "
                          "system; see docs/optimization.md)."),
        click.option("--participant", default=None, metavar="NAME",
                     help="This job's name in a --shared search (default: $NNLO_PARTICIPANT, else "
                          "<hostname>-<pid>); a job with the same name takes its own trials back at once."),
        click.option("--lease-timeout", type=finite_range(min=1.0), default=LEASE_TIMEOUT_S, show_default=True,
                     metavar="SECONDS",
                     help="--shared: a trial whose job stopped renewing its lease this long goes back to the "
                          "pool and is re-run by another job."),
        click.option("--schedule", type=click.Choice(["full", "asha", "hyperband", "pbt"]), default="full",
                     show_default=True,
                     help="How long trials train: full (every trial --epochs), asha (stop bad trials early: rungs "
                          "of --min-epochs x eta^k epochs, the best 1/eta go on), hyperband (brackets of asha), "
                          "pbt (population-based training)."),
        click.option("--min-epochs", type=int, default=None, metavar="E",
                     help="asha/hyperband: epochs of the lowest rung (default 1); --epochs is the most a trial "
                          "trains."),
        click.option("--reduction-factor", type=FINITE_FLOAT, default=None, metavar="ETA",
                     help="asha/hyperband: each rung keeps the best 1/ETA of the one below and trains ETA times "
                          "longer (default 3, at least 2)."),
        click.option("--population", type=int, default=None, metavar="P",
                     help="pbt: trials trained side by side (default 8, at most --num-iterations, which also counts "
                          "every exploit's new trial)."),
        click.option("--pbt-interval", type=int, default=None, metavar="E",
                     help="pbt: epochs between exploit/explore steps (default a tenth of --epochs)."),
    ]):
        f = decorator(f)
    return f


@click.command("optimize", cls=UpstreamCommand, context_settings={"max_content_width": 100})
@_training_options
@_search_options
@click.pass_context
def optimize_command(ctx: click.Context, **params: Any) -> int:
    """Search hyperparameters: rank 0 coordinates, the other ranks form blocks that train trials.

    \b
    Example (1 coordinator + 2 blocks of 2 ranks, 20 trials):
      nnlo optimize -n 5 --block-size 2 --model examples/branin.py --num-iterations 20
    Upstream shape (1 coordinator + 2 blocks x 2 folds x (1 master + 2 workers)):
      mpirun -np 13 nnlo optimize --block-size 6 --n-fold 2 --model m.py --train t.list
    """
    n = params.get("np_")
    if n is not None and not _inside_mpi_launch():
        return _launch(ctx, n, params)
    return run_in_world(lambda: (_config(params), search_from_params(params)), str(params.get("log_level") or "info"))


def run_in_world(parse: Callable[[], tuple[Any, Any]], log_level: str = "info") -> int:
    """Run the search in this MPI world (every rank), printing errors once.

    ``parse`` returns the run's (TrainConfig, SearchConfig); it is called on every rank inside the error
    handling, so bad options are one line from rank 0 and every rank exits with the same status.
    """
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    from nnlo.observe.logs import console_logging

    console_logging(log_level, rank)
    try:
        config, search = parse()
        from nnlo.optimize.run import optimize

        return optimize(world, search.options(config), config)
    except (NnloError, click.ClickException) as e:
        if rank == 0:
            msg = e.format_message() if isinstance(e, click.ClickException) else str(e)
            click.echo(f"nnlo: error: {msg}", err=True)
        code = getattr(e, "exit_code", 2)
        sys.stderr.flush()
        raise SystemExit(code) from None
    except Exception as e:  # never leave other ranks hanging on an unexpected error
        from nnlo.roles import RoleError

        if isinstance(e, RoleError):
            if rank == 0:
                click.echo(f"nnlo: error: {e}", err=True)
            raise SystemExit(2) from None
        logging.getLogger("nnlo.optimize").exception("rank %d failed", rank)
        abort_job(world, EXIT_FAILED)


def _config(params: dict[str, Any]) -> Any:
    from nnlo_sched.commands.train import config_from_params

    return config_from_params(params)


def search_from_params(params: dict[str, Any]) -> Any:
    """click parameters (as the command receives them) -> :class:`nnlo.optimize.options.SearchConfig`."""
    from nnlo.optimize.options import SearchConfig

    return SearchConfig(
        block_size=params.get("block_size"),
        n_fold=int(params.get("n_fold") or 1),
        num_iterations=int(params.get("num_iterations") or 10),
        hyper_opt=params.get("hyper_opt") or "bayesian",
        estimator=(params.get("estimator") or "GP").upper(),
        n_initial_points=params.get("n_initial_points"),
        ga_populations=int(params.get("ga_populations") or 10),
        fom=params.get("fom") or "val_loss",
        target_objective=params.get("target_objective"),
        space=params.get("space_file"),
        opt_restore=bool(params.get("opt_restore")),
        output=params.get("output"),
        shared=bool(params.get("shared")),
        participant=params.get("participant"),
        lease_timeout=float(params.get("lease_timeout") or LEASE_TIMEOUT_S),
        block_sizes=_sizes(params.get("block_sizes")),
        proposers=int(params.get("proposers") or 1),
        assign=params.get("assign") or "auto",
        schedule=params.get("schedule") or "full",
        min_epochs=params.get("min_epochs"),
        reduction_factor=params.get("reduction_factor"),
        population=params.get("population"),
        pbt_interval=params.get("pbt_interval"),
    )


def _sizes(text: str | None) -> tuple[int, ...] | None:
    from nnlo.roles import parse_block_sizes

    return None if text is None else parse_block_sizes(text)


def _inside_mpi_launch() -> bool:
    from nnlo_sched.launchers.local_launch import inside_mpi_launch

    return inside_mpi_launch()


def _launch(ctx: click.Context, n: int, params: dict[str, Any]) -> int:
    """Re-run this command line on ``n`` ranks with the local profile's launcher (signals relayed), after the
    pre-queue checks (:mod:`nnlo_sched.checks`: the model imports, the data exists) so that bad input is one
    line before any rank starts."""
    from nnlo_sched.checks import check_run
    from nnlo_sched.commands.train import argv_from_params
    from nnlo_sched.launchers.local_launch import relaunch

    try:
        for note in check_run(_config(params), search_from_params(params)):
            click.echo(f"nnlo: note: {note}", err=True)
    except NnloError as e:
        click.echo(f"nnlo: error: {e}", err=True)
        return getattr(e, "exit_code", 2)

    return relaunch(n, ["optimize", *argv_from_params(ctx.command, params, drop=("np_",))])



command = optimize_command

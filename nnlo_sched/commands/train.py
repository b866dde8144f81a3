"""``nnlo train``: train one model with a master and workers, on this machine or inside a batch job.

The options live in :func:`training_options` so ``nnlo optimize`` reuses them verbatim;
:func:`config_from_params` turns click's parameters into a :class:`~nnlo.config.TrainConfig`, whose
``training_group_shape`` is the run's shape (the scheduler side sizes jobs with it, see
:mod:`nnlo_sched.inner`). Nothing heavy is imported at module level: ``nnlo --help`` must stay fast.

Exit status: 0 finished (all epochs, early stopping or target reached); 75 stopped early on the deadline or
a signal with a fresh complete checkpoint (resubmit with ``--restore auto`` and it resumes); 1 a rank
failed; 2 bad input.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from nnlo.api import DEFAULT_RUNS
from nnlo.config import ALLREDUCE_ENGINES, BUCKET_MB, CACHE_IN_MEMORY
from nnlo.contract import EXIT_RESUMABLE, deadline_from_env
from nnlo.errors import ConfigError
from nnlo_sched.params import FINITE_FLOAT, finite_range
from nnlo_sched.upstream import UpstreamCommand

_OPTIMIZERS = "sgd (lr, momentum, nesterov), adam, rmsprop, adadelta, e.g. sgd:lr=0.1,momentum=0.9"


def _deadline_default() -> float | None:
    try:
        return deadline_from_env()
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--deadline") from None


def _model_args(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for item in values:
        parse_model_arg(item)
    return values


def parse_model_arg(item: str) -> tuple[str, Any]:
    """``"hidden=128"`` -> ("hidden", 128): values are JSON literals when they parse, else strings."""
    import json

    key, eq, raw = item.partition("=")
    if not eq or not key.strip().isidentifier():
        raise click.BadParameter(f"{item!r} is not NAME=VALUE (e.g. hidden=128)", param_hint="--model-arg")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def training_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Every training option (upstream vocabulary), as one reusable decorator."""
    options = [
        click.option("--model", required=True, metavar="PATH",
                     help="Model: a .py module with get_model() (upstream contract), a torch .pt/.pth saved "
                          "with torch.save(model), or a Keras .json/.keras/.h5 file."),
        click.option("--model-arg", "model_arg", multiple=True, metavar="NAME=VALUE", callback=_model_args,
                     help="Keyword argument of get_model() (repeatable), e.g. --model-arg hidden=128."),
        click.option("--backend", type=click.Choice(["auto", "torch", "keras"]), default="auto", show_default=True,
                     help="Deep-learning backend: auto follows the type get_model() returns (torch nn.Module -> "
                          "torch, Keras model -> keras); torch/keras insist on it and stop with a clear error if "
                          "the model is of the other kind."),
        click.option("--train", "train", metavar="LIST",
                     help="Text file naming the training HDF5 files, one per line (default: get_train())."),
        click.option("--val", metavar="LIST",
                     help="Text file naming the validation HDF5 files (default: get_val(); none: no validation)."),
        click.option("--features-name", metavar="NAME",
                     help="HDF5 dataset holding the inputs (default: get_features() or 'features')."),
        click.option("--labels-name", metavar="NAME",
                     help="HDF5 dataset holding the targets (default: get_labels() or 'labels')."),
        click.option("--loss", default="categorical_crossentropy", show_default=True,
                     help="Loss, Keras or torch spelling: categorical_crossentropy (one-hot or index labels), "
                          "sparse_categorical_crossentropy, binary_crossentropy, nll, mse, mae, huber. Torch "
                          "models output logits (no softmax layer) and Keras models end in a softmax; "
                          "categorical_crossentropy applies to each accordingly."),
        click.option("--epochs", type=click.IntRange(min=1), default=10, show_default=True,
                     help="Passes over the training samples (each sample once per epoch across all workers)."),
        click.option("--batch", type=click.IntRange(min=1), default=100, show_default=True,
                     help="Samples per batch on each worker (the last partial batch is kept)."),
        click.option("--optimizer", default="sgd:lr=1.0", show_default=True,
                     help=f"The master's rule for applying worker updates: {_OPTIMIZERS}. sgd:lr=1 adds "
                          "updates as they are (classic Downpour)."),
        click.option("--worker-optimizer", metavar="SPEC",
                     help=f"Each worker's local optimizer: {_OPTIMIZERS}. Default: sgd:lr=<gem-lr> with "
                          "--mode gem, adam:lr=0.001 otherwise."),
        click.option("--mode", type=click.Choice(["downpour", "easgd", "gem", "allreduce"]), default="gem",
                     show_default=True,
                     help="Algorithm: downpour (workers send weight deltas), easgd (elastic averaging), gem "
                          "(gradient energy matching, arXiv:1805.08469), allreduce (no master: every rank a "
                          "replica, gradients averaged over all ranks each step; same as --n-masters 0)."),
        click.option("--sync-every", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Local batches a worker trains between exchanges with its master."),
        click.option("--synchronous", is_flag=True,
                     help="Wait for all workers each round and apply the mean of their updates (with "
                          "--mode downpour; the learning rate does not change with the number of workers)."),
        click.option("--elastic-force", type=FINITE_FLOAT, default=0.9, show_default=True,
                     help="EASGD: elastic force; alpha = elastic_force / number of workers."),
        click.option("--gem-lr", type=FINITE_FLOAT, default=0.01, show_default=True,
                     help="GEM: learning rate of the proxy SGD and of the workers' default SGD (refused beside a "
                          "--worker-optimizer that steps at another rate)."),
        click.option("--gem-momentum", type=FINITE_FLOAT, default=0.9, show_default=True,
                     help="GEM: momentum of the proxy whose kinetic energy the workers match."),
        click.option("--gem-kappa", type=FINITE_FLOAT, default=2.0, show_default=True,
                     help="GEM: energy matching factor kappa."),
        click.option("--validate-every", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
                     help="Also validate every N updates of the master (all-reduce: every N steps), recorded in "
                          "history.json 'validations' with the update count; 0: only once an epoch."),
        click.option("--early-stopping", metavar="METRIC,CMP,PATIENCE",
                     help="Stop when METRIC has not improved for PATIENCE epochs, e.g. 'val_loss,<,4'."),
        click.option("--target-metric", metavar="METRIC,CMP,VALUE",
                     help="Stop as soon as METRIC reaches VALUE, e.g. 'val_accuracy,>,0.95'."),
        click.option("--checkpoint", metavar="DIR",
                     help="Run directory: history, model and checkpoints (DIR/checkpoints) go there; enables "
                          "checkpoints every --checkpoint-interval epochs and at the end."),
        click.option("--checkpoint-interval", type=click.IntRange(min=0), default=5, show_default=True,
                     help="Epochs between checkpoints (0: only at the end and before a deadline/signal stop)."),
        click.option("--restore", metavar="DIR|auto",
                     help="Resume from the newest complete checkpoint in DIR (a run or checkpoint folder); "
                          "'auto' looks in the run directory. No checkpoint there yet: start fresh."),
        click.option("--preload-data", type=click.IntRange(min=0), is_flag=False, flag_value=1, default=0,
                     metavar="[N]", help="Read every listed file into memory once before training (any N >= 1, "
                                         "or the bare flag; 0: read from the files as needed)."),
        click.option("--cache-data", is_flag=False, flag_value=CACHE_IN_MEMORY, default=None, metavar="[DIR]",
                     help="Copy each listed file once into DIR (a node-local disk) and read it from there; "
                          "the bare flag keeps the data in memory (like --preload-data)."),
        click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
                     show_default=True, help="Verbosity of the console and of logs/rank-<r>.log."),
        click.option("--trial-name", metavar="NAME",
                     help=f"Name of this run (default run directory: {DEFAULT_RUNS}/NAME)."),
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Seed of the weight initialisation and of every epoch's data order."),
        click.option("--n-masters", type=click.IntRange(min=0), default=1, show_default=True,
                     help="1: one master; 0: pure all-reduce (--mode allreduce); M > 1: an uber-master above "
                          "M-1 masters (so -n 5 --n-masters 3 = uber-master + 2 masters + 2 workers)."),
        click.option("--n-processes", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Ranks per worker: K > 1 makes each worker an all-reduce group of K ranks that split "
                          "its batch (K x --batch samples per step) and talk to the master through their leader."),
        click.option("--allreduce-engine", type=click.Choice(ALLREDUCE_ENGINES), default="auto",
                     show_default=True,
                     help="Who sums gradients (--mode allreduce, --n-processes > 1): mpi (MPI all-reduces of one "
                          "flat buffer), torch (torch.distributed: NCCL with the buffers on the GPUs when every "
                          "rank has one, else gloo), horovod (if installed); auto = mpi on CPUs, torch on GPUs."),
        click.option("--bucket-mb", type=finite_range(min=0), default=BUCKET_MB, show_default=True, metavar="MB",
                     help="Gradient all-reduce buckets of about MB megabytes, each started during backward as "
                          "soon as its gradients are final (torch on CPU); 0: one all-reduce after backward."),
        click.option("--amp", is_flag=True,
                     help="Automatic mixed precision for torch models: float16 autocast with a gradient scaler on "
                          "GPUs (its state is checkpointed), bfloat16 autocast on CPUs."),
        click.option("--scale-lr", is_flag=True,
                     help="Multiply the worker optimizer's learning rate by the ranks that split one batch: all "
                          "ranks with --mode allreduce, the K ranks of a worker with --n-processes K."),
        click.option("--monitor", is_flag=True, help="Sample CPU/GPU use; adds it to the history and a time summary."),
        click.option("--timeline", is_flag=True,
                     help="Record a per-rank trace (see 'nnlo timeline RUN' for a Chrome trace)."),
        click.option("--deadline", type=FINITE_FLOAT, default=_deadline_default, metavar="UNIX_SECONDS",
                     help="Write a complete checkpoint and stop (exit 75) before this time "
                          "(default: $NNLO_DEADLINE)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def config_from_params(params: dict[str, Any]) -> Any:
    """click parameters (as the command receives them) -> :class:`nnlo.config.TrainConfig`."""
    from nnlo.config import TrainConfig

    names = set(TrainConfig.__dataclass_fields__)
    values = {k: v for k, v in params.items() if k in names}
    if params.get("model_arg"):
        values["model_args"] = {**values.get("model_args", {}), **dict(map(parse_model_arg, params["model_arg"]))}
    return TrainConfig.from_dict(values)


def default_out_dir(config: Any) -> str:
    """Where a run writes when --checkpoint is not given: nnlo-runs/<trial name, else the model module's
    get_name(), else the model file's stem> (:func:`nnlo.api.default_run_dir`)."""
    from nnlo.api import default_run_dir

    return default_run_dir(config)


def argv_from_params(command: click.Command, params: dict[str, Any], drop: tuple[str, ...] = ()) -> list[str]:
    """Rebuild a command line from parsed parameters (for re-launching under mpirun)."""
    argv: list[str] = []
    for p in command.params:
        if not isinstance(p, click.Option) or p.name in drop or p.name not in params:
            continue
        value = params[p.name]
        flag = max(p.opts, key=len)
        if p.is_flag:
            if value:
                argv.append(flag)
        elif p.multiple:
            for item in value or ():
                argv += [flag, str(item)]
        elif value is not None:
            argv += [flag, str(value)]
    return argv


@click.command("train", cls=UpstreamCommand)
@training_options
@click.option("-n", "--np", "np_", type=click.IntRange(min=1), metavar="N",
              help="Start N ranks with mpirun on this machine (1 master + N-1 workers). Ignored inside an "
                   "existing MPI launch (mpirun/srun/jsrun/aprun), which sets the ranks itself.")
@click.pass_context
def train_command(ctx: click.Context, np_: int | None, **params: Any) -> None:
    """Train one model with 1 master and N-1 workers (Downpour, EASGD, GEM or synchronous), or deeper
    hierarchies: --n-masters M (uber-master above M-1 masters), --n-processes K (workers of K ranks that
    all-reduce), --mode allreduce (no master; every rank a replica).

    Example: nnlo train -n 3 --model examples/digits_torch.py --train train.list --val val.list --mode gem

    Writes history.json, config.json, the model (model.pt for torch, model.keras for Keras) and logs/ into
    the run directory (--checkpoint DIR, else nnlo-runs/NAME). Exit status: 0 done, 75 stopped on
    deadline/signal with a checkpoint (resumable), 1 a rank failed, 2 bad input.
    """
    from nnlo_sched.launchers.local_launch import inside_mpi_launch, relaunch

    if np_ is not None and not inside_mpi_launch():
        argv = ["train", *argv_from_params(ctx.command, params)]
        sys.exit(relaunch(np_, argv))
    sys.exit(run_training(config_from_params(params), np_))


def run_training(config: Any, expected_ranks: int | None = None) -> int:
    """Train in the current MPI world through the Python API's in-rank entry (:func:`nnlo.api.run_train`,
    which ``nnlo.train()`` calls too); returns the process exit status (prints errors once)."""
    from mpi4py import MPI

    from nnlo.api import run_train
    from nnlo.training.failure import RankFailure

    comm = MPI.COMM_WORLD
    if expected_ranks is not None and expected_ranks != comm.Get_size() and comm.Get_rank() == 0:
        click.echo(f"nnlo: note: running on the launcher's {comm.Get_size()} ranks, not -n {expected_ranks}",
                   err=True)
    try:
        result = run_train(config, comm=comm)
    except RankFailure as e:
        if e.report:
            click.echo(f"nnlo: error: {e}", err=True)
        return e.exit_code
    return EXIT_RESUMABLE if result.resumable else 0


command = train_command

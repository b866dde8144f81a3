"""The options of a run, declared once: ``nnlo train``'s and ``nnlo optimize``'s click options.

Every option that sets a field of :class:`~nnlo.config.TrainConfig` or
:class:`~nnlo.optimize.options.SearchConfig` is declared here with :func:`train_option` or
:func:`search_option`, which read its default from the dataclass field of the same name (the option's
parameter name): the dataclasses are the one table of defaults, and the typed run built from parsed
parameters (:func:`config_from_params`, :func:`search_from_params`) is a plain copy of the fields. Adding a
run option is one dataclass field plus one declaration below; ``nnlo train``, ``nnlo optimize``, ``nnlo submit
... train|optimize``, ``nnlo resume RUN --option``, the upstream spellings (:mod:`nnlo_sched.upstream`) and
``--help`` all get it from there.

:func:`command` builds the click command of a kind from these declarations: the commands of
:mod:`nnlo_sched.commands` give it their callback, :mod:`nnlo_sched.inner` parses submitted and resumed
options with it, so defaults, choices, ranges and spellings can never drift between them. The launch
options (``-n``, ``--no-check``) say how to start a run here, not what it does, and are no field.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import click

from nnlo.api import DEFAULT_RUNS
from nnlo.config import ALLREDUCE_ENGINES, CACHE_IN_MEMORY, TrainConfig, deadline_from_env
from nnlo.contract import (
    BEST_FILE,
    ENV_DEADLINE,
    ENV_PARTICIPANT,
    ENV_RUN_DIR,
    EXIT_RESUMABLE,
    HISTORY_FILE,
    OPTIMIZER_STATE_FILE,
    SEARCH_JOURNAL,
    TRIALS_CSV,
    TRIALS_JSON,
)
from nnlo.errors import ConfigError
from nnlo.optimize.options import DEFAULT_ETA, DEFAULT_MIN_EPOCHS, PBT_POPULATION, PBT_STEPS, SCHEDULES, SearchConfig
from nnlo_sched.params import FINITE_FLOAT, finite_range, parse_block_sizes_option, parse_gpus, parse_walltime_option
from nnlo_sched.upstream import UpstreamCommand
from nnlo_sched.walltime import DEFAULT_WALLTIME

#: the run kinds: ``nnlo train`` and ``nnlo optimize``
KINDS = ("train", "optimize")

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
_OPTIMIZERS = "sgd (lr, momentum, nesterov), adam, rmsprop, adadelta, e.g. sgd:lr=0.1,momentum=0.9"


# -- the one table of defaults -----------------------------------------------------------------------------
def _param_name(decls: tuple[str, ...]) -> str:
    """The parameter name click gives an option declared with ``decls`` (an explicit name, else the longest)."""
    explicit = [d for d in decls if not d.startswith("-")]
    return explicit[0] if explicit else max(decls, key=len).lstrip("-").replace("-", "_")


def _field_default(cls: type, name: str) -> Any:
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            return None
    raise AssertionError(f"{cls.__name__} has no field {name!r} for option {name!r}")  # a declaration's typo


#: every declaration below by its long name: (its names, its click attributes), for :func:`declared`
_DECLARED: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {}


def _field_option(cls: type, decls: tuple[str, ...], attrs: dict[str, Any]) -> Decorator:
    """A click option whose default is ``cls``'s field of the option's parameter name (shown when it is a value)."""
    if "default" not in attrs and not attrs.get("required"):
        default = _field_default(cls, _param_name(decls))
        attrs["default"] = default
        attrs.setdefault("show_default", default is not None and not isinstance(default, bool))
    return _declare(decls, attrs)


def _declare(decls: tuple[str, ...], attrs: dict[str, Any]) -> Decorator:
    _DECLARED[max((d for d in decls if d.startswith("--")), key=len)] = (decls, dict(attrs))
    return click.option(*decls, **attrs)


def declared(name: str, **changes: Any) -> Decorator:
    """The one declaration of option ``name`` (``--mode``, ``--walltime``) for another command that takes it,
    with ``changes`` to its click attributes: ``nnlo layout`` lays a run out without choosing its kind, so
    ``--mode``, ``--n-fold`` and ``--proposers`` have no default there (``default=None``)."""
    decls, attrs = _DECLARED[name]
    attrs = {**attrs, **changes}
    if "default" in changes:
        attrs["show_default"] = changes["default"] is not None
    return click.option(*decls, **attrs)


def train_option(*decls: str, **attrs: Any) -> Decorator:
    """A training option: a :class:`~nnlo.config.TrainConfig` field, its default the field's."""
    return _field_option(TrainConfig, decls, attrs)


def search_option(*decls: str, **attrs: Any) -> Decorator:
    """A search option: a :class:`~nnlo.optimize.options.SearchConfig` field, its default the field's."""
    return _field_option(SearchConfig, decls, attrs)


# -- values ---------------------------------------------------------------------------------------------------
def _deadline_default() -> float | None:
    """``--deadline``'s default on a command line: ``$NNLO_DEADLINE`` (:func:`nnlo.config.deadline_from_env`)."""
    try:
        return deadline_from_env()
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--deadline") from None


def parse_model_arg(item: str) -> tuple[str, Any]:
    """``"hidden=128"`` -> ("hidden", 128): values are JSON literals when they parse, else strings."""
    key, eq, raw = item.partition("=")
    if not eq or not key.strip().isidentifier():
        raise click.BadParameter(f"{item!r} is not NAME=VALUE (e.g. hidden=128)", param_hint="--model-arg")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def _model_args(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for item in values:
        parse_model_arg(item)
    return values


# -- the declarations -----------------------------------------------------------------------------------------
TRAINING: list[Decorator] = [
    train_option("--model", required=True, metavar="PATH",
                 help="Model: a .py module with get_model() (upstream contract), a torch .pt/.pth saved "
                      "with torch.save(model), or a Keras .json/.keras/.h5 file."),
    click.option("--model-arg", "model_arg", multiple=True, metavar="NAME=VALUE", callback=_model_args,
                 help="Keyword argument of get_model() (repeatable), e.g. --model-arg hidden=128."),
    train_option("--backend", type=click.Choice(["auto", "torch", "keras"]),
                 help="Deep-learning backend: auto follows the type get_model() returns (torch nn.Module -> "
                      "torch, Keras model -> keras); torch/keras insist on it and stop with a clear error if "
                      "the model is of the other kind."),
    train_option("--train", "train", metavar="LIST",
                 help="Text file naming the training HDF5 files, one per line (default: get_train())."),
    train_option("--val", metavar="LIST",
                 help="Text file naming the validation HDF5 files (default: get_val(); none: no validation)."),
    train_option("--features-name", metavar="NAME",
                 help="HDF5 dataset holding the inputs (default: get_features() or 'features')."),
    train_option("--labels-name", metavar="NAME",
                 help="HDF5 dataset holding the targets (default: get_labels() or 'labels')."),
    train_option("--loss",
                 help="Loss, Keras or torch spelling: categorical_crossentropy (one-hot or index labels), "
                      "sparse_categorical_crossentropy, binary_crossentropy, nll, mse, mae, huber. Torch "
                      "models output logits (no softmax layer) and Keras models end in a softmax; "
                      "categorical_crossentropy applies to each accordingly."),
    train_option("--epochs", type=click.IntRange(min=1),
                 help="Passes over the training samples (each sample once per epoch across all workers)."),
    train_option("--batch", type=click.IntRange(min=1),
                 help="Samples per batch on each worker (the last partial batch is kept)."),
    train_option("--optimizer",
                 help=f"The master's rule for applying worker updates: {_OPTIMIZERS}. sgd:lr=1 adds "
                      "updates as they are (classic Downpour)."),
    train_option("--worker-optimizer", metavar="SPEC",
                 help=f"Each worker's local optimizer: {_OPTIMIZERS}. Default: sgd:lr=<gem-lr> with "
                      "--mode gem, adam:lr=0.001 otherwise."),
    train_option("--mode", type=click.Choice(["downpour", "easgd", "gem", "allreduce"]),
                 help="Algorithm: downpour (workers send weight deltas), easgd (elastic averaging), gem "
                      "(gradient energy matching, arXiv:1805.08469), allreduce (no master: every rank a "
                      "replica, gradients averaged over all ranks each step; same as --n-masters 0)."),
    train_option("--sync-every", type=click.IntRange(min=1),
                 help="Local batches a worker trains between exchanges with its master."),
    train_option("--synchronous", is_flag=True,
                 help="Wait for all workers each round and apply the mean of their updates (with "
                      "--mode downpour; the learning rate does not change with the number of workers)."),
    train_option("--elastic-force", type=FINITE_FLOAT,
                 help="EASGD: elastic force; alpha = elastic_force / number of workers."),
    train_option("--gem-lr", type=FINITE_FLOAT,
                 help="GEM: learning rate of the proxy SGD and of the workers' default SGD (refused beside a "
                      "--worker-optimizer that steps at another rate)."),
    train_option("--gem-momentum", type=FINITE_FLOAT,
                 help="GEM: momentum of the proxy whose kinetic energy the workers match."),
    train_option("--gem-kappa", type=FINITE_FLOAT, help="GEM: energy matching factor kappa."),
    train_option("--validate-every", type=click.IntRange(min=0), metavar="N",
                 help="Also validate every N updates of the master (all-reduce: every N steps), recorded in "
                      f"{HISTORY_FILE} 'validations' with the update count; 0: only once an epoch."),
    train_option("--early-stopping", metavar="METRIC,CMP,PATIENCE",
                 help="Stop when METRIC has not improved for PATIENCE epochs, e.g. 'val_loss,<,4'."),
    train_option("--target-metric", metavar="METRIC,CMP,VALUE",
                 help="Stop as soon as METRIC reaches VALUE, e.g. 'val_accuracy,>,0.95'."),
    train_option("--checkpoint", metavar="DIR",
                 help="Run directory: history, model and checkpoints (DIR/checkpoints) go there; enables "
                      "checkpoints every --checkpoint-interval epochs and at the end."),
    train_option("--checkpoint-interval", type=click.IntRange(min=0),
                 help="Epochs between checkpoints (0: only at the end and before a deadline/signal stop)."),
    train_option("--restore", metavar="DIR|auto",
                 help="Resume from the newest complete checkpoint in DIR (a run or checkpoint folder); "
                      "'auto' looks in the run directory. No checkpoint there yet: start fresh."),
    # one option, two fields of the same name: TrainConfig.overwrite (nnlo train) and SearchConfig.overwrite
    train_option("--overwrite", is_flag=True,
                 help="Start afresh in a folder that holds an earlier run (nnlo train: --checkpoint DIR; "
                      "nnlo optimize: --output DIR), deleting its history, model, checkpoints and logs (a "
                      "search's trials and state) first. Without it such a folder is refused: --restore auto "
                      "(--opt-restore) continues it."),
    train_option("--preload-data", type=click.IntRange(min=0), is_flag=False, flag_value=1, show_default=False,
                 metavar="[N]", help="Read every listed file into memory once before training (any N >= 1, "
                                     "or the bare flag; 0: read from the files as needed)."),
    train_option("--cache-data", is_flag=False, flag_value=CACHE_IN_MEMORY, metavar="[DIR]",
                 help="Copy each listed file once into DIR (a node-local disk) and read it from there; "
                      "the bare flag keeps the data in memory (like --preload-data)."),
    train_option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
                 help="Verbosity of the console and of logs/rank-<r>.log."),
    train_option("--trial-name", metavar="NAME",
                 help=f"Name of this run (default run directory: {DEFAULT_RUNS}/NAME); without it the model "
                      "module's get_name(), else the model file's stem, for train, optimize and submit alike."),
    train_option("--seed", type=click.IntRange(min=0),
                 help="Seed of the weight initialisation and of every epoch's data order."),
    train_option("--n-masters", type=click.IntRange(min=0),
                 help="1: one master; 0: pure all-reduce (--mode allreduce); M > 1: an uber-master above "
                      "M-1 masters (so -n 5 --n-masters 3 = uber-master + 2 masters + 2 workers)."),
    train_option("--n-processes", type=click.IntRange(min=1),
                 help="Ranks per worker: K > 1 makes each worker an all-reduce group of K ranks that split "
                      "its batch (K x --batch samples per step) and talk to the master through their leader."),
    train_option("--allreduce-engine", type=click.Choice(ALLREDUCE_ENGINES),
                 help="Who sums gradients (--mode allreduce, --n-processes > 1): mpi (MPI all-reduces of one "
                      "flat buffer), torch (torch.distributed: NCCL with the buffers on the GPUs when every "
                      "rank has one, else gloo), horovod (if installed); auto = mpi on CPUs, torch on GPUs."),
    train_option("--bucket-mb", type=finite_range(min=0), metavar="MB",
                 help="Gradient all-reduce buckets of about MB megabytes, each started during backward as "
                      "soon as its gradients are final (torch on CPU); 0: one all-reduce after backward."),
    train_option("--amp", is_flag=True,
                 help="Automatic mixed precision for torch models: float16 autocast with a gradient scaler on "
                      "GPUs (its state is checkpointed), bfloat16 autocast on CPUs."),
    train_option("--scale-lr", is_flag=True,
                 help="Multiply the worker optimizer's learning rate by the ranks that split one batch: all "
                      "ranks with --mode allreduce, the K ranks of a worker with --n-processes K."),
    train_option("--monitor", is_flag=True, help="Sample CPU/GPU use; adds it to the history and a time summary."),
    train_option("--timeline", is_flag=True,
                 help="Record a per-rank trace (see 'nnlo timeline RUN' for a Chrome trace)."),
    train_option("--tensorboard", metavar="DIR",
                 help="Write TensorBoard event files into DIR: every epoch's figures (and each --validate-every "
                      "validation in DIR/by_update) from the master; a search: one run per trial, with its "
                      "hyperparameters and figure of merit (needs the tensorboard extra)."),
    train_option("--mlflow", metavar="URI",
                 help="Log the options and every epoch's figures to MLflow (a tracking URI: file:///shared/mlruns, "
                      "http://host:5000); a search is a parent run with one nested run per trial (needs the "
                      "mlflow extra)."),
    train_option("--deadline", type=FINITE_FLOAT, default=_deadline_default, metavar="UNIX_SECONDS",
                 help=f"Write a complete checkpoint and stop (exit {EXIT_RESUMABLE}) before this time "
                      f"(default: ${ENV_DEADLINE})."),
]

SEARCH: list[Decorator] = [
    search_option("--block-size", type=click.IntRange(min=1),
                  help="Ranks per block (each block trains one parameter set at a time; 1: one rank per "
                       "trial, training alone). Default: n-fold x (1 master + 1 worker)."),
    search_option("--block-sizes", callback=parse_block_sizes_option,
                  help="Heterogeneous blocks: the ranks of each block, e.g. 6,6,3,3 (instead of "
                       "--block-size); the world is 1 coordinator + proposers + their sum."),
    search_option("--proposers", type=click.IntRange(min=1),
                  help="Processes that propose trials: 1 = the coordinator; P > 1 adds P proposer ranks "
                       "after it, asking concurrently so many blocks never wait for the optimizer."),
    search_option("--assign", type=click.Choice(["auto", "fifo", "hardware-aware"]),
                  help="Which proposal an idle block gets: fifo (the next one), hardware-aware (expensive "
                       "trials to fast blocks, cheap ones to slow blocks); auto = hardware-aware when the "
                       "block sizes differ, else fifo."),
    search_option("--n-fold", type=click.IntRange(min=1),
                  help="Fold groups per block (k-fold cross-validation on the --train samples); the "
                       "block reports the mean figure of merit over folds."),
    search_option("--num-iterations", type=click.IntRange(min=1),
                  help="Trials in total (failed ones count); a larger number with --opt-restore extends a search."),
    search_option("--hyper-opt", type=click.Choice(["bayesian", "genetic", "random"]), help="Search engine."),
    search_option("--estimator", type=click.Choice(["GP", "RF", "ET"], case_sensitive=False),
                  help="Surrogate of the Bayesian engine: Gaussian process, random forest or extra trees."),
    search_option("--n-initial-points", type=click.IntRange(min=1),
                  help="Random trials before the Bayesian model is used (default: min(10, trials/3))."),
    search_option("--ga-populations", type=click.IntRange(min=2),
                  help="Population size of the genetic engine (individuals kept and bred from)."),
    search_option("--fom",
                  help="Figure of merit: a final validation metric, NAME[:min|max] "
                       "(e.g. val_accuracy:max; *acc* metrics default to max)."),
    search_option("--target-objective", type=FINITE_FLOAT,
                  help="Stop once a trial's figure of merit reaches this value."),
    search_option("--space", type=click.Path(dir_okay=False),
                  help="TOML search space (one [name] table per parameter); default: the model "
                       "module's get_model.parameter_range."),
    search_option("--max-failures", metavar="FRACTION[:MIN]",
                  help="Stop the search once more than FRACTION of its finished trials failed, counted from MIN "
                       "finished trials on (or the whole budget if smaller): the model, not the parameters, "
                       "is broken. 1 never stops (upstream went on)."),
    search_option("--opt-restore", is_flag=True,
                  help="Resume the search saved in --output (finished trials kept, running ones re-run)."),
    search_option("--output", type=click.Path(file_okay=False),
                  help=f"Run directory for {TRIALS_JSON}, {TRIALS_CSV}, {BEST_FILE}, {OPTIMIZER_STATE_FILE} "
                       f"and trials/<id>/fold-<f>/. Default: ${ENV_RUN_DIR}, else ./optimize-<model>."),
    search_option("--shared", is_flag=True,
                  help=f"Join the search kept in --output's journal ({SEARCH_JOURNAL}), which any number "
                       "of jobs may run at once: one search across many jobs (needs flock on that file "
                       "system; see docs/optimization.md)."),
    search_option("--participant", metavar="NAME",
                  help=f"This job's name in a --shared search (default: ${ENV_PARTICIPANT}, else "
                       "<hostname>-<pid>); a job with the same name takes its own trials back at once."),
    search_option("--lease-timeout", type=finite_range(min=1.0), metavar="SECONDS",
                  help="--shared: a trial whose job stopped renewing its lease this long goes back to the "
                       "pool and is re-run by another job."),
    search_option("--schedule", type=click.Choice(SCHEDULES),
                  help="How long trials train: full (every trial --epochs), asha (stop bad trials early: rungs "
                       "of --min-epochs x eta^k epochs, the best 1/eta go on), hyperband (brackets of asha), "
                       "pbt (population-based training)."),
    search_option("--min-epochs", type=int, metavar="E",
                  help=f"asha/hyperband: epochs of the lowest rung (default {DEFAULT_MIN_EPOCHS}); --epochs is the "
                       "most a trial trains."),
    search_option("--reduction-factor", type=FINITE_FLOAT, metavar="ETA",
                  help="asha/hyperband: each rung keeps the best 1/ETA of the one below and trains ETA times "
                       f"longer (default {DEFAULT_ETA:g}, at least 2)."),
    search_option("--population", type=int, metavar="P",
                  help=f"pbt: trials trained side by side (default {PBT_POPULATION}; --num-iterations, which also "
                       "counts every exploit's new trial, may start fewer)."),
    search_option("--pbt-interval", type=int, metavar="E",
                  help=f"pbt: epochs between exploit/explore steps (default 1/{PBT_STEPS} of --epochs, at least 1)."),
]


#: Where and how big a run's jobs are (fields of the run record, :class:`nnlo_sched.spec.RunSpec`, not of the
#: run's options): ``nnlo submit`` and ``nnlo layout`` take them alike, through :func:`declared`.
RESOURCES: list[Decorator] = [
    _declare(("--cluster", "-c"), dict(default=None, help="Cluster profile (nnlo clusters lists them).")),
    _declare(("--walltime", "-t"), dict(
        default=DEFAULT_WALLTIME, show_default=True, callback=parse_walltime_option,
        help="Per job: MM, HH:MM:SS, D-HH:MM:SS, 90m, 2h, 1.5h (not A:B, which LSF and Slurm read differently); "
             "checked against the queue's limit. Longer runs resubmit themselves.")),
    _declare(("--queue", "-q"), dict(default=None, help="Queue / partition (default: the profile's).")),
    _declare(("--nodes",), dict(type=int, default=None,
                                help="Nodes; alone, fills them with as many workers/blocks as fit (with --workers: "
                                     "the nodes to spread them over).")),
    _declare(("--workers",), dict(type=int, default=None, help="Logical workers (training).")),
    _declare(("--blocks",), dict(type=int, default=None, help="Optimization blocks.")),
    _declare(("--gpus-per-worker",), dict(default=None, callback=parse_gpus,
                                          help="GPUs per worker rank: 1, 2, ..., 0.5 (2 ranks share a GPU); "
                                               "0 = CPU only.")),
    _declare(("--constraint", "-C"), dict(default=None,
                                          help="Node type (Slurm --constraint), e.g. a100, or mc on cscs: its "
                                               "nodes' cores and GPUs.")),
]


def _launch_options(kind: str) -> list[Decorator]:
    """How to start the run here (no field of the run): ``-n N`` ranks on this machine, ``--no-check``."""
    who = "1 master + N-1 workers; -n 1: one rank trains alone" if kind == "train" else "1 coordinator + blocks"
    return [
        click.option("-n", "--np", "np_", type=click.IntRange(min=1), metavar="N",
                     help=f"Start N ranks with mpirun on this machine ({who}). Ignored inside an existing "
                          "MPI launch (mpirun/srun/jsrun/aprun), which sets the ranks itself."),
        click.option("--no-check", is_flag=True,
                     help="With -n: skip the checks of the model file, the data lists, --space and --restore "
                          "paths made before any rank starts."),
    ]


def options_of(kind: str) -> list[Decorator]:
    """Every option of ``nnlo <kind>``, in ``--help`` order."""
    if kind not in KINDS:
        raise ConfigError(f"run kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return [*TRAINING, *(SEARCH if kind == "optimize" else []), *_launch_options(kind)]


def command(kind: str, callback: Callable[..., Any] | None = None, *, required: bool = True) -> click.Command:
    """The click command ``nnlo <kind>``: every option of :func:`options_of`, upstream spellings translated
    (:class:`~nnlo_sched.upstream.UpstreamCommand`); ``callback`` runs it (None: a parser only).

    ``required=False`` leaves ``--model`` optional: a parser of options that change a run (``nnlo resume``).
    """
    def parse_only(**params: Any) -> None:
        """Parse the options of a run."""

    fn = callback or parse_only
    for option in reversed(options_of(kind)):
        fn = option(fn)
    cmd = click.command(kind, cls=UpstreamCommand, context_settings={"max_content_width": 100})(fn)
    if not required:
        for p in cmd.params:
            p.required = False
    return cmd


def config_from_params(params: dict[str, Any]) -> TrainConfig:
    """click's parameters -> :class:`~nnlo.config.TrainConfig`: every field given (a copy; not validated)."""
    values = {f.name: params[f.name] for f in dataclasses.fields(TrainConfig) if f.name in params}
    if params.get("model_arg"):
        values["model_args"] = {**values.get("model_args", {}), **dict(map(parse_model_arg, params["model_arg"]))}
    return TrainConfig.from_dict(values)


def search_from_params(params: dict[str, Any]) -> SearchConfig:
    """click's parameters -> :class:`~nnlo.optimize.options.SearchConfig`: every field given (a copy)."""
    return SearchConfig(**{f.name: params[f.name] for f in dataclasses.fields(SearchConfig) if f.name in params})


__all__ = ["KINDS", "RESOURCES", "SEARCH", "TRAINING", "command", "config_from_params", "declared", "options_of",
           "parse_model_arg", "search_from_params", "search_option", "train_option"]

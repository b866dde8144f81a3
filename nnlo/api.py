"""The Python API: train and search from a script that ``mpirun -np N python script.py`` (or ``srun``,
``jsrun``, a batch job) starts on every rank, exactly as ``nnlo train`` and ``nnlo optimize`` would.

::

    import nnlo

    result = nnlo.train(model="my_model.py", data="train.list", val_data="val.list",
                        mode="easgd", epochs=10, batch=32, checkpoint="runs/easgd")
    if result.is_master:
        print(result.final["val_accuracy"], result.history_path)

Every rank calls the same function with the same arguments; roles (master, workers, ...) come from the
options as on the command line. Options are ``nnlo train``'s, in snake_case (``worker_optimizer=``,
``early_stopping=``, ``model_args={"hidden": 64}``), with the same defaults and the same checks: a bad
value raises :class:`nnlo.ConfigError` (one line) on every rank before any rank waits for another.
``nnlo train`` itself runs :func:`run_train` on every rank: one path, not two.

Models: a model module's path (the upstream contract, ``get_model()`` ...), the module object or its
importable name, a saved model file, a function that builds the model from keyword hyperparameters, or a
torch/Keras model instance (copied; the master's initial weights are broadcast to every rank as always).
Data: a list file or a list of HDF5 files, or any object with ``__len__`` and ``batch(indices)``
(:mod:`nnlo.data.source`: :class:`~nnlo.data.source.ArraySource`, :class:`~nnlo.data.source.GeneratorSource`).
Callbacks: ``callback(epoch, logs) -> bool | None`` on the master after every epoch; True (or raising
:class:`StopTraining`) ends the training cleanly (:mod:`nnlo.training.callbacks`).

See docs/python-api.md.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnlo import job
from nnlo.config import TrainConfig, deadline_from_env, known_fields
from nnlo.contract import BEST_FILE, CHECKPOINT_DIR, EXIT_RESUMABLE, TRIALS_CSV, TRIALS_JSON
from nnlo.errors import ConfigError
from nnlo.models import OBJECT_PREFIX, ModelSource, ObjectModelSource, model_path, model_source_of, run_name
from nnlo.observe.logs import console_logging
from nnlo.optimize.results import Objective
from nnlo.roles import describe
from nnlo.training.callbacks import check_callbacks
from nnlo.training.context import RunInputs
from nnlo.training.failure import RankFailure

if TYPE_CHECKING:  # imported where used: the command line imports this module for DEFAULT_RUNS
    from nnlo.training.context import RunInputs

__all__ = ["DEFAULT_RUNS", "RankFailure", "SearchResult", "TrainResult", "default_run_dir", "optimize", "run_train",
           "search_in_world", "train", "train_config"]

#: where a training writes when ``checkpoint`` (``--checkpoint``) is not given: ``nnlo-runs/<name>``
DEFAULT_RUNS = "nnlo-runs"

# the lower bounds ``nnlo train``'s options have (click.IntRange); the others are >= 0 or checked by validate()
_MINIMUM = {"epochs": 1, "batch": 1, "sync_every": 1, "n_processes": 1, "checkpoint_keep": 1}
_PATH_FIELDS = ("model", "train", "val", "checkpoint", "restore", "cache_data", "tensorboard")


# ----------------------------------------------------------------------------------------------------
# results
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` returns, on every rank.

    Every rank gets the same figures (the master broadcasts them); ``is_master`` is True on the rank that
    wrote the files (the master, the uber-master, or rank 0 of an all-reduce training). ``history``: one dict
    per epoch (``epoch``, ``loss``, ``val_loss``, ``val_accuracy``, ...; the ``history`` of history.json);
    ``final``/``best``: the last and the best epoch (lowest ``val_loss``); ``stopped_reason``: ``completed``,
    ``early_stopping``, ``target_metric``, ``callback``, ``deadline`` or ``signal``; ``resumable``: stopped
    early with a complete checkpoint (train again with ``restore="auto"`` to continue).
    """

    is_master: bool
    rank: int
    history: list[dict[str, Any]]
    final: dict[str, Any]
    best: dict[str, Any]
    epochs_done: int
    stopped_reason: str
    resumable: bool
    updates: int
    seconds: float
    run_dir: Path | None  # history.json, config.json, the model, logs/, checkpoints/
    checkpoints_dir: Path | None
    checkpoint: Path | None  # the newest complete checkpoint this training wrote
    history_path: Path | None
    model_path: Path | None  # model.pt (torch) or model.keras (Keras)

    @classmethod
    def of(cls, result: Any, rank: int, is_master: bool) -> TrainResult:
        """From the runtime's :class:`nnlo.training.history.TrainResult`."""
        def path(value: Any) -> Path | None:
            return Path(value) if value else None

        run_dir = path(result.out_dir)
        return cls(is_master=is_master, rank=rank, history=list(result.history), final=dict(result.final),
                   best=dict(result.best), epochs_done=int(result.epochs_done),
                   stopped_reason=str(result.stopped_reason), resumable=bool(result.resumable),
                   updates=int(result.updates), seconds=float(result.seconds), run_dir=run_dir,
                   checkpoints_dir=run_dir / CHECKPOINT_DIR if run_dir is not None else None,
                   checkpoint=path(result.checkpoint), history_path=path(result.history_path),
                   model_path=path(result.model_path))


@dataclass(frozen=True)
class SearchResult:
    """What :func:`optimize` returns, on every rank.

    The search's files are the coordinator's (rank 0: ``is_coordinator``); ``best`` is ``best.json`` (the
    best trial's ``best_params``, ``best_fom``, ``best_trial``, counts), read there and shared with every
    rank; ``exit_code`` is what ``nnlo optimize`` would exit with (0 done, 75 stopped at the deadline or a
    signal with its state saved: call again with ``opt_restore=True`` to resume).
    """

    is_coordinator: bool
    rank: int
    exit_code: int
    best: dict[str, Any]
    out_dir: Path
    best_path: Path
    trials_path: Path
    trials_csv: Path

    @property
    def best_params(self) -> dict[str, Any] | None:
        return self.best.get("best_params")

    @property
    def best_fom(self) -> float | None:
        return self.best.get("best_fom")


# ----------------------------------------------------------------------------------------------------
# options
# ----------------------------------------------------------------------------------------------------
def _type_error(name: str, want: str, value: Any) -> ConfigError:
    return ConfigError(f"{name}={value!r} is not {want}; see `nnlo train --help` for --{name.replace('_', '-')}")


def _check_types(cfg: TrainConfig) -> None:
    """The types and lower bounds the command line's parser enforces, for options given from Python."""
    for f in dataclasses.fields(cfg):
        value, kind = getattr(cfg, f.name), str(f.type)
        optional = "None" in kind
        if value is None:
            if not optional:
                raise _type_error(f.name, "given (None)", value)
            continue
        if kind.startswith("int"):
            if not isinstance(value, int) or isinstance(value, bool):
                raise _type_error(f.name, "an integer", value)
            low = _MINIMUM.get(f.name, 0)
            if value < low:
                raise ConfigError(f"{f.name}={value} must be >= {low}")
        elif kind.startswith("float"):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise _type_error(f.name, "a finite number", value)
        elif kind.startswith("bool"):
            if not isinstance(value, bool):
                raise _type_error(f.name, "True or False", value)
        elif kind.startswith("str"):
            if not isinstance(value, str):
                raise _type_error(f.name, "a string", value)
        elif kind.startswith("dict") and not (isinstance(value, dict) and all(isinstance(k, str) and k.isidentifier()
                                                                             for k in value)):
            raise _type_error(f.name, "a dict of keyword arguments (names -> values)", value)


def train_config(config: TrainConfig | Mapping[str, Any] | None = None, **options: Any) -> TrainConfig:
    """A validated :class:`TrainConfig` from a config (or a dict of options) and keyword options that
    override it, with ``nnlo train``'s names, defaults and rules; ``deadline`` defaults to
    ``$NNLO_DEADLINE`` as on the command line. :class:`ConfigError` (one line) when anything is wrong."""
    values = _config_values(config, options)
    for name in _PATH_FIELDS:
        if isinstance(values.get(name), os.PathLike):
            values[name] = os.fspath(values[name])
    if not isinstance(values.get("model_args") or {}, Mapping):
        raise _type_error("model_args", "a dict of keyword arguments (names -> values)", values["model_args"])
    values.setdefault("model_args", {})
    cfg = TrainConfig.from_dict(known_fields(TrainConfig, values, "training option(s)"))
    _check_types(cfg)
    if cfg.deadline is None:
        cfg = cfg.replace(deadline=deadline_from_env())
    return cfg.validate()


def default_run_dir(config: TrainConfig) -> str:
    """Where a training writes without ``--checkpoint``: ``nnlo-runs/<trial name, else the model module's
    get_name(), else the model file's stem; a model object: its name, :func:`nnlo.models.object_name`)>``; in a
    job of a submitted script, ``<run folder>/<the same name>`` (:mod:`nnlo.job`)."""
    return str(Path(job.run_dir() or DEFAULT_RUNS) / run_name(config.model, config.trial_name))


def _data(value: Any, role: str) -> tuple[str | None, Any]:
    """(a list file for the options, or a data object for :class:`RunInputs`) of ``data=``/``val_data=``."""
    from nnlo.data.source import check_source  # lazy: h5py (nnlo.data's HDF5 layer)

    if value is None:
        return None, None
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        if path.suffix.lower() in (".h5", ".hdf5", ".hdf", ".he5"):
            return None, [path]  # one HDF5 file
        return os.fspath(value), None  # a list file, as --train/--val
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, os.PathLike)) for v in value):
        return None, [Path(v) for v in value]
    check_source(value, role)
    return None, value


def _inputs(model: Any, data: Any, val_data: Any, cfg_values: dict[str, Any],
            callbacks: Any = ()) -> tuple[dict[str, Any], RunInputs]:
    """Options for the model and data given as arguments, and what the options cannot hold."""
    values = dict(cfg_values)
    source = None
    if model is not None:
        if values.get("model"):
            raise ConfigError("the model is given twice (model= and a config's model); give it once")
        if isinstance(model, (str, os.PathLike)):
            values["model"] = model_path(model)  # loaded on every rank by the runtime, as --model is
        else:
            source = model_source_of(model)
            values["model"] = source.path
            if isinstance(source, ModelSource):
                source = None  # a module object: its path is the option
    elif isinstance(values.get("model"), str) and values["model"].startswith(OBJECT_PREFIX):
        raise ConfigError(f"model {values['model']} was a Python object; pass it again as model=")
    train_list, train_obj = _data(data, "training")
    val_list, val_obj = _data(val_data, "validation")
    for name, given in (("train", data), ("val", val_data)):
        if given is not None and values.get(name):
            arg = "data" if name == "train" else "val_data"
            raise ConfigError(f"the {name} data is given twice ({arg}= and {name}={values[name]!r}); give it once")
    if train_list:
        values["train"] = train_list
    if val_list:
        values["val"] = val_list
    _refuse_file_options(values, [o for o in (train_obj, val_obj) if o is not None and not isinstance(o, list)])
    assert source is None or isinstance(source, ObjectModelSource)
    return values, RunInputs(model=source, train=train_obj, val=val_obj,
                             callbacks=check_callbacks(callbacks), python_api=True)


#: options that only mean something for HDF5 files (a data object reads its own samples)
_FILE_OPTIONS = {"features_name": "--features-name", "labels_name": "--labels-name",
                 "preload_data": "--preload-data", "cache_data": "--cache-data"}


def _refuse_file_options(values: Mapping[str, Any], objects: list[Any]) -> None:
    """A data object with an option that only HDF5 files have would silently ignore it: refuse it instead."""
    if not objects:
        return
    given = [name for name in _FILE_OPTIONS if values.get(name)]
    if given:
        kind = type(objects[0]).__name__
        raise ConfigError(f"{', '.join(given)} ({', '.join(_FILE_OPTIONS[g] for g in given)}) only apply to HDF5 "
                          f"files, and the data given ({kind}) reads its own samples; drop "
                          f"{'it' if len(given) == 1 else 'them'} (or pass the HDF5 files instead)")


def _config_values(config: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    if config is None:
        return dict(options)
    if isinstance(config, TrainConfig):
        return {**config.to_dict(), **options}
    if isinstance(config, Mapping):
        return {**config, **options}
    raise ConfigError(f"config must be an nnlo.TrainConfig or a dict of options, got {type(config).__name__}")


# ----------------------------------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------------------------------
def train(model: Any = None, data: Any = None, val_data: Any = None, config: Any = None,
          callbacks: Any = (), *, comm: Any = None, **options: Any) -> TrainResult:
    """Train on every rank of ``comm`` (default: the whole MPI world) as ``nnlo train`` does.

    model: a model module's path, the module or its importable name, a saved model file, a function
        ``build(**hyperparameters)`` or a torch/Keras model instance.
    data / val_data: a list file (``--train``/``--val``), an HDF5 file or a list of them, or a data source
        (``len`` and ``batch(indices)``, e.g. :class:`nnlo.ArraySource`); None: ``get_train()``/``get_val()``.
    config: an :class:`nnlo.TrainConfig` or a dict of options; ``options`` (``nnlo train``'s option names in
        snake_case) override it.
    callbacks: functions ``callback(epoch, logs) -> bool | None`` run on the master after every epoch.

    Raises :class:`nnlo.ConfigError` (bad options, on every rank, before any communication) and
    :class:`nnlo.RankFailure` on every rank when a rank failed (its ``report`` is True on that rank only).
    """
    values, inputs = _inputs(model, data, val_data, _config_values(config, options), callbacks)
    cfg = train_config(values)
    result = run_train(job.chained_config(cfg, default_run_dir(cfg)), inputs, comm=comm)
    job.end_if_resumable(result.resumable)  # inside a submitted run: exit 75, the chain's next job goes on
    return result


def run_train(config: TrainConfig, inputs: RunInputs | None = None, *, comm: Any = None) -> TrainResult:
    """The in-rank entry of every training (``nnlo train``, a submitted run's job, :func:`train`): train
    ``config`` with ``inputs`` in ``comm``'s ranks and write into ``config.checkpoint`` (default
    :func:`default_run_dir`)."""
    from nnlo.training.driver import train as train_in_group  # lazy: numpy (import nnlo stays light)

    if comm is None:
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        comm = MPI.COMM_WORLD
    inputs = inputs or RunInputs()
    out_dir = config.checkpoint or default_run_dir(config)
    if comm.Get_rank() == 0:
        job.working_in(out_dir)  # inside a submitted run: the folder whose progress `nnlo status` shows
    result = train_in_group(comm, config, out_dir=out_dir, inputs=inputs)
    rank = comm.Get_rank()
    top = describe(comm.Get_size(), config.training_group_shape).groups[0].top  # master, uber-master, rank 0
    return TrainResult.of(result, rank, rank == top)


# ----------------------------------------------------------------------------------------------------
# search
# ----------------------------------------------------------------------------------------------------
def _space(space: Any, source: Any) -> Any:
    """A :class:`nnlo.optimize.space.Space` from what :func:`optimize` got (None: the model's own)."""
    from nnlo.optimize import space as space_mod  # lazy: numpy (import nnlo stays light)

    if space is None:
        obj = getattr(source, "obj", None)
        dims = getattr(obj, "parameter_range", None)
        if dims is None:
            raise ConfigError(f"{source.path} declares no search space: pass space= (a TOML file, a dict, or a "
                              f"list of Real/Integer/Categorical) or set .parameter_range on the function")
        return space_mod.from_dimensions(dims)
    if isinstance(space, space_mod.Space):
        return space
    if isinstance(space, Mapping):
        return space_mod.Space.from_dict(dict(space), source="space=")
    if isinstance(space, (list, tuple)):
        return space_mod.from_dimensions(space)
    raise ConfigError(f"space= got a {type(space).__name__}; pass a TOML file's path, a dict of tables or a "
                      f"list of Real/Integer/Categorical dimensions")


def optimize(model: Any = None, data: Any = None, val_data: Any = None, space: Any = None, config: Any = None,
             *, comm: Any = None, **options: Any) -> SearchResult:
    """Search hyperparameters on every rank of ``comm`` (default: the MPI world) as ``nnlo optimize`` does:
    rank 0 coordinates, blocks of ``block_size`` ranks train trials.

    model/data/val_data/config: as for :func:`train`; ``options`` are ``nnlo optimize``'s (``block_size``,
    ``n_fold``, ``num_iterations``, ``hyper_opt``, ``estimator``, ``n_initial_points``, ``ga_populations``,
    ``fom``, ``target_objective``, ``max_failures``, ``opt_restore``, ``overwrite``, ``output``) and the training
    options.
    space: a TOML file's path (``--space``), a dict of tables as in that file, a list of
        ``Real``/``Integer``/``Categorical`` dimensions, or None (the model's ``parameter_range``).
    """
    from nnlo.optimize.options import SearchConfig  # lazy: numpy (import nnlo stays light)

    search_names = {f.name for f in dataclasses.fields(SearchConfig)}
    search_values = {k: v for k, v in options.items() if k in search_names}
    train_values = {k: v for k, v in options.items() if k not in search_names}
    given_space = None
    if isinstance(space, (str, os.PathLike)):
        search_values["space"] = os.fspath(space)
    else:
        given_space = space
    unknown = sorted(set(train_values) - {f.name for f in dataclasses.fields(TrainConfig)})
    if unknown:
        valid = sorted(search_names - {"space"} | {f.name for f in dataclasses.fields(TrainConfig)})
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
    values, inputs = _inputs(model, data, val_data, _config_values(config, train_values))
    cfg = train_config(values)
    if isinstance(search_values.get("output"), os.PathLike):
        search_values["output"] = os.fspath(search_values["output"])
    search = SearchConfig(**search_values)
    _check_search(search)
    opts = search.options(cfg)
    resolved = None
    if given_space is not None or inputs.model is not None:
        resolved = _space(given_space, inputs.model) if search.space is None else None
    result = run_search(cfg, opts, inputs, resolved, comm=comm)
    job.end_if_resumable(result.exit_code == EXIT_RESUMABLE)  # inside a submitted run: the chain goes on
    return result


def _check_search(search: Any) -> None:
    """The types, bounds and choices ``nnlo optimize``'s parser enforces, for options given from Python."""
    from nnlo.optimize.engines import ENGINES  # lazy: numpy (import nnlo stays light)

    for name, low, optional in (("block_size", 1, True), ("n_fold", 1, False), ("num_iterations", 1, False),
                                ("n_initial_points", 1, True), ("ga_populations", 2, False)):
        value = getattr(search, name)
        if value is None and optional:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ConfigError(f"{name}={value!r} must be an integer >= {low}")
    if search.hyper_opt not in ENGINES:
        raise ConfigError(f"hyper_opt={search.hyper_opt!r} is unknown; use one of {', '.join(ENGINES)}")
    if not isinstance(search.estimator, str) or search.estimator.upper() not in ("GP", "RF", "ET"):
        raise ConfigError(f"estimator={search.estimator!r} is unknown; use GP, RF or ET")
    if not isinstance(search.fom, str):
        raise ConfigError(f"fom={search.fom!r} must be NAME[:min|max], e.g. val_accuracy:max")

    Objective.parse(search.fom)
    target = search.target_objective
    if target is not None and (not isinstance(target, (int, float)) or isinstance(target, bool)
                               or not math.isfinite(target)):
        raise ConfigError(f"target_objective={target!r} must be a finite number")
    for flag in ("opt_restore", "overwrite"):
        if not isinstance(getattr(search, flag), bool):
            raise ConfigError(f"{flag}={getattr(search, flag)!r} must be True or False")


def search_in_world(world: Any, opts: Any, config: TrainConfig) -> int:
    """The search as a job's ranks run it (every rank of ``world`` calls it): its exit code. The entry of a
    submitted search and ``nnlo optimize -n`` (``nnlo_sched.payload``); :func:`run_search` is the Python API's."""
    from nnlo.optimize.run import optimize as optimize_in_world  # lazy: numpy (import nnlo stays light)

    return int(optimize_in_world(world, opts, config))


def run_search(config: TrainConfig, opts: Any, inputs: RunInputs | None = None, space: Any = None, *,
               comm: Any = None) -> SearchResult:
    """Run a search in ``comm``'s ranks (every rank calls it) and share ``best.json`` from the coordinator."""
    from nnlo.optimize.run import optimize as optimize_in_world  # lazy: numpy (import nnlo stays light)

    if comm is None:
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        comm = MPI.COMM_WORLD
    rank = comm.Get_rank()

    console_logging(config.log_level, rank)
    given = inputs if inputs is not None and (inputs.model is not None or inputs.train is not None
                                              or inputs.val is not None) else None
    if rank == 0:
        job.working_in(opts.out_dir)  # inside a submitted run: the folder whose progress `nnlo status` shows
    code = optimize_in_world(comm, opts, config, inputs=given, space=space)
    out = Path(opts.out_dir)
    best: dict[str, Any] = {}
    if rank == 0 and (out / BEST_FILE).is_file():
        best = json.loads((out / BEST_FILE).read_text())
    best = comm.bcast(best, root=0)
    return SearchResult(is_coordinator=rank == 0, rank=rank, exit_code=int(code), best=best, out_dir=out,
                        best_path=out / BEST_FILE, trials_path=out / TRIALS_JSON, trials_csv=out / TRIALS_CSV)



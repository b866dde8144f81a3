"""The one entry point of a training: :func:`train` runs on every rank of a communicator.

It works on *any* communicator: ``MPI.COMM_WORLD`` for ``nnlo train``, or one training group's
communicator inside an optimization block (the optimization engine calls it once per trial and fold). Roles
come only from :func:`nnlo.roles.describe` applied to that communicator. What the options cannot name (a model
object, data sources, epoch-end callbacks: the Python API's, :mod:`nnlo.api`) arrives as
:class:`~nnlo.training.context.RunInputs`; without it the options name everything (``nnlo train``).

Set-up is collective and failure-safe: each phase (check the configuration, load the model, open the data,
restore) runs on every rank, then the ranks compare outcomes with one ``allgather``; if any rank failed,
every rank raises the same :class:`~nnlo.training.failure.RankFailure` (printed once, by the rank that
failed), so a missing file or a bad option can never leave some ranks waiting for others.

During training a failure travels through the master (see :mod:`nnlo.training.master`). Anything that
escapes that protocol (a bug, an MPI error) prints ``nnlo: error: rank R (role): message`` and aborts the
whole MPI job: a rank that dies must never leave the others hanging.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from nnlo import checkpoint as ckpt
from nnlo import liveness
from nnlo.abort import abort_rank
from nnlo.backends import make_backend
from nnlo.backends.keras_env import prepare_environment
from nnlo.config import TrainConfig
from nnlo.contract import CONFIG_FILE, ENV_RUN_DIR
from nnlo.device import select_device
from nnlo.errors import ConfigError
from nnlo.models import data_plan, load_model_source, model_name
from nnlo.observe import session, tracking
from nnlo.observe.logs import ONCE
from nnlo.observe.tracking.base import Trackers
from nnlo.rankfate import record_rank
from nnlo.roles import Hierarchy, Role, describe
from nnlo.stop import Stop
from nnlo.training import submaster
from nnlo.training.callbacks import attach
from nnlo.training.context import RunContext, RunInputs
from nnlo.training.failure import RankFailure, failure_line
from nnlo.training.groups import GroupWorker, split_worker_groups
from nnlo.training.history import TrainResult
from nnlo.training.master import Master
from nnlo.training.modes import make_worker_rule
from nnlo.training.rundir import claim
from nnlo.training.solo import Alone, Solo, SoloWorker
from nnlo.training.startup import mark
from nnlo.training.validation import Validator
from nnlo.training.watchdog import Watchdog, abort_on_expiry, start_timeout_from_env, timeout_from_env
from nnlo.training.worker import Worker
from nnlo.transport import Link, sleeping_waits, wait_for_all

log = logging.getLogger("nnlo.train")
T = TypeVar("T")

#: the inputs of trainings started without ``inputs=`` (a search's trials, see :func:`given_inputs`)
_AMBIENT: contextvars.ContextVar[RunInputs | None] = contextvars.ContextVar("nnlo_run_inputs", default=None)


@contextlib.contextmanager
def given_inputs(inputs: RunInputs) -> Iterator[None]:
    """Within the block, trainings that get no ``inputs=`` use ``inputs``: how ``nnlo.optimize`` hands a
    model object and data sources to the trials its blocks train (their runner calls :func:`train`)."""
    token = _AMBIENT.set(inputs)
    try:
        yield
    finally:
        _AMBIENT.reset(token)


def train(
    comm: Any,
    config: TrainConfig,
    *,
    train_indices: Sequence[int] | np.ndarray | None = None,
    val_indices: Sequence[int] | np.ndarray | None = None,
    out_dir: str | Path | None = None,
    inputs: RunInputs | None = None,
) -> TrainResult:
    """Train ``config`` on the ranks of ``comm``; every rank calls it and every rank gets the result.

    The training group's shape comes from ``config`` (:attr:`TrainConfig.training_group_shape`); a
    block/fold layout is the caller's business: ``comm`` is already one training group.
    train_indices: restrict training to these samples of the training files (k-fold); None = all.
    val_indices: validate on these samples *of the training files* (a k-fold's held-out fold) instead of
        the ``--val`` files; None = the ``--val`` files (or ``get_val()``), if any.
    out_dir: where this training writes ``history.json``, ``config.json``, ``model.pt``, ``checkpoints/``
        and ``logs/``; give every trial/fold its own. None = write nothing (no checkpoints).
    inputs: what the options cannot name (:class:`RunInputs`: a model object, data sources, epoch-end
        callbacks), from the Python API; None = the ambient ones (:func:`given_inputs`), else none.

    Returns the :class:`TrainResult` on every rank (the master computes it and broadcasts it). Raises
    :class:`RankFailure` on every rank when a rank failed (``report`` is True only on the failing rank).
    """
    mark("train_called")
    # Before any model module runs (it may import Keras): TensorFlow reads its thread-pool sizes and
    # backend choice from the environment once, when it starts; prepare_environment imports nothing.
    prepare_environment()
    group = comm.Dup()
    stop = Stop().install()
    ctx: RunContext | None = None
    aborting = False
    stopped = "failed"  # how the training ended, for its trackers
    limit = timeout_from_env()
    watchdog = Watchdog(limit, abort_on_expiry(group, lambda: ctx.role_label if ctx else "starting"),
                        start_timeout=start_timeout_from_env(limit))
    try:
        given = inputs if inputs is not None else _AMBIENT.get() or RunInputs()
        ctx, role = _set_up(group, config, train_indices, val_indices, out_dir, stop, watchdog, given)
        watchdog.started()  # set-up ended in a phase every rank passed: from here a wait has the run's limit
        local = role.run()
        stopped = getattr(local, "stopped_reason", None) or stopped
        top = ctx.group.top
        with watchdog.waiting("waiting for the result from the master"):
            wait_for_all(group)  # the master's last validation and checkpoint: its peers sleep meanwhile
            data = group.bcast(local.to_dict() if group.Get_rank() == top else None, root=top)
        result = TrainResult(**data)
        if group.Get_rank() == top:
            _log_summary(result)
        return result
    except RankFailure:
        raise
    except BaseException as e:  # anything else: report once and end the whole job
        aborting = True
        _abort(group, e, ctx.role_label if ctx else "starting")
        raise  # pragma: no cover - Abort does not return
    finally:
        watchdog.close()
        stop.close()
        if ctx is not None:
            ctx.tracker.close(stopped)  # a tracker that fails costs a warning, not the run
        if ctx is not None and ctx.session is not None:
            ctx.session.close()
        if not aborting:
            group.Free()


# ----------------------------------------------------------------------------------------------------
# set-up
# ----------------------------------------------------------------------------------------------------
def _phase(comm: Any, hierarchy: Hierarchy | None, fn: Callable[[], T], watchdog: Watchdog) -> T:
    """Run ``fn`` on every rank; if it failed anywhere, raise the first failure on every rank."""
    value: Any = None
    error = None
    try:
        value = fn()
    except Exception as e:  # noqa: BLE001 - every failure becomes one line on one rank (its log: the traceback)
        error = failure_line(e, log, "set-up failed")
    with watchdog.waiting("waiting for the other ranks to finish setting up"):
        wait_for_all(comm)  # ranks still importing or building their model take the cores of those waiting
        errors = comm.allgather(error)
    for r, err in enumerate(errors):
        if err is not None:
            role = hierarchy[r].label() if hierarchy is not None else "starting"
            raise RankFailure(err[0], r, role, exit_code=err[1], report=r == comm.Get_rank())
    return value


def _set_up(comm: Any, config: TrainConfig, train_indices: Any, val_indices: Any,
            out_dir: str | Path | None, stop: Stop, watchdog: Watchdog,
            inputs: RunInputs) -> tuple[RunContext, Any]:
    rank = comm.Get_rank()
    out = Path(out_dir) if out_dir is not None else None

    def check() -> Hierarchy:
        wanted = config.validate().training_group_shape
        if config.tensorboard or config.mlflow:
            tracking.check(config)  # a missing package: one line naming the extra, before anything is written
        hierarchy = describe(comm.Get_size(), wanted)
        if out is not None:
            top = rank == hierarchy.groups[0].top
            if top:  # before any rank writes: an earlier run here is continued, overwritten on request, or kept
                claim(out, config, chained=bool(os.environ.get(ENV_RUN_DIR)), python=inputs.python_api)
            out.mkdir(parents=True, exist_ok=True)
            if top:
                ckpt.write_json_atomic(out / CONFIG_FILE, config.to_dict())
        return hierarchy

    hierarchy = _phase(comm, None, check, watchdog)
    mark("checked")
    ctx = RunContext(comm, config, hierarchy, out, stop, watchdog=watchdog, inputs=inputs,
                     sleep_waits=sleeping_waits(comm))
    if hierarchy.shape.n_processes > 1 and not hierarchy.shape.allreduce:
        ctx.worker_comm = split_worker_groups(comm, hierarchy)  # collective: every rank of the group

    def start_session() -> Any:
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        if comm.Get_size() == MPI.COMM_WORLD.Get_size():  # a training of its own (optimize records its ranks)
            record_rank(rank, ctx.role_label, out)
        ctx.session = session.start(out, rank, ctx.role_label, log_level=config.log_level,
                                    timeline=config.timeline, monitor=config.monitor,
                                    world_size=comm.Get_size())
        return load_sources()

    def load_sources() -> Any:
        return inputs.model if inputs.model is not None else load_model_source(config.model)

    source = _phase(comm, hierarchy, start_session, watchdog)
    _watch_peers(comm, ctx.role_label)
    mark("model_source")

    device = select_device(comm, ctx.info.needs_device)  # collective; cannot fail on bad input
    if ctx.session is not None:
        ctx.session.set_device(device)  # the monitor samples this device; the trace records it

    def build() -> Any:
        return _build_role(ctx, source, device, train_indices, val_indices)

    builder = _phase(comm, hierarchy, build, watchdog)
    mark("built")
    sizes = comm.allgather(builder.backend.n_params)
    _phase(comm, hierarchy, lambda: _same_sizes(sizes, hierarchy), watchdog)

    checkpoint = _phase(comm, hierarchy, lambda: _find_restore(ctx) if rank == ctx.group.top else None, watchdog)
    checkpoint = comm.bcast(checkpoint, root=ctx.group.top)
    mark("restore_found")
    role = _phase(comm, hierarchy, lambda: builder.make(checkpoint), watchdog)
    if inputs.callbacks and rank == ctx.group.top:
        attach(role, inputs.callbacks)  # the rank that decides every epoch end runs them
    if config.tensorboard or config.mlflow:
        ctx.tracker = _phase(comm, hierarchy, lambda: _open_tracker(ctx, role), watchdog)
    mark("role_ready")
    if hierarchy.shape.allreduce:  # no master: the replicas agree on an engine and take rank 0's weights
        role.engine_name = comm.bcast(role.engine_name, root=0)
        _phase(comm, hierarchy, role.start, watchdog)
        return ctx, role
    # the top of the tree (the master, the uber-master, a solo rank) sets everyone's initial weights
    center = role.center if ctx.info.role is not Role.WORKER else np.empty(builder.backend.n_params, np.float32)
    with watchdog.waiting("waiting for the initial weights"):
        comm.Bcast(center, root=ctx.group.top)
    mark("weights_shared")
    trainer = role.worker if ctx.info.role is Role.SOLO else role if ctx.info.role is Role.WORKER else None
    if trainer is not None:
        trainer.rule.start(center)
        _phase(comm, hierarchy, lambda: builder.restore_worker(trainer, checkpoint), watchdog)
    else:
        _phase(comm, hierarchy, lambda: None, watchdog)
    return ctx, role


def _watch_peers(comm: Any, role: str) -> None:
    """A training of its own watches its peers (:mod:`nnlo.liveness`; a search's blocks are watched by the
    search): collective over the world."""
    from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

    if comm.Get_size() == MPI.COMM_WORLD.Get_size():
        liveness.start(MPI.COMM_WORLD, role)


def _open_tracker(ctx: RunContext, role: Any) -> Trackers:
    """The experiment trackers of the rank that writes the history (where the role starts: its restored epoch
    and update count); none on the other ranks."""
    if ctx.rank != ctx.group.top:
        return Trackers(())

    name = ctx.config.trial_name or model_name(ctx.config.model)
    return tracking.for_training(ctx.config, ctx.out_dir, name, epoch=int(role.epoch), updates=int(role.updates))


def _same_sizes(sizes: list[int], hierarchy: Hierarchy) -> None:
    if len(set(sizes)) > 1:
        detail = ", ".join(f"rank {r}: {n}" for r, n in enumerate(sizes))
        raise ConfigError(f"the ranks built models of different sizes ({detail}); "
                          "get_model() must not be random in shape")


def _find_restore(ctx: RunContext) -> str | None:
    found = ckpt.restore_point(ctx.config.restore, ctx.out_dir)
    if found is None:
        if ctx.config.restore:
            log.info("no complete checkpoint in %s yet: starting fresh", ctx.out_dir)
        return None
    log.info("restoring from %s", found)
    return str(found)


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


class _Builder:
    """Builds this rank's role object (master or worker) from the loaded model source."""

    def __init__(self, ctx: RunContext, backend: Any, data: Any, device: str = "cpu") -> None:
        self.ctx, self.backend, self.data, self.device = ctx, backend, data, device

    def make(self, checkpoint: str | None) -> Any:
        ctx = self.ctx
        if ctx.hierarchy.shape.allreduce:
            from nnlo.training.allreduce import AllreduceReplica, choose_engine  # lazy: h5py (nnlo.data's HDF5 layer)

            loader, validator = self.data
            return AllreduceReplica(ctx, self.backend, loader, validator,
                                    choose_engine(ctx, self.device, self.backend.name), checkpoint, self.device)
        manifest = ckpt.read_manifest(checkpoint) if checkpoint else None
        if ctx.group.uber_master is not None and ctx.info.role is not Role.WORKER:
            if ctx.info.role is Role.UBER_MASTER:
                state = ckpt.read_part(checkpoint, ckpt.part_name("master")) if checkpoint else None
                return submaster.UberMaster(ctx, self.backend, self.data, restored=state)
            assert ctx.info.master is not None  # a sub-master's index in its group
            name = submaster.part_name(ctx.info.master)
            has_part = checkpoint is not None and (Path(checkpoint) / name).is_file()
            state = ckpt.read_part(checkpoint, name) if checkpoint is not None and has_part else None
            return submaster.SubMaster(ctx, self.backend, restored=state,
                                       epoch=int(manifest["epoch"]) if manifest else 0, validator=self.data)
        if ctx.info.role is Role.MASTER:
            state = ckpt.read_part(checkpoint, ckpt.part_name("master")) if checkpoint else None
            return Master(ctx, self.backend, self.data, restored=state)
        position = (int(manifest["epoch"]), 0) if manifest else (0, 0)
        loader, validator = self.data
        if ctx.info.role is Role.SOLO:  # a group of one rank: the master's part around its own worker

            state = ckpt.read_part(checkpoint, ckpt.part_name("master")) if checkpoint else None
            worker = SoloWorker(ctx, self.backend, loader, Alone(self.backend), position, validator)
            return Solo(ctx, self.backend, validator, worker, restored=state)
        link = Link(ctx.comm, watchdog=ctx.watchdog, sleep=ctx.sleep_waits)
        rule = make_worker_rule(self.backend, ctx.config, ctx.n_workers, link, ctx.master_rank)
        if ctx.worker_comm is not None:
            from nnlo.training.allreduce import choose_engine  # lazy: h5py (nnlo.data's HDF5 layer)

            return GroupWorker(ctx, self.backend, loader, rule, position, validator,
                               engine_name=choose_engine(ctx, self.device, self.backend.name), device=self.device)
        return Worker(ctx, self.backend, loader, rule, position, validator)

    def restore_worker(self, worker: Any, checkpoint: str | None) -> None:
        if not checkpoint:
            return
        ctx = self.ctx
        manifest = ckpt.read_manifest(checkpoint)
        name = ckpt.part_name("worker", ctx.worker_index)
        same = manifest.get("n_workers") == len(ctx.group.workers) and manifest.get("mode") == ctx.config.effective_mode
        if not same or not (Path(checkpoint) / name).is_file():
            log.warning("checkpoint %s was written by %s worker(s) in mode %s; workers restart epoch %d with fresh "
                        "optimizer state", checkpoint, manifest.get("n_workers"), manifest.get("mode"),
                        int(manifest["epoch"]) + 1, extra=ONCE)
            return
        state = ckpt.read_part(checkpoint, name)
        worker.load_state_dict(state)
        pos = state["position"]
        epoch, batch = int(pos["epoch"]), int(pos["batch"])
        if epoch < int(manifest["epoch"]):  # its epoch was completed after it parked at the barrier
            epoch, batch = int(manifest["epoch"]), 0
        worker.epoch, worker.batch = epoch, batch


def _build_role(ctx: RunContext, source: Any, device: str, train_indices: Any, val_indices: Any) -> _Builder:
    cfg = ctx.config
    _seed(cfg.seed)
    model = source.build(**cfg.model_args)
    if ctx.hierarchy.shape.allreduce or cfg.n_processes > 1:  # --scale-lr: by the ranks sharing a batch
        from nnlo.training.allreduce import scaled_config  # lazy: h5py (nnlo.data's HDF5 layer)

        cfg = scaled_config(cfg, ctx.comm.Get_size() if ctx.hierarchy.shape.allreduce else cfg.n_processes)
    backend = make_backend(model, cfg, device)
    _seed(cfg.seed + 7919 * (ctx.rank + 1))  # distinct dropout streams per rank, reproducible per seed
    if ctx.hierarchy.shape.allreduce:  # every replica trains, and validates its share of the samples
        data: Any = (_training(ctx, source, train_indices), _validation(ctx, source, val_indices))
        return _Builder(ctx, backend, data, device)
    # every rank evaluates its share of the master's validations (nnlo.training.validation); only workers train
    validator = _validation(ctx, source, val_indices)
    data = (_training(ctx, source, train_indices), validator) if ctx.info.trains else validator
    return _Builder(ctx, backend, data, device)


def _plan(ctx: RunContext, source: Any, which: str) -> Any:
    """The run's ``which`` files and datasets (:func:`nnlo.models.data_plan`: options, then the model module)."""
    from nnlo.data.cache import cached  # lazy: h5py (nnlo.data's HDF5 layer)

    plan = data_plan(ctx.config, source, need=(which,))
    cache = ctx.config.cache_dir
    return replace(plan, train=cached(plan.train, cache) if plan.train is not None else None,
                   val=cached(plan.val, cache) if plan.val is not None else None)


def _given(ctx: RunContext, source: Any, given: Any, role: str) -> Any:
    """A caller's data (:class:`RunInputs`) as the loaders read it: a data source adapted, a list of HDF5
    files opened with the run's dataset names (``--features-name``, ``get_features()``, ...)."""
    from nnlo.data.source import as_dataset  # lazy: h5py (nnlo.data's HDF5 layer)

    if isinstance(given, (list, tuple)) and given and all(isinstance(f, (str, Path)) for f in given):
        from nnlo.data import H5Dataset  # lazy: h5py (nnlo.data's HDF5 layer)
        from nnlo.data.cache import cached  # lazy: h5py (nnlo.data's HDF5 layer)

        plan = data_plan(ctx.config, source, need=())
        files = cached([Path(f) for f in given], ctx.config.cache_dir)
        return H5Dataset(files, features=plan.features, labels=plan.labels, preload=ctx.config.in_memory)
    return as_dataset(given, role)


def _training(ctx: RunContext, source: Any, indices: Any) -> Any:
    from nnlo.data import H5Dataset, ShardedLoader  # lazy: h5py (nnlo.data's HDF5 layer)

    cfg = ctx.config
    if ctx.inputs.train is not None:
        dataset = _given(ctx, source, ctx.inputs.train, "training")
    else:
        plan = _plan(ctx, source, "train")
        if plan.train is None:
            raise ConfigError("no training data: pass --train LIST (a text file naming HDF5 files) or define "
                              "get_train()")
        dataset = H5Dataset(plan.train, features=plan.features, labels=plan.labels, preload=cfg.in_memory)
    assert ctx.worker_index is not None
    # Shard by logical worker over every worker of the training group; the K ranks of an all-reduce group
    # (or all replicas in all-reduce mode) split each batch of K x --batch samples (--batch is per rank).
    n_shards, index, members, member = ctx.data_split
    return ShardedLoader(dataset, indices, n_shards, index, cfg.batch * members, seed=cfg.seed,
                         group=(members, member))


def _validation(ctx: RunContext, source: Any, indices: Any) -> Any:
    from nnlo.data import H5Dataset  # lazy: h5py (nnlo.data's HDF5 layer)

    cfg = ctx.config
    preload = cfg.in_memory
    dataset: Any = None
    if indices is not None:
        if ctx.inputs.train is not None:
            dataset = _given(ctx, source, ctx.inputs.train, "training")
        else:
            plan = _plan(ctx, source, "train")
            if plan.train is None:
                raise ConfigError("val_indices select training samples, but there is no training data list")
            dataset = H5Dataset(plan.train, features=plan.features, labels=plan.labels, preload=preload)
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    else:
        if ctx.inputs.val is not None:
            dataset = _given(ctx, source, ctx.inputs.val, "validation")
        else:
            plan = _plan(ctx, source, "val")
            if plan.val is not None:
                dataset = H5Dataset(plan.val, features=plan.features, labels=plan.labels, preload=preload)
        if dataset is None:
            for flag, rule in (("--early-stopping", cfg.early_stopping), ("--target-metric", cfg.target_metric)):
                if rule and rule.strip().startswith("val_"):
                    raise ConfigError(f"{flag} {rule} needs validation data; pass --val LIST")
            log.warning("no validation data (--val): the history holds training metrics only", extra=ONCE)
            return None
        idx = np.arange(len(dataset), dtype=np.int64)
    if idx.size == 0:
        raise ConfigError("the validation set is empty; pass a --val list with samples")
    return Validator(dataset, idx, max(cfg.batch, 256))


# ----------------------------------------------------------------------------------------------------
# endings
# ----------------------------------------------------------------------------------------------------
def summary_line(result: TrainResult) -> str:
    """The training's last line: done (and why), or stopped early with a checkpoint to continue from."""
    final = result.final
    metrics = ", ".join(f"{k} {final[k]:.4f}" for k in ("val_loss", "val_accuracy", "loss") if final.get(k) is not None)
    figures = f"{result.epochs_done} epoch(s), {result.updates} updates, {result.seconds:.1f} s"
    if result.resumable:
        why = "at the deadline" if result.stopped_reason == "deadline" else "by a stop signal"
        return (f"stopped {why} after {figures}, with a checkpoint: restoring it (--restore auto) continues the "
                f"run{f'; {metrics}' if metrics else ''}")
    return f"done: {result.stopped_reason} after {figures}{f'; {metrics}' if metrics else ''}"


def _log_summary(result: TrainResult) -> None:
    log.info("%s", summary_line(result))
    for label, path in (("history", result.history_path), ("model", result.model_path),
                        ("checkpoint", result.checkpoint)):
        if path:
            log.info("%s: %s", label, path)


def _abort(comm: Any, exc: BaseException, role: str) -> None:
    message, code = failure_line(exc, log, "aborting")
    if isinstance(exc, KeyboardInterrupt):
        message, code = "interrupted", 130
    abort_rank(comm, role, message, code)

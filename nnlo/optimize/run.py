"""The entry every rank of ``nnlo optimize`` calls: roles, communicators, then coordinator or block.

Input is checked identically on every rank before any communicator exists (so bad input gives every rank
the same one-line error and nobody hangs); rank 0 alone opens a sample of the data (``--train``/``get_train()``)
in that same check, so a missing file stops every rank with exit 2 before the world splits; checks only the
coordinator can do (the saved state) are broadcast, so blocks stop with the coordinator's error instead of
waiting for work.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from nnlo import liveness
from nnlo.config import deadline_from_env
from nnlo.contract import BEST_FILE, ENV_RUN_DIR, SEARCH_JOURNAL, TRIALS_CSV, TRIALS_JSON
from nnlo.device import world_node_place
from nnlo.errors import ConfigError, NnloError
from nnlo.models import data_plan, load_model_source
from nnlo.observe import tracking
from nnlo.observe.logs import speaking_for_the_run
from nnlo.observe.progress import Progress
from nnlo.optimize import space as space_mod
from nnlo.optimize.assign import make_policy
from nnlo.optimize.block import run_block
from nnlo.optimize.coordinator import Coordinator
from nnlo.optimize.engines import ENGINES, Engine, make_engine
from nnlo.optimize.failures import FailureRule
from nnlo.optimize.options import OptimizeOptions, check_schedule, trial_overrides
from nnlo.optimize.placement import TraitsOf, block_types
from nnlo.optimize.placement.probe import rank_facts
from nnlo.optimize.proposers import MpiProposers, run_proposer
from nnlo.optimize.protocol import rank_label
from nnlo.optimize.results import Objective
from nnlo.optimize.runners import HookRunner, TrainRunner
from nnlo.optimize.schedules import make_schedule
from nnlo.optimize.search import Search, describe_schedule
from nnlo.optimize.shared import participant_name, shared_search
from nnlo.optimize.state import STATE_FILE, load_state
from nnlo.optimize.tracking import SearchTracking
from nnlo.optimize.trial_files import TRIALS_DIR
from nnlo.rankfate import record_rank
from nnlo.roles import Role, RoleError, Shape, describe
from nnlo.stop import Stop
from nnlo.training.driver import given_inputs
from nnlo.training.failure import describe_exception

log = logging.getLogger("nnlo.optimize")


def build_engine(opts: OptimizeOptions, space: space_mod.Space) -> Engine:
    """The search's engine as the options ask (a proposer rank needs only this, not the search's files)."""
    if opts.hyper_opt not in ENGINES:
        raise ConfigError(f"--hyper-opt {opts.hyper_opt!r} is unknown; use one of {', '.join(ENGINES)}")
    return make_engine(opts.hyper_opt, space, opts.seed, estimator=opts.estimator,
                       n_initial_points=opts.initial_points(), population=opts.ga_populations)


def build_search(opts: OptimizeOptions, space: space_mod.Space, *, engine: Engine | None = None, stop: Any = None,
                 **given: Any) -> Search:
    """The search the options describe, with its collaborators made here or ``given`` (:class:`Search`'s
    keyword arguments: blocks, assign, block_types, traits_of, deadline, propose); a shared search's storage is
    the journal in ``out_dir``, its wait for other participants' trials ending at ``stop``."""
    engine = engine if engine is not None else build_engine(opts, space)
    common: dict[str, Any] = dict(num_iterations=opts.num_iterations, target=opts.target_objective,
                                  n_fold=opts.n_fold, schedule=make_schedule(opts.schedule, space),
                                  failures=FailureRule.parse(opts.max_failures), **given)
    if opts.shared:  # one search across many jobs: the journal in out_dir is the state
        return shared_search(engine, Objective.parse(opts.fom), out_dir=opts.out_dir,
                             participant=participant_name(opts.participant), lease_s=opts.lease_s, stop=stop,
                             **common)
    return Search(engine, Objective.parse(opts.fom), out_dir=opts.out_dir, **common)


def resumes(opts: OptimizeOptions) -> bool:
    """Whether this job continues the search in ``out_dir`` (asked, or inside a chained job)."""
    return opts.restore or bool(os.environ.get(ENV_RUN_DIR))


def search_options(opts: OptimizeOptions) -> OptimizeOptions:
    """The options the search runs with: a continued search of its own keeps its initial design
    (:func:`as_started`)."""
    return as_started(opts) if resumes(opts) and not opts.shared else opts


def prepare_search(opts: OptimizeOptions, space: space_mod.Space, **given: Any) -> Search:
    """The coordinator's search, restored when asked (or inside a chained job) and refused over old data
    (``given``: :func:`build_search`'s collaborators)."""
    resume = resumes(opts)
    opts = search_options(opts)
    search = build_search(opts, space, **given)
    has_state = (opts.out_dir / STATE_FILE).exists()
    has_journal = (opts.out_dir / SEARCH_JOURNAL).exists()
    if opts.shared or has_journal:  # joining is resuming: the journal is the state (--opt-restore implied)
        if not opts.shared:
            raise ConfigError(f"{opts.out_dir} holds a shared search ({SEARCH_JOURNAL}); add --shared to join "
                              "it, or choose another --output")
        if has_state and not has_journal:
            raise ConfigError(f"{opts.out_dir} holds a search started without --shared ({STATE_FILE}); resume "
                              "it without --shared, or choose another --output for a shared search")
        search.restore()
        return search
    if has_state and opts.overwrite and not resume:
        clear_search(opts.out_dir)
        has_state = False
    if has_state and not resume:
        raise ConfigError(
            f"{opts.out_dir} already holds a search ({STATE_FILE}); resume it with --opt-restore, choose another "
            "--output, or pass --overwrite to start afresh (deleting its trials)"
        )
    if resume and search.restore():
        log.info("resumed the search in %s: %d trial(s) done, %d to re-run", opts.out_dir,
                 len(search.finished), len(search.requeue))
    elif opts.restore:
        log.warning("--opt-restore: no %s in %s yet; starting a new search", STATE_FILE, opts.out_dir)
    return search


def as_started(opts: OptimizeOptions) -> OptimizeOptions:
    """The options of a search continued from its state in ``out_dir`` (a larger ``--num-iterations`` is the
    common case): the random first points it started with stay its initial design, however many the new budget
    would derive (``--n-initial-points`` given says it explicitly and is taken as given)."""
    if opts.n_initial_points is not None:
        return opts
    state = load_state(opts.out_dir)
    started = (state or {}).get("engine_options", {}).get("n_initial_points")
    return opts if started is None else replace(opts, n_initial_points=int(started))


def clear_search(out_dir: Path) -> None:
    """Delete what a search wrote into ``out_dir`` (``--overwrite``): its state, tables and trials' folders
    (whose checkpoints the new search's trials of the same ids would otherwise resume)."""
    for name in (STATE_FILE, TRIALS_JSON, TRIALS_CSV, BEST_FILE, TRIALS_DIR):
        path = out_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    log.info("--overwrite: deleted the earlier search in %s", out_dir)


def check_fold_groups(shape: Shape) -> None:
    """Refuse a block too small for its fold groups, in the terms of the optimize options."""
    f = shape.n_fold
    option = "--block-size" if shape.block_sizes is None else f"--block-sizes {shape.blocks_text()}: size"
    for bs in shape.distinct_block_sizes:
        if bs % f:
            return  # describe() explains the divisibility itself
        train = Shape(n_masters=shape.n_masters, n_processes=shape.n_processes)
        try:
            train.workers_in_group(bs // f)
        except RoleError:
            need = train.smallest_group
            servers = {0: "an all-reduce group", 1: "1 master"}.get(shape.n_masters, f"{shape.n_masters} masters")
            groups = (f"fold groups of {bs // f} rank(s) ({bs} / --n-fold {f})" if f > 1
                      else f"blocks of {bs} rank(s)")
            raise ConfigError(
                f"{option} {bs} gives {groups}, but a training group needs at least {need} ranks ({servers} "
                f"plus a worker); " + (f"use --block-size {f * need}" if shape.block_sizes is None
                                       else f"use block sizes of at least {f * need}")
            ) from None


def load_space(opts: OptimizeOptions, module: Any) -> space_mod.Space:
    if opts.space:
        return space_mod.from_toml(opts.space)
    return space_mod.from_model(module)


def optimize(world: Any, opts: OptimizeOptions, config: Any, progress_stream: Any = None,
             inputs: Any = None, space: space_mod.Space | None = None) -> int:
    """Run the search in ``world``; every rank calls it and gets the same exit code.

    ``inputs`` (:class:`nnlo.training.context.RunInputs`) and ``space``: a Python caller's model object, data
    sources and search space (:func:`nnlo.optimize` in :mod:`nnlo.api`); None: as the options say."""
    from nnlo.data.check import check_plan  # lazy: h5py

    rank = world.Get_rank()

    def check() -> tuple[Any, Any, Any, bool, list[str]]:
        shape = Shape.for_run(mode=config.mode, n_masters=config.n_masters, n_processes=config.n_processes,
                              block_size=None if opts.block_sizes else opts.block_size, n_fold=opts.n_fold,
                              search=True, block_sizes=opts.block_sizes, proposers=opts.proposers)
        check_fold_groups(shape)
        hierarchy = describe(world.Get_size(), shape)
        source = inputs.model if inputs is not None and inputs.model is not None else load_model_source(config.model)
        module = source.module
        given_space = space if space is not None else load_space(opts, module)
        Objective.parse(opts.fom)
        hook = module is not None and callable(getattr(module, "evaluate", None))
        check_placement_hooks(given_space, module, str(config.model))
        check_schedule(opts.schedule, given_space.names, module, config.model)
        notes = trial_overrides(config, opts.out_dir, opts.name)
        if not hook:
            config.validate()
            if rank == 0 and (inputs is None or inputs.train is None):  # the data, once, before the world
                check_plan(data_plan(config, source))  # splits (a missing file: every rank exits 2)
        return hierarchy, module, given_space, hook, notes

    hierarchy, module, space, hook, notes = _on_every_rank(world, check)
    facts = world.allgather(rank_facts(hierarchy[rank].needs_device))  # each block's hardware, for placement
    if rank == 0:
        for note in notes:
            sys.stderr.write(f"nnlo: warning: {note}\n")
        sys.stderr.flush()


    from mpi4py import MPI  # lazy: mpi4py

    info = hierarchy[rank]
    undefined = MPI.UNDEFINED
    block_comm = world.Split(undefined if info.block is None else info.block, rank)
    group_comm = world.Split(undefined if info.group is None else info.group, rank)
    label = _record(rank, info, opts.out_dir)
    liveness.start(world, label)  # every rank watches its peers: a dead one ends the job (collective)

    # every rank: the coordinator decides on the stop, a block's trainings install their own over this one
    stop = Stop(deadline_from_env(opts.deadline))
    search: Search | None = None
    proposers: MpiProposers | None = None
    tracking: SearchTracking | None = None
    error: str | None = None
    if info.role is Role.COORDINATOR:
        try:
            opts.out_dir.mkdir(parents=True, exist_ok=True)
            engine = build_engine(search_options(opts), space)
            if hierarchy.proposers:  # the points come from the proposer ranks, kept busy by the coordinator
                proposers = MpiProposers(world, hierarchy.proposers, engine)
            search = prepare_search(opts, space, engine=engine, stop=stop,
                                    propose=None if proposers is None else proposers.propose,
                                    deadline=None if stop.deadline is None else stop.deadline - stop.safety_s,
                                    **placement(opts, config, hierarchy, facts, space, module, hook))
            tracking = _tracking(config, opts)
        except NnloError as e:
            error = str(e)
        except OSError as e:
            error = f"cannot write the output directory {opts.out_dir}: {e.strerror}; choose another --output"
    error = world.bcast(error, root=0)
    if error:
        raise ConfigError(error)

    # blocks share nodes: each node's workers are counted over the world when they pick their GPUs
    with world_node_place(world, info.needs_device), stop:
        if info.role is Role.COORDINATOR:
            assert search is not None
            log.info("%s; %s search of %d trial(s) over %s, fom %s%s; results in %s", hierarchy.summary(),
                     opts.hyper_opt, opts.num_iterations, ", ".join(space.names), search.objective,
                     _schedule_note(search), opts.out_dir)
            progress = _progress(opts.num_iterations, progress_stream)
            log.info("assignment: %s%s", search.assign.name,
                     f"; {len(hierarchy.proposers)} proposer ranks" if hierarchy.proposers else "")
            with liveness.last_words(_last_words(search)):
                return Coordinator(world, hierarchy, search, stop, grace_s=opts.grace_s, progress=progress,
                                   proposers=proposers, tracking=tracking).run()
        if info.role is Role.PROPOSER:
            return run_proposer(world, 0, build_engine(opts, space))
        keep = 2 if opts.schedule.name == "pbt" else 1  # a PBT donor's checkpoint may be copied while it trains on
        runner: HookRunner | TrainRunner = (HookRunner(module, Objective.parse(opts.fom).name) if hook
                                            else TrainRunner(config, opts.seed, opts.name, keep))
        if inputs is not None and not hook:
            runner = _GivenInputsRunner(config, opts.seed, opts.name, inputs, keep)
        # the trainings' run-wide warnings (every block gives them alike): on the screen from one rank that trains
        with speaking_for_the_run(rank == hierarchy.blocks[0][0]):
            return run_block(world, hierarchy, block_comm, group_comm, runner, opts.out_dir)


def check_placement_hooks(space: space_mod.Space, module: Any, where: str) -> None:
    """The model module's placement hooks answer for a few points of the space (same points on every rank),
    so a broken one stops the search before it starts, with one line naming it."""
    import numpy as np  # lazy: numpy

    traits = TraitsOf(space, module, where=where)
    if traits.declared:
        rng = np.random.default_rng(0)
        for _ in range(3):
            traits(space.sample(rng))


def placement(opts: OptimizeOptions, config: Any, hierarchy: Any, facts: list[Any], space: space_mod.Space,
              module: Any, hook: bool) -> dict[str, Any]:
    """The search's placement (:class:`Search`'s keyword arguments): this job's blocks and their types (the
    search records what each job cost on them), trials read through the model module's hooks
    (:mod:`nnlo.optimize.placement.traits`), and the ``--assign`` policy over them."""
    types = block_types(hierarchy.blocks, facts)
    traits_of = TraitsOf(space, module, where=str(config.model))
    if len(set(types)) > 1:
        log.info("block types: %s", "; ".join(f"{b}: {t}" for b, t in enumerate(types)))

    def checkpoint_share(params: Any) -> float:
        """The share of a trial before it can be resumed: a hook's whole evaluation; a training's first epoch
        (stopped by the deadline, it checkpoints where it is)."""
        if hook:
            return 1.0
        return 1.0 / max(1, int(params.get("epochs", config.epochs)))

    return {"blocks": len(hierarchy.blocks), "block_types": types, "traits_of": traits_of,
            "assign": make_policy(opts.assign, space, types, traits_of, checkpoint_share)}


def _tracking(config: Any, opts: OptimizeOptions) -> SearchTracking:
    """The search's experiment trackers (``--tensorboard``, ``--mlflow``), on the coordinator."""
    fields = {"hyper_opt": opts.hyper_opt, "num_iterations": opts.num_iterations, "fom": opts.fom,
              "n_fold": opts.n_fold, "schedule": opts.schedule.name}
    return SearchTracking(tracking.for_search(config, opts.out_dir, opts.name, fields), opts.out_dir, opts.n_fold)


class _GivenInputsRunner(TrainRunner):
    """Trains each trial with a Python caller's model object and data sources (``nnlo.optimize``)."""

    def __init__(self, config: Any, seed: int, name: str, inputs: Any, keep: int = 1) -> None:
        super().__init__(config, seed, name, keep)
        self.inputs = inputs

    def n_samples(self) -> int:
        train = self.inputs.train
        if train is None:
            return super().n_samples()
        if isinstance(train, list):  # HDF5 files: their length, read with the run's dataset names
            from nnlo.data import H5Dataset  # lazy: h5py

            model = self.inputs.model or load_model_source(self.config.model)
            with H5Dataset(train, features=data_plan(self.config, model, need=()).features, labels=None) as ds:
                return len(ds)
        from nnlo.data.source import as_dataset  # lazy: h5py

        return len(as_dataset(train))

    def run(self, *args: Any, **kwargs: Any) -> Any:
        with given_inputs(self.inputs):
            return super().run(*args, **kwargs)


class InputError(NnloError):
    """Bad input found on some rank, raised on every rank with the first rank's message and exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def _on_every_rank(world: Any, fn: Any) -> Any:
    """Run a check on every rank; if it failed anywhere, raise the first failure everywhere.

    The checks are deterministic, but a file system can answer differently on different nodes: agreeing
    first means no rank goes on into a collective that the failed ranks never join (no hang).
    """
    value, error = None, None
    try:
        value = fn()
    except (NnloError, RoleError) as e:
        error = describe_exception(e)
    errors = world.allgather(error)
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise InputError(first[0], first[1])
    return value


def _schedule_note(search: Search) -> str:
    if not search.staged:
        return ""
    budgets = ", ".join(str(b) for b in search.schedule.budgets)
    return f"; schedule {describe_schedule(search.schedule.spec)} (rungs at {budgets} epochs)"


def _last_words(search: Search) -> Any:
    """What the coordinator does when a rank of its job died (:mod:`nnlo.liveness`): its storage's last words
    (a shared search gives its running trials back to the pool at once, never renewing a dead trial's lease;
    a search of its own saves its state, and its running trials are re-run by the next job)."""
    return search.last_words


def _record(rank: int, info: Any, out_dir: Path) -> str:
    """Record this rank for naming it should it be killed (:mod:`nnlo.rankfate`): "coordinator" or
    "block B <role>", so a dead block member is named with its block; returns that label."""
    label = info.label()
    if info.block is not None and info.role is not Role.COORDINATOR:
        label = rank_label(info.block, label.split(":", 1)[-1])
    record_rank(rank, label, out_dir)
    return label


def _progress(total: int, stream: Any) -> Any:
    return Progress("optimize", stream=stream if stream is not None else sys.stderr, total=total)

"""The options of a search: as the user gave them (:class:`SearchConfig`), and resolved for a run
(:class:`OptimizeOptions`).

Why two: a submitted search is parsed once on the login node and stored in its run directory
(``spec.json``), but some of its values are only known inside the job — the output folder defaults to the
run directory (``$NNLO_RUN_DIR``), the deadline comes from the job's walltime. :class:`SearchConfig` is the
typed, JSON-able record of the command line (the training options are a :class:`~nnlo.config.TrainConfig`);
:meth:`SearchConfig.options` resolves it where the search runs.
"""
from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnlo.config import TrainConfig, known_fields
from nnlo.contract import ENV_RUN_DIR, LEASE_TIMEOUT_S
from nnlo.contract import MAX_FAILURES as FAILURES
from nnlo.errors import ConfigError
from nnlo.models import run_name
from nnlo.optimize.failures import FailureRule
from nnlo.optimize.schedules import (
    DEFAULT_ETA,
    DEFAULT_MIN_EPOCHS,
    PBT_POPULATION,
    SCHEDULES,
    ScheduleError,
    ScheduleSpec,
    pbt_interval,
)
from nnlo.optimize.schedules import PBT_STEPS as PBT_STEPS  # re-exported: nnlo_sched's help of --pbt-interval
from nnlo.roles import RoleError, Shape

#: the policies that assign trials to blocks (:mod:`nnlo.optimize.assign`), and ``--assign``'s choices
POLICIES = ("fifo", "hardware-aware")
ASSIGN_CHOICES = ("auto", *POLICIES)

#: the keywords an objective hook must take to be trained in stages by a schedule
STAGED_HOOK_KEYWORDS = ("epochs", "state")


def hook_keywords(evaluate: Any) -> set[str]:
    """Which of :data:`STAGED_HOOK_KEYWORDS` ``evaluate`` accepts (all of them with ``**kwargs``)."""
    try:
        params = inspect.signature(evaluate).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return set(STAGED_HOOK_KEYWORDS)
    return {p.name for p in params if p.name in STAGED_HOOK_KEYWORDS}


@dataclass
class OptimizeOptions:
    """Options of the search itself, resolved for this run (the training options live in the TrainConfig)."""

    out_dir: Path
    block_size: int
    name: str = "search"  # the search's name: --trial-name, else the model's get_name() (or file stem)
    n_fold: int = 1
    hyper_opt: str = "bayesian"
    estimator: str = "GP"
    num_iterations: int = 10
    target_objective: float | None = None
    fom: str = "val_loss"
    space: str | None = None
    ga_populations: int = 10
    n_initial_points: int | None = None
    seed: int = 0
    restore: bool = False
    overwrite: bool = False  # start afresh in an out_dir that holds a search (its files deleted first)
    max_failures: str = FAILURES  # FRACTION[:MIN]: when failed trials stop the search (nnlo.optimize.failures)
    deadline: float | None = None
    grace_s: float = 60.0
    shared: bool = False  # one search across many jobs: the journal in out_dir is the state
    participant: str | None = None  # None: $NNLO_PARTICIPANT, else <hostname>-<pid>
    lease_s: float = LEASE_TIMEOUT_S
    block_sizes: tuple[int, ...] | None = None  # heterogeneous blocks (--block-sizes), else block_size each
    proposers: int = 1
    assign: str = "auto"
    schedule: ScheduleSpec = field(default_factory=ScheduleSpec)  # --schedule and its options, resolved
    extra: dict[str, Any] = field(default_factory=dict)

    def initial_points(self) -> int:
        """Random proposals before the model is used: 10 (skopt's default), at most a third of the budget."""
        if self.n_initial_points is not None:
            return self.n_initial_points
        return max(2, min(10, self.num_iterations // 3))


def default_out_dir(name: str) -> Path:
    """``$NNLO_RUN_DIR`` inside a submitted run, else ``./optimize-<name>`` (name: :func:`search_name`)."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if run_dir:
        return Path(run_dir)
    return Path(f"optimize-{name or 'run'}")


def search_name(train: TrainConfig) -> str:
    """The search's name: ``--trial-name``, else the model module's ``get_name()``, else the file's stem.
    It names the default output folder and every trial's training (``<name>-<trial>-fold-<f>``)."""
    return run_name(train.model, train.trial_name)


def trial_overrides(train: TrainConfig, out_dir: Path, name: str) -> list[str]:
    """The training options a search sets per trial, as the user gave them: ``--restore`` is refused (one
    line), ``--checkpoint``/``--trial-name`` are mapped; returns one warning line per mapped option."""
    if train.restore:
        raise ConfigError(f"--restore {train.restore} does not apply to nnlo optimize: every trial resumes its "
                          "own checkpoint; resume a search with --opt-restore (and the same --output)")
    notes = []
    if train.checkpoint:
        notes.append(f"--checkpoint {train.checkpoint}: a search checkpoints each trial in its own folder, "
                     f"{out_dir}/trials/<trial>/fold-<f>/checkpoints (every --checkpoint-interval epochs); "
                     f"{train.checkpoint} is not used")
    if train.trial_name:
        notes.append(f"--trial-name {train.trial_name}: names the search ({name}; trials {name}-<trial>-fold-<f>)"
                     ", not one training")
    return notes


def check_schedule(spec: ScheduleSpec, space_names: list[str], module: Any, model: str) -> None:
    """What a schedule needs of the model and the space, refused in one line before any trial runs.

    A schedule trains each trial in stages and resumes it from its checkpoint: a training always can (its
    checkpoints are complete), an objective hook only if its ``evaluate`` takes ``epochs=`` and ``state=``.
    The epochs are the schedule's to set: a search parameter named ``epochs`` would fight it.
    """
    if not spec.staged:
        return
    if "epochs" in space_names:
        raise ConfigError(f"--schedule {spec.name} sets each trial's epochs (its budget); remove the search "
                          "parameter 'epochs' (and use --epochs for the most a trial trains), or use --schedule full")
    evaluate = getattr(module, "evaluate", None) if module is not None else None
    if callable(evaluate):
        missing = [k for k in STAGED_HOOK_KEYWORDS if k not in hook_keywords(evaluate)]
        if missing:
            raise ConfigError(
                f"--schedule {spec.name} trains trials in stages and resumes them from checkpoints, but "
                f"{model}'s evaluate() takes no {' or '.join(k + '=' for k in missing)} (it cannot save one); "
                "give it epochs= and state= (see docs/optimization.md, stopping bad trials early) or use "
                "--schedule full")


@dataclass(frozen=True)
class SearchConfig:
    """``nnlo optimize``'s own options as given on its command line (None: the option's default)."""

    block_size: int | None = None
    n_fold: int = 1
    num_iterations: int = 10
    hyper_opt: str = "bayesian"
    estimator: str = "GP"
    n_initial_points: int | None = None
    ga_populations: int = 10
    fom: str = "val_loss"
    target_objective: float | None = None
    space: str | None = None  # a TOML search space; None: the model module's get_model.parameter_range
    opt_restore: bool = False
    overwrite: bool = False  # --overwrite: start afresh in an --output folder that holds a search
    output: str | None = None  # None: $NNLO_RUN_DIR inside a submitted run, else ./optimize-<model>
    shared: bool = False  # join the shared search in the output folder (nnlo.optimize.shared)
    participant: str | None = None  # None: $NNLO_PARTICIPANT, else <hostname>-<pid>
    lease_timeout: float = LEASE_TIMEOUT_S  # seconds before a silent participant's trial goes back to the pool
    block_sizes: tuple[int, ...] | None = None  # --block-sizes 6,6,3,3 (exclusive with --block-size)
    proposers: int = 1  # --proposers P: P > 1 adds P proposer ranks after the coordinator
    assign: str = "auto"  # --assign auto|fifo|hardware-aware
    schedule: str = "full"  # --schedule full|asha|hyperband|pbt (nnlo.optimize.schedules)
    min_epochs: int | None = None  # --min-epochs: asha/hyperband's lowest rung (None: DEFAULT_MIN_EPOCHS)
    reduction_factor: float | None = None  # --reduction-factor eta: asha/hyperband (None: DEFAULT_ETA)
    population: int | None = None  # --population: pbt (None: PBT_POPULATION, at most --num-iterations)
    pbt_interval: int | None = None  # --pbt-interval: epochs per pbt step (None: schedules.pbt_interval(--epochs))
    max_failures: str = FAILURES  # --max-failures FRACTION[:MIN]: stop when more than FRACTION of MIN+ trials fail

    def __post_init__(self) -> None:
        if self.block_sizes is not None:  # a list when read back from spec.json
            object.__setattr__(self, "block_sizes", tuple(int(b) for b in self.block_sizes))

        if self.assign not in ASSIGN_CHOICES:
            raise ConfigError(f"--assign {self.assign!r} is unknown; use one of {', '.join(ASSIGN_CHOICES)}")
        if not (isinstance(self.lease_timeout, (int, float)) and 1.0 <= self.lease_timeout < float("inf")):
            raise ConfigError(f"--lease-timeout {self.lease_timeout!r} is not a finite number of seconds >= 1; "
                              "give the seconds after which a silent job's trial goes back to the pool")
        FailureRule.parse(self.max_failures)
        if self.overwrite and (self.opt_restore or self.shared):
            other = "--shared joins" if self.shared else "--opt-restore resumes"
            raise ConfigError(f"--overwrite starts a search afresh and {other} the one in --output: drop one of "
                              "them (a shared search's folder belongs to every job that runs it: start a new one "
                              "in another --output)")
        if self.shared and self.proposers > 1:  # their ranks would idle: a shared search asks under the lock
            raise ConfigError("--proposers does not apply to a shared search (--shared, nnlo submit --jobs/--join): "
                              "each job's coordinator proposes under the journal's lock; leave --proposers out")
        self._check_schedule_options()

    def _check_schedule_options(self) -> None:
        """The schedule's options on their own (against --epochs: :meth:`schedule_spec`)."""
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"--schedule {self.schedule!r} is unknown; use one of {', '.join(SCHEDULES)}")
        belongs = {"min_epochs": ("asha", "hyperband"), "reduction_factor": ("asha", "hyperband"),
                   "population": ("pbt",), "pbt_interval": ("pbt",)}
        for name, schedules in belongs.items():
            if getattr(self, name) is not None and self.schedule not in schedules:
                raise ConfigError(f"--{name.replace('_', '-')} applies to --schedule {' or '.join(schedules)}, not "
                                  f"{self.schedule}; add --schedule {schedules[0]} or leave it out")
        if self.schedule == "pbt" and self.population is None and self.num_iterations < 2:
            raise ConfigError(f"--schedule pbt trains a population of at least 2 trials; --num-iterations "
                              f"{self.num_iterations} is too few: raise it")
        if self.population is not None and _int(self.population) and self.population > self.num_iterations:
            raise ConfigError(f"--population {self.population} is larger than the budget, --num-iterations "
                              f"{self.num_iterations} trials (the population and every PBT child count); raise "
                              f"--num-iterations or lower --population")

    def schedule_spec(self, train: TrainConfig) -> ScheduleSpec:
        """The schedule resolved against the training (``--epochs`` is the most a trial trains); a bad
        combination is one line (``--min-epochs`` above ``--epochs``, eta below 2, ...)."""
        pbt = self.schedule == "pbt"  # options of other schedules are None here
        try:
            return ScheduleSpec(
                name=self.schedule, max_epochs=train.epochs,
                min_epochs=DEFAULT_MIN_EPOCHS if self.min_epochs is None else self.min_epochs,
                eta=DEFAULT_ETA if self.reduction_factor is None else self.reduction_factor,
                population=(PBT_POPULATION if self.population is None else self.population) if pbt else 0,
                interval=(pbt_interval(train.epochs) if self.pbt_interval is None else self.pbt_interval) if pbt else 0,
            )
        except ScheduleError as e:
            raise ConfigError(str(e)) from None

    def shape(self, train: TrainConfig) -> Shape:
        """The run's role shape (coordinator, blocks, folds, each fold a training group of ``train``); its
        options are checked against the training's too (a schedule against ``--epochs``), so a submission
        refuses them before anything is queued."""
        self.schedule_spec(train)
        try:
            return Shape.for_run(mode=train.mode, n_masters=train.n_masters, n_processes=train.n_processes,
                                 block_size=self.block_size, n_fold=self.n_fold, search=True,
                                 block_sizes=self.block_sizes, proposers=self.proposers)
        except RoleError as e:
            raise ConfigError(str(e)) from None

    def options(self, train: TrainConfig) -> OptimizeOptions:
        """The options for a search that runs here and now (output folder and block size resolved)."""
        name = search_name(train)
        shape = self.shape(train)
        return OptimizeOptions(
            out_dir=Path(self.output) if self.output else default_out_dir(name),
            name=name,
            block_size=int(shape.block_size or 0),
            block_sizes=shape.block_sizes,
            proposers=shape.proposers,
            assign=self.assign,
            n_fold=self.n_fold,
            hyper_opt=self.hyper_opt,
            estimator=self.estimator.upper(),
            num_iterations=self.num_iterations,
            target_objective=self.target_objective,
            fom=self.fom,
            space=self.space,
            ga_populations=self.ga_populations,
            n_initial_points=self.n_initial_points,
            seed=train.seed,
            restore=self.opt_restore,
            overwrite=self.overwrite,
            max_failures=self.max_failures,
            deadline=train.deadline,
            shared=self.shared,
            participant=self.participant,
            lease_s=self.lease_timeout,
            schedule=self.schedule_spec(train),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error (a typo must not be silently ignored)."""
        return cls(**known_fields(cls, data, "search option(s)"))


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

"""Every option of one training run, in one JSON-able dataclass.

Why a dataclass and not the click parameters: the same configuration is built by ``nnlo train``, by the
optimization engine (one per trial, with the trial's hyperparameters in ``model_args``), stored in run
directories and inside every checkpoint, and read back by ``nnlo resume``. Field names are the upstream
command-line vocabulary in snake_case (``--worker-optimizer`` -> ``worker_optimizer``).

:meth:`TrainConfig.validate` checks what can be checked without touching files or MPI and raises a
:class:`~nnlo.errors.ConfigError` with a one-line message naming the option and the fix.
"""
from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nnlo.algorithms.specs import parse_optimizer_spec
from nnlo.contract import DEADLINE_SAFETY_S, ENV_DEADLINE, ENV_DEADLINE_SAFETY
from nnlo.errors import ConfigError
from nnlo.roles import RoleError, Shape
from nnlo.stop_rules import parse_rule

MODES = ("downpour", "easgd", "gem", "allreduce")
ALLREDUCE_ENGINES = ("auto", "mpi", "torch", "horovod")
LOG_LEVELS = ("debug", "info", "warning", "error")
BACKENDS = ("auto", "torch", "keras")
#: ``--cache-data`` given without a folder: keep the data in memory (as ``--preload-data`` does)
CACHE_IN_MEMORY = ":memory:"
#: ``--bucket-mb``'s default: measured by ``bench/run.sh allreduce`` (docs/performance.md, section 2)
BUCKET_MB = 4.0
#: ``--gem-lr``'s default (the GEM paper's and upstream's)
GEM_LR = 0.01


def known_fields(cls: type, data: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``data`` as keyword arguments of the dataclass ``cls``; a key it has no field for is a one-line
    :class:`ConfigError` naming it and the valid ones (``what``: e.g. "training option(s)")."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown {what} {', '.join(unknown)}; valid: {', '.join(sorted(names))}")
    return dict(data)


@dataclass
class TrainConfig:
    """Options of one training (see ``nnlo train --help`` for each one's meaning)."""

    model: str = ""
    backend: str = "auto"  # auto|torch|keras: auto follows the model's type; the others insist on it
    train: str | None = None
    val: str | None = None
    features_name: str | None = None  # None: the model module's get_features(), else "features"
    labels_name: str | None = None  # None: the model module's get_labels(), else "labels"
    loss: str = "categorical_crossentropy"
    epochs: int = 10
    batch: int = 100
    optimizer: str = "sgd:lr=1.0"  # the master's rule; sgd:lr=1 adds the workers' updates as they are
    worker_optimizer: str | None = None  # None: sgd:lr=<gem_lr> with GEM, adam:lr=0.001 otherwise
    mode: str = "gem"
    sync_every: int = 1
    synchronous: bool = False
    elastic_force: float = 0.9
    gem_lr: float = GEM_LR
    gem_momentum: float = 0.9
    gem_kappa: float = 2.0
    early_stopping: str | None = None
    target_metric: str | None = None
    checkpoint: str | None = None  # directory; enables checkpoints every checkpoint_interval epochs
    checkpoint_interval: int = 5  # epochs between checkpoints (0: only at the end and on deadline/signal)
    checkpoint_keep: int = 3  # how many complete checkpoints to keep
    restore: str | None = None  # a checkpoint directory, a run directory, or "auto"
    overwrite: bool = False  # start afresh in a checkpoint folder that holds an earlier run (deleting its files)
    preload_data: int = 0  # N >= 1: read every listed file into memory before training (0: read as needed)
    cache_data: str | None = None  # a node-local folder the listed files are copied into, or CACHE_IN_MEMORY
    log_level: str = "info"
    trial_name: str | None = None
    seed: int = 0
    n_masters: int = 1
    n_processes: int = 1
    allreduce_engine: str = "auto"  # auto|mpi|torch|horovod: who sums gradients (all-reduce mode and worker groups)
    bucket_mb: float = BUCKET_MB  # gradient all-reduce buckets started during backward; 0: one all-reduce after it
    scale_lr: bool = False  # all-reduce mode: worker optimizer lr times the number of ranks
    amp: bool = False  # automatic mixed precision (torch): float16 + gradient scaler on GPUs, bfloat16 on CPUs
    monitor: bool = False
    timeline: bool = False
    deadline: float | None = None  # unix seconds; a complete checkpoint is written before it
    validate_every: int = 0  # also validate every N master updates (history.json "validations"); 0: epochs only
    tensorboard: str | None = None  # a folder for TensorBoard event files (nnlo.observe.tracking)
    mlflow: str | None = None  # an MLflow tracking URI (file:///shared/mlruns, http://server:5000)
    model_args: dict[str, Any] = field(default_factory=dict)  # keyword arguments of get_model()

    def __post_init__(self) -> None:
        # configs written before --preload-data N / --cache-data DIR stored both as booleans
        if isinstance(self.preload_data, bool):
            self.preload_data = int(self.preload_data)
        if isinstance(self.cache_data, bool):
            self.cache_data = CACHE_IN_MEMORY if self.cache_data else None

    # -- serialisation -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of every field (stored in run directories and checkpoints)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error (a typo must not be silently ignored)."""
        values = known_fields(cls, data, "training option(s)")
        values["model_args"] = dict(values.get("model_args") or {})
        return cls(**values)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    # -- derived -----------------------------------------------------------------------------------
    @property
    def worker_optimizer_spec(self) -> str:
        """The worker's local optimizer: as given, else plain SGD at ``gem_lr`` for GEM (the paper's
        setting, so ``--gem-lr`` means what it says) and Adam for the other modes."""
        if self.worker_optimizer:
            return self.worker_optimizer
        return f"sgd:lr={self.gem_lr}" if self.mode == "gem" else "adam:lr=0.001"

    @property
    def in_memory(self) -> bool:
        """Whether the data is read into memory once before training (--preload-data, bare --cache-data)."""
        return self.preload_data > 0 or self.cache_data == CACHE_IN_MEMORY

    @property
    def cache_dir(self) -> str | None:
        """The node-local folder of ``--cache-data DIR``, or None."""
        return self.cache_data if self.cache_data and self.cache_data != CACHE_IN_MEMORY else None

    @property
    def effective_mode(self) -> str:
        """``synchronous`` or the asynchronous mode name (for logs and the history file)."""
        return "synchronous" if self.synchronous else self.mode

    @property
    def training_group_shape(self) -> Shape:
        """The shape of one training group (:meth:`nnlo.roles.Shape.for_run` decides; RoleError if impossible)."""
        return Shape.for_run(mode=self.mode, n_masters=self.n_masters, n_processes=self.n_processes)

    def validate(self) -> TrainConfig:
        """Raise ConfigError (one line: option, problem, fix) for values that can never work."""
        if not self.model:
            raise ConfigError("no model given; pass --model path/to/model.py (or a saved model file)")
        if self.mode not in MODES:
            raise ConfigError(f"--mode {self.mode!r} is unknown; use one of {', '.join(MODES)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"--backend {self.backend!r} is unknown; use one of {', '.join(BACKENDS)}")
        if self.allreduce_engine not in ALLREDUCE_ENGINES:
            raise ConfigError(f"--allreduce-engine {self.allreduce_engine!r} is unknown; use one of "
                              f"{', '.join(ALLREDUCE_ENGINES)}")
        if not (isinstance(self.bucket_mb, (int, float)) and math.isfinite(self.bucket_mb) and self.bucket_mb >= 0):
            raise ConfigError(f"--bucket-mb {self.bucket_mb!r} is not a size; give megabytes >= 0 (0: one "
                              f"all-reduce after backward)")
        try:
            self.training_group_shape  # noqa: B018 - the one shape rule refuses impossible combinations
        except RoleError as e:
            raise ConfigError(str(e)) from None
        if self.n_masters > 1 and self.synchronous:
            raise ConfigError(f"--synchronous needs one master; drop --synchronous or use --n-masters 1 "
                              f"(got --n-masters {self.n_masters})")
        if self.mode == "allreduce" and self.synchronous:
            raise ConfigError("--mode allreduce is synchronous by design; drop --synchronous")
        if self.synchronous and self.mode != "downpour":
            raise ConfigError(
                f"--synchronous averages the workers' updates and works with --mode downpour; "
                f"--mode {self.mode} is asynchronous by design (drop --synchronous or use --mode downpour)"
            )
        for name, minimum in (("epochs", 1), ("batch", 1), ("sync_every", 1), ("checkpoint_keep", 1),
                              ("preload_data", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < minimum:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be an integer >= {minimum}, got {value!r}")
        if not isinstance(self.validate_every, int) or isinstance(self.validate_every, bool) or self.validate_every < 0:
            raise ConfigError(f"--validate-every must be an integer >= 0 master updates (0: once an epoch), "
                              f"got {self.validate_every!r}")
        if self.overwrite and self.restore:
            raise ConfigError(f"--overwrite starts the run afresh and --restore {self.restore} continues one; "
                              "drop one of them")
        if self.checkpoint_interval < 0:
            raise ConfigError(
                f"--checkpoint-interval must be >= 0 epochs (0: only at the end), got {self.checkpoint_interval}"
            )
        for name in ("elastic_force", "gem_lr", "gem_momentum", "gem_kappa"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value!r}")
        if not 0 < self.elastic_force <= 1:
            raise ConfigError(f"--elastic-force must be in (0, 1], got {self.elastic_force}")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ConfigError(f"--log-level {self.log_level!r} is unknown; use one of {', '.join(LOG_LEVELS)}")
        if self.deadline is not None and (not math.isfinite(self.deadline) or self.deadline <= 0):
            raise ConfigError(f"--deadline must be unix seconds (e.g. $(date -d '+2 hours' +%s)), got {self.deadline}")
        for flag, spec in (("--optimizer", self.optimizer), ("--worker-optimizer", self.worker_optimizer_spec)):
            try:
                parse_optimizer_spec(spec)
            except ConfigError as e:
                raise ConfigError(f"{flag}: {e}") from None
        self._check_gem_lr()
        self._check_scale_lr()
        if self.cache_data is not None and not (isinstance(self.cache_data, str) and self.cache_data.strip()):
            raise ConfigError(f"--cache-data must name a folder (a node-local disk), got {self.cache_data!r}")
        for name, what in (("tensorboard", "a folder"), ("mlflow", "a tracking URI (file:///shared/mlruns)")):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value.strip()):
                raise ConfigError(f"--{name} must be {what}, got {value!r}; leave it out for none")
        if self.early_stopping:
            parse_rule(self.early_stopping, "--early-stopping")
        if self.target_metric:
            parse_rule(self.target_metric, "--target-metric")
        return self

    def _check_gem_lr(self) -> None:
        """``--gem-lr`` is the step of GEM's proxy SGD, and the worker's own step in the paper (plain SGD at
        that rate, nnlo's default worker optimizer with --mode gem). Beside a --worker-optimizer that steps
        at another rate it would mean nothing: refused, naming both ways out."""
        if self.mode != "gem" or not self.worker_optimizer or self.gem_lr == GEM_LR:
            return
        try:
            name, params = parse_optimizer_spec(self.worker_optimizer)
        except ConfigError:
            return  # the optimizer check names the bad spec
        if name == "sgd" and math.isclose(float(params.get("lr", math.nan)), self.gem_lr):
            return
        raise ConfigError(
            f"--gem-lr {self.gem_lr} sets the step of GEM's worker SGD, but --worker-optimizer "
            f"{self.worker_optimizer} steps on its own; drop --worker-optimizer (GEM's paper setting, "
            f"sgd:lr={self.gem_lr}) or drop --gem-lr"
        )

    def _check_scale_lr(self) -> None:
        """``--scale-lr`` scales by the ranks that split one batch: all of them in all-reduce mode, the K
        ranks of a worker with --n-processes K. Without either there is nothing to scale: refused."""
        if not self.scale_lr or self.mode == "allreduce" or self.n_masters == 0 or self.n_processes > 1:
            return
        raise ConfigError("--scale-lr multiplies the learning rate by the ranks that share one batch; with "
                          "--n-processes 1 and no --mode allreduce there are none: drop --scale-lr, or add "
                          "--n-processes K or --mode allreduce")


def deadline_from_env(explicit: float | None = None, environ: Mapping[str, str] | None = None) -> float | None:
    """The deadline: ``explicit`` if given, else ``$NNLO_DEADLINE`` (unix seconds), else None.

    A malformed value is a one-line :class:`~nnlo.errors.ConfigError`.
    """
    if explicit is not None:
        return float(explicit)
    env = os.environ if environ is None else environ
    raw = env.get(ENV_DEADLINE, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{ENV_DEADLINE}={raw!r} is not unix seconds; unset it or export a number "
                          f"(e.g. $(date -d '+2 hours' +%s))")
    return value


def deadline_safety_from_env(environ: Mapping[str, str] | None = None) -> float:
    """Seconds of safety kept before the deadline: ``$NNLO_DEADLINE_SAFETY``, else
    :data:`~nnlo.contract.DEADLINE_SAFETY_S`; the one reader, for a training's stop and a search's alike.

    A malformed value is a one-line :class:`~nnlo.errors.ConfigError`.
    """
    env = os.environ if environ is None else environ
    raw = env.get(ENV_DEADLINE_SAFETY, "").strip()
    if not raw:
        return DEADLINE_SAFETY_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise ConfigError(f"{ENV_DEADLINE_SAFETY}={raw!r} is not a number of seconds; unset it "
                          f"(default {DEADLINE_SAFETY_S:g}) or export one (e.g. 30)")
    return value

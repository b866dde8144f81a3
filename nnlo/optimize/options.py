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
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnlo.config import TrainConfig, known_fields
from nnlo.contract import ENV_RUN_DIR
from nnlo.errors import ConfigError
from nnlo.roles import RoleError, Shape


@dataclass
class OptimizeOptions:
    """Options of the search itself, resolved for this run (the training options live in the TrainConfig)."""

    out_dir: Path
    block_size: int
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
    deadline: float | None = None
    grace_s: float = 60.0
    extra: dict[str, Any] = field(default_factory=dict)

    def initial_points(self) -> int:
        """Random proposals before the model is used: 10 (skopt's default), at most a third of the budget."""
        if self.n_initial_points is not None:
            return self.n_initial_points
        return max(2, min(10, self.num_iterations // 3))


def default_out_dir(model: str) -> Path:
    """``$NNLO_RUN_DIR`` inside a submitted run, else ``./optimize-<model stem>``."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if run_dir:
        return Path(run_dir)
    return Path(f"optimize-{Path(model).stem or 'run'}")


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
    output: str | None = None  # None: $NNLO_RUN_DIR inside a submitted run, else ./optimize-<model>

    def shape(self, train: TrainConfig) -> Shape:
        """The run's role shape (coordinator, blocks, folds, each fold a training group of ``train``)."""
        try:
            return Shape.for_run(mode=train.mode, n_masters=train.n_masters, n_processes=train.n_processes,
                                 block_size=self.block_size, n_fold=self.n_fold, search=True)
        except RoleError as e:
            raise ConfigError(str(e)) from None

    def options(self, train: TrainConfig) -> OptimizeOptions:
        """The options for a search that runs here and now (output folder and block size resolved)."""
        return OptimizeOptions(
            out_dir=Path(self.output) if self.output else default_out_dir(train.model),
            block_size=int(self.shape(train).block_size or 0),
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
            deadline=train.deadline,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchConfig:
        """Inverse of :meth:`to_dict`; unknown keys are an error (a typo must not be silently ignored)."""
        return cls(**known_fields(cls, data, "search option(s)"))

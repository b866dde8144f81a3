"""Experiment tracking: a training's and a search's figures in TensorBoard event files and MLflow runs.

``--tensorboard DIR`` (:mod:`~nnlo.observe.tracking.tensorboard`) and ``--mlflow URI``
(:mod:`~nnlo.observe.tracking.mlflow`), each an optional extra (``nnlo-hpc[tensorboard]``, ``nnlo-hpc[mlflow]``):

* a training's tracker lives on the rank that writes ``history.json`` (the master, the uber-master, all-reduce
  rank 0), opened once the training knows where it starts (a restored epoch and update count), fed every
  epoch's and every ``--validate-every`` validation's entry, closed with the reason it stopped;
* a search's tracker lives on the coordinator and is fed every trial it records; each trial's training
  writes its own TensorBoard run live (the search maps ``--tensorboard`` to the trial's folder).

:func:`check` says in one line which extra a run's options need, before anything starts (``nnlo submit``'s
and ``nnlo train -n``'s checks, and every training's set-up).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nnlo.config import TrainConfig
from nnlo.observe.tracking import mlflow, tensorboard
from nnlo.observe.tracking.base import Trackers, TrialReport, options


def check(config: TrainConfig) -> None:
    """The packages ``config``'s tracking needs are installed (one-line ConfigError naming the extra)."""
    if config.tensorboard:
        tensorboard.check()
    if config.mlflow:
        mlflow.check()


def for_training(config: TrainConfig, out_dir: Path | None, name: str, *, epoch: int, updates: int) -> Trackers:
    """The trackers of a training that starts after ``epoch`` epochs and ``updates`` updates (0 and 0 unless
    restored); ``out_dir`` keeps the MLflow run's id (no folder: no MLflow run is resumed)."""
    trackers: list[Any] = []
    if config.tensorboard:
        trackers.append(tensorboard.TensorBoardTraining(Path(config.tensorboard), epoch, updates))
    if config.mlflow:
        trackers.append(mlflow.MlflowTraining(config.mlflow, out_dir, name, options(config.to_dict())))
    return Trackers(trackers)


def for_search(config: TrainConfig, folder: Path, name: str, search_options: Mapping[str, Any]) -> Trackers:
    """The trackers of a search whose output folder is ``folder``."""
    trackers: list[Any] = []
    if config.tensorboard:
        trackers.append(tensorboard.TensorBoardSearch(Path(config.tensorboard)))
    if config.mlflow:
        params = {**options(config.to_dict()), **options(dict(search_options))}
        trackers.append(mlflow.MlflowSearch(config.mlflow, folder, name, params))
    return Trackers(trackers)


__all__ = ["TrialReport", "Trackers", "check", "for_search", "for_training"]

"""A search's experiment tracking (``--tensorboard``, ``--mlflow``): what each trial tells the trackers.

The coordinator tells :class:`SearchTracking` every trial it records; it hands the trackers
(:mod:`nnlo.observe.tracking`) the trial's hyperparameters, figure of merit and epochs, the search's best so
far, and each fold's history (read from the fold's ``history.json``). Each trial's training writes its own
TensorBoard run as it trains, in the folder :func:`trial_tensorboard` names, which the trial's HParams record
shares (:func:`run_name`); trials never log to MLflow themselves (the coordinator makes their nested runs).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nnlo.config import TrainConfig
from nnlo.contract import HISTORY_FILE
from nnlo.observe.tracking import Trackers, TrialReport
from nnlo.optimize.trial_files import trial_dir


def run_name(trial_id: int) -> str:
    """A trial's run in the trackers: ``trial-0003``."""
    return f"trial-{trial_id:04d}"


def trial_tensorboard(folder: str, trial_id: int, fold: int, n_fold: int) -> str:
    """Where a trial's training writes its TensorBoard events: the trial's run, one sub-folder per fold."""
    path = Path(folder) / run_name(trial_id)
    return str(path / f"fold-{fold}" if n_fold > 1 else path)


def trial_config(config: TrainConfig, trial_id: int, fold: int, n_fold: int) -> TrainConfig:
    """A trial's training options for tracking: its own TensorBoard run (:func:`trial_tensorboard`), no MLflow
    run of its own (the coordinator makes the trial's nested run)."""
    if not (config.tensorboard or config.mlflow):
        return config
    board = trial_tensorboard(config.tensorboard, trial_id, fold, n_fold) if config.tensorboard else None
    return config.replace(tensorboard=board, mlflow=None)


def _history(folder: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((folder / HISTORY_FILE).read_text())
    except (OSError, ValueError):
        return []
    entries = data.get("history") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


class SearchTracking:
    """The trackers of a search whose trials train in ``out_dir`` (``n_fold`` folds each)."""

    def __init__(self, trackers: Trackers, out_dir: Path, n_fold: int) -> None:
        self.trackers, self.out_dir, self.n_fold = trackers, Path(out_dir), n_fold

    def trial(self, trial: Any, best: Any, fom_name: str) -> None:
        """Tell the trackers about ``trial`` (a :class:`~nnlo.optimize.results.Trial` just recorded); ``best``:
        the search's best trial now (or None)."""
        if not self.trackers:
            return
        histories = tuple((f"fold-{f}" if self.n_fold > 1 else "", _history(trial_dir(self.out_dir, trial.id, f)))
                          for f in range(self.n_fold))
        self.trackers.trial(TrialReport(
            trial_id=trial.id, name=run_name(trial.id), params=dict(trial.params), fom_name=fom_name,
            fom=trial.fom, epochs=int(trial.epochs or 0), best=best.fom if best is not None else None,
            histories=histories))

    def close(self, done: bool) -> None:
        self.trackers.close(done)


__all__ = ["SearchTracking", "run_name", "trial_config", "trial_tensorboard"]

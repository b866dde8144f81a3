"""Per-epoch history, the best epoch, and the result a training returns.

The history file (``history.json`` in the run's output directory) is rewritten atomically after every
epoch, so a run that dies keeps its curve, and ``nnlo status``/``nnlo plot`` can read it while it runs.
Entries are flat dicts: ``epoch`` (1-based), ``loss`` (and ``accuracy``) over the training samples of the
epoch, ``val_loss``/``val_accuracy``, ``samples``, ``samples_per_s``, ``seconds``, ``updates`` and whatever
observability adds (CPU/GPU use). With ``--validate-every N`` the file also holds ``validations``: one entry
every N updates of the master (all-reduce: every N steps), ``{"updates", "epoch", "val_loss", ...}``, where
``epoch`` is the epoch in progress (1-based); the per-epoch entries keep their meaning.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nnlo.checkpoint import write_json_atomic
from nnlo.contract import HISTORY_FILE


@dataclass
class EpochStats:
    """The training side of the current epoch's entry: sums over the workers' messages (saved in checkpoints)."""

    samples: int = 0
    loss_sum: float = 0.0
    correct: float = 0.0
    has_correct: bool = False
    seconds: float = 0.0  # wall time of this epoch before the current job (restores add up)
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, header: dict[str, Any]) -> None:
        """Add one worker message's ``samples``, ``loss_sum`` and ``correct``."""
        n = int(header.get("samples", 0))
        self.samples += n
        self.loss_sum += float(header.get("loss_sum", 0.0))
        if header.get("correct") is not None:
            self.correct += float(header["correct"])
            self.has_correct = True


@dataclass
class TrainResult:
    """What :func:`nnlo.training.driver.train` returns (on every rank of the group).

    history: one dict per epoch; final: the last epoch's metrics (``val_loss``, ``val_accuracy`` for
    classification, ``loss``...); best: the entry with the lowest ``val_loss`` (``loss`` without
    validation); stopped_reason: why it ended (``completed``, ``early_stopping``, ``target_metric``,
    ``deadline``, ``signal``); checkpoint: the newest complete checkpoint written by this run (None if none);
    resumable: True when the run stopped early (deadline/signal) with a fresh checkpoint, i.e. resubmitting
    it with ``--restore`` continues it.
    """

    history: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)
    epochs_done: int = 0
    stopped_reason: str = "completed"
    out_dir: str | None = None
    checkpoint: str | None = None
    model_path: str | None = None
    history_path: str | None = None
    updates: int = 0
    seconds: float = 0.0

    @classmethod
    def of(cls, history: list[dict[str, Any]], epochs_done: int, stopped_reason: str, writer: Any = None,
           **extra: Any) -> TrainResult:
        """A result from the epoch history so far: final and best entries derived, the checkpoint from
        ``writer`` (a :class:`nnlo.checkpoint.CheckpointWriter`, or None) when it has published one."""
        return cls(history=history, final=dict(history[-1]) if history else {}, best=best_entry(history),
                   epochs_done=epochs_done, stopped_reason=stopped_reason,
                   checkpoint=str(writer.last_path) if writer is not None and writer.last_path else None, **extra)

    @property
    def resumable(self) -> bool:
        return self.stopped_reason in ("deadline", "signal") and self.checkpoint is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def periodic_entry(epochs_done: int, updates: int, metrics: dict[str, float]) -> dict[str, Any]:
    """A ``validations`` entry of history.json: taken after ``updates`` updates, in epoch ``epochs_done + 1``."""
    return {"updates": int(updates), "epoch": int(epochs_done) + 1, **metrics}


def epoch_line(entry: dict[str, Any], epochs: int) -> str:
    """The progress line a person follows: ``epoch 3/10 | loss … | val_accuracy … | 3317 samples/s | 0.4 s``."""
    parts = [f"epoch {entry['epoch']}/{epochs}"]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        if entry.get(key) is not None:
            parts.append(f"{key} {entry[key]:.4f}")
    if entry.get("samples_per_s"):
        parts.append(f"{entry['samples_per_s']:.0f} samples/s")
    parts.append(f"{entry['seconds']:.1f} s")
    return " | ".join(parts)


def best_entry(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The epoch with the lowest finite ``val_loss`` (or ``loss`` when there is no validation)."""
    key = "val_loss" if any(e.get("val_loss") is not None for e in history) else "loss"
    scored = [e for e in history if isinstance(e.get(key), (int, float)) and math.isfinite(e[key])]
    return dict(min(scored, key=lambda e: e[key])) if scored else {}


def write_history(out_dir: str | Path, result: TrainResult, extra: dict[str, Any]) -> Path:
    """Atomically write ``history.json`` (history, final, best, why it stopped, and ``extra``)."""
    data = dict(extra)
    data.update(history=result.history, final=result.final, best=result.best,
                epochs_done=result.epochs_done, stopped_reason=result.stopped_reason,
                checkpoint=result.checkpoint, model=result.model_path)
    return write_json_atomic(Path(out_dir) / HISTORY_FILE, data)

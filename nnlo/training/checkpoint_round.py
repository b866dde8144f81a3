"""The master's share of a checkpoint: whether one is due, opening its folder, and publishing it.

A checkpoint is a round through the whole group. The master opens a temporary folder (:meth:`open`) and
names it in its replies; every worker writes its part there and acknowledges (the exchange loop collects
the acknowledgements, :mod:`nnlo.training.serve`); then the master writes its own part (and, for Keras, the
model in its native format) and publishes the folder under its final name with a manifest (:meth:`publish`).
Whatever fails on the way, the folder is removed: a checkpoint is complete or absent. Sub-masters take part
like workers, writing a part and acknowledging (:mod:`nnlo.training.submaster`); the top of the tree alone
holds a :class:`CheckpointRound`.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nnlo import checkpoint as ckpt
from nnlo.backends.base import Backend
from nnlo.backends.native_model import write_checkpoint_model
from nnlo.config import TrainConfig


class CheckpointRound:
    """Checkpoints into ``directory`` (none when it is None) as ``config`` asks (interval, how many kept)."""

    def __init__(self, directory: Path | None, config: TrainConfig) -> None:
        self.config = config
        self.writer = ckpt.CheckpointWriter(directory, config.checkpoint_keep) if directory is not None else None

    @property
    def enabled(self) -> bool:
        """False when the training writes nothing (no output folder)."""
        return self.writer is not None

    def due(self, epoch: int, reason: str | None) -> bool:
        """Whether the end of epoch ``epoch`` gets a checkpoint, the run stopping for ``reason`` (None: going on).

        A stop before the end (deadline, signal) always checkpoints, so that the run can resume; otherwise
        ``--checkpoint`` asks for one every ``--checkpoint-interval`` epochs and at the end.
        """
        if self.writer is None:
            return False
        if reason in ("deadline", "signal"):
            return True
        if not self.config.checkpoint:
            return False
        interval = self.config.checkpoint_interval
        return reason is not None or (interval > 0 and epoch % interval == 0)

    def open(self, epoch: int, updates: int) -> Path:
        """A fresh temporary folder for the checkpoint after ``epoch`` epochs and ``updates`` updates."""
        assert self.writer is not None
        return self.writer.begin(epoch, updates)

    def publish(self, tmp: Path, state: Callable[[], dict[str, Any]], backend: Backend, center: np.ndarray,
                manifest: dict[str, Any]) -> float | None:
        """Every other part is in ``tmp``: write the master's part (``state()``) and publish the folder.

        Returns how long the checkpoint took (None if unknown), for the deadline's margin. Raises what
        failed, after removing ``tmp``.
        """
        assert self.writer is not None
        try:
            ckpt.write_part(tmp, ckpt.part_name("master"), state())
            native = write_checkpoint_model(backend, tmp, center)  # Keras: model.keras; torch: None
            self.writer.commit(tmp, {**manifest, **({"model": native} if native else {})})
        except Exception:
            self.abandon(tmp)
            raise
        return self.writer.last_duration

    def abandon(self, tmp: Path) -> None:
        """Remove ``tmp``: the round failed (a part is missing)."""
        assert self.writer is not None
        self.writer.abandon(tmp)

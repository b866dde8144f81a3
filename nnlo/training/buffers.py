"""The central model's BatchNorm-like buffers: the mean of what the workers' models gathered.

Why: only trainable weights travel in the exchanges, and a master never trains, so its own running means and
variances would stay at their initial zeros and ones. Each worker's last update of an epoch carries its
model's buffers; a master adds them up here and, before it validates, checkpoints or saves, sets its model
to their mean (a sub-master instead passes the mean of its workers up to the uber-master). The sum is kept
in float64 so that many workers' float32 statistics add up without losing digits.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nnlo.backends.base import Backend
from nnlo.errors import TrainingError


class CentralBuffers:
    """The buffers of a master's model (``values``; None when the model has none) and this epoch's sum."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.values: np.ndarray | None = backend.get_buffers() if backend.n_buffers else None
        self._sum: np.ndarray | None = None  # the buffers received since the last mean, summed
        self._count = 0

    def collect(self, values: np.ndarray) -> None:
        """Add one worker's buffers to the sum."""
        if self.values is None or values.size != self.values.size:
            raise TrainingError(f"a worker sent {values.size} buffer values but the master's model has "
                                f"{0 if self.values is None else self.values.size}; all ranks must load the same model")
        if self._sum is None:
            self._sum = np.zeros(values.size, dtype=np.float64)
        self._sum += values
        self._count += 1

    def take_mean(self) -> np.ndarray | None:
        """The mean of the buffers received since the last call (None if none came), and start over."""
        if self._sum is None or not self._count:
            return None
        mean = (self._sum / self._count).astype(np.float32)
        self._sum, self._count = None, 0
        return mean

    def adopt_mean(self) -> None:
        """Set the model's buffers to the mean of those received since the last call, if any came."""
        mean = self.take_mean()
        if mean is not None:
            self.set(mean)

    def set(self, values: np.ndarray) -> None:
        assert self.values is not None
        np.copyto(self.values, values)
        self.backend.set_buffers(self.values)

    def state_dict(self) -> dict[str, Any]:
        """The buffers for a checkpoint part (nothing for a model without buffers)."""
        return {"buffers": self.values.copy()} if self.values is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.values is not None and "buffers" in state:
            self.set(np.asarray(state["buffers"], dtype=np.float32))

"""Synchronous data parallelism: the master waits for every worker and applies the *mean* of their updates.

The mean, not the sum (which upstream used): with the sum, adding workers multiplies the effective learning
rate, so a configuration tuned on 2 workers diverges on 32. With the mean, n workers with batch b behave like
one worker with batch n*b.

For large models use :class:`MeanAccumulator` (one model-size buffer, filled in place as updates arrive) or
an MPI ``Allreduce(SUM)`` followed by :func:`scale_in_place` by ``1/n``.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mean_update(deltas: Sequence[np.ndarray]) -> np.ndarray:
    """The element-wise mean of equally sized float32 vectors, as a new float32 vector."""
    if len(deltas) == 0:
        raise ValueError("mean_update needs at least one update")
    acc = MeanAccumulator(deltas[0].size, deltas[0].dtype)
    for d in deltas:
        acc.add(d)
    return acc.mean()


def scale_in_place(total: np.ndarray, count: int) -> np.ndarray:
    """Turn a sum of ``count`` updates into their mean, in place; returns ``total``."""
    if count < 1:
        raise ValueError(f"cannot average {count} updates")
    total *= total.dtype.type(1.0 / count)
    return total


class MeanAccumulator:
    """Running sum of updates in one preallocated buffer; :meth:`mean` divides by the number added."""

    def __init__(self, size: int, dtype: np.dtype | type = np.float32) -> None:
        self.total = np.zeros(size, dtype=dtype)
        self.count = 0

    def add(self, delta: np.ndarray) -> None:
        """Add one worker's update (same size as the buffer)."""
        if delta.size != self.total.size:
            raise ValueError(f"update has {delta.size} values, expected {self.total.size}")
        self.total += delta.reshape(-1)
        self.count += 1

    def mean(self, out: np.ndarray | None = None) -> np.ndarray:
        """The mean so far, written into ``out`` (a new array when None); the sum is kept."""
        if self.count < 1:
            raise ValueError("no update has been added yet")
        mean: np.ndarray = np.multiply(self.total, self.total.dtype.type(1.0 / self.count), out=out)  # out=: Any
        return mean

    def reset(self) -> None:
        """Start a new round without reallocating."""
        self.total.fill(0)
        self.count = 0

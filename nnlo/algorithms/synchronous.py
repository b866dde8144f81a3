"""Synchronous data parallelism: the master waits for every worker and applies the *mean* of their updates.

The mean, not the sum (which upstream used): with the sum, adding workers multiplies the effective learning
rate, so a configuration tuned on 2 workers diverges on 32. With the mean, n workers with batch b behave like
one worker with batch n*b.

The master sums the sample-weighted updates into one model-size buffer as they arrive (an MPI
``Allreduce(SUM)`` does the same across ranks), then :func:`scale_in_place` turns the sum into the mean.
"""
from __future__ import annotations

import numpy as np


def scale_in_place(total: np.ndarray, count: int) -> np.ndarray:
    """Turn a sum of ``count`` updates into their mean, in place; returns ``total``."""
    if count < 1:
        raise ValueError(f"cannot average {count} updates")
    total *= total.dtype.type(1.0 / count)
    return total

"""Downpour SGD (Dean et al. 2012): the master applies a worker's accumulated weight delta.

A worker trains ``sync_every`` batches with its own optimizer starting from the master's weights ``w0`` and
sends ``delta = w_local - w0``. The master treats ``-delta`` as a gradient for *its* optimizer, so:

- ``sgd:lr=1`` (no momentum) adds the delta as is: ``w += delta``, the classic Downpour rule;
- ``sgd:lr=0.5`` damps every worker's contribution by half (useful with many workers);
- ``adam``/``rmsprop``/``adadelta`` treat the stream of deltas like a stream of gradients (the master's
  optimizer state then belongs to the checkpoint).
"""
from __future__ import annotations

import numpy as np

from nnlo.algorithms.optimizers import FlatOptimizer


def apply(weights: np.ndarray, delta: np.ndarray, optimizer: FlatOptimizer) -> None:
    """Apply a worker's ``delta`` (its new weights minus the weights it started from) to ``weights`` in
    place through the master's ``optimizer`` (which sees ``-delta`` as the gradient); ``delta`` is not
    modified and no model-size temporary is allocated after the first call."""
    optimizer.step(weights, delta, grad_scale=-1.0)


def worker_delta(new_weights: np.ndarray, start_weights: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``new_weights - start_weights`` (what a worker sends), written into ``out`` when given."""
    delta: np.ndarray = np.subtract(new_weights, start_weights, out=out)  # numpy types out= ufuncs as Any
    return delta

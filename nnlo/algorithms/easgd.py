"""Elastic Averaging SGD (Zhang, Choromanska, LeCun, arXiv:1412.6651), asynchronous form.

Each worker trains freely and every ``sync_every`` batches exchanges weights with the center (the master).
Both sides move towards each other by the same elastic difference ``alpha * (w_worker - w_master)``::

    w_master <- w_master + alpha * (w_worker - w_master)
    w_worker <- w_worker - alpha * (w_worker - w_master)

with ``alpha = elastic_force / n_workers`` (the paper's ``beta = p * alpha`` kept constant as workers are
added). Both updates must use the values from *before* the exchange: the master sends the center it had
before applying this worker's pull, or equivalently the worker applies :func:`worker_update` with the center
it received and the master :func:`master_update` with the worker's pre-exchange weights.
"""
from __future__ import annotations

import math

import numpy as np

from nnlo.errors import ConfigError


def alpha(elastic_force: float, n_workers: int) -> float:
    """The moving rate ``elastic_force / n_workers``; it must lie in (0, 1] for the pair to contract."""
    if n_workers < 1:
        raise ConfigError(f"EASGD needs at least one worker, got {n_workers}; start more ranks")
    if not math.isfinite(elastic_force) or elastic_force <= 0:
        raise ConfigError(f"--elastic-force must be > 0, got {elastic_force}; the usual value is 0.9")
    a = elastic_force / n_workers
    if a > 1.0:
        raise ConfigError(
            f"--elastic-force {elastic_force} with {n_workers} worker(s) gives alpha={a:g} > 1, which "
            f"overshoots; use --elastic-force <= {n_workers}"
        )
    return a


def _elastic(a: np.ndarray, b: np.ndarray, rate: float, scratch: np.ndarray | None) -> np.ndarray:
    """``rate * (a - b)`` in ``scratch`` (allocated when None)."""
    diff: np.ndarray = np.subtract(a, b, out=scratch)  # numpy types out= ufuncs as Any
    diff *= diff.dtype.type(rate)
    return diff


def master_update(master_w: np.ndarray, worker_w: np.ndarray, alpha: float,
                  scratch: np.ndarray | None = None) -> None:
    """``master_w += alpha * (worker_w - master_w)`` in place; pass a model-size ``scratch`` to avoid an
    allocation per exchange."""
    master_w += _elastic(worker_w, master_w, alpha, scratch)


def worker_update(worker_w: np.ndarray, master_w: np.ndarray, alpha: float,
                  scratch: np.ndarray | None = None) -> None:
    """``worker_w -= alpha * (worker_w - master_w)`` in place (``master_w`` = the center before the
    exchange)."""
    worker_w -= _elastic(worker_w, master_w, alpha, scratch)

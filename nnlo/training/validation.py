"""Validation: loss and accuracy of a model over the validation samples, for the epoch's history entry.

Why a module of its own: the data it reads (the ``--val`` files, or a k-fold's held-out samples of the
training files) are chosen by the driver, the model it judges is the master's central weights, and the
ranks of a training split the same samples among themselves; none of that belongs to the exchange loop.
Sums are taken over batches (and ranks) and divided once, so the figures depend neither on the batch size
nor on how the samples were split.

Distributed validation: every rank of a training holds the same :class:`Validator` (the same ordered
``indices``), so a share of the validation set is just a range ``[lo, hi)`` of positions in ``indices``. A
server splits its range over itself and the ranks waiting for its reply (:func:`split_range`, weighted by
how many ranks each of them validates with: :func:`validation_weight`), sends each its range with the
weights to judge, and adds up the returned :data:`SUMS` vectors (see :mod:`nnlo.training.serve`). All-reduce
replicas take equal ranges and add them with one ``Allreduce`` (:mod:`nnlo.training.allreduce`).
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnlo.backends.base import Backend
from nnlo.observe.trace import get_tracer
from nnlo.roles import Role
from nnlo.training.failure import in_model

#: the sums one share of a validation yields (float64): loss sum, sample count, correct predictions, and
#: 1.0 when the model reports correct predictions at all (classification); shares add element-wise
SUMS = ("loss_sum", "count", "correct", "has_correct")
LOSS_SUM, COUNT, CORRECT, HAS_CORRECT = range(len(SUMS))


def no_sums() -> np.ndarray:
    """The sums of an empty share."""
    return np.zeros(len(SUMS), dtype=np.float64)


def metrics_of(sums: np.ndarray) -> dict[str, float]:
    """``val_loss`` (and ``val_accuracy`` for classification) from summed shares; {} without samples."""
    count = float(sums[COUNT])
    if not count:
        return {}
    out = {"val_loss": float(sums[LOSS_SUM]) / count}
    if sums[HAS_CORRECT]:
        out["val_accuracy"] = float(sums[CORRECT]) / count
    return out


def split_range(lo: int, hi: int, weights: Sequence[int]) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into ``len(weights)`` contiguous, disjoint, complete ranges sized in proportion to
    ``weights`` (integers >= 1); ranges are empty when there are fewer positions than parts."""
    total = sum(weights)
    if total <= 0 or hi < lo:
        raise ValueError(f"cannot split [{lo}, {hi}) by weights {list(weights)}")
    n, cum, bounds = hi - lo, 0, [lo]
    for w in weights:
        cum += w
        bounds.append(lo + n * cum // total)
    return list(itertools.pairwise(bounds))


def validation_weight(hierarchy: Any, rank: int) -> int:
    """How many ranks validate when ``rank`` is handed a share: a worker's all-reduce group (its K ranks),
    a sub-master with all its workers' ranks, or 1."""
    info = hierarchy[rank]
    group = hierarchy.group_of(rank)
    if group is None:
        return 1
    if info.role is Role.WORKER and info.worker is not None:
        return len(group.workers[info.worker])
    if info.role is Role.MASTER and group.uber_master is not None and info.master is not None:
        return 1 + sum(len(w) for w, m in zip(group.workers, group.master_of_worker, strict=True)
                       if m == info.master)
    return 1


@dataclass
class Validator:
    """Loss and accuracy of a model over the validation samples ``indices`` of ``dataset``."""

    dataset: Any  # nnlo.data.H5Dataset
    indices: np.ndarray
    batch: int

    def __len__(self) -> int:
        return len(self.indices)

    def sums(self, backend: Backend, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """The :data:`SUMS` of ``backend``'s model over positions ``[lo, hi)`` of :attr:`indices`."""
        hi = len(self.indices) if hi is None else hi
        out = no_sums()
        for start in range(lo, hi, self.batch):
            x, y = self.dataset.read(self.indices[start:min(start + self.batch, hi)])
            got = in_model("validating", backend.evaluate_batch, x, y)
            out[LOSS_SUM] += got.get("loss_sum", 0.0)
            out[COUNT] += got.get("count", 0.0)
            if "correct" in got:
                out[CORRECT] += got["correct"]
                out[HAS_CORRECT] = 1.0
        return out

    def sums_with(self, backend: Backend, weights: np.ndarray, buffers: np.ndarray | None,
                  lo: int, hi: int) -> np.ndarray:
        """:meth:`sums` of ``weights`` (and the model buffers ``buffers``, e.g. the master's averaged BatchNorm
        statistics), loaded into ``backend``'s model for the evaluation only: the model's own weights and
        buffers are put back afterwards (a worker goes on training from them)."""
        if hi <= lo:
            return no_sums()
        own_w = backend.get_weights()
        own_b = backend.get_buffers() if backend.n_buffers and buffers is not None else None
        try:
            backend.set_weights(weights)
            if own_b is not None:
                backend.set_buffers(np.asarray(buffers, dtype=np.float32))
            with get_tracer().span("validate share", "validate"):
                return self.sums(backend, lo, hi)
        finally:
            backend.set_weights(own_w)
            if own_b is not None:
                backend.set_buffers(own_b)

    def __call__(self, backend: Backend) -> dict[str, float]:
        """``val_loss`` (and ``val_accuracy`` for classification) of ``backend``'s model; {} without samples."""
        return metrics_of(self.sums(backend))

    def validate(self, backend: Backend, weights: np.ndarray) -> dict[str, float]:
        """The figures of ``weights`` (a master's central weights), loaded into ``backend``'s model first."""
        with get_tracer().span("validate", "validate"):
            backend.set_weights(weights)
            return self(backend)

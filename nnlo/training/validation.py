"""Validation: loss and accuracy of a model over the validation samples, for the epoch's history entry.

Why a module of its own: the data it reads (the ``--val`` files, or a k-fold's held-out samples of the
training files) are chosen by the driver, the model it judges is the master's central weights, and the
all-reduce replicas split the same samples among themselves (:mod:`nnlo.training.allreduce`); none of that
belongs to the exchange loop. Sums are taken over batches and divided once, so the figures do not depend on
the batch size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nnlo.backends.base import Backend
from nnlo.observe.trace import get_tracer


@dataclass
class Validator:
    """Loss and accuracy of a model over the validation samples ``indices`` of ``dataset``."""

    dataset: Any  # nnlo.data.H5Dataset
    indices: np.ndarray
    batch: int

    def __call__(self, backend: Backend) -> dict[str, float]:
        """``val_loss`` (and ``val_accuracy`` for classification) of ``backend``'s model; {} without samples."""
        sums: dict[str, float] = {}
        for start in range(0, len(self.indices), self.batch):
            x, y = self.dataset.read(self.indices[start:start + self.batch])
            for k, v in backend.evaluate_batch(x, y).items():
                sums[k] = sums.get(k, 0.0) + v
        count = sums.get("count", 0.0)
        if not count:
            return {}
        out = {"val_loss": sums["loss_sum"] / count}
        if "correct" in sums:
            out["val_accuracy"] = sums["correct"] / count
        return out

    def validate(self, backend: Backend, weights: np.ndarray) -> dict[str, float]:
        """The figures of ``weights`` (a master's central weights), loaded into ``backend``'s model first."""
        with get_tracer().span("validate", "validate"):
            backend.set_weights(weights)
            return self(backend)

"""Batches reach the model contiguous: NNLO's JEDI example, unchanged, reads (N, P, F) arrays through
``get_features()``'s ``np.swapaxes`` adaptor (a strided view) and its model calls ``.view`` on them."""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import torch
from torch import nn

from nnlo.backends import make_backend
from nnlo.config import TrainConfig
from nnlo.data import H5Dataset
from nnlo.training.validation import Validator


class ViewsItsInput(nn.Module):
    """Like JEDI-net's interaction network: flattens its (N, F, P) input with ``.view``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.view(x.shape[0], -1))


def test_an_adaptors_strided_batches_are_contiguous_for_a_model_that_views_them(tmp_path: Path) -> None:
    path = tmp_path / "jets.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["jetConstituentList"] = rng.normal(size=(10, 4, 3)).astype(np.float32)  # (N, particles, features)
        f["jets"] = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 10)]
    data = H5Dataset([path], features=("jetConstituentList", lambda a: np.swapaxes(a, 1, 2)), labels="jets")
    x, y = data.read(np.array([0, 3, 5, 7]))
    assert x.shape == (4, 3, 4) and not x.flags["C_CONTIGUOUS"]  # what the model module hands over
    backend = make_backend(ViewsItsInput(), TrainConfig(model="jedi.py", worker_optimizer="sgd:lr=0.1"), "cpu")
    metrics = backend.train_on_batch(x, y)
    assert np.isfinite(metrics["loss"]) and metrics["count"] == 4
    sums = Validator(data, np.arange(10), 4).sums(backend)
    assert sums[1] == 10

"""A rank's random streams in a checkpoint (nnlo/training/streams.py), in-process with a real torch backend: a
rank gets back its own entry of the ranks' list and nothing else; what it cannot find leaves its streams alone.
The runs that restore them for real, shape by shape: tests/runtime/test_runtime_restore_mpi.py."""
from __future__ import annotations

import random

import numpy as np
import torch

from nnlo.backends.torch_backend import TorchBackend
from nnlo.training import streams


def _draw() -> tuple[float, float, float]:
    """One draw from every stream a torch rank has (dropout draws from torch's)."""
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def _backend() -> TorchBackend:
    return TorchBackend(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Dropout(0.5)), "mse", "sgd")


def test_a_rank_restores_its_own_entry_of_the_ranks_streams() -> None:
    backend = _backend()
    ranks = []
    for seed in (11, 12, 13):  # three ranks, each seeded alike with its rank
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        _draw()  # a rank's streams are wherever its training left them
        ranks.append(streams.capture(backend))
    expected = []
    for state in ranks:
        streams.restore(state, backend)
        expected.append(_draw())
    assert len(set(expected)) == 3  # the ranks' streams differ
    for index in (2, 0, 1):
        assert streams.restore(ranks, backend, index) is True
        assert _draw() == expected[index]
    assert streams.restore(ranks[1], backend, 0) is True  # a part of one writer: that rank's streams
    assert _draw() == expected[1]


def test_capturing_draws_nothing_and_a_missing_entry_leaves_the_streams_as_they_are() -> None:
    backend = _backend()
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    before = streams.capture(backend)
    streams.capture(backend)
    first = _draw()
    for saved, index in ((None, 0), ([], 0), ([before], 1), (before, 1), ({}, 0)):
        streams.restore(before, backend)
        # another number of ranks, one writer's part read by another rank, a checkpoint that kept none
        assert streams.restore(saved, backend, index) is False
        assert _draw() == first

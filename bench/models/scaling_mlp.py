"""A compute-bound MLP for the scaling benchmark (bench/scaling.py).

Sizes come from the environment (``BENCH_MLP_FEATURES``, ``BENCH_MLP_HIDDEN``, ``BENCH_MLP_LAYERS``,
``BENCH_MLP_CLASSES``) because ``nnlo train`` passes no hyperparameters to ``get_model``; the defaults give
~0.6 M parameters, i.e. ~0.9 GFLOP of forward+backward per batch of 256 against a 2.4 MB exchange, so a
step is dominated by arithmetic, not by moving weights.
"""
from __future__ import annotations

import os

from torch import nn


def _env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def get_name() -> str:
    return "scaling_mlp"


def get_model() -> nn.Module:
    width = _env("BENCH_MLP_FEATURES", 64)
    hidden = _env("BENCH_MLP_HIDDEN", 512)
    blocks: list[nn.Module] = []
    for _ in range(_env("BENCH_MLP_LAYERS", 3)):
        blocks += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    blocks.append(nn.Linear(width, _env("BENCH_MLP_CLASSES", 10)))
    return nn.Sequential(*blocks)

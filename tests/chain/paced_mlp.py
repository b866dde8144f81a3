"""examples/mlp_torch.py's perceptron with a fixed pause in each training forward pass: an epoch then lasts at
least ``batches x pause`` on any machine, so the walltime-chain test needs several 1-minute jobs on a fast CI
runner as well as on a loaded laptop (the pause does not touch the numbers: the run stays deterministic)."""
from __future__ import annotations

import time

from torch import nn


class PacedMLP(nn.Module):
    def __init__(self, n_inputs: int, n_classes: int, hidden: int, pause_s: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_classes))
        self.pause_s = pause_s

    def forward(self, x):
        if self.training and self.pause_s > 0:
            time.sleep(self.pause_s)
        return self.net(x)


def get_name() -> str:
    return "paced_mlp"


def get_model(n_inputs: int = 32, n_classes: int = 4, hidden: int = 64, pause_s: float = 0.025) -> nn.Module:
    return PacedMLP(n_inputs, n_classes, hidden, pause_s)

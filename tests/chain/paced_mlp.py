"""examples/mlp_torch.py's perceptron with two test knobs in its training forward pass, neither of which touches
the numbers (a run stays deterministic):

- ``pause_s``: a fixed pause in each batch, so an epoch lasts at least ``batches x pause`` on any machine (a run
  that is to be signalled mid-training never finishes first);
- ``gate``: a file path; the first training batch of every process waits until that file exists, so a test can
  look at a job that is certainly running (its successor queued, its status) before letting it train.
"""
from __future__ import annotations

import os
import time

from torch import nn


class PacedMLP(nn.Module):
    def __init__(self, n_inputs: int, n_classes: int, hidden: int, pause_s: float, gate: str = "") -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_classes))
        self.pause_s = pause_s
        self.gate = gate

    def forward(self, x):
        if self.training and self.gate:
            while not os.path.exists(self.gate):
                time.sleep(0.05)
            self.gate = ""  # open: never asked again in this process
        if self.training and self.pause_s > 0:
            time.sleep(self.pause_s)
        return self.net(x)


def get_name() -> str:
    return "paced_mlp"


def get_model(n_inputs: int = 32, n_classes: int = 4, hidden: int = 64, pause_s: float = 0.025,
              gate: str = "") -> nn.Module:
    return PacedMLP(n_inputs, n_classes, hidden, pause_s, gate)

"""Test model that raises in forward on world rank 2 only (a worker), to check that the whole job ends."""
import os

from torch import nn


class Flaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 3)

    def forward(self, x):
        if os.environ.get("PMI_RANK") == "2":
            raise RuntimeError("deliberate failure in forward")
        return self.layer(x)


def get_model():
    return Flaky()

"""Test model that hangs (sleeps for an hour) in forward on world rank 2, as a stuck or silently dead peer."""
import os
import time

from torch import nn


class Stuck(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 3)

    def forward(self, x):
        if os.environ.get("PMI_RANK") == "2":
            time.sleep(3600)
        return self.layer(x)


def get_model():
    return Stuck()

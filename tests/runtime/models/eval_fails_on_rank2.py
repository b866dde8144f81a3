"""Test model: tiny.py that fails while *evaluating* on world rank 2 only (a worker): raises, or with
NNLO_TEST_EVAL_FAIL=exit leaves the process at once, as a crashed rank would."""
import os

from torch import nn


class FailsInEval(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))

    def forward(self, x):
        if not self.training and os.environ.get("PMI_RANK") == "2":
            if os.environ.get("NNLO_TEST_EVAL_FAIL") == "exit":
                os._exit(3)
            raise RuntimeError("deliberate failure in evaluation")
        return self.net(x)


def get_model():
    return FailsInEval()

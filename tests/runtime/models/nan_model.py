"""Test model whose output is NaN: the loss is NaN from the first batch."""
import torch
from torch import nn


class NaNOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 3)

    def forward(self, x):
        return self.layer(x) * torch.tensor(float("nan"))


def get_model():
    return NaNOut()

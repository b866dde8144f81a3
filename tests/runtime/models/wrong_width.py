"""Test model: its first layer takes 7 features, the data has 8 (the user's mistake, in their forward)."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(7, 3)

    def forward(self, x):
        return torch.tanh(self.fc(x))  # line 12


def get_model():
    return Net()

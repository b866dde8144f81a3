"""Test model: tiny.py with BatchNorm after the hidden layer (running statistics and a step counter as buffers)
and a registered boolean mask (a buffer that must not travel)."""
import torch
from torch import nn


class TinyBN(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.BatchNorm1d(hidden), nn.Tanh(), nn.Linear(hidden, 3))
        self.register_buffer("mask", torch.ones(8, dtype=torch.bool))

    def forward(self, x):
        return self.net(x * self.mask)


def get_name():
    return "tiny_bn"


def get_model(hidden=16):
    return TinyBN(hidden)

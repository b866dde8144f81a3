"""Test model: a deterministic 2-layer MLP for 8 features, 3 classes (no dropout, so runs are reproducible)."""
from torch import nn


def get_name():
    return "tiny"


def get_model(hidden=16):
    return nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 3))

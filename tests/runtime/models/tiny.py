"""Test model: a 2-layer MLP for 8 features, 3 classes. Without ``dropout`` (the default) it is deterministic,
so runs are reproducible; ``--model-arg dropout=P`` puts a Dropout layer in it, a random stream of the rank
that a restore must continue (tests/runtime/test_runtime_restore_mpi.py)."""
from torch import nn


def get_name():
    return "tiny"


def get_model(hidden=16, dropout=0.0):
    layers = [nn.Linear(8, hidden), nn.Tanh()]
    if float(dropout) > 0:
        layers.append(nn.Dropout(float(dropout)))
    return nn.Sequential(*layers, nn.Linear(hidden, 3))

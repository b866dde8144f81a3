"""A generic multilayer perceptron for the synthetic HDF5 data of examples/make_synthetic.py (and any flat
features): sizes come from hyperparameters, so benchmarks can scale the model without new files.

    nnlo train -n 3 --model examples/mlp_torch.py --train data/synthetic/train.list --loss categorical_crossentropy
"""
from __future__ import annotations

from torch import nn


def get_name() -> str:
    return "mlp"


def get_model(n_inputs: int = 32, n_classes: int = 4, hidden: int = 64, layers: int = 2) -> nn.Module:
    blocks: list[nn.Module] = []
    width = n_inputs
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    blocks.append(nn.Linear(width, n_classes))
    return nn.Sequential(*blocks)

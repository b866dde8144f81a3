"""A generic multilayer perceptron for the synthetic HDF5 data of examples/make_synthetic.py (and any flat
features): sizes come from hyperparameters, so benchmarks can scale the model without new files.

    python examples/make_synthetic.py --out data/synth --samples 100000 --features 64 --classes 10 --files 8
    nnlo train -n 3 --model examples/mlp_torch.py --model-arg n_inputs=64 --model-arg n_classes=10 \
        --model-arg hidden=256 --train data/synth/data.list --mode easgd --epochs 3
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

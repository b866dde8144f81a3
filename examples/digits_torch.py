"""A small PyTorch classifier for scikit-learn's 8x8 digits (see examples/make_digits.py).

Follows the upstream model-module contract: ``get_model(**hyperparameters)`` returns the model,
``get_name()`` names it, ``get_features()``/``get_labels()`` name the HDF5 datasets. The model returns
logits (``--loss categorical_crossentropy`` applies the softmax); labels are one-hot in the files.

    nnlo train -n 3 --model examples/digits_torch.py --train examples/data/digits/train.list \
        --val examples/data/digits/val.list --mode gem --epochs 15 --batch 32

For hyperparameter search the space is attached to get_model (names = its keyword arguments).
"""
from __future__ import annotations

import torch
from torch import nn

from nnlo.optimize.space import Integer, Real


def get_name() -> str:
    return "digits_mlp"


def get_model(hidden: int = 64, dropout: float = 0.1) -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, 10),
    )


def get_features() -> str:
    return "features"


def get_labels() -> str:
    return "labels"


# The search space, for nnlo optimize (names = get_model's keyword arguments). skopt.space's Integer and Real work
# the same (the upstream contract); nnlo's own import no scikit-learn or SciPy into every rank of a training.
get_model.parameter_range = [  # type: ignore[attr-defined]
    Integer(16, 128, name="hidden"),
    Real(0.0, 0.5, name="dropout"),
]

__all__ = ["get_model", "get_name", "get_features", "get_labels", "torch"]

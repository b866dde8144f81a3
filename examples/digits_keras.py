"""A Keras model module for the 8x8 digits (``examples/make_digits.py``), in the mpi_learn/NNLO contract.

    nnlo train -n 3 --model examples/digits_keras.py --train DIR/train.list --val DIR/val.list \
        --loss categorical_crossentropy --epochs 5

``get_model`` returns a Keras 3 model, so nnlo picks the Keras backend automatically. The same network as a
torch module (``examples/digits_torch.py``: 64 -> hidden ReLU -> dropout -> 10) reaches similar validation
accuracy; the only difference is that this one ends in a softmax (what Keras's ``categorical_crossentropy``
expects), while a torch model returns logits.
Hyperparameters are keyword arguments, and ``get_model.parameter_range`` is the search space that
``nnlo optimize`` explores (it needs scikit-optimize, which nnlo installs).
"""
from __future__ import annotations

import os

from nnlo.optimize.space import Integer, Real


def get_name() -> str:
    return "digits_keras"


def get_model(hidden: int = 64, dropout: float = 0.1):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    layers = [keras.Input(shape=(64,), name="pixels"),
              keras.layers.Dense(int(hidden), activation="relu", name="hidden")]
    if dropout:
        layers.append(keras.layers.Dropout(float(dropout), name="dropout"))
    layers.append(keras.layers.Dense(10, activation="softmax", name="digit"))
    return keras.Sequential(layers, name=get_name())


def get_features() -> str:
    return "features"


def get_labels() -> str:
    return "labels"


# The search space for `nnlo optimize`. skopt.space's Integer and Real work the same (the upstream contract); nnlo's
# own import no scikit-learn or SciPy into every rank of a training.
get_model.parameter_range = [Integer(16, 128, name="hidden"), Real(0.0, 0.5, name="dropout")]  # type: ignore[attr-defined]

"""Keras models and the user's code: an error raised in the user's own layer names their file and line (the
rank's log gets their traceback), and a ``np.swapaxes`` adaptor's strided batches train (NNLO's JEDI example)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from nnlo.backends import make_backend
from nnlo.config import TrainConfig
from nnlo.data import H5Dataset
from nnlo.models import load_model_source
from nnlo.training.failure import describe_exception, in_model
from nnlo.usercode import user_traceback

MODULE = '''
import keras


class Picky(keras.layers.Layer):
    def call(self, x, training=False):
        if training:
            raise ValueError("Picky refuses to train")  # line 8
        return x


def get_model():
    inputs = keras.Input((8,))
    return keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(Picky()(inputs)))
'''


def test_an_error_in_the_users_keras_layer_names_their_line(tf_keras: Any, tmp_path: Path) -> None:
    path = tmp_path / "picky.py"
    path.write_text(textwrap.dedent(MODULE))
    backend = make_backend(load_model_source(str(path)).build(), TrainConfig(model=str(path), backend="keras"),
                           "cpu")
    try:
        in_model("training", backend.train_on_batch, np.zeros((4, 8), np.float32), np.eye(3, dtype=np.float32)[[0, 1, 2, 0]])
    except Exception as e:  # noqa: BLE001
        error = e
        error.__traceback__ = error.__traceback__.tb_next  # as nnlo's own catch sees it
    message = describe_exception(error)[0]
    assert "Picky refuses to train" in message and message.endswith(f"(at {path}:8 in call)")
    assert "\x1b" not in message and "\n" not in message
    trimmed = user_traceback(error)
    assert trimmed is not None and f'File "{path}", line 8, in call' in trimmed.splitlines()[1]


def test_an_adaptors_strided_batches_train_a_keras_model(tf_keras: Any, tmp_path: Path) -> None:
    _, keras = tf_keras
    path = tmp_path / "jets.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["jetConstituentList"] = rng.normal(size=(10, 4, 3)).astype(np.float32)
        f["jets"] = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 10)]
    data = H5Dataset([path], features=("jetConstituentList", lambda a: np.swapaxes(a, 1, 2)), labels="jets")
    x, y = data.read(np.array([0, 3, 5, 7]))
    assert not x.flags["C_CONTIGUOUS"]
    inputs = keras.Input((3, 4))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(keras.layers.Reshape((12,))(inputs)))
    backend = make_backend(model, TrainConfig(model="jedi.py", backend="keras"), "cpu")
    metrics = backend.train_on_batch(x, y)
    assert np.isfinite(metrics["loss"]) and metrics["count"] == 4

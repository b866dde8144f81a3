"""Keras runs keep the model in Keras's own format: the final ``model.keras`` and a ``model.keras`` inside
every checkpoint (named in its manifest), holding exactly the checkpoint's central weights. Restoring still
reads nnlo's own parts. One small MPI run, in the warm TensorFlow world (``nnlo_keras``)."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.usefixtures("tf_keras")]

TIMEOUT = 300  # generous: TensorFlow imports in every rank and the machine is shared

MODEL = '''
import keras


def get_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="tanh"),
                             keras.layers.Dense(3, activation="softmax")])
'''


def _data(folder: Path) -> list[str]:
    rng = np.random.default_rng(0)
    for name, n in (("train", 64), ("val", 16)):
        y = rng.integers(0, 3, size=n)
        with h5py.File(folder / f"{name}.h5", "w") as f:
            f["features"] = (rng.normal(size=(n, 8)) + y[:, None]).astype(np.float32)
            f["labels"] = np.eye(3, dtype=np.float32)[y]
        (folder / f"{name}.list").write_text(f"{name}.h5\n")
    return ["--train", str(folder / "train.list"), "--val", str(folder / "val.list")]


def test_checkpoints_and_the_result_hold_a_native_keras_model(nnlo_keras, tmp_path, tf_keras):
    _, keras = tf_keras
    (tmp_path / "model.py").write_text(MODEL)
    out = tmp_path / "run"
    proc = nnlo_keras(3, "train", "--model", tmp_path / "model.py", "--backend", "keras", *_data(tmp_path),
                      "--mode", "downpour", "--epochs", "2", "--batch", "16", "--checkpoint-interval", "1",
                      "--checkpoint", out, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]

    history = json.loads((out / "history.json").read_text())
    assert history["model"] == str(out / "model.keras") and not (out / "model.pt").exists()
    checkpoints = sorted((out / "checkpoints").glob("ckpt-*"))
    assert len(checkpoints) == 2
    for ckpt in checkpoints:
        manifest = json.loads((ckpt / "manifest.json").read_text())
        assert manifest["model"] == "model.keras" and "model.keras" in manifest["parts"]
        model = keras.models.load_model(ckpt / "model.keras", compile=False)
        native = np.concatenate([np.ravel(v.numpy()) for v in model.trainable_variables])
        with open(ckpt / "master.pkl", "rb") as f:
            central = pickle.load(f)["weights"]
        np.testing.assert_array_equal(native, central)  # the checkpoint's own weights, not the last ones
    first, last = (np.concatenate([np.ravel(v.numpy()) for v in
                                   keras.models.load_model(c / "model.keras", compile=False).trainable_variables])
                   for c in checkpoints)
    assert not np.array_equal(first, last)  # each checkpoint saved its epoch's model


def test_backend_torch_with_a_keras_model_is_one_line(make_mlp):
    from nnlo.backends import check_backend_choice, model_kind
    from nnlo.errors import ConfigError

    model = make_mlp(0)
    assert model_kind(model) == "keras"
    check_backend_choice(model, "keras")
    with pytest.raises(ConfigError) as e:
        check_backend_choice(model, "torch")
    assert str(e.value) == ("--backend torch but get_model returned a Keras model; drop --backend or pass "
                            "a torch nn.Module")

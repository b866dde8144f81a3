"""Keras models from files: real ``model.to_json()`` output, Keras 2 JSON, ``.keras`` and ``.h5`` archives."""
from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

from nnlo.backends.keras_backend import KerasBackend, load_model_file
from nnlo.errors import ModelError

pytestmark = pytest.mark.usefixtures("tf_keras")
REPO = Path(__file__).resolve().parents[2]


def _dense(name: str, units: int, activation: str, **extra) -> dict:
    """A Dense layer as Keras 2.2-2.15 wrote it in model.to_json()."""
    init = {"class_name": "VarianceScaling", "config": {"scale": 1.0, "mode": "fan_avg",
                                                         "distribution": "uniform", "seed": None}}
    return {"class_name": "Dense", "config": {"name": name, "trainable": True, "units": units,
                                              "activation": activation, "use_bias": True,
                                              "kernel_initializer": init,
                                              "bias_initializer": {"class_name": "Zeros", "config": {}},
                                              "kernel_regularizer": None, "bias_regularizer": None,
                                              "activity_regularizer": None, "kernel_constraint": None,
                                              "bias_constraint": None, **extra}}


def keras2_sequential(version: str = "2.2.4") -> dict:
    layers = [_dense("dense_1", 16, "relu", batch_input_shape=[None, 8], dtype="float32"),
              {"class_name": "Dropout", "config": {"name": "dropout_1", "trainable": True, "rate": 0.25,
                                                   "noise_shape": None, "seed": None}},
              _dense("dense_2", 3, "softmax")]
    if version.startswith("2.0"):  # Keras 2.0/2.1: a Sequential's config was the bare list of layers
        return {"class_name": "Sequential", "config": layers, "keras_version": version, "backend": "tensorflow"}
    return {"class_name": "Sequential", "config": {"name": "sequential_1", "layers": layers},
            "keras_version": version, "backend": "tensorflow"}


def keras2_functional() -> dict:
    dense = _dense("dense_1", 3, "softmax")
    dense.update(name="dense_1", inbound_nodes=[[["input_1", 0, 0, {}]]])
    return {"class_name": "Model", "keras_version": "2.2.4", "backend": "tensorflow",
            "config": {"name": "model_1", "input_layers": [["input_1", 0, 0]], "output_layers": [["dense_1", 0, 0]],
                       "layers": [{"name": "input_1", "class_name": "InputLayer", "inbound_nodes": [],
                                   "config": {"batch_input_shape": [None, 8], "dtype": "float32",
                                              "sparse": False, "name": "input_1"}},
                                  dense]}}


def test_real_to_json_round_trip(make_mlp, tmp_path, batch):
    x, _ = batch
    original = make_mlp(seed=1, dropout=0.2, batchnorm=True)
    path = tmp_path / "arch.json"
    path.write_text(original.to_json())
    loaded = load_model_file(path)
    assert [tuple(v.shape) for v in loaded.trainable_variables] == \
        [tuple(v.shape) for v in original.trainable_variables]
    assert [type(layer).__name__ for layer in loaded.layers] == [type(layer).__name__ for layer in original.layers]
    # Architecture only: fresh weights; with the original's weights it computes the same function.
    ours = KerasBackend(loaded, "categorical_crossentropy", "sgd")
    ours.set_weights(KerasBackend(original, "categorical_crossentropy", "sgd").get_weights())
    for a, b in zip(loaded.non_trainable_variables, original.non_trainable_variables):
        a.assign(b.numpy())
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(original(x)), rtol=1e-6)


def test_json_weights_follow_the_seed_without_touching_global_rngs(make_mlp, tmp_path):
    path = tmp_path / "arch.json"
    path.write_text(make_mlp().to_json())
    random.seed(5)
    np.random.seed(5)
    before = (random.random(), np.random.random())
    random.seed(5)
    np.random.seed(5)
    w1 = KerasBackend(load_model_file(path, seed=3), "mse", "sgd").get_weights()
    assert (random.random(), np.random.random()) == before  # the caller's RNG streams are untouched
    w2 = KerasBackend(load_model_file(path, seed=3), "mse", "sgd").get_weights()
    w3 = KerasBackend(load_model_file(path, seed=4), "mse", "sgd").get_weights()
    np.testing.assert_array_equal(w1, w2)
    assert not np.array_equal(w1, w3)


@pytest.mark.parametrize("config", [keras2_sequential("2.2.4"), keras2_sequential("2.0.8"), keras2_functional()],
                         ids=["keras-2.2-sequential", "keras-2.0-sequential", "keras-2.2-functional"])
def test_keras2_json_from_mpi_learn_days_loads(config, tmp_path, batch):
    x, y = batch
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(config))
    backend = KerasBackend(load_model_file(path), "sparse_categorical_crossentropy", "adam:lr=0.01")
    assert backend.model.trainable_variables[0].shape[0] == 8
    before = backend.evaluate_batch(x, y)["loss_sum"]
    for _ in range(20):
        backend.train_on_batch(x, y)
    assert backend.evaluate_batch(x, y)["loss_sum"] < before


def test_make_keras_json_example_writes_real_keras_json(tmp_path, capsys):
    """examples/make_keras_json.py (run in this process: TensorFlow is already imported here)."""
    spec = importlib.util.spec_from_file_location("make_keras_json_example", REPO / "examples" / "make_keras_json.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "arch.json"
    assert script.main(["--out", str(out), "--hidden", "24"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    config = json.loads(out.read_text())
    assert config["class_name"] == "Sequential" and config["config"]["name"] == "digits_keras"
    model = load_model_file(out)
    assert [tuple(v.shape) for v in model.trainable_variables] == [(64, 24), (24,), (24, 10), (10,)]
    with pytest.raises(SystemExit):
        script.main(["--out", str(out), "--hidden"])  # a hyperparameter without a value


def test_save_model_writes_native_keras_and_h5(make_mlp, tmp_path, batch):
    x, _ = batch
    backend = KerasBackend(make_mlp(seed=2, batchnorm=True), "categorical_crossentropy", "adam")
    backend.train_on_batch(x, np.eye(3, dtype=np.float32)[batch[1]])  # moves the BatchNorm statistics too
    written = backend.save_model(str(tmp_path / "ckpt" / "model"))
    assert written == str(tmp_path / "ckpt" / "model.keras") and Path(written).is_file()
    h5 = backend.save_model(str(tmp_path / "model.h5"))
    assert h5.endswith("model.h5")
    expected = np.asarray(backend.model(x, training=False))
    for path in (written, h5):
        again = load_model_file(path)
        np.testing.assert_allclose(np.asarray(again(x, training=False)), expected, rtol=1e-6)
        np.testing.assert_array_equal(KerasBackend(again, "mse", "sgd").get_weights(), backend.get_weights())


@pytest.mark.parametrize("name,content,message", [
    ("missing.json", None, "does not exist; check the --model path"),
    ("bad.json", "{not json", "is not valid JSON.*model.to_json"),
    ("other.json", '{"a": 1}', "not a Keras model.*model.to_json"),
    ("odd.json", '{"class_name": "NoSuchLayer", "config": {}}', "cannot build a Keras model from"),
    ("model.txt", "x", "not a Keras model file; give a .json"),
    ("broken.keras", "not a zip", "cannot load Keras model.*model.save"),
])
def test_bad_model_files_are_one_line_errors(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ModelError, match=message) as e:
        load_model_file(path)
    assert "\n" not in str(e.value) and len(str(e.value)) < 500


def test_weights_only_h5_is_explained(make_mlp, tmp_path):
    path = tmp_path / "only.weights.h5"
    make_mlp().save_weights(str(path))
    with pytest.raises(ModelError, match="weights only"):
        load_model_file(path)

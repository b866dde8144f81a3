"""Exact restore: weights + optimizer state (+ BatchNorm statistics) + RNG state continue bit for bit."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from nnlo.backends.keras_backend import KerasBackend
from nnlo.errors import ConfigError

pytestmark = pytest.mark.usefixtures("tf_keras")


@pytest.mark.parametrize("spec", ["adam:lr=0.01", "rmsprop:lr=0.01,momentum=0.9,centered=true",
                                  "sgd:lr=0.1,momentum=0.9,nesterov=true"])
def test_restored_backend_continues_identically(spec, make_mlp, batch):
    x, y = batch
    original = KerasBackend(make_mlp(seed=1, dropout=0.5, batchnorm=True), "sparse_categorical_crossentropy",
                            spec, seed=11)
    for _ in range(3):
        original.train_on_batch(x, y)
    saved = pickle.loads(pickle.dumps({"weights": original.get_weights(), "opt": original.optimizer_state(),
                                       "rng": original.rng_state(), "buffers": original.get_buffers()}))
    continued = [original.train_on_batch(x, y)["loss"] for _ in range(3)]

    # A fresh replica with other initial weights and another dropout seed, restored from the saved state.
    restored = KerasBackend(make_mlp(seed=2, dropout=0.5, batchnorm=True), "sparse_categorical_crossentropy",
                            spec, seed=99)
    restored.set_weights(saved["weights"])
    restored.load_optimizer_state(saved["opt"])
    restored.set_rng_state(saved["rng"])
    restored.set_buffers(saved["buffers"])
    again = [restored.train_on_batch(x, y)["loss"] for _ in range(3)]

    assert again == continued
    np.testing.assert_array_equal(restored.get_weights(), original.get_weights())
    for a, b in zip(restored.model.non_trainable_variables, original.model.non_trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # BatchNorm statistics and dropout state
    assert restored.evaluate_batch(x, y) == original.evaluate_batch(x, y)


def test_buffers_are_the_batchnorm_statistics_as_one_flat_vector(make_mlp, batch):
    x, y = batch
    backend = KerasBackend(make_mlp(seed=1, batchnorm=True), "sparse_categorical_crossentropy", "sgd:lr=0.1")
    plain = KerasBackend(make_mlp(seed=1), "sparse_categorical_crossentropy", "sgd:lr=0.1")
    assert plain.n_buffers == 0 and plain.get_buffers().size == 0
    before = backend.get_buffers()
    assert before.dtype == np.float32 and before.size == backend.n_buffers > 0
    backend.train_on_batch(x, y)
    moved = backend.get_buffers()
    assert not np.array_equal(moved, before)  # training moved the moving statistics
    backend.set_buffers(before)
    np.testing.assert_array_equal(backend.get_buffers(), before)
    with pytest.raises(ValueError, match="buffer vector has 3 values"):
        backend.set_buffers(np.zeros(3, dtype=np.float32))


def test_without_rng_state_dropout_differs(make_mlp, batch):
    """The RNG state matters (so the test above can fail): other dropout masks give other weights."""
    x, y = batch
    a = KerasBackend(make_mlp(seed=1, dropout=0.5), "sparse_categorical_crossentropy", "sgd:lr=0.1", seed=1)
    b = KerasBackend(make_mlp(seed=1, dropout=0.5), "sparse_categorical_crossentropy", "sgd:lr=0.1", seed=2)
    a.train_on_batch(x, y)
    b.train_on_batch(x, y)
    assert not np.array_equal(a.get_weights(), b.get_weights())


def test_optimizer_state_is_plain_numpy_and_counts_steps(make_mlp, batch):
    x, y = batch
    backend = KerasBackend(make_mlp(), "sparse_categorical_crossentropy", "adam")
    backend.train_on_batch(x, y)
    backend.train_on_batch(x, y)
    state = backend.optimizer_state()
    assert state["optimizer"] == "adam" and state["params"]["beta2"] == 0.999
    assert int(state["variables"][0]) == 2  # steps taken (Adam's bias correction depends on it)
    assert all(isinstance(v, np.ndarray) for v in state["variables"])
    assert sum(v.size for v in state["variables"][1:]) == 2 * backend.n_params  # exp_avg, exp_avg_sq


def test_mismatched_state_is_refused_with_the_fix(make_mlp):
    adam = KerasBackend(make_mlp(), "mse", "adam").optimizer_state()
    with pytest.raises(ConfigError, match="for adam but the worker optimizer is sgd.*--worker-optimizer adam"):
        KerasBackend(make_mlp(), "mse", "sgd:momentum=0.9").load_optimizer_state(adam)
    with pytest.raises(ConfigError, match="does not match this model.*same model"):
        KerasBackend(make_mlp(hidden=4), "mse", "adam").load_optimizer_state(adam)
    with pytest.raises(ConfigError, match="from the torch backend.*--backend torch"):
        KerasBackend(make_mlp(), "mse", "adam").load_optimizer_state({**adam, "backend": "torch"})
    with pytest.raises(ConfigError, match="malformed"):
        KerasBackend(make_mlp(), "mse", "adam").load_optimizer_state({"state": {}})

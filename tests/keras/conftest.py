"""Fixtures for the Keras backend tests: TensorFlow (or a clear skip), small models, small data.

Tests that need TensorFlow use the ``tf_keras`` fixture: without TensorFlow they are skipped with the reason,
unless ``NNLO_REQUIRE_TF`` is set (CI installs ``tensorflow-cpu`` and sets it), where they fail instead.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Callable

import numpy as np
import pytest

HAVE_TF = importlib.util.find_spec("tensorflow") is not None


@pytest.fixture(scope="session")
def tf_keras() -> tuple[Any, Any]:
    if not HAVE_TF:
        if os.environ.get("NNLO_REQUIRE_TF"):
            pytest.fail("tensorflow is not installed but NNLO_REQUIRE_TF is set (pip install 'nnlo-hpc[tf]')")
        pytest.skip("tensorflow not installed: pip install 'nnlo-hpc[tf]' (CI installs tensorflow-cpu)")
    from nnlo.backends.keras_env import require_keras

    return require_keras()


@pytest.fixture(scope="session")
def make_mlp(tf_keras: tuple[Any, Any]) -> Callable[..., Any]:
    """``make_mlp(seed, n_in=8, hidden=16, n_out=3, dropout=0.0, batchnorm=False, activation="softmax")``."""
    _, keras = tf_keras

    def build(seed: int = 0, n_in: int = 8, hidden: int = 16, n_out: int = 3, dropout: float = 0.0,
              batchnorm: bool = False, activation: str | None = "softmax") -> Any:
        keras.utils.set_random_seed(seed)
        layers: list[Any] = [keras.Input((n_in,)), keras.layers.Dense(hidden, activation="tanh")]
        if batchnorm:
            layers.append(keras.layers.BatchNormalization())
        if dropout:
            layers.append(keras.layers.Dropout(dropout))
        layers.append(keras.layers.Dense(n_out, activation=activation))
        return keras.Sequential(layers)

    return build


@pytest.fixture()
def batch() -> tuple[np.ndarray, np.ndarray]:
    """64 samples of 8 features with integer labels in 0..2 that depend on the features (learnable)."""
    rng = np.random.default_rng(123)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5).astype(np.int64)
    return x, y


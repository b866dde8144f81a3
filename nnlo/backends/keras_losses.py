"""Losses by their Keras names, as per-sample functions, plus the "correct" count for classification.

Why per-sample: the runtime adds evaluation results over batches and ranks, so a backend must return sums
(``loss_sum``, ``count``, ``correct``), not batch means; training uses the mean of the same per-sample values,
which is what ``model.fit`` minimises (plus the model's regularisation losses).

Names are resolved by Keras itself (``keras.losses.get``), so every Keras loss name and alias works
(``categorical_crossentropy``, ``sparse_categorical_crossentropy``, ``binary_crossentropy``, ``mse``/
``mean_squared_error``, ``mae``, ``mape``, ``msle``, ``huber``, ``hinge``, ``kld``, ``poisson``, ``log_cosh``...).
A name that only means something to PyTorch gets an error that names the Keras equivalent.

Labels are accepted the way users have them: integer class labels with ``categorical_crossentropy`` are
one-hot encoded, one-hot labels with ``sparse_categorical_crossentropy`` are turned back into indices, and a
``(batch,)`` target against a ``(batch, 1)`` output is given its missing axis.

This module imports nothing heavy itself; functions take the ``tf``/``keras`` modules from
:func:`nnlo.backends.keras_env.require_keras`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from nnlo.errors import ConfigError

#: PyTorch loss names a user may carry over from the torch backend, and the Keras name that means the same.
TORCH_ONLY: dict[str, str] = {
    "cross_entropy": "categorical_crossentropy (with a softmax output) or sparse_categorical_crossentropy",
    "crossentropyloss": "categorical_crossentropy (with a softmax output)",
    "crossentropy": "categorical_crossentropy (with a softmax output)",
    "nll": "sparse_categorical_crossentropy (with a softmax output)",
    "nll_loss": "sparse_categorical_crossentropy (with a softmax output)",
    "nllloss": "sparse_categorical_crossentropy (with a softmax output)",
    "bce": "binary_crossentropy",
    "bceloss": "binary_crossentropy",
    "bce_with_logits": "binary_crossentropy with a sigmoid output",
    "bcewithlogitsloss": "binary_crossentropy with a sigmoid output",
    "mse_loss": "mse",
    "mseloss": "mse",
    "l1_loss": "mae",
    "l1loss": "mae",
    "smooth_l1_loss": "huber",
    "smoothl1loss": "huber",
}

COMMON = ("categorical_crossentropy", "sparse_categorical_crossentropy", "binary_crossentropy", "mse", "mae")


@dataclass(frozen=True)
class Loss:
    """A resolved loss: its name, Keras's per-sample function, and how labels are read for accuracy."""

    name: str
    fn: Callable[..., Any]
    kind: str  # "categorical" | "sparse" | "binary" | "regression"


def _kind(canonical: str) -> str:
    if canonical == "categorical_crossentropy" or canonical in ("categorical_hinge", "categorical_focal_crossentropy"):
        return "categorical"
    if canonical == "sparse_categorical_crossentropy":
        return "sparse"
    if canonical in ("binary_crossentropy", "binary_focal_crossentropy", "hinge", "squared_hinge"):
        return "binary"
    return "regression"


def _per_sample(keras: ModuleType, fn: Any, label: str) -> Loss:
    """A Keras loss object (``CategoricalCrossentropy()``) reduces over the batch when called; its ``call``
    gives the per-sample values. Plain loss functions already return them."""
    if isinstance(fn, keras.losses.Loss):
        inner = getattr(fn, "fn", None)
        return Loss(label, fn.call, _kind(getattr(inner, "__name__", "")))
    return Loss(label, fn, _kind(getattr(fn, "__name__", label)))


def resolve_loss(keras: ModuleType, name: Any) -> Loss:
    """The :class:`Loss` for a Keras loss name or class name (``"mse"``, ``"CategoricalCrossentropy"``), a
    Keras loss object, or a callable ``f(y_true, y_pred)`` returning per-sample losses."""
    if callable(name) and not isinstance(name, str):
        return _per_sample(keras, name, getattr(name, "__name__", type(name).__name__))
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"loss must be a Keras loss name such as {', '.join(COMMON)}; got {name!r}")
    key = name.strip()
    if key.lower() in TORCH_ONLY:
        raise ConfigError(f"loss {key!r} is a PyTorch name but the model is a Keras model; "
                          f"use --loss {TORCH_ONLY[key.lower()]}")
    try:
        fn = keras.losses.get(key)
    except (ValueError, TypeError):
        fn = None
    if fn is None or isinstance(fn, type):
        raise ConfigError(f"unknown Keras loss {key!r}; use a Keras loss name such as {', '.join(COMMON)}")
    return _per_sample(keras, fn, key)


def align_labels(tf: ModuleType, loss: Loss, y: Any, pred: Any) -> Any:
    """Labels in the form ``loss.fn`` expects for predictions ``pred`` (decided at trace time, so free)."""
    y = tf.convert_to_tensor(y)
    y_rank, p_rank = y.shape.rank, pred.shape.rank
    if loss.kind == "categorical" and y.dtype.is_integer and y_rank == p_rank - 1:
        return tf.one_hot(y, tf.shape(pred)[-1], dtype=pred.dtype)
    if loss.kind == "categorical" and y.dtype.is_integer and y_rank == p_rank and y.shape[-1] == 1 \
            and pred.shape[-1] != 1:
        return tf.one_hot(tf.squeeze(y, -1), tf.shape(pred)[-1], dtype=pred.dtype)
    if loss.kind == "sparse" and y_rank == p_rank and y.shape[-1] not in (None, 1):
        return tf.argmax(y, axis=-1)
    if y_rank == p_rank - 1 and pred.shape[-1] == 1:
        y = tf.expand_dims(y, -1)
    if not y.dtype.is_integer or loss.kind not in ("sparse",):
        y = tf.cast(y, pred.dtype)
    return y


def per_sample(tf: ModuleType, loss: Loss, y: Any, pred: Any) -> Any:
    """Loss of each sample, shape ``(batch,)`` (any axes Keras leaves are averaged, as Keras does)."""
    values = loss.fn(y, pred)
    values = tf.cast(values, tf.float32)
    rank = values.shape.rank
    if rank is not None and rank > 1:
        values = tf.reduce_mean(values, axis=list(range(1, rank)))
    return values


def correct(tf: ModuleType, loss: Loss, y: Any, pred: Any) -> Any | None:
    """Number of correctly classified samples (a float32 scalar), or None for regression losses.

    Binary outputs with several units count each sample as the fraction of its units that are right, so
    ``correct / count`` stays an accuracy in [0, 1].
    """
    if loss.kind == "categorical":
        hit = tf.equal(tf.argmax(pred, -1), tf.argmax(y, -1))
    elif loss.kind == "sparse":
        labels = tf.cast(tf.reshape(y, tf.shape(pred)[:-1]), tf.int64)
        hit = tf.equal(tf.argmax(pred, -1), labels)
    elif loss.kind == "binary":
        threshold = 0.0 if loss.name.endswith("hinge") else 0.5
        hit = tf.equal(tf.cast(pred > threshold, tf.float32), tf.cast(tf.cast(y, tf.float32) > threshold, tf.float32))
    else:
        return None
    hit = tf.cast(hit, tf.float32)
    rank = hit.shape.rank
    if rank is not None and rank > 1:
        hit = tf.reduce_mean(hit, axis=list(range(1, rank)))
    return tf.reduce_sum(hit)

"""The Keras 3 (TensorFlow) backend: one Keras model and its worker optimizer behind :class:`Backend`.

What the runtime sees is the same as with PyTorch: the model's trainable variables as one flat float32 vector
(in ``model.trainable_variables`` order), gradients in the same layout, sums from evaluation, and the complete
optimizer and RNG state as numpy values. Keras-specific choices:

- **Speed.** Reading, writing and differentiating the weights are each one compiled ``tf.function``: a read is
  one fused concat into a single new buffer, a write is one split of one tensor into all variables, a training
  step never leaves TensorFlow (``train_on_batch`` fuses the gradient and the optimizer update). There is no
  per-variable Python loop on the hot path. Shapes may vary (the last, smaller batch) without retracing each
  time (one trace per data layout, with the batch axis left open).
- **Optimizers** are :mod:`nnlo.backends.keras_optimizers`: torch's exact rules, so one spec string trains the
  same on both backends and on the master.
- **Losses** by Keras name (:mod:`nnlo.backends.keras_losses`); a PyTorch-only name is a clear error.
- **Non-trainable state** (BatchNorm moving statistics) is not part of the flat weight vector but the
  backend's buffer vector (:meth:`KerasBackend.get_buffers`, as torch's buffers): workers send it at each epoch
  end for the master to average, and checkpoints hold it beside the weights.
  Dropout's random state (Keras ``SeedGenerator`` variables) is :meth:`rng_state`.
- **Threads**: one TensorFlow thread per pool under MPI (:mod:`nnlo.backends.keras_env`, ``NNLO_TF_THREADS``).

Entry points for :mod:`nnlo.models` (all import TensorFlow lazily): :func:`load_model_file`,
:func:`is_keras_model`, :func:`make_backend`.
"""
from __future__ import annotations

import contextlib
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from nnlo.backends import keras_losses
from nnlo.backends.base import Backend
from nnlo.backends.keras_env import keras_imported, require_keras
from nnlo.backends.keras_models import load_model_path
from nnlo.errors import ConfigError, ModelError

DEFAULT_LOSS = "categorical_crossentropy"
DEFAULT_OPTIMIZER = "sgd:lr=0.01"


# ------------------------------------------------------------------------------------------------------
# Entry points used by nnlo.models
# ------------------------------------------------------------------------------------------------------
def is_keras_model(obj: Any) -> bool:
    """Whether ``obj`` is a Keras model, without importing TensorFlow for objects that cannot be one."""
    modules = [getattr(cls, "__module__", "") or "" for cls in type(obj).__mro__]
    if not any(m.split(".")[0] in ("keras", "tensorflow", "tf_keras") for m in modules) and not keras_imported():
        return False
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "Model"):
        return isinstance(obj, keras.Model)
    return any(m.split(".")[0] in ("keras", "tf_keras") for m in modules) and hasattr(obj, "trainable_variables")


@contextlib.contextmanager
def _seeded(keras: Any, seed: int | None) -> Iterator[None]:
    """Seed Keras's initialisers for a block without disturbing Python's and NumPy's global RNGs."""
    if seed is None:
        yield
        return
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        keras.utils.set_random_seed(int(seed))
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def load_model_file(path: str | Path, seed: int | None = None) -> Any:
    """A Keras model from a ``.json`` (``model.to_json()``), ``.keras`` or ``.h5`` file.

    ``seed`` makes the fresh weights of a JSON model reproducible. Raises ModelError (missing TensorFlow,
    unreadable or foreign file) with the fix.
    """
    _, keras = require_keras()

    with _seeded(keras, seed):
        return load_model_path(keras, path)


def make_backend(model: Any, config: Any = None) -> KerasBackend:
    """A :class:`KerasBackend` for ``model`` configured from an :class:`nnlo.config.TrainConfig`.

    Reads ``config.loss``, ``config.worker_optimizer_spec`` (or ``worker_optimizer``) and ``config.seed``
    (missing fields get defaults). Dropout streams are seeded from ``seed`` and this process's MPI rank, so
    workers draw different masks and a rerun draws the same ones (the runtime does the same for torch).
    """
    if not is_keras_model(model):  # before importing TensorFlow: "install nnlo-hpc[tf]" would mislead here
        raise _not_keras(model)
    loss = getattr(config, "loss", None) or DEFAULT_LOSS
    optimizer = (getattr(config, "worker_optimizer_spec", None) or getattr(config, "worker_optimizer", None)
                 or DEFAULT_OPTIMIZER)
    seed = getattr(config, "seed", None)
    if seed is not None:
        seed = int(seed) + 7919 * (_mpi_rank() + 1)
    return KerasBackend(model, loss=loss, optimizer=optimizer, seed=seed)


def _not_keras(model: Any) -> ModelError:
    origin = (getattr(type(model), "__module__", "") or "").split(".")[0]
    if origin in ("tf_keras", "tensorflow"):
        return ModelError(f"{type(model).__name__} is a Keras 2 (tf.keras/tf_keras) model; nnlo needs Keras 3: "
                          f"build it with 'import keras' (keras>=3)")
    return ModelError(f"the model is a {type(model).__name__}, neither a torch nn.Module nor a Keras 3 "
                      f"keras.Model; make get_model() return one of those")


def _mpi_rank() -> int:
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            return int(mpi.COMM_WORLD.Get_rank())
    except Exception:  # noqa: BLE001  # pragma: no cover - a broken MPI only costs distinct dropout streams
        pass
    return 0


# ------------------------------------------------------------------------------------------------------
# The backend
# ------------------------------------------------------------------------------------------------------
def _is_seed_state(variable: Any) -> bool:
    return "seed_generator" in (getattr(variable, "path", "") or getattr(variable, "name", ""))


class KerasBackend(Backend):
    """One Keras model replica and its worker optimizer (see the module docstring)."""

    name = "keras"

    def __init__(self, model: Any, loss: Any = DEFAULT_LOSS, optimizer: Any = DEFAULT_OPTIMIZER,
                 seed: int | None = None) -> None:
        tf, keras = require_keras()
        from nnlo.backends.keras_optimizers import make_optimizer  # lazy: Keras loads TensorFlow

        if not is_keras_model(model):
            raise _not_keras(model)
        self._tf, self._losses = tf, keras_losses
        self.model = model
        outputs = getattr(model, "outputs", None) or []
        if len(outputs) > 1:
            raise ModelError(f"Keras model {model.name!r} has {len(outputs)} outputs but nnlo trains one output "
                             f"with one --loss; return a single-output model from get_model")
        self._vars = list(model.trainable_variables)
        if not self._vars:
            raise ModelError(f"Keras model {model.name!r} has no trainable weights yet; give it an input shape "
                             f"(keras.Input(shape=...)) so it is built, or unfreeze its layers")
        self._shapes = [tuple(int(d) for d in v.shape) for v in self._vars]
        self._sizes = [int(np.prod(s, dtype=np.int64)) for s in self._shapes]
        self._n = int(sum(self._sizes))
        self._buffers = [v for v in model.non_trainable_variables if not _is_seed_state(v)]
        self._seed_vars = [v for v in model.non_trainable_variables if _is_seed_state(v)]
        self._n_buffers = int(sum(np.prod(tuple(int(d) for d in v.shape), dtype=np.int64) for v in self._buffers))
        self.loss = keras_losses.resolve_loss(keras, loss)
        self.optimizer = make_optimizer(optimizer)
        self.optimizer.build(self._vars)
        self._opt_vars = [self.optimizer.iterations] + [v for slot in self.optimizer.slots.values() for v in slot]
        if seed is not None:
            self._seed_dropout(int(seed))
        self._build_functions()

    # -- compiled pieces ---------------------------------------------------------------------------
    def _build_functions(self) -> None:
        tf, L, loss = self._tf, self._losses, self.loss
        model, variables, sizes, shapes = self.model, self._vars, self._sizes, self._shapes
        flat_spec = tf.TensorSpec([self._n], tf.float32)

        def flatten(tensors: list[Any]) -> Any:
            return tf.concat([tf.reshape(tf.cast(t, tf.float32), [-1]) for t in tensors], 0)

        def unflatten(flat: Any) -> list[Any]:
            return [tf.cast(tf.reshape(part, shape), v.dtype)
                    for part, shape, v in zip(tf.split(flat, sizes), shapes, variables, strict=True)]

        def forward_loss(x: Any, y: Any) -> tuple[Any, Any, Any]:
            pred = model(x, training=True)
            y = L.align_labels(tf, loss, y, pred)
            data_loss = tf.reduce_mean(L.per_sample(tf, loss, y, pred))
            total = data_loss
            if model.losses:  # regularisers and add_loss(), as model.fit adds them
                total = total + tf.cast(tf.add_n(model.losses), tf.float32)
            hits = L.correct(tf, loss, y, pred)
            return total, data_loss, (tf.constant(-1.0) if hits is None else hits)

        def gradients(x: Any, y: Any) -> tuple[list[Any], Any, Any]:
            with tf.GradientTape() as tape:
                total, data_loss, hits = forward_loss(x, y)
            grads = tape.gradient(total, variables)
            grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                     for g, v in zip(grads, variables, strict=True)]
            return grads, data_loss, hits

        @tf.function(autograph=False)
        def read() -> Any:
            return flatten([v.value for v in variables])

        @tf.function(input_signature=[flat_spec], autograph=False)
        def write(flat: Any) -> None:
            for v, value in zip(variables, unflatten(flat), strict=True):
                v.assign(value)

        def grad_step(x: Any, y: Any) -> tuple[Any, Any, Any]:
            grads, data_loss, hits = gradients(x, y)
            return flatten(grads), data_loss, hits

        @tf.function(input_signature=[flat_spec], autograph=False)
        def apply_step(flat: Any) -> None:
            self.optimizer.apply(unflatten(flat), variables)

        def train_step(x: Any, y: Any) -> tuple[Any, Any]:
            grads, data_loss, hits = gradients(x, y)
            self.optimizer.apply(grads, variables)
            return data_loss, hits

        def eval_step(x: Any, y: Any) -> tuple[Any, Any, Any]:
            pred = model(x, training=False)
            y = L.align_labels(tf, loss, y, pred)
            per = L.per_sample(tf, loss, y, pred)
            hits = L.correct(tf, loss, y, pred)
            return tf.reduce_sum(per), tf.shape(per)[0], (tf.constant(-1.0) if hits is None else hits)

        self._functions = {"read": read, "write": write, "apply": apply_step}
        self._steps = {"grad": grad_step, "train": train_step, "eval": eval_step}
        self._compiled: dict[tuple[str, str, str], Any] = {}

    def _concrete(self, name: str) -> Any:
        """The traced graph of a fixed-signature function, traced on first use. Calling a concrete function
        skips tf.function's argument binding (about 3x less call overhead, which matters for the small
        models HEP trains, where a whole step takes a fraction of a millisecond)."""
        fn = self._compiled.get((name, "", ""))
        if fn is None:
            fn = self._compiled[(name, "", "")] = self._functions[name].get_concrete_function()
        return fn

    def _spec(self, a: Any) -> Any:
        """The TensorSpec of one input array with the batch axis left open."""
        tf = self._tf
        if not tf.is_tensor(a):
            a = np.asarray(a)
        return tf.TensorSpec((None, *tuple(a.shape[1:])), tf.as_dtype(a.dtype))

    def _call(self, step: str, x: Any, y: Any) -> Any:
        """Run a compiled step, traced once per data layout (shapes apart from the batch axis, dtypes), so
        the last, smaller batch reuses the graph and labels keep a static rank. A model/data mismatch
        becomes one line instead of a TensorFlow traceback."""
        tf = self._tf
        try:
            xs, ys = tf.nest.map_structure(self._spec, x), tf.nest.map_structure(self._spec, y)
            key = (step, repr(xs), repr(ys))
            fn = self._compiled.get(key)
            if fn is None:
                fn = tf.function(self._steps[step], input_signature=[xs, ys], autograph=False)
                fn = self._compiled[key] = fn.get_concrete_function()
            return fn(tf.nest.map_structure(tf.convert_to_tensor, x), tf.nest.map_structure(tf.convert_to_tensor, y))
        except (self._tf.errors.InvalidArgumentError, ValueError, TypeError) as e:
            text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split())  # no terminal colours in one line
            text = text if len(text) <= 240 else text[:237] + "..."
            raise ModelError(f"Keras model {self.model.name!r} failed on a batch: {text}; check that "
                             f"--features-name/--labels-name, the model's input shape and --loss "
                             f"({self.loss.name}) match the data") from None

    def _metrics(self, loss: Any, hits: Any, count: int) -> dict[str, float]:
        """Batch metrics with the torch backend's keys: mean ``loss``, ``count`` and (classification)
        ``correct``."""
        metrics = {"loss": float(loss), "count": float(count)}
        if float(hits) >= 0:
            metrics["correct"] = float(hits)
        return metrics

    @staticmethod
    def _count(x: Any) -> int:
        first = x
        while isinstance(first, (list, tuple)):
            first = first[0]
        if isinstance(first, dict):
            first = next(iter(first.values()))
        return int(np.shape(first)[0])

    def _flat_input(self, flat: np.ndarray, what: str) -> np.ndarray:
        if not isinstance(flat, np.ndarray):
            raise TypeError(f"{what} must be a flat float32 numpy array, got {type(flat).__name__}")
        if flat.size != self._n:
            raise ValueError(f"{what} has {flat.size} values but the Keras model has {self._n}; "
                             f"all ranks must load the same model")
        return np.ascontiguousarray(flat.reshape(-1), dtype=np.float32)

    # -- weights -----------------------------------------------------------------------------------
    @property
    def n_params(self) -> int:
        return self._n

    def get_weights(self) -> np.ndarray:
        # The concat is a fresh tensor; its numpy view is that one buffer, not a second copy.
        return self._concrete("read")().numpy()

    def set_weights(self, flat: np.ndarray) -> None:
        self._concrete("write")(self._tf.convert_to_tensor(self._flat_input(flat, "weights")))

    @property
    def n_buffers(self) -> int:
        return self._n_buffers

    def get_buffers(self) -> np.ndarray:
        if not self._buffers:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate([np.asarray(v.numpy(), dtype=np.float32).reshape(-1) for v in self._buffers])

    def set_buffers(self, flat: np.ndarray) -> None:
        if flat.size != self._n_buffers:
            raise ValueError(f"buffer vector has {flat.size} values, the Keras model {self._n_buffers}")
        offset = 0
        for v in self._buffers:
            n = int(np.prod(tuple(v.shape), dtype=np.int64))
            part = np.asarray(flat[offset:offset + n], dtype=np.float32).reshape(tuple(v.shape))
            if not np.issubdtype(np.dtype(v.dtype), np.floating):
                part = np.rint(part)
            v.assign(part.astype(v.dtype))
            offset += n

    # -- training ----------------------------------------------------------------------------------
    def compute_gradients(self, x: Any, y: Any) -> tuple[np.ndarray, dict[str, float]]:
        flat, loss, hits = self._call("grad", x, y)
        return flat.numpy(), self._metrics(loss, hits, self._count(x))

    def apply_gradients(self, flat_grad: np.ndarray) -> None:
        self._concrete("apply")(self._tf.convert_to_tensor(self._flat_input(flat_grad, "gradient")))

    def train_on_batch(self, x: Any, y: Any) -> dict[str, float]:
        loss, hits = self._call("train", x, y)
        return self._metrics(loss, hits, self._count(x))

    def evaluate_batch(self, x: Any, y: Any) -> dict[str, float]:
        loss_sum, count, hits = self._call("eval", x, y)
        out = {"loss_sum": float(loss_sum), "count": float(count)}
        if float(hits) >= 0:
            out["correct"] = float(hits)
        return out

    # -- state -------------------------------------------------------------------------------------
    def optimizer_state(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "optimizer": self.optimizer.nnlo_name,
            "params": dict(self.optimizer.params),
            "variables": [np.array(v.numpy(), copy=True) for v in self._opt_vars],
        }

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`optimizer_state`. The current spec's options win (a restarted run may change lr);
        the optimizer kind and every shape must match."""
        if isinstance(state, dict) and "param_groups" in state:
            raise ConfigError("saved optimizer state is from the torch backend; restore with --backend torch "
                              "or start the Keras run without --restore")
        try:
            kind, values = state["optimizer"], list(state["variables"])
        except (KeyError, TypeError):
            raise ConfigError("saved Keras optimizer state is malformed (needs optimizer, variables); "
                              "was it written by nnlo's Keras backend?") from None
        if state.get("backend", self.name) != self.name:
            raise ConfigError(f"saved optimizer state is from the {state.get('backend')} backend; "
                              f"restore with --backend {state.get('backend')}")
        if kind != self.optimizer.nnlo_name:
            raise ConfigError(f"saved optimizer state is for {kind} but the worker optimizer is "
                              f"{self.optimizer.nnlo_name}; restore with --worker-optimizer {kind}")
        self._assign_all(self._opt_vars, values, f"{kind} optimizer state")
        if "buffers" in state:  # checkpoints written before buffers had their own place in the state
            self._assign_all(self._buffers, list(state["buffers"]), "model buffers (BatchNorm statistics)")

    @staticmethod
    def _assign_all(variables: list[Any], values: list[Any], what: str) -> None:
        if len(values) != len(variables) or any(
                tuple(np.shape(a)) != tuple(v.shape) for a, v in zip(values, variables, strict=True)):
            raise ConfigError(f"saved {what} does not match this model ({len(values)} arrays for "
                              f"{len(variables)} variables); restore with the same model and optimizer")
        for v, a in zip(variables, values, strict=True):
            v.assign(np.asarray(a).astype(v.dtype, copy=False))

    def save_model(self, path: str) -> str:
        """Write the model natively: ``.keras`` or, when asked for, legacy ``.h5``. Any other suffix (the
        runtime's backend-neutral ``model.pt``, or none) becomes ``.keras``; the path written is returned."""
        p = Path(path)
        if p.suffix.lower() in (".pt", ".pth", ".torch", ".json"):
            p = p.with_suffix(".keras")
        elif p.suffix.lower() not in (".keras", ".h5"):
            p = p.with_name(p.name + ".keras")
        p.parent.mkdir(parents=True, exist_ok=True)
        self.model.save(str(p))
        return str(p)

    def rng_state(self) -> dict[str, Any]:
        return {"keras_seed_generators": [np.array(v.numpy(), copy=True) for v in self._seed_vars]}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        values = list((state or {}).get("keras_seed_generators", []))
        if values or self._seed_vars:
            self._assign_all(self._seed_vars, values, "Keras random state")

    def _seed_dropout(self, seed: int) -> None:
        """Give each random layer (Dropout, noise) its own reproducible stream derived from ``seed``."""
        for i, v in enumerate(self._seed_vars):
            state = np.zeros(tuple(v.shape), dtype=v.dtype)
            state.reshape(-1)[0] = (int(seed) * 1_000_003 + 7919 * (i + 1)) % (2**31 - 1)
            v.assign(state)

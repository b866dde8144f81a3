"""The backend interface: everything the runtime needs from a deep-learning framework.

The runtime only ever sees flat, contiguous float32 numpy arrays of all trainable parameters (in a fixed
order), so update rules and MPI transport are framework-independent. A backend wraps one model instance
plus its *worker* optimizer (the local optimizer a worker trains with); the master's optimizer is a pure
numpy rule in :mod:`nnlo.algorithms`.

Implementations: :mod:`nnlo.backends.torch_backend` (PyTorch), :mod:`nnlo.backends.keras_backend`
(Keras 3 on TensorFlow). Changes to this interface must be additive.
"""
from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import numpy as np


class Backend(abc.ABC):
    """One model replica and its local optimizer."""

    name: str = "base"

    # -- weights -----------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def n_params(self) -> int:
        """Number of trainable scalars (the length of the flat weight vector)."""

    @abc.abstractmethod
    def get_weights(self) -> np.ndarray:
        """A new flat float32 C-contiguous copy of all trainable parameters."""

    @abc.abstractmethod
    def set_weights(self, flat: np.ndarray) -> None:
        """Load a flat float32 vector (length ``n_params``) into the model."""

    def weights_into(self, out: np.ndarray) -> None:
        """Write the flat weights into ``out`` (float32, ``n_params`` long): :meth:`get_weights` without the
        new array (a backend on a GPU copies straight into ``out``, by DMA when it came from :meth:`host_buffer`)."""
        np.copyto(out, self.get_weights())

    def host_buffer(self, n: int) -> np.ndarray:
        """A host float32 array of ``n`` elements for weights that travel to and from this backend's device
        (page-locked memory on a GPU, so the copies run at full speed); contents undefined."""
        return np.empty(n, dtype=np.float32)

    # -- buffers: state a model keeps besides its trainable weights ------------------------------------
    # BatchNorm running statistics (torch buffers, Keras non-trainable variables). Replicas update them
    # locally while training; the runtime averages them into the master's model at every epoch end, so
    # validation, checkpoints and the saved model use the statistics the workers gathered.
    @property
    def n_buffers(self) -> int:
        """Number of scalars in the flat buffer vector (0: the model keeps no such state)."""
        return 0

    def get_buffers(self) -> np.ndarray:
        """A new flat float32 copy of all buffers (integer ones such as step counters as floats)."""
        return np.zeros(0, dtype=np.float32)

    def set_buffers(self, flat: np.ndarray) -> None:
        """Load a flat float32 vector (length ``n_buffers``); integer buffers are rounded."""
        if np.asarray(flat).size != self.n_buffers:
            raise ValueError(f"buffer vector has {np.asarray(flat).size} values, the model {self.n_buffers}")

    # -- training ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def compute_gradients(self, x: Any, y: Any) -> tuple[np.ndarray, dict[str, float]]:
        """Flat float32 gradient of the mean loss over the batch, and batch metrics (``loss``, ...)."""

    @abc.abstractmethod
    def apply_gradients(self, flat_grad: np.ndarray) -> None:
        """One step of the worker optimizer with the given flat gradient."""

    # -- gradients reported during backward (bucketed all-reduce, :mod:`nnlo.allreduce.bucketed`) --------
    #: True when :meth:`gradient_sum_into` reports parameters from hooks *during* backward (overlap possible);
    #: False: it reports them all after backward, and the runtime keeps one all-reduce after backward
    grad_hooks: bool = False

    def can_hook_into(self, buf: Any) -> bool:
        """Whether :meth:`gradient_sum_into` fills ``buf`` from hooks during backward (buckets can start early);
        False: it reports every parameter after backward, and the runtime keeps one all-reduce after it."""
        return self.grad_hooks and isinstance(buf, np.ndarray)

    def param_sizes(self) -> list[int]:
        """Elements of each parameter, in the order of the flat vector (one entry: the backend reports the
        gradient as a whole)."""
        return [self.n_params]

    def gradient_sum_into(self, x: Any, y: Any, out: np.ndarray,
                          ready: Callable[[int], None]) -> dict[str, float]:
        """Write the batch's *summed* gradient (the mean loss's gradient times the batch's ``count``) into
        ``out`` (flat float32, ``n_params`` long) and call ``ready(i)`` once parameter ``i``'s slice of it is
        final (numbered as :meth:`param_sizes`), each exactly once, in any order; returns the batch metrics."""
        grad, metrics = self.compute_gradients(x, y)
        np.multiply(grad, np.float32(metrics.get("count", len(y))), out=out)
        for i in range(len(self.param_sizes())):
            ready(i)
        return metrics

    def train_on_batch(self, x: Any, y: Any) -> dict[str, float]:
        """compute_gradients then apply_gradients; backends may fuse the two."""
        grad, metrics = self.compute_gradients(x, y)
        self.apply_gradients(grad)
        return metrics

    @abc.abstractmethod
    def evaluate_batch(self, x: Any, y: Any) -> dict[str, float]:
        """Sums over the batch, so batches and ranks can be added up: ``loss_sum``, ``count`` and, for
        classification, ``correct``."""

    # -- state -------------------------------------------------------------------------------------
    @abc.abstractmethod
    def optimizer_state(self) -> dict[str, Any]:
        """The worker optimizer's complete state, as picklable numpy/python values."""

    @abc.abstractmethod
    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`optimizer_state` returned."""

    @abc.abstractmethod
    def save_model(self, path: str) -> str:
        """Write the model in the framework's native format; returns the path written."""

    def rng_state(self) -> dict[str, Any]:
        """Framework RNG state (dropout etc.); default: none."""
        return {}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`rng_state` returned."""

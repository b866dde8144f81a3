"""Deep-learning backends behind one small interface (see :mod:`nnlo.backends.base`).

:func:`make_backend` is the single dispatch point: a torch ``nn.Module`` gets the PyTorch backend, anything
else is handed to the Keras backend (imported lazily, so torch users never import TensorFlow).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nnlo.models import is_torch_model

if TYPE_CHECKING:
    from nnlo.backends.base import Backend
    from nnlo.config import TrainConfig


def make_backend(model: Any, config: "TrainConfig", device: str = "cpu") -> "Backend":
    """The backend for ``model`` with ``config``'s loss and worker optimizer, on ``device``."""
    if is_torch_model(model):
        from nnlo.backends.torch_backend import TorchBackend

        return TorchBackend(model, config.loss, config.worker_optimizer_spec, device)
    from nnlo.backends import keras_backend  # lazy: only Keras users import TensorFlow

    return keras_backend.make_backend(model, config)

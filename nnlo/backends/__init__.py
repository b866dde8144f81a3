"""Deep-learning backends behind one small interface (see :mod:`nnlo.backends.base`).

:func:`make_backend` is the single dispatch point: a torch ``nn.Module`` gets the PyTorch backend, anything
else is handed to the Keras backend (imported lazily, so torch users never import TensorFlow).
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from nnlo.errors import ConfigError

if TYPE_CHECKING:
    from nnlo.backends.base import Backend
    from nnlo.config import TrainConfig


def make_backend(model: Any, config: TrainConfig, device: str = "cpu") -> Backend:
    """The backend for ``model`` with ``config``'s loss and worker optimizer, on ``device``.

    ``config.backend`` (``--backend``) ``auto`` follows the model's type; ``torch`` or ``keras`` insist on it,
    so a model module that returns the other kind stops with one line instead of training the wrong thing.
    """
    check_backend_choice(model, getattr(config, "backend", "auto"))
    amp = bool(getattr(config, "amp", False))
    if is_torch_model(model):
        import torch  # lazy: torch takes seconds to import

        from nnlo.backends.torch_amp import amp_policy  # lazy: torch takes seconds to import
        from nnlo.backends.torch_backend import TorchBackend  # lazy: torch takes seconds to import

        policy = amp_policy(torch.device(device)) if amp else None
        return TorchBackend(model, config.loss, config.worker_optimizer_spec, device, amp=policy)
    if amp:
        raise ConfigError("--amp is for torch models; for a Keras model set a mixed-precision policy in the model "
                          "module (keras.mixed_precision.set_global_policy('mixed_float16')) and drop --amp")
    from nnlo.backends import keras_backend  # lazy: only Keras users import TensorFlow

    return keras_backend.make_backend(model, config)


def is_torch_model(model: Any) -> bool:
    """True for a torch nn.Module, without importing torch when the model cannot be one."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


def model_kind(model: Any) -> str:
    """``"torch"``, ``"keras"`` or the type's name; never imports TensorFlow for a torch model."""
    if is_torch_model(model):
        return "torch"
    from nnlo.backends.keras_backend import is_keras_model  # lazy: numpy; imports no TensorFlow by itself

    return "keras" if is_keras_model(model) else type(model).__name__


def check_backend_choice(model: Any, backend: str) -> None:
    """Raise ConfigError (one line, with the fix) when ``--backend`` names the other kind of model."""
    if backend in (None, "", "auto"):
        return
    kind = model_kind(model)
    if kind == backend:
        return
    described = {"torch": "a torch nn.Module", "keras": "a Keras model"}.get(kind, f"a {kind}")
    wanted = {"torch": "a torch nn.Module", "keras": "a Keras model"}.get(backend, backend)
    raise ConfigError(f"--backend {backend} but get_model returned {described}; drop --backend or "
                      f"pass {wanted}")

"""The model in its own framework's format, beside nnlo's state: the final model and a copy in checkpoints.

Why: a run's results should open with the user's own tools -- ``torch.load(run/"model.pt")`` or
``keras.models.load_model(run/"model.keras")`` -- and a Keras user expects the same of a checkpoint (to
evaluate a run that is still going, or one killed at the walltime). The runtime passes the neutral base name
:data:`MODEL_BASENAME` and each backend adds its suffix (torch ``.pt``, Keras ``.keras``).

Restoring never reads these files: nnlo restores from its own checkpoint parts, which hold the exact
optimizer state and data position.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nnlo.backends.keras_backend import KerasBackend  # imports no TensorFlow by itself

#: base name of the final model and of the native copy inside a checkpoint (the backend adds the suffix)
MODEL_BASENAME = "model"


def save_final_model(backend: Any, out_dir: str | Path) -> str:
    """``out_dir/model.<suffix>`` written by ``backend``; the path written."""
    return backend.save_model(str(Path(out_dir) / MODEL_BASENAME))


def write_checkpoint_model(backend: Any, directory: str | Path, weights: np.ndarray | None = None) -> str | None:
    """Save a Keras backend's model natively into a checkpoint folder; the file's name, or None for torch
    (a torch checkpoint's ``master.pkl`` weights load into the user's own module; no copy is needed).

    weights: the flat weights to save (the master's central weights); None = the backend's current ones.
    """
    if not isinstance(backend, KerasBackend):
        return None
    if weights is not None:
        backend.set_weights(weights)
    return Path(backend.save_model(str(Path(directory) / MODEL_BASENAME))).name

"""What upstream model code (mpi_learn's and NNLO's own models) needs under today's frameworks, said as the fix.

NNLO's command lines run unchanged (docs/migrating.md), its model code not always: its Keras models use Keras 1/2
APIs that Keras 3 removed (``K.set_image_dim_ordering('th')``, ``Convolution2D``, ``keras.layers.core``), and
one torch model calls ``.cuda()``. Such a failure arrives as an ``AttributeError``, a ``ModuleNotFoundError``
or a ``RuntimeError`` whose text names the old API but not its replacement: :func:`hint` gives the one-line
fix, which the model's import, its ``get_model()`` and its training step append to their error line. (Torch's
``.view`` on a non-contiguous tensor, NNLO's other torch failure, already says "Use .reshape(...) instead".)
Pure: imports no framework.
"""
from __future__ import annotations

import re

#: Keras 1/2 names Keras 3 removed -> their Keras 3 spelling
KERAS_NAMES = {
    "image_dim_ordering": "keras.backend.image_data_format() ('channels_first' was 'th', 'channels_last' 'tf')",
    "set_image_dim_ordering": "keras.backend.set_image_data_format('channels_first') for 'th' "
                              "('channels_last' for 'tf')",
    "Convolution1D": "keras.layers.Conv1D",
    "Convolution2D": "keras.layers.Conv2D",
    "Convolution3D": "keras.layers.Conv3D",
    "Merge": "keras.layers.Concatenate (or Add, Multiply, ...)",
    "merge": "keras.layers.concatenate (or add, multiply, ...)",
    "set_session": "nothing: Keras 3 has no TensorFlow session (drop the call)",
    "get_session": "nothing: Keras 3 has no TensorFlow session (drop the call)",
    "np_utils": "keras.utils.to_categorical",
}
#: Keras 1/2 modules Keras 3 removed -> where their contents are now
KERAS_MODULES = {
    "keras.layers.core": "from keras.layers import Dense, Dropout, Flatten, ...",
    "keras.layers.convolutional": "from keras.layers import Conv2D, MaxPooling2D, ...",
    "keras.layers.recurrent": "from keras.layers import LSTM, GRU, ...",
    "keras.utils.np_utils": "keras.utils.to_categorical",
    "keras.engine": "keras.Model and keras.layers.Layer",
    "keras.backend.tensorflow_backend": "keras.backend (and tensorflow itself)",
}
_NO_ATTRIBUTE = re.compile(r"has no attribute '([^']+)'")


def hint(exc: BaseException) -> str | None:
    """The one-line fix for a failure of upstream model code under today's Keras or torch (None: not one)."""
    text = str(exc)
    if isinstance(exc, ModuleNotFoundError):
        for module, now in KERAS_MODULES.items():
            if exc.name == module or (exc.name or "").startswith(module + "."):
                return f"{module} is Keras 1/2's, removed in Keras 3: {now}"
        return None
    if isinstance(exc, AttributeError):
        m = _NO_ATTRIBUTE.search(text)
        name = getattr(exc, "name", None) or (m.group(1) if m else "")
        if name in KERAS_NAMES and ("keras" in text or "backend" in text):
            return f"{name} is Keras 1/2's, removed in Keras 3: use {KERAS_NAMES[name]}"
        return None
    if "Torch not compiled with CUDA enabled" in text or "Found no NVIDIA driver" in text:
        return ("the model calls .cuda(): drop it (or use .to(device)); nnlo puts the model on each rank's device "
                "itself")
    return None


def with_hint(line: str, exc: BaseException) -> str:
    """``line``, with :func:`hint`'s fix after it when there is one."""
    fix = hint(exc)
    return f"{line}; {fix}" if fix else line

"""Where a model comes from: a model module (the upstream contract) or a saved model file.

The model-module contract (kept from mpi_learn/NNLO so their users' files keep working)::

    def get_model(**hyperparameters): ...   # required: returns a torch nn.Module (or a Keras model)
    def get_name(): ...                     # optional: a short name for logs and run directories
    def get_train(): ...  / get_val()       # optional: lists of HDF5 files (used when --train/--val are absent)
    def get_features(): ... / get_labels()  # optional: dataset name, or (name, adaptor_function)

Saved models: ``.pt``/``.pth``/``.torch`` are whole torch modules written with ``torch.save(model)``;
``.json``/``.keras``/``.h5`` are Keras files and are handed to :mod:`nnlo.backends.keras_backend`
(imported lazily, so torch users never import TensorFlow). This module never imports a framework itself.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from nnlo.errors import ModelError

TORCH_SUFFIXES = (".pt", ".pth", ".torch")
KERAS_SUFFIXES = (".json", ".keras", ".h5")


@dataclass
class ModelSource:
    """A loaded model module or saved model, able to build fresh model instances."""

    path: str
    kind: str  # "module" | "torch" | "keras"
    module: ModuleType | None = None

    @property
    def name(self) -> str:
        if self.module is not None and callable(getattr(self.module, "get_name", None)):
            return str(self.module.get_name())
        return Path(self.path).stem

    def build(self, **hyperparameters: Any) -> Any:
        """A new model instance (framework object). Errors name the file and the cause."""
        if self.kind == "torch":
            if hyperparameters:
                raise ModelError(f"{self.path} is a saved model and takes no hyperparameters; use a model module")
            return _load_torch_file(self.path)
        if self.kind == "keras":
            from nnlo.backends import keras_backend  # lazy: only Keras users import TensorFlow

            return keras_backend.load_model_file(self.path)
        assert self.module is not None
        try:
            model = self.module.get_model(**hyperparameters)
        except TypeError as e:
            if hyperparameters:
                raise ModelError(
                    f"{self.path}: get_model() does not accept {sorted(hyperparameters)}: {e}; "
                    f"add those keyword arguments to get_model"
                ) from None
            raise ModelError(f"{self.path}: get_model() raised TypeError: {e}") from None
        except Exception as e:  # noqa: BLE001 - a user's code may raise anything; report it in one line
            raise ModelError(f"{self.path}: get_model() raised {type(e).__name__}: {e}") from None
        if model is None:
            raise ModelError(f"{self.path}: get_model() returned None; it must return the model")
        return model

    def optional(self, name: str) -> Any:
        """The value of an optional contract function (get_train, get_features, ...), or None."""
        fn = getattr(self.module, name, None) if self.module is not None else None
        if fn is None:
            return None
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"{self.path}: {name}() raised {type(e).__name__}: {e}") from None


def load_model_source(path: str) -> ModelSource:
    """Check that ``path`` exists and is a usable model module or saved model; import the module."""
    if not path:
        raise ModelError("no model given; pass --model path/to/model.py (or a saved .pt/.keras file)")
    p = Path(path)
    if not p.exists():
        raise ModelError(f"model file {path} does not exist; check the --model path")
    suffix = p.suffix.lower()
    if suffix in TORCH_SUFFIXES:
        return ModelSource(str(p), "torch")
    if suffix in KERAS_SUFFIXES:
        return ModelSource(str(p), "keras")
    if suffix != ".py":
        raise ModelError(
            f"model file {path} has an unknown type; use a .py model module, a torch .pt/.pth "
            f"or a Keras .json/.keras/.h5 file"
        )
    module = _import_file(p)
    if not callable(getattr(module, "get_model", None)):
        raise ModelError(f"model module {path} defines no get_model(); add def get_model(**hyperparameters)")
    return ModelSource(str(p), "module", module)


def _import_file(p: Path) -> ModuleType:
    # A stable module name per file, registered in sys.modules, so that pickling model classes works.
    digest = hashlib.sha1(str(p.resolve()).encode()).hexdigest()[:8]
    name = f"nnlo_user_model_{p.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise ModelError(f"cannot import model module {p}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    from nnlo.backends.keras_env import prepare_environment

    prepare_environment()  # the module may import Keras at its top: TensorFlow reads its settings only once
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001
        del sys.modules[name]
        raise ModelError(f"importing model module {p} raised {type(e).__name__}: {e}") from None
    return module


def _load_torch_file(path: str) -> Any:
    import torch

    try:
        model = torch.load(path, map_location="cpu", weights_only=False)
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("nnlo_user_model_"):
            raise ModelError(f"cannot load torch model {path}: the module {e.name!r} of its classes is not "
                             f"importable; install it or put it on PYTHONPATH") from None
        stem = (e.name or "")[len("nnlo_user_model_"):].rsplit("_", 1)[0]
        raise ModelError(f"{path} holds a model whose class is defined in the model module {stem}.py; pass that "
                         f"module instead (--model path/to/{stem}.py, with --restore RUN for its weights)") from None
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"cannot load torch model {path}: {type(e).__name__}: {e}") from None
    if not isinstance(model, torch.nn.Module):
        raise ModelError(
            f"{path} holds a {type(model).__name__}, not a torch nn.Module; save it with torch.save(model, path)"
        )
    return model

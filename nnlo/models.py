"""Where a model comes from: a model module (the upstream contract) or a saved model file.

The model-module contract (kept from mpi_learn/NNLO so their users' files keep working)::

    def get_model(**hyperparameters): ...   # required: returns a torch nn.Module (or a Keras model)
    def get_name(): ...                     # optional: a short name for logs and run directories
    def get_train(): ...  / get_val()       # optional: HDF5 files (a list, one file, or a list file's path),
                                            #   used when --train/--val are absent (training, k-fold, search)
    def get_features(): ... / get_labels()  # optional: dataset (or HDF5 group) name, or (name, adaptor_function)

A model module imports like a script run from its own folder: its folder and the working directory are on
``sys.path`` in every rank whatever started it (``-n``, an external ``mpirun``/``srun``, the pre-queue check),
so ``from mymodels import make_model`` (a file beside it, or in the working directory) works everywhere.
:func:`data_plan` is the one place that decides which files and datasets a run reads (``--train``/``--val``
and ``--features-name``/``--labels-name`` first, then the module's functions).

Saved models: ``.pt``/``.pth``/``.torch`` are whole torch modules written with ``torch.save(model)``;
``.json``/``.keras``/``.h5`` are Keras files and are handed to :mod:`nnlo.backends.keras_backend`
(imported lazily, so torch users never import TensorFlow). This module never imports a framework itself.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from nnlo.backends import model_kind
from nnlo.backends.keras_env import prepare_environment
from nnlo.errors import ConfigError, DataError, ModelError
from nnlo.legacy import with_hint

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
            value = self.optional("get_name")
            if value is not None and str(value).strip():
                return str(value).strip()
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
        return _call_builder(self.module.get_model, f"{self.path}: get_model()", "get_model", hyperparameters)

    def optional(self, name: str) -> Any:
        """The value of an optional contract function (get_train, get_features, ...), or None."""
        fn = getattr(self.module, name, None) if self.module is not None else None
        if fn is None:
            return None
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"{self.path}: {name}() raised {type(e).__name__}: {e}") from None


#: ``config.model`` of a model given as a Python object (:class:`ObjectModelSource`): ``python:<name>``
OBJECT_PREFIX = "python:"


@dataclass
class ObjectModelSource:
    """A model given as a Python object (the Python API): a function that builds one from keyword
    hyperparameters, or a model instance (torch ``nn.Module`` or Keras model), copied for every build so a
    search's trials each start from it. It has no module: data, dataset names and a search space come from
    the caller. ``path`` labels it in messages and in ``config.json`` (``python:<qualified name>``)."""

    obj: Any
    path: str = ""
    kind: str = "object"
    module: ModuleType | None = None

    def __post_init__(self) -> None:
        if not self.path:
            self.path = OBJECT_PREFIX + _qualname(self.obj if not self.is_instance else type(self.obj))

    @property
    def is_instance(self) -> bool:
        return model_kind(self.obj) in ("torch", "keras")

    @property
    def name(self) -> str:
        """The function's name, or the class name of an instance (see :func:`object_name`)."""
        return object_name(self.path)

    def build(self, **hyperparameters: Any) -> Any:
        """A model: the function's result, or a copy of the instance."""
        if self.is_instance:
            if hyperparameters:
                raise ModelError(f"{self.path} is a model instance and takes no hyperparameters "
                                 f"({', '.join(sorted(hyperparameters))}); pass a function that builds the model")
            return _copy_model(self.obj)
        return _call_builder(self.obj, f"{self.path}()", "it", hyperparameters)

    def optional(self, name: str) -> Any:
        """No module functions: the caller gives data and dataset names."""
        return None


#: function names that say nothing about the model: the name of their module stands for them
_GENERIC_NAMES = ("get_model", "<lambda>", "build", "build_model", "make_model", "model", "create_model")


def object_name(label: str) -> str:
    """The name of a model given as a Python object, from its ``python:<module>.<qualified name>`` label:
    the function's (or class's) name, or its module's last part for ``get_model``, lambdas and the like."""
    parts = [p for p in label[len(OBJECT_PREFIX):].split(".") if p]
    name = parts[-1] if parts else "model"
    if name in _GENERIC_NAMES and len(parts) > 1 and parts[-2] != "__main__":
        name = parts[-2]
    elif name in _GENERIC_NAMES and parts and parts[0] == "__main__":
        script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else ""
        name = script or name
    return safe_name(name) or "model"


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{module}.{name}" if module and module != "builtins" else str(name)


def _copy_model(model: Any) -> Any:
    """An independent copy of a model instance (its weights included)."""
    try:
        return copy.deepcopy(model)
    except Exception as deep_error:  # noqa: BLE001 - Keras models may refuse deepcopy: clone them

        if model_kind(model) != "keras":
            raise ModelError(f"cannot copy the model instance ({type(deep_error).__name__}: {deep_error}); "
                             f"pass a function that builds the model instead") from None
        import keras  # lazy: Keras loads TensorFlow

        clone = keras.models.clone_model(model)
        clone.set_weights(model.get_weights())
        return clone


def model_source_of(model: Any) -> ModelSource | ObjectModelSource:
    """The model a Python caller gave: a path (or a module object, or an importable module name) follows
    the model-module contract like ``--model``; a function or a model instance becomes an
    :class:`ObjectModelSource`. ModelError (one line) for anything else."""
    if isinstance(model, (ModelSource, ObjectModelSource)):
        return model
    if isinstance(model, ModuleType):
        file = getattr(model, "__file__", None)
        if not file:
            raise ModelError(f"module {model.__name__} has no file; pass the path of the model module")
        return load_model_source(file)
    if isinstance(model, (str, os.PathLike)):
        return load_model_source(model_path(model))
    if model is None:
        raise ModelError("no model given; pass model= a model module's path, a function that builds the model, "
                         "or a model instance")
    source = ObjectModelSource(model)
    if not source.is_instance and not callable(model):
        raise ModelError(f"model= got a {type(model).__name__}; pass a model module's path, a function that "
                         f"builds the model, or a torch/Keras model instance")
    return source


def model_path(model: str | os.PathLike[str]) -> str:
    """The file of a model given by path, or by an importable module name (``examples.digits_torch``)."""
    text = os.fspath(model)
    if Path(text).exists() or Path(text).suffix.lower() in (".py", *TORCH_SUFFIXES, *KERAS_SUFFIXES):
        return text
    if text.replace(".", "").replace("_", "").isalnum():
        try:
            spec = importlib.util.find_spec(text)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            return spec.origin
    return text  # the loader's one-line error names it


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
    importable(p)
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise ModelError(f"cannot import model module {p}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module

    prepare_environment()  # the module may import Keras at its top: TensorFlow reads its settings only once
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001
        del sys.modules[name]
        raise ModelError(with_hint(f"importing model module {p} raised {type(e).__name__}: {e}", e)) from None
    return module


def importable(module_path: Path) -> None:
    """Put the model module's folder, then the working directory, first on ``sys.path`` (each once).

    Upstream users ran ``python TrainingDriver.py`` (its folder on the path) with their model beside it or in
    the working directory; whatever starts nnlo's ranks (a console script, ``mpirun`` from another folder,
    ``srun``, the check probe) the same imports must resolve, so the loader, not the launcher, sees to it.
    """
    for folder in reversed((str(module_path.resolve().parent), os.getcwd())):
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)


def run_name(model: str, trial_name: str | None = None, *, import_module: bool = True) -> str:
    """The one name of a run: its folder (``nnlo-runs/<name>``), a search's output (``optimize-<name>``) and
    trials (``<name>-<trial>-fold-<f>``), a submitted run and its jobs. ``--trial-name`` if given, else the
    model module's ``get_name()``, else the model file's stem (a model object: its name, :func:`object_name`).

    import_module=False, for the submitting side (it imports no user module in its own process: the checks do,
    in a subprocess bounded in time): ``get_name()`` is read from the module's source, as the literal string it
    returns (:func:`declared_name`); a name it computes needs ``--trial-name`` (or ``nnlo submit --name``).
    """
    given = safe_name(trial_name or "")
    if given:
        return given
    if import_module or model.startswith(OBJECT_PREFIX):
        return model_name(model)
    return safe_name(declared_name(model) or "") or safe_name(Path(model).stem) or "run"


def declared_name(path: str | Path) -> str | None:
    """The literal string a model module's ``get_name()`` returns, read from its source without running it
    (None: no such function, a computed name, or no readable module)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_name":
            body = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
            if (len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str) and body[0].value.value.strip()):
                return body[0].value.value.strip()
            return None
    return None


def model_name(path: str) -> str:
    """The model's name for run folders: ``get_name()`` of a model module, else the file's stem.

    Importing here is no extra cost for the ranks (the module is cached for the training); an import error is
    left to the loader's check, which reports it in one line, and the name falls back to the stem.
    """
    if path.startswith(OBJECT_PREFIX):
        return object_name(path)
    try:
        name = load_model_source(path).name
    except (ModelError, ConfigError, DataError):
        name = Path(path).stem
    return safe_name(name) or Path(path).stem or "run"


def safe_name(name: str) -> str:
    """``name`` usable as one folder name: path separators and blanks become ``-``."""
    cleaned = "".join(c if c.isalnum() or c in "._-+" else "-" for c in str(name).strip())
    return cleaned.strip(".-") or ""


@dataclass(frozen=True)
class DataPlan:
    """What a run reads: the training and validation files (None: none given) with where each list came from
    (for messages), and the features/labels sources (names, (name, adaptor) pairs, or lists of them)."""

    train: list[Path] | None
    train_where: str
    val: list[Path] | None
    val_where: str
    features: Any
    labels: Any


def data_plan(config: Any, source: ModelSource, check_exists: bool = True,
              need: tuple[str, ...] = ("train", "val")) -> DataPlan:
    """The files and datasets of a run: ``--train``/``--val``/``--features-name``/``--labels-name`` when given,
    else the model module's ``get_train()``/``get_val()``/``get_features()``/``get_labels()``, else the
    defaults (no files, ``features``/``labels``). Used by training, k-fold and search, and by the checks.
    ``need``: the lists to resolve (a rank reads only its own; the others are None)."""
    train, train_where = _files(config, source, "train", check_exists) if "train" in need else (None, "")
    val, val_where = _files(config, source, "val", check_exists) if "val" in need else (None, "")
    features = config.features_name or source.optional("get_features") or "features"
    labels = config.labels_name or source.optional("get_labels") or "labels"
    return DataPlan(train, train_where, val, val_where, features, labels)


def _files(config: Any, source: ModelSource, which: str, check_exists: bool) -> tuple[list[Path] | None, str]:
    from nnlo.data.lists import read_list_file  # lazy: h5py (nnlo.data's HDF5 layer)

    given = getattr(config, which)
    if given:
        return list(read_list_file(given, check_exists=check_exists)), f"--{which} {given}"
    where = f"get_{which}() of {source.path}"
    value = source.optional(f"get_{which}")
    if not isinstance(value, (str, bytes, os.PathLike, dict)) and isinstance(value, Iterable):
        value = list(value)  # a tuple, a generator, a numpy array of names, glob.glob(...)
    if value is None or (isinstance(value, list) and not value) or value == "":
        return None, where
    if isinstance(value, (str, os.PathLike)):
        p = Path(os.path.expandvars(str(value))).expanduser()
        if p.suffix.lower() not in (".h5", ".hdf5", ".hdf", ".he5") and p.is_file() and not _is_hdf5(p):
            return list(read_list_file(p, check_exists=check_exists)), f"{where} (list {p})"
        files = [p]
    elif isinstance(value, list) and all(isinstance(f, (str, os.PathLike)) for f in value):
        files = [Path(os.path.expandvars(str(f))).expanduser() for f in value]
    else:
        raise ModelError(f"{where} returned {type(value).__name__} {value!r:.80}; return a list of HDF5 file "
                         f"paths (or one path, or a list file's path)")
    if check_exists:
        missing = [f for f in files if not f.is_file()]
        if missing:
            more = f" (and {len(missing) - 1} more of {len(files)})" if len(missing) > 1 else ""
            raise DataError(f"{missing[0]} returned by {where} does not exist{more}; fix get_{which}() or "
                            f"pass --{which} LIST")
    return files, where


def _is_hdf5(p: Path) -> bool:
    try:
        with p.open("rb") as f:
            return f.read(8) == b"\x89HDF\r\n\x1a\n"
    except OSError:
        return False


def _load_torch_file(path: str) -> Any:
    import torch  # lazy: torch takes seconds to import

    importable(Path(path))  # its classes' modules: in the working folder or beside the file, for every launch
    try:
        model = torch.load(path, map_location="cpu", weights_only=False)
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("nnlo_user_model_"):
            raise ModelError(f"cannot load torch model {path}: the module {e.name!r} of its classes is not "
                             f"importable (neither in the working folder {os.getcwd()} nor beside the file); run "
                             f"from its folder, install it or put it on PYTHONPATH") from None
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


def _call_builder(fn: Any, what: str, where: str, hyperparameters: dict[str, Any]) -> Any:
    """``fn(**hyperparameters)`` (a module's get_model or a model function), every failure one ModelError line
    naming ``what`` was called; ``where`` is what must take hyperparameters it refused."""
    try:
        model = fn(**hyperparameters)
    except TypeError as e:
        if hyperparameters:
            raise ModelError(f"{what} does not accept {sorted(hyperparameters)}: {e}; "
                             f"add those keyword arguments to {where}") from None
        raise ModelError(f"{what} raised TypeError: {e}") from None
    except Exception as e:  # noqa: BLE001 - a user's code may raise anything; report it in one line
        raise ModelError(with_hint(f"{what} raised {type(e).__name__}: {e}", e)) from None
    if model is None:
        raise ModelError(f"{what} returned None; it must return the model")
    return model

"""nnlo runtime: the MPI program whose ranks train models and search hyperparameters inside an allocation.

The Python API (``nnlo.train``, ``nnlo.optimize``, data sources, callbacks; see :mod:`nnlo.api` and
docs/python-api.md) is loaded on first use: ``import nnlo`` stays light (no torch, TensorFlow, mpi4py,
scikit-optimize or matplotlib).

``nnlo.optimize`` is the search function (:func:`nnlo.api.optimize`), not the package of the same name: the
package (``sys.modules["nnlo.optimize"]``, light to import) is imported below first, so that the import system
has set its attribute on this module once, and that attribute is then removed; from then on the name is looked
up in :data:`_LAZY` like every other name of the API. ``import nnlo.optimize.options`` and ``from
nnlo.optimize.space import Real`` reach the package's modules as always.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nnlo.contract import DISTRIBUTION as DISTRIBUTION  # the name on the package index, re-exported

__version__ = "0.1.0"

importlib.import_module("nnlo.optimize")  # the package first (it sets nnlo.optimize), then the function's name
globals().pop("optimize", None)

#: public name -> the module that defines it (imported when the name is first used)
_LAZY = {
    "train": "nnlo.api",
    "optimize": "nnlo.api",
    "run_train": "nnlo.api",
    "TrainResult": "nnlo.api",
    "SearchResult": "nnlo.api",
    "StopTraining": "nnlo.training.callbacks",
    "TrainConfig": "nnlo.config",
    "DataSource": "nnlo.data.source",
    "ArraySource": "nnlo.data.source",
    "GeneratorSource": "nnlo.data.source",
    "NnloError": "nnlo.errors",
    "ConfigError": "nnlo.errors",
    "DataError": "nnlo.errors",
    "ModelError": "nnlo.errors",
    "TrainingError": "nnlo.errors",
    "RankFailure": "nnlo.training.failure",
    # a submitted job's contract, for code that trains by itself (nnlo submit ... script FILE.py)
    "deadline": "nnlo.job",
    "seconds_left": "nnlo.job",
    "checkpointed": "nnlo.job",
    "stop_requested": "nnlo.script_stop",
    "run_dir": "nnlo.job",
    "EXIT_RESUMABLE": "nnlo.job",
}

__all__ = [
    "EXIT_RESUMABLE", "ArraySource", "ConfigError", "DataError", "DataSource", "GeneratorSource", "ModelError",
    "NnloError", "RankFailure", "SearchResult", "StopTraining", "TrainConfig", "TrainResult", "TrainingError",
    "checkpointed", "deadline", "optimize", "run_dir", "run_train", "seconds_left", "stop_requested", "train",
]

if TYPE_CHECKING:
    from nnlo.api import SearchResult, TrainResult, optimize, run_train, train
    from nnlo.config import TrainConfig
    from nnlo.data.source import ArraySource, DataSource, GeneratorSource
    from nnlo.errors import ConfigError, DataError, ModelError, NnloError, TrainingError
    from nnlo.job import EXIT_RESUMABLE, checkpointed, deadline, run_dir, seconds_left
    from nnlo.script_stop import stop_requested
    from nnlo.training.callbacks import StopTraining
    from nnlo.training.failure import RankFailure


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nnlo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

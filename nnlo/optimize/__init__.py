"""Hyperparameter optimization inside one allocation (``nnlo optimize``).

World rank 0 is the coordinator (:mod:`.coordinator`): it owns a search engine (:mod:`.engines`) and hands
trials to blocks of ranks as they free up; each block (:mod:`.block`) trains one parameter set at a time,
split into fold groups for k-fold. :mod:`.search` is the MPI-free bookkeeping (budget, pending points,
failures), :mod:`.results` the trials table, :mod:`.state` the atomic checkpoint of the whole search.

The package is also the Python API's search function: ``nnlo.optimize(model=..., space=..., ...)`` calls
:func:`nnlo.api.optimize` (a package attribute of ``nnlo`` cannot be a function and a package at once).
"""
import sys
import types
from typing import Any

from nnlo.optimize.space import Categorical, Integer, Real, Space

__all__ = ["Categorical", "Integer", "Real", "Space"]


class _SearchPackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from nnlo.api import optimize

        return optimize(*args, **kwargs)


sys.modules[__name__].__class__ = _SearchPackage

"""Hyperparameter optimization inside one allocation (``nnlo optimize``).

World rank 0 is the coordinator (:mod:`.coordinator`): it owns a search engine (:mod:`.engines`) and hands
trials to blocks of ranks as they free up; each block (:mod:`.block`) trains one parameter set at a time,
split into fold groups for k-fold. :mod:`.search` is the MPI-free bookkeeping (budget, pending points,
failures), :mod:`.results` the trials table, :mod:`.state` the atomic checkpoint of the whole search.

The search space's dimensions are importable from here (``from nnlo.optimize import Integer, Real``) and load
on first use, so importing a submodule (``nnlo.optimize.options``) stays light. The Python API's search
function is ``nnlo.optimize(...)``: the name ``optimize`` of the package ``nnlo`` is that function
(:func:`nnlo.api.optimize`, see :mod:`nnlo`), and this package is ``sys.modules["nnlo.optimize"]``.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["Categorical", "Integer", "Real", "Space"]

if TYPE_CHECKING:
    from nnlo.optimize.space import Categorical, Integer, Real, Space


def __getattr__(name: str) -> Any:
    if name in __all__:  # the space's types import numpy: only when asked for
        value = getattr(importlib.import_module("nnlo.optimize.space"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nnlo.optimize' has no attribute {name!r}")

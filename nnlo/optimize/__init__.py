"""Hyperparameter optimization inside one allocation (``nnlo optimize``).

World rank 0 is the coordinator (:mod:`.coordinator`): it owns a search engine (:mod:`.engines`) and hands
trials to blocks of ranks as they free up; each block (:mod:`.block`) trains one parameter set at a time,
split into fold groups for k-fold. :mod:`.search` is the MPI-free bookkeeping (budget, pending points,
failures), :mod:`.results` the trials table, :mod:`.state` the atomic checkpoint of the whole search.
"""
from nnlo.optimize.space import Categorical, Integer, Real, Space

__all__ = ["Categorical", "Integer", "Real", "Space"]

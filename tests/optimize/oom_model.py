"""A synthetic objective that does not fit a one-rank block's memory: test_placement_mpi.py runs it under
``nnlo optimize -n 4 --block-sizes 1,2 --mode allreduce``, where world rank 1 is the whole first block (rank 0
is the coordinator) and ranks 2-3 the second. ``evaluate`` runs on each fold group's top rank; on the one-rank
block it raises MemoryError, as a model too large for one rank would."""
from __future__ import annotations

from mpi4py import MPI

from nnlo.optimize.space import Real

#: the world ranks whose block has fewer than two ranks in the test's layout
SMALL_BLOCK_RANKS = frozenset({1})


def get_model(x: float = 0.0) -> None:
    return None


get_model.parameter_range = [Real(0.0, 1.0, name="x")]  # type: ignore[attr-defined]


def evaluate(params: dict, *, fold: int, n_fold: int) -> dict:
    if MPI.COMM_WORLD.Get_rank() in SMALL_BLOCK_RANKS:
        raise MemoryError("Unable to allocate 64.0 GiB for the activations")
    return {"val_loss": (params["x"] - 0.3) ** 2}

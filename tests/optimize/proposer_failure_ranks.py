"""Run under ``mpirun -np 2`` by test_proposers.py: rank 1 is a proposer whose engine raises on ask; rank 0
asks it for a proposal through :class:`MpiProposers` and writes what it got to ``DIR/rank-0.json``."""
from __future__ import annotations

import json
import sys

from mpi4py import MPI

from nnlo.optimize.engines import make_engine
from nnlo.optimize.proposers import TAG_PROPOSE, MpiProposers, run_proposer
from nnlo.optimize.space import Real, Space
from nnlo.training.failure import RankFailure


def main(out_dir: str) -> int:
    world = MPI.COMM_WORLD
    engine = make_engine("random", Space([Real(0.0, 1.0, name="a")]), 3)
    if world.Get_rank() == 1:
        def broken(pending: object) -> dict:
            raise ValueError("the acquisition found no finite point")

        engine.ask = broken  # type: ignore[method-assign,assignment]
        return run_proposer(world, 0, engine)
    proposers = MpiProposers(world, [1], engine)
    try:
        proposers.propose([])
        got = {"raised": None}
    except RankFailure as e:
        got = {"raised": str(e), "rank": e.rank, "role": e.role, "busy": sorted(proposers.buffer.busy)}
    world.send({"stop": True, "code": 0}, dest=1, tag=TAG_PROPOSE)
    with open(f"{out_dir}/rank-0.json", "w") as f:
        json.dump(got, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

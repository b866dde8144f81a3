"""MPI job for test_runtime_groups_mpi: rank 0 stands aside (like an optimization coordinator); ranks 1..3
form one training group on a split communicator and train on a k-fold split of the training files."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from mpi4py import MPI

from nnlo.config import TrainConfig
from nnlo.data import H5Dataset, kfold, read_list_file
from nnlo.training.driver import train

world = MPI.COMM_WORLD
model, train_list, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
group = world.Split(0 if world.rank == 0 else 1, world.rank)
if world.rank != 0:
    n = len(H5Dataset(read_list_file(train_list)))
    train_idx, val_idx = kfold(n, 3, seed=1)[0]
    cfg = TrainConfig(model=model, train=train_list, epochs=2, batch=8, mode="downpour",
                      model_args={"hidden": 6}, log_level="warning")
    result = train(group, cfg, train_indices=train_idx, val_indices=val_idx,
                   out_dir=out / "fold-0")
    rows = group.gather({"rank": world.rank, "result": result.to_dict(), "n_train": len(train_idx),
                         "n_val": len(val_idx)}, root=0)
    if group.rank == 0:
        (out / "results.json").write_text(json.dumps(rows))
group.Free()
world.Barrier()

"""Run under ``mpirun -np 3``: trainings through the Python API, each rank writing what it got as JSON.

argv: DATA_DIR OUT_DIR. Trainings (synchronous Downpour, so curves are deterministic):
  list      HDF5 list files, the model module's path (what ``nnlo train`` gets on its command line)
  arrays    an ArraySource of the same samples, the model as a function
  cut       a custom data source (the protocol, not ArraySource) and a model instance, stopped mid-epoch by
            an injected SIGUSR1 after update 9: a checkpoint in the middle of epoch 2
  resumed   the same, restore="auto": continues from that checkpoint
  callback  a callback that returns True after epoch 2 (and one that records every call)
  raising   a callback that raises nnlo.StopTraining after epoch 1
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import h5py
import numpy as np

import nnlo

data, out = Path(sys.argv[1]), Path(sys.argv[2])
from tests.runtime.models import tiny  # noqa: E402 - the checkout is on this program's PYTHONPATH

SYNC = dict(mode="downpour", synchronous=True, worker_optimizer="sgd:lr=0.1,momentum=0.9",
            optimizer="adam:lr=0.5", epochs=3, batch=8, checkpoint_interval=0, seed=3)


def arrays(list_file: Path) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for name in list_file.read_text().split():
        with h5py.File(list_file.parent / name) as f:
            xs.append(f["features"][:])
            ys.append(f["labels"][:])
    return np.concatenate(xs), np.concatenate(ys)


class Blobs:
    """A custom data source: the protocol only (len and batch by sample indices)."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.x[indices], self.y[indices]


x, y = arrays(data / "train.list")
xv, yv = arrays(data / "val.list")
from mpi4py import MPI  # noqa: E402

rank = MPI.COMM_WORLD.Get_rank()
results = {}


def keep(name: str, result: nnlo.TrainResult) -> None:
    results[name] = {"is_master": result.is_master, "history": result.history, "stopped": result.stopped_reason,
                     "epochs_done": result.epochs_done, "run_dir": str(result.run_dir),
                     "checkpoint": str(result.checkpoint) if result.checkpoint else None,
                     "history_path": str(result.history_path) if result.history_path else None,
                     "resumable": result.resumable}


keep("list", nnlo.train(model=tiny.__file__,
                        data=data / "train.list", val_data=data / "val.list", checkpoint=out / "list", **SYNC))
keep("arrays", nnlo.train(model=tiny.get_model, data=nnlo.ArraySource(x, y), val_data=nnlo.ArraySource(xv, yv),
                          config=nnlo.TrainConfig(checkpoint=str(out / "arrays"), **SYNC)))

import torch  # noqa: E402

torch.manual_seed(SYNC["seed"])
instance = tiny.get_model()  # the same initial weights as a seeded build
os.environ["NNLO_TEST_SIGNAL_AT_UPDATE"] = "9"
keep("cut", nnlo.train(model=instance, data=Blobs(x, y), val_data=Blobs(xv, yv), checkpoint=out / "cut", **SYNC))
del os.environ["NNLO_TEST_SIGNAL_AT_UPDATE"]
keep("resumed", nnlo.train(model=instance, data=Blobs(x, y), val_data=Blobs(xv, yv), checkpoint=out / "cut",
                           restore="auto", **SYNC))

seen: list[int] = []


def record(epoch: int, logs: dict) -> None:
    seen.append(epoch)
    assert "val_loss" in logs and logs["epoch"] == epoch


keep("callback", nnlo.train(model=tiny.get_model, data=nnlo.ArraySource(x, y), val_data=nnlo.ArraySource(xv, yv),
                            callbacks=[record, lambda epoch, logs: epoch >= 2], checkpoint=out / "callback",
                            **{**SYNC, "epochs": 5, "checkpoint_interval": 1}))
results["callback"]["seen"] = seen


def enough(epoch: int, logs: dict) -> None:
    raise nnlo.StopTraining("enough")


keep("raising", nnlo.train(model=tiny.get_model, data=nnlo.ArraySource(x, y), callbacks=enough,
                           checkpoint=out / "raising", **{**SYNC, "mode": "easgd", "synchronous": False}))

# a second training into a folder holding a run is refused on every rank, before any rank writes there;
# overwrite=True starts afresh
MPI.COMM_WORLD.Barrier()  # every rank has left the last training (rank 0 merged its logs)
before = sorted((p.name, p.stat().st_mtime_ns) for p in (out / "raising").rglob("*"))
try:
    nnlo.train(model=tiny.get_model, data=nnlo.ArraySource(x, y), checkpoint=out / "raising", **SYNC)
    results["again"] = {"refused": False}
except nnlo.RankFailure as e:
    results["again"] = {"refused": True, "message": e.message, "code": e.exit_code,
                        "untouched": sorted((p.name, p.stat().st_mtime_ns) for p in (out / "raising").rglob("*"))
                        == before}
keep("overwritten", nnlo.train(model=tiny.get_model, data=nnlo.ArraySource(x, y), checkpoint=out / "raising",
                               overwrite=True, **{**SYNC, "epochs": 1}))

(out / f"rank-{rank}.json").write_text(json.dumps(results))

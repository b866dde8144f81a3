"""Run under ``mpirun -np 3``: a training tracked with ``tensorboard=`` and ``mlflow=`` through the Python API.

argv: OUT_DIR. Synchronous Downpour on an ArraySource (deterministic); every job tracks into OUT_DIR/tb/<name>
and the MLflow file store OUT_DIR/mlruns:
  whole    4 epochs uninterrupted (the reference)
  cut      the same, a checkpoint after every epoch, stopped by an injected SIGUSR1 in epoch 3
  again    the same folder restored from the checkpoint of epoch 1 (as after a job killed past its checkpoint):
           epochs 2-4 are trained, and logged, again
Rank 0 writes OUT_DIR/results.json: each job's stopped reason and history.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

import nnlo

out = Path(sys.argv[1])
from tests.runtime.models import tiny  # noqa: E402 - the checkout is on this program's PYTHONPATH

rng = np.random.default_rng(0)
x = rng.normal(size=(96, 8)).astype("float32")
y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 1).astype("int64")
SYNC = dict(mode="downpour", synchronous=True, worker_optimizer="sgd:lr=0.1,momentum=0.9", optimizer="adam:lr=0.5",
            epochs=4, batch=8, checkpoint_interval=1, checkpoint_keep=10, seed=3, mlflow=(out / "mlruns").as_uri())
data, val = nnlo.ArraySource(x, y), nnlo.ArraySource(x[:32], y[:32])
results = {}


def run(name: str, folder: str, **options) -> None:
    result = nnlo.train(model=tiny.get_model, data=data, val_data=val, checkpoint=out / folder,
                        tensorboard=str(out / "tb" / folder), **SYNC, **options)
    results[name] = {"stopped": result.stopped_reason, "history": result.history}


run("whole", "whole")
os.environ["NNLO_TEST_SIGNAL_AT_UPDATE"] = "14"  # update 14: in epoch 3 (6 updates an epoch)
run("cut", "cut")
del os.environ["NNLO_TEST_SIGNAL_AT_UPDATE"]
oldest = sorted(p for p in (out / "cut" / "checkpoints").iterdir() if p.is_dir())[0]
run("again", "cut", restore=str(oldest))
from mpi4py import MPI  # noqa: E402

if MPI.COMM_WORLD.Get_rank() == 0:
    (out / "results.json").write_text(json.dumps(results))

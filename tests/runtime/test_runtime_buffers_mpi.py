"""BatchNorm running statistics (a model's buffers) for real, in every training shape: the workers' statistics
reach the master's model at each epoch end (the master never trains, so without them it would validate and
save a model whose statistics are still the initial zeros and ones)."""
from __future__ import annotations

import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from nnlo.checkpoint import list_checkpoints
from nnlo.models import load_model_source

pytestmark = [pytest.mark.mpi]
MODELS = Path(__file__).resolve().parent / "models"

COMMON = ["--epochs", "2", "--batch", "8", "--worker-optimizer", "sgd:lr=0.1", "--checkpoint-interval", "1"]
SHAPES = {  # name: (ranks, extra arguments, parts whose mean the master holds; None: not checked)
    "downpour": (3, ["--mode", "downpour"], ["worker-0.pkl", "worker-1.pkl"]),
    "synchronous": (3, ["--mode", "downpour", "--synchronous"], ["worker-0.pkl", "worker-1.pkl"]),
    "easgd": (3, ["--mode", "easgd"], ["worker-0.pkl", "worker-1.pkl"]),
    "gem": (3, ["--mode", "gem"], ["worker-0.pkl", "worker-1.pkl"]),
    "allreduce": (2, ["--mode", "allreduce"], None),
    "sub-masters": (5, ["--mode", "downpour", "--n-masters", "2"], None),
    "worker groups": (5, ["--mode", "downpour", "--n-processes", "2"], ["worker-0.pkl", "worker-1.pkl"]),
}


def _part(ckpt: Path, name: str) -> dict:
    with open(ckpt / name, "rb") as f:
        return pickle.load(f)


def _bn(model: torch.nn.Module) -> torch.nn.BatchNorm1d:
    return next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d))


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_saved_and_validated_model_has_the_workers_batchnorm_statistics(run_train, blobs, shape) -> None:
    ranks, args, worker_parts = SHAPES[shape]
    run = run_train(ranks, *COMMON, *args, model="tiny_bn.py")
    assert run.rc == 0, run.err
    load_model_source(str(MODELS / "tiny_bn.py"))  # model.pt pickles TinyBN: its module must be imported
    model = torch.load(run.out_dir / "model.pt", weights_only=False)
    bn = _bn(model)
    assert int(bn.num_batches_tracked) > 0, "the saved model's BatchNorm never saw a batch"
    assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
    assert bool(model.mask.all())  # the boolean buffer stayed what it was

    # the validation in the history used exactly the statistics that were saved
    with h5py.File(Path(blobs["dir"]) / "val_0.h5") as f:
        x, y = torch.from_numpy(f["features"][:]), torch.from_numpy(f["labels"][:]).argmax(1)
    model.eval()
    with torch.no_grad():
        val_loss = float(torch.nn.functional.cross_entropy(model(x), y))
    assert val_loss == pytest.approx(run.history["final"]["val_loss"], rel=1e-4)

    if worker_parts is not None:  # the master holds the mean of what its workers hold at the last epoch end
        last = list_checkpoints(run.out_dir / "checkpoints")[-1]
        master = _part(last, "master.pkl")["buffers"]
        workers = [_part(last, p)["buffers"] for p in worker_parts]
        np.testing.assert_allclose(master, np.mean(workers, axis=0), rtol=1e-6, atol=1e-7)
        assert not np.allclose(workers[0], workers[1])  # two workers, two shards: a mean of different things

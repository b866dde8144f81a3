"""--validate-every N (master and all-reduce, recorded in history.json) and HDF5 groups as multi-input."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from nnlo.config import TrainConfig
from nnlo.data import H5Dataset
from nnlo.errors import ConfigError, DataError
from tests.helpers.runtime import MODELS, write_blobs

TWO_INPUTS = '''
import torch
from torch import nn


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(5, 6), nn.Linear(3, 6)
        self.out = nn.Linear(12, 3)

    def forward(self, a, b):
        return self.out(torch.tanh(torch.cat([self.a(a), self.b(b)], dim=1)))


def get_model():
    return TwoInputs()
'''


def write_grouped(folder: Path, n_train: int = 60, n_val: int = 24) -> dict[str, Path]:
    """Files whose inputs are a group 'inputs' of two datasets, created in reverse name order."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for name, n in (("train", n_train), ("val", n_val)):
        y = rng.integers(0, 3, size=n)
        with h5py.File(folder / f"{name}.h5", "w") as f:
            g = f.create_group("inputs")
            g["b_second"] = (y[:, None] + rng.normal(0, 0.3, (n, 3))).astype(np.float32)
            g["a_first"] = (y[:, None] - rng.normal(0, 0.3, (n, 5))).astype(np.float32)
            f["labels"] = np.eye(3, dtype=np.float32)[y]
        (folder / f"{name}.list").write_text(f"{name}.h5\n")
    (folder / "two_inputs.py").write_text(TWO_INPUTS)
    return {"train": folder / "train.list", "val": folder / "val.list", "model": folder / "two_inputs.py",
            "dir": folder}


def test_an_hdf5_group_reads_as_its_datasets_in_name_order(tmp_path):
    data = write_grouped(tmp_path)
    with H5Dataset([data["dir"] / "train.h5"], features="inputs", labels="labels") as ds:
        x, y = ds.read([0, 3, 7])
        with h5py.File(data["dir"] / "train.h5") as f:
            a, b = f["inputs/a_first"][[0, 3, 7]], f["inputs/b_second"][[0, 3, 7]]
    assert isinstance(x, list) and [v.shape for v in x] == [(3, 5), (3, 3)]
    assert np.array_equal(x[0], a) and np.array_equal(x[1], b) and y.shape == (3, 3)
    # an adaptor given with a group applies to each of its arrays
    with H5Dataset([data["dir"] / "train.h5"], features=("inputs", lambda v: v * 2), labels="labels") as ds:
        x2, _ = ds.read([0, 3, 7])
    assert np.array_equal(x2[0], 2 * a) and np.array_equal(x2[1], 2 * b)


def test_an_empty_group_is_one_line(tmp_path):
    with h5py.File(tmp_path / "e.h5", "w") as f:
        f.create_group("inputs")
        f["labels"] = np.zeros(3, dtype=np.float32)
    with pytest.raises(DataError, match="group 'inputs' holds no datasets"):
        H5Dataset([tmp_path / "e.h5"], features="inputs")


def test_the_torch_backend_trains_a_two_input_model_on_a_group(tmp_path):
    from nnlo.backends.torch_backend import TorchBackend
    from nnlo.models import load_model_source

    data = write_grouped(tmp_path)
    torch.manual_seed(0)
    backend = TorchBackend(load_model_source(str(data["model"])).build(), "categorical_crossentropy",
                           "adam:lr=0.01")
    with H5Dataset([data["dir"] / "train.h5"], features="inputs", labels="labels") as ds:
        x, y = ds.read(np.arange(60))
        before = backend.evaluate_batch(x, y)
        for _ in range(30):
            backend.train_on_batch(x, y)
        after = backend.evaluate_batch(x, y)
    assert before["count"] == after["count"] == 60
    assert after["loss_sum"] < before["loss_sum"]


def test_validate_every_is_a_count_of_updates():
    assert TrainConfig(model="m.py", validate_every=3).validate().validate_every == 3
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="--validate-every"):
            TrainConfig(model="m.py", validate_every=bad).validate()  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def blobs(tmp_path_factory):
    return write_blobs(tmp_path_factory.mktemp("blobs"))


def _train(nnlo_cli, out: Path, np_: int, args: list[str], data: dict[str, Path], model: Path) -> dict:
    r = nnlo_cli(["train", "--model", str(model), "--train", str(data["train"]), "--val", str(data["val"]),
                  "--checkpoint", str(out), *args], cwd=out.parent, mpirun_np=np_)
    assert r.rc == 0, r.err[-3000:]
    return json.loads((out / "history.json").read_text())


@pytest.mark.mpi
@pytest.mark.parametrize("np_, mode, expect", [
    (3, ["--mode", "downpour"], [4, 8, 12]),  # 2 workers x 3 batches x 2 epochs = 12 master updates
    (2, ["--mode", "allreduce"], [2, 4, 6]),  # 96 / (2 x 16) = 3 steps x 2 epochs
])
def test_validate_every_is_recorded_with_its_update_count(nnlo_cli, blobs, tmp_path, np_, mode, expect):
    every = expect[0]
    h = _train(nnlo_cli, tmp_path / "run", np_, [*mode, "--epochs", "2", "--batch", "16",
                                                 "--validate-every", str(every)], blobs, MODELS / "tiny.py")
    assert [v["updates"] for v in h["validations"]] == expect
    assert [v["epoch"] for v in h["validations"]] == [1, 2, 2]
    assert all(v["val_loss"] > 0 and 0 <= v["val_accuracy"] <= 1 for v in h["validations"])
    # the per-epoch history keeps its meaning: one entry per epoch, validated at its end
    assert [e["epoch"] for e in h["history"]] == [1, 2] and all("val_loss" in e for e in h["history"])
    assert h["history"][-1]["updates"] == expect[-1]
    # the last periodic validation and the epoch's own one judge the same weights
    assert h["validations"][-1]["val_loss"] == pytest.approx(h["history"][-1]["val_loss"], rel=1e-5)


@pytest.mark.mpi
def test_without_validate_every_there_are_no_periodic_validations(nnlo_cli, blobs, tmp_path):
    h = _train(nnlo_cli, tmp_path / "run", 3, ["--epochs", "1", "--batch", "16", "--mode", "downpour"], blobs,
               MODELS / "tiny.py")
    assert h["validations"] == [] and len(h["history"]) == 1


@pytest.mark.mpi
def test_a_group_of_inputs_trains_a_two_input_torch_model(nnlo_cli, tmp_path):
    data = write_grouped(tmp_path / "data")
    h = _train(nnlo_cli, tmp_path / "run", 3, ["--features-name", "inputs", "--epochs", "2", "--batch", "10",
                                               "--mode", "downpour"], data, data["model"])
    assert [e["samples"] for e in h["history"]] == [60, 60] and h["final"]["val_loss"] > 0

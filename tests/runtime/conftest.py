"""Fixtures for the runtime tests: a tiny real HDF5 data set and a helper that runs ``nnlo train`` for real
(under the venv's mpirun, or through ``-n`` which re-launches), returning exit status and output."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
TIMEOUT = 240  # generous: the machine is shared; the runs themselves take a few seconds


def write_blobs(folder: Path, n_train: int = 96, n_val: int = 30, files: int = 2, seed: int = 0) -> dict[str, Path]:
    """Three Gaussian classes in 8 dimensions: train files + one val file, one-hot float32 labels."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 2.0, size=(3, 8)).astype(np.float32)

    def make(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 3, size=n)
        x = centers[y] + rng.normal(0, 1.0, size=(n, 8)).astype(np.float32)
        return x.astype(np.float32), np.eye(3, dtype=np.float32)[y]

    names = []
    x, y = make(n_train)
    for k, part in enumerate(np.array_split(np.arange(n_train), files)):
        name = f"train_{k}.h5"
        with h5py.File(folder / name, "w") as f:
            f["features"], f["labels"] = x[part], y[part]
        names.append(name)
    (folder / "train.list").write_text("\n".join(names) + "\n")
    xv, yv = make(n_val)
    with h5py.File(folder / "val_0.h5", "w") as f:
        f["features"], f["labels"] = xv, yv
    (folder / "val.list").write_text("val_0.h5\n")
    return {"train": folder / "train.list", "val": folder / "val.list", "dir": folder}


@pytest.fixture(scope="session")
def blobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_blobs(tmp_path_factory.mktemp("blobs"))


@dataclass
class Run:
    rc: int
    out: str
    err: str
    out_dir: Path

    @property
    def history(self) -> dict[str, Any]:
        return json.loads((self.out_dir / "history.json").read_text())

    def error_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.startswith("nnlo: error:")]


@pytest.fixture
def run_train(mpirun: str, nnlo_env: dict[str, str], blobs: dict[str, Path], tmp_path: Path):
    """run_train(np, *args, env=None, launcher="mpirun"|"-n", data=True) -> Run."""
    counter = iter(range(1000))

    def run(np_: int, *args: str, env: dict[str, str] | None = None, launcher: str = "mpirun",
            data: bool = True, out_dir: Path | None = None, model: str | None = "tiny.py") -> Run:
        out = out_dir or tmp_path / f"run{next(counter)}"
        argv = ["train"]
        if model is not None:
            argv += ["--model", str(MODELS / model) if not Path(model).is_absolute() else model]
        if data:
            argv += ["--train", str(blobs["train"]), "--val", str(blobs["val"])]
        argv += ["--checkpoint", str(out), *args]
        if launcher == "mpirun":
            cmd = [mpirun, "-np", str(np_), sys.executable, "-m", "nnlo_sched", *argv]
        else:
            cmd = [sys.executable, "-m", "nnlo_sched", *argv, "-n", str(np_)]
        proc = subprocess.run(cmd, env={**nnlo_env, **(env or {})}, capture_output=True, text=True,
                              timeout=TIMEOUT)
        return Run(proc.returncode, proc.stdout, proc.stderr, out)

    return run

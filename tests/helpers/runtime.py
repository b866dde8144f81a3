"""The runtime tests' tiny data set, their test models, and a training run's result."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from tests.helpers.env import RUNTIME_MODELS as MODELS

#: Seconds a real launch of a tiny run may take on a busy 2-core machine (they take seconds).
TIMEOUT = 240

__all__ = ["MODELS", "TIMEOUT", "Run", "write_blobs"]


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


@dataclass
class Run:
    """A finished ``nnlo train``: exit status, output, and its run directory."""

    rc: int
    out: str
    err: str
    out_dir: Path

    @property
    def history(self) -> dict[str, Any]:
        return json.loads((self.out_dir / "history.json").read_text())

    def error_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.startswith("nnlo: error:")]

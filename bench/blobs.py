"""The tiny HDF5 data set the benchmarks and the tests train on: Gaussian blobs in a few files.

Why here: a benchmark never imports the tests (``bench/`` runs on its own, and a test helper moved or renamed
must not break it silently), so what both need lives in ``bench/`` and the tests import it from here.
"""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np


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

"""Small HDF5 files whose rows encode their own global sample index, so any read can be checked exactly."""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np


def write_indexed(folder: Path, sizes: list[int], features: str = "features", labels: str = "labels",
                  width: int = 3) -> list[Path]:
    """Files of the given sizes; sample ``g`` (global index) has features ``[g, g+0.5, ...]`` and label ``g``."""
    paths, start = [], 0
    for k, n in enumerate(sizes):
        g = np.arange(start, start + n, dtype=np.float32)
        path = folder / f"part{k}.h5"
        with h5py.File(path, "w") as f:
            f[features] = g[:, None] + 0.5 * np.arange(width, dtype=np.float32)[None, :]
            f[labels] = g
        paths.append(path)
        start += n
    return paths

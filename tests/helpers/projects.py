"""An upstream user's project folder as upstream users have it, for the upstream-user runtime tests.

``project/`` holds the data (HDF5 files) and ``project/models/`` a model module that imports a sibling file
(``from mymodels import make_model``) and a module of the working directory (``import site_settings``), names
itself with ``get_name()`` and finds its data with ``get_train()``/``get_val()`` and an adaptor in
``get_features()`` (the features are stored as (N, 2, 4) and the model takes (N, 8)).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from tests.helpers.runtime import write_blobs

SIBLING = '''
from torch import nn


def make_model(hidden):
    return nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 3))
'''

MODEL = '''
import numpy as np
import site_settings  # a module of the working directory
from mymodels import make_model  # a file beside this one
from skopt.space import Integer

DATA = {data!r}


def get_model(hidden=site_settings.HIDDEN):
    return make_model(hidden)


get_model.parameter_range = [Integer(4, 16, name="hidden")]


def get_name():
    return "sibling-mlp"


def get_train():
    return {train!r}


def get_val():
    return {val!r}


def get_features():
    return ("cube", lambda x: np.reshape(x, (x.shape[0], -1)))


def get_labels():
    return "labels"
'''


def write_project(root: Path, train: list[str] | None = None) -> dict[str, Any]:
    """A user's folder: data/ (features stored as 'cube' (N, 2, 4)), models/model.py + models/mymodels.py,
    and site_settings.py in the folder itself (the working directory of the runs)."""
    blobs = write_blobs(root / "data")
    files = [*sorted((root / "data").glob("train_*.h5")), root / "data" / "val_0.h5"]
    for path in files:
        with h5py.File(path, "a") as f:
            f["cube"] = np.asarray(f["features"]).reshape(-1, 2, 4)
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "models" / "mymodels.py").write_text(SIBLING)
    (root / "site_settings.py").write_text("HIDDEN = 8\n")
    train_files = train if train is not None else [str(p) for p in sorted((root / "data").glob("train_*.h5"))]
    (root / "models" / "model.py").write_text(
        MODEL.format(data=str(root / "data"), train=train_files, val=[str(root / "data" / "val_0.h5")]))
    return {"root": root, "model": root / "models" / "model.py", **blobs}


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def error_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.startswith("nnlo: error:")]

    def warning_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.startswith("nnlo: warning:")]

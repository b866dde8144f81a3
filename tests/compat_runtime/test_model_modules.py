"""Model modules as upstream users have them: sibling imports in every rank, get_train/get_val/get_features
with adaptors, get_name naming the run folder (in-process parts and real external ``mpirun`` runs)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from nnlo.config import TrainConfig
from nnlo.data import H5Dataset
from nnlo.errors import DataError, ModelError
from nnlo.models import data_plan, load_model_source, model_name
from nnlo_sched.checks import check_run
from nnlo.api import default_run_dir as default_out_dir
from tests.helpers.projects import write_project


def test_a_sibling_and_a_working_directory_import_resolve_in_process(project, tmp_path, clean_path):
    os.chdir(project["root"])
    source = load_model_source(str(project["model"]))
    assert source.build().__class__.__name__ == "Sequential"
    assert source.name == "sibling-mlp"


def test_a_module_whose_sibling_is_missing_is_one_line(tmp_path, clean_path):
    (tmp_path / "m.py").write_text("from nowhere_sibling import f\ndef get_model():\n    return f()\n")
    with pytest.raises(ModelError, match="nowhere_sibling"):
        load_model_source(str(tmp_path / "m.py"))


def test_a_saved_torch_model_finds_its_classes_in_the_working_folder(tmp_path, clean_path):
    """mpi_learn's ``mpirun -np 3 nnlo train MODEL.torch ...`` in the folder of the model's classes
    (``TorchModels.py``): the console script's ranks have no working folder on ``sys.path`` of their own, and
    the saved model must load as under ``nnlo train -n 3`` (whose ranks are ``python -m``)."""
    import sys

    import torch

    (tmp_path / "TorchModels.py").write_text(
        "from torch import nn\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n        return self.fc(x)\n")
    (tmp_path / "saved").mkdir()
    sys.path.insert(0, str(tmp_path))
    try:
        import TorchModels  # type: ignore[import-not-found]

        torch.save(TorchModels.Net(), tmp_path / "saved" / "net.torch")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("TorchModels", None)
    os.chdir(tmp_path)
    assert str(tmp_path) not in sys.path and "" not in sys.path[:1]
    try:
        model = load_model_source("saved/net.torch").build()
    finally:
        sys.modules.pop("TorchModels", None)
    assert type(model).__name__ == "Net" and model(torch.zeros(1, 4)).shape == (1, 2)


def test_get_train_get_val_and_the_adaptor_drive_the_data(project, clean_path):
    os.chdir(project["root"])
    source = load_model_source(str(project["model"]))
    plan = data_plan(TrainConfig(model=str(project["model"])), source)
    assert [p.name for p in plan.train] == ["train_0.h5", "train_1.h5"] and plan.val[0].name == "val_0.h5"
    assert "get_train()" in plan.train_where
    with H5Dataset(plan.train, features=plan.features, labels=plan.labels) as ds:
        x, _ = ds.read([0, 5, 95])
        raw = H5Dataset(plan.train, features="features", labels="labels").read([0, 5, 95])[0]
    assert x.shape == (3, 8) and np.array_equal(x, raw)  # the adaptor reshaped (N, 2, 4) to (N, 8)
    # options come first: --features-name overrides get_features (and its adaptor)
    plan2 = data_plan(TrainConfig(model=str(project["model"]), features_name="features",
                                  train=str(project["train"])), source)
    assert plan2.features == "features" and plan2.train_where.startswith("--train")


@pytest.mark.parametrize("returned, expect", [
    ("LIST", ["train_0.h5", "train_1.h5"]),  # a list file's path
    ("ONE", ["train_0.h5"]),  # one HDF5 file
])
def test_get_train_may_return_a_list_file_or_one_file(tmp_path, returned, expect, clean_path):
    proj = write_project(tmp_path / "p")
    value = str(proj["train"]) if returned == "LIST" else str(proj["dir"] / "train_0.h5")
    old = "def get_train():\n    return"
    text = proj["model"].read_text().replace(old, f"{old} {value!r} or")
    proj["model"].write_text(text)
    os.chdir(proj["root"])
    plan = data_plan(TrainConfig(model=str(proj["model"])), load_model_source(str(proj["model"])))
    assert [p.name for p in plan.train] == expect


def test_missing_files_of_get_train_are_one_line(tmp_path, clean_path):
    proj = write_project(tmp_path / "p", train=[str(tmp_path / "gone.h5")])
    os.chdir(proj["root"])
    with pytest.raises(DataError, match=r"gone\.h5 returned by get_train\(\)"):
        data_plan(TrainConfig(model=str(proj["model"])), load_model_source(str(proj["model"])))


@pytest.mark.slow
def test_the_pre_queue_probe_imports_siblings_and_opens_the_adapted_data(project):
    config = TrainConfig(model="models/model.py")  # relative to the submission's working directory
    assert check_run(config, None, cwd=project["root"]) == []
    bad = TrainConfig(model="models/model.py", features_name="nope")
    with pytest.raises(Exception, match="no dataset 'nope'"):
        check_run(bad, None, cwd=project["root"])


def test_get_name_names_the_default_run_folder(project, tmp_path, clean_path):
    os.chdir(project["root"])
    assert default_out_dir(TrainConfig(model=str(project["model"]))) == str(Path("nnlo-runs") / "sibling-mlp")
    assert default_out_dir(TrainConfig(model=str(project["model"]), trial_name="t1")) == str(Path("nnlo-runs") / "t1")
    (tmp_path / "plain.py").write_text("def get_model():\n    return None\n")
    assert model_name(str(tmp_path / "plain.py")) == "plain"  # no get_name: the stem
    (tmp_path / "odd.py").write_text("def get_model():\n    return None\ndef get_name():\n    return 'a/b c'\n")
    assert model_name(str(tmp_path / "odd.py")) == "a-b-c"  # one folder, never a path
    assert model_name(str(tmp_path / "missing.py")) == "missing"


@pytest.mark.mpi
@pytest.mark.parametrize("absolute, launch", [(False, "mpirun"), (True, "mpirun"), (False, "-n")])
def test_external_mpirun_from_another_directory_imports_siblings(project, nnlo_cli, absolute, launch):
    """``mpirun -np 3 nnlo train --model models/model.py`` from the user's folder (not the repository):
    every rank imports the sibling and the working-directory module; get_train/get_val/the adaptor feed the
    data; get_name names the run folder. ``nnlo train -n 3`` from there too."""
    root = project["root"]
    model = str(project["model"]) if absolute else "models/model.py"
    args = ["train", "--model", model, "--epochs", "1", "--batch", "16", "--mode", "downpour"]
    r = nnlo_cli([*args, "-n", "3"], cwd=root) if launch == "-n" else nnlo_cli(args, cwd=root, mpirun_np=3)
    assert r.rc == 0, r.err[-3000:]
    history = json.loads((root / "nnlo-runs" / "sibling-mlp" / "history.json").read_text())
    assert history["history"][0]["samples"] == 96 and history["history"][0]["val_loss"] > 0


@pytest.mark.parametrize("body, ok", [
    ("return iter(FILES)", True),  # any iterable of paths
    ("return tuple(FILES)", True),
    ("return []", None),  # no files: no training data
    ("return None", None),
    ("return 42", False),
    ("return [1, 2]", False),
    ("raise RuntimeError('no network')", False),
])
def test_what_get_train_may_return(tmp_path, body, ok, clean_path):
    proj = write_project(tmp_path / "p")
    files = [str(p) for p in sorted(proj["dir"].glob("train_*.h5"))]
    head = f"FILES = {files!r}\n\n\ndef get_train():\n    {body}\n"
    text = proj["model"].read_text().replace("def get_train():", head)
    proj["model"].write_text(text)
    os.chdir(proj["root"])
    config, source = TrainConfig(model=str(proj["model"])), load_model_source(str(proj["model"]))
    if ok is False:
        with pytest.raises(ModelError, match=r"get_train\(\)"):
            data_plan(config, source)
        return
    plan = data_plan(config, source)
    assert (plan.train is None) if ok is None else ([str(p) for p in plan.train] == files)

"""A torch training rank imports only what it uses: no TensorFlow/Keras, no skopt, no matplotlib.

One real single-process ``nnlo train --mode allreduce`` of a torch model runs in a subprocess (MPI singleton:
no mpirun), after importing every module a rank of any mode enters (master, worker, serve, sub-master,
groups, validation); at exit it lists ``sys.modules``. Start-up is measured by ``bench/run.sh startup``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.runtime import MODELS, write_blobs

pytestmark = [pytest.mark.slow]

FORBIDDEN = ("tensorflow", "keras", "skopt", "matplotlib", "sklearn", "pandas")
ENTRY_MODULES = ("nnlo.training.driver", "nnlo.training.master", "nnlo.training.worker", "nnlo.training.serve",
                 "nnlo.training.submaster", "nnlo.training.groups", "nnlo.training.allreduce",
                 "nnlo.training.validation", "nnlo.training.modes", "nnlo.transport", "nnlo.backends")

SCRIPT = """
import atexit, importlib, json, os, runpy, sys
out = sys.argv[1]
def dump():
    with open(out, "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(dump)
exit_now = os._exit
def _exit(code):  # the runtime may leave through os._exit (no atexit): list the modules first
    dump()
    exit_now(code)
os._exit = _exit
for name in sys.argv[2].split(","):
    importlib.import_module(name)
sys.argv = ["nnlo", *sys.argv[3:]]
runpy.run_module("nnlo_sched", run_name="__main__")
"""


def test_a_torch_rank_imports_no_tensorflow_skopt_or_matplotlib(tmp_path: Path, nnlo_env: dict[str, str]) -> None:
    data = write_blobs(tmp_path / "data", n_train=32, n_val=8, files=1)
    listing = tmp_path / "modules.json"
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(listing), ",".join(ENTRY_MODULES), "train", "--mode", "allreduce",
         "--model", str(MODELS / "tiny.py"), "--train", str(data["train"]), "--val", str(data["val"]),
         "--epochs", "1", "--batch", "16", "--trial-name", "imports"],
        capture_output=True, text=True, env=nnlo_env, cwd=tmp_path, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    modules = json.loads(listing.read_text())
    assert "torch" in modules and "nnlo.training.allreduce" in modules  # it did train, with torch
    heavy = sorted({m for m in modules if m.split(".")[0] in FORBIDDEN})
    assert not heavy, f"a torch training rank imported {heavy[:10]}"


MASTER_THEN_WORKER = """
import sys
import numpy as np
import torch
from nnlo.backends.torch_backend import TorchBackend

b = TorchBackend(torch.nn.Sequential(torch.nn.Linear(4, 3)), "categorical_crossentropy", "adam:lr=0.01")
x, y = np.ones((2, 4), np.float32), np.eye(3, dtype=np.float32)[[0, 2]]
b.set_weights(b.get_weights() * 0.5)  # what a master does with its model: weights in and out, evaluate, save
b.evaluate_batch(x, y)
b.save_model(sys.argv[1])
master = "torch._dynamo" in sys.modules
b.train_on_batch(x, y)  # a worker's step builds the optimizer
print(master, b.optimizer_state()["param_groups"][0]["lr"])
"""


def test_a_master_builds_no_torch_optimizer(tmp_path: Path, nnlo_env: dict[str, str]) -> None:
    """torch.optim's first call imports torch._dynamo (as long again as ``import torch``): a master, which only
    moves weights, evaluates and saves, never pays it; a worker's first step builds the optimizer as specified."""
    run = subprocess.run([sys.executable, "-c", MASTER_THEN_WORKER, str(tmp_path / "model")], capture_output=True,
                         text=True, env=nnlo_env, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["False", "0.01"]


def test_python_m_nnlo_is_one_line_naming_the_command_line(capsys) -> None:
    """``python -m nnlo`` (the runtime package) says where the command line is (``python -m nnlo_sched``)."""
    import runpy

    with pytest.raises(SystemExit) as done:
        runpy.run_module("nnlo", run_name="__main__")
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and "python -m nnlo_sched" in err

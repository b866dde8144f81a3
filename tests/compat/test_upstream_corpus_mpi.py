"""A corpus of upstream command lines (the README lines of NNLO and mpi_learn, with small local data) run
unchanged after ``nnlo train``, from a working directory of their own. What was trained is read back from the
run's history.json / config.json: the mode, the workers, the epochs, every training sample seen once per epoch.

Each line runs once, and each launcher is real once across the corpus: the NNLO line under ``nnlo train -n 3``
(the relaunch: the options parsed and checked before any rank starts, the ranks started by nnlo), the Keras line
under a real external ``mpirun -np 3 <venv>/nnlo train ...`` (TensorFlow stays out of the warm world's ranks),
the sibling-import line as the ranks of an external ``mpirun -np 3`` run it, in the warm MPI world. The other
combinations reach no code of their own (docs/testing.md, "What was merged or moved"): the relaunch of a
sibling-import model is ``tests/compat_runtime/test_model_modules.py``'s ``-n`` case, the relaunch of a Keras
JSON model ``tests/keras/test_keras_mpi.py::test_mpi_learn_style_invocation_with_a_json_model``.

Bounded: 8x8 digits (1,437 training samples in two files), one epoch per run.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import pytest

from nnlo.data.cache import cache_name
from tests.helpers.env import example

pytestmark = [pytest.mark.mpi]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv whose nnlo and mpirun the corpus runs
EXAMPLES = REPO / "examples"
TIMEOUT = 300
HAVE_TF = importlib.util.find_spec("tensorflow") is not None

#: a model module importing a module that sits beside it, as upstream's examples import models.Models
SIBLING_MODULE = '''
from torch import nn

def make_model(hidden):
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
'''
SIBLING_USER = '''
from mymodels import make_model

def get_model(hidden=32):
    return make_model(hidden)
'''


@dataclass(frozen=True)
class Line:
    """One upstream command line (words after the driver's name) and what it must train."""

    name: str
    argv: tuple[str, ...]  # {model}, {json}, {sibling} are filled in; T.list / V.list lie in the working dir
    run_dir: str  # relative to the working directory
    mode: str
    workers: int
    backend: str = "torch"
    warnings: tuple[str, ...] = ()  # options that must warn exactly once
    needs_tf: bool = False
    cache: str | None = None  # the --cache-data folder (relative to the working directory), if any


CORPUS = [
    # NNLO README: mpirun -np 3 python TrainingDriver.py --model examples/example_mnist_torch.py ...
    Line("training-driver", ("--model", "{model}", "--loss", "categorical_crossentropy", "--epochs", "1",
                             "--trial-name", "n3g1epoch1", "--train_data", "T.list", "--val_data", "V.list",
                             "--mode", "sgd", "--early", "val_loss,~<,4", "--verbose", "--cache-data", "node-cache"),
         "nnlo-runs/n3g1epoch1", "downpour", 2, warnings=("--verbose",), cache="node-cache"),
    # mpi_learn README: mpirun -n 3 python3 MPIGDriver.py dummy.json train.list test.list --tf --mode easgd ...
    Line("mpidriver-keras-json", ("{json}", "T.list", "V.list", "--loss", "categorical_crossentropy", "--epochs",
                                  "1", "--master-gpu", "--features-name", "features", "--labels-name", "labels",
                                  "--tf", "--easgd", "--worker-optimizer", "rmsprop", "--checkpoint", "ganGP",
                                  "--checkpoint-int", "1", "--batch", "64"),
         "ganGP", "easgd", 2, backend="keras", warnings=("--master-gpu",), needs_tf=True),
    # NNLO: a model module that imports a module beside it, workers of 2 ranks (--n-processes 2 on 3 ranks)
    Line("sibling-import", ("--model", "{sibling}", "--loss", "categorical_crossentropy", "--epochs", "1",
                            "--train_data", "T.list", "--val_data", "V.list", "--processes", "2",
                            "--trial-name", "sib"),
         "nnlo-runs/sib", "gem", 1),
]


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("digits")
    example("make_digits").make_digits(root, files=2)
    train = [root / ln for ln in (root / "train.list").read_text().split()]
    n_train = 0
    for f in train:
        with h5py.File(f, "r") as h:
            n_train += len(h["features"])
    sibling = root / "models"
    sibling.mkdir()
    (sibling / "mymodels.py").write_text(SIBLING_MODULE)
    (sibling / "example_sibling.py").write_text(SIBLING_USER)
    return {"root": root, "n_train": n_train, "sibling": sibling / "example_sibling.py"}


def _keras_json(root: Path) -> Path:
    out = root / "digits_arch.json"
    if not out.exists():
        subprocess.run([sys.executable, str(EXAMPLES / "make_keras_json.py"), "--out", str(out)], check=True,
                       capture_output=True, timeout=240)
    return out


NNLO_N, EXTERNAL = "nnlo -n 3", "external mpirun -np 3"
#: each line once, each launcher real once: (line, launcher)
CASES = [(CORPUS[0], NNLO_N), (CORPUS[1], EXTERNAL), (CORPUS[2], EXTERNAL)]


@pytest.mark.parametrize("line, launcher", [pytest.param(c, k, id=f"{c.name}-{'n3' if k == NNLO_N else 'mpirun'}")
                                            for c, k in CASES])
def test_an_upstream_command_line_runs_unchanged(line: Line, launcher: str, digits: dict[str, Any],
                                                 mpirun: str, nnlo_env: dict[str, str], tmp_path: Path,
                                                 request: pytest.FixtureRequest) -> None:
    if line.needs_tf and not HAVE_TF:
        pytest.skip("tensorflow not installed: pip install 'nnlo-hpc[tf]'")
    root: Path = digits["root"]
    work = tmp_path / "elsewhere"  # a working directory that is neither the repository nor the model's folder
    work.mkdir()
    for name, source in (("T.list", "train.list"), ("V.list", "val.list")):
        files = [str(root / ln) for ln in (root / source).read_text().split()]
        (work / name).write_text("\n".join(files) + "\n")
    fill = {"{model}": str(EXAMPLES / "digits_torch.py"), "{sibling}": str(digits["sibling"])}
    if line.needs_tf:
        fill["{json}"] = str(_keras_json(root))
    argv = [fill.get(w, w) for w in line.argv]
    nnlo = str(BIN / "nnlo")
    if launcher.startswith("nnlo"):  # the relaunch: nnlo starts mpirun itself and re-renders the options
        proc = subprocess.run([nnlo, "train", "-n", "3", *argv], cwd=work, env=nnlo_env, capture_output=True,
                              text=True, timeout=TIMEOUT)
    elif line.needs_tf:  # a real launch: TensorFlow stays out of the warm world's ranks
        proc = subprocess.run([mpirun, "-np", "3", nnlo, "train", *argv], cwd=work, env=nnlo_env,
                              capture_output=True, text=True, timeout=TIMEOUT)
    else:  # what the ranks of `mpirun -np 3 nnlo train ...` run, in the warm world (cwd: the user's folder)
        proc = request.getfixturevalue("mpi_world").run(3, ["train", *argv], env=nnlo_env, cwd=work,
                                                        timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for option in line.warnings:
        said = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"nnlo: warning: {option} has no effect")]
        assert len(said) == 1, proc.stderr[-3000:]
    run = work / line.run_dir
    history = json.loads((run / "history.json").read_text())
    config = json.loads((run / "config.json").read_text())
    assert history["mode"] == line.mode and history["n_workers"] == line.workers
    assert history["epochs_done"] == 1 and history["stopped_reason"] == "completed"
    assert [e["samples"] for e in history["history"]] == [digits["n_train"]]  # every sample once per epoch
    assert config["train"] == "T.list" and config["val"] == "V.list" and config["epochs"] == 1
    assert config["loss"] == "categorical_crossentropy"
    if line.cache is not None:  # every listed file was read from its one complete node-local copy
        listed = [Path(p) for name in ("T.list", "V.list") for p in (work / name).read_text().split()]
        assert sorted(p.name for p in (work / line.cache).iterdir()) == sorted(cache_name(p) for p in listed)
    if line.backend == "keras":
        assert config["backend"] == "keras" and config["checkpoint_interval"] == 1
        assert list((run / "checkpoints").glob("ckpt-e0001-*")), sorted(p.name for p in run.rglob("*"))

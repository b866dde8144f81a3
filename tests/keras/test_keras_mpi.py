"""Real MPI runs of ``nnlo train`` with Keras models on the digits example.

Every mode (GEM through the mpi_learn-style invocation, EASGD, synchronous, Downpour in the torch comparison),
an interrupted synchronous run that resumes exactly on the uninterrupted curve, and a Keras and a torch version
of the same network reaching similar validation accuracy. TensorFlow takes seconds to import per rank, so the runs
go to the warm TensorFlow world (``nnlo_keras``: 3 ranks with TensorFlow imported once per session), except the
mpi_learn-style one, which is a real launch through ``nnlo train -n 3`` (the launch path with Keras, and a quiet
TensorFlow start-up, are what it shows).
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.env import example
from tests.helpers.fixtures import world_runner
from tests.helpers.world import WorldRun

pytestmark = [pytest.mark.mpi, pytest.mark.usefixtures("tf_keras")]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TIMEOUT = 300  # generous: TensorFlow imports in every rank and the machine is shared


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory, nnlo_env: dict[str, str]) -> dict[str, Path]:
    """The digits HDF5 files (examples/make_digits.py) and a JSON model from real Keras ``to_json()``."""
    folder = tmp_path_factory.mktemp("digits")
    example("make_digits").make_digits(folder / "data", files=2)
    spec = importlib.util.spec_from_file_location("digits_keras_example", EXAMPLES / "digits_keras.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    arch = folder / "arch.json"
    arch.write_text(module.get_model(hidden=32, dropout=0.0).to_json())
    return {"train": folder / "data" / "train.list", "val": folder / "data" / "val.list", "arch": arch}


def nnlo_train(run: Callable[..., WorldRun] | None, env: dict[str, str], np_: int, out: Path, *args: str,
               extra_env: dict[str, str] | None = None) -> tuple[WorldRun, dict[str, Any]]:
    """``nnlo train ... --checkpoint OUT`` on ``np_`` ranks and its history: in the warm TensorFlow world through
    ``run`` (``nnlo_keras``), or with ``run`` None a real ``nnlo train ... -n N``."""
    argv = ["train", *args, "--checkpoint", str(out)]
    full_env = {**env, **(extra_env or {})}
    if run is None:
        proc = subprocess.run([sys.executable, "-m", "nnlo_sched", *argv, "-n", str(np_)], env=full_env,
                              capture_output=True, text=True, timeout=TIMEOUT)
        done = WorldRun(proc.returncode, proc.stdout, proc.stderr)
    else:
        done = run(np_, *argv, env=full_env, timeout=TIMEOUT)
    history_file = out / "history.json"
    history = json.loads(history_file.read_text()) if history_file.is_file() else {}
    return done, history


def data_args(digits: dict[str, Path]) -> list[str]:
    return ["--train", str(digits["train"]), "--val", str(digits["val"])]


def test_mpi_learn_style_invocation_with_a_json_model(digits, nnlo_env, mpirun, tmp_path, tf_keras):
    """As mpi_learn users typed it (GEM, the default mode), through ``-n`` which starts mpirun itself."""
    out = tmp_path / "gem"
    proc, h = nnlo_train(None, nnlo_env, 3, out, "--model", str(digits["arch"]), *data_args(digits),
                         "--loss", "categorical_crossentropy", "--epochs", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert h["stopped_reason"] == "completed" and h["epochs_done"] == 5 and h["n_workers"] == 2
    curve = [e["val_accuracy"] for e in h["history"]]
    assert curve[-1] > max(0.3, curve[0])  # learns (10 classes: chance is 0.1)
    assert "Traceback" not in proc.stderr and "oneDNN" not in proc.stderr  # quiet TensorFlow start-up
    _, keras = tf_keras
    assert h["model"] == str(out / "model.keras")
    model = keras.models.load_model(out / "model.keras", compile=False)  # the result, in Keras's own format
    assert [tuple(v.shape) for v in model.trainable_variables] == [(64, 32), (32,), (32, 10), (10,)]


def sync_args(digits: dict[str, Path]) -> list[str]:
    return ["--model", str(digits["arch"]), *data_args(digits), "--mode", "downpour", "--synchronous",
            "--worker-optimizer", "adam:lr=0.01", "--optimizer", "sgd:lr=1.0", "--epochs", "2", "--batch", "32",
            "--checkpoint-interval", "0"]


@pytest.fixture(scope="module")
def synchronous_run(digits, keras_world, nnlo_env, mpirun, tmp_path_factory) -> tuple[WorldRun, dict]:
    """One uninterrupted synchronous run: the synchronous-mode check and the reference for exact restore."""
    run = world_runner(keras_world, mpirun, nnlo_env)
    return nnlo_train(run, nnlo_env, 3, tmp_path_factory.mktemp("sync") / "whole", *sync_args(digits))


def test_easgd_trains_a_keras_model_module(digits, nnlo_keras, nnlo_env, tmp_path):
    proc, h = nnlo_train(nnlo_keras, nnlo_env, 3, tmp_path / "run", "--model", str(EXAMPLES / "digits_keras.py"),
                         *data_args(digits), "--mode", "easgd", "--worker-optimizer", "sgd:lr=0.1,momentum=0.9",
                         "--epochs", "3", "--batch", "32")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert h["epochs_done"] == 3 and h["n_workers"] == 2
    assert all(e["samples"] == h["history"][0]["samples"] > 1000 for e in h["history"])
    assert h["history"][-1]["val_loss"] < h["history"][0]["val_loss"]
    assert h["final"]["val_accuracy"] > 0.6


def test_synchronous_mode_trains_a_json_model(synchronous_run):
    proc, h = synchronous_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert h["epochs_done"] == 2 and h["mode"] == "synchronous" and h["n_workers"] == 2
    assert all(e["samples"] == h["history"][0]["samples"] > 1000 for e in h["history"])
    assert h["history"][-1]["val_loss"] < h["history"][0]["val_loss"]
    assert h["final"]["val_accuracy"] > 0.6


def test_keras_and_torch_versions_reach_similar_accuracy(digits, nnlo_keras, nnlo_env, tmp_path):
    """examples/digits_keras.py and examples/digits_torch.py: the same network, the same run (Downpour)."""
    args = [*data_args(digits), "--mode", "downpour", "--worker-optimizer", "adam:lr=0.005",
            "--epochs", "5", "--batch", "32", "--loss", "categorical_crossentropy"]
    accuracy = {}
    for name in ("digits_keras", "digits_torch"):
        proc, h = nnlo_train(nnlo_keras, nnlo_env, 3, tmp_path / name, "--model", str(EXAMPLES / f"{name}.py"), *args)
        assert proc.returncode == 0, proc.stderr[-3000:]
        accuracy[name] = h["final"]["val_accuracy"]
    assert min(accuracy.values()) > 0.9, accuracy
    assert abs(accuracy["digits_keras"] - accuracy["digits_torch"]) < 0.05, accuracy


def test_interrupted_keras_run_resumes_on_the_same_curve(synchronous_run, digits, nnlo_keras, nnlo_env,
                                                        tmp_path):
    """Synchronous mode is deterministic, so a run stopped mid-epoch (SIGUSR1 after update 30 of ~23 per
    epoch, sent by the master to itself: in the world as in a launch) and restored from its checkpoint must
    retrace the uninterrupted run exactly (the stop signals on every launch path have real launches of their
    own: tests/reliability/test_stop_signals.py)."""
    whole_proc, whole = synchronous_run
    assert whole_proc.returncode == 0, whole_proc.stderr[-3000:]

    cut = tmp_path / "cut"
    first, stopped = nnlo_train(nnlo_keras, nnlo_env, 3, cut, *sync_args(digits),
                                extra_env={"NNLO_TEST_SIGNAL_AT_UPDATE": "30"})
    assert first.returncode == 75, first.stderr[-3000:]
    assert stopped["stopped_reason"] == "signal"

    second, resumed = nnlo_train(nnlo_keras, nnlo_env, 3, cut, *sync_args(digits), "--restore", "auto")
    assert second.returncode == 0, second.stderr[-3000:]
    assert resumed["epochs_done"] == 2 and resumed["stopped_reason"] == "completed"

    def curve(h: dict[str, Any]) -> np.ndarray:
        return np.array([[e["loss"], e["val_loss"], e["val_accuracy"]] for e in h["history"]])

    np.testing.assert_allclose(curve(resumed), curve(whole), rtol=1e-5, atol=1e-6)


def test_a_restored_allreduce_run_with_dropout_continues_the_straight_curve(digits, nnlo_keras, nnlo_env, tmp_path):
    """Keras's random streams (each Dropout layer's seed generator) are every replica's own, as torch's are: a
    restore gives each replica back its own, so the resumed curve is the straight one exactly (the torch shapes:
    tests/runtime/test_runtime_restore_mpi.py)."""
    args = ["--model", str(EXAMPLES / "digits_keras.py"), "--model-arg", "dropout=0.5", *data_args(digits),
            "--mode", "allreduce", "--worker-optimizer", "sgd:lr=0.05", "--batch", "64", "--checkpoint-interval", "0"]
    straight_proc, straight = nnlo_train(nnlo_keras, nnlo_env, 2, tmp_path / "straight", *args, "--epochs", "2")
    assert straight_proc.returncode == 0, straight_proc.stderr[-3000:]
    first, _ = nnlo_train(nnlo_keras, nnlo_env, 2, tmp_path / "cut", *args, "--epochs", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    second, resumed = nnlo_train(nnlo_keras, nnlo_env, 2, tmp_path / "cut", *args, "--epochs", "2",
                                 "--restore", "auto")
    assert second.returncode == 0, second.stderr[-3000:]
    assert [(e["loss"], e["val_loss"]) for e in resumed["history"]] == \
        [(e["loss"], e["val_loss"]) for e in straight["history"]]

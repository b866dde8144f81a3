"""TensorFlow stays optional and out of torch runs; thread pools are sized for MPI ranks sharing a node."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nnlo.backends import keras_env
from nnlo.errors import ModelError

BLOCK_TF = "import sys; sys.modules['tensorflow'] = None; sys.modules['keras'] = None\n"


def _python(code: str, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.slow
def test_keras_model_without_tensorflow_says_install_nnlo_tf(tmp_path, nnlo_env):
    arch = tmp_path / "arch.json"
    arch.write_text('{"class_name": "Sequential", "config": {"name": "s", "layers": []}}')
    code = BLOCK_TF + f"""
from nnlo.errors import ModelError
from nnlo.models import load_model_source
try:
    load_model_source({str(arch)!r}).build()
except ModelError as e:
    print("ERROR:", e)
"""
    proc = _python(code, nnlo_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip()
    assert line.startswith("ERROR:") and "TensorFlow is not installed" in line and "pip install 'nnlo-hpc[tf]'" in line
    assert "\n" not in line


@pytest.mark.mpi
def test_cli_without_tensorflow_is_one_line_not_a_traceback(tmp_path, nnlo_env, mpirun):
    """The real `nnlo train` under mpirun with TensorFlow blocked at start-up (a sitecustomize)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_TF)
    arch = tmp_path / "arch.json"
    arch.write_text('{"class_name": "Sequential", "config": {"name": "s", "layers": []}}')
    data = tmp_path / "train.list"
    data.write_text("none.h5\n")
    env = {**nnlo_env, "PYTHONPATH": f"{site}:{nnlo_env['PYTHONPATH']}"}
    proc = subprocess.run([mpirun, "-np", "2", sys.executable, "-m", "nnlo_sched", "train", "--model", str(arch),
                           "--train", str(data), "--epochs", "1", "--checkpoint", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, timeout=300)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("nnlo: error:")]
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert errors and any("nnlo-hpc[tf]" in ln for ln in errors), proc.stderr[-3000:]


@pytest.mark.slow
def test_neither_torch_nor_keras_model_is_named_without_importing_tensorflow(nnlo_env):
    code = BLOCK_TF + """
from nnlo.backends import make_backend
from nnlo.config import TrainConfig
from nnlo.errors import ModelError
try:
    make_backend({"not": "a model"}, TrainConfig(model="m.py"))
except ModelError as e:
    print(e)
"""
    proc = _python(code, nnlo_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "the model is a dict, neither a torch nn.Module nor a Keras 3 keras.Model" in proc.stdout
    assert "[tf]" not in proc.stdout


@pytest.mark.slow
def test_torch_paths_never_import_tensorflow(nnlo_env):
    code = """
import sys
import numpy as np
import torch
from nnlo.backends.keras_backend import is_keras_model
from nnlo.backends import make_backend
from nnlo.config import TrainConfig
assert not is_keras_model(object()) and not is_keras_model(np.zeros(2))
assert not is_keras_model(torch.nn.Linear(2, 2))
make_backend(torch.nn.Linear(2, 2), TrainConfig(model="m.py"))
print(sorted(m for m in ("tensorflow", "keras") if m in sys.modules))
"""
    proc = _python(code, nnlo_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


@pytest.mark.slow
def test_other_keras_backend_is_refused(nnlo_env):
    code = """
from nnlo.errors import ModelError
from nnlo.backends.keras_env import require_keras
try:
    require_keras()
except ModelError as e:
    print(e)
"""
    proc = _python(code, {**nnlo_env, "KERAS_BACKEND": "jax"})
    assert "KERAS_BACKEND=jax is set" in proc.stdout and "KERAS_BACKEND=tensorflow" in proc.stdout


@pytest.mark.parametrize("env,expected", [
    ({}, None),
    ({"PMI_SIZE": "3"}, 1),
    ({"OMPI_COMM_WORLD_SIZE": "4"}, 1),
    ({"PMI_SIZE": "1"}, None),
    ({"PMI_SIZE": "3", "NNLO_TF_THREADS": "7"}, 7),
    ({"NNLO_TF_THREADS": "0", "SLURM_NTASKS": "8"}, None),
])
def test_thread_count(monkeypatch, env, expected):
    for var in (*keras_env._MPI_SIZE_VARS, "NNLO_TF_THREADS"):
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if "mpi4py.MPI" in sys.modules:
        monkeypatch.delitem(sys.modules, "mpi4py.MPI")
    assert keras_env.thread_count() == expected


@pytest.mark.parametrize("value", ["four", "-2"])
def test_bad_thread_setting_is_one_line(monkeypatch, value):
    monkeypatch.setenv("NNLO_TF_THREADS", value)
    with pytest.raises(ModelError, match="NNLO_TF_THREADS"):
        keras_env.thread_count()
    keras_env.prepare_environment()  # tolerant: torch ranks must not fail over a TensorFlow setting


def test_prepare_environment_keeps_user_settings(monkeypatch):
    for var in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "TF_ENABLE_ONEDNN_OPTS", "NNLO_TF_THREADS",
                "TF_FORCE_GPU_ALLOW_GROWTH"):
        monkeypatch.delenv(var, raising=False)
    # as one of several ranks (patched: an MPI already initialised as a singleton in this pytest process
    # would otherwise decide, whatever PMI_SIZE says)
    monkeypatch.setattr(keras_env, "under_mpi", lambda: True)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    keras_env.prepare_environment()
    import os

    assert os.environ["TF_NUM_INTRAOP_THREADS"] == os.environ["TF_NUM_INTEROP_THREADS"] == "1"
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"


@pytest.mark.slow
@pytest.mark.usefixtures("tf_keras")
def test_tensorflow_really_runs_one_thread_per_pool_under_mpi(nnlo_env):
    """In a fresh process (the pools are fixed once TensorFlow has run an op), which also shows that importing
    TensorFlow through nnlo leaves Python's random stream where a seed put it (Keras draws fresh weights' seeds
    from it, so a seeded run must not depend on when TensorFlow was imported)."""
    code = """
import json
import random
from nnlo.backends.keras_env import require_keras
random.seed(5)
tf, keras = require_keras()
drawn = random.random()
random.seed(5)
assert drawn == random.random(), "importing TensorFlow moved Python's random stream"
keras.layers.Dense(2)(tf.ones((1, 3)))  # initialise the runtime
print(json.dumps([tf.config.threading.get_intra_op_parallelism_threads(),
                  tf.config.threading.get_inter_op_parallelism_threads()]))
"""
    env = {k: v for k, v in nnlo_env.items() if k not in keras_env._MPI_SIZE_VARS and k != "NNLO_TF_THREADS"}
    proc = _python(code, {**env, "PMI_SIZE": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1, 1]
    assert "oneDNN" not in proc.stderr  # the start-up notice is gone

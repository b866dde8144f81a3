"""Set-up the runtime does for every backend: the TensorFlow environment before the model module runs,
the device told to the observability session, ``--backend`` checked against the model's type, and the final
model named by its backend (``model.pt`` for torch)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nnlo.backends import check_backend_choice, make_backend
from nnlo.config import TrainConfig
from nnlo.errors import ConfigError

from tests.helpers.runtime import MODELS, TIMEOUT

TF_VARS = ("KERAS_BACKEND", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "TF_CPP_MIN_LOG_LEVEL",
           "TF_ENABLE_ONEDNN_OPTS", "TF_FORCE_GPU_ALLOW_GROWTH", "NNLO_TF_THREADS")


def test_backend_option_round_trips_and_is_validated():
    cfg = TrainConfig(model="m.py", backend="keras")
    assert TrainConfig.from_dict(cfg.to_dict()).backend == "keras"
    assert TrainConfig.from_dict({"model": "m.py"}).backend == "auto"  # configs written before the option
    with pytest.raises(ConfigError, match=r"--backend 'jax' is unknown; use one of auto, torch, keras"):
        TrainConfig(model="m.py", backend="jax").validate()


def test_backend_mismatch_is_one_line_without_importing_tensorflow():
    model = torch.nn.Linear(8, 3)
    check_backend_choice(model, "auto")
    check_backend_choice(model, "torch")
    with pytest.raises(ConfigError) as e:
        make_backend(model, TrainConfig(model="m.py", backend="keras"))
    assert str(e.value) == ("--backend keras but get_model returned a torch nn.Module; drop --backend or pass "
                            "a Keras model")
    with pytest.raises(ConfigError, match=r"^--backend torch but get_model returned a dict; drop --backend"):
        check_backend_choice({"not": "a model"}, "torch")


@pytest.mark.slow
def test_choosing_the_backend_of_a_torch_model_never_imports_tensorflow(nnlo_env):
    """In a fresh interpreter: this pytest process may hold TensorFlow already (the Keras tests)."""
    import subprocess

    code = (
        "import sys, torch\n"
        "from nnlo.backends import check_backend_choice\n"
        "from nnlo.errors import ConfigError\n"
        "check_backend_choice(torch.nn.Linear(8, 3), 'auto')\n"
        "try:\n    check_backend_choice(torch.nn.Linear(8, 3), 'keras')\nexcept ConfigError:\n    pass\n"
        "print('tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=nnlo_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


@pytest.mark.mpi
def test_ranks_get_the_tensorflow_environment_and_report_their_device(mpirun, nnlo_env, blobs, tmp_path):
    env = {k: v for k, v in nnlo_env.items() if k not in TF_VARS}
    env["NNLO_TEST_ENV_PROBE"] = str(tmp_path / "probe")
    out = tmp_path / "run"
    cmd = [mpirun, "-np", "3", sys.executable, "-m", "nnlo_sched", "train", "--model", str(MODELS / "env_probe.py"),
           "--backend", "torch", "--train", str(blobs["train"]), "--val", str(blobs["val"]), "--epochs", "1",
           "--mode", "downpour", "--timeline", "--checkpoint", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "probe").glob("rank-*.json"))]
    assert len(records) == 3
    for r in records:  # one TensorFlow thread per pool under MPI, quiet start-up, and no TensorFlow imported
        assert r == {"KERAS_BACKEND": "tensorflow", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                     "TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0", "TF_FORCE_GPU_ALLOW_GROWTH": "true",
                     "tensorflow_imported": False}
    devices = []
    for trace in sorted((out / "trace").glob("rank-*.jsonl")):
        for line in trace.read_text().splitlines():
            event = json.loads(line)
            if event.get("name") == "device" and event.get("ph") == "i":
                devices.append(event["args"]["device"])
    assert devices == ["cpu"] * 3
    assert (out / "model.pt").is_file() and json.loads((out / "history.json").read_text())["model"] == str(
        out / "model.pt")


@pytest.mark.mpi
def test_backend_keras_with_a_torch_model_stops_with_one_line(run_train):
    run = run_train(3, "--backend", "keras", "--epochs", "1")
    assert run.rc != 0
    lines = run.error_lines()  # printed once, by the rank that found it (every rank builds the model)
    assert len(lines) == 1, run.err[-2000:]
    assert lines[0].endswith("--backend keras but get_model returned a torch nn.Module; drop --backend or pass "
                             "a Keras model"), lines
    assert "Traceback" not in run.err
    assert not (run.out_dir / "model.pt").exists()


def test_a_model_module_that_imports_keras_at_its_top_sees_the_environment(tmp_path, monkeypatch):
    """``nnlo optimize`` loads the model module in every rank before any training: the environment must be
    ready when the module's top-level code runs, not only when get_model() is called."""
    from nnlo.models import load_model_source

    for var in TF_VARS:  # set then delete: the test's end restores the environment exactly as it was
        monkeypatch.setenv(var, "x")
        monkeypatch.delenv(var)
    # as in a fresh rank: Keras not imported yet (the Keras tests may have imported it in this process)
    monkeypatch.delitem(sys.modules, "keras", raising=False)
    module = tmp_path / "imports_at_top.py"
    module.write_text("import os\nSEEN = os.environ.get('TF_ENABLE_ONEDNN_OPTS')\n"
                      "BACKEND = os.environ.get('KERAS_BACKEND')\n\ndef get_model():\n    return None\n")
    source = load_model_source(str(module))
    assert (source.module.SEEN, source.module.BACKEND) == ("0", "tensorflow")

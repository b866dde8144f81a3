"""Experiment tracking (``tensorboard=``, ``mlflow=``) of a real training under ``mpirun -np 3``, read back with
TensorBoard's own reader and MLflow's client: every epoch once, with the uninterrupted run's values, after a stop
and a resume from an older checkpoint (epochs trained, and logged, twice); one MLflow run continued across the
jobs. One launch for the module (tracking_script.py). Without the packages: one line naming the extra."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nnlo.config import TrainConfig
from nnlo.contract import MLFLOW_RUN_FILE
from nnlo.errors import ConfigError
from nnlo.observe import tracking
from tests.helpers.runtime import TIMEOUT

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def tracked(mpirun: str, nnlo_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("tensorboard")
    out = tmp_path_factory.mktemp("tracking")
    done = subprocess.run([mpirun, "-np", "3", sys.executable, str(HERE / "tracking_script.py"), str(out)],
                          env=nnlo_env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"out": out, "results": json.loads((out / "results.json").read_text())}


def _board(folder: Path, tag: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``tag`` as TensorBoard shows them (its reader drops what a later job's stream purged)."""
    from nnlo.observe.tracking.tensorboard import _tensorboard

    _tensorboard()  # without TensorFlow (seconds to import) where it is installed
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    events = acc.Scalars(tag)
    return [e.step for e in events], [e.value for e in events]


@pytest.mark.mpi
def test_tensorboard_shows_every_epoch_once_across_a_resume(tracked) -> None:
    res, tb = tracked["results"], tracked["out"] / "tb"
    assert res["cut"]["stopped"] == "signal" and res["again"]["stopped"] == "completed"
    whole = {e["epoch"]: e for e in res["whole"]["history"]}
    assert sorted(whole) == [1, 2, 3, 4]
    for tag in ("loss", "val_loss", "accuracy"):
        steps, values = _board(tb / "whole", tag)
        assert steps == [1, 2, 3, 4] and values == pytest.approx([whole[k][tag] for k in steps])
        # the cut run logged epochs 1-2, its resume from epoch 1 logged 2-4 again: each step once, final values
        cut_steps, cut_values = _board(tb / "cut", tag)
        assert cut_steps == steps and cut_values == pytest.approx(values)
    assert len(list((tb / "cut").glob("events.out.tfevents.*"))) == 2  # one stream per job, in the same run


@pytest.mark.mpi
def test_mlflow_file_store_holds_one_run_continued_by_the_resume(tracked) -> None:
    pytest.importorskip("mlflow")
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    out, res = tracked["out"], tracked["results"]
    client = MlflowClient((out / "mlruns").as_uri())
    runs = client.search_runs([client.get_experiment_by_name("nnlo").experiment_id])
    assert len(runs) == 2  # whole, and cut continued by again
    cut_id = json.loads((out / "cut" / MLFLOW_RUN_FILE).read_text())["run_id"]
    cut = client.get_run(cut_id)
    assert cut.info.status == "FINISHED" and cut.data.params["epochs"] == "4"
    newest: dict[int, float] = {}
    for m in sorted(client.get_metric_history(cut_id, "val_loss"), key=lambda m: m.timestamp):
        newest[m.step] = m.value
    assert newest == pytest.approx({e["epoch"]: e["val_loss"] for e in res["whole"]["history"]})


@pytest.mark.parametrize("option, extra", [("tensorboard", "tensorboard"), ("mlflow", "mlflow")])
def test_a_missing_tracking_package_is_one_line_naming_the_extra(option, extra, monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == extra else real(name, *a))
    config = TrainConfig(model="m.py", **{option: "file:///x" if option == "mlflow" else "tb"})
    with pytest.raises(ConfigError, match=rf"^--{option} needs the {extra} package: pip install 'nnlo-hpc\[{extra}\]'$"):
        tracking.check(config)


@pytest.mark.parametrize("option", ["tensorboard", "mlflow"])
@pytest.mark.parametrize("value", ["", "  ", 3])
def test_a_bad_tracking_value_is_one_line(option, value) -> None:
    with pytest.raises(ConfigError, match=rf"^--{option} must be"):
        TrainConfig(model="m.py", **{option: value}).validate()


def test_a_missing_tracking_package_is_refused_before_queueing(tmp_path, monkeypatch) -> None:
    import importlib.util

    from nnlo_sched.checks import check_run

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    (tmp_path / "m.py").write_text("def get_model():\n    return None\n")
    with pytest.raises(ConfigError, match=r"^--mlflow needs the mlflow package"):
        check_run(TrainConfig(model="m.py", mlflow="file:///x"), None, cwd=tmp_path)

"""``nnlo optimize`` through the real training runtime on the digits example (2-dimensional space)."""
from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

from nnlo.config import TrainConfig
from nnlo.optimize.runners import TrainRunner, split_params
from nnlo.roles import Shape
from tests.helpers.env import REPO, example

DIGITS_MODEL = str(REPO / "examples" / "digits_torch.py")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits")
    example("make_digits").make_digits(out)
    return out


def test_folds_of_the_training_samples_are_disjoint_and_complete(digits):
    cfg = TrainConfig(model=DIGITS_MODEL, train=str(digits / "train.list"))
    runner = TrainRunner(cfg, seed=5)
    n = runner.n_samples()
    folds = [runner.fold_indices(f, 3) for f in range(3)]
    vals = np.concatenate([v for _, v in folds])
    assert sorted(vals.tolist()) == list(range(n))  # every sample validated exactly once
    for tr, va in folds:
        assert not set(tr.tolist()) & set(va.tolist()) and len(tr) + len(va) == n
    again = TrainRunner(cfg, seed=5).fold_indices(1, 3)
    assert all(np.array_equal(a, b) for a, b in zip(again, folds[1]))


def test_hyperparameters_route_to_training_options_or_get_model(tmp_path):
    cfg = TrainConfig(model=DIGITS_MODEL, worker_optimizer="adam:lr=0.001,beta1=0.8")
    overrides, model_args = split_params({"hidden": 32, "batch": 16, "worker_lr": 0.01})
    assert overrides == {"batch": 16, "worker_lr": 0.01} and model_args == {"hidden": 32}
    trial = TrainRunner(cfg, 0).config_for({"hidden": 32, "batch": 16, "worker_lr": 0.01},
                                                   tmp_path / "trials" / "0007" / "fold-1")
    assert trial.batch == 16 and trial.model_args == {"hidden": 32}
    from nnlo.algorithms.optimizers import parse_optimizer_spec

    name, opts = parse_optimizer_spec(trial.worker_optimizer)
    assert name == "adam" and opts["lr"] == 0.01 and opts["beta1"] == 0.8
    assert trial.checkpoint.endswith("0007/fold-1") and trial.restore == "auto"


@pytest.mark.parametrize("mode, base", [("gem", "sgd"), ("downpour", "adam")])
def test_worker_lr_applies_to_the_default_worker_optimizer(tmp_path, mode, base):
    """No --worker-optimizer given: worker_lr sets the learning rate of the mode's default optimizer."""
    from nnlo.algorithms.optimizers import parse_optimizer_spec

    cfg = TrainConfig(model=DIGITS_MODEL, mode=mode)
    assert cfg.worker_optimizer is None
    trial = TrainRunner(cfg, 0).config_for({"worker_lr": 0.05}, tmp_path / "trials" / "0001" / "fold-0")
    name, opts = parse_optimizer_spec(trial.worker_optimizer)
    assert name == base and opts["lr"] == 0.05


@pytest.mark.mpi
def test_real_optimize_on_digits(nnlo_mpi, digits, tmp_path):
    out = tmp_path / "run"
    cmd = ["optimize", "-n", "5", "--model", DIGITS_MODEL,
           "--train", str(digits / "train.list"), "--val", str(digits / "val.list"), "--block-size", "2",
           "--epochs", "2", "--batch", "32", "--mode", "downpour", "--num-iterations", "3",
           "--hyper-opt", "bayesian", "--n-initial-points", "2", "--fom", "val_accuracy", "--output", str(out),
           "--tensorboard", str(tmp_path / "tb"), "--mlflow", (tmp_path / "mlruns").as_uri()]
    r = nnlo_mpi(5, *cmd, cwd=REPO, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    table = json.loads((out / "trials.json").read_text())
    assert [t["status"] for t in table] == ["ok"] * 3
    for t in table:
        assert set(t["params"]) == {"hidden", "dropout"} and 16 <= t["params"]["hidden"] <= 128
        assert 0.1 < t["fom"] <= 1.0 and t["metrics"][0]["val_accuracy"] == t["fom"]
        fold_dir = out / "trials" / f"{t['id']:04d}" / "fold-0"
        history = json.loads((fold_dir / "history.json").read_text())["history"]
        assert len(history) == 2 and history[-1]["val_accuracy"] == pytest.approx(t["fom"])
        assert json.loads((fold_dir / "config.json").read_text())["model_args"]["hidden"] == t["params"]["hidden"]
    best = json.loads((out / "best.json").read_text())
    assert best["best_fom"] == max(t["fom"] for t in table) and best["direction"] == "max"
    _check_tracking(tmp_path, table)


def _check_tracking(folder, table):
    """--tensorboard: a run per trial (its training's epochs, its FOM, its hyperparameters for the HParams view);
    --mlflow: a parent run and one nested run per trial, each with its FOM, read back with the packages' readers."""
    if importlib.util.find_spec("tensorboard") is not None:
        from nnlo.observe.tracking.tensorboard import _tensorboard

        _tensorboard()  # TensorBoard without TensorFlow
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        for t in table:
            acc = EventAccumulator(str(folder / "tb" / f"trial-{t['id']:04d}"))
            acc.Reload()
            assert [e.step for e in acc.Scalars("loss")] == [1, 2]
            assert [(e.step, e.value) for e in acc.Scalars("fom/val_accuracy")] == [(2, pytest.approx(t["fom"]))]
            assert set(acc.PluginTagToContent("hparams")) == {"_hparams_/session_start_info",
                                                              "_hparams_/session_end_info"}
    if importlib.util.find_spec("mlflow") is not None:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        client = MlflowClient((folder / "mlruns").as_uri())
        runs = client.search_runs([client.get_experiment_by_name("nnlo").experiment_id])
        parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        assert len(parents) == 1 and parents[0].info.status == "FINISHED"
        trials = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id}
        assert sorted(trials) == [f"trial-{t['id']:04d}" for t in table]
        for t in table:
            run = trials[f"trial-{t['id']:04d}"]
            assert run.data.metrics["fom/val_accuracy"] == pytest.approx(t["fom"])
            assert float(run.data.params["hidden"]) == t["params"]["hidden"]


def test_allreduce_mode_makes_every_rank_of_a_fold_group_a_replica():
    from nnlo.roles import Role, describe
    from nnlo_sched.inner import parse_inner

    cfg = TrainConfig(model=DIGITS_MODEL, mode="allreduce")
    assert cfg.training_group_shape == Shape(n_masters=0)
    shape = parse_inner("optimize", ["--model", DIGITS_MODEL, "--mode", "allreduce", "--block-size", "2"]).shape
    assert shape.n_masters == 0
    roles = [r.role for r in describe(5, shape)]
    assert roles == [Role.COORDINATOR] + [Role.WORKER] * 4


@pytest.mark.mpi
def test_real_optimize_in_allreduce_mode(nnlo_mpi, digits, tmp_path):
    out = tmp_path / "run"
    cmd = ["optimize", "-n", "3", "--model", DIGITS_MODEL,
           "--train", str(digits / "train.list"), "--val", str(digits / "val.list"), "--block-size", "2",
           "--epochs", "1", "--batch", "32", "--mode", "allreduce", "--num-iterations", "1",
           "--hyper-opt", "random", "--output", str(out)]
    r = nnlo_mpi(3, *cmd, cwd=REPO, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    (trial,) = json.loads((out / "trials.json").read_text())
    assert trial["status"] == "ok", trial
    fold_dir = out / "trials" / f"{trial['id']:04d}" / "fold-0"
    assert json.loads((fold_dir / "config.json").read_text())["mode"] == "allreduce"


FRAGILE_MODEL = '''
from torch import nn


def get_model(hidden=32):
    if hidden % 2:
        raise ValueError(f"hidden={hidden} is odd (a simulated model bug)")
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
'''


@pytest.mark.mpi
def test_a_model_that_raises_fails_its_trial_and_the_search_goes_on(nnlo_mpi, digits, tmp_path):
    """Real runtime: get_model raises for odd sizes; those trials are recorded as failed (their one line names
    the user's line, printed once), the rest train, two one-rank blocks at once, without --val (trained on
    the training loss: every training warns so, the screen once).
    The space comes from a TOML file; random search with seed 0 proposes hidden = 36, 25, 40, 24."""
    model = tmp_path / "fragile.py"
    model.write_text(FRAGILE_MODEL)
    space = tmp_path / "space.toml"
    space.write_text('[hidden]\ntype = "integer"\nlow = 8\nhigh = 40\n')
    out = tmp_path / "run"
    cmd = ["optimize", "--model", str(model),
           "--space", str(space), "--train", str(digits / "train.list"), "--fom", "loss",
           "--block-size", "1", "--epochs", "1", "--batch", "64", "--mode", "downpour", "--hyper-opt", "random",
           "--seed", "0", "--num-iterations", "4", "--output", str(out)]
    r = nnlo_mpi(3, *cmd, cwd=REPO, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    table = json.loads((out / "trials.json").read_text())
    assert [t["params"]["hidden"] for t in table] == [36, 25, 40, 24]
    assert [t["status"] for t in table] == ["ok", "failed", "ok", "ok"]
    assert "hidden=25 is odd" in table[1]["error"] and table[1]["fom"] is None
    assert table[1]["error"].endswith(f"(at {model}:7 in get_model)")
    assert all(t["fom"] > 0 for t in table if t["status"] == "ok")
    assert sum("hidden=25 is odd" in line for line in r.stderr.splitlines()) == 1  # the coordinator's line only
    assert r.stderr.count("no validation data (--val)") == 1

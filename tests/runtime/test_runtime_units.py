"""In-process tests of the runtime's pure parts: configuration, stopping rules, checkpoints, the torch
backend, model loading, launch detection and the CLI's parameter plumbing (no MPI job needed)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
import numpy as np
import pytest
import torch

from nnlo import checkpoint as ckpt
from nnlo.backends.torch_backend import TorchBackend, loss_spec
from nnlo.config import TrainConfig
from nnlo.errors import ConfigError, ModelError
from nnlo.models import load_model_source
from nnlo.roles import Shape
from nnlo.training.deadline import Deadline
from nnlo.training.failure import RankFailure, describe_exception
from nnlo.training.history import TrainResult, best_entry
from nnlo.training.stopping import Stopper, parse_rule
from nnlo_sched.commands import train as train_cmd
from nnlo_sched.launchers.local_launch import inside_mpi_launch, launch_argv

MODELS = Path(__file__).parent / "models"


# -- configuration ---------------------------------------------------------------------------------------
def test_config_round_trips_through_json() -> None:
    cfg = TrainConfig(model="m.py", epochs=3, mode="easgd", model_args={"hidden": 8}, deadline=1.5e9)
    again = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg


def test_config_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ConfigError, match="unknown training option.*epoch_count"):
        TrainConfig.from_dict({"model": "m.py", "epoch_count": 3})
    with pytest.raises(ConfigError, match="--mode 'hogwild' is unknown"):
        TrainConfig(model="m.py", mode="hogwild").validate()
    with pytest.raises(ConfigError, match="--synchronous .* --mode downpour"):
        TrainConfig(model="m.py", mode="gem", synchronous=True).validate()
    with pytest.raises(ConfigError, match="--elastic-force"):
        TrainConfig(model="m.py", elastic_force=1.5).validate()
    with pytest.raises(ConfigError, match="--optimizer"):
        TrainConfig(model="m.py", optimizer="lbfgs").validate()


def test_worker_optimizer_default_follows_the_mode() -> None:
    assert TrainConfig(model="m", mode="gem", gem_lr=0.03).worker_optimizer_spec == "sgd:lr=0.03"
    assert TrainConfig(model="m", mode="downpour").worker_optimizer_spec.startswith("adam")
    assert TrainConfig(model="m", worker_optimizer="rmsprop").worker_optimizer_spec == "rmsprop"


def test_the_training_shape_follows_the_one_rule_and_refuses_contradictions() -> None:
    assert TrainConfig(model="m.py").training_group_shape == Shape()
    assert TrainConfig(model="m.py", mode="allreduce").training_group_shape == Shape(n_masters=0)
    with pytest.raises(ConfigError, match="--mode allreduce"):
        TrainConfig(model="m.py", mode="gem", n_masters=0).validate()
    with pytest.raises(ConfigError, match="--synchronous needs one master"):
        TrainConfig(model="m.py", mode="downpour", n_masters=3, synchronous=True).validate()


# -- stopping ---------------------------------------------------------------------------------------------
def test_parse_rule_accepts_upstream_and_plain_spellings() -> None:
    assert parse_rule("val_loss,~<,4") == parse_rule("val_loss,<,4")
    assert parse_rule("val_acc,>,0.9", "--target-metric").metric == "val_accuracy"
    for bad in ("val_loss", "val_loss,!,3", "val_loss,<,soon", "val_loss,<,0"):
        with pytest.raises(ConfigError, match="--early-stopping"):
            parse_rule(bad)


def test_early_stopping_waits_for_patience_and_resets_on_improvement() -> None:
    s = Stopper.from_config("val_loss,<,2", None)
    reasons = [s.update({"val_loss": v}) for v in (1.0, 1.1, 0.9, 0.95, 0.95)]
    assert reasons == [None, None, None, None, "early_stopping"]
    saved = s.state_dict()
    t = Stopper.from_config("val_loss,<,2", None)
    t.load_state_dict(saved)
    assert (t.best, t.bad_epochs) == (0.9, 2)


def test_target_metric_fires_when_reached_and_names_missing_metrics() -> None:
    s = Stopper.from_config(None, "val_accuracy,>=,0.9")
    assert s.update({"val_accuracy": 0.89}) is None
    assert s.update({"val_accuracy": 0.9}) == "target_metric"
    with pytest.raises(ConfigError, match="'val_accuracy'.*available: loss"):
        s.update({"loss": 1.0})


# -- deadline ---------------------------------------------------------------------------------------------
def test_deadline_margin_grows_with_the_checkpoint_duration() -> None:
    d = Deadline(deadline=1000.0, safety=10.0)
    d.note_checkpoint(20.0)
    d.note_round(2.0)
    assert d.margin == pytest.approx(1.5 * 20 + 2 * 2 + 10)
    assert not d.reached(now=1000.0 - d.margin - 1)
    assert d.reached(now=1000.0 - d.margin)
    assert not Deadline(None).reached()


# -- checkpoints ------------------------------------------------------------------------------------------
def _checkpoint(writer: ckpt.CheckpointWriter, epoch: int, updates: int) -> Path:
    tmp = writer.begin(epoch, updates)
    ckpt.write_part(tmp, "master.pkl", {"epoch": epoch, "w": np.arange(3, dtype=np.float32)})
    return writer.commit(tmp, {"epoch": epoch, "updates": updates})


def test_checkpoints_appear_complete_and_only_the_last_k_are_kept(tmp_path: Path) -> None:
    writer = ckpt.CheckpointWriter(tmp_path / "checkpoints", keep=2)
    paths = [_checkpoint(writer, e, 10 * e) for e in (1, 2, 3)]
    assert ckpt.list_checkpoints(tmp_path) == paths[1:]
    assert ckpt.find_latest(tmp_path) == paths[2]
    assert ckpt.find_latest(paths[1]) == paths[1]
    assert ckpt.read_part(paths[2], "master.pkl")["epoch"] == 3
    assert ckpt.read_manifest(paths[2])["parts"] == ["master.pkl"]
    # an unfinished checkpoint (no manifest, temporary name) is never picked
    writer.begin(9, 90)
    assert ckpt.find_latest(tmp_path) == paths[2]
    assert ckpt.find_latest(tmp_path / "empty") is None


def test_rewriting_a_checkpoint_of_the_same_name_replaces_it(tmp_path: Path) -> None:
    writer = ckpt.CheckpointWriter(tmp_path, keep=3)
    first = _checkpoint(writer, 1, 5)
    tmp = writer.begin(1, 5)
    ckpt.write_part(tmp, "master.pkl", {"epoch": "again"})
    second = writer.commit(tmp, {"epoch": 1, "updates": 5})
    assert first == second and ckpt.read_part(second, "master.pkl") == {"epoch": "again"}
    assert [p.name for p in tmp_path.iterdir()] == [first.name]


def test_reading_a_missing_part_is_a_clear_error(tmp_path: Path) -> None:
    path = _checkpoint(ckpt.CheckpointWriter(tmp_path), 1, 1)
    with pytest.raises(ConfigError, match="has no worker-3.pkl"):
        ckpt.read_part(path, "worker-3.pkl")


# -- torch backend ----------------------------------------------------------------------------------------
def _backend(spec: str = "sgd:lr=0.1,momentum=0.9", loss: str = "categorical_crossentropy") -> TorchBackend:
    torch.manual_seed(0)
    return TorchBackend(torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Linear(5, 3)), loss, spec)


def _batch(n: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype(np.float32), np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]


def test_weights_round_trip_without_aliasing() -> None:
    b = _backend()
    w = b.get_weights()
    assert w.dtype == np.float32 and w.flags.c_contiguous and w.size == b.n_params == 4 * 5 + 5 + 5 * 3 + 3
    new = np.arange(w.size, dtype=np.float32)
    b.set_weights(new)
    new += 1  # the model must have copied, not aliased, the caller's buffer
    np.testing.assert_array_equal(b.get_weights(), np.arange(w.size, dtype=np.float32))


def test_optimizer_state_restores_the_exact_trajectory() -> None:
    x, y = _batch()
    a = _backend("adam:lr=0.01")
    for _ in range(3):
        a.train_on_batch(x, y)
    state, weights = a.optimizer_state(), a.get_weights()
    b = _backend("adam:lr=0.01")
    b.set_weights(weights)
    b.load_optimizer_state(state)
    a.train_on_batch(x, y)
    b.train_on_batch(x, y)
    np.testing.assert_array_equal(a.get_weights(), b.get_weights())


def test_restored_optimizer_state_keeps_the_current_options() -> None:
    """A restart (or PBT's explore) may change the learning rate: the options given now win over the saved
    ones, the state vectors (Adam's moments, its step count) come back - as the Keras backend does."""
    x, y = _batch()
    a = _backend("adam:lr=0.01")
    for _ in range(3):
        a.train_on_batch(x, y)
    b = _backend("adam:lr=0.05")
    b.set_weights(a.get_weights())
    b.load_optimizer_state(a.optimizer_state())
    group = b.optimizer.param_groups[0]
    assert group["lr"] == 0.05
    assert all(int(s["step"]) == 3 for s in b.optimizer.state.values())


def test_gradients_step_equals_fused_training_step() -> None:
    x, y = _batch()
    a, b = _backend(), _backend()
    grad, metrics = a.compute_gradients(x, y)
    a.apply_gradients(grad)
    fused = b.train_on_batch(x, y)
    np.testing.assert_allclose(a.get_weights(), b.get_weights(), rtol=1e-6)
    assert metrics["loss"] == pytest.approx(fused["loss"]) and metrics["count"] == 6


def test_gradients_are_fresh_per_batch_also_after_fused_steps() -> None:
    """compute_gradients writes into one reused flat buffer: each call must hold only its own batch's gradient,
    whatever ran before (a fused step sets the grads to None; a previous call left its gradient there)."""
    b = _backend("adam:lr=0.01")
    for seed in range(3):
        x, y = _batch(seed=seed)
        b.train_on_batch(*_batch(seed=10 + seed))
        ref = _backend("adam:lr=0.01")
        ref.set_weights(b.get_weights())
        ref.model.zero_grad(set_to_none=True)
        ref.loss.fn(ref.model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        want = torch.cat([p.grad.reshape(-1) for p in ref.model.parameters()]).numpy()
        got, _ = b.compute_gradients(x, y)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        again, _ = b.compute_gradients(x, y)  # not accumulated onto the previous call's
        np.testing.assert_allclose(again, want, rtol=1e-6, atol=1e-7)


def test_one_hot_and_index_labels_give_the_same_loss_and_accuracy() -> None:
    x, y = _batch(10)
    b = _backend()
    one_hot = b.evaluate_batch(x, y)
    index = b.evaluate_batch(x, y.argmax(axis=1).astype(np.int64))
    assert one_hot["loss_sum"] == pytest.approx(index["loss_sum"])
    assert one_hot["correct"] == index["correct"] and one_hot["count"] == 10


def test_loss_names_accept_keras_spellings_and_refuse_unknown_ones() -> None:
    assert loss_spec("mean_squared_error").kind == "regression"
    assert loss_spec("Categorical_Crossentropy").kind == "categorical"
    with pytest.raises(ConfigError, match="--loss 'hinge' is unknown; use one of"):
        loss_spec("hinge")


def test_saved_model_loads_back_as_a_model_source(tmp_path: Path) -> None:
    b = _backend()
    path = b.save_model(str(tmp_path / "m.pt"))
    model = load_model_source(path).build()
    np.testing.assert_array_equal(
        torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy(), b.get_weights())


def test_buffers_are_running_statistics_and_counters_not_masks() -> None:
    x, y = _batch(8)
    model = load_model_source(str(MODELS / "tiny_bn.py")).build(hidden=5)
    b = TorchBackend(model, "categorical_crossentropy", "sgd:lr=0.1")
    assert b.n_buffers == 5 + 5 + 1  # running_mean, running_var, num_batches_tracked; not the boolean mask
    assert _backend().n_buffers == 0 and _backend().get_buffers().size == 0
    before = b.get_buffers()
    b.train_on_batch(np.pad(x, ((0, 0), (0, 4))), y)
    after = b.get_buffers()
    assert after[-1] == 1 and not np.array_equal(after, before)
    b.set_buffers(np.concatenate([before[:-1], [6.6]]).astype(np.float32))
    bn = model.net[1]
    np.testing.assert_array_equal(bn.running_mean.numpy(), before[:5])
    assert int(bn.num_batches_tracked) == 7 and bn.num_batches_tracked.dtype == torch.int64  # counters rounded
    with pytest.raises(ValueError, match="buffer vector has 2 values"):
        b.set_buffers(np.zeros(2, dtype=np.float32))


def test_a_saved_model_whose_class_is_in_a_model_module_names_that_module(tmp_path: Path) -> None:
    (tmp_path / "custom_net.py").write_text(
        "from torch import nn\nclass Net(nn.Linear):\n    pass\ndef get_model():\n    return Net(4, 3)\n")
    source = load_model_source(str(tmp_path / "custom_net.py"))
    path = TorchBackend(source.build(), "mse", "sgd").save_model(str(tmp_path / "model"))
    del sys.modules[type(source.build()).__module__]  # a new process: the module is not imported
    with pytest.raises(ModelError, match="defined in the model module custom_net.py; pass that module instead"):
        load_model_source(path).build()


# -- model modules ----------------------------------------------------------------------------------------
def test_model_source_errors_name_the_file_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist; check the --model path"):
        load_model_source(str(tmp_path / "none.py"))
    with pytest.raises(ModelError, match="defines no get_model"):
        load_model_source(str(MODELS / "no_get_model.py"))
    with pytest.raises(ModelError, match="get_model\\(\\) raised ValueError"):
        load_model_source(str(MODELS / "build_fails.py")).build()
    with pytest.raises(ModelError, match="does not accept \\['depth'\\]"):
        load_model_source(str(MODELS / "tiny.py")).build(depth=3)
    (tmp_path / "m.txt").write_text("")
    with pytest.raises(ModelError, match="unknown type"):
        load_model_source(str(tmp_path / "m.txt"))
    src = load_model_source(str(MODELS / "tiny.py"))
    assert src.name == "tiny" and src.build(hidden=4)[0].out_features == 4


# -- failures ---------------------------------------------------------------------------------------------
def test_rank_failures_travel_as_dicts_and_read_as_one_line() -> None:
    f = RankFailure("loss is nan", 2, "b0:worker:w1", exit_code=1)
    g = RankFailure.from_dict(f.to_dict(), report=False)
    assert str(g) == "rank 2 (b0:worker:w1): loss is nan" and not g.report and g.exit_code == 1
    assert describe_exception(ValueError("bad\nmore")) == ("ValueError: bad", 1)
    assert describe_exception(ConfigError("x")) == ("x", 2)


def test_best_entry_prefers_lowest_validation_loss() -> None:
    h = [{"epoch": 1, "val_loss": 0.5, "loss": 0.1}, {"epoch": 2, "val_loss": 0.4, "loss": 0.3}]
    assert best_entry(h)["epoch"] == 2
    assert best_entry([{"epoch": 1, "loss": 2.0}, {"epoch": 2, "loss": 1.0}])["epoch"] == 2
    assert TrainResult(stopped_reason="deadline", checkpoint="c").resumable
    assert not TrainResult(stopped_reason="deadline").resumable


# -- launching and the CLI plumbing -----------------------------------------------------------------------
@pytest.mark.parametrize("env,inside", [
    ({}, False),
    ({"PMI_RANK": "0"}, True),
    ({"OMPI_COMM_WORLD_SIZE": "4"}, True),
    ({"PMIX_RANK": "1"}, True),
    ({"NNLO_LAUNCHED": "1"}, True),
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "4294967294", "SLURM_PROCID": "0"}, False),  # batch script
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3"}, True),  # srun step
])
def test_inside_mpi_launch(env: dict[str, str], inside: bool) -> None:
    assert inside_mpi_launch(env) is inside


def test_launch_argv_is_the_local_profiles_launch_line_with_this_python() -> None:
    from dataclasses import replace

    from nnlo_sched.profiles import load_profile

    local = replace(load_profile("local"), launcher_command="/x/mpirun", launcher_flags=("--bind-to", "none"))
    cmd = launch_argv(3, ["train", "--epochs", "2"], local)
    assert cmd == ["/x/mpirun", "--bind-to", "none", "-np", "3", sys.executable, "-m", "nnlo_sched", "train",
                   "--epochs", "2"]
    assert launch_argv(2, ["train"])[0] == str(Path(sys.executable).parent / "mpirun")  # the venv's MPICH


@pytest.mark.slow
def test_no_mpirun_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from nnlo_sched.launchers.local_launch import relaunch

    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="pip install mpich"):
        relaunch(2, ["train"])


def _parse(args: list[str]) -> dict:
    ctx = train_cmd.train_command.make_context("train", args)
    return dict(ctx.params)


def test_cli_params_become_config_and_shape_and_round_trip_to_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NNLO_DEADLINE", raising=False)
    args = ["--model", "m.py", "--train", "t.list", "--mode", "easgd", "--sync-every", "3", "--synchronous",
            "--early-stopping", "val_loss,<,3", "--n-masters", "1", "--n-processes", "2", "--seed", "5",
            "--model-arg", "hidden=32", "--model-arg", "act=tanh", "--model-arg", "sizes=[1,2]"]
    params = _parse(args + ["-n", "4"])
    assert params.pop("np_") == 4
    cfg = train_cmd.config_from_params(params)
    assert (cfg.model, cfg.train, cfg.mode, cfg.sync_every, cfg.synchronous, cfg.seed) == \
        ("m.py", "t.list", "easgd", 3, True, 5)
    assert cfg.deadline is None and cfg.worker_optimizer is None
    assert cfg.model_args == {"hidden": 32, "act": "tanh", "sizes": [1, 2]}
    assert cfg.training_group_shape == Shape(n_masters=1, n_processes=2)
    # (the argv round trip this test also checked is gone with argv_from_params: -n starts the typed run)


def test_bad_model_arg_is_a_usage_error() -> None:
    with pytest.raises(click.BadParameter, match="NAME=VALUE"):
        _parse(["--model", "m.py", "--model-arg", "hidden"])


def test_deadline_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNLO_DEADLINE", "1700000000")
    assert train_cmd.config_from_params(_parse(["--model", "m.py"])).deadline == 1.7e9
    monkeypatch.setenv("NNLO_DEADLINE", "tomorrow")
    with pytest.raises(click.BadParameter, match="NNLO_DEADLINE"):
        _parse(["--model", "m.py"])


def test_every_option_has_help() -> None:
    missing = [p.name for p in train_cmd.train_command.params if isinstance(p, click.Option) and not p.help]
    assert missing == []


@pytest.mark.slow
def test_command_module_imports_no_framework() -> None:
    import subprocess

    code = ("import sys, nnlo_sched.commands.train; "
            "print(sorted(m for m in ('torch', 'mpi4py', 'tensorflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert out.stdout.strip() == "[]"


# -- device choice ----------------------------------------------------------------------------------------
def test_device_choice_per_node_local_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    from mpi4py import MPI

    from nnlo import device

    monkeypatch.delenv("NNLO_DEVICE", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert device.node_place(MPI.COMM_SELF, True) == (0, 1, True)
    assert device.node_place(MPI.COMM_SELF, False) == (0, 0, True)
    assert device.select_device(MPI.COMM_SELF, False) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.select_device(MPI.COMM_SELF, True) == "cpu"  # clean CPU fallback
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(device, "node_place", lambda comm, needs: (3, 4, True))
    assert device.select_device(MPI.COMM_SELF, True) == "cuda:1"  # 4th worker of the node, 2 GPUs: shared
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 12)
    monkeypatch.setattr(device, "node_place", lambda comm, needs: (10, 12, True))
    assert device.select_device(MPI.COMM_SELF, True) == "cuda:10"  # beyond 9 GPUs (upstream broke here)
    monkeypatch.setattr(device, "node_place", lambda comm, needs: (1, 6, True))
    assert device.select_device(MPI.COMM_SELF, True) == "cuda:2"  # 6 workers on 12 GPUs: two each
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(device, "node_place", lambda comm, needs: (1, 2, False))
    assert device.select_device(MPI.COMM_SELF, True) == "cuda:0"  # the launcher bound this rank's two GPUs
    with device.world_node_place(MPI.COMM_SELF, True) as place:  # a search counts over its world
        assert place == (1, 2, False) and device.select_device(MPI.COMM_SELF, True) == "cuda:0"
    monkeypatch.setenv("NNLO_DEVICE", "cpu")
    assert device.select_device(MPI.COMM_SELF, True) == "cpu"


def test_the_last_line_of_a_training_stopped_with_a_checkpoint_says_how_it_continues() -> None:
    """A preempted job's log (or a Ctrl-C'd -n run) ended "done: signal after 6 epoch(s)": it was not done."""
    from nnlo.training.driver import summary_line
    from nnlo.training.history import TrainResult

    stopped = TrainResult(epochs_done=6, stopped_reason="signal", checkpoint="/r/checkpoints/ckpt-e0006", updates=60,
                          seconds=3.0, final={"val_loss": 0.5})
    line = summary_line(stopped)
    assert line.startswith("stopped by a stop signal after 6 epoch(s)") and "--restore auto" in line
    assert "done" not in line and "val_loss 0.5000" in line
    assert summary_line(TrainResult(epochs_done=6, stopped_reason="deadline", checkpoint="/c")).startswith(
        "stopped at the deadline after 6 epoch(s)")
    assert summary_line(TrainResult(epochs_done=9, stopped_reason="completed")).startswith("done: completed after 9")

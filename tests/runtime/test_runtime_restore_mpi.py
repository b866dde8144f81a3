"""Checkpoints for real: an interrupted synchronous run, restored, follows the uninterrupted loss curve;
a deadline already reached stops at once with a complete checkpoint and exit status 75."""
from __future__ import annotations

import json

import numpy as np
import pytest

from nnlo.checkpoint import MANIFEST, list_checkpoints

pytestmark = [pytest.mark.mpi]

SYNC = ["--mode", "downpour", "--synchronous", "--worker-optimizer", "sgd:lr=0.1,momentum=0.9",
        "--optimizer", "adam:lr=0.5", "--epochs", "3", "--batch", "8", "--checkpoint-interval", "0"]


def _curve(history: dict) -> np.ndarray:
    return np.array([[e["loss"], e["val_loss"], e["val_accuracy"]] for e in history["history"]])


@pytest.mark.parametrize("model", ["tiny.py", "tiny_bn.py"])  # tiny_bn: BatchNorm statistics are restored too
def test_interrupted_synchronous_run_resumes_on_the_same_curve(run_train, tmp_path, model) -> None:
    whole = run_train(3, *SYNC, out_dir=tmp_path / "whole", model=model)
    assert whole.rc == 0, whole.err

    # 96 samples / 2 workers / batch 8 = 6 rounds per epoch: update 9 is in the middle of epoch 2
    cut = tmp_path / "cut"
    first = run_train(3, *SYNC, out_dir=cut, env={"NNLO_TEST_SIGNAL_AT_UPDATE": "9"}, model=model)
    assert first.rc == 75, first.err
    assert "SIGUSR1" in first.err
    ckpts = list_checkpoints(cut / "checkpoints")
    assert len(ckpts) == 1
    manifest = json.loads((ckpts[0] / MANIFEST).read_text())
    assert manifest["epoch"] == 1 and manifest["updates"] == 9 and manifest["stopped_reason"] == "signal"
    assert sorted(manifest["parts"]) == ["master.pkl", "worker-0.pkl", "worker-1.pkl"]
    assert not [p for p in (cut / "checkpoints").iterdir() if p.name.startswith(".tmp")]

    second = run_train(3, *SYNC, "--restore", "auto", out_dir=cut, model=model)
    assert second.rc == 0, second.err
    resumed = second.history
    assert resumed["epochs_done"] == 3 and resumed["stopped_reason"] == "completed"
    np.testing.assert_allclose(_curve(resumed), _curve(whole.history), rtol=1e-5, atol=1e-6)
    assert [e["samples"] for e in resumed["history"]] == [96, 96, 96]


# A model with dropout draws from each rank's random streams (every rank its own: the seed and the rank): a
# restore continues them only if every rank's streams are in the checkpoint, so the resumed curve is the
# straight one to the last bit of float32, not merely close (a replayed dropout mask moves the loss by 1e-3).
DROPOUT = ["--model-arg", "dropout=0.5", "--worker-optimizer", "sgd:lr=0.1,momentum=0.9", "--batch", "8",
           "--checkpoint-interval", "0"]
SHAPES = {  # every kind of training rank that draws from its streams
    "allreduce": (2, ["--mode", "allreduce"]),  # replicas: only rank 0 writes
    "groups": (5, ["--mode", "downpour", "--synchronous", "--n-processes", "2"]),  # group leaders write
    "workers": (3, ["--mode", "downpour", "--synchronous"]),  # a master and workers, each writing its part
    "solo": (1, []),  # one rank, its own master
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_restored_run_with_dropout_continues_the_straight_curve(run_train, tmp_path, shape) -> None:
    n, mode = SHAPES[shape]
    args = [*mode, *DROPOUT]
    straight = run_train(n, *args, "--epochs", "3", out_dir=tmp_path / "straight")
    assert straight.rc == 0, straight.err
    cut = tmp_path / "cut"
    first = run_train(n, *args, "--epochs", "1", out_dir=cut)
    assert first.rc == 0, first.err
    resumed = run_train(n, *args, "--epochs", "3", "--restore", "auto", out_dir=cut)
    assert resumed.rc == 0, resumed.err
    assert resumed.history["epochs_done"] == 3
    assert _losses(resumed.history) == _losses(straight.history)


@pytest.mark.parametrize("shape, update", [("allreduce", 9), ("groups", 5)])  # of 6 and 3 updates an epoch
def test_a_run_with_dropout_stopped_mid_epoch_resumes_on_the_straight_curve(run_train, tmp_path, shape,
                                                                             update) -> None:
    """The streams as they are at the stop's step, on every rank (the update: in the middle of epoch 2)."""
    n, mode = SHAPES[shape]
    args = [*mode, *DROPOUT, "--epochs", "2"]
    straight = run_train(n, *args, out_dir=tmp_path / "straight")
    assert straight.rc == 0, straight.err
    cut = tmp_path / "cut"
    first = run_train(n, *args, out_dir=cut, env={"NNLO_TEST_SIGNAL_AT_UPDATE": str(update)})
    assert first.rc == 75, first.err
    resumed = run_train(n, *args, "--restore", "auto", out_dir=cut)
    assert resumed.rc == 0, resumed.err
    assert _losses(resumed.history) == _losses(straight.history)


def _losses(history: dict) -> list[tuple[float, float]]:
    return [(e["loss"], e["val_loss"]) for e in history["history"]]


def test_deadline_already_reached_writes_checkpoint_and_exits_75(run_train, tmp_path) -> None:
    out = tmp_path / "late"
    run = run_train(3, "--mode", "gem", "--epochs", "5", "--batch", "8", "--deadline", "1", out_dir=out)
    assert run.rc == 75, run.err
    assert run.history["stopped_reason"] == "deadline"
    (ckpt,) = list_checkpoints(out / "checkpoints")
    parts = json.loads((ckpt / MANIFEST).read_text())["parts"]
    assert {"master.pkl", "worker-0.pkl", "worker-1.pkl"} <= set(parts)
    # resubmitted without a deadline, it continues and finishes
    again = run_train(3, "--mode", "gem", "--epochs", "2", "--batch", "8", "--restore", str(out), out_dir=out)
    assert again.rc == 0, again.err
    assert again.history["epochs_done"] == 2
    assert sum(e["samples"] for e in again.history["history"]) == 2 * 96


def test_restore_from_a_folder_without_a_checkpoint_is_one_error(run_train, tmp_path) -> None:
    """An explicit --restore DIR must resume: a folder with no checkpoint is an error, not a fresh start
    (--restore auto is the fresh-start-when-none spelling, see docs/migrating.md)."""
    empty = tmp_path / "nothing-yet"
    empty.mkdir()
    run = run_train(2, "--mode", "downpour", "--epochs", "1", "--batch", "16", "--restore", str(empty))
    assert run.rc == 2, run.err
    assert len(run.error_lines()) == 1 and "holds no complete checkpoint" in run.error_lines()[0], run.err
    assert not (run.out_dir / "history.json").exists()


def test_sigusr1_to_the_launching_command_checkpoints_and_exits_75(nnlo_env, blobs, tmp_path) -> None:
    """``nnlo train -n 3`` passes the batch system's signal through mpirun to every rank."""
    import signal
    import subprocess
    import sys

    from pathlib import Path

    models, timeout = Path(__file__).resolve().parent / "models", 240

    out = tmp_path / "signalled"
    cmd = [sys.executable, "-m", "nnlo_sched", "train", "-n", "3", "--model", str(models / "tiny.py"),
           "--train", str(blobs["train"]), "--val", str(blobs["val"]), "--epochs", "100000", "--batch", "4",
           "--mode", "easgd", "--checkpoint", str(out)]
    proc = subprocess.Popen(cmd, env=nnlo_env, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in proc.stderr:  # wait until training has really started, then signal
            seen.append(line)
            if "epoch 2/" in line:
                proc.send_signal(signal.SIGUSR1)
                break
        seen += proc.stderr.readlines()
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 75, "".join(seen)
    assert "".join(seen).count("] warning: received SIGUSR1: writing a checkpoint") == 1  # every rank got it: once
    history = json.loads((out / "history.json").read_text())
    assert history["stopped_reason"] == "signal" and history["epochs_done"] < 100000
    assert len(list_checkpoints(out / "checkpoints")) == 1


def _snapshot(folder) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*") if p.is_file()}


def test_a_second_run_into_a_finished_run_is_refused_before_writing_until_overwrite(run_train, tmp_path) -> None:
    """nnlo train --checkpoint DIR twice: the second is one line (the ways on) and writes nothing; --overwrite
    starts afresh (the earlier checkpoints gone, so a later --restore auto cannot pick them up)."""
    out = tmp_path / "done"
    first = run_train(1, "--epochs", "2", "--batch", "16", "--checkpoint-interval", "1", out_dir=out)
    assert first.rc == 0, first.err
    before = _snapshot(out)
    again = run_train(2, "--epochs", "1", "--batch", "16", out_dir=out)
    assert again.rc == 2, again.err
    (line,) = again.error_lines()
    assert "already holds a run (checkpoint ckpt-e0002" in line and "--restore auto" in line and "--overwrite" in line
    assert "Traceback" not in again.err and _snapshot(out) == before
    fresh = run_train(1, "--epochs", "1", "--batch", "16", "--overwrite", out_dir=out)
    assert fresh.rc == 0, fresh.err
    assert fresh.history["epochs_done"] == 1 and len(fresh.history["history"]) == 1
    assert [c.name[:10] for c in list_checkpoints(out / "checkpoints")] == ["ckpt-e0001"]

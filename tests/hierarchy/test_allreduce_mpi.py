"""Pure all-reduce mode under real mpirun: N ranks follow single-process training with an N x batch; only
rank 0 writes; a restored run continues exactly; the rank map is the layout side's."""
from __future__ import annotations

import pytest
from nnlo.allreduce import available_engines
from nnlo_sched.layout.compute import compute_layout
from nnlo.roles import Shape
from nnlo_sched.inner import parse_inner
from nnlo_sched.profiles.loader import load_profile
from tests.helpers.hierarchy import losses, rank_map_logged


def shape_from_args(kind: str, args: list[str]) -> Shape:
    """The shape the one inner parser reads from a command line (a model is required; its name is moot)."""
    return parse_inner(kind, ["--model", "m.py", *args]).shape


pytestmark = [pytest.mark.mpi]
OPTS = ("--mode", "allreduce", "--worker-optimizer", "sgd:lr=0.1", "--log-level", "info")


def _close(a: list[float], b: list[float]) -> None:
    assert a == pytest.approx(b, rel=1e-4), f"{a} != {b}"


def _same_rank_map_as_the_layout(run, ranks: int) -> None:
    shape = shape_from_args("train", ["--mode", "allreduce"])
    layout = compute_layout(load_profile("local"), shape, workers=ranks)
    assert rank_map_logged(run) == layout.hierarchy.rank_map()


@pytest.mark.parametrize("engine", [e for e in available_engines() if e != "torch"])  # torch: next test
def test_n_ranks_match_one_process_with_n_times_the_batch(run_train, engine: str) -> None:
    ranks = 3 if engine == "mpi" else 2
    launcher = "world" if engine == "mpi" else "mpirun"  # Horovod initialises once per process: a real launch
    many = run_train(ranks, *OPTS, "--epochs", "2", "--batch", "8", "--allreduce-engine", engine, launcher=launcher)
    assert many.rc == 0, many.err[-3000:]
    one = run_train(1, *OPTS, "--epochs", "2", "--batch", str(8 * ranks))
    assert one.rc == 0, one.err[-3000:]
    _close(losses(many.history), losses(one.history))
    _close(losses(many.history, "val_loss"), losses(one.history, "val_loss"))
    assert [e["samples"] for e in many.history["history"]] == [96, 96]
    assert many.history["engine"] == engine and many.history["n_workers"] == ranks
    _same_rank_map_as_the_layout(many, ranks)


@pytest.mark.skipif("torch" not in available_engines(), reason="torch.distributed is not in this torch build")
def test_torch_engine_trains_2_replicas_like_the_mpi_engine(run_train) -> None:
    """--allreduce-engine torch on CPUs (gloo, the process group set up from the MPI world) reaches the mpi
    engine's validation loss with the same seed, epoch by epoch."""
    seeded = (*OPTS, "--epochs", "3", "--batch", "8", "--seed", "5")
    torch_run = run_train(2, *seeded, "--allreduce-engine", "torch")
    assert torch_run.rc == 0, torch_run.err[-3000:]
    mpi_run = run_train(2, *seeded, "--allreduce-engine", "mpi")
    assert mpi_run.rc == 0, mpi_run.err[-3000:]
    assert torch_run.history["engine"] == "torch" and mpi_run.history["engine"] == "mpi"
    assert "engine torch.distributed gloo over 2 rank(s)" in torch_run.err, torch_run.err[-2000:]
    val_torch, val_mpi = losses(torch_run.history, "val_loss"), losses(mpi_run.history, "val_loss")
    assert len(val_torch) == len(val_mpi) == 3
    assert val_torch == pytest.approx(val_mpi, abs=1e-3), (val_torch, val_mpi)
    assert losses(torch_run.history) == pytest.approx(losses(mpi_run.history), abs=1e-3)


def test_two_ranks_split_by_a_restore_match_one_process(run_train, tmp_path) -> None:
    """2 ranks, --scale-lr (0.05 -> 0.1), stopped after epoch 1 and restored, = 1 process, batch 16, lr 0.1."""
    scaled = (*OPTS, "--worker-optimizer", "sgd:lr=0.05", "--scale-lr", "--batch", "8")
    first = run_train(2, *scaled, "--epochs", "1", out_dir=tmp_path / "split")
    assert first.rc == 0, first.err[-3000:]
    ckpts = sorted((tmp_path / "split" / "checkpoints").glob("ckpt-*"))
    assert ckpts, "no checkpoint written"
    assert sorted(p.name for p in ckpts[-1].iterdir()) == ["manifest.json", "replica.pkl"]  # rank 0 only
    second = run_train(2, *scaled, "--epochs", "2", "--restore", "auto", out_dir=tmp_path / "split")
    assert second.rc == 0, second.err[-3000:]
    one = run_train(1, *OPTS, "--epochs", "2", "--batch", "16")
    assert one.rc == 0, one.err[-3000:]
    assert len(second.history["history"]) == 2
    _close(losses(second.history), losses(one.history))
    _close(losses(second.history, "val_loss"), losses(one.history, "val_loss"))
    _same_rank_map_as_the_layout(first, 2)


def test_bad_shapes_give_one_line(run_train) -> None:
    run = run_train(2, "--n-masters", "0", "--epochs", "1")
    assert run.rc == 2 and len(run.error_lines()) == 1 and "--mode allreduce" in run.error_lines()[0], run.err
    if "horovod" not in available_engines():
        run = run_train(2, *OPTS, "--epochs", "1", "--allreduce-engine", "horovod")
        assert run.rc == 2 and len(run.error_lines()) == 1, run.err
        assert "install-horovod.sh" in run.error_lines()[0]

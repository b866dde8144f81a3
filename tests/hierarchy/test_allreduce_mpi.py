"""Pure all-reduce mode under real mpirun: N ranks follow single-process training with an N x batch; only
rank 0 writes; a restored run continues exactly; the rank map is the layout side's."""
from __future__ import annotations

import pytest

from nnlo.allreduce import available_engines
from nnlo_sched.layout.compute import compute_layout
from nnlo_sched.layout.shape import shape_from_args
from nnlo_sched.profiles.loader import load_profile
from tests.hierarchy.conftest import losses, rank_map_logged

pytestmark = [pytest.mark.mpi]
OPTS = ("--mode", "allreduce", "--worker-optimizer", "sgd:lr=0.1", "--log-level", "info")


def _close(a: list[float], b: list[float]) -> None:
    assert a == pytest.approx(b, rel=1e-4), f"{a} != {b}"


@pytest.mark.parametrize("engine", available_engines())
@pytest.mark.parametrize("ranks", [2, 3])
def test_n_ranks_match_one_process_with_n_times_the_batch(run_train, ranks: int, engine: str) -> None:
    # with 2 ranks, --scale-lr doubles lr=0.05 to the one process's 0.1
    lr = ("--worker-optimizer", "sgd:lr=0.05", "--scale-lr") if ranks == 2 else ()
    many = run_train(ranks, *OPTS, *lr, "--epochs", "2", "--batch", "8", "--allreduce-engine", engine)
    assert many.rc == 0, many.err[-3000:]
    one = run_train(1, *OPTS, "--epochs", "2", "--batch", str(8 * ranks))
    assert one.rc == 0, one.err[-3000:]
    _close(losses(many.history), losses(one.history))
    _close(losses(many.history, "val_loss"), losses(one.history, "val_loss"))
    assert [e["samples"] for e in many.history["history"]] == [96, 96]
    assert many.history["engine"] == engine and many.history["n_workers"] == ranks
    # the layout side computes the same rank map for the same argv
    shape = shape_from_args("train", ["--mode", "allreduce"])
    layout = compute_layout(load_profile("local"), shape, workers=ranks)
    assert rank_map_logged(many) == layout.hierarchy.rank_map()


def test_only_rank_0_writes_and_restore_continues_exactly(run_train, tmp_path) -> None:
    whole = run_train(2, *OPTS, "--epochs", "3", "--batch", "8", out_dir=tmp_path / "whole")
    assert whole.rc == 0, whole.err[-3000:]
    first = run_train(2, *OPTS, "--epochs", "2", "--batch", "8", "--checkpoint-interval", "1",
                      out_dir=tmp_path / "split")
    assert first.rc == 0, first.err[-3000:]
    ckpts = sorted((tmp_path / "split" / "checkpoints").glob("ckpt-*"))
    assert ckpts, "no checkpoint written"
    assert sorted(p.name for p in ckpts[-1].iterdir()) == ["manifest.json", "replica.pkl"]  # one writer
    second = run_train(2, *OPTS, "--epochs", "3", "--batch", "8", "--restore", "auto", out_dir=tmp_path / "split")
    assert second.rc == 0, second.err[-3000:]
    _close(losses(second.history), losses(whole.history))
    assert len(second.history["history"]) == 3


def test_bad_shapes_give_one_line(run_train) -> None:
    run = run_train(2, "--n-masters", "0", "--epochs", "1")
    assert run.rc == 2 and len(run.error_lines()) == 1 and "--mode allreduce" in run.error_lines()[0], run.err
    if "horovod" not in available_engines():
        run = run_train(2, *OPTS, "--epochs", "1", "--allreduce-engine", "horovod")
        assert run.rc == 2 and len(run.error_lines()) == 1, run.err
        assert "install-horovod.sh" in run.error_lines()[0]

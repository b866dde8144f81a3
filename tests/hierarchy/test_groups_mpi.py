"""All-reduce worker groups under a master, under real mpirun: -n 5 --n-processes 2 = master + 2 groups of
2 ranks, and each group is exactly one worker with twice the batch (synchronous Downpour makes the
comparison deterministic); only the leaders write checkpoint parts; the rank map is the layout side's."""
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
SYNC = ("--mode", "downpour", "--synchronous", "--worker-optimizer", "sgd:lr=0.1", "--epochs", "2",
        "--checkpoint-interval", "1", "--log-level", "info")


def test_two_groups_of_two_equal_two_workers_with_double_batch(run_train) -> None:
    groups = run_train(5, *SYNC, "--n-processes", "2", "--batch", "8")
    assert groups.rc == 0, groups.err[-3000:]
    plain = run_train(3, *SYNC, "--batch", "16")
    assert plain.rc == 0, plain.err[-3000:]
    assert losses(groups.history) == pytest.approx(losses(plain.history), rel=1e-4)
    assert losses(groups.history, "val_loss") == pytest.approx(losses(plain.history, "val_loss"), rel=1e-4)
    assert [e["samples"] for e in groups.history["history"]] == [96, 96]  # members read disjoint samples
    last = sorted((groups.out_dir / "checkpoints").glob("ckpt-*"))[-1]
    assert sorted(p.name for p in last.iterdir()) == ["manifest.json", "master.pkl", "worker-0.pkl",
                                                      "worker-1.pkl"]
    shape = shape_from_args("train", ["--n-processes", "2"])
    assert rank_map_logged(groups) == compute_layout(load_profile("local"), shape, workers=2).hierarchy.rank_map()
    assert rank_map_logged(groups) == "0 master | 1 worker | 2 worker(member) | 3 worker | 4 worker(member)"
    if "torch" in available_engines():  # the groups' process groups from torch.distributed: the same run
        torched = run_train(5, *SYNC, "--n-processes", "2", "--batch", "8", "--allreduce-engine", "torch")
        assert torched.rc == 0, torched.err[-3000:]
        assert losses(torched.history, "val_loss") == pytest.approx(losses(groups.history, "val_loss"), rel=1e-4)


def test_a_failing_group_member_ends_the_run_with_one_line(run_train) -> None:
    run = run_train(5, "--mode", "downpour", "--n-processes", "2", "--epochs", "1", "--batch", "8",
                    model="raises_on_rank2.py")
    assert run.rc != 0
    lines = run.error_lines()
    assert len(lines) == 1 and "rank 2" in lines[0], run.err[-3000:]

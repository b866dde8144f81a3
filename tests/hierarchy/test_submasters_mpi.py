"""Sub-masters under real mpirun: -n 5 --n-masters 3 is an uber-master above 2 masters with one worker
each. Every mode trains over the whole data set each epoch; checkpoints hold every part of the tree; a
signal stops the whole tree with a checkpoint that a restore continues; a failing worker ends all."""
from __future__ import annotations

import json

import pytest

from nnlo_sched.layout.compute import compute_layout
from nnlo.roles import Shape
from nnlo_sched.inner import parse_inner
from nnlo_sched.profiles.loader import load_profile
from tests.helpers.hierarchy import rank_map_logged


def shape_from_args(kind: str, args: list[str]) -> Shape:
    """The shape the one inner parser reads from a command line (a model is required; its name is moot)."""
    return parse_inner(kind, ["--model", "m.py", *args]).shape


pytestmark = [pytest.mark.mpi]
TREE = ("--n-masters", "3", "--batch", "8", "--log-level", "info")
PARTS = ["manifest.json", "master.pkl", "submaster-0.pkl", "submaster-1.pkl", "worker-0.pkl", "worker-1.pkl"]


@pytest.mark.parametrize("mode", ["downpour", "easgd", "gem"])
def test_every_mode_trains_through_the_tree(run_train, mode: str) -> None:
    epochs = 2 if mode == "downpour" else 1
    run = run_train(5, *TREE, "--mode", mode, "--epochs", str(epochs), "--checkpoint-interval", "1")
    assert run.rc == 0, run.err[-3000:]
    history = run.history["history"]
    assert [e["samples"] for e in history] == [96] * epochs  # the whole training set, once per epoch
    assert all(e["val_accuracy"] > 0.5 for e in history)  # it learns through the tree (3 classes: 1/3 by chance)
    last = sorted((run.out_dir / "checkpoints").glob("ckpt-*"))[-1]
    assert sorted(p.name for p in last.iterdir()) == PARTS
    layout = compute_layout(load_profile("local"), shape_from_args("train", ["--n-masters", "3"]), workers=2)
    assert rank_map_logged(run) == layout.hierarchy.rank_map() == "0 uber-master | 1 master | 2 worker | 3 master | 4 worker"
    # the run's workers, not the uber-master's masters: in the history and in its first line


def test_the_uber_master_counts_the_runs_workers_not_its_masters(run_train) -> None:
    """-n 5 --n-masters 2: one master under the uber-master, with 3 workers: the run has 3 workers."""
    run = run_train(5, "--n-masters", "2", "--batch", "16", "--epochs", "1", "--log-level", "info")
    assert run.rc == 0, run.err[-3000:]
    (first,) = [ln for ln in run.err.splitlines() if ln.startswith("[rank 0 uber-master] info: training ")]
    assert ": 3 worker(s), mode" in first and run.history["n_workers"] == 3, first


def test_a_signal_stops_the_tree_with_a_checkpoint_that_restores(run_train, tmp_path) -> None:
    out = tmp_path / "cut"
    first = run_train(5, *TREE, "--mode", "downpour", "--epochs", "3", out_dir=out,
                      env={"NNLO_TEST_SIGNAL_AT_UPDATE": "5"})
    assert first.rc == 75, first.err[-3000:]  # resumable
    ckpts = sorted((out / "checkpoints").glob("ckpt-*"))
    assert ckpts and sorted(p.name for p in ckpts[-1].iterdir()) == PARTS
    assert json.loads((ckpts[-1] / "manifest.json").read_text())["n_workers"] == 2
    second = run_train(5, *TREE, "--mode", "downpour", "--epochs", "3", "--restore", "auto", out_dir=out)
    assert second.rc == 0, second.err[-3000:]
    history = second.history["history"]
    assert [e["epoch"] for e in history] == [1, 2, 3]
    assert sum(e["samples"] for e in history) == 3 * 96  # no sample lost or repeated across the stop


def test_a_failing_worker_ends_the_tree_with_one_line(run_train) -> None:
    run = run_train(5, *TREE, "--mode", "downpour", "--epochs", "1", model="raises_on_rank2.py")
    assert run.rc != 0
    lines = run.error_lines()
    assert len(lines) == 1 and "rank 2" in lines[0] and "deliberate" in lines[0], run.err[-3000:]

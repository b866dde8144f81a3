"""Distributed validation under a real ``mpirun``: the figures equal one rank's evaluation of the same model,
every rank takes a share, and a rank failing in the middle of a validation ends the job with one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nnlo.backends import make_backend
from nnlo.config import TrainConfig
from nnlo.data import H5Dataset, read_list_file
from nnlo.models import load_model_source
from nnlo.training.validation import Validator

from tests.helpers.runtime import MODELS, write_blobs

pytestmark = [pytest.mark.mpi]


def _single_rank(run, model: str, val_list: Path) -> dict[str, float]:
    """The final model (the center, with the master's averaged buffers) evaluated by one process."""
    load_model_source(str(MODELS / model))  # model.pt pickles the model's class from this module
    net = torch.load(run.out_dir / "model.pt", weights_only=False)
    backend = make_backend(net, TrainConfig(model=str(MODELS / model)), "cpu")
    ds = H5Dataset(read_list_file(str(val_list)))
    return Validator(ds, np.arange(len(ds)), 256)(backend)


def _ranks_that_validated(run) -> set[int]:
    events = json.loads((run.out_dir / "timeline.json").read_text())["traceEvents"]
    return {e["pid"] for e in events if e.get("name") == "validate share"}


def _data(tmp_path: Path, blobs: dict[str, Path], n_val: int) -> list[str]:
    small = write_blobs(tmp_path / f"val{n_val}", n_train=8, n_val=n_val)
    return ["--train", str(blobs["train"]), "--val", str(small["val"])], small["val"]


def test_master_and_workers_share_the_validation(run_train, blobs, tmp_path: Path) -> None:
    # 31 samples over 3 ranks: uneven shares (10, 10, 11); BatchNorm: the master's averaged buffers must be used
    args, val = _data(tmp_path, blobs, 31)
    run = run_train(3, "--mode", "downpour", "--epochs", "2", "--batch", "8", "--timeline", *args,
                    data=False, model="tiny_bn.py")
    assert run.rc == 0, run.err
    last = run.history["history"][-1]
    want = _single_rank(run, "tiny_bn.py", val)
    assert last["val_loss"] == pytest.approx(want["val_loss"], rel=1e-5)
    assert last["val_accuracy"] == want["val_accuracy"]
    assert _ranks_that_validated(run) == {0, 1, 2}


def test_allreduce_replicas_share_a_validation_smaller_than_the_group(run_train, blobs, tmp_path: Path) -> None:
    args, val = _data(tmp_path, blobs, 2)  # 2 samples, 3 ranks: one share is empty
    run = run_train(3, "--mode", "allreduce", "--epochs", "1", "--batch", "8", *args, data=False)
    assert run.rc == 0, run.err
    last = run.history["history"][-1]
    want = _single_rank(run, "tiny.py", val)
    assert last["val_loss"] == pytest.approx(want["val_loss"], rel=1e-5)
    assert last["val_accuracy"] == want["val_accuracy"]


def test_a_worker_failing_while_validating_ends_the_job_with_one_line(run_train) -> None:
    run = run_train(3, "--mode", "downpour", "--epochs", "3", "--batch", "8", model="eval_fails_on_rank2.py")
    assert run.rc == 1, run.err
    lines = run.error_lines()
    assert len(lines) == 1, run.err
    assert "rank 2" in lines[0] and "while validating" in lines[0] and "deliberate failure" in lines[0]
    assert "Traceback" not in run.err


def test_a_run_wide_warning_is_printed_once_and_kept_in_every_ranks_log(run_train, blobs) -> None:
    """-n 4 without --val: every rank finds no validation data; the screen says so once, each log keeps it."""
    run = run_train(4, "--epochs", "1", "--batch", "16", "--train", str(blobs["train"]), data=False)
    assert run.rc == 0, run.err
    assert run.err.count("no validation data (--val)") == 1, run.err
    for rank in range(4):
        assert "no validation data (--val)" in (run.out_dir / "logs" / f"rank-{rank}.log").read_text()

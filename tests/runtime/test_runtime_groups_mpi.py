"""train() on a sub-communicator with k-fold indices, the way the optimization engine calls it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parent / "models"
TIMEOUT = 240

pytestmark = [pytest.mark.mpi]


def test_train_runs_on_a_split_communicator_with_fold_indices(nnlo_mpi, blobs, tmp_path: Path) -> None:
    job = Path(__file__).parent / "group_job.py"
    proc = nnlo_mpi(4, job, MODELS / "tiny.py", blobs["train"], tmp_path, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [r["rank"] for r in rows] == [1, 2, 3]
    results = [r["result"] for r in rows]
    assert results[0] == results[1] == results[2]  # every rank of the group gets the full result
    history = results[0]["history"]
    assert [e["samples"] for e in history] == [rows[0]["n_train"]] * 2  # only the fold's training samples
    assert rows[0]["n_train"] + rows[0]["n_val"] == 96
    assert all("val_loss" in e for e in history)  # validated on the held-out fold
    written = json.loads((tmp_path / "fold-0" / "history.json").read_text())
    assert written["history"] == history and written["config"]["model_args"] == {"hidden": 6}

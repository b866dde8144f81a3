"""The Python API on 3 MPI ranks (the warm MPI world): the same history as ``nnlo train`` with the same seed, for an
HDF5 list and for an in-memory ArraySource of the same samples; a custom data source checkpointed in the middle
of an epoch resumes on the same curve; callbacks stop the training cleanly on every rank.

Two launches in all (``nnlo train`` for the reference, then one script that runs every API training in
turn, see api_script.py), so the whole module costs what two short trainings cost."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnlo.checkpoint import MANIFEST, list_checkpoints
from tests.helpers.runtime import MODELS, TIMEOUT, write_blobs

pytestmark = [pytest.mark.mpi]

HERE = Path(__file__).resolve().parent
# the same options as api_script.py's SYNC (synchronous Downpour: a deterministic curve)
SYNC_ARGS = ["--mode", "downpour", "--synchronous", "--worker-optimizer", "sgd:lr=0.1,momentum=0.9",
             "--optimizer", "adam:lr=0.5", "--epochs", "3", "--batch", "8", "--checkpoint-interval", "0",
             "--seed", "3"]
FIELDS = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy", "samples", "updates")


@pytest.fixture(scope="module")
def runs(mpi_world, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``nnlo train`` and tests/api/api_script.py (the Python API) on 3 ranks each, in the warm MPI world."""
    root = tmp_path_factory.mktemp("api")
    data = write_blobs(root / "data")
    out = root / "out"
    cli = mpi_world.run(3, ["train", "--model", str(MODELS / "tiny.py"), "--train", str(data["train"]), "--val",
                            str(data["val"]), "--checkpoint", str(out / "cli"), *SYNC_ARGS], timeout=TIMEOUT)
    assert cli.returncode == 0, cli.stderr
    api = mpi_world.run(3, [str(HERE / "api_script.py"), str(data["dir"]), str(out)], timeout=TIMEOUT)
    assert api.returncode == 0, api.stderr[-3000:]
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(3)]
    return {"out": out, "cli": json.loads((out / "cli" / "history.json").read_text()), "ranks": ranks,
            "err": api.stderr}


def _curve(history: list[dict[str, Any]]) -> np.ndarray:
    return np.array([[float(e.get(k) or 0.0) for k in FIELDS] for e in history])


def test_api_gives_nnlo_trains_history_for_a_list_and_for_arrays(runs) -> None:
    reference = _curve(runs["cli"]["history"])
    assert reference.shape == (3, len(FIELDS))
    for name in ("list", "arrays"):
        got = runs["ranks"][0][name]
        assert got["stopped"] == "completed" and got["epochs_done"] == 3
        np.testing.assert_allclose(_curve(got["history"]), reference, rtol=1e-6, atol=1e-7, err_msg=name)
        written = json.loads(Path(got["history_path"]).read_text())
        np.testing.assert_allclose(_curve(written["history"]), reference, rtol=1e-6, atol=1e-7)
    # the same roles and defaults: the stored options differ only where the run folder is named
    cli_config = json.loads((runs["out"] / "cli" / "config.json").read_text())
    api_config = json.loads((runs["out"] / "list" / "config.json").read_text())
    assert {k: v for k, v in api_config.items() if k != "checkpoint"} == \
        {k: v for k, v in cli_config.items() if k != "checkpoint"}


def test_every_rank_gets_the_result_and_only_the_master_is_master(runs) -> None:
    ranks = runs["ranks"]
    assert [r["list"]["is_master"] for r in ranks] == [True, False, False]
    for r in ranks[1:]:
        for name in ("list", "arrays", "cut", "resumed", "callback", "raising", "overwritten"):
            assert r[name]["history"] == ranks[0][name]["history"], name
            assert r[name]["stopped"] == ranks[0][name]["stopped"]


def test_custom_source_checkpointed_mid_epoch_resumes_at_the_same_position(runs) -> None:
    cut, resumed = runs["ranks"][0]["cut"], runs["ranks"][0]["resumed"]
    assert cut["stopped"] == "signal" and cut["resumable"] and cut["epochs_done"] == 1
    (ckpt,) = list_checkpoints(runs["out"] / "cut" / "checkpoints")[:1]
    manifest = json.loads((Path(cut["checkpoint"]) / MANIFEST).read_text())
    # 96 samples / 2 workers / batch 8 = 6 updates an epoch: update 9 is the middle of epoch 2
    assert manifest["epoch"] == 1 and manifest["updates"] == 9 and manifest["stopped_reason"] == "signal"
    assert ckpt.name.startswith("ckpt-e0001")
    assert resumed["stopped"] == "completed" and resumed["epochs_done"] == 3
    assert [e["samples"] for e in resumed["history"]] == [96, 96, 96]  # every sample once, none twice
    np.testing.assert_allclose(_curve(resumed["history"]), _curve(runs["cli"]["history"]), rtol=1e-5, atol=1e-6)


def test_a_callback_stops_training_cleanly(runs) -> None:
    ranks = runs["ranks"]
    stopped = ranks[0]["callback"]
    assert stopped["stopped"] == "callback" and stopped["epochs_done"] == 2 and not stopped["resumable"]
    assert [r["callback"]["seen"] for r in ranks] == [[1, 2], [], []]  # on the master only, every epoch
    written = json.loads(Path(stopped["history_path"]).read_text())
    assert written["stopped_reason"] == "callback" and written["epochs_done"] == 2
    newest = list_checkpoints(runs["out"] / "callback" / "checkpoints")[-1]
    assert json.loads((newest / MANIFEST).read_text())["epoch"] == 2
    raising = ranks[0]["raising"]
    assert raising["stopped"] == "callback" and raising["epochs_done"] == 1
    assert "callback enough stopped the training after epoch 1: enough" in runs["err"]


def test_a_second_training_into_a_folder_holding_a_run_is_refused_unless_overwrite(runs) -> None:
    for r in runs["ranks"]:  # every rank raises the same failure; nothing was written
        again = r["again"]
        assert again["refused"] and again["code"] == 2 and again["untouched"], again
        assert "already holds a run" in again["message"] and "overwrite=True" in again["message"]
    overwritten = runs["ranks"][0]["overwritten"]
    assert overwritten["stopped"] == "completed" and overwritten["epochs_done"] == 1
    written = json.loads(Path(overwritten["history_path"]).read_text())
    assert written["mode"] == "synchronous" and len(written["history"]) == 1  # the easgd run is gone
    (ckpt,) = list_checkpoints(runs["out"] / "raising" / "checkpoints")
    assert json.loads((ckpt / MANIFEST).read_text())["mode"] == "synchronous"

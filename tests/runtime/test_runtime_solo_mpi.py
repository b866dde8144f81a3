"""One rank trains alone (``nnlo train -n 1``): in every mode it is plain training with the worker optimizer,
validated, checkpointed, stopped by a signal or the deadline and restored like a master with workers, and its
checkpoints restore into a master with workers (and theirs into it)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from nnlo.checkpoint import MANIFEST, list_checkpoints
from nnlo.data import H5Dataset, ShardedLoader, read_list_file
from nnlo.models import load_model_source
from tests.helpers.runtime import MODELS

pytestmark = [pytest.mark.mpi]

LR, BATCH, EPOCHS = 0.1, 8, 2
MODES = {  # every mode, each with plain SGD at LR as the worker's optimizer
    "downpour": ["--mode", "downpour", "--worker-optimizer", f"sgd:lr={LR}", "--optimizer", "adam:lr=0.5"],
    "easgd": ["--mode", "easgd", "--worker-optimizer", f"sgd:lr={LR}", "--elastic-force", "0.5"],
    "gem": ["--mode", "gem", "--gem-lr", str(LR)],
    "synchronous": ["--mode", "downpour", "--synchronous", "--worker-optimizer", f"sgd:lr={LR}"],
}


def _plain_sgd(blobs: dict, epochs: int) -> np.ndarray:
    """The weights after ``epochs`` of plain SGD over the whole shuffled training set, batch by batch."""
    torch.manual_seed(0)
    model = load_model_source(str(MODELS / "tiny.py")).build()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data = H5Dataset(read_list_file(blobs["train"]))
    loader = ShardedLoader(data, None, 1, 0, BATCH, seed=0)
    for epoch in range(epochs):
        for idx in loader.batch_indices(epoch):
            x, y = data.read(idx)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
            opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def _final_weights(run) -> np.ndarray:
    model = torch.load(run.out_dir / "model.pt", weights_only=False)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def _parts(folder) -> list[str]:
    return sorted(json.loads((folder / MANIFEST).read_text())["parts"])


@pytest.mark.parametrize("mode", ["easgd", "synchronous"])
def test_one_rank_trains_alone_in_every_mode(run_train, blobs, mode: str) -> None:
    """nnlo train -n 1: no master, no exchange: the final model is plain SGD's, whatever the mode (the two
    whose exchange would change the curve most here; gem and downpour in the tests below). A world of one
    rank, in the warm world: the relaunch has no branch on the number of ranks and is launched for real by
    tests/runtime/test_runtime_modes_mpi.py::test_relaunch_with_n_runs_under_mpirun."""
    run = run_train(1, *MODES[mode], "--epochs", str(EPOCHS), "--batch", str(BATCH), "--checkpoint-interval", "1")
    assert run.rc == 0, run.err
    h = run.history
    assert h["stopped_reason"] == "completed" and h["n_workers"] == 1 and h["epochs_done"] == EPOCHS
    assert [e["samples"] for e in h["history"]] == [96] * EPOCHS and "val_loss" in h["final"]
    assert h["history"][-1]["updates"] == EPOCHS * 12  # one update per batch of 8 of the 96 samples
    assert "[rank 0 solo]" in run.err and "training alone" in run.err and not run.error_lines()
    assert json.loads((run.out_dir / "config.json").read_text())["mode"] == MODES[mode][1]
    ckpts = list_checkpoints(run.out_dir / "checkpoints")
    assert len(ckpts) == EPOCHS and _parts(ckpts[-1]) == ["master.pkl", "worker-0.pkl"]
    np.testing.assert_allclose(_final_weights(run), _plain_sgd(blobs, EPOCHS), rtol=1e-4, atol=1e-5)


def test_a_signal_mid_epoch_checkpoints_and_the_restore_follows_the_same_curve(run_train, tmp_path) -> None:
    args = [*MODES["gem"], "--epochs", "3", "--batch", str(BATCH), "--checkpoint-interval", "0"]
    whole = run_train(1, *args, out_dir=tmp_path / "whole")
    assert whole.rc == 0, whole.err
    cut = tmp_path / "cut"
    first = run_train(1, *args, out_dir=cut, env={"NNLO_TEST_SIGNAL_AT_UPDATE": "17"})  # epoch 2, batch 5
    assert first.rc == 75 and "SIGUSR1" in first.err, first.err
    (ckpt,) = list_checkpoints(cut / "checkpoints")
    manifest = json.loads((ckpt / MANIFEST).read_text())
    assert (manifest["epoch"], manifest["updates"], manifest["stopped_reason"]) == (1, 17, "signal")
    assert _parts(ckpt) == ["master.pkl", "worker-0.pkl"] and first.history["stopped_reason"] == "signal"
    second = run_train(1, *args, "--restore", "auto", out_dir=cut)
    assert second.rc == 0, second.err
    curve = [[e["loss"], e["val_loss"]] for e in second.history["history"]]
    np.testing.assert_allclose(curve, [[e["loss"], e["val_loss"]] for e in whole.history["history"]],
                               rtol=1e-5, atol=1e-6)
    assert [e["samples"] for e in second.history["history"]] == [96, 96, 96]


def test_the_deadline_stops_a_solo_rank_and_a_master_with_workers_continues_it(run_train, tmp_path) -> None:
    out = tmp_path / "late"
    late = run_train(1, *MODES["downpour"], "--epochs", "3", "--batch", str(BATCH), "--deadline", "1", out_dir=out)
    assert late.rc == 75 and late.history["stopped_reason"] == "deadline", late.err
    (ckpt,) = list_checkpoints(out / "checkpoints")
    assert _parts(ckpt) == ["master.pkl", "worker-0.pkl"]
    more = run_train(3, *MODES["downpour"], "--epochs", "2", "--batch", str(BATCH), "--restore", "auto", out_dir=out)
    assert more.rc == 0, more.err
    assert more.history["n_workers"] == 2 and more.history["epochs_done"] == 2
    back = run_train(1, *MODES["downpour"], "--epochs", "3", "--batch", str(BATCH), "--restore", "auto", out_dir=out)
    assert back.rc == 0, back.err
    assert [e["epoch"] for e in back.history["history"]] == [1, 2, 3] and back.history["n_workers"] == 1

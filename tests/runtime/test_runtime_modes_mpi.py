"""Real ``mpirun`` runs of ``nnlo train``: every mode on 2 and 3 ranks, exactness checks (1 rank: test_runtime_solo_mpi)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nnlo.data import H5Dataset, ShardedLoader, read_list_file
from nnlo.models import load_model_source

pytestmark = [pytest.mark.mpi]

MODES = {
    "downpour": ["--mode", "downpour"],
    "easgd": ["--mode", "easgd", "--worker-optimizer", "sgd:lr=0.05", "--preload-data"],
    "gem": ["--mode", "gem", "--gem-lr", "0.05"],
    "synchronous": ["--mode", "downpour", "--synchronous", "--worker-optimizer", "sgd:lr=0.1"],
}


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_mode_trains_and_learns(run_train, mode: str, ranks: int) -> None:
    run = run_train(ranks, *MODES[mode], "--epochs", "3", "--batch", "8")
    assert run.rc == 0, run.err
    h = run.history
    assert h["stopped_reason"] == "completed" and h["epochs_done"] == 3
    assert [e["epoch"] for e in h["history"]] == [1, 2, 3]
    # every training sample is seen exactly once per epoch, across all workers
    assert all(e["samples"] == 96 for e in h["history"]), [e["samples"] for e in h["history"]]
    assert h["history"][-1]["val_loss"] < h["history"][0]["val_loss"] * 1.05
    assert 0.0 <= h["final"]["val_accuracy"] <= 1.0
    assert (run.out_dir / "model.pt").is_file()
    assert h["n_workers"] == ranks - 1


def _reference_model(seed: int = 0) -> torch.nn.Module:
    source = load_model_source(str(__import__("pathlib").Path(__file__).parent / "models" / "tiny.py"))
    torch.manual_seed(seed)
    return source.build()


def _final_weights(run) -> np.ndarray:
    model = torch.load(run.out_dir / "model.pt", weights_only=False)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def _flat(model: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def test_synchronous_equals_sgd_on_the_joint_batch(run_train, blobs) -> None:
    """2 workers, mean of their SGD deltas == one SGD step on both batches together (sample-weighted)."""
    lr, epochs, batch = 0.1, 2, 7  # 96 samples / 2 workers = 48 each: 6 batches of 7 + one of 6
    run = run_train(3, "--mode", "downpour", "--synchronous", "--worker-optimizer", f"sgd:lr={lr}",
                    "--optimizer", "sgd:lr=1", "--epochs", str(epochs), "--batch", str(batch))
    assert run.rc == 0, run.err
    model = _reference_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    data = H5Dataset(read_list_file(blobs["train"]))
    loaders = [ShardedLoader(data, None, 2, w, batch, seed=0) for w in range(2)]
    for epoch in range(epochs):
        plans = [ld.batch_indices(epoch) for ld in loaders]
        assert len(plans[0]) == len(plans[1])
        for parts in zip(*plans):
            x, y = data.read(np.concatenate(parts))
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
            loss.backward()
            opt.step()
    np.testing.assert_allclose(_final_weights(run), _flat(model), rtol=1e-4, atol=1e-5)


def test_downpour_one_worker_equals_sequential_training(run_train, blobs) -> None:
    lr, epochs, batch = 0.05, 2, 10
    run = run_train(2, "--mode", "downpour", "--sync-every", "1", "--worker-optimizer",
                    f"sgd:lr={lr},momentum=0.9", "--optimizer", "sgd:lr=1", "--epochs", str(epochs),
                    "--batch", str(batch))
    assert run.rc == 0, run.err
    model = _reference_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    data = H5Dataset(read_list_file(blobs["train"]))
    loader = ShardedLoader(data, None, 1, 0, batch, seed=0)
    for epoch in range(epochs):
        for x, y in loader.epoch(epoch):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
            opt.step()
    np.testing.assert_allclose(_final_weights(run), _flat(model), rtol=1e-4, atol=1e-5)


def test_relaunch_with_n_runs_under_mpirun(run_train) -> None:
    run = run_train(3, "--mode", "gem", "--epochs", "1", "--batch", "16", launcher="-n")
    assert run.rc == 0, run.err
    assert run.history["n_workers"] == 2

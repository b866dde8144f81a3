"""A training script of your own, as ``nnlo submit ... script examples/train_script.py --lr 0.01`` runs it on
every rank of each job of a chain (or ``mpirun -np 3 python examples/train_script.py`` runs it once).

It builds its data in code (an :class:`nnlo.ArraySource` over the digits lists' HDF5 files, which
``python examples/make_digits.py`` writes) and its model from ``examples/digits_torch.py``; it says nothing of
checkpoints or deadlines: inside a submitted job ``nnlo.train`` writes into the run folder, stops at the job's
deadline with a complete checkpoint (exit 75) and continues from it in the next job.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import h5py
import numpy as np

import nnlo

HERE = Path(__file__).resolve().parent


def arrays(list_file: Path) -> nnlo.ArraySource:
    """The samples of every HDF5 file a list names, in one in-memory source."""
    xs, ys = [], []
    for name in list_file.read_text().split():
        with h5py.File(list_file.parent / name, "r") as f:  # a relative name is read beside its list
            xs.append(np.asarray(f["features"], dtype="float32"))
            ys.append(np.asarray(f["labels"]))
    return nnlo.ArraySource(np.concatenate(xs), np.concatenate(ys))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lr", type=float, default=0.05, help="the workers' learning rate")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--data", type=Path, default=HERE / "data" / "digits")
    args = parser.parse_args()
    result = nnlo.train(model=HERE / "digits_torch.py", data=arrays(args.data / "train.list"),
                        val_data=arrays(args.data / "val.list"), worker_optimizer=f"sgd:lr={args.lr},momentum=0.9",
                        epochs=args.epochs, batch=64, checkpoint_interval=1, trial_name=f"digits-lr{args.lr:g}")
    if result.is_master:
        print(f"done: {len(result.history)} epochs, val_loss {result.final.get('val_loss')}; in {result.run_dir}")


if __name__ == "__main__":
    main()

"""A training loop of your own in a checkpoint-restart chain (no nnlo training inside), which stops when the
batch system warns that the walltime is near:

    nnlo submit --cluster local -t 10m script examples/own_loop.py --steps 200000

Each job continues from the state the last one saved. ``nnlo.stop_requested()`` answers True once the job's
warning signal arrived (or ``nnlo preempt RUN`` sent it, or the deadline is seconds away): the loop saves its
state, notes the save with ``nnlo.checkpointed`` and exits 75, and the chain's next job goes on from there.
Run by hand (``python examples/own_loop.py``) it trains to the end in the current folder.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import nnlo


def save(path: Path, w: np.ndarray, step: int) -> None:
    """The state, written whole before it replaces the last (a kill mid-write leaves the old one), and noted:
    the chain goes on after a job only when it saved something."""
    np.savez(path.with_suffix(".tmp.npz"), w=w, step=step)
    path.with_suffix(".tmp.npz").replace(path)
    nnlo.checkpointed(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--save-every", type=int, default=50000, help="steps between saves")
    args = parser.parse_args()

    rng = np.random.default_rng(0)  # the same least-squares problem in every job
    x = rng.normal(size=(512, 16))
    y = x @ rng.normal(size=16) + 0.01 * rng.normal(size=512)

    saved = Path(nnlo.run_dir() or ".") / "own-loop-state.npz"
    w, step = np.zeros(16), 0
    if saved.exists():  # a later job of the chain: go on where the last one stopped
        with np.load(saved) as state:
            w, step = state["w"], int(state["step"])

    while step < args.steps:
        if nnlo.stop_requested():  # the walltime is near: save, say so, ask for the next job
            save(saved, w, step)
            return nnlo.EXIT_RESUMABLE
        w = w - args.lr * x.T @ (x @ w - y) / len(y)
        step += 1
        if step % args.save_every == 0:  # a job killed later still leaves the chain this much
            save(saved, w, step)

    save(saved, w, step)
    print(f"{step} steps, loss {float(np.mean((x @ w - y) ** 2)):.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

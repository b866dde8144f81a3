"""A rank's random streams, kept in the checkpoint so that a restored training continues the same curve.

What a training rank draws from: Python's ``random``, NumPy's global generator, and its framework's generators
through the backend (:meth:`~nnlo.backends.base.Backend.rng_state`: torch's CPU generator and its device's,
Keras's seed generators): dropout, noise layers, anything random in the user's model or data. The data order is
no stream: each epoch's order is a pure function of ``(seed, epoch)`` (:func:`nnlo.data.sampling.epoch_order`)
and the position ``(epoch, batch)`` is in the checkpoint.

Every rank's streams are its own: the driver seeds each rank with the seed and its rank, so two replicas never
drop the same units. A restore must therefore give every rank back *its* streams, as they were at the step the
checkpoint holds. Ranks that write no part of their own - an all-reduce run's replicas (rank 0 writes the one
part) and the members of an all-reduce worker group (the leader writes the group's part) - gather theirs to
the writer (:func:`gather`), which keeps them as a list in rank order; each rank takes its own entry back
(:func:`restore`). A part written by one rank (a master, a worker, a solo rank) holds that rank's streams.

Without this, a restored rank kept the streams it was seeded with at start-up: it replayed the first epochs'
dropout masks, so its curve left the straight run's at the first epoch after the restore (a straight run
that writes checkpoints is unchanged: capturing a stream does not advance it).
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np

from nnlo.backends.base import Backend

#: one rank's streams, as a checkpoint part keeps them (picklable values)
Streams = dict[str, Any]


def capture(backend: Backend) -> Streams:
    """This process's streams now (drawing nothing from them)."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "backend": backend.rng_state()}


def gather(comm: Any, backend: Backend, watchdog: Any, root: int = 0) -> list[Streams] | None:
    """Collective over ``comm``: every rank's streams, in rank order, on ``root`` (None on the others)."""
    with watchdog.waiting("gathering the ranks' random streams for the checkpoint"):
        return comm.gather(capture(backend), root=root)


def restore(saved: Streams | list[Streams] | None, backend: Backend, index: int = 0) -> bool:
    """Set this process's streams to the ones ``saved`` holds for the rank at ``index``: ``saved`` is one rank's
    (a part of one writer: the rank at index 0) or every rank's in order (:func:`gather`). False when it holds
    none for that rank - a checkpoint of another number of ranks, or written before it kept them: the rank's
    streams stay as seeded."""
    mine = saved[index] if isinstance(saved, list) and 0 <= index < len(saved) else \
        saved if isinstance(saved, dict) and index == 0 else None
    if not mine:
        return False
    if "numpy" in mine:
        np.random.set_state(mine["numpy"])
    if "python" in mine:
        random.setstate(mine["python"])
    if mine.get("backend"):
        backend.set_rng_state(mine["backend"])
    return True

"""The mpi4py engine: one in-place ``Allreduce`` on the whole flat buffer per step, or non-blocking
``Iallreduce`` calls on its buckets, started during backward (:mod:`nnlo.allreduce.bucketed`).

The default on CPUs: measured on 2 ranks of one node (pip MPICH), a 40 MB float32 sum takes ~24 ms,
against ~31 ms through torch.distributed (gloo) and ~50 ms through Horovod's MPI path (see
``docs/hierarchies.md``). Always available wherever nnlo runs.

**Progress.** MPICH (like most MPI libraries without an asynchronous progress thread) moves a non-blocking
collective forward only while some MPI call runs on the rank. A large bucket's ``Iallreduce`` is a schedule of
several rounds, and between two gradient hooks backward may compute for tens of milliseconds (one large layer)
without calling MPI, so without help most of the sum happens in the final wait, after backward. Two ways to
drive it, chosen by ``progress``:

* ``"hooks"``: every gradient hook that starts no bucket tests the pending requests (cheap, but only as often
  as hooks fire: a few times per step for a model of a few large layers);
* ``"thread"`` (the default where the library allows ``MPI_THREAD_MULTIPLE``): while a step's buckets are in
  flight, a daemon thread pokes the library's progress engine (``Iprobe`` on a private communicator, never
  the pending requests themselves, which belong to the training thread) every :data:`POKE_S` seconds; torch's
  backward runs without the GIL, so the pokes land in the middle of a layer's backward.

``bench/run.sh allreduce --progress hooks thread`` measures both, side by side.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from nnlo.allreduce.base import Engine, check_buffer

PROGRESS = ("thread", "hooks")
#: seconds between two pokes of the progress thread: short against a bucket's rounds (~ms for 4 MB), long
#: against one ``Iprobe`` (~1 us), so the thread costs about a percent of a core while buckets are in flight
POKE_S = 1e-4


class MpiEngine(Engine):
    name = "mpi"

    def __init__(self, comm: Any, progress: str = "thread") -> None:
        from mpi4py import MPI

        if progress not in PROGRESS:
            raise ValueError(f"progress must be one of {', '.join(PROGRESS)}, got {progress!r}")
        super().__init__(comm.Get_size(), comm.Get_rank())
        self._MPI = MPI
        self.comm = comm
        threads_ok = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self.progress_mode = progress if (progress == "hooks" or threads_ok) else "hooks"
        self._poker: _Poker | None = None
        if self.progress_mode == "thread" and self.size > 1:
            self._poker = _Poker(comm)

    def allreduce_sum(self, buf: np.ndarray) -> None:
        check_buffer(buf)
        if self.size > 1:
            self.comm.Allreduce(self._MPI.IN_PLACE, [buf, self._MPI.FLOAT], op=self._MPI.SUM)

    def broadcast(self, buf: np.ndarray, root: int = 0) -> None:
        check_buffer(buf)
        if self.size > 1:
            self.comm.Bcast([buf, self._MPI.FLOAT], root=root)

    def iallreduce_sum(self, buf: np.ndarray, key: int = 0) -> Any:
        check_buffer(buf)
        if self.size == 1:
            return _NoWait
        request = self.comm.Iallreduce(self._MPI.IN_PLACE, [buf, self._MPI.FLOAT], op=self._MPI.SUM)
        if self._poker is not None:
            self._poker.busy()
        return request

    def wait_all(self, pending: list[Any]) -> None:
        requests = [p for p in pending if p is not _NoWait]
        try:
            if requests:
                self._MPI.Request.Waitall(requests)
        finally:
            if self._poker is not None:
                self._poker.idle()

    def progress(self, pending: list[Any]) -> None:
        if pending and self.size > 1 and self._poker is None:
            self._MPI.Request.Testall(pending)  # MPICH moves non-blocking collectives only inside calls

    def close(self) -> None:
        if self._poker is not None:
            self._poker.close()
            self._poker = None

    def describe(self) -> str:
        return f"{super().describe()}, progress by {self.progress_mode}"


class _Poker:
    """A daemon thread that enters MPI's progress engine while the training thread has collectives in flight."""

    def __init__(self, comm: Any) -> None:
        self._comm = comm.Dup()  # its own: an Iprobe here never matches the training's messages
        self._active = threading.Event()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="nnlo-mpi-progress", daemon=True)
        self._thread.start()

    def busy(self) -> None:
        self._active.set()

    def idle(self) -> None:
        self._active.clear()

    def _run(self) -> None:
        probe = self._comm.Iprobe
        while True:
            self._active.wait()
            if self._closing:
                return
            while self._active.is_set():
                probe()
                time.sleep(POKE_S)

    def close(self) -> None:
        self._closing = True
        self._active.set()
        self._thread.join(timeout=5)
        self._comm.Free()


class _NoWait:
    @staticmethod
    def wait() -> None:
        return None

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

* ``"hooks"`` (the default): every gradient hook that starts no bucket tests the pending requests (cheap, but
  only as often as hooks fire: a few times per step for a model of a few large layers);
* ``"thread"`` (where the library allows ``MPI_THREAD_MULTIPLE``): while a step's buckets are in
  flight, a daemon thread pokes the library's progress engine (``Iprobe`` on a private communicator, never
  the pending requests themselves, which belong to the training thread) every :data:`POKE_S` seconds; torch's
  backward runs without the GIL, so the pokes land in the middle of a layer's backward.

``bench/run.sh allreduce --progress hooks thread`` measures both, side by side.

**CUDA-aware MPI.** When the replicas compute on GPUs and the MPI library says it handles device memory
(:func:`nnlo.device.cuda_aware_mpi`, asked at run time, never assumed), the step buffer lives on the GPU and MPI
sums it there; the engine waits for the GPU's queued work before handing a buffer to MPI. Otherwise the
buffer is host memory.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from nnlo.allreduce import flat
from nnlo.allreduce.base import Engine
from nnlo.device import cuda_aware_mpi

PROGRESS = ("thread", "hooks")
#: the default way to drive progress (the bench measures every one of PROGRESS beside it). Two runs at load
#: 0-2.5 on 2 CPU cores (docs/performance.md, issue 29 rows 1-2): the hooks were as fast as the thread or
#: faster at 1 M, 10 M and 50 M parameters (5 of 6 points, the sixth a tie), so the hooks drive it
DEFAULT_PROGRESS = "hooks"
#: seconds between two pokes of the progress thread: about one round of a bucket's all-reduce (a few MB copied
#: through shared memory, ~1 ms), long against one ``Iprobe`` (~1 us): the thread costs a fraction of a percent
#: of a core. On this project's 2 shared cores (load 11-14, one run each) 0.1 ms pokes made the 50 M step 26 %
#: slower than progress from the hooks, 1 ms pokes 3 %: there the thread competes with backward for the core
POKE_S = 1e-3


class MpiEngine(Engine):
    name = "mpi"

    def __init__(self, comm: Any, progress: str = DEFAULT_PROGRESS, device: str = "cpu") -> None:
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        if progress not in PROGRESS:
            raise ValueError(f"progress must be one of {', '.join(PROGRESS)}, got {progress!r}")
        super().__init__(comm.Get_size(), comm.Get_rank())
        self._MPI = MPI
        self.comm = comm
        # every rank, or none, hands MPI device memory
        if str(device).startswith("cuda") and all(comm.allgather(cuda_aware_mpi())):
            self.device = str(device)
        threads_ok = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self.progress_mode = progress if (progress == "hooks" or threads_ok) else "hooks"
        self._poker: _Poker | None = None
        if self.progress_mode == "thread" and self.size > 1:
            self._poker = _Poker(comm)

    def zeros(self, n: int) -> Any:
        if self.device == "cpu":
            return np.zeros(n, dtype=np.float32)
        import torch  # lazy: torch takes seconds to import

        return torch.zeros(n, dtype=torch.float32, device=self.device)

    def _ready(self, buf: Any) -> None:
        """Refuse anything but a flat float32 vector; a device buffer's producers must have finished before MPI
        reads it (MPI does not follow CUDA streams)."""
        flat.check_buffer(buf)
        if flat.on_device(buf) and buf.is_cuda:
            import torch  # lazy: torch takes seconds to import

            torch.cuda.current_stream(buf.device).synchronize()
        elif flat.on_device(buf):
            raise TypeError("the mpi engine sums host arrays (or CUDA tensors with a CUDA-aware MPI)")

    def allreduce_sum(self, buf: Any) -> None:
        self._ready(buf)
        if self.size > 1:
            self.comm.Allreduce(self._MPI.IN_PLACE, [buf, self._MPI.FLOAT], op=self._MPI.SUM)

    def broadcast(self, buf: np.ndarray, root: int = 0) -> None:
        self._ready(buf)
        if self.size > 1:
            self.comm.Bcast([buf, self._MPI.FLOAT], root=root)

    def iallreduce_sum(self, buf: Any, key: int = 0) -> Any:
        self._ready(buf)
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
        where = f", CUDA-aware on {self.device}" if self.device != "cpu" else ""
        return f"{super().describe()}, progress by {self.progress_mode}{where}"


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
            while self._active.is_set() and not self._closing:
                probe()
                time.sleep(POKE_S)

    def close(self) -> None:
        self._closing = True
        self._active.set()
        self._thread.join(timeout=5)
        if not self._thread.is_alive():  # never free a communicator a probe may still be using
            self._comm.Free()


class _NoWait:
    @staticmethod
    def wait() -> None:
        return None

"""The torch.distributed engine: a private process group per all-reduce group, NCCL when every rank has a GPU.

Set up from the MPI world, with nothing for the user to set (no ``MASTER_ADDR``, no launcher flag): the
group's leader (rank 0 of the group's communicator) opens a ``TCPStore`` on a free port the system picks, and
sends its host and that port to the others by an MPI broadcast on the same communicator; every rank then
builds its own process-group object over that store (``ProcessGroupNCCL`` or ``ProcessGroupGloo``, not the
process-wide default group: an all-reduce worker group, a search block's trial and a benchmark's DDP each get
their own, side by side). :meth:`TorchEngine.close` shuts it down and drops the store.

Which library: NCCL when *every* rank of the group computes on a GPU of its own (NCCL refuses two ranks on one
GPU: ranks sharing GPUs, ``--gpus-per-worker 0.5``, sum through gloo) and torch was built with NCCL (agreed by
one ``allgather``, so the ranks never disagree), gloo otherwise. With NCCL the step buffers live on the GPU
(:meth:`TorchEngine.zeros` returns a CUDA tensor): backward's gradient hooks write into it, each bucket's
``all_reduce`` is queued on NCCL's stream as soon as the bucket is complete, the optimizer reads the sum in
place, and only the step's four trailing scalars come back to the host. With gloo the buffers are numpy arrays
wrapped without a copy (``torch.from_numpy``); gloo runs the collective on its own threads, so the buckets'
all-reduces overlap backward without any help. ``device_buffers=True`` forces tensor buffers on the CPU too:
the NCCL code path run by gloo, which is how the tests check it on machines without a GPU.
"""
from __future__ import annotations

import datetime
import logging
import socket
from typing import Any

import numpy as np

from nnlo.allreduce import flat
from nnlo.allreduce.base import DONE, Engine
from nnlo.device import physical_gpu
from nnlo.errors import ConfigError

log = logging.getLogger("nnlo.allreduce")

#: how long the rendezvous and one collective may wait for the slowest rank (torch's own default); the
#: training's watchdog ends a job whose peer died long before this
TIMEOUT_S = 1800.0


def importable() -> bool:
    """True when torch.distributed is there (every torch wheel on Linux has it; some macOS builds do not)."""
    try:
        import torch.distributed as dist  # lazy: torch takes seconds to import
    except ImportError:
        return False
    return bool(dist.is_available())


def nccl_usable(device: str) -> bool:
    """Whether this rank can join an NCCL group: it computes on a CUDA device and torch has NCCL."""
    if not str(device).startswith("cuda"):
        return False
    try:
        import torch  # lazy: torch takes seconds to import
        import torch.distributed as dist  # lazy: torch takes seconds to import
    except ImportError:
        return False
    return bool(torch.cuda.is_available() and dist.is_available() and dist.is_nccl_available())


def leader_host(comm: Any) -> str:
    """The address the other ranks reach the leader at: loopback when the whole group shares the leader's node
    (no name resolution needed on a laptop), else the leader's host name. Collective over ``comm``."""
    from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        together = node.Get_size() == comm.Get_size()
    finally:
        node.Free()
    return "127.0.0.1" if together else socket.gethostname()


def rendezvous(comm: Any, timeout: datetime.timedelta) -> Any:
    """A ``TCPStore`` shared by the ranks of ``comm`` (collective): the leader opens it on a free port and
    broadcasts ``(host, port)``, or its error, so a failure there is raised on every rank, not waited out."""
    import torch.distributed as dist  # lazy: torch takes seconds to import

    host = leader_host(comm)
    size, leader = comm.Get_size(), comm.Get_rank() == 0
    store: Any = None
    answer: tuple[str, int] | str = ""
    if leader:
        try:
            store = dist.TCPStore(host, 0, size, True, timeout=timeout, wait_for_workers=False)
            answer = (host, int(store.port))
        except Exception as e:  # noqa: BLE001 - every rank raises it below
            answer = f"{type(e).__name__}: {e}"
    answer = comm.bcast(answer, root=0)
    if isinstance(answer, str):
        raise ConfigError(f"--allreduce-engine torch: the group's leader could not open its rendezvous store "
                          f"({answer}); use --allreduce-engine mpi")
    if not leader:
        store = dist.TCPStore(answer[0], answer[1], size, False, timeout=timeout)
    return store


class TorchEngine(Engine):
    name = "torch"

    def __init__(self, comm: Any, device: str = "cpu", device_buffers: bool | None = None,
                 timeout_s: float = TIMEOUT_S) -> None:
        try:
            import torch  # lazy: torch takes seconds to import
            import torch.distributed as dist  # lazy: torch takes seconds to import
        except ImportError as e:
            raise ConfigError(f"--allreduce-engine torch: torch.distributed does not import ({e}); "
                              f"use --allreduce-engine mpi") from None
        super().__init__(comm.Get_size(), comm.Get_rank())
        self._torch, self._dist = torch, dist

        gpus = comm.allgather(physical_gpu(device) if nccl_usable(device) else None)  # one answer for the group
        nccl = None not in gpus and len(set(gpus)) == len(gpus)
        if None not in gpus and not nccl and self.rank == 0:
            log.info("torch engine: ranks share GPUs, which NCCL refuses; summing through gloo")
        self.backend = "nccl" if nccl else "gloo"
        if nccl:
            self.device = str(torch.device(device))
            torch.cuda.set_device(torch.device(device))
        self.device_buffers = nccl if device_buffers is None else bool(device_buffers)
        timeout = datetime.timedelta(seconds=timeout_s)
        self._store = rendezvous(comm, timeout)
        if nccl:
            options = dist.ProcessGroupNCCL.Options()
            options.is_high_priority_stream = False
            options._timeout = timeout
            self._pg: Any = dist.ProcessGroupNCCL(self._store, self.rank, self.size, options)
        else:
            self._pg = dist.ProcessGroupGloo(self._store, self.rank, self.size, timeout)

    # -- buffers -------------------------------------------------------------------------------------
    def zeros(self, n: int) -> Any:
        if not self.device_buffers:
            return np.zeros(n, dtype=np.float32)
        return self._torch.zeros(n, dtype=self._torch.float32, device=self.device)

    def _tensor(self, buf: Any) -> tuple[Any, bool]:
        """(a tensor the process group can sum in place, whether it is a staged copy of a host array)."""
        flat.check_buffer(buf)
        if flat.on_device(buf):
            return buf, False
        t = self._torch.from_numpy(buf)  # no copy
        if self.backend == "nccl":  # a host array on the NCCL path (weights at start-up): stage it
            return t.to(self.device), True
        return t, False

    @staticmethod
    def _unstage(buf: np.ndarray, t: Any) -> None:
        np.copyto(buf, t.cpu().numpy())

    # -- collectives ---------------------------------------------------------------------------------
    def allreduce_sum(self, buf: Any) -> None:
        t, staged = self._tensor(buf)
        if self.size > 1:
            self._pg.allreduce([t]).wait()
        if staged:
            self._unstage(buf, t)

    def iallreduce_sum(self, buf: Any, key: int = 0) -> Any:
        t, staged = self._tensor(buf)
        if self.size == 1:
            return DONE
        return _TorchPending(self._pg.allreduce([t]), buf, t, staged)

    def broadcast(self, buf: Any, root: int = 0) -> None:
        t, staged = self._tensor(buf)
        if self.size > 1:
            options = self._dist.BroadcastOptions()
            options.rootRank = root
            self._pg.broadcast([t], options).wait()
        if staged:
            self._unstage(buf, t)

    def close(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None and hasattr(pg, "shutdown"):
            try:
                pg.shutdown()  # NCCL: destroys its communicators now, not at interpreter exit
            except RuntimeError as e:  # already torn down by an abort
                log.debug("process group shutdown: %s", e)
        self._store = None

    def describe(self) -> str:
        where = f", step buffers on {self.device if self.backend == 'nccl' else 'cpu (tensors)'}" \
            if self.device_buffers else ""
        return f"torch.distributed {self.backend} over {self.size} rank(s){where}"


class _TorchPending:
    """A started all-reduce: the process group's work, and the host array to copy a staged sum back into."""

    def __init__(self, work: Any, buf: Any, tensor: Any, staged: bool) -> None:
        self._work, self._buf, self._tensor, self._staged = work, buf, tensor, staged

    def wait(self) -> None:
        self._work.wait()  # NCCL: the current stream waits for the sum; the host goes on
        if self._staged:
            TorchEngine._unstage(self._buf, self._tensor)


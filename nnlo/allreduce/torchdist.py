"""The torch.distributed engine: a private process group per all-reduce group, NCCL when every rank has a GPU.

Set up from the MPI world, with nothing for the user to set (no launcher flag): the group's leader (rank 0 of
the group's communicator) opens a ``TCPStore`` and sends its host and port to the others by an MPI broadcast
on the same communicator. Where (:func:`leader_address`): a group on one node meets on loopback; the group
led by the world's rank 0 meets at the job's ``MASTER_ADDR``/``MASTER_PORT`` when the job sets them (the
sites' set-up lines do: Frontier ``$(hostname -i)``, Aurora ``<host>.hsn.cm.aurora.alcf.anl.gov``; the
batch shell and the world's rank 0 share the first node), every other group at its leader's host name on a
free port the system picks; every rank then
builds its own process-group object over that store (``ProcessGroupNCCL`` or ``ProcessGroupGloo``, not the
process-wide default group: an all-reduce worker group, a search block's trial and a benchmark's DDP each get
their own, side by side). :meth:`TorchEngine.close` shuts it down and drops the store.

Which library (:func:`backend_for`): NCCL (RCCL in ROCm builds, which answer as ``cuda``) for CUDA and ROCm
devices, oneCCL's ``xccl`` for Intel ``xpu`` devices (Aurora's ``frameworks`` from 2025.3.1; unverified here:
no Intel GPU in CI), when *every* rank of the group computes on a GPU of its own (NCCL refuses two ranks on one
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
import os
import socket
from collections.abc import Mapping
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


#: the GPU collective library of each torch device type: NCCL (RCCL on ROCm) for ``cuda``, oneCCL for ``xpu``
GPU_BACKENDS = {"cuda": "nccl", "xpu": "xccl"}


def backend_for(device: str) -> str:
    """The process-group backend of a group whose every rank computes on its own ``device`` of this type:
    ``nccl`` for CUDA and ROCm (``cuda:N``), ``xccl`` for Intel (``xpu:N``), ``gloo`` on the CPU. Pure."""
    return GPU_BACKENDS.get(str(device).split(":", 1)[0], "gloo")


def nccl_usable(device: str) -> bool:
    """Whether this rank can join a GPU group (NCCL/RCCL on ``cuda``, xccl on ``xpu``): torch sees the device
    type and has its backend."""
    backend = backend_for(device)
    if backend == "gloo":
        return False
    try:
        import torch  # lazy: torch takes seconds to import
        import torch.distributed as dist  # lazy: torch takes seconds to import
    except ImportError:
        return False
    if not dist.is_available():
        return False
    if backend == "nccl":
        return bool(torch.cuda.is_available() and dist.is_nccl_available())
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available() and hasattr(dist, "ProcessGroupXCCL"))


def leader_address(together: bool, world_leader: bool, hostname: str,
                   env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """(host, port) the group's leader opens its store at (port 0: a free one). Loopback for a group on one
    node; the job's ``MASTER_ADDR``/``MASTER_PORT`` for the group the world's rank 0 leads, when set; else
    the leader's host name. Pure; a ``MASTER_PORT`` that is not a port number is a one-line error."""
    env = os.environ if env is None else env
    if together:
        return "127.0.0.1", 0
    addr = env.get("MASTER_ADDR", "").strip()
    if world_leader and addr:
        text = env.get("MASTER_PORT", "").strip()
        if text and not (text.isdigit() and 0 < int(text) < 65536):
            raise ConfigError(f"MASTER_PORT={text!r} is not a port number; set it to 1-65535 in the job's "
                              f"set-up, or unset it (a free port is then picked)")
        return addr, int(text) if text else 0
    return hostname, 0


def leader_host(comm: Any) -> tuple[str, int]:
    """The address and port the other ranks reach the leader at (:func:`leader_address`). Collective over
    ``comm``."""
    from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        together = node.Get_size() == comm.Get_size()
    finally:
        node.Free()
    return leader_address(together, MPI.COMM_WORLD.Get_rank() == 0, socket.gethostname())


def rendezvous(comm: Any, timeout: datetime.timedelta) -> Any:
    """A ``TCPStore`` shared by the ranks of ``comm`` (collective): the leader opens it on a free port and
    broadcasts ``(host, port)``, or its error, so a failure there is raised on every rank, not waited out."""
    import torch.distributed as dist  # lazy: torch takes seconds to import

    size, leader = comm.Get_size(), comm.Get_rank() == 0
    store: Any = None
    answer: tuple[str, int] | str = ""
    try:
        address: tuple[str, int] | str = leader_host(comm)  # collective: every rank takes part
    except ConfigError as e:  # a malformed MASTER_PORT: said on every rank
        address = str(e)
    if leader and isinstance(address, str):
        answer = address
    elif leader and isinstance(address, tuple):
        try:
            host, port = address
            store = dist.TCPStore(host, port, size, True, timeout=timeout, wait_for_workers=False)
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

        # one answer for the group: every rank on a GPU of its own, of one kind
        gpus = comm.allgather((physical_gpu(device), backend_for(device)) if nccl_usable(device) else None)
        kinds = {g[1] for g in gpus if g is not None}
        nccl = None not in gpus and len(kinds) == 1 and len({g[0] for g in gpus}) == len(gpus)
        if None not in gpus and not nccl and self.rank == 0:
            log.info("torch engine: ranks share GPUs, which NCCL/xccl refuse; summing through gloo")
        self.backend = kinds.pop() if nccl else "gloo"
        if nccl:
            self.device = str(torch.device(device))
            (torch.xpu if self.backend == "xccl" else torch.cuda).set_device(torch.device(device))
        self.device_buffers = nccl if device_buffers is None else bool(device_buffers)
        timeout = datetime.timedelta(seconds=timeout_s)
        self._store = rendezvous(comm, timeout)
        if self.backend == "xccl":
            xoptions = dist.ProcessGroupXCCL.Options()
            xoptions._timeout = timeout
            self._pg: Any = dist.ProcessGroupXCCL(self._store, self.rank, self.size, xoptions)
        elif nccl:
            options = dist.ProcessGroupNCCL.Options()
            options.is_high_priority_stream = False
            options._timeout = timeout
            self._pg = dist.ProcessGroupNCCL(self._store, self.rank, self.size, options)
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
        if self.backend != "gloo":  # a host array on the NCCL/xccl path (weights at start-up): stage it
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
        where = f", step buffers on {self.device if self.backend != 'gloo' else 'cpu (tensors)'}" \
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


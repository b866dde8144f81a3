"""The mpi4py engine: one in-place ``Allreduce`` on the whole flat buffer per step, or non-blocking
``Iallreduce`` calls on its buckets, started during backward (:mod:`nnlo.allreduce.bucketed`).

The default on CPUs: measured on 2 ranks of one node (pip MPICH), a 40 MB float32 sum takes ~24 ms,
against ~31 ms through torch.distributed (gloo) and ~50 ms through Horovod's MPI path (see
``docs/hierarchies.md``). Always available wherever nnlo runs.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nnlo.allreduce.base import Engine, check_buffer


class MpiEngine(Engine):
    name = "mpi"

    def __init__(self, comm: Any) -> None:
        from mpi4py import MPI

        super().__init__(comm.Get_size(), comm.Get_rank())
        self._MPI = MPI
        self.comm = comm

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
        return self.comm.Iallreduce(self._MPI.IN_PLACE, [buf, self._MPI.FLOAT], op=self._MPI.SUM)

    def wait_all(self, pending: list[Any]) -> None:
        requests = [p for p in pending if p is not _NoWait]
        if requests:
            self._MPI.Request.Waitall(requests)

    def progress(self, pending: list[Any]) -> None:
        if pending and self.size > 1:
            self._MPI.Request.Testall(pending)  # MPICH moves non-blocking collectives only inside calls


class _NoWait:
    @staticmethod
    def wait() -> None:
        return None

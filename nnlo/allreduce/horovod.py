"""The Horovod engine (PyTorch flavour): for GPU clusters, where Horovod's NCCL path is the fast one.

Horovod is optional (``scripts/install-horovod.sh`` builds it). It is initialised on the training's own
communicator (``hvd.init(comm=...)``), so it also works for one training group inside an optimization
block. The numpy buffer is wrapped by ``torch.from_numpy`` (no copy) and summed in place.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nnlo.allreduce.base import Engine, check_buffer
from nnlo.errors import ConfigError


def importable() -> bool:
    """True when ``horovod.torch`` imports (without initialising it)."""
    try:
        import horovod.torch  # noqa: F401  # lazy: the horovod extra
    except Exception:  # noqa: BLE001 - ImportError, or a build against another torch/MPI
        return False
    return True


def nccl_built() -> bool:
    try:
        import horovod.torch as hvd  # lazy: the horovod extra

        return bool(hvd.nccl_built())
    except Exception:  # noqa: BLE001
        return False


class HorovodEngine(Engine):
    name = "horovod"

    def __init__(self, comm: Any) -> None:
        try:
            import horovod.torch as hvd  # lazy: the horovod extra
            import torch  # lazy: torch takes seconds to import
        except Exception as e:  # noqa: BLE001
            raise ConfigError(
                f"--allreduce-engine horovod: horovod.torch does not import ({type(e).__name__}: {e}); "
                f"run scripts/install-horovod.sh or use --allreduce-engine mpi"
            ) from None
        if not hvd.mpi_built():
            raise ConfigError("--allreduce-engine horovod: this Horovod was built without MPI; rebuild it "
                              "with scripts/install-horovod.sh or use --allreduce-engine mpi")
        super().__init__(comm.Get_size(), comm.Get_rank())
        self._hvd, self._torch = hvd, torch
        self._comm = comm.Dup()  # Horovod keeps using it: give it its own
        hvd.init(comm=self._comm)
        if hvd.size() != self.size or hvd.rank() != self.rank:
            raise ConfigError(f"Horovod sees rank {hvd.rank()} of {hvd.size()}, MPI rank {self.rank} of "
                              f"{self.size}; Horovod must be built against the same MPI (scripts/install-horovod.sh)")

    def allreduce_sum(self, buf: np.ndarray) -> None:
        check_buffer(buf)
        t = self._torch.from_numpy(buf)
        self._hvd.allreduce_(t, op=self._hvd.Sum, name=f"nnlo.sum.{buf.size}")

    def iallreduce_sum(self, buf: np.ndarray, key: int = 0) -> Any:
        check_buffer(buf)
        t = self._torch.from_numpy(buf)
        handle = self._hvd.allreduce_async_(t, op=self._hvd.Sum, name=f"nnlo.bucket.{key}")
        return _HorovodPending(self._hvd, handle)

    def broadcast(self, buf: np.ndarray, root: int = 0) -> None:
        check_buffer(buf)
        t = self._torch.from_numpy(buf)
        self._hvd.broadcast_(t, root_rank=root, name=f"nnlo.bcast.{buf.size}")

    def close(self) -> None:
        self._hvd.shutdown()
        self._comm.Free()


class _HorovodPending:
    def __init__(self, hvd: Any, handle: Any) -> None:
        self._hvd, self._handle = hvd, handle

    def wait(self) -> None:
        self._hvd.synchronize(self._handle)

"""Which engine a training uses: ``--allreduce-engine auto|mpi|torch|horovod``.

The ``auto`` rule comes from measurements (``docs/hierarchies.md``, ``docs/performance.md``): on CPUs the plain
MPI all-reduce of one flat buffer is the fastest (40 MB on 2 ranks: mpi4py ~24 ms, torch gloo ~31 ms, Horovod
over MPI ~50 ms), so ``auto`` picks ``mpi``; when the replicas compute on GPUs, NCCL reduces in device memory
and saves the device-to-host copies, so ``auto`` picks ``torch`` (torch.distributed's NCCL, in every CUDA wheel
of torch), else Horovod if it was built with NCCL, else ``mpi``. Every rank must make the same choice: the rule
depends only on what is installed, the device kind and the framework, and the caller agrees on it collectively
(:func:`resolve_engine` is pure; the training broadcasts its leader's answer).
"""
from __future__ import annotations

from typing import Any

from nnlo.allreduce import horovod as _horovod
from nnlo.allreduce import torchdist as _torchdist
from nnlo.allreduce.base import Engine
from nnlo.allreduce.mpi import MpiEngine
from nnlo.config import ALLREDUCE_ENGINES as ENGINES
from nnlo.errors import ConfigError


def available_engines() -> list[str]:
    """Engines that can run here (``mpi`` always)."""
    return (["mpi"] + (["torch"] if _torchdist.importable() else [])
            + (["horovod"] if _horovod.importable() else []))


def resolve_engine(wanted: str, on_gpu: bool, framework: str = "torch") -> str:
    """The concrete engine for ``--allreduce-engine wanted`` (``auto`` resolved by the rule above) for replicas
    computing on GPUs (``on_gpu``) with models of ``framework`` (``torch`` or ``keras``: only torch models
    hand their gradients to a GPU-resident buffer)."""
    if wanted not in ENGINES:
        raise ConfigError(f"--allreduce-engine {wanted!r} is unknown; use one of {', '.join(ENGINES)}")
    if wanted == "horovod" and not _horovod.importable():
        raise ConfigError("--allreduce-engine horovod: horovod.torch does not import here; run "
                          "scripts/install-horovod.sh or use --allreduce-engine mpi")
    if wanted == "torch" and not _torchdist.importable():
        raise ConfigError("--allreduce-engine torch: torch.distributed is not available in this torch build; "
                          "use --allreduce-engine mpi")
    if wanted != "auto":
        return wanted
    if on_gpu and framework == "torch" and _torchdist.importable() and _torchdist.nccl_usable("cuda"):
        return "torch"
    if on_gpu and _horovod.importable() and _horovod.nccl_built():
        return "horovod"
    return "mpi"


def make_engine(name: str, comm: Any, device: str = "cpu") -> Engine:
    """Build engine ``name`` (already resolved) over the ranks of ``comm`` (collective) for replicas computing
    on ``device``."""
    if name == "mpi":
        return MpiEngine(comm, device=device)
    if name == "torch":
        return _torchdist.TorchEngine(comm, device)
    if name == "horovod":
        return _horovod.HorovodEngine(comm)
    raise ConfigError(f"--allreduce-engine {name!r} is not a concrete engine; use mpi, torch or horovod")

"""Which engine a training uses: ``--allreduce-engine auto|mpi|horovod``.

The ``auto`` rule comes from measurements (``docs/hierarchies.md``): on CPUs the plain MPI all-reduce of
one flat buffer is the fastest (40 MB on 2 ranks: mpi4py ~24 ms, torch gloo ~31 ms, Horovod over MPI
~50 ms), so ``auto`` picks ``mpi``; when the replicas compute on GPUs and Horovod was built with NCCL,
Horovod's NCCL all-reduce avoids the device-to-host copies and wins, so ``auto`` picks ``horovod`` there.
Every rank must make the same choice: the rule depends only on what is installed and on the device kind,
and the caller agrees on it collectively (:func:`resolve_engine` is pure; the training broadcasts rank 0's
answer).
"""
from __future__ import annotations

from typing import Any

from nnlo.allreduce import horovod as _horovod
from nnlo.allreduce.base import Engine
from nnlo.errors import ConfigError

ENGINES = ("auto", "mpi", "horovod")


def available_engines() -> list[str]:
    """Engines that can run here (``mpi`` always)."""
    return ["mpi"] + (["horovod"] if _horovod.importable() else [])


def resolve_engine(wanted: str, on_gpu: bool) -> str:
    """The concrete engine for ``--allreduce-engine wanted`` (``auto`` resolved by the rule above)."""
    if wanted not in ENGINES:
        raise ConfigError(f"--allreduce-engine {wanted!r} is unknown; use one of {', '.join(ENGINES)}")
    if wanted != "auto":
        if wanted == "horovod" and not _horovod.importable():
            raise ConfigError("--allreduce-engine horovod: horovod.torch does not import here; run "
                              "scripts/install-horovod.sh or use --allreduce-engine mpi")
        return wanted
    if on_gpu and _horovod.importable() and _horovod.nccl_built():
        return "horovod"
    return "mpi"


def make_engine(name: str, comm: Any) -> Engine:
    """Build engine ``name`` (already resolved) over the ranks of ``comm`` (collective)."""
    if name == "mpi":
        from nnlo.allreduce.mpi import MpiEngine

        return MpiEngine(comm)
    if name == "horovod":
        return _horovod.HorovodEngine(comm)
    raise ConfigError(f"--allreduce-engine {name!r} is not a concrete engine; use mpi or horovod")

"""All-reduce engines: sum one flat float32 buffer across the ranks of a communicator, in place.

The runtime's all-reduce paths (pure all-reduce mode, all-reduce worker groups under a master) call only
:class:`~nnlo.allreduce.base.Engine`; which library moves the bytes is chosen once per training by
:func:`~nnlo.allreduce.choose.make_engine` from ``--allreduce-engine auto|mpi|horovod``.
"""
from nnlo.allreduce.base import Engine
from nnlo.allreduce.choose import ENGINES, available_engines, make_engine, resolve_engine

__all__ = ["ENGINES", "Engine", "available_engines", "make_engine", "resolve_engine"]

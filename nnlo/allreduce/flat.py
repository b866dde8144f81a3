"""Step buffers: one flat float32 vector, in host memory (a numpy array) or in device memory (a torch tensor).

Host engines (``mpi``, ``horovod``, ``torch`` over gloo) sum numpy arrays; the ``torch`` engine over NCCL keeps
the step buffer on the GPU (:meth:`nnlo.allreduce.base.Engine.zeros`), so backward's gradients, the buckets and
the optimizer's step never leave the device. The data-parallel step (:mod:`nnlo.training.voted_step`) touches
its buffer only through these few operations, so it never branches on the kind. Reading the trailing scalars
of a device buffer is the step's one device-to-host copy (and its one synchronisation).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def on_device(buf: Any) -> bool:
    """True for a torch tensor (device memory, or a host tensor standing in for it), False for numpy."""
    return not isinstance(buf, np.ndarray)


def length(buf: Any) -> int:
    return int(buf.shape[0])


def check_host(buf: Any) -> None:
    """Collectives write into the caller's memory: refuse anything but a flat contiguous float32 array."""
    if (not isinstance(buf, np.ndarray) or buf.dtype != np.float32 or buf.ndim != 1
            or not buf.flags.c_contiguous):
        raise TypeError(f"all-reduce buffers are flat contiguous float32 arrays, got {type(buf).__name__} "
                        f"{getattr(buf, 'dtype', '?')} shape {tuple(getattr(buf, 'shape', ()))} "
                        f"(contiguous={getattr(getattr(buf, 'flags', None), 'c_contiguous', '?')})")


def check_buffer(buf: Any) -> None:
    """:func:`check_host`, or a flat contiguous float32 torch tensor (an engine that sums device memory)."""
    if isinstance(buf, np.ndarray):
        check_host(buf)
        return
    import torch  # lazy: torch takes seconds to import

    if not isinstance(buf, torch.Tensor) or buf.dtype != torch.float32 or buf.dim() != 1 or not buf.is_contiguous():
        raise TypeError(f"all-reduce buffers are flat contiguous float32 arrays or tensors, got "
                        f"{type(buf).__name__} {getattr(buf, 'dtype', '?')} shape {tuple(getattr(buf, 'shape', ()))}")


def fill(buf: Any, value: float) -> None:
    if isinstance(buf, np.ndarray):
        buf.fill(value)
    else:
        buf.fill_(value)


def put(buf: Any, start: int, values: Sequence[float]) -> None:
    """``buf[start:start + len(values)] = values`` (one host-to-device copy for a tensor)."""
    if isinstance(buf, np.ndarray):
        buf[start:start + len(values)] = values
        return
    import torch  # lazy: torch takes seconds to import

    buf[start:start + len(values)].copy_(torch.tensor(list(values), dtype=torch.float32))


def get(buf: Any, start: int, stop: int | None = None) -> list[float]:
    """``buf[start:stop]`` as Python floats (one device-to-host copy for a tensor)."""
    return [float(v) for v in buf[start:stop].tolist()]


def divide(buf: Any, divisor: float) -> None:
    """In place; float32 arithmetic for either kind."""
    if isinstance(buf, np.ndarray):
        buf /= np.float32(divisor)
    else:
        buf.div_(divisor)

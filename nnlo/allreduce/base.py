"""The engine interface: what a synchronous data-parallel step needs from a collective library.

Why one flat buffer: a model's gradients are packed into one contiguous float32 vector by the backend
(:meth:`nnlo.backends.base.Backend.compute_gradients`), so a step costs *one* collective call whatever the
number of tensors (per-tensor calls pay the latency once per layer). Extra scalars (sample count, loss sum,
a stop vote) ride at the end of the same buffer, so they cost nothing more.
"""
from __future__ import annotations

import abc
from typing import Any, Protocol

import numpy as np


class Pending(Protocol):
    """A started all-reduce: :meth:`wait` returns once the buffer holds the sum."""

    def wait(self) -> None: ...


class _Done:
    def wait(self) -> None:
        return None


DONE = _Done()


class Engine(abc.ABC):
    """Sums and broadcasts contiguous float32 buffers over a fixed set of ranks."""

    name: str = "base"

    def __init__(self, size: int, rank: int) -> None:
        self.size, self.rank = size, rank

    @abc.abstractmethod
    def allreduce_sum(self, buf: np.ndarray) -> None:
        """Replace ``buf`` (flat, contiguous float32) by its element-wise sum over all ranks."""

    def iallreduce_sum(self, buf: np.ndarray, key: int = 0) -> Pending:
        """Start summing ``buf`` (a contiguous slice of a flat float32 buffer) and return at once; the sum is
        there after ``.wait()``. Every rank must start the same buffers in the same order; ``key`` tells apart
        the buffers in flight at once (bucket numbers). Default: blocking."""
        self.allreduce_sum(buf)
        return DONE

    def wait_all(self, pending: list[Any]) -> None:
        """Wait for every all-reduce :meth:`iallreduce_sum` started."""
        for p in pending:
            p.wait()

    def progress(self, pending: list[Any]) -> None:
        """Let started all-reduces advance (libraries without a progress thread move only inside calls)."""

    @abc.abstractmethod
    def broadcast(self, buf: np.ndarray, root: int = 0) -> None:
        """Overwrite ``buf`` on every rank with ``root``'s ``buf``."""

    def close(self) -> None:
        """Release what the engine holds (communicators, library state)."""

    def describe(self) -> str:
        return f"{self.name} over {self.size} rank(s)"


def check_buffer(buf: np.ndarray) -> None:
    """Collectives write into the caller's memory: refuse anything but a flat contiguous float32 array."""
    if buf.dtype != np.float32 or buf.ndim != 1 or not buf.flags.c_contiguous:
        raise TypeError(f"all-reduce buffers are flat contiguous float32 arrays, got {buf.dtype} "
                        f"shape {buf.shape} (contiguous={buf.flags.c_contiguous})")

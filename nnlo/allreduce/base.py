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

from nnlo.allreduce.flat import check_host as check_buffer  # noqa: F401 - the host engines' check


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
    #: where :meth:`zeros` puts step buffers: "cpu" (numpy arrays) or a torch device such as "cuda:0" (tensors
    #: that stay on the GPU: the NCCL path); :mod:`nnlo.allreduce.flat` works on either
    device: str = "cpu"

    def __init__(self, size: int, rank: int) -> None:
        self.size, self.rank = size, rank

    def zeros(self, n: int) -> Any:
        """A zeroed flat float32 step buffer of ``n`` elements where this engine sums fastest (see ``device``)."""
        return np.zeros(n, dtype=np.float32)

    @abc.abstractmethod
    def allreduce_sum(self, buf: Any) -> None:
        """Replace ``buf`` (flat, contiguous float32; a numpy array, or a buffer from :meth:`zeros`) by its
        element-wise sum over all ranks."""

    def iallreduce_sum(self, buf: Any, key: int = 0) -> Pending:
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
        """Overwrite ``buf`` (a host array) on every rank with ``root``'s ``buf``."""

    def close(self) -> None:
        """Release what the engine holds (communicators, library state)."""

    def describe(self) -> str:
        return f"{self.name} over {self.size} rank(s)"

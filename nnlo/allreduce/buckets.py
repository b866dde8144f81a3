"""Gradient buckets: which contiguous slices of the flat gradient are all-reduced together, and in what order.

Pure (no MPI, no torch): :func:`assign_buckets` cuts the flat gradient (parameter ``i`` at offsets
``sum(sizes[:i])`` .. ``sum(sizes[:i+1])``) into contiguous buckets in *reverse* parameter order, because
backward produces the last layers' gradients first; :class:`BucketPlan` then says, as parameters report their
gradient ready (in whatever order backward delivers them), which buckets may be started now. Buckets are
always started in the same order (0, 1, 2, ...) on every rank, whatever the order the hooks fired in, so
the ranks' collective calls match one to one (MPI requires it).
"""
from __future__ import annotations

from dataclasses import dataclass

FLOAT_BYTES = 4


@dataclass(frozen=True)
class Bucket:
    """Elements ``start`` .. ``stop`` of the flat gradient, holding parameters ``params`` (descending)."""

    start: int
    stop: int
    params: tuple[int, ...]

    @property
    def size(self) -> int:
        return self.stop - self.start


def assign_buckets(sizes: list[int] | tuple[int, ...], bucket_bytes: float) -> list[Bucket]:
    """Cut parameters of ``sizes`` elements (float32) into buckets of at least ``bucket_bytes`` each (the
    last one may be smaller), walking from the last parameter to the first; a parameter is never split.
    ``bucket_bytes <= 0`` gives one bucket per parameter; a huge value one bucket for all."""
    if any(s < 0 for s in sizes):
        raise ValueError(f"parameter sizes must be >= 0, got {list(sizes)}")
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    buckets: list[Bucket] = []
    current: list[int] = []
    elements = 0
    for i in range(len(sizes) - 1, -1, -1):
        current.append(i)
        elements += sizes[i]
        if elements * FLOAT_BYTES >= bucket_bytes:
            buckets.append(Bucket(offsets[current[-1]], offsets[current[0] + 1], tuple(current)))
            current, elements = [], 0
    if current:
        buckets.append(Bucket(offsets[current[-1]], offsets[current[0] + 1], tuple(current)))
    return buckets


class BucketPlan:
    """Tracks one step: :meth:`ready` takes a parameter whose gradient is final and returns the buckets
    (indices, in order) that may now start; :meth:`rest` returns those still to start (end of backward)."""

    def __init__(self, buckets: list[Bucket], n_params: int) -> None:
        self.buckets = buckets
        self._bucket_of = [0] * n_params
        for b, bucket in enumerate(buckets):
            for p in bucket.params:
                self._bucket_of[p] = b
        self._missing = [len(b.params) for b in buckets]
        self._seen = [False] * n_params
        self.started = 0  # buckets 0 .. started-1 are started

    def reset(self) -> None:
        self._missing = [len(b.params) for b in self.buckets]
        self._seen = [False] * len(self._seen)
        self.started = 0

    def ready(self, param: int) -> list[int]:
        if self._seen[param]:  # a second report (hook fired twice): already counted
            return []
        self._seen[param] = True
        self._missing[self._bucket_of[param]] -= 1
        out = []
        while self.started < len(self.buckets) and self._missing[self.started] == 0:
            out.append(self.started)
            self.started += 1
        return out

    def rest(self) -> list[int]:
        out = list(range(self.started, len(self.buckets)))
        self.started = len(self.buckets)
        return out

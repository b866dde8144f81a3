"""Bucketed all-reduce overlapped with backward: the data-parallel step's gradient sum, started early.

The backend reports each parameter's gradient final from a hook during backward
(:meth:`nnlo.backends.base.Backend.gradient_sum_into`); when every parameter of the next bucket
(:mod:`nnlo.allreduce.buckets`: contiguous slices of the flat buffer, last layers first) is in, its
non-blocking all-reduce starts at once, while backward goes on with the earlier layers. :meth:`finish` starts
what is left (buckets and the step's trailing scalars) and waits for everything, so the optimizer step sees
the whole sum. The arithmetic is that of one all-reduce of the whole buffer; only the time it starts moves.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from nnlo.allreduce.base import Engine
from nnlo.allreduce.buckets import BucketPlan, assign_buckets

MB = 1 << 20


class BucketedReducer:
    """Sums ``buf`` (flat float32: ``n`` gradient elements, then the step's scalars) over the engine's ranks,
    bucket by bucket, for parameters of ``sizes`` elements laid out one after the other in ``buf[:n]``."""

    def __init__(self, engine: Engine, buf: np.ndarray, sizes: list[int], bucket_mb: float) -> None:
        self.engine, self.buf = engine, buf
        self.n = int(sum(sizes))
        if self.n > buf.size:
            raise ValueError(f"the buffer has {buf.size} elements, the parameters {self.n}")
        self.plan = BucketPlan(assign_buckets(sizes, bucket_mb * MB), len(sizes))
        self.pending: list[Any] = []

    @property
    def n_buckets(self) -> int:
        return len(self.plan.buckets)

    def begin(self) -> None:
        self.plan.reset()
        self.pending = []

    def ready(self, param: int) -> None:
        """Parameter ``param``'s slice of ``buf`` is final: start every bucket that is now complete."""
        started = self.plan.ready(param)
        for b in started:
            self._start(b)
        if not started:
            self.engine.progress(self.pending)

    def _start(self, b: int) -> None:
        bucket = self.plan.buckets[b]
        if bucket.size:  # the same on every rank: the sizes are the model's
            self.pending.append(self.engine.iallreduce_sum(self.buf[bucket.start:bucket.stop], key=b))

    def finish(self) -> None:
        """Start the buckets not started yet and the trailing scalars, then wait for all of them."""
        for b in self.plan.rest():
            self._start(b)
        if self.buf.size > self.n:
            self.pending.append(self.engine.iallreduce_sum(self.buf[self.n:], key=self.n_buckets))
        pending, self.pending = self.pending, []
        self.engine.wait_all(pending)


def make_reducer(engine: Engine, backend: Any, buf: np.ndarray, bucket_mb: float) -> BucketedReducer | None:
    """The bucketed reducer for ``--bucket-mb`` (None: one all-reduce after backward, when ``bucket_mb`` is
    0 or the backend cannot report gradients during backward, e.g. Keras or a model on a GPU)."""
    if bucket_mb <= 0 or not backend.grad_hooks:
        return None
    return BucketedReducer(engine, buf, backend.param_sizes(), bucket_mb)


def describe_buckets(reducer: BucketedReducer | None) -> str:
    if reducer is None:
        return "one gradient all-reduce after backward"
    return f"{reducer.n_buckets} gradient bucket(s) all-reduced during backward"

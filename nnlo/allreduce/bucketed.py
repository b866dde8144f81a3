"""Bucketed all-reduce overlapped with backward: the data-parallel step's gradient sum, started early.

The backend reports each parameter's gradient final from a hook during backward
(:meth:`nnlo.backends.base.Backend.gradient_sum_into`); when every parameter of the next bucket
(:mod:`nnlo.allreduce.buckets`: contiguous slices of the flat buffer, last layers first) is in, its
non-blocking all-reduce starts at once, while backward goes on with the earlier layers. :meth:`finish` starts
what is left (buckets and the step's trailing scalars) and waits for everything, so the optimizer step sees
the whole sum. The arithmetic is that of one all-reduce of the whole buffer; only the time it starts moves.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from nnlo.allreduce import flat
from nnlo.allreduce.base import Engine
from nnlo.allreduce.buckets import BucketPlan, assign_buckets

MB = 1 << 20


class BucketedReducer:
    """Sums ``buf`` (flat float32: ``n`` gradient elements, then the step's scalars; host or device memory,
    :mod:`nnlo.allreduce.flat`) over the engine's ranks, bucket by bucket, for parameters of ``sizes``
    elements laid out one after the other in ``buf[:n]``."""

    def __init__(self, engine: Engine, buf: Any, sizes: list[int], bucket_mb: float,
                 thread: bool = False) -> None:
        self.engine, self.buf = engine, buf
        self.n = int(sum(sizes))
        self.length = flat.length(buf)
        if self.n > self.length:
            raise ValueError(f"the buffer has {self.length} elements, the parameters {self.n}")
        self.plan = BucketPlan(assign_buckets(sizes, bucket_mb * MB), len(sizes))
        self.pending: list[Any] = []
        # thread=True: a communication thread sums the buckets with blocking calls, in order, while backward
        # runs (real overlap where the library has no progress thread of its own)
        self._thread: _CommThread | None = _CommThread(engine) if thread else None

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
        if not started and self._thread is None:
            self.engine.progress(self.pending)

    def _start(self, b: int) -> None:
        bucket = self.plan.buckets[b]
        if bucket.size:  # the same on every rank: the sizes are the model's
            view = self.buf[bucket.start:bucket.stop]
            if self._thread is not None:
                self._thread.submit(view)
            else:
                self.pending.append(self.engine.iallreduce_sum(view, key=b))

    def finish(self) -> None:
        """Start the buckets not started yet and the trailing scalars, then wait for all of them."""
        for b in self.plan.rest():
            self._start(b)
        if self._thread is not None:
            self._thread.wait()  # then the scalars on this thread: the ranks' calls stay in one order
            if self.length > self.n:
                self.engine.allreduce_sum(self.buf[self.n:])
            return
        if self.length > self.n:
            self.pending.append(self.engine.iallreduce_sum(self.buf[self.n:], key=self.n_buckets))
        pending, self.pending = self.pending, []
        self.engine.wait_all(pending)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.close()
            self._thread = None


class _CommThread:
    """Sums submitted buffers one after the other with the engine's blocking call, on a daemon thread."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._cond = threading.Condition()
        self._queue: list[np.ndarray | None] = []
        self._submitted = self._done = 0
        self._error: BaseException | None = None
        self._worker = threading.Thread(target=self._run, name="nnlo-allreduce", daemon=True)
        self._worker.start()

    def submit(self, view: np.ndarray) -> None:
        with self._cond:
            self._queue.append(view)
            self._submitted += 1
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                view = self._queue.pop(0)
            if view is None:
                return
            try:
                if self._error is None:
                    self.engine.allreduce_sum(view)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
                self._error = e
            with self._cond:
                self._done += 1
                self._cond.notify_all()

    def wait(self) -> None:
        with self._cond:
            while self._done < self._submitted:
                self._cond.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        with self._cond:
            self._queue.append(None)
            self._cond.notify_all()
        self._worker.join(timeout=5)


def make_reducer(engine: Engine, backend: Any, buf: Any, bucket_mb: float) -> BucketedReducer | None:
    """The bucketed reducer for ``--bucket-mb`` (None: one all-reduce after backward, when ``bucket_mb`` is
    0 or the backend cannot write gradients into ``buf`` during backward: Keras, or a model on a GPU with a
    host buffer, i.e. a host engine)."""
    if bucket_mb <= 0 or not backend.can_hook_into(buf):
        return None
    return BucketedReducer(engine, buf, backend.param_sizes(), bucket_mb)


def describe_buckets(reducer: BucketedReducer | None) -> str:
    if reducer is None:
        return "one gradient all-reduce after backward"
    return f"{reducer.n_buckets} gradient bucket(s) all-reduced during backward"

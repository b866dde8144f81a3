"""One data-parallel step that every rank of an all-reduce group takes together.

Used by pure all-reduce mode (:mod:`nnlo.training.allreduce`) and by all-reduce worker groups
(:mod:`nnlo.training.groups`). Each rank puts its count-weighted gradient and four scalars in one flat
buffer -- sample count, loss sum, correct predictions, and a vote (0 go on, :data:`STOP` stop after this step,
:data:`FAIL` this rank failed) -- and ONE all-reduce sums them. So every rank learns in the same call whether
anyone failed or wants to stop, and the summed gradient divided by the summed count is the gradient of the
whole group batch, exactly as one process would compute it.

With a :class:`~nnlo.allreduce.bucketed.BucketedReducer` (``--bucket-mb`` > 0 and a backend with gradient
hooks) the same sum is taken bucket by bucket, each bucket's all-reduce started from backward as soon as its
gradients are final, and the scalars last; a rank that fails still starts every bucket (zeros) and the
scalars with its FAIL vote, so the ranks' collectives always match.

The buffer is wherever the engine sums fastest (:meth:`nnlo.allreduce.base.Engine.zeros`): host memory, or the
GPU with the NCCL engine; then the gradient never leaves the device and the four scalars are the step's only
copy to the host (:mod:`nnlo.allreduce.flat`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnlo.allreduce import flat
from nnlo.observe.trace import get_tracer
from nnlo.training.failure import failure_line, in_model

COUNT, LOSS, CORRECT, VOTE = range(4)
EXTRA = 4  # scalars after the gradient in the step buffer
STOP, FAIL = 1.0, 1024.0  # a failure outweighs any number of stop votes

log = logging.getLogger("nnlo.training.step")


@dataclass(frozen=True)
class StepSums:
    """What the all-reduce of one step told every rank. ``buf[:n]`` then holds the mean gradient."""

    total: float  # samples of the whole group batch
    loss_sum: float
    correct: float
    vote: float
    has_correct: bool  # this rank's model reports correct predictions (classification)
    error: tuple[str, int] | None  # this rank's own failure (message, exit code), if it voted FAIL

    @property
    def failed(self) -> bool:
        return self.vote >= FAIL

    @property
    def stop(self) -> bool:
        return self.vote > 0


def allreduce_step(ctx: Any, engine: Any, backend: Any, loader: Any, buf: Any, idx: np.ndarray, *,
                   stop_wanted: bool, label: str, reducer: Any = None) -> StepSums:
    """Compute this rank's share of the step, all-reduce it, and average the gradient over all samples."""
    tracer = get_tracer()
    n = flat.length(buf) - EXTRA
    vote = STOP if stop_wanted else 0.0
    error: tuple[str, int] | None = None
    has_correct = False
    if reducer is not None:
        reducer.begin()
    try:
        if len(idx):
            with tracer.span("read batch", "io"):
                x, y = loader.dataset.read(idx)
            if reducer is not None or flat.on_device(buf):  # hooks (or one copy) fill the buffer where it is
                ready = reducer.ready if reducer is not None else _no_bucket
                with tracer.span("compute gradients", "compute"):
                    metrics = in_model("training", backend.gradient_sum_into, x, y, buf[:n], ready)
                count = float(metrics.get("count", len(idx)))
            else:
                with tracer.span("compute gradients", "compute"):
                    grad, metrics = in_model("training", backend.compute_gradients, x, y)
                count = float(metrics.get("count", len(idx)))
                np.multiply(grad, np.float32(count), out=buf[:n])
            scalars = [count, float(metrics.get("loss", 0.0)) * count, float(metrics.get("correct", 0.0) or 0.0)]
            has_correct = "correct" in metrics
        else:
            flat.fill(buf[:n], 0.0)
            scalars = [0.0, 0.0, 0.0]
        flat.put(buf, n, [*scalars, vote])
    except Exception as e:  # noqa: BLE001 - vote "failed": every rank then stops at this very step
        error = failure_line(e, log, f"{label} step failed")
        # buckets already started are in the library's hands: leave them; the vote makes every rank stop
        if reducer is None:
            flat.fill(buf[:n], 0.0)
        flat.put(buf, n, [0.0, 0.0, 0.0, FAIL])
    with tracer.span(f"{label} allreduce", "comm"), ctx.watchdog.waiting(f"waiting in the {label} all-reduce"):
        if reducer is not None:
            reducer.finish()  # the buckets not started yet, the scalars; then wait for all
        else:
            engine.allreduce_sum(buf)
    sums = flat.get(buf, n)  # COUNT, LOSS, CORRECT, VOTE: a device buffer's one copy to the host
    total = sums[COUNT]
    if total > 0:
        flat.divide(buf[:n], total)
    return StepSums(total, sums[LOSS], sums[CORRECT], sums[VOTE], has_correct, error)


def _no_bucket(param: int) -> None:
    """Without buckets nothing starts during backward: the one all-reduce comes after it."""

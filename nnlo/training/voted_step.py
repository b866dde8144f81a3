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
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from nnlo.observe.trace import get_tracer
from nnlo.training.failure import describe_exception, in_model

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


def allreduce_step(ctx: Any, engine: Any, backend: Any, loader: Any, buf: np.ndarray, idx: np.ndarray, *,
                   stop_wanted: bool, label: str, reducer: Any = None) -> StepSums:
    """Compute this rank's share of the step, all-reduce it, and average the gradient over all samples."""
    tracer = get_tracer()
    n = buf.size - EXTRA
    error: tuple[str, int] | None = None
    has_correct = False
    if reducer is not None:
        reducer.begin()
    try:
        if len(idx):
            with tracer.span("read batch", "io"):
                x, y = loader.dataset.read(idx)
            if reducer is not None:
                with tracer.span("compute gradients", "compute"):
                    metrics = in_model("training", backend.gradient_sum_into, x, y, buf[:n], reducer.ready)
                count = float(metrics.get("count", len(idx)))
            else:
                with tracer.span("compute gradients", "compute"):
                    grad, metrics = in_model("training", backend.compute_gradients, x, y)
                count = float(metrics.get("count", len(idx)))
                np.multiply(grad, np.float32(count), out=buf[:n])
            buf[n + COUNT] = count
            buf[n + LOSS] = float(metrics.get("loss", 0.0)) * count
            buf[n + CORRECT] = float(metrics.get("correct", 0.0) or 0.0)
            has_correct = "correct" in metrics
        else:
            buf.fill(0.0)
        buf[n + VOTE] = STOP if stop_wanted else 0.0
    except Exception as e:  # vote "failed": every rank then stops at this very step
        error = describe_exception(e)
        log.debug("%s step failed", label, exc_info=e)
        # buckets already started are in the library's hands: leave them; the vote makes every rank stop
        (buf[n:] if reducer is not None else buf).fill(0.0)
        buf[n + VOTE] = FAIL
    with tracer.span(f"{label} allreduce", "comm"), ctx.watchdog.waiting(f"waiting in the {label} all-reduce"):
        if reducer is not None:
            reducer.finish()  # the buckets not started yet, the scalars; then wait for all
        else:
            engine.allreduce_sum(buf)
    total = float(buf[n + COUNT])
    if total > 0:
        buf[:n] /= np.float32(total)
    return StepSums(total, float(buf[n + LOSS]), float(buf[n + CORRECT]), float(buf[n + VOTE]), has_correct,
                    error)

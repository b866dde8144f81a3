"""A worker: trains on its shard of each epoch, ``sync_every`` batches at a time, and exchanges with its master.

The data position is ``(epoch, batch)``: each epoch's global order comes from the seed, the worker's shard
and batches from :class:`nnlo.data.ShardedLoader` (equal batch counts on every worker, last partial batch
kept), so a checkpoint needs only those two numbers to resume exactly where it stopped.

If anything fails while computing (the model raises, the loss is NaN, a data file went missing), the worker
sends its master an ``error`` message with the one-line cause, so the master can stop the other workers
instead of letting them hang, and raises :class:`~nnlo.training.failure.RankFailure`.

Seams for all-reduce worker groups (``--n-processes`` > 1, :class:`nnlo.training.groups.GroupWorker`): the
same loop, with :meth:`Worker._train_chunk` (one all-reduced step per batch) and :meth:`Worker._exchange` (the
leader speaks to the master for the group) overridden.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any, NoReturn

import numpy as np

from nnlo import checkpoint as ckpt
from nnlo.backends.base import Backend
from nnlo.errors import TrainingError
from nnlo.observe.trace import get_tracer
from nnlo.training import streams
from nnlo.training.context import RunContext
from nnlo.training.failure import RankFailure, failure_line, in_model
from nnlo.training.modes import WorkerRule
from nnlo.training.validation import Validator

log = logging.getLogger("nnlo.worker")


class Worker:
    def __init__(self, ctx: RunContext, backend: Backend, loader: Any, rule: WorkerRule,
                 position: tuple[int, int] = (0, 0), validator: Validator | None = None) -> None:
        self.ctx, self.backend, self.loader, self.rule = ctx, backend, loader, rule
        self.cfg = ctx.config
        self.epoch, self.batch = position
        self.index = ctx.worker_index
        self.validator = validator
        self.streams_index = 0  # this rank's entry in its part's random streams (a worker writes its own)
        rule.validate = self._validate_share

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.backend.optimizer_state(),
            "position": {"epoch": self.epoch, "batch": self.batch},
            "rule": self.rule.state_dict(),
            **({"buffers": self.backend.get_buffers()} if self.backend.n_buffers else {}),
            "rng": streams.capture(self.backend),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.backend.load_optimizer_state(state["optimizer"])
        self.rule.load_state_dict(state.get("rule", {}))
        if self.backend.n_buffers and "buffers" in state:
            self.backend.set_buffers(np.asarray(state["buffers"], dtype=np.float32))
        streams.restore(state.get("rng"), self.backend, self.streams_index)

    # -- main loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        se = self.cfg.sync_every
        while self.epoch < self.cfg.epochs:
            plan = self.loader.batch_indices(self.epoch)
            while True:
                chunk = plan[self.batch:self.batch + se]
                header = self._train_chunk(chunk)
                self.batch += len(chunk)
                header.update(epoch=self.epoch, epoch_end=self.batch >= len(plan))
                reply = self._exchange(header)
                if self._handle(reply):
                    return
                if self.batch >= len(plan):
                    break
            self.epoch, self.batch = self.epoch + 1, 0

    def _train_chunk(self, chunk: list[np.ndarray]) -> dict[str, Any]:
        tracer = get_tracer()
        t0 = time.monotonic()
        samples, loss_sum, correct = 0, 0.0, None
        try:
            for b, idx in enumerate(chunk):
                with tracer.span("read batch", "io"):
                    x, y = self.loader.dataset.read(idx)
                with tracer.span("train batch", "compute"):
                    metrics = self._train_batch(x, y)
                loss = metrics.get("loss", 0.0)
                if not math.isfinite(loss):
                    raise TrainingError(
                        f"loss is {loss} at epoch {self.epoch + 1}, batch {self.batch + b + 1}; lower the "
                        f"learning rate (--worker-optimizer/--gem-lr) or check the data for NaN/inf"
                    )
                n = int(metrics.get("count", len(idx)))
                samples += n
                loss_sum += loss * n
                if "correct" in metrics:
                    correct = (correct or 0.0) + metrics["correct"]
        except Exception as e:  # noqa: BLE001 - tell the master, then fail this rank
            self._report(e)
        return {"samples": samples, "loss_sum": loss_sum, "correct": correct,
                "seconds": time.monotonic() - t0, "stop_requested": self.ctx.stop.signal_name}

    def _exchange(self, header: dict[str, Any]) -> dict[str, Any]:
        """Send this chunk's contribution to the master; the master's reply (action, checkpoint, ...)."""
        return self.rule.exchange(header)

    def _train_batch(self, x: Any, y: Any) -> dict[str, float]:
        return in_model("training", self.backend.train_on_batch, x, y)

    def _validate_share(self, request: dict[str, Any], weights: np.ndarray) -> np.ndarray:
        """Evaluate the master's weights on the share ``request["range"]`` of the validation samples (with the
        master's buffers), keeping this worker's own weights and buffers; a failure is reported like a
        training failure (the master answers ``abort``)."""
        try:
            if self.validator is None:
                raise TrainingError("the master asked for a validation share but this worker has no validation "
                                    "data; every rank must see the same --val")
            lo, hi = (int(v) for v in request["range"])
            return self.validator.sums_with(self.backend, weights, request.get("buffers"), lo, hi)
        except Exception as e:  # noqa: BLE001 - tell the master, then fail this rank
            self._report(e)

    def _report(self, exc: BaseException) -> NoReturn:
        message, code = failure_line(exc, log, "training failed")
        failure = RankFailure(message, self.ctx.rank, self.ctx.role_label, exit_code=code, report=True)
        link, master = self.rule.link, self.rule.master
        link.send(master, {"kind": "error", "failure": failure.to_dict()})
        # The master answers with the group's *first* failure: only its rank prints, so two workers
        # failing at once still give one line.
        _, reply, _ = link.recv(master)
        first = reply.get("failure") or failure.to_dict()
        raise RankFailure.from_dict(first, report=first.get("rank") == self.ctx.rank) from None

    def _handle(self, reply: dict[str, Any]) -> bool:
        """Act on the master's reply; True when this worker must stop."""
        action = reply.get("action")
        if action == "abort":
            data = reply.get("failure") or {"message": "another rank failed", "rank": -1, "role": "?"}
            raise RankFailure.from_dict(data, report=False)
        if reply.get("checkpoint"):
            self._write_part(reply["checkpoint"])
        return action == "stop"

    def _write_part(self, directory: str) -> None:
        self._write_state(directory, self.state_dict())

    def _write_state(self, directory: str, state: dict[str, Any]) -> None:
        """Write ``state`` as this worker's part of the checkpoint in ``directory`` and tell the master."""
        error = None
        try:
            with get_tracer().span("checkpoint part", "io"):
                ckpt.write_part(directory, ckpt.part_name("worker", self.index), state)
        except Exception as e:  # noqa: BLE001
            error = f"{type(e).__name__}: {e}"
        self.rule.link.ack(self.rule.master, error)
        if error:
            raise RankFailure(f"cannot write checkpoint part into {directory}: {error}",
                              self.ctx.rank, self.ctx.role_label, report=True)

"""Sub-masters (``--n-masters M > 1``): an uber-master above ``M - 1`` masters, each with its own workers.

Why: one parameter server saturates when hundreds of workers send it updates; a tree spreads that load.
Each sub-master serves its workers with the same loop as a master (:class:`~nnlo.training.serve.WorkerServer`:
Downpour, EASGD or GEM, unchanged) and is a Downpour worker towards the uber-master: every
``len(its workers)`` updates, and at the end of every epoch, it sends the uber-master the change of its center
since their last exchange (with the sample counts and losses of its workers since then) and continues from
the uber-master's center (at epoch ends with the mean of its workers' BatchNorm-like buffers). The
uber-master is a plain Master whose "workers" are the sub-masters, applying those deltas with
``--optimizer`` (default ``sgd:lr=1``: add them as they are); it alone keeps the history, judges the deadline,
decides to stop, and owns the checkpoints. Its validations are shared down the tree: each sub-master is
handed a range of the validation samples in proportion to its ranks, and splits it again over itself and
its workers (:meth:`SubMaster._validate_share`).

Epochs: a sub-master reaches the uber-master's epoch barrier only once all its own workers reached its
own, so "epoch N" still means every training sample was used exactly once N times; data are sharded by
global worker index over all workers of all sub-masters (:attr:`RunContext.data_split`).

Checkpoints cover the whole tree: the uber-master opens the folder and tells the sub-masters (in its
reply), each sub-master passes it to its workers, collects their acknowledgements, writes its own part
(``submaster-<m>.pkl``: its optimizer and counters) and acknowledges to the uber-master, which then writes
``master.pkl`` and publishes the checkpoint. A stop (deadline, signal) seen anywhere travels up as a stop
request and comes back down as "stop, checkpoint into DIR". A worker's failure travels up as an ``error``
message, and the uber-master answers every other sub-master with ``abort``.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from nnlo import checkpoint as ckpt
from nnlo.backends.base import Backend
from nnlo.errors import TrainingError
from nnlo.training import streams
from nnlo.training.context import RunContext
from nnlo.training.failure import RankFailure
from nnlo.training.history import EpochStats, TrainResult
from nnlo.training.master import Master
from nnlo.training.modes import DownpourServer
from nnlo.training.serve import WorkerServer
from nnlo.training.validation import Validator
from nnlo.transport import Link

log = logging.getLogger("nnlo.train")


def part_name(master_index: int) -> str:
    return ckpt.part_name("submaster", master_index)


class UberMaster(Master):
    """The top of the tree: a Master whose workers are the sub-masters; they always send Downpour deltas."""

    def __init__(self, ctx: RunContext, backend: Backend, validator: Validator | None,
                 restored: dict[str, Any] | None = None) -> None:
        super().__init__(ctx, backend, validator, restored, rule=DownpourServer)


class SubMaster(WorkerServer):
    """A master towards its workers, a Downpour worker towards the uber-master."""

    def __init__(self, ctx: RunContext, backend: Backend, restored: dict[str, Any] | None = None,
                 epoch: int = 0, validator: Validator | None = None) -> None:
        super().__init__(ctx, backend)
        self.validator = validator  # a share of the uber-master's validations, spread over our workers
        info = ctx.info
        assert info.master is not None and info.parent is not None  # a sub-master has both
        self.index, self.uber = info.master, info.parent
        self.up = Link(ctx.comm, watchdog=ctx.watchdog, sleep=ctx.sleep_waits)
        self.base = self.center.copy()  # the center at the last exchange with the uber-master
        self.delta = self.up.frame(self.center.size)  # framed: one message each way to the uber-master
        self.up_buf = self.up.frame(self.center.size)
        self.pending = EpochStats()  # the workers' sums since the last exchange with the uber-master
        self.since_sync = 0
        self.sync_every = max(1, len(self.workers))
        self._uber_stopped = False
        self._failure_from_uber = False
        self.epoch = epoch
        if restored is not None:
            self.optimizer.load_state_dict(restored["optimizer"])
            self.epoch, self.updates = int(restored["epoch"]), int(restored["updates"])
            streams.restore(restored.get("rng"), self.backend)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "epoch": self.epoch, "updates": self.updates,
                "rng": streams.capture(self.backend)}

    # -- lifecycle ---------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        np.copyto(self.base, self.center)  # the driver broadcast the uber-master's center into ours
        try:
            if self._begin():
                self.serve()
            if self.failure is not None:
                raise self.failure
        except RankFailure as failure:
            if self._failure_from_uber:
                raise
            # one of our workers (or we) failed: tell the uber-master, which answers with the first failure
            self.up.send(self.uber, {"kind": "error", "failure": failure.to_dict()})
            _, reply, _ = self.up.recv(self.uber, out=self.up_buf)
            first = reply.get("failure") or failure.to_dict()
            raise RankFailure.from_dict(first, report=False) from None
        return TrainResult(epochs_done=self.epoch, stopped_reason=self.stop_reason or "completed",
                           updates=self.updates)

    # -- serving, with the uber-master above -------------------------------------------------------
    def _accounted(self, header: dict[str, Any], counted: bool) -> None:
        self.pending.add(header)
        self.pending.seconds += float(header.get("seconds") or 0.0)
        if counted:
            self.since_sync += 1
        if (self.since_sync >= self.sync_every and not header.get("epoch_end") and self.stop_reason is None
                and self.failure is None):
            self._sync(epoch_end=False)

    def _stop_wanted(self) -> str | None:
        return "signal" if self.ctx.stop.raised else None  # the deadline is the uber-master's to judge

    def _stop_checkpoint_dir(self) -> Path | None:
        if not self._uber_stopped and self.failure is None:
            self._sync(epoch_end=False, stop=True)  # ask the uber-master to stop everyone
        return self._stop_tmp

    def _decide_epoch(self) -> tuple[str, Path | None]:
        """All our workers are at our barrier: join the uber-master's, and release them as it says."""
        reply = self._sync(epoch_end=True, stop=self.stop_reason is not None)
        action = str(reply.get("action"))
        if action == "abort":
            return action, None
        self.epoch += 1
        if action == "stop":
            self.stop_reason = self.stop_reason or "completed"
            self._stop_tmp = None  # this checkpoint is completed at the barrier
        tmp = reply.get("checkpoint")
        return action, Path(tmp) if tmp else None

    def _complete_checkpoint(self, tmp: Path, ranks: list[int]) -> None:
        """Our workers' parts are in: write ours and acknowledge to the uber-master, which publishes."""
        bad = self._collect_acks(ranks)
        error = f"rank {bad[0][0]}: {bad[0][1]}" if bad else None
        if error is None:
            try:
                ckpt.write_part(tmp, part_name(self.index), self.state_dict())
            except Exception as e:  # noqa: BLE001
                error = f"{type(e).__name__}: {e}"
        self.up.ack(self.uber, error)
        if error and self.failure is None:
            self.failure = RankFailure(f"cannot write checkpoint part into {tmp}: {error}", self.ctx.rank,
                                       self.ctx.role_label, report=False)
            self._failure_from_uber = True  # the uber-master learns it from the acknowledgement

    def _validate_share(self, request: dict[str, Any], weights: np.ndarray) -> tuple[dict[str, Any], Any]:
        """The uber-master shares a validation: evaluate our range with the workers waiting for us, answer
        with the sums (or our first failure), and return the uber-master's next reply."""
        msg: dict[str, Any]
        try:
            if self.validator is None:
                raise TrainingError("the uber-master asked for a validation share but this sub-master has no "
                                    "validation data")
            lo, hi = (int(v) for v in request["range"])
            sums = self._spread_validation(self.validator, weights, request.get("buffers"), lo, hi)
            msg = {"kind": "val", "sums": [float(v) for v in sums]}
        except Exception as e:  # noqa: BLE001 - a worker's failure (recorded) or ours: the uber-master stops all
            self._fail_here(e)
            assert self.failure is not None
            msg = {"kind": "error", "failure": self.failure.to_dict()}
        self.up.send(self.uber, msg)
        _, reply, arr = self.up.recv(self.uber, out=self.up_buf)
        return reply, arr

    # -- talking to the uber-master ----------------------------------------------------------------
    def _sync(self, epoch_end: bool, stop: bool = False) -> dict[str, Any]:
        """Send the uber-master our delta and counts; take its center. Returns its reply header."""
        np.subtract(self.center, self.base, out=self.delta)
        p = self.pending
        header: dict[str, Any] = {"kind": "update", "samples": p.samples, "loss_sum": p.loss_sum,
                                  "correct": p.correct if p.has_correct else None, "seconds": p.seconds,
                                  "epoch": self.epoch, "epoch_end": epoch_end,
                                  "stop_requested": (self.ctx.stop.signal_name or "a stop below") if stop else None}
        buffers = self.buffers.take_mean() if epoch_end else None  # our workers' mean, for the uber-master's
        if buffers is not None:
            header["buffers"] = buffers
        self.up.send(self.uber, header, self.delta)
        _, reply, arr = self.up.recv(self.uber, out=self.up_buf)
        while reply.get("action") == "validate" and arr is not None:
            reply, arr = self._validate_share(reply, arr)
        self.pending = EpochStats()
        self.since_sync = 0
        action = reply.get("action")
        if action == "abort":
            self._failure_from_uber = True
            if self.failure is None:
                self.failure = RankFailure.from_dict(reply.get("failure") or {
                    "message": "another rank failed", "rank": -1, "role": "?"}, report=False)
            return reply
        if arr is not None:
            np.copyto(self.center, arr)
            np.copyto(self.base, arr)
        if action == "stop":
            self._uber_stopped = True
            self.stop_reason = self.stop_reason or "stopped"
            if reply.get("checkpoint"):
                self._stop_tmp = Path(reply["checkpoint"])
        return reply

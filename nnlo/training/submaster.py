"""Sub-masters (``--n-masters M > 1``): an uber-master above ``M - 1`` masters, each with its own workers.

Why: one parameter server saturates when hundreds of workers send it updates; a tree spreads that load.
Each sub-master is an ordinary :class:`~nnlo.training.master.Master` towards its workers (Downpour, EASGD
or GEM, unchanged) and a Downpour worker towards the uber-master: every ``len(its workers)`` updates, and
at the end of every epoch, it sends the uber-master the change of its center since their last exchange
(with the sample counts and losses of its workers since then) and continues from the uber-master's
center (at epoch ends with the mean of its workers' BatchNorm-like buffers). The uber-master is a plain Master whose "workers" are the sub-masters, applying those deltas with
``--optimizer`` (default ``sgd:lr=1``: add them as they are); it alone validates, keeps the history, decides
to stop, and owns the checkpoints.

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
from nnlo.algorithms.optimizers import make_optimizer
from nnlo.training.failure import RankFailure
from nnlo.training.history import TrainResult
from nnlo.training.master import EpochStats, Master
from nnlo.training.modes import DownpourServer
from nnlo.transport import Link

log = logging.getLogger("nnlo.train")


def part_name(master_index: int) -> str:
    return ckpt.part_name("submaster", master_index)


class UberMaster(Master):
    """The top of the tree: a Master whose workers are the sub-masters; they always send Downpour deltas."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rule = DownpourServer(self.center, self.optimizer, self.cfg, len(self.workers))


class SubMaster(Master):
    """A master towards its workers, a Downpour worker towards the uber-master."""

    def __init__(self, ctx: Any, backend: Any, restored: dict[str, Any] | None = None,
                 epoch: int = 0) -> None:
        super().__init__(ctx, backend, None, restored=None)
        self.writer = None  # the uber-master owns the checkpoints
        self.index = int(ctx.info.master)
        self.uber = int(ctx.info.parent)
        self.up = Link(ctx.comm, watchdog=ctx.watchdog)
        self.base = self.center.copy()  # the center at the last exchange with the uber-master
        self.delta = np.empty_like(self.center)
        self.up_buf = np.empty_like(self.center)
        self.pending = EpochStats()
        self.since_sync = 0
        self.sync_every = max(1, len(self.workers))
        self._uber_stopped = False
        self._failure_from_uber = False
        self.epoch = epoch
        if restored is not None:
            self.optimizer = make_optimizer(self.cfg.optimizer)
            self.optimizer.load_state_dict(restored["optimizer"])
            self.rule.optimizer = self.optimizer
            self.epoch, self.updates = int(restored["epoch"]), int(restored["updates"])

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "epoch": self.epoch, "updates": self.updates}

    # -- lifecycle ---------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        np.copyto(self.base, self.center)  # the driver broadcast the uber-master's center into ours
        try:
            return super().run()
        except RankFailure as failure:
            if self._failure_from_uber:
                raise
            # one of our workers (or we) failed: tell the uber-master, which answers with the first failure
            self.up.send(self.uber, {"kind": "error", "failure": failure.to_dict()})
            _, reply, _ = self.up.recv(self.uber, out=self.up_buf)
            first = reply.get("failure") or failure.to_dict()
            raise RankFailure.from_dict(first, report=False) from None

    def _result(self) -> TrainResult:
        return TrainResult(epochs_done=self.epoch, stopped_reason=self.stop_reason or "completed",
                           updates=self.updates)

    def _write_history(self, result: TrainResult | None = None) -> Any:
        return None  # the uber-master writes the history

    def _epoch_entry(self) -> dict[str, Any]:  # pragma: no cover - sub-masters never validate
        raise AssertionError("a sub-master does not end epochs itself")

    # -- talking to the uber-master ----------------------------------------------------------------
    def _account(self, hdr: dict[str, Any], count_update: bool = True) -> None:
        super()._account(hdr, count_update)
        self.pending.add(hdr)
        self.pending.seconds += float(hdr.get("seconds") or 0.0)
        if count_update and hdr.get("samples", 0):
            self.since_sync += 1
        if (self.since_sync >= self.sync_every and not hdr.get("epoch_end") and self.stop_reason is None
                and self.failure is None):
            self._sync(epoch_end=False)

    def _sync(self, epoch_end: bool, stop: bool = False) -> dict[str, Any]:
        """Send the uber-master our delta and counts; take its center. Returns its reply header."""
        np.subtract(self.center, self.base, out=self.delta)
        p = self.pending
        header = {"kind": "update", "samples": p.samples, "loss_sum": p.loss_sum,
                  "correct": p.correct if p.has_correct else None, "seconds": p.seconds,
                  "epoch": self.epoch, "epoch_end": epoch_end,
                  "stop_requested": (self.ctx.stop.signal_name or "a stop below") if stop else None}
        buffers = self._take_buffers() if epoch_end else None  # our workers' mean, for the uber-master's
        if buffers is not None:
            header["buffers"] = buffers
        self.up.send(self.uber, header, self.delta)
        _, reply, arr = self.up.recv(self.uber, out=self.up_buf)
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
                self._pending_tmp = Path(reply["checkpoint"])
        return reply

    def _check_stop(self) -> None:
        if self.stop_reason is None and self.ctx.stop.raised:
            self.stop_reason = "signal"  # the deadline is the uber-master's to judge

    def _stop_checkpoint_dir(self) -> Any:
        if not self._uber_stopped and self.failure is None:
            self._sync(epoch_end=False, stop=True)  # ask the uber-master to stop everyone
        return self._pending_tmp

    def _end_epoch(self, parked: list[int], replies: dict[int, np.ndarray | None]) -> None:
        """All our workers are at our barrier: join the uber-master's, then release them as it says."""
        reply = self._sync(epoch_end=True, stop=self.stop_reason is not None)
        action = reply.get("action")
        if action == "abort":
            for p in parked:
                self._reply(p, "abort")
            return
        self.epoch += 1
        self.stats = EpochStats()
        tmp = reply.get("checkpoint")
        if action == "stop":
            self.stop_reason = self.stop_reason or "completed"
            self._pending_tmp = None  # this checkpoint is completed right here
        for p in parked:
            self._reply(p, action, replies.get(p), checkpoint=tmp)
        if tmp is not None:
            self._complete_checkpoint(Path(tmp), parked)

    def _complete_checkpoint(self, tmp: Any, ranks: list[int]) -> None:
        errors = [(r, self.link.recv_ack(r)) for r in ranks]
        bad = [(r, e) for r, e in errors if e]
        self._dead.update(r for r, _ in bad)
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

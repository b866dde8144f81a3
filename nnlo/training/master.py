"""The master (parameter server): holds the central weights, serves its workers, validates, checkpoints.

Epochs end with a barrier: a worker's last exchange of an epoch is flagged ``epoch_end`` and the master
answers it only once every worker got there. Then it validates, logs a progress line, updates the history
and the early-stopping state, decides whether to stop, writes a checkpoint if one is due (every worker writes
its part into the same folder), and releases everyone. The barrier costs at most one chunk of idling per
epoch and buys clean semantics: "epoch N" means every training sample was used exactly once N times.

A stop in the middle of an epoch (deadline or signal) is answered to each worker at its next message with
"stop, checkpoint into DIR"; the checkpoint then holds every worker's exact data position.

BatchNorm-like buffers: each worker's last update of an epoch carries its model's buffers; the master
averages them into its own model before validating, so validation, checkpoints and the saved model use the
statistics the workers gathered (the master never trains, so its own would stay at their initial values).

Failures never hang the group: a worker that fails sends an ``error`` message; the master answers every
later message with ``abort`` (carrying the original message) until no worker is left, then raises.
"""
from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nnlo import checkpoint as ckpt
from nnlo.algorithms import synchronous
from nnlo.algorithms.optimizers import make_optimizer
from nnlo.backends.base import Backend
from nnlo.backends.native_model import save_final_model, write_checkpoint_model
from nnlo.errors import TrainingError
from nnlo.observe.trace import get_tracer
from nnlo.training.context import RunContext
from nnlo.training.deadline import Deadline, injected_signal_update
from nnlo.training.failure import RankFailure, describe_exception
from nnlo.training.history import TrainResult, epoch_line, write_history
from nnlo.training.modes import make_server_rule
from nnlo.training.stopping import Stopper
from nnlo.transport import ANY, Link

log = logging.getLogger("nnlo.train")

#: history-entry fields shown on the live progress line
_LIVE_FIELDS = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy", "samples_per_s", "gpu_util_mean")


@dataclass
class EpochStats:
    """Training-side sums of the current epoch, from the workers' messages (saved in checkpoints)."""

    samples: int = 0
    loss_sum: float = 0.0
    correct: float = 0.0
    has_correct: bool = False
    seconds: float = 0.0  # wall time of this epoch before the current job (restores add up)
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, header: dict[str, Any]) -> None:
        n = int(header.get("samples", 0))
        self.samples += n
        self.loss_sum += float(header.get("loss_sum", 0.0))
        if header.get("correct") is not None:
            self.correct += float(header["correct"])
            self.has_correct = True


@dataclass
class Validator:
    """Loss and accuracy of the master's model over the validation samples."""

    dataset: Any  # nnlo.data.H5Dataset
    indices: np.ndarray
    batch: int

    def __call__(self, backend: Backend) -> dict[str, float]:
        sums: dict[str, float] = {}
        for start in range(0, len(self.indices), self.batch):
            x, y = self.dataset.read(self.indices[start:start + self.batch])
            for k, v in backend.evaluate_batch(x, y).items():
                sums[k] = sums.get(k, 0.0) + v
        count = sums.get("count", 0.0)
        if not count:
            return {}
        out = {"val_loss": sums["loss_sum"] / count}
        if "correct" in sums:
            out["val_accuracy"] = sums["correct"] / count
        return out


class Master:
    """Serves one group of workers. :meth:`run` returns the :class:`TrainResult` (or raises RankFailure)."""

    def __init__(self, ctx: RunContext, backend: Backend, validator: Validator | None,
                 restored: dict[str, Any] | None = None) -> None:
        self.ctx, self.backend, self.validator = ctx, backend, validator
        cfg = self.cfg = ctx.config
        self.link = Link(ctx.comm, watchdog=ctx.watchdog)
        self.workers = ctx.worker_ranks
        self.center = backend.get_weights()
        self.buf = np.empty_like(self.center)
        self.optimizer = make_optimizer(cfg.optimizer)
        self.rule = make_server_rule(self.center, self.optimizer, cfg, len(self.workers))
        self.epoch = 0  # epochs completed
        self.updates = 0
        self.history: list[dict[str, Any]] = []
        self.stopper = Stopper.from_config(cfg.early_stopping, cfg.target_metric)
        self.stats = EpochStats()
        self.buffers = backend.get_buffers() if backend.n_buffers else None  # the central model's buffers
        self._buffer_sum: np.ndarray | None = None  # this epoch's buffers from the workers, summed (float64)
        self._buffer_count = 0
        self.stop_reason: str | None = None
        self.failure: RankFailure | None = None
        self.writer = ckpt.CheckpointWriter(ctx.checkpoint_dir, cfg.checkpoint_keep) if ctx.checkpoint_dir else None
        self.deadline = Deadline(cfg.deadline, self.center.nbytes)
        self.signal_at = injected_signal_update()
        self.progress: Any = None  # nnlo.observe.progress.Progress on a terminal (see _live_progress)
        self._pending_tmp: Any = None
        self._to_ack: list[int] = []
        self._dead: set[int] = set()
        self._t_epoch = time.monotonic()
        self._t_start = time.monotonic()
        if restored is not None:
            self._load(restored)

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        stats = dict(self.stats.__dict__, seconds=self.stats.seconds + time.monotonic() - self._t_epoch)
        return {
            "weights": self.center.copy(),
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "updates": self.updates,
            "history": self.history,
            "stopper": self.stopper.state_dict(),
            "epoch_stats": stats,
            **({"buffers": self.buffers.copy()} if self.buffers is not None else {}),
            "rng": {"numpy": np.random.get_state(), "python": random.getstate(),
                    "backend": self.backend.rng_state()},
        }

    def _load(self, state: dict[str, Any]) -> None:
        w = np.asarray(state["weights"], dtype=np.float32)
        if w.size != self.center.size:
            raise TrainingError(
                f"the checkpoint holds {w.size} weights but the model has {self.center.size}; "
                f"restore with the same model or start fresh without --restore"
            )
        np.copyto(self.center, w)
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.updates = int(state["epoch"]), int(state["updates"])
        self.history = list(state.get("history", []))
        self.stopper.load_state_dict(state.get("stopper", {}))
        self.stats = EpochStats(**state.get("epoch_stats", {}))
        if self.buffers is not None and "buffers" in state:
            self._set_buffers(np.asarray(state["buffers"], dtype=np.float32))
        rng = state.get("rng", {})
        if "numpy" in rng:
            np.random.set_state(rng["numpy"])
        if "python" in rng:
            random.setstate(rng["python"])
        if rng.get("backend"):
            self.backend.set_rng_state(rng["backend"])

    # -- main loop ---------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        cfg = self.cfg
        log.info("training %s: %d worker(s), mode %s, %d epoch(s), batch %d, %s",
                 self.ctx.hierarchy.rank_map(), len(self.workers), cfg.effective_mode, cfg.epochs,
                 cfg.batch, self.deadline.describe())
        if self.epoch >= cfg.epochs:
            self.stop_reason = "completed"
            log.info("the restored run has already done %d of %d epochs; nothing to train", self.epoch, cfg.epochs)
        else:
            self.progress = self._live_progress()
            try:
                self._t_epoch = time.monotonic()
                if cfg.synchronous:
                    self._serve_synchronous()
                else:
                    self._serve_async()
                self._finish_stop_checkpoint()
            finally:
                if self.progress is not None:
                    self.progress.close()  # ends the live line, also on errors, so later output starts clean
        if self.failure is not None:
            raise self.failure
        return self._result()

    def _live_progress(self) -> Any:
        """A live status line on the terminal (None elsewhere: the per-epoch log lines are the progress).

        Only for the person at the terminal: the master of a plain ``nnlo train`` that is the world's rank 0.
        Inside an optimization trial the coordinator's display is the progress, so trials draw nothing.
        """
        if self.ctx.rank != self.ctx.group.top:
            return None
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        if world.Get_rank() != 0 or self.ctx.comm.Get_size() != world.Get_size():
            return None  # not rank 0, or one training group of an optimization (the coordinator shows progress)
        from nnlo.observe.progress import for_terminal

        progress = for_terminal("train", total=self.cfg.epochs)
        if progress is not None and self.epoch:
            progress.update(epoch=self.epoch)  # a restored run starts from its checkpoint's epoch
        return progress

    def _serve_async(self) -> None:
        active, parked = set(self.workers), set()
        replies: dict[int, np.ndarray | None] = {}
        tracer = get_tracer()
        while active:
            src, hdr, arr = self.link.recv(ANY, out=self.buf)
            kind = hdr.get("kind")
            if kind == "error":
                self._record_failure(hdr, src)
            if self.failure is not None:
                self._reply(src, "abort")  # to a failed worker too: it learns which failure came first
                active.discard(src)
                for p in list(parked):
                    self._reply(p, "abort")
                active -= parked
                parked.clear()
                continue
            if kind == "pull":
                self._reply(src, "continue", self.rule.on_pull())
                continue
            if kind != "update" or arr is None:
                raise TrainingError(f"unexpected message {kind!r} from rank {src}")
            with tracer.span("apply update", "compute"):
                out = self.rule.on_update(hdr, arr)
            self._account(hdr)
            if self.stop_reason is not None:  # deadline or signal: stop everyone now, mid-epoch if need be
                tmp = self._stop_checkpoint_dir()
                self._reply(src, "stop", out, checkpoint=tmp)
                self._to_ack.append(src)
                for p in sorted(parked):
                    self._reply(p, "stop", replies.pop(p, self.center), checkpoint=tmp)
                    self._to_ack.append(p)
                active -= parked | {src}
                parked.clear()
            elif hdr.get("epoch_end"):
                parked.add(src)
                if out is not None:
                    replies[src] = out.copy() if self.rule.snapshot_reply else out
                else:
                    replies[src] = None
                if parked == active:
                    self._end_epoch(sorted(parked), replies)
                    if self.stop_reason is not None or self.failure is not None:
                        active.clear()
                    parked.clear()
                    replies.clear()
            else:
                self._reply(src, "continue", out)

    def _serve_synchronous(self) -> None:
        acc = np.zeros_like(self.center)
        workers = list(self.workers)
        tracer = get_tracer()
        while True:
            acc.fill(0.0)
            total = 0
            ends: list[bool] = []
            headers = []
            for w in workers:
                _, hdr, arr = self.link.recv(w, out=self.buf)
                if hdr.get("kind") == "error":
                    self._record_failure(hdr, w)
                    continue
                headers.append(hdr)
                n = int(hdr.get("samples", 0))
                if n and arr is not None and self.failure is None:
                    with tracer.span("accumulate update", "compute"):
                        acc += arr * np.float32(n)  # sample-weighted: equals one step on the joint batch
                    total += n
                ends.append(bool(hdr.get("epoch_end")))
            if self.failure is not None:
                for w in workers:  # failed workers too: they learn which failure came first
                    self._reply(w, "abort")
                return
            if total:
                with tracer.span("apply update", "compute"):
                    synchronous.scale_in_place(acc, total)
                    self.rule.on_update({"samples": total}, acc)
            for hdr in headers:
                self._account(hdr, count_update=False)
            self._count_update()
            self._check_stop()
            if any(ends) and not all(ends):
                raise TrainingError("workers disagree on the end of the epoch; their data shards differ")
            if all(ends):
                self._end_epoch(workers, {w: self.center for w in workers})
                if self.stop_reason is not None or self.failure is not None:
                    return
            elif self.stop_reason is not None:
                tmp = self._stop_checkpoint_dir()
                for w in workers:
                    self._reply(w, "stop", None, checkpoint=tmp)
                    self._to_ack.append(w)
                return
            else:
                for w in workers:
                    self._reply(w, "continue", self.center)

    # -- bookkeeping -------------------------------------------------------------------------------
    def _account(self, hdr: dict[str, Any], count_update: bool = True) -> None:
        self.stats.add(hdr)
        if hdr.get("buffers") is not None:
            self._collect_buffers(hdr["buffers"])
        if hdr.get("seconds"):
            self.deadline.note_round(float(hdr["seconds"]))
        if count_update and hdr.get("samples", 0):
            self._count_update()
        if hdr.get("stop_requested") and self.stop_reason is None:
            self.stop_reason = "signal"
            log.warning("a worker received %s: stopping with a checkpoint", hdr.get("stop_requested"))
        self._check_stop()

    def _collect_buffers(self, values: np.ndarray) -> None:
        if self.buffers is None or values.size != self.buffers.size:
            raise TrainingError(f"a worker sent {values.size} buffer values but the master's model has "
                                f"{0 if self.buffers is None else self.buffers.size}; all ranks must load the same model")
        if self._buffer_sum is None:
            self._buffer_sum = np.zeros(values.size, dtype=np.float64)
        self._buffer_sum += values
        self._buffer_count += 1

    def _take_buffers(self) -> np.ndarray | None:
        """The mean of the buffers received since the last call (None if none came), and start over."""
        if self._buffer_sum is None or not self._buffer_count:
            return None
        mean = (self._buffer_sum / self._buffer_count).astype(np.float32)
        self._buffer_sum, self._buffer_count = None, 0
        return mean

    def _set_buffers(self, values: np.ndarray) -> None:
        assert self.buffers is not None
        np.copyto(self.buffers, values)
        self.backend.set_buffers(self.buffers)

    def _count_update(self) -> None:
        self.updates += 1
        if self.signal_at is not None and self.updates == self.signal_at:
            import os
            import signal

            os.kill(os.getpid(), signal.SIGUSR1)  # test hook: the real signal path at an exact update

    def _check_stop(self) -> None:
        if self.stop_reason is not None:
            return
        if self.ctx.stop.raised:
            self.stop_reason = "signal"
        elif self.deadline.reached():
            self.stop_reason = "deadline"
            log.warning("deadline close (%s): writing a checkpoint and stopping", self.deadline.describe())

    def _record_failure(self, hdr: dict[str, Any], src: int) -> None:
        if self.failure is None:
            self.failure = RankFailure.from_dict(hdr["failure"], report=False)
            log.debug("rank %d failed: %s", src, self.failure)

    def _fail_here(self, exc: BaseException) -> None:
        if self.failure is None:
            message, code = describe_exception(exc)
            self.failure = RankFailure(message, self.ctx.rank, self.ctx.role_label, exit_code=code, report=True)
            log.debug("master failed", exc_info=exc)

    def _reply(self, dest: int, action: str, array: np.ndarray | None = None, checkpoint: Any = None) -> None:
        header: dict[str, Any] = {"kind": "reply", "action": action}
        if checkpoint is not None:
            header["checkpoint"] = str(checkpoint)
        if action == "abort":
            header["failure"] = self.failure.to_dict() if self.failure else None
            array = None
        self.link.send(dest, header, array)

    # -- epochs ------------------------------------------------------------------------------------
    def _end_epoch(self, parked: list[int], replies: dict[int, np.ndarray | None]) -> None:
        """All workers are at the barrier: validate, record, decide, checkpoint, release them."""
        action, tmp = "continue", None
        try:
            mean = self._take_buffers()
            if mean is not None:
                self._set_buffers(mean)
            entry = self._epoch_entry()
            self.history.append(entry)
            self.epoch += 1
            self.stats = EpochStats()
            reason = self.stopper.update(entry)
            self._check_stop()
            reason = self.stop_reason or reason
            if reason is None and self.epoch >= self.cfg.epochs:
                reason = "completed"
            self.stop_reason = reason
            log.info(epoch_line(entry, self.cfg.epochs))
            if self.progress is not None:  # the figures a person watches; the history keeps the rest
                self.progress.update(**{k: v for k, v in entry.items() if k in _LIVE_FIELDS})
            if self._want_checkpoint(reason):
                assert self.writer is not None
                tmp = self.writer.begin(self.epoch, self.updates)
            action = "stop" if reason else "continue"
            self._write_history()
        except Exception as e:  # noqa: BLE001 - report it to every worker instead of hanging them
            self._fail_here(e)
            for p in parked:
                self._reply(p, "abort")
            return
        for p in parked:
            self._reply(p, action, replies.get(p), checkpoint=tmp)
        self._t_epoch = time.monotonic()
        if tmp is not None:
            self._complete_checkpoint(tmp, parked)
            if self.failure is not None and action == "continue":
                self._drain([p for p in parked if p not in self._dead])

    def _drain(self, ranks: list[int]) -> None:
        """After a failure, answer the next message of each of ``ranks`` with abort (so none waits)."""
        for r in ranks:
            self.link.recv(r, out=self.buf)
            self._reply(r, "abort")

    def _epoch_entry(self) -> dict[str, Any]:
        s = self.stats
        seconds = s.seconds + time.monotonic() - self._t_epoch
        entry: dict[str, Any] = {"epoch": self.epoch + 1}
        if s.samples:
            entry["loss"] = s.loss_sum / s.samples
            if s.has_correct:
                entry["accuracy"] = s.correct / s.samples
        if self.validator is not None:
            t = time.monotonic()
            with get_tracer().span("validate", "validate"):
                self.backend.set_weights(self.center)
                entry.update(self.validator(self.backend))
            self.deadline.note_validation(time.monotonic() - t)
        entry.update(samples=s.samples, seconds=round(seconds, 4),
                     samples_per_s=round(s.samples / seconds, 1) if seconds > 0 else None,
                     updates=self.updates)
        if self.ctx.session is not None:
            entry.update(self.ctx.session.epoch_end(self.epoch))
        if not all(math.isfinite(v) for k, v in entry.items() if k in ("loss", "val_loss") and v is not None):
            raise TrainingError(
                f"the loss is not finite after epoch {self.epoch + 1} ({entry.get('loss')}, val "
                f"{entry.get('val_loss')}); lower the learning rate or check the data"
            )
        return entry

    def _want_checkpoint(self, reason: str | None) -> bool:
        if self.writer is None:
            return False
        if reason in ("deadline", "signal"):
            return True
        if not self.cfg.checkpoint:
            return False
        interval = self.cfg.checkpoint_interval
        return reason is not None or (interval > 0 and self.epoch % interval == 0)

    def _stop_checkpoint_dir(self) -> Any:
        if self._pending_tmp is None and self.writer is not None:
            self._pending_tmp = self.writer.begin(self.epoch, self.updates)
        return self._pending_tmp

    def _finish_stop_checkpoint(self) -> None:
        if self._pending_tmp is not None:
            tmp, self._pending_tmp = self._pending_tmp, None
            self._complete_checkpoint(tmp, self._to_ack)
            self._write_history()

    def _complete_checkpoint(self, tmp: Any, ranks: list[int]) -> None:
        assert self.writer is not None
        with get_tracer().span("checkpoint", "io"):
            errors = [(r, self.link.recv_ack(r)) for r in ranks]
            bad = [(r, e) for r, e in errors if e]
            self._dead.update(r for r, _ in bad)  # they raised after acknowledging; they send no more
            if bad and self.failure is None:
                info = self.ctx.hierarchy[bad[0][0]]
                self.failure = RankFailure(f"cannot write checkpoint part into {tmp}: {bad[0][1]}",
                                           bad[0][0], info.label(), report=False)
            try:
                if bad:
                    raise self.failure  # type: ignore[misc]
                ckpt.write_part(tmp, ckpt.part_name("master"), self.state_dict())
                native = write_checkpoint_model(self.backend, tmp, self.center)  # Keras: model.keras; torch: None
                self.writer.commit(tmp, {
                    "epoch": self.epoch, "updates": self.updates, "mode": self.cfg.effective_mode,
                    "n_workers": len(self.ctx.group.workers), "config": self.cfg.to_dict(),
                    "stopped_reason": self.stop_reason, **({"model": native} if native else {}),
                })
                if self.writer.last_duration is not None:
                    self.deadline.note_checkpoint(self.writer.last_duration)
            except Exception as e:  # noqa: BLE001
                self.writer.abandon(tmp)
                self._fail_here(e)

    # -- results -----------------------------------------------------------------------------------
    def _result(self) -> TrainResult:
        out = self.ctx.out_dir
        result = TrainResult.of(self.history, self.epoch, self.stop_reason or "completed", self.writer,
                                out_dir=str(out) if out else None, updates=self.updates,
                                seconds=round(time.monotonic() - self._t_start, 3))
        if out is not None:
            self.backend.set_weights(self.center)
            result.model_path = save_final_model(self.backend, out)  # model.pt or model.keras
            result.history_path = str(self._write_history(result))
        return result

    def _write_history(self, result: TrainResult | None = None) -> Any:
        if self.ctx.out_dir is None:
            return None
        if result is None:
            result = TrainResult.of(self.history, self.epoch, self.stop_reason or "running", self.writer)
        return write_history(self.ctx.out_dir, result, {
            "mode": self.cfg.effective_mode, "n_workers": len(self.workers), "config": self.cfg.to_dict(),
        })


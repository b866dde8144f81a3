"""The master (parameter server) at the top of a training: serves its workers, validates, decides, checkpoints.

The exchange loop, the epoch barrier and the failure protocol are :class:`~nnlo.training.serve.WorkerServer`'s;
this module is what the top of the tree adds to it. At each barrier it sets its model's buffers to the mean of
the workers' (:mod:`nnlo.training.buffers`), validates (:mod:`nnlo.training.validation`), logs a progress line,
updates the history and the early-stopping state, decides whether to stop, opens a checkpoint if one is due
(:mod:`nnlo.training.checkpoint_round`; every worker writes its part into the same folder), and releases
everyone. Mid-epoch it judges the deadline and the stop signals. It alone writes ``history.json`` and the
final model.

Its own checkpoint part (``master.pkl``) holds the center, its optimizer, the counters, the history, the
early-stopping state, the current epoch's sums, the buffers and the random states: a restore continues the
same curve.
"""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from nnlo.backends.base import Backend
from nnlo.backends.native_model import save_final_model
from nnlo.errors import TrainingError
from nnlo.observe.progress import for_terminal
from nnlo.observe.trace import get_tracer
from nnlo.training import streams
from nnlo.training.checkpoint_round import CheckpointRound
from nnlo.training.context import RunContext
from nnlo.training.failure import RankFailure
from nnlo.training.history import EpochStats, TrainResult, epoch_line, periodic_entry, write_history
from nnlo.training.modes import make_server_rule
from nnlo.training.serve import RuleFactory, WorkerServer
from nnlo.training.stopping import Stopper
from nnlo.training.validation import Validator, metrics_of

log = logging.getLogger("nnlo.train")

#: history-entry fields shown on the live progress line
_LIVE_FIELDS = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy", "samples_per_s", "gpu_util_mean")


class Master(WorkerServer):
    """Serves one group of workers. :meth:`run` returns the :class:`TrainResult` (or raises RankFailure)."""

    def __init__(self, ctx: RunContext, backend: Backend, validator: Validator | None,
                 restored: dict[str, Any] | None = None, rule: RuleFactory = make_server_rule) -> None:
        super().__init__(ctx, backend, rule)
        self.validator = validator
        self.history: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []  # --validate-every N: one entry every N updates
        self.stopper = Stopper.from_config(self.cfg.early_stopping, self.cfg.target_metric)
        self.stats = EpochStats()
        self.checkpoints = CheckpointRound(ctx.checkpoint_dir, self.cfg)
        self.progress: Any = None  # nnlo.observe.progress.Progress on a terminal (see _live_progress)
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
            "validations": self.validations,
            "stopper": self.stopper.state_dict(),
            "epoch_stats": stats,
            **self.buffers.state_dict(),
            "rng": streams.capture(self.backend),
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
        self.validations = list(state.get("validations", []))
        self.stopper.load_state_dict(state.get("stopper", {}))
        self.stats = EpochStats(**state.get("epoch_stats", {}))
        self.buffers.load_state_dict(state)
        streams.restore(state.get("rng"), self.backend)

    # -- main loop ---------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        if self._begin():
            self.progress = self._live_progress()
            try:
                if self.serve():  # stopped mid-epoch: the history names the checkpoint just written
                    self._write_history()
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
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        world = MPI.COMM_WORLD
        if world.Get_rank() != 0 or self.ctx.comm.Get_size() != world.Get_size():
            return None  # not rank 0, or one training group of an optimization (the coordinator shows progress)

        progress = for_terminal("train", total=self.cfg.epochs)
        if progress is not None and self.epoch:
            progress.update(epoch=self.epoch)  # a restored run starts from its checkpoint's epoch
        return progress

    # -- what the top adds to serving ----------------------------------------------------------------
    def _accounted(self, header: dict[str, Any], counted: bool) -> None:
        self.stats.add(header)

    def _updated(self) -> None:
        every = self.cfg.validate_every
        if every and self.validator is not None and self.updates % every == 0:
            try:
                entry = periodic_entry(self.epoch, self.updates, self._validate())
            except Exception as e:
                if not self._waiting:
                    raise
                self._fail_here(e)  # the workers validating with us learn it from their reply (abort)
                return
            self.validations.append(entry)
            self.ctx.tracker.validation(entry)
            log.debug("validation at update %d: %s", self.updates, entry)

    def _validate(self) -> dict[str, float]:
        """The central weights' validation figures, the samples shared with the workers waiting for a reply
        (every worker at the epoch barrier; in synchronous rounds also at ``--validate-every``)."""
        assert self.validator is not None
        with get_tracer().span("validate", "validate"):
            sums = self._spread_validation(self.validator, self.center, self.buffers.values, 0, len(self.validator))
        return metrics_of(sums)

    def _stop_wanted(self) -> str | None:
        if self.ctx.stop.raised:
            return "signal"
        if self.deadline.reached():
            log.warning("deadline close (%s): writing a checkpoint and stopping", self.deadline.describe())
            return "deadline"
        return None

    def _stop_checkpoint_dir(self) -> Path | None:
        if self._stop_tmp is None and self.checkpoints.enabled:
            self._stop_tmp = self.checkpoints.open(self.epoch, self.updates)
        return self._stop_tmp

    def _decide_epoch(self) -> tuple[str, Path | None]:
        """Validate, record, decide whether to stop, and open a checkpoint if one is due."""
        self.buffers.adopt_mean()
        entry = self._epoch_entry()
        self.history.append(entry)
        self.ctx.tracker.epoch(entry)
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
        tmp = self.checkpoints.open(self.epoch, self.updates) if self.checkpoints.due(self.epoch, reason) else None
        self._write_history()
        return ("stop" if reason else "continue"), tmp

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
            entry.update(self._validate())
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

    def _complete_checkpoint(self, tmp: Path, ranks: list[int]) -> None:
        with get_tracer().span("checkpoint", "io"):
            bad = self._collect_acks(ranks)
            if bad:
                if self.failure is None:
                    rank, error = bad[0]
                    self.failure = RankFailure(f"cannot write checkpoint part into {tmp}: {error}", rank,
                                               self.ctx.hierarchy[rank].label(), report=False)
                self.checkpoints.abandon(tmp)
                return
            try:
                seconds = self.checkpoints.publish(tmp, self.state_dict, self.backend, self.center, {
                    "epoch": self.epoch, "updates": self.updates, "mode": self.cfg.effective_mode,
                    "n_workers": self.run_workers, "config": self.cfg.to_dict(),
                    "stopped_reason": self.stop_reason,
                })
            except Exception as e:  # noqa: BLE001 - the round failed: every worker learns it
                self._fail_here(e)
                return
            if seconds is not None:
                self.deadline.note_checkpoint(seconds)

    # -- results -----------------------------------------------------------------------------------
    def _result(self) -> TrainResult:
        out = self.ctx.out_dir
        result = TrainResult.of(self.history, self.epoch, self.stop_reason or "completed", self.checkpoints.writer,
                                out_dir=str(out) if out else None, updates=self.updates,
                                seconds=round(time.monotonic() - self._t_start, 3))
        if out is not None:
            self.backend.set_weights(self.center)
            result.model_path = save_final_model(self.backend, out)  # model.pt or model.keras
            result.history_path = str(self._write_history(result))
        return result

    def _write_history(self, result: TrainResult | None = None) -> Path | None:
        if self.ctx.out_dir is None:
            return None
        if result is None:
            result = TrainResult.of(self.history, self.epoch, self.stop_reason or "running", self.checkpoints.writer)
        return write_history(self.ctx.out_dir, result, {
            "mode": self.cfg.effective_mode, "n_workers": self.run_workers, "config": self.cfg.to_dict(),
            "validations": self.validations,
        })

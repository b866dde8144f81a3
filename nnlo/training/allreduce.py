"""Pure all-reduce data parallelism (``--mode allreduce``, i.e. ``--n-masters 0``): no parameter server.

Every rank holds a full replica. Rank 0's initial weights are broadcast, then each step every rank computes
the gradient of its slice of one global batch (``--batch`` samples per rank, ``N x --batch`` per step,
:func:`nnlo.data.split_batch`), the slices' gradients are summed *weighted by their sample counts* and
divided by the total, and every replica applies the same averaged gradient with its own copy of the
worker optimizer. The replicas therefore stay bit-identical, and N ranks follow the same trajectory as one
process with an N-times larger batch (the test of this mode). ``--scale-lr`` multiplies the worker
optimizer's learning rate by N (the Goyal et al. linear scaling rule Horovod recommends).

One collective per step: the flat gradient plus four scalars (sample count, loss sum, correct count, a
stop/fail vote) travel in one contiguous float32 buffer through the chosen engine
(:mod:`nnlo.allreduce`). Because the vote rides in the same buffer, a signal or deadline seen by any rank,
or a rank whose step failed, stops every rank at the same step: nobody waits for a peer that left.

Only rank 0 writes: ``history.json``, ``model.pt`` and the checkpoints (one ``replica.pkl`` part: the
replicas are identical, so one copy is the whole state - except their random streams, each rank's own: the
part keeps every rank's, gathered at the checkpoint, :mod:`nnlo.training.streams`). Restore reads that part on
every rank.
"""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from nnlo import checkpoint as ckpt
from nnlo.algorithms.specs import format_spec, parse_optimizer_spec
from nnlo.allreduce import Engine, make_engine, resolve_engine
from nnlo.allreduce.bucketed import BucketedReducer, describe_buckets, make_reducer
from nnlo.backends.base import Backend
from nnlo.backends.native_model import save_final_model, write_checkpoint_model
from nnlo.config import TrainConfig
from nnlo.contract import ENV_TEST_SIGNAL_AT_UPDATE
from nnlo.data.sampling import shard
from nnlo.errors import TrainingError
from nnlo.observe.trace import get_tracer
from nnlo.stop import InjectedSignal
from nnlo.training import streams
from nnlo.training.context import RunContext
from nnlo.training.deadline import Deadline
from nnlo.training.failure import RankFailure
from nnlo.training.history import TrainResult, epoch_line, periodic_entry, write_history
from nnlo.training.stopping import Stopper
from nnlo.training.voted_step import EXTRA, allreduce_step

log = logging.getLogger("nnlo.train")

PART = ckpt.part_name("replica")
# positions of the scalars after the gradient in the step buffer


def scaled_config(config: TrainConfig, n_ranks: int) -> TrainConfig:
    """``config`` with the worker optimizer's learning rate times ``n_ranks`` when ``--scale-lr`` asks."""
    if not config.scale_lr or n_ranks == 1:
        return config

    name, params = parse_optimizer_spec(config.worker_optimizer_spec)
    if "lr" not in params:
        raise TrainingError(f"--scale-lr: the worker optimizer {name} has no lr to scale; drop --scale-lr")
    params = dict(params, lr=params["lr"] * n_ranks)
    return config.replace(worker_optimizer=format_spec((name, params)))


class AllreduceReplica:
    """One rank of a pure all-reduce training. :meth:`run` returns the TrainResult (rank 0's is the one)."""

    def __init__(self, ctx: RunContext, backend: Backend, loader: Any, validator: Any,
                 engine_name: str, checkpoint: str | None, device: str = "cpu") -> None:
        self.ctx, self.backend, self.loader, self.validator = ctx, backend, loader, validator
        self.cfg = ctx.config
        self.comm = ctx.comm
        self.rank, self.size = ctx.comm.Get_rank(), ctx.comm.Get_size()
        self.engine_name, self.device = engine_name, device
        self.engine: Engine | None = None
        self.reducer: BucketedReducer | None = None
        n = self.n = backend.n_params
        self.buf: Any = None  # the step buffer, where the engine sums (start())
        self.epoch, self.batch, self.updates = 0, 0, 0
        self.history: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []  # --validate-every N: one entry every N steps (rank 0's)
        self.stopper = Stopper.from_config(self.cfg.early_stopping, self.cfg.target_metric)
        self.stats = {"samples": 0.0, "loss_sum": 0.0, "correct": 0.0, "has_correct": False, "seconds": 0.0}
        self.stop_reason: str | None = None
        self.writer = None
        if self.rank == 0 and ctx.checkpoint_dir is not None:
            self.writer = ckpt.CheckpointWriter(ctx.checkpoint_dir, self.cfg.checkpoint_keep)
        self.deadline = Deadline(self.cfg.deadline, 4 * n)
        # test hook: rank 0 signals itself after the N-th update (the vote stops every rank at the next step)
        self.injected = InjectedSignal(ENV_TEST_SIGNAL_AT_UPDATE)
        self._t_start = self._t_epoch = time.monotonic()
        self._restored = False
        if checkpoint:
            self._load(checkpoint)

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self, rng: list[streams.Streams] | None = None) -> dict[str, Any]:
        """The part rank 0 writes; ``rng``: every rank's random streams (:func:`streams.gather`)."""
        return {
            "weights": self.backend.get_weights(),
            "optimizer": self.backend.optimizer_state(),
            **({"buffers": self.backend.get_buffers()} if self.backend.n_buffers else {}),
            "position": {"epoch": self.epoch, "batch": self.batch},
            "updates": self.updates,
            "history": self.history,
            "validations": self.validations,
            "stopper": self.stopper.state_dict(),
            "epoch_stats": dict(self.stats, seconds=self.stats["seconds"] + time.monotonic() - self._t_epoch),
            **({"rng": rng} if rng is not None else {}),
        }

    def _load(self, checkpoint: str) -> None:
        path = Path(checkpoint) / PART
        manifest = ckpt.read_manifest(checkpoint)
        if not path.is_file():
            raise TrainingError(
                f"{checkpoint} was written in mode {manifest.get('mode')}, not by an all-reduce run; restore it "
                f"with the shape that wrote it, or start fresh without --restore"
            )
        state = ckpt.read_part(checkpoint, PART)
        w = np.asarray(state["weights"], dtype=np.float32)
        if w.size != self.n:
            raise TrainingError(f"the checkpoint holds {w.size} weights but the model has {self.n}; restore "
                                f"with the same model or start fresh without --restore")
        self.backend.set_weights(w)
        self.backend.load_optimizer_state(state["optimizer"])
        if self.backend.n_buffers and "buffers" in state:
            self.backend.set_buffers(np.asarray(state["buffers"], dtype=np.float32))
        self.epoch, self.batch = int(state["position"]["epoch"]), int(state["position"]["batch"])
        self.updates = int(state["updates"])
        self.history = list(state.get("history", []))
        self.validations = list(state.get("validations", []))
        self.stopper.load_state_dict(state.get("stopper", {}))
        self.stats.update(state.get("epoch_stats", {}))
        streams.restore(state.get("rng"), self.backend, self.rank)
        self._restored = True

    # -- start -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Collective: build the engine, then give every replica rank 0's weights."""
        with self.ctx.watchdog.waiting(f"setting up the {self.engine_name} all-reduce engine"):
            self.engine = make_engine(self.engine_name, self.comm, self.device)
        self.buf = self.engine.zeros(self.n + EXTRA)
        self.reducer = make_reducer(self.engine, self.backend, self.buf, self.cfg.bucket_mb)
        w = self.backend.get_weights()
        self.engine.broadcast(w, root=0)
        self.backend.set_weights(w)
        if self.rank == 0:
            log.info("all-reduce training: %s, engine %s, %s, batch %d per rank (%d per step)%s",
                     self.ctx.hierarchy.rank_map(), self.engine.describe(), describe_buckets(self.reducer),
                     self.cfg.batch,
                     self.cfg.batch * self.size, ", restored" if self._restored else "")

    # -- main loop ---------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        try:
            if self.epoch >= self.cfg.epochs:
                self.stop_reason = "completed"
            self._t_epoch = time.monotonic()
            while self.stop_reason is None:
                plan = self.loader.batch_indices(self.epoch)
                while self.batch < len(plan) and self.stop_reason is None:
                    self._step(plan[self.batch])
                    self.batch += 1
                    if self.stop_reason is not None:  # signal/deadline mid-epoch: checkpoint where we are
                        self._checkpoint(force=True)
                if self.stop_reason is None:
                    self._end_epoch()
            return self._result()
        finally:
            if self.reducer is not None:
                self.reducer.close()
            if self.engine is not None:
                self.engine.close()

    def _step(self, idx: np.ndarray) -> None:
        sums = allreduce_step(self.ctx, self.engine, self.backend, self.loader, self.buf, idx,
                              stop_wanted=self._stop_wanted(), label="gradient", reducer=self.reducer)
        if sums.has_correct:
            self.stats["has_correct"] = True
        if sums.failed:
            self._fail_together(sums.error)
        if sums.total > 0:
            with get_tracer().span("apply gradients", "compute"):
                self.backend.apply_gradients(self.buf[:self.n])
            self.updates += 1
            if self.rank == 0:
                self.injected.tick()
            every = self.cfg.validate_every
            if every and self.validator is not None and self.updates % every == 0:  # same step on every rank
                self.validations.append(periodic_entry(self.epoch, self.updates, self._validate()))
                self.ctx.tracker.validation(self.validations[-1])  # rank 0's trackers; none elsewhere
            loss = sums.loss_sum / sums.total
            if not math.isfinite(loss):
                self._fail_together(None if self.rank else (
                    f"loss is {loss} at epoch {self.epoch + 1}, batch {self.batch + 1}; lower the learning rate "
                    f"(--worker-optimizer) or check the data for NaN/inf", 1))
            self.stats["samples"] += sums.total
            self.stats["loss_sum"] += sums.loss_sum
            self.stats["correct"] += sums.correct
        if sums.stop and self.stop_reason is None:
            self.stop_reason = "deadline" if self.deadline.reached() else "signal"
            if self.rank == 0:
                log.warning("stopping at epoch %d, batch %d (%s): writing a checkpoint", self.epoch + 1,
                            self.batch + 1, self.stop_reason)

    def _stop_wanted(self) -> bool:
        return self.ctx.stop.raised or self.deadline.reached()

    def _fail_together(self, error: tuple[str, int] | None) -> None:
        """Every rank knows a step failed; share who failed and why (small, pickled) and raise everywhere."""
        errors = self.comm.allgather(error)
        for r, err in enumerate(errors):
            if err is not None:
                label = self.ctx.hierarchy[r].label()
                raise RankFailure(err[0], r, label, exit_code=err[1], report=r == self.rank)
        raise TrainingError("a rank voted failure without a message")  # pragma: no cover

    # -- epochs ------------------------------------------------------------------------------------
    def _end_epoch(self) -> None:
        entry = self._epoch_entry()
        reason = None
        if self.rank == 0:
            self.history.append(entry)
            self.ctx.tracker.epoch(entry)
            reason = self.stopper.update(entry)
            if reason is None and self.epoch + 1 >= self.cfg.epochs:
                reason = "completed"
            if reason is None and self._stop_wanted():
                reason = "deadline" if self.deadline.reached() else "signal"
            log.info(epoch_line(entry, self.cfg.epochs))
        with self.ctx.watchdog.waiting("waiting for rank 0's end-of-epoch decision"):
            reason, self.history = self.comm.bcast((reason, self.history), root=0)
        self.epoch, self.batch = self.epoch + 1, 0
        self.stats = {"samples": 0.0, "loss_sum": 0.0, "correct": 0.0, "has_correct": False, "seconds": 0.0}
        self._t_epoch = time.monotonic()
        self.stop_reason = reason
        self._checkpoint(force=reason in ("deadline", "signal"))
        if self.rank == 0:
            self._write_history()

    def _epoch_entry(self) -> dict[str, Any]:
        s = self.stats
        seconds = s["seconds"] + time.monotonic() - self._t_epoch
        entry: dict[str, Any] = {"epoch": self.epoch + 1}
        if s["samples"]:
            entry["loss"] = s["loss_sum"] / s["samples"]
            if s["has_correct"]:
                entry["accuracy"] = s["correct"] / s["samples"]
        self._average_buffers()
        t = time.monotonic()
        entry.update(self._validate())
        self.deadline.note_validation(time.monotonic() - t)
        entry.update(samples=round(s["samples"]), seconds=round(seconds, 4),
                     samples_per_s=round(s["samples"] / seconds, 1) if seconds > 0 else None,
                     updates=self.updates)
        if self.rank == 0 and self.ctx.session is not None:
            entry.update(self.ctx.session.epoch_end(self.epoch))
        return entry

    def _average_buffers(self) -> None:
        """Every replica kept its own BatchNorm-like buffers this epoch: all take their mean (collective)."""
        if not self.backend.n_buffers:
            return
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        values = self.backend.get_buffers().astype(np.float64)
        with self.ctx.watchdog.waiting("averaging the model's buffers at the epoch end"):
            self.comm.Allreduce(MPI.IN_PLACE, [values, MPI.DOUBLE], op=MPI.SUM)
        self.backend.set_buffers((values / self.size).astype(np.float32))

    def _validate(self) -> dict[str, float]:
        """Each rank evaluates its share of the validation samples; the sums are added up (float64)."""
        if self.validator is None:
            return {}
        sums = np.zeros(4, dtype=np.float64)  # loss_sum, count, correct, has_correct
        mine = shard(self.validator.indices, self.size, self.rank)
        with get_tracer().span("validate", "validate"):
            for start in range(0, len(mine), self.validator.batch):
                x, y = self.validator.dataset.read(mine[start:start + self.validator.batch])
                out = self.backend.evaluate_batch(x, y)
                sums[0] += out.get("loss_sum", 0.0)
                sums[1] += out.get("count", 0.0)
                if "correct" in out:
                    sums[2] += out["correct"]
                    sums[3] = 1.0
        from mpi4py import MPI  # lazy: importing mpi4py.MPI initialises MPI

        self.comm.Allreduce(MPI.IN_PLACE, [sums, MPI.DOUBLE], op=MPI.SUM)
        if not sums[1]:
            return {}
        result = {"val_loss": float(sums[0] / sums[1])}
        if sums[3]:
            result["val_accuracy"] = float(sums[2] / sums[1])
        return result

    # -- checkpoints and results (rank 0 only writes) ------------------------------------------------
    def _checkpoint(self, force: bool) -> None:
        """Collective (every rank decides alike): rank 0 writes the checkpoint, with every rank's streams."""
        if self.ctx.checkpoint_dir is None:
            return
        due = force or (self.cfg.checkpoint and (
            self.stop_reason is not None
            or (self.cfg.checkpoint_interval > 0 and self.epoch % self.cfg.checkpoint_interval == 0)))
        if not due:
            return
        rng = streams.gather(self.comm, self.backend, self.ctx.watchdog)
        if self.rank != 0 or self.writer is None:
            return
        with get_tracer().span("checkpoint", "io"):
            tmp = self.writer.begin(self.epoch, self.updates)
            try:
                ckpt.write_part(tmp, PART, self.state_dict(rng))
                native = write_checkpoint_model(self.backend, tmp)  # Keras: model.keras; torch: None
                self.writer.commit(tmp, {
                    "epoch": self.epoch, "updates": self.updates, "mode": self.cfg.effective_mode,
                    "n_workers": self.size, "config": self.cfg.to_dict(), "stopped_reason": self.stop_reason,
                    "position": {"epoch": self.epoch, "batch": self.batch}, **({"model": native} if native else {}),
                })
            except BaseException:
                self.writer.abandon(tmp)
                raise
        if self.writer.last_duration is not None:
            self.deadline.note_checkpoint(self.writer.last_duration)

    def _result(self) -> TrainResult:
        out = self.ctx.out_dir
        result = TrainResult.of(self.history, self.epoch, self.stop_reason or "completed", self.writer,
                                out_dir=str(out) if out else None, updates=self.updates,
                                seconds=round(time.monotonic() - self._t_start, 3))
        if out is not None and self.rank == 0:
            result.model_path = save_final_model(self.backend, out)  # model.pt or model.keras
            result.history_path = str(self._write_history(result))
        return result

    def _write_history(self, result: TrainResult | None = None) -> Any:
        if self.ctx.out_dir is None:
            return None
        if result is None:
            result = TrainResult.of(self.history, self.epoch, self.stop_reason or "running", self.writer)
        return write_history(self.ctx.out_dir, result, {
            "mode": self.cfg.effective_mode, "n_workers": self.size, "engine": self.engine_name,
            "config": self.cfg.to_dict(), "validations": self.validations,
        })


def choose_engine(ctx: RunContext, device: str, framework: str) -> str:
    """This rank's engine for the run (pure; the replicas, or a group's members, agree on their leader's)."""
    return resolve_engine(ctx.config.allreduce_engine, on_gpu=str(device).startswith("cuda"), framework=framework)
